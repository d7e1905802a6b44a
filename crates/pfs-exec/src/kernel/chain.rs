//! The chunk-chained XXH3 shared by `xxh3`, `xor`, `add` and `gather`:
//! XXH3-64 (seed 0) of each chunk's bytes, folded over chunks in order with
//! `r = XXH3-64(seed = r, le_u64(h_chunk))`, starting from `r = 0`. Chunks
//! that carry no bytes are skipped by the fold.

use core::fmt;
use std::hash::Hasher;
use twox_hash::XxHash3_64;

/// One step of the fold.
#[inline]
pub(crate) fn fold(r: u64, chunk_hash: u64) -> u64 {
    XxHash3_64::oneshot_with_seed(r, &chunk_hash.to_le_bytes())
}

/// Chained-XXH3 state: the fold of the chunks already closed, plus the
/// chunk being fed (if it has received any bytes yet).
#[derive(Clone, Default)]
pub(crate) struct Chain {
    /// Fold over the closed chunks.
    r: u64,
    /// Closed (folded) chunks that carried bytes.
    closed: u64,
    /// The open chunk; `None` until it receives its first byte, so an empty
    /// chunk neither allocates nor folds.
    open: Option<Box<XxHash3_64>>,
    /// Bytes fed, over all chunks.
    pub(crate) bytes: u64,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("r", &format_args!("{:#018x}", self.r))
            .field("closed", &self.closed)
            .field("open", &self.open.is_some())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Chain {
    /// Feeds bytes to the open chunk.
    #[inline]
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.bytes += bytes.len() as u64;
        self.open
            .get_or_insert_with(|| Box::new(XxHash3_64::new()))
            .write(bytes);
    }

    /// Closes the open chunk into the fold.
    fn close(&mut self) {
        if let Some(h) = self.open.take() {
            self.r = fold(self.r, h.finish());
            self.closed += 1;
        }
    }

    /// Nothing fed and nothing folded.
    fn is_empty(&self) -> bool {
        self.closed == 0 && self.open.is_none()
    }

    /// Folds `next` — the following chunk — after `self`.
    ///
    /// # Panics
    /// If `next` already holds folded chunks while `self` is not empty: the
    /// chain is a left fold, one chunk at a time.
    pub(crate) fn combine(&mut self, mut next: Chain) {
        if self.is_empty() {
            *self = next;
            return;
        }
        assert!(
            next.closed == 0,
            "chained xxh3: combine folds one chunk at a time, in order (got an already-combined chunk)"
        );
        self.close();
        if let Some(h) = next.open.take() {
            self.r = fold(self.r, h.finish());
            self.closed += 1;
        }
        self.bytes += next.bytes;
    }

    /// The chained value.
    pub(crate) fn finish(mut self) -> u64 {
        self.close();
        self.r
    }
}
