//! What the receiver core asks of its host, as one trait ([`FilesHost`]),
//! with the types its methods exchange. The core decides; a host touches
//! the store's mapping, the index and the destination's files (the host of
//! a real receiver is [`super::LocalHost`], in `local.rs`).
use std::io::IoSlice;

use pfs_files::{
    FileSpec, FilesError, LandError, Linked, Placement, QuickDigest, RelPath, Removed, Symlinked,
};
use pfs_store::{ChunkLoc, IndexRecord, StoreError};
use pfs_wire::files::{Hash, Xattrs};

/// Where the bytes a REF or KNOWN chunk names are, for the core.
#[derive(Debug, Clone, Copy)]
pub enum Lent<'s> {
    /// In memory for the session's life (a store's mapping): the core
    /// checks and queues them itself.
    Bytes(&'s [u8]),
    /// In a file: [`FilesHost::copy_chunk`] checks and copies them.
    InFile,
    /// Never given out by this receiver: the peer's error.
    Outside,
}

/// What [`FilesHost::copy_chunk`] did.
#[derive(Debug)]
pub enum Copied {
    /// Checked against its hash, shown to `seen`, written.
    Placed,
    /// Not there any more, or not what its hash says: a hole to NAK.
    Absent,
    /// Writing it failed: the file fails.
    Failed(LandError),
}

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
    /// Appends a chunk whose BLAKE3 the core checked to the reservation;
    /// `place` is where it is being written (file number, offset), if the
    /// file is rebuilt.
    fn append(&mut self, place: Option<(u64, u64)>, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError>;
    /// Makes appended chunks durable and visible, keeping the unused rest
    /// reserved; returns the bytes committed.
    fn commit(&mut self) -> Result<u64, StoreError>;
    /// Where the committed bytes at `loc` are.
    fn stored(&self, loc: ChunkLoc) -> Lent<'s>;
    /// For [`Lent::InFile`] bytes: reads the chunk at `loc`, checks it
    /// against `hash`, shows it to `seen` and writes it at `at` of the file
    /// `no`.
    fn copy_chunk(
        &mut self,
        no: u64,
        at: u64,
        loc: ChunkLoc,
        hash: &Hash,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Copied;
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
    /// Replaces the damaged stored chunk `hash` with good `bytes` (the core
    /// writes them into the files waiting for them itself).
    fn repair(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError>;

    /// Whether the destination holds the probed file.
    fn holds(&mut self, rel: &RelPath, size: u64, mtime_ns: i128, key: &[u8]) -> bool;
    /// Creates the parent directories of `rel`.
    fn make_parent(&mut self, rel: &RelPath) -> Result<(), FilesError>;
    /// Creates the directory `rel`.
    fn make_dir(&mut self, rel: &RelPath, mode: u32) -> Result<(), FilesError>;
    /// Sets mode and mtime of the directory `rel` (after its contents).
    fn set_dir_meta(&mut self, rel: &RelPath, mtime_ns: i128, mode: u32) -> Result<(), FilesError>;
    /// Makes `rel` the symlink `target` (verbatim) with mtime `mtime_ns`,
    /// or keeps the same link there ([`pfs_files::DestRoot::create_symlink`]).
    fn make_symlink(&mut self, rel: &RelPath, target: &[u8], mtime_ns: i128)
        -> Result<Symlinked, FilesError>;
    /// Sets the mtime of the session's top directory (`rel`, or the
    /// destination root for `None`) whose contents were sent (`DIR/`).
    fn set_top_mtime(&mut self, rel: Option<&RelPath>, mtime_ns: i128) -> Result<(), FilesError>;
    /// Places the regular file `no` (see [`pfs_files::Landing::open_file`]).
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
        digest: Hash,
        quick: Option<QuickDigest>,
    ) -> Result<(), LandError>;
    /// Drops the file `no` being rebuilt.
    fn discard(&mut self, no: u64);
    /// The chunk `hash` of `len` bytes was written at `at` of the file `no`
    /// by [`Self::write`] (a repaired hole): an index of the destination's
    /// files records it.
    fn wrote_chunk(&mut self, no: u64, at: u64, hash: &Hash, len: u32);
    /// The file `no` being rebuilt waits (for REPAIR): close its
    /// descriptors until it is written or finished again.
    fn park(&mut self, no: u64);

    /// The session's chunk parameters, whether content decides
    /// "unchanged", not size and mtime (rsync's `--checksum`; see
    /// [`pfs_files::Landing::set_session`]), and whether runs of zeros are
    /// left as holes ([`pfs_files::Landing::set_sparse`]).
    fn set_session(&mut self, params: pfs_files::ChunkParams, checksum: bool, sparse: bool);

    /// Indexes the regular file at `rel` (a file a sender probes that the
    /// destination does not hold as far as size, mtime and its manifest
    /// tell) if the chunk index does not know it and it has at most
    /// `max_bytes`: chunked with `params`, its chunks offered to senders
    /// from the next commit, its content recorded in the manifest. Returns
    /// the bytes read (0 when nothing was done) and whether its content is
    /// the probed one after all (`size` bytes, an XXH3-128 starting with
    /// `key`: same bytes, another mtime). Hosts without a destination index
    /// do nothing.
    fn adopt(
        &mut self,
        _rel: &RelPath,
        _params: &pfs_files::ChunkParams,
        _max_bytes: u64,
        _probed: (u64, &[u8]),
    ) -> (u64, bool) {
        (0, false)
    }

    /// Whether the session's directory `dir` (the destination root for
    /// `None`) already has entries its chunk index may not describe
    /// (FILES_ACCEPT's `OCCUPIED`). Hosts without a destination index say no.
    fn occupied(&mut self, _dir: Option<&RelPath>) -> bool {
        false
    }

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
