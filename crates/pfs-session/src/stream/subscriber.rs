//! The subscriber's sans-I/O core: the handshake, every gram checked
//! against the limits, the window, the rights and the subscriber's **own**
//! blob before any entry executes, then executed in order through the
//! host; APPLIED frames, keepalives and the silence deadline.

use std::time::{Duration, Instant};

use pfs_exec::integrity::{e2e_chain, Digest};
use pfs_wire::stream::{
    Applied, EntryKind, StreamAccept, StreamEnd, StreamGram, StreamHello, FLAG_FINAL, FLAG_KEEPALIVE,
    RIGHT_MESSAGE, RIGHT_WRITE,
};
use pfs_wire::{put_frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::host::GramEntries;
use super::{keepalive_ms, silence_after, StreamBlob, StreamError, StreamHost, StreamViolation, Timers};
use crate::catchup::CatchUpStats;
use crate::framing::{put_error_frame, refusal};

/// A subscriber's limits, window and the rights it grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberConfig {
    /// Largest SGRAM body taken (also the receive buffer's size).
    pub max_gram_body: u32,
    /// Most entries per gram.
    pub max_entries: u32,
    /// Most grams in flight.
    pub window_grams: u32,
    /// Most SGRAM frame bytes in flight (at least one largest frame).
    pub window_bytes: u64,
    /// `RIGHT_WRITE` | `RIGHT_MESSAGE` (`pfs_wire::stream`); references are always allowed.
    pub rights: u8,
    /// Send a frame at least this often when idle.
    pub keepalive: Duration,
    /// Take a catch-up the publisher offers when the fingerprints differ
    /// (STREAM_ACCEPT `CATCH_UP`, wire §15.10); the driver runs the
    /// replica side.
    pub allow_catch_up: bool,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        Self {
            max_gram_body: 4 << 20,
            max_entries: 65_536,
            window_grams: 64,
            window_bytes: 16 << 20,
            rights: RIGHT_WRITE | RIGHT_MESSAGE,
            keepalive: Duration::from_secs(1),
            allow_catch_up: false,
        }
    }
}

/// What a subscriber executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SubscriberReport {
    /// Grams executed.
    pub grams: u64,
    /// Entries executed.
    pub entries: u64,
    /// Effective bytes: referenced, written and message bytes.
    pub effective_bytes: u64,
    /// Bytes written into the blob.
    pub written_bytes: u64,
    /// Message bytes handed to the host.
    pub message_bytes: u64,
    /// Grams whose digest did not match.
    pub mismatched: u64,
    /// The end-to-end digest over the grams executed.
    pub e2e_digest: u64,
    /// Bytes read and written on the transport, headers included.
    pub wire_bytes: u64,
    /// Whether the publisher ended the stream and its end-to-end digest matched ours.
    pub digests_matched: bool,
    /// What the catch-up before the stream moved (wire §15.10), when there
    /// was one; its frames are not in `wire_bytes`.
    pub catch_up: Option<CatchUpStats>,
}

/// What one step of a subscription did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Polled {
    /// Grams executed in this step (0: nothing arrived in time).
    Grams(u64),
    /// The publisher ended the stream; the final APPLIED is queued.
    Ended,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitHello,
    Streaming,
    Ended,
}

/// Grams received since the last APPLIED this side queued: what the
/// publisher may have in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    grams: u64,
    bytes: u64,
    /// Applied grams not yet reported in an APPLIED.
    unreported: bool,
}

/// The subscriber's core.
///
/// Call contract: feed every whole frame to [`Subscriber::handle_frame`]
/// with the subscriber's own blob and its host (check a frame's header
/// with [`Subscriber::check_header`] as soon as it is read, before reading
/// the body); after a batch of frames call [`Subscriber::flush_applied`];
/// write [`Subscriber::control`] and call [`Subscriber::transmitted`];
/// wake at [`Subscriber::poll_timeout`] for [`Subscriber::handle_timeout`].
/// An error ends the session; a violation queues its ERROR frame first. A
/// refused gram leaves the blob as it was.
#[derive(Debug)]
pub struct Subscriber {
    cfg: SubscriberConfig,
    blob: StreamBlob,
    phase: Phase,
    hello: Option<StreamHello>,
    report: SubscriberReport,
    window: Window,
    digest: Digest,
    timers: Timers,
    control: Vec<u8>,
    end: Option<StreamEnd>,
    /// STREAM_ACCEPT took a catch-up the driver has not run yet.
    catching_up: bool,
}

impl Subscriber {
    /// A core for `blob` (the subscriber's own), awaiting STREAM_HELLO.
    pub fn new(cfg: SubscriberConfig, blob: StreamBlob, now: Instant) -> Self {
        Self {
            cfg,
            blob,
            phase: Phase::AwaitHello,
            hello: None,
            report: SubscriberReport::default(),
            window: Window::default(),
            digest: Digest::new(pfs_wire::IntegrityAlg::None),
            timers: Timers::new(now),
            control: Vec::with_capacity(256),
            catching_up: false,
            end: None,
        }
    }

    /// The publisher's STREAM_HELLO, once taken.
    pub fn hello(&self) -> Option<&StreamHello> {
        self.hello.as_ref()
    }

    /// Figures so far.
    pub fn report(&self) -> SubscriberReport {
        self.report
    }

    /// Whether the publisher ended the stream.
    pub fn is_ended(&self) -> bool {
        self.phase == Phase::Ended
    }

    /// Control bytes to write (STREAM_ACCEPT, APPLIED, ERROR).
    #[must_use]
    pub fn control(&self) -> &[u8] {
        &self.control
    }

    /// The driver wrote [`Subscriber::control`].
    pub fn transmitted(&mut self, now: Instant) {
        if !self.control.is_empty() {
            self.report.wire_bytes += self.control.len() as u64;
            self.control.clear();
            self.timers.last_sent = now;
        }
    }

    /// Checks a frame header before its body is read: an SGRAM over
    /// `max_gram_body` or beyond the window is refused unread.
    pub fn check_header(&mut self, header: &FrameHeader) -> Result<(), StreamError> {
        let r = self.header_ok(header);
        self.on_violation(r)
    }

    fn header_ok(&self, header: &FrameHeader) -> Result<(), StreamError> {
        if header.frame_type != FrameType::Sgram {
            return Ok(());
        }
        let limit = |what, got: u64, limit: u64| StreamViolation::Limit { what, got, limit };
        if header.length > self.cfg.max_gram_body {
            return Err(limit("body", header.length.into(), self.cfg.max_gram_body.into()).into());
        }
        if self.window.grams >= u64::from(self.cfg.window_grams) {
            return Err(limit(
                "grams in flight",
                self.window.grams + 1,
                self.cfg.window_grams.into(),
            )
            .into());
        }
        let bytes = self.window.bytes + FRAME_HEADER_LEN as u64 + u64::from(header.length);
        if bytes > self.cfg.window_bytes {
            return Err(limit("bytes in flight", bytes, self.cfg.window_bytes).into());
        }
        Ok(())
    }

    /// Refuses the publisher for what the driver found (a frame header
    /// that does not decode): queues the ERROR frame and ends.
    pub fn refuse(&mut self, v: StreamViolation) -> StreamError {
        put_error_frame(&mut self.control, v.code(), &v.to_string());
        self.phase = Phase::Ended;
        v.into()
    }

    fn on_violation<T>(&mut self, r: Result<T, StreamError>) -> Result<T, StreamError> {
        if let Err(StreamError::Violation(v)) = &r {
            put_error_frame(&mut self.control, v.code(), &v.to_string());
            self.phase = Phase::Ended;
        }
        r
    }

    /// One whole frame from the publisher. Grams execute over `blob`
    /// through `host`.
    pub fn handle_frame(
        &mut self,
        header: FrameHeader,
        body: &[u8],
        blob: &mut [u8],
        host: &mut dyn StreamHost,
        now: Instant,
    ) -> Result<Polled, StreamError> {
        self.report.wire_bytes += (FRAME_HEADER_LEN + body.len()) as u64;
        self.timers.last_heard = now;
        let r = match header.frame_type {
            FrameType::Error => {
                self.phase = Phase::Ended;
                Err(refusal(body).into())
            }
            _ => self.on_frame(header, body, blob, host),
        };
        self.on_violation(r)
    }

    fn on_frame(
        &mut self,
        header: FrameHeader,
        body: &[u8],
        blob: &mut [u8],
        host: &mut dyn StreamHost,
    ) -> Result<Polled, StreamError> {
        match (self.phase, header.frame_type) {
            (Phase::AwaitHello, FrameType::StreamHello) => {
                self.take_hello(body)?;
                Ok(Polled::Grams(0))
            }
            (Phase::Streaming, FrameType::Sgram) => {
                self.header_ok(&header)?;
                self.window.grams += 1;
                self.window.bytes += (FRAME_HEADER_LEN + body.len()) as u64;
                self.execute(body, blob, host)?;
                Ok(Polled::Grams(1))
            }
            (Phase::Streaming, FrameType::StreamEnd) => {
                let end = StreamEnd::parse(body).map_err(StreamViolation::decode("STREAM_END"))?;
                if header.flags & FLAG_KEEPALIVE != 0 {
                    return Ok(Polled::Grams(0));
                }
                if end.grams != self.report.grams {
                    return Err(StreamViolation::Position {
                        what: "STREAM_END grams",
                        got: end.grams,
                        bound: self.report.grams,
                    }
                    .into());
                }
                self.report.digests_matched =
                    self.report.mismatched == 0 && end.e2e_digest == self.report.e2e_digest;
                self.end = Some(end);
                self.window.unreported = false;
                let applied = self.applied_body();
                put_frame(&mut self.control, FrameType::Applied, FLAG_FINAL, &applied.emit());
                self.phase = Phase::Ended;
                Ok(Polled::Ended)
            }
            (Phase::AwaitHello, got) => Err(StreamViolation::Unexpected {
                expected: "STREAM_HELLO",
                got,
            }
            .into()),
            (_, got) => Err(StreamViolation::Unexpected {
                expected: "SGRAM or STREAM_END",
                got,
            }
            .into()),
        }
    }

    fn take_hello(&mut self, body: &[u8]) -> Result<(), StreamError> {
        let h = StreamHello::parse(body).map_err(StreamViolation::decode("STREAM_HELLO"))?;
        let mismatch =
            |what, theirs: String, ours: String| StreamViolation::BlobMismatch { what, theirs, ours };
        if h.blob_len != self.blob.len {
            return Err(mismatch("length", h.blob_len.to_string(), self.blob.len.to_string()).into());
        }
        if h.region_size != self.blob.region_size {
            return Err(mismatch(
                "fingerprint region size",
                h.region_size.to_string(),
                self.blob.region_size.to_string(),
            )
            .into());
        }
        let catch_up = h.fingerprint != self.blob.fingerprint && h.catch_up && self.cfg.allow_catch_up;
        if h.fingerprint != self.blob.fingerprint && h.catch_up && !catch_up {
            return Err(StreamViolation::CatchUpRefused {
                publisher: crate::short_hex(&h.fingerprint),
                subscriber: crate::short_hex(&self.blob.fingerprint),
            }
            .into());
        }
        if h.fingerprint != self.blob.fingerprint && !catch_up {
            return Err(mismatch(
                "fingerprint",
                crate::short_hex(&h.fingerprint),
                crate::short_hex(&self.blob.fingerprint),
            )
            .into());
        }
        let min_window = FRAME_HEADER_LEN as u64 + u64::from(self.cfg.max_gram_body);
        let accept = StreamAccept {
            max_gram_body: self.cfg.max_gram_body.max(pfs_wire::GRAM_HEADER_LEN as u32),
            max_entries: self.cfg.max_entries,
            window_grams: self.cfg.window_grams.max(1),
            rights: self.cfg.rights,
            window_bytes: self.cfg.window_bytes.max(min_window),
            blob_len: self.blob.len,
            session_nonce: h.session_nonce,
            keepalive_ms: keepalive_ms(self.cfg.keepalive),
            catch_up,
        };
        self.cfg.window_bytes = accept.window_bytes;
        self.cfg.window_grams = accept.window_grams;
        put_frame(&mut self.control, FrameType::StreamAccept, 0, &accept.emit());
        self.digest = Digest::new(h.integrity);
        self.hello = Some(h);
        self.phase = Phase::Streaming;
        self.catching_up = catch_up;
        Ok(())
    }

    /// Whether STREAM_ACCEPT took a catch-up: once it is written, the
    /// driver runs the replica side towards STREAM_HELLO's fingerprint,
    /// then calls [`Subscriber::caught_up`].
    pub fn catching_up(&self) -> bool {
        self.catching_up
    }

    /// The catch-up ended with this blob's root equal to the publisher's:
    /// grams may flow, the deadlines counted from `now`.
    pub fn caught_up(&mut self, now: Instant, stats: CatchUpStats) {
        if let Some(h) = self.hello {
            self.blob.fingerprint = h.fingerprint;
        }
        self.catching_up = false;
        self.timers = Timers::new(now);
        self.report.catch_up = Some(stats);
    }

    /// Checks the whole gram, then executes it.
    fn execute(
        &mut self,
        body: &[u8],
        blob: &mut [u8],
        host: &mut dyn StreamHost,
    ) -> Result<(), StreamError> {
        let g = StreamGram::parse(body).map_err(StreamViolation::decode("SGRAM"))?;
        let h = g.header;
        if h.seq != self.report.grams {
            return Err(StreamViolation::Sequence {
                expected: self.report.grams,
                got: h.seq,
            }
            .into());
        }
        let integrity = self.hello.map_or(0, |x| x.integrity as u8);
        if h.integrity as u8 != integrity {
            return Err(StreamViolation::Integrity {
                expected: integrity,
                got: h.integrity as u8,
            }
            .into());
        }
        if h.desc_count > self.cfg.max_entries {
            return Err(StreamViolation::Limit {
                what: "entries",
                got: h.desc_count.into(),
                limit: self.cfg.max_entries.into(),
            }
            .into());
        }
        // Every entry before the first executes: a refused gram leaves
        // the blob as it was.
        let blob_len = blob.len() as u64;
        let (mut written, mut messages, mut effective) = (0u64, 0u64, 0u64);
        for e in g.entries() {
            let e = e.map_err(StreamViolation::decode("SGRAM entry table"))?;
            let right = match e.kind {
                EntryKind::Reference => true,
                EntryKind::Write => self.cfg.rights & RIGHT_WRITE != 0,
                EntryKind::Message => self.cfg.rights & RIGHT_MESSAGE != 0,
            };
            if !right {
                return Err(StreamViolation::NoRight {
                    seq: h.seq,
                    kind: e.kind.name(),
                }
                .into());
            }
            if e.kind.has_offset() && e.offset.saturating_add(u64::from(e.len)) > blob_len {
                return Err(StreamViolation::OutOfBounds {
                    seq: h.seq,
                    kind: e.kind.name(),
                    offset: e.offset,
                    len: e.len,
                    blob_len,
                }
                .into());
            }
            match e.kind {
                EntryKind::Write => written += u64::from(e.len),
                EntryKind::Message => messages += u64::from(e.len),
                EntryKind::Reference => {}
            }
            effective += u64::from(e.len);
        }
        self.digest.reset();
        let mut entries = GramEntries::new(h.seq, h.desc_count, g.entries(), blob, &mut self.digest);
        host.gram(&mut entries);
        entries.drain();
        let value = self.digest.value();
        let r = &mut self.report;
        if value != h.integrity_value {
            r.mismatched += 1;
        }
        r.e2e_digest = e2e_chain(r.e2e_digest, h.seq, value);
        r.grams += 1;
        r.entries += u64::from(h.desc_count);
        r.effective_bytes += effective;
        r.written_bytes += written;
        r.message_bytes += messages;
        self.window.unreported = true;
        Ok(())
    }

    fn applied_body(&self) -> Applied {
        Applied {
            applied: self.report.grams,
            e2e_digest: self.report.e2e_digest,
            mismatched: self.report.mismatched,
            window_bytes: self.cfg.window_bytes,
            window_grams: self.cfg.window_grams,
        }
    }

    /// Queues APPLIED if grams were applied since the last one: call after
    /// each batch of frames (it opens the publisher's window again).
    pub fn flush_applied(&mut self, now: Instant) {
        if self.phase == Phase::Streaming && self.window.unreported {
            self.queue_applied(now);
        }
    }

    fn queue_applied(&mut self, now: Instant) {
        let body = self.applied_body().emit();
        put_frame(&mut self.control, FrameType::Applied, 0, &body);
        self.window = Window::default();
        self.timers.last_sent = now;
    }

    /// When the core next needs [`Subscriber::handle_timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let h = self.hello?;
        (self.phase == Phase::Streaming).then(|| {
            let silence = self.timers.last_heard + silence_after(h.keepalive_ms);
            silence.min(self.timers.last_sent + self.cfg.keepalive)
        })
    }

    /// Deadlines: APPLIED as keepalive when idle; the end when the
    /// publisher was silent too long.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), StreamError> {
        let Some(h) = self.hello else { return Ok(()) };
        if self.phase != Phase::Streaming {
            return Ok(());
        }
        let after = silence_after(h.keepalive_ms);
        if now >= self.timers.last_heard + after {
            self.phase = Phase::Ended;
            return Err(StreamError::Silent {
                peer: "publisher",
                after,
            });
        }
        if now >= self.timers.last_sent + self.cfg.keepalive && self.control.is_empty() {
            self.queue_applied(now);
        }
        Ok(())
    }
}
