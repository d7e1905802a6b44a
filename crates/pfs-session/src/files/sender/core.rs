//! The sender core, sans I/O: it decides every frame of a files session
//! (FILES_HELLO, PROBE, INDEX_REQUEST, PLAN, FILE/CHUNKS in zstd BATCH
//! frames, FILE_DROP for a file that changed or could not be read while
//! sent, FILES_END, REPAIR) and reads the receiver's replies from any byte
//! boundary. Reading files, hashing and chunking them, and the index cache
//! on disk are the host's ([`FilesSource`]); compressing is computation and
//! stays here.
//!
//! [`FilesSender`] orchestrates; its state lives in named parts beside it
//! (private modules of `files::sender`): `reply` (the receive side:
//! deadlines, FILES_ACCEPT, the report), `batch` (the send side: frames
//! ready to go, BATCH, zstd), `probe`, `index` (index fetch), `plan` (how
//! each chunk travels, the totals), `stream` (where the stream of FILE and
//! CHUNKS frames is, progress), `fill` (building FILE and CHUNKS frames),
//! `repair` and `delete` (deletion).

use std::time::Instant;

use pfs_wire::files::{
    parse_nak, FileDone, FileDrop, FilesAccept, FilesHello, FilesReport, Plan, PlanAck, TopMtime,
    ACCEPT_OCCUPIED, FLAG_FILES_REPORT, HELLO_CHECKSUM, HELLO_COMPRESS, HELLO_DELETE, HELLO_DRY_RUN,
    HELLO_NO_SPARSE,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::batch::Outbox;
use super::delete::Deletion;
use super::fill;
use super::host::{first_failure, FilesSource, Unreadable, Unsendable};
use super::index::IndexFetch;
use super::plan::{Partial, Plans};
use super::probe::Probe;
use super::repair::Repair;
use super::reply::Replies;
use super::stream::{Stream, StreamedFile};
use super::{unchunked, DeletionOutcome, FilesItem, FilesPlanSummary, FilesProgress, FilesSenderConfig};
use crate::error::{LocalError, Timeout};
use crate::files::FilesViolation;
use crate::framing::{frame_want, refusal, Transmit};
use crate::SessionError;

/// Largest index BATCH (compressed or not) a sender accepts.
pub const MAX_INDEX_BATCH: u32 = 1 << 20;

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

/// The sending side of a files session as a state machine.
///
/// # Call contract
///
/// The host owns the transport, the clock and a [`FilesSource`]; each call
/// that takes `now` gets the current monotonic time (never earlier than at
/// the call before). The core reads no clock and does no I/O but through
/// the source.
///
/// 1. [`Self::new`]: FILES_HELLO is ready to go.
/// 2. Until [`Self::is_done`]:
///    - [`Self::poll_transmit`]: the next bytes to write (it builds the
///      stream as it goes, reading files through the source); once they
///      are written, [`Self::transmitted`]. It returns `None` when nothing
///      is to be sent until a reply comes (or the session is done).
///    - [`Self::poll_event`] until `None` (progress), and
///      [`Self::take_warnings`].
///    - While [`Self::wants_input`]: buffer at least [`Self::want`] bytes
///      (in a buffer of [`Self::buffer_capacity`]) and hand all buffered
///      bytes to [`Self::handle_input`], which returns how many it
///      consumed; if the reply is not complete by [`Self::poll_timeout`],
///      [`Self::handle_timeout`] ends the session ([`Self::timed_out`] is
///      the error of a read that timed out).
/// 3. The outcome: [`Self::summary`], [`Self::accept`],
///    [`Self::index_counts`], [`Self::probed`], [`Self::wire_bytes`],
///    [`Self::repaired`], [`Self::unreadable`], [`Self::dropped`],
///    [`Self::take_report`], [`Self::take_deletion`].
///
/// Any error ends the session; the host then tells the receiver why (an
/// ERROR frame) and closes.
#[derive(Debug)]
pub struct FilesSender<'a> {
    items: &'a mut Vec<FilesItem>,
    cfg: &'a FilesSenderConfig,
    phase: Phase,
    /// The `now` of the call being handled.
    now: Instant,
    started: Instant,
    /// The receive side: reply deadlines, FILES_ACCEPT, the report.
    replies: Replies,
    /// The send side: frames ready to go, the BATCH being filled.
    out: Outbox,
    probe: Probe,
    index: IndexFetch,
    plans: Plans,
    stream: Stream,
    repair: Repair,
    deletion: Deletion,
    /// Warnings not taken yet (entries left out, cache trouble).
    warnings: Vec<String>,
    /// Entries left out because they could not be read.
    unreadable: u64,
}

/// A closure turning a wire error in `context` into the session's error.
pub(super) fn malformed(context: &'static str) -> impl FnOnce(pfs_wire::WireError) -> SessionError {
    move |error| SessionError::Malformed { context, error }
}

impl<'a> FilesSender<'a> {
    /// A session that sends `items`; FILES_HELLO is ready to go.
    pub fn new(
        items: &'a mut Vec<FilesItem>,
        cfg: &'a FilesSenderConfig,
        now: Instant,
    ) -> Result<Self, SessionError> {
        let mut s = Self {
            items,
            cfg,
            phase: Phase::Accept,
            now,
            started: now,
            replies: Replies::new(now, cfg.reply_timeout),
            out: Outbox::new(cfg.compress, cfg.bwlimit)?,
            probe: Probe::default(),
            index: IndexFetch::default(),
            plans: Plans::default(),
            stream: Stream::new(now),
            repair: Repair::default(),
            deletion: Deletion::default(),
            warnings: Vec::new(),
            unreadable: 0,
        };
        if cfg.preserve.hard_links {
            link_items(s.items);
        }
        let mut hello = Vec::new();
        FilesHello {
            flags: if cfg.dry_run { HELLO_DRY_RUN } else { 0 }
                | if cfg.compress.is_some() { HELLO_COMPRESS } else { 0 }
                | if cfg.delete.is_some() { HELLO_DELETE } else { 0 }
                | if cfg.checksum { HELLO_CHECKSUM } else { 0 }
                | if cfg.sparse { 0 } else { HELLO_NO_SPARSE },
            auth_method: 0,
            chunk_avg: cfg.chunk_avg,
            session_nonce: cfg.session_nonce,
            remote_dir: &cfg.remote_dir,
            auth: &[],
        }
        .emit(&mut hello);
        s.out.control(FrameType::FilesHello, 0, &hello);
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
        self.out.is_empty()
            && matches!(
                self.phase,
                Phase::Accept | Phase::ProbeReply | Phase::Index | Phase::Ack | Phase::Report
            )
    }

    /// Whether the session is over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done && self.out.is_empty()
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
            self.replies.handled(end);
        }
        self.replies
            .arrived(now, self.cfg.reply_timeout, used, &input[used..]);
        Ok(used)
    }

    /// When the awaited reply is late.
    #[must_use = "the host must wake by then to call handle_timeout"]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.replies.deadline().filter(|_| self.wants_input())
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
    #[must_use = "the bytes must be written, then transmitted() called"]
    pub fn poll_transmit<S: FilesSource + ?Sized>(
        &mut self,
        now: Instant,
        src: &mut S,
    ) -> Result<Option<Transmit<'_>>, SessionError> {
        self.now = now;
        while self.out.is_empty() {
            match self.phase {
                Phase::Stream => self.stream_step(src)?,
                Phase::Repair => {
                    let last = self
                        .repair
                        .step(self.items, src, &mut self.out, &mut self.warnings)?;
                    if last {
                        self.phase = Phase::Report;
                    }
                }
                _ => break,
            }
        }
        Ok(self.out.transmit())
    }

    /// The transmission of [`Self::poll_transmit`] was written.
    pub fn transmitted(&mut self) {
        self.out.transmitted();
        if self.out.is_empty() && self.wants_input() {
            // Awaiting a reply from now on.
            self.replies.await_from(self.now, self.cfg.reply_timeout);
        }
    }

    /// The next event for the host.
    #[must_use = "events are dropped once polled"]
    pub fn poll_event(&mut self) -> Option<FilesSenderEvent> {
        self.stream.poll_event()
    }

    /// What was decided and learnt (for the outcome).
    pub fn summary(&self) -> FilesPlanSummary {
        self.plans.summary()
    }

    /// Store id and generation from FILES_ACCEPT.
    pub fn accept(&self) -> Option<&FilesAccept> {
        self.replies.accept.as_ref()
    }

    /// Index entries fetched, and those known from the cache before.
    pub fn index_counts(&self) -> (u64, u64) {
        self.index.counts()
    }

    /// Entries asked about with PROBE.
    pub fn probed(&self) -> u64 {
        self.probe.probed()
    }

    /// Bytes written and bytes consumed.
    pub fn wire_bytes(&self) -> (u64, u64) {
        (self.out.sent(), self.replies.bytes())
    }

    /// Chunks repaired on request, and their bytes.
    pub fn repaired(&self) -> (u64, u64) {
        self.repair.repaired()
    }

    /// Entries left out because they could not be read.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }

    /// Entries given up on while streaming (FILE_DROP): changed or
    /// unreadable after their FILE was sent. The receiver counts each in
    /// `files_failed` and lists it with the reason.
    pub fn dropped(&self) -> u64 {
        self.stream.dropped()
    }

    /// Warnings so far (items left out, cache trouble).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The receiver's report and its messages, once the session is done
    /// (`None` for a dry run).
    pub fn take_report(&mut self) -> Option<(FilesReport<'static>, String)> {
        self.replies.report.take()
    }

    /// What the receiver removed (or in a dry run would remove), if DELETE went out.
    pub fn take_deletion(&mut self) -> Option<DeletionOutcome> {
        self.deletion.take()
    }

    /// When the session started.
    pub fn started(&self) -> Instant {
        self.started
    }

    fn check_reply(&self, h: &FrameHeader) -> Result<(), SessionError> {
        let bad = if self.phase == Phase::Index {
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

    /// One whole reply, in the phase that awaits it.
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
                self.replies.accept = Some(accept);
                self.after_accept(src);
            }
            (Phase::ProbeReply, FrameType::ProbeReply) => {
                if self.probe.reply(h.flags, body, self.items)? {
                    self.request_index(src);
                }
            }
            (Phase::Index, FrameType::Index) => {
                if self.index.frame(h.flags, body)? {
                    self.after_index(src);
                }
            }
            (Phase::Index, FrameType::Batch) => {
                if self.index.batch(body)? {
                    self.after_index(src);
                }
            }
            (Phase::Ack, FrameType::Ack) => {
                PlanAck::parse(body).map_err(malformed("ACK"))?;
                self.phase = Phase::Stream;
                self.stream.begin(self.now);
                // Tells the host the stream began (bytes are counted from here).
                self.progress(true);
            }
            (Phase::Report, FrameType::Nak) => {
                let hashes = parse_nak(body).map_err(malformed("NAK"))?;
                self.repair.nak(hashes);
                if h.flags & pfs_wire::files::FLAG_LAST != 0 {
                    self.repair.start(self.items);
                    self.phase = Phase::Repair;
                }
            }
            (Phase::Report, FrameType::Deleted) if self.deletion.is_sent() => self.deletion.deleted(body)?,
            (Phase::Report, FrameType::FilesEnd)
                if h.flags & FLAG_FILES_REPORT != 0 && self.repair.is_idle() =>
            {
                let r = FilesReport::parse(body).map_err(malformed("FILES_END report"))?;
                self.deletion.ended(r.files_deleted);
                if !self.cfg.dry_run {
                    self.replies.report = Some((FilesReport { messages: "", ..r }, r.messages.to_string()));
                }
                self.phase = Phase::Done;
            }
            (_, got) => return Err(self.unexpected(got)),
        }
        Ok(())
    }

    /// Leaves out the items `src` could not read, with a warning each.
    fn leave_out(&mut self, failed: Unreadable) {
        if failed.is_empty() {
            return;
        }
        self.unreadable += leave_out(self.items, failed, &mut self.warnings);
    }

    /// Whole files first: with a store that holds anything (or a
    /// destination with files the index does not describe: `OCCUPIED`),
    /// the files not yet chunked are hashed whole and the receiver asked
    /// which it holds (see [`Probe::to_hash`]); only the rest are chunked.
    fn after_accept<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        let (generation, occupied) = self
            .replies
            .accept
            .as_ref()
            .map_or((0, false), |a| (a.generation, a.flags & ACCEPT_OCCUPIED != 0));
        if (generation > 0 || occupied) && (self.cfg.probe || self.cfg.probe_all) {
            let todo = Probe::to_hash(self.items, generation == 0 || self.cfg.probe_all);
            let failed = src.digest(self.items, &todo);
            self.leave_out(failed);
            if self.probe.queue(self.items, &mut self.out, self.cfg.probe_all) {
                self.phase = Phase::ProbeReply;
                return;
            }
        }
        self.request_index(src);
    }

    /// Chunks what the receiver lacks (see [`Self::chunk_before_stream`]),
    /// opens the index cache, asks for the index from the cached
    /// generation on.
    fn request_index<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        self.chunk_before_stream(src);
        let (store_id, generation) = self
            .replies
            .accept
            .as_ref()
            .map_or(([0; 16], 0), |a| (a.store_id, a.generation));
        let (cache, warning) = src.open_index(store_id);
        self.warnings.extend(warning);
        let from = self.index.open(cache, generation);
        self.out.control(FrameType::IndexRequest, 0, &from);
        self.phase = Phase::Index;
    }

    /// Chunks the files whose chunks PLAN needs: large files are chunked
    /// later, while they are sent (STREAMED); the others in the background
    /// (`chunk_ahead`) or, if the host cannot, now. Entries that cannot be
    /// read are left out: item numbers are final only after this.
    fn chunk_before_stream<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        let mut todo = unchunked(self.items);
        let late = !self.cfg.dry_run && !self.cfg.checksum;
        if let Some(min) = self.cfg.stream_min.filter(|_| late) {
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
        let overlap = self.cfg.stream_min.is_some() && late;
        if overlap {
            todo.retain(|&i| self.items[i].announced_size() == 0);
        }
        let failed = src.chunk(self.items, &todo);
        self.leave_out(failed);
        if !overlap {
            return;
        }
        let ahead: Vec<usize> = unchunked(self.items)
            .into_iter()
            .filter(|&i| !self.items[i].streamed)
            .collect();
        if !ahead.is_empty() && src.chunk_ahead(self.items, &ahead) {
            for &i in &ahead {
                self.items[i].pending = true;
            }
        } else {
            let failed = src.chunk(self.items, &ahead);
            self.leave_out(failed);
        }
    }

    /// The index is complete: classify every chunk, then PLAN (or stop: a dry run).
    fn after_index<S: FilesSource + ?Sized>(&mut self, src: &mut S) {
        let Some(cache) = self.index.cache() else {
            return;
        };
        self.warnings.extend(src.save_index(cache));
        // The totals for PLAN; each file is planned again when its turn
        // comes (`replan`, `collect`), against what was sent before it.
        let summary = self.plans.classify(self.items, cache);
        if self.cfg.dry_run && self.cfg.delete.is_some() {
            // What --delete would remove needs the tree's names at the receiver.
            self.deletion.listing = true;
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
        let (literal_bytes, pending_bytes) = match self.index.holds_nothing() {
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
        self.out.control(FrameType::Plan, 0, &plan.emit());
        self.phase = Phase::Ack;
    }

    /// Builds the next frames of the stream: a FILE, or a CHUNKS frame of
    /// the current file, or (all sent) FILES_END.
    fn stream_step<S: FilesSource + ?Sized>(&mut self, src: &mut S) -> Result<(), SessionError> {
        match self.stream.at() {
            (no, _) if no == self.items.len() => self.end_stream(),
            (no, None) => self.start_entry(no, src),
            (no, Some(i)) if self.stream.file.is_some() => self.streamed_step(no, i, src),
            (no, Some(i)) => self.chunks_step(no, i, src),
        }
    }

    /// Every entry went out: DELETE if asked for, then FILES_END.
    fn end_stream(&mut self) -> Result<(), SessionError> {
        self.progress(true);
        self.out.flush()?;
        let warning = self
            .deletion
            .request(self.cfg.delete.as_ref(), self.unreadable, &mut self.out);
        self.warnings.extend(warning);
        match self.cfg.top_mtime_ns.and_then(TopMtime::from_ns) {
            Some(top) => self.out.control(FrameType::FilesEnd, 0, &top.emit()),
            None => self.out.control(FrameType::FilesEnd, 0, &[]),
        }
        self.phase = Phase::Report;
        Ok(())
    }

    /// The FILE of entry `no`, its chunks planned (or, STREAMED, their
    /// cutting started) first.
    fn start_entry<S: FilesSource + ?Sized>(&mut self, no: usize, src: &mut S) -> Result<(), SessionError> {
        let listing = self.deletion.listing;
        if !listing && self.stream.is_orphan(&self.items[no]) {
            // A hard link to a dropped file: dropped too, announced as a
            // STREAMED file (entries are numbered).
            let target = self.items[no]
                .hard_link
                .take()
                .map(|t| t.to_string())
                .unwrap_or_default();
            self.items[no].streamed = true;
            self.stream.file = Some(StreamedFile::failed(Unsendable::LinkTarget { target }));
        } else if self.items[no].pending {
            self.collect(no, src);
        } else if !listing {
            self.plans.replan(no, &self.items[no], self.index.cache());
        }
        let warning = fill::file_frame(&mut self.out, &self.items[no], no, listing, self.cfg.preserve);
        self.warnings.extend(warning);
        self.out.queue(FrameType::File, "FILE", 0)?;
        if self.items[no].streamed && !listing {
            if self.stream.file.is_none() {
                self.start_streamed(no, src);
            }
            self.stream.next_chunk(0);
            return Ok(());
        }
        let item = &self.items[no];
        let chunks = item
            .recipe
            .as_ref()
            .filter(|_| !item.held && !listing)
            .map_or(0, |r| r.chunks.len());
        if chunks > 0 {
            self.stream.next_chunk(0);
        } else {
            self.end_item();
        }
        Ok(())
    }

    /// The next CHUNKS frame of entry `no` (chunked before its turn) from
    /// chunk `first` on.
    fn chunks_step<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        first: usize,
        src: &mut S,
    ) -> Result<(), SessionError> {
        let item = &self.items[no];
        let built = match item.recipe.as_ref() {
            Some(recipe) => fill::chunks_frame(
                &mut self.out,
                &mut self.stream.changed,
                src,
                item,
                no,
                &recipe.chunks,
                self.plans.of(no),
                first,
            ),
            None => Ok((first, 0)),
        };
        match built {
            Ok((end, work)) => {
                self.out.queue(FrameType::Chunks, "CHUNKS", work)?;
                // Byte-level progress: at most one event per PROGRESS_EVERY.
                self.stream.described(work);
                let total = self.items[no].recipe.as_ref().map_or(0, |r| r.chunks.len());
                if end == total {
                    self.end_item();
                } else {
                    self.stream.next_chunk(end);
                    self.progress(false);
                }
                Ok(())
            }
            Err(why) => self.drop_item(no, &why, src),
        }
    }

    fn progress(&mut self, last: bool) {
        let total = (self.items.len() as u64, self.plans.total_bytes());
        self.stream.progress(self.now, last, total, self.out.sent());
    }

    fn end_item(&mut self) {
        let (no, _) = self.stream.at();
        let warning = self.stream.end_item(&self.items[no]);
        self.warnings.extend(warning);
        self.progress(false);
    }

    /// The entry being streamed cannot be finished: what is built of its
    /// CHUNKS frame is abandoned and FILE_DROP tells the receiver to
    /// discard the rest; the session goes on with the next entry.
    fn drop_item<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        why: &Unsendable,
        src: &mut S,
    ) -> Result<(), SessionError> {
        self.out.frame.clear();
        FileDrop {
            file_no: no as u64,
            reason: &why.to_string(),
        }
        .emit(&mut self.out.frame);
        self.out.queue(FrameType::FileDrop, "FILE_DROP", 0)?;
        // Its hard links must not land on whatever was at its path.
        if let Some(st) = self.stream.drop_item(&self.items[no]) {
            self.plans.unpend(st.part.pending);
            // Its chunking thread stops instead of reading the rest.
            src.stream_stop();
        }
        self.end_item();
        Ok(())
    }

    /// Entry `no` was chunked in the background: its recipe is collected
    /// and its chunks classified now, in stream order (so KNOWN names only
    /// chunks sent before), and its pending bytes moved to what it sends. A
    /// file that could not be read still needs its FILE (entries are
    /// numbered): it goes STREAMED, then FILE_DROP says why.
    fn collect<S: FilesSource + ?Sized>(&mut self, no: usize, src: &mut S) {
        self.items[no].pending = false;
        self.plans.unpend(self.items[no].pending_share());
        if let Err(why) = src.chunk_one(self.items, no) {
            self.items[no].streamed = true;
            self.stream.file = Some(StreamedFile::failed(why));
            return;
        }
        // Its plan is empty until now: nothing to take back.
        self.plans.replan(no, &self.items[no], self.index.cache());
    }

    /// The FILE of STREAMED entry `no` is out: its chunks come from the
    /// host as they are cut (or, from a host that cannot stream, all now).
    fn start_streamed<S: FilesSource + ?Sized>(&mut self, no: usize, src: &mut S) {
        let mut st = StreamedFile {
            part: Partial {
                pending: self.items[no].pending_share(),
                ..Partial::default()
            },
            ..StreamedFile::default()
        };
        if !src.stream_start(&self.items[no]) {
            let chunked = first_failure(&src.chunk(self.items, &[no]));
            match (chunked, self.items[no].recipe.take()) {
                (Err(why), _) => st.failed = Some(why),
                (Ok(()), Some(r)) => {
                    st.chunks = r.chunks.clone();
                    st.done = Some(r);
                }
                (Ok(()), None) => st.failed = Some(Unsendable::Host("it could not be chunked")),
            }
        }
        self.stream.file = Some(st);
    }

    /// The next CHUNKS frame of the STREAMED entry `no` from chunk `first`
    /// on (waiting for the host to cut more), or its FILE_DONE.
    fn streamed_step<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        first: usize,
        src: &mut S,
    ) -> Result<(), SessionError> {
        let Some(st) = self.stream.file.as_mut() else {
            return Ok(());
        };
        match st.cut_more(first, src) {
            Ok(true) => {}
            // Nothing new yet: asked again on the next step.
            Ok(false) => return Ok(()),
            Err(why) => return self.drop_item(no, &why, src),
        }
        let size = self.items[no].announced_size();
        if st.ends_past(size) {
            // Its FILE promised `size` bytes: more would be a protocol error.
            return self.drop_item(no, &Unsendable::Grew { size }, src);
        }
        self.plans.extend(&mut st.part, &st.chunks, self.index.cache());
        if first == st.chunks.len() {
            return self.finish_streamed(no, size, src);
        }
        let built = fill::chunks_frame(
            &mut self.out,
            &mut self.stream.changed,
            src,
            &self.items[no],
            no,
            &st.chunks,
            &st.part.plan,
            first,
        );
        match built {
            Ok((end, work)) => {
                self.out.queue(FrameType::Chunks, "CHUNKS", work)?;
                self.stream.described(work);
                self.stream.next_chunk(end);
                self.progress(false);
                Ok(())
            }
            Err(why) => self.drop_item(no, &why, src),
        }
    }

    /// Every chunk of STREAMED entry `no` went out: FILE_DONE with its
    /// recipe's count and hash, once the recipe is checked against the
    /// chunks sent and the `size` its FILE announced.
    fn finish_streamed<S: FilesSource + ?Sized>(
        &mut self,
        no: usize,
        size: u64,
        src: &mut S,
    ) -> Result<(), SessionError> {
        let Some(mut st) = self.stream.file.take() else {
            return Ok(());
        };
        let recipe = st.done.take();
        let why = match &recipe {
            // A host bug, not the file's: still, only this file fails.
            Some(r) if r.chunks != st.chunks => Some(Unsendable::Host("its chunks and its recipe disagree")),
            Some(r) if r.size != size || r.chunks.is_empty() => {
                Some(Unsendable::Resized { found: r.size, size })
            }
            Some(_) => None,
            None => Some(Unsendable::Host("its chunking ended without a recipe")),
        };
        let (Some(recipe), None) = (recipe, why.as_ref()) else {
            // Put back so that dropping it settles its pending bytes.
            self.stream.file = Some(st);
            let why = why.unwrap_or(Unsendable::Host("no recipe"));
            return self.drop_item(no, &why, src);
        };
        self.out.frame.clear();
        let done = FileDone {
            file_no: no as u64,
            chunk_count: u32::try_from(recipe.chunks.len())
                .map_err(|_| LocalError::FrameTooLarge { what: "FILE_DONE" })?,
            file_hash: recipe.file_hash,
        };
        self.out.frame.extend_from_slice(&done.emit());
        self.out.queue(FrameType::FileDone, "FILE_DONE", 0)?;
        // The file's pending bytes become what it sent.
        self.plans.settle(no, st.part);
        self.items[no].recipe = Some(recipe);
        self.end_item();
        Ok(())
    }
}

/// Leaves out of `items` those `failed` names, with a warning each, and
/// the hard links of them (the same inode, unreadable); returns how many
/// entries were left out.
fn leave_out(items: &mut Vec<FilesItem>, failed: Unreadable, warnings: &mut Vec<String>) -> u64 {
    let mut gone = vec![false; items.len()];
    let mut count = failed.len() as u64;
    let mut gone_paths = std::collections::HashSet::new();
    for (i, why) in failed {
        warnings.push(format!(
            "skipping {}: {why}",
            pfs_files::escape_path(&items[i].entry.abs)
        ));
        gone[i] = true;
        gone_paths.insert(items[i].entry.rel.clone());
    }
    for (i, it) in items.iter().enumerate() {
        if it.hard_link.as_ref().is_some_and(|t| gone_paths.contains(t)) && !gone[i] {
            warnings.push(format!(
                "skipping {}: a hard link of a file that could not be read",
                pfs_files::escape_path(&it.entry.abs)
            ));
            count += 1;
            gone[i] = true;
        }
    }
    let mut k = 0;
    items.retain(|_| {
        k += 1;
        !gone[k - 1]
    });
    count
}

/// Marks the later of the file items that share an inode (`st_nlink` > 1)
/// as hard links of the first one (`-H`): they are never read.
fn link_items(items: &mut [FilesItem]) {
    let mut first: std::collections::HashMap<(u64, u64), pfs_files::RelPath> =
        std::collections::HashMap::new();
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
