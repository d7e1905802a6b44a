//! The store: open and recover, reserve / append / commit, lookup, read,
//! verify and repair. Formats and guarantees are in the crate docs.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backing::{self, Backing, StoreBacking};
use crate::error::{hex, FormatProblem, InputProblem, StoreError};
use crate::index::{self, BlobLocation, Header, IndexWriter};
use crate::map::{BlobSpace, Claim, ClaimError, OverwriteError};

/// BLAKE3 of a chunk's bytes.
pub type ChunkHash = [u8; 32];

/// Where a chunk's bytes are in the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkLoc {
    /// Blob offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl ChunkLoc {
    /// One past the last byte (`offset + len`, saturating).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

/// One index record: a chunk hash and where its bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IndexRecord {
    /// BLAKE3 of the chunk.
    pub hash: ChunkHash,
    /// Where its bytes are.
    pub loc: ChunkLoc,
}

/// How hard [`Reservation::commit`] and [`Store::repair`] work to make data
/// survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Flush blob bytes (msync) before writing index records, then
    /// `fdatasync` the index before publishing: a commit that returned
    /// survives power loss. The default.
    #[default]
    Fsync,
    /// Same write order, no flushes: a process crash loses nothing that was
    /// committed (the page cache keeps it), a power loss may lose recent
    /// commits and leave index entries whose bytes were not written (found
    /// by [`Store::verify_all`]). For tests and benchmarks.
    None,
}

/// Default capacity: 16 GiB. The blob file only grows as data arrives.
pub const DEFAULT_CAPACITY: u64 = 16 << 30;

/// How to open a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Most bytes the blob may hold. A reservation that would go beyond it
    /// fails with [`StoreError::Full`] before anything is written. May differ
    /// between opens; lowering it below what is used only stops new data.
    pub capacity: u64,
    /// A hugetlbfs mount to create the blob file on (huge pages; persists
    /// until reboot or unmount). Only used when the store is created; a
    /// directory that is not hugetlbfs falls back to `DIR/blob` with a note
    /// in [`Store::recovery`].
    pub huge_dir: Option<PathBuf>,
    /// Flush policy of commits.
    pub durability: Durability,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            capacity: DEFAULT_CAPACITY,
            huge_dir: None,
            durability: Durability::Fsync,
        }
    }
}

impl StoreConfig {
    /// Default options with the given capacity.
    pub fn with_capacity(capacity: u64) -> Self {
        StoreConfig {
            capacity,
            ..StoreConfig::default()
        }
    }
}

/// Names one state of a store's index: a sender may cache the index per
/// `(id, generation)` and fetch only [`Store::entries_since`] its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreIdentity {
    /// Random at creation; replaced whenever recovery drops index records,
    /// so a cached `(id, generation)` never names different contents.
    pub id: [u8; 16],
    /// Number of committed index records (the next record's sequence number).
    pub generation: u64,
}

impl StoreIdentity {
    /// The id as 32 lowercase hex digits.
    pub fn id_hex(&self) -> String {
        hex(&self.id)
    }
}

/// Sizes and backing of a store, for `pfs store info` and server reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// Distinct chunks indexed.
    pub chunks: u64,
    /// Sum of their lengths.
    pub chunk_bytes: u64,
    /// Blob bytes handed out so far, including alignment padding, bytes
    /// written by abandoned reservations and superseded chunks (the unwritten
    /// rest of a reservation is given back when it ends).
    pub used: u64,
    /// The capacity limit of this open.
    pub capacity: u64,
    /// Bytes the next reservation can get under the capacity.
    pub free: u64,
    /// Length of the blob file (grows in page steps ahead of `used`).
    pub file_len: u64,
    /// Committed index records ([`StoreIdentity::generation`]).
    pub generation: u64,
    /// Where the blob lives and on what pages.
    pub backing: Backing,
}

/// What [`Store::open`] found and did. All zero / false for a clean open.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecoveryReport {
    /// The store did not exist and was created.
    pub created: bool,
    /// Index records replayed and kept.
    pub records_replayed: u64,
    /// Whole records dropped at and after the first one that failed its
    /// checksum (a torn or damaged index tail).
    pub dropped_corrupt: u64,
    /// Records dropped because their bytes lie beyond the blob file's end.
    pub dropped_beyond_blob: u64,
    /// Trailing index bytes that did not form a whole record (an
    /// interrupted commit), dropped.
    pub torn_bytes: u64,
    /// The blob file was missing and was created empty (hugetlbfs after a
    /// reboot or unmount).
    pub blob_missing: bool,
    /// The store got a new identity id because records were dropped.
    pub new_identity: bool,
    /// One line per thing a user may want to know, e.g. dropped records.
    pub notes: Vec<String>,
}

impl RecoveryReport {
    /// True iff the open found nothing to repair.
    pub fn is_clean(&self) -> bool {
        self.dropped_corrupt == 0
            && self.dropped_beyond_blob == 0
            && self.torn_bytes == 0
            && !self.blob_missing
    }
}

/// Lookup shards; a power of two.
const SHARDS: usize = 16;

/// Files in the store directory.
const LOCK_FILE: &str = "lock";
const INDEX_FILE: &str = "index";
const BLOB_FILE: &str = "blob";

/// The regular blob file grows in steps of this (fewer `fallocate` calls).
const FILE_GROW_STEP: u64 = 1 << 20;

/// A persistent receiver store: a blob file and a crash-safe chunk index.
/// `Send + Sync`: share it between session threads by reference or `Arc`.
pub struct Store {
    dir: PathBuf,
    space: BlobSpace,
    capacity: u64,
    durability: Durability,
    id: [u8; 16],
    /// hash → location, sharded by the hash's first byte. Written only under
    /// `writer`, after the records are durable.
    shards: Box<[RwLock<HashMap<ChunkHash, ChunkLoc>>]>,
    /// Every committed record in sequence order (`entries_since`). Written
    /// only under `writer`.
    log: RwLock<Vec<IndexRecord>>,
    /// The index file; its lock orders commits (record sequence = publication order).
    writer: Mutex<IndexWriter>,
    /// Sum of the lengths of indexed chunks. Written only under `writer`.
    chunk_bytes: AtomicU64,
    backing: Backing,
    recovery: RecoveryReport,
    /// Holds the exclusive `flock` for the store's life. Last, so it is
    /// released after everything else is closed.
    _lock: File,
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // Writers finish their update before releasing (no panicking calls
    // mid-update), so a poisoned lock still holds consistent data.
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// 16 random bytes for an index id (a store's, or a destination index's).
pub fn random_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    let from_kernel = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut id));
    if from_kernel.is_err() {
        // No /dev/urandom (unusual sandbox): time, pid and an address are
        // unique enough for a cache key.
        let mut h = blake3::Hasher::new();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        h.update(&now.as_nanos().to_le_bytes());
        h.update(&std::process::id().to_le_bytes());
        h.update(&(&id as *const _ as usize).to_le_bytes());
        id.copy_from_slice(&h.finalize().as_bytes()[..16]);
    }
    id
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Take the store's exclusive lock without waiting.
fn take_lock(dir: &Path) -> Result<File, StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(FILE_MODE)
        .open(&path)
        .map_err(|e| StoreError::io("open lock file", &path, e))?;
    make_private(&file, &path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(StoreError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(e) => Err(StoreError::io("flock", &path, e.into())),
    }
}

/// Mode of every file of a store: chunks other clients sent are nobody
/// else's to read.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Makes an open store file [`FILE_MODE`] if it is more open (a store made
/// before stores were private).
pub(crate) fn make_private(f: &File, path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = f
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(FILE_MODE))
            .map_err(|e| StoreError::io("chmod", path, e))?;
    }
    Ok(())
}

/// Open `path` read-write, creating it (mode 0600) if absent; true if it
/// was created.
fn open_or_create(path: &Path) -> Result<(File, bool), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let rw = || File::options().read(true).write(true).clone();
    let (f, created) = match rw().open(path) {
        Ok(f) => (f, false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => rw()
            .create_new(true)
            .mode(FILE_MODE)
            .open(path)
            .map(|f| (f, true))
            .map_err(|e| StoreError::io("create", path, e))?,
        Err(e) => return Err(StoreError::io("open", path, e)),
    };
    make_private(&f, path)?;
    Ok((f, created))
}

impl Store {
    /// Open the store in `dir`, creating it (and `dir`) if absent, else
    /// recovering it: replay the index, drop a torn or damaged tail and
    /// records whose bytes are not in the blob file (see
    /// [`Store::recovery`]). Takes an exclusive `flock` on `DIR/lock`: a
    /// second open of the same directory fails with [`StoreError::Locked`].
    pub fn open(dir: &Path, opts: &StoreConfig) -> Result<Store, StoreError> {
        if opts.capacity == 0 {
            return Err(StoreError::InvalidInput {
                reason: InputProblem::ZeroCapacity,
            });
        }
        {
            use std::os::unix::fs::DirBuilderExt;
            // A new store directory is private too; an existing one is left.
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| StoreError::io("create store directory", dir, e))?;
        }
        let lock_file = take_lock(dir)?;
        let mut report = RecoveryReport::default();
        let index_path = dir.join(INDEX_FILE);

        let (header, index_file) = match File::options().read(true).write(true).open(&index_path) {
            Ok(f) => {
                make_private(&f, &index_path)?;
                (index::read_header(&f, &index_path)?, Some(f))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                (Self::new_header(dir, opts, &mut report)?, None)
            }
            Err(e) => return Err(StoreError::io("open", &index_path, e)),
        };

        // Locate the blob file and its pages.
        let (blob_path, page_size, kind) = match &header.location {
            BlobLocation::InDir => {
                if let (Some(h), false) = (&opts.huge_dir, report.created) {
                    report.notes.push(format!(
                        "huge_dir {} ignored: this store keeps its blob in {}",
                        h.display(),
                        dir.join(BLOB_FILE).display()
                    ));
                }
                (dir.join(BLOB_FILE), pfs_sys::base_page_size(), StoreBacking::File)
            }
            BlobLocation::HugeTlbFs(p) => {
                let parent = p.parent().unwrap_or(Path::new("/")).to_path_buf();
                match backing::hugetlbfs_page_size(&parent) {
                    Ok(Some(ps)) => (p.clone(), ps, StoreBacking::HugeTlbFs),
                    _ => {
                        return Err(StoreError::HugeTlbFsMissing {
                            path: p.clone(),
                            dir: parent,
                        })
                    }
                }
            }
        };

        let (blob_file, blob_created) = open_or_create(&blob_path)?;
        let blob_len = blob_file
            .metadata()
            .map_err(|e| StoreError::io("stat", &blob_path, e))?
            .len();

        // Replay, and rewrite the index under a new id if anything was dropped.
        let mut id = header.id;
        let (entries, writer) = match index_file {
            None => {
                let w = index::create(dir, &header, &[])?;
                (Vec::new(), w)
            }
            Some(f) => {
                let replay = index::replay(&f, &index_path, blob_len)?;
                report.records_replayed = replay.entries.len() as u64;
                report.dropped_corrupt = replay.dropped_corrupt;
                report.dropped_beyond_blob = replay.dropped_beyond_blob;
                report.torn_bytes = replay.torn_bytes;
                report.blob_missing = blob_created;
                let huge = kind == StoreBacking::HugeTlbFs;
                Self::note_drops(&mut report, &replay, &blob_path, blob_len, huge);
                if replay.dropped_anything() {
                    id = random_id();
                    report.new_identity = true;
                    report.notes.push(format!(
                        "store identity changed to {} so peers fetch the index afresh",
                        hex(&id)
                    ));
                    let h = Header { id, ..header.clone() };
                    let w = index::create(dir, &h, &replay.entries)?;
                    (replay.entries, w)
                } else {
                    let n = replay.entries.len() as u64;
                    (replay.entries, IndexWriter::resume(f, index_path.clone(), n))
                }
            }
        };

        // Map the whole capacity once; allocate after the last committed byte.
        let grow_step = match kind {
            StoreBacking::HugeTlbFs => page_size,
            StoreBacking::File => FILE_GROW_STEP.max(page_size),
        };
        let map_len = opts.capacity.max(blob_len).max(1).next_multiple_of(grow_step);
        let data_end = entries.iter().map(|e| e.loc.end()).max().unwrap_or(0);
        // Space reserved by sessions that never committed it (they ended,
        // the server stopped) lies after the last committed chunk: give it
        // back to the filesystem.
        let keep = data_end.next_multiple_of(grow_step);
        if blob_len > keep {
            blob_file
                .set_len(keep)
                .map_err(|e| StoreError::io("truncate", &blob_path, e))?;
            report.notes.push(format!(
                "{} bytes reserved by sessions that ended without committing them were reclaimed",
                blob_len - keep
            ));
        }
        let space = BlobSpace::open(blob_file, blob_path.clone(), data_end, map_len, grow_step)
            .map_err(|e| StoreError::io("map", &blob_path, e))?;

        let description = match kind {
            StoreBacking::HugeTlbFs => backing::describe_huge(page_size),
            StoreBacking::File => backing::describe_file(backing::fs_type(dir)?, page_size),
        };
        let backing = Backing {
            kind,
            blob_path: fs::canonicalize(&blob_path).unwrap_or(blob_path),
            page_size,
            description,
        };

        let store = Store {
            dir: dir.to_path_buf(),
            space,
            capacity: opts.capacity,
            durability: opts.durability,
            id,
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            log: RwLock::new(Vec::new()),
            writer: Mutex::new(writer),
            chunk_bytes: AtomicU64::new(0),
            backing,
            recovery: report,
            _lock: lock_file,
        };
        store.publish(&entries, &mut write_lock(&store.log));
        Ok(store)
    }

    /// The header of a store about to be created in `dir`.
    fn new_header(dir: &Path, opts: &StoreConfig, report: &mut RecoveryReport) -> Result<Header, StoreError> {
        report.created = true;
        let blob = dir.join(BLOB_FILE);
        if let Ok(m) = fs::metadata(&blob) {
            if m.len() > 0 {
                return Err(StoreError::BadFormat {
                    path: blob,
                    reason: FormatProblem::BlobWithoutIndex {
                        index: dir.join(INDEX_FILE),
                    },
                });
            }
        }
        let id = random_id();
        let mut location = BlobLocation::InDir;
        let mut page_size = pfs_sys::base_page_size();
        if let Some(h) = &opts.huge_dir {
            match backing::hugetlbfs_page_size(h)? {
                Some(ps) => {
                    let h = fs::canonicalize(h).map_err(|e| StoreError::io("resolve", h, e))?;
                    location = BlobLocation::HugeTlbFs(h.join(format!("pfs-store-{}.blob", hex(&id))));
                    page_size = ps;
                }
                None => report.notes.push(format!(
                    "{} is not a hugetlbfs mount; the blob is a regular file in {}",
                    h.display(),
                    dir.display()
                )),
            }
        }
        Ok(Header {
            id,
            location,
            page_size,
            created_unix: unix_now(),
        })
    }

    fn note_drops(
        report: &mut RecoveryReport,
        replay: &index::Replay,
        blob: &Path,
        blob_len: u64,
        huge: bool,
    ) {
        if report.blob_missing {
            let why = if huge {
                " (a hugetlbfs file does not survive a reboot or unmount)"
            } else {
                ""
            };
            report.notes.push(format!(
                "blob file {} was missing{why} and was created empty",
                blob.display()
            ));
        }
        if let Some(seq) = replay.first_corrupt {
            report.notes.push(format!(
                "index record {seq} failed its checksum: it and the {} records after it were dropped",
                replay.dropped_corrupt - 1
            ));
        }
        if replay.torn_bytes > 0 {
            report.notes.push(format!(
                "{} trailing index bytes (an interrupted commit) were dropped",
                replay.torn_bytes
            ));
        }
        if replay.dropped_beyond_blob > 0 {
            report.notes.push(format!(
                "{} index records point beyond the blob file's {blob_len} bytes and were dropped",
                replay.dropped_beyond_blob
            ));
        }
    }

    /// Publish committed records to lookups and the log. Call with the log's
    /// write lock, and (after open) with `writer` held, so publication order
    /// is record order.
    fn publish(&self, records: &[IndexRecord], log: &mut Vec<IndexRecord>) {
        log.extend_from_slice(records);
        let mut bytes = self.chunk_bytes.load(Ordering::Relaxed);
        for shard in 0..SHARDS {
            let mut mine = records
                .iter()
                .filter(|e| usize::from(e.hash[0]) % SHARDS == shard)
                .peekable();
            if mine.peek().is_none() {
                continue;
            }
            let mut map = write_lock(&self.shards[shard]);
            for e in mine {
                bytes += u64::from(e.loc.len);
                if let Some(old) = map.insert(e.hash, e.loc) {
                    bytes -= u64::from(old.len);
                }
            }
        }
        // Relaxed: only written under `writer`; readers want a statistic.
        self.chunk_bytes.store(bytes, Ordering::Relaxed);
    }

    fn shard(&self, hash: &ChunkHash) -> &RwLock<HashMap<ChunkHash, ChunkLoc>> {
        &self.shards[usize::from(hash[0]) % SHARDS]
    }

    /// The store's identity: id and current generation.
    pub fn identity(&self) -> StoreIdentity {
        StoreIdentity {
            id: self.id,
            generation: read_lock(&self.log).len() as u64,
        }
    }

    /// Where the committed chunk with this hash is, if any.
    pub fn lookup(&self, hash: &ChunkHash) -> Option<ChunkLoc> {
        read_lock(self.shard(hash)).get(hash).copied()
    }

    /// The blob bytes at `loc`, valid for the store's life. Refused
    /// ([`StoreError::OutOfRange`]) unless the range lies in finished data:
    /// below the allocation point and inside no reservation still being
    /// written. Bytes of abandoned reservations are finished (but not
    /// indexed). Only [`Store::repair`] and other processes change them later.
    pub fn bytes(&self, loc: ChunkLoc) -> Result<&[u8], StoreError> {
        self.space
            .read(loc.offset, u64::from(loc.len))
            .map_err(|readable| StoreError::OutOfRange {
                offset: loc.offset,
                len: u64::from(loc.len),
                readable,
            })
    }

    /// True iff the bytes at `loc` are readable and hash to `hash`.
    pub fn verify(&self, hash: &ChunkHash, loc: ChunkLoc) -> bool {
        self.bytes(loc)
            .map(|b| blake3::hash(b).as_bytes() == hash)
            .unwrap_or(false)
    }

    /// Reserve `bytes` of blob space for one batch of appends (one file, or
    /// one gram's worth of chunks). Fails with [`StoreError::Full`] if it does
    /// not fit under the capacity, or [`StoreError::NoSpace`] if the
    /// filesystem cannot grow the blob file (the range is `fallocate`d here,
    /// so running out of space is an error now, never a SIGBUS later). On
    /// error nothing changed.
    pub fn reserve(&self, bytes: u64) -> Result<Reservation<'_>, StoreError> {
        let claim = self.claim(bytes)?;
        Ok(Reservation {
            store: self,
            claim,
            new_chunks: Vec::new(),
            slots: Vec::new(),
            seen: HashMap::new(),
        })
    }

    fn claim(&self, bytes: u64) -> Result<Claim<'_>, StoreError> {
        self.space.claim(bytes, self.capacity).map_err(|e| match e {
            ClaimError::Full { free } => StoreError::Full {
                need: bytes,
                free,
                capacity: self.capacity,
            },
            ClaimError::NoSpace { need, source } => StoreError::NoSpace {
                path: self.space.path().to_path_buf(),
                need,
                source,
            },
            ClaimError::Io(e) => StoreError::io("grow blob file", self.space.path(), e),
        })
    }

    /// Make `chunks` (written in `[start, start + len)`) durable and indexed.
    /// Returns each chunk's final location: its own, or that of an equal
    /// chunk another session committed first (unless `replace`, which
    /// indexes these even over existing entries).
    fn commit_chunks(
        &self,
        chunks: &[IndexRecord],
        (start, len): (u64, u64),
        replace: bool,
    ) -> Result<Vec<ChunkLoc>, StoreError> {
        if chunks.is_empty() {
            return Ok(Vec::new());
        }
        let sync = self.durability == Durability::Fsync;
        // 1. The bytes first, outside the index lock (commits flush in parallel).
        if sync {
            self.space
                .flush(start, len)
                .map_err(|e| StoreError::io("msync", self.space.path(), e))?;
        }
        // 2. Then the records, in publication order.
        let mut writer = lock(&self.writer);
        let mut finals = Vec::with_capacity(chunks.len());
        let mut records = Vec::with_capacity(chunks.len());
        for c in chunks {
            match self.lookup(&c.hash) {
                Some(winner) if !replace => finals.push(winner),
                _ => {
                    finals.push(c.loc);
                    records.push(*c);
                }
            }
        }
        if !records.is_empty() {
            writer.append(&records, sync)?;
            // 3. Only now visible to lookups and entries_since.
            self.publish(&records, &mut write_lock(&self.log));
        }
        Ok(finals)
    }

    /// Fix the chunk `hash` with good bytes `data` (a REPAIR from the
    /// sender): checks `blake3(data) == hash` ([`StoreError::HashMismatch`]
    /// otherwise, nothing written), then overwrites the indexed bytes in
    /// place and flushes them. A chunk not indexed, or indexed with another
    /// length, is appended and (re-)indexed instead. A concurrent reader of
    /// the chunk may see a mix of old and new bytes (they were damaged
    /// already). `data` must not be a slice of the bytes it repairs.
    pub fn repair(&self, hash: &ChunkHash, data: &[u8]) -> Result<ChunkLoc, StoreError> {
        let len = u32::try_from(data.len()).map_err(|_| StoreError::ChunkTooLarge {
            len: data.len() as u64,
        })?;
        let actual = blake3::hash(data);
        if actual.as_bytes() != hash {
            return Err(StoreError::mismatch(hash, actual.as_bytes()));
        }
        if let Some(loc) = self.lookup(hash).filter(|l| l.len == len) {
            if self.bytes(loc).is_ok_and(|b| b == data) {
                return Ok(loc);
            }
            self.space.overwrite(loc.offset, data).map_err(|e| match e {
                OverwriteError::NotReadable(readable) => StoreError::OutOfRange {
                    offset: loc.offset,
                    len: u64::from(len),
                    readable,
                },
                OverwriteError::Overlap => StoreError::InvalidInput {
                    reason: InputProblem::RepairOverlapsTarget,
                },
            })?;
            if self.durability == Durability::Fsync {
                self.space
                    .flush(loc.offset, u64::from(len))
                    .map_err(|e| StoreError::io("msync", self.space.path(), e))?;
            }
            return Ok(loc);
        }
        let mut claim = self.claim(u64::from(len))?;
        let offset = claim.push(data).ok_or(StoreError::ReservationExhausted {
            len: u64::from(len),
            left: claim.left(),
        })?;
        let range = (claim.start(), claim.written());
        drop(claim);
        let entry = IndexRecord {
            hash: *hash,
            loc: ChunkLoc { offset, len },
        };
        let finals = self.commit_chunks(&[entry], range, true)?;
        Ok(finals.first().copied().unwrap_or(entry.loc))
    }

    /// Committed records with sequence number `>= generation`, in commit
    /// order. A later record for the same hash supersedes an earlier one
    /// (repairs). Empty if `generation` is at or past the current one.
    pub fn entries_since(&self, generation: u64) -> Vec<IndexRecord> {
        let log = read_lock(&self.log);
        let from = usize::try_from(generation).unwrap_or(usize::MAX).min(log.len());
        log[from..].to_vec()
    }

    /// [`Store::identity`] and [`Store::entries_since`] taken together, so the
    /// entries are exactly those between `generation` and the identity's.
    pub fn delta_since(&self, generation: u64) -> (StoreIdentity, Vec<IndexRecord>) {
        let log = read_lock(&self.log);
        let from = usize::try_from(generation).unwrap_or(usize::MAX).min(log.len());
        let id = StoreIdentity {
            id: self.id,
            generation: log.len() as u64,
        };
        (id, log[from..].to_vec())
    }

    /// Sizes, generation and backing.
    pub fn stats(&self) -> StoreStats {
        let chunks = self.shards.iter().map(|s| read_lock(s).len() as u64).sum();
        let (used, file_len) = self.space.usage();
        StoreStats {
            chunks,
            chunk_bytes: self.chunk_bytes.load(Ordering::Relaxed),
            used,
            capacity: self.capacity,
            // What the next reservation can get (they start 64-byte aligned).
            free: self
                .capacity
                .saturating_sub(used.next_multiple_of(crate::map::CLAIM_ALIGN)),
            file_len,
            generation: read_lock(&self.log).len() as u64,
            backing: self.backing.clone(),
        }
    }

    /// Hash every indexed chunk on `threads` threads (0: one per core) and
    /// return the entries whose bytes no longer match, by offset.
    pub fn verify_all(&self, threads: usize) -> Vec<IndexRecord> {
        let entries: Vec<IndexRecord> = self
            .shards
            .iter()
            .flat_map(|s| {
                read_lock(s)
                    .iter()
                    .map(|(&hash, &loc)| IndexRecord { hash, loc })
                    .collect::<Vec<_>>()
            })
            .collect();
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let per = entries.len().div_ceil(threads).max(1);
        let mut bad: Vec<IndexRecord> = std::thread::scope(|s| {
            let handles: Vec<_> = entries
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .filter(|e| !self.verify(&e.hash, e.loc))
                            .copied()
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        bad.sort_by_key(|e| e.loc);
        bad
    }

    /// What the open found and did (dropped records, new identity, notes).
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob lives and on what pages.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("identity", &self.identity())
            .field("capacity", &self.capacity)
            .field("durability", &self.durability)
            .field("backing", &self.backing.description)
            .finish_non_exhaustive()
    }
}

/// Where the result of one append comes from, resolved at commit.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// Already committed when appended.
    Committed(ChunkLoc),
    /// Written by this reservation: index into `new_chunks`.
    New(usize),
}

/// Blob space reserved by one session for one batch of chunks: fill it with
/// [`Reservation::append`], publish it with [`Reservation::commit`].
///
/// Appends are a `memcpy` into the mapping (no syscall). Appended chunks are
/// invisible to [`Store::lookup`] until the commit. Dropping a reservation
/// without committing publishes nothing; the bytes it wrote stay as unused
/// blob space, its unwritten rest is free again at once (for later
/// reservations, wherever it lies), and a blob file left longer than the
/// committed data by a process that stopped is shortened at the next open.
pub struct Reservation<'s> {
    store: &'s Store,
    claim: Claim<'s>,
    /// Chunks written into the claim, in append order, distinct hashes.
    new_chunks: Vec<IndexRecord>,
    /// One per append call.
    slots: Vec<Slot>,
    /// Hashes written by this reservation → index into `new_chunks`.
    seen: HashMap<ChunkHash, usize>,
}

impl Reservation<'_> {
    /// Check that `data` hashes to `hash`, then [`Reservation::append_unchecked`].
    pub fn append(&mut self, hash: &ChunkHash, data: &[u8]) -> Result<ChunkLoc, StoreError> {
        let actual = blake3::hash(data);
        if actual.as_bytes() != hash {
            return Err(StoreError::mismatch(hash, actual.as_bytes()));
        }
        self.append_unchecked(hash, data)
    }

    /// Add a chunk whose hash the caller computed: if `hash` is committed or
    /// was appended to this reservation already, return that location
    /// without using space; else copy `data` into the reservation.
    /// [`StoreError::ReservationExhausted`] if it does not fit.
    ///
    /// The caller vouches for `hash == blake3(data)`; a wrong hash makes
    /// dedup hand out the wrong bytes for that hash until it is repaired.
    pub fn append_unchecked(&mut self, hash: &ChunkHash, data: &[u8]) -> Result<ChunkLoc, StoreError> {
        let len = u32::try_from(data.len()).map_err(|_| StoreError::ChunkTooLarge {
            len: data.len() as u64,
        })?;
        if let Some(&i) = self.seen.get(hash) {
            self.slots.push(Slot::New(i));
            return Ok(self.new_chunks[i].loc);
        }
        if let Some(loc) = self.store.lookup(hash) {
            self.slots.push(Slot::Committed(loc));
            return Ok(loc);
        }
        let offset = self.claim.push(data).ok_or(StoreError::ReservationExhausted {
            len: u64::from(len),
            left: self.claim.left(),
        })?;
        let loc = ChunkLoc { offset, len };
        let i = self.new_chunks.len();
        self.new_chunks.push(IndexRecord { hash: *hash, loc });
        self.seen.insert(*hash, i);
        self.slots.push(Slot::New(i));
        Ok(loc)
    }

    /// The bytes of a chunk this reservation wrote (not yet committed, so
    /// not visible through [`Store::lookup`]): lets a session reuse a chunk
    /// it received moments ago. `None` for hashes it did not write.
    pub fn bytes_of(&self, hash: &ChunkHash) -> Option<&[u8]> {
        let loc = self.new_chunks.get(*self.seen.get(hash)?)?.loc;
        self.claim.written_bytes(loc.offset, u64::from(loc.len))
    }

    /// Bytes still free in the reservation.
    pub fn left(&self) -> u64 {
        self.claim.left()
    }

    /// Bytes written so far (deduplicated chunks take none).
    pub fn written(&self) -> u64 {
        self.claim.written()
    }

    /// Make the appended chunks durable and visible: flush their blob bytes
    /// first, then append their index records and `fdatasync` the index, then
    /// publish them to [`Store::lookup`]. Returns one location per append
    /// call, in order: where that chunk's indexed bytes are (for a chunk
    /// another session committed first, the winner's location; both copies
    /// are valid bytes). On error nothing is published.
    pub fn commit(self) -> Result<Vec<ChunkLoc>, StoreError> {
        let Reservation {
            store,
            claim,
            new_chunks,
            slots,
            ..
        } = self;
        let range = (claim.start(), claim.written());
        // End the claim: no more writes, its bytes become readable before
        // they become visible to lookups.
        drop(claim);
        let finals = store.commit_chunks(&new_chunks, range, false)?;
        Ok(slots
            .into_iter()
            .map(|s| match s {
                Slot::Committed(loc) => loc,
                Slot::New(i) => finals[i],
            })
            .collect())
    }
}

impl std::fmt::Debug for Reservation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("claim", &self.claim)
            .field("new_chunks", &self.new_chunks.len())
            .field("appends", &self.slots.len())
            .finish_non_exhaustive()
    }
}
