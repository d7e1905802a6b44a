//! `pfs bench`: the labelled benchmark suite on loopback. Starts its own
//! receiver (`pfs serve` as a child process, its own blob) and its own
//! conventional baselines, runs every row in one session on one machine, and
//! prints one table; ratios are taken against baselines from the same run.
//!
//! Rows are declared in one place ([`plan`]); a baseline whose tool is
//! missing is printed as skipped with the install hint, never dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pfs_exec::execute::resolve;
use pfs_exec::{Digest, Pattern, Schedule, ScheduleSpec, Total};
use pfs_session::sys::{pin_current_thread, thread_usage};
use pfs_session::SessionStats;
use pfs_wire::{IntegrityAlg, Mode};
use serde::Serialize;

use crate::args::{BenchArgs, BlobArgs};
use crate::{exit, sysinfo};

use super::send::{send_once, sender_config};
use super::{open_blob, OpenedBlob};

/// Sizes of one suite.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    blob: u64,
    payload_bytes: u64,
    offset_bytes: u64,
    fnv_bytes: u64,
    iperf_secs: u32,
}

const QUICK: Sizes = Sizes {
    blob: 1 << 30,
    payload_bytes: 4_000_000_000,
    offset_bytes: 16_000_000_000,
    fnv_bytes: 2_000_000_000,
    iperf_secs: 3,
};
const FULL: Sizes = Sizes {
    blob: 4 << 30,
    payload_bytes: 16_000_000_000,
    offset_bytes: 64_000_000_000,
    fnv_bytes: 8_000_000_000,
    iperf_secs: 10,
};

/// What a row runs.
#[derive(Debug, Clone)]
enum Job {
    /// iperf3, one stream; `Some(len)` sets its write size (`-l`).
    Iperf3(Option<&'static str>),
    Pfs {
        mode: Mode,
        integrity: IntegrityAlg,
        pattern: Pattern,
        bytes: u64,
    },
    Loop {
        integrity: IntegrityAlg,
        pattern: Pattern,
        bytes: u64,
    },
}

/// One planned row.
#[derive(Debug, Clone)]
struct Planned {
    label: String,
    purpose: &'static str,
    job: Job,
}

impl Planned {
    /// Text `--only` matches against: label, integrity and pattern, lower case.
    fn key(&self) -> String {
        let extra = match &self.job {
            Job::Iperf3(_) => String::new(),
            Job::Pfs {
                integrity, pattern, ..
            }
            | Job::Loop {
                integrity, pattern, ..
            } => {
                format!(" {} {}", integrity.name(), pattern.name())
            }
        };
        format!("{}{extra}", self.label).to_lowercase()
    }
}

/// One result row: the columns of the table, CSV and JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub label: String,
    pub purpose: String,
    pub effective_mb: f64,
    pub wire_mb: f64,
    pub wire_ratio: f64,
    pub elapsed_s: f64,
    pub effective_mb_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub cpu_total_s: f64,
    pub mb_per_cpu_s: f64,
    pub integrity: String,
    pub pthreads: u32,
    pub transport: String,
    pub notes: String,
}

impl Row {
    fn measured(label: &str, purpose: &str, eff: u64, wire: u64, elapsed: f64, user: f64, sys: f64) -> Self {
        let cpu = user + sys;
        let eff_mb = eff as f64 / 1e6;
        Row {
            label: label.into(),
            purpose: purpose.into(),
            effective_mb: eff_mb,
            wire_mb: wire as f64 / 1e6,
            wire_ratio: if eff > 0 { wire as f64 / eff as f64 } else { 0.0 },
            elapsed_s: elapsed,
            effective_mb_s: if elapsed > 0.0 { eff_mb / elapsed } else { 0.0 },
            user_s: user,
            sys_s: sys,
            cpu_total_s: cpu,
            mb_per_cpu_s: if cpu > 0.0 { eff_mb / cpu } else { 0.0 },
            integrity: "n/a".into(),
            pthreads: 1,
            transport: "-".into(),
            notes: String::new(),
        }
    }

    fn skipped(label: &str, purpose: &str, why: String) -> Self {
        let mut r = Row::measured(label, purpose, 0, 0, 0.0, 0.0, 0.0);
        r.integrity = "-".into();
        r.notes = format!("skipped: {why}");
        r
    }

    fn ran(&self) -> bool {
        !self.notes.starts_with("skipped") && !self.notes.starts_with("failed")
    }
}

/// Header block of a report.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub tool: String,
    pub git_revision: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cores: usize,
    pub thp_mode: String,
    pub sender_blob: String,
    pub receiver_blob: String,
    pub blob_bytes: u64,
    pub sender_setup: String,
    pub receiver_setup: String,
    pub units: String,
    pub path: String,
    pub pinning: String,
}

fn loop_label(alg: IntegrityAlg) -> String {
    format!("Conventional ({} loop)", alg.name())
}

/// The rows of the suite, in order. The one place a row is added.
fn plan(sizes: Sizes, pattern: Pattern) -> Vec<Planned> {
    let mut rows = vec![
        Planned { label: "Conventional (iperf3)".into(), purpose: "Transfer", job: Job::Iperf3(None) },
        // The same write size as a payload gram: the fairer transport baseline.
        Planned {
            label: "Conventional (iperf3 -l 1M)".into(),
            purpose: "Transfer",
            job: Job::Iperf3(Some("1M")),
        },
    ];
    for integrity in [IntegrityAlg::Xxh3, IntegrityAlg::Fnv1a] {
        let fnv = integrity == IntegrityAlg::Fnv1a;
        let exec_bytes = if fnv { sizes.fnv_bytes } else { sizes.offset_bytes };
        rows.push(Planned {
            label: loop_label(integrity),
            purpose: "pCPU",
            job: Job::Loop {
                integrity,
                pattern,
                bytes: exec_bytes,
            },
        });
        let payload_bytes = if fnv { sizes.fnv_bytes } else { sizes.payload_bytes };
        rows.push(Planned {
            label: Mode::Payload.label("TCP"),
            purpose: "Transfer",
            job: Job::Pfs {
                mode: Mode::Payload,
                integrity,
                pattern,
                bytes: payload_bytes,
            },
        });
        for mode in [Mode::Offset, Mode::Arith] {
            rows.push(Planned {
                label: mode.label("TCP"),
                purpose: "both",
                job: Job::Pfs {
                    mode,
                    integrity,
                    pattern,
                    bytes: exec_bytes,
                },
            });
        }
        if pattern != Pattern::Sequential && !fnv {
            rows.push(Planned {
                label: loop_label(integrity),
                purpose: "pCPU",
                job: Job::Loop { integrity, pattern: Pattern::Sequential, bytes: exec_bytes },
            });
            for mode in [Mode::Offset, Mode::Arith] {
                rows.push(Planned {
                    label: mode.label("TCP"),
                    purpose: "both",
                    job: Job::Pfs {
                        mode,
                        integrity,
                        pattern: Pattern::Sequential,
                        bytes: exec_bytes,
                    },
                });
            }
        }
    }
    // Payload without a digest: what the transport path alone costs.
    rows.push(Planned {
        label: Mode::Payload.label("TCP"),
        purpose: "Transfer",
        job: Job::Pfs { mode: Mode::Payload, integrity: IntegrityAlg::None, pattern, bytes: sizes.payload_bytes },
    });
    rows
}

/// Kills the receiver child on every exit path.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `pfs serve` on an ephemeral loopback port; returns its address.
fn start_receiver(
    sizes: Sizes,
    seed: u64,
    huge_dir: Option<&Path>,
    pin: bool,
    sessions: usize,
) -> anyhow::Result<(ChildGuard, String, mpsc::Receiver<String>)> {
    let exe = std::env::current_exe().context("cannot locate the pfs binary")?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--json", "--max-clients", "1"])
        .args(["--max-sessions", &sessions.to_string()])
        .args(["--size", &sizes.blob.to_string(), "--seed", &seed.to_string()]);
    if let Some(d) = huge_dir {
        cmd.arg("--huge-dir").arg(d);
    }
    if pin {
        cmd.args(["--pin", "1"]);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().context("cannot start the receiver (pfs serve)")?;
    let stdout = child.stdout.take().context("receiver stdout")?;
    let mut stderr = child.stderr.take().context("receiver stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining after the caller stops listening: a receiver
        // blocked on a full stdout pipe would stall its sessions.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        let _ = etx.send(s);
    });
    let guard = ChildGuard(Some(child));
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                if v["event"] == "listening" {
                    let addr = v["addr"]
                        .as_str()
                        .context("listening event without addr")?
                        .to_string();
                    return Ok((guard, addr, erx));
                }
            }
            Err(_) => {
                drop(guard);
                let err = erx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
                bail!("the receiver did not start listening:\n{err}");
            }
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// iperf3, one TCP stream on loopback, receiver-side numbers.
fn run_iperf3(label: &str, secs: u32, pin: bool, len: Option<&str>) -> Row {
    if !have("iperf3") {
        return Row::skipped(
            label,
            "Transfer",
            "iperf3 not installed (apt-get install iperf3)".into(),
        );
    }
    let attempt = || -> anyhow::Result<Row> {
        let port = free_port()?.to_string();
        let mut server = ChildGuard(Some(
            Command::new("iperf3")
                .args(["-s", "-1", "-B", "127.0.0.1", "-p", &port])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting iperf3 -s")?,
        ));
        let mut last_err = String::new();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let mut c = Command::new("iperf3");
            c.args(["-c", "127.0.0.1", "-p", &port, "-t", &secs.to_string(), "-J"]);
            if pin {
                c.args(["-A", "0,1"]);
            }
            if let Some(len) = len {
                c.args(["-l", len]);
            }
            let out = c.output().context("running iperf3 -c")?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if let Some(e) = v["error"].as_str() {
                last_err = e.to_string();
                if e.contains("connect") {
                    continue;
                }
                bail!("iperf3: {e}");
            }
            let sum = &v["end"]["sum_received"];
            let bytes = sum["bytes"]
                .as_u64()
                .context("iperf3 JSON: end.sum_received.bytes")?;
            let seconds = sum["seconds"]
                .as_f64()
                .context("iperf3 JSON: end.sum_received.seconds")?;
            let cpu = &v["end"]["cpu_utilization_percent"];
            let user = cpu["remote_user"].as_f64().unwrap_or(0.0) / 100.0 * seconds;
            let sys = cpu["remote_system"].as_f64().unwrap_or(0.0) / 100.0 * seconds;
            let mut row = Row::measured(label, "Transfer", bytes, bytes, seconds, user, sys);
            row.transport = "TCP".into();
            row.notes = format!(
                "1 stream, {} writes of one hot buffer; receiver CPU from iperf3 remote_user/remote_system",
                len.unwrap_or("128K")
            );
            if let Some(mut s) = server.0.take() {
                let _ = s.wait();
            }
            return Ok(row);
        }
        bail!("iperf3 server never accepted: {last_err}")
    };
    attempt().unwrap_or_else(|e| {
        let mut r = Row::skipped(label, "Transfer", String::new());
        r.notes = format!("failed: {e:#}");
        r
    })
}

/// A plain single-thread loop over the same schedule: what executing the
/// bytes costs with no transport at all.
fn run_loop(label: &str, blob: &[u8], spec: ScheduleSpec, alg: IntegrityAlg) -> anyhow::Result<Row> {
    let mut sched = Schedule::new(spec)?;
    let mut descs = Vec::with_capacity(spec.desc_per_gram as usize);
    let mut digest = Digest::new(alg);
    let mut acc = 0u64;
    let mut eff = 0u64;
    let t0 = Instant::now();
    let u0 = thread_usage();
    while sched.next_gram(&mut descs) {
        digest.reset();
        for (i, &d) in descs.iter().enumerate() {
            digest.update(resolve(blob, d, i as u32)?);
            eff += u64::from(d.len);
        }
        acc ^= digest.value();
    }
    std::hint::black_box(acc);
    let el = t0.elapsed().as_secs_f64();
    let u = thread_usage().since(&u0);
    let mut row = Row::measured(
        label,
        "pCPU",
        eff,
        0,
        el,
        u.user_us as f64 / 1e6,
        u.sys_us as f64 / 1e6,
    );
    row.integrity = alg.name().into();
    row.notes = format!("pattern={}, same schedule, no transport", spec.pattern.name());
    Ok(row)
}

fn spec_for(blob_len: u64, args: &BenchArgs, pattern: Pattern, bytes: u64) -> ScheduleSpec {
    ScheduleSpec {
        seed: 1,
        desc_per_gram: args.desc_per_gram,
        max_len: args.max_len,
        align: 64,
        pattern,
        total: Total::Bytes(bytes),
        blob_len,
    }
}

fn fmt_table(header: &Header, rows: &[Row]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "pfs bench — {} · kernel {} · {} · {} cores · THP {}\nblob: sender {} · receiver {} · {} bytes · {} · {}\nreceiver blob setup: {}\n\n",
        header.git_revision,
        header.kernel,
        header.cpu_model,
        header.cores,
        header.thp_mode,
        header.sender_blob,
        header.receiver_blob,
        header.blob_bytes,
        header.path,
        header.pinning,
        header.receiver_setup
    ));
    s.push_str(&format!(
        "{:<40} {:>5} {:>10} {:>10} {:>10} {:>7} {:>10} {:>7} {:>7} {:>9} {:<8} {}\n",
        "label",
        "integ",
        "eff_MB",
        "wire_MB",
        "wire/eff",
        "time_s",
        "eff_MB/s",
        "user_s",
        "sys_s",
        "MB/CPU-s",
        "check",
        "notes"
    ));
    for r in rows {
        s.push_str(&format!(
            "{:<40} {:>5} {:>10.1} {:>10.3} {:>10.6} {:>7.3} {:>10.1} {:>7.3} {:>7.3} {:>9.1} {:<8} {}\n",
            r.label,
            integ_short(r),
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.notes
        ));
    }
    s.push_str("\nMB = 10^6 bytes. Receiver-side numbers (PFS: from the receiver's COMPLETE report; iperf3: its server side).\n");
    s
}

fn integ_short(r: &Row) -> &str {
    r.integrity_alg()
}

fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn to_csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "label,purpose,effective_mb,wire_mb,wire_ratio,elapsed_s,effective_mb_s,user_s,sys_s,cpu_total_s,mb_per_cpu_s,integrity,pthreads,transport,notes\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{},{},{:.3},{:.6},{:.8},{:.4},{:.1},{:.4},{:.4},{:.4},{:.1},{},{},{},{}\n",
            csv_escape(&r.label),
            r.purpose,
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.cpu_total_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.pthreads,
            r.transport,
            csv_escape(&r.notes)
        ));
    }
    out
}

fn to_markdown(header: &Header, rows: &[Row]) -> String {
    let mut out = format!(
        "Host: {} cores, {}, kernel {}, THP `{}` · revision `{}` · blob {} bytes (sender {}, receiver {}) · {} · {}\n\n",
        header.cores,
        header.cpu_model,
        header.kernel,
        header.thp_mode,
        header.git_revision,
        header.blob_bytes,
        header.sender_blob,
        header.receiver_blob,
        header.path,
        header.pinning
    );
    out.push_str(&format!("Receiver blob setup: {}\n\n", header.receiver_setup));
    out.push_str("| label | purpose | effective MB | wire MB | wire/eff | elapsed s | eff MB/s | user s | sys s | MB/CPU-s | integrity | notes |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.3} | {:.6} | {:.3} | {:.1} | {:.3} | {:.3} | {:.1} | {} | {} |\n",
            r.label,
            r.purpose,
            r.effective_mb,
            r.wire_mb,
            r.wire_ratio,
            r.elapsed_s,
            r.effective_mb_s,
            r.user_s,
            r.sys_s,
            r.mb_per_cpu_s,
            r.integrity,
            r.notes.replace('|', "/")
        ));
    }
    out
}

/// Appends `x.xx× <baseline>` to the notes of rows that have a named baseline in this run.
fn add_ratios(rows: &mut [Row]) {
    let rate = |rows: &[Row], pred: &dyn Fn(&Row) -> bool| {
        rows.iter().find(|r| r.ran() && pred(r)).map(|r| r.effective_mb_s)
    };
    let iperf = rate(rows, &|r| r.label == "Conventional (iperf3)");
    let iperf_1m = rate(rows, &|r| r.label == "Conventional (iperf3 -l 1M)");
    let loop_rate = |rows: &[Row], alg: &str, pattern: &str| {
        rate(rows, &|r| r.label.starts_with("Conventional (") && r.integrity == alg && r.notes.contains(pattern))
    };
    let offset_rate = |rows: &[Row], alg: &str, pattern: &str| {
        rate(rows, &|r| r.label == Mode::Offset.label("TCP") && r.integrity_alg() == alg && r.notes.contains(pattern))
    };
    let snapshot = rows.to_vec();
    for r in rows.iter_mut().filter(|r| r.ran()) {
        let mut ratios = Vec::new();
        let is_pfs = r.label.starts_with("PFS-") || r.label.starts_with("Native");
        let pattern = ["pattern=random", "pattern=sequential", "pattern=strided"]
            .into_iter()
            .find(|p| r.notes.contains(p))
            .unwrap_or("pattern=random");
        if r.label == Mode::Payload.label("TCP") {
            if let Some(b) = iperf {
                ratios.push(format!("{:.2}× iperf3", r.effective_mb_s / b));
            }
            if let Some(b) = iperf_1m {
                ratios.push(format!("{:.2}× iperf3 -l 1M", r.effective_mb_s / b));
            }
        }
        if is_pfs && r.label != Mode::Payload.label("TCP") {
            let alg = r.integrity_alg();
            if let Some(b) = loop_rate(&snapshot, alg, pattern) {
                ratios.push(format!("{:.2}× {alg} loop", r.effective_mb_s / b));
            }
        }
        if r.label == Mode::Arith.label("TCP") {
            if let Some(b) = offset_rate(&snapshot, r.integrity_alg(), pattern) {
                ratios.push(format!("{:.2}× offset-only", r.effective_mb_s / b));
            }
        }
        if !ratios.is_empty() {
            r.notes = format!("{}; {}", r.notes, ratios.join(", "));
        }
    }
}

impl Row {
    fn integrity_alg(&self) -> &str {
        ["fnv1a", "xxh3", "none"]
            .into_iter()
            .find(|a| self.notes.contains(&format!("integrity={a}")) || self.label.contains(&format!("({a} ")))
            .unwrap_or("-")
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let mut sizes = if args.full { FULL } else { QUICK };
    if let Some(s) = args.size {
        sizes.blob = s;
    }
    if !(args.scale.is_finite() && args.scale > 0.0) {
        bail!("--scale must be a positive number (got {})", args.scale);
    }
    let scaled = |b: u64| ((b as f64 * args.scale) as u64).max(1 << 20);
    sizes.payload_bytes = scaled(sizes.payload_bytes);
    sizes.offset_bytes = scaled(sizes.offset_bytes);
    sizes.fnv_bytes = scaled(sizes.fnv_bytes);
    sizes.iperf_secs = ((f64::from(sizes.iperf_secs) * args.scale).ceil() as u32).max(1);
    let pin = !args.no_pin && sysinfo::cores() >= 2;
    let pattern = args.pattern.pattern();
    let only: Vec<String> = args.only.iter().map(|s| s.to_lowercase()).collect();
    let planned: Vec<Planned> = plan(sizes, pattern)
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| p.key().contains(o)))
        .collect();
    if planned.is_empty() {
        bail!("--only matched no row");
    }
    let pfs_sessions = planned
        .iter()
        .filter(|p| matches!(p.job, Job::Pfs { .. }))
        .count();

    let seed = 0x5eed;
    let blob_args = BlobArgs {
        huge_dir: args.huge_dir.clone(),
        blob_name: None,
        size: sizes.blob,
        seed,
        fill_file: None,
        no_prefault: false,
        no_fill: false,
        blob_keep: false,
        setup_threads: 0,
    };
    eprintln!(
        "pfs bench: setting up a {} MB blob for each peer (outside the timed path)…",
        sizes.blob / 1_000_000
    );
    let receiver = if pfs_sessions > 0 {
        Some(start_receiver(
            sizes,
            seed,
            args.huge_dir.as_deref(),
            pin,
            pfs_sessions,
        )?)
    } else {
        None
    };
    let opened: OpenedBlob = open_blob(&blob_args, true)?;
    eprintln!("sender {}", opened.describe());
    let view = opened.view();
    if pin {
        pin_current_thread(0).context("pinning the sender to CPU 0")?;
    }

    let mut rows = Vec::new();
    let mut receiver_blob = String::from("-");
    let mut receiver_setup = String::from("-");
    for p in &planned {
        eprintln!("pfs bench: {} …", p.label);
        let row = match &p.job {
            Job::Iperf3(len) => run_iperf3(&p.label, sizes.iperf_secs, pin, *len),
            Job::Loop {
                integrity,
                pattern,
                bytes,
            } => {
                // The loop runs where the receiver runs: on CPU 1.
                let spec = spec_for(opened.blob.len(), &args, *pattern, *bytes);
                let data = opened.blob.as_slice();
                let label = p.label.clone();
                let alg = *integrity;
                let r = std::thread::scope(|s| {
                    s.spawn(move || {
                        if pin {
                            let _ = pin_current_thread(1);
                        }
                        run_loop(&label, data, spec, alg)
                    })
                    .join()
                    .map_err(|_| anyhow::anyhow!("loop thread panicked"))?
                });
                r?
            }
            Job::Pfs {
                mode,
                integrity,
                pattern,
                bytes,
            } => {
                let addr = &receiver.as_ref().context("receiver")?.1;
                let spec = spec_for(opened.blob.len(), &args, *pattern, *bytes);
                let cfg = sender_config(*mode, *integrity, spec, pfs_session::DEFAULT_PAYLOAD_BUDGET);
                match send_once(addr, &view, &cfg, 0) {
                    Ok(out) => {
                        let st = SessionStats::from_report(&out.report, "TCP");
                        receiver_blob = format!("{} (page {} B)", st.blob_backing, st.blob_page_size);
                        let fp = st.setup_fill_s + st.setup_prefault_s;
                        receiver_setup = format!(
                            "map {:.3} s, prefault {:.3} s, fill {:.3} s, fingerprint {:.3} s ({:.2} GB/s fill+prefault)",
                            st.setup_map_s,
                            st.setup_prefault_s,
                            st.setup_fill_s,
                            st.setup_fingerprint_s,
                            if fp > 0.0 { opened.blob.len() as f64 / fp / 1e9 } else { 0.0 }
                        );
                        let mut row = Row::measured(
                            &p.label,
                            p.purpose,
                            st.effective_bytes,
                            st.wire_bytes,
                            st.elapsed_s,
                            st.user_s,
                            st.sys_s,
                        );
                        row.integrity = st.integrity.clone();
                        row.transport = "TCP".into();
                        row.notes = format!(
                            "integrity={}, pattern={}, {:.2} B/desc, sender CPU {:.2} s",
                            integrity.name(),
                            pattern.name(),
                            out.table_bytes as f64 / out.summary.descriptors.max(1) as f64,
                            (out.sender_usage.user_us + out.sender_usage.sys_us) as f64 / 1e6
                        );
                        row
                    }
                    Err(e) => {
                        let mut r = Row::skipped(&p.label, p.purpose, String::new());
                        r.notes = format!("failed: {e:#}");
                        r
                    }
                }
            }
        };
        rows.push(row);
    }
    drop(receiver);
    add_ratios(&mut rows);

    let b = opened.blob.backing();
    let header = Header {
        tool: format!("pfs {}", env!("CARGO_PKG_VERSION")),
        git_revision: env!("PFS_GIT_REV").into(),
        kernel: sysinfo::kernel(),
        cpu_model: sysinfo::cpu_model(),
        cores: sysinfo::cores(),
        thp_mode: sysinfo::thp_mode(),
        sender_blob: format!("{} (page {} B)", b.kind.as_str(), b.page_size),
        receiver_blob,
        blob_bytes: opened.blob.len(),
        sender_setup: opened.describe(),
        receiver_setup,
        units: "MB = 10^6 bytes; rates MB/s; CPU from getrusage (receiver thread)".into(),
        path: "loopback".into(),
        pinning: if pin {
            "sender CPU 0, receiver CPU 1".into()
        } else {
            "unpinned".into()
        },
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"header": header, "rows": rows}))?
        );
    } else {
        print!("{}", fmt_table(&header, &rows));
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("bench.csv"), to_csv(&rows))?;
        std::fs::write(
            dir.join("bench.json"),
            serde_json::to_string_pretty(&serde_json::json!({"header": header, "rows": rows}))?,
        )?;
        std::fs::write(dir.join("bench.md"), to_markdown(&header, &rows))?;
        eprintln!(
            "pfs bench: wrote bench.csv, bench.json, bench.md to {}",
            dir.display()
        );
    }
    let failed = rows
        .iter()
        .any(|r| r.notes.starts_with("failed") || r.integrity == "MISMATCH");
    Ok(if failed { exit::FAILURE } else { exit::OK })
}
