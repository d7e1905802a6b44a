//! Content-defined chunking: bytes and files → [`Recipe`]s.
//!
//! This module owns the chunk parameters ([`ChunkParams`]), the recipe types
//! ([`ChunkRef`], [`Recipe`]) and the entry points: [`chunk_bytes`] for data
//! in memory, [`chunk_file`] for one file and [`chunk_files`] for many in
//! parallel; and, for a sender that first asks the receiver which whole files
//! it holds, [`digest_file`] / [`digest_files`]: the file's XXH3-128 only, no
//! cut points, no BLAKE3.
//!
//! Cut points come from FastCDC (the 2020 variant, normalization level 1,
//! the crate's standard gear table; the loop is our own, see `cdc.rs`), so
//! they are the ones `fastcdc::v2020::FastCDC::new(data, min, avg, max)`
//! yields; a test pins that.
//! A chunk is named by the BLAKE3 hash of its bytes. A recipe also carries
//! the file's hash, computed from its chunk list rather than from its bytes
//! ([`FileHasher`]): a receiver that checked every chunk knows the file hash
//! without hashing the file a second time, and so does the sender.
//!
//! # How the work is split
//! Finding cut points is inherently sequential (each cut depends on the
//! previous one) but cheap: the gear hash costs one to two cycles per byte. The
//! BLAKE3 work (every byte once, in its chunk) and the reading are split into
//! windows of `W` bytes (8 MiB, or more for very large `max`). One thread
//! finds the cut points of window `k` while a rayon task reads window
//! `k + 1`; then window `k` goes to a rayon task that hashes its chunks.
//! When the cutter runs ahead, it helps with hashing instead of allocating
//! more windows, so memory per file stays bounded (a few windows).
//!
//! Files are read with `pread(2)` into recycled buffers rather than mapped:
//! a file truncated by another process while mapped would raise SIGBUS and
//! kill the sender, while `pread` merely returns less data, which is reported
//! as [`FilesError::Changed`]. The copy costs a few percent of the chunking
//! time.
//!
//! # Sparse files and zeros
//! Holes are found with `SEEK_DATA`/`SEEK_HOLE` and zero-filled instead of
//! read, and runs of zeros skip the gear hash and chunk hashing (see
//! `cdc.rs`), so a mostly-empty multi-GiB file costs little more than the
//! gear hash over its data. The recipe is the same as for the dense file;
//! a receiver leaves its zero chunks as holes (see `dest::landing`).

mod cdc;
mod file;

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::error::{ChunkParamsError, FilesError};
use crate::walk::{Entry, WalkKind};

pub(crate) use cdc::is_zero;
use cdc::{Cutter, ZERO_FLAG};
pub use file::{
    chunk_and_digest_open_file, chunk_file, chunk_file_streaming, chunk_open_file_streaming, digest_file,
    digest_open_file, quick_digest, ChunkSink, QuickDigest,
};
use file::{chunk_file_windowed, digest_file_metered};

/// Default average chunk size: 32 KiB.
pub const DEFAULT_AVG: u32 = 32 * 1024;

/// Window size for reading and parallel hashing (a power of two).
const WINDOW: usize = 8 << 20;

/// Chunk-size bounds for content-defined chunking.
///
/// Always valid: the constructors check the bounds fastcdc supports, so a
/// `ChunkParams` value can be handed to any chunking function without panics.
/// Two peers must use the same parameters for their chunks to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkParams {
    min: u32,
    avg: u32,
    max: u32,
}

impl ChunkParams {
    /// Parameters with the usual ratios: `min = avg / 4`, `max = avg * 4`.
    /// `avg` must be a power of two in `256..=4 MiB`.
    pub fn new(avg: u32) -> Result<Self, ChunkParamsError> {
        Self::with_bounds(avg / 4, avg, avg.saturating_mul(4))
    }

    /// Parameters with explicit bounds; see [`ChunkParamsError`] for the limits.
    pub fn with_bounds(min: u32, avg: u32, max: u32) -> Result<Self, ChunkParamsError> {
        use fastcdc::v2020::{AVERAGE_MAX, AVERAGE_MIN, MAXIMUM_MAX, MAXIMUM_MIN, MINIMUM_MAX, MINIMUM_MIN};
        let ok = (MINIMUM_MIN..=MINIMUM_MAX).contains(&min)
            && (AVERAGE_MIN..=AVERAGE_MAX).contains(&avg)
            && (MAXIMUM_MIN..=MAXIMUM_MAX).contains(&max)
            && avg.is_power_of_two()
            && min <= avg
            && avg <= max;
        if ok {
            Ok(Self { min, avg, max })
        } else {
            Err(ChunkParamsError { min, avg, max })
        }
    }

    /// Minimum chunk size in bytes (only the last chunk of a file may be shorter).
    pub fn min(&self) -> u32 {
        self.min
    }

    /// Target average chunk size in bytes.
    pub fn avg(&self) -> u32 {
        self.avg
    }

    /// Maximum chunk size in bytes.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Window size used for this parameter set: a power of two holding at
    /// least two maximum-size chunks.
    fn window(&self) -> usize {
        WINDOW.max((2 * self.max as usize).next_power_of_two())
    }
}

impl Default for ChunkParams {
    /// 8 KiB / 32 KiB / 128 KiB.
    fn default() -> Self {
        Self {
            min: DEFAULT_AVG / 4,
            avg: DEFAULT_AVG,
            max: DEFAULT_AVG * 4,
        }
    }
}

/// One chunk of a file: where it is and what it hashes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    /// BLAKE3 hash of the chunk's bytes.
    pub hash: [u8; 32],
    /// Offset of the chunk in the file.
    pub offset: u64,
    /// Length in bytes (at most [`ChunkParams::max`]).
    pub len: u32,
}

/// A file described as a sequence of content-defined chunks.
///
/// The chunks are in file order, contiguous, and cover exactly `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// File size in bytes.
    pub size: u64,
    /// The file hash: [`FileHasher`] over `chunks`.
    pub file_hash: [u8; 32],
    /// The chunks, in order. Empty for an empty file.
    pub chunks: Vec<ChunkRef>,
}

impl Recipe {
    /// The recipe of an empty file.
    pub fn empty() -> Self {
        Self::of_chunks(0, Vec::new())
    }

    /// The recipe of a file of `size` bytes made of `chunks`, its file hash
    /// computed from them.
    pub fn of_chunks(size: u64, chunks: Vec<ChunkRef>) -> Self {
        let mut h = FileHasher::new();
        for c in &chunks {
            h.add(c.len, &c.hash);
        }
        Self {
            size,
            file_hash: h.finish(),
            chunks,
        }
    }

    /// Whether the chunks are contiguous from offset 0 and add up to `size`.
    pub fn is_consistent(&self) -> bool {
        let mut at = 0u64;
        for c in &self.chunks {
            if c.offset != at || c.len == 0 {
                return false;
            }
            at += u64::from(c.len);
        }
        at == self.size
    }
}

/// The file hash of a chunk list, fed one chunk at a time in file order.
///
/// A file of one chunk (most small files) hashes to that chunk's hash, which
/// is `blake3::hash` of its content; an empty file to `blake3::hash(b"")`.
/// A file of two or more chunks hashes to BLAKE3 in key-derivation mode
/// (context [`FILE_HASH_CONTEXT`], so it cannot equal the plain BLAKE3 of
/// any content) over each chunk's length (`u32`, little-endian) and hash.
///
/// Why not the BLAKE3 of the whole content: that costs a second pass over
/// every byte on both sides (a quarter of the CPU of a cold large file),
/// while a receiver that checked each chunk against its hash knows the
/// content as well from the list. The price: the hash depends on the chunk
/// parameters, so a receiver's record of a file made under other
/// parameters tells nothing about it (size and mtime decide, as without a
/// record). `docs/wire.md` §10.6 defines it for other implementations.
#[derive(Debug, Clone)]
pub struct FileHasher {
    chunks: u64,
    first: [u8; 32],
    list: blake3::Hasher,
}

/// BLAKE3 key-derivation context of the hash of a file of two or more chunks.
pub const FILE_HASH_CONTEXT: &str = "PacketFS 2026-11-24 file hash from chunk list";

impl FileHasher {
    pub fn new() -> Self {
        Self {
            chunks: 0,
            first: [0; 32],
            list: blake3::Hasher::new_derive_key(FILE_HASH_CONTEXT),
        }
    }

    /// The next chunk, in file order.
    pub fn add(&mut self, len: u32, hash: &[u8; 32]) {
        if self.chunks == 0 {
            self.first = *hash;
        }
        self.chunks += 1;
        self.list.update(&len.to_le_bytes());
        self.list.update(hash);
    }

    /// The hash of the chunks added so far.
    pub fn finish(&self) -> [u8; 32] {
        match self.chunks {
            0 => *blake3::hash(b"").as_bytes(),
            1 => self.first,
            _ => *self.list.finalize().as_bytes(),
        }
    }
}

impl Default for FileHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// Hash the chunks `lens` (from [`Cutter::next`]) laid end to end in `buf`
/// from `buf[0]`, whose first byte is at file offset `base`.
fn hash_chunks(buf: &[u8], base: u64, lens: &[u32], cutter: &Cutter) -> Vec<ChunkRef> {
    let mut at = 0usize;
    let mut out = Vec::with_capacity(lens.len());
    for &raw in lens {
        let len = raw & !ZERO_FLAG;
        let end = at + len as usize;
        let hash = if raw & ZERO_FLAG != 0 {
            *cutter.zero_hash()
        } else {
            *blake3::hash(&buf[at..end]).as_bytes()
        };
        out.push(ChunkRef {
            hash,
            offset: base + at as u64,
            len,
        });
        at = end;
    }
    out
}

/// Chunk lengths only, without hashing: where the cut points fall.
/// [`chunk_bytes`] yields chunks of exactly these lengths.
pub fn chunk_lengths(data: &[u8], params: &ChunkParams) -> Vec<u32> {
    let cutter = Cutter::new(params);
    let mut lens = Vec::with_capacity(data.len() / params.avg as usize + 1);
    let mut pos = 0;
    while pos < data.len() {
        let l = cutter.next(&data[pos..]) & !ZERO_FLAG;
        lens.push(l);
        pos += l as usize;
    }
    lens
}

/// Chunk and hash bytes in memory.
///
/// Inputs larger than one window (8 MiB) are hashed in parallel on the
/// current rayon pool; the result does not depend on the thread count.
pub fn chunk_bytes(data: &[u8], params: &ChunkParams) -> Recipe {
    chunk_bytes_windowed(data, params, params.window())
}

fn chunk_bytes_windowed(data: &[u8], params: &ChunkParams, window: usize) -> Recipe {
    let cutter = Cutter::new(params);
    if data.is_empty() {
        return Recipe::empty();
    }
    if data.len() <= window {
        let mut lens = Vec::new();
        let mut pos = 0;
        while pos < data.len() {
            let l = cutter.next(&data[pos..]);
            lens.push(l);
            pos += (l & !ZERO_FLAG) as usize;
        }
        return Recipe::of_chunks(data.len() as u64, hash_chunks(data, 0, &lens, &cutter));
    }
    // Window k owns the chunks that start inside it.
    let n = data.len().div_ceil(window);
    let results: Mutex<Vec<WindowResult>> = Mutex::new(Vec::with_capacity(n));
    rayon::scope(|s| {
        let mut pos = 0usize;
        for k in 0..n {
            let wend = ((k + 1) * window).min(data.len());
            let first = pos;
            let mut lens = Vec::with_capacity(window / params.avg as usize + 8);
            while pos < wend {
                let l = cutter.next(&data[pos..]);
                lens.push(l);
                pos += (l & !ZERO_FLAG) as usize;
            }
            let chunk_bytes = &data[first..pos];
            let (results, cutter) = (&results, &cutter);
            s.spawn(move |_| {
                let chunks = hash_chunks(chunk_bytes, first as u64, &lens, cutter);
                lock(results).push(WindowResult { k, chunks });
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    assemble(data.len() as u64, results)
}

/// What one window task produced.
struct WindowResult {
    k: usize,
    chunks: Vec<ChunkRef>,
}

/// Join per-window results (in any order) into a recipe.
fn assemble(size: u64, mut results: Vec<WindowResult>) -> Recipe {
    results.sort_unstable_by_key(|r| r.k);
    let mut chunks = Vec::with_capacity(results.iter().map(|r| r.chunks.len()).sum());
    for r in results {
        chunks.extend(r.chunks);
    }
    Recipe::of_chunks(size, chunks)
}

/// Lock a mutex whose data stays valid even if a holder panicked (the panic
/// itself is propagated by `rayon::scope`).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Chunk many files in parallel on a pool of `threads` threads (0 = one per core).
///
/// Returns one result per entry, in the order given. Entries that are not
/// regular files get [`FilesError::NotAFile`]. Large files are additionally
/// hashed in parallel internally, so one big file still uses every thread.
/// Fails as a whole only if the thread pool cannot be started.
pub fn chunk_files(
    entries: &[&Entry],
    params: &ChunkParams,
    threads: usize,
) -> Result<Vec<Result<Recipe, FilesError>>, FilesError> {
    chunk_files_metered(entries, params, threads, &AtomicU64::new(0))
}

/// [`chunk_files`], adding the bytes read to `read` as they are read (once
/// per file or 8 MiB window, not per chunk): a meter another thread may
/// watch to show how far chunking is.
pub fn chunk_files_metered(
    entries: &[&Entry],
    params: &ChunkParams,
    threads: usize,
    read: &AtomicU64,
) -> Result<Vec<Result<Recipe, FilesError>>, FilesError> {
    on_files(entries, threads, "pfs-chunk", |path| {
        chunk_file_windowed(path, params, params.window(), read)
    })
}

/// [`digest_file`] for many entries on `threads` threads (0 = one per
/// core): one result per entry, in order, as [`chunk_files`].
#[allow(clippy::type_complexity)]
pub fn digest_files(
    entries: &[&Entry],
    params: &ChunkParams,
    threads: usize,
) -> Result<Vec<Result<(u64, QuickDigest), FilesError>>, FilesError> {
    digest_files_metered(entries, params, threads, &AtomicU64::new(0))
}

/// [`digest_files`], adding the bytes read to `read` as
/// [`chunk_files_metered`] does.
#[allow(clippy::type_complexity)]
pub fn digest_files_metered(
    entries: &[&Entry],
    params: &ChunkParams,
    threads: usize,
    read: &AtomicU64,
) -> Result<Vec<Result<(u64, QuickDigest), FilesError>>, FilesError> {
    on_files(entries, threads, "pfs-hash", |path| {
        digest_file_metered(path, params, read)
    })
}

/// `work` on every regular file of `entries`, one file per task, on a pool
/// of `threads` threads named `name-N`; [`FilesError::NotAFile`] for the rest.
fn on_files<R: Send>(
    entries: &[&Entry],
    threads: usize,
    name: &'static str,
    work: impl Fn(&std::path::Path) -> Result<R, FilesError> + Sync,
) -> Result<Vec<Result<R, FilesError>>, FilesError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|source| FilesError::ThreadPool { threads, source })?;
    Ok(pool.install(|| {
        entries
            .par_iter()
            .with_max_len(1)
            .map(|e| match e.kind {
                WalkKind::File { .. } => work(&e.abs),
                _ => Err(FilesError::NotAFile { path: e.abs.clone() }),
            })
            .collect()
    }))
}

#[cfg(test)]
mod tests;
