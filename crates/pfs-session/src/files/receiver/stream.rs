//! The file stream of the receiver core: FILE entries, CHUNKS bodies
//! checked chunk by chunk and written in place (one `pwritev` per run of
//! contiguous chunks), the end of each file, files the sender drops
//! (FILE_DROP), and the corrections plane (NAKed chunks, REPAIR frames,
//! files waiting for them).

use std::io::IoSlice;

use pfs_files::{FileHasher, FileSpec, Placement, RelPath};
use pfs_store::ChunkLoc;
use pfs_wire::files::{parse_chunks, ChunkData, ChunkEntry, EntryKind, FileDone, FileDrop, FileEntry, Hash};
use pfs_wire::FrameType;

use super::core::{malformed, store_filled, FilesReceiver};
use super::host::{Copied, FilesHost, Lent};
use super::repair::Waiting;
use super::COMMIT_EVERY_CHUNKS;
use crate::error::LocalError;
use crate::files::{hash_matches, FilesViolation, MAX_CHUNK_LEN};
use crate::SessionError;

/// Store space asked for at once when a transfer needs more than planned.
const GROW_STEP: u64 = 64 << 20;

/// Bookkeeping charged per chunk awaiting REPAIR (its hole, with room for
/// the vector's growth).
const HOLE_COST: u64 = 2 * std::mem::size_of::<(u64, Hash, u32)>() as u64;
/// Bookkeeping charged per distinct NAKed hash (the NAK list and its set).
const NAK_COST: u64 = 32 + 64;
/// Bookkeeping charged per file waiting for REPAIR, besides its path.
const WAITING_COST: u64 = std::mem::size_of::<Waiting>() as u64;
/// Bookkeeping charged per directory whose metadata is set at the end,
/// besides its path.
const DIR_META_COST: u64 = std::mem::size_of::<(RelPath, i128, u32)>() as u64;

/// The stream being reassembled: the FILE whose chunks arrive, the number
/// the next FILE must have, the directories whose metadata is set at the
/// end, and the store appends not committed yet.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) current: Option<Current>,
    pub(super) next_no: u64,
    /// Directory entries received: mode and mtime are set at the end, once
    /// nothing more is written into them (writing changes a directory's mtime).
    pub(super) dir_meta: Vec<(RelPath, i128, u32)>,
    /// The top directory's mtime from the sender's FILES_END (`DIR/`),
    /// set after every directory's.
    pub(super) top_mtime: Option<i128>,
    /// Bytes appended to the store since the last commit.
    pub(super) appended: u64,
    /// Store appends (deduplicated or not) since the last commit.
    pub(super) appends: u64,
    /// Commit at least every this many new bytes.
    pub(super) commit_every: u64,
}

impl Stream {
    /// Before the first FILE; commits every `commit_every` new bytes.
    pub(super) fn new(commit_every: u64) -> Self {
        Self {
            current: None,
            next_no: 0,
            dir_meta: Vec::new(),
            top_mtime: None,
            appended: 0,
            appends: 0,
            commit_every,
        }
    }

    /// Whether the appends since the last commit call for one now: every
    /// `commit_every` bytes, and every [`COMMIT_EVERY_CHUNKS`] chunks.
    fn commit_due(&self) -> bool {
        self.appends >= COMMIT_EVERY_CHUNKS || self.appended >= self.commit_every
    }

    /// A commit made the appends durable.
    pub(super) fn committed(&mut self) {
        self.appended = 0;
        self.appends = 0;
    }
}

/// A file being rebuilt: the hashes computed as its chunks arrive.
#[derive(Debug)]
pub(super) struct Rebuild {
    /// The file hash of its chunk list ([`FileHasher`]): every chunk is
    /// checked against its own hash before it is written (or the file
    /// fails, or waits for REPAIR), so the list stands for the content.
    file: FileHasher,
    /// Chunks to fill after REPAIR: (file offset, hash, len).
    holes: Vec<(u64, Hash, u32)>,
    /// XXH3-128 of the content for the manifest, while no chunk is missing.
    quick: Option<Box<QuickHasher>>,
}

/// Streaming XXH3-128 (the hasher itself has no `Debug`).
#[derive(Default)]
struct QuickHasher(twox_hash::XxHash3_128);

impl std::fmt::Debug for QuickHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuickHasher")
    }
}

/// What happens to the current file's chunks.
#[derive(Debug)]
pub(super) enum Target {
    /// Unchanged at the destination: chunks are only checked.
    Unchanged,
    /// Same content at the destination, metadata already set: as `Unchanged`.
    SameContent,
    /// Rebuilt into a temporary file the host keeps under the file's number.
    Rebuild(Box<Rebuild>),
    /// Refused or failed: chunks are drained.
    Failed,
}

/// The FILE whose chunks are arriving.
#[derive(Debug)]
pub(super) struct Current {
    no: u64,
    /// `None` when the sender's path was refused.
    rel: Option<RelPath>,
    size: u64,
    mode: u32,
    mtime_ns: i128,
    file_hash: Hash,
    /// Announced by FILE; for a STREAMED file, the chunks received so far.
    chunk_count: u32,
    chunks_left: u32,
    /// STREAMED and its FILE_DONE not seen yet: the chunk count and
    /// `file_hash` are not known, the file ends by size then FILE_DONE.
    streamed: bool,
    seen: u64,
    target: Target,
}

/// Chunk bytes of one frame waiting to be written with one `pwritev`:
/// they stay where they are (frame body, store mapping), no copy.
struct Pending<'b> {
    slices: Vec<IoSlice<'b>>,
    /// File offset of the first slice.
    at: u64,
    len: u64,
}

impl FilesReceiver {
    /// One FILE, CHUNKS or FILE_DROP frame of the stream (alone or in a BATCH).
    pub(super) fn stream_frame<'s, H: FilesHost<'s>>(
        &mut self,
        ty: FrameType,
        body: &[u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        match ty {
            FrameType::File => {
                self.end_file(host)?;
                self.begin_file(body, host)
            }
            FrameType::Chunks => self.chunks(body, host),
            FrameType::FileDrop => self.drop_file(body, host),
            FrameType::FileDone => self.done_file(body, host),
            other => Err(FilesViolation::NotAllowed {
                frame: other,
                place: "inside a BATCH",
            }
            .into()),
        }
    }

    /// The current file cannot be finished: its temporary file goes, its
    /// remaining chunks are drained.
    fn fail_current<'s, H: FilesHost<'s>>(&mut self, reason: impl std::fmt::Display, host: &mut H) {
        let Some(cur) = self.stream.current.as_mut() else {
            return;
        };
        if matches!(cur.target, Target::Rebuild(_)) {
            host.discard(cur.no);
        }
        cur.target = Target::Failed;
        let rel = cur
            .rel
            .as_ref()
            .map(|r| r.as_bytes().to_vec())
            .unwrap_or_default();
        self.stats.fail(&rel, reason);
    }

    /// FILE_DROP: the sender cannot finish the file streaming. What
    /// arrived of it is discarded and the entry fails with its reason.
    fn drop_file<'s, H: FilesHost<'s>>(&mut self, body: &[u8], host: &mut H) -> Result<(), SessionError> {
        let d = FileDrop::parse(body).map_err(malformed("FILE_DROP"))?;
        let open = self.stream.current.as_ref().map(|c| c.no);
        if open != Some(d.file_no) {
            return Err(FilesViolation::DropNotStreaming { got: d.file_no, open }.into());
        }
        // A file that failed here already is counted once.
        if !self
            .stream
            .current
            .as_ref()
            .is_some_and(|c| matches!(c.target, Target::Failed))
        {
            self.fail_current(format_args!("the sender dropped it: {}", d.reason), host);
        }
        self.stream.current = None;
        Ok(())
    }

    /// FILE_DONE: a STREAMED file's count and hash; it ends here.
    fn done_file<'s, H: FilesHost<'s>>(&mut self, body: &[u8], host: &mut H) -> Result<(), SessionError> {
        let d = FileDone::parse(body).map_err(malformed("FILE_DONE"))?;
        let Some(cur) = self
            .stream
            .current
            .as_mut()
            .filter(|c| c.no == d.file_no && c.streamed)
        else {
            let open = self.stream.current.as_ref().map(|c| c.no);
            return Err(FilesViolation::DoneNotStreaming { got: d.file_no, open }.into());
        };
        if d.chunk_count != cur.chunk_count || cur.seen != cur.size {
            return Err(FilesViolation::DoneMismatch {
                file: cur.no,
                said: d.chunk_count,
                got: cur.chunk_count,
                seen: cur.seen,
                size: cur.size,
            }
            .into());
        }
        cur.file_hash = d.file_hash;
        cur.streamed = false;
        cur.chunks_left = 0;
        self.end_file(host)
    }

    fn begin_file<'s, H: FilesHost<'s>>(&mut self, body: &[u8], host: &mut H) -> Result<(), SessionError> {
        let f = FileEntry::parse(body).map_err(malformed("FILE"))?;
        self.check_entry(&f)?;
        let mtime_ns = i128::from(f.mtime_sec) * 1_000_000_000 + i128::from(f.mtime_nsec);
        let rel = match self.scope.full_path(f.path) {
            Ok(r) => r,
            Err(e) => {
                self.stats.fail(f.path, format_args!("refused: {e}"));
                return self.start(&f, None, mtime_ns, Target::Failed, host);
            }
        };
        self.note_named(&rel, f.kind == EntryKind::Dir);
        if f.extra.listed {
            // A dry run's listing: named for DELETE, nothing written.
            return Ok(());
        }
        if let Err(e) = host.make_parent(&rel) {
            self.stats.fail(f.path, e);
            return self.start(&f, Some(rel), mtime_ns, Target::Failed, host);
        }
        if f.extra.linked {
            return self.link_later(&f, rel);
        }
        match f.kind {
            EntryKind::Dir => self.make_dir(&f, rel, mtime_ns, host),
            EntryKind::Symlink => {
                self.make_symlink(&f, &rel, mtime_ns, host);
                Ok(())
            }
            EntryKind::File => {
                let target = self.open_file(&f, &rel, mtime_ns, host);
                match target {
                    Target::Unchanged | Target::SameContent => self.apply_attrs(&f, &rel, host),
                    Target::Rebuild(_) => self.stash_attrs(&f)?,
                    Target::Failed => {}
                }
                self.start(&f, Some(rel), mtime_ns, target, host)
            }
        }
    }

    /// A FILE's place in the stream: listed as the session is (a dry run
    /// or not), numbered in order, no more chunks than bytes.
    fn check_entry(&mut self, f: &FileEntry<'_>) -> Result<(), FilesViolation> {
        if f.extra.listed != self.scope.dry_run {
            return Err(FilesViolation::Listing {
                file: f.file_no,
                dry_run: self.scope.dry_run,
            });
        }
        if f.file_no != self.stream.next_no {
            return Err(FilesViolation::FileOrder {
                got: f.file_no,
                expected: self.stream.next_no,
            });
        }
        self.stream.next_no += 1;
        if u64::from(f.chunk_count) > f.size {
            return Err(FilesViolation::ChunkCount {
                file: f.file_no,
                chunks: f.chunk_count,
                size: f.size,
            });
        }
        Ok(())
    }

    /// A directory entry: made now, its mode and mtime set at the end.
    fn make_dir<'s, H: FilesHost<'s>>(
        &mut self,
        f: &FileEntry<'_>,
        rel: RelPath,
        mtime_ns: i128,
        host: &mut H,
    ) -> Result<(), SessionError> {
        match host.make_dir(&rel, f.mode) {
            Ok(()) => {
                self.apply_attrs(f, &rel, host);
                self.stats.report.dirs += 1;
                self.budget.charge(DIR_META_COST + rel.as_bytes().len() as u64)?;
                self.stream.dir_meta.push((rel, mtime_ns, f.mode));
            }
            Err(e) => self.stats.fail(f.path, e),
        }
        Ok(())
    }

    /// A symlink entry: made now (or kept, the same link being there), with
    /// its mtime and attributes.
    fn make_symlink<'s, H: FilesHost<'s>>(
        &mut self,
        f: &FileEntry<'_>,
        rel: &RelPath,
        mtime_ns: i128,
        host: &mut H,
    ) {
        match host.make_symlink(rel, f.link_target, mtime_ns) {
            Ok(_) => {
                self.stats.report.symlinks += 1;
                self.apply_attrs(f, rel, host);
            }
            Err(e) => self.stats.fail(f.path, e),
        }
    }

    /// A regular file: what the host does with it decides what its chunks do.
    fn open_file<'s, H: FilesHost<'s>>(
        &mut self,
        f: &FileEntry<'_>,
        rel: &RelPath,
        mtime_ns: i128,
        host: &mut H,
    ) -> Target {
        let spec = FileSpec {
            rel,
            size: f.size,
            mtime_ns,
            mode: f.mode,
            file_hash: f.file_hash,
            held: f.held,
        };
        match host.open_file(f.file_no, &spec) {
            Ok(Placement::Unchanged) => Target::Unchanged,
            Ok(Placement::SameContent) => Target::SameContent,
            Ok(Placement::Rebuild) => Target::Rebuild(Box::new(Rebuild {
                file: FileHasher::new(),
                holes: Vec::new(),
                quick: host.wants_quick().then(Box::default),
            })),
            Err(e) => {
                self.stats.fail(f.path, e);
                Target::Failed
            }
        }
    }

    fn start<'s, H: FilesHost<'s>>(
        &mut self,
        f: &FileEntry<'_>,
        rel: Option<RelPath>,
        mtime_ns: i128,
        target: Target,
        host: &mut H,
    ) -> Result<(), SessionError> {
        if f.kind != EntryKind::File {
            return Ok(());
        }
        self.stream.current = Some(Current {
            no: f.file_no,
            rel,
            size: f.size,
            mode: f.mode,
            mtime_ns,
            file_hash: f.file_hash,
            chunk_count: f.chunk_count,
            chunks_left: f.chunk_count,
            streamed: f.extra.streamed,
            // A held file has no CHUNKS: nothing more to see.
            seen: if f.held { f.size } else { 0 },
            target,
        });
        if f.chunk_count == 0 && !f.extra.streamed {
            self.end_file(host)?;
        }
        Ok(())
    }

    fn chunks<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        body: &'b [u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        let (head, entries) = parse_chunks(body).map_err(malformed("CHUNKS"))?;
        let Some(no) = self.stream.current.as_ref().map(|c| c.no) else {
            return Err(FilesViolation::ChunksWithoutFile.into());
        };
        if head.file_no != no {
            return Err(FilesViolation::ChunksForOtherFile {
                got: head.file_no,
                open: no,
            }
            .into());
        }
        let mut pending = Pending {
            slices: Vec::new(),
            at: 0,
            len: 0,
        };
        let mut result = Ok(());
        for e in entries {
            result = e
                .map_err(malformed("CHUNKS entry"))
                .and_then(|e| self.chunk(&e, &mut pending, host));
            if result.is_err() {
                break;
            }
        }
        self.flush(&mut pending, host);
        result?;
        if self
            .stream
            .current
            .as_ref()
            .is_some_and(|c| c.chunks_left == 0 && !c.streamed)
        {
            self.end_file(host)?;
        }
        Ok(())
    }

    fn chunk<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<(), SessionError> {
        let (at, rebuilding) = self.take_chunk(e)?;
        let by_hash = matches!(e.data, ChunkData::Ref { .. } | ChunkData::Known);
        if rebuilding && by_hash && self.scope.sparse && self.scope.zeros.is_zero(e.hash, e.len) {
            if let ChunkData::Ref { offset } = e.data {
                let loc = ChunkLoc { offset, len: e.len };
                if matches!(host.stored(loc), Lent::Outside) {
                    return Err(FilesViolation::OutsideStore { offset, len: e.len }.into());
                }
            }
            self.zero_run(e.len, pending, host);
            return Ok(());
        }
        match e.data {
            ChunkData::Literal(_) | ChunkData::Zstd(_) => {
                if !self.literal(e, at, pending, host)? && rebuilding {
                    self.flush(pending, host);
                    self.fail_current("a literal chunk does not match its hash (the file changed at the sender while read, or a sender bug)", host);
                }
                Ok(())
            }
            ChunkData::Ref { offset } => self.ref_chunk(e, offset, at, rebuilding, pending, host),
            ChunkData::Known if rebuilding => self.known_chunk(e, at, pending, host),
            ChunkData::Known => Ok(()),
        }
    }

    /// Counts chunk `e` into the current file (within its announced count
    /// and size, and the frame's work); returns its offset in the file and
    /// whether the file is rebuilt (its file hash then takes the chunk).
    fn take_chunk(&mut self, e: &ChunkEntry<'_>) -> Result<(u64, bool), SessionError> {
        if e.len == 0 || e.len > MAX_CHUNK_LEN {
            return Err(FilesViolation::ChunkLength { len: e.len }.into());
        }
        // Every chunk may be hashed (and decompressed): its length is the
        // work it costs, whatever few bytes it took on the wire.
        self.budget.work(u64::from(e.len))?;
        let cur = self
            .stream
            .current
            .as_mut()
            .ok_or(FilesViolation::ChunksWithoutFile)?;
        let no_room = match cur.streamed {
            true => cur.chunk_count == u32::MAX,
            false => cur.chunks_left == 0,
        };
        if no_room || cur.seen + u64::from(e.len) > cur.size {
            return Err(FilesViolation::FileOverflow { file: cur.no }.into());
        }
        match cur.streamed {
            true => cur.chunk_count += 1,
            false => cur.chunks_left -= 1,
        }
        let at = cur.seen;
        cur.seen += u64::from(e.len);
        let rebuilding = match &mut cur.target {
            Target::Rebuild(rb) => {
                rb.file.add(e.len, e.hash);
                true
            }
            _ => false,
        };
        Ok((at, rebuilding))
    }

    /// A REF chunk: the store bytes at `offset`, checked, queued at `at`
    /// (or a hole to NAK). Outside the store it is the peer's error.
    fn ref_chunk<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        offset: u64,
        at: u64,
        rebuilding: bool,
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<(), SessionError> {
        let loc = ChunkLoc { offset, len: e.len };
        match host.stored(loc) {
            Lent::Outside => return Err(FilesViolation::OutsideStore { offset, len: e.len }.into()),
            _ if !rebuilding => {}
            Lent::Bytes(bytes) if hash_matches(bytes, e.hash) => {
                self.stats.report.matched_bytes += u64::from(e.len);
                self.put(pending, at, bytes, host);
            }
            Lent::Bytes(_) => self.hole(pending, at, e.hash, e.len, host)?,
            Lent::InFile => {
                self.flush(pending, host);
                if !self.copy(e, at, loc, host) {
                    self.hole(pending, at, e.hash, e.len, host)?;
                }
            }
        }
        Ok(())
    }

    /// A KNOWN chunk of a file being rebuilt: found by its hash in the
    /// index (committed, or appended by this session), checked, placed at
    /// `at`; a hole to NAK if it is not there.
    fn known_chunk<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<(), SessionError> {
        if let Some(loc) = host.lookup(e.hash).filter(|l| l.len == e.len) {
            match host.stored(loc) {
                Lent::Bytes(b) if hash_matches(b, e.hash) => {
                    self.stats.report.matched_bytes += u64::from(e.len);
                    self.put(pending, at, b, host);
                    return Ok(());
                }
                Lent::InFile => {
                    self.flush(pending, host);
                    if self.copy(e, at, loc, host) {
                        return Ok(());
                    }
                }
                Lent::Bytes(_) | Lent::Outside => {}
            }
        }
        // Appended by this session, not committed yet: its bytes live in
        // the reservation, which may change before the pending write;
        // write them now.
        self.flush(pending, host);
        self.place_appended(e, at, pending, host)
    }

    /// A chunk the host holds in a file: copied by the host, which checks
    /// it. False if it was not there (a hole).
    fn copy<'s, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'_>,
        at: u64,
        loc: ChunkLoc,
        host: &mut H,
    ) -> bool {
        let Some(Current {
            no,
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        else {
            return true;
        };
        let mut seen = |b: &[u8]| {
            if let Some(q) = rb.quick.as_mut() {
                q.0.write(b);
            }
        };
        match host.copy_chunk(*no, at, loc, e.hash, &mut seen) {
            Copied::Placed => {
                self.stats.report.matched_bytes += u64::from(e.len);
                true
            }
            Copied::Absent => false,
            Copied::Failed(err) => {
                self.fail_current(err, host);
                true
            }
        }
    }

    /// A Known chunk this session appended: hashed and written by the host
    /// straight from the reservation.
    fn place_appended<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<(), SessionError> {
        let Some(Current {
            no,
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        else {
            return Ok(());
        };
        let mut seen = |b: &[u8]| {
            if let Some(q) = rb.quick.as_mut() {
                q.0.write(b);
            }
        };
        match host.place_appended(*no, at, e.hash, e.len, &mut seen) {
            Some(Ok(())) => {
                self.stats.report.matched_bytes += u64::from(e.len);
            }
            Some(Err(err)) => self.fail_current(err, host),
            None => self.hole(pending, at, e.hash, e.len, host)?,
        }
        Ok(())
    }

    /// A literal entry: decompress, check against its hash, append to the
    /// store, and queue it at `at` if the file is rebuilt. Returns false if
    /// the bytes do not match their hash.
    fn literal<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<bool, SessionError> {
        let compressed = match e.data {
            ChunkData::Literal(b) if b.len() == e.len as usize => None,
            ChunkData::Zstd(c) => Some(c),
            _ => return Err(FilesViolation::LiteralLength.into()),
        };
        let mut zbuf = std::mem::take(&mut self.inflate.zbuf);
        if let Some(c) = compressed {
            if !self.inflate.exact(c, &mut zbuf, e.len as usize) {
                self.inflate.zbuf = zbuf;
                return Err(FilesViolation::ChunkZstd.into());
            }
        }
        let result = self.take_literal(e, at, compressed, &zbuf, pending, host);
        self.inflate.zbuf = zbuf;
        result
    }

    fn take_literal<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        compressed: Option<&[u8]>,
        zbuf: &[u8],
        pending: &mut Pending<'b>,
        host: &mut H,
    ) -> Result<bool, SessionError> {
        let bytes: &[u8] = match (compressed, e.data) {
            (None, ChunkData::Literal(b)) => b,
            _ => zbuf,
        };
        self.stats.report.literal_bytes += u64::from(e.len);
        self.stats.report.literal_wire_bytes += compressed.map_or(u64::from(e.len), |c| c.len() as u64);
        if !hash_matches(bytes, e.hash) {
            return Ok(false);
        }
        let len = u64::from(e.len);
        if host.reserved_left() < len {
            // More new bytes than planned (another session filled the store
            // between plan and now, or a stale plan): commit and grow.
            self.commit(host)?;
            host.reserve(len.max(GROW_STEP))
                .or_else(|_| host.reserve(len))
                .map_err(store_filled)?;
        }
        let place = match self.stream.current.as_ref() {
            Some(Current {
                no,
                target: Target::Rebuild(_),
                ..
            }) => Some((*no, at)),
            _ => None,
        };
        host.append(place, e.hash, bytes).map_err(LocalError::Store)?;
        self.stream.appended += len;
        self.stream.appends += 1;
        match (compressed, e.data) {
            // Frame bytes outlive the pending write: queue them in place.
            (None, ChunkData::Literal(b)) => self.put(pending, at, b, host),
            // Decompressed bytes are overwritten by the next chunk: write now.
            _ => {
                self.flush(pending, host);
                self.put_now(at, bytes, host);
            }
        }
        if self.stream.commit_due() {
            // What a commit names must be written first (a checkpoint of
            // the file being received points into it).
            self.flush(pending, host);
            // Each append is remembered until its commit: commit often
            // enough that tiny chunks cannot grow that without bound.
            // (Pending writes hold frame or committed bytes, not these.)
            self.commit(host)?;
        }
        Ok(true)
    }

    /// Makes appended chunks durable and visible.
    pub(super) fn commit<'s, H: FilesHost<'s>>(&mut self, host: &mut H) -> Result<(), SessionError> {
        self.stats.report.store_appended += host.commit().map_err(LocalError::Store)?;
        self.stream.committed();
        Ok(())
    }

    /// Queues `bytes` at `at` of the file being rebuilt (and digests them).
    fn put<'b, 's: 'b, H: FilesHost<'s>>(
        &mut self,
        pending: &mut Pending<'b>,
        at: u64,
        bytes: &'b [u8],
        host: &mut H,
    ) {
        let Some(Current {
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        else {
            return;
        };
        if let Some(q) = rb.quick.as_mut() {
            q.0.write(bytes);
        }
        if pending.len > 0 && pending.at + pending.len != at {
            self.flush(pending, host);
        }
        if pending.len == 0 {
            pending.at = at;
        }
        pending.slices.push(IoSlice::new(bytes));
        pending.len += bytes.len() as u64;
        if pending.slices.len() >= pfs_transport::IOV_MAX {
            self.flush(pending, host);
        }
    }

    /// Writes `bytes` at `at` at once (bytes that will not stay put).
    fn put_now<'s, H: FilesHost<'s>>(&mut self, at: u64, bytes: &[u8], host: &mut H) {
        let Some(Current {
            no,
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        else {
            return;
        };
        if let Some(q) = rb.quick.as_mut() {
            q.0.write(bytes);
        }
        if let Err(e) = host.write(*no, at, &mut [IoSlice::new(bytes)]) {
            self.fail_current(e, host);
        }
    }

    /// A chunk of `len` zero bytes (its hash says so) in a sparse file:
    /// neither read nor written, a hole (the file gets its length when it
    /// is finished); only the XXH3-128 of the content takes its zeros.
    fn zero_run<'s, H: FilesHost<'s>>(&mut self, len: u32, pending: &mut Pending<'_>, host: &mut H) {
        self.flush(pending, host);
        let Some(Current {
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        else {
            return;
        };
        if let Some(q) = rb.quick.as_mut() {
            static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
            let mut left = len as usize;
            while left > 0 {
                let n = left.min(ZEROS.len());
                q.0.write(&ZEROS[..n]);
                left -= n;
            }
        }
        self.stats.report.matched_bytes += u64::from(len);
    }

    /// Writes the pending bytes; a failed write fails the file.
    fn flush<'s, H: FilesHost<'s>>(&mut self, pending: &mut Pending<'_>, host: &mut H) {
        if pending.len == 0 {
            return;
        }
        let result = match self.stream.current.as_ref() {
            Some(Current {
                no,
                target: Target::Rebuild(_),
                ..
            }) => host.write(*no, pending.at, &mut pending.slices),
            _ => Ok(()),
        };
        pending.slices.clear();
        pending.len = 0;
        if let Err(e) = result {
            self.fail_current(e, host);
        }
    }

    /// A chunk whose bytes are not (correctly) here: NAK it after the
    /// stream. Its bytes count against the session's unverified budget
    /// (hashing them was work for nothing), its bookkeeping against the
    /// memory budget.
    fn hole<'s, H: FilesHost<'s>>(
        &mut self,
        pending: &mut Pending<'_>,
        at: u64,
        hash: &Hash,
        len: u32,
        host: &mut H,
    ) -> Result<(), SessionError> {
        self.budget.unverified(len)?;
        let fresh = !self.repairs.is_naked(hash);
        self.budget.charge(HOLE_COST + if fresh { NAK_COST } else { 0 })?;
        self.flush(pending, host);
        if let Some(Current {
            target: Target::Rebuild(rb),
            ..
        }) = self.stream.current.as_mut()
        {
            rb.quick = None;
            rb.holes.push((at, *hash, len));
        }
        if self.repairs.nak(hash) {
            self.stats.report.nak_chunks += 1;
        }
        Ok(())
    }

    pub(super) fn end_file<'s, H: FilesHost<'s>>(&mut self, host: &mut H) -> Result<(), SessionError> {
        let Some(cur) = self.stream.current.take() else {
            return Ok(());
        };
        if cur.streamed {
            return Err(FilesViolation::DoneMissing { file: cur.no }.into());
        }
        if cur.chunks_left != 0 || cur.seen != cur.size {
            return Err(FilesViolation::FileShort {
                file: cur.no,
                seen: cur.seen,
                size: cur.size,
                missing: cur.chunks_left,
            }
            .into());
        }
        match (cur.target, cur.rel) {
            (Target::Unchanged, _) => {
                self.stats.report.files_unchanged += 1;
                self.stats.report.effective_bytes += cur.size;
            }
            (Target::SameContent, _) => {
                self.stats.report.files_metadata_only += 1;
                self.stats.report.effective_bytes += cur.size;
            }
            (Target::Rebuild(rb), Some(rel)) if !rb.holes.is_empty() => {
                self.budget.charge(WAITING_COST + rel.as_bytes().len() as u64)?;
                // It waits for REPAIR with no descriptor open.
                host.park(cur.no);
                self.repairs.waiting.push(Waiting {
                    no: cur.no,
                    rel,
                    size: cur.size,
                    mode: cur.mode,
                    mtime_ns: cur.mtime_ns,
                    file_hash: cur.file_hash,
                    digest: rb.file.finish(),
                    missing: rb.holes.len(),
                    holes: rb.holes,
                    broken: None,
                });
            }
            (Target::Rebuild(rb), Some(rel)) => {
                let digest = rb.file.finish();
                let quick = rb.quick.map(|q| q.0.finish_128().to_le_bytes());
                let spec = FileSpec {
                    rel: &rel,
                    size: cur.size,
                    mtime_ns: cur.mtime_ns,
                    mode: cur.mode,
                    file_hash: cur.file_hash,
                    held: false,
                };
                self.land(cur.no, &spec, digest, quick, host);
            }
            (Target::Failed | Target::Rebuild(_), _) => {}
        }
        if self.stream.appended >= self.stream.commit_every {
            self.commit(host)?;
        }
        Ok(())
    }

    /// Finishes a rebuilt file through the host; a failure fails the entry.
    pub(super) fn land<'s, H: FilesHost<'s>>(
        &mut self,
        no: u64,
        f: &FileSpec<'_>,
        digest: Hash,
        quick: Option<pfs_files::QuickDigest>,
        host: &mut H,
    ) {
        match host.finish_file(no, f, digest, quick) {
            Ok(()) => {
                self.stats.report.files_written += 1;
                self.stats.report.effective_bytes += f.size;
                self.landed_attrs(no, f.rel, true, host);
            }
            Err(e) => {
                host.discard(no);
                self.stats.fail(f.rel.as_bytes(), e);
                self.landed_attrs(no, f.rel, false, host);
            }
        }
    }
}
