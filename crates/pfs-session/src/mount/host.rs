//! What a mount session does on the file system, behind [`MountHost`]:
//! list a tree, cut a file into its recipe, read a chunk. [`LocalMountHost`]
//! does it beneath a [`DestRoot`]: every name is resolved from a directory
//! descriptor without following symlinks, nothing is created or written
//! (but the recipe cache in `.pfs`), and no entry named `.pfs` is listed.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pfs_files::{
    chunk_open_file_streaming, ChunkParams, ChunkSink, DestRoot, Entry, EntryMeta, FilesError, Recipe,
    RelPath, WalkKind, STATE_DIR,
};
use pfs_wire::mount::{ListEntry, ListKind, MAX_PATH_LEN};
use rustix::fs::{self as rfs, AtFlags, FileType};

use super::{MountRecipes, MountServerConfig};

/// One entry of a session's listing, kept for the session: RECIPE_ASK and
/// FETCH name files by their number in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Path below the mounted directory.
    pub path: RelPath,
    /// What it is.
    pub kind: ListKind,
    /// Permission, set-id and sticky bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Bytes (files only).
    pub size: u64,
    /// A symlink's target.
    pub link: Box<[u8]>,
}

impl Listed {
    /// The entry as LIST carries it.
    pub fn as_entry(&self) -> ListEntry<'_> {
        ListEntry {
            kind: self.kind,
            mode: self.mode,
            mtime_sec: self.mtime_sec,
            mtime_nsec: self.mtime_nsec,
            size: self.size,
            path: self.path.as_bytes(),
            link: &self.link,
        }
    }

    /// Whether `meta` (of the file opened now) is the version listed.
    fn is_listed_version(&self, meta: &std::fs::Metadata) -> bool {
        meta.size() == self.size
            && meta.mtime() == self.mtime_sec
            && meta.mtime_nsec() == i64::from(self.mtime_nsec)
    }
}

/// A mounted directory's listing.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Permission bits of the mounted directory.
    pub root_mode: u32,
    /// Its modification time, seconds.
    pub root_mtime_sec: i64,
    /// Its modification time, nanoseconds.
    pub root_mtime_nsec: u32,
    /// Every entry beneath it, each directory before its contents.
    pub entries: Vec<Listed>,
    /// Entries left out (see [`super::MountServerOutcome::skipped`]).
    pub skipped: u64,
}

/// Why a directory cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// It is not a directory beneath the root (missing, a file, reached
    /// through a symlink, unreadable).
    #[error("{0}")]
    NotADirectory(FilesError),
    /// Its status could not be read.
    #[error("stat: {0}")]
    Stat(rustix::io::Errno),
    /// It holds more than `limit` entries.
    #[error("more than {limit} entries")]
    TooMany {
        /// The limit.
        limit: u64,
    },
}

/// What asking for a file's recipe gave.
#[derive(Debug, Clone)]
pub enum Cut {
    /// The recipe of the version listed.
    Recipe {
        /// The recipe.
        recipe: Arc<Recipe>,
        /// It came from the cache; the file was not read.
        cached: bool,
    },
    /// The file changed, vanished or could not be read since it was
    /// listed; chunks already handed to the sink describe no version of it.
    Gone,
}

/// The file-system work of a mount session.
pub trait MountHost {
    /// Lists `dir` beneath the root (`None`: the root), which then is the
    /// directory every later call names paths beneath. More than `limit`
    /// entries is [`ListError::TooMany`], found before they are all read.
    fn list(&mut self, dir: Option<&RelPath>, limit: u64) -> Result<Listing, ListError>;

    /// The recipe of `file` (a listed regular file) if it is still the
    /// version listed. A large file may be handed to `sink` run by run as
    /// it is cut, so its first RECIPE frames leave before it is read; a
    /// sink that returns false stops the cut (the result is then `Gone`).
    fn recipe(&mut self, file: &Listed, sink: ChunkSink<'_>) -> Cut;

    /// Fills `buf` with the bytes of `file` (entry number `entry`) at
    /// `offset`; false if it cannot (the file changed, vanished, is short,
    /// or a read failed). The caller checks the bytes against their hash.
    fn read_chunk(&mut self, entry: u64, file: &Listed, offset: u64, buf: &mut [u8]) -> bool;
}

/// Files kept open for reading chunks, per session: enough for the few
/// files a reader works through at once without a descriptor per file read.
const OPEN_FILES: usize = 16;

/// [`MountHost`] beneath a destination root (see the module docs).
#[derive(Debug)]
pub struct LocalMountHost<'d> {
    place: &'d DestRoot,
    /// The mounted directory, when it is not `place` itself.
    mounted: Option<DestRoot>,
    params: ChunkParams,
    cut_threads: usize,
    recipes: Option<Arc<MountRecipes>>,
    /// Open files by entry number, the most recently used last; `None`: a
    /// file that is no longer the version listed.
    open: Vec<(u64, Option<File>)>,
    cut_bytes: AtomicU64,
    /// The recipe cache was consulted or filled: save it at the end.
    cache_used: bool,
}

impl<'d> LocalMountHost<'d> {
    /// A host reading beneath `place` (a client's destination root).
    pub fn new(place: &'d DestRoot, cfg: &MountServerConfig) -> Self {
        Self {
            place,
            mounted: None,
            params: cfg.params,
            cut_threads: cfg.cut_threads,
            recipes: cfg.recipes.clone(),
            open: Vec::new(),
            cut_bytes: AtomicU64::new(0),
            cache_used: false,
        }
    }

    /// File bytes read to cut recipes so far.
    pub fn bytes_cut(&self) -> u64 {
        self.cut_bytes.load(Ordering::Relaxed)
    }

    /// Saves the recipe cache if this session used it; returns why not if
    /// that failed (for the log: the session is not failed for it).
    pub fn finish(&mut self) -> Option<super::RecipesNotSaved> {
        let recipes = self.recipes.as_ref().filter(|_| self.cache_used)?;
        recipes.save().err()
    }

    fn root(&self) -> &DestRoot {
        self.mounted.as_ref().unwrap_or(self.place)
    }

    /// The quick-check key of the file open as `meta`: the cache's [`Entry`].
    fn cache_entry(&self, file: &Listed, meta: &std::fs::Metadata) -> Entry {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Entry {
            rel: file.path.clone(),
            kind: WalkKind::File { size: meta.size() },
            mode: meta.mode() & 0o7777,
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            dev: meta.dev(),
            ino: meta.ino(),
            abs: self.root().path().join(file.path.as_path()),
            meta: EntryMeta {
                ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
                ..EntryMeta::default()
            },
        }
    }

    /// `file` opened beneath the root, if it is still the version listed.
    fn open_listed(&self, file: &Listed) -> Option<(File, std::fs::Metadata)> {
        let (f, meta) = self.root().open_existing(&file.path).ok()??;
        file.is_listed_version(&meta).then_some((f, meta))
    }
}

impl MountHost for LocalMountHost<'_> {
    fn list(&mut self, dir: Option<&RelPath>, limit: u64) -> Result<Listing, ListError> {
        let not_a_dir = ListError::NotADirectory;
        self.mounted = dir
            .map(|d| self.place.existing_subroot(d))
            .transpose()
            .map_err(not_a_dir)?;
        self.open.clear();
        let root = self.root();
        let top = root.open_dir(None).map_err(not_a_dir)?;
        let st = rfs::fstat(&top).map_err(ListError::Stat)?;
        let mut listing = Listing {
            root_mode: st.st_mode & 0o7777,
            root_mtime_sec: st.st_mtime,
            root_mtime_nsec: st.st_mtime_nsec as u32,
            ..Listing::default()
        };
        // Entries still to be listed, the next last: a directory's children
        // are pushed in reverse name order when it is listed, so the walk is
        // depth-first in name order (each directory before its contents).
        let mut stack: Vec<Listed> = Vec::new();
        read_children(&top, None, &mut stack, &mut listing.skipped, limit)?;
        while let Some(e) = stack.pop() {
            let sub = (e.kind == ListKind::Dir).then(|| e.path.clone());
            listing.entries.push(e);
            let Some(sub) = sub else { continue };
            let room = limit.saturating_sub((listing.entries.len() + stack.len()) as u64);
            match root.open_dir(Some(&sub)) {
                Ok(fd) => read_children(&fd, Some(&sub), &mut stack, &mut listing.skipped, room)
                    .map_err(|_| ListError::TooMany { limit })?,
                // Replaced or unreadable since its parent was read: listed, empty.
                Err(_) => listing.skipped += 1,
            }
        }
        Ok(listing)
    }

    fn recipe(&mut self, file: &Listed, sink: ChunkSink<'_>) -> Cut {
        let Some((f, meta)) = self.open_listed(file) else {
            return Cut::Gone;
        };
        let entry = self.cache_entry(file, &meta);
        if let Some(recipes) = &self.recipes {
            self.cache_used = true;
            if let Some(recipe) = recipes.get(&entry, &self.params) {
                return Cut::Recipe {
                    recipe: Arc::new(recipe),
                    cached: true,
                };
            }
        }
        match chunk_open_file_streaming(
            &f,
            &entry.abs,
            &self.params,
            self.cut_threads,
            &self.cut_bytes,
            sink,
        ) {
            // The cut itself checked that the file did not change meanwhile.
            Ok(recipe) if recipe.size == file.size => {
                if let Some(recipes) = &self.recipes {
                    recipes.put(&entry, &self.params, recipe.clone());
                }
                Cut::Recipe {
                    recipe: Arc::new(recipe),
                    cached: false,
                }
            }
            Ok(_) | Err(_) => Cut::Gone,
        }
    }

    fn read_chunk(&mut self, entry: u64, file: &Listed, offset: u64, buf: &mut [u8]) -> bool {
        let at = match self.open.iter().rposition(|(e, _)| *e == entry) {
            Some(i) => {
                let hit = self.open.remove(i);
                self.open.push(hit);
                self.open.len() - 1
            }
            None => {
                if self.open.len() >= OPEN_FILES {
                    self.open.remove(0);
                }
                let f = self.open_listed(file).map(|(f, _)| f);
                self.open.push((entry, f));
                self.open.len() - 1
            }
        };
        let Some(f) = &self.open[at].1 else {
            return false;
        };
        f.read_exact_at(buf, offset).is_ok()
    }
}

/// Pushes the entries of the directory open as `fd` (`parent` beneath the
/// mounted directory; `None`: the mounted directory) onto `stack`, in
/// reverse name order. Skips `.pfs` (the server's own state, wherever a
/// `dir=` destination keeps it), what is neither file, directory nor
/// symlink, and what cannot be read or named on the wire (counted in
/// `skipped`). More than `room` entries is [`ListError::TooMany`].
fn read_children(
    fd: &OwnedFd,
    parent: Option<&RelPath>,
    stack: &mut Vec<Listed>,
    skipped: &mut u64,
    room: u64,
) -> Result<(), ListError> {
    let Ok(dir) = rfs::Dir::read_from(fd) else {
        *skipped += 1;
        return Ok(());
    };
    let mut kids = Vec::new();
    for ent in dir {
        let Ok(ent) = ent else {
            *skipped += 1;
            break;
        };
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || name == STATE_DIR.as_bytes() {
            continue;
        }
        if kids.len() as u64 >= room {
            return Err(ListError::TooMany { limit: room });
        }
        match listed(fd, parent, name) {
            Some(e) => kids.push(e),
            None => *skipped += 1,
        }
    }
    kids.sort_unstable_by(|a: &Listed, b: &Listed| b.path.file_name().cmp(a.path.file_name()));
    stack.append(&mut kids);
    Ok(())
}

/// The entry `name` of the directory open as `fd`, if it is a file,
/// directory or symlink that LIST can carry.
fn listed(fd: &OwnedFd, parent: Option<&RelPath>, name: &[u8]) -> Option<Listed> {
    let st = rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => ListKind::File,
        FileType::Directory => ListKind::Dir,
        FileType::Symlink => ListKind::Symlink,
        _ => return None,
    };
    let path = match parent {
        Some(p) => p.join(name).ok()?,
        None => RelPath::parse(name).ok()?,
    };
    if path.as_bytes().len() > MAX_PATH_LEN {
        return None;
    }
    let link: Box<[u8]> = if kind == ListKind::Symlink {
        let target = rfs::readlinkat(fd, name, Vec::new()).ok()?.into_bytes();
        if target.is_empty() || target.len() > MAX_PATH_LEN {
            return None;
        }
        target.into()
    } else {
        Box::default()
    };
    Some(Listed {
        path,
        kind,
        mode: st.st_mode & 0o7777,
        mtime_sec: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as u32,
        size: if kind == ListKind::File {
            st.st_size as u64
        } else {
            0
        },
        link,
    })
}
