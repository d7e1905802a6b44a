//! INDEX_REQUEST and INDEX (`docs/wire.md` §10.4): the sender asks for the
//! receiver's store index from a generation on, and gets it back as a run of
//! fixed-size entries.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Body of INDEX_REQUEST.
pub const INDEX_REQUEST_LEN: usize = 8;
/// One INDEX entry: hash prefix, offset, length.
pub const INDEX_ENTRY_LEN: usize = 20;
/// Bytes of a chunk hash an INDEX entry carries.
pub const INDEX_KEY_LEN: usize = 8;

/// Byte ranges of the request body and of one entry.
mod field {
    use super::{tiles, Field};

    /// INDEX_REQUEST.
    pub mod request {
        use super::{tiles, Field};
        use crate::files::index::INDEX_REQUEST_LEN as LEN;

        pub const FROM_GENERATION: Field = Field::new(0, 8);

        const _: () = assert!(tiles(&[FROM_GENERATION], LEN));
    }

    /// One INDEX entry.
    pub mod entry {
        use super::{tiles, Field};
        use crate::files::index::{INDEX_ENTRY_LEN as LEN, INDEX_KEY_LEN};

        pub const KEY: Field = Field::new(0, INDEX_KEY_LEN);
        pub const OFFSET: Field = Field::new(8, 8);
        pub const CHUNK_LEN: Field = Field::new(16, 4);

        const _: () = assert!(tiles(&[KEY, OFFSET, CHUNK_LEN], LEN));
    }
}

/// Decodes an INDEX_REQUEST body: the generation the sender's cached copy
/// of the index has reached (0 = send everything).
pub fn parse_index_request(body: &[u8]) -> Result<u64, WireError> {
    if body.len() != INDEX_REQUEST_LEN {
        return Err(WireError::LengthMismatch);
    }
    let b = Reader::<INDEX_REQUEST_LEN>::new(body)?;
    Ok(b.u64(field::request::FROM_GENERATION))
}

/// One chunk the receiver's store holds, named by the first
/// [`INDEX_KEY_LEN`] bytes of its hash (REF entries carry the whole hash,
/// which the receiver checks: a prefix shared by two chunks costs a NAK and
/// a REPAIR, never a wrong file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The first bytes of the chunk's BLAKE3.
    pub key: [u8; INDEX_KEY_LEN],
    /// Offset in the receiver's store blob.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl IndexEntry {
    /// Appends the 20-byte encoding.
    pub fn emit(&self, out: &mut Vec<u8>) {
        use field::entry as f;
        let mut w = Writer::<INDEX_ENTRY_LEN>::new();
        w.put(f::KEY, &self.key)
            .u64(f::OFFSET, self.offset)
            .u32(f::CHUNK_LEN, self.len);
        out.extend_from_slice(&w.finish());
    }

    /// Decodes one entry from the front of `b`.
    fn parse(b: &[u8]) -> Result<Self, WireError> {
        use field::entry as f;
        let b = Reader::<INDEX_ENTRY_LEN>::new(b)?;
        Ok(Self {
            key: b.array(f::KEY),
            offset: b.u64(f::OFFSET),
            len: b.u32(f::CHUNK_LEN),
        })
    }
}

/// Decodes an INDEX body: a whole number of entries.
pub fn parse_index(body: &[u8]) -> Result<impl Iterator<Item = IndexEntry> + '_, WireError> {
    if !body.len().is_multiple_of(INDEX_ENTRY_LEN) {
        return Err(WireError::LengthMismatch);
    }
    // `chunks_exact` hands out whole entries only, so `parse` never fails here.
    Ok(body
        .chunks_exact(INDEX_ENTRY_LEN)
        .filter_map(|e| IndexEntry::parse(e).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn index_entries() {
        let mut body = Vec::new();
        for i in 0..3u8 {
            IndexEntry {
                key: [i; 8],
                offset: u64::from(i) * 100,
                len: 10,
            }
            .emit(&mut body);
        }
        let got: Vec<_> = parse_index(&body).unwrap().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].offset, 200);
        assert_eq!(got[2].key, [2; 8]);
        assert!(parse_index(&body[..19]).is_err());
    }

    #[test]
    fn index_request() {
        assert_eq!(parse_index_request(&9u64.to_le_bytes()), Ok(9));
        assert_eq!(parse_index_request(&[0; 7]), Err(WireError::LengthMismatch));
    }

    proptest! {
        #[test]
        fn entries_parse_emit(entries in proptest::collection::vec(any::<([u8; 8], u64, u32)>(), 0..8)) {
            let entries: Vec<IndexEntry> = entries
                .into_iter()
                .map(|(key, offset, len)| IndexEntry { key, offset, len })
                .collect();
            let mut body = Vec::new();
            for e in &entries {
                e.emit(&mut body);
            }
            prop_assert_eq!(body.len(), entries.len() * INDEX_ENTRY_LEN);
            prop_assert_eq!(parse_index(&body).unwrap().collect::<Vec<_>>(), entries);
        }
    }
}
