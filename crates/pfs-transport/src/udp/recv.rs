//! The receive side of a UDP connection: the reassembly ring the peer's
//! stream bytes land in, its window and its growth within a shared receive
//! budget, and the packet numbers received with the ACK owed for them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pfs_wire::datagram::{emit_ack_range, AckHead, DataHead, ACK_HEAD_LEN, ACK_RANGE_LEN};

use super::ranges::RangeSet;
use super::timer::{Timer, TimerTable};

/// Received packet-number ranges remembered (duplicates older than these
/// count as new, and are dropped by stream offset instead).
const MAX_PN_RANGES: usize = 256;
/// Ranges one ACK reports, newest first. A gap is declared lost once three
/// later packets are acknowledged, long before it leaves the newest 32, so
/// more ranges only repeat news the sender acted on already (at 1 % loss
/// on a 50 ms link, reporting all 256 made ACKs 15 % of the wire bytes).
const ACK_RANGES: usize = 32;
/// Disjoint ranges of stream bytes a receiver holds ahead of a gap.
const MAX_RECV_RANGES: usize = 4096;
/// A receiver acknowledges at once after this many DATA packets; fewer
/// wait for the ACK delay only when they are alone (see the connection's
/// `transmit`).
pub(super) const ACK_EVERY: u32 = 16;
/// The receive buffer a connection starts with (and the first window it
/// announces): what a peer that has delivered nothing in order can make
/// it hold.
pub const INITIAL_RECV_BUFFER: usize = 256 << 10;

/// Receive-buffer bytes that the connections sharing it (a listener's) may
/// hold together. A connection's buffer grows only while the budget has
/// room; each connection's first [`INITIAL_RECV_BUFFER`] is always granted.
#[derive(Debug, Clone)]
pub struct RecvBudget {
    /// Bytes held by all connections: added when a buffer grows,
    /// subtracted when a connection is dropped.
    held: Arc<AtomicUsize>,
    limit: usize,
}

impl RecvBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            held: Arc::default(),
            limit,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if they fit.
    fn take(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    fn force(&self, n: usize) {
        self.held.fetch_add(n, Ordering::Relaxed);
    }

    fn give(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The receive side of one connection. `buf` holds offsets
/// `read..read + buf.len()` (a ring); the window announced is that end, so
/// the buffer is what a peer can fill. It doubles (up to the configured
/// window, within `budget`) each time the application read a sixteenth of
/// it in order: the window grows only with in-order data read, so a peer
/// that leaves a hole gets no more room.
#[derive(Debug)]
pub(super) struct RecvSide {
    buf: Vec<u8>,
    budget: Option<RecvBudget>,
    /// `read` when the buffer last grew.
    grown_at: u64,
    /// Every byte below was read by the application.
    pub(super) read: u64,
    /// Ranges held at or above `read`.
    pub(super) have: RangeSet,
    /// Where the peer's stream ends, once known.
    pub(super) fin: Option<u64>,
    /// The window the last ACK (or OPEN) announced.
    pub(super) window_sent: u64,
    /// Packet numbers received (the newest ranges).
    pn: RangeSet,
    /// The largest packet number received and when.
    largest: Option<(u64, Instant)>,
    /// Ack-eliciting packets received since the last ACK.
    pub(super) ack_pending: u32,
    /// An ACK must go out at the next chance.
    pub(super) ack_now: bool,
}

impl Drop for RecvSide {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.buf.len());
        }
    }
}

impl RecvSide {
    pub(super) fn new(recv_window: usize) -> Self {
        Self {
            buf: vec![0; recv_window.clamp(1 << 16, INITIAL_RECV_BUFFER.max(1 << 16))],
            budget: None,
            grown_at: 0,
            read: 0,
            have: RangeSet::new(),
            fin: None,
            window_sent: 0,
            pn: RangeSet::new(),
            largest: None,
            ack_pending: 0,
            ack_now: false,
        }
    }

    /// Bytes of ring held now.
    pub(super) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The highest stream offset the peer may send below.
    pub(super) fn window_limit(&self) -> u64 {
        self.read + self.buf.len() as u64
    }

    /// Whether the peer's stream arrived whole, its end included.
    pub(super) fn done(&self) -> bool {
        match self.fin {
            Some(fin) => fin == self.read || self.have.first() == Some(self.read..fin),
            None => false,
        }
    }

    /// Bytes readable in order now.
    pub(super) fn ready(&self) -> u64 {
        match self.have.first() {
            Some(r) if r.start == self.read => r.end - self.read,
            _ => 0,
        }
    }

    /// Makes the ring count against `budget` from now on.
    pub(super) fn set_budget(&mut self, budget: RecvBudget) {
        if let Some(old) = self.budget.take() {
            old.give(self.buf.len());
        }
        budget.force(self.buf.len());
        self.budget = Some(budget);
    }

    /// Copies `n` in-order bytes (at most [`Self::ready`]) into `out`, then
    /// grows the ring if due and asks for an ACK once a quarter of the
    /// window opened.
    pub(super) fn read_into(&mut self, out: &mut [u8], n: usize, max_window: usize) {
        let cap = self.buf.len();
        let at = (self.read % cap as u64) as usize;
        let first = n.min(cap - at);
        out[..first].copy_from_slice(&self.buf[at..at + first]);
        out[first..n].copy_from_slice(&self.buf[..n - first]);
        self.have.remove(self.read..self.read + n as u64);
        self.read += n as u64;
        self.maybe_grow(max_window);
        // Tell the sender about the room once a quarter of the window opened.
        if self.window_limit() - self.window_sent >= self.buf.len() as u64 / 4 {
            self.ack_now = true;
        }
    }

    /// Doubles the ring each time the application read a sixteenth of it
    /// in order (256 KiB grows to 32 MiB after 4 MiB read: fast enough that
    /// a loss, which stops in-order reading for a round trip, does not
    /// leave the sender window-bound), up to `max_window` and within the
    /// budget. Out-of-order bytes never count: a peer that leaves byte 0
    /// out holds the first buffer only.
    fn maybe_grow(&mut self, max_window: usize) {
        let cap = self.buf.len();
        if cap >= max_window || self.read - self.grown_at < cap as u64 / 16 {
            return;
        }
        let new_cap = (cap * 2).min(max_window);
        if let Some(b) = &self.budget {
            if !b.take(new_cap - cap) {
                return;
            }
        }
        // Re-lay the ring: offset `o` moves from `o % cap` to `o % new_cap`.
        let mut grown = vec![0u8; new_cap];
        let end = self.read + cap as u64;
        let mut off = self.read;
        while off < end {
            let from = (off % cap as u64) as usize;
            let to = (off % new_cap as u64) as usize;
            let n = ((end - off) as usize).min(cap - from).min(new_cap - to);
            grown[to..to + n].copy_from_slice(&self.buf[from..from + n]);
            off += n as u64;
        }
        self.buf = grown;
        self.grown_at = self.read;
        // The peer hears of the room at once.
        self.ack_now = true;
    }

    /// Checks a DATA packet's place in the stream; records the stream's
    /// end if it carries it. `Err` names the peer's protocol error.
    pub(super) fn check_data(&mut self, head: &DataHead) -> Result<(), &'static str> {
        let end = head.offset + u64::from(head.len);
        if end > self.window_limit() {
            return Err("stream bytes beyond the window");
        }
        if let Some(fin) = self.fin {
            if end > fin || (head.fin && end != fin) {
                return Err("stream bytes past its end");
            }
        }
        if head.fin {
            if end < self.read || self.have.last().is_some_and(|r| r.end > end) {
                return Err("stream end before bytes already sent");
            }
            self.fin = Some(end);
        }
        Ok(())
    }

    /// Whether the reassembly ring may record a DATA packet: holes are
    /// bounded, so a packet that would open one more past the cap is
    /// dropped unrecorded (its sender resends it) and a hostile peer
    /// cannot grow the range set.
    pub(super) fn has_room_for(&self, head: &DataHead) -> bool {
        let end = head.offset + u64::from(head.len);
        self.have.len() < MAX_RECV_RANGES || self.have.touches(head.offset.max(self.read)..end)
    }

    /// Stores the bytes of a DATA packet (checked already) in the ring;
    /// returns how many of them were held already.
    pub(super) fn store(&mut self, head: &DataHead, bytes: &[u8]) -> u64 {
        let end = head.offset + u64::from(head.len);
        let start = head.offset.max(self.read);
        if start >= end {
            return u64::from(head.len);
        }
        let skip = (start - head.offset) as usize;
        let bytes = &bytes[skip..];
        let cap = self.buf.len();
        let at = (start % cap as u64) as usize;
        let first = bytes.len().min(cap - at);
        self.buf[at..at + first].copy_from_slice(&bytes[..first]);
        self.buf[..bytes.len() - first].copy_from_slice(&bytes[first..]);
        let fresh = self.have.insert(start..end);
        (end - start) - fresh
    }

    /// Records a received packet number; false if it was seen already.
    /// An ack-eliciting one counts towards the next ACK: the sixteenth
    /// makes it due at once, the first starts the ACK delay (`timers`'
    /// [`Timer::Ack`], at `ack_delay_end`).
    pub(super) fn note_number(
        &mut self,
        now: Instant,
        number: u64,
        eliciting: bool,
        timers: &mut TimerTable,
        ack_delay_end: Instant,
    ) -> bool {
        if self.pn.insert(number..number + 1) == 0 {
            // A duplicate: the sender may have missed our ACK.
            self.ack_now = true;
            return false;
        }
        self.pn.keep_highest(MAX_PN_RANGES);
        match self.largest {
            Some((largest, _)) if number < largest => self.ack_now |= eliciting,
            Some((largest, _)) => {
                if number > largest + 1 {
                    self.ack_now |= eliciting;
                }
                self.largest = Some((number, now));
            }
            None => self.largest = Some((number, now)),
        }
        if eliciting {
            self.ack_pending += 1;
            if self.ack_pending >= ACK_EVERY {
                self.ack_now = true;
            } else if timers.get(Timer::Ack).is_none() {
                timers.set(Timer::Ack, ack_delay_end);
            }
        }
        true
    }

    /// Writes an ACK's body (head and up to `room` ranges, newest first)
    /// into `out` at `now`; returns its length. The ACK owed is paid.
    pub(super) fn emit_ack(&mut self, now: Instant, out: &mut [u8], room: usize) -> usize {
        self.ack_now = false;
        self.ack_pending = 0;
        let window = self.window_limit();
        self.window_sent = window;
        let mut ranges = self.pn.iter_rev();
        let (largest, first, delay_us) = match (ranges.next(), self.largest) {
            (Some(r), Some((_, at))) => {
                let delay = now
                    .saturating_duration_since(at)
                    .as_micros()
                    .min(u128::from(u32::MAX));
                (
                    r.end - 1,
                    (r.end - 1 - r.start).min(u64::from(u32::MAX)),
                    delay as u32,
                )
            }
            // Nothing received yet (a keepalive right after opening): an
            // ACK of nothing is encoded as packet 0 received; the peer's
            // packet 0 was its OPEN or OPEN_ACK, which it never tracks.
            _ => (0, 0, 0),
        };
        let mut at = ACK_HEAD_LEN;
        let mut count = 0u16;
        let mut prev_smallest = largest - first;
        for r in ranges.take(room.min(ACK_RANGES - 1)) {
            let gap = prev_smallest - r.end;
            let len = r.end - 1 - r.start;
            if gap > u64::from(u32::MAX) || len > u64::from(u32::MAX) {
                break;
            }
            out[at..at + ACK_RANGE_LEN].copy_from_slice(&emit_ack_range(gap as u32, len as u32));
            at += ACK_RANGE_LEN;
            count += 1;
            prev_smallest = r.start;
        }
        let head = AckHead {
            largest,
            window,
            delay_us,
            first: first as u32,
            count,
        };
        out[..ACK_HEAD_LEN].copy_from_slice(&head.emit());
        at
    }

    /// Newest packet-number range received (for the state event).
    pub(super) fn newest_numbers(&self) -> Option<std::ops::Range<u64>> {
        self.pn.last()
    }
}
