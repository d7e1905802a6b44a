//! The receiving end of a files session on this machine: [`Landing`] does
//! the filesystem work a files receiver decides on — answer probes, create
//! directories and symlinks, place each regular file (leave it, set its
//! metadata only, or rebuild it under a temporary name), write chunk bytes
//! into it with `pwritev` (aligned 4 KiB blocks of zeros left as holes
//! unless the session is `--no-sparse`), and finish it (file hash of its
//! chunks, length, mode and mtime, rename into place, manifest record). The protocol decisions stay in the
//! session's core; everything here goes through [`DestRoot`], so it never
//! leaves the destination.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::{
    set_file_times_and_mode, DestRoot, FileStat, ParkedTemp, StatCache, Symlinked, TempFile, PERM_MASK,
};
use check::{By, Verdict};

mod check;
mod meta;
use crate::chunk::{digest_open_file, is_zero, ChunkParams, QuickDigest};
use crate::error::FilesError;
use crate::manifest::{Manifest, Written};
use crate::path::RelPath;

/// BLAKE3 of a chunk or of a whole file.
pub type Hash = [u8; 32];

/// Why one entry could not be placed (the session goes on; the entry is
/// reported as failed).
#[derive(Debug, thiserror::Error)]
pub enum LandError {
    /// The destination refused an operation (the error names the path).
    #[error(transparent)]
    Files(#[from] FilesError),
    /// Setting mode or mtime of an open file failed.
    #[error("set mode/mtime: {0}")]
    SetMeta(io::Error),
    /// Setting mode or mtime of a held file by name failed.
    #[error("set mode/mtime: {0}")]
    SetMetaByName(FilesError),
    /// The file is no longer what the sender's PROBE found.
    #[error("changed at the destination after the sender asked about it (PROBE); send again")]
    ChangedSinceProbe,
    /// The file hash of the chunks received (each checked against its own
    /// hash) is not the one the sender announced.
    #[error("the chunks received do not make up the file hash the sender announced (a sender bug)")]
    ContentMismatch,
    /// Reading the rebuilt file back for its XXH3-128 failed.
    #[error("re-reading for its digest: {0}")]
    Reread(io::Error),
    /// Writing chunk bytes failed.
    #[error("write: {0}")]
    Write(io::Error),
    /// A held file this one shares blocks with (a reflink) changed while
    /// they were shared, and the bytes shared no longer match their chunks.
    #[error("a file at the destination it shares blocks with changed while they were shared; send again")]
    HeldChanged,
    /// The file number is not being rebuilt (the caller's bug).
    #[error("file {0} is not being rebuilt")]
    NotOpen(u64),
}

/// A regular file a sender announced.
#[derive(Debug, Clone, Copy)]
pub struct FileSpec<'a> {
    /// Where it goes, beneath the destination.
    pub rel: &'a RelPath,
    /// Its size.
    pub size: u64,
    /// Its mtime, ns since the epoch.
    pub mtime_ns: i128,
    /// Its permission bits.
    pub mode: u32,
    /// Its BLAKE3 (or, for a HELD file, XXH3-128 and 16 zero bytes).
    pub file_hash: Hash,
    /// The sender says the destination holds it already (it asked: PROBE).
    pub held: bool,
}

/// What [`Landing::open_file`] decided for a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Same size, mtime and permission bits at the destination: left as it is.
    Unchanged,
    /// Same content at the destination (manifest, or size and mtime where
    /// the manifest does not know): only metadata was set (a chmod-only
    /// change lands here, its bytes never sent).
    SameContent,
    /// To be rebuilt: a temporary file is open under the file's number.
    Rebuild,
}

/// The receiving end of one files session in a destination (see the module docs).
#[derive(Debug)]
pub struct Landing<'d> {
    root: &'d DestRoot,
    manifest: Option<Arc<Manifest>>,
    fsync: bool,
    /// Open directory of the last path probed or set by name.
    stat_cache: StatCache,
    /// Directories known to exist (created or checked this session).
    dirs_made: HashSet<Vec<u8>>,
    /// Directories this session created, with the mode asked for: empty
    /// when made, so a file landing in one has nothing to compare with (no
    /// `stat` of its name).
    dirs_new: HashMap<Vec<u8>, u32>,
    /// Files being rebuilt, by the sender's file number.
    open: HashMap<u64, TempFile>,
    /// Files being rebuilt that wait with their descriptors closed.
    parked: HashMap<u64, ParkedTemp>,
    /// The session's chunk parameters: file hashes compare only when
    /// computed with them.
    params: ChunkParams,
    /// Content decides, not size and mtime (`check`).
    checksum: bool,
    /// Runs of zeros in rebuilt files are left as holes ([`Self::set_sparse`]).
    sparse: bool,
}

impl<'d> Landing<'d> {
    /// A session's landing in `root`; `manifest` records what it writes,
    /// `fsync` makes each file durable before its rename.
    pub fn new(root: &'d DestRoot, manifest: Option<Arc<Manifest>>, fsync: bool) -> Self {
        Self {
            root,
            manifest,
            fsync,
            stat_cache: StatCache::default(),
            dirs_made: HashSet::new(),
            dirs_new: HashMap::new(),
            open: HashMap::new(),
            parked: HashMap::new(),
            params: ChunkParams::default(),
            checksum: false,
            sparse: true,
        }
    }

    /// Whether rebuilt files keep runs of zeros as holes (the default):
    /// an aligned [`SPARSE_BLOCK`] of zeros is not written, and a file is
    /// given its full length when it is finished. Off (`--no-sparse`),
    /// every byte is written. Temporary files are always new (`O_EXCL`),
    /// so a block not written reads as zeros.
    pub fn set_sparse(&mut self, sparse: bool) {
        self.sparse = sparse;
    }

    /// Whether rebuilt files keep runs of zeros as holes.
    pub fn sparse(&self) -> bool {
        self.sparse
    }

    /// The destination root.
    pub fn root(&self) -> &DestRoot {
        self.root
    }

    /// Whether finishing a file needs its XXH3-128 (a manifest is kept).
    pub fn wants_quick(&self) -> bool {
        self.manifest.is_some()
    }

    /// Whether the destination already has the probed file: the manifest
    /// names this very file with a hash starting with `key`, or (content
    /// unknown) the quick check passes; see `check`. Changes no file.
    pub fn holds(&mut self, rel: &RelPath, size: u64, mtime_ns: i128, key: &[u8]) -> bool {
        match self.root.stat_existing(&mut self.stat_cache, rel) {
            Ok(Some(st)) => match self.verdict(rel, &st, size, By::Digest, |w| {
                w.digest.get(..key.len()) == Some(key)
            }) {
                Verdict::Same(_) => true,
                Verdict::Differs => false,
                Verdict::Unknown => st.size == size && st.mtime_ns == mtime_ns,
            },
            _ => false,
        }
    }

    /// Creates `rel`'s parent directories, once per directory (a tree's
    /// files mostly share their parent).
    pub fn make_parent(&mut self, rel: &RelPath) -> Result<(), FilesError> {
        let Some(parent) = rel.parent() else {
            return Ok(());
        };
        if !self.dirs_made.contains(parent.as_bytes()) {
            if self.root.make_dir_all(&parent, 0o755)? {
                self.dirs_new.insert(parent.as_bytes().to_vec(), 0o755);
            }
            self.dirs_made.insert(parent.as_bytes().to_vec());
        }
        Ok(())
    }

    /// Creates the directory `rel` (its final mode and mtime are set by
    /// [`Self::set_dir_meta`] once nothing more is written into it).
    pub fn make_dir(&mut self, rel: &RelPath, mode: u32) -> Result<(), FilesError> {
        let parent_new = rel
            .parent()
            .is_some_and(|p| self.dirs_new.contains_key(p.as_bytes()));
        if self
            .root
            .make_dir_cached(&mut self.stat_cache, rel, mode, parent_new)?
        {
            self.dirs_new.insert(rel.as_bytes().to_vec(), mode);
        }
        self.dirs_made.insert(rel.as_bytes().to_vec());
        Ok(())
    }

    /// Sets mode and mtime of the directory `rel`. One this session
    /// created with no bit `mode` lacks (asked for `(asked & 0o755) |
    /// 0o700`, less the umask) is left as it is by narrowing: only its
    /// mtime is set, by name, with no descriptor opened.
    pub fn set_dir_meta(&mut self, rel: &RelPath, mtime_ns: i128, mode: u32) -> Result<(), FilesError> {
        let narrow = |asked: &u32| ((asked & super::NEW_DIR_MODE_MAX) | 0o700) & !mode != 0;
        if self.dirs_new.get(rel.as_bytes()).is_some_and(|a| !narrow(a)) {
            return self
                .root
                .set_dir_mtime_cached(&mut self.stat_cache, rel, mtime_ns);
        }
        self.root.set_dir_times_and_mode(rel, mtime_ns, mode)
    }

    /// Makes `rel` the symlink `target` with mtime `mtime_ns`, or keeps
    /// the same link there ([`DestRoot::create_symlink`]).
    pub fn make_symlink(
        &self,
        rel: &RelPath,
        target: &[u8],
        mtime_ns: i128,
    ) -> Result<Symlinked, FilesError> {
        self.root.create_symlink(rel, target, mtime_ns)
    }

    /// Sets the mtime of the session's top directory (`None`: the root),
    /// whose contents were sent ([`DestRoot::set_top_mtime`]).
    pub fn set_top_mtime(&self, rel: Option<&RelPath>, mtime_ns: i128) -> Result<(), FilesError> {
        self.root.set_top_mtime(rel, mtime_ns)
    }

    /// Decides what to do with the regular file `f`, number `no`: leave
    /// it, set its metadata only, or open a temporary file to rebuild it.
    pub fn open_file(&mut self, no: u64, f: &FileSpec<'_>) -> Result<Placement, LandError> {
        if f.held {
            return self.open_held(f);
        }
        // A sender names each path once: in a directory this session made,
        // nothing can be there to compare with.
        let fresh = f
            .rel
            .parent()
            .is_some_and(|p| self.dirs_new.contains_key(p.as_bytes()));
        let existing = match fresh {
            true => None,
            false => self.root.open_existing_cached(&mut self.stat_cache, f.rel)?,
        };
        if let Some((file, meta)) = &existing {
            let quick = unchanged(meta, f.size, f.mtime_ns);
            let verdict = self.verdict(f.rel, &super::FileStat::of(meta), f.size, By::FileHash, |w| {
                w.hash == f.file_hash
            });
            let same_mode = FileStat::of(meta).mode & PERM_MASK == f.mode & PERM_MASK;
            if quick && same_mode && matches!(verdict, Verdict::Same(_) | Verdict::Unknown) {
                return Ok(Placement::Unchanged);
            }
            if quick && verdict == Verdict::Unknown {
                // Same size and mtime, other permission bits (a chmod):
                // the bits are set, no byte travels; nothing is known of
                // the content to record.
                set_file_times_and_mode(file, f.mtime_ns, f.mode).map_err(LandError::SetMeta)?;
                return Ok(Placement::SameContent);
            }
            if let Verdict::Same(w) = verdict {
                // The content is already there: metadata only, no chunk read or written.
                let now = set_file_times_and_mode(file, f.mtime_ns, f.mode)
                    .and_then(|()| file.metadata())
                    .map_err(LandError::SetMeta)?;
                if let Some(m) = &self.manifest {
                    m.insert(f.rel.as_bytes(), Written::of(&now, w.hash, w.chunk_avg, w.digest));
                }
                return Ok(Placement::SameContent);
            }
        }
        let temp = self.root.create_temp_cached(&mut self.stat_cache, f.rel)?;
        self.open.insert(no, temp);
        Ok(Placement::Rebuild)
    }

    /// [`Self::open_file`] for a HELD file (§10.10): by name in the directory
    /// the probe looked in, without opening the file unless its permission
    /// bits change.
    fn open_held(&mut self, f: &FileSpec<'_>) -> Result<Placement, LandError> {
        let st = self
            .root
            .stat_existing(&mut self.stat_cache, f.rel)?
            .ok_or(LandError::ChangedSinceProbe)?;
        let quick = st.size == f.size && st.mtime_ns == f.mtime_ns;
        let same_mode = st.mode & PERM_MASK == f.mode & PERM_MASK;
        let w = match self.verdict(f.rel, &st, f.size, By::Digest, |w| {
            f.file_hash[..16] == w.digest && f.file_hash[16..] == [0; 16]
        }) {
            Verdict::Same(_) | Verdict::Unknown if quick && same_mode => return Ok(Placement::Unchanged),
            Verdict::Same(w) => Some(w),
            // Same size and mtime, other permission bits (a chmod): only
            // the bits are set.
            Verdict::Unknown if quick => None,
            Verdict::Differs | Verdict::Unknown => return Err(LandError::ChangedSinceProbe),
        };
        let now = self
            .root
            .set_existing_times_and_mode(&mut self.stat_cache, f.rel, &st, f.mtime_ns, f.mode)
            .map_err(LandError::SetMetaByName)?
            .ok_or(LandError::ChangedSinceProbe)?;
        if let (Some(m), Some(w)) = (&self.manifest, w) {
            m.insert(
                f.rel.as_bytes(),
                Written::of_stat(&now, w.hash, w.chunk_avg, w.digest),
            );
        }
        Ok(Placement::SameContent)
    }

    /// Closes the descriptors of the file `no` being rebuilt until it is
    /// written or finished again: a session's open descriptors stay few
    /// however many files wait (for REPAIR). A file that cannot be parked
    /// is dropped (and fails when next used).
    pub fn park(&mut self, no: u64) {
        if let Some(temp) = self.open.remove(&no) {
            if let Ok(p) = temp.park() {
                self.parked.insert(no, p);
            }
        }
    }

    /// Open files being rebuilt, parked ones not counted.
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// The open temporary file of `no`, reopening it if it was parked.
    fn temp(&mut self, no: u64) -> Result<&TempFile, LandError> {
        if let Some(p) = self.parked.remove(&no) {
            let temp = self.root.reopen_temp(p)?;
            self.open.insert(no, temp);
        }
        self.open.get(&no).ok_or(LandError::NotOpen(no))
    }

    /// Writes `slices` at `at` of the file `no` being rebuilt, with as few
    /// `pwritev` calls as the kernel allows.
    pub fn write_at(&mut self, no: u64, at: u64, slices: &mut [IoSlice<'_>]) -> Result<(), LandError> {
        let sparse = self.sparse;
        let temp = self.temp(no)?;
        match sparse {
            true => write_sparse_vectored_at(temp.file(), slices, at),
            false => write_all_vectored_at(temp.file(), slices, at),
        }
        .map_err(LandError::Write)
    }

    /// Records in the manifest that the file at `rel`, found as `meta`,
    /// has the file hash `hash` (with this session's chunk parameters) and
    /// XXH3-128 `quick` (read and hashed by the caller just now). False if
    /// there is no manifest to record it in.
    pub fn record(&self, rel: &RelPath, meta: &std::fs::Metadata, hash: Hash, quick: QuickDigest) -> bool {
        match &self.manifest {
            Some(m) => {
                m.insert(rel.as_bytes(), Written::of(meta, hash, self.params.avg(), quick));
                true
            }
            None => false,
        }
    }

    /// Shares `len` bytes of `src` from `src_at` into the file `no` being
    /// rebuilt at `at` (a reflink: see [`DestRoot::reflink_block`] for
    /// where it works and [`pfs_sys::clone_range`] for the alignment it
    /// needs). An error leaves the range as it was; the caller copies.
    pub fn clone_at(&mut self, no: u64, at: u64, src: &File, src_at: u64, len: u64) -> Result<(), LandError> {
        let temp = self.temp(no)?;
        pfs_sys::clone_range(temp.file(), at, src, src_at, len).map_err(LandError::Write)
    }

    /// The temporary file of `no` being rebuilt: its name in `.pfs/tmp`,
    /// where it will land, its inode.
    pub fn temp_info(&self, no: u64) -> Option<(&[u8], &RelPath, u64)> {
        use std::os::unix::fs::MetadataExt;
        if let Some(t) = self.open.get(&no) {
            let ino = t.file().metadata().ok()?.ino();
            return Some((t.tmp_name(), t.rel(), ino));
        }
        self.parked.get(&no).map(|p| (p.tmp_name(), p.rel(), p.ino()))
    }

    /// Leaves the temporary file of `no` in `.pfs/tmp` for a later send
    /// (its chunks were checkpointed): closed, never renamed nor removed.
    pub fn keep(&mut self, no: u64) {
        if let Some(t) = self.open.remove(&no) {
            t.leave();
        }
        self.parked.remove(&no);
    }

    /// Reads `buf.len()` bytes at `at` of the file `no` being rebuilt (a
    /// chunk written earlier that another place repeats).
    pub fn read_at(&mut self, no: u64, at: u64, buf: &mut [u8]) -> Result<(), LandError> {
        let temp = self.temp(no)?;
        temp.file().read_exact_at(buf, at).map_err(LandError::Reread)
    }

    /// Finishes the file `no`: checks its file hash against the sender's,
    /// sets mode and mtime, renames it into place, records it in the
    /// manifest. `digest` is the file hash of the chunks written (each
    /// checked against its own hash), `quick` the XXH3-128 computed while
    /// they were written, if they were written in order (else the file is
    /// read back for it, when the manifest wants it). Returns the landed
    /// file's stat.
    pub fn finish_file(
        &mut self,
        no: u64,
        f: &FileSpec<'_>,
        digest: Hash,
        quick: Option<QuickDigest>,
    ) -> Result<FileStat, LandError> {
        self.temp(no)?;
        let temp = self.open.remove(&no).ok_or(LandError::NotOpen(no))?;
        if digest != f.file_hash {
            return Err(LandError::ContentMismatch);
        }
        // Zeros at the end were never written (holes): the length says
        // where the file ends, before it is read back or lands.
        if self.sparse {
            temp.file().set_len(f.size).map_err(LandError::Write)?;
        }
        let quick = match quick {
            Some(q) => q,
            None if !self.wants_quick() => [0; 16],
            None => digest_open_file(temp.file(), f.rel.as_ref(), &self.params)
                .map_err(|e| LandError::Reread(io::Error::other(e)))?,
        };
        temp.set_times_and_mode(f.mtime_ns, f.mode)?;
        let meta = temp.persist(self.fsync)?;
        if let Some(m) = &self.manifest {
            m.insert(
                f.rel.as_bytes(),
                Written::of(&meta, f.file_hash, self.params.avg(), quick),
            );
        }
        Ok(FileStat::of(&meta))
    }

    /// Drops the temporary file of `no` (it is unlinked).
    pub fn discard(&mut self, no: u64) {
        self.open.remove(&no);
        if let Some(p) = self.parked.remove(&no) {
            self.root.remove_parked(&p);
        }
    }
}

impl Drop for Landing<'_> {
    /// Parked temporary files are unlinked like open ones (whose
    /// [`TempFile`] does it), however the session ended.
    fn drop(&mut self) {
        for p in self.parked.values() {
            self.root.remove_parked(p);
        }
    }
}

/// `pwritev` until every slice is written.
pub(super) fn write_all_vectored_at(f: &File, mut slices: &mut [IoSlice<'_>], mut at: u64) -> io::Result<()> {
    while !slices.is_empty() {
        // The leading slices that fit in one piece (at least part of one).
        let (mut k, mut len) = (0, 0);
        while k < slices.len() && k < MAX_IOV && len + slices[k].len() <= WRITE_PIECE {
            len += slices[k].len();
            k += 1;
        }
        let n = match k {
            0 => rustix::io::pwrite(f, &slices[0][..WRITE_PIECE], at)?,
            _ => rustix::io::pwritev(f, &slices[..k], at)?,
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        at += n as u64;
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// Smallest run of zeros left as a hole in a rebuilt file, and its
/// alignment in the file: the filesystem block most use.
pub const SPARSE_BLOCK: usize = 4096;

/// [`write_all_vectored_at`], less the aligned [`SPARSE_BLOCK`]s that are
/// all zeros: those are left unwritten (holes, in a file that is new).
/// Data with no such block is written exactly as by
/// [`write_all_vectored_at`]; checking costs a word per block of data that
/// is not zero.
pub(super) fn write_sparse_vectored_at(f: &File, slices: &mut [IoSlice<'_>], at: u64) -> io::Result<()> {
    let mut off = at;
    let any_zero = slices.iter().any(|s| {
        let found = zero_blocks(s, off).next().is_some();
        off += s.len() as u64;
        found
    });
    if !any_zero {
        return write_all_vectored_at(f, slices, at);
    }
    let mut off = at;
    for s in slices.iter() {
        let mut done = 0usize;
        for (from, to) in zero_blocks(s, off) {
            if from > done {
                write_all_at(f, &s[done..from], off + done as u64)?;
            }
            done = to;
        }
        if done < s.len() {
            write_all_at(f, &s[done..], off + done as u64)?;
        }
        off += s.len() as u64;
    }
    Ok(())
}

/// `pwrite` until all of `buf` is written at `at`, in pieces of at most
/// [`WRITE_PIECE`].
fn write_all_at(f: &File, buf: &[u8], at: u64) -> io::Result<()> {
    write_all_vectored_at(f, &mut [IoSlice::new(buf)], at)
}

/// The runs of whole [`SPARSE_BLOCK`]s of `buf` (which starts at file
/// offset `at`) that are aligned in the file and all zeros, as byte ranges
/// of `buf`, in order; adjacent blocks make one run.
fn zero_blocks(buf: &[u8], at: u64) -> impl Iterator<Item = (usize, usize)> + '_ {
    const B: usize = SPARSE_BLOCK;
    let first = ((B as u64 - at % B as u64) % B as u64) as usize;
    let mut pos = first;
    std::iter::from_fn(move || {
        while pos + B <= buf.len() {
            if is_zero(&buf[pos..pos + B]) {
                let start = pos;
                pos += B;
                while pos + B <= buf.len() && is_zero(&buf[pos..pos + B]) {
                    pos += B;
                }
                return Some((start, pos));
            }
            pos += B;
        }
        None
    })
}

/// Most bytes one write puts in the page cache. A larger write lets the
/// kernel fill 2 MiB folios, and on a VM whose host takes back free guest
/// memory a fresh 2 MiB folio costs several times more per byte to fill
/// than small ones (measured on the project's test VM, ext4, 1 GiB after
/// drop_caches: 8 MiB writes 2.2–2.9 s of system time, 2 MiB 1.4 s, 1 MiB
/// 0.30 s, 512 KiB and less 0.21–0.27 s). rsync and cp write in pieces of
/// this size or less.
const WRITE_PIECE: usize = 512 << 10;
/// Most slices one `pwritev` takes (`IOV_MAX`).
const MAX_IOV: usize = 1024;

/// rsync's quick check: same size and same mtime (to the nanosecond).
fn unchanged(meta: &std::fs::Metadata, size: u64, mtime_ns: i128) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.is_file()
        && meta.size() == size
        && i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()) == mtime_ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn zero_blocks_are_whole_aligned_blocks_merged_into_runs() {
        let mut b = vec![0u8; 5 * SPARSE_BLOCK + 100];
        b[8199] = 1;
        // At file offset 100 the first aligned block starts at byte 3996.
        let runs: Vec<_> = zero_blocks(&b, 100).collect();
        assert_eq!(runs, [(3996, 8092), (12188, 20380)]);
        assert_eq!(zero_blocks(&b[..SPARSE_BLOCK], 1).count(), 0);
    }

    #[test]
    fn sparse_writes_leave_zero_blocks_unwritten_and_read_back_the_same() {
        let f = tempfile::tempfile().expect("temporary file");
        let data: Vec<u8> = (0..64u32).flat_map(|i| i.to_le_bytes()).collect();
        let zeros = vec![0u8; 1 << 20];
        let mut slices = [IoSlice::new(&data), IoSlice::new(&zeros), IoSlice::new(&data)];
        let at = 7;
        write_sparse_vectored_at(&f, &mut slices, at).expect("write");
        let len = at + 2 * data.len() as u64 + zeros.len() as u64;
        assert_eq!(f.metadata().expect("stat").len(), len);
        let mut back = vec![1u8; len as usize];
        f.read_exact_at(&mut back, 0).expect("read");
        let mut want = vec![0u8; at as usize];
        want.extend_from_slice(&data);
        want.extend_from_slice(&zeros);
        want.extend_from_slice(&data);
        assert!(back == want);
        // Two data blocks at most; the MiB of zeros between is a hole
        // (where the filesystem keeps holes at all: tmpfs and ext4 do).
        assert!(f.metadata().expect("stat").blocks() * 512 <= 64 << 10);

        let g = tempfile::tempfile().expect("temporary file");
        let mut slices = [IoSlice::new(&data), IoSlice::new(&zeros), IoSlice::new(&data)];
        write_all_vectored_at(&g, &mut slices, at).expect("write");
        assert!(g.metadata().expect("stat").blocks() * 512 >= 1 << 20);
    }
}
