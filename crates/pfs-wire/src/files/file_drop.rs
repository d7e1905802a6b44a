//! FILE_DROP (`docs/wire.md` §10.11): the sender cannot finish the file it
//! is streaming (it changed, shrank or could not be read after its FILE was
//! sent); the receiver discards what arrived of it and counts it failed.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Fixed part of FILE_DROP.
pub const FILE_DROP_FIXED_LEN: usize = 16;
/// Longest reason text in a FILE_DROP.
pub const MAX_DROP_REASON: usize = 1024;

/// Byte ranges of FILE_DROP's fixed part; the reason text follows.
mod field {
    use super::{tiles, Field, FILE_DROP_FIXED_LEN};

    pub const FILE_NO: Field = Field::new(0, 8);
    pub const REASON_LEN: Field = Field::new(8, 2);
    pub const RESERVED: Field = Field::new(10, 6);

    const _: () = assert!(tiles(&[FILE_NO, REASON_LEN, RESERVED], FILE_DROP_FIXED_LEN));
}

/// A file the sender gives up on, and why (for the receiver's report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDrop<'a> {
    /// The FILE's `file_no`: the file whose chunks are streaming.
    pub file_no: u64,
    /// Why, in UTF-8 (at most [`MAX_DROP_REASON`] bytes).
    pub reason: &'a str,
}

impl<'a> FileDrop<'a> {
    /// Decodes a FILE_DROP body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = Reader::<FILE_DROP_FIXED_LEN>::new(body)?;
        if !b.is_zero(field::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let len = usize::from(b.u16(field::REASON_LEN));
        if len > MAX_DROP_REASON {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILE_DROP_FIXED_LEN + len {
            return Err(WireError::LengthMismatch);
        }
        let text = body.get(FILE_DROP_FIXED_LEN..).ok_or(WireError::Truncated)?;
        let reason = core::str::from_utf8(text).map_err(|_| WireError::BadUtf8)?;
        Ok(Self {
            file_no: b.u64(field::FILE_NO),
            reason,
        })
    }

    /// Appends the encoded body to `out`; the reason is cut at
    /// [`MAX_DROP_REASON`] bytes on a character boundary.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut end = self.reason.len().min(MAX_DROP_REASON);
        while !self.reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut w = Writer::<FILE_DROP_FIXED_LEN>::new();
        w.u64(field::FILE_NO, self.file_no)
            .u16(field::REASON_LEN, end as u16);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(&self.reason.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_drop_roundtrip_and_refusals() {
        let d = FileDrop {
            file_no: 7,
            reason: "read: unexpected end of file",
        };
        let mut b = Vec::new();
        d.emit(&mut b);
        assert_eq!(FileDrop::parse(&b), Ok(d));
        assert_eq!(FileDrop::parse(&b[..15]), Err(WireError::Truncated));
        assert_eq!(FileDrop::parse(&b[..b.len() - 1]), Err(WireError::LengthMismatch));
        let mut bad = b.clone();
        bad[12] = 1;
        assert_eq!(FileDrop::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = b.clone();
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert_eq!(FileDrop::parse(&bad), Err(WireError::BadUtf8));
        let mut bad = b;
        bad[8..10].copy_from_slice(&2000u16.to_le_bytes());
        assert_eq!(FileDrop::parse(&bad), Err(WireError::TooLarge));
        let long = "é".repeat(1000);
        let mut b = Vec::new();
        FileDrop {
            file_no: 1,
            reason: &long,
        }
        .emit(&mut b);
        let back = FileDrop::parse(&b).unwrap();
        assert!(back.reason.len() <= MAX_DROP_REASON && long.starts_with(back.reason));
    }
}
