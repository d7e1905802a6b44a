//! LEB128 unsigned varints and zigzag signed mapping, as used by the
//! arithmetic descriptor encoding. Decoding accepts only the shortest form so
//! that decode → encode is the identity on every accepted input.

use crate::WireError;

/// Longest LEB128 encoding of a `u64`.
pub const MAX_VARINT_LEN: usize = 10;

/// Appends `v` as LEB128 to `out`.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes `put_varint` writes for `v`.
#[inline]
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decodes one LEB128 varint at the start of `buf`; returns the value and
/// the number of bytes consumed.
#[inline]
pub fn get_varint(buf: &[u8]) -> Result<(u64, usize), WireError> {
    // Fast path: one byte covers small deltas (the common sequential case).
    match buf.first() {
        None => return Err(WireError::Truncated),
        Some(&b) if b < 0x80 => return Ok((u64::from(b), 1)),
        Some(_) => {}
    }
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().take(MAX_VARINT_LEN).enumerate() {
        let low = u64::from(byte & 0x7f);
        if i == MAX_VARINT_LEN - 1 && byte > 0x01 {
            return Err(WireError::VarintOverflow);
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return Err(WireError::VarintNonCanonical);
            }
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= MAX_VARINT_LEN {
        Err(WireError::VarintOverflow)
    } else {
        Err(WireError::Truncated)
    }
}

/// Maps a signed value to unsigned so small magnitudes stay small.
#[inline]
pub fn zigzag_encode(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag_encode`].
#[inline]
pub fn zigzag_decode(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let cases: &[(u64, &[u8])] = &[
            (0, &[0x00]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (262_144, &[0x80, 0x80, 0x10]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "encode {v}");
            assert_eq!(varint_len(v), bytes.len());
            assert_eq!(get_varint(bytes), Ok((v, bytes.len())), "decode {v}");
        }
    }

    #[test]
    fn rejects_bad_forms() {
        assert_eq!(get_varint(&[]), Err(WireError::Truncated));
        assert_eq!(get_varint(&[0x80]), Err(WireError::Truncated));
        assert_eq!(get_varint(&[0x80, 0x00]), Err(WireError::VarintNonCanonical));
        assert_eq!(get_varint(&[0xff; 10]), Err(WireError::VarintOverflow));
        let mut eleven = [0xffu8; 11];
        eleven[10] = 0;
        assert_eq!(get_varint(&eleven), Err(WireError::VarintOverflow));
        let mut ten = [0xffu8; 10];
        ten[9] = 0x02;
        assert_eq!(get_varint(&ten), Err(WireError::VarintOverflow));
    }

    #[test]
    fn zigzag_known() {
        assert_eq!(zigzag_encode(0), 0);
        assert_eq!(zigzag_encode(-1), 1);
        assert_eq!(zigzag_encode(1), 2);
        assert_eq!(zigzag_encode(i64::MIN), u64::MAX);
        assert_eq!(zigzag_encode(i64::MAX), u64::MAX - 1);
    }

    proptest! {
        #[test]
        fn varint_roundtrip(v: u64) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            prop_assert_eq!(get_varint(&out), Ok((v, out.len())));
        }

        #[test]
        fn zigzag_roundtrip(v: i64) {
            prop_assert_eq!(zigzag_decode(zigzag_encode(v)), v);
        }

        #[test]
        fn varint_decode_never_panics(bytes: Vec<u8>) {
            let _ = get_varint(&bytes);
        }
    }
}
