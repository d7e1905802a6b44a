//! Descriptor tables: the two encodings of a list of `(offset, len)` pairs.
//!
//! * **absolute** — 12 bytes each: `offset: u64`, `len: u32`.
//! * **arithmetic** — the first descriptor is `offset: u64` then
//!   `varint(len)`; every later one is `varint(zigzag(offset - prev_end))`
//!   then `varint(len)`, where `prev_end` is the previous descriptor's
//!   `offset + len`. A sequential schedule costs one byte of delta per
//!   descriptor.
//!
//! Decoding is a lazy, allocation-free iterator over the table bytes; every
//! error is typed and no input makes it panic. Bounds against a blob are the
//! receiver's business (it owns the blob), not the codec's. The fixed
//! pieces (an absolute descriptor, the arithmetic table's first offset) have
//! their byte ranges in the private `field` table.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::varint::{get_varint, put_varint, zigzag_decode, zigzag_encode};
use crate::WireError;

/// Size of one absolute descriptor.
pub const ABSOLUTE_DESC_LEN: usize = 12;

/// Byte ranges of the fixed pieces of a table (`docs/wire.md` §3.3, §3.4).
mod field {
    use super::{tiles, Field, ABSOLUTE_DESC_LEN};

    /// An absolute descriptor: offset, then length.
    pub const OFFSET: Field = Field::new(0, 8);
    pub const LEN: Field = Field::new(8, 4);

    const _: () = assert!(tiles(&[OFFSET, LEN], ABSOLUTE_DESC_LEN));

    /// An arithmetic table opens with its first offset, absolute.
    pub const FIRST_OFFSET: Field = Field::new(0, 8);
    pub const FIRST_OFFSET_LEN: usize = 8;

    const _: () = assert!(tiles(&[FIRST_OFFSET], FIRST_OFFSET_LEN));
}

/// One reference into the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Descriptor {
    /// Byte offset into the blob.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl Descriptor {
    /// `offset + len`, or `None` when it overflows.
    #[inline]
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(u64::from(self.len))
    }
}

/// Descriptor table encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Encoding {
    /// Fixed 12-byte descriptors.
    Absolute = 0,
    /// First offset absolute, then zigzag-varint deltas and varint lengths.
    Arithmetic = 1,
}

impl Encoding {
    /// Parses an encoding number.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(Self::Absolute),
            1 => Ok(Self::Arithmetic),
            other => Err(WireError::UnknownEncoding(other)),
        }
    }

    /// Lower-case name used on the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Self::Absolute => "absolute",
            Self::Arithmetic => "arithmetic",
        }
    }
}

/// Lazy decoder over a descriptor table. Yields `Err` once and then stops
/// on the first malformed descriptor; yields `Err(TrailingBytes)` if bytes
/// remain after `count` descriptors.
#[derive(Debug, Clone)]
pub struct DescIter<'a> {
    table: &'a [u8],
    pos: usize,
    remaining: u32,
    encoding: Encoding,
    prev_end: Option<u64>,
    failed: bool,
}

impl<'a> DescIter<'a> {
    /// Starts decoding `count` descriptors of `encoding` from `table`.
    pub fn new(table: &'a [u8], encoding: Encoding, count: u32) -> Self {
        Self {
            table,
            pos: 0,
            remaining: count,
            encoding,
            prev_end: None,
            failed: false,
        }
    }

    fn fail(&mut self, e: WireError) -> Option<Result<Descriptor, WireError>> {
        self.failed = true;
        Some(Err(e))
    }

    #[inline]
    fn next_absolute(&mut self) -> Result<Descriptor, WireError> {
        let rest = self.table.get(self.pos..).unwrap_or_default();
        let b = Reader::<ABSOLUTE_DESC_LEN>::new(rest).map_err(|_| WireError::TableTruncated)?;
        let d = Descriptor {
            offset: b.u64(field::OFFSET),
            len: b.u32(field::LEN),
        };
        d.end().ok_or(WireError::DescriptorOverflow)?;
        self.pos += ABSOLUTE_DESC_LEN;
        Ok(d)
    }

    #[inline]
    fn next_arithmetic(&mut self) -> Result<Descriptor, WireError> {
        let rest = self.table.get(self.pos..).unwrap_or_default();
        let (offset, used) = match self.prev_end {
            None => {
                let b = Reader::<{ field::FIRST_OFFSET_LEN }>::new(rest)
                    .map_err(|_| WireError::TableTruncated)?;
                (b.u64(field::FIRST_OFFSET), field::FIRST_OFFSET_LEN)
            }
            Some(prev_end) => {
                let (zz, used) = get_varint(rest).map_err(truncated_as_table)?;
                let offset = i128::from(prev_end) + i128::from(zigzag_decode(zz));
                let offset = u64::try_from(offset).map_err(|_| WireError::DescriptorOverflow)?;
                (offset, used)
            }
        };
        let after = rest.get(used..).unwrap_or_default();
        let (len, used_len) = get_varint(after).map_err(truncated_as_table)?;
        let len = u32::try_from(len).map_err(|_| WireError::DescriptorOverflow)?;
        let d = Descriptor { offset, len };
        self.prev_end = Some(d.end().ok_or(WireError::DescriptorOverflow)?);
        self.pos += used + used_len;
        Ok(d)
    }
}

fn truncated_as_table(e: WireError) -> WireError {
    if e == WireError::Truncated {
        WireError::TableTruncated
    } else {
        e
    }
}

impl Iterator for DescIter<'_> {
    type Item = Result<Descriptor, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if self.pos != self.table.len() {
                return self.fail(WireError::TrailingBytes);
            }
            return None;
        }
        let r = match self.encoding {
            Encoding::Absolute => self.next_absolute(),
            Encoding::Arithmetic => self.next_arithmetic(),
        };
        match r {
            Ok(d) => {
                self.remaining -= 1;
                Some(Ok(d))
            }
            Err(e) => self.fail(e),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize + 1))
    }
}

/// Why a descriptor cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// `offset + len` overflows `u64`.
    Overflow,
    /// The delta from the previous end does not fit in an `i64`.
    DeltaOutOfRange,
    /// More than `u32::MAX` descriptors.
    TooMany,
}

impl core::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Overflow => "descriptor end overflows u64",
            Self::DeltaOutOfRange => "descriptor delta does not fit in i64",
            Self::TooMany => "more than u32::MAX descriptors",
        })
    }
}

impl std::error::Error for EncodeError {}

/// Builds a descriptor table into a reusable buffer; `clear` keeps the
/// capacity so a sender allocates once, not per gram.
#[derive(Debug, Clone)]
pub struct TableWriter {
    encoding: Encoding,
    buf: Vec<u8>,
    count: u32,
    prev_end: u64,
    total_len: u64,
}

impl TableWriter {
    /// A writer with room for `capacity_descs` descriptors before it grows.
    pub fn new(encoding: Encoding, capacity_descs: usize) -> Self {
        Self {
            encoding,
            buf: Vec::with_capacity(capacity_descs * ABSOLUTE_DESC_LEN + 16),
            count: 0,
            prev_end: 0,
            total_len: 0,
        }
    }

    /// Empties the table, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.prev_end = 0;
        self.total_len = 0;
    }

    /// Appends one descriptor.
    #[inline]
    pub fn push(&mut self, d: Descriptor) -> Result<(), EncodeError> {
        let end = d.end().ok_or(EncodeError::Overflow)?;
        self.count = self.count.checked_add(1).ok_or(EncodeError::TooMany)?;
        match self.encoding {
            Encoding::Absolute => {
                // One 12-byte append: a single capacity check per descriptor.
                let mut w = Writer::<ABSOLUTE_DESC_LEN>::new();
                w.u64(field::OFFSET, d.offset).u32(field::LEN, d.len);
                self.buf.extend_from_slice(&w.finish());
            }
            Encoding::Arithmetic => {
                if self.count == 1 {
                    let mut w = Writer::<{ field::FIRST_OFFSET_LEN }>::new();
                    w.u64(field::FIRST_OFFSET, d.offset);
                    self.buf.extend_from_slice(&w.finish());
                } else {
                    let delta = i128::from(d.offset) - i128::from(self.prev_end);
                    let delta = i64::try_from(delta).map_err(|_| {
                        self.count -= 1;
                        EncodeError::DeltaOutOfRange
                    })?;
                    put_varint(&mut self.buf, zigzag_encode(delta));
                }
                put_varint(&mut self.buf, u64::from(d.len));
            }
        }
        self.prev_end = end;
        self.total_len += u64::from(d.len);
        Ok(())
    }

    /// The encoded table.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Descriptors pushed since the last `clear`.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Sum of the lengths pushed (the gram's effective bytes).
    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// The encoding in use.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }
}

/// Encodes `descs` into a fresh table (convenience for tests and tools).
pub fn encode_table(encoding: Encoding, descs: &[Descriptor]) -> Result<Vec<u8>, EncodeError> {
    let mut w = TableWriter::new(encoding, descs.len());
    for &d in descs {
        w.push(d)?;
    }
    Ok(w.buf)
}

/// Decodes a whole table into a `Vec` (convenience for tests and tools).
pub fn decode_table(table: &[u8], encoding: Encoding, count: u32) -> Result<Vec<Descriptor>, WireError> {
    DescIter::new(table, encoding, count).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(offset: u64, len: u32) -> Descriptor {
        Descriptor { offset, len }
    }

    #[test]
    fn sequential_arithmetic_is_compact() {
        let descs: Vec<_> = (0..1024u64).map(|i| d(i * 4096, 4096)).collect();
        let t = encode_table(Encoding::Arithmetic, &descs).unwrap();
        // 8 + 2 for the first, then 1 (delta 0) + 2 (len 4096) each.
        assert_eq!(t.len(), 10 + 1023 * 3);
        assert_eq!(decode_table(&t, Encoding::Arithmetic, 1024).unwrap(), descs);
    }

    #[test]
    fn backward_delta_and_errors() {
        let descs = [d(1000, 10), d(0, 5), d(1 << 40, 7)];
        for enc in [Encoding::Absolute, Encoding::Arithmetic] {
            let t = encode_table(enc, &descs).unwrap();
            assert_eq!(decode_table(&t, enc, 3).unwrap(), descs);
            // one descriptor fewer than declared
            assert_eq!(decode_table(&t, enc, 4), Err(WireError::TableTruncated));
            // trailing bytes after the declared count
            assert_eq!(decode_table(&t, enc, 2), Err(WireError::TrailingBytes));
        }
        assert_eq!(
            encode_table(Encoding::Absolute, &[d(u64::MAX, 1)]),
            Err(EncodeError::Overflow)
        );
        assert_eq!(
            encode_table(Encoding::Arithmetic, &[d(0, 1), d(u64::MAX - 1, 1)]),
            Err(EncodeError::DeltaOutOfRange)
        );
    }

    #[test]
    fn decoder_rejects_overflowing_descriptors() {
        // absolute: offset u64::MAX, len 1
        let mut t = u64::MAX.to_le_bytes().to_vec();
        t.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            decode_table(&t, Encoding::Absolute, 1),
            Err(WireError::DescriptorOverflow)
        );
        // arithmetic: length over u32
        let mut t = 0u64.to_le_bytes().to_vec();
        put_varint(&mut t, u64::from(u32::MAX) + 1);
        assert_eq!(
            decode_table(&t, Encoding::Arithmetic, 1),
            Err(WireError::DescriptorOverflow)
        );
        // arithmetic: negative offset
        let mut t = 0u64.to_le_bytes().to_vec();
        put_varint(&mut t, 1);
        put_varint(&mut t, zigzag_encode(-5));
        put_varint(&mut t, 1);
        assert_eq!(
            decode_table(&t, Encoding::Arithmetic, 2),
            Err(WireError::DescriptorOverflow)
        );
    }

    fn arb_descs() -> impl Strategy<Value = Vec<Descriptor>> {
        prop::collection::vec(
            (0u64..(1u64 << 62), any::<u32>()).prop_map(|(offset, len)| d(offset, len)),
            0..200,
        )
    }

    proptest! {
        #[test]
        fn absolute_roundtrip(descs in arb_descs()) {
            let t = encode_table(Encoding::Absolute, &descs).unwrap();
            prop_assert_eq!(t.len(), descs.len() * ABSOLUTE_DESC_LEN);
            prop_assert_eq!(decode_table(&t, Encoding::Absolute, descs.len() as u32).unwrap(), descs);
        }

        #[test]
        fn arithmetic_roundtrip(descs in arb_descs()) {
            let t = encode_table(Encoding::Arithmetic, &descs).unwrap();
            prop_assert_eq!(decode_table(&t, Encoding::Arithmetic, descs.len() as u32).unwrap(), descs);
        }

        #[test]
        fn decode_is_total(bytes: Vec<u8>, count in 0u32..64, arith: bool) {
            let enc = if arith { Encoding::Arithmetic } else { Encoding::Absolute };
            for r in DescIter::new(&bytes, enc, count) {
                if r.is_err() { break; }
            }
        }

        #[test]
        fn arithmetic_reencode_is_identity(bytes: Vec<u8>, count in 0u32..32) {
            if let Ok(descs) = decode_table(&bytes, Encoding::Arithmetic, count) {
                prop_assert_eq!(encode_table(Encoding::Arithmetic, &descs).unwrap(), bytes);
            }
        }
    }
}
