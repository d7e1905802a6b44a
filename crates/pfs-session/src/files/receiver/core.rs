//! The receiver core, sans I/O: whole frames in (from any byte boundary),
//! frames to send, a deadline and host actions out. This file owns the
//! session's phases and the handshake (FILES_HELLO, PROBE, INDEX_REQUEST,
//! PLAN); `stream` beside it owns the file stream and the corrections plane.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use pfs_store::StoreError;
use pfs_wire::files::{
    parse_batch, parse_index_request, FilesAccept, FilesHello, FilesReport, IndexEntry, Plan, PlanAck,
    TopMtime, ACCEPT_OCCUPIED, FLAG_FILES_REPORT, FLAG_LAST, HELLO_CHECKSUM, HELLO_DELETE, HELLO_DRY_RUN,
    HELLO_NO_SPARSE,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, Frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::attrs::Pending;
use super::budget::Budget;
use super::deadline::Deadlines;
use super::delete::Deletion;
use super::host::FilesHost;
use super::inflate::Inflate;
use super::probe::ProbeAnswers;
use super::repair::Corrections;
use super::scope::Scope;
use super::stats::Stats;
use super::stream::Stream;
use super::{FilesReceiverConfig, FilesReceiverOutcome};
use crate::error::{LimitExceeded, LocalError, Timeout};
use crate::files::{FilesViolation, INDEX_ENTRIES_PER_FRAME};
use crate::framing::{frame_want, refusal};
use crate::SessionError;
use pfs_sys::Usage;

/// Most PROBE entries one session may ask about (the answers are kept
/// until the last PROBE: one byte each).
pub const MAX_PROBE_ENTRIES: usize = 16 << 20;

/// Raw bytes of INDEX frames per BATCH: well inside a sender's receive buffer.
const INDEX_BATCH_RAW: usize = 256 << 10;

/// Where a files session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
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
/// module docs of [`super`]), made of named parts: the session's
/// `Budget`, its `Deadlines`, the `Scope` FILES_HELLO asked for, the
/// `ProbeAnswers`, the file `Stream` being reassembled, the
/// `Corrections` (NAKs, files waiting for REPAIR), DELETE's `Deletion`,
/// the attributes and links waiting for their entries, the `Inflate`
/// buffers and the `Stats` of the report.
///
/// # Call contract
/// The host (see [`super::receive_files`]) loops:
/// 1. [`Self::handle_input`] with `now` and the bytes buffered (from any
///    byte boundary; it returns how many it consumed), doing the host
///    actions through its [`FilesHost`];
/// 2. [`Self::poll_event`] until `None`: on
///    [`FilesReceiverEvent::Finished`] it calls [`Self::report`] with its
///    CPU usage;
/// 3. [`Self::poll_transmit`]: it writes those bytes, then calls
///    [`Self::transmitted`];
/// 4. once [`Self::is_done`], [`Self::outcome`]; else it reads at most
///    until [`Self::poll_timeout`] ([`Self::want`] bytes make the next
///    frame whole), reports a closed peer with [`Self::handle_close`], and
///    calls [`Self::handle_timeout`].
///
/// An error ends the session; the host tells the peer when
/// [`SessionError::tell_peer`] says so.
#[derive(Debug)]
pub struct FilesReceiver {
    phase: Phase,
    /// The time of the last call that passed one.
    now: Instant,
    /// The sender ended after the index (a dry run).
    ended_early: bool,
    /// Limits and what the session used of them.
    pub(super) budget: Budget,
    deadlines: Deadlines,
    /// What FILES_HELLO asked for.
    pub(super) scope: Scope,
    pub(super) probe: ProbeAnswers,
    /// The file being rebuilt, and what the stream left for the end.
    pub(super) stream: Stream,
    /// NAKs and files waiting for REPAIRs.
    pub(super) repairs: Corrections,
    /// What DELETE needs, in a session whose FILES_HELLO announced it.
    pub(super) deletion: Option<Deletion>,
    /// Attributes and hard links waiting for their entries.
    pub(super) attrs: Pending,
    pub(super) inflate: Inflate,
    pub(super) stats: Stats,
    /// Frames to send.
    pub(super) out: Vec<u8>,
    events: VecDeque<FilesReceiverEvent>,
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
        Ok(Self {
            phase: Phase::Hello,
            now,
            ended_early: false,
            budget: Budget::new(cfg),
            deadlines: Deadlines::new(cfg, now),
            scope: Scope::default(),
            probe: ProbeAnswers::default(),
            stream: Stream::new(cfg.commit_every),
            repairs: Corrections::default(),
            deletion: None,
            attrs: Pending::default(),
            inflate: Inflate::new()?,
            stats: Stats::new(now),
            out: Vec::new(),
            events: VecDeque::new(),
        })
    }

    /// Largest contiguous unit [`Self::handle_input`] needs: the largest
    /// frame it accepts.
    pub fn buffer_capacity(&self) -> usize {
        self.budget.max_chunks_body as usize + FRAME_HEADER_LEN + 4096
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
            self.budget.new_frame();
            self.frame(header, &rest[FRAME_HEADER_LEN..end], host)?;
            used += end;
            self.stats.consumed += end as u64;
        }
        if used > 0 {
            self.deadlines.clock.next_frame(now, self.phase_timeout());
        }
        if !matches!(self.phase, Phase::Finished | Phase::Done) {
            self.deadlines.clock.arrived_of(&input[used..]);
        }
        Ok(used)
    }

    /// Frames to send, if any; call [`Self::transmitted`] once they are sent.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// The bytes of [`Self::poll_transmit`] were sent.
    pub fn transmitted(&mut self) {
        self.out.clear();
    }

    /// The next event for the host.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<FilesReceiverEvent> {
        self.events.pop_front()
    }

    /// When the session times out unless input arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!matches!(self.phase, Phase::Finished | Phase::Done)).then(|| self.deadlines.clock.deadline())
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
        self.stats.report.wire_bytes = self.stats.consumed;
        self.stats.report.elapsed_ns = (now - self.stats.started).as_nanos() as u64;
        self.stats.report.user_us = usage.user_us;
        self.stats.report.sys_us = usage.sys_us;
        let mut body = Vec::with_capacity(256 + self.stats.messages.len());
        FilesReport {
            messages: &self.stats.messages,
            ..self.stats.report
        }
        .emit(&mut body);
        put_frame(&mut self.out, FrameType::FilesEnd, FLAG_FILES_REPORT, &body);
        self.phase = Phase::Done;
    }

    /// The session's result, once [`Self::is_done`].
    pub fn outcome(&self) -> FilesReceiverOutcome {
        let mut report = self.stats.report;
        report.wire_bytes = self.stats.consumed;
        report.elapsed_ns = (self.now - self.stats.started).as_nanos() as u64;
        FilesReceiverOutcome {
            report,
            messages: self.stats.messages.clone(),
            dry_run: self.ended_early || self.scope.dry_run,
            remote_dir: self.scope.remote_dir.clone(),
        }
    }

    fn phase_timeout(&self) -> Duration {
        self.deadlines.of(self.phase)
    }

    /// A frame longer than its type allows is refused from its header,
    /// before its body is awaited.
    fn check_length(&self, h: &FrameHeader) -> Result<(), SessionError> {
        let limit = if h.frame_type.is_bulk() {
            self.budget.max_chunks_body
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
            (Phase::Index, FrameType::Probe | FrameType::Batch) if !self.probe.done => {
                if ty == FrameType::Batch {
                    self.batch(body, BatchOf::Probe, host)?;
                } else {
                    self.probe_frame(h.flags, body, host)?;
                }
                if self.probe.reply_due() {
                    self.probe.reply(&mut self.out);
                }
                Ok(())
            }
            (Phase::Index, FrameType::IndexRequest) => {
                let from = parse_index_request(body).map_err(malformed("INDEX_REQUEST"))?;
                self.send_index(from, host)?;
                self.phase = Phase::Plan;
                if self.scope.dry_run && self.deletion.is_some() {
                    // A dry run of --delete: the listing streams without a PLAN.
                    self.phase = Phase::Stream;
                    self.deadlines.stream_from(self.now);
                }
                Ok(())
            }
            (Phase::Plan, FrameType::Plan) => self.plan(body, host),
            (Phase::Stream, FrameType::Batch) => self.batch(body, BatchOf::Stream, host),
            (
                Phase::Stream,
                FrameType::File | FrameType::Chunks | FrameType::FileDrop | FrameType::FileDone,
            ) => self.stream_frame(ty, body, host),
            (Phase::Stream, FrameType::FilesEnd) if h.flags == 0 => {
                let top = TopMtime::parse_end(body).map_err(malformed("FILES_END"))?;
                self.stream.top_mtime = top.map(|t| t.ns());
                self.files_end(host)
            }
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
        self.scope.set_remote_dir(hello.remote_dir)?;
        self.scope.dry_run = hello.flags & HELLO_DRY_RUN != 0;
        if hello.flags & HELLO_DELETE != 0 {
            self.deletion = Some(Deletion::default());
        }
        // With --checksum, files are hashed with the sender's chunk
        // parameters (the file hash depends on them); a value that is not
        // one only makes the hashes differ (files are rebuilt), so the
        // default stands in.
        let params = pfs_files::ChunkParams::new(hello.chunk_avg).unwrap_or_default();
        self.scope.params = params;
        self.scope.sparse = hello.flags & HELLO_NO_SPARSE == 0;
        host.set_session(params, hello.flags & HELLO_CHECKSUM != 0, self.scope.sparse);
        let info = host.store_info();
        // Only an empty index makes a sender skip its PROBE; with entries
        // it probes anyway, and the flag is left out for senders from
        // before it (they refuse a non-zero reserved byte).
        let occupied = info.generation == 0 && host.occupied(self.scope.base.as_ref());
        let accept = FilesAccept {
            flags: if occupied { ACCEPT_OCCUPIED } else { 0 },
            store_id: info.id,
            generation: info.generation,
            capacity: info.capacity,
            free: info.free,
            max_chunks_body: self.budget.max_chunks_body,
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
        if raw_len > self.budget.max_chunks_body {
            return Err(FilesViolation::BatchTooLarge {
                raw_len,
                limit: self.budget.max_chunks_body,
            }
            .into());
        }
        self.budget.work(u64::from(raw_len))?;
        let mut buf = std::mem::take(&mut self.inflate.batch_buf);
        let result = match self.inflate.exact(z, &mut buf, raw_len as usize) {
            true => self.batch_frames(&buf, of, host),
            false => Err(FilesViolation::BatchLength.into()),
        };
        self.inflate.batch_buf = buf;
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
        if self.scope.dry_run {
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
        let limit = self.budget.reservation_limit(info.capacity);
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
        self.stream.appended = 0;
        let ack = PlanAck {
            reserved,
            free: host.store_info().free,
        };
        put_frame(&mut self.out, FrameType::Ack, 0, &ack.emit());
        self.phase = Phase::Stream;
        self.deadlines.stream_from(self.now);
        Ok(())
    }

    /// NAKs are queued: REPAIRs are awaited.
    pub(super) fn enter_repair(&mut self) {
        self.phase = Phase::Repair;
    }

    /// Everything placed: the waiting files finished, directories' metadata
    /// set; the report is due.
    pub(super) fn finish_all<'s, H: FilesHost<'s>>(&mut self, host: &mut H) {
        self.finish_waiting(host);
        self.make_links(host);
        // Before directories get their mtimes: removing changes them.
        self.delete_extraneous(host);
        // Deepest first, so setting a child does not disturb its parent's mtime.
        for (rel, mtime_ns, mode) in std::mem::take(&mut self.stream.dir_meta).into_iter().rev() {
            if let Err(e) = host.set_dir_meta(&rel, mtime_ns, mode) {
                self.stats.note(&format!("{rel}: directory mode/mtime: {e}\n"));
            }
        }
        // The top directory last: it holds everything above.
        if let Some(ns) = self.stream.top_mtime.take().filter(|_| !self.scope.dry_run) {
            if let Err(e) = host.set_top_mtime(self.scope.base.as_ref(), ns) {
                self.stats
                    .note(&format!("{}: directory mtime: {e}\n", self.scope.remote_dir));
            }
        }
        self.stats.report.store_generation = host.store_info().generation;
        self.phase = Phase::Finished;
        self.events.push_back(FilesReceiverEvent::Finished);
    }
}
