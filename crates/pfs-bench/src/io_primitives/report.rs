//! The study's report: header, one table line per cell, the A4/A1 headline
//! ratio, JSON, CSV and the PNG plots (drawn by [`crate::plot`]).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::cell::Measured;
use super::SendMethod;
use crate::plot::{self, Series};
use crate::report::Method as _;
use crate::report::{Cell as Shown, Column, Report, Section, Table};

/// Units and definitions, printed with every report.
pub const UNITS: &str = "Gbit/s = 10^9 bit/s of logical message bytes (the 8 fields); wire bytes = bytes through the sockets \
(A4 framing included, TCP/IP headers not); ns/msg/thr = elapsed × threads / messages, the mean time per message per sender \
thread, not a round trip; CPU and context switches from getrusage(RUSAGE_THREAD), summed over sender and receiver threads";

/// The A4/A1 ratio the design sets as a target.
pub const TARGET_RATIO: f64 = 10.0;

/// The study's part of its report header (after the [`crate::report::Machine`] facts).
#[derive(Debug, Clone, Serialize)]
pub struct IoSettings {
    /// Pinning policy.
    pub pinning: String,
    /// TCP_NODELAY on sender sockets.
    pub tcp_nodelay: bool,
    /// Send duration per cell.
    pub duration_s: f64,
    /// Messages per sender pool.
    pub pool: usize,
    /// A3 in-flight bound.
    pub zc_inflight: usize,
    /// A4 payload budget per gram.
    pub gram_payload: u64,
    /// A4 descriptor table encoding.
    pub gram_encoding: String,
    /// Hardware counters in use, or why not.
    pub hardware_counters: String,
    /// Units and definitions.
    pub units: String,
}

/// The study's report header.
pub type Header = crate::report::Header<IoSettings>;

/// A4 / A1 throughput at one size and thread count.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    /// Sender threads.
    pub threads: usize,
    /// Message size.
    pub msg_size: usize,
    /// A1 Gbit/s.
    pub a1_gbit_s: f64,
    /// A4 Gbit/s.
    pub a4_gbit_s: f64,
    /// A4 / A1.
    pub ratio: f64,
    /// The target ratio.
    pub target: f64,
    /// ratio ≥ target.
    pub met: bool,
}

/// `64`, `1K`, `64K`, `1M`.
pub fn size_label(n: usize) -> String {
    if n >= 1 << 20 && n.checked_rem(1 << 20) == Some(0) {
        format!("{}M", n >> 20)
    } else if n >= 1024 && n.checked_rem(1024) == Some(0) {
        format!("{}K", n >> 10)
    } else {
        n.to_string()
    }
}

fn count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// The study's report before its cells: the header lines.
pub fn report(h: &Header) -> Report {
    let mut r = Report::new("pfs bench io-primitives", h);
    r.lines = vec![
        format!(
            "pinning: {} · TCP_NODELAY {} · {:.2} s per cell · pool {} messages per sender · A3 in flight ≤ {} · A4 gram payload {} B, {} descriptors",
            h.study.pinning,
            if h.study.tcp_nodelay { "on" } else { "off (kernel default: Nagle on)" },
            h.study.duration_s,
            h.study.pool,
            h.study.zc_inflight,
            h.study.gram_payload,
            h.study.gram_encoding,
        ),
        format!("hardware counters: {}", h.study.hardware_counters),
    ];
    r
}

/// The whole report: the header lines, the cells (the footer below them),
/// and the headline ratios and wall time in JSON.
pub fn finish(report: Report, cells: &[Measured], ratios: &[Headline], wall_s: f64) -> Report {
    let footer = footer_text(cells, ratios, wall_s);
    report
        .section(Section::new("cells", view(cells), data(cells)).noted(footer.trim_matches('\n')))
        .field("study", "io-primitives")
        .field("wall_s", wall_s)
        .field("a4_over_a1", serde_json::to_value(ratios).unwrap_or_default())
}

/// Columns of the terminal table.
const VIEW: [Column; 14] = [
    Column::text("meth", 4),
    Column::num("size", 5),
    Column::num("thr", 3),
    Column::num("Gbit/s", 8),
    Column::num("msg/s", 8),
    Column::num("ns/msg/thr", 10),
    Column::num("ctxsw", 8),
    Column::num("cpu_s", 6),
    Column::num("cpuns/B", 8),
    Column::num("cyc/B", 7),
    Column::num("LLC_miss", 8),
    Column::num("wire/log", 8),
    Column::num("call/msg", 8),
    Column::text("notes", 0).gap(2),
];

/// Column titles of the table.
pub fn table_head() -> String {
    Table::new(&VIEW).text_head().trim_end().to_string()
}

fn notes(c: &Measured) -> String {
    let mut n = Vec::new();
    if let Some(failed) = c.status.note() {
        n.push(failed);
    }
    if let (Some(done), Some(copied)) = (c.zc_completions, c.zc_copied) {
        n.push(format!(
            "zerocopy completions {done}, {copied} copied by the kernel"
        ));
    }
    if let (Some(per), true) = (c.msgs_per_gram, c.ok()) {
        n.push(format!("{per} msgs/gram"));
    }
    if !c.notes.is_empty() {
        n.push(c.notes.clone());
    }
    n.join("; ")
}

/// One line of the terminal table, for printing cells as they finish.
pub fn view_line(c: &Measured) -> String {
    Table::new(&VIEW).text_row(&view_row(c)).trim_end().to_string()
}

/// The terminal table of every cell.
pub fn view(cells: &[Measured]) -> Table {
    let mut t = Table::new(&VIEW);
    for c in cells {
        t.push(view_row(c));
    }
    t
}

/// A failed cell shows `—` for every number and its status in the notes.
fn view_row(c: &Measured) -> Vec<Shown> {
    let ok = c.ok();
    let num = |v: f64, d: usize| if ok { Shown::Num(v, d) } else { Shown::Missing };
    let text = |v: String| if ok { Shown::Text(v) } else { Shown::Missing };
    vec![
        Shown::text(c.method),
        Shown::Text(size_label(c.msg_size)),
        Shown::Int(c.threads as u64),
        num(c.gbit_s, 3),
        text(count(c.msgs_per_s)),
        num(c.mean_ns_per_msg, 0),
        text(count(c.ctx_switches as f64)),
        num(c.cpu_s, 3),
        num(c.cpu_ns_per_byte, 3),
        text(
            c.cycles_per_byte
                .map_or_else(|| "n/a".into(), |v| format!("{v:.2}")),
        ),
        text(c.llc_misses.map_or_else(|| "n/a".into(), |v| count(v as f64))),
        num(c.wire_ratio, 3),
        num(c.calls_per_msg, 3),
        Shown::Text(notes(c)),
    ]
}

/// The size the headline ratio is taken at: 64 B when measured, else the smallest size.
fn headline_size(cells: &[Measured]) -> Option<usize> {
    if cells.iter().any(|c| c.msg_size == 64) {
        Some(64)
    } else {
        cells.iter().map(|c| c.msg_size).min()
    }
}

/// A4 / A1 at the headline size, for every thread count where both ran.
pub fn ratios(cells: &[Measured]) -> Vec<Headline> {
    let Some(size) = headline_size(cells) else {
        return Vec::new();
    };
    let find = |m: SendMethod, t: usize| {
        cells
            .iter()
            .find(|c| c.ok() && c.method == m.key() && c.msg_size == size && c.threads == t)
    };
    let mut threads: Vec<usize> = cells.iter().map(|c| c.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    threads
        .into_iter()
        .filter_map(|t| {
            let (a1, a4) = (find(SendMethod::A1, t)?, find(SendMethod::A4, t)?);
            let ratio = a4.gbit_s / a1.gbit_s.max(f64::MIN_POSITIVE);
            Some(Headline {
                threads: t,
                msg_size: size,
                a1_gbit_s: a1.gbit_s,
                a4_gbit_s: a4.gbit_s,
                ratio,
                target: TARGET_RATIO,
                met: ratio >= TARGET_RATIO,
            })
        })
        .collect()
}

/// Definitions, the headline ratio and zerocopy findings, after the table.
pub fn footer_text(cells: &[Measured], ratios: &[Headline], wall_s: f64) -> String {
    let mut s = format!("\n{UNITS}.\n");
    if let Some(r0) = ratios.first() {
        let _ = writeln!(
            s,
            "\nA4 / A1 throughput at {} B, same run, same thread count (target ≥ {TARGET_RATIO:.0}×):",
            r0.msg_size
        );
        for r in ratios {
            let _ = writeln!(
                s,
                "  threads {:>3}: {:>7.2}×  (A4 {:.3} Gbit/s vs A1 {:.3} Gbit/s)  {}",
                r.threads,
                r.ratio,
                r.a4_gbit_s,
                r.a1_gbit_s,
                if r.met { "met" } else { "NOT met" }
            );
        }
    } else {
        s.push_str("\nA4 / A1 ratio: not available (needs both a1 and a4 cells that succeeded).\n");
    }
    let (done, copied) = cells.iter().filter(|c| c.ok()).fold((0u64, 0u64), |(d, k), c| {
        (d + c.zc_completions.unwrap_or(0), k + c.zc_copied.unwrap_or(0))
    });
    if done > 0 {
        let _ = writeln!(
            s,
            "\nA3: {copied} of {done} zerocopy completions ({:.1}%) reported SO_EE_CODE_ZEROCOPY_COPIED — the kernel copied the data anyway.",
            copied as f64 * 100.0 / done as f64
        );
    }
    let failed = cells.iter().filter(|c| !c.ok()).count();
    if failed > 0 {
        let _ = writeln!(s, "\n{failed} cell(s) failed; see their notes.");
    }
    let _ = writeln!(s, "\nstudy wall time {wall_s:.1} s");
    s
}

/// Every field of a cell, in CSV order.
const DATA: [&str; 30] = [
    "method",
    "msg_size",
    "threads",
    "gbit_s",
    "msgs_per_s",
    "mean_ns_per_msg",
    "elapsed_s",
    "duration_s",
    "messages",
    "logical_bytes",
    "wire_bytes",
    "wire_ratio",
    "send_calls",
    "calls_per_msg",
    "ctx_switches",
    "ctx_voluntary",
    "ctx_involuntary",
    "cpu_user_s",
    "cpu_sys_s",
    "cpu_s",
    "cpu_ns_per_byte",
    "cycles_per_byte",
    "llc_misses",
    "zc_completions",
    "zc_copied",
    "msgs_per_gram",
    "grams",
    "status",
    "error",
    "notes",
];

/// Every field of every cell (CSV, JSON); a failed cell has no figures
/// (empty, `null`), only its plan, status and reason.
pub fn data(cells: &[Measured]) -> Table {
    let columns: Vec<Column> = DATA.iter().map(|t| Column::text(t, 0)).collect();
    let mut t = Table::new(&columns);
    for c in cells {
        let ok = c.ok();
        let opt = |v: Option<u64>| v.filter(|_| ok).map_or(Shown::Missing, Shown::Int);
        let int = |v: u64| if ok { Shown::Int(v) } else { Shown::Missing };
        let num = |v: f64, d: usize| if ok { Shown::Num(v, d) } else { Shown::Missing };
        t.push(vec![
            Shown::text(c.method),
            Shown::Int(c.msg_size as u64),
            Shown::Int(c.threads as u64),
            num(c.gbit_s, 6),
            num(c.msgs_per_s, 1),
            num(c.mean_ns_per_msg, 1),
            num(c.elapsed_s, 6),
            Shown::Num(c.duration_s, 3),
            int(c.messages),
            int(c.logical_bytes),
            int(c.wire_bytes),
            num(c.wire_ratio, 6),
            int(c.send_calls),
            num(c.calls_per_msg, 6),
            int(c.ctx_switches),
            int(c.ctx_voluntary),
            int(c.ctx_involuntary),
            num(c.cpu_user_s, 6),
            num(c.cpu_sys_s, 6),
            num(c.cpu_s, 6),
            num(c.cpu_ns_per_byte, 6),
            c.cycles_per_byte
                .filter(|_| ok)
                .map_or(Shown::Missing, |v| Shown::Num(v, 4)),
            opt(c.llc_misses),
            opt(c.zc_completions),
            opt(c.zc_copied),
            opt(c.msgs_per_gram.map(|v| v as u64)),
            opt(c.grams),
            Shown::text(c.status.key()),
            Shown::text(c.status.reason().map_or("", |r| r.as_str())),
            Shown::text(&c.notes),
        ]);
    }
    t
}

/// Plot files written and warnings for those that were not.
#[derive(Debug, Default)]
pub struct Plots {
    /// File names written.
    pub written: Vec<String>,
    /// Why a plot is missing.
    pub warnings: Vec<String>,
}

/// One series per method of `y(cell)` against `x(cell)` over the cells `keep` selects.
fn series_per_method(
    cells: &[Measured],
    keep: impl Fn(&Measured) -> bool,
    x: impl Fn(&Measured) -> f64,
    y: impl Fn(&Measured) -> f64,
) -> Vec<Series> {
    SendMethod::ALL
        .iter()
        .filter_map(|m| {
            let mut points: Vec<(f64, f64)> = cells
                .iter()
                .filter(|c| c.ok() && c.method == m.key() && keep(c))
                .map(|c| (x(c), y(c)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (!points.is_empty()).then(|| Series {
                name: m.label().to_string(),
                points,
            })
        })
        .collect()
}

/// Throughput and CPU per byte vs message size at threads = 1 (the cleanest
/// per-primitive comparison on a 2-core machine; the smallest thread count
/// when 1 was not run), and latency vs threads at 64 B (or the smallest size).
pub fn plots(dir: &Path, cells: &[Measured]) -> Plots {
    let mut out = Plots::default();
    let Some(t_plot) = cells.iter().map(|c| c.threads).min() else {
        return out;
    };
    let Some(size_plot) = headline_size(cells) else {
        return out;
    };
    let jobs: [(&str, Vec<Series>, String, &str, &str); 3] = [
        (
            "io-primitives-throughput.png",
            series_per_method(
                cells,
                |c| c.threads == t_plot,
                |c| c.msg_size as f64,
                |c| c.gbit_s,
            ),
            format!("Throughput vs message size (threads = {t_plot}, logical bytes)"),
            "message size (bytes)",
            "Gbit/s",
        ),
        (
            "io-primitives-latency.png",
            series_per_method(
                cells,
                |c| c.msg_size == size_plot,
                |c| c.threads as f64,
                |c| c.mean_ns_per_msg,
            ),
            format!("Mean time per message per sender thread vs threads ({size_plot} B messages)"),
            "sender threads",
            "ns per message per thread",
        ),
        (
            "io-primitives-cpu-per-byte.png",
            series_per_method(
                cells,
                |c| c.threads == t_plot,
                |c| c.msg_size as f64,
                |c| c.cpu_ns_per_byte,
            ),
            format!("CPU per logical byte vs message size (threads = {t_plot}, sender + receiver)"),
            "message size (bytes)",
            "CPU ns per byte",
        ),
    ];
    for (file, series, title, xl, yl) in jobs {
        if series.is_empty() {
            out.warnings.push(format!("{file}: no successful cells to plot"));
            continue;
        }
        match plot::lines(&series, &title, xl, yl, true, &dir.join(file)) {
            Ok(()) => out.written.push(file.to_string()),
            Err(e) => out.warnings.push(format!("{file} not written: {e:#}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_header_is_every_field_in_order() {
        assert_eq!(
            data(&[]).csv(),
            "method,msg_size,threads,gbit_s,msgs_per_s,mean_ns_per_msg,elapsed_s,duration_s,messages,logical_bytes,wire_bytes,wire_ratio,\
             send_calls,calls_per_msg,ctx_switches,ctx_voluntary,ctx_involuntary,cpu_user_s,cpu_sys_s,cpu_s,cpu_ns_per_byte,\
             cycles_per_byte,llc_misses,zc_completions,zc_copied,msgs_per_gram,grams,status,error,notes\n"
        );
    }

    #[test]
    fn a_cell_that_did_not_run_has_no_figure_in_any_format() {
        let h = Header {
            machine: crate::report::Machine {
                tool: "pfs 0.1.0".into(),
                git_revision: "abc1234".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cores: 2,
            },
            study: IoSettings {
                pinning: "unpinned".into(),
                tcp_nodelay: true,
                duration_s: 0.5,
                pool: 64,
                zc_inflight: 8,
                gram_payload: 65536,
                gram_encoding: "absolute one per message".into(),
                hardware_counters: "n/a".into(),
                units: UNITS.into(),
            },
        };
        let cells = vec![Measured::failed_for_test(SendMethod::A3, "no zerocopy here")];
        let r = finish(report(&h), &cells, &ratios(&cells), 1.0);
        crate::report::check_not_run_row(&r, "a3");
        let j = r.json();
        assert_eq!(j["cells"][0]["status"], "failed");
        assert_eq!(j["cells"][0]["error"], "no zerocopy here");
        assert!(j["cells"][0]["gbit_s"].is_null());
        assert!(view_line(&cells[0]).contains("failed: no zerocopy here"));
    }

    #[test]
    fn head_keeps_its_columns() {
        let head = table_head();
        assert!(head.starts_with("meth  size thr   Gbit/s"), "{head}");
        assert!(head.ends_with("call/msg  notes"), "{head}");
    }
}
