//! Runs of chunks a destination host copies from one held file at the same
//! offset within a block as in the file being rebuilt: where the
//! destination's filesystem takes reflinks (Btrfs, XFS; see
//! [`pfs_files::DestRoot::reflink_block`]), their whole blocks are shared
//! with the held file when the run ends (`FICLONERANGE`) instead of being
//! written, so a file sent again under another name, or grown at its end,
//! costs neither writes nor disk space for what it shares.
//!
//! Every chunk is read and checked against its hash before it joins a run
//! (the core needs the answer at once), and after the clone the run's
//! chunks are read back from the new file and checked again: the held file
//! may have changed in between without its ctime saying so (a store through
//! a shared mapping), and what is checked must be what landed
//! ([`LandError::HeldChanged`] if a chunk no longer matches). So a shared
//! block costs two reads and no write, where a copied one costs a read and
//! a write. Bytes outside whole blocks (the head of the run, its tail) are
//! written from the checked buffer as usual. A run ends after
//! [`MAX_RUN_BYTES`], so its bookkeeping stays small. A clone the
//! filesystem refuses falls back to copying the range (checked in place
//! the same way).

use std::fs::File;
use std::io::IoSlice;
use std::os::unix::fs::FileExt;

use pfs_files::{LandError, Landing};
use pfs_wire::files::Hash;

use crate::files::hash_matches;

/// Bytes a run covers at most before it is cloned and a new one starts.
pub(super) const MAX_RUN_BYTES: u64 = 64 << 20;

/// How a run's whole blocks got into the file being rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shared {
    /// Shared with the held file.
    Cloned,
    /// Copied: the filesystem refused this clone (another mount, files of
    /// kinds that cannot share blocks).
    RefusedHere,
    /// Copied: the filesystem has no reflinks after all.
    Unsupported,
}

/// Chunks, contiguous in the file being rebuilt and in one held file, not
/// written yet where they cover whole blocks.
#[derive(Debug)]
pub(super) struct CloneRun {
    /// The file being rebuilt.
    pub(super) no: u64,
    /// The held file's `base` in the index (its identity this session).
    pub(super) base: u64,
    block: u64,
    /// First whole block of the run (an offset in the file being rebuilt).
    start: u64,
    /// The held file's offset of `start` (same offset within a block).
    src_start: u64,
    /// End of the run in the file being rebuilt, and in the held file.
    end: u64,
    src_end: u64,
    /// Bytes at `tail_at..end` not written yet: after the last whole block.
    tail_at: u64,
    tail: Vec<u8>,
    /// The run's chunks (offset, len, hash), to check them in place.
    chunks: Vec<(u64, u32, Hash)>,
}

impl CloneRun {
    /// A run that starts with the chunk `bytes` (hash `hash`) at `at` of the
    /// file `no`, read at `src_at` of the held file `base`; `None` when the
    /// two offsets differ within a block (no block could be shared). Writes
    /// the chunk's bytes before the first whole block.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        landing: &mut Landing<'_>,
        no: u64,
        base: u64,
        block: u64,
        at: u64,
        src_at: u64,
        bytes: &[u8],
        hash: &Hash,
    ) -> Option<Result<Self, LandError>> {
        if at % block != src_at % block {
            return None;
        }
        let start = at.div_ceil(block) * block;
        let mut run = Self {
            no,
            base,
            block,
            start,
            src_start: src_at + (start - at),
            end: at,
            src_end: src_at,
            tail_at: start,
            tail: Vec::new(),
            chunks: Vec::new(),
        };
        Some(run.add(landing, at, bytes, hash).map(|()| run))
    }

    /// Whether the chunk at `at` of the file `no`, read at `src_at` of the
    /// held file `base`, continues this run (which is not full yet).
    pub(super) fn continues(&self, no: u64, base: u64, at: u64, src_at: u64) -> bool {
        self.no == no
            && self.base == base
            && self.end == at
            && self.src_end == src_at
            && self.end.saturating_sub(self.start) < MAX_RUN_BYTES
    }

    /// Adds the next chunk of the run (see [`Self::continues`]): bytes
    /// before the first whole block are written now, the rest waits.
    pub(super) fn add(
        &mut self,
        landing: &mut Landing<'_>,
        at: u64,
        bytes: &[u8],
        hash: &Hash,
    ) -> Result<(), LandError> {
        debug_assert_eq!(at, self.end);
        let len = bytes.len() as u64;
        let new_end = at + len;
        let head = self.start.saturating_sub(at).min(len) as usize;
        if head > 0 {
            landing.write_at(self.no, at, &mut [IoSlice::new(&bytes[..head])])?;
        }
        self.tail.extend_from_slice(&bytes[head..]);
        // Blocks now whole leave the tail: they will be shared.
        let tail_at = self.start.max(new_end / self.block * self.block);
        self.tail.drain(..(tail_at - self.tail_at) as usize);
        self.tail_at = tail_at;
        self.end = new_end;
        self.src_end += len;
        self.chunks.push((at, bytes.len() as u32, *hash));
        Ok(())
    }

    /// Ends the run: shares its whole blocks from `src` (the held file), or
    /// copies them where the filesystem refuses, writes its tail, then
    /// checks every chunk of the run where it landed.
    pub(super) fn finish(self, landing: &mut Landing<'_>, src: &File) -> Result<Shared, LandError> {
        use rustix::io::Errno;
        let whole = self.tail_at - self.start;
        let shared = match landing.clone_at(self.no, self.start, src, self.src_start, whole) {
            Ok(()) => Shared::Cloned,
            Err(LandError::Write(e))
                if matches!(Errno::from_io_error(&e), Some(Errno::OPNOTSUPP | Errno::NOTTY)) =>
            {
                Shared::Unsupported
            }
            Err(_) => Shared::RefusedHere,
        };
        if shared != Shared::Cloned {
            self.copy_whole(landing, src, whole)?;
        }
        if !self.tail.is_empty() {
            landing.write_at(self.no, self.tail_at, &mut [IoSlice::new(&self.tail)])?;
        }
        self.check_in_place(landing)?;
        Ok(shared)
    }

    /// Copies `whole` bytes from the held file into the run's whole blocks.
    fn copy_whole(&self, landing: &mut Landing<'_>, src: &File, whole: u64) -> Result<(), LandError> {
        let mut buf = vec![0u8; (whole as usize).min(1 << 20)];
        let mut done = 0u64;
        while done < whole {
            let n = ((whole - done) as usize).min(buf.len());
            src.read_exact_at(&mut buf[..n], self.src_start + done)
                .map_err(|_| LandError::HeldChanged)?;
            landing.write_at(self.no, self.start + done, &mut [IoSlice::new(&buf[..n])])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Reads the run's chunks back from the file being rebuilt and checks
    /// each against its hash.
    fn check_in_place(&self, landing: &mut Landing<'_>) -> Result<(), LandError> {
        let mut buf = Vec::new();
        for &(at, len, ref hash) in &self.chunks {
            buf.resize(len as usize, 0);
            landing
                .read_at(self.no, at, &mut buf)
                .map_err(|_| LandError::HeldChanged)?;
            if !hash_matches(&buf, hash) {
                return Err(LandError::HeldChanged);
            }
        }
        Ok(())
    }
}
