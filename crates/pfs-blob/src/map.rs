//! Mapping blob files into memory, prefaulting mappings, and rewriting
//! ranges of a mapping that sessions read ([`BlobWriter`], repairs).
//!
//! This is the crate's only `unsafe`: memmap2 cannot prove that nobody else
//! truncates or rewrites a mapped file, so mapping a file is an unsafe call;
//! and a repair writes bytes other threads may be reading.
//! The argument for soundness is the blob's ownership protocol, stated once
//! here: blob files are created at their final size by `set_len` before the
//! first mapping and are never truncated or resized afterwards (removal only
//! unlinks, which keeps existing mappings valid). Concurrent *writes* from
//! another process are part of the design (both sides hold the same bytes;
//! repairs rewrite ranges); readers treat blob bytes as untrusted data, never
//! as typed values, so a racing write can change a hash but not break memory
//! safety of this process.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};

use memmap2::{Advice, Mmap, MmapMut, MmapOptions};

/// Map `len` bytes of `file` read-write, shared with every other mapping of it.
pub(crate) fn map_file_shared(file: &File, len: usize) -> io::Result<MmapMut> {
    // SAFETY: see the module docs: the file already has its final length
    // (`len` was checked against it by the caller) and no pfs code path ever
    // truncates a blob file, so the mapping never covers a hole past EOF.
    unsafe { MmapOptions::new().len(len).map_mut(file) }
}

/// Map `len` bytes of `file` read-only, shared (used by `verify`).
pub(crate) fn map_file_readonly(file: &File, len: usize) -> io::Result<Mmap> {
    // SAFETY: as for `map_file_shared`: the length was checked against the
    // file, which is never truncated by pfs.
    unsafe { MmapOptions::new().len(len).map(file) }
}

/// Rewrites ranges of a blob while sessions read it: the receiver's side of
/// the corrections plane, which puts the sender's bytes where its own did
/// not match (`docs/wire.md` §13).
///
/// Writes are serialized (one repair at a time per blob) and bounds-checked;
/// readers of the same bytes may see a mix of old and new bytes while one
/// runs. That is the stance of the module docs: blob bytes are untrusted
/// data that readers hash and compare, never interpret as typed values, and
/// other processes sharing a named blob's file can rewrite them anyway; a
/// racing write changes a digest, not this process's memory safety.
#[derive(Clone, Copy)]
pub struct BlobWriter<'a> {
    /// The mapping's first byte (memmap2's raw pointer, not derived from a
    /// reference).
    base: *mut u8,
    len: usize,
    /// Serializes writes to this blob.
    lock: &'a Mutex<()>,
    /// Borrows the mapping: it outlives the writer and is not remapped.
    _map: PhantomData<&'a MmapMut>,
}

// SAFETY: the writer only copies bytes into the mapping under `lock`, and
// the mapping itself is `Send + Sync` (memmap2); the raw pointer is what
// makes the auto traits fall away, not any thread-bound state.
unsafe impl Send for BlobWriter<'_> {}
// SAFETY: as for `Send`: every write is serialized by `lock`.
unsafe impl Sync for BlobWriter<'_> {}

impl std::fmt::Debug for BlobWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobWriter").field("len", &self.len).finish()
    }
}

/// Why a repair write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BlobWriteError {
    /// The range reaches outside the blob.
    #[error("write of {len} bytes at {offset} is outside the {blob_len}-byte blob")]
    OutOfBounds {
        /// Offset of the write.
        offset: u64,
        /// Its length.
        len: u64,
        /// The blob's length.
        blob_len: u64,
    },
    /// The source bytes lie inside the blob range being written.
    #[error("the bytes to write overlap the blob range they would replace")]
    Overlap,
}

impl<'a> BlobWriter<'a> {
    pub(crate) fn new(map: &'a MmapMut, lock: &'a Mutex<()>) -> Self {
        Self {
            base: map.as_ptr().cast_mut(),
            len: map.len(),
            lock,
            _map: PhantomData,
        }
    }

    /// Length of the blob.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Always false: blobs are never empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` into the blob at `offset`.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), BlobWriteError> {
        let oob = BlobWriteError::OutOfBounds {
            offset,
            len: bytes.len() as u64,
            blob_len: self.len as u64,
        };
        let start = usize::try_from(offset).map_err(|_| oob)?;
        let end = start.checked_add(bytes.len()).ok_or(oob)?;
        if end > self.len {
            return Err(oob);
        }
        let dst = self.base as usize + start;
        let src = bytes.as_ptr() as usize;
        if src < dst + bytes.len() && dst < src + bytes.len() {
            return Err(BlobWriteError::Overlap);
        }
        let _one = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: `[start, end)` lies inside the mapping (checked above),
        // which is writable (an `MmapMut`) and outlives `'a`; `bytes` does
        // not overlap it (checked above); writes are serialized by `lock`.
        // Concurrent readers may see a mix of old and new bytes (type docs).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(start), bytes.len());
        }
        Ok(())
    }
}

/// How a mapping was prefaulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PrefaultMethod {
    /// `madvise(MADV_POPULATE_WRITE)`: pages allocated and mapped writable,
    /// content untouched, errors reported instead of SIGBUS.
    PopulateWrite,
    /// The kernel lacks `MADV_POPULATE_WRITE`; pages were touched by hand.
    Touch,
}

/// The failing range of a prefault.
#[derive(Debug)]
pub(crate) struct PrefaultError {
    pub offset: u64,
    pub len: u64,
    pub source: io::Error,
}

/// Fault in every page of `map` on up to `threads` threads, split at
/// multiples of `page_size` (hugetlb ranges must stay huge-page aligned).
///
/// `fresh` says the mapping's content is still all zeros (a brand-new
/// mapping), so the hand-touch fallback may write a zero into each page,
/// which allocates it; otherwise it only reads, preserving content.
pub(crate) fn prefault(
    map: &mut MmapMut,
    page_size: usize,
    threads: usize,
    fresh: bool,
) -> Result<PrefaultMethod, PrefaultError> {
    let len = map.len();
    let ranges = split_ranges(len, page_size, threads);
    let results: Vec<io::Result<()>> = std::thread::scope(|s| {
        let map = &*map;
        let handles: Vec<_> = ranges
            .iter()
            .map(|&(off, l)| s.spawn(move || map.advise_range(Advice::PopulateWrite, off, l)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(io::ErrorKind::Other.into())))
            .collect()
    });
    let mut unsupported = false;
    for (&(off, l), r) in ranges.iter().zip(results) {
        match r {
            Ok(()) => {}
            // EINVAL: kernel older than 5.14 does not know the advice.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => unsupported = true,
            Err(source) => {
                return Err(PrefaultError {
                    offset: off as u64,
                    len: l as u64,
                    source,
                })
            }
        }
    }
    if !unsupported {
        return Ok(PrefaultMethod::PopulateWrite);
    }
    touch_pages(map, page_size.min(4096), threads, fresh);
    Ok(PrefaultMethod::Touch)
}

/// Fallback prefault: one access per page, in parallel.
fn touch_pages(map: &mut MmapMut, step: usize, threads: usize, fresh: bool) {
    let len = map.len();
    let per = len.div_ceil(threads.max(1)).next_multiple_of(step).max(step);
    std::thread::scope(|s| {
        for chunk in map.chunks_mut(per) {
            s.spawn(move || {
                for i in (0..chunk.len()).step_by(step) {
                    if fresh {
                        // A fresh mapping is all zeros, so writing zero is a
                        // no-op for content but allocates the page.
                        chunk[i] = 0;
                    } else {
                        std::hint::black_box(chunk[i]);
                    }
                }
            });
        }
    });
}

/// Split `[0, len)` into at most `parts` ranges whose starts are multiples of
/// `align`.
fn split_ranges(len: usize, align: usize, parts: usize) -> Vec<(usize, usize)> {
    let align = align.max(1);
    let per = len.div_ceil(parts.max(1)).next_multiple_of(align).max(align);
    (0..len)
        .step_by(per)
        .map(|off| (off, per.min(len - off)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_and_align() {
        for (len, align, parts) in [(10 << 20, 2 << 20, 3), (4096, 4096, 8), (12288, 4096, 2)] {
            let r = split_ranges(len, align, parts);
            assert!(r.len() <= parts);
            let mut at = 0;
            for (off, l) in r {
                assert_eq!(off, at);
                assert_eq!(off % align, 0);
                at += l;
            }
            assert_eq!(at, len);
        }
    }

    #[test]
    fn prefault_anon_keeps_zeroes() {
        let mut m = MmapMut::map_anon(1 << 20).unwrap();
        prefault(&mut m, 4096, 2, true).unwrap();
        assert!(m.iter().all(|&b| b == 0));
    }

    #[test]
    fn writer_writes_in_bounds_only() {
        let mut m = MmapMut::map_anon(8192).unwrap();
        m[100] = 7;
        let lock = Mutex::new(());
        let w = BlobWriter::new(&m, &lock);
        w.write(4000, &[1, 2, 3]).unwrap();
        assert_eq!(
            w.write(8190, &[0; 3]),
            Err(BlobWriteError::OutOfBounds {
                offset: 8190,
                len: 3,
                blob_len: 8192
            })
        );
        assert!(w.write(u64::MAX, &[0]).is_err());
        assert_eq!(&m[4000..4003], &[1, 2, 3]);
        assert_eq!(w.write(95, &m[90..110]), Err(BlobWriteError::Overlap));
        assert_eq!(m[100], 7);
    }

    #[test]
    fn touch_fallback_preserves_content() {
        let mut m = MmapMut::map_anon(64 << 10).unwrap();
        m[4096] = 9;
        touch_pages(&mut m, 4096, 3, false);
        assert_eq!(m[4096], 9);
    }
}
