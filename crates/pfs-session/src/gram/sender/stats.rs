//! What a sender counts: its summary (grams, descriptors, effective and
//! payload bytes, the end-to-end digest chain), table and wire bytes, the
//! sequence number of the next gram, the steady state's start and end, and
//! the progress events' schedule.

use std::time::{Duration, Instant};

use pfs_exec::e2e_chain;
use pfs_wire::SenderSummary;

use crate::gram::GramProgress;

/// The sender's counters and clock marks.
#[derive(Debug, Default)]
pub(super) struct SendStats {
    /// What COMPLETE says was sent.
    pub(super) summary: SenderSummary,
    /// Bytes of descriptor tables sent.
    pub(super) table_bytes: u64,
    /// Bytes queued to the receiver, every frame.
    pub(super) wire_bytes: u64,
    /// Sequence number of the next gram.
    pub(super) seq: u64,
    /// HELLO_ACK arrived: the steady state started.
    pub(super) started: Option<Instant>,
    /// From `started` to COMPLETE.
    pub(super) elapsed: Duration,
    next_log: Option<Instant>,
}

impl SendStats {
    /// The steady state starts at `now`; progress every `log_interval`.
    pub(super) fn start(&mut self, now: Instant, log_interval: Option<Duration>) {
        self.started = Some(now);
        self.next_log = log_interval.map(|i| now + i);
    }

    /// Everything is sent at `now`: the steady state ends.
    pub(super) fn stop(&mut self, now: Instant) {
        self.elapsed = self
            .started
            .map(|s| now.saturating_duration_since(s))
            .unwrap_or_default();
        self.summary.wire_bytes_sent = self.wire_bytes;
    }

    /// Counts the gram just built: `count` descriptors, `effective` and
    /// `payload` bytes, `value` chained end to end; its frame is `wire`
    /// bytes, `table` of them the table.
    pub(super) fn gram(
        &mut self,
        count: u32,
        effective: u64,
        payload: u32,
        value: u64,
        table: u64,
        wire: u64,
    ) {
        self.wire_bytes += wire;
        self.table_bytes += table;
        let s = &mut self.summary;
        s.grams += 1;
        s.descriptors += u64::from(count);
        s.effective_bytes += effective;
        s.payload_bytes += u64::from(payload);
        s.e2e_digest = e2e_chain(s.e2e_digest, self.seq, value);
        self.seq += 1;
    }

    /// A progress event, when one is due at `now` (`interval`: the
    /// configured interval; `planned_bytes`: the schedule's).
    pub(super) fn progress(
        &mut self,
        now: Instant,
        interval: Option<Duration>,
        planned_bytes: u64,
    ) -> Option<GramProgress> {
        let (Some(at), Some(interval), Some(started)) = (self.next_log, interval, self.started) else {
            return None;
        };
        if now < at {
            return None;
        }
        self.next_log = Some(now + interval);
        Some(GramProgress {
            grams: self.summary.grams,
            effective_bytes: self.summary.effective_bytes,
            wire_bytes: self.wire_bytes,
            elapsed: now - started,
            planned_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grams_are_counted_and_chained() {
        let mut s = SendStats::default();
        s.gram(2, 100, 100, 7, 16, 164);
        s.gram(1, 50, 0, 8, 8, 48);
        assert_eq!(s.seq, 2);
        assert_eq!((s.summary.grams, s.summary.descriptors), (2, 3));
        assert_eq!((s.summary.effective_bytes, s.summary.payload_bytes), (150, 100));
        assert_eq!(s.summary.e2e_digest, e2e_chain(e2e_chain(0, 0, 7), 1, 8));
        assert_eq!((s.table_bytes, s.wire_bytes), (24, 212));
    }

    #[test]
    fn the_steady_state_and_progress() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let mut s = SendStats::default();
        assert!(s.progress(t0, Some(second), 0).is_none());
        s.start(t0, Some(second));
        assert!(s.progress(t0, Some(second), 0).is_none());
        let p = s.progress(t0 + second, Some(second), 9).expect("due");
        assert_eq!((p.elapsed, p.planned_bytes), (second, 9));
        assert!(s.progress(t0 + second, Some(second), 9).is_none());
        s.wire_bytes = 5;
        s.stop(t0 + second * 3);
        assert_eq!(s.elapsed, second * 3);
        assert_eq!(s.summary.wire_bytes_sent, 5);
    }
}
