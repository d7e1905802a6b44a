//! The send side of a UDP connection: packet numbers (with the skipped
//! numbers that catch optimistic ACKs), the stream bytes written and not
//! yet acknowledged (a ring) with the ranges to send again, the packets in
//! flight and their loss detection, delivery-rate sampling, the congestion
//! controller and the pacer. The connection core decides when to send;
//! this part knows what, and what an ACK or a loss changes.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use pfs_wire::datagram::AckRanges;

use super::cc::{Controller, RateSample};
use super::conn::UdpStats;
use super::ranges::RangeSet;
use super::rtt::RttEstimator;

/// Packets an ACK may skip before the oldest is lost (RFC 9002's threshold).
const PACKET_THRESHOLD: u64 = 3;
/// How long the pacer may fall behind: the burst it may send at once.
const PACING_BURST: Duration = Duration::from_millis(1);
/// The sender skips one packet number in every `SKIP_MIN..SKIP_MAX`
/// (uniformly, from a secret seed): rare enough to cost nothing (one
/// immediate ACK and one more ACK range per few hundred packets), often
/// enough that an acknowledger claiming the gaps it sees arrived meets one
/// within a few hundred packets (`docs/wire.md` §14.4).
const SKIP_MIN: u64 = 64;
const SKIP_MAX: u64 = 1024;
/// Skipped numbers remembered, newest; an optimistic ACK covers the newest.
const MAX_SKIPPED: usize = 64;

/// A DATA packet in flight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub(super) number: u64,
    offset: u64,
    len: u16,
    fin: bool,
    size: u32,
    time: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    app_limited: bool,
    acked: bool,
    lost: bool,
}

/// Packet numbers: every datagram gets a new one, and now and then one is
/// skipped, so an ACK of a number never sent shows an optimistic
/// acknowledger (QUIC §21.4).
#[derive(Debug)]
pub(super) struct PacketNumbers {
    /// The number the next datagram carries.
    next: u64,
    /// The secret that picks the gaps (HMAC of a counter: the peer cannot
    /// predict a gap from the ones it saw).
    skip_key: ring::hmac::Key,
    /// Gaps picked so far.
    skips: u64,
    /// The next number to skip.
    skip_at: u64,
    /// The newest numbers skipped, ascending.
    skipped: VecDeque<u64>,
}

impl PacketNumbers {
    /// Numbers from 0, gaps from a secret from the OS: the peer must not
    /// predict which numbers are skipped. (Without one the per-process
    /// keys of std's hasher, also from the OS, stand in.)
    fn new(local_id: u32) -> Self {
        let mut secret = [0u8; 32];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret).is_err() {
            let h = std::collections::hash_map::RandomState::new();
            secret[..8].copy_from_slice(&std::hash::BuildHasher::hash_one(&h, local_id).to_le_bytes());
        }
        let mut n = Self {
            next: 0,
            skip_key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
            skips: 0,
            skip_at: 0,
            skipped: VecDeque::new(),
        };
        n.skip_at = n.skip_gap();
        n
    }

    /// Makes the gaps follow `seed` from the next number on.
    pub(super) fn reseed(&mut self, seed: u64) {
        self.skip_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &seed.to_le_bytes());
        self.skips = 0;
        self.skip_at = self.next + self.skip_gap();
    }

    /// The distance to the next skipped number: HMAC of the skip count
    /// under the secret (once per few hundred packets: cheap).
    fn skip_gap(&mut self) -> u64 {
        self.skips += 1;
        let mac = ring::hmac::sign(&self.skip_key, &self.skips.to_le_bytes());
        let mut word = [0u8; 8];
        word.copy_from_slice(&mac.as_ref()[..8]);
        SKIP_MIN + u64::from_le_bytes(word) % (SKIP_MAX - SKIP_MIN)
    }

    /// The number the next datagram carries.
    pub(super) fn next(&self) -> u64 {
        self.next
    }

    /// Skips the next number if its turn came: it is never sent, and an
    /// ACK of it is an optimistic one.
    pub(super) fn skip_if_due(&mut self) {
        if self.next >= self.skip_at {
            if self.skipped.len() == MAX_SKIPPED {
                self.skipped.pop_front();
            }
            self.skipped.push_back(self.next);
            self.next += 1;
            self.skip_at = self.next + self.skip_gap();
        }
    }

    /// The next number was used.
    pub(super) fn advance(&mut self) {
        self.next += 1;
    }

    /// A number the ACK `largest`, `ranges` claims that was never sent:
    /// above the largest sent, or a skipped one.
    pub(super) fn never_sent(&self, largest: u64, ranges: AckRanges<'_>) -> Option<u64> {
        if largest >= self.next {
            return Some(largest);
        }
        if self.skipped.is_empty() {
            return None;
        }
        for r in ranges {
            let i = self.skipped.partition_point(|&n| n < r.smallest);
            if let Some(&n) = self.skipped.get(i) {
                if n <= r.largest {
                    return Some(n);
                }
            }
        }
        None
    }
}

/// The stream bytes this side wrote: `buf` holds offsets `floor..end` (a
/// ring); `next_new` is the first never sent.
#[derive(Debug)]
pub(super) struct SendStream {
    buf: Vec<u8>,
    /// Every byte below was acknowledged (the ring's start).
    pub(super) floor: u64,
    /// End of what the application wrote.
    pub(super) end: u64,
    /// First byte never sent.
    pub(super) next_new: u64,
    /// Where the stream ends, once the application finished it.
    pub(super) fin_at: Option<u64>,
    /// The end must be sent (again).
    pub(super) fin_pending: bool,
    /// The peer acknowledged the end.
    fin_acked: bool,
    /// Acknowledged ranges above `floor`.
    acked: RangeSet,
    /// Ranges declared lost, to send again.
    pub(super) resend: RangeSet,
}

impl SendStream {
    fn new(capacity: usize) -> Self {
        Self {
            buf: vec![0; capacity],
            floor: 0,
            end: 0,
            next_new: 0,
            fin_at: None,
            fin_pending: false,
            fin_acked: false,
            acked: RangeSet::new(),
            resend: RangeSet::new(),
        }
    }

    /// Room in the ring.
    pub(super) fn room(&self) -> usize {
        self.buf.len() - (self.end - self.floor) as usize
    }

    /// Copies as much of `data` as the ring takes; returns how much.
    pub(super) fn write(&mut self, data: &[u8], n: usize) -> usize {
        let cap = self.buf.len();
        let at = (self.end % cap as u64) as usize;
        let first = n.min(cap - at);
        self.buf[at..at + first].copy_from_slice(&data[..first]);
        self.buf[..n - first].copy_from_slice(&data[first..n]);
        self.end += n as u64;
        n
    }

    /// Ends the stream after what was written.
    pub(super) fn finish(&mut self) {
        if self.fin_at.is_none() {
            self.fin_at = Some(self.end);
            self.fin_pending = true;
        }
    }

    /// Whether the stream was finished and all of it, the end included,
    /// acknowledged.
    pub(super) fn done(&self) -> bool {
        self.fin_acked && Some(self.floor) == self.fin_at
    }

    /// Copies stream bytes `range` into `out`.
    fn copy(&self, range: Range<u64>, out: &mut [u8]) {
        let len = (range.end - range.start) as usize;
        let cap = self.buf.len();
        let from = (range.start % cap as u64) as usize;
        let first = len.min(cap - from);
        out[..first].copy_from_slice(&self.buf[from..from + first]);
        out[first..len].copy_from_slice(&self.buf[..len - first]);
    }

    /// Releases the acknowledged prefix of the ring.
    fn release_acked(&mut self) {
        while let Some(r) = self.acked.first() {
            if r.start > self.floor {
                break;
            }
            self.floor = self.floor.max(r.end);
            self.acked.remove(r);
        }
        self.resend.remove(0..self.floor);
    }
}

/// BBR's delivery-rate sampling state: bytes delivered, when, and since
/// when the application held the sender back.
#[derive(Debug, Clone, Copy)]
struct Delivery {
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    app_limited_until: u64,
}

/// The send side of one connection.
#[derive(Debug)]
pub(super) struct SendSide {
    pub(super) numbers: PacketNumbers,
    pub(super) stream: SendStream,
    /// DATA packets sent and not yet settled (acknowledged or lost), by number.
    sent: VecDeque<Sent>,
    /// Bytes of the packets in flight (neither acknowledged nor lost).
    pub(super) in_flight: u64,
    /// The highest stream offset the peer accepts.
    pub(super) peer_window: u64,
    /// The largest packet number the peer acknowledged.
    largest_acked: Option<u64>,
    /// Probe timeouts in a row (the backoff's exponent).
    pub(super) pto_count: u32,
    /// When the last DATA packet went out: the probe timer runs from it.
    last_eliciting_sent: Option<Instant>,
    /// Packets a probe timeout lets pass the window.
    probes: u32,
    /// When an ACK last acknowledged something new, or nothing was in flight.
    pub(super) last_progress: Instant,
    delivery: Delivery,
    pub(super) cc: Controller,
    /// When the pacer lets the next DATA packet go.
    pub(super) next_send_time: Instant,
}

impl SendSide {
    pub(super) fn new(
        now: Instant,
        local_id: u32,
        send_buffer: usize,
        mss: u64,
        initial_window: u64,
    ) -> Self {
        Self {
            numbers: PacketNumbers::new(local_id),
            stream: SendStream::new(send_buffer),
            sent: VecDeque::new(),
            in_flight: 0,
            peer_window: 0,
            largest_acked: None,
            pto_count: 0,
            last_eliciting_sent: None,
            probes: 0,
            last_progress: now,
            delivery: Delivery {
                delivered: 0,
                delivered_time: now,
                first_sent_time: now,
                app_limited_until: 0,
            },
            cc: Controller::new(mss, initial_window),
            next_send_time: now,
        }
    }

    /// The opening exchange agreed on the datagram size `mss` and the
    /// peer's first window: the controller starts over for that size.
    pub(super) fn on_open(&mut self, now: Instant, mss: u64, initial_window: u64, peer_window: u64) {
        self.cc = Controller::new(mss, initial_window);
        self.peer_window = peer_window;
        self.delivery.delivered_time = now;
        self.delivery.first_sent_time = now;
    }

    /// Whether bytes are in flight or wait to be sent again (the stall
    /// timer runs).
    pub(super) fn busy(&self) -> bool {
        self.in_flight > 0 || !self.stream.resend.is_empty()
    }

    /// Whether stream bytes (or the end) wait to be sent and the peer's
    /// window lets them.
    pub(super) fn has_data(&self) -> bool {
        let s = &self.stream;
        !s.resend.is_empty()
            || (s.next_new < s.end && s.next_new < self.peer_window)
            || (s.fin_pending && s.next_new == s.end)
    }

    /// Whether the window (or a probe) lets a datagram of `size` go.
    pub(super) fn window_allows(&self, size: usize) -> bool {
        self.probes > 0 || self.in_flight + size as u64 <= self.cc.window()
    }

    /// The probe timeout's deadline, while bytes are in flight: from the
    /// last DATA packet, doubled per probe timeout in a row (up to 64×).
    pub(super) fn pto_deadline(&self, rtt: &RttEstimator, max_ack_delay: Duration) -> Option<Instant> {
        if self.in_flight == 0 {
            return None;
        }
        Some(self.last_eliciting_sent? + rtt.pto_base(max_ack_delay) * (1u32 << self.pto_count.min(6)))
    }

    /// Nothing to send and room in the window: the application (or the
    /// peer's window) holds the sender back, so rate samples from now on
    /// may understate the path.
    pub(super) fn note_app_limited(&mut self) {
        if !self.has_data() && self.in_flight < self.cc.window() {
            self.delivery.app_limited_until = (self.delivery.delivered + self.in_flight).max(1);
        }
    }

    /// The stream bytes the next DATA packet carries (at most `room`): the
    /// oldest lost range first, then new bytes the peer's window allows;
    /// whether they are a resend, and whether the end rides along. `None`
    /// when there is nothing to send.
    pub(super) fn next_chunk(&mut self, room: u64) -> Option<(Range<u64>, bool, bool)> {
        let s = &mut self.stream;
        let mut resent = false;
        let range = loop {
            match s.resend.pop_first(room) {
                Some(r) if r.end <= s.floor || s.acked.contains(r.clone()) => continue,
                Some(r) => {
                    resent = true;
                    break r;
                }
                None => {
                    let end = s.end.min(self.peer_window).min(s.next_new + room);
                    break s.next_new..end.max(s.next_new);
                }
            }
        };
        let fin = s.fin_pending && s.fin_at == Some(range.end);
        if range.is_empty() && !fin {
            return None;
        }
        if !resent {
            s.next_new = range.end;
        }
        if fin {
            s.fin_pending = false;
        }
        Some((range, resent, fin))
    }

    /// Copies the stream bytes `range` into `out`.
    pub(super) fn copy(&self, range: Range<u64>, out: &mut [u8]) {
        self.stream.copy(range, out);
    }

    /// Records the DATA packet `number` of `size` bytes carrying `range`
    /// (and the end if `fin`), sent at `now`, and paces the next one: it is
    /// due `size / rate` after this one, and the pacer never falls more
    /// than a burst behind the clock.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_sent(
        &mut self,
        now: Instant,
        number: u64,
        range: Range<u64>,
        fin: bool,
        size: u32,
        resent: bool,
        stats: &mut UdpStats,
    ) {
        let len = range.end - range.start;
        if self.in_flight == 0 {
            self.delivery.first_sent_time = now;
            self.delivery.delivered_time = now;
        }
        self.sent.push_back(Sent {
            number,
            offset: range.start,
            len: len as u16,
            fin,
            size,
            time: now,
            delivered: self.delivery.delivered,
            delivered_time: self.delivery.delivered_time,
            first_sent_time: self.delivery.first_sent_time,
            app_limited: self.delivery.app_limited_until != 0,
            acked: false,
            lost: false,
        });
        self.in_flight += u64::from(size);
        self.last_eliciting_sent = Some(now);
        self.probes = self.probes.saturating_sub(1);
        stats.stream_bytes_sent += len;
        if resent {
            stats.stream_bytes_resent += len;
        }
        let rate = self.cc.pacing_rate().max(1);
        let gap = Duration::from_nanos((u64::from(size) * 1_000_000_000) / rate);
        let base = self
            .next_send_time
            .max(now.checked_sub(PACING_BURST).unwrap_or(now));
        self.next_send_time = base + gap;
    }

    /// Marks the packets `ranges` acknowledges and releases the stream
    /// bytes they carried; returns the newest packet newly acknowledged and
    /// the bytes of all those packets.
    pub(super) fn on_acked(&mut self, ranges: AckRanges<'_>, stats: &mut UdpStats) -> (Option<Sent>, u64) {
        let mut newest: Option<Sent> = None;
        let mut acked_bytes = 0u64;
        for range in ranges {
            // Entries are sorted by number: find the first at or above `smallest`.
            let from = self.sent.partition_point(|s| s.number < range.smallest);
            for i in from..self.sent.len() {
                let s = self.sent[i];
                if s.number > range.largest {
                    break;
                }
                if s.acked {
                    continue;
                }
                self.sent[i].acked = true;
                if s.lost {
                    stats.packets_spurious += 1;
                } else {
                    self.in_flight -= u64::from(s.size);
                }
                let end = s.offset + u64::from(s.len);
                if s.len > 0 {
                    self.stream.acked.insert(s.offset..end);
                    self.stream.resend.remove(s.offset..end);
                }
                if s.fin {
                    self.stream.fin_acked = true;
                    self.stream.fin_pending = false;
                }
                self.delivery.delivered += u64::from(s.size);
                acked_bytes += u64::from(s.size);
                if newest.is_none_or(|n| s.number > n.number) {
                    newest = Some(s);
                }
            }
        }
        self.stream.release_acked();
        (newest, acked_bytes)
    }

    /// An ACK acknowledged `newest` (the newest packet it newly
    /// acknowledged; `largest` is the largest number it names) at `now`:
    /// progress, the end of the probe backoff, and a delivery-rate sample.
    pub(super) fn on_progress(&mut self, now: Instant, newest: &Sent, largest: u64) -> RateSample {
        self.last_progress = now;
        self.largest_acked = Some(self.largest_acked.map_or(largest, |l| l.max(largest)));
        self.pto_count = 0;
        let d = &mut self.delivery;
        if d.app_limited_until != 0 && d.delivered > d.app_limited_until {
            d.app_limited_until = 0;
        }
        let interval = newest
            .time
            .saturating_duration_since(newest.first_sent_time)
            .max(now.saturating_duration_since(newest.delivered_time));
        d.delivered_time = now;
        d.first_sent_time = newest.time;
        RateSample {
            delivered: d.delivered - newest.delivered,
            interval,
            rtt: now.saturating_duration_since(newest.time),
            prior_delivered: newest.delivered,
            app_limited: newest.app_limited,
        }
    }

    /// When `newest` (acknowledged at `now`) was sent.
    pub(super) fn rtt_sample(now: Instant, newest: &Sent) -> Duration {
        now.saturating_duration_since(newest.time)
    }

    /// Feeds the controller the ACK's rate sample and `acked` bytes.
    pub(super) fn on_ack_cc(&mut self, now: Instant, rate: &RateSample, acked: u64) {
        self.cc
            .on_ack(now, rate, self.delivery.delivered, acked, self.in_flight);
    }

    /// Declares lost every packet in flight that three later ones
    /// overtook or that is `delay` older than an acknowledged one; returns
    /// when the next one in flight becomes old enough (the loss timer).
    pub(super) fn detect_lost(
        &mut self,
        now: Instant,
        delay: Duration,
        stats: &mut UdpStats,
    ) -> Option<Instant> {
        let largest = self.largest_acked?;
        let mut loss_time: Option<Instant> = None;
        for i in 0..self.sent.len() {
            let s = self.sent[i];
            if s.number >= largest {
                break;
            }
            if s.acked || s.lost {
                continue;
            }
            let old = now.saturating_duration_since(s.time) >= delay;
            if old || largest >= s.number + PACKET_THRESHOLD {
                self.declare_lost(i, stats);
            } else {
                let at = s.time + delay;
                loss_time = Some(loss_time.map_or(at, |t| t.min(at)));
            }
        }
        loss_time
    }

    fn declare_lost(&mut self, i: usize, stats: &mut UdpStats) {
        let s = self.sent[i];
        self.sent[i].lost = true;
        self.in_flight -= u64::from(s.size);
        stats.packets_lost += 1;
        self.cc.on_loss(u64::from(s.size));
        let end = s.offset + u64::from(s.len);
        if s.len > 0 && end > self.stream.floor {
            self.stream.resend.insert(s.offset.max(self.stream.floor)..end);
        }
        if s.fin && !self.stream.fin_acked {
            self.stream.fin_pending = true;
        }
    }

    /// The probe timeout fired at `now`: the oldest bytes in flight go out
    /// again (not counted as a loss), two probes may pass the window, and
    /// the timer restarts from now even if nothing can be resent.
    pub(super) fn on_pto(&mut self, now: Instant, stats: &mut UdpStats) {
        self.pto_count += 1;
        stats.probe_timeouts += 1;
        self.cc.on_timeout();
        if let Some(i) = self.sent.iter().position(|s| !s.acked && !s.lost) {
            self.declare_lost(i, stats);
            stats.packets_lost -= 1;
        }
        self.pop_settled();
        self.probes = 2;
        self.last_eliciting_sent = Some(now);
    }

    /// Drops settled packets from the front of the record.
    pub(super) fn pop_settled(&mut self) {
        while self.sent.front().is_some_and(|s| s.acked || s.lost) {
            self.sent.pop_front();
        }
    }

    /// Packets in the record (settled ones behind the oldest unsettled
    /// included).
    pub(super) fn sent_len(&self) -> usize {
        self.sent.len()
    }
}
