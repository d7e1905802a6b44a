//! What the receiver core asks of its host, as one trait ([`FilesHost`]),
//! and the host of a real receiver ([`LocalHost`]): a [`Store`] and a
//! [`Landing`] in a destination directory. The core decides; the host
//! touches the store's mapping, the index and the destination's files.

use std::io::IoSlice;

use pfs_files::{FileSpec, FilesError, LandError, Landing, Linked, Placement, QuickDigest, RelPath, Removed};
use pfs_store::{ChunkLoc, IndexRecord, Reservation, Store, StoreError};
use pfs_wire::files::{Hash, Xattrs};

/// The store's identity and space, for FILES_ACCEPT and the plan's ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreInfo {
    /// Store identifier.
    pub id: [u8; 16],
    /// Committed index records.
    pub generation: u64,
    /// Capacity limit.
    pub capacity: u64,
    /// Bytes free under the capacity.
    pub free: u64,
}

/// Host work a files receiver core needs done, synchronously, while it
/// handles input. Store bytes are lent for `'s` (the store's mapping
/// outlives the session), so chunk bytes go from the store or the receive
/// buffer to the destination without a copy.
pub trait FilesHost<'s> {
    /// Identity and space of the store.
    fn store_info(&self) -> StoreInfo;
    /// Index records committed after `generation`, in order.
    fn index_since(&self, generation: u64) -> Vec<IndexRecord>;
    /// Reserves `bytes` of new store space, replacing the current
    /// reservation (the core commits what it appended first).
    fn reserve(&mut self, bytes: u64) -> Result<(), StoreError>;
    /// Reserved space still unused.
    fn reserved_left(&self) -> u64;
    /// Appends a chunk whose BLAKE3 the core checked to the reservation.
    fn append(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError>;
    /// Makes appended chunks durable and visible, keeping the unused rest
    /// reserved; returns the bytes committed.
    fn commit(&mut self) -> Result<u64, StoreError>;
    /// Committed bytes at `loc`; `None` outside the store.
    fn stored(&self, loc: ChunkLoc) -> Option<&'s [u8]>;
    /// Where the committed chunk `hash` is.
    fn lookup(&self, hash: &Hash) -> Option<ChunkLoc>;
    /// If this session appended the chunk `hash` of `len` bytes (not yet
    /// committed): shows its bytes to `seen`, then writes them at `at` of the
    /// file `no`. `None` if it did not.
    fn place_appended(
        &mut self,
        no: u64,
        at: u64,
        hash: &Hash,
        len: u32,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), LandError>>;
    /// Replaces the damaged stored chunk `hash` with good `bytes`.
    fn repair(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError>;

    /// Whether the destination holds the probed file.
    fn holds(&mut self, rel: &RelPath, size: u64, mtime_ns: i128, key: &[u8]) -> bool;
    /// Creates the parent directories of `rel`.
    fn make_parent(&mut self, rel: &RelPath) -> Result<(), FilesError>;
    /// Creates the directory `rel`.
    fn make_dir(&mut self, rel: &RelPath, mode: u32) -> Result<(), FilesError>;
    /// Sets mode and mtime of the directory `rel` (after its contents).
    fn set_dir_meta(&mut self, rel: &RelPath, mtime_ns: i128, mode: u32) -> Result<(), FilesError>;
    /// Creates the symlink `rel` → `target`.
    fn make_symlink(&mut self, rel: &RelPath, target: &[u8]) -> Result<(), FilesError>;
    /// Places the regular file `no` (see [`Landing::open_file`]).
    fn open_file(&mut self, no: u64, f: &FileSpec<'_>) -> Result<Placement, LandError>;
    /// Writes `slices` at `at` of the file `no` being rebuilt.
    fn write(&mut self, no: u64, at: u64, slices: &mut [IoSlice<'_>]) -> Result<(), LandError>;
    /// Whether [`Self::finish_file`] wants the XXH3-128 digest too.
    fn wants_quick(&self) -> bool;
    /// Checks, sets metadata of and renames into place the file `no`.
    fn finish_file(
        &mut self,
        no: u64,
        f: &FileSpec<'_>,
        digests: (Option<Hash>, Option<QuickDigest>),
    ) -> Result<(), LandError>;
    /// Drops the file `no` being rebuilt.
    fn discard(&mut self, no: u64);
    /// The file `no` being rebuilt waits (for REPAIR): close its
    /// descriptors until it is written or finished again.
    fn park(&mut self, no: u64);

    /// Decide "unchanged" by content, not size and mtime, for this session
    /// (rsync's `--checksum`; see [`Landing::set_checksum`]).
    fn set_checksum(&mut self, on: bool);

    /// Sets the owner and group of the entry `rel` (only where this
    /// receiver may: [`pfs_files::may_chown`]) and its extended attributes
    /// (see [`pfs_files::DestRoot::set_attrs`]).
    fn set_attrs(
        &mut self,
        rel: &RelPath,
        uid: Option<u32>,
        gid: Option<u32>,
        xattrs: &Xattrs<'_>,
    ) -> Result<(), FilesError>;

    /// Makes `rel` a hard link to the regular file `target`.
    fn hard_link(&mut self, rel: &RelPath, target: &RelPath) -> Result<Linked, FilesError>;

    /// Removes from the directory `dir` (the root when `None`) each entry
    /// `keep(path, is_dir)` does not keep, with everything beneath it;
    /// `removed` sees each (see [`pfs_files::DestRoot::delete_extraneous`]).
    /// With `dry_run` nothing is removed, only reported.
    fn delete_extraneous(
        &mut self,
        dir: Option<&RelPath>,
        keep: &mut dyn FnMut(&RelPath, bool) -> bool,
        dry_run: bool,
        removed: &mut dyn FnMut(&RelPath, Removed),
    ) -> Result<(), FilesError>;
}

/// The host of a real receiver: its store and destination on this machine.
#[derive(Debug)]
pub struct LocalHost<'s> {
    store: &'s Store,
    res: Option<Reservation<'s>>,
    landing: Landing<'s>,
}

impl<'s> LocalHost<'s> {
    /// A host over `store`, landing files through `landing`.
    pub fn new(store: &'s Store, landing: Landing<'s>) -> Self {
        Self {
            store,
            res: None,
            landing,
        }
    }
}

impl<'s> FilesHost<'s> for LocalHost<'s> {
    fn store_info(&self) -> StoreInfo {
        let ident = self.store.identity();
        let stats = self.store.stats();
        StoreInfo {
            id: ident.id,
            generation: ident.generation,
            capacity: stats.capacity,
            free: stats.capacity.saturating_sub(stats.used),
        }
    }

    fn index_since(&self, generation: u64) -> Vec<IndexRecord> {
        self.store.entries_since(generation)
    }

    fn reserve(&mut self, bytes: u64) -> Result<(), StoreError> {
        self.res = Some(self.store.reserve(bytes)?);
        Ok(())
    }

    fn reserved_left(&self) -> u64 {
        self.res.as_ref().map_or(0, Reservation::left)
    }

    fn append(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError> {
        match self.res.as_mut() {
            Some(res) => res.append_unchecked(hash, bytes).map(drop),
            None => Err(StoreError::ReservationExhausted {
                len: bytes.len() as u64,
                left: 0,
            }),
        }
    }

    fn commit(&mut self) -> Result<u64, StoreError> {
        let Some(res) = self.res.take() else {
            return Ok(0);
        };
        let left = res.left();
        let written = res.written();
        res.commit()?;
        if left > 0 {
            self.res = Some(self.store.reserve(left)?);
        }
        Ok(written)
    }

    fn stored(&self, loc: ChunkLoc) -> Option<&'s [u8]> {
        self.store.bytes(loc).ok()
    }

    fn lookup(&self, hash: &Hash) -> Option<ChunkLoc> {
        self.store.lookup(hash)
    }

    fn place_appended(
        &mut self,
        no: u64,
        at: u64,
        hash: &Hash,
        len: u32,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), LandError>> {
        let bytes = self.res.as_ref()?.bytes_of(hash)?;
        if bytes.len() != len as usize {
            return None;
        }
        seen(bytes);
        Some(self.landing.write_at(no, at, &mut [IoSlice::new(bytes)]))
    }

    fn repair(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError> {
        self.store.repair(hash, bytes).map(drop)
    }

    fn holds(&mut self, rel: &RelPath, size: u64, mtime_ns: i128, key: &[u8]) -> bool {
        self.landing.holds(rel, size, mtime_ns, key)
    }

    fn make_parent(&mut self, rel: &RelPath) -> Result<(), FilesError> {
        self.landing.make_parent(rel)
    }

    fn make_dir(&mut self, rel: &RelPath, mode: u32) -> Result<(), FilesError> {
        self.landing.make_dir(rel, mode)
    }

    fn set_dir_meta(&mut self, rel: &RelPath, mtime_ns: i128, mode: u32) -> Result<(), FilesError> {
        self.landing.set_dir_meta(rel, mtime_ns, mode)
    }

    fn make_symlink(&mut self, rel: &RelPath, target: &[u8]) -> Result<(), FilesError> {
        self.landing.make_symlink(rel, target)
    }

    fn open_file(&mut self, no: u64, f: &FileSpec<'_>) -> Result<Placement, LandError> {
        self.landing.open_file(no, f)
    }

    fn write(&mut self, no: u64, at: u64, slices: &mut [IoSlice<'_>]) -> Result<(), LandError> {
        self.landing.write_at(no, at, slices)
    }

    fn wants_quick(&self) -> bool {
        self.landing.wants_quick()
    }

    fn finish_file(
        &mut self,
        no: u64,
        f: &FileSpec<'_>,
        digests: (Option<Hash>, Option<QuickDigest>),
    ) -> Result<(), LandError> {
        self.landing.finish_file(no, f, digests)
    }

    fn discard(&mut self, no: u64) {
        self.landing.discard(no);
    }

    fn park(&mut self, no: u64) {
        self.landing.park(no);
    }

    fn set_checksum(&mut self, on: bool) {
        self.landing.set_checksum(on);
    }

    fn set_attrs(
        &mut self,
        rel: &RelPath,
        uid: Option<u32>,
        gid: Option<u32>,
        xattrs: &Xattrs<'_>,
    ) -> Result<(), FilesError> {
        let chown = (uid.is_some() || gid.is_some()) && pfs_files::may_chown();
        let (uid, gid) = (uid.filter(|_| chown), gid.filter(|_| chown));
        self.landing.set_attrs(rel, uid, gid, xattrs.iter())
    }

    fn hard_link(&mut self, rel: &RelPath, target: &RelPath) -> Result<Linked, FilesError> {
        self.landing.root().hard_link(rel, target)
    }

    fn delete_extraneous(
        &mut self,
        dir: Option<&RelPath>,
        keep: &mut dyn FnMut(&RelPath, bool) -> bool,
        dry_run: bool,
        removed: &mut dyn FnMut(&RelPath, Removed),
    ) -> Result<(), FilesError> {
        self.landing.root().delete_extraneous(dir, keep, dry_run, removed)
    }
}

impl LocalHost<'_> {
    /// Files being rebuilt with a descriptor open (parked ones not counted).
    pub fn open_files(&self) -> usize {
        self.landing.open_files()
    }
}
