//! `pfs bench io-primitives`: the socket I/O-primitives study the PacketFS
//! transport design rests on. Owns the whole study: its options, the grid
//! (message size × sender threads × method), the four send methods (A1
//! `send()` of a consolidated buffer, A2 `sendmsg()` with an iovec, A3
//! `sendmsg(MSG_ZEROCOPY)` with completion handling, A4 PacketFS grams), the
//! per-cell measurement (throughput, latency per message, context switches,
//! CPU, hardware counters where they exist) and its report (table, JSON, CSV,
//! PNG plots, the A4/A1 headline ratio).
//!
//! Layout: `cell` runs one cell, `methods` holds the senders and
//! receivers, `report` formats results, `sys` is the only `unsafe`.

mod cell;
mod methods;
mod report;
mod sys;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};

use crate::report::Method;
use crate::{sysinfo, Binary, Outcome};

use cell::{run_cell, CellSpec};
use methods::FIELDS;

/// How a message is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum SendMethod {
    /// `send()` after copying the 8 fields into one buffer (two copies).
    A1,
    /// `sendmsg()` with an iovec over the 8 fields (one copy).
    A2,
    /// `sendmsg(MSG_ZEROCOPY)`, completions read from the error queue.
    A3,
    /// PacketFS grams: many messages per gram, one vectored write per gram.
    A4,
}

impl SendMethod {
    /// Every method, in order.
    pub const ALL: [SendMethod; 4] = [SendMethod::A1, SendMethod::A2, SendMethod::A3, SendMethod::A4];
}

impl Method for SendMethod {
    /// Short name (`a1` …).
    fn key(self) -> &'static str {
        match self {
            Self::A1 => "a1",
            Self::A2 => "a2",
            Self::A3 => "a3",
            Self::A4 => "a4",
        }
    }

    /// Long name for tables and legends.
    fn label(self) -> &'static str {
        match self {
            Self::A1 => "A1 send() consolidated",
            Self::A2 => "A2 sendmsg() iovec",
            Self::A3 => "A3 sendmsg(MSG_ZEROCOPY)",
            Self::A4 => "A4 PacketFS grams",
        }
    }
}

/// What one A4 descriptor covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GramDescriptors {
    /// One descriptor per message: its fields consolidated in the slab.
    Message,
    /// One descriptor per field (8 per message).
    Field,
}

impl GramDescriptors {
    fn name(self) -> &'static str {
        match self {
            Self::Message => "one per message",
            Self::Field => "one per field",
        }
    }
}

/// Descriptor table encoding of A4's grams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GramEncoding {
    /// Fixed 12-byte descriptors.
    Absolute,
    /// Arithmetic: zigzag-varint delta from the previous end, varint length.
    Arith,
}

impl GramEncoding {
    fn wire(self) -> pfs_wire::Encoding {
        match self {
            Self::Absolute => pfs_wire::Encoding::Absolute,
            Self::Arith => pfs_wire::Encoding::Arithmetic,
        }
    }
}

const AFTER_HELP: &str = "\
A message is 8 separately allocated string fields (64 B = 8 × 8 B). Each sender
thread has its own pool of messages and its own loopback TCP connection to its
own receiver thread. Throughput counts logical message bytes (Gbit/s = 10^9
bit/s); wire bytes (framing included) are reported beside them. Latency is the
mean time per message per sender thread (elapsed × threads / messages), not a
round trip. Hardware counters print n/a where the CPU has none (most VMs).

Examples:
  pfs bench io-primitives                                # default grid, ~1 minute
  pfs bench io-primitives --pin --out iop                # pinned, CSV + JSON + PNG plots in iop/
  pfs bench io-primitives --sizes 64,4K --threads 1,2 --methods a1,a4 --duration 1
  pfs bench io-primitives --methods a1,a4 --gram-encoding arith   # compact descriptor tables
  pfs bench io-primitives --json > iop.json";

/// Options of the I/O-primitives study.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct IoPrimitivesArgs {
    /// Message sizes, comma-separated (K = 1024; at least 8 bytes).
    #[arg(long, value_delimiter = ',', value_parser = parse_msg_size, default_values_t = [64usize, 256, 1024, 4096, 16384, 65536])]
    pub sizes: Vec<usize>,
    /// Sender thread counts, comma-separated (each sender has its own receiver thread).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u16).range(1..=256), default_values_t = [1u16, 2, 4, 8])]
    pub threads: Vec<u16>,
    /// Methods, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = SendMethod::ALL)]
    pub methods: Vec<SendMethod>,
    /// Seconds each cell sends for.
    #[arg(long, value_name = "SECS", default_value_t = 0.5)]
    pub duration: f64,
    /// Pin sender thread i to CPU (i mod ncpu) and its receiver to the next CPU.
    #[arg(long)]
    pub pin: bool,
    /// Messages in each sender's pool, reused round-robin.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub pool: u32,
    /// A3: most messages awaiting their zerocopy completion (at most --pool).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub zc_inflight: u32,
    /// A4: payload per gram; a gram carries as many whole messages as fit (at least one).
    /// 256 KiB measured best here: 64 KiB grams halve A4 at one thread.
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = crate::args::parse_size)]
    pub gram_payload: u64,
    /// A4: descriptor table encoding (absolute: 12 bytes per field; arith: ~2 bytes per field here).
    #[arg(long, value_enum, default_value_t = GramEncoding::Absolute)]
    pub gram_encoding: GramEncoding,
    /// A4: one descriptor per message (its 8 fields consolidated in the slab, as A1 sends them)
    /// or one per field.
    #[arg(long, value_enum, default_value_t = GramDescriptors::Message)]
    pub gram_descriptors: GramDescriptors,
    /// Set TCP_NODELAY on sender sockets (default: the kernel's default, Nagle on).
    #[arg(long)]
    pub nodelay: bool,
    /// Bound, in seconds, on any blocking socket call and on waits for completions.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub io_timeout: f64,
    /// Write io-primitives.csv, io-primitives.json and PNG plots here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A message size: plain bytes or with a K/M suffix; at least 8 (one byte per field).
fn parse_msg_size(s: &str) -> Result<usize, String> {
    let v = crate::args::parse_size(s)?;
    if !(8..=(64 << 20)).contains(&v) {
        return Err(format!("{s:?}: a message size must be 8 B .. 64 MiB"));
    }
    Ok(v as usize)
}

fn dedup<T: Ord + Copy>(v: &[T]) -> Vec<T> {
    let mut out = v.to_vec();
    out.sort_unstable();
    out.dedup();
    out
}

/// Runs the study; exit status 1 when any cell failed.
pub fn run(args: IoPrimitivesArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be in (0, 3600] seconds (got {})", args.duration);
    }
    if !(args.io_timeout.is_finite() && args.io_timeout >= 0.1 && args.io_timeout <= 3600.0) {
        bail!(
            "--io-timeout must be in [0.1, 3600] seconds (got {})",
            args.io_timeout
        );
    }
    if args.zc_inflight > args.pool {
        bail!(
            "--zc-inflight ({}) must not exceed --pool ({}): a message's fields are reused only after their completion",
            args.zc_inflight,
            args.pool
        );
    }
    let sizes = dedup(&args.sizes);
    let threads: Vec<usize> = dedup(&args.threads).into_iter().map(usize::from).collect();
    let methods = dedup(&args.methods);
    if sizes.is_empty() || threads.is_empty() || methods.is_empty() {
        bail!("--sizes, --threads and --methods must each name at least one value");
    }
    let ncpu = sysinfo::cores().max(1);
    let n_cells = sizes.len() * threads.len() * methods.len();
    eprintln!(
        "pfs bench io-primitives: {n_cells} cells ({} sizes × {} thread counts × {} methods) × {:.2} s ≈ {:.0} s of sending, plus setup and drain per cell",
        sizes.len(),
        threads.len(),
        methods.len(),
        args.duration,
        n_cells as f64 * args.duration
    );
    let header = report::Header::new(
        pfs,
        report::IoSettings {
            pinning: if args.pin {
                format!("sender i on CPU i mod {ncpu}, its receiver on CPU (i+1) mod {ncpu}")
            } else {
                "unpinned".into()
            },
            tcp_nodelay: args.nodelay,
            duration_s: args.duration,
            pool: args.pool as usize,
            zc_inflight: args.zc_inflight as usize,
            gram_payload: args.gram_payload,
            gram_encoding: format!(
                "{} {}",
                args.gram_encoding.wire().name(),
                args.gram_descriptors.name()
            ),
            hardware_counters: cell::counters_unavailable()
                .map(|why| format!("n/a ({why})"))
                .unwrap_or_else(|| "perf_event_open CPU_CYCLES, CACHE_MISSES per thread".into()),
            units: report::UNITS.into(),
        },
    );
    let progress = args.json && std::io::stderr().is_terminal();
    let study = report::report(&header);
    if !args.json {
        print!("{}", study.text_header());
        println!("{}", report::table_head());
    }
    let started = Instant::now();
    let mut cells = Vec::with_capacity(n_cells);
    for &size in &sizes {
        for &t in &threads {
            for &method in &methods {
                let spec = CellSpec {
                    method,
                    size,
                    threads: t,
                    duration: Duration::from_secs_f64(args.duration),
                    pin: args.pin,
                    ncpu,
                    pool: args.pool as usize,
                    zc_inflight: args.zc_inflight as usize,
                    gram_msgs: usize::try_from(args.gram_payload / size as u64)
                        .unwrap_or(usize::MAX)
                        .clamp(1, 1 << 20),
                    gram_encoding: args.gram_encoding.wire(),
                    descs_per_msg: match args.gram_descriptors {
                        GramDescriptors::Message => 1,
                        GramDescriptors::Field => FIELDS,
                    },
                    nodelay: args.nodelay,
                    timeout: Duration::from_secs_f64(args.io_timeout),
                };
                let c = run_cell(&spec);
                if !args.json {
                    println!("{}", report::view_line(&c));
                } else if progress {
                    eprintln!("{}", report::view_line(&c));
                }
                cells.push(c);
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let ratios = report::ratios(&cells);
    let study = report::finish(study, &cells, &ratios, wall);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&study.json())?);
    } else {
        // The header and the cells were printed as they ran.
        print!("{}", report::footer_text(&cells, &ratios, wall));
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let csv = dir.join("io-primitives.csv");
        std::fs::write(&csv, study.csv("cells").unwrap_or_default())
            .with_context(|| format!("writing {}", csv.display()))?;
        let json = dir.join("io-primitives.json");
        std::fs::write(&json, serde_json::to_string_pretty(&study.json())?)
            .with_context(|| format!("writing {}", json.display()))?;
        let plots = report::plots(dir, &cells);
        for w in &plots.warnings {
            eprintln!("pfs: warning: {w}");
        }
        eprintln!(
            "pfs bench io-primitives: wrote io-primitives.csv, io-primitives.json{} to {}",
            plots.written.iter().map(|p| format!(", {p}")).collect::<String>(),
            dir.display()
        );
    }
    let failed = cells.iter().filter(|c| !c.ok()).count();
    if failed > 0 {
        eprintln!("pfs bench io-primitives: {failed} of {n_cells} cells failed");
        return Ok(Outcome::Failed);
    }
    Ok(Outcome::Passed)
}
