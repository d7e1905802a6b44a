//! The session statistics record printed by `pfs send`, `pfs serve` and
//! `pfs bench`: receiver-authoritative numbers, effective bytes always
//! beside wire bytes. Rates are decimal MB (10^6 bytes) per second.

use pfs_wire::control::NO_MISMATCH;
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

    /// True when integrity held.
    pub fn ok(&self) -> bool {
        self.integrity == "OK"
    }

    /// One line describing a mismatch: how many grams and the first one.
    pub fn mismatch_line(&self) -> String {
        let first = self
            .first_mismatch_seq
            .map(|s| format!("gram #{s}"))
            .unwrap_or_else(|| "no single gram (end-to-end or count check)".into());
        format!(
            "integrity MISMATCH: {} gram(s) differ, first: {first}",
            self.mismatched_grams
        )
    }

    /// Human-readable multi-line summary.
    pub fn human(&self) -> String {
        let mismatch = match self.first_mismatch_seq {
            Some(seq) => format!(" ({} gram(s) differ, first: gram #{seq})", self.mismatched_grams),
            None => String::new(),
        };
        format!(
            "{label}\n  integrity      {alg}: {status}{mismatch}\n  effective      {eff:.1} MB in {grams} grams / {descs} descriptors\n  \
             wire           {wire:.3} MB (wire/effective = {ratio:.6})\n  elapsed        {el:.3} s (receiver steady state)\n  \
             throughput     {rate:.1} MB/s effective, {wrate:.1} MB/s wire\n  receiver CPU   user {u:.3} s, sys {s:.3} s → {mbcpu:.1} MB/CPU-s\n  \
             ctx switches   {vcs} voluntary, {ics} involuntary; max RSS {rss:.1} MB\n  blob           {backing}, page {page} B; setup map {m:.3} s, prefault {p:.3} s, fill {f:.3} s, fingerprint {fp:.3} s",
            label = self.label,
            alg = self.integrity_alg,
            status = self.integrity,
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
