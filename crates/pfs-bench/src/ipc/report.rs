//! The study's report: header, one table line per method, the ratios
//! against `unix-epoll` (computed for whatever rows are present), JSON, CSV
//! and the latency chart (drawn by [`crate::plot`]). The header is the
//! one [`crate::report::Header`] with this study's settings.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::clock::Clock;
use super::methods::IpcMethod;
use super::row::Row;
use crate::plot::{self, DotRow};
use crate::report::Method as _;
use crate::report::{Cell, Column, Report, Section, Table};

/// Units and definitions, printed with every report.
pub const UNITS: &str = "one-way = receiver's time stamp at receive − sender's at send, 32-byte messages, ping-pong \
(client → server, server-side samples; return = server → client); cycles = TSC cycles, ns converted with the \
calibrated TSC frequency; Mmsg/s = 10^6 messages per second, back to back (server: first to last arrival; client: \
send calls); idle CPU = server CPU time (getrusage user + system) ÷ wall time while it waits for a message that \
does not come; vs unix = unix-epoll one-way mean ÷ this row's (above 1: faster)";

/// The study's part of its report header (after the [`crate::report::Machine`] facts).
#[derive(Debug, Clone, Serialize)]
pub struct IpcSettings {
    /// The clock.
    pub clock: Clock,
    /// Pinning as run.
    pub pinning: String,
    /// Bytes per message.
    pub msg_bytes: usize,
    /// Messages per method in the latency phase and again in the throughput phase.
    pub messages: u64,
    /// Warm-up ping-pongs per method.
    pub warmup: u64,
    /// Idle phase, seconds.
    pub idle_s: f64,
    /// Row timeout, seconds.
    pub timeout_s: f64,
    /// Units and definitions.
    pub units: String,
}

/// The study's report header.
pub type Header = crate::report::Header<IpcSettings>;

/// One row's one-way mean against unix-epoll's, same run.
#[derive(Debug, Clone, Serialize)]
pub struct VsUnixEpoll {
    /// Row method key.
    pub method: String,
    /// Row label.
    pub label: String,
    /// Row one-way mean, ns.
    pub one_way_mean_ns: f64,
    /// unix-epoll one-way mean, ns.
    pub unix_epoll_one_way_mean_ns: f64,
    /// Row mean ÷ unix-epoll mean (below 1: faster).
    pub row_over_unix_epoll: f64,
    /// unix-epoll mean ÷ row mean (above 1: faster).
    pub unix_epoll_over_row: f64,
}

/// Fills every row's `vs_unix_epoll` and returns the ratio of every other
/// measured row against the `unix-epoll` row, when that one measured.
pub fn ratios(rows: &mut [Row]) -> Vec<VsUnixEpoll> {
    let base = rows
        .iter()
        .find(|r| r.ok() && r.method == IpcMethod::BASELINE.key())
        .and_then(|r| r.one_way_mean_ns)
        .filter(|&m| m > 0.0);
    let Some(base) = base else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in rows.iter_mut().filter(|r| r.ok()) {
        let Some(mean) = r.one_way_mean_ns.filter(|&m| m > 0.0) else {
            continue;
        };
        r.vs_unix_epoll = Some(base / mean);
        if r.method != IpcMethod::BASELINE.key() {
            out.push(VsUnixEpoll {
                method: r.method.clone(),
                label: r.label.clone(),
                one_way_mean_ns: mean,
                unix_epoll_one_way_mean_ns: base,
                row_over_unix_epoll: mean / base,
                unix_epoll_over_row: base / mean,
            });
        }
    }
    out
}

pub fn group(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && i % 3 == s.len() % 3 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The study's report before its rows: the header lines.
pub fn report(h: &Header) -> Report {
    let mut r = Report::new("pfs bench ipc", h);
    r.lines = vec![
        format!("clock: {}", h.study.clock.describe()),
        format!(
            "pinning: {} · {}-byte messages · per method: {} warm-up ping-pongs, {} latency ping-pongs, {} throughput messages, {:.1} s idle",
            h.study.pinning,
            h.study.msg_bytes,
            group(h.study.warmup),
            group(h.study.messages),
            group(h.study.messages),
            h.study.idle_s,
        ),
    ];
    r
}

/// The whole report: header lines, the rows (the footer below them), and
/// the ratios, warnings and wall time in JSON.
pub fn finish(
    report: Report,
    h: &Header,
    rows: &[Row],
    ratios: &[VsUnixEpoll],
    warnings: &[String],
    wall_s: f64,
) -> Report {
    let footer = footer_text(rows, ratios, warnings, wall_s);
    report
        .section(Section::new("rows", view(rows), data(h, rows)).noted(footer.trim_matches('\n')))
        .field("study", "ipc")
        .field("warnings", warnings.to_vec())
        .field("wall_s", wall_s)
        .field("vs_unix_epoll", serde_json::to_value(ratios).unwrap_or_default())
}

/// Columns of the terminal table (under the group titles of [`table_head`]).
const VIEW: [Column; 18] = [
    Column::text("method", 11),
    Column::num("mean", 9),
    Column::num("p50", 10).gap(0),
    Column::num("p99", 10).gap(0),
    Column::num("p99.9", 10).gap(0),
    Column::num("mean", 9),
    Column::num("p50", 10).gap(0),
    Column::num("p99", 10).gap(0),
    Column::num("p99.9", 10).gap(0),
    Column::num("mean ns", 8),
    Column::num("mean", 8),
    Column::num("p50", 9).gap(0),
    Column::num("p99", 9).gap(0),
    Column::num("server", 7),
    Column::num("client", 8).gap(0),
    Column::num("CPU %", 6),
    Column::num("unix", 6),
    Column::num("s", 6),
];

/// Column titles of the table (two lines).
pub fn table_head() -> String {
    // The line above the titles: what each group of columns measures.
    let groups = format!(
        "{:<11} {:<39} {:<39} {:>8} {:<26} {:<15} {:>6} {:>6} {:>6}",
        "", "one-way, TSC cycles", "one-way, ns", "return", "round trip, ns", "Mmsg/s", "idle", "vs", "wall",
    );
    format!("{groups}\n{}", Table::new(&VIEW).text_head().trim_end())
}

/// A latency for the table: few digits, no false precision.
fn lat(v: Option<f64>) -> String {
    match v {
        None => "n/a".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn cyc(v: Option<i64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

fn fixed(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "n/a".into(), |v| format!("{v:.decimals$}"))
}

/// One line of the terminal table, for printing rows as they finish; a
/// failed row gives its status and reason instead of numbers.
pub fn view_line(r: &Row) -> String {
    if !r.ok() {
        return format!("{:<11} {}", r.method, r.status);
    }
    Table::new(&VIEW).text_row(&view_row(r)).trim_end().to_string()
}

/// The table of every row (a failed row: `—` in every figure).
pub fn view(rows: &[Row]) -> Table {
    let mut t = Table::new(&VIEW);
    for r in rows {
        if r.ok() {
            t.push(view_row(r));
        } else {
            let mut cells = vec![Cell::text(&r.method)];
            cells.resize(VIEW.len(), Cell::Missing);
            t.push(cells);
        }
    }
    t
}

fn view_row(r: &Row) -> Vec<Cell> {
    vec![
        Cell::text(&r.method),
        Cell::Text(lat(r.one_way_mean_cycles)),
        Cell::Text(cyc(r.one_way_p50_cycles)),
        Cell::Text(cyc(r.one_way_p99_cycles)),
        Cell::Text(cyc(r.one_way_p999_cycles)),
        Cell::Text(lat(r.one_way_mean_ns)),
        Cell::Text(lat(r.one_way_p50_ns)),
        Cell::Text(lat(r.one_way_p99_ns)),
        Cell::Text(lat(r.one_way_p999_ns)),
        Cell::Text(lat(r.return_mean_ns)),
        Cell::Text(lat(r.round_trip_mean_ns)),
        Cell::Text(lat(r.round_trip_p50_ns)),
        Cell::Text(lat(r.round_trip_p99_ns)),
        Cell::Text(fixed(r.throughput_mmsg_s, 3)),
        Cell::Text(fixed(r.client_send_mmsg_s, 3)),
        Cell::Text(fixed(r.idle_cpu_pct, 1)),
        Cell::Text(fixed(r.vs_unix_epoll, 2)),
        Cell::Num(r.row_wall_s, 1),
    ]
}

/// Labels, notes, the ratios against unix-epoll and warnings, after the table.
pub fn footer_text(rows: &[Row], ratios: &[VsUnixEpoll], warnings: &[String], wall_s: f64) -> String {
    let mut s = String::from("\n");
    for r in rows {
        let _ = write!(s, "{:<11} {} (receiver waits: {})", r.method, r.label, r.wait);
        if !r.notes.is_empty() {
            let _ = write!(s, " — NOTE: {}", r.notes);
        }
        s.push('\n');
    }
    let _ = writeln!(s, "\n{UNITS}.");
    if ratios.is_empty() {
        s.push_str("\nRatios against unix-epoll: not available (its row did not run or failed).\n");
    } else {
        let _ = writeln!(
            s,
            "\nOne-way mean against unix-epoll, same run (below 1: faster than unix-epoll):"
        );
        for r in ratios {
            let _ = writeln!(
                s,
                "  {} one-way mean / unix-epoll one-way mean = {:.3}  ({} ns / {} ns; unix-epoll is {:.2}× this row's)",
                r.method,
                r.row_over_unix_epoll,
                lat(Some(r.one_way_mean_ns)),
                lat(Some(r.unix_epoll_one_way_mean_ns)),
                r.unix_epoll_over_row,
            );
        }
    }
    for w in warnings {
        let _ = writeln!(s, "\nWARNING: {w}");
    }
    let failed = rows.iter().filter(|r| !r.ok()).count();
    if failed > 0 {
        let _ = writeln!(s, "\n{failed} row(s) failed; see above.");
    }
    let _ = writeln!(s, "\nstudy wall time {wall_s:.1} s");
    s
}

/// CSV columns, in order: every field of [`Row`].
pub const COLUMNS: [&str; 47] = [
    "method",
    "label",
    "wait",
    "status",
    "error",
    "messages",
    "one_way_count",
    "one_way_mean_cycles",
    "one_way_p50_cycles",
    "one_way_p99_cycles",
    "one_way_p999_cycles",
    "one_way_mean_ns",
    "one_way_p50_ns",
    "one_way_p99_ns",
    "one_way_p999_ns",
    "one_way_min_ns",
    "one_way_max_ns",
    "one_way_negative",
    "return_count",
    "return_mean_cycles",
    "return_mean_ns",
    "return_p50_ns",
    "return_p99_ns",
    "return_negative",
    "round_trip_count",
    "round_trip_mean_ns",
    "round_trip_p50_ns",
    "round_trip_p99_ns",
    "round_trip_p999_ns",
    "throughput_messages",
    "throughput_mmsg_s",
    "client_send_mmsg_s",
    "idle_cpu_pct",
    "idle_wall_s",
    "idle_cpu_s",
    "vs_unix_epoll",
    "client_cpu",
    "server_cpu",
    "latency_wall_s",
    "throughput_wall_s",
    "row_wall_s",
    "notes",
    // Repeated from the header, so that each CSV row stands alone.
    "clock",
    "tsc_ghz",
    "tsc_invariant",
    "pinning",
    "git_revision",
];

/// Every field of every row (CSV, JSON), with the clock and build facts
/// repeated so that each row stands alone; unavailable values are empty
/// (CSV) or `null` (JSON).
pub fn data(header: &Header, rows: &[Row]) -> Table {
    let columns: Vec<Column> = COLUMNS.iter().map(|c| Column::text(c, 0)).collect();
    let mut t = Table::new(&columns);
    for r in rows {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert("clock".into(), header.study.clock.source.clone().into());
            m.insert(
                "tsc_ghz".into(),
                if header.study.clock.tsc {
                    serde_json::json!(header.study.clock.hz / 1e9)
                } else {
                    serde_json::Value::Null
                },
            );
            m.insert("tsc_invariant".into(), header.study.clock.invariant.into());
            m.insert("pinning".into(), header.study.pinning.clone().into());
            m.insert("git_revision".into(), header.machine.git_revision.clone().into());
        }
        t.push(COLUMNS.iter().map(|c| Cell::from(&v[*c])).collect());
    }
    t
}

/// The latency chart: per measured row, the one-way p50, mean, p99 and p99.9 in ns.
pub fn plot(dir: &Path, header: &Header, rows: &[Row]) -> anyhow::Result<&'static str> {
    const FILE: &str = "ipc.png";
    let dots: Vec<DotRow> = rows
        .iter()
        .filter(|r| r.ok())
        .map(|r| DotRow {
            label: r.label.clone(),
            values: vec![
                r.one_way_p50_ns,
                r.one_way_mean_ns,
                r.one_way_p99_ns,
                r.one_way_p999_ns,
            ],
        })
        .collect();
    let title = format!(
        "One-way latency of {}-byte messages, {} pinning ({} ping-pongs per method)",
        header.study.msg_bytes,
        if header.study.pinning.starts_with("unpinned") {
            "without"
        } else {
            "with"
        },
        group(header.study.messages)
    );
    plot::dots(
        &dots,
        &["p50", "mean", "p99", "p99.9"],
        &title,
        "one-way latency, ns",
        "ns",
        &dir.join(FILE),
    )?;
    Ok(FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Status;

    fn row(method: IpcMethod, mean: f64) -> Row {
        Row {
            method: method.key().into(),
            label: method.label().into(),
            status: Status::Ran,
            one_way_mean_ns: Some(mean),
            ..Row::default()
        }
    }

    #[test]
    fn every_row_field_has_a_column() {
        let v = serde_json::to_value(Row::default()).unwrap();
        let fields: Vec<&String> = v.as_object().unwrap().keys().collect();
        for f in &fields {
            assert!(COLUMNS.contains(&f.as_str()), "field {f} has no CSV column");
        }
        assert_eq!(COLUMNS.len(), fields.len() + 5);
    }

    #[test]
    fn ratios_are_against_unix_epoll_for_any_row() {
        let mut rows = vec![
            row(IpcMethod::UnixEpoll, 20_000.0),
            row(IpcMethod::Pipe, 10_000.0),
            row(IpcMethod::Tcp, 40_000.0),
        ];
        let r = ratios(&mut rows);
        assert_eq!(r.len(), 2);
        assert_eq!(rows[0].vs_unix_epoll, Some(1.0));
        assert_eq!(rows[1].vs_unix_epoll, Some(2.0));
        assert_eq!(rows[2].vs_unix_epoll, Some(0.5));
        assert_eq!(r[0].row_over_unix_epoll, 0.5);

        let mut no_base = vec![row(IpcMethod::Pipe, 1.0)];
        assert!(ratios(&mut no_base).is_empty());
        assert_eq!(no_base[0].vs_unix_epoll, None);
    }

    #[test]
    fn a_row_that_did_not_run_has_no_figure_in_any_format() {
        let h = Header {
            machine: crate::report::Machine {
                tool: "pfs 0.1.0".into(),
                git_revision: "abc1234".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cores: 2,
            },
            study: IpcSettings {
                clock: Clock::detect(),
                pinning: "unpinned".into(),
                msg_bytes: 64,
                messages: 1000,
                warmup: 10,
                idle_s: 0.1,
                timeout_s: 1.0,
                units: UNITS.into(),
            },
        };
        let mut failed = row(IpcMethod::Pipe, 0.0);
        failed.one_way_mean_ns = None;
        failed.status = Status::failed_because("the server exited with status 1");
        failed.messages = 1000;
        failed.row_wall_s = 1.5;
        let mut rows = vec![row(IpcMethod::UnixEpoll, 25_000.0), failed];
        let ratios = ratios(&mut rows);
        let r = finish(report(&h), &h, &rows, &ratios, &[], 1.0);
        crate::report::check_not_run_row(&r, "pipe");
        let j = r.json();
        assert_eq!(j["rows"][1]["status"], "failed");
        assert_eq!(j["rows"][1]["error"], "the server exited with status 1");
        assert!(j["rows"][1]["one_way_mean_ns"].is_null());
    }

    #[test]
    fn table_lines_line_up() {
        let head = table_head();
        let mut r = row(IpcMethod::UnixEpoll, 25_000.0);
        r.row_wall_s = 12.0;
        let line = view_line(&r);
        let width = head.lines().nth(1).unwrap().chars().count();
        assert_eq!(line.chars().count(), width, "\n{head}\n{line}");
        r.status = Status::failed_because("boom");
        assert!(view_line(&r).contains("failed: boom"));
    }
}
