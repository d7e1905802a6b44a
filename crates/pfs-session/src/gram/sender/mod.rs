//! The sending side of the gram protocol as a sans-I/O state machine: HELLO,
//! then grams built from a schedule, then the summary; the receiver's
//! report ends it.
//!
//! [`GramSender::poll_transmit`] yields what to send next: a control frame,
//! or a gram as its headers, descriptor table and the blob ranges of its
//! payload (the host writes them with one vectored write straight from the
//! mapping, no copy). Replies go in through [`GramSender::handle_input`];
//! [`GramSender::poll_timeout`] says how long a reply may take.
//!
//! With a receiver that speaks the corrections plane (docs/wire.md §13) the
//! sender computes digests only for the grams the session checks, and
//! answers each NAK, between grams or after COMPLETE, with a REPAIR read
//! from its blob the same way as a payload slab.

mod build;
mod repair;
mod stats;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use pfs_exec::execute::resolve;
use pfs_exec::{Digest, Schedule, ScheduleSpec};
use pfs_wire::corrections::{parse_report, CorrectionsReport};
use pfs_wire::frame::FLAG_COMPLETE_REPORT;
use pfs_wire::hello::{ACK_CATCH_UP, ACK_CORRECTIONS, ACK_REPAIR, HELLO_CATCH_UP, HELLO_CORRECTIONS};
use pfs_wire::{
    put_frame, FrameHeader, FrameType, GramHeader, Hello, HelloAck, IntegrityAlg, Mode, Report,
    SenderSummary, FRAME_HEADER_LEN, GRAM_FLAG_PAYLOAD, GRAM_HEADER_LEN,
};

use self::build::{add_range, GramBuild};
use self::repair::Repairing;
use self::stats::SendStats;
use super::corrections::{is_checked, RepairBook};
use super::{GramProgress, GramViolation};
use crate::catchup::CatchUpStats;
use crate::error::{LimitExceeded, LocalError, Timeout, Violation};
use crate::framing::{frame_want, refusal, split_frame, Transmit};
use crate::{BlobView, SessionError};
use pfs_sys::Usage;

/// Sender settings.
#[derive(Debug, Clone)]
pub struct GramSenderConfig {
    /// Transfer mode.
    pub mode: Mode,
    /// Integrity algorithm.
    pub integrity: IntegrityAlg,
    /// The schedule to send.
    pub spec: ScheduleSpec,
    /// Longest wait for HELLO_ACK and for the final report.
    pub reply_timeout: Duration,
    /// Progress event interval (`None` = never).
    pub log_interval: Option<Duration>,
    /// Session nonce (any value; identifies the session in logs).
    pub session_nonce: u64,
    /// Payload mode: most payload bytes per gram (a schedule batch is split
    /// into several grams). Cache-sized by default; see [`DEFAULT_PAYLOAD_BUDGET`].
    pub payload_budget: u64,
    /// Offer the corrections plane (wire §13: answer NAKs, read the
    /// report's corrections block). `false` for receivers from before it,
    /// which refuse the offer.
    pub corrections: bool,
    /// Ask the receiver to check one gram in this many (0 or 1: every
    /// gram); it decides. Needs `corrections`.
    pub integrity_sample: u16,
    /// Offer catch-up (wire §16): a receiver whose blob differs and that
    /// allows it is brought to this blob's bytes before the grams. Needs
    /// the blob view's `live` blob (its region hashes).
    pub catch_up: bool,
}

/// Default payload bytes per gram: half of a typical 2 MiB L2, so the
/// digest pass leaves the bytes cached for the kernel's copy.
pub const DEFAULT_PAYLOAD_BUDGET: u64 = 1 << 20;

/// A finished session, from the sender's side.
#[derive(Debug, Clone)]
pub struct GramSenderOutcome {
    /// The receiver's authoritative report.
    pub report: Report,
    /// What this side sent.
    pub summary: SenderSummary,
    /// Descriptor-table bytes sent (for bytes per descriptor).
    pub table_bytes: u64,
    /// Sender thread CPU and context switches over the steady state.
    pub sender_usage: Usage,
    /// Sender steady-state wall time.
    pub sender_elapsed: Duration,
    /// Receiver backing code from HELLO_ACK.
    pub receiver_backing: u8,
    /// The report's corrections block (sessions with the corrections plane).
    pub corrections: Option<CorrectionsReport>,
    /// REPAIR frames this side sent.
    pub repairs_sent: u64,
    /// Payload bytes of those REPAIRs.
    pub repair_bytes_sent: u64,
    /// What the catch-up before the grams moved, when there was one.
    pub catch_up: Option<CatchUpStats>,
}

/// What the sender core tells its host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GramSenderEvent {
    /// HELLO_ACK took a catch-up (wire §16): the host runs
    /// [`crate::catchup::catch_up_source`], then calls
    /// [`GramSender::caught_up`].
    CatchUp,
    /// HELLO_ACK accepted (or the catch-up done): steady state starts (the
    /// host samples its CPU counters).
    Started,
    /// Periodic progress.
    Progress(GramProgress),
    /// The summary is queued: steady state ends (the host samples again).
    Sent,
    /// The receiver's report arrived: the session is over.
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Hello,
    AwaitAck,
    /// The host runs the catch-up; grams wait.
    CatchingUp,
    Sending,
    AwaitReport,
    Done,
}

/// What HELLO_ACK granted.
#[derive(Debug, Clone, Copy)]
struct Granted {
    max_table_len: u32,
    backing: u8,
    /// The receiver speaks the corrections plane: its report carries the block.
    corrections: bool,
    /// The session checks grams whose `seq` is a multiple of this.
    interval: u16,
}

/// One sending session, sans I/O, made of named parts: the `GramBuild`
/// buffers of the next gram, the `Repairing` side of the corrections
/// plane and the `SendStats` counters.
///
/// # Call contract
/// The host (see [`super::send_session`]) loops: [`Self::poll_transmit`]
/// with `now`, sending each [`Transmit`] whole before the next call; when
/// [`Self::reads_between_writes`], it feeds what has arrived to
/// [`Self::handle_input`] without waiting; when it returns `None` and
/// [`Self::wants_input`], it reads (at most until [`Self::poll_timeout`]),
/// feeds the bytes to [`Self::handle_input`] (it consumes whole frames;
/// [`Self::want`] says how many bytes the next one needs) and calls
/// [`Self::handle_timeout`]. It drains [`Self::poll_event`] after each
/// call; once [`Self::is_done`], [`Self::outcome`].
#[derive(Debug)]
pub struct GramSender<'b> {
    blob: BlobView<'b>,
    cfg: GramSenderConfig,
    schedule: Schedule,
    state: State,
    /// A control frame to send.
    out: Vec<u8>,
    granted: Option<Granted>,
    /// The digest of grams and REPAIRs (the session's algorithm).
    digest: Digest,
    build: GramBuild,
    repair: Repairing,
    stats: SendStats,
    /// When the awaited reply is late.
    deadline: Option<Instant>,
    events: VecDeque<GramSenderEvent>,
    report: Option<Report>,
    corrections: Option<CorrectionsReport>,
    catch_up: Option<CatchUpStats>,
}

impl<'b> GramSender<'b> {
    /// A session over `blob` sending `cfg.spec`.
    pub fn new(blob: BlobView<'b>, cfg: &GramSenderConfig) -> Result<Self, SessionError> {
        let schedule = Schedule::new(cfg.spec).map_err(LocalError::from)?;
        if cfg.spec.blob_len != blob.data.len() as u64 {
            return Err(LocalError::ScheduleBlobLength {
                schedule: cfg.spec.blob_len,
                blob: blob.data.len() as u64,
            }
            .into());
        }
        let per_gram = cfg.spec.desc_per_gram as usize;
        let budget = if cfg.mode.carries_payload() {
            cfg.payload_budget.max(1)
        } else {
            u64::MAX
        };
        Ok(Self {
            blob,
            schedule,
            state: State::Hello,
            out: Vec::with_capacity(256),
            granted: None,
            digest: Digest::new(cfg.integrity),
            build: GramBuild::new(cfg.mode.encoding(), per_gram, budget),
            repair: Repairing::default(),
            stats: SendStats::default(),
            deadline: None,
            events: VecDeque::with_capacity(4),
            report: None,
            corrections: None,
            catch_up: None,
            cfg: cfg.clone(),
        })
    }

    /// Receive buffer the host needs for replies.
    pub fn buffer_capacity(&self) -> usize {
        64 * 1024
    }

    /// Whether the host should read, waiting: a reply is awaited.
    pub fn wants_input(&self) -> bool {
        matches!(self.state, State::AwaitAck | State::AwaitReport)
    }

    /// Whether the host should take what has arrived between its writes
    /// (without waiting): the receiver may be sending NAKs.
    pub fn reads_between_writes(&self) -> bool {
        self.state == State::Sending && self.repair.granted()
    }

    /// Whether the report arrived.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// When [`Self::handle_timeout`] must run if no reply arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// A reply deadline passed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.deadline {
            Some(d) if now >= d => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error for a reply that did not come in time.
    pub fn timed_out(&self) -> SessionError {
        let after = self.cfg.reply_timeout;
        let what = match self.state {
            State::AwaitReport => Timeout::Report { after },
            _ => Timeout::Reply {
                during: "HELLO_ACK",
                after,
            },
        };
        SessionError::TimedOut { what }
    }

    /// The next event for the host.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<GramSenderEvent> {
        self.events.pop_front()
    }

    /// Contiguous bytes the next reply needs.
    pub fn want(&self, input: &[u8]) -> usize {
        frame_want(input)
    }

    /// What to send next, or `None` while a reply is awaited or at the end.
    /// Each transmit must be sent whole before the next call.
    #[must_use = "what to send next is lost unless it is sent"]
    pub fn poll_transmit(&mut self, now: Instant) -> Result<Option<Transmit<'_>>, SessionError> {
        self.out.clear();
        match self.state {
            State::Hello => {
                self.hello();
                self.state = State::AwaitAck;
                self.deadline = Some(now + self.cfg.reply_timeout);
                Ok(Some(Transmit::Parts {
                    parts: [&self.out, &[], &[]],
                    what: "HELLO",
                }))
            }
            State::Sending => {
                // A REPAIR owed goes before the next gram (never inside one).
                if self.next_repair()? {
                    return Ok(Some(self.repair_transmit()));
                }
                if self.next_gram()? {
                    self.progress(now);
                    return Ok(Some(Transmit::Gram {
                        what: "GRAM",
                        frame_header: &self.build.frame_header,
                        gram_header: &self.build.gram_header,
                        table: self.build.table.as_bytes(),
                        blob: self.blob.data,
                        ranges: &self.build.ranges,
                    }));
                }
                self.stats.stop(now);
                put_frame(&mut self.out, FrameType::Complete, 0, &self.stats.summary.emit());
                self.state = State::AwaitReport;
                self.deadline = Some(now + self.cfg.reply_timeout);
                self.events.push_back(GramSenderEvent::Sent);
                Ok(Some(Transmit::Parts {
                    parts: [&self.out, &[], &[]],
                    what: "COMPLETE",
                }))
            }
            State::AwaitReport => {
                // NAKs that came after COMPLETE: the report waits for these.
                if self.next_repair()? {
                    self.deadline = Some(now + self.cfg.reply_timeout);
                    return Ok(Some(self.repair_transmit()));
                }
                Ok(None)
            }
            State::AwaitAck | State::CatchingUp | State::Done => Ok(None),
        }
    }

    /// The REPAIR [`Self::next_repair`] built, as one vectored write.
    fn repair_transmit(&self) -> Transmit<'_> {
        Transmit::Gram {
            what: "REPAIR",
            frame_header: &self.repair.frame_header,
            gram_header: &self.repair.head,
            table: &self.repair.table,
            blob: self.blob.data,
            ranges: &self.repair.ranges,
        }
    }

    /// Builds the REPAIR for the oldest NAK owed, if any: its ranges read
    /// from this blob, their digest.
    fn next_repair(&mut self) -> Result<bool, SessionError> {
        let Some(len) = self.repair.next(self.blob.data, &mut self.digest)? else {
            return Ok(false);
        };
        self.stats.wire_bytes += len;
        Ok(true)
    }

    /// Consumes the first reply in `input` if it is whole; returns the bytes used.
    pub fn handle_input(&mut self, now: Instant, input: &[u8]) -> Result<usize, SessionError> {
        let Some(frame) = split_frame(input, self.buffer_capacity())? else {
            return Ok(0);
        };
        let (header, body) = (frame.header, frame.body);
        let unexpected = |expected| -> SessionError {
            Violation::UnexpectedFrame {
                expected,
                got: header.frame_type,
            }
            .into()
        };
        if header.frame_type == FrameType::Error {
            return Err(refusal(body));
        }
        if header.frame_type == FrameType::Nak && matches!(self.state, State::Sending | State::AwaitReport) {
            if header.flags != 0 {
                return Err(Violation::from(GramViolation::CorrectionFlags {
                    frame: "NAK",
                    flags: header.flags,
                })
                .into());
            }
            let Some(book) = self.repair.book.as_mut() else {
                return Err(unexpected("no NAK (REPAIR was not granted)"));
            };
            book.accept(body, self.stats.seq)?;
            return Ok(frame.len);
        }
        match self.state {
            State::AwaitAck if header.frame_type == FrameType::HelloAck => self.hello_ack(now, body)?,
            State::AwaitAck => return Err(unexpected("HELLO_ACK")),
            State::AwaitReport
                if header.frame_type == FrameType::Complete && header.flags & FLAG_COMPLETE_REPORT != 0 =>
            {
                if !self.repair.is_settled() {
                    return Err(unexpected("a REPAIR owed before the report"));
                }
                self.final_report(body)?;
            }
            State::AwaitReport => return Err(unexpected("the receiver's report")),
            // Only an ERROR (or a NAK, above) is meaningful while sending.
            State::Hello | State::CatchingUp | State::Sending | State::Done => {
                return Err(unexpected("no frame while sending"))
            }
        }
        Ok(frame.len)
    }

    /// HELLO_ACK: what the receiver grants; the steady state starts.
    fn hello_ack(&mut self, now: Instant, body: &[u8]) -> Result<(), SessionError> {
        let ack = HelloAck::parse(body).map_err(SessionError::malformed("HELLO_ACK"))?;
        self.check_ack(&ack)?;
        let corrections = ack.flags & ACK_CORRECTIONS != 0;
        let interval = if corrections {
            ack.sample_interval.max(1)
        } else {
            1
        };
        self.granted = Some(Granted {
            max_table_len: ack.max_table_len,
            backing: ack.backing,
            corrections,
            interval,
        });
        if ack.flags & ACK_REPAIR != 0 && !self.cfg.mode.carries_payload() {
            // Payload mode repairs from its slab: no NAK comes.
            let planned = self.cfg.spec.planned_grams().unwrap_or(0);
            self.repair.book = Some(RepairBook::new(self.cfg.mode.encoding(), interval, planned));
        }
        self.deadline = None;
        if ack.flags & ACK_CATCH_UP != 0 {
            self.state = State::CatchingUp;
            self.events.push_back(GramSenderEvent::CatchUp);
            return Ok(());
        }
        self.state = State::Sending;
        self.stats.start(now, self.cfg.log_interval);
        self.events.push_back(GramSenderEvent::Started);
        Ok(())
    }

    /// The catch-up [`GramSenderEvent::CatchUp`] asked for is done: the
    /// receiver's blob is this one's; the grams start at `now`.
    pub fn caught_up(&mut self, now: Instant, stats: CatchUpStats) {
        if self.state != State::CatchingUp {
            return;
        }
        self.catch_up = Some(stats);
        self.state = State::Sending;
        self.stats.start(now, self.cfg.log_interval);
        self.events.push_back(GramSenderEvent::Started);
    }

    /// The receiver's report (with its corrections block when the plane
    /// was granted): the session is over.
    fn final_report(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let (report, corrections) = parse_report(body).map_err(SessionError::malformed("COMPLETE report"))?;
        if corrections.is_some() != self.granted.is_some_and(|g| g.corrections) {
            return Err(SessionError::Malformed {
                context: "COMPLETE report",
                error: pfs_wire::WireError::LengthMismatch,
            });
        }
        self.report = Some(report);
        self.corrections = corrections;
        self.state = State::Done;
        self.deadline = None;
        self.events.push_back(GramSenderEvent::Finished);
        Ok(())
    }

    /// The finished session; `usage` is the host's CPU over the steady state.
    pub fn outcome(&self, usage: Usage) -> Option<GramSenderOutcome> {
        Some(GramSenderOutcome {
            report: self.report?,
            summary: self.stats.summary,
            table_bytes: self.stats.table_bytes,
            sender_usage: usage,
            sender_elapsed: self.stats.elapsed,
            receiver_backing: self.granted.map_or(0, |g| g.backing),
            corrections: self.corrections,
            repairs_sent: self.repair.sent,
            repair_bytes_sent: self.repair.bytes_sent,
            catch_up: self.catch_up,
        })
    }

    fn hello(&mut self) {
        let spec = &self.cfg.spec;
        let mut body = Vec::with_capacity(128);
        Hello {
            mode: self.cfg.mode,
            encoding: self.cfg.mode.encoding(),
            integrity: self.cfg.integrity,
            auth_method: 0,
            flags: if self.cfg.corrections {
                HELLO_CORRECTIONS
            } else {
                0
            } | if self.cfg.catch_up { HELLO_CATCH_UP } else { 0 },
            sample_interval: if self.cfg.corrections {
                self.cfg.integrity_sample
            } else {
                0
            },
            max_desc_per_gram: spec.desc_per_gram,
            max_desc_len: spec.max_len,
            blob_len: self.blob.data.len() as u64,
            region_size: self.blob.region_size,
            fingerprint: self.blob.fingerprint,
            session_nonce: self.cfg.session_nonce,
            planned_bytes: spec.planned_bytes().unwrap_or(0),
            planned_grams: spec.planned_grams().unwrap_or(0),
            auth: &[],
        }
        .emit(&mut body);
        put_frame(&mut self.out, FrameType::Hello, 0, &body);
        self.stats.wire_bytes += self.out.len() as u64;
    }

    fn check_ack(&self, ack: &HelloAck<'_>) -> Result<(), SessionError> {
        if ack.flags & !ACK_CATCH_UP != 0 && !self.cfg.corrections {
            return Err(Violation::UnexpectedFrame {
                expected: "a HELLO_ACK without corrections flags (none were offered)",
                got: FrameType::HelloAck,
            }
            .into());
        }
        if ack.flags & ACK_CATCH_UP != 0 && !self.cfg.catch_up {
            return Err(Violation::UnexpectedFrame {
                expected: "a HELLO_ACK without CATCH_UP (catch-up was not offered)",
                got: FrameType::HelloAck,
            }
            .into());
        }
        let spec = &self.cfg.spec;
        let max_payload = (u64::from(spec.desc_per_gram) * u64::from(spec.max_len))
            .min(self.cfg.payload_budget.max(u64::from(spec.max_len)));
        if self.cfg.mode.carries_payload() && max_payload > u64::from(ack.max_payload_len) {
            return Err(LimitExceeded::Receiver {
                what: "payload bytes per gram",
                asked: max_payload,
                limit: u64::from(ack.max_payload_len),
                hint: "; lower --gram-payload-max or --max-len",
            }
            .into());
        }
        if spec.desc_per_gram > ack.max_desc_count {
            return Err(LimitExceeded::Receiver {
                what: "--desc-per-gram",
                asked: u64::from(spec.desc_per_gram),
                limit: u64::from(ack.max_desc_count),
                hint: "",
            }
            .into());
        }
        Ok(())
    }

    /// Builds the next gram into the reusable buffers; `false` at the end
    /// of the schedule.
    fn next_gram(&mut self) -> Result<bool, SessionError> {
        let b = &mut self.build;
        if b.batch_done() {
            if !self.schedule.next_gram(&mut b.descs) {
                return Ok(false);
            }
            b.first = 0;
            if b.descs.is_empty() {
                return self.next_gram();
            }
        }
        let (first, last) = b.cut();
        let payload = self.cfg.mode.carries_payload();
        // Unchecked grams (wire §13.2) carry 0: their bytes are not hashed.
        let checked = is_checked(self.stats.seq, self.granted.map_or(1, |g| g.interval));
        b.table.clear();
        b.ranges.clear();
        self.digest.reset();
        for (i, &d) in b.descs[first..last].iter().enumerate() {
            let bytes = resolve(self.blob.data, d, i as u32)?;
            if checked {
                self.digest.update(bytes);
            }
            b.table.push(d).map_err(|error| LocalError::Encode {
                offset: d.offset,
                len: d.len,
                error,
            })?;
            if payload {
                add_range(&mut b.ranges, d);
            }
        }
        let payload_len = if payload { b.table.total_len() } else { 0 };
        let payload_len =
            u32::try_from(payload_len).map_err(|_| LocalError::FrameTooLarge { what: "gram payload" })?;
        let value = if checked { self.digest.value() } else { 0 };
        if let (true, Some(book)) = (checked, self.repair.book.as_mut()) {
            book.record(self.stats.seq, b.table.as_bytes());
        }
        self.seal_gram(payload_len, value)?;
        Ok(true)
    }

    /// The gram built: its headers (within the table size HELLO_ACK
    /// granted), and its counts. `value`: its digest (0 if unchecked).
    fn seal_gram(&mut self, payload_len: u32, value: u64) -> Result<(), SessionError> {
        let b = &mut self.build;
        let gh = GramHeader {
            seq: self.stats.seq,
            desc_count: b.table.count(),
            table_len: b.table.as_bytes().len() as u32,
            payload_len,
            encoding: b.table.encoding(),
            integrity: self.cfg.integrity,
            flags: if payload_len > 0 { GRAM_FLAG_PAYLOAD } else { 0 },
            integrity_value: value,
        };
        let max_table_len = self.granted.map_or(u32::MAX, |g| g.max_table_len);
        if gh.table_len > max_table_len {
            return Err(LimitExceeded::Receiver {
                what: "descriptor table bytes",
                asked: u64::from(gh.table_len),
                limit: u64::from(max_table_len),
                hint: "; lower --desc-per-gram",
            }
            .into());
        }
        let length = u32::try_from(gh.body_len()).map_err(|_| LocalError::FrameTooLarge { what: "gram" })?;
        b.frame_header = FrameHeader {
            frame_type: FrameType::Gram,
            flags: 0,
            length,
        }
        .emit();
        b.gram_header = gh.emit();
        let table_len = b.table.as_bytes().len() as u64;
        let wire = (FRAME_HEADER_LEN + GRAM_HEADER_LEN) as u64 + table_len + u64::from(payload_len);
        let (count, effective) = (b.table.count(), b.table.total_len());
        self.stats
            .gram(count, effective, payload_len, value, table_len, wire);
        Ok(())
    }

    fn progress(&mut self, now: Instant) {
        let planned = self.cfg.spec.planned_bytes().unwrap_or(0);
        if let Some(p) = self.stats.progress(now, self.cfg.log_interval, planned) {
            self.events.push_back(GramSenderEvent::Progress(p));
        }
    }
}
