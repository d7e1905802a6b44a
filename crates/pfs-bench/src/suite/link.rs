//! `pfs bench --link SPEC [--link-loss-sweep LIST]`: the suite's network
//! rows over an emulated link ([`crate::emulink`]), one table per loss rate
//! and a figure of goodput against loss.
//!
//! The link is one more [`NetPath`]: rows see a receiver address, a way to
//! start a receiver in namespace B and a byte counter, and run unchanged.
//! What this module adds for a slow, lossy path:
//! - rows that only mean something on a link: iperf3 with cubic and with
//!   bbr, iperf3 UDP at the link's rate (its capacity), two flows at once
//!   ([`compete`], which takes any flow as a [`Flow`]);
//! - bounded rows: transfers are sized from what one TCP flow with the
//!   default congestion control moved over this link at this loss
//!   ([`LinkBudget`]) and stopped at a time bound (a `cut:` row says what
//!   it did); the rows that do not cross the network (loops, pCPU, SHM)
//!   are left out;
//! - the header: the link's parts, its ceiling (iperf3 UDP with no loss and
//!   no cap, same run), its delay as measured, and per loss step what the
//!   emulator itself counted (loss applied, its own drops, late releases).

use std::cell::Cell as StdCell;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::Context;
use pfs_exec::Pattern;
use pfs_session::{BlobView, GramSenderConfig, GramSenderOutcome};
use pfs_transport::{TcpConfig, TcpTransport, Transport};
use pfs_wire::Mode;
use serde::Serialize;

use super::conventional::{congestion_control, run_iperf3, Iperf3Job};
use super::netpath::NetPath;
use super::row::{Row, SuiteHeader};
use super::table::{link_data, view};
use super::{only, plan as suite_plan, Bench, Job, Planned, Sizes, Via};
use crate::args::BenchArgs;
use crate::child::{have, tool, ChildGuard};
use crate::emulink::{udp_probe, EmuLink, LinkCounters, LinkSpec, Loss};
use crate::report::{Cell, Column, Report, Section, Table};
use crate::{labels, Binary, Outcome};

/// How the rows of one loss step are sized and bounded.
#[derive(Debug, Clone, Copy)]
pub struct LinkBudget {
    /// Seconds of an iperf3 row.
    pub iperf_secs: u32,
    /// Seconds a sized transfer should take.
    pub secs: f64,
    /// Bytes per second one TCP flow with the default congestion control
    /// moved over the link at this loss (measured in this step).
    pub goodput: f64,
    /// Offered rate of the UDP capacity row, bit/s: the link's rate, or
    /// the emulator's measured ceiling when the link has no cap.
    pub udp_bits: u64,
}

impl LinkBudget {
    /// Payload bytes the link moves in about [`LinkBudget::secs`]: at least
    /// 1 MB, at most `cap` (the suite's size).
    pub fn payload_bytes(&self, cap: u64) -> u64 {
        ((self.goodput * self.secs) as u64).clamp(1 << 20, cap.max(1 << 20))
    }

    /// Bytes the link's rate moves in about [`LinkBudget::secs`] (at least
    /// 1 MB, at most `cap`): the size of a row over a transport built for
    /// loss (PFS UDP, QUIC), which TCP's goodput at this loss would starve
    /// into a run of its start-up alone.
    pub fn link_bytes(&self, cap: u64) -> u64 {
        ((self.udp_bits as f64 / 8.0 * self.secs) as u64).clamp(1 << 20, cap.max(1 << 20))
    }

    /// Effective bytes of a descriptor row: its tables are about 1/10 000
    /// of what they reference; a thousand times the payload keeps them to
    /// a tenth of the budget on the wire. At least 64 MiB, at most `cap`.
    pub fn exec_bytes(&self, cap: u64) -> u64 {
        ((self.goodput * self.secs * 1000.0) as u64).clamp(64 << 20, cap.max(64 << 20))
    }

    /// The longest a sized row may run: four times its budget and 30 s.
    pub fn limit(&self) -> Duration {
        Duration::from_secs_f64(self.secs * 4.0 + 30.0)
    }
}

/// The rows of a link run: the link's own baselines, the suite's rows that
/// cross the network (PFS over TCP today), the handshake (10 per step), two
/// competing flows.
pub(super) fn plan(sizes: Sizes, pattern: Pattern) -> Vec<Planned> {
    let iperf = |label: &str, job: Iperf3Job| Planned {
        label: labels::conventional(label),
        purpose: "Transfer",
        job: Job::Iperf3(job),
    };
    let mut rows = vec![
        iperf(
            "iperf3 cubic",
            Iperf3Job {
                cc: Some("cubic"),
                ..Iperf3Job::default()
            },
        ),
        iperf(
            "iperf3 bbr",
            Iperf3Job {
                cc: Some("bbr"),
                ..Iperf3Job::default()
            },
        ),
        // The link's capacity: UDP at its rate (filled in per step).
        iperf(
            "iperf3 UDP",
            Iperf3Job {
                udp_bits: Some(0),
                ..Iperf3Job::default()
            },
        ),
        Planned {
            label: labels::conventional("scp"),
            purpose: "Transfer",
            job: Job::Scp,
        },
        Planned {
            label: labels::conventional("rsync"),
            purpose: "Transfer",
            job: Job::Rsync,
        },
    ];
    // Every other row of the suite that crosses the network, whatever its
    // transport (rows added later come along); not the rows above, the
    // ones that cross none (loops, pCPU, shared memory) and the handshake
    // (fewer per step, below).
    rows.extend(suite_plan(sizes, pattern).into_iter().filter(|p| {
        !matches!(
            p.job,
            Job::Iperf3(_)
                | Job::Scp
                | Job::Rsync
                | Job::Handshake { .. }
                | Job::Loop { .. }
                | Job::Pcpu { .. }
                | Job::Pfs {
                    transport: Via::Shm,
                    ..
                }
        )
    }));
    rows.push(Planned {
        label: labels::HANDSHAKE.into(),
        purpose: "Latency",
        job: Job::Handshake { count: 10 },
    });
    rows.push(Planned {
        label: labels::conventional("iperf3 cubic beside iperf3 bbr"),
        purpose: "Transfer",
        job: Job::Compete("cubic", "bbr"),
    });
    // Does PFS over UDP leave room to TCP? One flow of each, same link.
    for cc in ["cubic", "bbr"] {
        rows.push(Planned {
            label: format!("PFS-With-Payload-UDP beside iperf3 {cc}"),
            purpose: "Transfer",
            job: Job::CompeteUdp(cc),
        });
    }
    rows
}

/// A `pfs send --transport udp` payload flow of about `secs` seconds at
/// the link's rate, to a `pfs serve --transport udp` in the receiving
/// namespace: the PFS side of a competing-flows measurement.
pub fn pfs_udp_flow(net: &NetPath, label: &str, pfs: &std::path::Path, bytes: u64) -> anyhow::Result<Flow> {
    let port = net.free_port()?;
    let ip = net.server_ip().to_string();
    let blob = ["--size", "64M", "--seed", "7"];
    let mut server = net.receiver_command(&pfs.to_string_lossy());
    server
        .args(["serve", "--transport", "udp", "--listen", &format!("{ip}:{port}")])
        .args(["--insecure-no-auth", "--max-sessions", "1", "--json"])
        .args(blob)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut client = Command::new(pfs);
    client
        .args(["send", "--transport", "udp", "--to", &format!("{ip}:{port}")])
        .args([
            "--insecure-no-auth",
            "--mode",
            "payload",
            "--json",
            "--bytes",
            &bytes.to_string(),
            // Progress lines on stderr: the flow's timeline (see compete).
            "--log-interval",
            "0.5",
        ])
        .args(["--mtu", &net.mtu().to_string()])
        .args(blob);
    Ok(Flow {
        label: label.to_string(),
        server: Some(server),
        ready: listening_on(net, port, "-Hlun", Duration::from_secs(60)),
        client: Box::new(move |_| client),
        result: Box::new(|out| {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                .with_context(|| format!("pfs send: {}", String::from_utf8_lossy(&out.stderr).trim()))?;
            let r = &v["receiver"];
            let u = &v["udp"];
            Ok(FlowResult {
                bytes: r["effective_bytes"]
                    .as_u64()
                    .context("pfs send JSON: receiver.effective_bytes")?,
                seconds: r["elapsed_s"]
                    .as_f64()
                    .context("pfs send JSON: receiver.elapsed_s")?,
                cpu: (
                    r["user_s"].as_f64().unwrap_or(0.0),
                    r["sys_s"].as_f64().unwrap_or(0.0),
                ),
                timeline: pfs_timeline(&String::from_utf8_lossy(&out.stderr)),
                notes: format!(
                    "UDP: resent {:.3} MB, {} lost, {} congested round trips",
                    u["stream_bytes_resent"].as_f64().unwrap_or(0.0) / 1e6,
                    u["packets_lost"].as_u64().unwrap_or(0),
                    u["congested_rounds"].as_u64().unwrap_or(0)
                ),
            })
        }),
    })
}

/// Seconds and effective bytes sent so far, from `pfs send`'s progress
/// lines (`send: … 1773.5 MB effective (…), … 0.5 s`).
fn pfs_timeline(stderr: &str) -> Vec<(f64, u64)> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("send:"))
        .filter_map(|l| {
            let mb = l
                .split(" MB effective")
                .next()?
                .rsplit(' ')
                .next()?
                .parse::<f64>()
                .ok()?;
            let secs = l
                .trim_end()
                .strip_suffix(" s")?
                .rsplit(' ')
                .next()?
                .parse::<f64>()
                .ok()?;
            Some((secs, (mb * 1e6) as u64))
        })
        .collect()
}

/// Bytes a flow had moved `at` seconds after it started, from its timeline
/// (linear between samples; its total after its end).
fn bytes_at(timeline: &[(f64, u64)], seconds: f64, total: u64, at: f64) -> u64 {
    if at >= seconds {
        return total;
    }
    let mut prev = (0.0, 0u64);
    for &(t, b) in timeline.iter().chain(std::iter::once(&(seconds, total))) {
        if t >= at {
            let span = (t - prev.0).max(1e-9);
            return prev.1 + ((b.saturating_sub(prev.1)) as f64 * (at - prev.0) / span) as u64;
        }
        prev = (t, b);
    }
    total
}

/// One PFS UDP flow beside one iperf3 TCP flow with congestion control
/// `cc`, at once over the link: both rates, each a row. The PFS flow is
/// sized for half the link for `secs`; iperf3 runs twice as long, so the
/// flows overlap for about `secs` whatever the split, and the shares are
/// taken over the overlap.
pub(super) fn compete_pfs_udp(
    net: &NetPath,
    pfs: &std::path::Path,
    cc: &'static str,
    budget: Option<&LinkBudget>,
    secs: u32,
) -> Vec<Row> {
    let la = format!("PFS-With-Payload-UDP beside iperf3 {cc}");
    let lb = labels::conventional(&format!("iperf3 {cc}, beside PFS UDP"));
    let bytes = budget.map_or(1 << 30, |b| ((b.udp_bits as f64 / 16.0) * f64::from(secs)) as u64);
    let flows =
        pfs_udp_flow(net, &la, pfs, bytes).and_then(|a| Ok(vec![a, iperf3_flow(net, &lb, cc, secs * 2)?]));
    match flows {
        Ok(flows) => compete(net, flows, Duration::from_secs(u64::from(secs) * 6 + 60)),
        Err(e) => vec![
            Row::skipped(&la, "Transfer", format!("{e:#}")),
            Row::skipped(&lb, "Transfer", format!("{e:#}")),
        ],
    }
}

/// Why a bounded send did not return an outcome.
#[derive(Debug)]
pub enum SendError {
    /// The session failed.
    Failed(anyhow::Error),
    /// It was stopped at its time bound; what it had done by then.
    Cut(String),
}

/// How long a bounded send waits for a receiver that still runs the
/// session before it (cut at its bound: on a lossy link the receiver may
/// see the end of that connection seconds later) and answers BUSY.
const BUSY_WAIT: Duration = Duration::from_secs(60);

/// One TCP session to `addr` (protected when `sec` is given) that is cut
/// at `limit`: a watchdog shuts the socket down, the session fails, and
/// the error says how far the sender had got. A receiver that answers
/// BUSY is asked again every second for up to [`BUSY_WAIT`].
pub(super) fn send_bounded(
    addr: &str,
    sec: Option<&pfs_auth::ClientSecurity>,
    view: &BlobView<'_>,
    mut cfg: GramSenderConfig,
    limit: Duration,
) -> Result<(GramSenderOutcome, &'static str), SendError> {
    cfg.log_interval = Some(Duration::from_secs(1));
    let first = Instant::now();
    loop {
        match send_cut_at(addr, sec, view, &cfg, limit) {
            Err(SendError::Failed(e)) if is_busy(&e) && first.elapsed() < BUSY_WAIT => {
                std::thread::sleep(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// Whether `e` is a receiver's BUSY refusal (all its session slots taken).
fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<pfs_session::SessionError>(),
            Some(pfs_session::SessionError::Refused { code, .. }) if *code == pfs_wire::ErrorCode::Busy as u16
        )
    })
}

/// One attempt of [`send_bounded`].
fn send_cut_at(
    addr: &str,
    sec: Option<&pfs_auth::ClientSecurity>,
    view: &BlobView<'_>,
    cfg: &GramSenderConfig,
    limit: Duration,
) -> Result<(GramSenderOutcome, &'static str), SendError> {
    let failed = |e: anyhow::Error| SendError::Failed(e);
    let sa = addr
        .to_socket_addrs()
        .map_err(|e| failed(e.into()))?
        .next()
        .with_context(|| format!("{addr} resolves to nothing"))
        .map_err(failed)?;
    let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(30))
        .with_context(|| format!("connecting to {addr}"))
        .map_err(failed)?;
    let watch = stream.try_clone().map_err(|e| failed(e.into()))?;
    let cut = Arc::new(AtomicBool::new(false));
    let (done, wait) = mpsc::channel::<()>();
    let dog = {
        let cut = cut.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                cut.store(true, Ordering::Relaxed);
                let _ = watch.shutdown(Shutdown::Both);
            }
        })
    };
    let started = Instant::now();
    let last = StdCell::new(None);
    let result = (|| -> anyhow::Result<(GramSenderOutcome, &'static str)> {
        let tcp = TcpTransport::from_stream(stream, &TcpConfig::default())?;
        let mut t: Box<dyn Transport> = Box::new(tcp);
        if let Some(sec) = sec {
            t = Box::new(pfs_auth::connect(t, addr, pfs_auth::Service::Blob, sec)?);
        }
        let kind = t.kind();
        let out = pfs_session::send_session(&mut *t, view, cfg, &mut |p| last.set(Some(*p)))?;
        Ok((out, kind))
    })();
    drop(done);
    let _ = dog.join();
    match result {
        Ok(done) => Ok(done),
        Err(_) if cut.load(Ordering::Relaxed) => {
            let planned = match cfg.spec.total {
                pfs_exec::Total::Bytes(b) => b,
                pfs_exec::Total::Grams(_) => 0,
            };
            Err(SendError::Cut(match last.get() {
                Some(p) => format!(
                    "stopped at its {:.0} s bound; by {:.1} s the sender had sent {:.1} MB effective of {:.1} MB, {:.3} MB of frames (the sender's count: the receiver's report never came)",
                    limit.as_secs_f64(),
                    p.elapsed.as_secs_f64(),
                    p.effective_bytes as f64 / 1e6,
                    planned as f64 / 1e6,
                    p.wire_bytes as f64 / 1e6
                ),
                None => format!(
                    "stopped at its {:.0} s bound ({:.1} s) before its first progress report; {:.1} MB planned",
                    limit.as_secs_f64(),
                    started.elapsed().as_secs_f64(),
                    planned as f64 / 1e6
                ),
            }))
        }
        Err(e) => Err(failed(e)),
    }
}

/// Waits until a flow's server takes connections (it gets the running
/// server, whose stdout and stderr it may take); returns what the client
/// must know of it, e.g. the address a server announced (or nothing).
pub type Ready = Box<dyn FnMut(&mut ChildGuard) -> anyhow::Result<String>>;

/// Builds a flow's client from what [`Ready`] returned.
pub type Client = Box<dyn FnOnce(&str) -> Command>;

/// Reads what a flow moved from its client's output.
pub type FlowOutcome = Box<dyn Fn(&std::process::Output) -> anyhow::Result<FlowResult>>;

/// One flow of a competing-flows measurement ([`compete`]): any program
/// pair, e.g. iperf3 ([`iperf3_flow`]) or `pfs serve`/`pfs send`.
pub struct Flow {
    /// Its row's label.
    pub label: String,
    /// Its receiving side, started before any client (in namespace B:
    /// build it with [`NetPath::receiver_command`]; set its stdout and
    /// stderr, which are otherwise the bench's own); killed at the end.
    pub server: Option<Command>,
    /// Waits until the server takes connections.
    pub ready: Ready,
    /// Its sending side (started from this thread: namespace A on a link).
    pub client: Client,
    /// What it moved, from the client's output.
    pub result: FlowOutcome,
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("label", &self.label)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// What one flow moved, on its receiving side.
#[derive(Debug, Clone)]
pub struct FlowResult {
    /// Bytes received.
    pub bytes: u64,
    /// Over this many seconds.
    pub seconds: f64,
    /// Receiver CPU seconds (user, system), when the flow knows them.
    pub cpu: (f64, f64),
    /// Bytes sent so far at points in time (seconds since the flow's
    /// start), from the sender's own reports: how the shares over the
    /// flows' overlap are taken. Empty when the flow reports none.
    pub timeline: Vec<(f64, u64)>,
    /// What the row's notes should say about it.
    pub notes: String,
}

/// Runs `flows` at the same time over `net` (servers first, then every
/// client at once) and reports each as a row, with its share of what they
/// moved together. Bounded: a client still running at `limit` is killed
/// and its row fails.
pub fn compete(net: &NetPath, flows: Vec<Flow>, limit: Duration) -> Vec<Row> {
    let labels: Vec<String> = flows.iter().map(|f| f.label.clone()).collect();
    let fail_all =
        |e: &anyhow::Error| -> Vec<Row> { labels.iter().map(|l| Row::failed(l, "Transfer", e)).collect() };
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for mut f in flows {
        let mut known = String::new();
        if let Some(mut cmd) = f.server.take() {
            cmd.stdin(Stdio::null());
            let mut guard = match cmd.spawn() {
                Ok(c) => ChildGuard::new(c),
                Err(e) => {
                    return fail_all(
                        &anyhow::Error::from(e).context(format!("starting {}'s server", f.label)),
                    )
                }
            };
            match (f.ready)(&mut guard) {
                Ok(k) => known = k,
                Err(e) => return fail_all(&e.context(format!("{}'s server", f.label))),
            }
            servers.push(guard);
        }
        clients.push((f.label, (f.client)(&known), f.result));
    }
    let wire0 = net.wire_counter();
    let runs: Vec<_> = clients
        .into_iter()
        .map(|(label, client, result)| {
            let handle = std::thread::spawn(move || crate::child::run_client(client, limit));
            (label, handle, result)
        })
        .collect();
    let mut results = Vec::new();
    for (label, handle, result) in runs {
        let out = handle
            .join()
            .map_err(|_| anyhow::anyhow!("client thread panicked"))
            .and_then(|r| r);
        results.push((label, out.and_then(|o| result(&o))));
    }
    let wire = net.wire_counter().saturating_sub(wire0);
    drop(servers);
    let total: u64 = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().map(|f| f.bytes))
        .sum();
    // The shares while every flow still ran: up to the first flow's end,
    // when every flow has a timeline (else over the whole run, as moved).
    let done: Vec<&FlowResult> = results.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    let overlap = (done.len() == results.len() && done.iter().all(|f| !f.timeline.is_empty()))
        .then(|| done.iter().map(|f| f.seconds).fold(f64::INFINITY, f64::min))
        .filter(|o| o.is_finite() && *o > 0.0);
    let in_overlap = |f: &FlowResult| overlap.map(|o| bytes_at(&f.timeline, f.seconds, f.bytes, o));
    let overlap_total: u64 = done.iter().filter_map(|f| in_overlap(f)).sum();
    results
        .iter()
        .map(|(label, r)| match r {
            Ok(f) => {
                let others: Vec<&str> = labels
                    .iter()
                    .filter(|l| *l != label)
                    .map(String::as_str)
                    .collect();
                let mut row = Row::measured(label, "Transfer", f.bytes, 0, f.seconds, f.cpu.0, f.cpu.1);
                row.transport = "TCP".into();
                let share = match (overlap, in_overlap(f)) {
                    (Some(o), Some(b)) => format!(
                        "while both ran (the first {o:.1} s): {:.1} Mbit/s sent, {:.1} % of the flows' bytes",
                        b as f64 * 8.0 / o / 1e6,
                        b as f64 * 100.0 / overlap_total.max(1) as f64
                    ),
                    _ => format!(
                        "{:.1} % of what the flows moved together",
                        f.bytes as f64 * 100.0 / total.max(1) as f64
                    ),
                };
                row.notes = format!(
                    "at the same time as {}: {share}; {}; wire: the flows together put {:.3} MB on the link (not split per flow)",
                    others.join(", "),
                    f.notes,
                    wire as f64 / 1e6
                );
                row
            }
            Err(e) => Row::failed(label, "Transfer", e),
        })
        .collect()
}

/// Waits until something listens on TCP `port` on the receiving side of
/// `net`, asking `ss(8)` there: a probe connection would use up a server
/// that serves one client (`iperf3 -s -1`), and on a lossy link its
/// teardown can still occupy the server when the real client arrives.
pub fn listening(net: &NetPath, port: u16, timeout: Duration) -> Ready {
    listening_on(net, port, "-Hltn", timeout)
}

/// As [`listening`], with `ss` flags choosing the sockets (`-Hlun`: UDP).
pub fn listening_on(net: &NetPath, port: u16, flags: &'static str, timeout: Duration) -> Ready {
    let probe = net.receiver_command("ss");
    let argv: Vec<std::ffi::OsString> = std::iter::once(probe.get_program())
        .chain(probe.get_args())
        .map(ToOwned::to_owned)
        .collect();
    Box::new(move |server: &mut ChildGuard| {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if !server.running() {
                anyhow::bail!("the server exited before listening on port {port}");
            }
            let out = Command::new(&argv[0])
                .args(&argv[1..])
                .args([flags, &format!("sport = :{port}")])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .context("running ss(8)")?;
            if !out.stdout.trim_ascii().is_empty() {
                return Ok(String::new());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::bail!("nothing listened on port {port} within {timeout:?}")
    })
}

/// An iperf3 TCP flow with congestion control `cc` for `secs` seconds, for [`compete`].
pub fn iperf3_flow(net: &NetPath, label: &str, cc: &'static str, secs: u32) -> anyhow::Result<Flow> {
    let program = tool("iperf3", "iperf3");
    if !have(&program) {
        anyhow::bail!("iperf3 not installed (apt-get install iperf3)");
    }
    congestion_control(cc).map_err(anyhow::Error::msg)?;
    let port = net.free_port()?;
    let ip = net.server_ip().to_string();
    let mut server = net.receiver_command(&program);
    server
        .args(["-s", "-1", "-B", &ip, "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Ok(Flow {
        label: label.to_string(),
        server: Some(server),
        ready: listening(net, port, Duration::from_secs(30)),
        client: Box::new(move |_| {
            let mut client = Command::new(&program);
            client.args([
                "-c",
                &ip,
                "-p",
                &port.to_string(),
                "-t",
                &secs.to_string(),
                "-J",
                "-C",
                cc,
            ]);
            client
        }),
        result: Box::new(move |out| {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if let Some(e) = v["error"].as_str() {
                anyhow::bail!("iperf3: {e}");
            }
            let sum = &v["end"]["sum_received"];
            let seconds = sum["seconds"]
                .as_f64()
                .context("iperf3 JSON: end.sum_received.seconds")?;
            let cpu = &v["end"]["cpu_utilization_percent"];
            // The sender's one-second intervals, summed up.
            let mut sent = 0u64;
            let timeline = v["intervals"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|i| {
                    sent += i["sum"]["bytes"].as_u64()?;
                    Some((i["sum"]["end"].as_f64()?, sent))
                })
                .collect();
            Ok(FlowResult {
                bytes: sum["bytes"]
                    .as_u64()
                    .context("iperf3 JSON: end.sum_received.bytes")?,
                seconds,
                timeline,
                cpu: (
                    cpu["remote_user"].as_f64().unwrap_or(0.0) / 100.0 * seconds,
                    cpu["remote_system"].as_f64().unwrap_or(0.0) / 100.0 * seconds,
                ),
                notes: format!("iperf3, congestion control {cc}"),
            })
        }),
    })
}

/// Two iperf3 TCP flows at once, with congestion controls `first` and `second`.
pub(super) fn compete_iperf3(
    net: &NetPath,
    first: &'static str,
    second: &'static str,
    secs: u32,
) -> Vec<Row> {
    let label = |cc: &str, other: &str| labels::conventional(&format!("iperf3 {cc}, beside {other}"));
    let (la, lb) = (label(first, second), label(second, first));
    let flows =
        iperf3_flow(net, &la, first, secs).and_then(|a| Ok(vec![a, iperf3_flow(net, &lb, second, secs)?]));
    match flows {
        Ok(flows) => compete(net, flows, Duration::from_secs(u64::from(secs) + 60)),
        Err(e) => vec![
            Row::skipped(&la, "Transfer", format!("{e:#}")),
            Row::skipped(&lb, "Transfer", format!("{e:#}")),
        ],
    }
}

/// The emulated link in the report header.
#[derive(Debug, Clone, Serialize)]
pub struct LinkHeader {
    /// As asked (`rtt 50 ms, loss 1 %, rate 500 Mbit/s`).
    pub spec: String,
    /// The configured round trip, ms.
    pub rtt_ms: f64,
    /// The rate cap, Mbit/s (none: `null`).
    pub rate_mbit_s: Option<f64>,
    /// The loss rates of the steps, percent.
    pub losses_pct: Vec<f64>,
    /// Its parts and where each acts.
    pub parts: String,
    /// The emulator's ceiling, as measured in this run.
    pub ceiling: String,
    /// The ceiling, Mbit/s received (0 when it could not be measured).
    pub ceiling_mbit_s: f64,
    /// The delay as measured through the link (probe, no loss, no load).
    pub delay: String,
    /// TCP settings the rows share.
    pub tcp: String,
    /// What the emulator counted during each step.
    pub steps: Vec<StepFacts>,
}

/// The emulator's own account of one loss step.
#[derive(Debug, Clone, Serialize)]
pub struct StepFacts {
    /// The loss rate of the step, percent.
    pub loss_pct: f64,
    /// One line for people.
    pub text: String,
    /// Every counter, both directions.
    pub counters: LinkCounters,
}

impl StepFacts {
    fn new(loss: Loss, c: LinkCounters) -> StepFacts {
        let (f, b) = (&c.forward, &c.back);
        let late_over = f.line.late_over_1ms + b.line.late_over_1ms;
        let out = (f.line.out_packets + b.line.out_packets).max(1);
        let text = format!(
            "dropped by the loss rule A→B {:.2} % of {} packets, B→A {:.2} % of {}; emulator drops {} (delay line full {}, TUN queue {}, I/O errors {}); \
             rate-cap queue drops A→B {}, B→A {}; releases late by mean {:.3} ms, max {:.3} ms ({} of {} > 1 ms); \
             largest packet {} B, {} over the MTU; delay line CPU {:.2} s + {:.2} s; UDP datagrams dropped by full socket buffers on the hosts {}",
            f.loss.lost_percent(),
            f.loss.seen,
            b.loss.lost_percent(),
            b.loss.seen,
            f.emulator_drops() + b.emulator_drops(),
            f.line.overflow + b.line.overflow,
            f.tun_dropped + b.tun_dropped,
            f.line.errors + b.line.errors,
            f.line.queue_drops,
            b.line.queue_drops,
            (f.line.late_sum_ns + b.line.late_sum_ns) as f64 / out as f64 / 1e6,
            f.line.late_max_ns.max(b.line.late_max_ns) as f64 / 1e6,
            late_over,
            out,
            f.line.max_len.max(b.line.max_len),
            f.loss.oversize + b.loss.oversize,
            f.line.cpu_us as f64 / 1e6,
            b.line.cpu_us as f64 / 1e6,
            c.udp_rcvbuf_errors,
        );
        StepFacts {
            loss_pct: loss.percent(),
            text,
            counters: c,
        }
    }
}

/// The emulator's ceiling: iperf3 UDP as fast as it sends, then one TCP
/// flow with the default congestion control, both with no loss and no cap
/// at the configured delay; what the emulator dropped and how late it was
/// meanwhile. Restores loss and cap afterwards. Returns the text and the
/// UDP rate received, Mbit/s.
fn measure_ceiling(bench: &mut Bench, secs: u32) -> anyhow::Result<(String, f64)> {
    let link = bench.net.link_mut().context("not an emulated link")?;
    let (loss, rate) = (link.loss(), link.spec().rate);
    link.set_loss(Loss::NONE)?;
    link.set_rate(None)?;
    let mut parts = Vec::new();
    let mut udp_mbit = 0.0;
    for (what, job) in [
        (
            "UDP",
            Iperf3Job {
                udp_bits: Some(0),
                ..Iperf3Job::default()
            },
        ),
        ("TCP", Iperf3Job::default()),
    ] {
        let link = bench.net.link().context("not an emulated link")?;
        link.take_peaks();
        let c0 = link.counters()?;
        let row = run_iperf3("ceiling", &bench.net, secs, bench.pin, job);
        let d = bench
            .net
            .link()
            .context("not an emulated link")?
            .counters()?
            .since(&c0);
        let f = &d.forward;
        let emulator = format!(
            "the emulator dropped {} (TUN queue full {}, delay line full {}), released late by max {:.3} ms, delay line CPU {:.2} s in {secs} s",
            f.emulator_drops(),
            f.tun_dropped,
            f.line.overflow,
            f.line.late_max_ns as f64 / 1e6,
            f.line.cpu_us as f64 / 1e6,
        );
        if !row.ran() {
            parts.push(format!("{what}: {}", row.notes_shown()));
            continue;
        }
        let mbit = row.effective_mb_s * 8.0;
        if what == "UDP" {
            udp_mbit = mbit;
        }
        parts.push(format!(
            "{what} {mbit:.0} Mbit/s received ({}); {emulator}",
            row.notes.split("; wire from").next().unwrap_or_default()
        ));
    }
    let link = bench.net.link_mut().context("not an emulated link")?;
    link.set_loss(loss)?;
    link.set_rate(rate)?;
    Ok((
        format!(
            "no loss, no cap, delay as configured, iperf3 for {secs} s: {}",
            parts.join(" · ")
        ),
        udp_mbit,
    ))
}

/// The loss steps of a run: `--link-loss-sweep`, else the spec's loss.
fn losses(args: &BenchArgs, spec: &LinkSpec) -> Vec<Loss> {
    match &args.link_loss_sweep {
        Some(sweep) => sweep.0.clone(),
        None => vec![spec.loss()],
    }
}

/// Whether `p` is sized from the step's TCP goodput.
fn sized(p: &Planned) -> bool {
    matches!(p.job, Job::Pfs { .. } | Job::Scp | Job::Rsync)
}

/// Whether `p` is a plain iperf3 TCP row with congestion control `cc`.
fn is_default_tcp(p: &Planned, cc: &str) -> bool {
    matches!(p.job, Job::Iperf3(j) if j.udp_bits.is_none() && j.len.is_none() && j.cc.is_none_or(|c| c == cc))
}

/// Runs the suite's network rows over the emulated link `spec`, once per loss step.
pub(super) fn run(args: &BenchArgs, spec: LinkSpec, sizes: Sizes, pfs: &Binary) -> anyhow::Result<Outcome> {
    let steps = losses(args, &spec);
    let planned = only(plan(sizes, args.pattern.pattern()), args)?;
    // Slow start over a long round trip needs seconds to reach the rate.
    let iperf_secs = (((if args.full { 10.0 } else { 5.0 }) * args.scale).ceil() as u32).max(1);
    eprintln!("pfs bench: building the emulated link ({spec}) …");
    let net = NetPath::Emulated(EmuLink::new(spec, args.mtu)?);
    let mut bench = Bench::start(args, pfs, sizes, &planned, net, steps.len())?;

    eprintln!("pfs bench: the emulator's ceiling (iperf3 UDP, no loss, no cap) …");
    let (ceiling, ceiling_mbit) = match measure_ceiling(&mut bench, iperf_secs) {
        Ok(c) => c,
        Err(e) => (format!("not measured: {e:#}"), 0.0),
    };
    let link = bench.net.link_mut().context("not an emulated link")?;
    let loss0 = link.loss();
    link.set_loss(Loss::NONE)?;
    let delay = match udp_probe(link, 200, Duration::from_millis(2)) {
        Ok(p) => format!(
            "{} (configured rtt {}; 200 UDP probes 2 ms apart, no loss, no load)",
            p.summary(),
            crate::emulink::spec::fmt_duration(spec.rtt.unwrap_or_default())
        ),
        Err(e) => format!("not measured: {e:#}"),
    };
    link.set_loss(loss0)?;
    let cc = link.default_congestion_control();
    let tcp = format!(
        "default congestion control {cc} (PFS rows, scp, rsync); tcp_rmem/tcp_wmem max {} MB in both namespaces",
        crate::emulink::TCP_BUFFER_MAX >> 20
    );
    let udp_bits = spec
        .rate
        .map(|r| r.bits_per_s())
        .unwrap_or((ceiling_mbit * 1e6) as u64)
        .max(1_000_000);

    let mut done: Vec<(Loss, Vec<Row>, StepFacts)> = Vec::new();
    for &loss in &steps {
        let link = bench.net.link_mut().context("not an emulated link")?;
        link.set_loss(loss)?;
        link.take_peaks();
        let c0 = link.counters()?;
        let mut budget = LinkBudget {
            iperf_secs,
            secs: f64::from(iperf_secs),
            goodput: 0.0,
            udp_bits,
        };
        let mut rows = Vec::new();
        for p in &planned {
            if sized(p) && budget.goodput == 0.0 {
                // No plain TCP row ran before this one: measure the link briefly.
                eprintln!("pfs bench: loss {loss}: one TCP flow ({cc}) to size the transfers …");
                let probe = run_iperf3("probe", &bench.net, 2, bench.pin, Iperf3Job::default());
                budget.goodput = if probe.ran() {
                    probe.effective_mb_s * 1e6
                } else {
                    1e6
                };
            }
            eprintln!("pfs bench: loss {loss}: {} …", p.label);
            let link = bench.net.link().context("not an emulated link")?;
            link.take_peaks();
            let before = link.counters()?;
            let mut got = bench.run_row(p, args, Some(&budget))?;
            let during = bench
                .net
                .link()
                .context("not an emulated link")?
                .counters()?
                .since(&before);
            for r in got.iter_mut().filter(|r| r.ran()) {
                r.add_note(&row_emulator_note(&during));
            }
            if is_default_tcp(p, &cc) {
                if let Some(r) = got.iter().find(|r| r.ran()) {
                    budget.goodput = (r.effective_mb_s * 1e6).max(10_000.0);
                }
            }
            rows.extend(got);
        }
        let rate_mbit = spec.rate.map(|r| r.mbit_per_s()).unwrap_or(ceiling_mbit);
        add_link_ratios(&mut rows, rate_mbit);
        let link = bench.net.link_mut().context("not an emulated link")?;
        let facts = StepFacts::new(loss, link.counters()?.since(&c0));
        done.push((loss, rows, facts));
    }
    let settled = bench.finish();
    let parts = bench.net.link().map(EmuLink::describe).unwrap_or_default();
    let link_header = LinkHeader {
        spec: spec.to_string(),
        rtt_ms: spec.rtt.unwrap_or_default().as_secs_f64() * 1e3,
        rate_mbit_s: spec.rate.map(|r| r.mbit_per_s()),
        losses_pct: steps.iter().map(|l| l.percent()).collect(),
        parts,
        ceiling,
        ceiling_mbit_s: ceiling_mbit,
        delay,
        tcp,
        steps: done.iter().map(|(_, _, f)| f.clone()).collect(),
    };
    // The namespaces go now; the report needs none of them.
    drop(bench);
    let header = SuiteHeader::new(pfs, settled.settings(Some(link_header)));
    let rate_mbit = spec.rate.map(|r| r.mbit_per_s()).unwrap_or(ceiling_mbit);
    let fig = figure(&done, rate_mbit);
    let stepped: Vec<(f64, &[Row])> = done.iter().map(|(l, r, _)| (l.percent(), r.as_slice())).collect();
    let data = link_data(&stepped);
    let report = link_report(&header, &done, fig.clone(), rate_mbit);
    let doc = report.json();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("bench.csv"), data.csv())?;
        std::fs::write(dir.join("figure.csv"), fig.csv())?;
        std::fs::write(dir.join("bench.json"), serde_json::to_string_pretty(&doc)?)?;
        std::fs::write(dir.join("bench.md"), report.markdown())?;
        eprintln!(
            "pfs bench: wrote bench.csv (every row with its loss), figure.csv, bench.json, bench.md to {} (no plot for link runs)",
            dir.display()
        );
    }
    let all: Vec<Row> = done.into_iter().flat_map(|(_, r, _)| r).collect();
    Ok(super::outcome(&all))
}

/// What the emulator did during one row: how late it released packets
/// (both directions) and what it dropped that the loss rule did not.
fn row_emulator_note(d: &LinkCounters) -> String {
    let (f, b) = (&d.forward.line, &d.back.line);
    let out = (f.out_packets + b.out_packets).max(1);
    format!(
        "emulator: releases late by mean {:.3} ms, max {:.3} ms, {} of {} packets > 1 ms; own drops {}",
        (f.late_sum_ns + b.late_sum_ns) as f64 / out as f64 / 1e6,
        f.late_max_ns.max(b.late_max_ns) as f64 / 1e6,
        f.late_over_1ms + b.late_over_1ms,
        out,
        d.forward.emulator_drops() + d.back.emulator_drops()
    )
}

/// Notes each measured row of one step with its goodput against the link
/// rate, and each PFS payload row against the iperf3 rows of the step.
fn add_link_ratios(rows: &mut [Row], rate_mbit: f64) {
    let rate_of = |rows: &[Row], label: &str| {
        rows.iter()
            .find(|r| r.ran() && r.label == label)
            .map(|r| r.effective_mb_s)
    };
    let cubic = rate_of(rows, &labels::conventional("iperf3 cubic"));
    let bbr = rate_of(rows, &labels::conventional("iperf3 bbr"));
    for r in rows.iter_mut().filter(|r| r.ran() && r.purpose != "Latency") {
        let mut notes = Vec::new();
        if rate_mbit > 0.0 && r.wire_mb == 0.0 {
            // Competing flows share one counter: no wire of their own.
            notes.push(format!(
                "effective {:.1} % of the link rate",
                r.effective_mb_s * 8.0 / rate_mbit * 100.0
            ));
        } else if rate_mbit > 0.0 {
            let eff = r.effective_mb_s * 8.0 / rate_mbit;
            let wire = if r.elapsed_s > 0.0 {
                r.wire_mb / r.elapsed_s * 8.0 / rate_mbit
            } else {
                0.0
            };
            notes.push(format!(
                "effective {:.1} % of the link rate, wire {:.1} %",
                eff * 100.0,
                wire * 100.0
            ));
        }
        if r.label.starts_with(&labels::mode(Mode::Payload, "TCP")) {
            if let Some(b) = cubic.filter(|b| *b > 0.0) {
                notes.push(format!("{:.2}× iperf3 cubic", r.effective_mb_s / b));
            }
            if let Some(b) = bbr.filter(|b| *b > 0.0) {
                notes.push(format!("{:.2}× iperf3 bbr", r.effective_mb_s / b));
            }
        }
        if !notes.is_empty() {
            r.add_note(&notes.join(", "));
        }
    }
}

/// Columns of the figure: goodput by loss, one line per row and loss.
const FIGURE: [Column; 8] = [
    Column::text("label", 40),
    Column::text("integ", 5).right(),
    Column::num("loss_%", 6),
    Column::num("eff_MB", 10),
    Column::num("wire_MB", 10),
    Column::num("wire/eff", 10),
    Column::num("eff_MB/s", 10),
    Column::num("of_rate_%", 9),
];

/// Goodput against loss: for each row (in plan order), one line per loss
/// step; effective beside wire bytes, goodput as a share of the link rate.
fn figure(done: &[(Loss, Vec<Row>, StepFacts)], rate_mbit: f64) -> Table {
    let mut t = Table::new(&FIGURE);
    let Some((_, first, _)) = done.first() else {
        return t;
    };
    for (i, r0) in first.iter().enumerate() {
        if r0.purpose == "Latency" {
            continue;
        }
        for (loss, rows, _) in done {
            let Some(r) = rows.get(i).filter(|r| r.label == r0.label) else {
                continue;
            };
            let m = |v: f64, d: usize| super::table::measured(r, v, d);
            t.push(vec![
                Cell::text(&r.label),
                Cell::text(r.integrity_alg()),
                Cell::Num(loss.percent(), 2),
                m(r.effective_mb, 1),
                m(r.wire_mb, 3),
                m(r.wire_ratio, 6),
                m(r.effective_mb_s, 2),
                if rate_mbit > 0.0 {
                    m(r.effective_mb_s * 8.0 / rate_mbit * 100.0, 1)
                } else {
                    Cell::Missing
                },
            ]);
        }
    }
    t
}

/// The report of a run over an emulated link: the rows of each loss step
/// (the JSON document carries them under `steps`, with what the emulator
/// did), then goodput by loss (`figure`).
fn link_report(
    header: &SuiteHeader,
    done: &[(Loss, Vec<Row>, StepFacts)],
    fig: Table,
    rate_mbit: f64,
) -> Report {
    let mut r = super::table::report(header);
    for (loss, rows, facts) in done {
        r = r.section(Section::shown(view(rows)).titled(format!("loss {loss} — {}", facts.text)));
    }
    r = r.section(
        Section::one("figure", fig)
            .titled(format!(
                "goodput by loss (of_rate_%: effective MB/s as a share of the {rate_mbit:.0} Mbit/s link rate)"
            ))
            .noted(
                "MB = 10^6 bytes. Receiver-side numbers (PFS: from the receiver's COMPLETE report; iperf3: its server side). \
                 Wire: bytes both ends put on the link (IP headers included, lost packets too).",
            ),
    );
    let steps: Vec<serde_json::Value> = done
        .iter()
        .map(|(l, rows, f)| {
            serde_json::json!({
                "loss_pct": l.percent(),
                "emulator": f,
                "rows": super::table::data(rows).json(),
            })
        })
        .collect();
    r.field("steps", steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_sizes_and_bounds() {
        let b = LinkBudget {
            iperf_secs: 5,
            secs: 5.0,
            goodput: 2e6,
            udp_bits: 500_000_000,
        };
        assert_eq!(b.payload_bytes(4_000_000_000), 10_000_000);
        assert_eq!(b.payload_bytes(5_000_000), 5_000_000);
        assert_eq!(b.exec_bytes(16_000_000_000), 10_000_000_000);
        assert_eq!(b.limit(), Duration::from_secs(50));
        // A link that hardly moves anything still gets a transfer worth measuring.
        let slow = LinkBudget { goodput: 1e3, ..b };
        assert_eq!(slow.payload_bytes(4_000_000_000), 1 << 20);
        assert_eq!(slow.exec_bytes(16_000_000_000), 64 << 20);
    }

    #[test]
    fn busy_refusals_are_told_apart() {
        let busy = pfs_session::SessionError::Refused {
            code: pfs_wire::ErrorCode::Busy as u16,
            message: "1 sessions already running".into(),
        };
        assert!(is_busy(&anyhow::Error::from(busy).context("sending")));
        let other = pfs_session::SessionError::Refused {
            code: pfs_wire::ErrorCode::BlobMismatch as u16,
            message: "other blob".into(),
        };
        assert!(!is_busy(&anyhow::Error::from(other)));
        assert!(!is_busy(&anyhow::anyhow!("BUSY in a message is not a refusal")));
    }

    #[test]
    fn link_plan_keeps_network_rows_only() {
        let p = plan(super::super::QUICK, Pattern::Random);
        let labels: Vec<&str> = p.iter().map(|p| p.label.as_str()).collect();
        for l in [
            "Conventional (iperf3 cubic)",
            "Conventional (iperf3 bbr)",
            "Conventional (iperf3 UDP)",
            "Conventional (scp)",
            "PFS-With-Payload-TCP",
            "Native PFS Offset-only Mode - TCP",
            "Native PFS Arithmetic Mode - TCP",
        ] {
            assert!(labels.contains(&l), "{l} missing from {labels:?}");
        }
        assert!(!labels
            .iter()
            .any(|l| l.contains("SHM") || l.contains("loop") || l.starts_with("pCPU")));
        assert!(p.iter().any(|p| matches!(p.job, Job::Handshake { count: 10 })));
        assert!(p.iter().any(|p| matches!(p.job, Job::Compete("cubic", "bbr"))));
    }

    #[test]
    fn figure_lines_follow_rows_then_losses() {
        let row = |label: &str, mb_s: f64| {
            let mut r = Row::measured(
                label,
                "Transfer",
                (mb_s * 1e6) as u64,
                (mb_s * 1.05e6) as u64,
                1.0,
                0.0,
                0.0,
            );
            r.notes = "pattern=random".into();
            r
        };
        let facts = |l| StepFacts::new(l, LinkCounters::default());
        let l0 = Loss::NONE;
        let l1 = Loss::from_per_10k(100).unwrap();
        let done = vec![
            (l0, vec![row("A", 50.0), row("B", 10.0)], facts(l0)),
            (
                l1,
                vec![row("A", 5.0), Row::cut("B", "Transfer", "stopped".into())],
                facts(l1),
            ),
        ];
        let cut = vec![(
            l1,
            vec![row("A", 5.0), Row::cut("C", "Transfer", "stopped".into())],
            facts(l1),
        )];
        let report = link_report(
            &super::super::table::tests::test_header(None),
            &cut,
            figure(&cut, 500.0),
            500.0,
        );
        crate::report::check_not_run_row(&report, "C");
        assert_eq!(report.json()["steps"][0]["rows"][1]["notes"], "cut: stopped");
        let t = figure(&done, 500.0).text();
        let lines: Vec<&str> = t.lines().skip(1).collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with('A') && lines[0].contains("80.0"), "{t}");
        assert!(lines[1].starts_with('A') && lines[1].contains("1.00"), "{t}");
        assert!(lines[3].starts_with('B') && lines[3].contains('—'), "{t}");
    }

    #[test]
    fn timelines_give_the_bytes_of_the_overlap() {
        let stderr = "pfs: warning: clear\n\
                      send:  44.3% 1851 grams, 1773.5 MB effective (3546.5 MB/s), 1773.732 MB wire (3547.0 MB/s), 0.5 s\n\
                      send:  88.6% 3698 grams, 3544.3 MB effective (3544.0 MB/s), 3544.785 MB wire (3544.5 MB/s), 1.0 s\n";
        let t = pfs_timeline(stderr);
        assert_eq!(t, vec![(0.5, 1_773_500_000), (1.0, 3_544_300_000)]);
        // Halfway between samples, before the first, and past the end.
        assert_eq!(bytes_at(&t, 1.5, 4_000_000_000, 0.75), 2_658_900_000);
        assert_eq!(bytes_at(&t, 1.5, 4_000_000_000, 0.25), 886_750_000);
        assert_eq!(bytes_at(&t, 1.5, 4_000_000_000, 1.25), 3_772_150_000);
        assert_eq!(bytes_at(&t, 1.5, 4_000_000_000, 2.0), 4_000_000_000);
    }
}
