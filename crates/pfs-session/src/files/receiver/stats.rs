//! What the receiver reports: the FILES_END counters, the text of the
//! entries that failed (within the report's limit), the wire bytes it
//! consumed and when the session began.

use std::time::Instant;

use pfs_wire::files::{FilesReport, MAX_REPORT_TEXT};

/// The session's report as it accumulates.
#[derive(Debug)]
pub(super) struct Stats {
    /// Counters sent in FILES_END.
    pub(super) report: FilesReport<'static>,
    /// One `path: reason` line per failed entry, and notes.
    pub(super) messages: String,
    /// Bytes consumed: the receiver's wire bytes.
    pub(super) consumed: u64,
    /// When the session began.
    pub(super) started: Instant,
}

impl Stats {
    /// Nothing counted yet, a session started at `now`.
    pub(super) fn new(now: Instant) -> Self {
        Self {
            report: FilesReport::default(),
            messages: String::new(),
            consumed: 0,
            started: now,
        }
    }

    /// An entry that cannot be written: counted and listed in the report.
    pub(super) fn fail(&mut self, rel: &[u8], reason: impl std::fmt::Display) {
        self.report.files_failed += 1;
        // Escaped: a name with a newline must not forge a report line.
        let (path, reason) = (pfs_files::escape(rel).to_string(), reason.to_string());
        // Errors from the destination already name the path (escaped too).
        let line = if reason.starts_with(path.as_str()) {
            format!("{reason}\n")
        } else {
            format!("{path}: {reason}\n")
        };
        self.note(&line);
    }

    /// A line for the report beyond the per-entry failures, within the
    /// report's text limit.
    pub(super) fn note(&mut self, line: &str) {
        // Not rewritten by `crate::peer_text`: these lines name entries by
        // their path relative to the destination, and echo the sender's own
        // words (its absolute paths among them, in a DROP's reason).
        if self.messages.len() + line.len() <= MAX_REPORT_TEXT {
            self.messages.push_str(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_counted_and_named_once() {
        let mut s = Stats::new(Instant::now());
        s.fail(b"a/b", "refused");
        s.fail(b"c", "c: no space");
        assert_eq!(s.report.files_failed, 2);
        assert_eq!(s.messages, "a/b: refused\nc: no space\n");
    }

    #[test]
    fn a_name_with_a_newline_stays_on_its_own_line() {
        let mut s = Stats::new(Instant::now());
        s.fail(b"evil\ndeleting important.txt", "refused");
        assert_eq!(s.messages, "evil\\#012deleting important.txt: refused\n");
        assert_eq!(s.messages.lines().count(), 1);
    }

    #[test]
    fn text_stays_within_the_report_limit() {
        let mut s = Stats::new(Instant::now());
        let line = format!("{}\n", "x".repeat(999));
        for _ in 0..(MAX_REPORT_TEXT / 1000 + 5) {
            s.note(&line);
        }
        assert!(s.messages.len() <= MAX_REPORT_TEXT);
        assert_eq!(s.messages.len() % 1000, 0);
        // Failures past the limit are still counted.
        s.fail(b"late", "refused");
        assert_eq!(s.report.files_failed, 1);
    }
}
