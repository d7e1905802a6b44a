//! The report of every study: one [`Header`] (machine and build facts, then the
//! study's own settings) and [`Table`]s rendered as a terminal table, CSV,
//! Markdown and JSON, plus the one [`csv_escape`]. A study runs its plan into
//! rows, puts them into a [`Report`] (its header lines, one [`Section`] per
//! table, its notes) and renders that: it does not format grids or headers
//! itself. What rows share ([`Status`], [`Target`], [`ratio`], [`Method`]) is
//! in [`study`].
//!
//! A cell that has no value — a row that was skipped or failed — is
//! [`Cell::Missing`]: `—` in the terminal and Markdown tables (never a zero
//! that reads like a measurement), empty in CSV, `null` in JSON.

use std::fmt::Write as _;

use serde::Serialize;

pub mod study;

pub use study::{add_note, ratio, Bound, Method, Reason, Skip, Status, Target, Verdict};

use crate::{sysinfo, Binary};

/// What every header starts with: the build and the machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// `pfs <version>`.
    pub tool: String,
    /// Git revision of the build.
    pub git_revision: String,
    /// Kernel release.
    pub kernel: String,
    /// CPU model.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
}

impl Machine {
    /// Reads the machine facts; names the build after `pfs`.
    pub fn probe(pfs: &Binary) -> Self {
        Self {
            tool: format!("pfs {}", pfs.version),
            git_revision: pfs.git_revision.clone(),
            kernel: sysinfo::kernel(),
            cpu_model: sysinfo::cpu_model(),
            cores: sysinfo::cores(),
        }
    }
}

/// The header of a study's report: [`Machine`] facts, then the study's settings
/// `S`, serialized as one flat JSON object (keys as they always were).
#[derive(Debug, Clone, Serialize)]
pub struct Header<S> {
    /// Build and machine.
    #[serde(flatten)]
    pub machine: Machine,
    /// The study's own settings and context.
    #[serde(flatten)]
    pub study: S,
}

impl<S> Header<S> {
    /// A header for this machine and build.
    pub fn new(pfs: &Binary, study: S) -> Self {
        Self {
            machine: Machine::probe(pfs),
            study,
        }
    }
}

/// Quotes a CSV field when it holds a comma, a quote or a newline (RFC 4180).
pub fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Where a column's cells sit in the terminal table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right.
    Left,
    /// Padded on the left.
    Right,
}

/// One column: its title (also the CSV header and the JSON key), its width
/// in the terminal table (trailing blanks are trimmed), the spaces
/// before it there, alignment, and whether it holds numbers (right-aligned
/// in Markdown).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// Title, CSV header and JSON key.
    pub title: &'static str,
    /// Terminal width.
    pub width: usize,
    /// Spaces before it in the terminal table (none before the first column).
    pub gap: usize,
    /// Terminal alignment.
    pub align: Align,
    /// Numbers (Markdown `---:`).
    pub numeric: bool,
}

impl Column {
    /// A left-aligned text column.
    pub const fn text(title: &'static str, width: usize) -> Self {
        Self {
            title,
            width,
            gap: 1,
            align: Align::Left,
            numeric: false,
        }
    }

    /// A right-aligned number column.
    pub const fn num(title: &'static str, width: usize) -> Self {
        Self {
            title,
            width,
            gap: 1,
            align: Align::Right,
            numeric: true,
        }
    }

    /// The same column with `n` spaces before it in the terminal.
    pub const fn gap(mut self, n: usize) -> Self {
        self.gap = n;
        self
    }

    /// The same column, right-aligned in the terminal.
    pub const fn right(mut self) -> Self {
        self.align = Align::Right;
        self
    }
}

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text.
    Text(String),
    /// A count.
    Int(u64),
    /// A measurement shown with `decimals` digits (JSON keeps every digit).
    Num(f64, usize),
    /// A number shown with every digit, as JSON writes it.
    Exact(serde_json::Number),
    /// Yes or no (`true`/`false`).
    Bool(bool),
    /// No value: the row did not run.
    Missing,
}

impl Cell {
    /// A text cell.
    pub fn text(s: impl Into<String>) -> Self {
        Self::Text(s.into())
    }

    /// A figure to `decimals` digits, or `—` for a row that has none.
    pub fn num(v: Option<f64>, decimals: usize) -> Self {
        v.map_or(Self::Missing, |v| Self::Num(v, decimals))
    }

    fn shown(&self) -> String {
        match self {
            Self::Text(s) => s.clone(),
            Self::Int(v) => v.to_string(),
            Self::Num(v, d) => format!("{v:.d$}"),
            Self::Exact(n) => n.to_string(),
            Self::Bool(b) => b.to_string(),
            Self::Missing => "—".into(),
        }
    }

    fn csv(&self) -> String {
        match self {
            Self::Missing => String::new(),
            Self::Text(s) => csv_escape(s),
            other => other.shown(),
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Self::Text(s) => s.clone().into(),
            Self::Int(v) => (*v).into(),
            Self::Num(v, _) => (*v).into(),
            Self::Exact(n) => n.clone().into(),
            Self::Bool(b) => (*b).into(),
            Self::Missing => serde_json::Value::Null,
        }
    }
}

impl From<&serde_json::Value> for Cell {
    /// A field of a serialized row: `null` is missing, numbers keep every digit.
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Self::Missing,
            serde_json::Value::String(s) => Self::Text(s.clone()),
            serde_json::Value::Number(n) => Self::Exact(n.clone()),
            serde_json::Value::Bool(b) => Self::Bool(*b),
            other => Self::Text(other.to_string()),
        }
    }
}

/// Rows of cells under named columns.
#[derive(Debug, Clone)]
pub struct Table {
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows, one cell per column.
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[Column]) -> Self {
        Self {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (one cell per column).
    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len(), "one cell per column");
        self.rows.push(row);
    }

    fn text_line(&self, cells: &[String]) -> String {
        let mut l = String::new();
        for (k, (c, col)) in cells.iter().zip(&self.columns).enumerate() {
            let w = col.width;
            if k > 0 {
                l.push_str(&" ".repeat(col.gap));
            }
            match col.align {
                Align::Left => {
                    let _ = write!(l, "{c:<w$}");
                }
                Align::Right => {
                    let _ = write!(l, "{c:>w$}");
                }
            }
        }
        l.trim_end().to_string() + "\n"
    }

    /// The terminal table: a title line, then one padded line per row.
    pub fn text(&self) -> String {
        let mut s = self.text_head();
        for r in &self.rows {
            s.push_str(&self.text_row(r));
        }
        s
    }

    /// The title line of the terminal table.
    pub fn text_head(&self) -> String {
        let titles: Vec<String> = self.columns.iter().map(|c| c.title.to_string()).collect();
        self.text_line(&titles)
    }

    /// One row of the terminal table (for studies that print rows as they run).
    pub fn text_row(&self, row: &[Cell]) -> String {
        let cells: Vec<String> = row.iter().map(Cell::shown).collect();
        self.text_line(&cells)
    }

    /// A Markdown table (`|` inside a cell becomes `/`).
    pub fn markdown(&self) -> String {
        let titles: Vec<&str> = self.columns.iter().map(|c| c.title).collect();
        let mut s = format!("| {} |\n|", titles.join(" | "));
        for c in &self.columns {
            s.push_str(if c.numeric { "---:|" } else { "---|" });
        }
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| c.shown().replace('|', "/")).collect();
            let _ = writeln!(s, "| {} |", cells.join(" | "));
        }
        s
    }

    /// CSV: a header line of titles, one line per row; missing values are empty.
    pub fn csv(&self) -> String {
        let titles: Vec<&str> = self.columns.iter().map(|c| c.title).collect();
        let mut s = titles.join(",");
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(Cell::csv).collect();
            s.push_str(&cells.join(","));
            s.push('\n');
        }
        s
    }

    /// JSON: an array with one object per row, keyed by column title.
    pub fn json(&self) -> serde_json::Value {
        self.rows
            .iter()
            .map(|r| {
                let obj: serde_json::Map<String, serde_json::Value> = self
                    .columns
                    .iter()
                    .zip(r)
                    .map(|(c, v)| (c.title.to_string(), v.json()))
                    .collect();
                serde_json::Value::Object(obj)
            })
            .collect()
    }
}

/// One table of a report: what the terminal and Markdown show ([`Section::view`])
/// and the full record ([`Section::data`], for CSV and JSON).
#[derive(Debug, Clone)]
pub struct Section {
    /// The key of the rows in the JSON document (`rows`, `fio`, `targets` …);
    /// `None`: shown only (the document carries these rows in another shape).
    pub key: Option<&'static str>,
    /// Said above the table in the terminal (`title:`) and Markdown (bold); `None`: nothing.
    pub title: Option<String>,
    /// Columns for reading.
    pub view: Table,
    /// Every field, for machines.
    pub data: Table,
    /// Said below the table in the terminal and Markdown (units, definitions).
    pub note: Option<String>,
}

impl Section {
    /// A section whose table is both the view and the record.
    pub fn one(key: &'static str, table: Table) -> Self {
        Self {
            key: Some(key),
            title: None,
            view: table.clone(),
            data: table,
            note: None,
        }
    }

    /// A section with a view and a separate full record.
    pub fn new(key: &'static str, view: Table, data: Table) -> Self {
        Self {
            key: Some(key),
            title: None,
            view,
            data,
            note: None,
        }
    }

    /// A section shown in the terminal and Markdown only.
    pub fn shown(view: Table) -> Self {
        Self {
            key: None,
            title: None,
            data: Table::new(&view.columns),
            view,
            note: None,
        }
    }

    /// The same section, with this title above its table.
    pub fn titled(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The same section, with this note below its table.
    pub fn noted(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// A study's report: its header (machine facts, the study's settings as lines
/// for reading and as JSON fields for machines), its sections and the
/// fields its JSON document carries besides them. The one path every study
/// renders through: [`Report::text`], [`Report::markdown`], [`Section`]
/// CSV and [`Report::json`] (PNG charts are drawn from the same rows by
/// [`crate::plot`]).
#[derive(Debug, Clone)]
pub struct Report {
    /// `pfs bench files` …: how the first line names the study.
    pub title: String,
    /// Build and machine (`None`: a study that reports none, `pfs bench exec`).
    pub machine: Option<Machine>,
    /// The header as JSON (machine facts and the study's settings; `null`: none).
    pub header: serde_json::Value,
    /// The study's settings, one line each, after the machine line.
    pub lines: Vec<String>,
    /// The tables, in order.
    pub sections: Vec<Section>,
    /// Fields of the JSON document besides `header` and the sections.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Report {
    /// A report with `header`'s host facts and settings, no sections yet.
    pub fn new<S: Serialize>(title: impl Into<String>, header: &Header<S>) -> Self {
        Self {
            title: title.into(),
            machine: Some(header.machine.clone()),
            header: serde_json::to_value(header).unwrap_or_default(),
            lines: Vec::new(),
            sections: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }

    /// A report without machine facts or header: `title` is its whole first line.
    pub fn plain(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            machine: None,
            header: serde_json::Value::Null,
            lines: Vec::new(),
            sections: Vec::new(),
            extra: serde_json::Map::new(),
        }
    }

    /// Adds a section.
    pub fn section(mut self, s: Section) -> Self {
        self.sections.push(s);
        self
    }

    /// Adds a field to the JSON document.
    pub fn field(mut self, key: &str, v: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_string(), v.into());
        self
    }

    /// The CSV of the section with this JSON key.
    pub fn csv(&self, key: &str) -> Option<String> {
        self.get(key).map(|s| s.data.csv())
    }

    /// The section with this JSON key.
    pub fn get(&self, key: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.key == Some(key))
    }

    /// The header block of the terminal report, with a blank line after it
    /// (studies that print rows as they run print this first).
    pub fn text_header(&self) -> String {
        let mut s = match &self.machine {
            Some(h) => format!(
                "{} — {} · kernel {} · {} · {} cores\n",
                self.title, h.git_revision, h.kernel, h.cpu_model, h.cores
            ),
            None => format!("{}\n", self.title),
        };
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.push('\n');
        s
    }

    /// The terminal report: header block, then each section (title, table, note).
    pub fn text(&self) -> String {
        let mut s = self.text_header();
        for (i, sec) in self.sections.iter().enumerate() {
            if let Some(t) = &sec.title {
                if i > 0 {
                    s.push('\n');
                }
                let _ = writeln!(s, "{t}:");
            }
            s.push_str(&sec.view.text());
            if let Some(n) = &sec.note {
                let _ = write!(s, "\n{n}\n");
            }
        }
        s
    }

    /// The Markdown report: header lines, then each section.
    pub fn markdown(&self) -> String {
        let mut s = match &self.machine {
            Some(h) => format!(
                "Revision `{}` · {} cores · {} · kernel {}  \n",
                h.git_revision, h.cores, h.cpu_model, h.kernel
            ),
            None => format!("{}  \n", self.title),
        };
        for l in &self.lines {
            let _ = writeln!(s, "{l}  ");
        }
        s.push('\n');
        for (i, sec) in self.sections.iter().enumerate() {
            if let Some(t) = &sec.title {
                if i > 0 {
                    s.push('\n');
                }
                let _ = write!(s, "**{t}**\n\n");
            }
            s.push_str(&sec.view.markdown());
            if let Some(n) = &sec.note {
                let _ = write!(s, "\n{n}\n");
            }
        }
        s
    }

    /// The JSON document: `header`, each section's rows under its key, the extra fields.
    pub fn json(&self) -> serde_json::Value {
        let mut doc = self.extra.clone();
        if !self.header.is_null() {
            doc.insert("header".into(), self.header.clone());
        }
        for sec in &self.sections {
            if let Some(key) = sec.key {
                doc.insert(key.into(), sec.data.json());
            }
        }
        serde_json::Value::Object(doc)
    }
}

/// Checks every study's report must pass, for its tests: the row labelled
/// `label` did not run, so it shows `—` in every figure of the terminal and
/// Markdown tables, is empty in CSV and `null` in JSON, and never `0`; and
/// no rendering names an issue by number.
#[cfg(test)]
pub(crate) fn check_not_run_row(report: &Report, label: &str) {
    let text = report.text();
    let md = report.markdown();
    let json = report.json().to_string();
    let csvs: Vec<String> = report.sections.iter().map(|s| s.data.csv()).collect();
    for out in [&text, &md, &json].into_iter().chain(&csvs) {
        assert!(!names_an_issue(out), "an issue number in:\n{out}");
    }
    let mut seen = false;
    for sec in &report.sections {
        for (table, is_view) in [(&sec.view, true), (&sec.data, false)] {
            for row in &table.rows {
                if !row.iter().any(|c| *c == Cell::text(label)) {
                    continue;
                }
                seen = true;
                let figures: Vec<(&Column, &Cell)> = table
                    .columns
                    .iter()
                    .zip(row)
                    .filter(|(c, _)| c.numeric || !is_view)
                    .filter(|(_, v)| {
                        matches!(v, Cell::Num(..) | Cell::Int(_) | Cell::Exact(_) | Cell::Missing)
                    })
                    .collect();
                assert!(
                    figures.iter().any(|(_, v)| **v == Cell::Missing),
                    "{label}: no missing figure in {row:?}"
                );
                for (c, v) in &figures {
                    assert!(
                        !matches!(v, Cell::Num(x, _) if *x == 0.0) && **v != Cell::Int(0),
                        "{label}: a zero in {} of {row:?}",
                        c.title
                    );
                }
                if is_view {
                    let line = table.text_row(row);
                    assert!(line.contains('—'), "{line}");
                    let md_line = format!(
                        "| {} |",
                        row.iter()
                            .map(|c| c.shown().replace('|', "/"))
                            .collect::<Vec<_>>()
                            .join(" | ")
                    );
                    assert!(md.contains(&md_line) && md_line.contains("| — |"), "{md_line}");
                } else {
                    let mut one = Table::new(&table.columns);
                    one.push(row.clone());
                    let csv_line = one.csv().lines().nth(1).unwrap_or_default().to_string();
                    assert!(csv_line.contains(",,") || csv_line.ends_with(','), "{csv_line}");
                    assert!(
                        !csv_line.contains(",0,") && !csv_line.contains(",0.0"),
                        "{csv_line}"
                    );
                    let j = one.json();
                    assert!(
                        j[0].as_object()
                            .is_some_and(|o| o.values().any(serde_json::Value::is_null)),
                        "{j}"
                    );
                    assert!(json.contains("null"), "{json}");
                }
            }
        }
    }
    assert!(seen, "no row labelled {label}");
}

/// Whether `s` says `issue` followed by a number (`issue 15`, `issue #14`).
#[cfg(test)]
pub(crate) fn names_an_issue(s: &str) -> bool {
    let l = s.to_lowercase();
    l.match_indices("issue").any(|(i, w)| {
        l[i + w.len()..]
            .trim_start_matches([' ', '#'])
            .starts_with(|c: char| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new(&[
            Column::text("label", 6),
            Column::num("MB/s", 6),
            Column::text("notes", 0),
        ]);
        t.push(vec![Cell::text("a,b"), Cell::Num(12.345, 1), Cell::text("x|y")]);
        t.push(vec![
            Cell::text("skip"),
            Cell::Missing,
            Cell::text("skipped: why"),
        ]);
        t
    }

    #[test]
    fn one_table_four_renderings() {
        let t = table();
        assert_eq!(
            t.text(),
            "label    MB/s notes\na,b      12.3 x|y\nskip        — skipped: why\n"
        );
        assert_eq!(
            t.markdown(),
            "| label | MB/s | notes |\n|---|---:|---|\n| a,b | 12.3 | x/y |\n| skip | — | skipped: why |\n"
        );
        assert_eq!(
            t.csv(),
            "label,MB/s,notes\n\"a,b\",12.3,x|y\nskip,,skipped: why\n"
        );
        let j = t.json();
        assert_eq!(j[0]["MB/s"], 12.345);
        assert!(j[1]["MB/s"].is_null());
    }

    #[test]
    fn issue_numbers_are_found() {
        assert!(names_an_issue("the issue 15 figure"));
        assert!(names_an_issue("Issue #14"));
        assert!(!names_an_issue("an issue with 2 rows"));
        assert!(!names_an_issue("figure"));
    }

    #[test]
    fn one_report_path() {
        let mut r = Report::plain("pfs bench test").section(
            Section::one("rows", table())
                .titled("Rows")
                .noted("MB = 10^6 bytes."),
        );
        r.lines.push("setting: x".into());
        assert_eq!(
            r.text(),
            "pfs bench test\nsetting: x\n\nRows:\nlabel    MB/s notes\na,b      12.3 x|y\nskip        — skipped: why\n\nMB = 10^6 bytes.\n"
        );
        assert!(r.markdown().contains("**Rows**\n\n| label |"), "{}", r.markdown());
        assert_eq!(r.json()["rows"][1]["MB/s"], serde_json::Value::Null);
        assert!(r.json().get("header").is_none());
        assert_eq!(r.csv("rows").unwrap(), table().csv());
        check_not_run_row(&r, "skip");
    }

    #[test]
    fn csv_quotes_only_when_needed() {
        assert_eq!(csv_escape("plain"), "plain");
        assert_eq!(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_escape("a\nb"), "\"a\nb\"");
    }
}
