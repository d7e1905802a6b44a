//! The corrections plane of blob sessions (docs/wire.md §13), sans I/O:
//! which grams a session checks, the receiver's NAKs waiting and
//! unanswered (`NakBook`), and the sender's memory of the grams it sent
//! and the NAKs it owes a REPAIR (`RepairBook`).
//!
//! Both books keep their buffers: a NAK body or a remembered table is
//! reused for the next one, so a session that repairs allocates only while
//! its high-water mark grows.

use std::collections::VecDeque;

use pfs_wire::corrections::{put_range, CorrectionHead, CorrectionsReport, GramNak, MAX_CORRECTION_RANGES};
use pfs_wire::{put_frame, Descriptor, Encoding, FrameType, TableWriter, FRAME_HEADER_LEN};

use super::GramViolation;
use crate::error::Violation;
use crate::SessionError;

/// Most bytes of NAK frames (headers included) a receiver keeps written
/// and unanswered: less than any stream transport buffers from receiver to
/// sender at its defaults, so a NAK write never blocks while the sender
/// blocks writing a gram (wire.md §13.4).
pub const NAK_WINDOW: usize = 64 * 1024;
/// Default most NAKed grams unanswered at once (waiting to be written or
/// written): each holds up to 48 KiB of ranges.
pub const DEFAULT_MAX_NAK_GRAMS: u32 = 64;
/// Default most bytes one session may repair (NAKed grams' bytes plus
/// payload-mode repairs): what one peer can make a receiver rewrite.
pub const DEFAULT_MAX_REPAIR_BYTES: u64 = 1 << 30;
/// Most differing bytes a payload-mode gram may carry into its repair (they
/// are held until the gram's digest is known).
pub const MAX_LOCAL_REPAIR: usize = 16 << 20;
/// Grams whose descriptor tables a sender remembers, to check the ranges
/// of a NAK: a NAK for an older gram is refused.
pub const SENDER_MEMORY: u64 = 1 << 18;

/// Whether gram `seq` is checked when the session checks one gram in
/// `interval` (0 and 1: every gram).
#[inline]
pub fn is_checked(seq: u64, interval: u16) -> bool {
    interval <= 1 || seq.is_multiple_of(u64::from(interval))
}

/// One NAK the receiver has queued or sent and not yet seen answered.
#[derive(Debug)]
pub(crate) struct Nak {
    /// The gram.
    pub seq: u64,
    /// Its `integrity_value`: what the repaired ranges must hash to.
    pub value: u64,
    /// Sum of its ranges' lengths.
    pub bytes: u64,
    /// The NAK body: head, then ranges.
    pub body: Vec<u8>,
}

impl Nak {
    /// The ranges, as encoded in the body.
    pub fn table(&self) -> &[u8] {
        self.body
            .get(pfs_wire::corrections::CORRECTION_HEAD_LEN..)
            .unwrap_or(&[])
    }

    /// The ranges, decoded (this side encoded them).
    pub fn ranges(&self) -> impl Iterator<Item = Descriptor> + '_ {
        pfs_wire::DescIter::new(self.table(), Encoding::Absolute, self.range_count()).flatten()
    }

    /// How many ranges.
    pub fn range_count(&self) -> u32 {
        (self.table().len() / pfs_wire::corrections::RANGE_LEN) as u32
    }

    fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN + self.body.len()
    }
}

/// The receiver's corrections plane: NAKs in gram order, the first `sent`
/// of them written; the repair budget; the report's corrections block.
#[derive(Debug)]
pub(crate) struct NakBook {
    naks: VecDeque<Nak>,
    /// How many of `naks`, from the front, have been written.
    sent: usize,
    /// Frame bytes of those.
    sent_bytes: usize,
    spare: Vec<Vec<u8>>,
    max_naks: usize,
    /// Repair bytes this session may still spend.
    budget: u64,
    /// The corrections block, kept up to date.
    pub report: CorrectionsReport,
}

impl NakBook {
    /// A book for a session that checks one gram in `interval` and repairs
    /// when `repair`.
    pub fn new(interval: u16, repair: bool, max_naks: u32, max_bytes: u64) -> Self {
        Self {
            naks: VecDeque::new(),
            sent: 0,
            sent_bytes: 0,
            spare: Vec::new(),
            max_naks: max_naks as usize,
            budget: if repair { max_bytes } else { 0 },
            report: CorrectionsReport {
                sample_interval: interval.max(1),
                flags: if repair {
                    pfs_wire::corrections::CORRECTIONS_FLAG_REPAIR
                } else {
                    0
                },
                ..CorrectionsReport::default()
            },
        }
    }

    /// Whether the session repairs at all.
    pub fn repairs(&self) -> bool {
        self.report.repair()
    }

    /// Whether gram `seq` is checked.
    pub fn checks(&self, seq: u64) -> bool {
        is_checked(seq, self.report.sample_interval)
    }

    /// A checked gram of `bytes` effective bytes was executed.
    pub fn checked(&mut self, bytes: u64) {
        self.report.checked_grams += 1;
        self.report.checked_bytes += bytes;
    }

    /// Whether a mismatching gram of `count` descriptors and `bytes`
    /// effective bytes can be NAKed now (limits of wire.md §13.7).
    pub fn can_nak(&self, count: u32, bytes: u64) -> bool {
        self.repairs()
            && (1..=MAX_CORRECTION_RANGES).contains(&count)
            && self.naks.len() < self.max_naks
            && bytes <= self.budget
    }

    /// Queues a NAK for gram `seq` (its `value`, its resolved descriptors).
    pub fn push(&mut self, seq: u64, value: u64, ranges: impl Iterator<Item = Descriptor>) {
        let mut body = self.spare.pop().unwrap_or_default();
        body.clear();
        body.resize(pfs_wire::corrections::CORRECTION_HEAD_LEN, 0);
        let (mut count, mut bytes) = (0u32, 0u64);
        for d in ranges {
            put_range(&mut body, d);
            count += 1;
            bytes += u64::from(d.len);
        }
        let head = CorrectionHead {
            seq,
            range_count: count,
            bytes,
            digest: value,
        };
        body[..pfs_wire::corrections::CORRECTION_HEAD_LEN].copy_from_slice(&head.emit());
        self.budget = self.budget.saturating_sub(bytes);
        self.report.nak_grams += 1;
        self.naks.push_back(Nak {
            seq,
            value,
            bytes,
            body,
        });
    }

    /// Takes `bytes` of the repair budget for a repair made without a NAK
    /// (payload mode); false when the budget cannot cover it.
    pub fn take_budget(&mut self, bytes: u64) -> bool {
        if !self.repairs() || bytes > self.budget {
            return false;
        }
        self.budget -= bytes;
        true
    }

    /// Appends to `out` the queued NAKs the window has room for; returns
    /// the bytes appended. One NAK always goes when none is unanswered.
    pub fn flush(&mut self, out: &mut Vec<u8>) -> u64 {
        let before = out.len();
        while let Some(nak) = self.naks.get(self.sent) {
            let len = nak.frame_len();
            if self.sent_bytes > 0 && self.sent_bytes + len > NAK_WINDOW {
                break;
            }
            put_frame(out, FrameType::Nak, 0, &nak.body);
            self.sent_bytes += len;
            self.sent += 1;
        }
        (out.len() - before) as u64
    }

    /// The oldest NAK written and unanswered: what the next REPAIR answers.
    pub fn oldest_sent(&self) -> Option<&Nak> {
        self.naks.front().filter(|_| self.sent > 0)
    }

    /// The oldest NAK's REPAIR has been processed: `repaired` when its
    /// ranges now match.
    pub fn answered(&mut self, repaired: bool) {
        if self.sent == 0 {
            return;
        }
        if let Some(nak) = self.naks.pop_front() {
            self.sent -= 1;
            self.sent_bytes -= nak.frame_len().min(self.sent_bytes);
            if repaired {
                self.report.repaired_grams += 1;
                self.report.repaired_bytes += nak.bytes;
            }
            self.spare.push(nak.body);
        }
    }

    /// A gram was repaired without a NAK (payload mode).
    pub fn repaired_locally(&mut self, bytes: u64) {
        self.report.repaired_grams += 1;
        self.report.repaired_bytes += bytes;
    }

    /// Whether every NAK has been answered.
    pub fn is_settled(&self) -> bool {
        self.naks.is_empty()
    }
}

/// What the sender remembers of one checked gram it sent.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// Its sequence number (`u64::MAX`: the slot is free, or its NAK was answered).
    seq: u64,
    /// The first 16 bytes of the BLAKE3 of its descriptor table.
    table: [u8; 16],
}

/// A NAK the sender owes a REPAIR.
#[derive(Debug)]
pub(crate) struct Owed {
    /// The NAK body (head, then ranges).
    pub body: Vec<u8>,
}

impl Owed {
    /// The NAK, decoded (checked when it was accepted).
    pub fn nak(&self) -> Option<GramNak<'_>> {
        GramNak::parse(&self.body).ok()
    }
}

/// The sender's corrections plane: a hash of each checked gram's table,
/// for the last [`SENDER_MEMORY`] grams, and the NAKs it owes a REPAIR.
#[derive(Debug)]
pub(crate) struct RepairBook {
    interval: u16,
    sent: Vec<Sent>,
    owed: VecDeque<Owed>,
    /// Frame bytes of the NAKs owed: a receiver keeps within [`NAK_WINDOW`],
    /// so this side never holds more.
    owed_bytes: usize,
    spare: Vec<Vec<u8>>,
    /// Arithmetic sessions: a NAK's ranges encoded again, to compare.
    scratch: TableWriter,
}

impl RepairBook {
    /// A book for a session of `encoding` that checks one gram in
    /// `interval` and plans `planned_grams` (0: unknown; its memory is then
    /// grown as grams go).
    pub fn new(encoding: Encoding, interval: u16, planned_grams: u64) -> Self {
        let checked = planned_grams.div_ceil(u64::from(interval.max(1)));
        Self {
            interval,
            sent: Vec::with_capacity(checked.min(SENDER_MEMORY) as usize),
            owed: VecDeque::new(),
            owed_bytes: 0,
            spare: Vec::new(),
            scratch: TableWriter::new(encoding, 0),
        }
    }

    /// Whether gram `seq` is checked.
    pub fn checks(&self, seq: u64) -> bool {
        is_checked(seq, self.interval)
    }

    /// Gram `seq`, checked, went out with descriptor `table`.
    pub fn record(&mut self, seq: u64, table: &[u8]) {
        let slot = (seq % SENDER_MEMORY) as usize;
        let entry = Sent {
            seq,
            table: table_hash(table),
        };
        if slot < self.sent.len() {
            self.sent[slot] = entry;
        } else {
            // Slots fill in order: seq grows by one per gram.
            self.sent.resize(
                slot,
                Sent {
                    seq: u64::MAX,
                    table: [0; 16],
                },
            );
            self.sent.push(entry);
        }
    }

    /// Checks a NAK body (`next_seq`: grams sent so far) and queues it.
    pub fn accept(&mut self, body: &[u8], next_seq: u64) -> Result<(), SessionError> {
        let nak = GramNak::parse(body).map_err(SessionError::malformed("NAK"))?;
        let seq = nak.head.seq;
        let refuse = |why| -> SessionError { Violation::from(GramViolation::NakRefused { seq, why }).into() };
        if seq >= next_seq {
            return Err(refuse("no such gram was sent"));
        }
        if !self.checks(seq) {
            return Err(refuse("the session does not check that gram"));
        }
        if next_seq - seq > SENDER_MEMORY {
            return Err(refuse("older than the grams this sender remembers"));
        }
        let frame_len = FRAME_HEADER_LEN + body.len();
        if !self.owed.is_empty() && self.owed_bytes + frame_len > NAK_WINDOW {
            return Err(refuse("more NAKs unanswered than the 64 KiB window allows"));
        }
        let slot = (seq % SENDER_MEMORY) as usize;
        let known = self.sent.get(slot).filter(|s| s.seq == seq).map(|s| s.table);
        let Some(known) = known else {
            return Err(refuse("already NAKed"));
        };
        let hash = match self.scratch.encoding() {
            Encoding::Absolute => table_hash(nak.ranges.as_bytes()),
            Encoding::Arithmetic => {
                self.scratch.clear();
                for d in nak.ranges.iter() {
                    if self.scratch.push(d).is_err() {
                        return Err(refuse("its ranges are not the gram's"));
                    }
                }
                table_hash(self.scratch.as_bytes())
            }
        };
        if hash != known {
            return Err(refuse("its ranges are not the gram's"));
        }
        // Answered once: a second NAK for it finds the slot free.
        self.sent[slot].seq = u64::MAX;
        let mut owed = self.spare.pop().unwrap_or_default();
        owed.clear();
        owed.extend_from_slice(body);
        self.owed.push_back(Owed { body: owed });
        self.owed_bytes += frame_len;
        Ok(())
    }

    /// The oldest NAK owed a REPAIR.
    pub fn next_owed(&self) -> Option<&Owed> {
        self.owed.front()
    }

    /// The oldest NAK's REPAIR has been handed out.
    pub fn paid(&mut self) {
        if let Some(o) = self.owed.pop_front() {
            self.owed_bytes -= (FRAME_HEADER_LEN + o.body.len()).min(self.owed_bytes);
            self.spare.push(o.body);
        }
    }

    /// Whether no REPAIR is owed.
    pub fn is_settled(&self) -> bool {
        self.owed.is_empty()
    }
}

/// The first 16 bytes of a table's BLAKE3: a receiver cannot make other
/// ranges hash the same (a 64-bit checksum it could).
fn table_hash(table: &[u8]) -> [u8; 16] {
    let h = blake3::hash(table);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_grams_follow_the_interval() {
        assert!((0..10).all(|s| is_checked(s, 0) && is_checked(s, 1)));
        let every_4: Vec<u64> = (0..10).filter(|&s| is_checked(s, 4)).collect();
        assert_eq!(every_4, [0, 4, 8]);
    }

    fn nak_frames(out: &[u8]) -> usize {
        let mut n = 0;
        let mut at = 0;
        while at < out.len() {
            let h = pfs_wire::FrameHeader::parse(&out[at..]).unwrap();
            assert_eq!(h.frame_type, FrameType::Nak);
            at += FRAME_HEADER_LEN + h.length as usize;
            n += 1;
        }
        n
    }

    #[test]
    fn the_window_holds_naks_back_until_answered() {
        let mut book = NakBook::new(1, true, 64, 1 << 40);
        // 4000 ranges: a 48 KiB NAK, one fits the window at a time.
        let big = |s: u64| {
            (0..4000u64).map(move |i| Descriptor {
                offset: s * 1_000_000 + i * 16,
                len: 16,
            })
        };
        for seq in 0..3 {
            assert!(book.can_nak(4000, 64_000));
            book.push(seq, 7, big(seq));
        }
        let mut out = Vec::new();
        book.flush(&mut out);
        assert_eq!(nak_frames(&out), 1);
        out.clear();
        assert_eq!(
            book.flush(&mut out),
            0,
            "nothing fits until the first is answered"
        );
        assert_eq!(book.oldest_sent().map(|n| n.seq), Some(0));
        book.answered(true);
        book.flush(&mut out);
        assert_eq!(nak_frames(&out), 1);
        assert_eq!(book.oldest_sent().map(|n| n.seq), Some(1));
        book.answered(false);
        out.clear();
        book.flush(&mut out);
        assert_eq!(nak_frames(&out), 1);
        book.answered(true);
        assert!(book.oldest_sent().is_none() && book.is_settled());
        assert_eq!((book.report.repaired_grams, book.report.nak_grams), (2, 3));
    }

    #[test]
    fn limits_stop_naks() {
        let mut book = NakBook::new(1, true, 2, 100);
        assert!(!book.can_nak(0, 0), "no ranges");
        assert!(!book.can_nak(MAX_CORRECTION_RANGES + 1, 1));
        assert!(!book.can_nak(1, 101), "over budget");
        book.push(0, 1, std::iter::once(Descriptor { offset: 0, len: 60 }));
        assert!(!book.can_nak(1, 60), "budget spent");
        book.push(1, 1, std::iter::once(Descriptor { offset: 0, len: 40 }));
        assert!(!book.can_nak(1, 0), "two unanswered");
        let off = NakBook::new(1, false, 2, 100);
        assert!(!off.can_nak(1, 1), "repair off");
    }

    #[test]
    fn the_sender_answers_only_naks_for_its_own_grams() {
        for encoding in [Encoding::Absolute, Encoding::Arithmetic] {
            let descs = [
                Descriptor {
                    offset: 4096,
                    len: 512,
                },
                Descriptor { offset: 100, len: 0 },
            ];
            let mut table = TableWriter::new(encoding, 2);
            descs.iter().for_each(|&d| table.push(d).unwrap());
            let mut book = RepairBook::new(encoding, 2, 3);
            book.record(0, table.as_bytes());
            book.record(2, table.as_bytes());
            let mut receiver = NakBook::new(2, true, 8, 1 << 30);
            receiver.push(2, 9, descs.iter().copied());
            let body = receiver.naks[0].body.clone();
            book.accept(&body, 3).unwrap();
            assert_eq!(
                book.next_owed().and_then(|o| o.nak()).map(|n| n.head.seq),
                Some(2)
            );
            book.paid();
            assert!(book.is_settled());
            let again = book.accept(&body, 3).unwrap_err();
            assert!(again.to_string().contains("already NAKed"), "{again}");
            // Other ranges for gram 0.
            let mut other = NakBook::new(2, true, 8, 1 << 30);
            other.push(0, 9, [Descriptor { offset: 0, len: 512 }].into_iter());
            let err = book.accept(&other.naks[0].body, 3).unwrap_err();
            assert!(err.to_string().contains("not the gram's"), "{err}");
            let mut unchecked = NakBook::new(2, true, 8, 1 << 30);
            unchecked.push(1, 9, descs.iter().copied());
            let err = book.accept(&unchecked.naks[0].body, 3).unwrap_err();
            assert!(err.to_string().contains("does not check"), "{err}");
            let err = book.accept(&body, 2).unwrap_err();
            assert!(err.to_string().contains("no such gram"), "{err}");
        }
    }

    #[test]
    fn the_sender_holds_no_more_naks_than_the_window() {
        // 3000-range grams: 36 KiB NAKs, one fits the window, two do not.
        let descs: Vec<Descriptor> = (0..3000u64)
            .map(|i| Descriptor {
                offset: i * 64,
                len: 64,
            })
            .collect();
        let mut table = TableWriter::new(Encoding::Absolute, descs.len());
        descs.iter().for_each(|&d| table.push(d).unwrap());
        let mut book = RepairBook::new(Encoding::Absolute, 1, 0);
        let mut receiver = NakBook::new(1, true, 8, u64::MAX);
        for seq in 0..3 {
            book.record(seq, table.as_bytes());
            receiver.push(seq, 1, descs.iter().copied());
        }
        book.accept(&receiver.naks[0].body, 3).unwrap();
        let err = book.accept(&receiver.naks[1].body, 3).unwrap_err();
        assert!(err.to_string().contains("window"), "{err}");
        book.paid();
        book.accept(&receiver.naks[2].body, 3).unwrap();
    }
}
