//! What the receiver counts for its report: grams, descriptors, effective
//! and payload bytes, mismatches and the end-to-end digest chain (wire.md
//! §13.2), wire bytes both ways, the steady state's start and the progress
//! events' schedule.

use std::time::{Duration, Instant};

use pfs_exec::e2e_chain;
use pfs_wire::control::NO_MISMATCH;
use pfs_wire::{GramHeader, Report};

use crate::gram::GramProgress;

/// The report as it accumulates, and the session's clock marks.
#[derive(Debug)]
pub(super) struct Stats {
    /// The report (counters; the rest is set at HELLO and at the end).
    pub(super) report: Report,
    /// Bytes consumed from the peer (the receiver's wire bytes in).
    pub(super) wire_in: u64,
    /// Bytes this side has queued to the peer, report included.
    pub(super) wire_out: u64,
    /// The sequence number the next gram must carry.
    pub(super) next_seq: u64,
    /// Start of the steady state: the first frame after the handshake.
    pub(super) started: Option<Instant>,
    next_log: Option<Instant>,
    log_interval: Option<Duration>,
}

impl Stats {
    /// Nothing counted; progress every `log_interval` once started.
    pub(super) fn new(log_interval: Option<Duration>) -> Self {
        Self {
            report: Report::default(),
            wire_in: 0,
            wire_out: 0,
            next_seq: 0,
            started: None,
            next_log: None,
            log_interval,
        }
    }

    /// The steady state starts at `now`.
    pub(super) fn start(&mut self, now: Instant) {
        self.started = Some(now);
        self.next_log = self.log_interval.map(|i| now + i);
    }

    /// Wire bytes of the session so far, both directions.
    pub(super) fn wire_bytes(&self) -> u64 {
        self.wire_in + self.wire_out
    }

    /// Counts gram `gh`: `value` goes into the end-to-end chain, `effective`
    /// bytes over `count` descriptors, a mismatch or not.
    pub(super) fn account(
        &mut self,
        gh: &GramHeader,
        value: u64,
        effective: u64,
        count: u32,
        mismatch: bool,
    ) {
        let seq = gh.seq;
        let r = &mut self.report;
        if mismatch {
            r.mismatched_grams += 1;
            if r.first_mismatch_seq == NO_MISMATCH {
                r.first_mismatch_seq = seq;
            }
        }
        r.e2e_digest = e2e_chain(r.e2e_digest, seq, value);
        r.grams += 1;
        r.descriptors += u64::from(count);
        r.effective_bytes += effective;
        r.payload_bytes += u64::from(gh.payload_len);
        self.next_seq += 1;
    }

    /// A progress event, when one is due at `now` (`planned_bytes`: what
    /// HELLO announced).
    pub(super) fn progress(&mut self, now: Instant, planned_bytes: u64) -> Option<GramProgress> {
        let (Some(at), Some(interval), Some(started)) = (self.next_log, self.log_interval, self.started)
        else {
            return None;
        };
        if now < at {
            return None;
        }
        self.next_log = Some(now + interval);
        Some(GramProgress {
            grams: self.report.grams,
            effective_bytes: self.report.effective_bytes,
            wire_bytes: self.wire_bytes(),
            elapsed: now - started,
            planned_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gram(seq: u64, payload_len: u32) -> GramHeader {
        GramHeader {
            seq,
            desc_count: 0,
            table_len: 0,
            payload_len,
            encoding: pfs_wire::Encoding::Absolute,
            integrity: pfs_wire::IntegrityAlg::None,
            flags: 0,
            integrity_value: 0,
        }
    }

    #[test]
    fn grams_are_counted_and_chained() {
        let mut s = Stats::new(None);
        s.report.first_mismatch_seq = NO_MISMATCH;
        s.account(&gram(0, 10), 7, 10, 2, false);
        s.account(&gram(1, 0), 8, 30, 3, true);
        s.account(&gram(2, 0), 9, 5, 1, true);
        let r = &s.report;
        assert_eq!(
            (r.grams, r.descriptors, r.effective_bytes, r.payload_bytes),
            (3, 6, 45, 10)
        );
        assert_eq!((r.mismatched_grams, r.first_mismatch_seq), (2, 1));
        assert_eq!(r.e2e_digest, e2e_chain(e2e_chain(e2e_chain(0, 0, 7), 1, 8), 2, 9));
        assert_eq!(s.next_seq, 3);
    }

    #[test]
    fn progress_comes_every_interval_once_started() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut s = Stats::new(Some(second));
        assert!(s.progress(t0 + second * 5, 0).is_none());
        s.start(t0);
        assert!(s.progress(t0, 0).is_none());
        let p = s.progress(t0 + second, 100).expect("due");
        assert_eq!((p.elapsed, p.planned_bytes), (second, 100));
        assert!(s.progress(t0 + second + second / 2, 100).is_none());
        assert!(s.progress(t0 + second * 2, 100).is_some());
        assert!(Stats::new(None).progress(t0, 0).is_none());
    }
}
