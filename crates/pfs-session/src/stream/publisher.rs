//! The publisher's sans-I/O core: builds grams, keeps the window, the
//! applied position and the keepalive and silence deadlines.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use pfs_exec::integrity::{e2e_chain, Digest};
use pfs_wire::control::SenderSummary;
use pfs_wire::stream::{
    Applied, EntryKind, EntryTables, StreamAccept, StreamHello, FLAG_FINAL, FLAG_KEEPALIVE, RIGHT_MESSAGE,
    RIGHT_WRITE,
};
use pfs_wire::{put_frame, FrameHeader, FrameType, IntegrityAlg, FRAME_HEADER_LEN, GRAM_HEADER_LEN};

use super::{keepalive_ms, silence_after, PublishError, StreamBlob, StreamError, StreamViolation, Timers};
use crate::catchup::CatchUpStats;
use crate::framing::{refusal, Transmit};

/// How a publisher opens its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherConfig {
    /// Integrity algorithm of every gram's digest.
    pub integrity: IntegrityAlg,
    /// Send a frame at least this often (a keepalive when idle).
    pub keepalive: Duration,
    /// Random per session.
    pub session_nonce: u64,
    /// This stream's index in its publication (0 unsharded).
    pub stream_index: u16,
    /// Streams in the publication (1 unsharded).
    pub stream_count: u16,
    /// Offer catch-up (STREAM_HELLO `CATCH_UP`, wire §15.10): the driver
    /// runs the source side when the subscriber takes it.
    pub catch_up: bool,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            integrity: IntegrityAlg::Xxh3,
            keepalive: Duration::from_secs(1),
            session_nonce: 1,
            stream_index: 0,
            stream_count: 1,
            catch_up: false,
        }
    }
}

/// What `offer` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Offer {
    /// The gram is on its way with this `seq`.
    Sent {
        /// Its sequence number.
        seq: u64,
    },
    /// The subscriber's window is full: nothing was kept; offer again after
    /// the subscriber applied more (`wait_applied`, `poll`).
    BackPressure,
}

/// The publisher's figures at the end of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct PublisherReport {
    /// Grams sent.
    pub grams: u64,
    /// Entries sent.
    pub entries: u64,
    /// Effective bytes: referenced, written and message bytes.
    pub effective_bytes: u64,
    /// Slab bytes sent (writes and messages).
    pub payload_bytes: u64,
    /// Bytes written to the transport, every frame header included.
    pub wire_bytes_sent: u64,
    /// Bytes read from the transport.
    pub wire_bytes_received: u64,
    /// Grams the subscriber applied.
    pub applied: u64,
    /// Grams whose digest did not match at the subscriber.
    pub mismatched: u64,
    /// Whether every digest matched: no mismatch and equal end-to-end digests.
    pub digests_matched: bool,
    /// Times `offer` met a full window.
    pub back_pressure: u64,
    /// What the catch-up before the stream moved (wire §15.10), when there
    /// was one; its frames are not in the wire counts above.
    pub catch_up: Option<CatchUpStats>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitAccept,
    /// STREAM_ACCEPT took the catch-up: the driver runs it, then
    /// [`Publisher::caught_up`].
    CatchingUp,
    Streaming,
    Ending,
    Done,
}

/// The gram under construction: both tables, the slab, the digest so far,
/// and the encoded heads of the gram ready to go.
#[derive(Debug)]
struct Builder {
    tables: EntryTables,
    slab: Vec<u8>,
    digest: Digest,
    effective: u64,
    /// The first error met while building; the gram is refused at `seal`.
    error: Option<PublishError>,
    /// Frame header and gram header of the sealed gram.
    head: [u8; FRAME_HEADER_LEN + GRAM_HEADER_LEN],
    /// The sealed gram's encoding.
    encoding: pfs_wire::Encoding,
    /// A sealed gram waits for the driver.
    ready: bool,
}

/// Grams in flight: the window from the latest APPLIED, and the
/// cumulative frame bytes at the end of each unapplied gram.
#[derive(Debug)]
struct Flight {
    latest: Applied,
    /// `ends[i]` = frame bytes of every SGRAM up to and including `latest.applied + i`.
    ends: VecDeque<u64>,
    /// Frame bytes of every SGRAM sent.
    sgram_bytes: u64,
    /// Frame bytes of every SGRAM up to `latest.applied` (exclusive).
    applied_bytes: u64,
}

/// The publisher's core.
///
/// Call contract: after [`Publisher::new`], write every
/// [`Publisher::poll_transmit`] and report it with
/// [`Publisher::transmitted`], until `None`; feed every whole frame that
/// arrives to [`Publisher::handle_frame`]; wake at
/// [`Publisher::poll_timeout`] and call [`Publisher::handle_timeout`].
/// Grams: [`Publisher::gram`] gives a [`GramWriter`]; [`Publisher::seal`]
/// sends or refuses what it holds (window, limits), never both. The core
/// never reads the clock nor touches a socket; `blob` is the publisher's
/// own blob, which REFERENCE digests read.
#[derive(Debug)]
pub struct Publisher {
    hello: StreamHello,
    accept: Option<StreamAccept>,
    phase: Phase,
    build: Builder,
    flight: Flight,
    totals: SenderSummary,
    received: u64,
    timers: Timers,
    keepalive: Duration,
    control: Vec<u8>,
    final_applied: Option<Applied>,
    back_pressure: u64,
    catch_up: Option<CatchUpStats>,
}

impl Publisher {
    /// A core that opens with STREAM_HELLO for `blob`.
    pub fn new(cfg: &PublisherConfig, blob: StreamBlob, now: Instant) -> Self {
        let hello = StreamHello {
            blob_len: blob.len,
            region_size: blob.region_size,
            integrity: cfg.integrity,
            stream_index: cfg.stream_index,
            stream_count: cfg.stream_count.max(1),
            keepalive_ms: keepalive_ms(cfg.keepalive),
            session_nonce: cfg.session_nonce,
            catch_up: cfg.catch_up,
            fingerprint: blob.fingerprint,
        };
        let mut control = Vec::with_capacity(256);
        put_frame(&mut control, FrameType::StreamHello, 0, &hello.emit());
        Self {
            hello,
            accept: None,
            phase: Phase::AwaitAccept,
            build: Builder {
                tables: EntryTables::with_capacity(256),
                slab: Vec::new(),
                digest: Digest::new(cfg.integrity),
                effective: 0,
                error: None,
                head: [0; FRAME_HEADER_LEN + GRAM_HEADER_LEN],
                encoding: pfs_wire::Encoding::Absolute,
                ready: false,
            },
            flight: Flight {
                latest: Applied::default(),
                ends: VecDeque::new(),
                sgram_bytes: 0,
                applied_bytes: 0,
            },
            totals: SenderSummary::default(),
            received: 0,
            timers: Timers::new(now),
            keepalive: Duration::from_millis(u64::from(keepalive_ms(cfg.keepalive))),
            control,
            final_applied: None,
            back_pressure: 0,
            catch_up: None,
        }
    }

    /// Whether the subscriber took the catch-up and the driver must run it
    /// (as source) before the stream starts.
    pub fn catching_up(&self) -> bool {
        self.phase == Phase::CatchingUp
    }

    /// The catch-up ended with equal roots: the stream starts, its
    /// keepalive and silence deadlines counted from `now`.
    pub fn caught_up(&mut self, now: Instant, stats: CatchUpStats) {
        if self.phase == Phase::CatchingUp {
            self.phase = Phase::Streaming;
        }
        self.timers = Timers::new(now);
        self.catch_up = Some(stats);
    }

    /// The subscriber's STREAM_ACCEPT, once it arrived.
    pub fn accepted(&self) -> Option<&StreamAccept> {
        self.accept.as_ref()
    }

    /// Grams the subscriber has applied (its latest APPLIED).
    pub fn applied(&self) -> u64 {
        self.flight.latest.applied
    }

    /// Grams sent so far (the next `seq`).
    pub fn sent(&self) -> u64 {
        self.totals.grams
    }

    /// Whether the session is over (STREAM_END answered).
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Whether the window has room for one more gram (bytes aside).
    pub fn has_room(&self) -> bool {
        let w = self.flight.latest;
        self.phase == Phase::Streaming
            && self.totals.grams < w.applied.saturating_add(u64::from(w.window_grams))
    }

    /// Starts a new gram; whatever an unsealed earlier one held is dropped.
    pub fn gram<'a>(&'a mut self, blob: &'a [u8]) -> GramWriter<'a> {
        let b = &mut self.build;
        if b.ready {
            // The sealed gram is still to be written: keep it intact.
            b.error = Some(PublishError::Unsent);
        } else {
            b.tables.clear();
            b.slab.clear();
            b.digest.reset();
            b.effective = 0;
            b.error = None;
        }
        let (rights, blob_len) = self
            .accept
            .map_or((0, 0), |a| (a.rights, a.blob_len.min(blob.len() as u64)));
        GramWriter {
            build: b,
            blob,
            rights,
            blob_len,
        }
    }

    /// Sends the gram the last [`Publisher::gram`] built, or refuses it:
    /// `Ok(Offer::BackPressure)` when the window has no room (nothing
    /// kept), `Err(Publish)` when it breaks the subscriber's limits.
    pub fn seal(&mut self) -> Result<Offer, StreamError> {
        let accept = match (self.phase, self.accept) {
            (Phase::Streaming, Some(a)) => a,
            _ => return Err(StreamError::Ended),
        };
        let room = self.has_room();
        let b = &mut self.build;
        if let Some(e) = b.error.take() {
            if e != PublishError::Unsent {
                b.tables.clear();
                b.slab.clear();
            }
            return Err(e.into());
        }
        if !room {
            // A full window: the driver did not even build the gram.
            self.back_pressure += 1;
            return Ok(Offer::BackPressure);
        }
        if b.tables.count() > accept.max_entries {
            return Err(PublishError::TooManyEntries {
                entries: b.tables.count(),
                max: accept.max_entries,
            }
            .into());
        }
        let (encoding, table) = b.tables.smaller();
        let body = GRAM_HEADER_LEN as u64 + table.len() as u64 + b.slab.len() as u64;
        if body > u64::from(accept.max_gram_body) {
            return Err(PublishError::GramTooLarge {
                body,
                max: accept.max_gram_body,
            }
            .into());
        }
        let frame = FRAME_HEADER_LEN as u64 + body;
        let w = self.flight.latest;
        let in_flight = self.flight.sgram_bytes - self.flight.applied_bytes;
        if in_flight + frame > w.window_bytes {
            self.back_pressure += 1;
            return Ok(Offer::BackPressure);
        }
        let seq = self.totals.grams;
        let value = b.digest.value();
        let gram = b.tables.header(seq, encoding, self.hello.integrity, value);
        let fh = FrameHeader {
            frame_type: FrameType::Sgram,
            flags: 0,
            length: body as u32,
        };
        b.head[..FRAME_HEADER_LEN].copy_from_slice(&fh.emit());
        b.head[FRAME_HEADER_LEN..].copy_from_slice(&gram.emit());
        b.encoding = encoding;
        b.ready = true;
        self.totals.grams += 1;
        self.totals.descriptors += u64::from(b.tables.count());
        self.totals.effective_bytes += b.effective;
        self.totals.payload_bytes += b.slab.len() as u64;
        self.totals.e2e_digest = e2e_chain(self.totals.e2e_digest, seq, value);
        self.flight.sgram_bytes += frame;
        self.flight.ends.push_back(self.flight.sgram_bytes);
        Ok(Offer::Sent { seq })
    }

    /// Asks for the end of the stream: STREAM_END with the summary; the
    /// session is done when the subscriber's APPLIED `FINAL` arrives.
    pub fn finish(&mut self) {
        if matches!(self.phase, Phase::Streaming) {
            // The summary states what was written before STREAM_END: the
            // control bytes still pending go first, so count them now.
            self.totals.wire_bytes_sent += self.control.len() as u64;
            put_frame(&mut self.control, FrameType::StreamEnd, 0, &self.totals.emit());
            self.totals.wire_bytes_sent += (FRAME_HEADER_LEN + pfs_wire::stream::STREAM_END_LEN) as u64;
            self.phase = Phase::Ending;
        }
    }

    /// The next bytes to write, if any: control frames first, then a sealed gram.
    #[must_use]
    pub fn poll_transmit(&self) -> Option<Transmit<'_>> {
        if !self.control.is_empty() {
            return Some(Transmit::Parts {
                parts: [&self.control[..], &[], &[]],
                what: "stream control frame",
            });
        }
        let b = &self.build;
        b.ready.then(|| Transmit::Parts {
            parts: [&b.head[..], b.tables.table(b.encoding), &b.slab[..]],
            what: "SGRAM",
        })
    }

    /// The driver wrote what [`Publisher::poll_transmit`] returned.
    pub fn transmitted(&mut self, now: Instant) {
        let n = if !self.control.is_empty() {
            let n = self.control.len() as u64;
            self.control.clear();
            // From STREAM_END on, `finish` counted the bytes already.
            if self.phase == Phase::Ending || self.phase == Phase::Done {
                0
            } else {
                n
            }
        } else if self.build.ready {
            self.build.ready = false;
            (self.build.head.len()
                + self.build.tables.table(self.build.encoding).len()
                + self.build.slab.len()) as u64
        } else {
            0
        };
        self.totals.wire_bytes_sent += n;
        self.timers.last_sent = now;
    }

    /// One whole frame from the subscriber; `len` bytes with its header.
    pub fn handle_frame(
        &mut self,
        header: FrameHeader,
        body: &[u8],
        now: Instant,
    ) -> Result<(), StreamError> {
        self.received += (FRAME_HEADER_LEN + body.len()) as u64;
        self.timers.last_heard = now;
        let r = self.on_frame(header, body);
        if let Err(StreamError::Violation(v)) = &r {
            crate::framing::put_error_frame(&mut self.control, v.code(), &v.to_string());
            self.phase = Phase::Done;
        }
        r
    }

    /// Refuses the subscriber for what the driver found (a frame header
    /// that does not decode): queues the ERROR frame and ends.
    pub fn refuse(&mut self, v: StreamViolation) -> StreamError {
        crate::framing::put_error_frame(&mut self.control, v.code(), &v.to_string());
        self.phase = Phase::Done;
        v.into()
    }

    fn on_frame(&mut self, header: FrameHeader, body: &[u8]) -> Result<(), StreamError> {
        match (self.phase, header.frame_type) {
            (_, FrameType::Error) => {
                self.phase = Phase::Done;
                Err(refusal(body).into())
            }
            (Phase::AwaitAccept, FrameType::StreamAccept) => {
                let a = StreamAccept::parse(body).map_err(StreamViolation::decode("STREAM_ACCEPT"))?;
                if a.session_nonce != self.hello.session_nonce {
                    return Err(StreamViolation::Nonce {
                        sent: self.hello.session_nonce,
                        got: a.session_nonce,
                    }
                    .into());
                }
                if a.blob_len != self.hello.blob_len {
                    return Err(StreamViolation::BlobMismatch {
                        what: "length",
                        theirs: self.hello.blob_len.to_string(),
                        ours: a.blob_len.to_string(),
                    }
                    .into());
                }
                if a.catch_up && !self.hello.catch_up {
                    return Err(StreamViolation::CatchUpUnasked.into());
                }
                self.flight.latest = Applied {
                    window_bytes: a.window_bytes,
                    window_grams: a.window_grams,
                    ..Applied::default()
                };
                self.accept = Some(a);
                self.phase = if a.catch_up {
                    Phase::CatchingUp
                } else {
                    Phase::Streaming
                };
                Ok(())
            }
            (Phase::Streaming | Phase::Ending, FrameType::Applied) => {
                let a = Applied::parse(body).map_err(StreamViolation::decode("APPLIED"))?;
                let prev = self.flight.latest.applied;
                if a.applied < prev || a.applied > self.totals.grams {
                    return Err(StreamViolation::Position {
                        what: "APPLIED position",
                        got: a.applied,
                        bound: if a.applied < prev { prev } else { self.totals.grams },
                    }
                    .into());
                }
                for _ in prev..a.applied {
                    if let Some(end) = self.flight.ends.pop_front() {
                        self.flight.applied_bytes = end;
                    }
                }
                self.flight.latest = a;
                if header.flags & FLAG_FINAL != 0 {
                    if self.phase != Phase::Ending || a.applied != self.totals.grams {
                        return Err(StreamViolation::Position {
                            what: "APPLIED FINAL position",
                            got: a.applied,
                            bound: self.totals.grams,
                        }
                        .into());
                    }
                    self.final_applied = Some(a);
                    self.phase = Phase::Done;
                }
                Ok(())
            }
            (Phase::AwaitAccept, got) => Err(StreamViolation::Unexpected {
                expected: "STREAM_ACCEPT",
                got,
            }
            .into()),
            (_, got) => Err(StreamViolation::Unexpected {
                expected: "APPLIED",
                got,
            }
            .into()),
        }
    }

    /// When the core next needs [`Publisher::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let a = self.accept?;
        if self.phase == Phase::Done {
            return None;
        }
        let silence = self.timers.last_heard + silence_after(a.keepalive_ms);
        Some(silence.min(self.timers.last_sent + self.keepalive))
    }

    /// Deadlines: a keepalive when this side was idle, the end when the
    /// subscriber was silent too long.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), StreamError> {
        let Some(a) = self.accept else { return Ok(()) };
        if self.phase == Phase::Done {
            return Ok(());
        }
        let after = silence_after(a.keepalive_ms);
        if now >= self.timers.last_heard + after {
            self.phase = Phase::Done;
            return Err(StreamError::Silent {
                peer: "subscriber",
                after,
            });
        }
        if self.phase == Phase::Streaming
            && now >= self.timers.last_sent + self.keepalive
            && self.control.is_empty()
            && !self.build.ready
        {
            put_frame(
                &mut self.control,
                FrameType::StreamEnd,
                FLAG_KEEPALIVE,
                &self.totals.emit(),
            );
        }
        Ok(())
    }

    /// The figures so far (final once [`Publisher::is_done`]).
    pub fn report(&self) -> PublisherReport {
        let f = self.final_applied;
        PublisherReport {
            grams: self.totals.grams,
            entries: self.totals.descriptors,
            effective_bytes: self.totals.effective_bytes,
            payload_bytes: self.totals.payload_bytes,
            wire_bytes_sent: self.totals.wire_bytes_sent,
            wire_bytes_received: self.received,
            applied: self.flight.latest.applied,
            mismatched: self.flight.latest.mismatched,
            digests_matched: f.is_some_and(|f| f.mismatched == 0 && f.e2e_digest == self.totals.e2e_digest),
            back_pressure: self.back_pressure,
            catch_up: self.catch_up,
        }
    }
}

/// Builds one gram: entries in the order they will execute. Errors are
/// kept and returned by `offer` (the first one wins; later calls are
/// ignored), so the calls chain.
#[derive(Debug)]
pub struct GramWriter<'a> {
    build: &'a mut Builder,
    blob: &'a [u8],
    rights: u8,
    blob_len: u64,
}

impl<'a> GramWriter<'a> {
    fn check(&mut self, kind: EntryKind, offset: u64, len: u64) -> bool {
        if self.build.error.is_some() {
            return false;
        }
        let right = match kind {
            EntryKind::Reference => true,
            EntryKind::Write => self.rights & RIGHT_WRITE != 0,
            EntryKind::Message => self.rights & RIGHT_MESSAGE != 0,
        };
        let err = if !right {
            Some(PublishError::NoRight { kind: kind.name() })
        } else if kind.has_offset() && offset.checked_add(len).is_none_or(|end| end > self.blob_len) {
            Some(PublishError::OutOfBounds {
                kind: kind.name(),
                offset,
                len,
                blob_len: self.blob_len,
            })
        } else {
            None
        };
        self.build.error = err;
        err.is_none()
    }

    fn push(&mut self, kind: EntryKind, offset: u64, len: u32) -> bool {
        match self.build.tables.push(kind, offset, len) {
            Ok(()) => {
                self.build.effective += u64::from(len);
                true
            }
            Err(e) => {
                self.build.error = Some(PublishError::Entry(e));
                false
            }
        }
    }

    /// A REFERENCE: `len` bytes at `offset`, which both blobs hold. Its
    /// digest reads the publisher's blob as it is now.
    pub fn reference(&mut self, offset: u64, len: u32) -> &mut Self {
        if self.check(EntryKind::Reference, offset, u64::from(len))
            && self.push(EntryKind::Reference, offset, len)
        {
            // In bounds of `blob_len` ≤ the blob's length: checked above.
            let s = offset as usize;
            self.build.digest.update(&self.blob[s..s + len as usize]);
        }
        self
    }

    /// A WRITE: the subscriber writes `bytes` into its blob at `offset`
    /// (publish bytes your own blob already holds, so later references match).
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> &mut Self {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        if self.check(EntryKind::Write, offset, bytes.len() as u64)
            && self.push(EntryKind::Write, offset, len)
        {
            self.build.slab.extend_from_slice(bytes);
            self.build.digest.update(bytes);
        }
        self
    }

    /// A MESSAGE: `bytes` for the subscriber's code.
    pub fn message(&mut self, bytes: &[u8]) -> &mut Self {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        if self.check(EntryKind::Message, 0, 0) && self.push(EntryKind::Message, 0, len) {
            self.build.slab.extend_from_slice(bytes);
            self.build.digest.update(bytes);
        }
        self
    }

    /// Room for `len` payload bytes, written in place in the outgoing
    /// buffer (no copy); then [`Claim::commit_write`] or
    /// [`Claim::commit_message`]. A claim dropped without commit keeps nothing.
    pub fn claim(&mut self, len: usize) -> Claim<'_, 'a> {
        let start = self.build.slab.len();
        self.build.slab.resize(start + len, 0);
        Claim {
            writer: self,
            start,
            done: false,
        }
    }

    /// Entries so far.
    pub fn entries(&self) -> u32 {
        self.build.tables.count()
    }

    /// Payload bytes so far (writes and messages).
    pub fn payload_len(&self) -> usize {
        self.build.slab.len()
    }
}

/// Payload bytes claimed in the outgoing buffer.
#[derive(Debug)]
pub struct Claim<'w, 'a> {
    writer: &'w mut GramWriter<'a>,
    start: usize,
    done: bool,
}

impl Claim<'_, '_> {
    /// The claimed bytes, to fill.
    pub fn bytes(&mut self) -> &mut [u8] {
        &mut self.writer.build.slab[self.start..]
    }

    fn commit(mut self, kind: EntryKind, offset: u64) {
        let len = self.writer.build.slab.len() - self.start;
        let ok = self.writer.check(kind, offset, len as u64)
            && self
                .writer
                .push(kind, offset, u32::try_from(len).unwrap_or(u32::MAX));
        if ok {
            let b = &mut self.writer.build;
            b.digest.update(&b.slab[self.start..]);
            self.done = true;
        }
    }

    /// Sends the claimed bytes as a WRITE at `offset`.
    pub fn commit_write(self, offset: u64) {
        self.commit(EntryKind::Write, offset);
    }

    /// Sends the claimed bytes as a MESSAGE.
    pub fn commit_message(self) {
        self.commit(EntryKind::Message, 0);
    }
}

impl Drop for Claim<'_, '_> {
    fn drop(&mut self) {
        if !self.done {
            self.writer.build.slab.truncate(self.start);
        }
    }
}
