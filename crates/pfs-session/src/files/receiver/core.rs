//! The receiver core, sans I/O: whole frames in (from any byte boundary),
//! frames to send, a deadline and host actions out. This file owns the
//! session's phases and the handshake (FILES_HELLO, PROBE, INDEX_REQUEST,
//! PLAN); `stream` beside it owns the file stream and the corrections plane.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use pfs_files::RelPath;
use pfs_store::StoreError;
use pfs_wire::files::{
    parse_batch, parse_index_request, parse_probe, FilesAccept, FilesHello, FilesReport, Hash, IndexEntry,
    Plan, PlanAck, ProbeHead, ACCEPT_OCCUPIED, FLAG_FILES_REPORT, FLAG_LAST, HELLO_CHECKSUM, HELLO_DELETE,
    HELLO_DRY_RUN, PROBE_HEAD_LEN,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, Frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::attrs::Pending;
use super::delete::Deletion;
use super::host::FilesHost;
use super::stream::{Current, Waiting};
use super::{FilesReceiverConfig, FilesReceiverOutcome};
use crate::error::{LimitExceeded, LocalError, Timeout};
use crate::files::{FilesViolation, INDEX_ENTRIES_PER_FRAME};
use crate::framing::{frame_want, refusal, FrameClock};
use crate::SessionError;
use pfs_sys::Usage;

/// Most PROBE entries one session may ask about (the answers are kept
/// until the last PROBE: one byte each).
pub const MAX_PROBE_ENTRIES: usize = 16 << 20;

/// Raw bytes of INDEX frames per BATCH: well inside a sender's receive buffer.
const INDEX_BATCH_RAW: usize = 256 << 10;

/// Where a files session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Awaiting FILES_HELLO.
    Hello,
    /// Awaiting PROBE frames or INDEX_REQUEST.
    Index,
    /// Awaiting PLAN (or the end of a dry run).
    Plan,
    /// FILE, CHUNKS and BATCH frames until FILES_END.
    Stream,
    /// NAKs sent; awaiting REPAIR frames until the one flagged LAST.
    Repair,
    /// Everything placed; the host is to call [`FilesReceiver::report`].
    Finished,
    /// The report was queued, or the sender ended after the index.
    Done,
}

/// What the core tells its host, besides frames to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesReceiverEvent {
    /// FILES_HELLO accepted: the file stream may begin.
    Accepted,
    /// All files placed: call [`FilesReceiver::report`] with this thread's CPU usage.
    Finished,
}

/// Which frames a BATCH may carry where it arrived.
#[derive(Debug, Clone, Copy)]
enum BatchOf {
    Probe,
    Stream,
}

/// Bytes of existing destination files the dest index does not know that
/// one session reads, at most, to index them (the older versions of the
/// files a sender probes): about two seconds of chunking from the page
/// cache here, so a sender waiting for INDEX is not kept long. One PROBE
/// frame also adopts no more than the frame work limit (`max_frame_work`).
pub const ADOPT_MAX_BYTES: u64 = 2 << 30;
/// Chunk records one session adds to the index by adopting files, at most
/// (the index keeps them; a sender's tiny `chunk_avg` must not make 2 GiB
/// into millions of records).
pub const ADOPT_MAX_CHUNKS: u64 = 1 << 18;

/// The receiving side of a files session as a state machine (see the
/// module docs of [`super`]).
#[derive(Debug)]
pub struct FilesReceiver {
    pub(super) handshake_timeout: Duration,
    pub(super) prepare_timeout: Duration,
    pub(super) idle_timeout: Duration,
    pub(super) max_chunks_body: u32,
    pub(super) commit_every: u64,
    /// The session's limits (see [`FilesReceiverConfig`]).
    pub(super) max_session_memory: u64,
    pub(super) max_frame_work: u64,
    pub(super) max_unverified_bytes: u64,
    reservation_limit: (u64, u8),
    /// Bookkeeping bytes kept for the peer so far (see [`Self::charge`]).
    pub(super) memory: u64,
    /// Bytes hashed or decompressed for the frame being handled.
    pub(super) frame_work: u64,
    /// Bytes of REF/KNOWN chunks that did not verify.
    pub(super) unverified: u64,
    /// Store appends (deduplicated or not) since the last commit.
    pub(super) appends: u64,
    phase: Phase,
    /// Sub-directory the sender asked for.
    pub(super) base: Option<RelPath>,
    pub(super) dry_run: bool,
    /// What DELETE needs, in a session whose FILES_HELLO announced it.
    pub(super) deletion: Option<Box<Deletion>>,
    /// Attributes and hard links waiting for their entries.
    pub(super) pending: Pending,
    remote_dir: String,
    /// The sender ended after the index (a dry run).
    ended_early: bool,
    /// Answers to the PROBE entries so far.
    probe_held: Vec<bool>,
    /// The session's chunk parameters (from FILES_HELLO's `chunk_avg`).
    params: pfs_files::ChunkParams,
    /// Bytes of existing destination files this session may still read to
    /// index them, and chunk records it may still add (see
    /// [`ADOPT_MAX_BYTES`], [`ADOPT_MAX_CHUNKS`]).
    adopt_left: u64,
    adopt_chunks_left: u64,
    /// The PROBE flagged LAST arrived.
    probe_last: bool,
    probe_done: bool,
    /// Bytes appended to the store since the last commit.
    pub(super) appended: u64,
    pub(super) current: Option<Current>,
    pub(super) next_no: u64,
    pub(super) waiting: Vec<Waiting>,
    /// Hashes to NAK, once each.
    pub(super) nak: Vec<Hash>,
    pub(super) nak_seen: HashSet<Hash>,
    /// Holes of the waiting files by hash (filled as REPAIRs arrive).
    pub(super) holes_by_hash: HashMap<Hash, Vec<(usize, u64)>>,
    pub(super) report: FilesReport<'static>,
    pub(super) messages: String,
    /// Decompressed zstd chunk.
    pub(super) zbuf: Vec<u8>,
    /// One decompression context per session (a context per chunk costs
    /// more than decompressing a small chunk).
    pub(super) dctx: Zstd,
    /// Decompressed BATCH frames.
    batch_buf: Vec<u8>,
    /// Directory entries received: mode and mtime are set at the end, once
    /// nothing more is written into them (writing changes a directory's mtime).
    pub(super) dir_meta: Vec<(RelPath, i128, u32)>,
    /// Frames to send.
    pub(super) out: Vec<u8>,
    events: VecDeque<FilesReceiverEvent>,
    started: Instant,
    /// Per-frame, absolute deadlines.
    clock: FrameClock,
    /// Bytes consumed: the receiver's wire bytes.
    consumed: u64,
    now: Instant,
}

/// A zstd decompression context (the context itself has no `Debug`).
pub(super) struct Zstd(pub(super) zstd::bulk::Decompressor<'static>);

impl std::fmt::Debug for Zstd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Zstd")
    }
}

pub(super) fn malformed(context: &'static str) -> impl FnOnce(pfs_wire::WireError) -> SessionError {
    move |error| SessionError::Malformed { context, error }
}

/// A reservation for the PLAN refused: `LIMIT` naming the numbers when the
/// store or its filesystem is full (§10.5), this side's failure otherwise.
fn store_full(e: StoreError) -> SessionError {
    match e {
        StoreError::Full { need, free, capacity } => LimitExceeded::StoreFull { need, free, capacity }.into(),
        StoreError::NoSpace { need, .. } => LimitExceeded::DiskFull { need }.into(),
        other => LocalError::Store(other).into(),
    }
}

/// A reservation grown during the stream refused: as [`store_full`], but
/// the store filled after the PLAN.
pub(super) fn store_filled(e: StoreError) -> SessionError {
    match e {
        StoreError::Full { need, free, capacity } => {
            LimitExceeded::StoreFilled { need, free, capacity }.into()
        }
        StoreError::NoSpace { need, .. } => LimitExceeded::DiskFull { need }.into(),
        other => LocalError::Store(other).into(),
    }
}

impl FilesReceiver {
    /// A session awaiting FILES_HELLO, started at `now`.
    pub fn new(cfg: &FilesReceiverConfig, now: Instant) -> Result<Self, SessionError> {
        let dctx = zstd::bulk::Decompressor::new().map_err(|source| LocalError::Zstd {
            what: "decompression context",
            source,
        })?;
        Ok(Self {
            handshake_timeout: cfg.handshake_timeout,
            prepare_timeout: cfg.prepare_timeout,
            idle_timeout: cfg.idle_timeout,
            max_chunks_body: cfg.max_chunks_body,
            commit_every: cfg.commit_every,
            max_session_memory: cfg.max_session_memory,
            max_frame_work: cfg.max_frame_work,
            max_unverified_bytes: cfg.max_unverified_bytes,
            reservation_limit: (cfg.max_reservation, cfg.max_reservation_percent),
            memory: 0,
            frame_work: 0,
            unverified: 0,
            appends: 0,
            phase: Phase::Hello,
            base: None,
            dry_run: false,
            deletion: None,
            pending: Pending::default(),
            remote_dir: String::new(),
            ended_early: false,
            probe_held: Vec::new(),
            params: pfs_files::ChunkParams::default(),
            adopt_left: ADOPT_MAX_BYTES,
            adopt_chunks_left: ADOPT_MAX_CHUNKS,
            probe_last: false,
            probe_done: false,
            appended: 0,
            current: None,
            next_no: 0,
            waiting: Vec::new(),
            nak: Vec::new(),
            nak_seen: HashSet::new(),
            holes_by_hash: HashMap::new(),
            report: FilesReport::default(),
            messages: String::new(),
            zbuf: Vec::new(),
            dctx: Zstd(dctx),
            batch_buf: Vec::new(),
            dir_meta: Vec::new(),
            out: Vec::new(),
            events: VecDeque::new(),
            started: now,
            clock: FrameClock::new(now, cfg.handshake_timeout, cfg.min_frame_rate),
            consumed: 0,
            now,
        })
    }

    /// Largest contiguous unit [`Self::handle_input`] needs: the largest
    /// frame it accepts.
    pub fn buffer_capacity(&self) -> usize {
        self.max_chunks_body as usize + FRAME_HEADER_LEN + 4096
    }

    /// Contiguous bytes the next frame needs, given what is buffered.
    pub fn want(&self, buffered: &[u8]) -> usize {
        frame_want(buffered).min(self.buffer_capacity())
    }

    /// Handles the whole frames at the front of `input` (a frame split
    /// anywhere waits for its rest); returns the bytes consumed. Bodies are
    /// processed where they lie: chunk bytes go from `input` to the host.
    pub fn handle_input<'s, H: FilesHost<'s>>(
        &mut self,
        now: Instant,
        input: &[u8],
        host: &mut H,
    ) -> Result<usize, SessionError> {
        self.now = now;
        let mut used = 0;
        while !matches!(self.phase, Phase::Finished | Phase::Done) {
            let rest = &input[used..];
            if rest.len() < FRAME_HEADER_LEN {
                break;
            }
            let header = FrameHeader::parse(rest).map_err(malformed("frame header"))?;
            self.check_length(&header)?;
            let end = FRAME_HEADER_LEN + header.length as usize;
            if rest.len() < end {
                break;
            }
            // The work budget is per frame on the wire (a BATCH and all it
            // carries count as one).
            self.frame_work = 0;
            self.frame(header, &rest[FRAME_HEADER_LEN..end], host)?;
            used += end;
            self.consumed += end as u64;
        }
        if used > 0 {
            self.clock.next_frame(now, self.phase_timeout());
        }
        if !matches!(self.phase, Phase::Finished | Phase::Done) {
            self.clock.arrived_of(&input[used..]);
        }
        Ok(used)
    }

    /// Frames to send, if any; call [`Self::transmitted`] once they are sent.
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// The bytes of [`Self::poll_transmit`] were sent.
    pub fn transmitted(&mut self) {
        self.out.clear();
    }

    /// The next event for the host.
    pub fn poll_event(&mut self) -> Option<FilesReceiverEvent> {
        self.events.pop_front()
    }

    /// When the session times out unless input arrives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!matches!(self.phase, Phase::Finished | Phase::Done)).then(|| self.clock.deadline())
    }

    /// Ends the session if its deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error of a session whose deadline passed.
    pub fn timed_out(&self) -> SessionError {
        SessionError::TimedOut {
            what: Timeout::Idle {
                during: self.awaiting(),
                after: self.phase_timeout(),
            },
        }
    }

    /// The peer closed its side. `mid_frame`: bytes of an unfinished frame
    /// were left. A sender may stop after the index (a dry run); anywhere
    /// else it is an error.
    pub fn handle_close(&mut self, now: Instant, mid_frame: bool) -> Result<(), SessionError> {
        match self.phase {
            Phase::Index | Phase::Plan if !mid_frame => {
                self.now = now;
                self.ended_early = true;
                self.phase = Phase::Done;
                Ok(())
            }
            Phase::Done => Ok(()),
            _ => Err(SessionError::PeerClosed {
                during: self.awaiting(),
            }),
        }
    }

    /// What the session awaits.
    pub fn awaiting(&self) -> &'static str {
        match self.phase {
            Phase::Hello => "FILES_HELLO",
            Phase::Index => "INDEX_REQUEST",
            Phase::Plan => "PLAN",
            Phase::Stream => "file stream",
            Phase::Repair => "REPAIR",
            Phase::Finished | Phase::Done => "FILES_END",
        }
    }

    /// Whether the session is over (its last frames may still be in
    /// [`Self::poll_transmit`]).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Queues the FILES_END report, with this side's CPU `usage` for the session.
    pub fn report(&mut self, now: Instant, usage: Usage) {
        if self.phase != Phase::Finished {
            return;
        }
        self.now = now;
        self.report.wire_bytes = self.consumed;
        self.report.elapsed_ns = (now - self.started).as_nanos() as u64;
        self.report.user_us = usage.user_us;
        self.report.sys_us = usage.sys_us;
        let mut body = Vec::with_capacity(256 + self.messages.len());
        FilesReport {
            messages: &self.messages,
            ..self.report
        }
        .emit(&mut body);
        put_frame(&mut self.out, FrameType::FilesEnd, FLAG_FILES_REPORT, &body);
        self.phase = Phase::Done;
    }

    /// The session's result, once [`Self::is_done`].
    pub fn outcome(&self) -> FilesReceiverOutcome {
        let mut report = self.report;
        report.wire_bytes = self.consumed;
        report.elapsed_ns = (self.now - self.started).as_nanos() as u64;
        FilesReceiverOutcome {
            report,
            messages: self.messages.clone(),
            dry_run: self.ended_early || self.dry_run,
            remote_dir: self.remote_dir.clone(),
        }
    }

    fn phase_timeout(&self) -> Duration {
        match self.phase {
            Phase::Hello => self.handshake_timeout,
            // The sender hashes and chunks what the receiver lacks between
            // its PROBE answers and its PLAN: minutes for a large tree.
            Phase::Index | Phase::Plan => self.handshake_timeout.max(self.prepare_timeout),
            _ => self.idle_timeout,
        }
    }

    /// A frame longer than its type allows is refused from its header,
    /// before its body is awaited.
    fn check_length(&self, h: &FrameHeader) -> Result<(), SessionError> {
        let limit = if h.frame_type.is_bulk() {
            self.max_chunks_body
        } else {
            MAX_CONTROL_BODY
        };
        if h.length > limit {
            return Err(FilesViolation::FrameTooLarge {
                frame: h.frame_type,
                len: h.length,
                limit,
            }
            .into());
        }
        Ok(())
    }

    /// One whole frame, by phase.
    fn frame<'s, H: FilesHost<'s>>(
        &mut self,
        h: FrameHeader,
        body: &[u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        let ty = h.frame_type;
        if ty == FrameType::Error {
            return Err(refusal(body));
        }
        match (self.phase, ty) {
            (Phase::Hello, FrameType::FilesHello) => self.hello(body, host),
            (Phase::Index, FrameType::Probe | FrameType::Batch) if !self.probe_done => {
                if ty == FrameType::Batch {
                    self.batch(body, BatchOf::Probe, host)?;
                } else {
                    self.probe_frame(h.flags, body, host)?;
                }
                if self.probe_last {
                    self.probe_reply();
                    self.probe_done = true;
                }
                Ok(())
            }
            (Phase::Index, FrameType::IndexRequest) => {
                let from = parse_index_request(body).map_err(malformed("INDEX_REQUEST"))?;
                self.send_index(from, host)?;
                self.phase = Phase::Plan;
                if self.dry_run && self.deletion.is_some() {
                    // A dry run of --delete: the listing streams without a PLAN.
                    self.phase = Phase::Stream;
                    self.clock.next_frame(self.now, self.idle_timeout);
                }
                Ok(())
            }
            (Phase::Plan, FrameType::Plan) => self.plan(body, host),
            (Phase::Stream, FrameType::Batch) => self.batch(body, BatchOf::Stream, host),
            (
                Phase::Stream,
                FrameType::File | FrameType::Chunks | FrameType::FileDrop | FrameType::FileDone,
            ) => self.stream_frame(ty, body, host),
            (Phase::Stream, FrameType::FilesEnd) if h.flags == 0 && body.is_empty() => self.files_end(host),
            (Phase::Stream, FrameType::Delete) => self.delete_frame(body),
            (Phase::Stream, _) => Err(FilesViolation::NotAllowed {
                frame: ty,
                place: "while files stream",
            }
            .into()),
            (Phase::Repair, FrameType::Repair) => self.repair_frame(h.flags, body, host),
            (_, got) => Err(FilesViolation::Unexpected {
                expected: self.awaiting(),
                got,
            }
            .into()),
        }
    }

    fn hello<'s, H: FilesHost<'s>>(&mut self, body: &[u8], host: &mut H) -> Result<(), SessionError> {
        let hello = FilesHello::parse(body).map_err(malformed("FILES_HELLO"))?;
        if hello.auth_method != 0 || !hello.auth.is_empty() {
            return Err(FilesViolation::Auth {
                method: hello.auth_method,
            }
            .into());
        }
        self.remote_dir = String::from_utf8_lossy(hello.remote_dir).into_owned();
        if !hello.remote_dir.is_empty() {
            let dir = RelPath::parse(hello.remote_dir)
                .and_then(|d| {
                    if d.is_reserved() {
                        return Err(pfs_files::PathError::Reserved);
                    }
                    Ok(d)
                })
                .map_err(|error| FilesViolation::RemoteDir {
                    dir: self.remote_dir.clone(),
                    error,
                })?;
            self.base = Some(dir);
        }
        self.dry_run = hello.flags & HELLO_DRY_RUN != 0;
        if hello.flags & HELLO_DELETE != 0 {
            self.deletion = Some(Box::default());
        }
        // With --checksum, files are hashed with the sender's chunk
        // parameters (the file hash depends on them); a value that is not
        // one only makes the hashes differ (files are rebuilt), so the
        // default stands in.
        let params = pfs_files::ChunkParams::new(hello.chunk_avg).unwrap_or_default();
        self.params = params;
        host.set_session(params, hello.flags & HELLO_CHECKSUM != 0);
        let info = host.store_info();
        // Only an empty index makes a sender skip its PROBE; with entries
        // it probes anyway, and the flag is left out for senders from
        // before it (they refuse a non-zero reserved byte).
        let occupied = info.generation == 0 && host.occupied(self.base.as_ref());
        let accept = FilesAccept {
            flags: if occupied { ACCEPT_OCCUPIED } else { 0 },
            store_id: info.id,
            generation: info.generation,
            capacity: info.capacity,
            free: info.free,
            max_chunks_body: self.max_chunks_body,
            auth_method: 0,
        };
        put_frame(&mut self.out, FrameType::FilesAccept, 0, &accept.emit());
        self.phase = Phase::Index;
        self.events.push_back(FilesReceiverEvent::Accepted);
        Ok(())
    }

    /// A BATCH: decompress (bounded by `max_chunks_body`), then its frames
    /// in order, with the checks they get alone.
    fn batch<'s, H: FilesHost<'s>>(
        &mut self,
        body: &[u8],
        of: BatchOf,
        host: &mut H,
    ) -> Result<(), SessionError> {
        let (raw_len, z) = parse_batch(body).map_err(malformed("BATCH"))?;
        if raw_len > self.max_chunks_body {
            return Err(FilesViolation::BatchTooLarge {
                raw_len,
                limit: self.max_chunks_body,
            }
            .into());
        }
        self.work(u64::from(raw_len))?;
        let mut buf = std::mem::take(&mut self.batch_buf);
        buf.clear();
        buf.resize(raw_len as usize, 0);
        let result = match self.dctx.0.decompress_to_buffer(z, &mut buf[..]) {
            Ok(n) if n == raw_len as usize => self.batch_frames(&buf, of, host),
            _ => Err(FilesViolation::BatchLength.into()),
        };
        self.batch_buf = buf;
        result
    }

    fn batch_frames<'s, H: FilesHost<'s>>(
        &mut self,
        mut raw: &[u8],
        of: BatchOf,
        host: &mut H,
    ) -> Result<(), SessionError> {
        while !raw.is_empty() {
            let (frame, used) = Frame::parse(raw).map_err(malformed("frame in a BATCH"))?;
            let ty = frame.header.frame_type;
            match (of, ty) {
                (BatchOf::Probe, FrameType::Probe) => {
                    self.probe_frame(frame.header.flags, frame.body, host)?
                }
                (BatchOf::Probe, other) => {
                    return Err(FilesViolation::NotAllowed {
                        frame: other,
                        place: "in a BATCH of PROBE frames",
                    }
                    .into())
                }
                (BatchOf::Stream, _) => self.stream_frame(ty, frame.body, host)?,
            }
            raw = &raw[used..];
        }
        Ok(())
    }

    /// One PROBE body: whether this receiver holds each file (§10.10).
    fn probe_frame<'s, H: FilesHost<'s>>(
        &mut self,
        flags: u16,
        body: &[u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        if self.probe_last {
            return Err(FilesViolation::ProbeAfterLast.into());
        }
        let (head, entries) = parse_probe(body).map_err(malformed("PROBE"))?;
        if head.first_no != self.probe_held.len() as u64 {
            return Err(FilesViolation::ProbeOrder {
                first: head.first_no,
                expected: self.probe_held.len() as u64,
            }
            .into());
        }
        if self.probe_held.len() + head.count as usize > MAX_PROBE_ENTRIES {
            return Err(FilesViolation::ProbeLimit {
                max: MAX_PROBE_ENTRIES,
            }
            .into());
        }
        self.charge(u64::from(head.count))?;
        let mut adopted = false;
        // Adopting is work this frame makes the receiver do, within the
        // same limit as hashing (skipped, not refused, past it).
        let mut frame_left = self.max_frame_work.saturating_sub(self.frame_work);
        for e in entries {
            let e = e.map_err(malformed("PROBE entry"))?;
            // A path that is not valid is not held.
            let Ok(rel) = self.full_path(e.path) else {
                self.probe_held.push(false);
                continue;
            };
            let mtime_ns = i128::from(e.mtime_sec) * 1_000_000_000 + i128::from(e.mtime_nsec);
            let mut held = host.holds(&rel, e.size, mtime_ns, &e.key);
            let budget = self.adopt_left.min(frame_left);
            // A file's chunks, at most: its size over the smallest chunk.
            let chunk_room = self
                .adopt_chunks_left
                .saturating_mul(u64::from(self.params.min()));
            if !held && budget > 0 && !self.dry_run {
                // The file at that path is an older version, most likely:
                // its chunks may serve the new one (rsync's basis file),
                // or it is the same bytes under another mtime.
                let max = budget.min(chunk_room);
                let (read, same) = host.adopt(&rel, &self.params, max, (e.size, &e.key));
                self.adopt_left = self.adopt_left.saturating_sub(read);
                frame_left = frame_left.saturating_sub(read);
                self.adopt_chunks_left = self
                    .adopt_chunks_left
                    .saturating_sub(read.div_ceil(u64::from(self.params.min())));
                adopted |= read > 0;
                held = same;
            }
            self.probe_held.push(held);
        }
        if adopted {
            self.commit(host)?;
        }
        self.probe_last = flags & FLAG_LAST != 0;
        Ok(())
    }

    /// PROBE_REPLY frames: the bitmap of held entries, in order.
    fn probe_reply(&mut self) {
        let per_frame = (MAX_CONTROL_BODY as usize - PROBE_HEAD_LEN) * 8;
        let held = std::mem::take(&mut self.probe_held);
        let mut body = Vec::with_capacity(MAX_CONTROL_BODY as usize);
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
            put_frame(
                &mut self.out,
                FrameType::ProbeReply,
                if last { FLAG_LAST } else { 0 },
                &body,
            );
            if last {
                return;
            }
        }
    }

    /// The index entries from `from` on: INDEX frames of 20-byte entries,
    /// packed into zstd BATCH frames of up to [`INDEX_BATCH_RAW`] bytes
    /// (offsets and lengths compress; the 8-byte keys do not).
    fn send_index<'s, H: FilesHost<'s>>(&mut self, from: u64, host: &mut H) -> Result<(), SessionError> {
        let entries = host.index_since(from);
        let mut raw = Vec::with_capacity(1 << 20);
        let mut body = Vec::with_capacity(MAX_CONTROL_BODY as usize);
        let mut z = Vec::new();
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
            put_frame(
                &mut raw,
                FrameType::Index,
                if last { FLAG_LAST } else { 0 },
                &body,
            );
            if last || raw.len() >= INDEX_BATCH_RAW {
                z.clear();
                z.extend_from_slice(&pfs_wire::files::batch_head(raw.len() as u32));
                let head = z.len();
                z.resize(head + zstd::zstd_safe::compress_bound(raw.len()), 0);
                let n = zstd::bulk::compress_to_buffer(&raw, &mut z[head..], 1).map_err(|source| {
                    LocalError::Zstd {
                        what: "compressing the index",
                        source,
                    }
                })?;
                z.truncate(head + n);
                put_frame(&mut self.out, FrameType::Batch, 0, &z);
                raw.clear();
            }
            if last {
                return Ok(());
            }
        }
    }

    /// Reserves the plan's new bytes, or refuses before anything is written.
    fn plan<'s, H: FilesHost<'s>>(&mut self, body: &[u8], host: &mut H) -> Result<(), SessionError> {
        if self.dry_run {
            return Err(FilesViolation::PlanInDryRun.into());
        }
        let plan = Plan::parse(body).map_err(malformed("PLAN"))?;
        let info = host.store_info();
        if plan.literal_bytes > info.free {
            // Refused before anything is written, as before: the plan cannot fit.
            return Err(LimitExceeded::StoreFull {
                need: plan.literal_bytes,
                free: info.free,
                capacity: info.capacity,
            }
            .into());
        }
        // Only `literal_bytes` must fit (§10.5). Files not chunked yet
        // (`pending_bytes`) may be mostly held already: they refuse nothing,
        // and get room reserved up front only while the store's filesystem
        // has it (one session holds at most its share reserved); the rest
        // is reserved as their new bytes arrive (take_literal grows it).
        let limit = self.reservation_limit(info.capacity);
        let want = plan
            .literal_bytes
            .saturating_add(plan.pending_bytes.min(info.free - plan.literal_bytes))
            .min(limit);
        let needed = plan.literal_bytes.min(limit);
        let reserved = match host.reserve(want) {
            Ok(()) => want,
            Err(_) if want > needed => {
                host.reserve(needed).map_err(store_full)?;
                needed
            }
            Err(e) => return Err(store_full(e)),
        };
        self.appended = 0;
        let ack = PlanAck {
            reserved,
            free: host.store_info().free,
        };
        put_frame(&mut self.out, FrameType::Ack, 0, &ack.emit());
        self.phase = Phase::Stream;
        self.clock.next_frame(self.now, self.idle_timeout);
        Ok(())
    }

    /// FILES_END: the last file ends; NAK what is missing, or finish.
    fn files_end<'s, H: FilesHost<'s>>(&mut self, host: &mut H) -> Result<(), SessionError> {
        self.end_file(host)?;
        self.commit(host)?;
        if self.nak.is_empty() {
            self.finish_all(host);
            return Ok(());
        }
        let per_frame = MAX_CONTROL_BODY as usize / 32;
        let naks = std::mem::take(&mut self.nak);
        let mut body = Vec::with_capacity(MAX_CONTROL_BODY as usize);
        let mut batches = naks.chunks(per_frame).peekable();
        while let Some(batch) = batches.next() {
            body.clear();
            body.extend(batch.iter().flatten());
            let flags = if batches.peek().is_none() { FLAG_LAST } else { 0 };
            put_frame(&mut self.out, FrameType::Nak, flags, &body);
        }
        self.phase = Phase::Repair;
        Ok(())
    }

    /// Everything placed: the waiting files finished, directories' metadata
    /// set; the report is due.
    pub(super) fn finish_all<'s, H: FilesHost<'s>>(&mut self, host: &mut H) {
        self.finish_waiting(host);
        self.make_links(host);
        // Before directories get their mtimes: removing changes them.
        self.delete_extraneous(host);
        // Deepest first, so setting a child does not disturb its parent's mtime.
        for (rel, mtime_ns, mode) in std::mem::take(&mut self.dir_meta).into_iter().rev() {
            if let Err(e) = host.set_dir_meta(&rel, mtime_ns, mode) {
                self.note(&format!("{rel}: directory mode/mtime: {e}\n"));
            }
        }
        self.report.store_generation = host.store_info().generation;
        self.phase = Phase::Finished;
        self.events.push_back(FilesReceiverEvent::Finished);
    }

    /// Most store space this session may hold reserved in a store of `capacity`.
    pub(super) fn reservation_limit(&self, capacity: u64) -> u64 {
        let (max, percent) = self.reservation_limit;
        let share = u128::from(capacity) * u128::from(percent.min(100)) / 100;
        max.min(share as u64)
    }

    /// Accounts `bytes` more of bookkeeping kept because of what the peer
    /// sent; past the session's limit the session ends (`LIMIT`).
    pub(super) fn charge(&mut self, bytes: u64) -> Result<(), SessionError> {
        self.memory += bytes;
        if self.memory > self.max_session_memory {
            return Err(LimitExceeded::Peer {
                what: "session memory (bytes kept for chunks awaiting REPAIR, files waiting, directories, PROBE answers)",
                asked: self.memory,
                limit: self.max_session_memory,
            }
            .into());
        }
        Ok(())
    }

    /// Accounts `bytes` more hashed or decompressed for the frame being
    /// handled; past the limit the session ends (`LIMIT`), so one frame
    /// costs a bounded amount of CPU however few bytes it is on the wire.
    pub(super) fn work(&mut self, bytes: u64) -> Result<(), SessionError> {
        self.frame_work += bytes;
        if self.frame_work > self.max_frame_work {
            return Err(LimitExceeded::Peer {
                what: "bytes one frame makes the receiver hash or decompress",
                asked: self.frame_work,
                limit: self.max_frame_work,
            }
            .into());
        }
        Ok(())
    }

    /// A line for the report beyond the per-entry failures, within the
    /// report's text limit.
    pub(super) fn note(&mut self, line: &str) {
        if self.messages.len() + line.len() <= pfs_wire::files::MAX_REPORT_TEXT {
            self.messages.push_str(line);
        }
    }

    /// `path` from the sender, beneath the remote directory it asked for
    /// and outside the receiver's state directory.
    pub(super) fn full_path(&self, path: &[u8]) -> Result<RelPath, pfs_files::PathError> {
        let rel = RelPath::parse(path)?;
        let rel = match &self.base {
            None => rel,
            Some(b) => b.join(rel.as_bytes())?,
        };
        if rel.is_reserved() {
            return Err(pfs_files::PathError::Reserved);
        }
        Ok(rel)
    }
}
