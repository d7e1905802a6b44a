//! The receiving side of a files session: answer with the store's identity
//! and index delta, reserve store space for the plan (or refuse before any
//! destination file is touched), rebuild each file from store chunks and
//! literals under a temporary name, verify, rename into place; NAK damaged
//! chunks after the stream and apply the sender's REPAIRs; report.
//!
//! Everything the peer sends is checked before use: frames by the wire
//! crate, paths by [`RelPath`] and [`DestRoot`] (never outside the
//! destination, never through a symlink), store offsets against the store,
//! every chunk against its BLAKE3, every file against its whole-file hash.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use pfs_files::{DestRoot, Manifest, QuickDigest, RelPath, TempFile, Written};
use pfs_store::{ChunkLoc, Reservation, Store, StoreError};
use pfs_transport::Transport;
use pfs_wire::files::{
    parse_batch, parse_chunks, parse_index_request, parse_probe, ChunkData, ChunkEntry, EntryKind, FileEntry,
    FilesAccept, FilesHello, FilesReport, Hash, IndexEntry, Plan, PlanAck, ProbeEntry, ProbeHead,
    FLAG_FILES_REPORT, FLAG_LAST, HELLO_DRY_RUN, MAX_REPORT_TEXT, PROBE_HEAD_LEN,
};
use pfs_wire::{ErrorCode, Frame, FrameHeader, FrameType};

use super::{
    hash_matches, local, refused, reject, send_error, write_frame, INDEX_ENTRIES_PER_FRAME, MAX_CHUNK_LEN,
};
use crate::reader::FrameReader;
use crate::sys::thread_usage;
use crate::SessionError;

/// Most PROBE entries one session may ask about (the answers are kept
/// until the last PROBE: one byte each).
const MAX_PROBE_ENTRIES: usize = 16 << 20;

/// Receiver settings of files sessions.
#[derive(Debug, Clone)]
pub struct FilesReceiverConfig {
    /// Longest wait for FILES_HELLO, INDEX_REQUEST and PLAN.
    pub handshake_timeout: Duration,
    /// Longest silence tolerated while files stream.
    pub idle_timeout: Duration,
    /// Largest CHUNKS/REPAIR body accepted.
    pub max_chunks_body: u32,
    /// Commit (make durable and indexed) appended chunks at least every
    /// this many bytes, so an interrupted transfer keeps what arrived.
    pub commit_every: u64,
    /// fsync each file before renaming it into place.
    pub fsync_files: bool,
    /// Record of the files written into this destination: a file offered
    /// again with the content it already has only gets its metadata set.
    pub manifest: Option<std::sync::Arc<Manifest>>,
}

impl Default for FilesReceiverConfig {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_chunks_body: super::DEFAULT_MAX_CHUNKS_BODY,
            commit_every: 256 << 20,
            fsync_files: false,
            manifest: None,
        }
    }
}

/// A finished files session, from the receiver's side.
#[derive(Debug, Clone)]
pub struct FilesReceiveOutcome {
    /// The report sent to the sender (its `messages` are in `messages`).
    pub report: FilesReport<'static>,
    /// One `path: reason` line per failed entry.
    pub messages: String,
    /// The sender only planned (`--dry-run`); nothing was written.
    pub dry_run: bool,
    /// Remote directory the sender asked for (lossy UTF-8).
    pub remote_dir: String,
}

/// A file being rebuilt.
#[derive(Debug)]
struct Rebuild {
    temp: TempFile,
    /// Whole-file hash, while no chunk is missing (files of two or more chunks).
    hasher: Option<blake3::Hasher>,
    /// A one-chunk file's content hash, once its chunk was verified: the
    /// chunk's BLAKE3 *is* the whole-file BLAKE3, no second pass needed.
    single: Option<Hash>,
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

/// Chunk bytes of one frame waiting to be written with one `pwritev`:
/// they stay where they are (frame body, store mapping), no copy.
struct Pending<'b> {
    slices: Vec<std::io::IoSlice<'b>>,
    /// File offset of the first slice.
    at: u64,
    len: u64,
}

impl Pending<'_> {
    fn new() -> Self {
        Self {
            slices: Vec::new(),
            at: 0,
            len: 0,
        }
    }
}

/// What happens to the current file's chunks.
#[derive(Debug)]
enum Target {
    /// Unchanged at the destination (same size and mtime): chunks are only
    /// checked and stored.
    Unchanged,
    /// Same content at the destination (manifest), metadata already set:
    /// chunks as for `Unchanged`.
    SameContent,
    /// Rebuilt into a temporary file.
    Rebuild(Box<Rebuild>),
    /// Refused or failed: chunks are drained.
    Failed,
}

/// The FILE whose chunks are arriving.
#[derive(Debug)]
struct Current {
    no: u64,
    rel: RelPath,
    size: u64,
    mode: u32,
    mtime_ns: i128,
    file_hash: Hash,
    chunk_count: u32,
    chunks_left: u32,
    seen: u64,
    target: Target,
}

/// A file waiting for REPAIRs.
#[derive(Debug)]
struct Waiting {
    rel: RelPath,
    size: u64,
    mode: u32,
    mtime_ns: i128,
    file_hash: Hash,
    temp: TempFile,
    holes: Vec<(u64, Hash, u32)>,
    /// Why it cannot be finished, if it cannot.
    broken: Option<String>,
}

const WRITE_BUF: usize = 1 << 20;

/// Raw bytes of INDEX frames per BATCH: well inside a sender's receive buffer.
const INDEX_BATCH_RAW: usize = 256 << 10;

struct Session<'a, T: Transport + ?Sized> {
    t: &'a mut T,
    reader: FrameReader,
    store: &'a Store,
    dest: &'a DestRoot,
    cfg: &'a FilesReceiverConfig,
    base: Option<RelPath>,
    res: Option<Reservation<'a>>,
    /// Bytes of the reservation still unused after the last commit.
    committed_mark: u64,
    current: Option<Current>,
    next_no: u64,
    waiting: Vec<Waiting>,
    /// Hashes to NAK, once each.
    nak: Vec<Hash>,
    nak_seen: HashMap<Hash, ()>,
    report: FilesReport<'static>,
    messages: String,
    zbuf: Vec<u8>,
    /// One decompression context per session (a context per chunk costs
    /// more than decompressing a small chunk).
    dctx: zstd::bulk::Decompressor<'static>,
    /// Decompressed BATCH frames.
    batch_buf: Vec<u8>,
    /// Answers to the PROBE entries so far.
    probe_held: Vec<bool>,
    /// The PROBE flagged LAST arrived.
    probe_last: bool,
    /// Open directory of the last path probed or set by name.
    dir_cache: pfs_files::StatCache,
    /// Directories known to exist (created or checked this session).
    dirs_made: std::collections::HashSet<Vec<u8>>,
    /// Directory entries received: mode and mtime are set at the end, once
    /// nothing more is written into them (writing changes a directory's mtime).
    dir_meta: Vec<(RelPath, i128, u32)>,
    started: Instant,
    usage0: crate::sys::Usage,
}

/// Runs one files session on an accepted connection over `store` into
/// `dest`. A protocol violation sends ERROR and returns the error; entries
/// that cannot be written (refused path, disk full) fail individually and
/// are listed in the report. Chunks that arrived before the session ended,
/// however it ended, are committed to the store.
pub fn receive_files<T: Transport + ?Sized>(
    t: &mut T,
    store: &Store,
    dest: &DestRoot,
    cfg: &FilesReceiverConfig,
) -> Result<FilesReceiveOutcome, SessionError> {
    let mut s = Session {
        t,
        reader: FrameReader::new(cfg.max_chunks_body as usize + pfs_wire::FRAME_HEADER_LEN + 4096),
        store,
        dest,
        cfg,
        base: None,
        res: None,
        committed_mark: 0,
        current: None,
        next_no: 0,
        waiting: Vec::new(),
        nak: Vec::new(),
        nak_seen: HashMap::new(),
        report: FilesReport::default(),
        messages: String::new(),
        zbuf: Vec::new(),
        dctx: zstd::bulk::Decompressor::new().map_err(|e| local(format!("zstd: {e}")))?,
        batch_buf: Vec::new(),
        probe_held: Vec::new(),
        probe_last: false,
        dir_cache: pfs_files::StatCache::default(),
        dirs_made: std::collections::HashSet::new(),
        dir_meta: Vec::new(),
        started: Instant::now(),
        usage0: thread_usage(),
    };
    let result = s.run();
    // Whatever happened, keep the verified chunks that arrived.
    let salvage = s.commit();
    match result {
        Ok(out) => {
            salvage?;
            Ok(out)
        }
        Err(e) => {
            match &e {
                SessionError::PeerClosed { .. }
                | SessionError::Refused { .. }
                | SessionError::Transport { .. } => {}
                _ => send_error(s.t, &e),
            }
            Err(e)
        }
    }
}

fn wire(context: &'static str) -> impl FnOnce(pfs_wire::WireError) -> SessionError {
    move |error| SessionError::Malformed { context, error }
}

fn store_err(e: StoreError) -> SessionError {
    reject(ErrorCode::Internal, format!("store: {e}"))
}

impl<'a, T: Transport + ?Sized> Session<'a, T> {
    fn next(&mut self, during: &'static str) -> Result<Option<FrameHeader>, SessionError> {
        let hdr = self.reader.next_header(self.t)?;
        if let Some(h) = hdr {
            if h.frame_type == FrameType::Error {
                let body = self.reader.take(self.t, h.length as usize, during)?;
                return Err(refused(body));
            }
            let limit = if h.frame_type.is_bulk() {
                self.cfg.max_chunks_body
            } else {
                pfs_wire::frame::MAX_CONTROL_BODY
            };
            if h.length > limit {
                return Err(reject(
                    ErrorCode::Limit,
                    format!(
                        "{} frame of {} bytes exceeds this receiver's limit of {limit}",
                        h.frame_type.name(),
                        h.length
                    ),
                ));
            }
        }
        Ok(hdr)
    }

    fn expect(&mut self, want: FrameType, during: &'static str) -> Result<Option<Vec<u8>>, SessionError> {
        let Some(h) = self.next(during)? else {
            return Ok(None);
        };
        if h.frame_type != want {
            let hint = if h.frame_type == FrameType::Hello {
                " (this receiver serves file transfers: `pfs send PATH… --to`; blob sessions need a `pfs serve` without --store)"
            } else {
                ""
            };
            return Err(reject(
                ErrorCode::Protocol,
                format!("expected {}, got {}{hint}", want.name(), h.frame_type.name()),
            ));
        }
        Ok(Some(
            self.reader.take(self.t, h.length as usize, during)?.to_vec(),
        ))
    }

    fn run(&mut self) -> Result<FilesReceiveOutcome, SessionError> {
        self.t
            .set_read_timeout(Some(self.cfg.handshake_timeout))
            .map_err(|e| SessionError::transport("setup", e))?;
        let body = self
            .expect(FrameType::FilesHello, "FILES_HELLO")?
            .ok_or(SessionError::PeerClosed {
                during: "FILES_HELLO",
            })?;
        let hello = FilesHello::parse(&body).map_err(wire("FILES_HELLO"))?;
        if hello.auth_method != 0 || !hello.auth.is_empty() {
            return Err(reject(
                ErrorCode::Auth,
                format!(
                    "authentication method {} is not supported by this receiver (it accepts: none)",
                    hello.auth_method
                ),
            ));
        }
        let remote_dir = String::from_utf8_lossy(hello.remote_dir).into_owned();
        if !hello.remote_dir.is_empty() {
            let dir = RelPath::parse(hello.remote_dir).map_err(|e| {
                reject(
                    ErrorCode::Protocol,
                    format!("remote directory {remote_dir:?} refused: {e}"),
                )
            })?;
            self.base = Some(dir);
        }
        let dry_run = hello.flags & HELLO_DRY_RUN != 0;
        let ident = self.store.identity();
        let stats = self.store.stats();
        let accept = FilesAccept {
            store_id: ident.id,
            generation: ident.generation,
            capacity: stats.capacity,
            free: stats.capacity.saturating_sub(stats.used),
            max_chunks_body: self.cfg.max_chunks_body,
            auth_method: 0,
        };
        write_frame(self.t, FrameType::FilesAccept, 0, &accept.emit(), "FILES_ACCEPT")?;

        // An optional PROBE phase (alone or in BATCH frames), then INDEX_REQUEST.
        let mut probe_done = false;
        let body = loop {
            let Some(h) = self.next("INDEX_REQUEST")? else {
                return Ok(self.outcome(true, remote_dir));
            };
            match h.frame_type {
                FrameType::Probe | FrameType::Batch if !probe_done => {
                    self.frames_in_place(h, |s, fh, b| match fh.frame_type {
                        FrameType::Probe => s.probe_frame(fh.flags, b),
                        other => Err(reject(
                            ErrorCode::Protocol,
                            format!("{} is not allowed in a BATCH of PROBE frames", other.name()),
                        )),
                    })?;
                    if self.probe_last {
                        self.probe_reply()?;
                        probe_done = true;
                    }
                }
                FrameType::IndexRequest => {
                    break self
                        .reader
                        .take(self.t, h.length as usize, "INDEX_REQUEST")?
                        .to_vec();
                }
                other => {
                    return Err(reject(
                        ErrorCode::Protocol,
                        format!("expected INDEX_REQUEST, got {}", other.name()),
                    ))
                }
            }
        };
        let from = parse_index_request(&body).map_err(wire("INDEX_REQUEST"))?;
        self.send_index(from)?;

        let Some(body) = self.expect(FrameType::Plan, "PLAN")? else {
            // A dry run (or a sender that stopped after the index).
            return Ok(self.outcome(true, remote_dir));
        };
        if dry_run {
            return Err(reject(ErrorCode::Protocol, "PLAN in a dry-run session".into()));
        }
        let plan = Plan::parse(&body).map_err(wire("PLAN"))?;
        self.reserve(&plan)?;

        self.t
            .set_read_timeout(Some(self.cfg.idle_timeout))
            .map_err(|e| SessionError::transport("setup", e))?;
        loop {
            let h = self.next("FILE/CHUNKS")?.ok_or(SessionError::PeerClosed {
                during: "file stream",
            })?;
            match h.frame_type {
                FrameType::File | FrameType::Chunks | FrameType::Batch => {
                    self.frames_in_place(h, |s, fh, b| s.stream_frame(fh.frame_type, b))?;
                }
                FrameType::FilesEnd if h.flags == 0 && h.length == 0 => break,
                other => {
                    return Err(reject(
                        ErrorCode::Protocol,
                        format!("{} is not allowed while files stream", other.name()),
                    ))
                }
            }
        }
        self.end_file()?;
        self.commit()?;
        if !self.nak.is_empty() {
            self.corrections()?;
        }
        self.finish_waiting();
        // Deepest first, so setting a child does not disturb its parent's mtime.
        for (rel, mtime_ns, mode) in std::mem::take(&mut self.dir_meta).into_iter().rev() {
            if let Err(e) = self.dest.set_dir_times_and_mode(&rel, mtime_ns, mode) {
                self.messages
                    .push_str(&format!("{rel}: directory mode/mtime: {e}\n"));
            }
        }
        self.report.wire_bytes = self.reader.wire_bytes();
        self.report.store_generation = self.store.identity().generation;
        self.report.elapsed_ns = self.started.elapsed().as_nanos() as u64;
        let u = thread_usage().since(&self.usage0);
        self.report.user_us = u.user_us;
        self.report.sys_us = u.sys_us;
        let mut body = Vec::with_capacity(256 + self.messages.len());
        FilesReport {
            messages: &self.messages,
            ..self.report
        }
        .emit(&mut body);
        write_frame(self.t, FrameType::FilesEnd, FLAG_FILES_REPORT, &body, "FILES_END")?;
        Ok(self.outcome(false, remote_dir))
    }

    /// One FILE or CHUNKS frame of the stream (arrived alone or in a BATCH).
    fn stream_frame(&mut self, ty: FrameType, body: &[u8]) -> Result<(), SessionError> {
        match ty {
            FrameType::File => {
                self.end_file()?;
                self.begin_file(body)
            }
            FrameType::Chunks => self.chunks(body),
            other => Err(reject(
                ErrorCode::Protocol,
                format!("{} is not allowed inside a BATCH", other.name()),
            )),
        }
    }

    /// The manifest record, if the destination file (`meta`) is the one this
    /// receiver wrote with content `hash` and nothing touched since (see
    /// [`Manifest`]).
    fn holds_content(&self, rel: &RelPath, meta: &std::fs::Metadata, hash: &Hash) -> Option<Written> {
        let w = self.cfg.manifest.as_ref()?.get(rel.as_bytes())?;
        (&w.hash == hash && w.still(meta)).then_some(w)
    }

    /// The body of the frame `h` is processed where it was received, no copy
    /// (the reader is lent out of `self` meanwhile): a BATCH's frames one by
    /// one, any other frame whole, each given to `each`.
    fn frames_in_place(
        &mut self,
        h: FrameHeader,
        mut each: impl FnMut(&mut Self, FrameHeader, &[u8]) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        let mut reader = std::mem::replace(&mut self.reader, FrameReader::empty());
        let result = match reader.take(self.t, h.length as usize, h.frame_type.name()) {
            Ok(body) if h.frame_type == FrameType::Batch => self.batch(body, &mut each),
            Ok(body) => each(self, h, body),
            Err(e) => Err(e),
        };
        self.reader = reader;
        result
    }

    /// A BATCH: decompress (bounded by `max_chunks_body`), then its frames
    /// in order, each handed to `each`.
    fn batch(
        &mut self,
        body: &[u8],
        mut each: impl FnMut(&mut Self, FrameHeader, &[u8]) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        let (raw_len, z) = parse_batch(body).map_err(wire("BATCH"))?;
        if raw_len > self.cfg.max_chunks_body {
            return Err(reject(
                ErrorCode::Limit,
                format!(
                    "BATCH of {raw_len} bytes exceeds this receiver's limit of {}",
                    self.cfg.max_chunks_body
                ),
            ));
        }
        let mut buf = std::mem::take(&mut self.batch_buf);
        buf.clear();
        buf.resize(raw_len as usize, 0);
        let result = match self.dctx.decompress_to_buffer(z, &mut buf[..]) {
            Ok(n) if n == raw_len as usize => {
                let mut raw = &buf[..];
                let mut result = Ok(());
                while !raw.is_empty() && result.is_ok() {
                    match Frame::parse(raw) {
                        Ok((frame, used)) => {
                            result = each(self, frame.header, frame.body);
                            raw = &raw[used..];
                        }
                        Err(error) => result = Err(wire("frame in a BATCH")(error)),
                    }
                }
                result
            }
            _ => Err(reject(
                ErrorCode::BadFrame,
                "BATCH does not decompress to its stated length".into(),
            )),
        };
        self.batch_buf = buf;
        result
    }

    fn outcome(&mut self, dry_run: bool, remote_dir: String) -> FilesReceiveOutcome {
        self.report.wire_bytes = self.reader.wire_bytes();
        self.report.elapsed_ns = self.started.elapsed().as_nanos() as u64;
        FilesReceiveOutcome {
            report: self.report,
            messages: self.messages.clone(),
            dry_run,
            remote_dir,
        }
    }

    /// One PROBE body: whether this receiver holds each file (§10.10).
    fn probe_frame(&mut self, flags: u16, body: &[u8]) -> Result<(), SessionError> {
        if self.probe_last {
            return Err(reject(ErrorCode::Protocol, "PROBE after the last one".into()));
        }
        let (head, entries) = parse_probe(body).map_err(wire("PROBE"))?;
        if head.first_no != self.probe_held.len() as u64 {
            return Err(reject(
                ErrorCode::Protocol,
                format!(
                    "PROBE from entry {} (expected {})",
                    head.first_no,
                    self.probe_held.len()
                ),
            ));
        }
        if self.probe_held.len() + head.count as usize > MAX_PROBE_ENTRIES {
            return Err(reject(
                ErrorCode::Limit,
                format!("more than {MAX_PROBE_ENTRIES} PROBE entries in one session"),
            ));
        }
        for e in entries {
            let e = e.map_err(wire("PROBE entry"))?;
            let held = self.holds(&e);
            self.probe_held.push(held);
        }
        self.probe_last = flags & FLAG_LAST != 0;
        Ok(())
    }

    /// Whether the destination already has the probed file: quick check, or
    /// the manifest names this very file with a hash starting with `key`.
    /// Read-only; a path that is not valid is not held.
    fn holds(&mut self, e: &ProbeEntry<'_>) -> bool {
        let Ok(rel) = self.full_path(e.path) else {
            return false;
        };
        let mtime_ns = i128::from(e.mtime_sec) * 1_000_000_000 + i128::from(e.mtime_nsec);
        match self.dest.stat_existing(&mut self.dir_cache, &rel) {
            Ok(Some(st)) => {
                (st.size == e.size && st.mtime_ns == mtime_ns)
                    || self
                        .cfg
                        .manifest
                        .as_ref()
                        .and_then(|m| m.get(rel.as_bytes()))
                        .is_some_and(|w| w.digest[..e.key.len()] == e.key && w.still_stat(&st))
            }
            _ => false,
        }
    }

    /// PROBE_REPLY frames: the bitmap of held entries, in order.
    fn probe_reply(&mut self) -> Result<(), SessionError> {
        let per_frame = (pfs_wire::frame::MAX_CONTROL_BODY as usize - PROBE_HEAD_LEN) * 8;
        let held = std::mem::take(&mut self.probe_held);
        let mut body = Vec::with_capacity(pfs_wire::frame::MAX_CONTROL_BODY as usize);
        let mut first = 0usize;
        loop {
            let part = &held[first..(first + per_frame).min(held.len())];
            body.clear();
            body.extend_from_slice(
                &ProbeHead {
                    first_no: first as u64,
                    count: part.len() as u32,
                }
                .emit(),
            );
            body.resize(PROBE_HEAD_LEN + part.len().div_ceil(8), 0);
            for (j, &h) in part.iter().enumerate() {
                if h {
                    body[PROBE_HEAD_LEN + j / 8] |= 1 << (j % 8);
                }
            }
            first += part.len();
            let last = first == held.len();
            write_frame(
                self.t,
                FrameType::ProbeReply,
                if last { FLAG_LAST } else { 0 },
                &body,
                "PROBE_REPLY",
            )?;
            if last {
                return Ok(());
            }
        }
    }

    /// The index entries from `from` on: INDEX frames of 20-byte entries,
    /// packed into zstd BATCH frames of up to [`INDEX_BATCH_RAW`] bytes
    /// (offsets and lengths compress; the 8-byte keys do not).
    fn send_index(&mut self, from: u64) -> Result<(), SessionError> {
        let entries = self.store.entries_since(from);
        let mut raw = Vec::with_capacity(1 << 20);
        let mut body = Vec::with_capacity(pfs_wire::frame::MAX_CONTROL_BODY as usize);
        let mut frames = entries.chunks(INDEX_ENTRIES_PER_FRAME).peekable();
        loop {
            body.clear();
            for e in frames.next().unwrap_or_default() {
                IndexEntry {
                    key: pfs_files::index_key(&e.hash),
                    offset: e.loc.offset,
                    len: e.loc.len,
                }
                .emit(&mut body);
            }
            let last = frames.peek().is_none();
            pfs_wire::put_frame(
                &mut raw,
                FrameType::Index,
                if last { FLAG_LAST } else { 0 },
                &body,
            );
            if last || raw.len() >= INDEX_BATCH_RAW {
                let mut z = pfs_wire::files::batch_head(raw.len() as u32).to_vec();
                let head = z.len();
                z.resize(head + zstd::zstd_safe::compress_bound(raw.len()), 0);
                let n = zstd::bulk::compress_to_buffer(&raw, &mut z[head..], 1)
                    .map_err(|e| local(format!("compressing the index: {e}")))?;
                z.truncate(head + n);
                write_frame(self.t, FrameType::Batch, 0, &z, "INDEX")?;
                raw.clear();
            }
            if last {
                return Ok(());
            }
        }
    }

    /// Reserves the plan's new bytes, or refuses before anything is written.
    fn reserve(&mut self, plan: &Plan) -> Result<(), SessionError> {
        let res = self.store.reserve(plan.literal_bytes).map_err(|e| match e {
            StoreError::Full { need, free, capacity } => reject(
                ErrorCode::Limit,
                format!(
                    "store full: this transfer needs {need} new bytes, the store has {free} free of {capacity}; \
                     nothing was written (start the receiver with a larger --store-capacity, or a new store)"
                ),
            ),
            other => reject(
                ErrorCode::Limit,
                format!("cannot reserve {} bytes in the store: {other}", plan.literal_bytes),
            ),
        })?;
        let free = self
            .store
            .stats()
            .capacity
            .saturating_sub(self.store.stats().used);
        self.committed_mark = 0;
        self.res = Some(res);
        let ack = PlanAck {
            reserved: plan.literal_bytes,
            free,
        };
        write_frame(self.t, FrameType::Ack, 0, &ack.emit(), "ACK")?;
        Ok(())
    }

    /// Makes appended chunks durable and visible, keeping the unused rest
    /// of the reservation.
    fn commit(&mut self) -> Result<(), SessionError> {
        let Some(res) = self.res.take() else {
            return Ok(());
        };
        let left = res.left();
        let written = res.written();
        res.commit().map_err(store_err)?;
        self.report.store_appended += written;
        if left > 0 {
            self.res = Some(self.store.reserve(left).map_err(store_err)?);
        }
        self.committed_mark = 0;
        Ok(())
    }

    fn fail(&mut self, rel: &[u8], reason: impl std::fmt::Display) {
        self.report.files_failed += 1;
        let (path, reason) = (String::from_utf8_lossy(rel), reason.to_string());
        // Errors from the destination already name the path.
        let line = if reason.starts_with(path.as_ref()) {
            format!("{reason}\n")
        } else {
            format!("{path}: {reason}\n")
        };
        if self.messages.len() + line.len() <= MAX_REPORT_TEXT {
            self.messages.push_str(&line);
        }
    }

    fn full_path(&self, path: &[u8]) -> Result<RelPath, pfs_files::PathError> {
        let rel = RelPath::parse(path)?;
        match &self.base {
            None => Ok(rel),
            Some(b) => b.join(rel.as_bytes()),
        }
    }

    fn begin_file(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let f = FileEntry::parse(body).map_err(wire("FILE"))?;
        if f.file_no != self.next_no {
            return Err(reject(
                ErrorCode::Protocol,
                format!("FILE {} out of order (expected {})", f.file_no, self.next_no),
            ));
        }
        self.next_no += 1;
        let mtime_ns = i128::from(f.mtime_sec) * 1_000_000_000 + i128::from(f.mtime_nsec);
        let rel = match self.full_path(f.path) {
            Ok(r) => r,
            Err(e) => {
                self.fail(f.path, format!("refused: {e}"));
                return self.start(&f, None, mtime_ns, Target::Failed);
            }
        };
        if let Some(parent) = rel.parent() {
            // Once per directory: a tree's files mostly share their parent.
            if !self.dirs_made.contains(parent.as_bytes()) {
                if let Err(e) = self.dest.create_dir_all(&parent, 0o755) {
                    self.fail(f.path, e);
                    return self.start(&f, Some(rel), mtime_ns, Target::Failed);
                }
                self.dirs_made.insert(parent.as_bytes().to_vec());
            }
        }
        let target = match f.kind {
            EntryKind::Dir => {
                match self.dest.create_dir_all(&rel, f.mode) {
                    Ok(()) => {
                        self.report.dirs += 1;
                        self.dirs_made.insert(rel.as_bytes().to_vec());
                        self.dir_meta.push((rel, mtime_ns, f.mode));
                    }
                    Err(e) => self.fail(f.path, e),
                }
                return Ok(());
            }
            EntryKind::Symlink => {
                match self.dest.create_symlink(&rel, f.link_target) {
                    Ok(()) => self.report.symlinks += 1,
                    Err(e) => self.fail(f.path, e),
                }
                return Ok(());
            }
            EntryKind::File => self.file_target(&f, &rel, mtime_ns),
        };
        self.start(&f, Some(rel), mtime_ns, target)
    }

    /// What to do with a regular file's destination: leave it, set its
    /// metadata only, rebuild it, or (failed) nothing.
    fn file_target(&mut self, f: &FileEntry<'_>, rel: &RelPath, mtime_ns: i128) -> Target {
        if f.held {
            return self.held_target(f, rel, mtime_ns);
        }
        let (file, meta) = match self.dest.open_existing(rel) {
            Ok(Some((file, meta))) => (Some(file), Some(meta)),
            Ok(None) => (None, None),
            Err(e) => {
                self.fail(f.path, e);
                return Target::Failed;
            }
        };
        if meta.as_ref().is_some_and(|m| unchanged(m, f.size, mtime_ns)) {
            return Target::Unchanged;
        }
        let held = match (&file, &meta) {
            (Some(file), Some(meta)) => self.holds_content(rel, meta, &f.file_hash).map(|w| (file, w)),
            _ => None,
        };
        if let Some((file, w)) = held {
            // The content is already there: metadata only, no chunk read or written.
            return match pfs_files::set_file_times_and_mode(file, mtime_ns, f.mode)
                .and_then(|()| file.metadata())
            {
                Ok(now) => {
                    if let Some(m) = &self.cfg.manifest {
                        m.insert(rel.as_bytes(), Written::of(&now, w.hash, w.digest));
                    }
                    Target::SameContent
                }
                Err(e) => {
                    self.fail(f.path, format!("set mode/mtime: {e}"));
                    Target::Failed
                }
            };
        }
        if f.held {
            self.fail(
                f.path,
                "changed at the destination after the sender asked about it (PROBE); send again",
            );
            return Target::Failed;
        }
        match self.dest.create_temp(rel) {
            Ok(temp) => Target::Rebuild(Box::new(Rebuild {
                temp,
                hasher: (f.chunk_count > 1).then(blake3::Hasher::new),
                single: None,
                holes: Vec::new(),
                quick: self.cfg.manifest.is_some().then(Box::default),
            })),
            Err(e) => {
                self.fail(f.path, e);
                Target::Failed
            }
        }
    }

    /// [`Self::file_target`] for a HELD file (§10.10): by name in the
    /// directory the probe looked in, without opening the file unless its
    /// permission bits change.
    fn held_target(&mut self, f: &FileEntry<'_>, rel: &RelPath, mtime_ns: i128) -> Target {
        let changed = "changed at the destination after the sender asked about it (PROBE); send again";
        let st = match self.dest.stat_existing(&mut self.dir_cache, rel) {
            Ok(Some(st)) => st,
            Ok(None) => {
                self.fail(f.path, changed);
                return Target::Failed;
            }
            Err(e) => {
                self.fail(f.path, e);
                return Target::Failed;
            }
        };
        if st.size == f.size && st.mtime_ns == mtime_ns {
            return Target::Unchanged;
        }
        let record = self
            .cfg
            .manifest
            .as_ref()
            .and_then(|m| m.get(rel.as_bytes()))
            .filter(|w| f.file_hash[..16] == w.digest && f.file_hash[16..] == [0; 16] && w.still_stat(&st));
        let Some(w) = record else {
            self.fail(f.path, changed);
            return Target::Failed;
        };
        match self
            .dest
            .set_existing_times_and_mode(&mut self.dir_cache, rel, &st, mtime_ns, f.mode)
        {
            Ok(Some(now)) => {
                if let Some(m) = &self.cfg.manifest {
                    m.insert(rel.as_bytes(), Written::of_stat(&now, w.hash, w.digest));
                }
                Target::SameContent
            }
            Ok(None) => {
                self.fail(f.path, changed);
                Target::Failed
            }
            Err(e) => {
                self.fail(f.path, format!("set mode/mtime: {e}"));
                Target::Failed
            }
        }
    }

    fn start(
        &mut self,
        f: &FileEntry<'_>,
        rel: Option<RelPath>,
        mtime_ns: i128,
        target: Target,
    ) -> Result<(), SessionError> {
        if f.kind != EntryKind::File {
            return Ok(());
        }
        let rel = match rel {
            Some(r) => r,
            None => RelPath::parse(b"refused").map_err(|e| local(e.to_string()))?,
        };
        self.current = Some(Current {
            no: f.file_no,
            rel,
            size: f.size,
            mode: f.mode,
            mtime_ns,
            file_hash: f.file_hash,
            chunk_count: f.chunk_count,
            chunks_left: f.chunk_count,
            // A held file has no CHUNKS: nothing more to see.
            seen: if f.held { f.size } else { 0 },
            target,
        });
        if f.chunk_count == 0 {
            self.end_file()?;
        }
        Ok(())
    }

    fn chunks(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let (head, entries) = parse_chunks(body).map_err(wire("CHUNKS"))?;
        let Some(no) = self.current.as_ref().map(|c| c.no) else {
            return Err(reject(ErrorCode::Protocol, "CHUNKS without a FILE".into()));
        };
        if head.file_no != no {
            return Err(reject(
                ErrorCode::Protocol,
                format!("CHUNKS for file {} while file {no} is open", head.file_no),
            ));
        }
        let mut pending = Pending::new();
        let mut result = Ok(());
        for e in entries {
            result = e
                .map_err(wire("CHUNKS entry"))
                .and_then(|e| self.chunk(&e, &mut pending));
            if result.is_err() {
                break;
            }
        }
        self.flush(&mut pending);
        result?;
        if self.current.as_ref().is_some_and(|c| c.chunks_left == 0) {
            self.end_file()?;
        }
        Ok(())
    }

    /// A literal entry: decompress, check against its hash, append to the
    /// store, and queue it at `at` if the file is rebuilt. Returns false if
    /// the bytes do not match their hash.
    fn literal<'b>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        pending: &mut Pending<'b>,
    ) -> Result<bool, SessionError> {
        let compressed = match e.data {
            ChunkData::Literal(b) if b.len() == e.len as usize => None,
            ChunkData::Zstd(c) => Some(c),
            _ => return Err(reject(ErrorCode::BadFrame, "literal length mismatch".into())),
        };
        let mut zbuf = std::mem::take(&mut self.zbuf);
        if let Some(c) = compressed {
            zbuf.clear();
            zbuf.resize(e.len as usize, 0);
            if !matches!(self.dctx.decompress_to_buffer(c, &mut zbuf[..]), Ok(n) if n == e.len as usize) {
                self.zbuf = zbuf;
                return Err(reject(
                    ErrorCode::BadFrame,
                    "zstd chunk does not decompress to its stated length".into(),
                ));
            }
        }
        let result = self.take_literal(e, at, compressed, &zbuf, pending);
        self.zbuf = zbuf;
        result
    }

    fn take_literal<'b>(
        &mut self,
        e: &ChunkEntry<'b>,
        at: u64,
        compressed: Option<&[u8]>,
        zbuf: &[u8],
        pending: &mut Pending<'b>,
    ) -> Result<bool, SessionError> {
        let bytes: &[u8] = match (compressed, e.data) {
            (None, ChunkData::Literal(b)) => b,
            _ => zbuf,
        };
        self.report.literal_bytes += u64::from(e.len);
        self.report.literal_wire_bytes += compressed.map_or(u64::from(e.len), |c| c.len() as u64);
        if !hash_matches(bytes, e.hash) {
            return Ok(false);
        }
        if self.res.as_ref().is_some_and(|r| r.left() < u64::from(e.len)) {
            // More new bytes than planned (another session filled the store
            // between plan and now, or a stale plan): commit and grow.
            self.commit()?;
            let grown = self
                .store
                .reserve(u64::from(e.len).max(64 << 20))
                .or_else(|_| self.store.reserve(u64::from(e.len)));
            self.res = Some(grown.map_err(|e| reject(ErrorCode::Limit, format!("store full: {e}")))?);
        }
        if let Some(res) = self.res.as_mut() {
            res.append_unchecked(e.hash, bytes).map_err(store_err)?;
        }
        self.verified(e.hash);
        match (compressed, e.data) {
            // Frame bytes outlive the pending write: queue them in place.
            (None, ChunkData::Literal(b)) => self.put(pending, at, b),
            // Decompressed bytes are overwritten by the next chunk: write now.
            _ => {
                self.flush(pending);
                self.put_now(at, bytes);
            }
        }
        Ok(true)
    }

    fn chunk<'b>(&mut self, e: &ChunkEntry<'b>, pending: &mut Pending<'b>) -> Result<(), SessionError>
    where
        'a: 'b,
    {
        if e.len == 0 || e.len > MAX_CHUNK_LEN {
            return Err(reject(
                ErrorCode::Limit,
                format!("chunk of {} bytes (1 … {MAX_CHUNK_LEN} accepted)", e.len),
            ));
        }
        let cur = self
            .current
            .as_mut()
            .ok_or_else(|| reject(ErrorCode::Protocol, "no file".into()))?;
        if cur.chunks_left == 0 || cur.seen + u64::from(e.len) > cur.size {
            return Err(reject(
                ErrorCode::Protocol,
                format!("file {}: more chunks or bytes than its FILE announced", cur.no),
            ));
        }
        cur.chunks_left -= 1;
        let at = cur.seen;
        cur.seen += u64::from(e.len);
        let rebuilding = matches!(cur.target, Target::Rebuild(_));
        let store: &'a Store = self.store;
        match e.data {
            ChunkData::Literal(_) | ChunkData::Zstd(_) => {
                if !self.literal(e, at, pending)? && rebuilding {
                    self.flush(pending);
                    if let Some(c) = self.current.as_mut() {
                        c.target = Target::Failed;
                    }
                    let rel = self
                        .current
                        .as_ref()
                        .map(|c| c.rel.as_bytes().to_vec())
                        .unwrap_or_default();
                    self.fail(&rel, "a literal chunk does not match its hash (sender error)");
                }
            }
            ChunkData::Ref { offset } => {
                let loc = ChunkLoc { offset, len: e.len };
                let bytes = store.bytes(loc).map_err(|_| {
                    reject(
                        ErrorCode::OutOfBounds,
                        format!("descriptor {offset}+{} lies outside the store", e.len),
                    )
                })?;
                if !rebuilding {
                    return Ok(());
                }
                if hash_matches(bytes, e.hash) {
                    self.report.matched_bytes += u64::from(e.len);
                    self.verified(e.hash);
                    self.put(pending, at, bytes);
                } else {
                    self.hole(pending, at, e.hash, e.len);
                }
            }
            ChunkData::Known => {
                if !rebuilding {
                    return Ok(());
                }
                let committed = store
                    .lookup(e.hash)
                    .filter(|l| l.len == e.len)
                    .and_then(|loc| store.bytes(loc).ok())
                    .filter(|b| hash_matches(b, e.hash));
                if let Some(b) = committed {
                    self.report.matched_bytes += u64::from(e.len);
                    self.verified(e.hash);
                    self.put(pending, at, b);
                    return Ok(());
                }
                // Written by this session, not committed yet: its bytes
                // live in the reservation, which may change before the
                // pending write; write them now.
                self.flush(pending);
                let res = self.res.take();
                match res.as_ref().and_then(|r| r.bytes_of(e.hash)) {
                    Some(b) => {
                        self.report.matched_bytes += u64::from(e.len);
                        self.verified(e.hash);
                        self.put_now(at, b);
                    }
                    None => self.hole(pending, at, e.hash, e.len),
                }
                self.res = res;
            }
        }
        Ok(())
    }

    /// Notes that a chunk with `hash` was verified and placed: for a
    /// one-chunk file that is the whole-file check.
    fn verified(&mut self, hash: &Hash) {
        if let Some(Current {
            chunk_count: 1,
            target: Target::Rebuild(rb),
            ..
        }) = self.current.as_mut()
        {
            rb.single = Some(*hash);
        }
    }

    /// Hashes `bytes` into the file being rebuilt and queues them at `at`.
    fn put<'b>(&mut self, pending: &mut Pending<'b>, at: u64, bytes: &'b [u8]) {
        let Some(Current {
            target: Target::Rebuild(rb),
            ..
        }) = self.current.as_mut()
        else {
            return;
        };
        if let Some(h) = rb.hasher.as_mut() {
            h.update(bytes);
        }
        if let Some(q) = rb.quick.as_mut() {
            q.0.write(bytes);
        }
        if pending.len > 0 && pending.at + pending.len != at {
            self.flush(pending);
        }
        if pending.len == 0 {
            pending.at = at;
        }
        pending.slices.push(std::io::IoSlice::new(bytes));
        pending.len += bytes.len() as u64;
        if pending.slices.len() >= pfs_transport::IOV_MAX {
            self.flush(pending);
        }
    }

    /// Hashes and writes `bytes` at `at` at once (bytes that will not stay put).
    fn put_now(&mut self, at: u64, bytes: &[u8]) {
        let mut one = Pending::new();
        self.put(&mut one, at, bytes);
        self.flush(&mut one);
    }

    /// Writes the pending bytes; a failed write fails the file.
    fn flush(&mut self, pending: &mut Pending<'_>) {
        if pending.len == 0 {
            return;
        }
        let result = match self.current.as_mut() {
            Some(Current {
                target: Target::Rebuild(rb),
                ..
            }) => write_all_vectored_at(rb.temp.file(), &mut pending.slices, pending.at),
            _ => Ok(()),
        };
        pending.slices.clear();
        pending.len = 0;
        if let Err(e) = result {
            if let Some(c) = self.current.as_mut() {
                c.target = Target::Failed;
                let rel = c.rel.as_bytes().to_vec();
                self.fail(&rel, format!("write: {e}"));
            }
        }
    }

    /// A chunk whose bytes are not (correctly) here: NAK it after the stream.
    fn hole(&mut self, pending: &mut Pending<'_>, at: u64, hash: &Hash, len: u32) {
        self.flush(pending);
        if let Some(Current {
            target: Target::Rebuild(rb),
            ..
        }) = self.current.as_mut()
        {
            rb.hasher = None;
            rb.quick = None;
            rb.holes.push((at, *hash, len));
        }
        if self.nak_seen.insert(*hash, ()).is_none() {
            self.nak.push(*hash);
            self.report.nak_chunks += 1;
        }
    }

    fn end_file(&mut self) -> Result<(), SessionError> {
        let Some(cur) = self.current.take() else {
            return Ok(());
        };
        if cur.chunks_left != 0 || cur.seen != cur.size {
            return Err(reject(
                ErrorCode::Protocol,
                format!(
                    "file {} ended after {} of {} bytes ({} chunks missing)",
                    cur.no, cur.seen, cur.size, cur.chunks_left
                ),
            ));
        }
        match cur.target {
            Target::Unchanged => {
                self.report.files_unchanged += 1;
                self.report.effective_bytes += cur.size;
            }
            Target::SameContent => {
                self.report.files_metadata_only += 1;
                self.report.effective_bytes += cur.size;
            }
            Target::Failed => {}
            Target::Rebuild(rb) => {
                if !rb.holes.is_empty() {
                    self.waiting.push(Waiting {
                        rel: cur.rel,
                        size: cur.size,
                        mode: cur.mode,
                        mtime_ns: cur.mtime_ns,
                        file_hash: cur.file_hash,
                        temp: rb.temp,
                        holes: rb.holes,
                        broken: None,
                    });
                } else {
                    let digest = rb.hasher.map(|h| *h.finalize().as_bytes()).or(rb.single);
                    let quick = rb.quick.map(|q| q.0.finish_128().to_le_bytes());
                    self.land(
                        cur.rel,
                        rb.temp,
                        cur.size,
                        cur.mode,
                        cur.mtime_ns,
                        &cur.file_hash,
                        (digest, quick),
                    );
                }
            }
        }
        if self
            .res
            .as_ref()
            .is_some_and(|r| r.written() >= self.committed_mark + self.cfg.commit_every)
        {
            self.commit()?;
        }
        Ok(())
    }

    /// Checks the whole-file hash, sets mode and mtime, renames into place.
    /// `digests` are the BLAKE3 and XXH3-128 computed while the file was
    /// written; a missing one (chunks written out of order) is computed by
    /// reading the file back.
    #[allow(clippy::too_many_arguments)]
    fn land(
        &mut self,
        rel: RelPath,
        temp: TempFile,
        size: u64,
        mode: u32,
        mtime_ns: i128,
        want: &Hash,
        digests: (Option<Hash>, Option<QuickDigest>),
    ) {
        let need_quick = self.cfg.manifest.is_some();
        let digests = match digests {
            (Some(d), Some(q)) => Ok((d, q)),
            (Some(d), None) if !need_quick => Ok((d, [0; 16])),
            _ => hash_file(temp.file(), size),
        };
        let result = match digests {
            Ok((d, q)) if &d == want => temp
                .set_times_and_mode(mtime_ns, mode)
                .and_then(|()| temp.persist(self.cfg.fsync_files))
                .map(|meta| (meta, q))
                .map_err(|e| e.to_string()),
            Ok(_) => Err("content does not match the sender's BLAKE3 (file changed while sent?)".into()),
            Err(e) => Err(format!("re-reading to verify: {e}")),
        };
        match result {
            Ok((meta, quick)) => {
                self.report.files_written += 1;
                self.report.effective_bytes += size;
                if let Some(m) = &self.cfg.manifest {
                    m.insert(rel.as_bytes(), Written::of(&meta, *want, quick));
                }
            }
            Err(e) => self.fail(rel.as_bytes(), e),
        }
    }

    /// NAK the damaged or missing chunks, apply the REPAIRs.
    fn corrections(&mut self) -> Result<(), SessionError> {
        let per_frame = pfs_wire::frame::MAX_CONTROL_BODY as usize / 32;
        let naks: Vec<Hash> = std::mem::take(&mut self.nak);
        let mut batches = naks.chunks(per_frame).peekable();
        while let Some(batch) = batches.next() {
            let body: Vec<u8> = batch.iter().flatten().copied().collect();
            let flags = if batches.peek().is_none() { FLAG_LAST } else { 0 };
            write_frame(self.t, FrameType::Nak, flags, &body, "NAK")?;
        }
        let mut repaired: HashMap<Hash, Vec<u8>> = HashMap::new();
        loop {
            let h = self
                .next("REPAIR")?
                .ok_or(SessionError::PeerClosed { during: "REPAIR" })?;
            if h.frame_type != FrameType::Repair {
                return Err(reject(
                    ErrorCode::Protocol,
                    format!("expected REPAIR, got {}", h.frame_type.name()),
                ));
            }
            let body = self.reader.take(self.t, h.length as usize, "REPAIR")?.to_vec();
            let (_, entries) = parse_chunks(&body).map_err(wire("REPAIR"))?;
            for e in entries {
                let e = e.map_err(wire("REPAIR entry"))?;
                if !self.nak_seen.contains_key(e.hash) || e.len > MAX_CHUNK_LEN {
                    return Err(reject(ErrorCode::Protocol, "REPAIR of a chunk not NAKed".into()));
                }
                let bytes = match e.data {
                    ChunkData::Literal(b) if b.len() == e.len as usize => b.to_vec(),
                    ChunkData::Zstd(c) => zstd::bulk::decompress(c, e.len as usize)
                        .ok()
                        .filter(|b| b.len() == e.len as usize)
                        .ok_or_else(|| reject(ErrorCode::BadFrame, "bad zstd in REPAIR".into()))?,
                    _ => return Err(reject(ErrorCode::BadFrame, "REPAIR entries carry bytes".into())),
                };
                if !hash_matches(&bytes, e.hash) {
                    continue;
                }
                self.report.repaired_bytes += u64::from(e.len);
                match self.store.repair(e.hash, &bytes) {
                    Ok(_) => {}
                    Err(err) => self.messages.push_str(&format!("store repair failed: {err}\n")),
                }
                repaired.insert(*e.hash, bytes);
            }
            if h.flags & FLAG_LAST != 0 {
                break;
            }
        }
        // Fill the holes of the waiting files.
        for w in &mut self.waiting {
            for (at, hash, len) in std::mem::take(&mut w.holes) {
                let result = match repaired.get(&hash).filter(|b| b.len() == len as usize) {
                    Some(b) => w
                        .temp
                        .file()
                        .write_all_at(b, at)
                        .map_err(|e| format!("write: {e}")),
                    None => Err("chunks damaged in the store were not repaired".to_string()),
                };
                if let Err(e) = result {
                    w.broken = Some(e);
                    break;
                }
            }
        }
        Ok(())
    }

    fn finish_waiting(&mut self) {
        for w in std::mem::take(&mut self.waiting) {
            match w.broken {
                None if w.holes.is_empty() => self.land(
                    w.rel,
                    w.temp,
                    w.size,
                    w.mode,
                    w.mtime_ns,
                    &w.file_hash,
                    (None, None),
                ),
                None => self.fail(w.rel.as_bytes(), "chunks damaged in the store were not repaired"),
                Some(why) => self.fail(w.rel.as_bytes(), why),
            }
        }
    }
}

/// `pwritev` until every slice is written.
fn write_all_vectored_at(
    f: &File,
    mut slices: &mut [std::io::IoSlice<'_>],
    mut at: u64,
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = rustix::io::pwritev(f, slices, at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        at += n as u64;
        std::io::IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// rsync's quick check: same size and same mtime (to the nanosecond).
fn unchanged(meta: &std::fs::Metadata, size: u64, mtime_ns: i128) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.is_file()
        && meta.size() == size
        && i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()) == mtime_ns
}

fn hash_file(f: &File, size: u64) -> std::io::Result<(Hash, QuickDigest)> {
    let mut h = blake3::Hasher::new();
    let mut q = twox_hash::XxHash3_128::new();
    let mut buf = vec![0u8; WRITE_BUF];
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        q.write(&buf[..n]);
        at += n as u64;
    }
    Ok((*h.finalize().as_bytes(), q.finish_128().to_le_bytes()))
}
