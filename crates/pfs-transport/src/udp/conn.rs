//! The sans-I/O connection core of the UDP transport: one reliable,
//! ordered byte stream each way over datagrams (`docs/wire.md` §14).
//!
//! The caller passes datagrams and `now` in (`handle_datagram`,
//! `handle_timeout`) and takes datagrams and the next deadline out
//! (`poll_transmit`, `poll_timeout`); the application side writes into
//! the send buffer and reads from the reassembly buffer (`write`,
//! `finish`, `read`). No socket, clock or thread inside: the simulated
//! network tests drive two of these in one thread.
//!
//! Reliability, after QUIC (RFC 9000/9002): every datagram has a new
//! packet number, so an ACK is never ambiguous; ACKs carry ranges of
//! received numbers and every gap between them is a negative
//! acknowledgement, all in one packet; a packet is lost when three later
//! ones were acknowledged or when it is 9/8 of an RTT older than one that
//! was; only its stream bytes are sent again, in a new packet. A probe
//! timeout resends the oldest bytes when ACKs stop. Flow control: each
//! ACK carries the highest stream offset its sender accepts. Pacing and
//! the window come from [`super::cc`].
//!
//! Hostile peers and forged datagrams (`docs/wire.md` §14.7): the sender
//! skips a packet number now and then, at random, and an ACK of a number
//! never sent ends the connection (an optimistic ACK, QUIC §21.4); once a
//! protected session installs datagram keys ([`Connection::protect`])
//! every datagram is tagged and untagged or badly tagged ones are dropped;
//! an ICMP port unreachable is only a hint that ends the connection if
//! nothing valid arrives after it for a grace period.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_wire::datagram::{
    close_code, emit_ack_range, AckHead, AckRanges, Close, DataHead, Open, OpenRequest, Packet, PacketHeader,
    PacketType, Retry, Token, ACK_HEAD_LEN, ACK_RANGE_LEN, CLOSE_LEN, DATA_HEAD_LEN, MAX_DATAGRAM,
    MIN_DATAGRAM, OPEN_LEN, OPEN_REQUEST_LEN, PACKET_HEADER_LEN, TAG_LEN,
};

use super::auth::{DatagramKeys, Protector};
use super::cc::{Controller, RateSample};
use super::ranges::RangeSet;

/// Settings of one connection.
#[derive(Debug, Clone, Copy)]
pub struct UdpConfig {
    /// Largest UDP payload this side sends and accepts; the smaller of the
    /// two peers' values is used. Default 1472: a 1500-byte IPv4 MTU.
    pub max_datagram: u16,
    /// Stream bytes the application may write ahead of the peer's ACKs.
    pub send_buffer: usize,
    /// Stream bytes the receiver holds ahead of the application's reads
    /// at most (the largest flow-control window). The buffer starts at
    /// [`INITIAL_RECV_BUFFER`] and doubles up to this as the peer fills it
    /// in order and the application reads it.
    pub recv_window: usize,
    /// The connection fails when nothing arrives from the peer for this long.
    pub idle_timeout: Duration,
    /// A side that sent nothing for this long sends an ACK, so an idle
    /// but live connection is never mistaken for a dead one.
    pub keepalive: Duration,
    /// How long the opening exchange may take.
    pub connect_timeout: Duration,
    /// How long a receiver may hold an ACK back to acknowledge more at once.
    pub max_ack_delay: Duration,
    /// Datagrams in flight before the first ACK.
    pub initial_window_packets: u64,
}

impl Default for UdpConfig {
    fn default() -> Self {
        Self {
            max_datagram: 1472,
            send_buffer: 32 << 20,
            recv_window: 32 << 20,
            idle_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(10),
            max_ack_delay: Duration::from_millis(1),
            initial_window_packets: 32,
        }
    }
}

/// Why a connection ended before both streams did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnError {
    /// Nothing arrived from the peer for the idle timeout.
    Idle(Duration),
    /// Bytes were in flight and none was acknowledged for the idle
    /// timeout, though the peer still answered (a path that drops
    /// full-size datagrams: an MTU smaller than the datagrams).
    Stalled(Duration),
    /// The local stack refused a datagram as too large for the path.
    TooLarge(usize),
    /// The opening exchange did not finish in time.
    ConnectTimeout(Duration),
    /// The peer sent CLOSE with this code.
    PeerClosed(u32),
    /// The peer broke the datagram protocol.
    Protocol(&'static str),
    /// This side abandoned the connection.
    Aborted,
    /// The peer's host answered that its port is closed (ICMP port
    /// unreachable) and nothing valid arrived from the peer for the grace
    /// period after it: the peer process is gone.
    Unreachable(Duration),
    /// The peer acknowledged this packet number, which this side never
    /// sent (a skipped number, or one above the largest sent): a peer
    /// acknowledging what it did not receive to make this side send faster.
    OptimisticAck(u64),
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Idle(d) => write!(f, "no packet from the UDP peer for {:.1} s", d.as_secs_f64()),
            Self::Stalled(d) => write!(
                f,
                "the UDP peer acknowledged nothing for {:.1} s though it answers: does the path drop \
                 full-size datagrams? Try a smaller --mtu",
                d.as_secs_f64()
            ),
            Self::TooLarge(n) => write!(
                f,
                "the path refuses {n}-byte UDP datagrams (EMSGSIZE): give a smaller --mtu"
            ),
            Self::ConnectTimeout(d) => write!(
                f,
                "the UDP peer did not answer the opening exchange within {:.1} s",
                d.as_secs_f64()
            ),
            Self::PeerClosed(code) => match *code {
                close_code::ABORT => f.write_str("the UDP peer closed the connection"),
                close_code::PROTOCOL => {
                    f.write_str("the UDP peer closed the connection: it saw a protocol error")
                }
                close_code::TIMEOUT => {
                    f.write_str("the UDP peer closed the connection: it timed out waiting for us")
                }
                close_code::BUSY => f.write_str(
                    "the UDP server refused the connection: it holds too many (from this address or in all)",
                ),
                other => write!(f, "the UDP peer closed the connection (code {other})"),
            },
            Self::Protocol(what) => write!(f, "UDP protocol error from the peer: {what}"),
            Self::Aborted => f.write_str("the UDP connection was closed locally"),
            Self::Unreachable(d) => write!(
                f,
                "the UDP peer's port is closed (ICMP port unreachable) and nothing came from it for \
                 {:.1} s after: the peer is gone",
                d.as_secs_f64()
            ),
            Self::OptimisticAck(n) => write!(
                f,
                "the UDP peer acknowledged packet {n}, which was never sent (an optimistic ACK): \
                 connection closed"
            ),
        }
    }
}

impl std::error::Error for ConnError {}

/// Counters of one connection; `bytes_*` count UDP payload bytes (the
/// datagrams), `stream_*` the stream bytes inside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Datagrams received and accepted (well formed, this connection).
    pub packets_received: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// Stream bytes sent, first sends and resends.
    pub stream_bytes_sent: u64,
    /// Stream bytes sent again after a loss or a probe timeout.
    pub stream_bytes_resent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Packets declared lost that were acknowledged later (reordering).
    pub packets_spurious: u64,
    /// Probe timeouts that fired.
    pub probe_timeouts: u64,
    /// ACK packets sent.
    pub acks_sent: u64,
    /// Stream bytes received that were held already.
    pub stream_bytes_duplicate: u64,
    /// Datagrams dropped: malformed, another connection's, or out of place.
    pub packets_ignored: u64,
    /// Round trips the congestion controller found congested (loss above
    /// 2 % with a standing queue) and answered by capping bytes in flight.
    pub congested_rounds: u64,
    /// Datagrams dropped because datagram keys were installed and their
    /// tag was missing or wrong (forged, or the peer's from before its keys).
    pub unauthenticated: u64,
    /// ICMP port unreachable reports taken as hints (none ends the
    /// connection alone).
    pub unreachable_hints: u64,
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// The peer finished its stream and every byte was read.
    End,
    /// Nothing to read yet.
    Blocked,
    /// The connection failed.
    Failed(ConnError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Client: OPEN sent, waiting for OPEN_ACK.
    Opening,
    /// Server: OPEN_ACK sent, waiting for the client's first packet.
    Accepting,
    Open,
    Closed,
}

/// A DATA packet in flight.
#[derive(Debug, Clone, Copy)]
struct Sent {
    number: u64,
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

/// Packets an ACK may skip before the oldest is lost (RFC 9002's threshold).
const PACKET_THRESHOLD: u64 = 3;
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
/// wait for the ACK delay only when they are alone (see `transmit`).
const ACK_EVERY: u32 = 16;
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

/// How often the client sends OPEN again while unanswered (the server
/// sends OPEN_ACK once per OPEN that reaches it).
const OPEN_RESEND: Duration = Duration::from_millis(200);
/// How long the pacer may fall behind: the burst it may send at once.
const PACING_BURST: Duration = Duration::from_millis(1);
/// RTT assumed before the first sample.
const INITIAL_RTT: Duration = Duration::from_millis(100);
/// The sender skips one packet number in every `SKIP_MIN..SKIP_MAX`
/// (uniformly, from a secret seed): rare enough to cost nothing (one
/// immediate ACK and one more ACK range per few hundred packets), often
/// enough that an acknowledger claiming the gaps it sees arrived meets one
/// within a few hundred packets (`docs/wire.md` §14.4).
const SKIP_MIN: u64 = 64;
const SKIP_MAX: u64 = 1024;
/// Skipped numbers remembered, newest; an optimistic ACK covers the newest.
const MAX_SKIPPED: usize = 64;
/// The least time an ICMP port unreachable waits for a valid packet from
/// the peer before it ends the connection: more than two of the peer's
/// keepalives (1 s), so a forged ICMP cannot end an idle live connection.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(3);

/// One side of one connection.
#[derive(Debug)]
pub struct Connection {
    cfg: UdpConfig,
    state: State,
    error: Option<ConnError>,
    close_to_send: Option<u32>,
    local_id: u32,
    peer_id: u32,
    datagram: usize,
    next_number: u64,
    opened_at: Instant,
    open_resend_at: Instant,
    /// Client: the address token of the listener's last RETRY, echoed in OPEN.
    token: Option<Token>,
    last_recv: Instant,
    last_sent: Instant,
    /// When an ACK last acknowledged something new, or nothing was in flight.
    last_progress: Instant,

    // Send side: `sbuf` holds stream offsets `s_floor..s_end` (a ring).
    sbuf: Vec<u8>,
    s_floor: u64,
    s_end: u64,
    next_new: u64,
    fin_at: Option<u64>,
    fin_pending: bool,
    fin_acked: bool,
    s_acked: RangeSet,
    resend: RangeSet,
    sent: VecDeque<Sent>,
    in_flight: u64,
    peer_window: u64,
    largest_acked: Option<u64>,
    srtt: Option<Duration>,
    rttvar: Duration,
    latest_rtt: Duration,
    loss_time: Option<Instant>,
    pto_count: u32,
    last_eliciting_sent: Option<Instant>,
    probes: u32,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    app_limited_until: u64,
    cc: Controller,
    next_send_time: Instant,

    // Receive side: `rbuf` holds offsets `r_read..r_read + rbuf.len()` (a
    // ring); the window announced is that end, so the buffer is what a
    // peer can fill. It doubles (up to `recv_window`, within `budget`)
    // each time the application read a sixteenth of it in order: the window
    // grows only with in-order data read, so a peer that leaves a hole
    // gets no more room.
    rbuf: Vec<u8>,
    budget: Option<RecvBudget>,
    /// `r_read` when the buffer last grew.
    r_grown_at: u64,
    r_read: u64,
    r_have: RangeSet,
    r_fin: Option<u64>,
    r_window_sent: u64,
    pn_recv: RangeSet,
    largest_recv: Option<(u64, Instant)>,
    ack_pending: u32,
    ack_due: Option<Instant>,
    ack_now: bool,

    /// Datagram keys, once a protected session installed them.
    protector: Option<Protector>,
    /// A datagram with a valid tag arrived: untagged ones are refused from now on.
    peer_tagged: bool,
    /// Packet-number skipping: the secret that picks the gaps (HMAC of a
    /// counter: the peer cannot predict a gap from the ones it saw), the
    /// next number to skip and the newest numbers skipped (ascending).
    skip_key: ring::hmac::Key,
    skips: u64,
    skip_at: u64,
    skipped: VecDeque<u64>,
    /// When an ICMP port unreachable arrived with no valid packet since.
    unreachable_at: Option<Instant>,

    stats: UdpStats,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.rbuf.len());
        }
    }
}

impl Connection {
    fn new(cfg: UdpConfig, now: Instant, local_id: u32, state: State) -> Self {
        let max_datagram = cfg.max_datagram.clamp(MIN_DATAGRAM, MAX_DATAGRAM);
        let cfg = UdpConfig {
            max_datagram,
            send_buffer: cfg.send_buffer.max(1 << 16),
            recv_window: cfg.recv_window.max(1 << 16),
            ..cfg
        };
        let mut c = Self {
            cfg,
            state,
            error: None,
            close_to_send: None,
            local_id,
            peer_id: 0,
            datagram: usize::from(max_datagram),
            next_number: 0,
            opened_at: now,
            open_resend_at: now,
            token: None,
            last_recv: now,
            last_sent: now,
            last_progress: now,
            sbuf: vec![0; cfg.send_buffer.max(1 << 16)],
            s_floor: 0,
            s_end: 0,
            next_new: 0,
            fin_at: None,
            fin_pending: false,
            fin_acked: false,
            s_acked: RangeSet::new(),
            resend: RangeSet::new(),
            sent: VecDeque::new(),
            in_flight: 0,
            peer_window: 0,
            largest_acked: None,
            srtt: None,
            rttvar: INITIAL_RTT / 2,
            latest_rtt: INITIAL_RTT,
            loss_time: None,
            pto_count: 0,
            last_eliciting_sent: None,
            probes: 0,
            delivered: 0,
            delivered_time: now,
            first_sent_time: now,
            app_limited_until: 0,
            cc: Controller::new(u64::from(max_datagram), cfg.initial_window_packets),
            next_send_time: now,
            rbuf: vec![0; cfg.recv_window.clamp(1 << 16, INITIAL_RECV_BUFFER.max(1 << 16))],
            budget: None,
            r_grown_at: 0,
            r_read: 0,
            r_have: RangeSet::new(),
            r_fin: None,
            r_window_sent: 0,
            pn_recv: RangeSet::new(),
            largest_recv: None,
            ack_pending: 0,
            ack_due: None,
            ack_now: false,
            protector: None,
            peer_tagged: false,
            skip_key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &[]),
            skips: 0,
            skip_at: 0,
            skipped: VecDeque::new(),
            unreachable_at: None,
            stats: UdpStats::default(),
        };
        // A secret from the OS: the peer must not predict which numbers
        // are skipped. (Without one the per-process keys of std's hasher,
        // also from the OS, stand in.)
        let mut secret = [0u8; 32];
        if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret).is_err() {
            let h = std::collections::hash_map::RandomState::new();
            secret[..8].copy_from_slice(&std::hash::BuildHasher::hash_one(&h, local_id).to_le_bytes());
        }
        c.skip_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret);
        c.skip_at = c.skip_gap();
        c
    }

    /// Makes the choice of skipped packet numbers follow `seed` (the
    /// simulator does, for runs that repeat; a real connection keeps the
    /// secret it was made with).
    pub fn set_skip_seed(&mut self, seed: u64) {
        self.skip_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &seed.to_le_bytes());
        self.skips = 0;
        self.skip_at = self.next_number + self.skip_gap();
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

    /// Installs datagram keys (a protected session's handshake is over):
    /// every datagram sent from now on is tagged, and once one validly
    /// tagged datagram arrived from the peer, untagged ones are dropped.
    pub fn protect(&mut self, keys: &DatagramKeys) {
        self.protector = Some(Protector::new(keys));
    }

    /// Whether datagram keys are installed.
    pub fn is_protected(&self) -> bool {
        self.protector.is_some()
    }

    fn tag_len(&self) -> usize {
        if self.protector.is_some() {
            TAG_LEN
        } else {
            0
        }
    }

    /// A client connection: its first datagram is OPEN.
    pub fn client(cfg: UdpConfig, now: Instant, local_id: u32) -> Self {
        Self::new(cfg, now, local_id, State::Opening)
    }

    /// A server connection answering the OPEN body `open`: its first
    /// datagram is OPEN_ACK.
    pub fn server(cfg: UdpConfig, now: Instant, local_id: u32, open: &Open) -> Self {
        let mut c = Self::new(cfg, now, local_id, State::Accepting);
        c.peer_id = open.conn;
        c.datagram = c.datagram.min(usize::from(open.max_datagram));
        c.cc = Controller::new(c.datagram as u64, cfg.initial_window_packets);
        c.peer_window = open.window;
        c.r_window_sent = c.rbuf.len() as u64;
        c
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpStats {
        UdpStats {
            congested_rounds: self.cc.congested_rounds(),
            ..self.stats
        }
    }

    /// Smoothed RTT, if measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The congestion controller (bandwidth estimate, window, mode).
    pub fn controller(&self) -> &Controller {
        &self.cc
    }

    /// The datagram size both sides agreed on.
    pub fn datagram_size(&self) -> usize {
        self.datagram
    }

    /// Whether the opening exchange is over (data may flow).
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Open | State::Accepting)
    }

    /// The error that ended the connection, if one did.
    pub fn error(&self) -> Option<&ConnError> {
        self.error.as_ref()
    }

    /// Whether nothing more will be sent or received (after a failure, or
    /// once both streams are finished and acknowledged and the CLOSE, if
    /// any, was sent).
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed && self.close_to_send.is_none()
    }

    /// Whether this side's stream was finished and every byte of it,
    /// the end included, acknowledged.
    pub fn send_done(&self) -> bool {
        self.fin_acked && Some(self.s_floor) == self.fin_at
    }

    /// Whether the peer's stream arrived whole, its end included.
    pub fn recv_done(&self) -> bool {
        match self.r_fin {
            Some(fin) => fin == self.r_read || self.r_have.first() == Some(self.r_read..fin),
            None => false,
        }
    }

    /// Bytes the application may write now.
    pub fn writable(&self) -> usize {
        if self.fin_at.is_some() || self.state == State::Closed {
            return 0;
        }
        self.sbuf.len() - (self.s_end - self.s_floor) as usize
    }

    /// Whether this side's stream was finished (writes are refused).
    pub fn finished(&self) -> bool {
        self.fin_at.is_some()
    }

    /// Bytes written and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.s_end - self.s_floor
    }

    /// Copies as much of `data` as the send buffer takes; returns how much.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.writable());
        let cap = self.sbuf.len();
        let at = (self.s_end % cap as u64) as usize;
        let first = n.min(cap - at);
        self.sbuf[at..at + first].copy_from_slice(&data[..first]);
        self.sbuf[..n - first].copy_from_slice(&data[first..n]);
        self.s_end += n as u64;
        n
    }

    /// Ends this side's stream after what was written.
    pub fn finish(&mut self) {
        if self.fin_at.is_none() {
            self.fin_at = Some(self.s_end);
            self.fin_pending = true;
        }
    }

    /// Copies received bytes, in order, into `out`.
    pub fn read(&mut self, out: &mut [u8]) -> ReadOutcome {
        // Bytes that arrived in order are delivered even after a failure.
        let ready = match self.r_have.first() {
            Some(r) if r.start == self.r_read => r.end - self.r_read,
            _ => 0,
        };
        if ready == 0 {
            if self.r_fin == Some(self.r_read) {
                return ReadOutcome::End;
            }
            if let Some(e) = &self.error {
                return ReadOutcome::Failed(e.clone());
            }
            return ReadOutcome::Blocked;
        }
        let n = out.len().min(ready as usize);
        let cap = self.rbuf.len();
        let at = (self.r_read % cap as u64) as usize;
        let first = n.min(cap - at);
        out[..first].copy_from_slice(&self.rbuf[at..at + first]);
        out[first..n].copy_from_slice(&self.rbuf[..n - first]);
        self.r_have.remove(self.r_read..self.r_read + n as u64);
        self.r_read += n as u64;
        self.maybe_grow();
        // Tell the sender about the room once a quarter of the window opened.
        if self.window_limit() - self.r_window_sent >= self.rbuf.len() as u64 / 4 {
            self.ack_now = true;
        }
        ReadOutcome::Data(n)
    }

    /// Whether a read would return something (data, end or failure).
    pub fn readable(&self) -> bool {
        self.error.is_some()
            || self.r_fin == Some(self.r_read)
            || self.r_have.first().is_some_and(|r| r.start == self.r_read)
    }

    /// Abandons the connection: a CLOSE goes out and everything stops.
    pub fn abort(&mut self, code: u32) {
        if self.state != State::Closed {
            self.fail(ConnError::Aborted, Some(code));
        }
    }

    /// One line of state for debugging stalls.
    pub fn summary(&self) -> String {
        format!(
            "state {:?} floor {} next_new {} end {} fin {:?}/{} resend {:?} in_flight {} window {} peer_window {} sent {} (front {:?}) largest_acked {:?} loss_time {:?} pto {:?} x{} | {} | r_read {} have {:?} r_fin {:?} pn {:?} pending {} due {:?} | {:?}",
            self.state, self.s_floor, self.next_new, self.s_end, self.fin_at, self.fin_pending,
            self.resend.first(), self.in_flight, self.cc.window(), self.peer_window, self.sent.len(),
            self.sent.front().map(|s| (s.number, s.offset, s.acked, s.lost)), self.largest_acked,
            self.loss_time.map(|t| t.saturating_duration_since(Instant::now())), self.pto_deadline().map(|t| t.saturating_duration_since(Instant::now())), self.pto_count,
            self.cc.summary(),
            self.r_read, self.r_have.first(), self.r_fin, self.pn_recv.last(), self.ack_pending, self.ack_due, self.stats()
        )
    }

    /// A copy of the client's OPEN reached the listener: the OPEN_ACK goes
    /// out again (the first was lost).
    pub fn open_again(&mut self, now: Instant) {
        if self.state == State::Accepting {
            self.open_resend_at = now;
        }
    }

    /// The local stack refused a datagram of `size` bytes as too large
    /// (`EMSGSIZE`): no resend can help, the connection fails now.
    pub fn datagram_too_large(&mut self, size: usize) {
        if self.state != State::Closed {
            self.fail(ConnError::TooLarge(size), None);
        }
    }

    /// Whether a read made room the peer should hear about now.
    pub fn ack_wanted(&self) -> bool {
        self.ack_now
    }

    /// The socket reported ICMP port unreachable for the peer. Anyone can
    /// forge one, so it is a hint: the connection fails only if nothing
    /// valid arrives from the peer for [`Self::unreachable_grace`] after it.
    pub fn port_unreachable(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        self.stats.unreachable_hints += 1;
        if self.unreachable_at.is_none() {
            self.unreachable_at = Some(now);
        }
    }

    /// How long an ICMP port unreachable waits for a valid packet: three
    /// probe timeouts, at least 3 s (more than two of the peer's keepalives).
    pub fn unreachable_grace(&self) -> Duration {
        let srtt = self.srtt.unwrap_or(INITIAL_RTT);
        let pto = srtt + (self.rttvar * 4).max(Duration::from_millis(1)) + self.cfg.max_ack_delay;
        (pto * 3).max(UNREACHABLE_GRACE)
    }

    fn fail(&mut self, error: ConnError, close: Option<u32>) {
        self.state = State::Closed;
        self.error = Some(error);
        self.close_to_send = close;
    }

    fn window_limit(&self) -> u64 {
        self.r_read + self.rbuf.len() as u64
    }

    /// Makes the connection's receive buffer count against `budget` (a
    /// listener's, shared by its connections) from now on.
    pub fn set_recv_budget(&mut self, budget: RecvBudget) {
        if let Some(old) = self.budget.take() {
            old.give(self.rbuf.len());
        }
        budget.force(self.rbuf.len());
        self.budget = Some(budget);
    }

    /// Bytes of receive buffer held now.
    pub fn recv_buffer(&self) -> usize {
        self.rbuf.len()
    }

    /// Doubles the receive buffer each time the application read a
    /// sixteenth of it in order (256 KiB grows to 32 MiB after 4 MiB read:
    /// fast enough that a loss, which stops in-order reading for a round
    /// trip, does not leave the sender window-bound), up to `recv_window`
    /// and within the budget. Out-of-order bytes never count: a peer that
    /// leaves byte 0 out holds the first buffer only.
    fn maybe_grow(&mut self) {
        let cap = self.rbuf.len();
        if cap >= self.cfg.recv_window || self.r_read - self.r_grown_at < cap as u64 / 16 {
            return;
        }
        let new_cap = (cap * 2).min(self.cfg.recv_window);
        if let Some(b) = &self.budget {
            if !b.take(new_cap - cap) {
                return;
            }
        }
        // Re-lay the ring: offset `o` moves from `o % cap` to `o % new_cap`.
        let mut grown = vec![0u8; new_cap];
        let end = self.r_read + cap as u64;
        let mut off = self.r_read;
        while off < end {
            let from = (off % cap as u64) as usize;
            let to = (off % new_cap as u64) as usize;
            let n = ((end - off) as usize).min(cap - from).min(new_cap - to);
            grown[to..to + n].copy_from_slice(&self.rbuf[from..from + n]);
            off += n as u64;
        }
        self.rbuf = grown;
        self.r_grown_at = self.r_read;
        // The peer hears of the room at once.
        self.ack_now = true;
    }

    // ---------------------------------------------------------------- input

    /// Takes one received datagram. Malformed datagrams and another
    /// connection's are counted and dropped: anyone can send a datagram.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        if self.state == State::Closed {
            return;
        }
        let Ok(packet) = Packet::parse(datagram) else {
            self.stats.packets_ignored += 1;
            return;
        };
        let (header, body) = (packet.header, packet.body);
        // No sender gets near 2^64 packets; refusing the last number keeps
        // `number + 1` in range everywhere below.
        let ours = header.conn == self.local_id && header.number < u64::MAX;
        if let Some(p) = &self.protector {
            if !ours {
                // Another connection's, or random: dropped without the
                // cost of checking a tag.
                self.stats.packets_ignored += 1;
                return;
            }
            match packet.tag {
                Some((covered, tag)) if p.check(header.number, covered, tag) => self.peer_tagged = true,
                // Before the peer's first tagged datagram, untagged ones
                // are still its own (it installs its keys after us, or its
                // older packets arrive late); from then on only forgeries
                // or stragglers, whose bytes the peer resends tagged.
                None if !self.peer_tagged => {}
                _ => {
                    self.stats.unauthenticated += 1;
                    return;
                }
            }
        }
        // Without keys a tag is not checked: the packet is worth what an
        // untagged one is (the peer installed its keys first).
        let accepted = match (header.kind, self.state) {
            (PacketType::OpenAck, State::Opening) if ours => self.on_open_ack(now, header.number, body),
            (PacketType::OpenAck, State::Open) if ours => {
                // The server missed our first packets: answer at once.
                self.ack_now = true;
                false
            }
            (PacketType::Retry, State::Opening) if ours => self.on_retry(now, body),
            // The listener refused us (BUSY): no use repeating OPEN.
            (PacketType::Close, State::Opening) if ours => match Close::parse(body) {
                Ok(close) => {
                    self.fail(ConnError::PeerClosed(close.code), None);
                    true
                }
                Err(_) => false,
            },
            (PacketType::Open | PacketType::OpenAck | PacketType::Retry, _) => false,
            (_, State::Opening) => false,
            (PacketType::Data, _) if ours => self.on_data(now, header.number, body),
            (PacketType::Ack, _) if ours => self.on_ack(now, header.number, body),
            (PacketType::Close, _) if ours => {
                if let Ok(close) = Close::parse(body) {
                    self.fail(ConnError::PeerClosed(close.code), None);
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if accepted {
            self.stats.packets_received += 1;
            self.stats.bytes_received += datagram.len() as u64;
            self.last_recv = now;
            self.unreachable_at = None;
            if self.state == State::Accepting {
                self.state = State::Open;
            }
        } else {
            self.stats.packets_ignored += 1;
        }
    }

    /// The listener wants proof of our address: OPEN goes out again at
    /// once with its token. A later RETRY (the token expired on a slow
    /// path) replaces it; the connect timeout bounds the exchange.
    fn on_retry(&mut self, now: Instant, body: &[u8]) -> bool {
        let Ok(retry) = Retry::parse(body) else {
            return false;
        };
        if self.token == Some(retry.token) {
            // A copy: the OPEN with this token is out already.
            return false;
        }
        self.token = Some(retry.token);
        self.open_resend_at = now;
        true
    }

    fn on_open_ack(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok(open) = Open::parse(body) else {
            return false;
        };
        self.note_number(now, number, false);
        self.peer_id = open.conn;
        self.datagram = self.datagram.min(usize::from(open.max_datagram));
        self.cc = Controller::new(self.datagram as u64, self.cfg.initial_window_packets);
        self.peer_window = open.window;
        self.r_window_sent = self.window_limit();
        self.state = State::Open;
        self.delivered_time = now;
        self.first_sent_time = now;
        // Acknowledge at once: the server learns the path is open.
        self.ack_now = true;
        true
    }

    /// Records a received packet number; false if it was seen already.
    fn note_number(&mut self, now: Instant, number: u64, eliciting: bool) -> bool {
        if self.pn_recv.insert(number..number + 1) == 0 {
            // A duplicate: the sender may have missed our ACK.
            self.ack_now = true;
            return false;
        }
        self.pn_recv.keep_highest(MAX_PN_RANGES);
        match self.largest_recv {
            Some((largest, _)) if number < largest => self.ack_now |= eliciting,
            Some((largest, _)) => {
                if number > largest + 1 {
                    self.ack_now |= eliciting;
                }
                self.largest_recv = Some((number, now));
            }
            None => self.largest_recv = Some((number, now)),
        }
        if eliciting {
            self.ack_pending += 1;
            if self.ack_pending >= ACK_EVERY {
                self.ack_now = true;
            } else if self.ack_due.is_none() {
                self.ack_due = Some(now + self.cfg.max_ack_delay);
            }
        }
        true
    }

    fn on_data(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok((head, bytes)) = DataHead::parse(body) else {
            return false;
        };
        let end = head.offset + u64::from(head.len);
        if end > self.window_limit() {
            self.fail(
                ConnError::Protocol("stream bytes beyond the window"),
                Some(close_code::PROTOCOL),
            );
            return true;
        }
        if let Some(fin) = self.r_fin {
            if end > fin || (head.fin && end != fin) {
                self.fail(
                    ConnError::Protocol("stream bytes past its end"),
                    Some(close_code::PROTOCOL),
                );
                return true;
            }
        }
        if head.fin {
            if end < self.r_read || self.r_have.last().is_some_and(|r| r.end > end) {
                self.fail(
                    ConnError::Protocol("stream end before bytes already sent"),
                    Some(close_code::PROTOCOL),
                );
                return true;
            }
            self.r_fin = Some(end);
        }
        // Holes in the reassembly buffer are bounded: a packet that would
        // open one more past the cap is dropped unrecorded (its sender
        // resends it), so a hostile peer cannot grow the range set.
        if self.r_have.len() >= MAX_RECV_RANGES && !self.r_have.touches(head.offset.max(self.r_read)..end) {
            return false;
        }
        if !self.note_number(now, number, true) {
            self.stats.stream_bytes_duplicate += u64::from(head.len);
            return true;
        }
        let start = head.offset.max(self.r_read);
        if start < end {
            let skip = (start - head.offset) as usize;
            let bytes = &bytes[skip..];
            let cap = self.rbuf.len();
            let at = (start % cap as u64) as usize;
            let first = bytes.len().min(cap - at);
            self.rbuf[at..at + first].copy_from_slice(&bytes[..first]);
            self.rbuf[..bytes.len() - first].copy_from_slice(&bytes[first..]);
            let fresh = self.r_have.insert(start..end);
            self.stats.stream_bytes_duplicate += (end - start) - fresh;
        } else {
            self.stats.stream_bytes_duplicate += u64::from(head.len);
        }
        true
    }

    fn on_ack(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok((head, ranges)) = AckHead::parse(body) else {
            return false;
        };
        let never_sent = if head.largest >= self.next_number {
            Some(head.largest)
        } else {
            self.acked_skipped(ranges.clone())
        };
        if let Some(n) = never_sent {
            self.fail(ConnError::OptimisticAck(n), Some(close_code::PROTOCOL));
            return true;
        }
        self.note_number(now, number, false);
        self.peer_window = self.peer_window.max(head.window);

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
                    self.stats.packets_spurious += 1;
                } else {
                    self.in_flight -= u64::from(s.size);
                }
                let end = s.offset + u64::from(s.len);
                if s.len > 0 {
                    self.s_acked.insert(s.offset..end);
                    self.resend.remove(s.offset..end);
                }
                if s.fin {
                    self.fin_acked = true;
                    self.fin_pending = false;
                }
                self.delivered += u64::from(s.size);
                acked_bytes += u64::from(s.size);
                if newest.is_none_or(|n| s.number > n.number) {
                    newest = Some(s);
                }
            }
        }
        // Release the acknowledged prefix of the send buffer.
        while let Some(r) = self.s_acked.first() {
            if r.start > self.s_floor {
                break;
            }
            self.s_floor = self.s_floor.max(r.end);
            self.s_acked.remove(r);
        }
        self.resend.remove(0..self.s_floor);
        let Some(newest) = newest else {
            self.pop_settled();
            return true;
        };
        self.last_progress = now;
        self.largest_acked = Some(self.largest_acked.map_or(head.largest, |l| l.max(head.largest)));
        if newest.number == head.largest {
            let ack_delay = Duration::from_micros(u64::from(head.delay_us)).min(self.cfg.max_ack_delay);
            let sample = now.saturating_duration_since(newest.time);
            self.update_rtt(sample, ack_delay);
        }
        self.pto_count = 0;
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let interval = newest
            .time
            .saturating_duration_since(newest.first_sent_time)
            .max(now.saturating_duration_since(newest.delivered_time));
        self.delivered_time = now;
        self.first_sent_time = newest.time;
        let rate = RateSample {
            delivered: self.delivered - newest.delivered,
            interval,
            rtt: now.saturating_duration_since(newest.time),
            prior_delivered: newest.delivered,
            app_limited: newest.app_limited,
        };
        self.detect_lost(now);
        self.cc
            .on_ack(now, &rate, self.delivered, acked_bytes, self.in_flight);
        self.pop_settled();
        true
    }

    /// A skipped packet number the ranges cover, if any.
    fn acked_skipped(&self, ranges: AckRanges<'_>) -> Option<u64> {
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

    fn update_rtt(&mut self, sample: Duration, ack_delay: Duration) {
        self.latest_rtt = sample;
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                let adjusted = if sample > ack_delay {
                    sample - ack_delay
                } else {
                    sample
                };
                let diff = srtt.abs_diff(adjusted);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + adjusted) / 8);
            }
        }
    }

    fn loss_delay(&self) -> Duration {
        let rtt = self.srtt.unwrap_or(INITIAL_RTT).max(self.latest_rtt);
        (rtt * 9 / 8).max(Duration::from_millis(1))
    }

    /// Declares lost every packet in flight that three later ones
    /// overtook or that is a loss delay older than an acknowledged one.
    fn detect_lost(&mut self, now: Instant) {
        let Some(largest) = self.largest_acked else {
            return;
        };
        let delay = self.loss_delay();
        self.loss_time = None;
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
                self.declare_lost(i);
            } else {
                let at = s.time + delay;
                self.loss_time = Some(self.loss_time.map_or(at, |t| t.min(at)));
            }
        }
    }

    fn declare_lost(&mut self, i: usize) {
        let s = self.sent[i];
        self.sent[i].lost = true;
        self.in_flight -= u64::from(s.size);
        self.stats.packets_lost += 1;
        self.cc.on_loss(u64::from(s.size));
        let end = s.offset + u64::from(s.len);
        if s.len > 0 && end > self.s_floor {
            self.resend.insert(s.offset.max(self.s_floor)..end);
        }
        if s.fin && !self.fin_acked {
            self.fin_pending = true;
        }
    }

    fn pop_settled(&mut self) {
        while self.sent.front().is_some_and(|s| s.acked || s.lost) {
            self.sent.pop_front();
        }
    }

    // --------------------------------------------------------------- timers

    fn pto_deadline(&self) -> Option<Instant> {
        if self.in_flight == 0 {
            return None;
        }
        let srtt = self.srtt.unwrap_or(INITIAL_RTT);
        let pto = srtt + (self.rttvar * 4).max(Duration::from_millis(1)) + self.cfg.max_ack_delay;
        Some(self.last_eliciting_sent? + pto * (1u32 << self.pto_count.min(6)))
    }

    fn has_data(&self) -> bool {
        !self.resend.is_empty()
            || (self.next_new < self.s_end && self.next_new < self.peer_window)
            || (self.fin_pending && self.next_new == self.s_end)
    }

    fn can_send_data(&self) -> bool {
        self.state == State::Open
            && (self.probes > 0 || self.in_flight + self.datagram as u64 <= self.cc.window())
    }

    /// The next instant `handle_timeout` must run, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.close_to_send.is_some() {
            // The CLOSE is due now, whatever else is pending.
            return Some(self.last_sent.min(self.last_recv));
        }
        if self.state == State::Closed {
            return None;
        }
        let mut t = self.last_recv + self.cfg.idle_timeout;
        if let Some(at) = self.unreachable_at {
            t = t.min(at + self.unreachable_grace());
        }
        let mut min = |x: Option<Instant>| {
            if let Some(x) = x {
                t = t.min(x);
            }
        };
        match self.state {
            State::Opening | State::Accepting => {
                min(Some(self.open_resend_at));
                min(Some(self.opened_at + self.cfg.connect_timeout));
            }
            _ => {}
        }
        if self.state == State::Open {
            // Only an open connection sends keepalives: before the client's
            // first packet nothing may be sent, and a keepalive deadline
            // that nothing moves would make the driver spin.
            min(Some(self.last_sent + self.cfg.keepalive));
        }
        if self.in_flight > 0 || !self.resend.is_empty() {
            min(Some(self.last_progress + self.cfg.idle_timeout));
        }
        min(self.ack_due);
        min(self.loss_time);
        min(self.pto_deadline());
        if self.has_data() && self.can_send_data() {
            min(Some(self.next_send_time));
        }
        Some(t)
    }

    /// Runs what is due at `now`: loss and probe timers, the idle and
    /// opening timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        if matches!(self.state, State::Opening | State::Accepting)
            && now >= self.opened_at + self.cfg.connect_timeout
        {
            self.fail(ConnError::ConnectTimeout(self.cfg.connect_timeout), None);
            return;
        }
        if now.saturating_duration_since(self.last_recv) >= self.cfg.idle_timeout {
            self.fail(ConnError::Idle(self.cfg.idle_timeout), Some(close_code::TIMEOUT));
            return;
        }
        if let Some(at) = self.unreachable_at {
            let grace = self.unreachable_grace();
            if now.saturating_duration_since(at) >= grace {
                self.unreachable_at = None;
                if !(self.send_done() && self.recv_done()) {
                    self.fail(ConnError::Unreachable(grace), None);
                    return;
                }
            }
        }
        if self.in_flight == 0 && self.resend.is_empty() {
            self.last_progress = now;
        } else if now.saturating_duration_since(self.last_progress) >= self.cfg.idle_timeout {
            self.fail(
                ConnError::Stalled(self.cfg.idle_timeout),
                Some(close_code::TIMEOUT),
            );
            return;
        }
        if self.loss_time.is_some_and(|t| now >= t) {
            self.detect_lost(now);
            self.pop_settled();
        }
        if self.pto_deadline().is_some_and(|t| now >= t) {
            self.pto_count += 1;
            self.stats.probe_timeouts += 1;
            self.cc.on_timeout();
            // Resend the oldest bytes in flight; two probes may pass the window.
            if let Some(i) = self.sent.iter().position(|s| !s.acked && !s.lost) {
                self.declare_lost(i);
                self.stats.packets_lost -= 1;
            }
            self.pop_settled();
            self.probes = 2;
            // The timer restarts from now even if nothing can be resent.
            self.last_eliciting_sent = Some(now);
        }
    }

    // --------------------------------------------------------------- output

    /// Writes the next datagram due at `now` into `buf` (at least the agreed
    /// datagram size) and returns its length, or `None` if nothing is due.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.state == State::Open && self.next_number >= self.skip_at {
            // This number is never sent: an ACK of it is an optimistic one.
            if self.skipped.len() == MAX_SKIPPED {
                self.skipped.pop_front();
            }
            self.skipped.push_back(self.next_number);
            self.next_number += 1;
            self.skip_at = self.next_number + self.skip_gap();
        }
        let mut n = self.transmit(now, buf)?;
        if let Some(p) = &self.protector {
            // The header says "tagged" already (see `header`); the tag
            // covers it and the body, and the room for it was kept.
            let tag = p.tag(self.next_number, &buf[..n]);
            buf[n..n + TAG_LEN].copy_from_slice(&tag);
            n += TAG_LEN;
        }
        self.next_number += 1;
        self.last_sent = now;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += n as u64;
        Some(n)
    }

    fn header(&self, kind: PacketType, conn: u32) -> [u8; PACKET_HEADER_LEN] {
        let h = PacketHeader {
            kind,
            conn,
            number: self.next_number,
        };
        if self.protector.is_some() {
            h.emit_tagged()
        } else {
            h.emit()
        }
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(code) = self.close_to_send.take() {
            buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Close, self.peer_id));
            buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + CLOSE_LEN].copy_from_slice(&Close { code }.emit());
            return Some(PACKET_HEADER_LEN + CLOSE_LEN);
        }
        match self.state {
            State::Closed => return None,
            State::Opening | State::Accepting if now >= self.open_resend_at => {
                // The client repeats OPEN on a timer; the server answers
                // each OPEN that reaches it once (the listener asks again
                // when a copy arrives): nothing repeats on its own.
                self.open_resend_at = if self.state == State::Opening {
                    now + OPEN_RESEND
                } else {
                    self.opened_at + self.cfg.connect_timeout
                };
                let open = Open {
                    conn: self.local_id,
                    max_datagram: self.cfg.max_datagram,
                    window: self.window_limit(),
                };
                if self.state == State::Opening {
                    buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Open, 0));
                    let req = OpenRequest {
                        open,
                        token: self.token,
                    };
                    buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + OPEN_REQUEST_LEN].copy_from_slice(&req.emit());
                    return Some(PACKET_HEADER_LEN + OPEN_REQUEST_LEN);
                }
                buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::OpenAck, self.peer_id));
                buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + OPEN_LEN].copy_from_slice(&open.emit());
                return Some(PACKET_HEADER_LEN + OPEN_LEN);
            }
            State::Opening => return None,
            _ => {}
        }
        // Two or more DATA packets unacknowledged when the driver asks what
        // to send (it asks after each batch it received) are acknowledged
        // now: holding them for more would stall a sender whose window is
        // only a few packets.
        let ack_due = self.ack_now
            || self.ack_pending >= 2
            || self.ack_due.is_some_and(|t| now >= t)
            || now.saturating_duration_since(self.last_sent) >= self.cfg.keepalive;
        if ack_due && self.state == State::Open {
            return Some(self.emit_ack(now, buf));
        }
        if self.state == State::Open && self.has_data() && self.can_send_data() {
            if now < self.next_send_time {
                return None;
            }
            return self.emit_data(now, buf);
        }
        if self.state == State::Open && !self.has_data() && self.in_flight < self.cc.window() {
            // The application (or the peer's window) holds the sender back:
            // rate samples from now on may understate the path.
            self.app_limited_until = (self.delivered + self.in_flight).max(1);
        }
        None
    }

    fn emit_ack(&mut self, now: Instant, buf: &mut [u8]) -> usize {
        self.ack_now = false;
        self.ack_due = None;
        self.ack_pending = 0;
        self.stats.acks_sent += 1;
        let window = self.window_limit();
        self.r_window_sent = window;
        buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Ack, self.peer_id));
        let mut ranges = self.pn_recv.iter_rev();
        let (largest, first, delay_us) = match (ranges.next(), self.largest_recv) {
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
        let mut at = PACKET_HEADER_LEN + ACK_HEAD_LEN;
        let room = (self.datagram - self.tag_len() - at) / ACK_RANGE_LEN;
        let mut count = 0u16;
        let mut prev_smallest = largest - first;
        for r in ranges.take(room.min(ACK_RANGES - 1)) {
            let gap = prev_smallest - r.end;
            let len = r.end - 1 - r.start;
            if gap > u64::from(u32::MAX) || len > u64::from(u32::MAX) {
                break;
            }
            buf[at..at + ACK_RANGE_LEN].copy_from_slice(&emit_ack_range(gap as u32, len as u32));
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
        buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + ACK_HEAD_LEN].copy_from_slice(&head.emit());
        at
    }

    fn emit_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let room = (self.datagram - PACKET_HEADER_LEN - DATA_HEAD_LEN - self.tag_len()) as u64;
        let mut resent = false;
        let range = loop {
            match self.resend.pop_first(room) {
                Some(r) if r.end <= self.s_floor || self.s_acked.contains(r.clone()) => continue,
                Some(r) => {
                    resent = true;
                    break r;
                }
                None => {
                    let end = self.s_end.min(self.peer_window).min(self.next_new + room);
                    break self.next_new..end.max(self.next_new);
                }
            }
        };
        let len = (range.end - range.start) as usize;
        let fin = self.fin_pending && self.fin_at == Some(range.end);
        if len == 0 && !fin {
            return None;
        }
        if !resent {
            self.next_new = range.end;
        }
        if fin {
            self.fin_pending = false;
        }
        let head = DataHead {
            offset: range.start,
            len: len as u16,
            fin,
        };
        buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Data, self.peer_id));
        let mut at = PACKET_HEADER_LEN;
        buf[at..at + DATA_HEAD_LEN].copy_from_slice(&head.emit());
        at += DATA_HEAD_LEN;
        let cap = self.sbuf.len();
        let from = (range.start % cap as u64) as usize;
        let first = len.min(cap - from);
        buf[at..at + first].copy_from_slice(&self.sbuf[from..from + first]);
        buf[at + first..at + len].copy_from_slice(&self.sbuf[..len - first]);
        let size = (at + len + self.tag_len()) as u32;

        if self.in_flight == 0 {
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        self.sent.push_back(Sent {
            number: self.next_number,
            offset: range.start,
            len: len as u16,
            fin,
            size,
            time: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
            app_limited: self.app_limited_until != 0,
            acked: false,
            lost: false,
        });
        self.in_flight += u64::from(size);
        self.last_eliciting_sent = Some(now);
        self.probes = self.probes.saturating_sub(1);
        self.stats.stream_bytes_sent += len as u64;
        if resent {
            self.stats.stream_bytes_resent += len as u64;
        }
        // Pace: the next datagram is due `size / rate` after this one, and
        // the pacer never falls more than a burst behind the clock.
        let rate = self.cc.pacing_rate().max(1);
        let gap = Duration::from_nanos((u64::from(size) * 1_000_000_000) / rate);
        let base = self
            .next_send_time
            .max(now.checked_sub(PACING_BURST).unwrap_or(now));
        self.next_send_time = base + gap;
        Some(at + len)
    }
}
