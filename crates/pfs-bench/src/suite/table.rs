//! The suite's rows as [`Table`]s: the full record (CSV and JSON, also used
//! by the files study) and the terminal/Markdown view with its header block.

use super::row::{Row, SuiteHeader};
use crate::report::{Cell, Column, Report, Section, Table};

/// Every field of a row, in CSV order; also the JSON keys.
const DATA: [Column; 15] = [
    Column::text("label", 0),
    Column::text("purpose", 0),
    Column::num("effective_mb", 0),
    Column::num("wire_mb", 0),
    Column::num("wire_ratio", 0),
    Column::num("elapsed_s", 0),
    Column::num("effective_mb_s", 0),
    Column::num("user_s", 0),
    Column::num("sys_s", 0),
    Column::num("cpu_total_s", 0),
    Column::num("mb_per_cpu_s", 0),
    Column::text("integrity", 0),
    Column::num("pthreads", 0),
    Column::text("transport", 0),
    Column::text("notes", 0),
];

/// The full record of every row (a row that did not run has no figures:
/// empty in CSV, `null` in JSON).
pub fn data(rows: &[Row]) -> Table {
    let mut t = Table::new(&DATA);
    for r in rows {
        t.push(data_cells(r));
    }
    t
}

/// [`DATA`] after the loss rate of the emulated link the row ran over.
const LINK_DATA: [Column; 16] = {
    let mut c = [Column::num("link_loss_pct", 0); 16];
    let mut i = 0;
    while i < DATA.len() {
        c[i + 1] = DATA[i];
        i += 1;
    }
    c
};

/// The full record of the rows of every loss step of an emulated link.
pub fn link_data(steps: &[(f64, &[Row])]) -> Table {
    let mut t = Table::new(&LINK_DATA);
    for (loss, rows) in steps {
        for r in *rows {
            let mut cells = vec![Cell::Num(*loss, 2)];
            cells.extend(data_cells(r));
            t.push(cells);
        }
    }
    t
}

fn data_cells(r: &Row) -> Vec<Cell> {
    vec![
        Cell::text(&r.label),
        Cell::text(&r.purpose),
        measured(r, r.effective_mb, 3),
        measured(r, r.wire_mb, 6),
        measured(r, r.wire_ratio, 8),
        measured(r, r.elapsed_s, 4),
        measured(r, r.effective_mb_s, 1),
        measured(r, r.user_s, 4),
        measured(r, r.sys_s, 4),
        measured(r, r.cpu_total_s, 4),
        measured(r, r.mb_per_cpu_s, 1),
        Cell::text(&r.integrity),
        if r.ran() {
            Cell::Int(u64::from(r.pthreads))
        } else {
            Cell::Missing
        },
        Cell::text(&r.transport),
        Cell::text(r.notes_shown()),
    ]
}

/// A measured number of `r`, or [`Cell::Missing`] when the row did not run.
pub fn measured(r: &Row, v: f64, decimals: usize) -> Cell {
    if r.ran() {
        Cell::Num(v, decimals)
    } else {
        Cell::Missing
    }
}

/// Columns of the terminal and Markdown tables (CSV and JSON carry every field).
const VIEW: [Column; 13] = [
    Column::text("label", 40),
    Column::text("integ", 5).right(),
    Column::num("thr", 3),
    Column::num("eff_MB", 10),
    Column::num("wire_MB", 10),
    Column::num("wire/eff", 10),
    Column::num("time_s", 7),
    Column::num("eff_MB/s", 10),
    Column::num("user_s", 7),
    Column::num("sys_s", 7),
    Column::num("MB/CPU-s", 9),
    Column::text("check", 8),
    Column::text("notes", 0),
];

/// The terminal and Markdown view of the suite.
pub fn view(rows: &[Row]) -> Table {
    let mut t = Table::new(&VIEW);
    for r in rows {
        t.push(vec![
            Cell::text(&r.label),
            Cell::text(r.integrity_alg()),
            if r.ran() {
                Cell::Int(u64::from(r.pthreads))
            } else {
                Cell::Missing
            },
            measured(r, r.effective_mb, 1),
            measured(r, r.wire_mb, 3),
            measured(r, r.wire_ratio, 6),
            measured(r, r.elapsed_s, 3),
            measured(r, r.effective_mb_s, 1),
            measured(r, r.user_s, 3),
            measured(r, r.sys_s, 3),
            measured(r, r.mb_per_cpu_s, 1),
            Cell::text(&r.integrity),
            Cell::text(r.notes_shown()),
        ]);
    }
    t
}

/// Said under the suite's table: units and whose numbers these are.
pub const UNITS: &str = "MB = 10^6 bytes. Receiver-side numbers (PFS: from the receiver's COMPLETE report; iperf3: its server side).";

/// The suite's report without its tables: the header lines (blob, setup,
/// and the emulated link when the rows ran over one).
pub fn report(header: &SuiteHeader) -> Report {
    let st = &header.study;
    let mut r = Report::new("pfs bench", header);
    r.lines = vec![
        format!(
            "THP {} · blob: sender {} · receiver {} · {} bytes · {} · {}",
            st.thp_mode, st.sender_blob, st.receiver_blob, st.blob_bytes, st.path, st.pinning
        ),
        format!("receiver blob setup: {}", st.receiver_setup),
    ];
    if let Some(l) = &st.link {
        r.lines.extend([
            format!("link: {}", l.spec),
            format!("link parts: {}", l.parts),
            format!("link ceiling: {}", l.ceiling),
            format!("link delay: {}", l.delay),
            format!("TCP: {}", l.tcp),
        ]);
    }
    r
}

/// The suite's report: its rows, the units below them.
pub fn rows_report(header: &SuiteHeader, rows: &[Row]) -> Report {
    report(header).section(Section::new("rows", view(rows), data(rows)).noted(UNITS))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn skipped_rows_show_dashes_not_zeros() {
        let ran = Row::measured(
            "Conventional (iperf3)",
            "Transfer",
            2_000_000,
            2_100_000,
            1.0,
            0.1,
            0.2,
        );
        let skipped = Row::skipped("Conventional (scp)", "Transfer", "scp not installed".into());
        let text = view(&[ran, skipped.clone()]).text();
        let line = text
            .lines()
            .find(|l| l.starts_with("Conventional (scp)"))
            .unwrap();
        assert!(line.contains('—'), "{line}");
        assert!(!line.contains("0.0"), "{line}");
        let md = view(std::slice::from_ref(&skipped)).markdown();
        assert!(md.contains("| — |"), "{md}");
        // CSV and JSON: no figure either (empty, null), never a zero.
        let d = data(&[skipped]);
        let line = d.csv().lines().nth(1).unwrap().to_string();
        assert!(!line.contains(",0.000,"), "{line}");
        assert!(line.starts_with("Conventional (scp),Transfer,,,"), "{line}");
        assert!(line.ends_with(",skipped: scp not installed"), "{line}");
        assert!(d.json()[0]["effective_mb"].is_null());
        assert_eq!(d.json()[0]["notes"], "skipped: scp not installed");
    }

    /// A suite header for tests.
    pub(crate) fn test_header(link: Option<crate::suite::link::LinkHeader>) -> SuiteHeader {
        SuiteHeader {
            machine: crate::report::Machine {
                tool: "pfs 0.1.0".into(),
                git_revision: "abc1234".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cores: 2,
            },
            study: crate::suite::row::SuiteSettings {
                thp_mode: "madvise".into(),
                sender_blob: "THP".into(),
                receiver_blob: "THP".into(),
                blob_bytes: 1 << 24,
                sender_setup: "map".into(),
                receiver_setup: "map".into(),
                units: "MB = 10^6".into(),
                path: "loopback".into(),
                pinning: "unpinned".into(),
                link,
            },
        }
    }

    #[test]
    fn a_row_that_did_not_run_has_no_figure_in_any_format() {
        let ran = Row::measured(
            "Conventional (iperf3)",
            "Transfer",
            2_000_000,
            2_100_000,
            1.0,
            0.1,
            0.2,
        );
        let skipped = Row::skipped("Conventional (scp)", "Transfer", "scp not installed".into());
        let failed = Row::failed(
            "Conventional (rsync)",
            "Transfer",
            &anyhow::anyhow!("daemon will not start"),
        );
        let r = rows_report(&test_header(None), &[ran, skipped, failed]);
        crate::report::check_not_run_row(&r, "Conventional (scp)");
        crate::report::check_not_run_row(&r, "Conventional (rsync)");
        assert_eq!(r.json()["rows"][2]["notes"], "failed: daemon will not start");
        assert!(r.text().contains("receiver blob setup: map"));
    }

    #[test]
    fn data_columns_are_the_csv_header() {
        let csv = data(&[]).csv();
        assert_eq!(
            csv,
            "label,purpose,effective_mb,wire_mb,wire_ratio,elapsed_s,effective_mb_s,user_s,sys_s,cpu_total_s,mb_per_cpu_s,integrity,pthreads,transport,notes\n"
        );
    }
}
