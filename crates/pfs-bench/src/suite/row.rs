//! The result row of the suite and of the files study (the same columns in
//! both), and the suite's header settings.

use serde::Serialize;

use crate::report::Status;

/// One result row: the columns of the table, CSV and JSON. Its [`Status`]
/// says whether the figures were measured; the notes column shows the
/// status's reason first, then [`Row::notes`].
#[derive(Debug, Clone)]
pub struct Row {
    pub status: Status,
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
    pub fn measured(
        label: &str,
        purpose: &str,
        eff: u64,
        wire: u64,
        elapsed: f64,
        user: f64,
        sys: f64,
    ) -> Self {
        let cpu = user + sys;
        let eff_mb = eff as f64 / 1e6;
        Row {
            status: Status::Ran,
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

    /// A row that did not run because its tool is missing or the host cannot (`skipped: why`).
    pub fn skipped(label: &str, purpose: &str, why: String) -> Self {
        Row::not_run(label, purpose, Status::skipped(why))
    }

    fn not_run(label: &str, purpose: &str, status: Status) -> Self {
        let mut r = Row::measured(label, purpose, 0, 0, 0.0, 0.0, 0.0);
        r.integrity = "-".into();
        r.status = status;
        r
    }

    /// A row that did not run to the end (`failed: reason`); the suite goes on.
    pub fn failed(label: &str, purpose: &str, e: &anyhow::Error) -> Self {
        Row::not_run(label, purpose, Status::failed(e))
    }

    /// A row stopped at its time bound on an emulated link (`cut: what it
    /// did`): shown without numbers, since the transfer did not finish;
    /// not a failure of the run.
    pub fn cut(label: &str, purpose: &str, what: String) -> Self {
        Row::not_run(label, purpose, Status::cut(what))
    }

    /// Whether the row was measured (neither skipped, failed nor cut).
    pub fn ran(&self) -> bool {
        self.status.ran()
    }

    /// The notes column: the status's reason, then the row's own notes.
    pub fn notes_shown(&self) -> String {
        self.status.with_notes(&self.notes)
    }

    /// Appends a note, `; `-separated.
    pub fn add_note(&mut self, note: &str) {
        crate::report::add_note(&mut self.notes, note);
    }
}

/// The suite's part of its report header (after the [`crate::report::Machine`] facts).
#[derive(Debug, Clone, Serialize)]
pub struct SuiteSettings {
    /// The bracketed THP mode.
    pub thp_mode: String,
    /// Sender blob backing and page size.
    pub sender_blob: String,
    /// Receiver blob backing and page size (from its report).
    pub receiver_blob: String,
    /// Blob bytes, both peers.
    pub blob_bytes: u64,
    /// The sender's blob setup line.
    pub sender_setup: String,
    /// The receiver's blob setup phases.
    pub receiver_setup: String,
    /// Units and definitions.
    pub units: String,
    /// Network path (loopback, veth …).
    pub path: String,
    /// Pinning as run.
    pub pinning: String,
    /// The emulated link, when the rows ran over one (`--link`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<super::link::LinkHeader>,
}

/// The suite's report header.
pub type SuiteHeader = crate::report::Header<SuiteSettings>;

impl Row {
    pub fn integrity_alg(&self) -> &str {
        ["fnv1a", "xxh3", "none"]
            .into_iter()
            .find(|a| {
                self.notes.contains(&format!("integrity={a}"))
                    || self.notes.contains(&format!("kernel={a}"))
                    || self.label.contains(&format!("({a} "))
            })
            .unwrap_or("-")
    }

    /// Label with the integrity and pattern (or congestion controller)
    /// qualifiers, for plots.
    pub fn plot_label(&self) -> String {
        let pattern = ["random", "sequential", "strided"]
            .into_iter()
            .find(|p| self.notes.contains(&format!("pattern={p}")))
            .or_else(|| {
                ["cubic", "bbr"]
                    .into_iter()
                    .find(|cc| self.notes.contains(&format!("cc={cc}")))
            });
        match (self.integrity_alg(), pattern) {
            ("-", None) => self.label.clone(),
            ("-", Some(p)) => format!("{} ({p})", self.label),
            (alg, None) => format!("{} ({alg})", self.label),
            (alg, Some(p)) => format!("{} ({alg}, {p})", self.label),
        }
    }
}
