//! The blob file, its one mapping, and which bytes of it each party may touch.
//!
//! This is the crate's only `unsafe`, and the module also owns the
//! bookkeeping that makes it sound, so the whole argument lives here:
//!
//! 1. **Never past EOF.** The mapping covers the whole capacity once (so it
//!    never moves and slices stay valid for the store's life), but the file
//!    only grows as space is claimed. A page past EOF raises SIGBUS when
//!    touched, so no byte at or beyond `file_len` is ever touched: a claim is
//!    handed out only after the file was grown (`fallocate`) to cover it, and
//!    readable, claimed and free ranges lie below `next <= file_len`. The
//!    file shrinks only under the state lock and never below `next`
//!    (rounded up), when released space at the end leaves a long unused
//!    tail; the store's `flock` keeps other pfs processes away.
//!    Someone truncating the file by hand under a running server crashes it,
//!    as with any mapped file.
//! 2. **One writer per byte, no reader of a byte being written.** Every
//!    byte below the capacity is in one of three states:
//!    - *free* (at or above `next`, or inside an entry of `free`): nobody
//!      touches it; [`BlobSpace::read`] refuses it;
//!    - *claimed* (inside an entry of `in_flight`): exactly one [`Claim`]
//!      writes it, through `&mut self`; [`BlobSpace::read`] refuses it;
//!    - *readable* (below `next`, neither claimed nor free): [`BlobSpace::read`]
//!      hands out `&[u8]` to it.
//!
//!    Transitions: free → claimed ([`BlobSpace::claim`], from `free` first,
//!    else at `next`); claimed → readable for the part a claim wrote when it
//!    finishes; its unwritten tail goes back to free (to `next` when nothing
//!    was claimed after it, else into `free`), so space reserved by a session
//!    that ended is never lost. Readable bytes never become claimed or free
//!    again, so a slice from `read` never aliases bytes a claim writes.
//! 3. **Repair is the exception.** [`BlobSpace::overwrite`] rewrites readable
//!    bytes (one repair at a time) while readers may hold slices to them. It
//!    only runs on a chunk whose bytes were already found damaged, readers
//!    treat blob bytes as untrusted data (they hash them, never interpret
//!    them as typed values), and other processes can rewrite the file anyway.
//!    This is the same stance as `pfs-blob`'s shared blobs: a racing write can
//!    change a hash, not the memory safety of this process.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use memmap2::{MmapOptions, MmapRaw};

/// Claims start at multiples of this (a cache line).
pub(crate) const CLAIM_ALIGN: u64 = 64;

/// The blob file is shrunk when released space leaves at least this much
/// (or one growth step, if larger) unused at its end.
const SHRINK_SLACK: u64 = 64 << 20;

/// The blob file, mapped once, with a bump allocator over it.
pub(crate) struct BlobSpace {
    file: File,
    path: PathBuf,
    map: MmapRaw,
    /// The file grows in multiples of this (a page; the huge page on hugetlbfs).
    grow_step: u64,
    state: Mutex<SpaceState>,
    /// `min(next, start of every live claim)`: every byte below it is
    /// readable. Stored under `state` with Release after the transition it
    /// reflects; loaded with Acquire by [`BlobSpace::read`], which pairs with
    /// that store so a finished claim's writes happen-before the read. Never
    /// decreases (proof at [`SpaceState::readable_below`]), so a stale value
    /// only sends a reader to the locked slow path.
    readable_below: AtomicU64,
    /// The file grew since its size was last made durable.
    size_dirty: AtomicBool,
    /// Serializes [`BlobSpace::overwrite`].
    repair: Mutex<()>,
}

/// Allocator state, under [`BlobSpace::state`].
#[derive(Debug)]
struct SpaceState {
    /// First byte never handed to a claim (after a reopen: the end of the
    /// committed data).
    next: u64,
    /// Length of the blob file; nothing at or beyond it is touched.
    file_len: u64,
    /// `[start, end)` of every live claim.
    in_flight: Vec<(u64, u64)>,
    /// `[start, end)` below `next` that claims released unwritten: never
    /// readable, handed to later claims. Sorted, disjoint, not adjacent.
    free: Vec<(u64, u64)>,
}

impl SpaceState {
    /// `min(next, every live claim's start)`.
    ///
    /// Monotone: a claim starts at or above `next` and raises `next`; a
    /// finishing claim `[s, e)` written up to `w` (`s <= w <= e`) removes `s`
    /// and lowers `next` only from `e` to `w >= s`, which is only done when it
    /// was the last claim. Neither step lowers the minimum.
    /// Free ranges count like claims: a new one starts at or above the
    /// start of the claim it came from, a claim taken from one starts at or
    /// above it, and one merged into `next` lowers `next` only to its own
    /// start, which was in the minimum already.
    fn readable_below(&self) -> u64 {
        self.in_flight
            .iter()
            .chain(&self.free)
            .map(|&(s, _)| s)
            .fold(self.next, u64::min)
    }

    /// True iff `[off, end)` is readable: below `next`, overlapping no claim
    /// and no free range.
    fn is_readable(&self, off: u64, end: u64) -> bool {
        end <= self.next
            && !self
                .in_flight
                .iter()
                .chain(&self.free)
                .any(|&(s, e)| off < e && s < end)
    }

    /// Bytes in free ranges below `next`.
    fn free_below_next(&self) -> u64 {
        self.free.iter().map(|&(s, e)| e - s).sum()
    }

    /// Takes `len` bytes (aligned) from a free range ending at or below
    /// `capacity`, if one has room.
    fn take_free(&mut self, len: u64, capacity: u64) -> Option<u64> {
        let i = self.free.iter().position(|&(s, e)| {
            let a = s.next_multiple_of(CLAIM_ALIGN);
            a + len <= e && a + len <= capacity
        })?;
        let (s, e) = self.free.remove(i);
        let a = s.next_multiple_of(CLAIM_ALIGN);
        // What is left on either side stays free.
        if a + len < e {
            self.free.insert(i, (a + len, e));
        }
        if s < a {
            self.free.insert(i, (s, a));
        }
        Some(a)
    }

    /// Returns `[s, e)` to the free ranges, merged with its neighbours, and
    /// lowers `next` past free ranges that end at it.
    fn give_back(&mut self, s: u64, e: u64) {
        if s < e {
            let i = self.free.partition_point(|&(fs, _)| fs < s);
            self.free.insert(i, (s, e));
            // Merge with the following and the preceding range.
            if i + 1 < self.free.len() && self.free[i + 1].0 == e {
                self.free[i].1 = self.free[i + 1].1;
                self.free.remove(i + 1);
            }
            if i > 0 && self.free[i - 1].1 == s {
                self.free[i - 1].1 = self.free[i].1;
                self.free.remove(i);
            }
        }
        while let Some(&(fs, fe)) = self.free.last() {
            if fe != self.next {
                break;
            }
            self.next = fs;
            self.free.pop();
        }
    }
}

/// Why [`BlobSpace::overwrite`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverwriteError {
    /// The range is not readable; bytes readable from offset 0.
    NotReadable(u64),
    /// The source overlaps the destination.
    Overlap,
}

/// Why a claim failed. Nothing changed in either case.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// The claim would end beyond the capacity.
    Full {
        /// Bytes free under the capacity.
        free: u64,
    },
    /// The filesystem could not grow the file (ENOSPC, EDQUOT).
    NoSpace { need: u64, source: io::Error },
    /// Any other failure to grow the file.
    Io(io::Error),
}

impl BlobSpace {
    /// Map `map_len` bytes of `file` (at `path`) and start allocating at
    /// `data_end` (clamped to the file length).
    ///
    /// `map_len` must be a nonzero multiple of `grow_step` and at least the
    /// file's length.
    pub(crate) fn open(
        file: File,
        path: PathBuf,
        data_end: u64,
        map_len: u64,
        grow_step: u64,
    ) -> io::Result<BlobSpace> {
        let file_len = file.metadata()?.len();
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_owned());
        if map_len == 0 || grow_step == 0 || map_len.next_multiple_of(grow_step) != map_len {
            return Err(invalid(
                "mapping length is not a nonzero multiple of the page size",
            ));
        }
        if file_len > map_len {
            return Err(invalid("blob file is longer than the mapping"));
        }
        let len = usize::try_from(map_len).map_err(|_| invalid("capacity exceeds the address space"))?;
        // Creating a raw mapping is safe (memmap2 hands out only pointers);
        // what makes touching it sound is in the module docs: bytes at or
        // beyond the file length are never touched (the mapping may extend
        // past EOF, which mmap allows), this crate never shrinks the file, and
        // the store's flock keeps other pfs processes out. MAP_NORESERVE
        // (no_reserve_swap) keeps hugetlbfs from reserving huge pages for the
        // whole capacity at mmap time; fallocate allocates them as the file
        // grows.
        let map = MmapOptions::new().len(len).no_reserve_swap().map_raw(&file)?;
        let next = data_end.min(file_len);
        Ok(BlobSpace {
            file,
            path,
            map,
            grow_step,
            state: Mutex::new(SpaceState {
                next,
                file_len,
                in_flight: Vec::new(),
                free: Vec::new(),
            }),
            readable_below: AtomicU64::new(next),
            size_dirty: AtomicBool::new(false),
            repair: Mutex::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, SpaceState> {
        // Every update of the state completes before the guard drops (no
        // panicking calls in between), so a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Publish `state`'s readable bound (call with the state lock held).
    fn publish_readable(&self, state: &SpaceState) {
        let r = state.readable_below();
        debug_assert!(r >= self.readable_below.load(Ordering::Relaxed));
        // Release: pairs with the Acquire load in `read`.
        self.readable_below.store(r, Ordering::Release);
    }

    /// Claim `len` bytes for exclusive writing, below `capacity`, growing the
    /// file to cover them first.
    pub(crate) fn claim(&self, len: u64, capacity: u64) -> Result<Claim<'_>, ClaimError> {
        let map_len = self.map.len() as u64;
        let capacity = capacity.min(map_len);
        let mut st = self.state();
        if len > 0 {
            if let Some(start) = st.take_free(len, capacity) {
                // Below `next`, so inside the file already.
                let end = start + len;
                st.in_flight.push((start, end));
                self.publish_readable(&st);
                return Ok(Claim {
                    space: self,
                    start,
                    end,
                    cursor: start,
                });
            }
        }
        let start = st.next.next_multiple_of(CLAIM_ALIGN);
        let free = capacity.saturating_sub(start);
        if len > free {
            let largest = st.free.iter().map(|&(s, e)| e - s).max().unwrap_or(0);
            return Err(ClaimError::Full {
                free: free.max(largest),
            });
        }
        let end = start + len;
        if end > st.file_len {
            // `end <= capacity <= map_len` and `map_len` is a multiple of the
            // step, so the new length covers `end` and stays in the mapping.
            let new_len = end.next_multiple_of(self.grow_step).min(map_len);
            self.grow(st.file_len, new_len)?;
            st.file_len = new_len;
            // Release: pairs with the swap in `flush`.
            self.size_dirty.store(true, Ordering::Release);
        }
        st.next = end;
        st.in_flight.push((start, end));
        self.publish_readable(&st);
        Ok(Claim {
            space: self,
            start,
            end,
            cursor: start,
        })
    }

    /// Grow the file from `from` to `to` bytes with allocated blocks, so a
    /// later write through the mapping cannot fail for lack of space.
    fn grow(&self, from: u64, to: u64) -> Result<(), ClaimError> {
        let need = to - from;
        match rustix::fs::fallocate(&self.file, rustix::fs::FallocateFlags::empty(), from, need) {
            Ok(()) => Ok(()),
            Err(e) if e == rustix::io::Errno::NOSPC || e == rustix::io::Errno::DQUOT => {
                Err(ClaimError::NoSpace {
                    need,
                    source: e.into(),
                })
            }
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                // No fallocate here (some network and FUSE filesystems):
                // allocate by writing zeros, which also reports ENOSPC.
                self.zero_fill(from, to).map_err(|e| match e.raw_os_error() {
                    Some(c) if c == rustix::io::Errno::NOSPC.raw_os_error() => {
                        ClaimError::NoSpace { need, source: e }
                    }
                    _ => ClaimError::Io(e),
                })
            }
            Err(e) => Err(ClaimError::Io(e.into())),
        }
    }

    fn zero_fill(&self, from: u64, to: u64) -> io::Result<()> {
        let zeros = vec![0u8; 1 << 20];
        let mut at = from;
        while at < to {
            let n = (to - at).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// End a claim: its written part becomes readable; its unwritten tail
    /// returns to the allocator (to `next`, or to the free ranges when
    /// something was claimed after it). A long unused tail of the file is
    /// given back to the filesystem.
    fn release(&self, start: u64, written_end: u64, end: u64) {
        let mut st = self.state();
        if let Some(i) = st.in_flight.iter().position(|&r| r == (start, end)) {
            st.in_flight.swap_remove(i);
        }
        st.give_back(written_end, end);
        self.publish_readable(&st);
        let keep = st.next.next_multiple_of(self.grow_step);
        if st.file_len >= keep + SHRINK_SLACK.max(self.grow_step) {
            // Nothing at or beyond `next` is readable, claimed or free-listed
            // (module docs, point 1), and the lock keeps claims out; a failed
            // shrink only leaves the file longer.
            if self.file.set_len(keep).is_ok() {
                st.file_len = keep;
                // Release: pairs with the swap in `flush`.
                self.size_dirty.store(true, Ordering::Release);
            }
        }
    }

    /// The bytes `[off, off + len)` if they are readable (see the module
    /// docs), else `Err(bytes readable from offset 0)`.
    pub(crate) fn read(&self, off: u64, len: u64) -> Result<&[u8], u64> {
        let end = off.checked_add(len).ok_or(0u64)?;
        let below = self.readable_below.load(Ordering::Acquire);
        if end > below {
            // Slow path: maybe above a live claim, or in the gap between two.
            // The lock orders us after every finished claim's writes.
            let st = self.state();
            if !st.is_readable(off, end) {
                return Err(st.readable_below());
            }
        }
        // SAFETY: `[off, end)` is readable: below `next <= file_len <=
        // map_len`, so inside both the mapping and the file (no SIGBUS), and
        // claimed by no writer, now or later (readable bytes never become
        // claimed again; module docs, point 2). Only `overwrite` may change
        // them (point 3). The mapping lives as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off as usize), len as usize) })
    }

    /// Rewrite readable bytes at `off` with `data` (repair). Readers holding
    /// these bytes may observe a mix of old and new content. `data` must not
    /// overlap the range it overwrites (a shared slice of bytes being written).
    pub(crate) fn overwrite(&self, off: u64, data: &[u8]) -> Result<(), OverwriteError> {
        let len = data.len() as u64;
        let end = off.checked_add(len).ok_or(OverwriteError::NotReadable(0))?;
        {
            let st = self.state();
            if !st.is_readable(off, end) {
                return Err(OverwriteError::NotReadable(st.readable_below()));
            }
        }
        let dst = self.map.as_ptr() as usize + off as usize;
        let src = data.as_ptr() as usize;
        if src < dst + data.len() && dst < src + data.len() {
            return Err(OverwriteError::Overlap);
        }
        let _one_repair = self.repair.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: `[off, end)` is readable, so inside the mapping and the file
        // and written by no claim (module docs, point 2); repairs are
        // serialized by `self.repair`, and `data` does not overlap it (checked
        // above). Concurrent readers may see a mix (point 3).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(off as usize), data.len());
        }
        Ok(())
    }

    /// Make `[off, off + len)` and the file's size durable (msync, then
    /// fdatasync if the file grew since the last flush).
    pub(crate) fn flush(&self, off: u64, len: u64) -> io::Result<()> {
        if len > 0 {
            if off.saturating_add(len) > self.map.len() as u64 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "flush beyond the mapping",
                ));
            }
            self.map.flush_range(off as usize, len as usize)?;
        }
        // AcqRel: pairs with the Release store in `claim`.
        if self.size_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.file.sync_data() {
                self.size_dirty.store(true, Ordering::Release);
                return Err(e);
            }
        }
        Ok(())
    }

    /// `(used, file_len)`: bytes handed out and not given back, and the
    /// file's length.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let st = self.state();
        (st.next - st.free_below_next(), st.file_len)
    }

    /// Path of the blob file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl std::fmt::Debug for BlobSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobSpace")
            .field("path", &self.path)
            .field("map_len", &self.map.len())
            .field("state", &*self.state())
            .finish_non_exhaustive()
    }
}

/// An exclusively claimed range of the blob, filled front to back. Dropping
/// it ends the claim (see [`BlobSpace::release`]).
pub(crate) struct Claim<'a> {
    space: &'a BlobSpace,
    start: u64,
    end: u64,
    /// Next byte to write.
    cursor: u64,
}

impl Claim<'_> {
    /// First byte of the claim.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.cursor - self.start
    }

    /// Bytes left.
    pub(crate) fn left(&self) -> u64 {
        self.end - self.cursor
    }

    /// Bytes this claim already wrote: `[off, off + len)` must lie within
    /// `[start, start + written)`, else `None`.
    pub(crate) fn written_bytes(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if off < self.start || end > self.cursor {
            return None;
        }
        // SAFETY: `[off, end)` lies inside this claim's written part, inside
        // the file. Only this claim writes there, through `push(&mut self)`,
        // which cannot run while the returned borrow of `self` lives; no
        // other writer or reader is handed these bytes while claimed.
        Some(unsafe { std::slice::from_raw_parts(self.space.map.as_ptr().add(off as usize), len as usize) })
    }

    /// Copy `data` to the next free bytes of the claim; returns their offset
    /// in the blob, or `None` if it does not fit.
    pub(crate) fn push(&mut self, data: &[u8]) -> Option<u64> {
        let len = data.len() as u64;
        if len > self.left() {
            return None;
        }
        let at = self.cursor;
        // SAFETY: `[at, at + len)` lies inside this claim, which was inside
        // the file when handed out (the file never shrinks) and is written by
        // no one else: claims are disjoint, `&mut self` excludes a second
        // writer, and readers are refused claimed bytes (module docs, point
        // 2). For the same reason `data` cannot overlap it: nothing hands out
        // a slice of claimed bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.space.map.as_mut_ptr().add(at as usize),
                data.len(),
            );
        }
        self.cursor += len;
        Some(at)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.space.release(self.start, self.cursor, self.end);
    }
}

impl std::fmt::Debug for Claim<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("cursor", &self.cursor)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(cap: u64) -> (tempfile::TempDir, BlobSpace) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let s = BlobSpace::open(file, path, 0, cap, 4096).unwrap();
        (dir, s)
    }

    #[test]
    fn claimed_bytes_are_not_readable_until_released() {
        let (_d, s) = space(1 << 20);
        let mut c = s.claim(100, 1 << 20).unwrap();
        let at = c.push(b"hello").unwrap();
        assert_eq!(at, 0);
        assert!(s.read(at, 5).is_err());
        drop(c);
        assert_eq!(s.read(at, 5).unwrap(), b"hello");
        // The unwritten tail went back: the next claim starts right after
        // (aligned), and the tail is not readable.
        assert!(s.read(5, 10).is_err());
        let c2 = s.claim(10, 1 << 20).unwrap();
        assert_eq!(c2.start(), CLAIM_ALIGN);
    }

    #[test]
    fn gaps_between_live_claims_are_readable() {
        let (_d, s) = space(1 << 20);
        let mut a = s.claim(100, 1 << 20).unwrap();
        let mut b = s.claim(100, 1 << 20).unwrap();
        a.push(&[1; 100]).unwrap();
        b.push(&[2; 100]).unwrap();
        let b_start = b.start();
        drop(b);
        // `a` still live below `b`: the fast bound stays at 0, the slow path
        // still allows `b`'s bytes.
        assert_eq!(s.read(b_start, 100).unwrap(), &[2; 100][..]);
        assert!(s.read(0, 1).is_err());
        drop(a);
        assert_eq!(s.read(0, 100).unwrap(), &[1; 100][..]);
    }

    #[test]
    fn full_and_growth() {
        let (_d, s) = space(8192);
        assert!(matches!(
            s.claim(8193, 8192),
            Err(ClaimError::Full { free: 8192 })
        ));
        let mut c = s.claim(5000, 8192).unwrap();
        assert_eq!(s.usage().1, 8192);
        c.push(&[7; 5000]).unwrap();
        assert!(c.push(&[7; 1]).is_none());
        drop(c);
        assert!(matches!(s.claim(4000, 8192), Err(ClaimError::Full { .. })));
        s.flush(0, 5000).unwrap();
    }

    #[test]
    fn space_released_before_a_later_claim_is_reused_never_read() {
        let (_d, s) = space(1 << 20);
        let mut a = s.claim(1000, 1 << 20).unwrap();
        let b = s.claim(1000, 1 << 20).unwrap();
        a.push(&[1; 100]).unwrap();
        let b_start = b.start();
        // `a` ends (a session gone) while `b` lives: its unwritten 900
        // bytes are free again, not readable, not lost.
        drop(a);
        assert_eq!(s.read(0, 100).unwrap(), &[1; 100][..]);
        assert!(s.read(100, 1).is_err(), "released bytes are never readable");
        assert_eq!(s.usage().0, b_start + 1000 - 900);
        let mut c = s.claim(800, 1 << 20).unwrap();
        assert!(c.start() >= 100 && c.start() + 800 <= b_start, "reused: {c:?}");
        c.push(&[3; 800]).unwrap();
        drop(c);
        drop(b);
        // Everything after the last written byte went back to `next`.
        let (used, _) = s.usage();
        assert!(used <= 100 + CLAIM_ALIGN + 800, "{used}");
        let d = s.claim(10, 1 << 20).unwrap();
        assert!(d.start() < b_start, "the tail after c was given back: {d:?}");
    }

    #[test]
    fn a_long_released_tail_shrinks_the_file() {
        let (_d, s) = space(512 << 20);
        let mut c = s.claim(200 << 20, 512 << 20).unwrap();
        assert!(s.usage().1 >= 200 << 20);
        c.push(&[5; 4096]).unwrap();
        drop(c);
        // Only the written part (rounded to the growth step) stays allocated.
        assert_eq!(s.usage(), (4096, 4096));
        assert_eq!(s.read(0, 4096).unwrap(), &[5; 4096][..]);
        let c = s.claim(100, 512 << 20).unwrap();
        assert_eq!(c.start(), 4096);
    }

    #[test]
    fn overwrite_only_readable() {
        let (_d, s) = space(1 << 20);
        let mut c = s.claim(10, 1 << 20).unwrap();
        c.push(&[0; 10]).unwrap();
        assert!(s.overwrite(0, &[1; 10]).is_err());
        drop(c);
        s.overwrite(0, &[1; 10]).unwrap();
        assert_eq!(s.read(0, 10).unwrap(), &[1; 10][..]);
        let src = s.read(0, 10).unwrap();
        assert_eq!(s.overwrite(2, &src[..5]), Err(OverwriteError::Overlap));
    }
}
