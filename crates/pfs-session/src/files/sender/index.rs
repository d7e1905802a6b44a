//! Index fetch: the receiver's store index, learnt through the cache kept
//! per store id and generation, so a second send asks only for the entries
//! added since (INDEX_REQUEST from the cached generation; INDEX frames, or
//! zstd BATCH frames of INDEX frames, back). The chunk plan looks chunks up
//! in it.

use pfs_files::IndexCache;
use pfs_wire::files::{parse_batch, parse_index, FLAG_LAST, INDEX_REQUEST_LEN};
use pfs_wire::{Frame, FrameType};

use super::core::{malformed, MAX_INDEX_BATCH};
use crate::files::{FilesViolation, IndexFault};
use crate::SessionError;

/// What the sender knows of the receiver's store: see the module doc.
#[derive(Debug, Default)]
pub(super) struct IndexFetch {
    /// The cache, once opened (the request went out).
    cache: Option<IndexCache>,
    /// The generation the fetch starts from.
    from: u64,
    /// Decompression buffer of index BATCH frames.
    raw: Vec<u8>,
    /// Entries fetched this time.
    fetched: u64,
    /// Entries the cache knew before.
    cached: u64,
}

impl IndexFetch {
    /// Starts from `cache`, against a store at `generation`; returns the
    /// INDEX_REQUEST body. A cache newer than the store is emptied: the
    /// store lost entries (a crash dropped a torn tail).
    pub(super) fn open(&mut self, mut cache: IndexCache, generation: u64) -> [u8; INDEX_REQUEST_LEN] {
        if cache.generation() > generation {
            cache.reset();
        }
        self.cached = cache.len() as u64;
        self.from = cache.generation();
        self.cache = Some(cache);
        self.from.to_le_bytes()
    }

    /// The cache (with what was fetched), once opened.
    pub(super) fn cache(&self) -> Option<&IndexCache> {
        self.cache.as_ref()
    }

    /// The store holds nothing (as far as the index says).
    pub(super) fn holds_nothing(&self) -> bool {
        self.cache.as_ref().is_some_and(|c| c.is_empty())
    }

    /// Entries fetched, and those known from the cache before.
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.fetched, self.cached)
    }

    /// One INDEX body into the cache; returns whether it was the last.
    pub(super) fn frame(&mut self, flags: u16, body: &[u8]) -> Result<bool, SessionError> {
        let entries = parse_index(body).map_err(malformed("INDEX"))?;
        let batch: Vec<_> = entries.map(|e| (e.key, e.offset, e.len)).collect();
        self.fetched += batch.len() as u64;
        if let Some(cache) = self.cache.as_mut() {
            cache.extend(self.from + self.fetched, batch);
        }
        Ok(flags & FLAG_LAST != 0)
    }

    /// One BATCH body of INDEX frames into the cache; returns whether it
    /// held the last.
    pub(super) fn batch(&mut self, body: &[u8]) -> Result<bool, SessionError> {
        let (raw_len, z) = parse_batch(body).map_err(malformed("BATCH"))?;
        if raw_len > MAX_INDEX_BATCH {
            return Err(FilesViolation::BadIndex {
                what: IndexFault::TooLarge { len: raw_len },
            }
            .into());
        }
        let mut raw = std::mem::take(&mut self.raw);
        raw.resize(raw_len as usize, 0);
        let result = match zstd::bulk::decompress_to_buffer(z, &mut raw[..]) {
            Ok(n) if n == raw_len as usize => self.frames(&raw),
            _ => Err(FilesViolation::BadIndex {
                what: IndexFault::Corrupt,
            }
            .into()),
        };
        self.raw = raw;
        result
    }

    /// The INDEX frames of a BATCH; nothing may follow the last.
    fn frames(&mut self, mut rest: &[u8]) -> Result<bool, SessionError> {
        let mut last = false;
        while !rest.is_empty() {
            let (f, used) = Frame::parse(rest).map_err(malformed("frame in an index BATCH"))?;
            if f.header.frame_type != FrameType::Index || last {
                return Err(FilesViolation::BadIndex {
                    what: IndexFault::Malformed,
                }
                .into());
            }
            last = self.frame(f.header.flags, f.body)?;
            rest = &rest[used..];
        }
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::files_violation;
    use super::*;
    use pfs_wire::files::{batch_head, IndexEntry};
    use pfs_wire::put_frame;

    fn opened(dir: &tempfile::TempDir) -> IndexFetch {
        let (mut cache, _) = IndexCache::open(dir.path(), [7; 16]);
        cache.reset();
        let mut ix = IndexFetch::default();
        assert_eq!(ix.open(cache, 0), [0; INDEX_REQUEST_LEN], "from generation 0");
        ix
    }

    fn entry(i: u8) -> IndexEntry {
        let mut key = [0; 8];
        key[0] = i;
        IndexEntry {
            key,
            offset: u64::from(i) * 4096,
            len: 4096,
        }
    }

    fn index_body(range: std::ops::Range<u8>) -> Vec<u8> {
        let mut body = Vec::new();
        for i in range {
            entry(i).emit(&mut body);
        }
        body
    }

    fn batch_of(frames: &[u8]) -> Vec<u8> {
        let z = zstd::bulk::compress(frames, 1).expect("zstd");
        let mut body = batch_head(frames.len() as u32).to_vec();
        body.extend_from_slice(&z);
        body
    }

    #[test]
    fn index_frames_fill_the_cache_until_the_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = opened(&dir);
        assert!(!ix.frame(0, &index_body(1..4)).expect("INDEX"));
        assert!(!ix.holds_nothing());
        assert!(ix.frame(FLAG_LAST, &index_body(4..6)).expect("INDEX"));
        assert_eq!(ix.counts(), (5, 0));
        assert_eq!(ix.cache().map(IndexCache::generation), Some(5));
    }

    #[test]
    fn an_index_batch_is_read_frame_by_frame_and_nothing_follows_the_last() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = opened(&dir);
        let mut frames = Vec::new();
        put_frame(&mut frames, FrameType::Index, 0, &index_body(1..3));
        put_frame(&mut frames, FrameType::Index, FLAG_LAST, &index_body(3..4));
        assert!(ix.batch(&batch_of(&frames)).expect("BATCH"));
        assert_eq!(ix.counts().0, 3);

        let mut ix = opened(&dir);
        put_frame(&mut frames, FrameType::Index, 0, &index_body(4..5));
        let err = ix.batch(&batch_of(&frames)).expect_err("a frame after the last");
        assert!(matches!(
            files_violation(err),
            FilesViolation::BadIndex {
                what: IndexFault::Malformed
            }
        ));
    }

    #[test]
    fn an_index_batch_too_large_or_corrupt_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ix = opened(&dir);
        let mut body = batch_head(MAX_INDEX_BATCH + 1).to_vec();
        body.extend_from_slice(&[0; 16]);
        let err = ix.batch(&body).expect_err("too large");
        assert!(matches!(
            files_violation(err),
            FilesViolation::BadIndex {
                what: IndexFault::TooLarge { .. }
            }
        ));
        let mut body = batch_head(100).to_vec();
        body.extend_from_slice(b"not zstd at all");
        let err = ix.batch(&body).expect_err("corrupt");
        assert!(matches!(
            files_violation(err),
            FilesViolation::BadIndex {
                what: IndexFault::Corrupt
            }
        ));
    }

    #[test]
    fn a_cache_newer_than_the_store_starts_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut cache, _) = IndexCache::open(dir.path(), [7; 16]);
        cache.reset();
        cache.extend(3, vec![([1; 8], 0, 10), ([2; 8], 10, 10), ([3; 8], 20, 10)]);
        let mut ix = IndexFetch::default();
        let from = ix.open(cache, 2);
        assert_eq!(from, [0; INDEX_REQUEST_LEN]);
        assert_eq!(ix.counts(), (0, 0));
        assert!(ix.holds_nothing());
    }
}
