//! CHUNKS and REPAIR bodies, and BATCH (`docs/wire.md` §10.7): a file's
//! chunk entries — descriptors into the receiver's store, literal bytes,
//! zstd-compressed literals — and the zstd run that carries many small
//! FILE and CHUNKS frames in one write. REPAIR answers a NAK with the same
//! body as CHUNKS, under [`ChunksHeader::REPAIR`].

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::Hash;

/// Fixed part of CHUNKS and REPAIR.
pub const CHUNKS_FIXED_LEN: usize = 16;
/// Fixed part of a BATCH body: raw length, reserved.
pub const BATCH_FIXED_LEN: usize = 8;

/// Chunk entry tags in CHUNKS and REPAIR bodies.
pub mod tag {
    /// A descriptor into the receiver's store blob: hash, offset, len.
    pub const REF: u8 = 1;
    /// Literal bytes: hash, len, then `len` bytes.
    pub const LITERAL: u8 = 2;
    /// zstd-compressed literal: hash, raw len, compressed len, compressed bytes.
    pub const ZSTD: u8 = 3;
    /// A chunk the receiver holds under this hash but the sender has no
    /// offset for (sent earlier in this session): hash, len.
    pub const KNOWN: u8 = 4;
}

/// Bytes of an entry before its data: tag, hash, len.
const ENTRY_HEAD_LEN: usize = 37;
/// Data of a REF entry: the offset.
const REF_DATA_LEN: usize = 8;
/// Head of a ZSTD entry's data: the compressed length (the bytes follow).
const ZSTD_HEAD_LEN: usize = 4;

/// Byte ranges of the body head, the entry parts and the BATCH head.
mod field {
    use super::{tiles, Field};

    /// CHUNKS / REPAIR body head; `count` entries follow.
    pub mod head {
        use super::{tiles, Field};
        use crate::files::chunks::CHUNKS_FIXED_LEN as LEN;

        pub const FILE_NO: Field = Field::new(0, 8);
        pub const COUNT: Field = Field::new(8, 4);
        pub const RESERVED: Field = Field::new(12, 4);

        const _: () = assert!(tiles(&[FILE_NO, COUNT, RESERVED], LEN));
    }

    /// One entry: its head, then the data its tag implies.
    pub mod entry {
        use super::{tiles, Field};
        use crate::files::chunks::{ENTRY_HEAD_LEN, REF_DATA_LEN, ZSTD_HEAD_LEN};

        pub const TAG: Field = Field::new(0, 1);
        pub const HASH: Field = Field::new(1, 32);
        pub const CHUNK_LEN: Field = Field::new(33, 4);

        const _: () = assert!(tiles(&[TAG, HASH, CHUNK_LEN], ENTRY_HEAD_LEN));

        /// REF data, from the end of the entry head.
        pub const REF_OFFSET: Field = Field::new(0, 8);

        const _: () = assert!(tiles(&[REF_OFFSET], REF_DATA_LEN));

        /// ZSTD data head, from the end of the entry head.
        pub const ZSTD_CLEN: Field = Field::new(0, 4);

        const _: () = assert!(tiles(&[ZSTD_CLEN], ZSTD_HEAD_LEN));
    }

    /// BATCH head; the zstd frame follows.
    pub mod batch {
        use super::{tiles, Field};
        use crate::files::chunks::BATCH_FIXED_LEN as LEN;

        pub const RAW_LEN: Field = Field::new(0, 4);
        pub const RESERVED: Field = Field::new(4, 4);

        const _: () = assert!(tiles(&[RAW_LEN, RESERVED], LEN));
    }
}

/// The data of one chunk entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkData<'a> {
    /// At this offset of the receiver's store blob (`len` bytes).
    Ref {
        /// Offset in the store blob.
        offset: u64,
    },
    /// These bytes (`len` of them).
    Literal(&'a [u8]),
    /// zstd frame that decompresses to `len` bytes.
    Zstd(&'a [u8]),
    /// Look the hash up in the store.
    Known,
}

/// One chunk of a file (or of a REPAIR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry<'a> {
    /// BLAKE3 of the chunk's bytes.
    pub hash: &'a Hash,
    /// Length of the chunk (uncompressed).
    pub len: u32,
    /// Where its bytes are.
    pub data: ChunkData<'a>,
}

/// Header of a CHUNKS or REPAIR body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunksHeader {
    /// The FILE these chunks continue (`u64::MAX` in REPAIR).
    pub file_no: u64,
    /// Entries in the body.
    pub count: u32,
}

impl ChunksHeader {
    /// File number used by REPAIR bodies.
    pub const REPAIR: u64 = u64::MAX;

    /// Encodes the 16-byte header.
    pub fn emit(&self) -> [u8; CHUNKS_FIXED_LEN] {
        use field::head as f;
        let mut w = Writer::<CHUNKS_FIXED_LEN>::new();
        w.u64(f::FILE_NO, self.file_no).u32(f::COUNT, self.count);
        w.finish()
    }

    fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::head as f;
        let b = Reader::<CHUNKS_FIXED_LEN>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            file_no: b.u64(f::FILE_NO),
            count: b.u32(f::COUNT),
        })
    }
}

/// Decodes a CHUNKS/REPAIR body header and returns an iterator over its
/// entries; the iterator yields an error (once) if the body is malformed,
/// and checks that exactly `count` entries fill the body.
pub fn parse_chunks(body: &[u8]) -> Result<(ChunksHeader, ChunkIter<'_>), WireError> {
    let header = ChunksHeader::parse(body)?;
    Ok((
        header,
        ChunkIter {
            rest: body.get(CHUNKS_FIXED_LEN..).unwrap_or_default(),
            left: header.count,
            failed: false,
        },
    ))
}

/// Iterator over chunk entries; see [`parse_chunks`].
#[derive(Debug, Clone)]
pub struct ChunkIter<'a> {
    rest: &'a [u8],
    left: u32,
    failed: bool,
}

/// Inside a body, running out of bytes means the entry table is cut short.
fn table_truncated(_: WireError) -> WireError {
    WireError::TableTruncated
}

impl<'a> ChunkIter<'a> {
    fn entry(&mut self) -> Result<ChunkEntry<'a>, WireError> {
        use field::entry as f;
        let head = Reader::<ENTRY_HEAD_LEN>::new(self.rest).map_err(table_truncated)?;
        let hash: &Hash = head.bytes(f::HASH).try_into().map_err(|_| WireError::Truncated)?;
        let len = head.u32(f::CHUNK_LEN);
        let after = self.rest.get(ENTRY_HEAD_LEN..).unwrap_or_default();
        let (data, used) = match head.u8(f::TAG) {
            tag::REF => {
                let d = Reader::<REF_DATA_LEN>::new(after).map_err(table_truncated)?;
                let offset = d.u64(f::REF_OFFSET);
                offset
                    .checked_add(u64::from(len))
                    .ok_or(WireError::DescriptorOverflow)?;
                (ChunkData::Ref { offset }, REF_DATA_LEN)
            }
            tag::LITERAL => {
                let bytes = after.get(..len as usize).ok_or(WireError::TableTruncated)?;
                (ChunkData::Literal(bytes), bytes.len())
            }
            tag::ZSTD => {
                let d = Reader::<ZSTD_HEAD_LEN>::new(after).map_err(table_truncated)?;
                let clen = d.u32(f::ZSTD_CLEN) as usize;
                let bytes = after
                    .get(ZSTD_HEAD_LEN..)
                    .and_then(|frame| frame.get(..clen))
                    .ok_or(WireError::TableTruncated)?;
                (ChunkData::Zstd(bytes), ZSTD_HEAD_LEN + clen)
            }
            tag::KNOWN => (ChunkData::Known, 0),
            _ => return Err(WireError::BadFlags),
        };
        self.rest = after.get(used..).unwrap_or_default();
        Ok(ChunkEntry { hash, len, data })
    }
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = Result<ChunkEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.failed = true;
            return Some(Err(WireError::TrailingBytes));
        }
        self.left -= 1;
        let e = self.entry();
        self.failed = e.is_err();
        Some(e)
    }
}

/// Appends one entry's head (tag, hash, len) to `out`; the caller appends
/// the data the tag implies (offset, literal bytes, or compressed length and
/// bytes), usually as a separate slice of a vectored write.
pub fn emit_entry_head(out: &mut Vec<u8>, tag: u8, hash: &Hash, len: u32) {
    use field::entry as f;
    let mut w = Writer::<ENTRY_HEAD_LEN>::new();
    w.u8(f::TAG, tag).put(f::HASH, hash).u32(f::CHUNK_LEN, len);
    out.extend_from_slice(&w.finish());
}

/// Decodes a BATCH body: the length the zstd frame decompresses to, and the
/// frame. The decompressed bytes are whole FILE and CHUNKS frames, each with
/// its own header, decoded as if they had arrived one by one.
pub fn parse_batch(body: &[u8]) -> Result<(u32, &[u8]), WireError> {
    use field::batch as f;
    let b = Reader::<BATCH_FIXED_LEN>::new(body)?;
    if !b.is_zero(f::RESERVED) {
        return Err(WireError::ReservedNonZero);
    }
    let frame = body.get(BATCH_FIXED_LEN..).unwrap_or_default();
    Ok((b.u32(f::RAW_LEN), frame))
}

/// Encodes the fixed part of a BATCH body (the zstd frame follows).
pub fn batch_head(raw_len: u32) -> [u8; BATCH_FIXED_LEN] {
    use field::batch as f;
    let mut w = Writer::<BATCH_FIXED_LEN>::new();
    w.u32(f::RAW_LEN, raw_len);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn chunk_entries_all_tags() {
        let mut body = ChunksHeader { file_no: 2, count: 4 }.emit().to_vec();
        emit_entry_head(&mut body, tag::REF, &[1; 32], 100);
        body.extend_from_slice(&4096u64.to_le_bytes());
        emit_entry_head(&mut body, tag::LITERAL, &[2; 32], 3);
        body.extend_from_slice(b"abc");
        emit_entry_head(&mut body, tag::ZSTD, &[3; 32], 1000);
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(b"zz");
        emit_entry_head(&mut body, tag::KNOWN, &[4; 32], 7);
        let (h, it) = parse_chunks(&body).unwrap();
        assert_eq!(h.file_no, 2);
        let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
        assert_eq!(got[0].data, ChunkData::Ref { offset: 4096 });
        assert_eq!(got[1].data, ChunkData::Literal(b"abc"));
        assert_eq!(got[2].data, ChunkData::Zstd(b"zz"));
        assert_eq!(got[3].data, ChunkData::Known);
        assert_eq!(got[3].len, 7);
        // Truncation anywhere is an error, never a panic.
        for cut in 0..body.len() {
            if let Ok((_, it)) = parse_chunks(&body[..cut]) {
                assert!(it.clone().any(|e| e.is_err()), "cut at {cut}");
            }
        }
        // Trailing bytes after `count` entries.
        let mut extra = body.clone();
        extra.push(0);
        let (_, it) = parse_chunks(&extra).unwrap();
        assert_eq!(it.last(), Some(Err(WireError::TrailingBytes)));
    }

    proptest! {
        #[test]
        fn head_parse_emit(file_no: u64, count: u32) {
            let h = ChunksHeader { file_no, count };
            let (got, _) = parse_chunks(&h.emit()).unwrap();
            prop_assert_eq!(got, h);
        }

        #[test]
        fn entry_head_parse_emit(tag in tag::REF..=tag::KNOWN, hash: [u8; 32], len: u32, offset: u64) {
            // A body of one entry whose data is as short as its tag allows.
            let offset = offset.min(u64::MAX - u64::from(len));
            let len = if tag == tag::LITERAL { len % 64 } else { len };
            let mut body = ChunksHeader { file_no: 0, count: 1 }.emit().to_vec();
            emit_entry_head(&mut body, tag, &hash, len);
            let data = match tag {
                tag::REF => ChunkData::Ref { offset },
                tag::LITERAL => ChunkData::Literal(&[7; 64][..len as usize]),
                tag::ZSTD => ChunkData::Zstd(b"z"),
                _ => ChunkData::Known,
            };
            match data {
                ChunkData::Ref { offset } => body.extend_from_slice(&offset.to_le_bytes()),
                ChunkData::Literal(b) => body.extend_from_slice(b),
                ChunkData::Zstd(b) => {
                    body.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    body.extend_from_slice(b);
                }
                ChunkData::Known => {}
            }
            let (_, it) = parse_chunks(&body).unwrap();
            let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, vec![ChunkEntry { hash: &hash, len, data }]);
        }

        #[test]
        fn batch_parse_emit(raw_len: u32, frame in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut body = batch_head(raw_len).to_vec();
            body.extend_from_slice(&frame);
            prop_assert_eq!(parse_batch(&body), Ok((raw_len, &frame[..])));
        }
    }
}
