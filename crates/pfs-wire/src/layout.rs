//! Field tables for fixed-layout frames and heads, and the readers and
//! writers that use them.
//!
//! Every fixed-layout structure in this crate declares its bytes once, as a
//! private table of [`Field`] constants (offset and length) plus its total
//! length, and a compile-time [`tiles`] check that the fields cover the
//! structure exactly: in order, without gaps or overlaps (reserved bytes are
//! named fields too). Both `parse` and `emit` then name fields, never
//! offsets, so the two sides cannot drift apart.
//!
//! The decode side goes through [`Reader`]: its only constructor checks the
//! input against the table's total length, after which every field read is
//! in bounds by construction (and still falls back to zeros rather than
//! panic if a table were ever paired with the wrong reader). The encode side
//! fills a fixed-size array through [`Writer`]. All integers are
//! little-endian.

use crate::WireError;

/// One field of a fixed layout: `len` bytes starting at byte `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    /// Offset of the first byte, from the start of the structure.
    pub at: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Field {
    /// The field of `len` bytes at `at`.
    pub const fn new(at: usize, len: usize) -> Self {
        Self { at, len }
    }

    /// One past the last byte.
    pub const fn end(self) -> usize {
        self.at + self.len
    }
}

/// Whether `fields`, in order, cover `0..len` exactly: each starts where the
/// previous one ends, the first at 0 and the last at `len`. Used in a
/// `const _: () = assert!(...)` beside every table, so a typo in an offset
/// fails the build instead of corrupting a frame.
pub(crate) const fn tiles(fields: &[Field], len: usize) -> bool {
    let mut next = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].at != next || fields[i].len == 0 {
            return false;
        }
        next = fields[i].end();
        i += 1;
    }
    next == len
}

/// A checked view of the first `N` bytes of untrusted input: the only way
/// the decode side reads a fixed layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a, const N: usize>(&'a [u8; N]);

impl<'a, const N: usize> Reader<'a, N> {
    /// Views the first `N` bytes of `buf`; `Truncated` if there are fewer.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Result<Self, WireError> {
        buf.first_chunk::<N>().map(Self).ok_or(WireError::Truncated)
    }

    /// Views `buf`, which must be exactly `N` bytes: `Truncated` if
    /// shorter, `LengthMismatch` if longer.
    #[inline]
    pub fn exact(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() > N {
            return Err(WireError::LengthMismatch);
        }
        Self::new(buf)
    }

    /// The field's bytes as an array. `M` must equal `f.len`; a mismatched
    /// or out-of-range field (a table bug, not an input property) reads as
    /// zeros and trips a debug assertion.
    #[inline]
    pub fn array<const M: usize>(&self, f: Field) -> [u8; M] {
        debug_assert!(f.len == M && f.end() <= N, "field {f:?} read as {M} of {N} bytes");
        self.0
            .get(f.at..)
            .and_then(|rest| rest.first_chunk::<M>())
            .copied()
            .unwrap_or([0; M])
    }

    /// The field's bytes, borrowed from the input (empty for a field out of
    /// range, which the table checks rule out).
    #[inline]
    pub fn bytes(&self, f: Field) -> &'a [u8] {
        debug_assert!(f.end() <= N, "field {f:?} past {N} bytes");
        self.0.get(f.at..f.end()).unwrap_or(&[])
    }

    /// Every byte before the field (what a trailing checksum covers).
    #[inline]
    pub fn before(&self, f: Field) -> &'a [u8] {
        self.0.get(..f.at).unwrap_or(&[])
    }

    /// Whether every byte of the field is zero (reserved fields).
    #[inline]
    pub fn is_zero(&self, f: Field) -> bool {
        self.bytes(f).iter().all(|&b| b == 0)
    }

    /// A one-byte field.
    #[inline]
    pub fn u8(&self, f: Field) -> u8 {
        let [b] = self.array(f);
        b
    }

    /// A little-endian `u16` field.
    #[inline]
    pub fn u16(&self, f: Field) -> u16 {
        u16::from_le_bytes(self.array(f))
    }

    /// A little-endian `u32` field.
    #[inline]
    pub fn u32(&self, f: Field) -> u32 {
        u32::from_le_bytes(self.array(f))
    }

    /// A little-endian `u64` field.
    #[inline]
    pub fn u64(&self, f: Field) -> u64 {
        u64::from_le_bytes(self.array(f))
    }

    /// A little-endian two's-complement `i64` field.
    #[inline]
    pub fn i64(&self, f: Field) -> i64 {
        i64::from_le_bytes(self.array(f))
    }
}

/// A fixed layout being encoded: `N` zero bytes (so reserved fields need no
/// code), filled field by field.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Writer<const N: usize>([u8; N]);

impl<const N: usize> Writer<N> {
    /// All zeros.
    #[inline]
    pub fn new() -> Self {
        Self([0; N])
    }

    /// Writes `v` into the field; `v.len()` must equal `f.len` (a table bug
    /// otherwise, caught by the tests' round trips).
    #[inline]
    pub fn put(&mut self, f: Field, v: &[u8]) -> &mut Self {
        debug_assert_eq!(f.len, v.len(), "field {f:?}");
        self.0[f.at..f.end()].copy_from_slice(v);
        self
    }

    /// A one-byte field.
    #[inline]
    pub fn u8(&mut self, f: Field, v: u8) -> &mut Self {
        self.put(f, &[v])
    }

    /// A little-endian `u16` field.
    #[inline]
    pub fn u16(&mut self, f: Field, v: u16) -> &mut Self {
        self.put(f, &v.to_le_bytes())
    }

    /// A little-endian `u32` field.
    #[inline]
    pub fn u32(&mut self, f: Field, v: u32) -> &mut Self {
        self.put(f, &v.to_le_bytes())
    }

    /// A little-endian `u64` field.
    #[inline]
    pub fn u64(&mut self, f: Field, v: u64) -> &mut Self {
        self.put(f, &v.to_le_bytes())
    }

    /// A little-endian two's-complement `i64` field.
    #[inline]
    pub fn i64(&mut self, f: Field, v: i64) -> &mut Self {
        self.put(f, &v.to_le_bytes())
    }

    /// Every byte before the field (what a trailing checksum covers).
    #[inline]
    pub fn before(&self, f: Field) -> &[u8] {
        &self.0[..f.at]
    }

    /// The encoded structure.
    #[inline]
    pub fn finish(self) -> [u8; N] {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Field = Field::new(0, 2);
    const B: Field = Field::new(2, 4);
    const C: Field = Field::new(6, 8);

    #[test]
    fn tiles_accepts_exact_cover_only() {
        assert!(tiles(&[A, B, C], 14));
        assert!(!tiles(&[A, B, C], 15), "short of the total");
        assert!(!tiles(&[A, C], 14), "gap");
        assert!(!tiles(&[A, Field::new(1, 5), C], 14), "overlap");
        assert!(!tiles(&[B, A, C], 14), "out of order");
        assert!(!tiles(&[A, Field::new(2, 0), B, C], 14), "empty field");
    }

    #[test]
    fn reader_checks_length_then_reads_fields() {
        assert_eq!(Reader::<14>::new(&[0; 13]).map(|_| ()), Err(WireError::Truncated));
        let mut w = Writer::<14>::new();
        w.u16(A, 0x0102).u32(B, 0x0304_0506).i64(C, -2);
        let bytes = w.finish();
        assert_eq!(bytes[..6], [2, 1, 6, 5, 4, 3]);
        let mut long = bytes.to_vec();
        long.push(0xff);
        let r = Reader::<14>::new(&long).unwrap();
        assert_eq!(r.u16(A), 0x0102);
        assert_eq!(r.u32(B), 0x0304_0506);
        assert_eq!(r.i64(C), -2);
        assert_eq!(r.u64(C), u64::MAX - 1);
        assert_eq!(r.bytes(A), &[2, 1]);
        assert!(!r.is_zero(B));
        assert_eq!(r.before(B), &[2, 1]);
        assert_eq!(
            Reader::<14>::exact(&long).map(|_| ()),
            Err(WireError::LengthMismatch)
        );
        assert_eq!(
            Reader::<14>::exact(&long[..13]).map(|_| ()),
            Err(WireError::Truncated)
        );
        assert!(Reader::<14>::exact(&bytes).is_ok());
    }
}
