//! What every study shares about its rows: a row's [`Status`] (ran, skipped
//! with its reason, failed with its reason), the [`Target`] a figure is
//! checked against and its one [`Verdict`], the one [`ratio`] of a figure
//! over its baseline's, and the [`Method`] trait that names a study's ways of
//! doing one thing (its rows).
//!
//! A row keeps its status beside its metrics: a row that did not run never
//! carries zeros that read like a measurement, and its reason is never
//! hidden in free-text notes.

use std::fmt;

use serde::ser::SerializeMap;

use super::{Cell, Column, Table};
use serde::{Serialize, Serializer};

/// Why a row has no figures, in words a reader acts on (`iperf3 not
/// installed`, `needs root`, the error chain of a failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    /// A reason in words.
    pub fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }

    /// The reason of an error: its whole chain (`{e:#}`).
    pub fn of(e: &anyhow::Error) -> Self {
        Self(format!("{e:#}"))
    }

    /// The words.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a row was not run (or not to its end) without that being a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The host cannot run it: a tool is missing, root is needed … (`skipped: why`).
    Unavailable(Reason),
    /// Stopped at its time bound on an emulated link (`cut: what it did`): the
    /// transfer did not finish, so the row has no figures; the run goes on.
    Cut(Reason),
}

/// How a row ended: the one status type of every study's rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Status {
    /// Measured: its figures are in the row.
    #[default]
    Ran,
    /// Not run, for a stated reason; not a failure of the study.
    Skipped(Skip),
    /// Tried and failed: the study's outcome is a failure.
    Failed(Reason),
}

impl Status {
    /// Skipped because the host cannot run the row.
    pub fn skipped(why: impl Into<String>) -> Self {
        Self::Skipped(Skip::Unavailable(Reason::new(why)))
    }

    /// Cut at its time bound (see [`Skip::Cut`]).
    pub fn cut(what: impl Into<String>) -> Self {
        Self::Skipped(Skip::Cut(Reason::new(what)))
    }

    /// Failed with this error.
    pub fn failed(e: &anyhow::Error) -> Self {
        Self::Failed(Reason::of(e))
    }

    /// Failed, for a reason in words.
    pub fn failed_because(why: impl Into<String>) -> Self {
        Self::Failed(Reason::new(why))
    }

    /// Whether the row was measured.
    pub fn ran(&self) -> bool {
        matches!(self, Self::Ran)
    }

    /// Whether the row failed.
    pub fn is_failed(&self) -> bool {
        matches!(self, Self::Failed(_))
    }

    /// The reason a row has no figures, when it has none.
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Self::Ran => None,
            Self::Skipped(Skip::Unavailable(r) | Skip::Cut(r)) | Self::Failed(r) => Some(r),
        }
    }

    /// One word for machines: `ok`, `skipped` or `failed` (a cut row is skipped).
    pub fn key(&self) -> &'static str {
        match self {
            Self::Ran => "ok",
            Self::Skipped(_) => "skipped",
            Self::Failed(_) => "failed",
        }
    }

    /// `skipped: why`, `cut: what`, `failed: why`; nothing for a row that ran.
    pub fn note(&self) -> Option<String> {
        (!self.ran()).then(|| self.to_string())
    }

    /// The status note and the row's own notes, `; `-separated (the notes column).
    pub fn with_notes(&self, notes: &str) -> String {
        match (self.note(), notes.is_empty()) {
            (None, _) => notes.to_string(),
            (Some(n), true) => n,
            (Some(n), false) => format!("{n}; {notes}"),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ran => f.write_str("ran"),
            Self::Skipped(Skip::Unavailable(r)) => write!(f, "skipped: {r}"),
            Self::Skipped(Skip::Cut(r)) => write!(f, "cut: {r}"),
            Self::Failed(r) => write!(f, "failed: {r}"),
        }
    }
}

impl Serialize for Status {
    /// Two fields, for a row serialized with `#[serde(flatten)]`: `status`
    /// ([`Status::key`]) and `error` (the reason, `null` when it ran).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("status", self.key())?;
        m.serialize_entry("error", &self.reason().map(Reason::as_str))?;
        m.end()
    }
}

/// Appends `note` to `notes`, `; `-separated.
pub fn add_note(notes: &mut String, note: &str) {
    if note.is_empty() {
        return;
    }
    if !notes.is_empty() {
        notes.push_str("; ");
    }
    notes.push_str(note);
}

/// A figure over its baseline's, when both are finite and the baseline is
/// positive (a ratio against nothing is no ratio).
pub fn ratio(figure: f64, baseline: f64) -> Option<f64> {
    (figure.is_finite() && baseline.is_finite() && baseline > 0.0).then(|| figure / baseline)
}

/// The ways a study does one thing, one row each (`a1` … `a4` of the
/// I/O-primitives study, `unix-epoll` … of the IPC study).
pub trait Method: Copy + 'static {
    /// Short name, as the command line takes it.
    fn key(self) -> &'static str;
    /// Row label for tables and legends.
    fn label(self) -> &'static str;
}

/// Which side of its bound a figure must be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Bound {
    /// At least the limit.
    AtLeast,
    /// At most the limit.
    AtMost,
}

impl Bound {
    /// `≥` or `≤`.
    pub fn sign(self) -> &'static str {
        match self {
            Self::AtLeast => "≥",
            Self::AtMost => "≤",
        }
    }
}

/// Whether a figure of this run is on the right side of its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On the right side.
    Met,
    /// On the wrong side.
    Missed,
    /// A row the figure needs did not run.
    NotRun,
}

impl Verdict {
    /// `met`, `missed`, `not run`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Met => "met",
            Self::Missed => "missed",
            Self::NotRun => "not run",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A figure the design asks of PacketFS, checked on rows of this run.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The filesystem it was checked on, for studies that run on several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<String>,
    /// What is compared.
    pub what: String,
    /// The value measured (`None`: a row it needs did not run).
    pub value: Option<f64>,
    /// The bound.
    pub limit: f64,
    /// `true`: the value must be at least the bound; `false`: at most.
    pub at_least: bool,
    /// Unit of value and bound (`ms`, `×`).
    pub unit: &'static str,
}

impl Target {
    /// Which side of the limit the value must be on.
    pub fn bound(&self) -> Bound {
        if self.at_least {
            Bound::AtLeast
        } else {
            Bound::AtMost
        }
    }

    /// Met, missed, or not run.
    pub fn verdict(&self) -> Verdict {
        match self.value {
            None => Verdict::NotRun,
            Some(v) if (self.at_least && v >= self.limit) || (!self.at_least && v <= self.limit) => {
                Verdict::Met
            }
            Some(_) => Verdict::Missed,
        }
    }

    /// The JSON of targets: every field and its `verdict`.
    pub fn json(targets: &[Target]) -> serde_json::Value {
        Self::data(targets).json()
    }

    /// The full record of targets (CSV, JSON): every field and its
    /// `verdict`; `fs` only when one of them names a filesystem.
    pub fn data(targets: &[Target]) -> Table {
        let with_fs = targets.iter().any(|t| t.fs.is_some());
        let mut columns = Vec::new();
        if with_fs {
            columns.push(Column::text("fs", 0));
        }
        columns.extend([
            Column::text("what", 0),
            Column::num("value", 0),
            Column::num("limit", 0),
            Column::text("at_least", 0),
            Column::text("unit", 0),
            Column::text("verdict", 0),
        ]);
        let mut table = Table::new(&columns);
        for t in targets {
            let mut row = Vec::new();
            if with_fs {
                row.push(t.fs.as_deref().map_or(Cell::Missing, Cell::text));
            }
            row.extend([
                Cell::text(&t.what),
                number(t.value),
                number(Some(t.limit)),
                Cell::Bool(t.at_least),
                Cell::text(t.unit),
                Cell::text(t.verdict().as_str()),
            ]);
            table.push(row);
        }
        table
    }

    /// The targets block of a text or Markdown report: one line each
    /// (value to three digits, so 0.502 against ≤ 0.5 never reads 0.50).
    pub fn view(targets: &[Target]) -> Table {
        let mut table = Table::new(&[
            Column::num("value", 8),
            Column::text("target", 9),
            Column::text("verdict", 7),
            Column::text("figure", 0),
        ]);
        for x in targets {
            table.push(vec![
                Cell::num(x.value, 3),
                Cell::text(format!("{} {}{}", x.bound().sign(), x.limit, x.unit)),
                Cell::text(x.verdict().as_str()),
                Cell::text(&x.what),
            ]);
        }
        table
    }
}

/// A float with every digit, as JSON writes it; missing when there is none
/// or JSON cannot hold it.
fn number(v: Option<f64>) -> Cell {
    v.and_then(serde_json::Number::from_f64)
        .map_or(Cell::Missing, Cell::Exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_says_why_in_one_place() {
        assert_eq!(
            Status::skipped("scp not installed").to_string(),
            "skipped: scp not installed"
        );
        assert_eq!(Status::cut("12 MB of 16").to_string(), "cut: 12 MB of 16");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(Status::failed(&e).to_string(), "failed: outer: inner");
        assert_eq!(Status::Ran.note(), None);
        assert_eq!(
            Status::skipped("x").with_notes("pattern=random"),
            "skipped: x; pattern=random"
        );
        assert_eq!(Status::Ran.with_notes("pattern=random"), "pattern=random");
        let j = serde_json::to_value(Status::failed_because("boom")).unwrap();
        assert_eq!(j, serde_json::json!({"status": "failed", "error": "boom"}));
        let j = serde_json::to_value(Status::Ran).unwrap();
        assert_eq!(j, serde_json::json!({"status": "ok", "error": null}));
    }

    #[test]
    fn one_verdict_for_both_bounds() {
        let t = |value, at_least| Target {
            fs: None,
            what: "x".into(),
            value,
            limit: 1.0,
            at_least,
            unit: "×",
        };
        assert_eq!(t(None, true).verdict(), Verdict::NotRun);
        assert_eq!(t(Some(1.0), true).verdict(), Verdict::Met);
        assert_eq!(t(Some(0.9), true).verdict(), Verdict::Missed);
        assert_eq!(t(Some(0.9), false).verdict(), Verdict::Met);
        assert_eq!(t(Some(1.1), false).verdict(), Verdict::Missed);
        assert_eq!(Target::json(&[t(None, false)])[0]["verdict"], "not run");
        assert!(Target::json(&[t(None, false)])[0].get("fs").is_none());
    }

    #[test]
    fn ratio_needs_a_positive_baseline() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
        assert_eq!(ratio(f64::NAN, 1.0), None);
    }
}
