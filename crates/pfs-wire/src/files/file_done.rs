//! FILE_DONE (`docs/wire.md` §10.13): the end of a `STREAMED` file, whose
//! FILE went out before the sender had read it all: how many CHUNKS entries
//! it had and its file hash (docs/wire.md §10.6), known only now.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::Hash;

/// Length of a FILE_DONE body.
pub const FILE_DONE_LEN: usize = 48;

/// Byte ranges of FILE_DONE.
mod field {
    use super::{tiles, Field, FILE_DONE_LEN};

    pub const FILE_NO: Field = Field::new(0, 8);
    pub const CHUNK_COUNT: Field = Field::new(8, 4);
    pub const RESERVED: Field = Field::new(12, 4);
    pub const FILE_HASH: Field = Field::new(16, 32);

    const _: () = assert!(tiles(&[FILE_NO, CHUNK_COUNT, RESERVED, FILE_HASH], FILE_DONE_LEN));
}

/// What a streamed file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDone {
    /// The FILE's `file_no`: the streamed file whose chunks just ended.
    pub file_no: u64,
    /// CHUNKS entries the file had (at least 1: a streamed file is not empty).
    pub chunk_count: u32,
    /// The file hash of its chunks (docs/wire.md §10.6).
    pub file_hash: Hash,
}

impl FileDone {
    /// Decodes a FILE_DONE body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let b = Reader::<FILE_DONE_LEN>::exact(body)?;
        if !b.is_zero(field::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let chunk_count = b.u32(field::CHUNK_COUNT);
        if chunk_count == 0 {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            file_no: b.u64(field::FILE_NO),
            chunk_count,
            file_hash: b.array(field::FILE_HASH),
        })
    }

    /// The encoded body.
    pub fn emit(&self) -> [u8; FILE_DONE_LEN] {
        let mut w = Writer::<FILE_DONE_LEN>::new();
        w.u64(field::FILE_NO, self.file_no)
            .u32(field::CHUNK_COUNT, self.chunk_count)
            .put(field::FILE_HASH, &self.file_hash);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_done_roundtrip_and_refusals() {
        let d = FileDone {
            file_no: 3,
            chunk_count: 40_000,
            file_hash: [0xab; 32],
        };
        let b = d.emit();
        assert_eq!(FileDone::parse(&b), Ok(d));
        assert_eq!(FileDone::parse(&b[..47]), Err(WireError::Truncated));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(FileDone::parse(&long), Err(WireError::LengthMismatch));
        let mut bad = b;
        bad[13] = 1;
        assert_eq!(FileDone::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = b;
        bad[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(FileDone::parse(&bad), Err(WireError::LengthMismatch));
    }
}
