//! Receiver-side writes confined to a destination directory: [`DestRoot`],
//! and a files session's work in it: [`Landing`].
//!
//! Every operation takes a [`RelPath`] and resolves it against a file
//! descriptor held on the destination root, never against a path string:
//!
//! - with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//!   (Linux 5.6+), the kernel refuses any resolution that would leave the
//!   root or cross a symlink;
//! - where `openat2` is missing (`ENOSYS`, or `EPERM` from a seccomp filter),
//!   each component is opened with `openat(O_NOFOLLOW)`; `RelPath` has no
//!   `..` components, so this also stays beneath the root.
//!
//! The last component is then created, renamed or opened relative to the
//! descriptor of its parent directory, with `O_NOFOLLOW`/`O_EXCL`, so a
//! symlink planted in the destination (by anyone, at any time) can neither
//! redirect a write nor be written through. Renaming a file over an existing
//! symlink replaces the link itself.
//!
//! # Symlinks
//! A symlink entry from a peer is stored as it came, as rsync does: its
//! target verbatim (absolute, with `..`, dangling, components longer than
//! 255 bytes; [`check_symlink_target`] refuses only an empty one, a NUL or
//! more than 4095 bytes). Storing one is safe because the receiver never
//! follows a link: every path it writes, reads or removes is resolved
//! beneath the root without crossing a symlink, so a link from a peer (like
//! one planted by anyone else) can neither redirect a write nor be written
//! through — a later entry beneath it fails. The link's own mtime is set
//! (`AT_SYMLINK_NOFOLLOW`) and a link already there with the same target is
//! left in place ([`Symlinked::Kept`]), not recreated. A sender that wants
//! only links inside its tree applies [`crate::path::symlink_is_safe`]
//! (rsync's `--safe-links`).
//!
//! # The receiver's state directory and temporary files
//! `.pfs` at the root of a destination ([`STATE_DIR`], mode 0700) belongs to
//! the receiver: its temporary files (`.pfs/tmp/`), and in a destination
//! without a separate store its chunk index ([`index`]) and manifest. A
//! peer's path with a `.pfs` component anywhere is refused
//! ([`RelPath::is_reserved`]: another key's destination, with its own
//! `.pfs`, may lie beneath this one), so nothing a sender writes can land
//! there and no user file can be mistaken for pfs's own. What stands in
//! the way of the state directory is moved aside at start
//! ([`DestRoot::repair_state_dir`]).
//!
//! File content is written to `.pfs/tmp/<random>` (`O_EXCL`, mode 0600) and
//! renamed into its final directory by [`TempFile::persist`] (a rename within
//! the destination's filesystem; a directory in the destination that is
//! another mount point cannot receive files: `EXDEV`, reported as such); a
//! dropped, unpersisted [`TempFile`] unlinks itself. Temporaries left by a
//! killed receiver are removed by [`DestRoot::remove_stale_temps`], which
//! looks only in `.pfs/tmp/` and must not run while another transfer writes
//! into the same destination. A temporary name therefore never collides
//! with, and cleaning never removes, a user's file.
//!
//! Modes are applied with the setuid, setgid and sticky bits cleared
//! (`mode & 0o777`): a peer does not get to plant setuid files. A
//! directory's mode only narrows ([`DestRoot::set_dir_times_and_mode`]):
//! the protocol has no "preserve permissions" request, so an existing
//! directory never gains a bit, and one created for a peer is never group-
//! or other-writable ([`NEW_DIR_MODE_MAX`], the umask 0022 policy). A
//! POSIX ACL from a peer is clipped to the mode so set
//! ([`crate::xattr::acl::clip`], [`DestRoot::set_attrs`]): it never widens it.

use std::collections::hash_map::RandomState;
use std::fs::{File, Metadata};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Timestamps};
use rustix::io::Errno;

use crate::error::{FilesError, PathError};
use crate::path::{check_symlink_target, RelPath};

pub mod delete;
pub mod index;
pub mod landing;
pub mod meta;
pub mod state;

pub use delete::Removed;
pub use index::{DestIndex, IndexedFile};
pub use landing::{FileSpec, LandError, Landing, Placement};
pub use meta::{may_chown, Linked};
pub use state::StateRepair;

/// The receiver's own directory at the root of a destination (module docs).
pub const STATE_DIR: &str = ".pfs";
/// Where temporary files are written, beneath the root.
pub const TEMP_DIR: &str = ".pfs/tmp";
/// A partial file left for a later send is removed at a start after this
/// long without a write.
pub const PARTIAL_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Mode of a temporary file until it gets its final one.
pub const TEMP_MODE: u32 = 0o600;

/// Permission bits applied to created entries.
const PERM_MASK: u32 = 0o777;

/// The widest mode a directory created for a peer gets: no group or other
/// write, whatever the peer's mode and the process umask (umask 0022).
pub const NEW_DIR_MODE_MAX: u32 = 0o755;

/// A destination directory; all writes go beneath it (see the module docs).
#[derive(Debug)]
pub struct DestRoot {
    root: OwnedFd,
    path: PathBuf,
    openat2: bool,
    /// `.pfs/tmp`, opened (and created) on first use; shared with the
    /// temporary files made in it (no descriptor copied per file).
    tmp: OnceLock<Arc<OwnedFd>>,
}

/// A file being received: written under a temporary name in `.pfs/tmp`,
/// renamed into place by [`persist`](TempFile::persist), removed if dropped
/// first.
#[derive(Debug)]
pub struct TempFile {
    /// `.pfs/tmp`, where it is written.
    tmp_dir: Arc<OwnedFd>,
    /// Its final directory.
    dir: Arc<OwnedFd>,
    tmp_name: Vec<u8>,
    name: Vec<u8>,
    rel: RelPath,
    file: File,
    /// Its permission bits, when known (it was created with them).
    mode: Option<u32>,
    persisted: bool,
}

/// A [`TempFile`] with its descriptors closed, for a file that waits (for
/// REPAIR, say) while others are written: a session keeps any number of
/// these without holding a descriptor for each. Reopen it with
/// [`DestRoot::reopen_temp`]; remove it with [`DestRoot::remove_parked`]
/// (dropping it leaves the temporary file for `remove_stale_temps`).
#[derive(Debug)]
pub struct ParkedTemp {
    tmp_name: Vec<u8>,
    name: Vec<u8>,
    rel: RelPath,
    /// `(st_dev, st_ino)` when parked: a reopen finds this very file or fails.
    id: (u64, u64),
}

impl ParkedTemp {
    /// Where the file will land.
    pub fn rel(&self) -> &RelPath {
        &self.rel
    }

    /// Its name in `.pfs/tmp`.
    pub fn tmp_name(&self) -> &[u8] {
        &self.tmp_name
    }

    /// Its inode.
    pub fn ino(&self) -> u64 {
        self.id.1
    }
}

/// The directories a session used last, kept open: the parent of the
/// last files probed, created or set by name ([`DestRoot::stat_existing`],
/// [`DestRoot::create_temp_cached`] …) and the directories it made
/// ([`DestRoot::make_dir_cached`]), for the next files and subdirectories
/// in them: a tree arrives directory by directory, depth first. Like a
/// process's working directory (rsync works from one), each keeps naming
/// the directory it resolved even if that is renamed meanwhile; keep one
/// per session and drop it when the session ends.
#[derive(Debug, Default)]
pub struct StatCache {
    /// (path beneath the root, descriptor), the most recently used last.
    dirs: Vec<(Vec<u8>, Arc<OwnedFd>)>,
}

/// Directories a [`StatCache`] keeps open: enough for the parent and
/// grandparents a depth-first walk comes back to.
const CACHED_DIRS: usize = 16;

impl StatCache {
    /// The open directory `key`, now the most recently used.
    fn get(&mut self, key: &[u8]) -> Option<&Arc<OwnedFd>> {
        let i = self.dirs.iter().rposition(|(k, _)| k.as_slice() == key)?;
        let hit = self.dirs.remove(i);
        self.dirs.push(hit);
        self.dirs.last().map(|(_, d)| d)
    }

    /// Keeps `dir` open as `key`, closing the least recently used past
    /// [`CACHED_DIRS`].
    fn put(&mut self, key: &[u8], dir: OwnedFd) -> &Arc<OwnedFd> {
        if let Some(i) = self.dirs.iter().position(|(k, _)| k.as_slice() == key) {
            self.dirs.remove(i);
        } else if self.dirs.len() >= CACHED_DIRS {
            self.dirs.remove(0);
        }
        self.dirs.push((key.to_vec(), Arc::new(dir)));
        let (_, d) = &self.dirs[self.dirs.len() - 1];
        d
    }
}

/// What [`DestRoot::stat_existing`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i128,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i128,
    /// Mode bits (`st_mode & 0o7777`).
    pub mode: u32,
}

impl FileStat {
    /// The same fields of `meta`.
    pub fn of(meta: &Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            mode: meta.mode() & 0o7777,
        }
    }

    fn of_stat(st: &rfs::Stat) -> Self {
        Self {
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime_ns: i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
            mode: st.st_mode & 0o7777,
        }
    }
}

impl DestRoot {
    /// Open `dir` (which must exist; symlinks in `dir` itself are followed)
    /// as a destination root.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, FilesError> {
        let path = dir.as_ref().to_path_buf();
        let root = rfs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FilesError::io("open destination", &path, e.into()))?;
        let probe = rfs::openat2(
            &root,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            beneath(),
        );
        // ENOSYS: kernel before 5.6; EPERM: a seccomp filter; EINVAL: flags
        // unknown to this kernel. All mean: resolve component by component.
        let openat2 = !matches!(probe, Err(Errno::NOSYS | Errno::PERM | Errno::INVAL));
        Ok(Self {
            root,
            path,
            openat2,
            tmp: OnceLock::new(),
        })
    }

    /// The directory `rel` beneath this root (created, mode 0755, if
    /// absent; no symlink followed) as a root of its own: where a key
    /// confined to `dir=` writes.
    pub fn subroot(&self, rel: &RelPath) -> Result<DestRoot, FilesError> {
        self.create_dir_all(rel, 0o755)?;
        let root = self
            .open_beneath(rel.as_bytes(), dir_flags(), Mode::empty())
            .map_err(|e| dest_err("open directory", rel, e))?;
        Ok(Self {
            root,
            path: self.path.join(rel.as_path()),
            openat2: self.openat2,
            tmp: OnceLock::new(),
        })
    }

    /// The existing directory `rel` beneath this root as a root of its
    /// own, creating nothing and following no symlink: what a mount reads
    /// (docs/wire.md §12). A symlink or a file in the way is
    /// [`PathError::NotADirectory`]; a missing one the `NotFound` I/O error.
    pub fn existing_subroot(&self, rel: &RelPath) -> Result<DestRoot, FilesError> {
        let root = self
            .open_beneath(rel.as_bytes(), dir_flags(), Mode::empty())
            .map_err(|e| dest_err("open directory", rel, e))?;
        Ok(Self {
            root,
            path: self.path.join(rel.as_path()),
            openat2: self.openat2,
            tmp: OnceLock::new(),
        })
    }

    /// The existing directory `rel` beneath the root (the root itself for
    /// `None`) opened for reading its entries (`getdents`, `*at` calls),
    /// without following any symlink; errors as [`Self::existing_subroot`].
    pub fn open_dir(&self, rel: Option<&RelPath>) -> Result<OwnedFd, FilesError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        match rel {
            Some(r) => self
                .open_beneath(r.as_bytes(), flags, Mode::empty())
                .map_err(|e| dest_err("open directory", r, e)),
            None => rfs::openat(&self.root, ".", flags | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| FilesError::io("open directory", &self.path, e.into())),
        }
    }

    /// The receiver's state directory `.pfs` (created, mode 0700, if
    /// absent; a symlink or file there is refused), opened for `*at` calls.
    pub fn state_dir(&self) -> Result<OwnedFd, FilesError> {
        self.private_dir(STATE_DIR)
    }

    /// `.pfs/tmp`, opened once per root.
    fn tmp_dir(&self) -> Result<&Arc<OwnedFd>, FilesError> {
        if let Some(fd) = self.tmp.get() {
            return Ok(fd);
        }
        let fd = self.private_dir(TEMP_DIR)?;
        // Another thread may have won the race; either descriptor names the same directory.
        let _ = self.tmp.set(Arc::new(fd));
        self.tmp.get().ok_or_else(|| {
            FilesError::io(
                "open",
                self.path.join(TEMP_DIR),
                io::Error::other("state directory"),
            )
        })
    }

    /// Whether the directory `dir` beneath the root (the root itself for
    /// `None`) exists and holds any entry besides a state directory: the
    /// files a sender probes may then be there already. Never follows a
    /// symlink; anything it cannot read counts as empty.
    pub fn has_entries(&self, dir: Option<&RelPath>) -> bool {
        let fd = match dir {
            Some(d) => {
                match self.open_beneath(d.as_bytes(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
                    Ok(fd) => fd,
                    Err(_) => return false,
                }
            }
            None => match rfs::openat(
                &self.root,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(_) => return false,
            },
        };
        let Ok(mut entries) = rfs::Dir::read_from(&fd) else {
            return false;
        };
        entries.any(|e| {
            e.is_ok_and(|e| {
                let name = e.file_name().to_bytes();
                name != b"." && name != b".." && name != STATE_DIR.as_bytes()
            })
        })
    }

    /// The block size of reflinks into this destination
    /// ([`pfs_sys::clone_range`]), or `None` where its filesystem takes
    /// none (ext4, tmpfs): found by cloning one block between two unnamed
    /// files in `.pfs/tmp`, which vanish when closed.
    pub fn reflink_block(&self) -> Option<u64> {
        let tmp = self.tmp_dir().ok()?;
        let unnamed = || {
            rfs::openat(
                tmp.as_ref(),
                ".",
                OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .ok()
        };
        let (a, b) = (unnamed()?, unnamed()?);
        let block = u64::try_from(rfs::fstat(&a).ok()?.st_blksize).ok()?;
        if !block.is_power_of_two() || !(512..=(1 << 20)).contains(&block) {
            return None;
        }
        let bytes = vec![0x5a; block as usize];
        if rustix::io::pwrite(&a, &bytes, 0).ok()? != bytes.len() {
            return None;
        }
        pfs_sys::clone_range(&b, 0, &a, 0, block).ok()?;
        Some(block)
    }

    /// Opens (creating with mode 0700) the receiver-owned directory `rel`
    /// (`.pfs` or beneath it), without following symlinks.
    pub(crate) fn private_dir(&self, rel: &str) -> Result<OwnedFd, FilesError> {
        let shown = || self.path.join(rel);
        let mut at = String::new();
        for c in rel.split('/') {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(c);
            match rfs::mkdirat(&self.root, at.as_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(FilesError::io("create", shown(), e.into())),
            }
        }
        let fd = self
            .open_beneath(rel.as_bytes(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| match e {
                Errno::LOOP | Errno::NOTDIR | Errno::XDEV => FilesError::io(
                    "open pfs's state directory",
                    shown(),
                    io::Error::other("not a directory (a symlink or a file is in the way)"),
                ),
                e => FilesError::io("open pfs's state directory", shown(), e.into()),
            })?;
        Ok(fd)
    }

    /// The directory this root was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether resolution uses `openat2` (false: the per-component fallback).
    pub fn uses_openat2(&self) -> bool {
        self.openat2
    }

    /// Create `rel` and any missing parents. New directories get
    /// `(mode & 0o755) | 0o700` ([`NEW_DIR_MODE_MAX`]), so the receiver can
    /// fill them; set the final mode with
    /// [`set_dir_times_and_mode`](Self::set_dir_times_and_mode) after the
    /// contents. Existing directories are left as they are; a symlink or
    /// file in the way is [`PathError::NotADirectory`].
    pub fn create_dir_all(&self, rel: &RelPath, mode: u32) -> Result<(), FilesError> {
        self.make_dir_all(rel, mode).map(drop)
    }

    /// [`Self::create_dir_all`], saying whether this call created `rel`
    /// itself (true: it was empty an instant ago).
    pub fn make_dir_all(&self, rel: &RelPath, mode: u32) -> Result<bool, FilesError> {
        let mode = Mode::from_raw_mode((mode & NEW_DIR_MODE_MAX) | 0o700);
        match self.open_beneath(rel.as_bytes(), dir_flags(), Mode::empty()) {
            Ok(_) => return Ok(false),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(dest_err("open directory", rel, e)),
        }
        // Trees arrive parents first: usually only the last component is new.
        if let Some(parent) = rel.parent() {
            if let Ok(p) = self.open_beneath(parent.as_bytes(), dir_flags(), Mode::empty()) {
                match rfs::mkdirat(&p, rel.file_name(), mode) {
                    Ok(()) => return Ok(true),
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(dest_err("create directory", rel, e)),
                }
            }
        }
        let mut cur = self.root_dup().map_err(|e| dest_err("open", rel, e))?;
        let mut made = false;
        for c in rel.components() {
            made = false;
            let next = match rfs::openat(&cur, c, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match rfs::mkdirat(&cur, c, mode) {
                        Ok(()) => made = true,
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(dest_err("create directory", rel, e)),
                    }
                    rfs::openat(&cur, c, dir_flags(), Mode::empty())
                        .map_err(|e| dest_err("open directory", rel, e))?
                }
                Err(e) => return Err(dest_err("open directory", rel, e)),
            };
            cur = next;
        }
        Ok(made)
    }

    /// [`Self::make_dir_all`] for a directory whose parent this session
    /// created (`parent_new`): one `mkdirat` in the parent held in `cache`,
    /// without looking first (a directory made an instant ago holds only
    /// what the session put there, and a sender names each path once); the
    /// new directory stays in `cache` for the entries that follow it.
    /// Anything unexpected (it exists after all, the parent is gone) takes
    /// the path of [`Self::make_dir_all`].
    pub fn make_dir_cached(
        &self,
        cache: &mut StatCache,
        rel: &RelPath,
        mode: u32,
        parent_new: bool,
    ) -> Result<bool, FilesError> {
        if parent_new {
            if let Some(parent) = self.cached_parent(cache, rel)? {
                let parent = Arc::clone(parent);
                let name = rel.file_name();
                let m = Mode::from_raw_mode((mode & NEW_DIR_MODE_MAX) | 0o700);
                if rfs::mkdirat(&*parent, name, m).is_ok() {
                    // If this fails, its entries open it by path.
                    if let Ok(fd) = rfs::openat(&*parent, name, dir_flags(), Mode::empty()) {
                        cache.put(rel.as_bytes(), fd);
                    }
                    return Ok(true);
                }
            }
        }
        self.make_dir_all(rel, mode)
    }

    /// Set mtime (nanoseconds since the epoch) and mode of the existing
    /// directory `rel`. The mode only ever narrows: the directory keeps the
    /// bits it has that `mode` also has (`current & mode & 0o777`), so a
    /// peer can never widen a directory that was there before it (no
    /// `chmod 0777` of someone's directory); one this session created (at
    /// most [`NEW_DIR_MODE_MAX`]) ends as `mode & 0o755`. Nothing is
    /// changed when that is the mode it has. Call after its contents are
    /// written, since adding entries updates a directory's mtime.
    pub fn set_dir_times_and_mode(&self, rel: &RelPath, mtime_ns: i128, mode: u32) -> Result<(), FilesError> {
        let fd = self
            .open_beneath(rel.as_bytes(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| dest_err("open directory", rel, e))?;
        let current = rfs::fstat(&fd)
            .map_err(|e| dest_err("stat directory", rel, e))?
            .st_mode
            & PERM_MASK;
        let narrowed = current & mode & PERM_MASK;
        if narrowed != current {
            rfs::fchmod(&fd, Mode::from_raw_mode(narrowed)).map_err(|e| dest_err("set mode of", rel, e))?;
        }
        rfs::futimens(
            &fd,
            &mtime_only(mtime_ns).map_err(|e| dest_err("set mtime", rel, e))?,
        )
        .map_err(|e| dest_err("set mtime", rel, e))
    }

    /// Sets only the mtime of the directory `rel`, or of the root itself
    /// (`None`): a tree's top directory when its contents were sent (`DIR/`;
    /// its mode is left as the receiver has it). Call after everything in
    /// it was written and removed.
    pub fn set_top_mtime(&self, rel: Option<&RelPath>, mtime_ns: i128) -> Result<(), FilesError> {
        let at = || rel.map_or_else(|| PathBuf::from("."), |r| r.as_path().to_path_buf());
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let fd = match rel {
            Some(r) => self.open_beneath(r.as_bytes(), flags, Mode::empty()),
            None => rfs::openat(&self.root, ".", flags | OFlags::CLOEXEC, Mode::empty()),
        }
        .map_err(|e| FilesError::io("open directory", at(), e.into()))?;
        mtime_only(mtime_ns)
            .and_then(|times| rfs::futimens(&fd, &times))
            .map_err(|e| FilesError::io("set mtime", at(), e.into()))
    }

    /// Sets the mtime of the directory `rel` by name, through its parent
    /// in `cache` (no descriptor of its own opened): for a directory this
    /// session created whose mode needs no narrowing (see
    /// [`crate::Landing::set_dir_meta`]). A symlink put in its place meanwhile
    /// is not followed.
    pub fn set_dir_mtime_cached(
        &self,
        cache: &mut StatCache,
        rel: &RelPath,
        mtime_ns: i128,
    ) -> Result<(), FilesError> {
        let times = mtime_only(mtime_ns).map_err(|e| dest_err("set mtime", rel, e))?;
        let Some(dir) = self.cached_parent(cache, rel)? else {
            return Err(dest_err("set mtime", rel, Errno::NOENT));
        };
        rfs::utimensat(&**dir, rel.file_name(), &times, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| dest_err("set mtime", rel, e))
    }

    /// Create a temporary file in `.pfs/tmp` (mode 0600) that
    /// [`TempFile::persist`] will rename to `rel` (whose directory must exist).
    pub fn create_temp(&self, rel: &RelPath) -> Result<TempFile, FilesError> {
        let dir = Arc::new(self.parent_dir(rel)?);
        self.create_temp_in(dir, rel)
    }

    /// [`Self::create_temp`] with `rel`'s directory taken from (or opened
    /// into) `cache` (a tree's files mostly share their directory). Mode
    /// 0600 like every temporary file, whatever mode it will have: a
    /// partial file may stay in `.pfs/tmp` across sessions, and owner-only
    /// is the one mode that cannot expose it (security.md says so);
    /// [`TempFile::set_times_and_mode`] gives it its final mode.
    pub fn create_temp_cached(&self, cache: &mut StatCache, rel: &RelPath) -> Result<TempFile, FilesError> {
        let dir = match self.cached_parent(cache, rel)? {
            Some(dir) => dir.clone(),
            None => Arc::new(self.parent_dir(rel)?),
        };
        self.create_temp_in(dir, rel)
    }

    fn create_temp_in(&self, dir: Arc<OwnedFd>, rel: &RelPath) -> Result<TempFile, FilesError> {
        let tmp_dir = self.tmp_dir()?;
        let name = rel.file_name();
        let asked = TEMP_MODE;
        for _ in 0..16 {
            let tmp_name = temp_name();
            match rfs::openat(
                tmp_dir,
                tmp_name.as_slice(),
                // Readable too: a file completed by REPAIR is re-read to verify it.
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(asked),
            ) {
                Ok(fd) => {
                    return Ok(TempFile {
                        tmp_dir: tmp_dir.clone(),
                        dir,
                        tmp_name,
                        name: name.to_vec(),
                        rel: rel.clone(),
                        file: File::from(fd),
                        mode: process_umask().map(|u| asked & !u),
                        persisted: false,
                    })
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(dest_err("create temporary file for", rel, e)),
            }
        }
        Err(dest_err("create temporary file for", rel, Errno::EXIST))
    }

    /// Reopens a parked temporary file: its directory is resolved again
    /// beneath the root, the file opened without following symlinks, and it
    /// must still be the file that was parked (same device and inode).
    pub fn reopen_temp(&self, parked: ParkedTemp) -> Result<TempFile, FilesError> {
        let dir = Arc::new(self.parent_dir(&parked.rel)?);
        let tmp_dir = self.tmp_dir()?;
        let fd = rfs::openat(
            tmp_dir,
            parked.tmp_name.as_slice(),
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| dest_err("reopen temporary file for", &parked.rel, e))?;
        let st = rfs::fstat(&fd).map_err(|e| dest_err("stat temporary file for", &parked.rel, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || file_id(&st) != parked.id {
            return Err(dest_err("reopen temporary file for", &parked.rel, Errno::STALE));
        }
        Ok(TempFile {
            tmp_dir: tmp_dir.clone(),
            dir,
            tmp_name: parked.tmp_name,
            name: parked.name,
            rel: parked.rel,
            file: File::from(fd),
            mode: None,
            persisted: false,
        })
    }

    /// Removes a parked temporary file (best effort, like dropping a
    /// [`TempFile`]), if it is still the one that was parked.
    pub fn remove_parked(&self, parked: &ParkedTemp) {
        if let Ok(dir) = self.tmp_dir() {
            let same = rfs::statat(dir, parked.tmp_name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| file_id(&st) == parked.id);
            if same {
                let _ = rfs::unlinkat(dir, parked.tmp_name.as_slice(), AtFlags::empty());
            }
        }
    }

    /// Open the regular file at `rel` for reading, for a quick check against
    /// what the sender has. `None` if nothing is there, or something other
    /// than a regular file (a directory, a symlink, a symlink in the path).
    pub fn open_existing(&self, rel: &RelPath) -> Result<Option<(File, Metadata)>, FilesError> {
        match self.existing_parent(rel)? {
            Some(dir) => Self::open_existing_in(&dir, rel),
            None => Ok(None),
        }
    }

    /// `rel`'s directory, opened beneath the root; `None` if it does not
    /// exist or the path cannot name anything here.
    fn existing_parent(&self, rel: &RelPath) -> Result<Option<OwnedFd>, FilesError> {
        match self.parent_dir(rel) {
            Ok(d) => Ok(Some(d)),
            Err(FilesError::Path { .. }) => Ok(None),
            Err(FilesError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// [`Self::open_existing`] with `rel`'s directory from (or opened into) `cache`.
    pub fn open_existing_cached(
        &self,
        cache: &mut StatCache,
        rel: &RelPath,
    ) -> Result<Option<(File, Metadata)>, FilesError> {
        match self.cached_parent(cache, rel)? {
            Some(dir) => Self::open_existing_in(dir, rel),
            None => Ok(None),
        }
    }

    fn open_existing_in(dir: &OwnedFd, rel: &RelPath) -> Result<Option<(File, Metadata)>, FilesError> {
        let name = rel.file_name();
        // Look before opening: opening a device node can have side effects.
        match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
            Ok(_) | Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(dest_err("stat", rel, e)),
        }
        let fd = match rfs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // Replaced since the stat.
            Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(None),
            Err(e) => return Err(dest_err("open", rel, e)),
        };
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| FilesError::io("stat", rel.as_path(), e))?;
        Ok(meta.is_file().then_some((file, meta)))
    }

    /// Size, inode and times of the regular file `rel`, without opening it:
    /// `None` if it is missing, not a regular file, or its path does not
    /// resolve beneath the root without symlinks. Changes nothing. The
    /// parent directory stays open in `cache` for the next lookup in the
    /// same directory (a tree's files arrive directory by directory).
    pub fn stat_existing(
        &self,
        cache: &mut StatCache,
        rel: &RelPath,
    ) -> Result<Option<FileStat>, FilesError> {
        let Some(dir) = self.cached_parent(cache, rel)? else {
            return Ok(None);
        };
        match rfs::statat(dir, rel.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                Ok(Some(FileStat::of_stat(&st)))
            }
            Ok(_) | Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(dest_err("stat", rel, e)),
        }
    }

    /// Sets mtime and permission bits of the regular file `rel`, found by
    /// [`DestRoot::stat_existing`] as `before`, through the parent directory
    /// open in `cache`, and returns its stat afterwards (`None` if it is no
    /// longer a regular file). The mtime is set without opening the file;
    /// permission bits only when they differ, through the file opened
    /// without following symlinks (`chmod` by name would follow one).
    pub fn set_existing_times_and_mode(
        &self,
        cache: &mut StatCache,
        rel: &RelPath,
        before: &FileStat,
        mtime_ns: i128,
        mode: u32,
    ) -> Result<Option<FileStat>, FilesError> {
        let Some(dir) = self.cached_parent(cache, rel)? else {
            return Ok(None);
        };
        let name = rel.file_name();
        if before.mode & PERM_MASK != mode & PERM_MASK {
            let fd = match rfs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(None),
                Err(e) => return Err(dest_err("open", rel, e)),
            };
            let st = rfs::fstat(&fd).map_err(|e| dest_err("stat", rel, e))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_ino != before.ino {
                return Ok(None);
            }
            set_times_and_mode(&fd, mtime_ns, mode).map_err(|e| dest_err("set mode/mtime", rel, e))?;
        } else {
            let times = mtime_only(mtime_ns).map_err(|e| dest_err("set mtime", rel, e))?;
            match rfs::utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(()) => {}
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(dest_err("set mtime", rel, e)),
            }
        }
        self.stat_existing(cache, rel)
    }

    /// The parent directory of `rel`, from `cache` or opened beneath the
    /// root into it; `None` if it does not resolve (missing, or a symlink
    /// on the way).
    fn cached_parent<'c>(
        &self,
        cache: &'c mut StatCache,
        rel: &RelPath,
    ) -> Result<Option<&'c Arc<OwnedFd>>, FilesError> {
        let parent = rel.parent();
        let key = parent.as_ref().map_or(&b""[..], |p| p.as_bytes());
        // Two lookups: returning the first borrow on a hit would keep
        // `cache` borrowed on the miss path too.
        if cache.get(key).is_some() {
            return Ok(cache.get(key));
        }
        let Some(dir) = self.existing_parent(rel)? else {
            return Ok(None);
        };
        Ok(Some(cache.put(key, dir)))
    }

    /// Makes `rel` the symlink `target` (verbatim, module docs) with the
    /// mtime `mtime_ns`: a link already there with that target is kept
    /// (its mtime set if it differs); anything else at `rel` but a
    /// directory is atomically replaced by a new link, made in `.pfs/tmp`
    /// with its mtime and renamed into place.
    pub fn create_symlink(
        &self,
        rel: &RelPath,
        target: &[u8],
        mtime_ns: i128,
    ) -> Result<Symlinked, FilesError> {
        check_symlink_target(target).map_err(|source| path_err(rel, source))?;
        let times = mtime_only(mtime_ns).map_err(|e| dest_err("set mtime of symlink", rel, e))?;
        let dir = self.parent_dir(rel)?;
        let name = rel.file_name();
        if let Some(st) = same_symlink(&dir, name, target) {
            if i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec) != mtime_ns {
                rfs::utimensat(&dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| dest_err("set mtime of symlink", rel, e))?;
            }
            return Ok(Symlinked::Kept);
        }
        let tmp_dir = self.tmp_dir()?;
        for _ in 0..16 {
            let tmp_name = temp_name();
            match rfs::symlinkat(target, tmp_dir, tmp_name.as_slice()) {
                Ok(()) => {
                    let placed =
                        rfs::utimensat(tmp_dir, tmp_name.as_slice(), &times, AtFlags::SYMLINK_NOFOLLOW)
                            .map_err(|e| dest_err("set mtime of symlink", rel, e))
                            .and_then(|()| {
                                rfs::renameat(tmp_dir, tmp_name.as_slice(), &dir, name)
                                    .map_err(|e| rename_err("rename symlink into place at", rel, e))
                            });
                    if placed.is_err() {
                        let _ = rfs::unlinkat(tmp_dir, tmp_name.as_slice(), AtFlags::empty());
                    }
                    return placed.map(|()| Symlinked::Made);
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(dest_err("create symlink", rel, e)),
            }
        }
        Err(dest_err("create symlink", rel, Errno::EXIST))
    }

    /// Removes everything in `.pfs/tmp/` (temporary files and symlinks left
    /// by a transfer that was killed); returns how many were removed.
    /// Nothing else in the destination is looked at. Must not run while
    /// another transfer writes here.
    pub fn remove_stale_temps(&self) -> Result<usize, FilesError> {
        self.remove_stale_temps_except(&[])
    }

    /// [`Self::remove_stale_temps`], keeping the files named in `keep`
    /// (partial files a later send may use) unless older than
    /// [`PARTIAL_MAX_AGE`].
    pub fn remove_stale_temps_except(&self, keep: &[&[u8]]) -> Result<usize, FilesError> {
        let shown = || self.path.join(TEMP_DIR);
        let dir = self.tmp_dir()?;
        let readable = rfs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| FilesError::io("read directory", shown(), e.into()))?;
        let mut entries =
            rfs::Dir::new(readable).map_err(|e| FilesError::io("read directory", shown(), e.into()))?;
        let mut removed = 0;
        while let Some(ent) = entries.read() {
            let ent = ent.map_err(|e| FilesError::io("read directory", shown(), e.into()))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if keep.contains(&name) {
                let young = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs() as i64);
                    now - st.st_mtime < PARTIAL_MAX_AGE.as_secs() as i64
                });
                if young {
                    continue;
                }
            }
            match rfs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => removed += 1,
                // Only files are ever made here; anything else is left alone.
                Err(Errno::NOENT | Errno::ISDIR | Errno::PERM) => {}
                Err(e) => return Err(FilesError::io("remove temporary file in", shown(), e.into())),
            }
        }
        Ok(removed)
    }

    /// Removes the regular file `rel` (never a directory; a symlink in the
    /// path is not followed); a missing file is not an error.
    pub fn remove_file(&self, rel: &RelPath) -> Result<(), FilesError> {
        let dir = match self.parent_dir(rel) {
            Ok(d) => d,
            Err(FilesError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match rfs::unlinkat(&dir, rel.file_name(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(dest_err("remove", rel, e)),
        }
    }

    /// A new descriptor for the root directory itself.
    fn root_dup(&self) -> Result<OwnedFd, Errno> {
        rfs::openat(&self.root, ".", dir_flags(), Mode::empty())
    }

    /// Descriptor of `rel`'s parent directory (the root for a one-component path).
    fn parent_dir(&self, rel: &RelPath) -> Result<OwnedFd, FilesError> {
        match rel.parent() {
            None => self.root_dup(),
            Some(p) => self.open_beneath(p.as_bytes(), dir_flags(), Mode::empty()),
        }
        .map_err(|e| dest_err("open parent directory of", rel, e))
    }

    /// Open `rel` (a validated relative path) beneath the root without
    /// following any symlink; `O_NOFOLLOW | O_CLOEXEC` are always added.
    fn open_beneath(&self, rel: &[u8], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if self.openat2 {
            let mut again = 0;
            loop {
                match rfs::openat2(&self.root, rel, flags, mode, beneath()) {
                    // A concurrent rename raced the lookup; the kernel asks to retry.
                    Err(Errno::AGAIN) if again < 8 => again += 1,
                    r => return r,
                }
            }
        }
        let mut comps = rel.split(|&b| b == b'/').peekable();
        let mut cur: Option<OwnedFd> = None;
        while let Some(c) = comps.next() {
            let at = match &cur {
                Some(fd) => fd.as_fd(),
                None => self.root.as_fd(),
            };
            if comps.peek().is_none() {
                return rfs::openat(at, c, flags, mode);
            }
            cur = Some(rfs::openat(at, c, dir_flags(), Mode::empty())?);
        }
        Err(Errno::INVAL)
    }

    #[cfg(test)]
    pub(crate) fn force_fallback(&mut self) {
        self.openat2 = false;
    }
}

impl TempFile {
    /// The open file, for writing the content.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, mutably (for APIs that want `&mut File`).
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where the file will land.
    pub fn rel(&self) -> &RelPath {
        &self.rel
    }

    /// Its name in `.pfs/tmp`.
    pub fn tmp_name(&self) -> &[u8] {
        &self.tmp_name
    }

    /// Closes the file and leaves it under its temporary name (a partial
    /// file a later send may use; [`DestRoot::remove_stale_temps`] keeps
    /// the ones it is told to).
    pub fn leave(mut self) {
        self.persisted = true;
    }

    /// Closes the file's descriptors, keeping it under its temporary name
    /// (see [`ParkedTemp`]).
    pub fn park(mut self) -> Result<ParkedTemp, FilesError> {
        let st = rfs::fstat(&self.file).map_err(|e| dest_err("stat temporary file for", &self.rel, e))?;
        // Handed over: dropping `self` must not unlink it.
        self.persisted = true;
        Ok(ParkedTemp {
            tmp_name: std::mem::take(&mut self.tmp_name),
            name: std::mem::take(&mut self.name),
            rel: self.rel.clone(),
            id: file_id(&st),
        })
    }

    /// Set the final mode (`& 0o777`) and mtime (nanoseconds since the
    /// epoch; the access time is left alone). Call after the last write.
    pub fn set_times_and_mode(&self, mtime_ns: i128, mode: u32) -> Result<(), FilesError> {
        let err = |e| dest_err("set mode/mtime", &self.rel, e);
        if self.mode != Some(mode & PERM_MASK) {
            rfs::fchmod(&self.file, Mode::from_raw_mode(mode & PERM_MASK)).map_err(err)?;
        }
        rfs::futimens(&self.file, &mtime_only(mtime_ns).map_err(err)?).map_err(err)
    }

    /// Rename the file into place, replacing any file or symlink there (not a
    /// directory). With `fsync`, the content and then the directory entry are
    /// flushed to disk first/after, so a crash leaves the old or the new file.
    /// Returns the file's metadata after the rename (which changes its ctime).
    pub fn persist(mut self, fsync: bool) -> Result<Metadata, FilesError> {
        if fsync {
            self.file
                .sync_all()
                .map_err(|e| FilesError::io("fsync", self.rel.as_path(), e))?;
        }
        rfs::renameat(
            &self.tmp_dir,
            self.tmp_name.as_slice(),
            &self.dir,
            self.name.as_slice(),
        )
        .map_err(|e| rename_err("rename into place at", &self.rel, e))?;
        self.persisted = true;
        if fsync {
            let d = rfs::openat(
                &self.dir,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .and_then(rfs::fsync)
            .map_err(|e| dest_err("fsync directory of", &self.rel, e));
            d?;
        }
        self.file
            .metadata()
            .map_err(|e| FilesError::io("stat", self.rel.as_path(), e))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.persisted {
            // Best effort: a leftover is cleaned by `remove_stale_temps`.
            let _ = rfs::unlinkat(&self.tmp_dir, self.tmp_name.as_slice(), AtFlags::empty());
        }
    }
}

/// What [`DestRoot::create_symlink`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Symlinked {
    /// A link with the same target was there: kept, its mtime set if needed.
    Kept,
    /// A new link was made (replacing what was at its path).
    Made,
}

/// The stat of the symlink `name` in `dir` if it is one and points to
/// `target`; never follows it.
fn same_symlink(dir: &OwnedFd, name: &[u8], target: &[u8]) -> Option<rfs::Stat> {
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Symlink || st.st_size as u64 != target.len() as u64 {
        return None;
    }
    let got = rfs::readlinkat(dir, name, Vec::with_capacity(target.len() + 1)).ok()?;
    (got.as_bytes() == target).then_some(st)
}

/// `(st_dev, st_ino)`: which file a stat describes.
fn file_id(st: &rfs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Sets permission bits (`& 0o777`) and mtime (ns since the epoch) of an
/// open file (one from [`DestRoot::open_existing`], say), leaving atime.
pub fn set_file_times_and_mode(file: &File, mtime_ns: i128, mode: u32) -> std::io::Result<()> {
    set_times_and_mode(file, mtime_ns, mode).map_err(Into::into)
}

fn set_times_and_mode(fd: impl AsFd, mtime_ns: i128, mode: u32) -> Result<(), Errno> {
    rfs::fchmod(&fd, Mode::from_raw_mode(mode & PERM_MASK))?;
    rfs::futimens(&fd, &mtime_only(mtime_ns)?)
}

/// The process's umask, read once: `umask(2)` cannot read it without
/// setting it (a race with other threads creating files), so it comes from
/// `/proc/self/status` (Linux 4.7+). `None` if that cannot be read. pfs
/// never changes its umask.
fn process_umask() -> Option<u32> {
    static UMASK: OnceLock<Option<u32>> = OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let value = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(value.trim(), 8).ok()
    })
}

/// Timestamps that set mtime (ns since the epoch) and leave atime.
fn mtime_only(mtime_ns: i128) -> Result<Timestamps, Errno> {
    let secs = mtime_ns.div_euclid(1_000_000_000);
    let nanos = mtime_ns.rem_euclid(1_000_000_000);
    let secs = i64::try_from(secs).map_err(|_| Errno::INVAL)?;
    Ok(Timestamps {
        last_access: rfs::Timespec {
            tv_sec: 0,
            tv_nsec: rfs::UTIME_OMIT,
        },
        last_modification: rfs::Timespec {
            tv_sec: secs,
            tv_nsec: nanos as _,
        },
    })
}

/// A fresh temporary name: 16 hex digits (unique per process and call;
/// `O_EXCL` settles the rest).
fn temp_name() -> Vec<u8> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    // RandomState's keys are random per process (and per thread); the
    // counter makes every call differ. No system call per name.
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", h.finish()).into_bytes()
}

/// A failed rename into place: `EXDEV` means the target directory is on
/// another filesystem than the destination root (a mount inside it).
fn rename_err(op: &'static str, rel: &RelPath, e: Errno) -> FilesError {
    if e == Errno::XDEV {
        return FilesError::io(
            op,
            rel.as_path(),
            io::Error::other(format!(
                "its directory is on another filesystem than the destination root (pfs writes files in {TEMP_DIR} and renames them into place)"
            )),
        );
    }
    dest_err(op, rel, e)
}

/// An error for a destination operation: symlink/non-directory problems
/// become [`PathError::NotADirectory`], the rest keep their OS error.
fn dest_err(op: &'static str, rel: &RelPath, e: Errno) -> FilesError {
    match e {
        Errno::LOOP | Errno::NOTDIR | Errno::XDEV => path_err(rel, PathError::NotADirectory),
        e => FilesError::io(op, rel.as_path(), io::Error::from(e)),
    }
}

fn path_err(rel: &RelPath, source: PathError) -> FilesError {
    FilesError::Path {
        path: rel.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests;
