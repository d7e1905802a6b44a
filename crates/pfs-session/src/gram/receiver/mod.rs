//! The receiving side of the gram protocol as a sans-I/O state machine:
//! negotiate, then execute every gram over the receiver's own blob and
//! compare digests; answer the sender's summary with the authoritative
//! report.
//!
//! The host feeds bytes as they arrive ([`GramReceiver::handle_input`]) with
//! the current time, sends what [`GramReceiver::poll_transmit`] returns,
//! calls [`GramReceiver::handle_timeout`] once [`GramReceiver::poll_timeout`]
//! passes, and answers the events ([`GramReceiverEvent`]). The core consumes
//! only whole units (a frame header, a control body, a gram header, a
//! descriptor table; payload in any amount), so it works in place on the
//! host's receive buffer: [`GramReceiver::want`] says how many contiguous
//! bytes the next unit needs.
//!
//! Everything the peer sends is checked before use: frame and gram headers
//! by the wire crate, counts and sizes against [`Limits`], every descriptor
//! against this blob's length. A violation is an error the host reports to
//! the peer in an ERROR frame; nothing here panics or reads outside the blob.
//!
//! With a sender that speaks the corrections plane (docs/wire.md §13) the
//! receiver checks one gram in the session's sampling interval, NAKs a
//! checked gram that does not match, writes the REPAIR's bytes into its
//! blob (through the view's writer) and checks them again; in payload mode
//! it repairs from the slab it already holds. Its report then carries the
//! corrections block.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use pfs_exec::execute::resolve;
use pfs_exec::kernel::{Kernel, Output};
use pfs_exec::{execute_gram, GramLimits};
use pfs_wire::control::{NO_MISMATCH, REPORT_LEN, SENDER_SUMMARY_LEN};
use pfs_wire::corrections::{CorrectionHead, CorrectionsReport, CORRECTIONS_REPORT_LEN, CORRECTION_HEAD_LEN};
use pfs_wire::frame::FLAG_COMPLETE_REPORT;
use pfs_wire::hello::{ACK_CATCH_UP, HELLO_CATCH_UP, HELLO_CORRECTIONS};
use pfs_wire::{
    put_frame, DescIter, FrameHeader, FrameType, GramHeader, Hello, HelloAck, IntegrityAlg, Mode, Report,
    SenderSummary, FRAME_HEADER_LEN, GRAM_HEADER_LEN,
};

mod check;
mod exec;
mod repairs;
mod stats;
mod timing;

pub use super::host::{Discard, GramSink};

use self::check::GramCheck;
use self::exec::SessionExec;
use self::repairs::Repairs;
use self::stats::Stats;
use self::timing::Timing;
use super::corrections::{NakBook, DEFAULT_MAX_NAK_GRAMS, DEFAULT_MAX_REPAIR_BYTES};
use super::{GramProgress, GramViolation, HelloRejection};
use crate::catchup::{CatchUpConfig, CatchUpStats};
use crate::error::Violation;
use crate::framing::DEFAULT_WRITE_TIMEOUT;
use crate::{BlobView, Limits, SessionError};
use pfs_sys::Usage;

/// Receiver settings.
#[derive(Debug, Clone)]
pub struct GramReceiverConfig {
    /// Limits enforced and advertised.
    pub limits: Limits,
    /// Longest time HELLO may take once its first byte arrived (the first
    /// byte itself may take the idle timeout: a sender sets up its blob
    /// after connecting).
    pub handshake_timeout: Duration,
    /// Longest silence tolerated mid-session.
    pub idle_timeout: Duration,
    /// Progress event interval (`None` = never).
    pub log_interval: Option<Duration>,
    /// A read-only pCPU kernel to run over every received gram's
    /// descriptors (on this blob), besides the integrity check.
    pub exec: Option<Kernel>,
    /// Every this many bytes of a frame still arriving earn it one more
    /// second before its deadline (see [`crate::framing::FrameClock`]).
    pub min_frame_rate: u64,
    /// Longest a reply (HELLO_ACK, the report, ERROR) may take to be
    /// written: a peer that never reads cannot hold the session.
    pub write_timeout: Duration,
    /// Record every received gram's header and descriptor table (no
    /// payload) to `<dir>/session-<nonce>.grams`, for `pfs exec --gram-file`.
    /// Done by the driver; the core only hands it each gram.
    pub record_dir: Option<std::path::PathBuf>,
    /// Repair grams that do not match (wire §13), with senders that speak
    /// the corrections plane, when the blob view has a writer and the
    /// session has an integrity algorithm. `false`: count them, as before.
    pub repair: bool,
    /// Check one gram in this many whatever the sender asks (`None`: as it
    /// asks; only with senders that speak the corrections plane).
    pub integrity_sample: Option<u16>,
    /// Most NAKed grams unanswered at once; a mismatch beyond it is counted.
    pub max_nak_grams: u32,
    /// Most bytes one session may repair; a mismatch beyond it is counted.
    pub max_repair_bytes: u64,
    /// Let a sender whose blob differs bring this one to its bytes
    /// (catch-up, wire §16) when it offers to; needs the view's `live`
    /// blob. `false`: such a sender is refused with BLOB_MISMATCH.
    pub catch_up: bool,
    /// The catch-up's block size and limits.
    pub catch_up_cfg: CatchUpConfig,
}

impl Default for GramReceiverConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            log_interval: None,
            exec: None,
            min_frame_rate: crate::framing::DEFAULT_MIN_FRAME_RATE,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            record_dir: None,
            repair: true,
            integrity_sample: None,
            max_nak_grams: DEFAULT_MAX_NAK_GRAMS,
            max_repair_bytes: DEFAULT_MAX_REPAIR_BYTES,
            catch_up: false,
            catch_up_cfg: CatchUpConfig::default(),
        }
    }
}

/// A finished session, from the receiver's side.
#[derive(Debug, Clone)]
pub struct GramReceiverOutcome {
    /// The report sent to the sender.
    pub report: Report,
    /// Mode negotiated.
    pub mode: Mode,
    /// Integrity negotiated.
    pub integrity: IntegrityAlg,
    /// What the sender said it sent.
    pub summary: SenderSummary,
    /// Result of the `exec` kernel over the whole session, when one was set.
    pub exec_output: Option<Output>,
    /// The report's corrections block, when the session negotiated the
    /// corrections plane.
    pub corrections: Option<CorrectionsReport>,
    /// What the catch-up before the grams moved, when there was one.
    pub catch_up: Option<CatchUpStats>,
}

/// What the receiver core asks of its host.
#[derive(Debug, Clone, Copy)]
pub enum GramReceiverEvent {
    /// HELLO accepted (HELLO_ACK queued): the session's nonce, for naming
    /// a recording.
    Accepted {
        /// The sender's session nonce.
        nonce: u64,
    },
    /// HELLO was accepted with a catch-up (HELLO_ACK has `CATCH_UP`): once
    /// HELLO_ACK is written, the host runs
    /// [`crate::catchup::catch_up_replica`] towards `target`, then calls
    /// [`GramReceiver::caught_up`].
    CatchUp {
        /// The sender's session nonce.
        nonce: u64,
        /// The sender's fingerprint root: this blob's at the end.
        target: [u8; 32],
    },
    /// The first frame after the handshake arrived: steady state starts
    /// now (the host samples its CPU counters).
    Started,
    /// Periodic progress.
    Progress(GramProgress),
    /// The sender's summary arrived: the host measures the steady state and
    /// calls [`GramReceiver::finish`], which queues the report.
    Summary,
}

/// The next unit of input.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A frame header.
    Header,
    /// The body of a control frame.
    Body(FrameHeader),
    /// The gram header of a GRAM frame.
    GramHeader(FrameHeader),
    /// The descriptor table of a gram.
    Table(GramHeader),
    /// A payload slab: descriptor `desc` of the decoded table, `at` bytes
    /// of it done.
    Payload { gram: GramHeader, desc: usize, at: u32 },
    /// The head of a REPAIR.
    RepairHead(FrameHeader),
    /// A REPAIR's ranges.
    RepairTable(CorrectionHead),
    /// A REPAIR's payload: range `range` of the oldest NAK (in `descs`), `at`
    /// bytes of it done; `write`: the bytes go into the blob.
    RepairPayload { range: usize, at: u32, write: bool },
    /// The summary arrived; waiting for [`GramReceiver::finish`].
    Finishing,
    /// Report queued; the session is over.
    Done,
}

/// What [`GramReceiver::handle_input`] did with one unit.
#[derive(Debug, Clone, Copy)]
enum Took {
    /// The unit is not all in yet (or no input is expected).
    Wait,
    /// This many bytes.
    Used(usize),
    /// This many bytes, and the host must act before more is taken.
    UsedStop(usize),
}

/// The negotiated session (after HELLO).
#[derive(Debug)]
struct Negotiated {
    mode: Mode,
    integrity: IntegrityAlg,
    planned_bytes: u64,
    gram_limits: GramLimits,
}

/// One receiving session, sans I/O, made of named parts: its `Timing`
/// (deadlines, what it awaits), `Stats` (the report's counters, wire
/// bytes, progress), the `GramCheck` of the gram being received (digest,
/// descriptors, slab pieces that differ), the `Repairs` of the
/// corrections plane and the `SessionExec` kernel.
///
/// # Call contract
/// The host (see [`super::receive_session`]) loops:
/// 1. [`Self::handle_input`] with `now` and the bytes buffered; it returns
///    how many it consumed and stops early at an event the host must act on;
/// 2. [`Self::poll_event`] until `None`: on [`GramReceiverEvent::Summary`]
///    it measures its CPU and calls [`Self::finish`];
/// 3. [`Self::poll_transmit`]: it writes those bytes, then calls
///    [`Self::transmitted`];
/// 4. until [`Self::is_done`], it reads ([`Self::want`] contiguous bytes
///    make the next unit whole) at most until [`Self::poll_timeout`], then
///    calls [`Self::handle_timeout`].
///
/// An error ends the session; the host reports it to the peer in an ERROR
/// frame.
#[derive(Debug)]
pub struct GramReceiver<'b> {
    blob: BlobView<'b>,
    limits: Limits,
    step: Step,
    session: Option<Negotiated>,
    out: Vec<u8>,
    events: VecDeque<GramReceiverEvent>,
    timing: Timing,
    stats: Stats,
    check: GramCheck,
    repairs: Repairs,
    exec: Option<SessionExec>,
    summary: Option<SenderSummary>,
    outcome: Option<GramReceiverOutcome>,
    /// The sender's COMPLETE arrived while NAKs were unanswered.
    completed: bool,
    /// Catch-up: allowed (`Some`), and what it moved once done.
    catch_up: CatchUpPart,
}

/// The receiver's part in catch-up: whether it may take one, and what the
/// one before the grams moved.
#[derive(Debug, Clone, Copy, Default)]
struct CatchUpPart {
    allowed: bool,
    done: Option<CatchUpStats>,
}

impl<'b> GramReceiver<'b> {
    /// A session on a new connection, accepted at `now`.
    pub fn new(blob: BlobView<'b>, cfg: &GramReceiverConfig, now: Instant) -> Self {
        Self {
            blob,
            limits: cfg.limits,
            step: Step::Header,
            session: None,
            out: Vec::with_capacity(256),
            events: VecDeque::with_capacity(4),
            timing: Timing::new(cfg, now),
            stats: Stats::new(cfg.log_interval),
            check: GramCheck::default(),
            repairs: Repairs::new(cfg),
            exec: cfg.exec.map(SessionExec::new),
            summary: None,
            outcome: None,
            completed: false,
            catch_up: CatchUpPart {
                allowed: cfg.catch_up && blob.live.is_some(),
                done: None,
            },
        }
    }

    /// The catch-up [`GramReceiverEvent::CatchUp`] asked for is done (the
    /// blob's root is the sender's): grams may come, the next within the
    /// idle timeout of `now`.
    pub fn caught_up(&mut self, now: Instant, stats: CatchUpStats) {
        self.catch_up.done = Some(stats);
        self.timing.next_frame(now);
    }

    /// Size of the COMPLETE(REPORT) frame this side sends last.
    fn report_frame_len(&self) -> u64 {
        let block = if self.repairs.book.is_some() {
            CORRECTIONS_REPORT_LEN
        } else {
            0
        };
        (FRAME_HEADER_LEN + REPORT_LEN + block) as u64
    }

    /// The receive buffer the host needs: the largest unit plus room to batch.
    pub fn buffer_capacity(&self) -> usize {
        self.limits.max_table_len as usize + 64 * 1024
    }

    /// Contiguous bytes the next unit needs (at least 1 while input is expected).
    pub fn want(&self) -> usize {
        self.need().max(1)
    }

    /// Bytes the next unit needs whole (payload: any amount from 1; none
    /// once the summary arrived).
    fn need(&self) -> usize {
        match self.step {
            Step::Header => FRAME_HEADER_LEN,
            Step::Body(fh) => fh.length as usize,
            Step::GramHeader(_) => GRAM_HEADER_LEN,
            Step::Table(gh) => gh.table_len as usize,
            Step::Payload { .. } | Step::RepairPayload { .. } => 1,
            Step::RepairHead(_) => CORRECTION_HEAD_LEN,
            Step::RepairTable(head) => head.table_len(),
            Step::Finishing | Step::Done => 0,
        }
    }

    /// What the core waits for (for error messages).
    pub fn awaiting(&self) -> &'static str {
        self.timing.awaiting
    }

    /// Whether the report has been queued: nothing more to read.
    pub fn is_done(&self) -> bool {
        matches!(self.step, Step::Done)
    }

    /// Bytes to send to the peer, if any; call [`Self::transmitted`] once sent.
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
    pub fn poll_event(&mut self) -> Option<GramReceiverEvent> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] must run if no input arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        (!matches!(self.step, Step::Finishing | Step::Done)).then(|| self.timing.deadline())
    }

    /// The deadline passed: a silent or trickling peer loses its session.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.poll_timeout() {
            Some(d) if now >= d => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error for a peer that let the current deadline pass.
    pub fn timed_out(&self) -> SessionError {
        self.timing.timed_out()
    }

    /// Wire bytes of the session so far, both directions.
    pub fn wire_bytes(&self) -> u64 {
        self.stats.wire_bytes()
    }

    /// Consumes what it can of `input` (bytes that arrived, in order) and
    /// returns how many bytes it used. It stops early after an event the
    /// host must act on at once ([`GramReceiverEvent::Started`],
    /// [`GramReceiverEvent::Summary`]), and when the next unit is not all in
    /// `input` ([`Self::want`]).
    pub fn handle_input(
        &mut self,
        now: Instant,
        input: &[u8],
        sink: &mut dyn GramSink,
    ) -> Result<usize, SessionError> {
        if !input.is_empty() {
            self.timing.input(now);
        }
        let mut used = 0;
        loop {
            let (n, stop) = match self.unit(now, &input[used..], sink)? {
                Took::Wait => break,
                Took::Used(n) => (n, false),
                Took::UsedStop(n) => (n, true),
            };
            used += n;
            self.stats.wire_in += n as u64;
            if stop || matches!(self.step, Step::Finishing) {
                break;
            }
        }
        let rest = &input[used..];
        match self.step {
            Step::Header => self.timing.between_frames(rest),
            Step::Finishing | Step::Done => {}
            _ => self.timing.inside_frame(self.stats.wire_in, rest.len()),
        }
        self.progress(now);
        Ok(used)
    }

    /// Takes the next unit ([`Self::want`]) from the front of `rest`, if
    /// it is all there (payload: any amount).
    fn unit(&mut self, now: Instant, rest: &[u8], sink: &mut dyn GramSink) -> Result<Took, SessionError> {
        if matches!(self.step, Step::Finishing | Step::Done) || rest.len() < self.need() {
            return Ok(Took::Wait);
        }
        let n = match self.step {
            Step::Header => return self.frame_header(now, rest),
            Step::Body(fh) => {
                let len = fh.length as usize;
                self.control(now, fh, &rest[..len])?;
                if matches!(self.events.back(), Some(GramReceiverEvent::CatchUp { .. })) {
                    // The host runs the catch-up before anything else is read.
                    return Ok(Took::UsedStop(len));
                }
                len
            }
            Step::GramHeader(fh) => {
                let gh = GramHeader::parse(&rest[..GRAM_HEADER_LEN])
                    .map_err(SessionError::malformed("gram header"))?;
                gh.check_body_len(fh.length)
                    .map_err(SessionError::malformed("gram header"))?;
                self.check_gram(&gh)?;
                self.step = Step::Table(gh);
                GRAM_HEADER_LEN
            }
            Step::Table(gh) => self.table(now, gh, &rest[..gh.table_len as usize], sink)?,
            Step::Payload { gram, desc, at } => self.payload(now, gram, desc, at, rest),
            Step::RepairHead(fh) => {
                self.repair_head(fh, &rest[..CORRECTION_HEAD_LEN])?;
                CORRECTION_HEAD_LEN
            }
            Step::RepairTable(head) => {
                let len = head.table_len();
                self.repair_table(now, head, &rest[..len])?;
                len
            }
            Step::RepairPayload { range, at, write } => self.repair_payload(now, range, at, write, rest),
            Step::Finishing | Step::Done => return Ok(Took::Wait),
        };
        Ok(Took::Used(n))
    }

    /// A frame header: its frame begins. The first frame after the
    /// handshake starts the steady state, which the host must see at once.
    fn frame_header(&mut self, now: Instant, rest: &[u8]) -> Result<Took, SessionError> {
        let fh = FrameHeader::parse(rest).map_err(SessionError::malformed("frame header"))?;
        let first_after_handshake = self.session.is_some() && self.stats.started.is_none();
        self.begin_frame(fh)?;
        if !first_after_handshake {
            return Ok(Took::Used(FRAME_HEADER_LEN));
        }
        // Steady state starts with the first frame after the handshake:
        // setup, the handshake and the sender's time to build its first
        // gram are outside the window.
        self.stats.start(now);
        self.events.push_back(GramReceiverEvent::Started);
        Ok(Took::UsedStop(FRAME_HEADER_LEN))
    }

    /// A gram's descriptor table, whole: recorded, then executed (no
    /// payload) or checked before its slab streams in.
    fn table(
        &mut self,
        now: Instant,
        gh: GramHeader,
        table: &[u8],
        sink: &mut dyn GramSink,
    ) -> Result<usize, SessionError> {
        sink.gram(&gh, table)
            .map_err(|e| SessionError::transport("recording grams", e))?;
        if gh.payload_len == 0 {
            self.execute(&gh, table)?;
            self.end_frame(now);
        } else {
            self.prepare_payload(&gh, table)?;
            self.step = Step::Payload {
                gram: gh,
                desc: 0,
                at: 0,
            };
        }
        Ok(table.len())
    }

    /// The outcome, once [`Self::finish`] ran.
    pub fn outcome(&self) -> Option<&GramReceiverOutcome> {
        self.outcome.as_ref()
    }

    /// The sender's summary was answered: `usage` is this side's CPU over
    /// the steady state (the host measures it), `max_rss_bytes` its peak
    /// memory. Queues the report; the session is over.
    pub fn finish(&mut self, now: Instant, usage: Usage, max_rss_bytes: u64) -> &GramReceiverOutcome {
        let elapsed = self
            .stats
            .started
            .map(|s| now.saturating_duration_since(s))
            .unwrap_or_default();
        let summary = self.summary.unwrap_or_default();
        let report_frame_len = self.report_frame_len();
        let r = &mut self.stats.report;
        r.elapsed_ns = elapsed.as_nanos() as u64;
        // Both directions of the whole session: everything read (HELLO
        // included) plus what this side writes (HELLO_ACK, NAKs, report).
        r.wire_bytes = self.stats.wire_in + self.stats.wire_out + report_frame_len;
        r.user_us = usage.user_us;
        r.sys_us = usage.sys_us;
        r.nvcsw = usage.nvcsw;
        r.nivcsw = usage.nivcsw;
        r.max_rss_bytes = max_rss_bytes;
        let counts_match = summary.grams == r.grams
            && summary.descriptors == r.descriptors
            && summary.effective_bytes == r.effective_bytes
            && summary.e2e_digest == r.e2e_digest;
        // Every mismatch repaired (none without the corrections plane).
        let repaired = self.repairs.book.as_ref().map_or(0, |b| b.report.repaired_grams);
        r.integrity_ok = u8::from(r.mismatched_grams == repaired && counts_match);
        let corrections = self.repairs.book.as_ref().map(|b| b.report);
        let mut body = [0u8; REPORT_LEN + CORRECTIONS_REPORT_LEN];
        body[..REPORT_LEN].copy_from_slice(&self.stats.report.emit());
        let len = match &corrections {
            Some(c) => {
                body[REPORT_LEN..].copy_from_slice(&c.emit());
                body.len()
            }
            None => REPORT_LEN,
        };
        put_frame(
            &mut self.out,
            FrameType::Complete,
            FLAG_COMPLETE_REPORT,
            &body[..len],
        );
        self.stats.wire_out += report_frame_len;
        self.step = Step::Done;
        let outcome = GramReceiverOutcome {
            report: self.stats.report,
            mode: self.session.as_ref().map_or(Mode::Payload, |s| s.mode),
            integrity: self.session.as_ref().map_or(IntegrityAlg::None, |s| s.integrity),
            summary,
            exec_output: self.exec.take().map(SessionExec::finish),
            corrections,
            catch_up: self.catch_up.done,
        };
        self.outcome.insert(outcome)
    }

    fn begin_frame(&mut self, fh: FrameHeader) -> Result<(), SessionError> {
        self.timing.begin_frame(
            self.stats.wire_in,
            (FRAME_HEADER_LEN as u64) + u64::from(fh.length),
        );
        match (fh.frame_type, self.session.is_some()) {
            (FrameType::Hello, false) => {
                self.check_capacity(fh, "HELLO")?;
                self.step = Step::Body(fh);
            }
            (_, false) => {
                return Err(Violation::UnexpectedFrame {
                    expected: "HELLO",
                    got: fh.frame_type,
                }
                .into())
            }
            (FrameType::Gram, true) if !self.completed => {
                if (fh.length as usize) < GRAM_HEADER_LEN {
                    return Err(Violation::from(GramViolation::ShortBody { len: fh.length }).into());
                }
                // A big gram may take a while at a modest rate: its bytes
                // earn time as they arrive (the clock), its length none.
                self.timing.awaiting = "GRAM";
                self.step = Step::GramHeader(fh);
            }
            (FrameType::Repair, true) if self.repairs.repairs() => {
                check_repair_header(fh)?;
                self.timing.awaiting = "REPAIR";
                self.step = Step::RepairHead(fh);
            }
            (FrameType::Complete, true) if fh.flags & FLAG_COMPLETE_REPORT == 0 && !self.completed => {
                if fh.length as usize != SENDER_SUMMARY_LEN {
                    return Err(Violation::BodyLength {
                        frame: "COMPLETE",
                        len: fh.length,
                    }
                    .into());
                }
                self.step = Step::Body(fh);
            }
            (FrameType::Error, true) => {
                self.check_capacity(fh, "ERROR")?;
                self.step = Step::Body(fh);
            }
            (other, true) => {
                return Err(Violation::UnexpectedFrame {
                    expected: if self.completed {
                        "REPAIR"
                    } else {
                        "GRAM or COMPLETE"
                    },
                    got: other,
                }
                .into())
            }
        }
        Ok(())
    }

    fn check_capacity(&self, fh: FrameHeader, context: &'static str) -> Result<(), SessionError> {
        if fh.length as usize > self.buffer_capacity() {
            return Err(SessionError::Malformed {
                context,
                error: pfs_wire::WireError::TooLarge,
            });
        }
        Ok(())
    }

    /// A frame is complete: the next one has the idle timeout to arrive.
    fn end_frame(&mut self, now: Instant) {
        self.step = Step::Header;
        self.timing.next_frame(now);
    }

    fn control(&mut self, now: Instant, fh: FrameHeader, body: &[u8]) -> Result<(), SessionError> {
        match fh.frame_type {
            FrameType::Hello => {
                let hello = Hello::parse(body).map_err(SessionError::malformed("HELLO"))?;
                self.accept(&hello)?;
                self.end_frame(now);
            }
            FrameType::Complete => {
                self.summary = Some(SenderSummary::parse(body).map_err(SessionError::malformed("COMPLETE"))?);
                self.completed = true;
                if self.repairs.is_settled() {
                    self.summarize();
                } else {
                    // The report waits for the REPAIRs of the NAKs unanswered.
                    self.end_frame(now);
                    self.timing.awaiting = "REPAIR";
                }
            }
            FrameType::Error => return Err(crate::framing::refusal(body)),
            other => {
                return Err(Violation::UnexpectedFrame {
                    expected: "a control frame",
                    got: other,
                }
                .into())
            }
        }
        Ok(())
    }

    /// The sender's COMPLETE and every REPAIR are in: the host measures
    /// and calls [`Self::finish`].
    fn summarize(&mut self) {
        self.step = Step::Finishing;
        self.events.push_back(GramReceiverEvent::Summary);
    }

    fn accept(&mut self, hello: &Hello<'_>) -> Result<(), SessionError> {
        let catch_up = check_hello(
            hello,
            &self.blob,
            &self.limits,
            self.exec.is_some(),
            self.catch_up.allowed,
        )?;
        let limits = self.limits;
        let (mode, integrity) = (hello.mode, hello.integrity);
        // The corrections plane, only with a sender that speaks it (an
        // older one gets version-1 bytes). Repairing needs a writer onto
        // this very blob and a digest to check the repaired ranges with.
        let (mut flags, mut interval) = (0, 0);
        if hello.flags & HELLO_CORRECTIONS != 0 {
            let writable = self
                .blob
                .writer
                .is_some_and(|w| w.len() == self.blob.data.len() as u64);
            (flags, interval) = self.repairs.negotiate(hello.sample_interval, writable, integrity);
        }
        if catch_up {
            flags |= ACK_CATCH_UP;
        }
        let mut ack = Vec::with_capacity(64);
        HelloAck {
            max_gram_body: limits.max_gram_body(),
            max_desc_count: limits.max_desc_count,
            max_table_len: limits.max_table_len,
            max_payload_len: limits.max_payload_len,
            blob_len: self.blob.data.len() as u64,
            page_size: self.blob.page_size,
            backing: self.blob.backing.code(),
            auth_method: 0,
            flags,
            sample_interval: interval,
            session_nonce: hello.session_nonce,
            auth: &[],
        }
        .emit(&mut ack);
        let before = self.out.len();
        put_frame(&mut self.out, FrameType::HelloAck, 0, &ack);
        self.stats.wire_out += (self.out.len() - before) as u64;
        self.check.negotiated(integrity, limits.max_desc_count);
        self.stats.report = first_report(&self.blob, mode, integrity);
        self.session = Some(Negotiated {
            mode,
            integrity,
            planned_bytes: hello.planned_bytes,
            gram_limits: GramLimits {
                max_desc_len: hello.max_desc_len.min(limits.max_desc_len),
                max_effective: limits.max_gram_effective,
            },
        });
        self.events.push_back(GramReceiverEvent::Accepted {
            nonce: hello.session_nonce,
        });
        if catch_up {
            self.events.push_back(GramReceiverEvent::CatchUp {
                nonce: hello.session_nonce,
                target: hello.fingerprint,
            });
        }
        Ok(())
    }

    /// The session HELLO negotiated. `begin_frame` lets no GRAM in before
    /// HELLO, so the error is unreachable; it is an error, not a panic,
    /// because the core never panics on what a peer sends.
    fn negotiated(&self) -> Result<&Negotiated, SessionError> {
        self.session.as_ref().ok_or_else(|| {
            Violation::UnexpectedFrame {
                expected: "HELLO",
                got: FrameType::Gram,
            }
            .into()
        })
    }

    fn check_gram(&self, gh: &GramHeader) -> Result<(), SessionError> {
        let s = self.negotiated()?;
        let seq = gh.seq;
        let limits = &self.limits;
        let violation = if seq != self.stats.next_seq {
            GramViolation::Sequence {
                got: seq,
                expected: self.stats.next_seq,
            }
        } else if gh.encoding != s.mode.encoding() || gh.integrity != s.integrity {
            GramViolation::NotNegotiated {
                seq,
                encoding: gh.encoding,
                integrity: gh.integrity,
                session_encoding: s.mode.encoding(),
                session_integrity: s.integrity,
            }
        } else if gh.desc_count > limits.max_desc_count || gh.table_len > limits.max_table_len {
            GramViolation::TableLimit {
                seq,
                count: gh.desc_count,
                table_len: gh.table_len,
                max_count: limits.max_desc_count,
                max_table_len: limits.max_table_len,
            }
        } else if gh.payload_len > limits.max_payload_len {
            GramViolation::PayloadLimit {
                seq,
                len: gh.payload_len,
                max: limits.max_payload_len,
            }
        } else if s.mode.carries_payload() != (gh.payload_len > 0) && gh.desc_count > 0 {
            GramViolation::PayloadInMode {
                seq,
                len: gh.payload_len,
                mode: s.mode,
            }
        } else {
            return Ok(());
        };
        Err(Violation::from(violation).into())
    }

    fn descriptor_violation(seq: u64, error: pfs_exec::ExecError) -> SessionError {
        Violation::from(GramViolation::Descriptor { seq, error }).into()
    }

    /// Offset-only and arithmetic grams: execute the table over this blob
    /// (an unchecked gram: bounds only, no byte read).
    fn execute(&mut self, gh: &GramHeader, table: &[u8]) -> Result<(), SessionError> {
        let limits = self.negotiated()?.gram_limits;
        let checked = self.repairs.checks(gh.seq);
        let descs = DescIter::new(table, gh.encoding, gh.desc_count);
        let digest = if checked {
            &mut self.check.digest
        } else {
            &mut self.check.skip
        };
        let out = execute_gram(self.blob.data, descs, digest, limits)
            .map_err(|e| Self::descriptor_violation(gh.seq, e))?;
        if let Some(exec) = self.exec.as_mut() {
            // Already bounds-checked by execute_gram above.
            for d in DescIter::new(table, gh.encoding, gh.desc_count).flatten() {
                exec.update(&self.blob.data[d.offset as usize..d.offset as usize + d.len as usize]);
            }
        }
        // The value chained end to end (wire.md §13.2): this side's digest
        // of a checked gram, unless it NAKs it (then the value its repair
        // restores); the gram's own value for an unchecked one.
        let mut value = gh.integrity_value;
        let mut mismatch = false;
        if checked {
            value = out.digest;
            mismatch = out.digest != gh.integrity_value;
            if let Some(book) = self.repairs.book.as_mut() {
                book.checked(out.effective_bytes);
                if mismatch && book.can_nak(gh.desc_count, out.effective_bytes) {
                    book.push(
                        gh.seq,
                        gh.integrity_value,
                        DescIter::new(table, gh.encoding, gh.desc_count).flatten(),
                    );
                    value = gh.integrity_value;
                    self.stats.wire_out += book.flush(&mut self.out);
                }
            }
        }
        self.account(gh, value, out.effective_bytes, out.descriptors, mismatch);
        Ok(())
    }

    /// Payload mode: decode and check every descriptor before the slab
    /// streams in, so the slab is compared range by range as it arrives.
    fn prepare_payload(&mut self, gh: &GramHeader, table: &[u8]) -> Result<(), SessionError> {
        let limits = self.negotiated()?.gram_limits;
        let seq = gh.seq;
        self.check.begin_payload(self.repairs.checks(seq));
        let mut effective = 0u64;
        for (i, d) in DescIter::new(table, gh.encoding, gh.desc_count).enumerate() {
            let d = d.map_err(|e| Self::descriptor_violation(seq, e.into()))?;
            let index = i as u32;
            limits
                .check(index, d.len, effective)
                .map_err(|e| Self::descriptor_violation(seq, e))?;
            resolve(self.blob.data, d, index).map_err(|e| Self::descriptor_violation(seq, e))?;
            effective += u64::from(d.len);
            if effective > u64::from(gh.payload_len) {
                return Err(Violation::from(GramViolation::PayloadShort {
                    seq,
                    len: gh.payload_len,
                })
                .into());
            }
            self.check.descs.push(d);
        }
        if effective < u64::from(gh.payload_len) {
            return Err(Violation::from(GramViolation::PayloadLeftOver {
                seq,
                left: u64::from(gh.payload_len) - effective,
            })
            .into());
        }
        Ok(())
    }

    /// Takes slab bytes for descriptor `desc` onwards; returns bytes used.
    fn payload(&mut self, now: Instant, gh: GramHeader, mut desc: usize, mut at: u32, input: &[u8]) -> usize {
        let mut used = 0;
        let repairs = self.repairs.repairs();
        while used < input.len() && desc < self.check.descs.len() {
            let d = self.check.descs[desc];
            let k = ((d.len - at) as usize).min(input.len() - used);
            if self.check.checking {
                let chunk = &input[used..used + k];
                // In bounds: checked against this blob in prepare_payload.
                let start = d.offset as usize + at as usize;
                self.check
                    .slab(chunk, &self.blob.data[start..start + k], start, repairs);
            }
            used += k;
            at += k as u32;
            if at == d.len {
                desc += 1;
                at = 0;
            }
        }
        if desc < self.check.descs.len() {
            self.step = Step::Payload { gram: gh, desc, at };
            return used;
        }
        if let Some(exec) = self.exec.as_mut() {
            for d in &self.check.descs {
                exec.update(&self.blob.data[d.offset as usize..d.offset as usize + d.len as usize]);
            }
        }
        let effective = u64::from(gh.payload_len);
        let count = self.check.descs.len() as u32;
        if self.check.checking {
            let (digest, differs) = (self.check.digest.value(), self.check.differs);
            // A payload that differs from this blob is a mismatch even when
            // the sender's digest agrees with the bytes that arrived.
            let mismatch = digest != gh.integrity_value || differs;
            if let Some(book) = self.repairs.book.as_mut() {
                book.checked(effective);
            }
            if differs && digest == gh.integrity_value && self.check.holds_all() {
                self.repair_from_slab(effective, gh.integrity_value);
            }
            self.account(&gh, digest, effective, count, mismatch);
        } else {
            self.account(&gh, gh.integrity_value, effective, count, false);
        }
        self.end_frame(now);
        used
    }

    /// Payload mode: the slab hashed to the sender's value but differs from
    /// this blob, so the blob is what is wrong: write the differing pieces
    /// and check the gram's ranges again (wire.md §13.6; no NAK needed).
    fn repair_from_slab(&mut self, effective: u64, value: u64) {
        let (Some(book), Some(writer)) = (self.repairs.book.as_mut(), self.blob.writer) else {
            return;
        };
        if !book.take_budget(effective) {
            return;
        }
        let written = self.check.write_held(writer);
        let digest = self.check.digest_of(self.blob.data);
        if written && digest == value {
            book.repaired_locally(effective);
        }
    }

    /// A REPAIR's head: it must answer the oldest NAK unanswered, with its
    /// ranges' count and length.
    fn repair_head(&mut self, fh: FrameHeader, bytes: &[u8]) -> Result<(), SessionError> {
        let head = CorrectionHead::parse(bytes).map_err(SessionError::malformed("REPAIR"))?;
        let nak = self.repairs.book.as_ref().and_then(NakBook::oldest_sent);
        let Some(nak) = nak.filter(|n| n.seq == head.seq) else {
            return Err(Violation::from(GramViolation::RepairUnasked {
                seq: head.seq,
                expected: nak.map(|n| n.seq),
            })
            .into());
        };
        if head.range_count != nak.range_count() || head.bytes != nak.bytes {
            return Err(Violation::from(GramViolation::RepairRanges { seq: head.seq }).into());
        }
        if u64::from(fh.length) != head.repair_body_len() {
            return Err(SessionError::Malformed {
                context: "REPAIR",
                error: pfs_wire::WireError::LengthMismatch,
            });
        }
        self.step = Step::RepairTable(head);
        Ok(())
    }

    /// A REPAIR's ranges: byte for byte the NAK's. Its bytes are written
    /// only if the sender's digest is still the gram's (else its blob
    /// changed since, and the gram stays a mismatch).
    fn repair_table(&mut self, now: Instant, head: CorrectionHead, table: &[u8]) -> Result<(), SessionError> {
        let Some(nak) = self.repairs.book.as_ref().and_then(NakBook::oldest_sent) else {
            return Err(Violation::from(GramViolation::RepairUnasked {
                seq: head.seq,
                expected: None,
            })
            .into());
        };
        if table != nak.table() {
            return Err(Violation::from(GramViolation::RepairRanges { seq: head.seq }).into());
        }
        let write = head.digest == nak.value && self.blob.writer.is_some();
        self.check.descs.clear();
        self.check.descs.extend(nak.ranges());
        self.repairs.failed = !write;
        self.repair_payload(now, 0, 0, write, &[]);
        Ok(())
    }

    /// Takes REPAIR payload bytes for range `range` onwards; returns bytes
    /// used. Pieces that differ from the blob are written as they arrive:
    /// a REPAIR may be as large as a gram, and holding it would cost that
    /// much memory; the ranges are checked once it is all in.
    fn repair_payload(
        &mut self,
        now: Instant,
        mut range: usize,
        mut at: u32,
        write: bool,
        input: &[u8],
    ) -> usize {
        let mut used = 0;
        loop {
            // Zero-length ranges take no bytes.
            while self.check.descs.get(range).is_some_and(|d| d.len == at) {
                range += 1;
                at = 0;
            }
            let Some(d) = self.check.descs.get(range).copied() else {
                break;
            };
            if used == input.len() {
                self.step = Step::RepairPayload { range, at, write };
                return used;
            }
            let k = ((d.len - at) as usize).min(input.len() - used);
            let chunk = &input[used..used + k];
            let start = d.offset as usize + at as usize;
            if write && self.blob.data.get(start..start + k) != Some(chunk) {
                let ok = self
                    .blob
                    .writer
                    .is_some_and(|w| w.write(start as u64, chunk).is_ok());
                self.repairs.failed |= !ok;
            }
            used += k;
            at += k as u32;
        }
        self.finish_repair(now);
        used
    }

    /// The whole REPAIR is in: check the NAK's ranges again, answer the
    /// NAK, let the next ones out, and end the session if COMPLETE came.
    fn finish_repair(&mut self, now: Instant) {
        // Some: repair_head let this REPAIR in only as the oldest NAK's answer.
        let value = self
            .repairs
            .book
            .as_ref()
            .and_then(NakBook::oldest_sent)
            .map(|n| n.value);
        let mut repaired = false;
        if let (Some(value), false) = (value, self.repairs.failed) {
            // In bounds: the gram's descriptors were checked against this
            // blob when it was executed.
            repaired = self.check.digest_of(self.blob.data) == value;
        }
        if let Some(book) = self.repairs.book.as_mut() {
            book.answered(repaired);
            self.stats.wire_out += book.flush(&mut self.out);
        }
        self.end_frame(now);
        if self.completed {
            if self.repairs.is_settled() {
                self.summarize();
            } else {
                self.timing.awaiting = "REPAIR";
            }
        }
    }

    fn account(&mut self, gh: &GramHeader, value: u64, effective: u64, count: u32, mismatch: bool) {
        self.stats.account(gh, value, effective, count, mismatch);
    }

    fn progress(&mut self, now: Instant) {
        if matches!(self.step, Step::Finishing | Step::Done) {
            return;
        }
        let planned = self.session.as_ref().map_or(0, |s| s.planned_bytes);
        if let Some(p) = self.stats.progress(now, planned) {
            self.events.push_back(GramReceiverEvent::Progress(p));
        }
    }
}

/// The report of a session just negotiated: what it runs on, no gram yet.
fn first_report(blob: &BlobView<'_>, mode: Mode, integrity: IntegrityAlg) -> Report {
    let setup = &blob.setup;
    Report {
        first_mismatch_seq: NO_MISMATCH,
        mode: mode as u8,
        encoding: mode.encoding() as u8,
        integrity: integrity as u8,
        backing: blob.backing.code(),
        page_size: blob.page_size,
        setup_map_ns: secs_ns(setup.map_s),
        setup_prefault_ns: secs_ns(setup.prefault_s),
        setup_fill_ns: secs_ns(setup.fill_s),
        setup_fingerprint_ns: secs_ns(setup.fingerprint_s),
        ..Report::default()
    }
}

/// A REPAIR's frame header: no flags, room for its head.
fn check_repair_header(fh: FrameHeader) -> Result<(), SessionError> {
    if fh.flags != 0 {
        return Err(Violation::from(GramViolation::CorrectionFlags {
            frame: "REPAIR",
            flags: fh.flags,
        })
        .into());
    }
    if (fh.length as usize) < CORRECTION_HEAD_LEN {
        return Err(SessionError::Malformed {
            context: "REPAIR",
            error: pfs_wire::WireError::Truncated,
        });
    }
    Ok(())
}

/// Checks HELLO against this receiver; `Ok(true)`: the fingerprints
/// differ and a catch-up (offered by the sender, `catch_up` allowed here)
/// will bring this blob to the sender's.
fn check_hello(
    hello: &Hello<'_>,
    blob: &BlobView<'_>,
    limits: &Limits,
    has_exec: bool,
    catch_up: bool,
) -> Result<bool, SessionError> {
    let root = blob.root();
    let differs = hello.fingerprint != root;
    let offered = hello.flags & HELLO_CATCH_UP != 0;
    let rejection = if hello.integrity == IntegrityAlg::None && !hello.mode.carries_payload() && !has_exec {
        HelloRejection::NothingToExecute { mode: hello.mode }
    } else if hello.auth_method == 0 && !hello.auth.is_empty() {
        HelloRejection::AuthData {
            len: hello.auth.len(),
        }
    } else if hello.encoding != hello.mode.encoding() {
        HelloRejection::Encoding {
            mode: hello.mode,
            encoding: hello.encoding,
        }
    } else if hello.auth_method != 0 {
        HelloRejection::AuthMethod {
            method: hello.auth_method,
        }
    } else if hello.blob_len != blob.data.len() as u64 {
        HelloRejection::BlobSize {
            sender: hello.blob_len,
            receiver: blob.data.len() as u64,
        }
    } else if hello.region_size != blob.region_size || (differs && !offered) {
        HelloRejection::Fingerprint {
            sender: hello.fingerprint,
            sender_region: hello.region_size,
            receiver: root,
            receiver_region: blob.region_size,
        }
    } else if differs && !catch_up {
        HelloRejection::CatchUpRefused {
            sender: hello.fingerprint,
            receiver: root,
        }
    } else if hello.max_desc_per_gram > limits.max_desc_count {
        HelloRejection::DescPerGram {
            asked: hello.max_desc_per_gram,
            limit: limits.max_desc_count,
        }
    } else if hello.max_desc_len > limits.max_desc_len {
        HelloRejection::DescLen {
            asked: hello.max_desc_len,
            limit: limits.max_desc_len,
        }
    } else {
        return Ok(differs);
    };
    Err(rejection.into())
}

fn secs_ns(s: f64) -> u64 {
    (s * 1e9) as u64
}
