//! Runs a [`Connection`] over a real UDP socket: one I/O thread per
//! connection owns the socket and the clock, and the application's
//! `read`/`write` calls meet it at the connection (a mutex and one
//! condition variable). The thread is what makes the transport behave
//! like TCP's kernel half: ACKs, resends and keepalives go out while the
//! application computes, and after the application drops its end the
//! thread stays until the last written byte is acknowledged (or the peer
//! times out), so closing never loses data.
//!
//! Batching: each turn the thread takes every datagram the core has due
//! (up to [`BATCH`]) and sends them with one `sendmmsg`, runs of
//! full-size datagrams as one GSO message each; it receives with
//! `recvmmsg` into 64 KiB buffers, which GRO may fill with many
//! datagrams. Where the kernel or the path refuses GSO or GRO, the
//! thread falls back to one datagram per message and says so once.
//!
//! Opening: the client sends OPEN to the listener's port and gets a
//! RETRY with an address token (the listener keeps nothing); it sends
//! OPEN again with the token, and only then does the listener make a new
//! socket on a new port, connected to the client; the OPEN_ACK comes
//! from there and the client connects its socket to that port. Each connection thus has its own socket and the kernel does the
//! demultiplexing.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, IoSlice};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pfs_sys::udp::{
    enable_gro, gso_supported, recv_batch, send_batch, set_dont_fragment, RecvMeta, RecvScratch, SendMsg,
    SendScratch, MAX_GSO_BYTES, MAX_GSO_SEGMENTS,
};
use pfs_wire::datagram::{
    close_code, Close, Open, OpenRequest, PacketHeader, PacketType, Retry, PACKET_HEADER_LEN, TOKEN_LEN,
};
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::net::SendFlags;

use super::admit::{Admission, MAX_CONNECTIONS, MAX_PER_SOURCE, RECV_BUDGET};
use super::conn::{Connection, ReadOutcome, RecvBudget, UdpConfig, UdpStats};
use crate::{Listener, Transport, TransportError};

/// Datagrams one turn of the I/O thread may send.
pub const BATCH: usize = 256;
/// Receive buffers per `recvmmsg`, at most. A connection starts with
/// one and doubles them each time a batch fills all it has, so a
/// connection that carries little holds 64 KiB, not 1 MiB.
const RECV_BUFFERS: usize = 16;
/// Size of one receive buffer: room for a GRO train.
const RECV_BUFFER: usize = 65536;
/// Socket buffers requested (forced above `rmem_max` when running as root).
const SOCKET_BUFFER: usize = 16 << 20;
/// What the application and the I/O thread share.
#[derive(Debug)]
struct Shared {
    conn: Mutex<Connection>,
    /// Readers and writers wait here; the I/O thread notifies after input.
    changed: Condvar,
    /// Wakes the I/O thread (an eventfd it polls beside the socket).
    wake: OwnedFd,
    /// The application dropped its end.
    dropped: AtomicBool,
    /// Application threads waiting on `changed` (changed under `conn`'s
    /// lock): the I/O thread notifies only when someone waits, which
    /// spares a futex call per received batch.
    waiters: AtomicU32,
    /// The I/O thread's id (0 until it runs), for its CPU time.
    io_tid: std::sync::atomic::AtomicI32,
    /// The I/O thread's CPU time when it ended (its `/proc` entry goes with it).
    io_final: Mutex<Option<pfs_sys::Usage>>,
    /// Whether GSO and GRO are in use (for the report).
    gso: AtomicBool,
    gro: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic in another holder leaves the connection as it was; go on.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes waiting application threads, if any (call with `conn` locked).
    fn notify(&self) {
        if self.waiters.load(Ordering::Relaxed) > 0 {
            self.changed.notify_all();
        }
    }

    fn wake_io(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// One UDP connection, a byte stream each way.
#[derive(Debug)]
pub struct UdpTransport {
    shared: Arc<Shared>,
    peer: String,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// What a connection did, for reports: the core's counters, the path's
/// measurements and which offloads were used.
#[derive(Debug, Clone, Copy)]
pub struct UdpReport {
    /// The core's counters.
    pub stats: UdpStats,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// Bottleneck bandwidth estimate, bytes/s.
    pub bandwidth: u64,
    /// Datagram size in use.
    pub datagram: usize,
    /// Whether sends used GSO.
    pub gso: bool,
    /// Whether receives used GRO.
    pub gro: bool,
    /// Whether datagram keys were installed (a protected session): the
    /// datagrams are tagged (`docs/wire.md` §14.7).
    pub tagged: bool,
}

fn random_id() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(1);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() as u32).max(1)
}

fn new_socket(local: SocketAddr) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(local)?;
    let fd = sock.as_fd();
    pfs_sys::udp::set_buffer(fd, true, SOCKET_BUFFER);
    pfs_sys::udp::set_buffer(fd, false, SOCKET_BUFFER);
    set_dont_fragment(fd, local.is_ipv6())?;
    Ok(sock)
}

fn conn_error(e: &super::conn::ConnError) -> io::Error {
    use super::conn::ConnError as E;
    let kind = match e {
        // A connection that failed is never `TimedOut`: callers read that
        // as "the read deadline passed, try again", and a dead connection
        // retried in a deadline loop is a busy loop. `TimedOut` is kept for
        // a read or write deadline that passed on a live connection.
        E::Idle(_) | E::ConnectTimeout(_) | E::Stalled(_) => io::ErrorKind::ConnectionAborted,
        E::TooLarge(_) => io::ErrorKind::InvalidInput,
        E::PeerClosed(_) => io::ErrorKind::ConnectionReset,
        E::Protocol(_) => io::ErrorKind::InvalidData,
        E::Aborted => io::ErrorKind::ConnectionAborted,
        E::Unreachable(_) => io::ErrorKind::ConnectionRefused,
        E::OptimisticAck(_) => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e.clone())
}

/// Whether `from` may answer an OPEN sent to `target`: the same IP (the
/// port differs: the server answers from the connection's own socket).
/// An OPEN to the unspecified address goes to this host, whose answer
/// comes from a loopback address.
fn answers_for(target: SocketAddr, from: SocketAddr) -> bool {
    let (t, f) = (target.ip().to_canonical(), from.ip().to_canonical());
    if t.is_unspecified() {
        f.is_loopback()
    } else {
        t == f
    }
}

impl UdpTransport {
    /// Connects to `addr` (`host:port`): the opening exchange runs here,
    /// then the connection's I/O thread starts.
    pub fn connect(addr: &str, cfg: &UdpConfig) -> Result<Self, TransportError> {
        let target = crate::resolve(addr)?[0];
        Self::connect_to(target, cfg).map_err(|source| TransportError::Connect {
            addr: addr.into(),
            source,
        })
    }

    fn connect_to(target: SocketAddr, cfg: &UdpConfig) -> io::Result<Self> {
        let local: SocketAddr = if target.is_ipv6() {
            "[::]:0".parse().map_err(io::Error::other)?
        } else {
            "0.0.0.0:0".parse().map_err(io::Error::other)?
        };
        let sock = new_socket(local)?;
        let mut conn = Connection::client(*cfg, Instant::now(), random_id());
        let mut buf = vec![0u8; usize::from(cfg.max_datagram).max(2048)];
        let mut rbuf = vec![0u8; 65536];
        let server = loop {
            let now = Instant::now();
            conn.handle_timeout(now);
            if let Some(e) = conn.error() {
                return Err(conn_error(e));
            }
            while let Some(n) = conn.poll_transmit(now, &mut buf) {
                // A refused send is like a lost OPEN: the next one retries.
                let _ = sock.send_to(&buf[..n], target);
            }
            let wait = conn
                .poll_timeout()
                .map_or(Duration::from_millis(100), |t| t.saturating_duration_since(now))
                .max(Duration::from_millis(1));
            sock.set_read_timeout(Some(wait))?;
            match sock.recv_from(&mut rbuf) {
                // Only from the address the OPEN went to (its port is the
                // new connection's, §14.3): anyone else's OPEN_ACK would
                // steer our HELLO elsewhere.
                Ok((_, from)) if !answers_for(target, from) => {
                    tracing::debug!("UDP: ignored a datagram from {from} while opening to {target}");
                }
                Ok((n, from)) => {
                    conn.handle_datagram(Instant::now(), &rbuf[..n]);
                    if conn.is_established() {
                        break from;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        };
        sock.set_read_timeout(None)?;
        sock.connect(server)?;
        Self::start(sock, conn, server)
    }

    fn start(sock: UdpSocket, conn: Connection, peer: SocketAddr) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let gro = enable_gro(sock.as_fd());
        let gso = gso_supported(sock.as_fd());
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            changed: Condvar::new(),
            wake,
            dropped: AtomicBool::new(false),
            waiters: AtomicU32::new(0),
            io_tid: std::sync::atomic::AtomicI32::new(0),
            io_final: Mutex::new(None),
            gso: AtomicBool::new(gso),
            gro: AtomicBool::new(gro),
        });
        let io = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("pfs-udp-io".into())
            .spawn(move || IoThread::new(io, sock).run())?;
        Ok(Self {
            shared,
            peer: peer.to_string(),
            read_timeout: None,
            write_timeout: None,
        })
    }

    /// The connection's counters and measurements so far.
    pub fn report(&self) -> UdpReport {
        let c = self.shared.lock();
        UdpReport {
            stats: c.stats(),
            srtt: c.srtt(),
            bandwidth: c.controller().bandwidth(),
            datagram: c.datagram_size(),
            gso: self.shared.gso.load(Ordering::Relaxed),
            gro: self.shared.gro.load(Ordering::Relaxed),
            tagged: c.is_protected(),
        }
    }

    fn wait<'a>(
        &'a self,
        guard: MutexGuard<'a, Connection>,
        deadline: Option<Instant>,
    ) -> io::Result<MutexGuard<'a, Connection>> {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "timed out waiting for the UDP peer",
            ));
        }
        // Counted under the lock, so the I/O thread, which reads the count
        // under the same lock after changing the connection, cannot miss us.
        self.shared.waiters.fetch_add(1, Ordering::Relaxed);
        let guard = match left {
            None => self.shared.changed.wait(guard).unwrap_or_else(|p| p.into_inner()),
            Some(left) => {
                self.shared
                    .changed
                    .wait_timeout(guard, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        self.shared.waiters.fetch_sub(1, Ordering::Relaxed);
        Ok(guard)
    }
}

impl Transport for UdpTransport {
    fn kind(&self) -> &'static str {
        "UDP"
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let deadline = self.write_timeout.map(|t| Instant::now() + t);
        let mut c = self.shared.lock();
        loop {
            if let Some(e) = c.error() {
                return Err(conn_error(e));
            }
            if c.finished() {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "write after shutdown_write on a UDP connection",
                ));
            }
            let mut total = 0;
            for b in bufs {
                let n = c.write(b);
                total += n;
                if n < b.len() {
                    break;
                }
            }
            if total > 0 {
                drop(c);
                self.shared.wake_io();
                return Ok(total);
            }
            if bufs.iter().all(|b| b.is_empty()) {
                return Ok(0);
            }
            c = self.wait(c, deadline)?;
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.read_timeout.map(|t| Instant::now() + t);
        let mut c = self.shared.lock();
        loop {
            match c.read(buf) {
                ReadOutcome::Data(n) => {
                    let tell = c.ack_wanted();
                    drop(c);
                    if tell {
                        self.shared.wake_io();
                    }
                    return Ok(n);
                }
                ReadOutcome::End => return Ok(0),
                ReadOutcome::Failed(e) => return Err(conn_error(&e)),
                ReadOutcome::Blocked => c = self.wait(c, deadline)?,
            }
        }
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if buf.is_empty() {
            return Ok(None);
        }
        let mut c = self.shared.lock();
        match c.read(buf) {
            ReadOutcome::Data(n) => {
                let tell = c.ack_wanted();
                drop(c);
                if tell {
                    self.shared.wake_io();
                }
                Ok(Some(n))
            }
            ReadOutcome::End => Ok(Some(0)),
            ReadOutcome::Failed(e) => Err(conn_error(&e)),
            ReadOutcome::Blocked => Ok(None),
        }
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout = timeout;
        Ok(())
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout = timeout;
        Ok(())
    }

    fn udp_report(&self) -> Option<UdpReport> {
        Some(self.report())
    }

    fn protect_datagrams(&mut self, keys: &super::DatagramKeys) {
        self.shared.lock().protect(keys);
    }

    fn helper_usage(&self) -> pfs_sys::Usage {
        let done = *self.shared.io_final.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(usage) = done {
            return usage;
        }
        match self.shared.io_tid.load(Ordering::Relaxed) {
            0 => pfs_sys::Usage::default(),
            tid => pfs_sys::task_usage(tid)
                .or(*self.shared.io_final.lock().unwrap_or_else(|p| p.into_inner()))
                .unwrap_or_default(),
        }
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shared.lock().finish();
        self.shared.wake_io();
        Ok(())
    }
}

/// How long dropping a connection waits for what it wrote to be acknowledged.
const LINGER: Duration = Duration::from_secs(10);
/// How often the I/O thread emits its connection's state as a `tracing`
/// debug event ([`Connection::log_state`]).
const STATE_EVENT_EVERY: Duration = Duration::from_secs(1);

impl Drop for UdpTransport {
    fn drop(&mut self) {
        // Like close(2) on TCP with SO_LINGER: what was written is still
        // delivered. The I/O thread would go on alone, but a process that
        // exits right after (a server done with its last session) would
        // take it along, so the drop waits — until every byte written is
        // acknowledged, the connection fails, or LINGER passes.
        let deadline = Instant::now() + LINGER;
        let mut c = self.shared.lock();
        c.finish();
        self.shared.dropped.store(true, Ordering::Release);
        self.shared.wake_io();
        while c.unacked() > 0 && c.error().is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.shared.waiters.fetch_add(1, Ordering::Relaxed);
            c = self
                .shared
                .changed
                .wait_timeout(c, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            self.shared.waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The I/O thread of one connection.
struct IoThread {
    shared: Arc<Shared>,
    sock: UdpSocket,
    out: Vec<u8>,
    lens: Vec<usize>,
    pending: usize,
    sent: usize,
    send_scratch: SendScratch,
    recv_scratch: RecvScratch,
    recv_bufs: Vec<Vec<u8>>,
    recv_meta: Vec<RecvMeta>,
    slot: usize,
    gso: bool,
    gso_warned: bool,
}

impl IoThread {
    fn new(shared: Arc<Shared>, sock: UdpSocket) -> Self {
        let slot = shared.lock().datagram_size().max(1);
        let gso = shared.gso.load(Ordering::Relaxed);
        if !shared.gro.load(Ordering::Relaxed) {
            tracing::warn!("UDP: the kernel refused UDP_GRO; receiving one datagram per buffer");
        }
        Self {
            shared,
            sock,
            out: vec![0; BATCH * slot],
            lens: vec![0; BATCH],
            pending: 0,
            sent: 0,
            send_scratch: SendScratch::default(),
            recv_scratch: RecvScratch::default(),
            recv_bufs: vec![vec![0; RECV_BUFFER]],
            recv_meta: vec![RecvMeta::default()],
            slot,
            gso,
            gso_warned: !gso,
        }
    }

    fn run(mut self) {
        self.shared
            .io_tid
            .store(rustix::thread::gettid().as_raw_nonzero().get(), Ordering::Relaxed);
        let mut last_state = Instant::now();
        loop {
            let now = Instant::now();
            if now.saturating_duration_since(last_state) > STATE_EVENT_EVERY {
                // The connection's state, for debugging stalls: a `tracing`
                // debug event (nothing is built unless it is enabled).
                last_state = now;
                self.shared.lock().log_state(now);
            }
            let (deadline, exit) = {
                let mut c = self.shared.lock();
                if c.poll_timeout().is_some_and(|t| now >= t) {
                    c.handle_timeout(now);
                }
                if self.shared.dropped.load(Ordering::Acquire)
                    && c.send_done()
                    && !c.recv_done()
                    && c.error().is_none()
                {
                    // The application left without reading the peer's
                    // whole stream: tell the peer, as TCP's reset would.
                    c.abort(close_code::ABORT);
                }
                if self.pending == self.sent {
                    self.pending = 0;
                    self.sent = 0;
                    while self.pending < BATCH {
                        let at = self.pending * self.slot;
                        match c.poll_transmit(now, &mut self.out[at..at + self.slot]) {
                            Some(n) => {
                                self.lens[self.pending] = n;
                                self.pending += 1;
                            }
                            None => break,
                        }
                    }
                }
                let done = c.is_closed()
                    || (self.shared.dropped.load(Ordering::Acquire) && c.send_done() && c.recv_done());
                if c.error().is_some() {
                    self.shared.notify();
                }
                (c.poll_timeout(), done && self.pending == self.sent)
            };
            if self.pending > self.sent {
                self.flush();
            }
            if exit {
                *self.shared.io_final.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(pfs_sys::thread_usage());
                let _c = self.shared.lock();
                self.shared.notify();
                return;
            }
            if self.pending > self.sent {
                // The socket took only part of the batch: wait for room
                // (POLLOUT) or input, not spin on sendmmsg.
                self.wait(deadline, true);
            } else if self.pending == BATCH {
                // A full batch went out: there may be more due right now.
                self.wait(Some(Instant::now()), false);
            } else {
                self.wait(deadline, false);
            }
            self.receive();
        }
    }

    /// Sends the batch's unsent datagrams, runs of full-size ones as GSO
    /// messages. Leaves what the socket did not take for the next turn.
    fn flush(&mut self) {
        let mut msgs: [SendMsg<'_>; BATCH] = [SendMsg {
            data: &[],
            segment: 0,
        }; BATCH];
        let mut firsts = [0usize; BATCH];
        let mut count = 0;
        let mut i = self.sent;
        while i < self.pending {
            let start = i * self.slot;
            let len = self.lens[i];
            let mut end = start + len;
            let mut j = i + 1;
            if self.gso && len == self.slot {
                let max = (MAX_GSO_BYTES / self.slot).min(MAX_GSO_SEGMENTS);
                while j < self.pending && j - i < max {
                    end += self.lens[j];
                    j += 1;
                    if self.lens[j - 1] != self.slot {
                        break;
                    }
                }
            }
            msgs[count] = SendMsg {
                data: &self.out[start..end],
                segment: if j - i > 1 { self.slot as u16 } else { 0 },
            };
            firsts[count] = j;
            count += 1;
            i = j;
        }
        let mut taken = 0;
        while taken < count {
            match send_batch(self.sock.as_fd(), &msgs[taken..count], &mut self.send_scratch) {
                Ok(n) => {
                    taken += n;
                    self.sent = firsts[taken - 1];
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if self.gso
                        && msgs[taken].segment > 0
                        && matches!(e.raw_os_error(), Some(libc::EIO) | Some(libc::EINVAL)) =>
                {
                    // The path cannot segment for us: one datagram per
                    // message from now on; this turn's rest goes next turn.
                    self.gso = false;
                    self.shared.gso.store(false, Ordering::Relaxed);
                    if !self.gso_warned {
                        self.gso_warned = true;
                        tracing::warn!("UDP: the path refused GSO ({e}); sending one datagram per message");
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.peer_gone();
                    return;
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    let mut c = self.shared.lock();
                    c.datagram_too_large(self.slot);
                    self.shared.notify();
                    self.sent = self.pending;
                    return;
                }
                Err(_) => {
                    // Anything else is a lost datagram; the core resends.
                    self.sent = firsts[taken];
                    taken += 1;
                }
            }
        }
    }

    fn peer_gone(&mut self) {
        let mut c = self.shared.lock();
        c.port_unreachable(Instant::now());
        self.shared.notify();
    }

    /// Sleeps until input, a wake-up, `until`, or (with `room`) space in
    /// the socket's send buffer. While waiting for room a past deadline
    /// counts as 1 ms: what is due is mostly sending, which needs the room.
    fn wait(&mut self, until: Option<Instant>, room: bool) {
        let mut timeout = until.map(|t| t.saturating_duration_since(Instant::now()));
        if room {
            timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        }
        if timeout.is_some_and(|t| t.is_zero()) {
            return;
        }
        let ts = timeout.map(|t| rustix::event::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        let mut out_flags = PollFlags::IN;
        if room {
            out_flags |= PollFlags::OUT;
        }
        let mut fds = [
            PollFd::new(&self.sock, out_flags),
            PollFd::new(&self.shared.wake, PollFlags::IN),
        ];
        let _ = poll(&mut fds, ts.as_ref());
        if fds[1].revents().contains(PollFlags::IN) {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.shared.wake, &mut b);
        }
    }

    /// Takes every queued datagram (a bounded number of batches per turn
    /// so sending is never starved).
    fn receive(&mut self) {
        let mut got = false;
        for _ in 0..8 {
            let n = match recv_batch(
                self.sock.as_fd(),
                &mut self.recv_bufs,
                &mut self.recv_meta,
                &mut self.recv_scratch,
            ) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.peer_gone();
                    break;
                }
                Err(_) => break,
            };
            if n == 0 {
                break;
            }
            got = true;
            let now = Instant::now();
            let mut c = self.shared.lock();
            for (buf, meta) in self.recv_bufs.iter().zip(&self.recv_meta).take(n) {
                let seg = meta.segment.max(1);
                for d in buf[..meta.len].chunks(seg) {
                    c.handle_datagram(now, d);
                }
            }
            drop(c);
            if n < self.recv_bufs.len() {
                break;
            }
            if self.recv_bufs.len() < RECV_BUFFERS {
                // Every buffer filled: the peer sends in bulk.
                let more = self.recv_bufs.len().min(RECV_BUFFERS - self.recv_bufs.len());
                self.recv_bufs.extend((0..more).map(|_| vec![0; RECV_BUFFER]));
                self.recv_meta.resize(self.recv_bufs.len(), RecvMeta::default());
            }
        }
        if got {
            let _c = self.shared.lock();
            self.shared.notify();
        }
    }
}

/// Accepts UDP connections on one port.
///
/// An OPEN without a valid address token is answered with a RETRY and
/// forgotten (see [`super::admit`]); only an OPEN that echoes its token
/// makes a connection, within [`MAX_PER_SOURCE`] per IP address and
/// [`MAX_CONNECTIONS`] in all (beyond them the client is told BUSY).
#[derive(Debug)]
pub struct UdpListener {
    sock: UdpSocket,
    cfg: UdpConfig,
    local: SocketAddr,
    /// Boxed: the HMAC key is most of the listener's size.
    admission: Box<Admission>,
    /// Receive buffers of all its connections, together.
    budget: RecvBudget,
    /// Connections made for proven addresses, by client address and id: a
    /// copy of an OPEN (its OPEN_ACK was lost) reaches its connection
    /// instead of making another, and the limits count these.
    live: Mutex<HashMap<(SocketAddr, u32), std::sync::Weak<Shared>>>,
    woken: Arc<AtomicBool>,
}

/// Makes a [`UdpListener`] blocked in `accept` return (a server that stops).
#[derive(Debug, Clone)]
pub struct UdpWaker {
    addr: SocketAddr,
    woken: Arc<AtomicBool>,
}

impl UdpWaker {
    /// Makes the listener's `accept` return `Interrupted`, now or at its next call.
    pub fn wake(&self) -> io::Result<()> {
        self.woken.store(true, Ordering::Release);
        let local: SocketAddr = if self.addr.is_ipv6() {
            "[::1]:0".parse().map_err(io::Error::other)?
        } else {
            "127.0.0.1:0".parse().map_err(io::Error::other)?
        };
        UdpSocket::bind(local)?.send_to(&[], self.addr).map(drop)
    }
}

impl UdpListener {
    /// Binds `addr` (`host:port`).
    pub fn bind(addr: &str, cfg: UdpConfig) -> Result<Self, TransportError> {
        let listen_err = |source| TransportError::Listen {
            addr: addr.into(),
            source,
        };
        let sa = crate::resolve(addr)?[0];
        let sock = UdpSocket::bind(sa).map_err(listen_err)?;
        let local = sock.local_addr().map_err(listen_err)?;
        let admission =
            Box::new(Admission::new(Instant::now()).map_err(|e| listen_err(io::Error::other(e)))?);
        Ok(Self {
            sock,
            cfg,
            local,
            admission,
            budget: RecvBudget::new(RECV_BUDGET),
            live: Mutex::new(HashMap::new()),
            woken: Arc::default(),
        })
    }

    /// A handle that wakes `accept` (for a server that stops).
    pub fn waker(&self) -> UdpWaker {
        let mut addr = self.local;
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv6() {
                std::net::Ipv6Addr::LOCALHOST.into()
            } else {
                std::net::Ipv4Addr::LOCALHOST.into()
            });
        }
        UdpWaker {
            addr,
            woken: Arc::clone(&self.woken),
        }
    }

    /// The bound address.
    pub fn socket_addr(&self) -> SocketAddr {
        self.local
    }

    /// Answers an OPEN from `from`: a RETRY without a valid token, the
    /// existing connection for a copy, BUSY beyond the limits, else a new
    /// connection. Nothing that goes wrong for one peer (a send to an
    /// unroutable address, a socket that cannot connect there) is an
    /// error of the listener: it is logged and the OPEN dropped.
    fn accept_open(&self, from: SocketAddr, req: &OpenRequest) -> Option<UdpTransport> {
        let now = Instant::now();
        let client = req.open.conn;
        match req
            .token
            .map(|token| self.admission.check(now, from, client, &token))
        {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                // Expired on a slow path, or forged: a fresh token costs
                // what the first did, and no more than the OPEN's size.
                tracing::debug!("UDP: OPEN from {from}: {e}");
                self.answer_retry(now, from, client);
                return None;
            }
            None => {
                self.answer_retry(now, from, client);
                return None;
            }
        }
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, conn| conn.strong_count() > 0);
        if let Some(shared) = live.get(&(from, client)).and_then(|c| c.upgrade()) {
            // A copy of an OPEN we answered: its OPEN_ACK was lost; the
            // connection sends it again (once per copy, never on its own).
            shared.lock().open_again(now);
            shared.wake_io();
            return None;
        }
        let same_source = live.keys().filter(|(a, _)| a.ip() == from.ip()).count();
        if same_source >= MAX_PER_SOURCE || live.len() >= MAX_CONNECTIONS {
            tracing::debug!(
                "UDP: refusing {from} (BUSY): {same_source} connections from its address, {} in all",
                live.len()
            );
            self.answer_busy(from, client);
            return None;
        }
        match self.open_connection(now, from, &req.open) {
            Ok(t) => {
                live.insert((from, client), Arc::downgrade(&t.shared));
                Some(t)
            }
            Err(e) => {
                let exhausted = matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS | libc::EAGAIN)
                );
                if exhausted {
                    tracing::warn!("UDP: no connection for {from}: {e}");
                } else {
                    tracing::debug!("UDP: no connection for {from}: {e}");
                }
                None
            }
        }
    }

    fn open_connection(&self, now: Instant, from: SocketAddr, open: &Open) -> io::Result<UdpTransport> {
        let mut local = self.local;
        local.set_port(0);
        let sock = new_socket(local)?;
        sock.connect(from)?;
        let mut conn = Connection::server(self.cfg, now, random_id(), open);
        conn.set_recv_budget(self.budget.clone());
        UdpTransport::start(sock, conn, from)
    }

    fn answer_retry(&self, now: Instant, to: SocketAddr, client: u32) {
        let retry = Retry {
            token: self.admission.issue(now, to, client),
        };
        self.answer(to, PacketType::Retry, client, &retry.emit());
    }

    fn answer_busy(&self, to: SocketAddr, client: u32) {
        let close = Close {
            code: close_code::BUSY,
        };
        self.answer(to, PacketType::Close, client, &close.emit());
    }

    /// Sends one packet from the listening port, never waiting: a full
    /// socket buffer or an unroutable address loses it, as the network
    /// could (the client repeats its OPEN).
    fn answer(&self, to: SocketAddr, kind: PacketType, client: u32, body: &[u8]) {
        let mut packet = [0u8; PACKET_HEADER_LEN + TOKEN_LEN];
        let header = PacketHeader {
            kind,
            conn: client,
            number: 0,
        };
        packet[..PACKET_HEADER_LEN].copy_from_slice(&header.emit());
        let end = PACKET_HEADER_LEN + body.len();
        packet[PACKET_HEADER_LEN..end].copy_from_slice(body);
        if let Err(e) = rustix::net::sendto(&self.sock, &packet[..end], SendFlags::DONTWAIT, &to) {
            tracing::trace!("UDP: answer to {to} lost: {e}");
        }
    }
}

impl Listener for UdpListener {
    type Conn = UdpTransport;

    fn accept(&self) -> io::Result<UdpTransport> {
        // An OPEN is 72 bytes; anything longer arrives cut and is dropped.
        let mut buf = [0u8; 2048];
        loop {
            let (n, from) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier answer: one peer's, not the listener's.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::HostUnreachable
                            | io::ErrorKind::NetworkUnreachable
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            if self.woken.load(Ordering::Acquire) {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "the UDP listener was woken to stop",
                ));
            }
            let Ok((header, body)) = PacketHeader::parse(&buf[..n]) else {
                continue;
            };
            if header.kind != PacketType::Open || header.conn != 0 {
                continue;
            }
            let Ok(req) = OpenRequest::parse(body) else {
                continue;
            };
            if let Some(t) = self.accept_open(from, &req) {
                return Ok(t);
            }
        }
    }

    fn local_addr(&self) -> String {
        self.local.to_string()
    }
}
