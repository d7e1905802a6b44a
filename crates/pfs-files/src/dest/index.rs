//! The destination's chunk index, [`DestIndex`]: where each chunk a
//! receiver holds lies in the destination's own files, so a receiver needs
//! no second copy of what it holds (no content store).
//!
//! Every file the receiver lands is given a range of a virtual offset space
//! (its *base*, then its size); its chunks are indexed as
//! `BLAKE3 → (base + offset in the file, length)`. Senders see these
//! offsets exactly as they see a store's (FILES_ACCEPT's id and generation,
//! INDEX records, REF descriptors), so the wire is the same with or
//! without a store.
//!
//! Nothing here is trusted without a check: before a chunk is used, its
//! file is opened beneath the destination root (never through a symlink),
//! must still be the inode of the size that was indexed (otherwise all the
//! file's entries are dropped), and the bytes read must match the chunk's
//! BLAKE3 (otherwise that chunk is treated as missing: the receiver NAKs
//! it and the sender repairs it; the intact rest of the file still
//! serves). mtime and ctime alone do not drop a file: the receiver changes
//! them itself when it only sets metadata, and the hash check is what
//! decides. A file replaced at its path (by a later session) drops the old
//! one's entries.
//!
//! # File: `.pfs/index` beneath the destination root
//!
//! Integers little-endian.
//!
//! ```text
//! header, 64 bytes
//!   0   8  magic "PFSDIDX1"
//!   8   4  format version (1)
//!  12   4  header length (64)
//!  16  16  index id (random; replaced whenever records are dropped)
//!  32   8  creation time, seconds since the Unix epoch
//!  40  20  reserved, 0
//!  60   4  CRC-32C of bytes 0..60
//! records, appended: kind u8, body length u16, body, CRC-32C (u32) of kind..body
//!   kind 1, FILE  (40 + path bytes): base u64, size u64, inode u64,
//!                 mtime ns i64, ctime ns i64, path beneath the root
//!   kind 2, CHUNK (44): BLAKE3 [32], offset u64 (base + offset in file), length u32
//!   kind 3, PART  (50 + paths): base u64, length u64, inode u64, mtime ns i64,
//!                 ctime ns i64, offset u64 (in the file), temporary path
//!                 length u16, temporary path, then the path it is for
//! ```
//!
//! A FILE record for a path already indexed replaces the older file. The
//! generation senders cache is the number of CHUNK records.
//!
//! # Partial files
//! A file still being received is checkpointed at every commit: a PART
//! record gives the range written since the last one (a base of its own)
//! and CHUNK records its chunks, so a receiver killed mid-file keeps what
//! arrived. The temporary file stays in `.pfs/tmp` across a restart
//! ([`DestIndex::part_temps`]); the next send of the file references those
//! chunks instead of sending them again (they are copied into the new
//! file, checked like any other). A PART's file may keep growing, or be
//! shorter than its range (only its inode is checked, then each chunk's
//! bytes). When the
//! file it was for lands, its PARTs die and their temporary files are
//! removed ([`DestIndex::drop_parts`]).
//!
//! # Crash safety
//! Records of a file are appended after it was renamed into place, and
//! written (and `fdatasync`ed when durable) at [`DestIndex::commit`]; only
//! committed records are offered to senders. Opening replays the file and
//! stops at the first record that does not check (torn tail): the rest is
//! cut off and the index gets a new id, so a sender's cached copy of the
//! lost records is never mistaken for the index. A damaged header starts
//! a new index (the old file is kept beside it as `index.damaged`): the
//! index only speeds transfers up; the files are what matter. When dropped
//! entries outnumber live ones, opening rewrites the index without them
//! (new id).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustix::fs::{self as rfs, Mode, OFlags};

use super::{DestRoot, FileStat, STATE_DIR};
use crate::error::FilesError;
use crate::path::RelPath;

/// BLAKE3 of a chunk.
pub type Hash = [u8; 32];

const MAGIC: &[u8; 8] = b"PFSDIDX1";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 64;
const KIND_FILE: u8 = 1;
const KIND_CHUNK: u8 = 2;
const KIND_PART: u8 = 3;
const FILE_FIXED: usize = 40;
const PART_FIXED: usize = 50;
const CHUNK_BODY: usize = 44;
/// Record framing around a body: kind, length, CRC.
const FRAMING: usize = 1 + 2 + 4;
/// Name of the index file in `.pfs`.
const INDEX_NAME: &str = "index";
/// Compact at open when dropped chunk records outnumber live ones and
/// there are at least this many.
const COMPACT_MIN_RECORDS: usize = 1 << 16;

/// A committed chunk record, as offered to senders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexedChunk {
    /// BLAKE3 of the chunk.
    pub hash: Hash,
    /// Virtual offset: the file's base plus the chunk's offset in it.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A file (or a range of a partial file) whose chunks are indexed, as
/// found by [`DestIndex::file_at`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedFile {
    /// Its virtual base offset.
    pub base: u64,
    /// Where it is, beneath the destination root.
    pub rel: RelPath,
    /// Size when indexed (of the range, for a partial file).
    pub size: u64,
    /// Inode when indexed.
    pub ino: u64,
    /// Where the range starts in the file (0 but for partial files).
    pub offset: u64,
    /// A partial file: it may have grown since, or (killed before a
    /// write reached it) be shorter than the range; only its inode is
    /// checked, and each chunk's bytes.
    pub partial: bool,
}

impl IndexedFile {
    /// Whether a file found with inode `ino` and size `size` is still the
    /// one indexed.
    pub fn still(&self, ino: u64, size: u64) -> bool {
        ino == self.ino && (self.partial || size == self.size)
    }
}

/// What [`DestIndex::file_at`] found for a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileAt {
    /// The range lies in this live file.
    File(IndexedFile),
    /// The range was given out once, but its file is gone or changed.
    Gone,
    /// The range was never given out (or crosses a file's end): no sender
    /// got it from this index.
    Outside,
}

/// Counts for logs and `pfs serve`'s start line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DestIndexStats {
    /// Live files indexed.
    pub files: u64,
    /// Distinct chunks in live files.
    pub chunks: u64,
    /// Bytes of the live files.
    pub bytes: u64,
}

#[derive(Debug, Clone)]
struct FileRec {
    rel: RelPath,
    size: u64,
    ino: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    live: bool,
    /// A partial file's range: its offset in the file and the path the
    /// file is for.
    part: Option<(u64, RelPath)>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    id: [u8; 16],
    /// Committed chunk records, in order (generation = length).
    records: Vec<IndexedChunk>,
    /// Latest location per hash, committed or published.
    chunks: HashMap<Hash, (u64, u32)>,
    files: BTreeMap<u64, FileRec>,
    by_path: HashMap<Box<[u8]>, u64>,
    /// Bases of the partial-file ranges, by the path their file is for.
    parts: HashMap<Box<[u8]>, Vec<u64>>,
    next_base: u64,
    /// Encoded records published but not yet written.
    pending: Vec<u8>,
    /// Temporary files of partial records that a running session still writes.
    claimed: std::collections::HashSet<RelPath>,
    /// Chunk records in `pending`, in order.
    pending_chunks: Vec<IndexedChunk>,
}

/// The chunk index of one destination (module docs). Shared by every
/// session writing into that destination.
#[derive(Debug)]
pub struct DestIndex {
    /// The destination whose files it indexes (paths are relative to it).
    root: Arc<DestRoot>,
    path: PathBuf,
    durable: bool,
    inner: Mutex<Inner>,
}

impl DestIndex {
    /// Opens (or creates) the index in `root`'s `.pfs`; `durable` makes
    /// each commit `fdatasync` the index. Returns notes on what recovery
    /// did (empty when the index was clean).
    pub fn open(root: Arc<DestRoot>, durable: bool) -> Result<(Self, Vec<String>), FilesError> {
        Self::open_in(root, STATE_DIR, durable)
    }

    /// [`Self::open`] for the chunk-sharing group `group` (a name of
    /// letters, digits, `.`, `_`, `-`, not starting with `.`): its index is
    /// `.pfs/groups/GROUP/index`, and it sees only the files its sessions wrote.
    pub fn open_group(
        root: Arc<DestRoot>,
        group: &str,
        durable: bool,
    ) -> Result<(Self, Vec<String>), FilesError> {
        let safe = !group.is_empty()
            && !group.starts_with('.')
            && group
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !safe {
            return Err(FilesError::io(
                "open the index of group",
                PathBuf::from(group),
                io::Error::new(io::ErrorKind::InvalidInput, "not a group name"),
            ));
        }
        Self::open_in(root, &format!("{STATE_DIR}/groups/{group}"), durable)
    }

    fn open_in(root: Arc<DestRoot>, sub: &str, durable: bool) -> Result<(Self, Vec<String>), FilesError> {
        let dir = root.private_dir(sub)?;
        let path = root.path().join(sub).join(INDEX_NAME);
        let err = |op: &'static str| {
            let path = path.clone();
            move |e: rustix::io::Errno| FilesError::io(op, path, e.into())
        };
        let fd = rfs::openat(
            &dir,
            INDEX_NAME,
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(err("open"))?;
        let mut file = File::from(fd);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| FilesError::io("read", path.clone(), e))?;
        let mut notes = Vec::new();
        let mut inner = Inner::empty(file);
        let mut rewrite = false;
        if bytes.is_empty() {
            rewrite = true;
        } else if let Some(id) = parse_header(&bytes) {
            inner.id = id;
            let good = inner.replay(&bytes[HEADER_LEN..]);
            if HEADER_LEN + good < bytes.len() {
                notes.push(format!(
                    "{}: {} bytes after the last good record were cut off (torn write or damage); \
                     the index gets a new id",
                    crate::escape_path(&path),
                    bytes.len() - HEADER_LEN - good
                ));
                rewrite = true;
            }
        } else {
            let aside = format!("{INDEX_NAME}.damaged");
            rfs::renameat(&dir, INDEX_NAME, &dir, aside.as_str()).map_err(err("set aside"))?;
            notes.push(format!(
                "{}: not a pfs destination index (bad header); kept as {aside}, starting a new index",
                crate::escape_path(&path)
            ));
            let fd = rfs::openat(
                &dir,
                INDEX_NAME,
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(err("create"))?;
            inner = Inner::empty(File::from(fd));
            rewrite = true;
        }
        let live = inner.live_records();
        let dead = inner.records.len() - live;
        if dead > live && inner.records.len() >= COMPACT_MIN_RECORDS {
            notes.push(format!(
                "{}: {dead} records of replaced files dropped (compacted; the index gets a new id)",
                crate::escape_path(&path)
            ));
            rewrite = true;
        }
        if rewrite {
            // Every rewrite compacts: the new id tells senders to fetch it all.
            inner.compact();
            inner.id = pfs_store::random_id();
            inner.rewrite(&dir, &path, durable)?;
        }
        Ok((
            Self {
                root,
                path,
                durable,
                inner: Mutex::new(inner),
            },
            notes,
        ))
    }

    /// The destination whose files this index names.
    pub fn root(&self) -> &DestRoot {
        &self.root
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Index id and generation (committed chunk records), as FILES_ACCEPT gives them.
    pub fn identity(&self) -> ([u8; 16], u64) {
        let i = self.lock();
        (i.id, i.records.len() as u64)
    }

    /// Committed chunk records from `generation` on.
    pub fn records_since(&self, generation: u64) -> Vec<IndexedChunk> {
        let i = self.lock();
        let from = usize::try_from(generation)
            .unwrap_or(usize::MAX)
            .min(i.records.len());
        i.records[from..].to_vec()
    }

    /// Where the chunk `hash` is (committed or published), if its file is live.
    pub fn lookup(&self, hash: &Hash) -> Option<(u64, u32)> {
        let i = self.lock();
        let &(offset, len) = i.chunks.get(hash)?;
        matches!(i.file_at(offset, len), FileAt::File(_)).then_some((offset, len))
    }

    /// The file holding `offset .. offset + len`.
    pub fn file_at(&self, offset: u64, len: u32) -> FileAt {
        self.lock().file_at(offset, len)
    }

    /// The file at `base` changed or vanished behind the receiver's back:
    /// its entries are dropped (from lookups now; from the file at the
    /// next compaction).
    pub fn drop_file(&self, base: u64) {
        let mut i = self.lock();
        if let Some(f) = i.files.get_mut(&base) {
            f.live = false;
        }
    }

    /// Whether the file at `rel`, found as `stat`, is indexed as it is now
    /// (same inode, size and mtime; its entries live).
    pub fn indexes(&self, rel: &RelPath, stat: &FileStat) -> bool {
        let i = self.lock();
        i.by_path
            .get(rel.as_bytes())
            .and_then(|b| i.files.get(b))
            .is_some_and(|f| {
                f.live
                    && f.part.is_none()
                    && f.ino == stat.ino
                    && f.size == stat.size
                    && f.mtime_ns == clamp_ns(stat.mtime_ns)
            })
    }

    /// Indexes the file just landed at `rel` (found as `stat` after its
    /// rename) with its `chunks` (offset in the file, length, BLAKE3);
    /// a file indexed at the same path before is dropped. Visible to
    /// lookups at once, to senders after [`Self::commit`]. Files without
    /// chunks are not indexed.
    pub fn publish(&self, rel: &RelPath, stat: &FileStat, chunks: &[(u64, u32, Hash)]) {
        if chunks.is_empty() || stat.size == 0 {
            return;
        }
        let mut i = self.lock();
        let base = i.next_base;
        let rec = FileRec {
            rel: rel.clone(),
            size: stat.size,
            ino: stat.ino,
            mtime_ns: clamp_ns(stat.mtime_ns),
            ctime_ns: clamp_ns(stat.ctime_ns),
            live: true,
            part: None,
        };
        i.append_file(base, rec, chunks);
    }

    /// Checkpoints a file still being received: `chunks` (offset in the
    /// file, length, BLAKE3), written since its last checkpoint into the
    /// temporary file `temp` (inode `ino`), which will become `target`.
    /// The session's temporary file `temp` is claimed until
    /// [`Self::release`]: [`Self::drop_parts`] does not offer it for removal.
    pub fn publish_part(&self, temp: &RelPath, target: &RelPath, ino: u64, chunks: &[(u64, u32, Hash)]) {
        let (Some(start), Some(end)) = (
            chunks.iter().map(|c| c.0).min(),
            chunks
                .iter()
                .filter_map(|c| c.0.checked_add(u64::from(c.1)))
                .max(),
        ) else {
            return;
        };
        let mut i = self.lock();
        let base = i.next_base;
        let rec = FileRec {
            rel: temp.clone(),
            size: end - start,
            ino,
            mtime_ns: 0,
            ctime_ns: 0,
            live: true,
            part: Some((start, target.clone())),
        };
        let shifted: Vec<(u64, u32, Hash)> = chunks.iter().map(|&(at, l, h)| (at - start, l, h)).collect();
        i.claimed.insert(temp.clone());
        i.append_file(base, rec, &shifted);
    }

    /// The session writing `temp` is done with it (landed, dropped, or left
    /// for a later send).
    pub fn release(&self, temp: &RelPath) {
        self.lock().claimed.remove(temp);
    }

    /// The file for `target` landed: its partial files' entries die.
    /// Returns the temporary files no session claims (to remove, if they
    /// still exist).
    pub fn drop_parts(&self, target: &RelPath) -> Vec<RelPath> {
        let mut guard = self.lock();
        let i = &mut *guard;
        let mut temps = Vec::new();
        // Looked up by target: a session lands thousands of files.
        for base in i.parts.remove(target.as_bytes()).unwrap_or_default() {
            if let Some(f) = i.files.get_mut(&base).filter(|f| f.live) {
                f.live = false;
                if !temps.contains(&f.rel) && !i.claimed.contains(&f.rel) {
                    temps.push(f.rel.clone());
                }
            }
        }
        temps
    }

    /// Temporary files live partial records name (to keep across a restart).
    pub fn part_temps(&self) -> Vec<RelPath> {
        let i = self.lock();
        let mut temps: Vec<RelPath> = i
            .files
            .values()
            .filter(|f| f.live && f.part.is_some())
            .map(|f| f.rel.clone())
            .collect();
        temps.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        temps.dedup();
        temps
    }

    /// Writes the published records (and `fdatasync`s when durable);
    /// returns how many chunk records were committed.
    pub fn commit(&self) -> Result<u64, FilesError> {
        let mut i = self.lock();
        if i.pending.is_empty() {
            return Ok(0);
        }
        let pending = std::mem::take(&mut i.pending);
        let written =
            (&i.file)
                .write_all(&pending)
                .and_then(|()| if self.durable { i.file.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            // Nothing is offered to senders that may not be on disk; the
            // entries stay usable here (every use checks the bytes).
            i.pending_chunks.clear();
            return Err(FilesError::io("append to", self.path.clone(), e));
        }
        let new = std::mem::take(&mut i.pending_chunks);
        let n = new.len() as u64;
        i.records.extend(new);
        Ok(n)
    }

    /// Live files, distinct chunks in them, their bytes.
    pub fn stats(&self) -> DestIndexStats {
        let i = self.lock();
        let live = i.files.values().filter(|f| f.live);
        let (files, bytes) = live.fold((0, 0), |(n, b), f| (n + 1, b + f.size));
        let chunks = i
            .chunks
            .values()
            .filter(|&&(o, l)| matches!(i.file_at(o, l), FileAt::File(_)))
            .count() as u64;
        DestIndexStats { files, chunks, bytes }
    }

    /// The index file's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Inner {
    fn empty(file: File) -> Self {
        Self {
            file,
            id: [0; 16],
            records: Vec::new(),
            chunks: HashMap::new(),
            files: BTreeMap::new(),
            by_path: HashMap::new(),
            parts: HashMap::new(),
            next_base: 0,
            pending: Vec::new(),
            pending_chunks: Vec::new(),
            claimed: std::collections::HashSet::new(),
        }
    }

    /// Applies records from `bytes`; returns how many bytes were good.
    fn replay(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        while let Some((kind, body)) = next_record(&bytes[at..]) {
            match kind {
                KIND_FILE if body.len() >= FILE_FIXED => {
                    let Ok(rel) = RelPath::parse(&body[FILE_FIXED..]) else {
                        break;
                    };
                    let base = u64_at(body, 0);
                    let size = u64_at(body, 8);
                    if base < self.next_base || base.checked_add(size).is_none() {
                        break;
                    }
                    let rec = FileRec {
                        rel,
                        size,
                        ino: u64_at(body, 16),
                        mtime_ns: u64_at(body, 24) as i64,
                        ctime_ns: u64_at(body, 32) as i64,
                        live: true,
                        part: None,
                    };
                    self.add_file(base, rec);
                }
                KIND_PART if body.len() >= PART_FIXED => {
                    let tlen = usize::from(u16::from_le_bytes([body[48], body[49]]));
                    let Some((temp, target)) = body[PART_FIXED..]
                        .split_at_checked(tlen)
                        .and_then(|(t, g)| Some((RelPath::parse(t).ok()?, RelPath::parse(g).ok()?)))
                    else {
                        break;
                    };
                    let base = u64_at(body, 0);
                    let size = u64_at(body, 8);
                    if base < self.next_base || base.checked_add(size).is_none() {
                        break;
                    }
                    let rec = FileRec {
                        rel: temp,
                        size,
                        ino: u64_at(body, 16),
                        mtime_ns: u64_at(body, 24) as i64,
                        ctime_ns: u64_at(body, 32) as i64,
                        live: true,
                        part: Some((u64_at(body, 40), target)),
                    };
                    self.add_file(base, rec);
                }
                KIND_CHUNK if body.len() == CHUNK_BODY => {
                    let mut hash = [0; 32];
                    hash.copy_from_slice(&body[..32]);
                    let c = IndexedChunk {
                        hash,
                        offset: u64_at(body, 32),
                        len: u32::from_le_bytes([body[40], body[41], body[42], body[43]]),
                    };
                    if matches!(self.file_at(c.offset, c.len), FileAt::Outside) {
                        break;
                    }
                    self.chunks.insert(hash, (c.offset, c.len));
                    self.records.push(c);
                }
                _ => break,
            }
            at += FRAMING + body.len();
        }
        at
    }

    fn add_file(&mut self, base: u64, rec: FileRec) {
        // Ranges of partial files do not replace one another.
        match &rec.part {
            None => {
                let key: Box<[u8]> = rec.rel.as_bytes().into();
                if let Some(old) = self.by_path.insert(key, base) {
                    if let Some(f) = self.files.get_mut(&old) {
                        f.live = false;
                    }
                }
            }
            Some((_, target)) => self.parts.entry(target.as_bytes().into()).or_default().push(base),
        }
        self.next_base = base + rec.size;
        self.files.insert(base, rec);
    }

    /// Encodes and applies a file record at `base` and its chunk records.
    fn append_file(&mut self, base: u64, rec: FileRec, chunks: &[(u64, u32, Hash)]) {
        let mut buf = std::mem::take(&mut self.pending);
        encode_file(&mut buf, base, &rec);
        let size = rec.size;
        self.add_file(base, rec);
        for &(at, len, hash) in chunks {
            if at.checked_add(u64::from(len)).is_none_or(|end| end > size) {
                continue;
            }
            let c = IndexedChunk {
                hash,
                offset: base + at,
                len,
            };
            encode_chunk(&mut buf, &c);
            self.chunks.insert(hash, (c.offset, len));
            self.pending_chunks.push(c);
        }
        self.pending = buf;
    }

    fn file_at(&self, offset: u64, len: u32) -> FileAt {
        let Some((&base, f)) = self.files.range(..=offset).next_back() else {
            return FileAt::Outside;
        };
        let end = offset.checked_add(u64::from(len));
        if len == 0 || end.is_none_or(|e| e > base + f.size) {
            return FileAt::Outside;
        }
        if !f.live {
            return FileAt::Gone;
        }
        FileAt::File(IndexedFile {
            base,
            rel: f.rel.clone(),
            size: f.size,
            ino: f.ino,
            offset: f.part.as_ref().map_or(0, |p| p.0),
            partial: f.part.is_some(),
        })
    }

    /// Chunk records whose file is live and that are the latest for their hash.
    fn live_records(&self) -> usize {
        self.records
            .iter()
            .filter(|c| {
                self.chunks.get(&c.hash) == Some(&(c.offset, c.len))
                    && matches!(self.file_at(c.offset, c.len), FileAt::File(_))
            })
            .count()
    }

    /// Keeps only live files and their latest chunk records.
    fn compact(&mut self) {
        let records = std::mem::take(&mut self.records);
        let keep: Vec<IndexedChunk> = records
            .into_iter()
            .filter(|c| {
                self.chunks.get(&c.hash) == Some(&(c.offset, c.len))
                    && matches!(self.file_at(c.offset, c.len), FileAt::File(_))
            })
            .collect();
        self.files.retain(|_, f| f.live);
        self.by_path.retain(|_, b| self.files.contains_key(b));
        let files = &self.files;
        self.parts.retain(|_, bases| {
            bases.retain(|b| files.contains_key(b));
            !bases.is_empty()
        });
        self.chunks = keep.iter().map(|c| (c.hash, (c.offset, c.len))).collect();
        self.records = keep;
    }

    /// Writes the whole (compacted) index — header, live files, their
    /// records — to a temporary file and renames it over the index.
    fn rewrite(&mut self, dir: &impl AsFd, path: &std::path::Path, durable: bool) -> Result<(), FilesError> {
        let tmp = format!("{INDEX_NAME}.new");
        let io_err = |op: &'static str| {
            let path = path.to_path_buf();
            move |e: io::Error| FilesError::io(op, path, e)
        };
        let fd = rfs::openat(
            dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io_err("create")(e.into()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + self.records.len() * (CHUNK_BODY + FRAMING));
        out.extend_from_slice(&header(&self.id));
        for (&base, f) in self.files.iter().filter(|(_, f)| f.live) {
            encode_file(&mut out, base, f);
        }
        for c in &self.records {
            encode_chunk(&mut out, c);
        }
        let mut file = File::from(fd);
        file.write_all(&out).map_err(io_err("write"))?;
        if durable {
            file.sync_data().map_err(io_err("fsync"))?;
        }
        rfs::renameat(dir, tmp.as_str(), dir, INDEX_NAME).map_err(|e| io_err("rename")(e.into()))?;
        // Appends go to the new file.
        let fd = rfs::openat(
            dir,
            INDEX_NAME,
            OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("reopen")(e.into()))?;
        self.file = File::from(fd);
        Ok(())
    }
}

fn header(id: &[u8; 16]) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..32].copy_from_slice(id);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    h[32..40].copy_from_slice(&now.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The id of a valid header, or `None`.
fn parse_header(bytes: &[u8]) -> Option<[u8; 16]> {
    let h = bytes.get(..HEADER_LEN)?;
    let crc = u32::from_le_bytes([h[60], h[61], h[62], h[63]]);
    if &h[..8] != MAGIC
        || h[8..12] != VERSION.to_le_bytes()
        || h[12..16] != (HEADER_LEN as u32).to_le_bytes()
        || crc32c::crc32c(&h[..60]) != crc
    {
        return None;
    }
    let mut id = [0; 16];
    id.copy_from_slice(&h[16..32]);
    Some(id)
}

/// The next record that checks: kind and body.
fn next_record(bytes: &[u8]) -> Option<(u8, &[u8])> {
    let head = bytes.get(..3)?;
    let len = usize::from(u16::from_le_bytes([head[1], head[2]]));
    let whole = bytes.get(..FRAMING + len)?;
    let (covered, crc) = whole.split_at(3 + len);
    (crc32c::crc32c(covered).to_le_bytes() == crc).then_some((head[0], &covered[3..]))
}

fn encode(out: &mut Vec<u8>, kind: u8, body: &[&[u8]]) {
    let start = out.len();
    let len: usize = body.iter().map(|b| b.len()).sum();
    out.push(kind);
    out.extend_from_slice(&(len as u16).to_le_bytes());
    for b in body {
        out.extend_from_slice(b);
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

fn encode_file(out: &mut Vec<u8>, base: u64, f: &FileRec) {
    if let Some((offset, target)) = &f.part {
        let temp = f.rel.as_bytes();
        return encode(
            out,
            KIND_PART,
            &[
                &base.to_le_bytes(),
                &f.size.to_le_bytes(),
                &f.ino.to_le_bytes(),
                &f.mtime_ns.to_le_bytes(),
                &f.ctime_ns.to_le_bytes(),
                &offset.to_le_bytes(),
                &(temp.len() as u16).to_le_bytes(),
                temp,
                target.as_bytes(),
            ],
        );
    }
    encode(
        out,
        KIND_FILE,
        &[
            &base.to_le_bytes(),
            &f.size.to_le_bytes(),
            &f.ino.to_le_bytes(),
            &f.mtime_ns.to_le_bytes(),
            &f.ctime_ns.to_le_bytes(),
            f.rel.as_bytes(),
        ],
    );
}

fn encode_chunk(out: &mut Vec<u8>, c: &IndexedChunk) {
    encode(
        out,
        KIND_CHUNK,
        &[&c.hash, &c.offset.to_le_bytes(), &c.len.to_le_bytes()],
    );
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

fn clamp_ns(ns: i128) -> i64 {
    ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests;
