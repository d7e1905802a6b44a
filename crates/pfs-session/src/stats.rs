//! The session statistics record printed by `pfs send`, `pfs serve` and
//! `pfs bench`: receiver-authoritative numbers, effective bytes always
//! beside wire bytes. Rates are decimal MB (10^6 bytes) per second.

use pfs_wire::control::NO_MISMATCH;
use pfs_wire::corrections::CorrectionsReport;
use pfs_wire::{IntegrityAlg, Mode, Report};

use crate::backing_name;

/// One session's numbers, ready for JSON and tables.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SessionStats {
    /// Benchmark label (`Native PFS Offset-only Mode - TCP`, …).
    pub label: String,
    /// `payload` / `offset` / `arith`.
    pub mode: String,
    /// `TCP`, `UNIX`, ….
    pub transport: String,
    /// Integrity algorithm name.
    pub integrity_alg: String,
    /// `OK` or `MISMATCH`.
    pub integrity: String,
    /// Grams whose digest did not match.
    pub mismatched_grams: u64,
    /// Sequence number of the first mismatching gram.
    pub first_mismatch_seq: Option<u64>,
    /// Mismatching grams repaired (the corrections plane; `None`: the
    /// session did not negotiate it).
    pub repaired_grams: Option<u64>,
    /// Effective bytes of the repaired grams.
    pub repaired_bytes: Option<u64>,
    /// Grams NAKed (each answered by a REPAIR).
    pub nak_grams: Option<u64>,
    /// Whether the receiver repaired at all (`false`: `--no-repair`, no
    /// writable blob, or integrity none).
    pub repair: Option<bool>,
    /// Grams whose digest the receiver computed.
    pub checked_grams: Option<u64>,
    /// Effective bytes of those grams (what the receiver read).
    pub checked_bytes: Option<u64>,
    /// One gram in this many was checked.
    pub sample_interval: Option<u16>,
    /// Bytes the receiver executed over.
    pub effective_bytes: u64,
    /// Bytes that crossed the transport, both directions (TCP/IP headers excluded).
    pub wire_bytes: u64,
    /// `wire_bytes / effective_bytes` (≈1 with payload, ≪1 offset-only).
    pub wire_ratio: f64,
    /// Grams executed.
    pub grams: u64,
    /// Descriptors executed.
    pub descriptors: u64,
    /// Receiver steady-state seconds.
    pub elapsed_s: f64,
    /// Effective decimal MB per second.
    pub effective_mb_s: f64,
    /// Wire decimal MB per second.
    pub wire_mb_s: f64,
    /// Receiver thread user CPU seconds.
    pub user_s: f64,
    /// Receiver thread system CPU seconds.
    pub sys_s: f64,
    /// Effective MB per receiver CPU-second.
    pub mb_per_cpu_s: f64,
    /// Receiver peak RSS.
    pub max_rss_bytes: u64,
    /// Receiver voluntary context switches.
    pub voluntary_ctx_switches: u64,
    /// Receiver involuntary context switches.
    pub involuntary_ctx_switches: u64,
    /// Receiver blob backing.
    pub blob_backing: String,
    /// Receiver blob page size.
    pub blob_page_size: u64,
    /// Receiver setup, seconds: map.
    pub setup_map_s: f64,
    /// Receiver setup, seconds: prefault.
    pub setup_prefault_s: f64,
    /// Receiver setup, seconds: fill.
    pub setup_fill_s: f64,
    /// Receiver setup, seconds: fingerprint.
    pub setup_fingerprint_s: f64,
}

fn ns_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl SessionStats {
    /// Builds the record from a receiver report; `label` is the row label
    /// the caller reports the session under (pfs-bench's `labels`).
    pub fn from_report(r: &Report, transport: &str, label: String) -> Self {
        let mode = Mode::from_u8(r.mode).ok();
        let elapsed_s = ns_s(r.elapsed_ns);
        let user_s = r.user_us as f64 / 1e6;
        let sys_s = r.sys_us as f64 / 1e6;
        let eff_mb = r.effective_bytes as f64 / 1e6;
        let per_s = |mb: f64| if elapsed_s > 0.0 { mb / elapsed_s } else { 0.0 };
        Self {
            label,
            mode: mode.map(|m| m.name().to_string()).unwrap_or_default(),
            transport: transport.to_string(),
            integrity_alg: IntegrityAlg::from_u8(r.integrity)
                .map(|i| i.name())
                .unwrap_or("?")
                .to_string(),
            integrity: if r.integrity_ok == 1 { "OK" } else { "MISMATCH" }.to_string(),
            mismatched_grams: r.mismatched_grams,
            first_mismatch_seq: (r.first_mismatch_seq != NO_MISMATCH).then_some(r.first_mismatch_seq),
            repaired_grams: None,
            repaired_bytes: None,
            nak_grams: None,
            repair: None,
            checked_grams: None,
            checked_bytes: None,
            sample_interval: None,
            effective_bytes: r.effective_bytes,
            wire_bytes: r.wire_bytes,
            wire_ratio: if r.effective_bytes > 0 {
                r.wire_bytes as f64 / r.effective_bytes as f64
            } else {
                0.0
            },
            grams: r.grams,
            descriptors: r.descriptors,
            elapsed_s,
            effective_mb_s: per_s(eff_mb),
            wire_mb_s: per_s(r.wire_bytes as f64 / 1e6),
            user_s,
            sys_s,
            mb_per_cpu_s: if user_s + sys_s > 0.0 {
                eff_mb / (user_s + sys_s)
            } else {
                0.0
            },
            max_rss_bytes: r.max_rss_bytes,
            voluntary_ctx_switches: r.nvcsw,
            involuntary_ctx_switches: r.nivcsw,
            blob_backing: backing_name(r.backing).to_string(),
            blob_page_size: r.page_size,
            setup_map_s: ns_s(r.setup_map_ns),
            setup_prefault_s: ns_s(r.setup_prefault_ns),
            setup_fill_s: ns_s(r.setup_fill_ns),
            setup_fingerprint_s: ns_s(r.setup_fingerprint_ns),
        }
    }

    /// Adds the report's corrections block (sessions that negotiated the
    /// corrections plane, docs/wire.md §13).
    pub fn with_corrections(mut self, c: Option<CorrectionsReport>) -> Self {
        if let Some(c) = c {
            self.repaired_grams = Some(c.repaired_grams);
            self.repaired_bytes = Some(c.repaired_bytes);
            self.nak_grams = Some(c.nak_grams);
            self.repair = Some(c.repair());
            self.checked_grams = Some(c.checked_grams);
            self.checked_bytes = Some(c.checked_bytes);
            self.sample_interval = Some(c.sample_interval.max(1));
        }
        self
    }

    /// True when integrity held (every mismatch repaired, with the
    /// corrections plane).
    pub fn ok(&self) -> bool {
        self.integrity == "OK"
    }

    /// Mismatching grams not repaired.
    pub fn unrepaired_grams(&self) -> u64 {
        self.mismatched_grams - self.repaired_grams.unwrap_or(0).min(self.mismatched_grams)
    }

    /// One line describing a mismatch: how many grams and the first one.
    pub fn mismatch_line(&self) -> String {
        let first = self
            .first_mismatch_seq
            .map(|s| format!("gram #{s}"))
            .unwrap_or_else(|| "no single gram (end-to-end or count check)".into());
        let repaired = match (self.repaired_grams, self.repair) {
            (Some(r), Some(true)) => format!(", {r} repaired, {} left", self.unrepaired_grams()),
            (Some(_), Some(false)) => " (the receiver does not repair)".into(),
            _ => String::new(),
        };
        format!(
            "integrity MISMATCH: {} gram(s) differ{repaired}, first: {first}",
            self.mismatched_grams
        )
    }

    /// The corrections line of [`Self::human`], when the session had the plane.
    fn corrections_line(&self) -> Option<String> {
        let (checked, checked_bytes, interval) =
            (self.checked_grams?, self.checked_bytes?, self.sample_interval?);
        let sampled = if interval > 1 {
            format!(
                "sampled 1 in {interval}: {checked} of {} grams checked, {:.1} of {:.1} MB read",
                self.grams,
                checked_bytes as f64 / 1e6,
                self.effective_bytes as f64 / 1e6
            )
        } else {
            format!("every gram checked ({checked})")
        };
        let repair = if self.repair == Some(true) {
            format!(
                "{} repaired ({:.3} MB, {} NAKed), {} left",
                self.repaired_grams.unwrap_or(0),
                self.repaired_bytes.unwrap_or(0) as f64 / 1e6,
                self.nak_grams.unwrap_or(0),
                self.unrepaired_grams()
            )
        } else {
            "repair off".into()
        };
        Some(format!("\n  corrections    {sampled}; {repair}"))
    }

    /// Human-readable multi-line summary.
    pub fn human(&self) -> String {
        let mismatch = match self.first_mismatch_seq {
            Some(seq) if self.unrepaired_grams() == 0 => format!(
                " ({} gram(s) differed, first: gram #{seq}; all repaired)",
                self.mismatched_grams
            ),
            Some(seq) => format!(" ({} gram(s) differ, first: gram #{seq})", self.mismatched_grams),
            None => String::new(),
        };
        format!(
            "{label}\n  integrity      {alg}: {status}{mismatch}{corrections}\n  effective      {eff:.1} MB in {grams} grams / {descs} descriptors\n  \
             wire           {wire:.3} MB (wire/effective = {ratio:.6})\n  elapsed        {el:.3} s (receiver steady state)\n  \
             throughput     {rate:.1} MB/s effective, {wrate:.1} MB/s wire\n  receiver CPU   user {u:.3} s, sys {s:.3} s → {mbcpu:.1} MB/CPU-s\n  \
             ctx switches   {vcs} voluntary, {ics} involuntary; max RSS {rss:.1} MB\n  blob           {backing}, page {page} B; setup map {m:.3} s, prefault {p:.3} s, fill {f:.3} s, fingerprint {fp:.3} s",
            label = self.label,
            alg = self.integrity_alg,
            status = self.integrity,
            corrections = self.corrections_line().unwrap_or_default(),
            eff = self.effective_bytes as f64 / 1e6,
            grams = self.grams,
            descs = self.descriptors,
            wire = self.wire_bytes as f64 / 1e6,
            ratio = self.wire_ratio,
            el = self.elapsed_s,
            rate = self.effective_mb_s,
            wrate = self.wire_mb_s,
            u = self.user_s,
            s = self.sys_s,
            mbcpu = self.mb_per_cpu_s,
            vcs = self.voluntary_ctx_switches,
            ics = self.involuntary_ctx_switches,
            rss = self.max_rss_bytes as f64 / 1e6,
            backing = self.blob_backing,
            page = self.blob_page_size,
            m = self.setup_map_s,
            p = self.setup_prefault_s,
            f = self.setup_fill_s,
            fp = self.setup_fingerprint_s,
        )
    }
}
