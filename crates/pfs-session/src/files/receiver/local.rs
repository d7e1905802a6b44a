//! The host of a real receiver ([`LocalHost`]), the I/O side of
//! [`FilesHost`]: its chunk index (a [`Store`], or the destination's own
//! [`DestIndex`]) and a [`Landing`] in a destination directory.

use std::collections::HashMap;
use std::fs::File;
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use pfs_files::dest::index::{FileAt, IndexedFile};
use pfs_files::{
    DestIndex, FileSpec, FilesError, LandError, Landing, Linked, Placement, QuickDigest, RelPath, Removed,
    Symlinked,
};
use pfs_store::{ChunkLoc, IndexRecord, Reservation, Store, StoreError};
use pfs_wire::files::{Hash, Xattrs};

use super::clone::{CloneRun, Shared};
use super::host::{Copied, FilesHost, Lent, StoreInfo};
use crate::files::hash_matches;

/// Where the chunks a receiver holds are, and where new ones go.
#[derive(Debug, Clone, Copy)]
pub enum ChunkIndex<'s> {
    /// A content store (`pfs serve --store`): chunks kept a second time,
    /// as a history.
    Store(&'s Store),
    /// The destination's own files (one copy on disk): the index, and
    /// where the session's destination is beneath the index's root (a
    /// `dir=` key writes into a subdirectory of what its group's index
    /// covers).
    Dest(&'s DestIndex, Option<&'s RelPath>),
}

/// A [`ChunkIndex`] shared by the sessions of a server.
#[derive(Debug, Clone)]
pub enum SharedChunkIndex {
    /// A content store.
    Store(std::sync::Arc<Store>),
    /// The destination's own files, and where the session's destination
    /// is beneath the index's root.
    Dest(std::sync::Arc<DestIndex>, Option<RelPath>),
}

/// What a chunk index holds, for a server's start line and `--json` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// `index` (a dest index) or `store`.
    pub kind: &'static str,
    /// Its file.
    pub path: std::path::PathBuf,
    /// Id, in hex.
    pub id: String,
    /// Committed records.
    pub generation: u64,
    /// Distinct chunks.
    pub chunks: u64,
    /// Bytes held (a store's used bytes; a dest index's live files).
    pub bytes: u64,
    /// Files indexed (dest index).
    pub files: Option<u64>,
    /// Capacity and backing (store).
    pub capacity: Option<(u64, String)>,
}

impl std::fmt::Display for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        write!(
            f,
            "{} {} (id {}, generation {}, {} chunks",
            self.kind,
            pfs_files::escape_path(&self.path),
            self.id,
            self.generation,
            self.chunks
        )?;
        if let Some(n) = self.files {
            write!(f, " in {n} files, {:.1} MB: one copy on disk", mb(self.bytes))?;
        }
        if let Some((cap, backing)) = &self.capacity {
            write!(f, ", {:.1} of {:.1} MB used, {backing}", mb(self.bytes), mb(*cap))?;
        }
        f.write_str(")")
    }
}

impl SharedChunkIndex {
    /// What it holds.
    pub fn holding(&self) -> Holding {
        match self {
            Self::Dest(ix, _) => {
                let ((id, generation), st) = (ix.identity(), ix.stats());
                Holding {
                    kind: "index",
                    path: ix.path().to_path_buf(),
                    id: pfs_store::hex(&id),
                    generation,
                    chunks: st.chunks,
                    bytes: st.bytes,
                    files: Some(st.files),
                    capacity: None,
                }
            }
            Self::Store(s) => {
                let st = s.stats();
                Holding {
                    kind: "store",
                    path: s.dir().to_path_buf(),
                    id: s.identity().id_hex(),
                    generation: st.generation,
                    chunks: st.chunks,
                    bytes: st.used,
                    files: None,
                    capacity: Some((st.capacity, st.backing.description.clone())),
                }
            }
        }
    }

    /// The index to run a session with.
    pub fn get(&self) -> ChunkIndex<'_> {
        match self {
            Self::Store(s) => ChunkIndex::Store(s),
            Self::Dest(d, within) => ChunkIndex::Dest(d, within.as_ref()),
        }
    }
}

/// Chunk records one session keeps for the files it has not landed yet
/// (beyond this, a file's further chunks are not indexed; it is still
/// written and checked).
const MAX_BUILDING_CHUNKS: usize = 1 << 20;
/// Source files kept open by a destination host.
const OPEN_SOURCES: usize = 16;

/// The host of a real receiver: its chunk index and destination on this machine.
#[derive(Debug)]
pub struct LocalHost<'s> {
    held: Held<'s>,
    landing: Landing<'s>,
}

#[derive(Debug)]
enum Held<'s> {
    Store {
        store: &'s Store,
        res: Option<Reservation<'s>>,
    },
    Dest(DestHost<'s>),
}

/// The session's side of a [`DestIndex`]: source files open, the chunks of
/// files not landed yet, a buffer for chunk bytes.
#[derive(Debug)]
struct DestHost<'s> {
    index: &'s DestIndex,
    /// The session's destination beneath the index's root.
    within: Option<&'s RelPath>,
    /// Source files checked this session.
    sources: Vec<Source>,
    /// Chunks written into each file being rebuilt: (offset, len, hash).
    building: HashMap<u64, Vec<(u64, u32, Hash)>>,
    building_count: usize,
    /// Literal chunks of this session not landed yet: hash → (file, offset, len).
    appended: HashMap<Hash, (u64, u64, u32)>,
    /// Literal bytes written since the last commit.
    landed: u64,
    buf: Vec<u8>,
    /// Chunks of each file being rebuilt already checkpointed (PART records).
    checkpointed: HashMap<u64, usize>,
    /// Temporary files this session claimed in the index.
    claimed: HashMap<u64, RelPath>,
    /// Block size of reflinks into the destination where it takes them,
    /// once asked (the first time a run could start).
    reflink: Option<Option<u64>>,
    /// Chunks copied whose whole blocks are shared when the run ends.
    run: Option<Box<(CloneRun, Arc<File>)>>,
    /// Files whose run could not be finished outside a call about them:
    /// the next write or finish of the file fails with this.
    broken: HashMap<u64, LandError>,
}

/// A held file (or a range of a partial one) a session copies chunks from.
#[derive(Debug)]
struct Source {
    base: u64,
    size: u64,
    /// Where the range starts in the file.
    offset: u64,
    file: Arc<File>,
}

impl Drop for DestHost<'_> {
    fn drop(&mut self) {
        for t in self.claimed.values() {
            self.index.release(t);
        }
    }
}

impl<'s> LocalHost<'s> {
    /// A host over `chunks`, landing files through `landing`.
    pub fn new(chunks: ChunkIndex<'s>, landing: Landing<'s>) -> Self {
        let held = match chunks {
            ChunkIndex::Store(store) => Held::Store { store, res: None },
            ChunkIndex::Dest(index, within) => Held::Dest(DestHost {
                index,
                within,
                sources: Vec::new(),
                building: HashMap::new(),
                building_count: 0,
                appended: HashMap::new(),
                landed: 0,
                buf: Vec::new(),
                checkpointed: HashMap::new(),
                claimed: HashMap::new(),
                reflink: None,
                run: None,
                broken: HashMap::new(),
            }),
        };
        Self { held, landing }
    }

    /// Files being rebuilt with a descriptor open (parked ones not counted).
    pub fn open_files(&self) -> usize {
        self.landing.open_files()
    }

    /// At the end of a session however it ended: commits what arrived and,
    /// without a store, leaves files that were checkpointed half-way in
    /// `.pfs/tmp` for the next send to use (the rest are removed).
    pub fn salvage(&mut self) -> Result<u64, StoreError> {
        let committed = self.commit()?;
        if let Held::Dest(d) = &mut self.held {
            for no in d.checkpointed.keys() {
                self.landing.keep(*no);
            }
        }
        Ok(committed)
    }
}

/// `within`/`rel`, or `rel` alone.
fn beneath(within: Option<&RelPath>, rel: &[u8]) -> Option<RelPath> {
    match within {
        Some(w) => w.join(rel).ok(),
        None => RelPath::parse(rel).ok(),
    }
}

impl DestHost<'_> {
    fn note(&mut self, no: u64, at: u64, len: u32, hash: &Hash) {
        if self.building_count < MAX_BUILDING_CHUNKS {
            self.building.entry(no).or_default().push((at, len, *hash));
            self.building_count += 1;
        }
    }

    /// The source file for `base`, opened and checked once per session:
    /// still the inode and size indexed, else its entries are dropped.
    fn source(&mut self, f: &IndexedFile) -> Option<usize> {
        if let Some(i) = self.sources.iter().position(|s| s.base == f.base) {
            return Some(i);
        }
        let found = self.index.root().open_existing(&f.rel).ok().flatten();
        let Some((file, _)) = found.filter(|(_, m)| {
            use std::os::unix::fs::MetadataExt;
            f.still(m.ino(), m.size())
        }) else {
            self.index.drop_file(f.base);
            return None;
        };
        if self.sources.len() >= OPEN_SOURCES {
            self.sources.remove(0);
        }
        self.sources.push(Source {
            base: f.base,
            size: f.size,
            offset: f.offset,
            file: Arc::new(file),
        });
        Some(self.sources.len() - 1)
    }

    fn copy(
        &mut self,
        landing: &mut Landing<'_>,
        no: u64,
        at: u64,
        loc: ChunkLoc,
        hash: &Hash,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Copied {
        let len = loc.len as usize;
        let end = loc.offset + u64::from(loc.len);
        // The open source covering `loc`, if any, saves the index lookup.
        let cached = self
            .sources
            .iter()
            .position(|s| s.base <= loc.offset && end <= s.base + s.size);
        let i = match cached {
            Some(i) => i,
            None => {
                let FileAt::File(f) = self.index.file_at(loc.offset, loc.len) else {
                    return Copied::Absent;
                };
                match self.source(&f) {
                    Some(i) => i,
                    None => return Copied::Absent,
                }
            }
        };
        let src = &self.sources[i];
        let (base, src_at, file) = (
            src.base,
            loc.offset - src.base + src.offset,
            Arc::clone(&src.file),
        );
        self.buf.resize(len, 0);
        let good = file.read_exact_at(&mut self.buf, src_at).is_ok() && hash_matches(&self.buf, hash);
        if !good {
            // Changed behind the receiver's back (same inode and size):
            // this chunk is NAKed; others of the file are still checked
            // one by one, so what is intact keeps serving.
            return Copied::Absent;
        }
        seen(&self.buf);
        match self.clone_or_write(landing, no, at, base, src_at, file, hash) {
            Ok(()) => {
                self.note(no, at, loc.len, hash);
                Copied::Placed
            }
            Err(e) => Copied::Failed(e),
        }
    }

    /// Places the verified chunk in `self.buf` at `at` of the file `no`: in
    /// the current reflink run if it continues it, else in a new one if its
    /// offsets allow sharing blocks, else written.
    #[allow(clippy::too_many_arguments)]
    fn clone_or_write(
        &mut self,
        landing: &mut Landing<'_>,
        no: u64,
        at: u64,
        base: u64,
        src_at: u64,
        file: Arc<File>,
        hash: &Hash,
    ) -> Result<(), LandError> {
        if let Some(b) = self.run.as_mut().filter(|b| b.0.continues(no, base, at, src_at)) {
            return b.0.add(landing, at, &self.buf, hash);
        }
        self.end_run(landing, no)?;
        if let Some(block) = self.reflink_block() {
            if let Some(run) = CloneRun::start(landing, no, base, block, at, src_at, &self.buf, hash) {
                self.run = Some(Box::new((run?, file)));
                return Ok(());
            }
        }
        landing.write_at(no, at, &mut [IoSlice::new(&self.buf)])
    }

    /// Block size of reflinks into the destination, asked once.
    fn reflink_block(&mut self) -> Option<u64> {
        *self
            .reflink
            .get_or_insert_with(|| self.index.root().reflink_block())
    }

    /// Ends the reflink run, if any. Its failure is returned when the run
    /// was for the file `no`, else kept for that file's next write or finish.
    fn end_run(&mut self, landing: &mut Landing<'_>, no: u64) -> Result<(), LandError> {
        let Some(b) = self.run.take() else {
            return Ok(());
        };
        let (run, file) = *b;
        let of = run.no;
        match run.finish(landing, &file) {
            Ok(shared) => {
                // A filesystem without reflinks is not asked again.
                if shared == Shared::Unsupported {
                    self.reflink = Some(None);
                }
                Ok(())
            }
            Err(e) if of == no => Err(e),
            Err(e) => {
                self.broken.insert(of, e);
                Ok(())
            }
        }
    }

    /// Ends the run of the file `no` (before anything else reads, writes or
    /// finishes it); a failure kept for it is returned.
    fn settle(&mut self, landing: &mut Landing<'_>, no: u64) -> Result<(), LandError> {
        if self.run.as_ref().is_some_and(|b| b.0.no == no) {
            self.end_run(landing, no)?;
        }
        self.broken.remove(&no).map_or(Ok(()), Err)
    }

    /// A literal chunk this session wrote into a file not landed yet.
    fn copy_appended(
        &mut self,
        landing: &mut Landing<'_>,
        no: u64,
        at: u64,
        hash: &Hash,
        len: u32,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), LandError>> {
        let &(from, from_at, from_len) = self.appended.get(hash)?;
        if from_len != len {
            return None;
        }
        if self.run.as_ref().is_some_and(|b| b.0.no == from) {
            // Its bytes must be in place before they are read back.
            self.end_run(landing, u64::MAX).ok()?;
        }
        self.buf.resize(len as usize, 0);
        landing.read_at(from, from_at, &mut self.buf).ok()?;
        if !hash_matches(&self.buf, hash) {
            return None;
        }
        seen(&self.buf);
        if let Err(e) = landing.write_at(no, at, &mut [IoSlice::new(&self.buf)]) {
            return Some(Err(e));
        }
        self.note(no, at, len, hash);
        Some(Ok(()))
    }

    /// Checkpoints every file being rebuilt: a PART record for the
    /// chunks written since its last checkpoint.
    fn checkpoint(&mut self, landing: &Landing<'_>) {
        for (&no, chunks) in &self.building {
            let from = self.checkpointed.get(&no).copied().unwrap_or(0);
            if chunks.len() <= from {
                continue;
            }
            let Some((name, target, ino)) = landing.temp_info(no) else {
                continue;
            };
            let mut temp = pfs_files::dest::TEMP_DIR.as_bytes().to_vec();
            temp.push(b'/');
            temp.extend_from_slice(name);
            let (Some(temp), Some(target)) = (
                beneath(self.within, &temp),
                beneath(self.within, target.as_bytes()),
            ) else {
                continue;
            };
            self.index.publish_part(&temp, &target, ino, &chunks[from..]);
            self.checkpointed.insert(no, chunks.len());
            self.claimed.insert(no, temp);
        }
    }

    /// The file `no` is done with (landed or dropped): forgets its chunks
    /// and releases its temporary file's claim.
    fn forget(&mut self, no: u64) -> Vec<(u64, u32, Hash)> {
        self.checkpointed.remove(&no);
        if let Some(t) = self.claimed.remove(&no) {
            self.index.release(&t);
        }
        let chunks = self.building.remove(&no).unwrap_or_default();
        self.building_count -= chunks.len();
        for (_, _, h) in &chunks {
            if self.appended.get(h).is_some_and(|a| a.0 == no) {
                self.appended.remove(h);
            }
        }
        chunks
    }
}

impl<'s> FilesHost<'s> for LocalHost<'s> {
    fn store_info(&self) -> StoreInfo {
        match &self.held {
            Held::Store { store, .. } => {
                let ident = store.identity();
                let stats = store.stats();
                StoreInfo {
                    id: ident.id,
                    generation: ident.generation,
                    capacity: stats.capacity,
                    free: stats.capacity.saturating_sub(stats.used),
                }
            }
            Held::Dest(d) => {
                let (id, generation) = d.index.identity();
                // The destination's filesystem is the capacity: files are the store.
                let (capacity, free) = rustix::fs::statvfs(self.landing.root().path())
                    .map(|v| (v.f_blocks * v.f_frsize, v.f_bavail * v.f_frsize))
                    .unwrap_or((u64::MAX, u64::MAX));
                StoreInfo {
                    id,
                    generation,
                    capacity,
                    free,
                }
            }
        }
    }

    fn index_since(&self, generation: u64) -> Vec<IndexRecord> {
        match &self.held {
            Held::Store { store, .. } => store.entries_since(generation),
            Held::Dest(d) => d
                .index
                .records_since(generation)
                .into_iter()
                .map(|c| IndexRecord {
                    hash: c.hash,
                    loc: ChunkLoc {
                        offset: c.offset,
                        len: c.len,
                    },
                })
                .collect(),
        }
    }

    fn reserve(&mut self, bytes: u64) -> Result<(), StoreError> {
        match &mut self.held {
            Held::Store { store, res } => {
                *res = Some(store.reserve(bytes)?);
                Ok(())
            }
            // Space is taken file by file, as they are written (a full
            // disk fails the file being written, never the session).
            Held::Dest(_) => Ok(()),
        }
    }

    fn reserved_left(&self) -> u64 {
        match &self.held {
            Held::Store { res, .. } => res.as_ref().map_or(0, Reservation::left),
            Held::Dest(_) => u64::MAX,
        }
    }

    fn append(&mut self, place: Option<(u64, u64)>, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError> {
        match &mut self.held {
            Held::Store { res, .. } => match res.as_mut() {
                Some(res) => res.append_unchecked(hash, bytes).map(drop),
                None => Err(StoreError::ReservationExhausted {
                    len: bytes.len() as u64,
                    left: 0,
                }),
            },
            Held::Dest(d) => {
                if let Some((no, at)) = place {
                    let len = bytes.len() as u32;
                    d.note(no, at, len, hash);
                    d.appended.entry(*hash).or_insert((no, at, len));
                    d.landed += u64::from(len);
                }
                Ok(())
            }
        }
    }

    fn commit(&mut self) -> Result<u64, StoreError> {
        match &mut self.held {
            Held::Store { store, res } => {
                let Some(r) = res.take() else {
                    return Ok(0);
                };
                let left = r.left();
                let written = r.written();
                r.commit()?;
                if left > 0 {
                    *res = Some(store.reserve(left)?);
                }
                Ok(written)
            }
            Held::Dest(d) => {
                // A checkpoint says which chunks a partial file holds.
                let _ = d.end_run(&mut self.landing, u64::MAX);
                d.checkpoint(&self.landing);
                d.index.commit().map_err(|e| StoreError::Io {
                    op: "append to the destination index",
                    path: d.index.path().to_path_buf(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                Ok(std::mem::take(&mut d.landed))
            }
        }
    }

    fn stored(&self, loc: ChunkLoc) -> Lent<'s> {
        match &self.held {
            Held::Store { store, .. } => store.bytes(loc).map_or(Lent::Outside, Lent::Bytes),
            Held::Dest(d) => match d.index.file_at(loc.offset, loc.len) {
                FileAt::Outside => Lent::Outside,
                FileAt::File(_) | FileAt::Gone => Lent::InFile,
            },
        }
    }

    fn copy_chunk(
        &mut self,
        no: u64,
        at: u64,
        loc: ChunkLoc,
        hash: &Hash,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Copied {
        match &mut self.held {
            Held::Store { .. } => Copied::Absent,
            Held::Dest(d) => d.copy(&mut self.landing, no, at, loc, hash, seen),
        }
    }

    fn lookup(&self, hash: &Hash) -> Option<ChunkLoc> {
        match &self.held {
            Held::Store { store, .. } => store.lookup(hash),
            Held::Dest(d) => d.index.lookup(hash).map(|(offset, len)| ChunkLoc { offset, len }),
        }
    }

    fn place_appended(
        &mut self,
        no: u64,
        at: u64,
        hash: &Hash,
        len: u32,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), LandError>> {
        match &mut self.held {
            Held::Store { res, .. } => {
                let bytes = res.as_ref()?.bytes_of(hash)?;
                if bytes.len() != len as usize {
                    return None;
                }
                seen(bytes);
                Some(self.landing.write_at(no, at, &mut [IoSlice::new(bytes)]))
            }
            Held::Dest(d) => d.copy_appended(&mut self.landing, no, at, hash, len, seen),
        }
    }

    fn repair(&mut self, hash: &Hash, bytes: &[u8]) -> Result<(), StoreError> {
        match &self.held {
            Held::Store { store, .. } => store.repair(hash, bytes).map(drop),
            Held::Dest(_) => Ok(()),
        }
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

    fn make_symlink(
        &mut self,
        rel: &RelPath,
        target: &[u8],
        mtime_ns: i128,
    ) -> Result<Symlinked, FilesError> {
        self.landing.make_symlink(rel, target, mtime_ns)
    }

    fn set_top_mtime(&mut self, rel: Option<&RelPath>, mtime_ns: i128) -> Result<(), FilesError> {
        self.landing.set_top_mtime(rel, mtime_ns)
    }

    fn open_file(&mut self, no: u64, f: &FileSpec<'_>) -> Result<Placement, LandError> {
        self.landing.open_file(no, f)
    }

    fn write(&mut self, no: u64, at: u64, slices: &mut [IoSlice<'_>]) -> Result<(), LandError> {
        if let Held::Dest(d) = &mut self.held {
            d.settle(&mut self.landing, no)?;
        }
        self.landing.write_at(no, at, slices)
    }

    fn wants_quick(&self) -> bool {
        self.landing.wants_quick()
    }

    fn finish_file(
        &mut self,
        no: u64,
        f: &FileSpec<'_>,
        digest: Hash,
        quick: Option<QuickDigest>,
    ) -> Result<(), LandError> {
        if let Held::Dest(d) = &mut self.held {
            d.settle(&mut self.landing, no)?;
        }
        let landed = self.landing.finish_file(no, f, digest, quick);
        if let Held::Dest(d) = &mut self.held {
            let chunks = d.forget(no);
            // Too long a path from the index's root: not indexed.
            if let (Ok(stat), Some(full)) = (&landed, beneath(d.within, f.rel.as_bytes())) {
                d.index.publish(&full, stat, &chunks);
                // Partial files a killed session left for this file are done with.
                for t in d.index.drop_parts(&full) {
                    let _ = d.index.root().remove_file(&t);
                }
            }
        }
        landed.map(drop)
    }

    fn wrote_chunk(&mut self, no: u64, at: u64, hash: &Hash, len: u32) {
        if let Held::Dest(d) = &mut self.held {
            d.note(no, at, len, hash);
        }
    }

    fn discard(&mut self, no: u64) {
        if let Held::Dest(d) = &mut self.held {
            if d.run.as_ref().is_some_and(|b| b.0.no == no) {
                d.run = None;
            }
            d.broken.remove(&no);
            d.forget(no);
        }
        self.landing.discard(no);
    }

    fn park(&mut self, no: u64) {
        if let Held::Dest(d) = &mut self.held {
            if d.run.as_ref().is_some_and(|b| b.0.no == no) {
                // Kept for the file's next write or finish.
                let _ = d.end_run(&mut self.landing, u64::MAX);
            }
        }
        self.landing.park(no);
    }

    fn set_session(&mut self, params: pfs_files::ChunkParams, checksum: bool, sparse: bool) {
        self.landing.set_session(params, checksum);
        self.landing.set_sparse(sparse);
    }

    fn occupied(&mut self, dir: Option<&RelPath>) -> bool {
        matches!(self.held, Held::Dest(_)) && self.landing.root().has_entries(dir)
    }

    fn adopt(
        &mut self,
        rel: &RelPath,
        params: &pfs_files::ChunkParams,
        max_bytes: u64,
        (size, key): (u64, &[u8]),
    ) -> (u64, bool) {
        use std::os::unix::fs::MetadataExt;
        let Held::Dest(d) = &mut self.held else {
            return (0, false);
        };
        let Some(full) = beneath(d.within, rel.as_bytes()) else {
            return (0, false);
        };
        // Never a receiver's state, wherever a group's `.pfs` is.
        if full
            .as_bytes()
            .split(|&b| b == b'/')
            .any(|c| c == pfs_files::STATE_DIR.as_bytes())
        {
            return (0, false);
        }
        let Ok(Some((file, meta))) = d.index.root().open_existing(&full) else {
            return (0, false);
        };
        let len = meta.size();
        let stat = pfs_files::FileStat::of(&meta);
        if len == 0 || len > max_bytes || d.index.indexes(&full, &stat) {
            return (0, false);
        }
        // A file that changes while read describes no single version: skipped.
        let Ok((recipe, quick)) = pfs_files::chunk_and_digest_open_file(&file, full.as_ref(), params) else {
            return (len, false);
        };
        // Changed while hashed: its chunks are still checked at every use,
        // but its content is not known.
        if file.metadata().ok().map(|m| pfs_files::FileStat::of(&m)) != Some(stat) {
            return (len, false);
        }
        let chunks: Vec<_> = recipe.chunks.iter().map(|c| (c.offset, c.len, c.hash)).collect();
        d.index.publish(&full, &stat, &chunks);
        // Held only if the landing can find that out again when FILE comes.
        let recorded = self.landing.record(rel, &meta, recipe.file_hash, quick);
        (
            len,
            recorded && len == size && quick.get(..key.len()) == Some(key),
        )
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
