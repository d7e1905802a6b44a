//! One row of the study: start the server — this binary's hidden
//! `pfs bench ipc-peer` — as a child process, wait for its `READY <address>`
//! line, drive the phases as the client, read the server's JSON result line,
//! and turn both sides' measurements into a [`Row`].
//!
//! A server that fails, dies or hangs makes its row `failed: <reason>` and
//! never an orphan: a watchdog kills it at the row's deadline (which also
//! unblocks the client, whose channel then reaches end of stream), and every
//! exit path kills and reaps it.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::Serialize;

use super::clock::Clock;
use super::methods::{Connect, IpcMethod, WithChannel};
use super::phases::{self, ClientReport, ServerReport};
use super::stats::LatencyStats;
use crate::cleanup::{self, Undo};
use crate::report::Method as _;
use crate::report::Status;

/// Environment variable that makes the server misbehave, for tests of the
/// failure paths: `die` (exit with an error once the client is connected) or
/// `hang` (stop answering once the client is connected).
pub const FAULT_ENV: &str = "PFS_BENCH_IPC_PEER_FAULT";

/// The server prints this, then its address, once it can be connected to.
pub const READY: &str = "READY ";

/// How a row is run.
#[derive(Debug, Clone)]
pub struct RowSpec<'a> {
    /// The method.
    pub method: IpcMethod,
    /// Messages in the latency phase, and again in the throughput phase.
    pub messages: u64,
    /// Length of the idle phase.
    pub idle: Duration,
    /// CPU to pin the server to.
    pub server_cpu: Option<usize>,
    /// The study's private directory; the row uses `<dir>/<method>`.
    pub dir: &'a Path,
    /// The server is killed and the row fails after this long.
    pub timeout: Duration,
    /// The clock, to convert ticks to nanoseconds.
    pub clock: &'a Clock,
    /// The `pfs` binary whose `bench ipc-peer` serves the row.
    pub exe: &'a Path,
}

/// One method's results. Latencies are one way unless named otherwise;
/// `*_cycles` are TSC cycles (null without a TSC), `*_ns` nanoseconds.
/// Unmeasured values (failed rows) are null.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// IpcMethod key.
    pub method: String,
    /// Row label.
    pub label: String,
    /// How a receiver waits for the next message.
    pub wait: String,
    /// Measured or failed (serialized as `status`: `ok`/`failed` and
    /// `error`: why, `null` when it ran).
    #[serde(flatten)]
    pub status: Status,
    /// Messages asked for per phase.
    pub messages: u64,
    /// Client → server samples (server-side, authoritative).
    pub one_way_count: Option<u64>,
    /// Client → server mean, cycles.
    pub one_way_mean_cycles: Option<f64>,
    /// Client → server median, cycles.
    pub one_way_p50_cycles: Option<i64>,
    /// Client → server 99th percentile, cycles.
    pub one_way_p99_cycles: Option<i64>,
    /// Client → server 99.9th percentile, cycles.
    pub one_way_p999_cycles: Option<i64>,
    /// Client → server mean, ns.
    pub one_way_mean_ns: Option<f64>,
    /// Client → server median, ns.
    pub one_way_p50_ns: Option<f64>,
    /// Client → server 99th percentile, ns.
    pub one_way_p99_ns: Option<f64>,
    /// Client → server 99.9th percentile, ns.
    pub one_way_p999_ns: Option<f64>,
    /// Client → server minimum, ns.
    pub one_way_min_ns: Option<f64>,
    /// Client → server maximum, ns.
    pub one_way_max_ns: Option<f64>,
    /// Client → server samples below zero (TSC skew).
    pub one_way_negative: Option<u64>,
    /// Server → client samples.
    pub return_count: Option<u64>,
    /// Server → client mean, cycles.
    pub return_mean_cycles: Option<f64>,
    /// Server → client mean, ns.
    pub return_mean_ns: Option<f64>,
    /// Server → client median, ns.
    pub return_p50_ns: Option<f64>,
    /// Server → client 99th percentile, ns.
    pub return_p99_ns: Option<f64>,
    /// Server → client samples below zero (TSC skew).
    pub return_negative: Option<u64>,
    /// Round trips measured by the client.
    pub round_trip_count: Option<u64>,
    /// Round trip mean, ns.
    pub round_trip_mean_ns: Option<f64>,
    /// Round trip median, ns.
    pub round_trip_p50_ns: Option<f64>,
    /// Round trip 99th percentile, ns.
    pub round_trip_p99_ns: Option<f64>,
    /// Round trip 99.9th percentile, ns.
    pub round_trip_p999_ns: Option<f64>,
    /// Messages the server counted in the throughput phase.
    pub throughput_messages: Option<u64>,
    /// Server receive rate, million messages per second (10^6).
    pub throughput_mmsg_s: Option<f64>,
    /// Client send rate, million messages per second.
    pub client_send_mmsg_s: Option<f64>,
    /// Server CPU over the idle wait ÷ its wall time × 100.
    pub idle_cpu_pct: Option<f64>,
    /// Idle wait, wall seconds.
    pub idle_wall_s: Option<f64>,
    /// Idle wait, server CPU seconds (user + system).
    pub idle_cpu_s: Option<f64>,
    /// unix-epoll one-way mean ÷ this row's (above 1: faster than unix-epoll).
    pub vs_unix_epoll: Option<f64>,
    /// CPU the client ran on at the end.
    pub client_cpu: Option<usize>,
    /// CPU the server ran on at the end.
    pub server_cpu: Option<usize>,
    /// Latency phase, client wall seconds.
    pub latency_wall_s: Option<f64>,
    /// Throughput phase, client wall seconds.
    pub throughput_wall_s: Option<f64>,
    /// The whole row (server start to exit), wall seconds.
    pub row_wall_s: f64,
    /// Findings worth a reader's attention (skew, pinning), `; `-separated.
    pub notes: String,
}

impl Row {
    /// Whether the row measured.
    pub fn ok(&self) -> bool {
        self.status.ran()
    }

    fn failed(method: IpcMethod, messages: u64, reason: String, wall_s: f64) -> Self {
        Self {
            method: method.key().into(),
            label: method.label().into(),
            wait: method.wait().into(),
            status: Status::failed_because(reason),
            messages,
            row_wall_s: wall_s,
            ..Self::default()
        }
    }
}

/// Runs one row; never fails (a failure is a `failed` row).
pub fn run_row(spec: &RowSpec<'_>) -> Row {
    let t0 = Instant::now();
    match measure(spec) {
        Ok((server, client)) => build(spec, &server, &client, t0.elapsed().as_secs_f64()),
        Err(e) => Row::failed(
            spec.method,
            spec.messages,
            format!("{e:#}"),
            t0.elapsed().as_secs_f64(),
        ),
    }
}

/// The client's half of a row, with the method's channel type.
struct Drive<'a> {
    address: &'a str,
    deadline: Instant,
    messages: u64,
    idle: Duration,
}

impl WithChannel for Drive<'_> {
    type Output = anyhow::Result<ClientReport>;

    fn run<C: Connect>(self) -> Self::Output {
        let mut ch = C::connect(self.address, self.deadline)?;
        phases::drive(&mut ch, self.messages, self.idle)
    }
}

fn measure(spec: &RowSpec<'_>) -> anyhow::Result<(ServerReport, ClientReport)> {
    let dir = spec.dir.join(spec.method.key());
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut peer = Peer::spawn(spec, &dir)?;
    let ready = peer.line("its READY line")?;
    let Some(address) = ready.strip_prefix(READY) else {
        bail!("the server printed {ready:?} instead of its READY line");
    };
    let client = spec.method.with(Drive {
        address,
        deadline: peer.deadline,
        messages: spec.messages,
        idle: spec.idle,
    });
    let client = match client {
        Ok(c) => c,
        Err(e) => {
            let why = peer.why();
            return Err(anyhow!("{why} (client: {e:#})"));
        }
    };
    let line = peer.line("its result")?;
    let server: ServerReport =
        serde_json::from_str(&line).with_context(|| format!("the server's result line {line:?}"))?;
    peer.finish()?;
    Ok((server, client))
}

/// The server process of one row, killed and reaped on every exit path.
struct Peer {
    child: Option<Child>,
    ticket: u64,
    lines: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    watchdog: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    timed_out: Arc<AtomicBool>,
    timeout: Duration,
    deadline: Instant,
}

impl Peer {
    fn spawn(spec: &RowSpec<'_>, dir: &Path) -> anyhow::Result<Self> {
        let mut cmd = Command::new(spec.exe);
        cmd.args(["bench", "ipc-peer", "--method", spec.method.key()])
            .args(["--messages", &spec.messages.to_string()])
            .arg("--dir")
            .arg(dir);
        if let Some(cpu) = spec.server_cpu {
            cmd.args(["--cpu", &cpu.to_string()]);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .context("cannot start the server (pfs bench ipc-peer)")?;
        let ticket = cleanup::on_interrupt(Undo::Process(child.id()));
        let (stdout, mut stderr) = match (child.stdout.take(), child.stderr.take()) {
            (Some(o), Some(e)) => (o, e),
            _ => {
                cleanup::done(ticket);
                let _ = child.kill();
                let _ = child.wait();
                bail!("the server's stdout/stderr were not captured");
            }
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        let timed_out = Arc::new(AtomicBool::new(false));
        let (arm, disarmed) = mpsc::channel::<()>();
        let pid = child.id();
        let flag = timed_out.clone();
        let timeout = spec.timeout;
        // The child is reaped only after this thread is joined, so the pid
        // it kills is always still ours.
        let dog = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(timeout) {
                flag.store(true, Ordering::SeqCst);
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        });
        Ok(Self {
            child: Some(child),
            ticket,
            lines,
            stderr: stderr_rx,
            watchdog: Some((arm, dog)),
            timed_out,
            timeout,
            deadline: Instant::now() + timeout,
        })
    }

    /// The server's next stdout line, before the deadline.
    fn line(&mut self, what: &str) -> anyhow::Result<String> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left + Duration::from_millis(200)) {
            Ok(line) => Ok(line),
            Err(_) => Err(anyhow!("{} (waiting for {what})", self.why())),
        }
    }

    /// Stops the watchdog; from here on, this code alone may signal or reap the child.
    fn disarm(&mut self) {
        if let Some((arm, dog)) = self.watchdog.take() {
            drop(arm);
            let _ = dog.join();
        }
        cleanup::done(self.ticket);
    }

    /// Why the server is gone or useless: timed out, or its exit status and
    /// last stderr line. Kills it if it is still running.
    fn why(&mut self) -> String {
        self.disarm();
        let timed_out = self.timed_out.load(Ordering::SeqCst);
        let Some(child) = self.child.as_mut() else {
            return "the server is gone".into();
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline && !timed_out => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        self.child = None;
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_default();
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().trim_start_matches("pfs: error: ").to_string());
        let how = if timed_out {
            format!(
                "timed out after {:.0} s (server killed; raise --timeout for slow methods)",
                self.timeout.as_secs_f64()
            )
        } else {
            match status {
                Some(s) if s.success() => "the server exited early".to_string(),
                Some(s) => format!("the server {}", describe_status(s)),
                None => "the server could not be reaped".to_string(),
            }
        };
        match last {
            Some(l) if !timed_out => format!("{how}: {l}"),
            _ => how,
        }
    }

    /// Waits for the server to exit after its result; fails unless it exits 0.
    fn finish(mut self) -> anyhow::Result<()> {
        self.disarm();
        let deadline = Instant::now() + Duration::from_secs(10);
        let Some(child) = self.child.as_mut() else {
            bail!("the server is gone");
        };
        loop {
            match child.try_wait().context("waiting for the server")? {
                Some(s) if s.success() => {
                    self.child = None;
                    return Ok(());
                }
                Some(_) => {
                    let why = self.why();
                    bail!("{why} after printing its result");
                }
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                None => bail!("the server did not exit after printing its result"),
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.disarm();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({s})"),
    }
}

/// Turns both sides' measurements into the row.
fn build(spec: &RowSpec<'_>, server: &ServerReport, client: &ClientReport, wall_s: f64) -> Row {
    let clock = spec.clock;
    let ns = |t: f64| Some(clock.ns(t));
    let cyc_f = |t: f64| clock.tsc.then_some(t);
    let cyc = |t: i64| clock.tsc.then_some(t);
    let (ow, ret, rt) = (&server.one_way, &client.return_one_way, &client.round_trip);
    let secs = |ticks: u64| ticks as f64 / clock.hz;
    let stream_s = secs(server.stream_first_to_last_ticks);
    let send_s = secs(client.stream_send_ticks);
    let mut notes = Vec::new();
    if let Some(n) = skew_note(ow, ret) {
        notes.push(n);
    }
    if let Some(want) = spec.server_cpu {
        if server.cpu != want {
            notes.push(format!("server ran on CPU {}, not {want}", server.cpu));
        }
    }
    Row {
        method: spec.method.key().into(),
        label: spec.method.label().into(),
        wait: spec.method.wait().into(),
        status: Status::Ran,
        messages: spec.messages,
        one_way_count: Some(ow.count),
        one_way_mean_cycles: cyc_f(ow.mean),
        one_way_p50_cycles: cyc(ow.p50),
        one_way_p99_cycles: cyc(ow.p99),
        one_way_p999_cycles: cyc(ow.p999),
        one_way_mean_ns: ns(ow.mean),
        one_way_p50_ns: ns(ow.p50 as f64),
        one_way_p99_ns: ns(ow.p99 as f64),
        one_way_p999_ns: ns(ow.p999 as f64),
        one_way_min_ns: ns(ow.min as f64),
        one_way_max_ns: ns(ow.max as f64),
        one_way_negative: Some(ow.negative),
        return_count: Some(ret.count),
        return_mean_cycles: cyc_f(ret.mean),
        return_mean_ns: ns(ret.mean),
        return_p50_ns: ns(ret.p50 as f64),
        return_p99_ns: ns(ret.p99 as f64),
        return_negative: Some(ret.negative),
        round_trip_count: Some(rt.count),
        round_trip_mean_ns: ns(rt.mean),
        round_trip_p50_ns: ns(rt.p50 as f64),
        round_trip_p99_ns: ns(rt.p99 as f64),
        round_trip_p999_ns: ns(rt.p999 as f64),
        throughput_messages: Some(server.stream_messages),
        // First to last arrival spans messages − 1 intervals.
        throughput_mmsg_s: (stream_s > 0.0).then(|| (server.stream_messages - 1) as f64 / stream_s / 1e6),
        client_send_mmsg_s: (send_s > 0.0).then(|| spec.messages as f64 / send_s / 1e6),
        idle_cpu_pct: (server.idle_wall_s > 0.0).then(|| server.idle_cpu_s / server.idle_wall_s * 100.0),
        idle_wall_s: Some(server.idle_wall_s),
        idle_cpu_s: Some(server.idle_cpu_s),
        vs_unix_epoll: None,
        client_cpu: Some(client.cpu),
        server_cpu: Some(server.cpu),
        latency_wall_s: Some(client.latency_wall_s),
        throughput_wall_s: Some(client.stream_wall_s),
        row_wall_s: wall_s,
        notes: notes.join("; "),
    }
}

/// A warning when the two one-way directions disagree by more than 2×, or
/// either goes negative: the two cores' TSCs are probably not in step.
fn skew_note(forward: &LatencyStats, back: &LatencyStats) -> Option<String> {
    let (f, b) = (forward.mean, back.mean);
    if f <= 0.0 || b <= 0.0 {
        return Some(format!(
            "a one-way mean is not positive (client→server {f:.0}, server→client {b:.0} ticks): the TSCs of the two cores disagree"
        ));
    }
    let ratio = f.max(b) / f.min(b);
    if ratio > 2.0 {
        return Some(format!(
            "one-way means differ {ratio:.1}× between directions (client→server {f:.0}, server→client {b:.0} ticks): TSC skew across cores?"
        ));
    }
    if forward.negative + back.negative > 0 {
        return Some(format!(
            "{} one-way samples below zero: TSC skew across cores?",
            forward.negative + back.negative
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(mean: f64, negative: u64) -> LatencyStats {
        LatencyStats {
            count: 10,
            mean,
            min: 0,
            p50: mean as i64,
            p99: mean as i64,
            p999: mean as i64,
            max: mean as i64,
            negative,
        }
    }

    #[test]
    fn skew_is_flagged() {
        assert!(skew_note(&summary(1000.0, 0), &summary(1500.0, 0)).is_none());
        let n = skew_note(&summary(1000.0, 0), &summary(2500.0, 0)).unwrap();
        assert!(n.contains("2.5×"), "{n}");
        assert!(skew_note(&summary(-10.0, 0), &summary(2500.0, 0)).is_some());
        assert!(skew_note(&summary(1000.0, 3), &summary(1000.0, 0)).is_some());
    }
}
