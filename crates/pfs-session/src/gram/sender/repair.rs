//! The sender's side of the corrections plane (docs/wire.md §13): in
//! sessions where the receiver granted REPAIR, the [`RepairBook`] of the
//! grams sent and the NAKs owed, the REPAIR being sent (its frame header,
//! head, ranges and the blob ranges of its bytes) and what was repaired.

use pfs_exec::execute::resolve;
use pfs_exec::Digest;
use pfs_wire::corrections::{CorrectionHead, CORRECTION_HEAD_LEN};
use pfs_wire::{Descriptor, FrameHeader, FrameType, FRAME_HEADER_LEN};

use crate::error::LocalError;
use crate::gram::corrections::RepairBook;
use crate::SessionError;

/// Repairs owed and sent.
#[derive(Debug, Default)]
pub(super) struct Repairing {
    /// Sessions where REPAIR was granted: what was sent, what is owed.
    pub(super) book: Option<RepairBook>,
    /// The REPAIR being sent.
    pub(super) frame_header: [u8; FRAME_HEADER_LEN],
    pub(super) head: [u8; CORRECTION_HEAD_LEN],
    pub(super) table: Vec<u8>,
    /// The blob ranges of its bytes, `(start, end)`.
    pub(super) ranges: Vec<(usize, usize)>,
    /// REPAIRs sent, and the bytes they carried.
    pub(super) sent: u64,
    pub(super) bytes_sent: u64,
}

impl Repairing {
    /// Whether some REPAIR may be owed (REPAIR was granted).
    pub(super) fn granted(&self) -> bool {
        self.book.is_some()
    }

    /// Whether every NAK is answered.
    pub(super) fn is_settled(&self) -> bool {
        self.book.as_ref().is_none_or(RepairBook::is_settled)
    }

    /// Builds the REPAIR for the oldest NAK owed, if any: its ranges read
    /// from `blob`, their `digest`. Returns its frame's length.
    pub(super) fn next(&mut self, blob: &[u8], digest: &mut Digest) -> Result<Option<u64>, SessionError> {
        let Some(book) = self.book.as_mut() else {
            return Ok(None);
        };
        loop {
            let Some(owed) = book.next_owed() else {
                return Ok(None);
            };
            // Accepted NAKs parse (RepairBook::accept checked them).
            let Some(nak) = owed.nak() else {
                book.paid();
                continue;
            };
            digest.reset();
            self.ranges.clear();
            for (i, d) in nak.ranges.iter().enumerate() {
                // The ranges are a gram's this side sent (RepairBook::accept).
                digest.update(resolve(blob, d, i as u32)?);
                add_range(&mut self.ranges, d);
            }
            let head = CorrectionHead {
                digest: digest.value(),
                ..nak.head
            };
            self.table.clear();
            self.table.extend_from_slice(nak.ranges.as_bytes());
            let length = u32::try_from(head.repair_body_len())
                .map_err(|_| LocalError::FrameTooLarge { what: "REPAIR" })?;
            self.frame_header = FrameHeader {
                frame_type: FrameType::Repair,
                flags: 0,
                length,
            }
            .emit();
            self.head = head.emit();
            book.paid();
            self.sent += 1;
            self.bytes_sent += head.bytes;
            return Ok(Some(FRAME_HEADER_LEN as u64 + u64::from(length)));
        }
    }
}

/// Adds range `d` to a REPAIR's blob `ranges`: merged with the last if
/// contiguous, left out if empty.
#[inline]
fn add_range(ranges: &mut Vec<(usize, usize)>, d: Descriptor) {
    let (s, e) = (d.offset as usize, d.offset as usize + d.len as usize);
    match ranges.last_mut() {
        Some(last) if last.1 == s => last.1 = e,
        _ if s == e => {}
        _ => ranges.push((s, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_empty_ones_go() {
        let mut r = Repairing::default();
        assert!(!r.granted() && r.is_settled());
        for (offset, len) in [(0, 4), (4, 0), (4, 4), (9, 0), (20, 1)] {
            add_range(&mut r.ranges, Descriptor { offset, len });
        }
        assert_eq!(r.ranges, [(0, 8), (20, 21)]);
    }
}
