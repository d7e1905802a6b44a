//! `pfs bench stream`: streaming mode (`packetfs::stream`) as a message
//! transport, beside socket baselines measured in the same run over the
//! same loopback. Throughput rows for each message size: PacketFS MESSAGE
//! entries batched into grams (on each transport asked), one `send()` per
//! message and a batched `writev` loop (the floor) over TCP; messages/s,
//! MB/s and MB per CPU-second of each side. Latency rows at 64 B: the
//! stream's round trip (offer → subscriber handler → APPLIED back) and a
//! plain TCP ping-pong. The design's targets are checked as ratios of
//! those rows. ZeroMQ rows say why they did not run.

mod methods;

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::args::{parse_size, parse_size_u32};
use crate::report::{ratio, Cell, Column, Header, Report, Section, Status, Table, Target};
use crate::{Binary, Outcome};
use methods::{Flow, Writes};

/// Options of the streaming study.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pfs bench stream                         # 64 B, 1 KiB, 64 KiB; 64 MiB per row; 20000 round trips
  pfs bench stream --quick                 # 8 MiB per row, 2000 round trips
  pfs bench stream --transports tcp --out bench-out")]
pub struct StreamArgs {
    /// Message sizes of the throughput rows, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,1K,64K", value_parser = parse_size_u32)]
    pub sizes: Vec<u32>,
    /// Transports of the PacketFS throughput rows (the baselines run over TCP).
    #[arg(long, value_delimiter = ',', value_enum, default_value = "tcp,unix,shm,udp")]
    pub transports: Vec<StreamTransport>,
    /// Message bytes each throughput row moves (default 64M; 8M with --quick).
    #[arg(long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Timed round trips of each latency row (default 20000; 2000 with --quick).
    #[arg(long)]
    pub round_trips: Option<u64>,
    /// Smaller defaults: a run of a few seconds.
    #[arg(long)]
    pub quick: bool,
    /// Write stream-throughput.csv, stream-latency.csv, stream.json and stream.md here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// A transport of the PacketFS rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamTransport {
    /// TCP on 127.0.0.1.
    Tcp,
    /// A Unix stream socket.
    Unix,
    /// The shared-memory rings.
    Shm,
    /// UDP on 127.0.0.1.
    Udp,
}

impl StreamTransport {
    fn name(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Unix => "Unix",
            Self::Shm => "SHM",
            Self::Udp => "UDP",
        }
    }

    /// The endpoint to listen on; Unix and SHM sockets in `dir`.
    fn endpoint(self, dir: &std::path::Path, n: usize) -> String {
        match self {
            Self::Tcp => "tcp:127.0.0.1:0".into(),
            Self::Udp => "udp:127.0.0.1:0".into(),
            Self::Unix => format!("unix:{}", dir.join(format!("stream-{n}.sock")).display()),
            Self::Shm => format!("shm:{}", dir.join(format!("stream-{n}.shm")).display()),
        }
    }
}

/// Why the ZeroMQ rows have no figures.
const NO_ZMQ: &str = "ZeroMQ baseline not built";

/// Label of the PacketFS throughput rows (the transport follows).
const PFS: &str = "PFS stream";
const SEND_EACH: &str = "send() per message";
const WRITEV: &str = "writev batched";
const ZMQ_PUSH: &str = "ZeroMQ PUSH/PULL";
const PING_PONG: &str = "socket ping-pong";
const ZMQ_REQ: &str = "ZeroMQ REQ/REP";

/// One throughput row.
#[derive(Debug)]
struct FlowRow {
    size: u32,
    method: String,
    transport: &'static str,
    status: Status,
    flow: Option<Flow>,
    notes: String,
}

impl FlowRow {
    fn msgs_s(&self) -> Option<f64> {
        self.flow.map(|f| f.messages as f64 / f.secs)
    }
    fn mb_s(&self) -> Option<f64> {
        self.flow.map(|f| f.bytes as f64 / 1e6 / f.secs)
    }
    fn mb_per_cpu(&self, cpu: impl Fn(&Flow) -> f64) -> Option<f64> {
        self.flow.and_then(|f| ratio(f.bytes as f64 / 1e6, cpu(&f)))
    }
}

/// One latency row: sorted round trips, nanoseconds.
#[derive(Debug)]
struct LatencyRow {
    method: &'static str,
    status: Status,
    sorted_ns: Vec<u64>,
    notes: &'static str,
}

impl LatencyRow {
    /// The `p`-th percentile, microseconds.
    fn pct_us(&self, p: f64) -> Option<f64> {
        let n = self.sorted_ns.len();
        (n > 0).then(|| {
            let at = ((p / 100.0) * (n - 1) as f64).round() as usize;
            self.sorted_ns[at.min(n - 1)] as f64 / 1e3
        })
    }
    fn mean_us(&self) -> Option<f64> {
        let n = self.sorted_ns.len();
        (n > 0).then(|| self.sorted_ns.iter().sum::<u64>() as f64 / n as f64 / 1e3)
    }
}

/// The study's settings, in the report header.
#[derive(Debug, Serialize)]
struct StreamHeader {
    sizes: Vec<u32>,
    transports: Vec<StreamTransport>,
    bytes_per_row: u64,
    round_trips: u64,
    gram_bytes: usize,
    load_average: String,
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn flow_status(r: &anyhow::Result<Flow>, want: u64) -> Status {
    match r {
        Ok(f) if f.messages == want => Status::Ran,
        Ok(f) => Status::failed_because(format!("received {} of {want} messages", f.messages)),
        Err(e) => Status::failed(e),
    }
}

/// Runs the study.
pub fn run(args: StreamArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let bytes = args.bytes.unwrap_or(if args.quick { 8 << 20 } else { 64 << 20 });
    let round_trips = args.round_trips.unwrap_or(if args.quick { 2000 } else { 20_000 });
    anyhow::ensure!(
        !args.sizes.contains(&0),
        "--sizes: a message has at least one byte"
    );
    let scratch = crate::scratch::Scratch::new(&std::env::temp_dir(), "stream")?;
    let mut flows = Vec::new();
    for &size in &args.sizes {
        let messages = (bytes / u64::from(size)).max(1);
        let per_gram = (methods::GRAM_BYTES / size as usize).max(1);
        for (i, &t) in args.transports.iter().enumerate() {
            let r = methods::pfs(&t.endpoint(scratch.path(), i), size as usize, messages);
            flows.push(FlowRow {
                size,
                method: PFS.into(),
                transport: t.name(),
                status: flow_status(&r, messages),
                flow: r.ok(),
                notes: format!("{per_gram} messages per gram"),
            });
        }
        for (method, writes, notes) in [
            (
                SEND_EACH,
                Writes::EachMessage,
                "TCP_NODELAY, one write per message",
            ),
            (WRITEV, Writes::Batched, "1024 messages per writev: the floor"),
        ] {
            let r = methods::socket(writes, size as usize, messages);
            flows.push(FlowRow {
                size,
                method: method.into(),
                transport: "TCP",
                status: flow_status(&r, messages),
                flow: r.ok(),
                notes: notes.into(),
            });
        }
        flows.push(FlowRow {
            size,
            method: ZMQ_PUSH.into(),
            transport: "TCP",
            status: Status::skipped(NO_ZMQ),
            flow: None,
            notes: String::new(),
        });
    }
    let latency_row = |method, r: anyhow::Result<Vec<u64>>, notes| match r {
        Ok(sorted_ns) => LatencyRow {
            method,
            status: Status::Ran,
            sorted_ns,
            notes,
        },
        Err(e) => LatencyRow {
            method,
            status: Status::failed(&e),
            sorted_ns: Vec::new(),
            notes,
        },
    };
    let latency = vec![
        latency_row(
            PFS,
            methods::pfs_round_trips("tcp:127.0.0.1:0", 64, round_trips),
            "offer → subscriber handler → APPLIED back (streams are one-way)",
        ),
        latency_row(
            PING_PONG,
            methods::ping_pong(64, round_trips),
            "TCP_NODELAY, 64 B there and echoed back",
        ),
        LatencyRow {
            method: ZMQ_REQ,
            status: Status::skipped(NO_ZMQ),
            sorted_ns: Vec::new(),
            notes: "",
        },
    ];
    let header = Header::new(
        pfs,
        StreamHeader {
            sizes: args.sizes.clone(),
            transports: args.transports.clone(),
            bytes_per_row: bytes,
            round_trips,
            gram_bytes: methods::GRAM_BYTES,
            load_average: load_average(),
        },
    );
    let report = report(&header, &flows, &latency);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        for key in ["throughput", "latency"] {
            std::fs::write(
                dir.join(format!("stream-{key}.csv")),
                report.csv(key).unwrap_or_default(),
            )?;
        }
        std::fs::write(
            dir.join("stream.json"),
            serde_json::to_string_pretty(&report.json())?,
        )?;
        std::fs::write(dir.join("stream.md"), report.markdown())?;
        eprintln!(
            "pfs bench stream: wrote stream-throughput.csv, stream-latency.csv, stream.json, stream.md to {}",
            dir.display()
        );
    }
    let failed = flows.iter().any(|r| r.status.is_failed()) || latency.iter().any(|r| r.status.is_failed());
    Ok(if failed { Outcome::Failed } else { Outcome::Passed })
}

/// A baseline row's messages/s at `size`, when it ran.
fn baseline(flows: &[FlowRow], size: u32, method: &str) -> Option<f64> {
    flows
        .iter()
        .find(|r| r.size == size && r.method == method)
        .and_then(FlowRow::msgs_s)
}

/// Every field of the throughput rows (CSV, JSON).
fn flow_data(flows: &[FlowRow]) -> Table {
    let mut t = Table::new(&[
        Column::num("size_bytes", 0),
        Column::text("method", 0),
        Column::text("transport", 0),
        Column::text("status", 0),
        Column::text("error", 0),
        Column::num("messages", 0),
        Column::num("bytes", 0),
        Column::num("secs", 0),
        Column::num("messages_per_s", 0),
        Column::num("mb_s", 0),
        Column::num("sender_cpu_s", 0),
        Column::num("receiver_cpu_s", 0),
        Column::num("sender_mb_per_cpu_s", 0),
        Column::num("receiver_mb_per_cpu_s", 0),
        Column::num("vs_send_each", 0),
        Column::num("vs_writev", 0),
        Column::text("notes", 0),
    ]);
    for r in flows {
        let f = r.flow;
        t.push(vec![
            Cell::Int(u64::from(r.size)),
            Cell::text(&r.method),
            Cell::text(r.transport),
            Cell::text(r.status.key()),
            r.status
                .reason()
                .map_or(Cell::Missing, |e| Cell::text(e.as_str())),
            f.map_or(Cell::Missing, |f| Cell::Int(f.messages)),
            f.map_or(Cell::Missing, |f| Cell::Int(f.bytes)),
            Cell::num(f.map(|f| f.secs), 4),
            Cell::num(r.msgs_s(), 0),
            Cell::num(r.mb_s(), 1),
            Cell::num(f.map(|f| f.sender_cpu_s), 4),
            Cell::num(f.map(|f| f.receiver_cpu_s), 4),
            Cell::num(r.mb_per_cpu(|f| f.sender_cpu_s), 1),
            Cell::num(r.mb_per_cpu(|f| f.receiver_cpu_s), 1),
            Cell::num(vs(flows, r, SEND_EACH), 3),
            Cell::num(vs(flows, r, WRITEV), 3),
            Cell::text(&r.notes),
        ]);
    }
    t
}

/// A row's messages/s over the `method` baseline's at the same size.
fn vs(flows: &[FlowRow], r: &FlowRow, method: &str) -> Option<f64> {
    r.msgs_s()
        .zip(baseline(flows, r.size, method))
        .and_then(|(a, b)| ratio(a, b))
}

/// The terminal and Markdown table of the throughput rows.
fn flow_view(flows: &[FlowRow]) -> Table {
    let mut t = Table::new(&[
        Column::num("size", 6),
        Column::text("method", 18),
        Column::text("via", 4),
        Column::num("Mmsg/s", 8),
        Column::num("MB/s", 8),
        Column::num("MB/CPU-s tx", 11),
        Column::num("MB/CPU-s rx", 11),
        Column::num("×send()", 8),
        Column::num("×writev", 8),
        Column::text("notes", 0).gap(2),
    ]);
    for r in flows {
        t.push(vec![
            Cell::Int(u64::from(r.size)),
            Cell::text(&r.method),
            Cell::text(r.transport),
            Cell::num(r.msgs_s().map(|m| m / 1e6), 3),
            Cell::num(r.mb_s(), 1),
            Cell::num(r.mb_per_cpu(|f| f.sender_cpu_s), 0),
            Cell::num(r.mb_per_cpu(|f| f.receiver_cpu_s), 0),
            Cell::num(vs(flows, r, SEND_EACH), 2),
            Cell::num(vs(flows, r, WRITEV), 2),
            Cell::text(r.status.with_notes(&r.notes)),
        ]);
    }
    t
}

fn ping_pong_p50(latency: &[LatencyRow]) -> Option<f64> {
    latency
        .iter()
        .find(|r| r.method == PING_PONG)
        .and_then(|r| r.pct_us(50.0))
}

fn latency_table(latency: &[LatencyRow], view: bool) -> Table {
    let base = ping_pong_p50(latency);
    let mut columns = vec![
        Column::text("method", 16),
        Column::num("p50_us", 8),
        Column::num("p99_us", 8),
        Column::num("p999_us", 8),
        Column::num("max_us", 8),
        Column::num("mean_us", 8),
        Column::num("vs_ping_pong_p50", 8),
    ];
    if view {
        columns = vec![
            Column::text("method", 16),
            Column::num("p50 µs", 8),
            Column::num("p99 µs", 8),
            Column::num("p99.9 µs", 8),
            Column::num("max µs", 8),
            Column::num("mean µs", 8),
            Column::num("p50×ping-pong", 13),
            Column::text("notes", 0).gap(2),
        ];
    } else {
        columns.splice(
            1..1,
            [
                Column::text("status", 0),
                Column::text("error", 0),
                Column::num("round_trips", 0),
            ],
        );
        columns.push(Column::text("notes", 0));
    }
    let mut t = Table::new(&columns);
    for r in latency {
        let p50 = r.pct_us(50.0);
        let mut row = vec![
            Cell::text(r.method),
            Cell::num(p50, 1),
            Cell::num(r.pct_us(99.0), 1),
            Cell::num(r.pct_us(99.9), 1),
            Cell::num(r.pct_us(100.0), 1),
            Cell::num(r.mean_us(), 1),
            Cell::num(p50.zip(base).and_then(|(a, b)| ratio(a, b)), 2),
        ];
        if view {
            row.push(Cell::text(r.status.with_notes(r.notes)));
        } else {
            row.splice(
                1..1,
                [
                    Cell::text(r.status.key()),
                    r.status
                        .reason()
                        .map_or(Cell::Missing, |e| Cell::text(e.as_str())),
                    Cell::Int(r.sorted_ns.len() as u64),
                ],
            );
            row.push(Cell::text(r.notes));
        }
        t.push(row);
    }
    t
}

/// The design's figures for streaming (issue 28), from rows of this run.
fn targets(flows: &[FlowRow], latency: &[LatencyRow]) -> Vec<Target> {
    let pfs_64 = flows
        .iter()
        .find(|r| r.size == 64 && r.method == PFS && r.transport == "TCP");
    let pfs_p50 = latency
        .iter()
        .find(|r| r.method == PFS)
        .and_then(|r| r.pct_us(50.0));
    vec![
        Target {
            fs: None,
            what: "64 B messages over TCP loopback: PFS stream ÷ one send() per message (messages/s)".into(),
            value: pfs_64.and_then(|r| vs(flows, r, SEND_EACH)),
            limit: 10.0,
            at_least: true,
            unit: "×",
        },
        Target {
            fs: None,
            what: "64 B round trip over TCP loopback: PFS stream p50 ÷ plain socket ping-pong p50".into(),
            value: pfs_p50.zip(ping_pong_p50(latency)).and_then(|(a, b)| ratio(a, b)),
            limit: 1.2,
            at_least: false,
            unit: "×",
        },
    ]
}

fn report(h: &Header<StreamHeader>, flows: &[FlowRow], latency: &[LatencyRow]) -> Report {
    let s = &h.study;
    let mut r = Report::new("pfs bench stream", h);
    r.lines = vec![
        format!(
            "throughput: {} message bytes per row, PFS grams of up to {} bytes of messages; baselines over TCP loopback",
            s.bytes_per_row, s.gram_bytes
        ),
        format!("latency: {} timed 64 B round trips per row after 100 untimed", s.round_trips),
        format!("load average (1, 5, 15 min) at the end: {}", s.load_average),
    ];
    let tg = targets(flows, latency);
    r.section(
        Section::new("throughput", flow_view(flows), flow_data(flows))
            .titled("Throughput")
            .noted("MB/CPU-s: message MB per CPU-second of the sending (tx) and receiving (rx) thread (getrusage RUSAGE_THREAD); ×send(), ×writev: messages/s over the TCP baseline's at the same size"),
    )
    .section(
        Section::new("latency", latency_table(latency, true), latency_table(latency, false))
            .titled("Round trip, 64 B, TCP loopback"),
    )
    .section(
        Section::new("targets", Target::view(&tg), Target::data(&tg))
            .titled("Targets (ratios of the rows above, same run; docs/benchmarks.md)"),
    )
}
