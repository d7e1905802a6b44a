//! `pfs bench ipc`: the IPC latency study (the RPAL experiment). 32-byte
//! messages go from a client process to a server process on the same host;
//! one-way latency is measured with the TSC. Owns the whole study: its
//! options, the process model (the study is the client; each method's server
//! is this binary's hidden `pfs bench ipc-peer`, one child per method), the
//! methods behind one `methods::Channel` trait, the four phases per method
//! (warm-up, latency, throughput, idle CPU) and the report (table, JSON, CSV,
//! PNG, ratios against `unix-epoll`).
//!
//! Layout: `methods` holds the channel trait and the kernel baselines,
//! `phases` the protocol both sides run, `row` one row's child process,
//! `clock` the TSC checks and calibration, `stats` the sample summaries,
//! `report` the output, `sys` is the only `unsafe`.

mod clock;
mod methods;
mod phases;
mod report;
mod row;
mod stats;
mod sys;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;

use crate::report::Method as _;
use crate::scratch::Scratch;
use crate::{Binary, Outcome};

use clock::Clock;
use methods::{Connect, IpcMethod, WithChannel, MSG};
use row::{RowSpec, FAULT_ENV, READY};

const AFTER_HELP: &str = "\
Each method runs in its own server process (this binary, started by the study)
while the study itself is the client: 10,000 warm-up ping-pongs, then N
ping-pongs timed with the TSC (one way in each direction, and the round trip),
then N messages back to back (throughput), then 1 s with no messages while the
server waits the method's usual way (its CPU time over that second is the idle
CPU). By default the client is pinned to one CPU and the server to another.
A row whose server fails or hangs is reported as failed; the others still run.

Methods: unix-epoll (Unix stream socket, the reader waits in epoll_wait then
reads: RPAL's baseline), pipe (two FIFOs, blocking reads), tcp (127.0.0.1,
TCP_NODELAY, blocking reads). Every other row is compared with unix-epoll.

Examples:
  pfs bench ipc                              # every method, 1,000,000 messages each
  pfs bench ipc --messages 100000 --out ipc  # table, plus ipc.csv, ipc.json, ipc.png in ipc/
  pfs bench ipc --only unix --only pipe      # selected methods
  pfs bench ipc --no-pin --json > ipc.json";

/// Options of the IPC latency study.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct IpcArgs {
    /// Only methods whose name or label contains this text (case-insensitive); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Messages per method in the latency phase, and again in the throughput phase.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(2..=20_000_000))]
    pub messages: u64,
    /// Do not pin the client and the server to CPUs (default: client on the first allowed CPU, server on the second).
    #[arg(long)]
    pub no_pin: bool,
    /// Give up on a row (kill its server) after this many seconds [default: 30 + 250 µs per message].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Length of the idle phase, in milliseconds (shorter for tests).
    #[arg(long, value_name = "MS", default_value_t = 1000, hide = true,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub idle_ms: u64,
    /// Write ipc.csv, ipc.json and ipc.png here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Options of the server side of one row (started by `pfs bench ipc`).
#[derive(Debug, Args)]
pub struct IpcPeerArgs {
    /// The method.
    #[arg(long, value_enum)]
    pub method: IpcMethod,
    /// Messages in the latency phase, and again in the throughput phase.
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=20_000_000))]
    pub messages: u64,
    /// Pin to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Private directory for socket and FIFO files.
    #[arg(long)]
    pub dir: PathBuf,
}

/// The methods `--only` selects (all without it).
fn select(only: &[String]) -> anyhow::Result<Vec<IpcMethod>> {
    if only.is_empty() {
        return Ok(IpcMethod::ALL.to_vec());
    }
    let picked: Vec<IpcMethod> = IpcMethod::ALL
        .into_iter()
        .filter(|m| {
            only.iter().any(|t| {
                let t = t.to_ascii_lowercase();
                m.key().contains(&t) || m.label().to_ascii_lowercase().contains(&t)
            })
        })
        .collect();
    if picked.is_empty() {
        let names: Vec<&str> = IpcMethod::ALL.iter().map(|m| m.key()).collect();
        bail!(
            "--only {} matches no method (methods: {})",
            only.join(" --only "),
            names.join(", ")
        );
    }
    Ok(picked)
}

/// Runs the study; exit status 1 when any row failed.
pub fn run(args: IpcArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let methods = select(&args.only)?;
    let timeout = match args.timeout {
        Some(t) if t.is_finite() && t > 0.0 && t <= 86_400.0 => Duration::from_secs_f64(t),
        Some(t) => bail!("--timeout must be in (0, 86400] seconds (got {t})"),
        None => Duration::from_secs(30) + Duration::from_micros(250) * args.messages as u32,
    };
    let idle = Duration::from_millis(args.idle_ms);
    let mut warnings = Vec::new();

    let cpus = pfs_sys::allowed_cpus();
    let (pinning, server_cpu) = if args.no_pin {
        ("unpinned (--no-pin)".to_string(), None)
    } else if cpus.len() < 2 {
        let w = format!(
            "only {} CPU available to this process: client and server run unpinned, sharing it",
            cpus.len()
        );
        eprintln!("pfs bench ipc: {w}");
        warnings.push(w);
        ("unpinned (1 CPU)".to_string(), None)
    } else {
        let (c, s) = (cpus[0], cpus[1]);
        match pfs_sys::pin_current_thread(c) {
            Ok(()) => (format!("client on CPU {c}, server on CPU {s}"), Some(s)),
            Err(e) => {
                let w = format!("cannot pin the client to CPU {c} ({e}): running unpinned");
                eprintln!("pfs bench ipc: warning: {w}");
                warnings.push(w);
                ("unpinned (pinning failed)".to_string(), None)
            }
        }
    };

    let clock = Clock::detect();
    for w in clock.warnings() {
        eprintln!("pfs: warning: {w}");
        warnings.push(w);
    }
    let header = report::Header::new(
        pfs,
        report::IpcSettings {
            clock: clock.clone(),
            pinning,
            msg_bytes: MSG,
            messages: args.messages,
            warmup: phases::WARMUP,
            idle_s: idle.as_secs_f64(),
            timeout_s: timeout.as_secs_f64(),
            units: report::UNITS.into(),
        },
    );

    // The study's private directory: socket and FIFO files.
    let scratch = Scratch::new(&std::env::temp_dir(), "pfs-bench-ipc")?;
    let started = Instant::now();
    let mut rows = Vec::with_capacity(methods.len());
    for (i, &method) in methods.iter().enumerate() {
        eprintln!(
            "pfs bench ipc: [{}/{}] {}: {} latency ping-pongs, {} throughput messages, {:.1} s idle …",
            i + 1,
            methods.len(),
            method.key(),
            report::group(args.messages),
            report::group(args.messages),
            idle.as_secs_f64()
        );
        let spec = RowSpec {
            method,
            messages: args.messages,
            idle,
            server_cpu,
            dir: scratch.path(),
            timeout,
            clock: &clock,
            exe: &pfs.path,
        };
        let r = row::run_row(&spec);
        if r.ok() {
            eprintln!(
                "pfs bench ipc: [{}/{}] {}: one-way mean {:.0} ns (p50 {:.0}, p99 {:.0}), {:.3} M msg/s, idle CPU {:.1}%, {:.1} s",
                i + 1,
                methods.len(),
                r.method,
                r.one_way_mean_ns.unwrap_or(f64::NAN),
                r.one_way_p50_ns.unwrap_or(f64::NAN),
                r.one_way_p99_ns.unwrap_or(f64::NAN),
                r.throughput_mmsg_s.unwrap_or(f64::NAN),
                r.idle_cpu_pct.unwrap_or(f64::NAN),
                r.row_wall_s
            );
            if !r.notes.is_empty() {
                eprintln!("pfs: warning: {}: {}", r.method, r.notes);
            }
        } else {
            eprintln!(
                "pfs bench ipc: [{}/{}] {}: {}",
                i + 1,
                methods.len(),
                r.method,
                r.status
            );
        }
        rows.push(r);
    }
    drop(scratch);
    let wall = started.elapsed().as_secs_f64();
    for r in rows.iter().filter(|r| !r.notes.is_empty()) {
        warnings.push(format!("{}: {}", r.method, r.notes));
    }
    let ratios = report::ratios(&mut rows);

    let study = report::finish(report::report(&header), &header, &rows, &ratios, &warnings, wall);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&study.json())?);
    } else {
        print!("{}", study.text_header());
        println!("{}", report::table_head());
        for r in &rows {
            println!("{}", report::view_line(r));
        }
        print!("{}", report::footer_text(&rows, &ratios, &warnings, wall));
    }
    if let Some(dir) = &args.out {
        write_out(dir, &header, &rows, &study)?;
    }
    let failed = rows.iter().filter(|r| !r.ok()).count();
    if failed > 0 {
        eprintln!("pfs bench ipc: {failed} of {} rows failed", rows.len());
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Passed)
}

fn write_out(
    dir: &Path,
    header: &report::Header,
    rows: &[row::Row],
    study: &crate::report::Report,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let csv = dir.join("ipc.csv");
    std::fs::write(&csv, study.csv("rows").unwrap_or_default())
        .with_context(|| format!("writing {}", csv.display()))?;
    let json = dir.join("ipc.json");
    std::fs::write(&json, serde_json::to_string_pretty(&study.json())?)
        .with_context(|| format!("writing {}", json.display()))?;
    let png = match report::plot(dir, header, rows) {
        Ok(file) => format!(", {file}"),
        Err(e) => {
            eprintln!("pfs: warning: ipc.png not written: {e:#}");
            String::new()
        }
    };
    eprintln!("pfs bench ipc: wrote ipc.csv, ipc.json{png} to {}", dir.display());
    Ok(())
}

/// The server's half of a row, with the method's channel type.
struct Serve<'a> {
    method: IpcMethod,
    dir: &'a Path,
    messages: u64,
    fault: Option<String>,
}

impl WithChannel for Serve<'_> {
    type Output = anyhow::Result<()>;

    fn run<C: Connect>(self) -> Self::Output {
        let (listener, address) = C::listen(self.dir)?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY}{address}")?;
        out.flush()?;
        let mut ch = C::accept(listener)?;
        match self.fault.as_deref() {
            Some("die") => bail!("{FAULT_ENV}=die: exiting on purpose"),
            Some("hang") => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            _ => {}
        }
        let report = phases::serve(&mut ch, self.method.key(), self.messages)?;
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
        out.flush()?;
        Ok(())
    }
}

/// Runs the server side of one row: prints `READY <address>`, serves every
/// phase, prints its measurements as one JSON line.
pub fn run_peer(args: IpcPeerArgs) -> anyhow::Result<Outcome> {
    if let Some(cpu) = args.cpu {
        pfs_sys::pin_current_thread(cpu).with_context(|| format!("pinning the server to CPU {cpu}"))?;
    }
    args.method.with(Serve {
        method: args.method,
        dir: &args.dir,
        messages: args.messages,
        fault: std::env::var(FAULT_ENV).ok(),
    })?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_selects_by_key_or_label() {
        assert_eq!(select(&[]).unwrap(), IpcMethod::ALL);
        assert_eq!(select(&["PIPE".into()]).unwrap(), [IpcMethod::Pipe]);
        assert_eq!(
            select(&["epoll".into(), "tcp".into()]).unwrap(),
            [IpcMethod::UnixEpoll, IpcMethod::Tcp]
        );
        assert_eq!(
            select(&["conventional".into()]).unwrap(),
            [IpcMethod::UnixEpoll, IpcMethod::Pipe, IpcMethod::Tcp]
        );
        assert_eq!(
            select(&["ring".into()]).unwrap(),
            [IpcMethod::RingSpin, IpcMethod::RingYield, IpcMethod::RingFutex]
        );
        assert!(select(&["nothing".into()]).is_err());
    }
}
