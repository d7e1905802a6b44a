//! One cell of the grid: `threads` sender/receiver thread pairs, each pair
//! with its own loopback TCP connection, released together through a start
//! gate, stopped together after the cell's duration and measured on both
//! sides (receiver counts are authoritative; sender counts cross-check them).

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pfs_sys::{pin_current_thread, thread_usage, Usage};
use serde::Serialize;

use super::methods::{self, message_pool, Received, SendConfig, Sent};
use super::sys::{self, HwCounter, HwEvent};
use super::SendMethod;
use crate::report::Method as _;
use crate::report::Status;

/// What to run in one cell.
#[derive(Debug, Clone, Copy)]
pub struct CellSpec {
    /// SendMethod.
    pub method: SendMethod,
    /// Message size, bytes.
    pub size: usize,
    /// Sender threads (each with its own receiver thread and connection).
    pub threads: usize,
    /// How long senders send.
    pub duration: Duration,
    /// Pin sender i to CPU i mod ncpu and its receiver to the next CPU.
    pub pin: bool,
    /// CPUs to pin over.
    pub ncpu: usize,
    /// Messages per sender's pool.
    pub pool: usize,
    /// A3: most messages awaiting completion.
    pub zc_inflight: usize,
    /// A4: messages per gram.
    pub gram_msgs: usize,
    /// A4: descriptor table encoding.
    pub gram_encoding: pfs_wire::Encoding,
    /// A4: descriptors per message (1 or 8).
    pub descs_per_msg: usize,
    /// TCP_NODELAY on sender sockets.
    pub nodelay: bool,
    /// Bound on every blocking socket call and on waits for completions.
    pub timeout: Duration,
}

impl CellSpec {
    fn send_config(&self) -> SendConfig {
        SendConfig {
            size: self.size,
            zc_inflight: self.zc_inflight,
            gram_msgs: self.gram_msgs,
            gram_encoding: self.gram_encoding,
            descs_per_msg: self.descs_per_msg,
            timeout: self.timeout,
        }
    }

    /// Receive buffer: large reads; for grams at least two whole grams.
    fn recv_buf_len(&self) -> usize {
        match self.method {
            SendMethod::A4 => {
                // Arithmetic descriptors take at most 8 + 10 + 5 bytes
                // (absolute offset or delta varint, length varint).
                let per_desc = match self.gram_encoding {
                    pfs_wire::Encoding::Absolute => pfs_wire::desc::ABSOLUTE_DESC_LEN,
                    pfs_wire::Encoding::Arithmetic => 23,
                };
                let gram = pfs_wire::FRAME_HEADER_LEN
                    + pfs_wire::GRAM_HEADER_LEN
                    + self.gram_msgs * self.descs_per_msg * per_desc
                    + self.gram_msgs * self.size;
                (2 * gram).max(1 << 20)
            }
            _ => 256 << 10,
        }
    }
}

/// One measured method and size (a cell of the study's grid): a row of
/// the table, CSV and JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// `a1` … `a4`.
    pub method: &'static str,
    /// Long method name.
    pub label: &'static str,
    /// Message size, bytes.
    pub msg_size: usize,
    /// Sender threads.
    pub threads: usize,
    /// Measured or failed (serialized as `status`: `ok`/`failed` and
    /// `error`: why, `null` when it ran).
    #[serde(flatten)]
    pub status: Status,
    /// Send duration asked for.
    pub duration_s: f64,
    /// From the start gate to the last receiver's end of stream.
    pub elapsed_s: f64,
    /// Logical messages received.
    pub messages: u64,
    /// Logical bytes received (the 8 fields of each message).
    pub logical_bytes: u64,
    /// Bytes through the sockets (framing included; TCP/IP headers not).
    pub wire_bytes: u64,
    /// wire / logical.
    pub wire_ratio: f64,
    /// Logical Gbit/s (10^9 bits).
    pub gbit_s: f64,
    /// Logical messages per second, all threads.
    pub msgs_per_s: f64,
    /// elapsed × threads / messages: mean time per message per sender thread (not a round trip).
    pub mean_ns_per_msg: f64,
    /// send/sendmsg calls that moved bytes.
    pub send_calls: u64,
    /// send_calls / messages.
    pub calls_per_msg: f64,
    /// Voluntary + involuntary context switches of all sender and receiver threads.
    pub ctx_switches: u64,
    /// Voluntary context switches.
    pub ctx_voluntary: u64,
    /// Involuntary context switches.
    pub ctx_involuntary: u64,
    /// User CPU of all sender and receiver threads.
    pub cpu_user_s: f64,
    /// System CPU of all sender and receiver threads.
    pub cpu_sys_s: f64,
    /// user + sys.
    pub cpu_s: f64,
    /// CPU nanoseconds per logical byte.
    pub cpu_ns_per_byte: f64,
    /// CPU cycles per logical byte (perf_event_open), null where counters are unavailable.
    pub cycles_per_byte: Option<f64>,
    /// Last-level cache misses (perf_event_open), null where counters are unavailable.
    pub llc_misses: Option<u64>,
    /// A3: send ids the kernel reported complete.
    pub zc_completions: Option<u64>,
    /// A3: of those, reported as copied (SO_EE_CODE_ZEROCOPY_COPIED).
    pub zc_copied: Option<u64>,
    /// A4: logical messages per gram.
    pub msgs_per_gram: Option<usize>,
    /// A4: grams received.
    pub grams: Option<u64>,
    /// Warnings (pinning failed, counters user-mode only, …).
    pub notes: String,
}

impl Measured {
    fn new(spec: &CellSpec) -> Self {
        Measured {
            method: spec.method.key(),
            label: spec.method.label(),
            msg_size: spec.size,
            threads: spec.threads,
            status: Status::Ran,
            duration_s: spec.duration.as_secs_f64(),
            elapsed_s: 0.0,
            messages: 0,
            logical_bytes: 0,
            wire_bytes: 0,
            wire_ratio: 0.0,
            gbit_s: 0.0,
            msgs_per_s: 0.0,
            mean_ns_per_msg: 0.0,
            send_calls: 0,
            calls_per_msg: 0.0,
            ctx_switches: 0,
            ctx_voluntary: 0,
            ctx_involuntary: 0,
            cpu_user_s: 0.0,
            cpu_sys_s: 0.0,
            cpu_s: 0.0,
            cpu_ns_per_byte: 0.0,
            cycles_per_byte: None,
            llc_misses: None,
            zc_completions: None,
            zc_copied: None,
            msgs_per_gram: (spec.method == SendMethod::A4).then_some(spec.gram_msgs),
            grams: None,
            notes: String::new(),
        }
    }

    fn failed(mut self, why: String) -> Self {
        self.status = Status::failed_because(why);
        self
    }

    /// A cell of `method` that failed for `why`, for tests of the report.
    #[cfg(test)]
    pub fn failed_for_test(method: SendMethod, why: &str) -> Self {
        let spec = CellSpec {
            method,
            size: 64,
            threads: 1,
            duration: Duration::from_millis(500),
            pin: false,
            ncpu: 2,
            pool: 64,
            zc_inflight: 8,
            gram_msgs: 16,
            gram_encoding: pfs_wire::Encoding::Absolute,
            descs_per_msg: 1,
            nodelay: true,
            timeout: Duration::from_secs(1),
        };
        Measured::new(&spec).failed(why.into())
    }

    /// Whether the cell produced numbers.
    pub fn ok(&self) -> bool {
        self.status.ran()
    }
}

/// A start gate that, unlike `Barrier`, can be opened for "abort" and whose
/// waits are bounded, so a thread that never arrives cannot hang the run.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(usize, Option<bool>)>,
    cv: Condvar,
}

impl Gate {
    /// Registers arrival and waits for the gate; true means go.
    fn arrive(&self, timeout: Duration) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 += 1;
        self.cv.notify_all();
        let (st, _) = self
            .cv
            .wait_timeout_while(st, timeout, |s| s.1.is_none())
            .unwrap_or_else(|e| e.into_inner());
        st.1 == Some(true)
    }

    /// Waits until `n` threads arrived.
    fn wait_ready(&self, n: usize, timeout: Duration) -> bool {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (st, _) = self
            .cv
            .wait_timeout_while(st, timeout, |s| s.0 < n)
            .unwrap_or_else(|e| e.into_inner());
        st.0 >= n
    }

    fn open(&self, go: bool) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(go);
        self.cv.notify_all();
    }
}

/// Cycle and cache-miss counters of the calling thread, when the CPU has them.
#[derive(Debug)]
struct Counters(Result<(HwCounter, HwCounter), String>);

impl Counters {
    fn open() -> Self {
        let open = |ev| HwCounter::open(ev).map_err(|e| format!("perf_event_open: {e}"));
        Counters(open(HwEvent::Cycles).and_then(|c| Ok((c, open(HwEvent::CacheMisses)?))))
    }

    fn read(&mut self) -> Result<(u64, u64), String> {
        match &mut self.0 {
            Ok((c, m)) => {
                let r = |x: &mut HwCounter| x.read().map_err(|e| format!("reading a perf counter: {e}"));
                Ok((r(c)?, r(m)?))
            }
            Err(e) => Err(e.clone()),
        }
    }

    fn user_only(&self) -> bool {
        matches!(&self.0, Ok((c, _)) if !c.includes_kernel)
    }
}

/// What one thread measured about itself.
#[derive(Debug, Default)]
struct Side {
    usage: Usage,
    hw: Option<Result<(u64, u64), String>>,
    user_only: bool,
    note: Option<String>,
}

/// Resource use and counters of the calling thread over the closure.
fn measured<T>(counters: &mut Counters, f: impl FnOnce() -> T) -> (T, Side) {
    let u0 = thread_usage();
    let h0 = counters.read();
    let out = f();
    let usage = thread_usage().since(&u0);
    let h1 = counters.read();
    let hw = match (h0, h1) {
        (Ok(a), Ok(b)) => Ok((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    (
        out,
        Side {
            usage,
            hw: Some(hw),
            user_only: counters.user_only(),
            note: None,
        },
    )
}

fn pin(spec: &CellSpec, cpu: usize) -> Option<String> {
    if !spec.pin {
        return None;
    }
    pin_current_thread(cpu)
        .err()
        .map(|e| format!("pinning to CPU {cpu} failed: {e}"))
}

fn aborted() -> io::Error {
    io::Error::other("cell aborted before start")
}

fn sender_thread(
    i: usize,
    spec: &CellSpec,
    mut sock: TcpStream,
    gate: &Gate,
    stop: &AtomicBool,
) -> (io::Result<Sent>, Side) {
    let note = pin(spec, i % spec.ncpu);
    let pool = message_pool(i, spec.size, spec.pool);
    let mut counters = Counters::open();
    if !gate.arrive(spec.timeout * 2) {
        return (Err(aborted()), Side::default());
    }
    let (r, mut side) = measured(&mut counters, || {
        let r = methods::send(spec.method, &mut sock, &pool, spec.send_config(), stop);
        // End of stream for the receiver, also after an error.
        let _ = sock.shutdown(Shutdown::Write);
        r
    });
    side.note = note;
    (r, side)
}

fn receiver_thread(
    i: usize,
    spec: &CellSpec,
    mut sock: TcpStream,
    gate: &Gate,
) -> (io::Result<(Received, Instant)>, Side) {
    let note = pin(spec, (i + 1) % spec.ncpu);
    let mut buf = vec![0u8; spec.recv_buf_len()];
    let mut counters = Counters::open();
    if !gate.arrive(spec.timeout * 2) {
        return (Err(aborted()), Side::default());
    }
    let (r, mut side) = measured(&mut counters, || {
        let r = match spec.method {
            SendMethod::A4 => methods::receive_grams(&mut sock, &mut buf, spec.descs_per_msg),
            _ => methods::receive_bytes(&mut sock, &mut buf, spec.size),
        };
        let end = Instant::now();
        if r.is_err() {
            // Unblock a sender stuck on a full socket.
            let _ = sock.shutdown(Shutdown::Both);
        }
        r.map(|rx| (rx, end))
    });
    side.note = note;
    (r, side)
}

/// A connected loopback pair: (sender end, receiver end), with timeouts set.
fn connect_pair(spec: &CellSpec) -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let tx = TcpStream::connect_timeout(&listener.local_addr()?, spec.timeout)?;
    let (rx, _) = listener.accept()?;
    tx.set_write_timeout(Some(spec.timeout))?;
    tx.set_read_timeout(Some(spec.timeout))?;
    rx.set_read_timeout(Some(spec.timeout))?;
    rx.set_write_timeout(Some(spec.timeout))?;
    if spec.nodelay {
        tx.set_nodelay(true)?;
    }
    if spec.method == SendMethod::A3 {
        sys::set_zerocopy(tx.as_fd())
            .map_err(|e| io::Error::new(e.kind(), format!("setsockopt(SO_ZEROCOPY): {e}")))?;
    }
    Ok((tx, rx))
}

type SenderJoin = thread::Result<(io::Result<Sent>, Side)>;
type ReceiverJoin = thread::Result<(io::Result<(Received, Instant)>, Side)>;

/// Runs one cell; never panics, never hangs longer than the socket timeouts.
pub fn run_cell(spec: &CellSpec) -> Measured {
    let cell = Measured::new(spec);
    let mut pairs = Vec::with_capacity(spec.threads);
    for _ in 0..spec.threads {
        match connect_pair(spec) {
            Ok(p) => pairs.push(p),
            Err(e) => return cell.failed(format!("connection setup: {e}")),
        }
    }
    let gate = Gate::default();
    let stop = AtomicBool::new(false);
    let (gate, stop) = (&gate, &stop);
    let (spawn_err, t0, sent, received) = thread::scope(|s| {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        let mut spawn_err = None;
        for (i, (tx, rx)) in pairs.into_iter().enumerate() {
            match thread::Builder::new()
                .name(format!("iop-rx{i}"))
                .spawn_scoped(s, move || receiver_thread(i, spec, rx, gate))
            {
                Ok(h) => receivers.push(h),
                Err(e) => {
                    spawn_err = Some(format!("spawning a receiver thread: {e}"));
                    break;
                }
            }
            match thread::Builder::new()
                .name(format!("iop-tx{i}"))
                .spawn_scoped(s, move || sender_thread(i, spec, tx, gate, stop))
            {
                Ok(h) => senders.push(h),
                Err(e) => {
                    spawn_err = Some(format!("spawning a sender thread: {e}"));
                    break;
                }
            }
        }
        let ready = spawn_err.is_none() && gate.wait_ready(senders.len() + receivers.len(), spec.timeout);
        if spawn_err.is_none() && !ready {
            spawn_err = Some("threads did not get ready in time".into());
        }
        let t0 = Instant::now();
        gate.open(ready);
        if ready {
            thread::sleep(spec.duration);
        }
        stop.store(true, Ordering::Relaxed);
        let sent: Vec<SenderJoin> = senders.into_iter().map(|h| h.join()).collect();
        let received: Vec<ReceiverJoin> = receivers.into_iter().map(|h| h.join()).collect();
        (spawn_err, t0, sent, received)
    });
    if let Some(e) = spawn_err {
        return cell.failed(e);
    }
    summarize(cell, spec, t0, sent, received)
}

fn summarize(
    mut cell: Measured,
    spec: &CellSpec,
    t0: Instant,
    sent: Vec<SenderJoin>,
    received: Vec<ReceiverJoin>,
) -> Measured {
    let mut errors = Vec::new();
    let mut sides = Vec::new();
    let mut tx_total = Sent::default();
    let mut rx_total = Received::default();
    let mut end = t0;
    let mut per_pair = vec![(None, None); spec.threads];
    for (i, j) in sent.into_iter().enumerate() {
        match j {
            Ok((Ok(s), side)) => {
                tx_total.messages += s.messages;
                tx_total.calls += s.calls;
                tx_total.zc_completed += s.zc_completed;
                tx_total.zc_copied += s.zc_copied;
                per_pair[i].0 = Some(s.messages);
                sides.push(side);
            }
            Ok((Err(e), _)) => errors.push(format!("sender {i}: {e}")),
            Err(_) => errors.push(format!("sender {i} panicked")),
        }
    }
    for (i, j) in received.into_iter().enumerate() {
        match j {
            Ok((Ok((r, e)), side)) => {
                rx_total.wire_bytes += r.wire_bytes;
                rx_total.logical_bytes += r.logical_bytes;
                rx_total.messages += r.messages;
                rx_total.grams += r.grams;
                end = end.max(e);
                per_pair[i].1 = Some(r.messages);
                sides.push(side);
            }
            Ok((Err(e), _)) => errors.push(format!("receiver {i}: {e}")),
            Err(_) => errors.push(format!("receiver {i} panicked")),
        }
    }
    for (i, p) in per_pair.iter().enumerate() {
        if let (Some(s), Some(r)) = *p {
            if s != r {
                errors.push(format!(
                    "pair {i}: sender sent {s} messages, receiver counted {r}"
                ));
            }
        }
    }
    if !errors.is_empty() {
        return cell.failed(errors.join("; "));
    }
    if rx_total.messages == 0 {
        return cell.failed("no message arrived".into());
    }
    let elapsed = end.duration_since(t0).as_secs_f64().max(1e-9);
    let logical = rx_total.logical_bytes as f64;
    cell.elapsed_s = elapsed;
    cell.messages = rx_total.messages;
    cell.logical_bytes = rx_total.logical_bytes;
    cell.wire_bytes = rx_total.wire_bytes;
    cell.wire_ratio = rx_total.wire_bytes as f64 / logical.max(1.0);
    cell.gbit_s = logical * 8.0 / elapsed / 1e9;
    cell.msgs_per_s = rx_total.messages as f64 / elapsed;
    cell.mean_ns_per_msg = elapsed * spec.threads as f64 / rx_total.messages as f64 * 1e9;
    cell.send_calls = tx_total.calls;
    cell.calls_per_msg = tx_total.calls as f64 / rx_total.messages as f64;
    let (mut user_us, mut sys_us) = (0u64, 0u64);
    let mut hw = Ok((0u64, 0u64));
    let mut notes: Vec<String> = Vec::new();
    for side in &sides {
        user_us += side.usage.user_us;
        sys_us += side.usage.sys_us;
        cell.ctx_voluntary += side.usage.nvcsw;
        cell.ctx_involuntary += side.usage.nivcsw;
        hw = match (hw, &side.hw) {
            (Ok((c, m)), Some(Ok((dc, dm)))) => Ok((c + dc, m + dm)),
            (Err(e), _) => Err(e),
            (Ok(_), Some(Err(e))) => Err(e.clone()),
            (Ok(_), None) => Err("no counter reading".into()),
        };
        if side.user_only && !notes.iter().any(|n| n.starts_with("counters")) {
            notes.push("counters user-mode only (perf_event_paranoid)".into());
        }
        if let Some(n) = &side.note {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    cell.ctx_switches = cell.ctx_voluntary + cell.ctx_involuntary;
    cell.cpu_user_s = user_us as f64 / 1e6;
    cell.cpu_sys_s = sys_us as f64 / 1e6;
    cell.cpu_s = cell.cpu_user_s + cell.cpu_sys_s;
    cell.cpu_ns_per_byte = cell.cpu_s * 1e9 / logical.max(1.0);
    if let Ok((cycles, misses)) = hw {
        cell.cycles_per_byte = Some(cycles as f64 / logical.max(1.0));
        cell.llc_misses = Some(misses);
    }
    if spec.method == SendMethod::A3 {
        cell.zc_completions = Some(tx_total.zc_completed);
        cell.zc_copied = Some(tx_total.zc_copied);
    }
    if spec.method == SendMethod::A4 {
        cell.grams = Some(rx_total.grams);
    }
    cell.notes = notes.join("; ");
    cell
}

/// Why hardware counters are unavailable here, or `None` when they work.
pub fn counters_unavailable() -> Option<String> {
    Counters::open().0.err()
}
