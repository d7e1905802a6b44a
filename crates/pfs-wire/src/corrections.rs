//! The corrections plane of blob sessions (`docs/wire.md` §13): the gram
//! NAK (frame type 7 in a blob session), the REPAIR that answers it (type
//! 8), and the corrections block a receiver appends to its report.
//!
//! NAK and REPAIR share one 32-byte head (`seq`, `range_count`, `bytes`,
//! `digest`) followed by `range_count` absolute ranges — the gram's
//! descriptors as the receiver resolved them, 12 bytes each, the layout of
//! an absolute descriptor table (§3.3) — and, in REPAIR only, the `bytes`
//! payload bytes of those ranges concatenated in order. The files protocol
//! gives the same two frame types other bodies (§10.7, §10.8): a frame's
//! body is read by the protocol of its session.
//!
//! Decoding is zero-copy and total: [`GramNak::parse`] and
//! [`GramRepair::parse`] check a whole body, [`CorrectionHead::parse`] and
//! [`Ranges::parse`] let a receiver check a REPAIR's head and ranges before
//! its payload has arrived. The fixed layouts live in the private `field`
//! tables.

use crate::control::{Report, REPORT_LEN};
use crate::desc::{Descriptor, ABSOLUTE_DESC_LEN};
use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Size of the head NAK and REPAIR share.
pub const CORRECTION_HEAD_LEN: usize = 32;
/// Most ranges in one NAK or REPAIR: a NAK body (head + ranges) stays
/// within the 64 KiB control-frame cap.
pub const MAX_CORRECTION_RANGES: u32 = 4096;
/// Size of one range (an absolute descriptor).
pub const RANGE_LEN: usize = ABSOLUTE_DESC_LEN;
/// Size of the corrections block after a report.
pub const CORRECTIONS_REPORT_LEN: usize = 48;
/// A report body with its corrections block.
pub const REPORT_WITH_CORRECTIONS_LEN: usize = REPORT_LEN + CORRECTIONS_REPORT_LEN;
/// Corrections block flag: the session repaired mismatching grams (REPAIR
/// was granted in HELLO_ACK).
pub const CORRECTIONS_FLAG_REPAIR: u8 = 0x01;

/// Byte ranges of the shared head and of the report block (`docs/wire.md` §13).
mod field {
    use super::{tiles, Field};

    /// NAK and REPAIR head; the ranges follow.
    pub mod head {
        use super::{tiles, Field};
        use crate::corrections::CORRECTION_HEAD_LEN as LEN;

        pub const SEQ: Field = Field::new(0, 8);
        pub const RANGE_COUNT: Field = Field::new(8, 4);
        pub const RESERVED: Field = Field::new(12, 4);
        pub const BYTES: Field = Field::new(16, 8);
        pub const DIGEST: Field = Field::new(24, 8);

        const _: () = assert!(tiles(&[SEQ, RANGE_COUNT, RESERVED, BYTES, DIGEST], LEN));
    }

    /// One range: an absolute descriptor.
    pub mod range {
        use super::{tiles, Field};
        use crate::corrections::RANGE_LEN as LEN;

        pub const OFFSET: Field = Field::new(0, 8);
        pub const LEN_: Field = Field::new(8, 4);

        const _: () = assert!(tiles(&[OFFSET, LEN_], LEN));
    }

    /// The corrections block after the 160-byte report.
    pub mod report {
        use super::{tiles, Field};
        use crate::corrections::CORRECTIONS_REPORT_LEN as LEN;

        pub const REPAIRED_GRAMS: Field = Field::new(0, 8);
        pub const REPAIRED_BYTES: Field = Field::new(8, 8);
        pub const NAK_GRAMS: Field = Field::new(16, 8);
        pub const CHECKED_GRAMS: Field = Field::new(24, 8);
        pub const CHECKED_BYTES: Field = Field::new(32, 8);
        pub const SAMPLE_INTERVAL: Field = Field::new(40, 2);
        pub const FLAGS: Field = Field::new(42, 1);
        pub const RESERVED: Field = Field::new(43, 5);

        const _: () = assert!(tiles(
            &[
                REPAIRED_GRAMS,
                REPAIRED_BYTES,
                NAK_GRAMS,
                CHECKED_GRAMS,
                CHECKED_BYTES,
                SAMPLE_INTERVAL,
                FLAGS,
                RESERVED
            ],
            LEN
        ));
    }
}

/// The head of a gram NAK or REPAIR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorrectionHead {
    /// Sequence number of the gram it is about.
    pub seq: u64,
    /// Ranges that follow (1 ..= [`MAX_CORRECTION_RANGES`]).
    pub range_count: u32,
    /// Sum of the ranges' lengths: REPAIR's payload length.
    pub bytes: u64,
    /// NAK: the gram's `integrity_value` as the receiver read it. REPAIR:
    /// the digest (the session's algorithm) of the payload.
    pub digest: u64,
}

impl CorrectionHead {
    /// Checks and decodes the first 32 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        use field::head as f;
        let b = Reader::<CORRECTION_HEAD_LEN>::new(buf)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let range_count = b.u32(f::RANGE_COUNT);
        if range_count == 0 {
            return Err(WireError::LengthMismatch);
        }
        if range_count > MAX_CORRECTION_RANGES {
            return Err(WireError::TooLarge);
        }
        Ok(Self {
            seq: b.u64(f::SEQ),
            range_count,
            bytes: b.u64(f::BYTES),
            digest: b.u64(f::DIGEST),
        })
    }

    /// Encodes the head.
    pub fn emit(&self) -> [u8; CORRECTION_HEAD_LEN] {
        use field::head as f;
        let mut w = Writer::<CORRECTION_HEAD_LEN>::new();
        w.u64(f::SEQ, self.seq)
            .u32(f::RANGE_COUNT, self.range_count)
            .u64(f::BYTES, self.bytes)
            .u64(f::DIGEST, self.digest);
        w.finish()
    }

    /// Bytes of the ranges after the head.
    pub fn table_len(&self) -> usize {
        self.range_count as usize * RANGE_LEN
    }

    /// The body length of a NAK with this head.
    pub fn nak_body_len(&self) -> u64 {
        (CORRECTION_HEAD_LEN + self.table_len()) as u64
    }

    /// The body length of a REPAIR with this head (saturating: a length no
    /// frame can have).
    pub fn repair_body_len(&self) -> u64 {
        self.nak_body_len().saturating_add(self.bytes)
    }
}

/// Checked ranges of a NAK or REPAIR: every range's end fits in 64 bits
/// and their lengths sum to the head's `bytes`. Iterating cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges<'a> {
    table: &'a [u8],
}

impl<'a> Ranges<'a> {
    /// Checks `table`, which must be exactly the head's `range_count` ranges.
    pub fn parse(head: &CorrectionHead, table: &'a [u8]) -> Result<Self, WireError> {
        if table.len() != head.table_len() {
            return Err(WireError::LengthMismatch);
        }
        let mut sum = 0u64;
        for r in table.chunks_exact(RANGE_LEN) {
            let d = range(r);
            d.end().ok_or(WireError::DescriptorOverflow)?;
            sum = sum.saturating_add(u64::from(d.len));
        }
        if sum != head.bytes {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self { table })
    }

    /// The ranges, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Descriptor> + 'a {
        self.table.chunks_exact(RANGE_LEN).map(range)
    }

    /// The encoded ranges (an absolute descriptor table).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.table
    }

    /// How many ranges.
    pub fn len(&self) -> usize {
        self.table.len() / RANGE_LEN
    }

    /// Always false for checked ranges (a NAK names at least one).
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

/// One range from exactly [`RANGE_LEN`] bytes (zeros if fewer: never, by
/// the callers' `chunks_exact`).
fn range(bytes: &[u8]) -> Descriptor {
    use field::range as f;
    match Reader::<RANGE_LEN>::new(bytes) {
        Ok(b) => Descriptor {
            offset: b.u64(f::OFFSET),
            len: b.u32(f::LEN_),
        },
        Err(_) => Descriptor::default(),
    }
}

/// Appends one range.
pub fn put_range(out: &mut Vec<u8>, d: Descriptor) {
    use field::range as f;
    let mut w = Writer::<RANGE_LEN>::new();
    w.u64(f::OFFSET, d.offset).u32(f::LEN_, d.len);
    out.extend_from_slice(&w.finish());
}

/// A gram NAK: the receiver's digest of a gram's effective bytes did not
/// match; it names the gram and its ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GramNak<'a> {
    /// The head (`digest`: the gram's value as received).
    pub head: CorrectionHead,
    /// The gram's descriptors, resolved, in table order.
    pub ranges: Ranges<'a>,
}

impl<'a> GramNak<'a> {
    /// Checks and decodes a NAK body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let head = CorrectionHead::parse(body)?;
        if body.len() as u64 != head.nak_body_len() {
            return Err(WireError::LengthMismatch);
        }
        let table = body.get(CORRECTION_HEAD_LEN..).ok_or(WireError::Truncated)?;
        Ok(Self {
            head,
            ranges: Ranges::parse(&head, table)?,
        })
    }

    /// Appends the encoded body.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head.emit());
        out.extend_from_slice(self.ranges.as_bytes());
    }
}

/// A REPAIR in a blob session: the bytes of a NAKed gram's ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GramRepair<'a> {
    /// The head (`digest`: of `payload`).
    pub head: CorrectionHead,
    /// The ranges, as the NAK named them.
    pub ranges: Ranges<'a>,
    /// The ranges' bytes, concatenated in order.
    pub payload: &'a [u8],
}

impl<'a> GramRepair<'a> {
    /// Checks and decodes a whole REPAIR body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let head = CorrectionHead::parse(body)?;
        if body.len() as u64 != head.repair_body_len() {
            return Err(WireError::LengthMismatch);
        }
        let table_end = CORRECTION_HEAD_LEN + head.table_len();
        let table = body
            .get(CORRECTION_HEAD_LEN..table_end)
            .ok_or(WireError::Truncated)?;
        Ok(Self {
            head,
            ranges: Ranges::parse(&head, table)?,
            payload: body.get(table_end..).ok_or(WireError::Truncated)?,
        })
    }

    /// Appends the encoded body.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head.emit());
        out.extend_from_slice(self.ranges.as_bytes());
        out.extend_from_slice(self.payload);
    }
}

/// The corrections block a receiver appends to its report when the session
/// negotiated the corrections plane (HELLO `CORRECTIONS`, §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CorrectionsReport {
    /// Mismatching grams whose bytes were repaired and checked again.
    pub repaired_grams: u64,
    /// Effective bytes of the repaired grams (what was carried to repair them).
    pub repaired_bytes: u64,
    /// Grams NAKed (each answered by one REPAIR).
    pub nak_grams: u64,
    /// Grams whose digest the receiver computed (one in `sample_interval`).
    pub checked_grams: u64,
    /// Effective bytes of the checked grams.
    pub checked_bytes: u64,
    /// The session checked grams whose `seq` is a multiple of this (1: all).
    pub sample_interval: u16,
    /// [`CORRECTIONS_FLAG_REPAIR`].
    pub flags: u8,
}

impl CorrectionsReport {
    /// Decodes a corrections block (exactly 48 bytes).
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::report as f;
        let b = Reader::<CORRECTIONS_REPORT_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let flags = b.u8(f::FLAGS);
        if flags & !CORRECTIONS_FLAG_REPAIR != 0 {
            return Err(WireError::BadFlags);
        }
        Ok(Self {
            repaired_grams: b.u64(f::REPAIRED_GRAMS),
            repaired_bytes: b.u64(f::REPAIRED_BYTES),
            nak_grams: b.u64(f::NAK_GRAMS),
            checked_grams: b.u64(f::CHECKED_GRAMS),
            checked_bytes: b.u64(f::CHECKED_BYTES),
            sample_interval: b.u16(f::SAMPLE_INTERVAL),
            flags,
        })
    }

    /// Encodes the block.
    pub fn emit(&self) -> [u8; CORRECTIONS_REPORT_LEN] {
        use field::report as f;
        let mut w = Writer::<CORRECTIONS_REPORT_LEN>::new();
        w.u64(f::REPAIRED_GRAMS, self.repaired_grams)
            .u64(f::REPAIRED_BYTES, self.repaired_bytes)
            .u64(f::NAK_GRAMS, self.nak_grams)
            .u64(f::CHECKED_GRAMS, self.checked_grams)
            .u64(f::CHECKED_BYTES, self.checked_bytes)
            .u16(f::SAMPLE_INTERVAL, self.sample_interval)
            .u8(f::FLAGS, self.flags);
        w.finish()
    }

    /// Whether the session repaired (REPAIR granted).
    pub fn repair(&self) -> bool {
        self.flags & CORRECTIONS_FLAG_REPAIR != 0
    }
}

/// Decodes a COMPLETE(REPORT) body: the 160-byte report alone, or followed
/// by the corrections block. Which one a session must carry is the
/// caller's check (HELLO_ACK `CORRECTIONS`).
pub fn parse_report(body: &[u8]) -> Result<(Report, Option<CorrectionsReport>), WireError> {
    if body.len() < REPORT_LEN {
        return Err(WireError::Truncated);
    }
    if body.len() != REPORT_LEN && body.len() != REPORT_WITH_CORRECTIONS_LEN {
        return Err(WireError::LengthMismatch);
    }
    let (base, block) = body.split_at(REPORT_LEN);
    let report = Report::parse(base)?;
    let corrections = if block.is_empty() {
        None
    } else {
        Some(CorrectionsReport::parse(block)?)
    };
    Ok((report, corrections))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nak_body(seq: u64, ranges: &[Descriptor], digest: u64) -> Vec<u8> {
        let head = CorrectionHead {
            seq,
            range_count: ranges.len() as u32,
            bytes: ranges.iter().map(|d| u64::from(d.len)).sum(),
            digest,
        };
        let mut out = head.emit().to_vec();
        ranges.iter().for_each(|&d| put_range(&mut out, d));
        out
    }

    #[test]
    fn nak_roundtrip_and_checks() {
        let ranges = [
            Descriptor {
                offset: 4096,
                len: 512,
            },
            Descriptor { offset: 0, len: 0 },
            Descriptor {
                offset: 1024,
                len: 100,
            },
        ];
        let body = nak_body(7, &ranges, 0xabcd);
        let nak = GramNak::parse(&body).unwrap();
        assert_eq!(nak.head.seq, 7);
        assert_eq!(nak.head.bytes, 612);
        assert_eq!(nak.ranges.iter().collect::<Vec<_>>(), ranges);
        let mut again = Vec::new();
        nak.emit(&mut again);
        assert_eq!(again, body);

        assert_eq!(GramNak::parse(&body[..31]), Err(WireError::Truncated));
        assert_eq!(
            GramNak::parse(&body[..body.len() - 1]),
            Err(WireError::LengthMismatch)
        );
        let mut bad = body.clone();
        bad[12] = 1;
        assert_eq!(GramNak::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = body.clone();
        bad[16] ^= 1;
        assert_eq!(
            GramNak::parse(&bad),
            Err(WireError::LengthMismatch),
            "bytes ≠ sum"
        );
        let none = nak_body(1, &[], 0);
        assert_eq!(GramNak::parse(&none), Err(WireError::LengthMismatch));
        let mut many = nak_body(1, &ranges, 0);
        many[8..12].copy_from_slice(&(MAX_CORRECTION_RANGES + 1).to_le_bytes());
        assert_eq!(GramNak::parse(&many), Err(WireError::TooLarge));
        let over = nak_body(
            1,
            &[Descriptor {
                offset: u64::MAX,
                len: 1,
            }],
            0,
        );
        assert_eq!(GramNak::parse(&over), Err(WireError::DescriptorOverflow));
    }

    #[test]
    fn repair_carries_exactly_its_bytes() {
        let ranges = [
            Descriptor { offset: 16, len: 3 },
            Descriptor { offset: 64, len: 2 },
        ];
        let mut body = nak_body(3, &ranges, 9);
        body.extend_from_slice(b"abcde");
        let r = GramRepair::parse(&body).unwrap();
        assert_eq!(r.payload, b"abcde");
        let mut again = Vec::new();
        r.emit(&mut again);
        assert_eq!(again, body);
        body.push(0);
        assert_eq!(GramRepair::parse(&body), Err(WireError::LengthMismatch));
        body.truncate(body.len() - 2);
        assert_eq!(GramRepair::parse(&body), Err(WireError::LengthMismatch));
        // A NAK is not a REPAIR: its payload is missing.
        assert_eq!(
            GramRepair::parse(&nak_body(3, &ranges, 9)),
            Err(WireError::LengthMismatch)
        );
    }

    #[test]
    fn report_with_and_without_block() {
        let r = Report {
            grams: 4,
            ..Report::default()
        };
        let c = CorrectionsReport {
            repaired_grams: 1,
            repaired_bytes: 4096,
            nak_grams: 1,
            checked_grams: 4,
            checked_bytes: 1 << 20,
            sample_interval: 1,
            flags: CORRECTIONS_FLAG_REPAIR,
        };
        let mut body = r.emit().to_vec();
        assert_eq!(parse_report(&body), Ok((r, None)));
        body.extend_from_slice(&c.emit());
        assert_eq!(parse_report(&body), Ok((r, Some(c))));
        assert_eq!(parse_report(&body[..200]), Err(WireError::LengthMismatch));
        assert_eq!(parse_report(&body[..100]), Err(WireError::Truncated));
        let mut bad = body.clone();
        bad[REPORT_LEN + 42] = 2;
        assert_eq!(parse_report(&bad), Err(WireError::BadFlags));
        let mut bad = body;
        bad[REPORT_LEN + 47] = 1;
        assert_eq!(parse_report(&bad), Err(WireError::ReservedNonZero));
    }

    proptest! {
        #[test]
        fn nak_parse_emit(seq: u64, digest: u64, ranges in proptest::collection::vec((0u64..1 << 40, any::<u32>()), 1..64)) {
            let ranges: Vec<Descriptor> = ranges.into_iter().map(|(offset, len)| Descriptor { offset, len }).collect();
            let body = nak_body(seq, &ranges, digest);
            let nak = GramNak::parse(&body).unwrap();
            prop_assert_eq!(nak.ranges.iter().collect::<Vec<_>>(), ranges);
            let mut again = Vec::new();
            nak.emit(&mut again);
            prop_assert_eq!(again, body);
        }

        #[test]
        fn corrections_report_parse_emit(v: [u64; 5], interval: u16, repair: bool) {
            let c = CorrectionsReport {
                repaired_grams: v[0],
                repaired_bytes: v[1],
                nak_grams: v[2],
                checked_grams: v[3],
                checked_bytes: v[4],
                sample_interval: interval,
                flags: if repair { CORRECTIONS_FLAG_REPAIR } else { 0 },
            };
            prop_assert_eq!(CorrectionsReport::parse(&c.emit()), Ok(c));
        }
    }
}
