//! The mount study's report: four tables (fio, metadata, first byte, tree
//! read), the design's targets as ratios of their rows, the terminal text,
//! Markdown, CSV per table, one JSON document, and a PNG of the fio rows.
//! A cell without a measurement is [`Cell::Missing`] (`—`), and its row's
//! notes say why.

use std::path::Path;

use super::{FioRow, FirstByteRow, MountHeader, ReadPath, Results, NUMJOBS, WORKLOADS};
use crate::plot::{self, DotRow};
use crate::report::{ratio, Cell, Column, Report, Section, Table, Target};

/// Notes led by why a row (or one of its runs) did not measure.
fn with_why(why: Option<String>, notes: &str) -> String {
    match (why, notes.is_empty()) {
        (Some(w), true) => w,
        (Some(w), false) => format!("{w}; {notes}"),
        (None, _) => notes.to_string(),
    }
}

/// The tmpfs iops of `row`'s workload at numjobs index `j`.
fn tmpfs_iops(rows: &[FioRow], row: &FioRow, j: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.path == ReadPath::Tmpfs && r.workload == row.workload)
        .and_then(|r| r.runs.get(j)?.ok().map(|x| x.iops))
}

/// The fio table.
pub fn fio_table(rows: &[FioRow]) -> Table {
    let mut t = Table::new(&[
        Column::text("label", 34),
        Column::text("workload", 11),
        Column::num("iops_1j", 10),
        Column::num("iops_2j", 10),
        Column::num("MB/s_1j", 9),
        Column::num("MB/s_2j", 9),
        Column::num("vs_tmpfs_1j", 11),
        Column::num("vs_tmpfs_2j", 11),
        Column::num("2j/1j", 6),
        Column::text("notes", 0).gap(2),
    ]);
    for r in rows {
        let iops = |j: usize| r.runs.get(j).and_then(|m| m.ok()).map(|x| x.iops);
        let mbs = |j: usize| r.runs.get(j).and_then(|m| m.ok()).map(|x| x.mb_s());
        let vs = |j: usize| iops(j).zip(tmpfs_iops(rows, r, j)).and_then(|(a, b)| ratio(a, b));
        let why = r.runs.iter().find_map(|m| m.why()).map(|w| {
            let all_same = r.runs.iter().all(|m| m.why().as_deref() == Some(w.as_str()));
            if all_same || r.runs.len() == 1 {
                w
            } else {
                format!("one run {w}")
            }
        });
        t.push(vec![
            Cell::text(r.path.label()),
            Cell::text(r.workload.name),
            Cell::num(iops(0), 0),
            Cell::num(iops(1), 0),
            Cell::num(mbs(0), 1),
            Cell::num(mbs(1), 1),
            Cell::num(vs(0), 3),
            Cell::num(vs(1), 3),
            Cell::num(iops(1).zip(iops(0)).and_then(|(a, b)| ratio(a, b)), 2),
            Cell::text(with_why(why, &r.notes)),
        ]);
    }
    t
}

/// The metadata table.
pub fn meta_table(res: &Results) -> Table {
    let mut t = Table::new(&[
        Column::text("label", 38),
        Column::num("entries", 8),
        Column::num("ls_R_s", 8),
        Column::num("stat_walk_s", 11),
        Column::num("lstat/s", 9),
        Column::num("ls_vs_tmpfs", 11),
        Column::num("stat_vs_tmpfs", 13),
        Column::text("notes", 0).gap(2),
    ]);
    let base = res.meta.first().filter(|r| r.label == super::META_LABELS[0]);
    let base_ls = base.and_then(|b| b.ls.ok().copied());
    let base_stat = base.and_then(|b| b.stat.ok().map(|s| s.0));
    for r in &res.meta {
        let ls = r.ls.ok().copied();
        let stat = r.stat.ok().copied();
        let why = r.ls.why().or_else(|| r.stat.why());
        t.push(vec![
            Cell::text(&r.label),
            stat.map_or(Cell::Missing, |s| Cell::Int(s.1)),
            Cell::num(ls, 3),
            Cell::num(stat.map(|s| s.0), 3),
            Cell::num(stat.and_then(|s| ratio(s.1 as f64, s.0)), 0),
            Cell::num(ls.zip(base_ls).and_then(|(a, b)| ratio(a, b)), 2),
            Cell::num(stat.map(|s| s.0).zip(base_stat).and_then(|(a, b)| ratio(a, b)), 2),
            Cell::text(with_why(why, &r.notes)),
        ]);
    }
    t
}

/// The first-byte table.
pub fn first_byte_table(rows: &[FirstByteRow]) -> Table {
    let mut t = Table::new(&[
        Column::text("label", 39),
        Column::text("read", 34),
        Column::num("total_ms", 9),
        Column::num("open_ms", 8),
        Column::num("read_ms", 8),
        Column::num("min_ms", 8),
        Column::num("max_ms", 8),
        Column::num("rounds", 6),
        Column::text("notes", 0).gap(2),
    ]);
    for r in rows {
        let med = r.median();
        let totals: Vec<f64> = r
            .rounds
            .ok()
            .map(|v| v.iter().map(|(o, rd)| o + rd).collect())
            .unwrap_or_default();
        let lo = totals.iter().copied().reduce(f64::min);
        let hi = totals.iter().copied().reduce(f64::max);
        t.push(vec![
            Cell::text(&r.label),
            Cell::text(&r.read),
            Cell::num(med.map(|(o, rd)| o + rd), 3),
            Cell::num(med.map(|m| m.0), 3),
            Cell::num(med.map(|m| m.1), 3),
            Cell::num(lo, 3),
            Cell::num(hi, 3),
            r.rounds.ok().map_or(Cell::Missing, |v| Cell::Int(v.len() as u64)),
            Cell::text(with_why(r.rounds.why(), &r.notes)),
        ]);
    }
    t
}

/// The tree-read table.
pub fn tree_table(res: &Results) -> Table {
    let mut t = Table::new(&[
        Column::text("label", 40),
        Column::num("files", 7),
        Column::num("MB", 8),
        Column::num("time_s", 7),
        Column::num("MB/s", 7),
        Column::num("CPU_s", 6),
        Column::num("fetched_MB", 10),
        Column::num("wire_MB", 8),
        Column::num("vs_send", 7),
        Column::text("notes", 0).gap(2),
    ]);
    let send = res
        .tree
        .iter()
        .find(|r| r.label == super::TREE_LABELS[1])
        .and_then(|r| r.run.ok().map(|x| x.secs));
    for r in &res.tree {
        let x = r.run.ok();
        t.push(vec![
            Cell::text(&r.label),
            x.map_or(Cell::Missing, |x| Cell::Int(x.files)),
            Cell::num(x.map(|x| x.bytes as f64 / 1e6), 1),
            Cell::num(x.map(|x| x.secs), 3),
            Cell::num(x.and_then(|x| ratio(x.bytes as f64 / 1e6, x.secs)), 1),
            Cell::num(x.map(|x| x.cpu), 2),
            Cell::num(x.and_then(|x| x.fetched).map(|b| b as f64 / 1e6), 1),
            Cell::num(x.and_then(|x| x.wire).map(|b| b as f64 / 1e6), 1),
            Cell::num(x.map(|x| x.secs).zip(send).and_then(|(a, b)| ratio(a, b)), 3),
            Cell::text(with_why(r.run.why(), &r.notes)),
        ]);
    }
    t
}

/// The targets of the mount, from rows of this run.
pub fn targets(res: &Results) -> Vec<Target> {
    let mut out = Vec::new();
    let fio = |p: ReadPath, w: usize| res.fio.iter().find(|r| r.path == p && r.workload == WORKLOADS[w]);
    let iops = |r: &FioRow, j: usize| r.runs.get(j).and_then(|m| m.ok()).map(|x| x.iops);
    if let Some(warm) = fio(ReadPath::Warm, 0) {
        let base = fio(ReadPath::Tmpfs, 0).and_then(|t| iops(t, 0));
        out.push(Target {
            fs: None,
            what: "fio randread 4k, numjobs 1: mount with the page cache warm ÷ tmpfs (the kernel answers both; see the direct=1 row for the daemon)".into(),
            value: iops(warm, 0).zip(base).and_then(|(a, b)| ratio(a, b)),
            limit: 0.6,
            at_least: true,
            unit: "×",
        });
    }
    if let Some(d) = fio(ReadPath::Direct, 0) {
        out.push(Target {
            fs: None,
            what: format!(
                "fio randread 4k, direct=1 (daemon path): numjobs 2 ÷ numjobs 1 (on {} cores)",
                crate::sysinfo::cores()
            ),
            value: iops(d, 1).zip(iops(d, 0)).and_then(|(a, b)| ratio(a, b)),
            limit: 1.6,
            at_least: true,
            unit: "×",
        });
    }
    if let Some(d) = fio(ReadPath::DirectClient, 0) {
        let base = fio(ReadPath::TmpfsLoop, 0).and_then(|t| iops(t, 0));
        out.push(Target {
            fs: None,
            what: "random 4 KiB reads, one thread: direct client (shared memory, no system call) ÷ pread of the file on tmpfs, same loop".into(),
            value: iops(d, 0).zip(base).and_then(|(a, b)| ratio(a, b)),
            limit: 1.0,
            at_least: true,
            unit: "×",
        });
    }
    if let Some(d) = fio(ReadPath::Passthrough, 0) {
        let base = fio(ReadPath::Direct, 0).and_then(|t| iops(t, 0));
        out.push(Target {
            fs: None,
            what: "fio randread 4k direct=1, numjobs 1: passthrough ÷ the daemon path (what passthrough gives; no target set)".into(),
            value: iops(d, 0).zip(base).and_then(|(a, b)| ratio(a, b)),
            limit: 1.0,
            at_least: true,
            unit: "×",
        });
    }
    for r in res.first_byte.iter().filter(|r| r.target) {
        out.push(Target {
            fs: None,
            what: format!("first byte ({}), {}: median open + read", r.read, r.label),
            value: r.median().map(|(o, rd)| o + rd),
            limit: 50.0,
            at_least: false,
            unit: "ms",
        });
    }
    let tree = |i: usize| {
        res.tree
            .iter()
            .find(|r| r.label == super::TREE_LABELS[i])
            .and_then(|r| r.run.ok().copied())
    };
    if let Some(m) = res.tree.iter().find(|r| r.label == super::TREE_LABELS[3]) {
        out.push(Target {
            fs: None,
            what: "tar of the tree through a cold mount ÷ pfs send of the tree into an empty directory (elapsed)".into(),
            value: m.run.ok().copied().zip(tree(1)).and_then(|(m, s)| ratio(m.secs, s.secs)),
            limit: 1.3,
            at_least: false,
            unit: "×",
        });
    }
    if let Some(m) = res.tree.iter().find(|r| r.label == super::TREE_LABELS[2]) {
        let m = m.run.ok().copied();
        let send = tree(1);
        out.push(Target {
            fs: None,
            what: "whole tree read through a cold mount ÷ pfs send of the tree into an empty directory (elapsed)".into(),
            value: m.zip(send).and_then(|(m, s)| ratio(m.secs, s.secs)),
            limit: 1.3,
            at_least: false,
            unit: "×",
        });
        out.push(Target {
            fs: None,
            what: "bytes fetched by the cold tree read ÷ the tree's unique chunk bytes (pfs send's literal bytes into an empty directory)".into(),
            value: m
                .and_then(|m| m.fetched)
                .zip(send.and_then(|s| s.fetched))
                .and_then(|(a, b)| ratio(a as f64, b as f64)),
            limit: 1.02,
            at_least: false,
            unit: "×",
        });
    }
    out
}

/// What the targets block is and where its figures come from (said once,
/// above the block, in the text and Markdown reports).
const TARGETS_SAID: &str = "Targets (ratios of the rows above, same run; each figure is a target the design sets for the mount, listed in docs/benchmarks.md)";

/// The tables with rows: (JSON key, CSV file, title, table).
fn tables(res: &Results) -> Vec<(&'static str, &'static str, &'static str, Table)> {
    let mut v = Vec::new();
    if !res.fio.is_empty() {
        v.push(("fio", "mount-fio.csv", "fio, one file", fio_table(&res.fio)));
    }
    if !res.meta.is_empty() {
        v.push(("metadata", "mount-metadata.csv", "Tree metadata", meta_table(res)));
    }
    if !res.first_byte.is_empty() {
        v.push((
            "first_byte",
            "mount-first-byte.csv",
            "First byte of a remote file",
            first_byte_table(&res.first_byte),
        ));
    }
    if !res.tree.is_empty() {
        v.push((
            "tree_read",
            "mount-tree-read.csv",
            "Whole-tree read",
            tree_table(res),
        ));
    }
    v
}

fn header_lines(h: &MountHeader) -> Vec<String> {
    let s = &h.study;
    vec![
        format!("fio: {}", s.fio),
        format!("FUSE: {}", s.fuse),
        format!("mounts: {}", s.mounts),
        format!(
            "fio file {} bytes; timed jobs {} s after {} s ramp; first-byte file {} bytes, {} round(s); seed {}",
            s.file_bytes, s.runtime_s, s.ramp_s, s.first_byte_bytes, s.rounds, s.seed
        ),
        format!("tree: {}", s.tree),
        s.placement.clone(),
        s.method.clone(),
    ]
}

/// The study's report: one section per table with rows (every key present
/// in JSON, empty when its section did not run), the targets, the units.
pub fn report(h: &MountHeader, res: &Results) -> Report {
    let mut r = Report::new("pfs bench mount", h);
    r.lines = header_lines(h);
    let ran = tables(res);
    for key in ["fio", "metadata", "first_byte", "tree_read"] {
        if !ran.iter().any(|(k, ..)| *k == key) {
            r.extra.insert(key.into(), serde_json::json!([]));
        }
    }
    for (key, _, title, t) in ran {
        r = r.section(Section::one(key, t).titled(title));
    }
    let tg = targets(res);
    if tg.is_empty() {
        r.extra.insert("targets".into(), serde_json::json!([]));
    } else {
        r = r.section(Section::new("targets", Target::view(&tg), Target::data(&tg)).titled(TARGETS_SAID));
    }
    if let Some(last) = r.sections.last_mut() {
        last.note = Some(h.study.units.clone());
    }
    r
}

/// Writes every file into `dir`.
pub fn write(dir: &Path, res: &Results, report: &Report) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    for (key, name, ..) in tables(res) {
        std::fs::write(dir.join(name), report.csv(key).unwrap_or_default())?;
        files.push(name.to_string());
    }
    std::fs::write(
        dir.join("mount.json"),
        serde_json::to_string_pretty(&report.json())?,
    )?;
    std::fs::write(dir.join("mount.md"), report.markdown())?;
    files.extend(["mount.json".into(), "mount.md".into()]);
    match plot_fio(dir, res) {
        Ok(f) => files.push(f.into()),
        Err(e) => eprintln!("pfs bench mount: no chart: {e:#}"),
    }
    eprintln!("pfs bench mount: wrote {} to {}", files.join(", "), dir.display());
    Ok(())
}

/// MB/s of every measured fio path, per workload and numjobs, on one chart.
fn plot_fio(dir: &Path, res: &Results) -> anyhow::Result<&'static str> {
    const FILE: &str = "mount.png";
    let mut stats = Vec::new();
    for w in WORKLOADS {
        for n in NUMJOBS {
            stats.push(format!("{} ×{n}", w.name));
        }
    }
    let rows: Vec<DotRow> = ReadPath::ALL
        .iter()
        .map(|&p| DotRow {
            label: p.label().into(),
            values: WORKLOADS
                .iter()
                .flat_map(|&w| {
                    let row = res.fio.iter().find(|r| r.path == p && r.workload == w);
                    (0..NUMJOBS.len()).map(move |j| row.and_then(|r| r.runs.get(j)?.ok().map(|x| x.mb_s())))
                })
                .collect(),
        })
        .collect();
    let names: Vec<&str> = stats.iter().map(String::as_str).collect();
    plot::dots(
        &rows,
        &names,
        "fio through pfs mount vs tmpfs (MB/s; ×N = numjobs)",
        "MB/s (decimal)",
        "MB/s",
        &dir.join(FILE),
    )?;
    Ok(FILE)
}

#[cfg(test)]
mod tests {
    use super::super::{FioResult, Measured, TreeRow, TreeRun, TREE_LABELS};
    use super::*;
    use crate::report::Verdict;

    fn run(iops: f64) -> Measured<FioResult> {
        Measured::Ok(FioResult {
            iops,
            bw_bytes: iops * 4096.0,
            io_bytes: 4096,
            runtime_ms: 1000,
        })
    }

    #[test]
    fn ratios_are_against_tmpfs_of_the_same_workload_and_numjobs() {
        let rows = vec![
            FioRow {
                path: ReadPath::Tmpfs,
                workload: WORKLOADS[0],
                runs: vec![run(100.0), run(150.0)],
                notes: String::new(),
            },
            FioRow {
                path: ReadPath::Direct,
                workload: WORKLOADS[0],
                runs: vec![run(10.0), run(30.0)],
                notes: "n".into(),
            },
            FioRow {
                path: ReadPath::Passthrough,
                workload: WORKLOADS[0],
                runs: vec![Measured::skipped("not built: x"); 2],
                notes: String::new(),
            },
        ];
        let t = fio_table(&rows);
        let j = t.json();
        assert_eq!(j[1]["vs_tmpfs_1j"], 0.1);
        assert_eq!(j[1]["vs_tmpfs_2j"], 0.2);
        assert_eq!(j[1]["2j/1j"], 3.0);
        assert!(j[2]["iops_1j"].is_null());
        assert_eq!(j[2]["notes"], "skipped: not built: x");
        assert!(t.text().contains("—"));
    }

    #[test]
    fn a_row_that_did_not_run_has_no_figure_in_any_format() {
        let mut res = Results::default();
        res.fio.push(FioRow {
            path: ReadPath::Tmpfs,
            workload: WORKLOADS[0],
            runs: vec![run(100.0), run(150.0)],
            notes: String::new(),
        });
        res.fio.push(FioRow {
            path: ReadPath::Cold,
            workload: WORKLOADS[0],
            runs: vec![Measured::skipped("needs root"); 2],
            notes: String::new(),
        });
        res.tree.push(TreeRow {
            label: TREE_LABELS[2].into(),
            run: Measured::failed_because("boom"),
            notes: String::new(),
        });
        let h = MountHeader {
            machine: crate::report::Machine {
                tool: "pfs 0.1.0".into(),
                git_revision: "abc1234".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cores: 2,
            },
            study: super::super::MountSettings {
                fio: "fio-3.33".into(),
                fuse: "enable_uring".into(),
                mounts: "m".into(),
                file_bytes: 1,
                runtime_s: 1.0,
                ramp_s: 0.0,
                fuse_threads: 1,
                first_byte_bytes: 1,
                rounds: 1,
                tree: "t".into(),
                seed: "0x5eed".into(),
                placement: "p".into(),
                method: "m".into(),
                units: "MB = 10^6".into(),
            },
        };
        let r = report(&h, &res);
        crate::report::check_not_run_row(&r, ReadPath::Cold.label());
        crate::report::check_not_run_row(&r, TREE_LABELS[2]);
        let j = r.json();
        assert_eq!(j["metadata"], serde_json::json!([]));
        assert!(j["targets"].as_array().is_some_and(|t| !t.is_empty()), "{j}");
    }

    #[test]
    fn targets_say_not_run_without_their_rows() {
        let mut res = Results::default();
        res.tree.push(TreeRow {
            label: TREE_LABELS[2].into(),
            run: Measured::Ok(TreeRun {
                secs: 2.0,
                fetched: Some(101),
                ..TreeRun::default()
            }),
            notes: String::new(),
        });
        let t = targets(&res);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|t| t.verdict() == Verdict::NotRun));
        res.tree.push(TreeRow {
            label: TREE_LABELS[1].into(),
            run: Measured::Ok(TreeRun {
                secs: 1.0,
                fetched: Some(100),
                ..TreeRun::default()
            }),
            notes: String::new(),
        });
        let t = targets(&res);
        assert_eq!(t[0].value, Some(2.0));
        assert_eq!(t[0].verdict(), Verdict::Missed);
        assert_eq!(t[1].verdict(), Verdict::Met);
    }
}
