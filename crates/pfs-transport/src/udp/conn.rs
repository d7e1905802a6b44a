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

use std::time::{Duration, Instant};

use pfs_wire::datagram::{
    close_code, AckHead, Close, DataHead, Open, OpenRequest, Packet, PacketHeader, PacketType, Retry, Token,
    ACK_HEAD_LEN, ACK_RANGE_LEN, CLOSE_LEN, DATA_HEAD_LEN, MAX_DATAGRAM, MIN_DATAGRAM, OPEN_LEN,
    OPEN_REQUEST_LEN, PACKET_HEADER_LEN,
};

use super::auth::{DatagramAuth, DatagramKeys};
use super::cc::Controller;
use super::recv::RecvSide;
pub use super::recv::{RecvBudget, INITIAL_RECV_BUFFER};
use super::rtt::RttEstimator;
use super::send::SendSide;
pub use super::timer::Timer;
use super::timer::TimerTable;

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

/// How often the client sends OPEN again while unanswered (the server
/// sends OPEN_ACK once per OPEN that reaches it).
const OPEN_RESEND: Duration = Duration::from_millis(200);
/// The least time an ICMP port unreachable waits for a valid packet from
/// the peer before it ends the connection: more than two of the peer's
/// keepalives (1 s), so a forged ICMP cannot end an idle live connection.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(3);

/// What the opening exchange settles: both connection ids, the datagram
/// size both sides accept, and the listener's address token (client).
#[derive(Debug, Clone, Copy)]
struct Handshake {
    local_id: u32,
    peer_id: u32,
    /// The datagram size both sides agreed on.
    datagram: usize,
    /// Client: the address token of the listener's last RETRY, echoed in OPEN.
    token: Option<Token>,
}

/// What the idle, keepalive and unreachable timers count from.
#[derive(Debug, Clone, Copy)]
struct Liveness {
    /// When a valid datagram last arrived from the peer.
    last_recv: Instant,
    /// When this side last sent a datagram.
    last_sent: Instant,
    /// When an ICMP port unreachable arrived with no valid packet since.
    unreachable_at: Option<Instant>,
}

/// One side of one connection: the sans-I/O core of the UDP transport.
///
/// It holds no socket and reads no clock: every input carries the `now`
/// its host read, and the core answers with datagrams to send and the
/// instant it wants to be called again. Its parts: the opening exchange's
/// ids, a [`TimerTable`] keyed by [`Timer`], an [`RttEstimator`], the send
/// side (packet numbers, send ring, packets in flight, loss detection,
/// congestion control, pacing), the receive side (reassembly ring, window,
/// ACKs owed), the datagram authentication and the counters.
///
/// # Call contract
/// The host (the I/O thread in `driver.rs`, or [`super::sim`]) owns the
/// socket and the clock. `now` never goes back from one call to the next.
/// 1. Each datagram received goes to [`handle_datagram`](Self::handle_datagram)
///    (whoever sent it: the core drops what is not its own); the socket's
///    errors go to [`datagram_too_large`](Self::datagram_too_large) and
///    [`port_unreachable`](Self::port_unreachable).
/// 2. When [`poll_timeout`](Self::poll_timeout)'s instant is at or before
///    `now`, [`handle_timeout`](Self::handle_timeout) runs with that `now`
///    (calling it early does nothing).
/// 3. Then [`poll_transmit`](Self::poll_transmit), with the same `now`,
///    until it returns `None`; its datagrams go out in order (one the
///    socket refused is lost, not offered again).
/// 4. Then [`poll_timeout`](Self::poll_timeout) again: the host sleeps
///    until that instant, a datagram, or the application's next call.
///    `None` means nothing more will be sent.
///
/// The application's calls ([`write`](Self::write), [`finish`](Self::finish),
/// [`read`](Self::read), [`abort`](Self::abort)) may come between any of
/// these; after them the host runs steps 3 and 4 (a read that opened the
/// window raises [`ack_wanted`](Self::ack_wanted)).
#[derive(Debug)]
pub struct Connection {
    cfg: UdpConfig,
    state: State,
    /// The error that ended the connection, if one did.
    error: Option<ConnError>,
    /// A CLOSE with this code waits to be sent.
    close_to_send: Option<u32>,
    ids: Handshake,
    timers: TimerTable,
    rtt: RttEstimator,
    send: SendSide,
    recv: RecvSide,
    auth: DatagramAuth,
    live: Liveness,
    stats: UdpStats,
    /// An input changed what the derived timers (idle, keepalive, stall,
    /// probe, pacing, unreachable) follow from: they are re-armed once, before the
    /// table is read, not after every datagram.
    stale: bool,
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
        let mut timers = TimerTable::default();
        timers.set(Timer::OpenResend, now);
        timers.set(Timer::Connect, now + cfg.connect_timeout);
        let mut c = Self {
            cfg,
            state,
            error: None,
            close_to_send: None,
            ids: Handshake {
                local_id,
                peer_id: 0,
                datagram: usize::from(max_datagram),
                token: None,
            },
            timers,
            rtt: RttEstimator::new(),
            send: SendSide::new(
                now,
                local_id,
                cfg.send_buffer.max(1 << 16),
                u64::from(max_datagram),
                cfg.initial_window_packets,
            ),
            recv: RecvSide::new(cfg.recv_window),
            auth: DatagramAuth::default(),
            live: Liveness {
                last_recv: now,
                last_sent: now,
                unreachable_at: None,
            },
            stats: UdpStats::default(),
            stale: false,
        };
        c.arm_timers();
        c
    }

    /// Makes the choice of skipped packet numbers follow `seed` (the
    /// simulator does, for runs that repeat; a real connection keeps the
    /// secret it was made with).
    pub fn set_skip_seed(&mut self, seed: u64) {
        self.send.numbers.reseed(seed);
    }

    /// Installs datagram keys (a protected session's handshake is over):
    /// every datagram sent from now on is tagged, and once one validly
    /// tagged datagram arrived from the peer, untagged ones are dropped.
    pub fn protect(&mut self, keys: &DatagramKeys) {
        self.auth.install(keys);
    }

    /// Whether datagram keys are installed.
    pub fn is_protected(&self) -> bool {
        self.auth.is_on()
    }

    /// A client connection: its first datagram is OPEN.
    pub fn client(cfg: UdpConfig, now: Instant, local_id: u32) -> Self {
        Self::new(cfg, now, local_id, State::Opening)
    }

    /// A server connection answering the OPEN body `open`: its first
    /// datagram is OPEN_ACK.
    pub fn server(cfg: UdpConfig, now: Instant, local_id: u32, open: &Open) -> Self {
        let mut c = Self::new(cfg, now, local_id, State::Accepting);
        c.ids.peer_id = open.conn;
        c.ids.datagram = c.ids.datagram.min(usize::from(open.max_datagram));
        c.send.on_open(
            now,
            c.ids.datagram as u64,
            cfg.initial_window_packets,
            open.window,
        );
        c.recv.window_sent = c.recv.capacity() as u64;
        c
    }

    /// Counters so far.
    pub fn stats(&self) -> UdpStats {
        UdpStats {
            congested_rounds: self.send.cc.congested_rounds(),
            ..self.stats
        }
    }

    /// Smoothed RTT, if measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.smoothed()
    }

    /// The RTT estimator (smoothed, latest and lowest RTT).
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The congestion controller (bandwidth estimate, window, mode).
    pub fn controller(&self) -> &Controller {
        &self.send.cc
    }

    /// The datagram size both sides agreed on.
    pub fn datagram_size(&self) -> usize {
        self.ids.datagram
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
        self.send.stream.done()
    }

    /// Whether the peer's stream arrived whole, its end included.
    pub fn recv_done(&self) -> bool {
        self.recv.done()
    }

    /// Bytes the application may write now.
    pub fn writable(&self) -> usize {
        if self.send.stream.fin_at.is_some() || self.state == State::Closed {
            return 0;
        }
        self.send.stream.room()
    }

    /// Whether this side's stream was finished (writes are refused).
    pub fn finished(&self) -> bool {
        self.send.stream.fin_at.is_some()
    }

    /// Bytes written and not yet acknowledged.
    pub fn unacked(&self) -> u64 {
        self.send.stream.end - self.send.stream.floor
    }

    /// Copies as much of `data` as the send buffer takes; returns how much.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.writable());
        self.send.stream.write(data, n);
        self.stale = true;
        n
    }

    /// Ends this side's stream after what was written.
    pub fn finish(&mut self) {
        self.send.stream.finish();
        self.stale = true;
    }

    /// Copies received bytes, in order, into `out`.
    pub fn read(&mut self, out: &mut [u8]) -> ReadOutcome {
        // Bytes that arrived in order are delivered even after a failure.
        let ready = self.recv.ready();
        if ready == 0 {
            if self.recv.fin == Some(self.recv.read) {
                return ReadOutcome::End;
            }
            if let Some(e) = &self.error {
                return ReadOutcome::Failed(e.clone());
            }
            return ReadOutcome::Blocked;
        }
        let n = out.len().min(ready as usize);
        self.recv.read_into(out, n, self.cfg.recv_window);
        ReadOutcome::Data(n)
    }

    /// Whether a read would return something (data, end or failure).
    pub fn readable(&self) -> bool {
        self.error.is_some() || self.recv.fin == Some(self.recv.read) || self.recv.ready() > 0
    }

    /// Abandons the connection: a CLOSE goes out and everything stops.
    pub fn abort(&mut self, code: u32) {
        if self.state != State::Closed {
            self.fail(ConnError::Aborted, Some(code));
        }
    }

    /// Emits the connection's state as a `tracing` debug event (target
    /// `pfs_transport::udp::conn`), deadlines relative to `now`: the I/O
    /// thread does once a second, for debugging stalls.
    pub fn log_state(&self, now: Instant) {
        let s = &self.send;
        let until = |t: Timer| self.timers.get(t).map(|at| at.saturating_duration_since(now));
        tracing::debug!(
            local_id = self.ids.local_id,
            state = ?self.state,
            cwnd = s.cc.window(),
            in_flight = s.in_flight,
            srtt = ?self.rtt.smoothed(),
            rttvar = ?self.rtt.var(),
            min_rtt = ?self.rtt.min(),
            pto_count = s.pto_count,
            loss_time = ?until(Timer::Loss),
            pto = ?self
                .send
                .pto_deadline(&self.rtt, self.cfg.max_ack_delay)
                .map(|at| at.saturating_duration_since(now)),
            floor = s.stream.floor,
            next_new = s.stream.next_new,
            end = s.stream.end,
            fin = ?s.stream.fin_at,
            resend = ?s.stream.resend.first(),
            peer_window = s.peer_window,
            sent = s.sent_len(),
            cc_mode = ?s.cc.mode(),
            bandwidth = s.cc.bandwidth(),
            pacing_rate = s.cc.pacing_rate(),
            cc_min_rtt = ?s.cc.min_rtt(),
            base_rtt = ?s.cc.base_rtt(),
            inflight_cap = ?s.cc.inflight_cap(),
            random_loss = s.cc.random_loss(),
            rounds = s.cc.rounds(),
            queued_rounds = s.cc.queued_rounds(),
            lossy_rounds = s.cc.lossy_rounds(),
            r_read = self.recv.read,
            r_have = ?self.recv.have.first(),
            r_fin = ?self.recv.fin,
            pn_recv = ?self.recv.newest_numbers(),
            ack_pending = self.recv.ack_pending,
            stats = ?self.stats(),
            "udp connection state"
        );
    }

    /// A copy of the client's OPEN reached the listener: the OPEN_ACK goes
    /// out again (the first was lost).
    pub fn open_again(&mut self, now: Instant) {
        if self.state == State::Accepting {
            self.timers.set(Timer::OpenResend, now);
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
        self.recv.ack_now
    }

    /// The socket reported ICMP port unreachable for the peer. Anyone can
    /// forge one, so it is a hint: the connection fails only if nothing
    /// valid arrives from the peer for [`Self::unreachable_grace`] after it.
    pub fn port_unreachable(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        self.stats.unreachable_hints += 1;
        if self.live.unreachable_at.is_none() {
            self.live.unreachable_at = Some(now);
            self.stale = true;
        }
    }

    /// How long an ICMP port unreachable waits for a valid packet: three
    /// probe timeouts, at least 3 s (more than two of the peer's keepalives).
    pub fn unreachable_grace(&self) -> Duration {
        (self.rtt.pto_base(self.cfg.max_ack_delay) * 3).max(UNREACHABLE_GRACE)
    }

    fn fail(&mut self, error: ConnError, close: Option<u32>) {
        tracing::debug!(local_id = self.ids.local_id, state = ?self.state, error = %error, "udp connection ended");
        self.state = State::Closed;
        self.error = Some(error);
        self.close_to_send = close;
        // Nothing is due any more but the CLOSE, at once.
        self.timers.clear_all();
        if close.is_some() {
            self.timers
                .set(Timer::Close, self.live.last_sent.min(self.live.last_recv));
        }
    }

    /// The opening exchange is over: the opening timers stop.
    fn opened(&mut self) {
        self.state = State::Open;
        self.timers.clear(Timer::OpenResend);
        self.timers.clear(Timer::Connect);
    }

    /// Makes the connection's receive buffer count against `budget` (a
    /// listener's, shared by its connections) from now on.
    pub fn set_recv_budget(&mut self, budget: RecvBudget) {
        self.recv.set_budget(budget);
    }

    /// Bytes of receive buffer held now.
    pub fn recv_buffer(&self) -> usize {
        self.recv.capacity()
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
        let ours = header.conn == self.ids.local_id && header.number < u64::MAX;
        if self.auth.is_on() && !ours {
            // Another connection's, or random: dropped without the cost
            // of checking a tag.
            self.stats.packets_ignored += 1;
            return;
        }
        if !self.auth.accepts(header.number, packet.tag) {
            self.stats.unauthenticated += 1;
            return;
        }
        let accepted = match (header.kind, self.state) {
            (PacketType::OpenAck, State::Opening) if ours => self.on_open_ack(now, header.number, body),
            (PacketType::OpenAck, State::Open) if ours => {
                // The server missed our first packets: answer at once.
                self.recv.ack_now = true;
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
            self.live.last_recv = now;
            self.live.unreachable_at = None;
            if self.state == State::Closed && self.close_to_send.is_some() {
                // The packet broke the protocol: the CLOSE is due now.
                self.timers.set(Timer::Close, self.live.last_sent.min(now));
            }
            if self.state == State::Accepting {
                self.opened();
            }
        } else {
            self.stats.packets_ignored += 1;
        }
        self.stale = true;
    }

    /// The listener wants proof of our address: OPEN goes out again at
    /// once with its token. A later RETRY (the token expired on a slow
    /// path) replaces it; the connect timeout bounds the exchange.
    fn on_retry(&mut self, now: Instant, body: &[u8]) -> bool {
        let Ok(retry) = Retry::parse(body) else {
            return false;
        };
        if self.ids.token == Some(retry.token) {
            // A copy: the OPEN with this token is out already.
            return false;
        }
        self.ids.token = Some(retry.token);
        self.timers.set(Timer::OpenResend, now);
        true
    }

    fn on_open_ack(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok(open) = Open::parse(body) else {
            return false;
        };
        self.note_number(now, number, false);
        self.ids.peer_id = open.conn;
        self.ids.datagram = self.ids.datagram.min(usize::from(open.max_datagram));
        self.send.on_open(
            now,
            self.ids.datagram as u64,
            self.cfg.initial_window_packets,
            open.window,
        );
        self.recv.window_sent = self.recv.window_limit();
        self.opened();
        // Acknowledge at once: the server learns the path is open.
        self.recv.ack_now = true;
        true
    }

    /// Records a received packet number; false if it was seen already.
    fn note_number(&mut self, now: Instant, number: u64, eliciting: bool) -> bool {
        let ack_end = now + self.cfg.max_ack_delay;
        self.recv
            .note_number(now, number, eliciting, &mut self.timers, ack_end)
    }

    fn on_data(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok((head, bytes)) = DataHead::parse(body) else {
            return false;
        };
        if let Err(why) = self.recv.check_data(&head) {
            self.fail(ConnError::Protocol(why), Some(close_code::PROTOCOL));
            return true;
        }
        if !self.recv.has_room_for(&head) {
            return false;
        }
        if !self.note_number(now, number, true) {
            self.stats.stream_bytes_duplicate += u64::from(head.len);
            return true;
        }
        self.stats.stream_bytes_duplicate += self.recv.store(&head, bytes);
        true
    }

    fn on_ack(&mut self, now: Instant, number: u64, body: &[u8]) -> bool {
        let Ok((head, ranges)) = AckHead::parse(body) else {
            return false;
        };
        if let Some(n) = self.send.numbers.never_sent(head.largest, ranges.clone()) {
            self.fail(ConnError::OptimisticAck(n), Some(close_code::PROTOCOL));
            return true;
        }
        self.note_number(now, number, false);
        self.send.peer_window = self.send.peer_window.max(head.window);
        let (newest, acked_bytes) = self.send.on_acked(ranges, &mut self.stats);
        let Some(newest) = newest else {
            self.send.pop_settled();
            return true;
        };
        let rate = self.send.on_progress(now, &newest, head.largest);
        if newest.number == head.largest {
            let ack_delay = Duration::from_micros(u64::from(head.delay_us)).min(self.cfg.max_ack_delay);
            self.rtt.update(SendSide::rtt_sample(now, &newest), ack_delay);
        }
        self.detect_lost(now);
        self.send.on_ack_cc(now, &rate, acked_bytes);
        self.send.pop_settled();
        true
    }

    /// Declares lost what the ACKs so far show lost, and arms the loss
    /// timer for the next packet in flight to become old enough.
    fn detect_lost(&mut self, now: Instant) {
        let delay = self.rtt.loss_delay();
        let at = self.send.detect_lost(now, delay, &mut self.stats);
        self.timers.put(Timer::Loss, at);
    }

    // --------------------------------------------------------------- timers

    /// Re-arms the timers whose deadlines follow from the state rather
    /// than from one event (the idle, keepalive, stall, probe, pacing and
    /// unreachable timers) after an input changed them; the others are set
    /// where their event happens.
    fn arm_timers(&mut self) {
        if self.state == State::Closed {
            return;
        }
        let open = self.state == State::Open;
        let cfg = &self.cfg;
        let t = &mut self.timers;
        t.set(Timer::Idle, self.live.last_recv + cfg.idle_timeout);
        // Only an open connection sends keepalives: before the client's
        // first packet nothing may be sent, and a keepalive deadline that
        // nothing moves would make the host spin.
        t.put(
            Timer::Keepalive,
            open.then(|| self.live.last_sent + cfg.keepalive),
        );
        t.put(
            Timer::Stall,
            self.send
                .busy()
                .then(|| self.send.last_progress + cfg.idle_timeout),
        );
        t.put(Timer::Pto, self.send.pto_deadline(&self.rtt, cfg.max_ack_delay));
        let pacing = open && self.send.has_data() && self.send.window_allows(self.ids.datagram);
        t.put(Timer::Pacing, pacing.then_some(self.send.next_send_time));
        let unreachable = self.live.unreachable_at.map(|at| at + self.unreachable_grace());
        self.timers.put(Timer::Unreachable, unreachable);
    }

    /// Re-arms the derived timers if an input changed them.
    fn refresh_timers(&mut self) {
        if self.stale {
            self.stale = false;
            self.arm_timers();
        }
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) must run
    /// (the earliest armed timer), or `None` once nothing more will be sent.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.next_timer().map(|(_, at)| at)
    }

    /// The earliest armed timer and its deadline.
    #[must_use]
    pub fn next_timer(&mut self) -> Option<(Timer, Instant)> {
        self.refresh_timers();
        self.timers.next()
    }

    /// Runs what is due at `now`: each expired timer, in the order of
    /// [`Timer`], until one ends the connection.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == State::Closed {
            return;
        }
        if !self.send.busy() {
            // Nothing in flight: the stall clock runs from the next send.
            self.send.last_progress = now;
        }
        self.stale = false;
        self.arm_timers();
        for timer in Timer::ALL {
            if self.state == State::Closed {
                return;
            }
            if self.timers.expired(timer, now) {
                self.on_timer(timer, now);
                self.arm_timers();
            }
        }
        self.arm_timers();
    }

    /// Handles one expired timer.
    fn on_timer(&mut self, timer: Timer, now: Instant) {
        match timer {
            Timer::Connect => self.fail(ConnError::ConnectTimeout(self.cfg.connect_timeout), None),
            Timer::Idle => self.fail(ConnError::Idle(self.cfg.idle_timeout), Some(close_code::TIMEOUT)),
            Timer::Unreachable => {
                let grace = self.unreachable_grace();
                self.live.unreachable_at = None;
                if !(self.send_done() && self.recv_done()) {
                    self.fail(ConnError::Unreachable(grace), None);
                }
            }
            Timer::Stall => self.fail(
                ConnError::Stalled(self.cfg.idle_timeout),
                Some(close_code::TIMEOUT),
            ),
            Timer::Loss => {
                self.detect_lost(now);
                self.send.pop_settled();
            }
            Timer::Pto => {
                tracing::debug!(
                    local_id = self.ids.local_id,
                    pto_count = self.send.pto_count + 1,
                    in_flight = self.send.in_flight,
                    srtt = ?self.rtt.smoothed(),
                    "udp probe timeout"
                );
                self.send.on_pto(now, &mut self.stats);
            }
            // What these are due for is a datagram: `poll_transmit` sends it.
            Timer::Close | Timer::OpenResend | Timer::Ack | Timer::Keepalive | Timer::Pacing => {}
        }
    }

    // --------------------------------------------------------------- output

    /// Writes the next datagram due at `now` into `buf` (at least the agreed
    /// datagram size) and returns its length, or `None` if nothing is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.state == State::Open {
            self.send.numbers.skip_if_due();
        }
        let n = self.transmit(now, buf)?;
        let number = self.send.numbers.next();
        let n = self.auth.seal(number, buf, n);
        self.send.numbers.advance();
        self.live.last_sent = now;
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += n as u64;
        self.stale = true;
        Some(n)
    }

    fn header(&self, kind: PacketType, conn: u32) -> [u8; PACKET_HEADER_LEN] {
        let h = PacketHeader {
            kind,
            conn,
            number: self.send.numbers.next(),
        };
        if self.auth.is_on() {
            h.emit_tagged()
        } else {
            h.emit()
        }
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(code) = self.close_to_send.take() {
            self.timers.clear(Timer::Close);
            buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Close, self.ids.peer_id));
            buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + CLOSE_LEN].copy_from_slice(&Close { code }.emit());
            return Some(PACKET_HEADER_LEN + CLOSE_LEN);
        }
        match self.state {
            State::Closed => return None,
            State::Opening | State::Accepting if self.timers.expired(Timer::OpenResend, now) => {
                return Some(self.emit_open(now, buf));
            }
            State::Opening => return None,
            _ => {}
        }
        if self.state != State::Open {
            return None;
        }
        // Two or more DATA packets unacknowledged when the host asks what
        // to send (it asks after each batch it received) are acknowledged
        // now: holding them for more would stall a sender whose window is
        // only a few packets.
        let ack_due = self.recv.ack_now
            || self.recv.ack_pending >= 2
            || self.timers.expired(Timer::Ack, now)
            || now.saturating_duration_since(self.live.last_sent) >= self.cfg.keepalive;
        if ack_due {
            return Some(self.emit_ack(now, buf));
        }
        if self.send.has_data() && self.send.window_allows(self.ids.datagram) {
            if now < self.send.next_send_time {
                return None;
            }
            return self.emit_data(now, buf);
        }
        self.send.note_app_limited();
        None
    }

    /// OPEN (client) or OPEN_ACK (server). The client repeats OPEN on a
    /// timer; the server answers each OPEN that reaches it once (the
    /// listener asks again when a copy arrives): nothing repeats on its own.
    fn emit_open(&mut self, now: Instant, buf: &mut [u8]) -> usize {
        let open = Open {
            conn: self.ids.local_id,
            max_datagram: self.cfg.max_datagram,
            window: self.recv.window_limit(),
        };
        if self.state == State::Opening {
            self.timers.set(Timer::OpenResend, now + OPEN_RESEND);
            buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Open, 0));
            let req = OpenRequest {
                open,
                token: self.ids.token,
            };
            buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + OPEN_REQUEST_LEN].copy_from_slice(&req.emit());
            return PACKET_HEADER_LEN + OPEN_REQUEST_LEN;
        }
        let connect_deadline = self.timers.get(Timer::Connect);
        self.timers.put(Timer::OpenResend, connect_deadline);
        buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::OpenAck, self.ids.peer_id));
        buf[PACKET_HEADER_LEN..PACKET_HEADER_LEN + OPEN_LEN].copy_from_slice(&open.emit());
        PACKET_HEADER_LEN + OPEN_LEN
    }

    fn emit_ack(&mut self, now: Instant, buf: &mut [u8]) -> usize {
        self.timers.clear(Timer::Ack);
        self.stats.acks_sent += 1;
        buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Ack, self.ids.peer_id));
        let at = PACKET_HEADER_LEN + ACK_HEAD_LEN;
        let room = (self.ids.datagram - self.auth.tag_len() - at) / ACK_RANGE_LEN;
        PACKET_HEADER_LEN + self.recv.emit_ack(now, &mut buf[PACKET_HEADER_LEN..], room)
    }

    fn emit_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let tag_len = self.auth.tag_len();
        let room = (self.ids.datagram - PACKET_HEADER_LEN - DATA_HEAD_LEN - tag_len) as u64;
        let (range, resent, fin) = self.send.next_chunk(room)?;
        let len = (range.end - range.start) as usize;
        let head = DataHead {
            offset: range.start,
            len: len as u16,
            fin,
        };
        buf[..PACKET_HEADER_LEN].copy_from_slice(&self.header(PacketType::Data, self.ids.peer_id));
        let at = PACKET_HEADER_LEN + DATA_HEAD_LEN;
        buf[PACKET_HEADER_LEN..at].copy_from_slice(&head.emit());
        self.send.copy(range.clone(), &mut buf[at..at + len]);
        let size = (at + len + tag_len) as u32;
        let number = self.send.numbers.next();
        self.send
            .on_sent(now, number, range, fin, size, resent, &mut self.stats);
        Some(at + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The deadline of `t` in `c`'s table, derived timers re-armed first.
    fn deadline(c: &mut Connection, t: Timer) -> Option<Instant> {
        c.refresh_timers();
        c.timers.get(t)
    }

    fn open_body(conn: u32) -> Open {
        Open {
            conn,
            max_datagram: 1472,
            window: 1 << 20,
        }
    }

    /// A client and a server past the opening exchange, at `t0`.
    fn pair(cfg: UdpConfig, t0: Instant) -> (Connection, Connection) {
        let mut out = vec![0u8; 2048];
        let mut client = Connection::client(cfg, t0, 1);
        let mut server = Connection::server(cfg, t0, 2, &open_body(1));
        let n = client.poll_transmit(t0, &mut out).expect("OPEN");
        assert!(n > 0);
        let n = server.poll_transmit(t0, &mut out).expect("OPEN_ACK");
        client.handle_datagram(t0, &out[..n]);
        let n = client.poll_transmit(t0, &mut out).expect("ACK of OPEN_ACK");
        server.handle_datagram(t0, &out[..n]);
        assert_eq!(client.state, State::Open);
        assert_eq!(server.state, State::Open);
        (client, server)
    }

    /// Every datagram `from` has due at `now`.
    fn drain(from: &mut Connection, now: Instant) -> Vec<Vec<u8>> {
        let mut out = vec![0u8; 2048];
        let mut all = Vec::new();
        while let Some(n) = from.poll_transmit(now, &mut out) {
            all.push(out[..n].to_vec());
        }
        all
    }

    fn kinds(datagrams: &[Vec<u8>]) -> Vec<PacketType> {
        datagrams
            .iter()
            .map(|d| PacketHeader::parse(d).unwrap().0.kind)
            .collect()
    }

    #[test]
    fn poll_timeout_is_the_earliest_armed_timer() {
        let t0 = Instant::now();
        let cfg = UdpConfig::default();
        let mut client = Connection::client(cfg, t0, 1);
        // OPEN is due at once.
        assert_eq!(client.next_timer(), Some((Timer::OpenResend, t0)));
        let (mut client, _server) = pair(cfg, t0);
        assert_eq!(client.next_timer(), Some((Timer::Keepalive, t0 + cfg.keepalive)));
        assert_eq!(deadline(&mut client, Timer::Idle), Some(t0 + cfg.idle_timeout));
        assert_eq!(client.timers.get(Timer::Connect), None);
        // Data written: the pacer's timer is the earliest.
        client.write(&[1; 10_000]);
        assert_eq!(client.next_timer(), Some((Timer::Pacing, t0)));
        let sent = drain(&mut client, t0);
        assert!(!sent.is_empty());
        let (timer, at) = client.next_timer().unwrap();
        assert_eq!(client.poll_timeout(), Some(at));
        for t in Timer::ALL {
            if let Some(other) = client.timers.get(t) {
                assert!(at <= other, "{timer:?} at {at:?} is after {t:?} at {other:?}");
            }
        }
        assert!(deadline(&mut client, Timer::Pto).is_some());
        assert!(deadline(&mut client, Timer::Stall).is_some());
    }

    /// Sends what `from` has due, stepping time along its pacing timer,
    /// until `count` DATA packets went out; returns them.
    fn send_paced(from: &mut Connection, mut now: Instant, count: usize) -> Vec<Vec<u8>> {
        let mut sent = drain(from, now);
        while sent.len() < count {
            let (timer, at) = from.next_timer().unwrap();
            assert_eq!(timer, Timer::Pacing);
            now = at;
            from.handle_timeout(now);
            sent.extend(drain(from, now));
        }
        sent
    }

    #[test]
    fn each_timer_kind_is_handled_when_it_fires() {
        let cfg = UdpConfig::default();
        let t0 = Instant::now();
        let mut out = vec![0u8; 2048];

        // OpenResend: OPEN goes out again.
        let mut client = Connection::client(cfg, t0, 1);
        assert!(client.poll_transmit(t0, &mut out).is_some());
        assert!(client.poll_transmit(t0, &mut out).is_none());
        let at = client.timers.get(Timer::OpenResend).unwrap();
        assert_eq!(at, t0 + OPEN_RESEND);
        client.handle_timeout(at);
        assert_eq!(kinds(&drain(&mut client, at)), [PacketType::Open]);

        // Connect: the opening exchange times out.
        let at = client.timers.get(Timer::Connect).unwrap();
        client.handle_timeout(at);
        assert_eq!(
            client.error(),
            Some(&ConnError::ConnectTimeout(cfg.connect_timeout))
        );
        assert_eq!(client.poll_timeout(), None);

        // Keepalive: an ACK after a quiet interval (both sides).
        let (mut client, mut server) = pair(cfg, t0);
        let at = deadline(&mut client, Timer::Keepalive).unwrap();
        client.handle_timeout(at);
        let keepalive = drain(&mut client, at);
        assert_eq!(kinds(&keepalive), [PacketType::Ack]);
        assert_eq!(deadline(&mut client, Timer::Keepalive), Some(at + cfg.keepalive));
        server.handle_timeout(at);
        assert_eq!(kinds(&drain(&mut server, at)), [PacketType::Ack]);
        server.handle_datagram(at, &keepalive[0]);

        // Pacing: DATA goes when the pacer lets it. (Before the first RTT
        // sample the rate is ~3 windows per millisecond: the window, not
        // the pacer, holds the sender back; here the pacer is behind.)
        let paced = at + 5 * MS;
        client.send.next_send_time = paced;
        client.write(&[7; 2000]);
        assert_eq!(client.next_timer(), Some((Timer::Pacing, paced)));
        assert!(client.poll_transmit(at, &mut out).is_none());
        client.handle_timeout(paced);
        let sent = drain(&mut client, paced);
        assert!(!sent.is_empty());
        assert!(kinds(&sent).iter().all(|k| *k == PacketType::Data));
        let at = paced;

        // Ack: one DATA packet alone is acknowledged after the ACK delay.
        server.handle_datagram(at, &sent[0]);
        assert!(drain(&mut server, at).is_empty());
        let due = server.timers.get(Timer::Ack).unwrap();
        assert_eq!(due, at + cfg.max_ack_delay);
        server.handle_timeout(due);
        assert_eq!(kinds(&drain(&mut server, due)), [PacketType::Ack]);
        assert_eq!(server.timers.get(Timer::Ack), None);

        // Pto: no ACK comes back, the oldest bytes go out again.
        let pto = deadline(&mut client, Timer::Pto).unwrap();
        client.handle_timeout(pto);
        assert_eq!(client.stats().probe_timeouts, 1);
        assert_eq!(client.stats().stream_bytes_resent, 0);
        let again = drain(&mut client, pto);
        assert!(kinds(&again).contains(&PacketType::Data));
        assert!(client.stats().stream_bytes_resent > 0);

        // Loss: an ACK of a later packet leaves an earlier one in flight;
        // once it is a loss delay old it is lost.
        let (mut client, mut server) = pair(cfg, t0);
        client.write(&[3; 3000]);
        let sent = send_paced(&mut client, t0, 2);
        let t1 = t0 + 50 * MS;
        server.handle_datagram(t1, &sent[1]);
        let acks = drain(&mut server, t1);
        assert!(!acks.is_empty(), "a gap is acknowledged at once");
        let t2 = t0 + 100 * MS;
        for a in &acks {
            client.handle_datagram(t2, a);
        }
        let loss = client
            .timers
            .get(Timer::Loss)
            .expect("the first packet waits for the loss delay");
        assert!(loss > t2);
        assert_eq!(client.stats().packets_lost, 0);
        client.handle_timeout(loss);
        assert_eq!(client.stats().packets_lost, 1);
        assert_eq!(client.timers.get(Timer::Loss), None);

        // Stall: the peer answers (keepalives) but never acknowledges the
        // bytes in flight (every DATA packet is lost on the way).
        let (mut client, mut server) = pair(cfg, t0);
        client.write(&[1; 1000]);
        let mut now = t0;
        let mut closing = false;
        for _ in 0..10_000 {
            let _lost = drain(&mut client, now);
            for d in drain(&mut server, now) {
                client.handle_datagram(now, &d);
            }
            if client.error().is_some() {
                break;
            }
            let next = [client.poll_timeout(), server.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap();
            now = now.max(next);
            client.handle_timeout(now);
            server.handle_timeout(now);
            if client.error().is_some() {
                // Close: a CLOSE is due at once, then nothing.
                closing = client
                    .next_timer()
                    .is_some_and(|(t, at)| t == Timer::Close && at <= now);
                assert_eq!(kinds(&drain(&mut client, now)), [PacketType::Close]);
                assert_eq!(client.poll_timeout(), None);
                break;
            }
        }
        assert_eq!(client.error(), Some(&ConnError::Stalled(cfg.idle_timeout)));
        assert_eq!(now, t0 + cfg.idle_timeout);
        assert!(closing);

        // Idle: nothing from the peer.
        let (mut client, _server) = pair(cfg, t0);
        let idle = deadline(&mut client, Timer::Idle).unwrap();
        client.handle_timeout(idle);
        assert_eq!(client.error(), Some(&ConnError::Idle(cfg.idle_timeout)));

        // Unreachable: an ICMP hint and nothing valid for the grace period.
        let (mut client, _server) = pair(cfg, t0);
        client.port_unreachable(t0);
        let grace = client.unreachable_grace();
        assert_eq!(deadline(&mut client, Timer::Unreachable), Some(t0 + grace));
        client.handle_timeout(t0 + grace);
        assert_eq!(client.error(), Some(&ConnError::Unreachable(grace)));
    }

    /// Records the events emitted while it is the thread's subscriber:
    /// each event's fields, by name, as their `Debug` text.
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<Event>>>);

    /// One event's fields: name, `Debug` text.
    type Event = Vec<(String, String)>;

    struct Fields<'a>(&'a mut Vec<(String, String)>);

    impl tracing::field::Visit for Fields<'_> {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0.push((field.name().to_string(), format!("{value:?}")));
        }
    }

    impl tracing::Subscriber for Recorder {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut fields = Vec::new();
            event.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push(fields);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn the_state_is_a_debug_event_with_deadlines_relative_to_now() {
        let cfg = UdpConfig::default();
        let t0 = Instant::now();
        let events = std::sync::Arc::default();
        let recorder = Recorder(std::sync::Arc::clone(&events));
        // tracing caches each callsite's interest. With one dispatcher alive
        // it asks the registering thread's own default, so another test's
        // thread registering "udp connection ended" now would cache "never"
        // for everyone. A second dispatcher makes it ask every dispatcher.
        let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        tracing::subscriber::with_default(recorder, || {
            // Callsites registered before this recorder existed.
            tracing::callsite::rebuild_interest_cache();
            let (mut client, _server) = pair(cfg, t0);
            client.write(&[1; 1000]);
            let _ = drain(&mut client, t0);
            let pto = deadline(&mut client, Timer::Pto).unwrap();
            client.log_state(t0);
            client.abort(close_code::ABORT);
            let events = events.lock().unwrap();
            let state = events
                .iter()
                .find(|e| {
                    e.iter()
                        .any(|(k, v)| k == "message" && v == "udp connection state")
                })
                .expect("a state event");
            let field = |name: &str| state.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            for name in [
                "cwnd",
                "srtt",
                "in_flight",
                "pto_count",
                "loss_time",
                "pto",
                "bandwidth",
            ] {
                assert!(field(name).is_some(), "no {name} in {state:?}");
            }
            assert_eq!(field("in_flight").unwrap(), client.send.in_flight.to_string());
            assert_eq!(field("pto").unwrap(), format!("{:?}", Some(pto - t0)));
            assert_eq!(field("loss_time").unwrap(), "None");
            assert!(events.iter().any(|e| e
                .iter()
                .any(|(k, v)| k == "message" && v == "udp connection ended")));
        });
    }
}
