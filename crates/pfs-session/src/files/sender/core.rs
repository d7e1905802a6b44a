//! The sender core, sans I/O: it decides every frame of a files session
//! (FILES_HELLO, PROBE, INDEX_REQUEST, PLAN, FILE/CHUNKS in zstd BATCH
//! frames, FILE_DROP for a file that changed or could not be read while
//! sent, FILES_END, REPAIR) and reads the receiver's replies from any byte
//! boundary. Reading files, hashing and chunking them, and the index cache
//! on disk are the host's ([`FilesSource`]); compressing is computation and
//! stays here.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use pfs_files::{ChunkRef, IndexCache};
use pfs_wire::files::{
    batch_head, emit_entry_head, parse_batch, parse_deleted, parse_index, parse_nak, parse_probe_reply, tag,
    ChunksHeader, DeleteRequest, EntryKind, FileDone, FileDrop, FileEntry, FileExtra, FilesAccept,
    FilesHello, FilesReport, Hash, Plan, PlanAck, ProbeEntry, ProbeHead, Xattrs, ACCEPT_OCCUPIED,
    CHUNKS_FIXED_LEN, FILE_FIXED_LEN, FLAG_FILES_REPORT, FLAG_LAST, HELLO_CHECKSUM, HELLO_COMPRESS,
    HELLO_DELETE, HELLO_DRY_RUN, INDEX_KEY_LEN, INDEX_REQUEST_LEN, PROBE_ENTRY_FIXED_LEN, PROBE_HEAD_LEN,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, Frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::{
    classify, plan_chunk, ChunkPlan, DeletionOutcome, FilesItem, FilesPlanSummary, FilesProgress,
    FilesSenderConfig, Unreadable,
};
use crate::error::{LocalError, Timeout};
use crate::files::bwlimit::frame_target;
use crate::files::{hash_matches, FilesViolation, IndexFault, SENDER_FRAME_TARGET, SENDER_FRAME_WORK};
use crate::framing::{frame_want, refusal, FrameClock, Transmit, DEFAULT_MIN_FRAME_RATE};
use crate::SessionError;

/// Largest index BATCH (compressed or not) a sender accepts.
pub const MAX_INDEX_BATCH: u32 = 1 << 20;
/// Frames up to this size ride in a BATCH; larger ones go alone.
const BATCH_FRAME_MAX: usize = 64 << 10;
/// A BATCH is sent when its frames reach this size.
const BATCH_TARGET: usize = 1 << 20;
/// Length of a BATCH body's head (its raw length and what follows).
const BATCH_HEAD_LEN: usize = 8;
/// Progress events at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Host work the sender core needs done: the files themselves and the
/// index cache on disk.
pub trait FilesSource {
    /// Sets `digest` of `items[i]` for each `i` in `which`; returns the
    /// items that cannot be read, with the reason.
    fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// Sets `recipe` of `items[i]` for each `i` in `which`; as [`Self::digest`].
    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// The index cache of the store `store_id` (empty when none is kept),
    /// and a warning if it could not be read.
    fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>);
    /// Saves the index cache; a warning if it could not be saved.
    fn save_index(&mut self, cache: &IndexCache) -> Option<String>;
    /// Reads `buf.len()` bytes at `offset` of `item`'s file, straight into
    /// `buf` (a frame being built). `Some(how)` when the file changed since
    /// it was scanned (how, without its path): the core then checks every
    /// chunk it reads of that file against the planned hash. An error
    /// (unreadable, shorter than planned) fails this file only: the core
    /// sends FILE_DROP and goes on with the next entry.
    fn read(&mut self, item: &FilesItem, offset: u64, buf: &mut [u8]) -> Result<Option<String>, LocalError>;
    /// Starts chunking `which` of `items`, in that order, in the background
    /// while the session goes on; [`Self::chunk_one`] collects each file's
    /// recipe when its turn comes. False if this host cannot (the core then
    /// chunks them all before PLAN, with [`Self::chunk`]).
    fn chunk_ahead(&mut self, _items: &[FilesItem], _which: &[usize]) -> bool {
        false
    }
    /// Sets the recipe of `items[no]`, chunked in the background (waiting
    /// for it), or says why the file cannot be read.
    fn chunk_one(&mut self, items: &mut [FilesItem], no: usize) -> Result<(), String> {
        first_failure(&self.chunk(items, &[no]))
    }
    /// Starts cutting and hashing `item`'s file for a STREAMED send; false
    /// if this host cannot (the core then chunks the file whole first).
    fn stream_start(&mut self, _item: &FilesItem) -> bool {
        false
    }
    /// Appends to `out` the next chunks of the file [`Self::stream_start`]
    /// began, in file order, waiting until some are cut; or says that all
    /// were (with the recipe), or why the file cannot be finished.
    fn stream_next(&mut self, _out: &mut Vec<ChunkRef>) -> Streamed {
        Streamed::Failed("no file is being streamed".into())
    }
    /// The file [`Self::stream_start`] began is given up: stop cutting it.
    fn stream_stop(&mut self) {}
}

/// The reason the first of `failed` could not be read, if any.
pub(super) fn first_failure(failed: &Unreadable) -> Result<(), String> {
    match failed.first() {
        Some((_, e)) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// What [`FilesSource::stream_next`] got.
#[derive(Debug)]
pub enum Streamed {
    /// More chunks were appended.
    More,
    /// Every chunk was handed out: the file's recipe.
    Done(pfs_files::Recipe),
    /// The file cannot be finished (unreadable, or it changed while read).
    Failed(String),
}

/// The STREAMED file being sent: its chunks so far, how each travels,
/// what they add to the plan, and its recipe once it is cut to the end.
#[derive(Debug, Default)]
struct Streaming {
    /// Bytes of the file still counted in the summary's `pending_bytes`.
    pending: u64,
    chunks: Vec<ChunkRef>,
    plan: Vec<ChunkPlan>,
    sum: FilesPlanSummary,
    done: Option<pfs_files::Recipe>,
    failed: Option<String>,
}

/// Where a files session is, from the sender's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Accept,
    ProbeReply,
    Index,
    Ack,
    Stream,
    Report,
    Repair,
    Done,
}

/// What the core tells its host, besides frames to send.
#[derive(Debug, Clone, Copy)]
pub enum FilesSenderEvent {
    /// Progress of the stream.
    Progress(FilesProgress),
}

/// What is ready to go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// `out`: control frames.
    Out,
    /// `batch_hdr` + head + `zout`: one BATCH.
    Batch,
    /// `raw`: the batched frames as they are, one write (no `--compress`).
    Raw,
    /// `frame_hdr` + `frame`: one large frame.
    Frame(&'static str),
}

/// The sending side of a files session as a state machine.
#[derive(Debug)]
pub struct FilesSender<'a> {
    items: &'a mut Vec<FilesItem>,
    cfg: &'a FilesSenderConfig,
    phase: Phase,
    now: Instant,
    started: Instant,
    /// Per-frame, absolute deadlines while a reply is awaited.
    deadline: Option<FrameClock>,
    consumed: u64,
    wire_sent: u64,
    out: Vec<u8>,
    ready: VecDeque<Ready>,
    /// Small FILE/CHUNKS frames waiting to go out as one BATCH.
    batch: Vec<u8>,
    /// Chunk bytes the frames in `batch` name.
    batch_work: u64,
    batch_hdr: [u8; FRAME_HEADER_LEN],
    batch_head: [u8; BATCH_HEAD_LEN],
    /// Compressed BATCH body.
    zout: Vec<u8>,
    /// Batched frames going out as they are.
    raw: Vec<u8>,
    zctx: Zstd,
    zlevel: i32,
    /// The extended attributes of the FILE being built, encoded.
    xattr_buf: Vec<u8>,
    /// Frame and BATCH sizes to aim at (smaller when paced: `bwlimit`).
    frame_target: usize,
    batch_target: usize,
    /// The frame being built (FILE, CHUNKS, REPAIR), and its header.
    frame: Vec<u8>,
    frame_hdr: [u8; FRAME_HEADER_LEN],
    zbuf: Vec<u8>,
    accept: Option<FilesAccept>,
    probe_asked: Vec<usize>,
    probe_next: usize,
    cache: Option<IndexCache>,
    index_from: u64,
    index_raw: Vec<u8>,
    fetched: u64,
    cached: u64,
    plans: Vec<Vec<ChunkPlan>>,
    summary: FilesPlanSummary,
    /// Next entry to send, and the next chunk of the entry being sent
    /// (`None`: its FILE is not sent yet).
    next_item: usize,
    next_chunk: Option<usize>,
    /// File bytes described so far, and where the current entry began.
    done_bytes: u64,
    item_base: u64,
    /// How the entry being streamed changed since it was scanned: its
    /// chunks are checked against their hashes as they are read.
    changed: Option<String>,
    /// Entries given up on while streaming (FILE_DROP).
    dropped: u64,
    stream_start: Instant,
    last_progress: Instant,
    wanted: Vec<Hash>,
    repairs: Vec<(Hash, (usize, u64, u32))>,
    repair_next: usize,
    /// Repair totals: chunks and bytes.
    pub(super) repaired: (u64, u64),
    probed: u64,
    report: Option<(FilesReport<'static>, String)>,
    warnings: Vec<String>,
    /// Entries left out because they could not be read.
    skipped: u64,
    events: VecDeque<FilesSenderEvent>,
    /// A dry run of DELETE: the stream is FILE entries flagged LISTED.
    listing: bool,
    /// DELETE went out: DELETED frames come before the report.
    delete_sent: bool,
    /// What DELETED said so far.
    deletion: Option<DeletionOutcome>,
    /// Hashes sent literally so far: a later chunk names them KNOWN.
    sent: HashSet<Hash>,
    /// The STREAMED file being sent, if any.
    streaming: Option<Streaming>,
    /// Paths of the entries dropped (FILE_DROP): hard links to them are
    /// dropped too.
    dropped_paths: HashSet<pfs_files::RelPath>,
}

/// A zstd compression context (the context itself has no `Debug`).
struct Zstd(zstd::bulk::Compressor<'static>);

impl std::fmt::Debug for Zstd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Zstd")
    }
}

fn malformed(context: &'static str) -> impl FnOnce(pfs_wire::WireError) -> SessionError {
    move |error| SessionError::Malformed { context, error }
}

impl<'a> FilesSender<'a> {
    /// A session that sends `items`; FILES_HELLO is ready to go.
    pub fn new(
        items: &'a mut Vec<FilesItem>,
        cfg: &'a FilesSenderConfig,
        now: Instant,
    ) -> Result<Self, SessionError> {
        let zctx = zstd::bulk::Compressor::new(1).map_err(|source| LocalError::Zstd {
            what: "compression context",
            source,
        })?;
        let mut s = Self {
            items,
            cfg,
            phase: Phase::Accept,
            now,
            started: now,
            deadline: Some(FrameClock::new(now, cfg.reply_timeout, DEFAULT_MIN_FRAME_RATE)),
            consumed: 0,
            wire_sent: 0,
            out: Vec::new(),
            ready: VecDeque::new(),
            batch: Vec::with_capacity(BATCH_TARGET + BATCH_FRAME_MAX),
            batch_work: 0,
            batch_hdr: [0; FRAME_HEADER_LEN],
            batch_head: [0; BATCH_HEAD_LEN],
            zout: Vec::new(),
            raw: Vec::new(),
            zctx: Zstd(zctx),
            zlevel: 1,
            xattr_buf: Vec::new(),
            frame_target: cfg
                .bwlimit
                .map_or(SENDER_FRAME_TARGET, |r| frame_target(r, SENDER_FRAME_TARGET)),
            batch_target: cfg
                .bwlimit
                .map_or(BATCH_TARGET, |r| frame_target(r, BATCH_TARGET)),
            frame: Vec::with_capacity(SENDER_FRAME_TARGET + (1 << 20)),
            frame_hdr: [0; FRAME_HEADER_LEN],
            zbuf: Vec::new(),
            accept: None,
            probe_asked: Vec::new(),
            probe_next: 0,
            cache: None,
            index_from: 0,
            index_raw: Vec::new(),
            fetched: 0,
            cached: 0,
            plans: Vec::new(),
            summary: FilesPlanSummary::default(),
            next_item: 0,
            next_chunk: None,
            done_bytes: 0,
            item_base: 0,
            changed: None,
            dropped: 0,
            stream_start: now,
            last_progress: now,
            wanted: Vec::new(),
            repairs: Vec::new(),
            repair_next: 0,
            repaired: (0, 0),
            probed: 0,
            report: None,
            warnings: Vec::new(),
            skipped: 0,
            events: VecDeque::new(),
            listing: false,
            delete_sent: false,
            deletion: None,
            sent: HashSet::new(),
            streaming: None,
            dropped_paths: HashSet::new(),
        };
        if cfg.preserve.hard_links {
            link_items(s.items);
        }
        let mut hello = Vec::new();
        FilesHello {
            flags: if cfg.dry_run { HELLO_DRY_RUN } else { 0 }
                | if cfg.compress.is_some() { HELLO_COMPRESS } else { 0 }
                | if cfg.delete.is_some() { HELLO_DELETE } else { 0 }
                | if cfg.checksum { HELLO_CHECKSUM } else { 0 },
            auth_method: 0,
            chunk_avg: cfg.chunk_avg,
            session_nonce: cfg.session_nonce,
            remote_dir: &cfg.remote_dir,
            auth: &[],
        }
        .emit(&mut hello);
        s.control(FrameType::FilesHello, 0, &hello);
        Ok(s)
    }

    /// Largest contiguous unit [`Self::handle_input`] needs.
    pub fn buffer_capacity(&self) -> usize {
        MAX_INDEX_BATCH as usize + 64 * 1024
    }

    /// Contiguous bytes the next reply needs, given what is buffered.
    pub fn want(&self, buffered: &[u8]) -> usize {
        frame_want(buffered).min(self.buffer_capacity())
    }

    /// Whether the core awaits a reply (else it has frames to send, or is done).
    pub fn wants_input(&self) -> bool {
        self.ready.is_empty()
            && matches!(
                self.phase,
                Phase::Accept | Phase::ProbeReply | Phase::Index | Phase::Ack | Phase::Report
            )
    }

    /// Whether the session is over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done && self.ready.is_empty()
    }

    /// Whether the session ended after the index (a dry run).
    pub fn is_dry_run(&self) -> bool {
        self.cfg.dry_run
    }

    /// Handles the whole replies at the front of `input`; returns the bytes consumed.
    pub fn handle_input<S: FilesSource + ?Sized>(
        &mut self,
        now: Instant,
        input: &[u8],
        src: &mut S,
    ) -> Result<usize, SessionError> {
        self.now = now;
        let mut used = 0;
        while self.wants_input() {
            let rest = &input[used..];
            if rest.len() < FRAME_HEADER_LEN {
                break;
            }
            let h = FrameHeader::parse(rest).map_err(malformed("frame header"))?;
            self.check_reply(&h)?;
            let end = FRAME_HEADER_LEN + h.length as usize;
            if rest.len() < end {
                break;
            }
            self.reply(h, &rest[FRAME_HEADER_LEN..end], src)?;
            used += end;
            self.consumed += end as u64;
        }
        if let Some(clock) = self.deadline.as_mut() {
            if used > 0 {
                clock.next_frame(now, self.cfg.reply_timeout);
            }
            clock.arrived_of(&input[used..]);
        }
        Ok(used)
    }

    /// When the awaited reply is late.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline.filter(|_| self.wants_input()).map(|c| c.deadline())
    }

    /// Ends the session if the awaited reply is late.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.poll_timeout() {
            Some(d) if now >= d => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error of a reply that did not come in time.
    pub fn timed_out(&self) -> SessionError {
        SessionError::TimedOut {
            what: Timeout::Reply {
                during: self.awaiting(),
                after: self.cfg.reply_timeout,
            },
        }
    }

    /// What the session awaits.
    pub fn awaiting(&self) -> &'static str {
        match self.phase {
            Phase::Accept => "FILES_ACCEPT",
            Phase::ProbeReply => "PROBE_REPLY",
            Phase::Index => "INDEX",
            Phase::Ack => "PLAN acknowledgement",
            Phase::Stream => "file stream",
            Phase::Report => "the report",
            Phase::Repair => "REPAIR",
            Phase::Done => "FILES_END",
        }
    }

    /// The next bytes to send, building more of the stream when nothing
    /// is ready; call [`Self::transmitted`] once they are written.
    pub fn poll_transmit<S: FilesSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
    ) -> Result<Option<Transmit<'_>>, SessionError> {
        self.now = now;
        while self.ready.is_empty() {
            match self.phase {
                Phase::Stream => self.stream_step(src)?,
                Phase::Repair => self.repair_step(src)?,
                _ => break,
            }
        }
        Ok(self.ready.front().map(|r| match *r {
            Ready::Out => Transmit::Parts {
                parts: [&self.out[..], &[], &[]],
                what: "control frame",
            },
            Ready::Batch => Transmit::Parts {
                parts: [&self.batch_hdr[..], &self.batch_head[..], &self.zout[..]],
                what: "BATCH",
            },
            Ready::Raw => Transmit::Parts {
                parts: [&self.raw[..], &[], &[]],
                what: "FILE and CHUNKS frames",
            },
            Ready::Frame(what) => Transmit::Parts {
                parts: [&self.frame_hdr[..], &self.frame[..], &[]],
                what,
            },
        }))
    }

    /// The transmission of [`Self::poll_transmit`] was written.
    pub fn transmitted(&mut self) {
        let n = match self.ready.pop_front() {
            Some(Ready::Out) => {
                let n = self.out.len();
                self.out.clear();
                n
            }
            Some(Ready::Batch) => FRAME_HEADER_LEN + self.batch_head.len() + self.zout.len(),
            Some(Ready::Raw) => {
                let n = self.raw.len();
                self.raw.clear();
                n
            }
            Some(Ready::Frame(_)) => FRAME_HEADER_LEN + self.frame.len(),
            None => 0,
        };
        self.wire_sent += n as u64;
        if self.ready.is_empty() && self.wants_input() {
            // Awaiting a reply from now on.
            self.deadline = Some(FrameClock::new(
                self.now,
                self.cfg.reply_timeout,
                DEFAULT_MIN_FRAME_RATE,
            ));
        }
    }

    /// The next event for the host.
    pub fn poll_event(&mut self) -> Option<FilesSenderEvent> {
        self.events.pop_front()
    }

    /// What was decided and learnt (for the outcome).
    pub fn summary(&self) -> FilesPlanSummary {
        self.summary
    }

    /// Store id and generation from FILES_ACCEPT.
    pub fn accept(&self) -> Option<&FilesAccept> {
        self.accept.as_ref()
    }

    /// Index entries fetched, and those known from the cache before.
    pub fn index_counts(&self) -> (u64, u64) {
        (self.fetched, self.cached)
    }

    /// Entries asked about with PROBE.
    pub fn probed(&self) -> u64 {
        self.probed
    }

    /// Bytes written and bytes consumed.
    pub fn wire_bytes(&self) -> (u64, u64) {
        (self.wire_sent, self.consumed)
    }

    /// Entries left out because they could not be read.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Entries given up on while streaming (FILE_DROP): changed or
    /// unreadable after their FILE was sent. The receiver counts each in
    /// `files_failed` and lists it with the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Warnings so far (items left out, cache trouble).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The receiver's report and its messages, once the session is done
    /// (`None` for a dry run).
    pub fn take_report(&mut self) -> Option<(FilesReport<'static>, String)> {
        self.report.take()
    }

    /// What the receiver removed (or in a dry run would remove), if DELETE went out.
    pub fn take_deletion(&mut self) -> Option<DeletionOutcome> {
        self.deletion.take()
    }

    /// When the session started.
    pub fn started(&self) -> Instant {
        self.started
    }

    fn control(&mut self, ty: FrameType, flags: u16, body: &[u8]) {
        put_frame(&mut self.out, ty, flags, body);
        if self.ready.back() != Some(&Ready::Out) {
            self.ready.push_back(Ready::Out);
        }
    }

    fn check_reply(&self, h: &FrameHeader) -> Result<(), SessionError> {
        let index = self.phase == Phase::Index;
        let bad = if index {
            h.length > MAX_INDEX_BATCH
        } else {
            h.frame_type.is_bulk() || h.length > MAX_CONTROL_BODY
        };
        if bad {
            return Err(FilesViolation::BadReply {
                frame: h.frame_type,
                len: h.length,
                during: self.awaiting(),
            }
            .into());
        }
        Ok(())
    }

    fn unexpected(&self, got: FrameType) -> SessionError {
        let expected = match self.phase {
            Phase::Accept => "FILES_ACCEPT",
            Phase::ProbeReply => "PROBE_REPLY",
            Phase::Index => "INDEX",
            Phase::Ack => "ACK",
            _ => "NAK or FILES_END",
        };
        FilesViolation::UnexpectedReply { expected, got }.into()
    }

    fn reply<S: FilesSource + ?Sized>(
        &mut self,
        h: FrameHeader,
        body: &[u8],
        src: &mut S,
    ) -> Result<(), SessionError> {
        if h.frame_type == FrameType::Error {
            return Err(refusal(body));
        }
        match (self.phase, h.frame_type) {
            (Phase::Accept, FrameType::FilesAccept) => {
                let accept = FilesAccept::parse(body).map_err(malformed("FILES_ACCEPT"))?;
                self.accept = Some(accept);
                self.after_accept(src)
            }
            (Phase::ProbeReply, FrameType::ProbeReply) => {
                let (head, bits) = parse_probe_reply(body).map_err(malformed("PROBE_REPLY"))?;
                let count = head.count as usize;
                let next = self.probe_next;
                if head.first_no != next as u64 || next + count > self.probe_asked.len() {
                    return Err(FilesViolation::ProbeReplyOrder {
                        first: head.first_no,
                        count: head.count,
                        expected: next as u64,
                        asked: self.probe_asked.len() as u64,
                    }
                    .into());
                }
                for j in 0..count {
                    self.items[self.probe_asked[next + j]].held = bits[j / 8] & (1 << (j % 8)) != 0;
                }
                self.probe_next += count;
                if h.flags & FLAG_LAST != 0 {
                    if self.probe_next != self.probe_asked.len() {
                        return Err(FilesViolation::ProbeReplyShort {
                            answered: self.probe_next as u64,
                            asked: self.probe_asked.len() as u64,
                        }
                        .into());
                    }
                    self.probed = self.probe_asked.len() as u64;
                    self.request_index(src);
                }
                Ok(())
            }
            (Phase::Index, FrameType::Index) => {
                if self.index_frame(h.flags, body)? {
                    self.after_index(src);
                }
                Ok(())
            }
            (Phase::Index, FrameType::Batch) => {
                let (raw_len, z) = parse_batch(body).map_err(malformed("BATCH"))?;
                if raw_len > MAX_INDEX_BATCH {
                    return Err(FilesViolation::BadIndex {
                        what: IndexFault::TooLarge { len: raw_len },
                    }
                    .into());
                }
                let mut raw = std::mem::take(&mut self.index_raw);
                raw.resize(raw_len as usize, 0);
                let result = match zstd::bulk::decompress_to_buffer(z, &mut raw[..]) {
                    Ok(n) if n == raw_len as usize => self.index_batch(&raw),
                    _ => Err(FilesViolation::BadIndex {
                        what: IndexFault::Corrupt,
                    }
                    .into()),
                };
                self.index_raw = raw;
                if result? {
                    self.after_index(src);
                }
                Ok(())
            }
            (Phase::Ack, FrameType::Ack) => {
                PlanAck::parse(body).map_err(malformed("ACK"))?;
                self.phase = Phase::Stream;
                self.stream_start = self.now;
                self.last_progress = self.now;
                // Tells the host the stream began (bytes are counted from here).
                self.progress(true);
                Ok(())
            }
            (Phase::Report, FrameType::Nak) => {
                let hashes = parse_nak(body).map_err(malformed("NAK"))?;
                self.wanted.extend(hashes.copied());
                if h.flags & FLAG_LAST != 0 {
                    self.start_repair();
                }
                Ok(())
            }
            (Phase::Report, FrameType::Deleted) if self.delete_sent => {
                let (head, entries) = parse_deleted(body).map_err(malformed("DELETED"))?;
                let d = self.deletion.get_or_insert(DeletionOutcome {
                    status: head.status,
                    count: 0,
                    entries: Vec::new(),
                });
                d.status = head.status;
                for e in entries {
                    let e = e.map_err(malformed("DELETED entry"))?;
                    if d.entries.len() < crate::files::MAX_DELETED_NAMED {
                        d.entries
                            .push((e.kind, String::from_utf8_lossy(e.path).into_owned()));
                    }
                }
                Ok(())
            }
            (Phase::Report, FrameType::FilesEnd)
                if h.flags & FLAG_FILES_REPORT != 0 && self.wanted.is_empty() =>
            {
                let r = FilesReport::parse(body).map_err(malformed("FILES_END report"))?;
                if let Some(d) = self.deletion.as_mut() {
                    d.count = r.files_deleted;
                }
                if !self.cfg.dry_run {
                    self.report = Some((FilesReport { messages: "", ..r }, r.messages.to_string()));
                }
                self.phase = Phase::Done;
                Ok(())
            }
            (_, got) => Err(self.unexpected(got)),
        }
    }

    /// Leaves out the items `src` could not read, with a warning each.
    fn drop_failed(&mut self, failed: Unreadable) {
        if failed.is_empty() {
            return;
        }
        let mut gone = vec![false; self.items.len()];
        self.skipped += failed.len() as u64;
        let mut gone_paths = HashSet::new();
        for (i, why) in failed {
            self.warnings
                .push(format!("skipping {}: {why}", self.items[i].entry.abs.display()));
            gone[i] = true;
            gone_paths.insert(self.items[i].entry.rel.clone());
        }
        // Hard links of a file left out go too: the same inode, unreadable.
        for (i, it) in self.items.iter().enumerate() {
            if it.hard_link.as_ref().is_some_and(|t| gone_paths.contains(t)) && !gone[i] {
                self.warnings.push(format!(
                    "skipping {}: a hard link of a file that could not be read",
                    it.entry.abs.display()
                ));
                self.skipped += 1;
                gone[i] = true;
            }
        }
        let mut k = 0;
        self.items.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
    }

    fn unchunked(&self) -> Vec<usize> {
        (0..self.items.len())
            .filter(|&i| self.items[i].is_file() && self.items[i].recipe.is_none() && !self.items[i].held)
            .collect()
    }

    /// Whole files first: with a store that holds anything, files not yet
    /// chunked are hashed whole and the receiver asked which it holds; only
    /// the rest are chunked. An empty store holds nothing to ask about,
    /// unless the destination directory has files the index does not
    /// describe (`OCCUPIED`): then every file is asked about, chunked or
    /// not (a recipe is of no use against an empty index), and the
    /// receiver indexes the older versions of the files it lacks.
    fn after_accept<S: FilesSource + ?Sized>(&mut self, src: &mut S) -> Result<(), SessionError> {
        let (generation, occupied) = self
            .accept
            .as_ref()
            .map_or((0, false), |a| (a.generation, a.flags & ACCEPT_OCCUPIED != 0));
        if (generation > 0 || occupied) && self.cfg.probe {
            let asked = match generation {
                0 => (0..self.items.len())
                    .filter(|&i| self.items[i].is_file() && !self.items[i].held)
                    .collect(),
                _ => self.unchunked(),
            };
            let todo: Vec<usize> = asked
                .into_iter()
                .filter(|&i| self.items[i].digest.is_none())
                .collect();
            let failed = src.digest(self.items, &todo);
            self.drop_failed(failed);
            if self.queue_probe() {
                self.phase = Phase::ProbeReply;
                return Ok(());
            }
        }
        self.request_index(src);
        Ok(())
    }

    /// PROBE frames for the files hashed whole; false if there are none.
    fn queue_probe(&mut self) -> bool {
        let items = &*self.items;
        let asked: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].is_file() && items[i].digest.is_some_and(|(n, _)| n > 0))
            .collect();
        if asked.is_empty() {
            return false;
        }
        let max_body = MAX_CONTROL_BODY as usize;
        let mut body = Vec::with_capacity(max_body);
        let mut first = 0usize;
        let mut k = 0usize;
        while k < asked.len() {
            body.clear();
            body.extend_from_slice(&[0; PROBE_HEAD_LEN]);
            while k < asked.len() {
                let it = &items[asked[k]];
                let path = it.entry.rel.as_bytes();
                if body.len() + PROBE_ENTRY_FIXED_LEN + path.len() > max_body {
                    break;
                }
                let (size, digest) = it.digest.unwrap_or_default();
                let mut key = [0u8; INDEX_KEY_LEN];
                key.copy_from_slice(&digest[..INDEX_KEY_LEN]);
                ProbeEntry {
                    size,
                    mtime_sec: it.entry.mtime_ns.div_euclid(1_000_000_000) as i64,
                    mtime_nsec: it.entry.mtime_ns.rem_euclid(1_000_000_000) as u32,
                    key,
                    path,
                }
                .emit(&mut body);
                k += 1;
            }
            let head = ProbeHead {
                first_no: first as u64,
                count: (k - first) as u32,
            };
            body[..PROBE_HEAD_LEN].copy_from_slice(&head.emit());
            let flags = if k == asked.len() { FLAG_LAST } else { 0 };
            put_frame(&mut self.batch, FrameType::Probe, flags, &body);
            first = k;
        }
        self.probe_asked = asked;
        self.probe_next = 0;
        // PROBE frames go in BATCH frames of at most the batch target, raw.
        self.flush_batch_all();
        true
    }

    /// Chunks what the receiver lacks — large files later, while they are
    /// sent (STREAMED), the others in the background (`chunk_ahead`) or, if
    /// the host cannot, now — opens the index cache, asks for the index
    /// from the cached generation on.
    fn request_index<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        let mut todo = self.unchunked();
        if let Some(min) = self
            .cfg
            .stream_min
            .filter(|_| !self.cfg.dry_run && !self.cfg.checksum)
        {
            // Large files are chunked while they are sent, not before.
            let items = &mut *self.items;
            todo.retain(|&i| {
                let size = items[i].announced_size();
                let big = size >= min && size > 0;
                items[i].streamed = big;
                !big
            });
        }
        // Files with content are chunked while the index travels and the
        // stream goes out (empty ones need no reading).
        let overlap = self.cfg.stream_min.is_some() && !self.cfg.dry_run && !self.cfg.checksum;
        if overlap {
            todo.retain(|&i| self.items[i].announced_size() == 0);
        }
        let failed = src.chunk(self.items, &todo);
        // (Removes entries: item numbers are final only after this.)
        self.drop_failed(failed);
        if overlap {
            let ahead: Vec<usize> = self
                .unchunked()
                .into_iter()
                .filter(|&i| !self.items[i].streamed)
                .collect();
            if !ahead.is_empty() && src.chunk_ahead(self.items, &ahead) {
                for &i in &ahead {
                    self.items[i].pending = true;
                }
            } else {
                let failed = src.chunk(self.items, &ahead);
                self.drop_failed(failed);
            }
        }
        let (store_id, generation) = self
            .accept
            .as_ref()
            .map_or(([0; 16], 0), |a| (a.store_id, a.generation));
        let (mut cache, warning) = src.open_index(store_id);
        self.warnings.extend(warning);
        if cache.generation() > generation {
            // The store lost entries (a crash dropped a torn tail): start over.
            cache.reset();
        }
        self.cached = cache.len() as u64;
        self.index_from = cache.generation();
        self.cache = Some(cache);
        let from = self.index_from.to_le_bytes();
        self.control(FrameType::IndexRequest, 0, &from[..INDEX_REQUEST_LEN]);
        self.phase = Phase::Index;
    }

    /// One INDEX body into the cache; returns whether it was the last.
    fn index_frame(&mut self, flags: u16, body: &[u8]) -> Result<bool, SessionError> {
        let entries = parse_index(body).map_err(malformed("INDEX"))?;
        let batch: Vec<_> = entries.map(|e| (e.key, e.offset, e.len)).collect();
        self.fetched += batch.len() as u64;
        if let Some(cache) = self.cache.as_mut() {
            cache.extend(self.index_from + self.fetched, batch);
        }
        Ok(flags & FLAG_LAST != 0)
    }

    fn index_batch(&mut self, mut rest: &[u8]) -> Result<bool, SessionError> {
        let mut last = false;
        while !rest.is_empty() {
            let (f, used) = Frame::parse(rest).map_err(malformed("frame in an index BATCH"))?;
            if f.header.frame_type != FrameType::Index || last {
                return Err(FilesViolation::BadIndex {
                    what: IndexFault::Malformed,
                }
                .into());
            }
            last = self.index_frame(f.header.flags, f.body)?;
            rest = &rest[used..];
        }
        Ok(last)
    }

    /// The index is complete: classify every chunk, then PLAN (or stop: a dry run).
    fn after_index<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        let Some(cache) = self.cache.as_ref() else {
            return;
        };
        self.warnings.extend(src.save_index(cache));
        // The totals for PLAN; each file is classified again when its turn
        // comes (`replan`, `collect`), against what was sent before it.
        let (plans, summary, _) = classify(self.items, |h| cache.lookup(h));
        self.plans = plans;
        self.summary = summary;
        if self.cfg.dry_run && self.cfg.delete.is_some() {
            // What --delete would remove needs the tree's names at the receiver.
            self.listing = true;
            self.phase = Phase::Stream;
            return;
        }
        if self.cfg.dry_run {
            self.phase = Phase::Done;
            return;
        }
        // A receiver that holds nothing lacks every byte of the files not
        // chunked yet: they count as literal, so a send that cannot fit is
        // refused before anything is written. Otherwise they may be held
        // already and only say what room to keep.
        let holds_nothing = self.cache.as_ref().is_some_and(|c| c.is_empty());
        let (literal_bytes, pending_bytes) = match holds_nothing {
            true => (summary.literal_bytes + summary.pending_bytes, 0),
            false => (summary.literal_bytes, summary.pending_bytes),
        };
        let plan = Plan {
            entries: summary.entries,
            files: summary.files,
            total_bytes: summary.total_bytes,
            literal_bytes,
            chunks: summary.chunks,
            pending_bytes,
        };
        self.control(FrameType::Plan, 0, &plan.emit());
        self.phase = Phase::Ack;
    }

    /// The frame in `frame`, naming `work` chunk bytes, goes out: small ones
    /// in the BATCH (never more than [`SENDER_FRAME_WORK`] in one), large
    /// ones alone (after the BATCH so far).
    fn queue(&mut self, ty: FrameType, what: &'static str, work: u64) -> Result<(), SessionError> {
        let len = FRAME_HEADER_LEN + self.frame.len();
        if len > BATCH_FRAME_MAX {
            self.flush_batch()?;
            self.frame_hdr = FrameHeader {
                frame_type: ty,
                flags: 0,
                length: u32::try_from(self.frame.len()).map_err(|_| LocalError::FrameTooLarge { what })?,
            }
            .emit();
            self.ready.push_back(Ready::Frame(what));
            return Ok(());
        }
        if self.batch_work + work > SENDER_FRAME_WORK {
            // Leaves only this frame in the batch: below the batch target, so
            // no second BATCH is queued before this one is sent.
            self.flush_batch()?;
        }
        put_frame(&mut self.batch, ty, 0, &self.frame);
        self.batch_work += work;
        if self.batch.len() >= self.batch_target {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// The queued frames, ready to go: as one zstd BATCH with `--compress`;
    /// without it as they are, in one write (compressing a batch of small
    /// files' literals costs the sender more CPU than a fast link saves:
    /// the Linux tree at level 1, ~2 s of a 9 s cold send).
    fn flush_batch(&mut self) -> Result<(), SessionError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        if self.cfg.compress.is_none() {
            // One flush per stream step, sent before the next step: as with
            // `zout`, nothing is waiting in `raw`.
            debug_assert!(self.raw.is_empty());
            std::mem::swap(&mut self.batch, &mut self.raw);
            self.batch.clear();
            self.batch_work = 0;
            self.ready.push_back(Ready::Raw);
            return Ok(());
        }
        let level = self.cfg.compress.unwrap_or(1);
        compress_into(
            &mut self.zctx,
            &mut self.zlevel,
            level,
            &self.batch,
            &mut self.zout,
        )
        .map_err(|source| LocalError::Zstd {
            what: "compressing a batch",
            source,
        })?;
        self.batch_head = batch_head(self.batch.len() as u32);
        self.batch_hdr = FrameHeader {
            frame_type: FrameType::Batch,
            flags: 0,
            length: (self.batch_head.len() + self.zout.len()) as u32,
        }
        .emit();
        self.batch.clear();
        self.batch_work = 0;
        self.ready.push_back(Ready::Batch);
        Ok(())
    }

    /// PROBE frames as control BATCH frames, each at most the batch target raw.
    fn flush_batch_all(&mut self) {
        let raw = std::mem::take(&mut self.batch);
        let level = self.cfg.compress.unwrap_or(1);
        let mut rest = &raw[..];
        while !rest.is_empty() {
            let mut end = 0;
            while end < rest.len() {
                let Ok((_, used)) = Frame::parse(&rest[end..]) else {
                    break;
                };
                if end > 0 && end + used > self.batch_target {
                    break;
                }
                end += used;
            }
            let part = &rest[..end.max(1).min(rest.len())];
            match compress_into(&mut self.zctx, &mut self.zlevel, level, part, &mut self.zout) {
                Ok(_) => {
                    let mut body = batch_head(part.len() as u32).to_vec();
                    body.extend_from_slice(&self.zout);
                    put_frame(&mut self.out, FrameType::Batch, 0, &body);
                }
                // Not compressible here: the frames go as they are.
                Err(_) => self.out.extend_from_slice(part),
            }
            rest = &rest[part.len()..];
        }
        if self.ready.back() != Some(&Ready::Out) {
            self.ready.push_back(Ready::Out);
        }
        self.batch = raw;
        self.batch.clear();
    }

    /// Builds the next frames of the stream: a FILE, or a CHUNKS frame of
    /// the current file, or (all sent) FILES_END.
    fn stream_step<S: FilesSource + ?Sized>(&mut self, src: &mut S) -> Result<(), SessionError> {
        let no = self.next_item;
        if no == self.items.len() {
            self.progress(true);
            self.flush_batch()?;
            self.queue_delete();
            self.control(FrameType::FilesEnd, 0, &[]);
            self.phase = Phase::Report;
            return Ok(());
        }
        match self.next_chunk {
            None => {
                let item = &self.items[no];
                let orphan = !self.listing
                    && item.announced_size() > 0
                    && item
                        .hard_link
                        .as_ref()
                        .is_some_and(|t| self.dropped_paths.contains(t));
                if orphan {
                    // A hard link to a dropped file: dropped too, announced
                    // as a STREAMED file (entries are numbered).
                    let target = self.items[no]
                        .hard_link
                        .take()
                        .map(|t| t.to_string())
                        .unwrap_or_default();
                    self.items[no].streamed = true;
                    self.streaming = Some(Streaming {
                        failed: Some(format!("its hard-link target {target} could not be sent")),
                        ..Streaming::default()
                    });
                } else if self.items[no].pending {
                    self.collect(no, src);
                } else if !self.listing {
                    self.replan(no);
                }
                self.file_frame(no);
                self.queue(FrameType::File, "FILE", 0)?;
                if self.items[no].streamed && !self.listing {
                    if self.streaming.is_none() {
                        self.start_streamed(no, src);
                    }
                    self.next_chunk = Some(0);
                    return Ok(());
                }
                let item = &self.items[no];
                let chunks = item
                    .recipe
                    .as_ref()
                    .filter(|_| !item.held && !self.listing)
                    .map_or(0, |r| r.chunks.len());
                self.next_chunk = (chunks > 0).then_some(0);
                if chunks == 0 {
                    self.end_item();
                }
            }
            Some(i) if self.streaming.is_some() => self.streamed_step(no, i, src)?,
            Some(i) => match self.chunks_frame(no, i, src) {
                Ok((end, work)) => {
                    self.queue(FrameType::Chunks, "CHUNKS", work)?;
                    // Byte-level progress: at most one event per PROGRESS_EVERY.
                    self.done_bytes += work;
                    let total = self.items[no].recipe.as_ref().map_or(0, |r| r.chunks.len());
                    if end == total {
                        self.end_item();
                    } else {
                        self.next_chunk = Some(end);
                        self.progress(false);
                    }
                }
                Err(why) => self.drop_item(no, &why, src)?,
            },
        }
        Ok(())
    }

    /// DELETE, if the session asked for it and every entry could be read
    /// (an entry left out would look extraneous: rsync skips deletion
    /// after I/O errors too).
    fn queue_delete(&mut self) {
        let Some(d) = &self.cfg.delete else {
            return;
        };
        if self.skipped > 0 {
            self.warnings.push(format!(
                "not deleting anything at the receiver: {} entries could not be read",
                self.skipped
            ));
            return;
        }
        let mut body = Vec::new();
        match DeleteRequest::emit(d.root, d.protect.iter().map(String::as_str), &mut body) {
            Ok(()) => {
                self.control(FrameType::Delete, 0, &body);
                self.delete_sent = true;
            }
            Err(_) => self.warnings.push(format!(
                "not deleting anything at the receiver: more than {} exclude patterns, or one longer than {} bytes",
                pfs_wire::files::MAX_DELETE_RULES,
                pfs_wire::files::MAX_PATH_LEN
            )),
        }
    }

    fn end_item(&mut self) {
        let item = &self.items[self.next_item];
        let size = item.size_and_hash().map_or(0, |(n, _)| n);
        if let Some(how) = self.changed.take() {
            self.warnings.push(format!(
                "{}: {how}; every chunk read still matched its plan: sent as scanned",
                item.entry.abs.display()
            ));
        }
        self.done_bytes = self.item_base + size;
        self.item_base = self.done_bytes;
        self.next_item += 1;
        self.next_chunk = None;
        self.progress(false);
    }

    /// The entry being streamed cannot be finished: what is built of its
    /// CHUNKS frame is abandoned and FILE_DROP tells the receiver to
    /// discard the rest; the session goes on with the next entry.
    fn drop_item<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        why: &str,
        src: &mut S,
    ) -> Result<(), SessionError> {
        self.frame.clear();
        FileDrop {
            file_no: no as u64,
            reason: why,
        }
        .emit(&mut self.frame);
        self.queue(FrameType::FileDrop, "FILE_DROP", 0)?;
        self.dropped += 1;
        self.changed = None;
        if let Some(st) = self.streaming.take() {
            self.summary.pending_bytes = self.summary.pending_bytes.saturating_sub(st.pending);
            // Its chunking thread stops instead of reading the rest.
            src.stream_stop();
        }
        // Its hard links must not land on whatever was at its path.
        self.dropped_paths.insert(self.items[no].entry.rel.clone());
        self.end_item();
        Ok(())
    }

    /// Classifies the chunks of entry `no` (chunked before the stream) again,
    /// now that it is its turn: the plan made for PLAN could not know the
    /// chunks of files chunked later, nor which of its literals an earlier
    /// file sends first. KNOWN then names only chunks sent before it.
    fn replan(&mut self, no: usize) {
        let item = &self.items[no];
        if item.held || item.hard_link.is_some() {
            return;
        }
        let (Some(recipe), Some(old)) = (item.recipe.as_ref(), self.plans.get_mut(no)) else {
            return;
        };
        let cache = self.cache.as_ref();
        let lookup = |h: &Hash| cache.and_then(|c| c.lookup(h));
        let mut sum = FilesPlanSummary::default();
        let plan: Vec<ChunkPlan> = recipe
            .chunks
            .iter()
            .map(|c| plan_chunk(c, lookup, &mut self.sent, &mut sum))
            .collect();
        self.summary
            .remove_chunks(&FilesPlanSummary::of_plan(&recipe.chunks, old));
        self.summary.add_chunks(&sum);
        *old = plan;
    }

    /// Entry `no` was chunked in the background: its recipe is collected
    /// and its chunks classified now, in stream order (so KNOWN names only
    /// chunks sent before), and its pending bytes moved to what it sends. A
    /// file that could not be read still needs its FILE (entries are
    /// numbered): it goes STREAMED, then FILE_DROP says why.
    fn collect<S: FilesSource + ?Sized>(&mut self, no: usize, src: &mut S) {
        self.items[no].pending = false;
        let size = self.items[no].announced_size();
        self.summary.pending_bytes = self.summary.pending_bytes.saturating_sub(size);
        if let Err(why) = src.chunk_one(self.items, no) {
            self.items[no].streamed = true;
            self.streaming = Some(Streaming {
                failed: Some(why),
                ..Streaming::default()
            });
            return;
        }
        // Its plan is empty until now: nothing to take back.
        self.replan(no);
    }

    /// The FILE of STREAMED entry `no` is out: its chunks come from the
    /// host as they are cut (or, from a host that cannot stream, all now).
    fn start_streamed<S: FilesSource + ?Sized>(&mut self, no: usize, src: &mut S) {
        let mut st = Streaming {
            pending: self.items[no].announced_size(),
            ..Streaming::default()
        };
        if !src.stream_start(&self.items[no]) {
            let chunked = first_failure(&src.chunk(self.items, &[no]));
            match (chunked, self.items[no].recipe.take()) {
                (Err(why), _) => st.failed = Some(why),
                (Ok(()), Some(r)) => {
                    st.chunks = r.chunks.clone();
                    st.done = Some(r);
                }
                (Ok(()), None) => st.failed = Some("it could not be chunked".into()),
            }
        }
        self.streaming = Some(st);
    }

    /// The next CHUNKS frame of the STREAMED entry `no` from chunk `first`
    /// on (waiting for the host to cut more), or its FILE_DONE.
    fn streamed_step<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        first: usize,
        src: &mut S,
    ) -> Result<(), SessionError> {
        let Some(st) = self.streaming.as_mut() else {
            return Ok(());
        };
        if let Some(why) = st.failed.take() {
            return self.drop_item(no, &why, src);
        }
        if first == st.chunks.len() && st.done.is_none() {
            match src.stream_next(&mut st.chunks) {
                Streamed::More => {}
                Streamed::Done(r) => st.done = Some(r),
                Streamed::Failed(why) => return self.drop_item(no, &why, src),
            }
            if first == st.chunks.len() && st.done.is_none() {
                // Nothing new yet: asked again on the next step.
                return Ok(());
            }
        }
        let size = self.items[no].announced_size();
        if st
            .chunks
            .last()
            .is_some_and(|c| c.offset + u64::from(c.len) > size)
        {
            // Its FILE promised `size` bytes: more would be a protocol error.
            return self.drop_item(
                no,
                &format!("it grew past the {size} bytes it had when scanned"),
                src,
            );
        }
        let cache = self.cache.as_ref();
        while st.plan.len() < st.chunks.len() {
            let c = &st.chunks[st.plan.len()];
            let lookup = |h: &Hash| cache.and_then(|c| c.lookup(h));
            st.plan.push(plan_chunk(c, lookup, &mut self.sent, &mut st.sum));
        }
        if first < st.chunks.len() {
            let compress = self
                .cfg
                .compress
                .map(|level| (&mut self.zctx, &mut self.zlevel, level));
            let mut fill = Fill {
                frame: &mut self.frame,
                zbuf: &mut self.zbuf,
                compress,
                changed: &mut self.changed,
                frame_target: self.frame_target,
            };
            return match fill.chunks(src, &self.items[no], no, &st.chunks, &st.plan, first) {
                Ok((end, work)) => {
                    self.queue(FrameType::Chunks, "CHUNKS", work)?;
                    self.done_bytes += work;
                    self.next_chunk = Some(end);
                    self.progress(false);
                    Ok(())
                }
                Err(why) => self.drop_item(no, &why, src),
            };
        }
        let Some(mut st) = self.streaming.take() else {
            return Ok(());
        };
        let recipe = st.done.take();
        let why = match &recipe {
            // A host bug, not the file's: still, only this file fails.
            Some(r) if r.chunks != st.chunks => Some("its chunks and its recipe disagree".to_string()),
            Some(r) if r.size != size || r.chunks.is_empty() => Some(format!(
                "it has {} bytes, not the {size} it had when scanned",
                r.size
            )),
            Some(_) => None,
            None => Some("its chunking ended without a recipe".to_string()),
        };
        let (Some(recipe), None) = (recipe, why.as_ref()) else {
            // Put back so that dropping it settles its pending bytes.
            self.streaming = Some(st);
            return self.drop_item(no, why.as_deref().unwrap_or("no recipe"), src);
        };
        self.frame.clear();
        let done = FileDone {
            file_no: no as u64,
            chunk_count: u32::try_from(recipe.chunks.len())
                .map_err(|_| LocalError::FrameTooLarge { what: "FILE_DONE" })?,
            file_hash: recipe.file_hash,
        };
        self.frame.extend_from_slice(&done.emit());
        self.queue(FrameType::FileDone, "FILE_DONE", 0)?;
        // The file's pending bytes become what it sent.
        self.summary.pending_bytes = self.summary.pending_bytes.saturating_sub(st.pending);
        self.summary.add_chunks(&st.sum);
        if let Some(p) = self.plans.get_mut(no) {
            *p = st.plan;
        }
        self.items[no].recipe = Some(recipe);
        self.end_item();
        Ok(())
    }

    fn progress(&mut self, last: bool) {
        if !last && self.now.saturating_duration_since(self.last_progress) < PROGRESS_EVERY {
            return;
        }
        self.last_progress = self.now;
        self.events.push_back(FilesSenderEvent::Progress(FilesProgress {
            entries: self.next_item as u64,
            total_entries: self.items.len() as u64,
            bytes: self.done_bytes,
            total_bytes: self.summary.total_bytes,
            wire_bytes: self.wire_sent,
            elapsed: self.now.saturating_duration_since(self.stream_start),
        }));
    }

    /// The FILE body of entry `no` into `frame`.
    fn file_frame(&mut self, no: usize) {
        let item = &self.items[no];
        let e = &item.entry;
        let (kind, link) = super::entry_kind(e);
        let linked = item.hard_link.as_ref().filter(|_| !self.listing);
        let link = linked.map_or(link, |t| t.as_bytes());
        self.xattr_buf.clear();
        if !e.meta.xattrs.is_empty() && !self.listing {
            // Whatever else the frame holds, it stays a control frame.
            let room = MAX_CONTROL_BODY as usize - FILE_FIXED_LEN - e.rel.as_bytes().len() - link.len() - 17;
            let attrs = e.meta.xattrs.iter().map(|(n, v)| (&n[..], &v[..]));
            let left_out = Xattrs::encode(attrs, room, &mut self.xattr_buf);
            if left_out > 0 {
                self.warnings.push(format!(
                    "{}: {left_out} extended attributes not sent (more than one FILE frame holds)",
                    e.abs.display()
                ));
            }
        }
        let (size, file_hash, chunk_count) = match (&item.recipe, item.size_and_hash()) {
            _ if self.listing || linked.is_some() => match e.kind {
                pfs_files::WalkKind::File { size } => (size, [0; 32], 0),
                _ => (0, [0; 32], 0),
            },
            (_, Some((size, hash))) if item.held => (size, hash, 0),
            // Count and hash come in FILE_DONE; the size is the scan's.
            _ if item.streamed => (item.announced_size(), [0; 32], 0),
            (Some(r), _) => (r.size, r.file_hash, r.chunks.len() as u32),
            _ => (0, [0; 32], 0),
        };
        self.frame.clear();
        FileEntry {
            file_no: no as u64,
            kind,
            mode: e.mode,
            mtime_sec: e.mtime_ns.div_euclid(1_000_000_000) as i64,
            mtime_nsec: e.mtime_ns.rem_euclid(1_000_000_000) as u32,
            size,
            chunk_count,
            file_hash,
            path: e.rel.as_bytes(),
            link_target: link,
            held: item.held && !self.listing,
            extra: FileExtra {
                listed: self.listing,
                linked: linked.is_some(),
                streamed: item.streamed && !self.listing && linked.is_none(),
                uid: self.cfg.preserve.owner.then_some(e.meta.uid),
                gid: self.cfg.preserve.group.then_some(e.meta.gid),
                xattrs: Xattrs::parse(&self.xattr_buf).unwrap_or_default(),
            },
        }
        .emit(&mut self.frame);
        debug_assert!(kind != EntryKind::File || chunk_count == 0 || item.recipe.is_some());
    }

    /// One CHUNKS frame of entry `no` from chunk `first` on, into `frame`
    /// (see [`Fill::chunks`]).
    fn chunks_frame<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        first: usize,
        src: &mut S,
    ) -> Result<(usize, u64), String> {
        let item = &self.items[no];
        let Some(recipe) = item.recipe.as_ref() else {
            return Ok((first, 0));
        };
        let compress = self
            .cfg
            .compress
            .map(|level| (&mut self.zctx, &mut self.zlevel, level));
        let mut fill = Fill {
            frame: &mut self.frame,
            zbuf: &mut self.zbuf,
            compress,
            changed: &mut self.changed,
            frame_target: self.frame_target,
        };
        fill.chunks(src, item, no, &recipe.chunks, &self.plans[no], first)
    }

    /// The NAKs are complete: find each named chunk in the files.
    fn start_repair(&mut self) {
        let want: HashSet<Hash> = self.wanted.drain(..).collect();
        let mut found: HashMap<Hash, (usize, u64, u32)> = HashMap::new();
        for (i, item) in self.items.iter().enumerate() {
            if let Some(r) = &item.recipe {
                for c in &r.chunks {
                    if want.contains(&c.hash) {
                        found.entry(c.hash).or_insert((i, c.offset, c.len));
                    }
                }
            }
        }
        let mut list: Vec<_> = found.into_iter().collect();
        list.sort_by_key(|(_, (i, off, _))| (*i, *off));
        self.repairs = list;
        self.repair_next = 0;
        self.phase = Phase::Repair;
    }

    /// The next REPAIR frame: the named chunks' bytes, read again.
    fn repair_step<S: FilesSource + ?Sized>(&mut self, src: &mut S) -> Result<(), SessionError> {
        let frame = &mut self.frame;
        frame.clear();
        frame.extend_from_slice(&[0; CHUNKS_FIXED_LEN]);
        let mut count = 0u32;
        while self.repair_next < self.repairs.len() && frame.len() < self.frame_target {
            let (hash, (i, off, len)) = self.repairs[self.repair_next];
            let compress = self
                .cfg
                .compress
                .map(|level| (&mut self.zctx, &mut self.zlevel, level));
            self.repair_next += 1;
            let chunk = ChunkRef {
                hash,
                offset: off,
                len,
            };
            // Checked whether or not the file changed: bytes that do not
            // match would be refused anyway (and cost the wire).
            let mut changed = Some(String::new());
            let head = frame.len();
            let item = &self.items[i];
            if let Err(why) = push_literal(frame, &mut self.zbuf, src, item, &chunk, compress, &mut changed) {
                // The receiver fails the files that wait for this chunk.
                frame.truncate(head);
                self.warnings
                    .push(format!("{} not repaired: {why}", item.entry.abs.display()));
                continue;
            }
            self.repaired.0 += 1;
            self.repaired.1 += u64::from(len);
            count += 1;
        }
        frame[..CHUNKS_FIXED_LEN].copy_from_slice(
            &ChunksHeader {
                file_no: ChunksHeader::REPAIR,
                count,
            }
            .emit(),
        );
        let last = self.repair_next >= self.repairs.len();
        self.frame_hdr = FrameHeader {
            frame_type: FrameType::Repair,
            flags: if last { FLAG_LAST } else { 0 },
            length: u32::try_from(self.frame.len())
                .map_err(|_| LocalError::FrameTooLarge { what: "REPAIR" })?,
        }
        .emit();
        self.ready.push_back(Ready::Frame("REPAIR"));
        if last {
            self.phase = Phase::Report;
        }
        Ok(())
    }
}

/// Marks the later of the file items that share an inode (`st_nlink` > 1)
/// as hard links of the first one (`-H`): they are never read.
fn link_items(items: &mut [FilesItem]) {
    let mut first: HashMap<(u64, u64), pfs_files::RelPath> = HashMap::new();
    for it in items.iter_mut() {
        let e = &it.entry;
        if !matches!(e.kind, pfs_files::WalkKind::File { .. }) || e.meta.nlink < 2 {
            continue;
        }
        match first.entry((e.dev, e.ino)) {
            std::collections::hash_map::Entry::Occupied(o) => {
                it.hard_link = Some(o.get().clone());
                it.recipe = None;
                it.digest = None;
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(e.rel.clone());
            }
        }
    }
}

/// What building a CHUNKS frame uses of the core (borrowed field by field,
/// so the chunks and plans may live in any other field).
struct Fill<'f> {
    frame: &'f mut Vec<u8>,
    zbuf: &'f mut Vec<u8>,
    compress: Option<(&'f mut Zstd, &'f mut i32, i32)>,
    changed: &'f mut Option<String>,
    frame_target: usize,
}

impl Fill<'_> {
    /// One CHUNKS frame of entry `no` (`item`) from `chunks[first]` on,
    /// each travelling as `plan` says (literal bytes read straight into
    /// the frame: one copy from the page cache); returns the chunk after
    /// the last one in it and the chunk bytes it names (what it makes the
    /// receiver hash), or why the file cannot be sent (unreadable, shorter
    /// than planned, or changed).
    fn chunks<S: FilesSource + ?Sized>(
        &mut self,
        src: &mut S,
        item: &FilesItem,
        no: usize,
        chunks: &[ChunkRef],
        plan: &[ChunkPlan],
        first: usize,
    ) -> Result<(usize, u64), String> {
        let frame = &mut *self.frame;
        frame.clear();
        frame.extend_from_slice(&[0; CHUNKS_FIXED_LEN]);
        let mut i = first;
        let mut work = 0u64;
        let n = chunks.len().min(plan.len());
        while i < n && frame.len() < self.frame_target && work < SENDER_FRAME_WORK {
            let c = &chunks[i];
            work += u64::from(c.len);
            match plan[i] {
                ChunkPlan::Ref { offset } => {
                    emit_entry_head(frame, tag::REF, &c.hash, c.len);
                    frame.extend_from_slice(&offset.to_le_bytes());
                }
                ChunkPlan::Known => emit_entry_head(frame, tag::KNOWN, &c.hash, c.len),
                ChunkPlan::Literal => {
                    let compress = self
                        .compress
                        .as_mut()
                        .map(|(z, l, level)| (&mut **z, &mut **l, *level));
                    push_literal(frame, self.zbuf, src, item, c, compress, self.changed)?;
                }
            }
            i += 1;
        }
        let count = (i - first) as u32;
        frame[..CHUNKS_FIXED_LEN].copy_from_slice(
            &ChunksHeader {
                file_no: no as u64,
                count,
            }
            .emit(),
        );
        Ok((i, work))
    }
}

/// Appends one literal entry: the chunk's bytes read by `src` straight into
/// the frame, or zstd-compressed when that is smaller. Once the file is
/// known to have `changed` since it was scanned, the bytes are checked
/// against the chunk's hash first. An error says why the chunk cannot be
/// sent (the frame then ends in a partial entry).
fn push_literal<S: FilesSource + ?Sized>(
    frame: &mut Vec<u8>,
    zbuf: &mut Vec<u8>,
    src: &mut S,
    item: &FilesItem,
    c: &ChunkRef,
    compress: Option<(&mut Zstd, &mut i32, i32)>,
    changed: &mut Option<String>,
) -> Result<(), String> {
    let (hash, len) = (&c.hash, c.len);
    let head = frame.len();
    emit_entry_head(frame, tag::LITERAL, hash, len);
    let start = frame.len();
    frame.resize(start + len as usize, 0);
    match src.read(item, c.offset, &mut frame[start..]) {
        Ok(Some(how)) => *changed = Some(how),
        Ok(None) => {}
        Err(e) => return Err(e.to_string()),
    }
    if let Some(how) = changed.as_deref() {
        if !hash_matches(&frame[start..], hash) {
            let how = if how.is_empty() { "changed" } else { how };
            return Err(format!(
                "{how}: bytes {}..{} no longer match the chunk planned there",
                c.offset,
                c.offset + u64::from(len)
            ));
        }
    }
    if let Some((zctx, zlevel, level)) = compress {
        // Compression that saves nothing is not worth the receiver's time.
        if let Ok(n) = compress_into(zctx, zlevel, level, &frame[start..], zbuf) {
            if n + 4 < len as usize {
                frame.truncate(head);
                emit_entry_head(frame, tag::ZSTD, hash, len);
                frame.extend_from_slice(&(n as u32).to_le_bytes());
                frame.extend_from_slice(&zbuf[..n]);
            }
        }
    }
    Ok(())
}

/// Compresses `src` into `dst` (replacing its contents) with the session's
/// context, switching its level only when it changes.
fn compress_into(
    zctx: &mut Zstd,
    current: &mut i32,
    level: i32,
    src: &[u8],
    dst: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if *current != level {
        zctx.0.set_compression_level(level)?;
        *current = level;
    }
    dst.clear();
    dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
    zctx.0.compress_to_buffer(src, dst)
}
