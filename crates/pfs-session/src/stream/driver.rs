//! Thin blocking drivers: each moves bytes between a transport and its
//! core, and sleeps until the core's next deadline. Every decision (window,
//! limits, keepalives, silence) is the core's.

use std::io::IoSlice;
use std::time::{Duration, Instant};

use pfs_transport::Transport;
use pfs_wire::{FrameHeader, FRAME_HEADER_LEN};

use super::{
    GramWriter, Offer, Polled, Publisher, PublisherConfig, PublisherReport, StreamBlob, StreamError,
    StreamHost, StreamViolation, Subscriber, SubscriberConfig, SubscriberReport,
};
use crate::framing::{is_timeout, now, ReadTimeout, RecvBuf, Transmit};
use crate::{SessionError, Timeout};

/// Writes `parts` whole, as one vectored write where it can. The
/// transport's write timeout (set once per link, [`set_write_bound`])
/// bounds each call: no clock or socket option per gram.
fn write_parts(t: &mut dyn Transport, tx: &Transmit<'_>) -> Result<(), StreamError> {
    let Transmit::Parts { parts, what } = tx else {
        return Ok(());
    };
    let mut iov = (*parts).map(IoSlice::new);
    t.write_all_vectored(&mut iov)
        .map_err(|source| StreamError::from(SessionError::Transport { during: what, source }))?;
    Ok(())
}

/// How long one write call may wait for the peer: before the handshake,
/// its timeout; after it, the peer's silence bound.
fn set_write_bound(t: &mut dyn Transport, after: Duration) -> Result<(), StreamError> {
    t.set_write_timeout(Some(after)).map_err(|source| {
        StreamError::from(SessionError::Transport {
            during: "setting the write timeout",
            source,
        })
    })
}

/// Reads once, waiting until `deadline` at most: `Ok(false)` when nothing
/// arrived in time.
fn read_once(
    t: &mut dyn Transport,
    recv: &mut RecvBuf,
    timeout: &mut ReadTimeout,
    deadline: Instant,
    during: &'static str,
) -> Result<bool, StreamError> {
    let n = now();
    if n >= deadline {
        return Ok(false);
    }
    timeout
        .update(t, Some(deadline), n)
        .map_err(|source| SessionError::Transport { during, source })?;
    let want = match FrameHeader::parse(recv.filled()) {
        Ok(h) => FRAME_HEADER_LEN + h.length as usize,
        Err(_) => FRAME_HEADER_LEN,
    };
    match recv.read_from(t, want.min(recv.capacity())) {
        Ok(0) => Err(SessionError::PeerClosed { during }.into()),
        Ok(_) => Ok(true),
        Err(e) if is_timeout(&e) => Ok(false),
        Err(source) => Err(SessionError::Transport { during, source }.into()),
    }
}

/// The next whole frame at the front of `filled`: its header and length.
fn whole_frame(filled: &[u8]) -> Result<Option<(FrameHeader, usize)>, StreamViolation> {
    if filled.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    let h = FrameHeader::parse(filled).map_err(StreamViolation::decode("frame header"))?;
    let len = FRAME_HEADER_LEN + h.length as usize;
    Ok((filled.len() >= len).then_some((h, len)))
}

/// A publisher's connection: the core over a transport.
pub struct PublisherLink {
    t: Box<dyn Transport>,
    core: Publisher,
    recv: RecvBuf,
    read_timeout: ReadTimeout,
}

impl std::fmt::Debug for PublisherLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherLink").field("core", &self.core).finish()
    }
}

impl PublisherLink {
    /// Sends STREAM_HELLO on `t` and waits (up to `handshake`) for the
    /// subscriber's STREAM_ACCEPT.
    pub fn open(
        t: Box<dyn Transport>,
        cfg: &PublisherConfig,
        blob: StreamBlob,
        handshake: Duration,
    ) -> Result<Self, StreamError> {
        let start = now();
        let mut link = Self {
            t,
            core: Publisher::new(cfg, blob, start),
            recv: RecvBuf::new(FRAME_HEADER_LEN + pfs_wire::frame::MAX_CONTROL_BODY as usize),
            read_timeout: ReadTimeout::default(),
        };
        set_write_bound(&mut *link.t, handshake)?;
        link.flush()?;
        let deadline = start + handshake;
        while link.core.accepted().is_none() {
            if !read_once(
                &mut *link.t,
                &mut link.recv,
                &mut link.read_timeout,
                deadline,
                "STREAM_ACCEPT",
            )? {
                return Err(SessionError::TimedOut {
                    what: Timeout::Reply {
                        during: "STREAM_ACCEPT",
                        after: handshake,
                    },
                }
                .into());
            }
            link.take_frames()?;
        }
        if let Some(a) = link.core.accepted() {
            set_write_bound(&mut *link.t, super::silence_after(a.keepalive_ms))?;
        }
        Ok(link)
    }

    /// The core (figures, window, limits).
    pub fn core(&self) -> &Publisher {
        &self.core
    }

    /// The transport's label (`TCP`, `UNIX`, `SHM`, `UDP`).
    pub fn transport_kind(&self) -> &'static str {
        self.t.kind()
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        while let Some(tx) = self.core.poll_transmit() {
            write_parts(&mut *self.t, &tx)?;
            self.core.transmitted(now());
        }
        Ok(())
    }

    /// On an error, tell the peer what the core queued (best effort).
    fn guard<T>(&mut self, r: Result<T, StreamError>) -> Result<T, StreamError> {
        if r.is_err() {
            let _ = self.flush();
        }
        r
    }

    fn take_frames(&mut self) -> Result<(), StreamError> {
        loop {
            let next = whole_frame(self.recv.filled()).map_err(|v| self.core.refuse(v));
            let (h, len) = match self.guard(next)? {
                Some(f) => f,
                None => return Ok(()),
            };
            let r = self
                .core
                .handle_frame(h, &self.recv.filled()[FRAME_HEADER_LEN..len], now());
            self.recv.consume(len);
            self.guard(r)?;
        }
    }

    /// Takes what the subscriber sent without waiting, runs the deadlines,
    /// writes what is due. Returns the applied position.
    pub fn poll(&mut self) -> Result<u64, StreamError> {
        loop {
            let want = FRAME_HEADER_LEN;
            match self.recv.read_ready_from(&mut *self.t, want) {
                Ok(None) => break,
                // The subscriber closes after its final APPLIED.
                Ok(Some(0)) if self.core.is_done() => break,
                Ok(Some(0)) => {
                    return Err(SessionError::PeerClosed {
                        during: "the stream (the subscriber closed)",
                    }
                    .into())
                }
                Ok(Some(_)) => self.take_frames()?,
                Err(source) => {
                    return Err(SessionError::Transport {
                        during: "reading APPLIED",
                        source,
                    }
                    .into())
                }
            }
        }
        let r = self.core.handle_timeout(now());
        self.guard(r)?;
        self.flush()?;
        Ok(self.core.applied())
    }

    /// Builds a gram with `build` and sends it, or says the window is
    /// full (`Offer::BackPressure`: nothing kept, `build` not called).
    /// Never waits for the subscriber.
    pub fn offer(
        &mut self,
        blob: &[u8],
        build: impl FnOnce(&mut GramWriter<'_>),
    ) -> Result<Offer, StreamError> {
        // Read the subscriber's frames only when they matter now (the
        // window is full, or a deadline is due): no syscall per gram
        // otherwise.
        let due = self.core.poll_timeout().is_some_and(|t| now() >= t);
        if due || !self.core.has_room() {
            self.poll()?;
        }
        let room = self.core.has_room();
        let mut g = self.core.gram(blob);
        if room {
            build(&mut g);
        }
        let offer = self.core.seal()?;
        if let Offer::Sent { .. } = offer {
            self.flush()?;
        }
        Ok(offer)
    }

    /// [`PublisherLink::offer`], waiting up to `timeout` for room in the window.
    pub fn offer_blocking(
        &mut self,
        blob: &[u8],
        timeout: Duration,
        build: impl Fn(&mut GramWriter<'_>),
    ) -> Result<Offer, StreamError> {
        let deadline = now() + timeout;
        loop {
            let offer = self.offer(blob, &build)?;
            if offer != Offer::BackPressure || now() >= deadline {
                return Ok(offer);
            }
            let seq = self.core.applied();
            self.wait_until(deadline, |c| c.applied() > seq)?;
        }
    }

    /// Waits up to `timeout` until the subscriber has applied gram `seq`;
    /// returns whether it has.
    pub fn wait_applied(&mut self, seq: u64, timeout: Duration) -> Result<bool, StreamError> {
        self.wait_until(now() + timeout, |c| c.applied() > seq)
    }

    fn wait_until(
        &mut self,
        deadline: Instant,
        done: impl Fn(&Publisher) -> bool,
    ) -> Result<bool, StreamError> {
        loop {
            self.poll()?;
            if done(&self.core) {
                return Ok(true);
            }
            let wake = self.core.poll_timeout().map_or(deadline, |t| t.min(deadline));
            if now() >= deadline {
                return Ok(false);
            }
            if read_once(
                &mut *self.t,
                &mut self.recv,
                &mut self.read_timeout,
                wake,
                "APPLIED",
            )? {
                self.take_frames()?;
            }
        }
    }

    /// Ends the stream: STREAM_END, then the subscriber's final APPLIED
    /// (within `timeout`); returns the figures.
    pub fn close(mut self, timeout: Duration) -> Result<PublisherReport, StreamError> {
        self.core.finish();
        self.flush()?;
        if !self.wait_until(now() + timeout, Publisher::is_done)? {
            return Err(SessionError::TimedOut {
                what: Timeout::Report { after: timeout },
            }
            .into());
        }
        let _ = self.t.shutdown_write();
        Ok(self.core.report())
    }

    /// Figures so far.
    pub fn report(&self) -> PublisherReport {
        self.core.report()
    }
}

/// A subscriber's connection: the core over a transport (owned, or
/// borrowed for `'c`: a connection a server admitted and still holds).
pub struct SubscriberLink<'c> {
    t: Box<dyn Transport + 'c>,
    core: Subscriber,
    recv: RecvBuf,
    read_timeout: ReadTimeout,
}

impl std::fmt::Debug for SubscriberLink<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriberLink")
            .field("core", &self.core)
            .finish()
    }
}

/// A host for frames that cannot be grams (before STREAM_HELLO).
fn no_grams(_: &mut super::GramEntries<'_>) {}

impl<'c> SubscriberLink<'c> {
    /// Reads STREAM_HELLO from `t` (within `handshake`), checks it against
    /// `blob` and answers STREAM_ACCEPT, or ERROR and fails.
    pub fn accept(
        t: Box<dyn Transport + 'c>,
        cfg: SubscriberConfig,
        blob: StreamBlob,
        handshake: Duration,
    ) -> Result<Self, StreamError> {
        let start = now();
        let mut link = Self {
            t,
            core: Subscriber::new(cfg, blob, start),
            recv: RecvBuf::new(FRAME_HEADER_LEN + cfg.max_gram_body as usize),
            read_timeout: ReadTimeout::default(),
        };
        set_write_bound(&mut *link.t, handshake)?;
        let deadline = start + handshake;
        while link.core.hello().is_none() {
            if !read_once(
                &mut *link.t,
                &mut link.recv,
                &mut link.read_timeout,
                deadline,
                "STREAM_HELLO",
            )? {
                return Err(SessionError::TimedOut {
                    what: Timeout::Idle {
                        during: "STREAM_HELLO",
                        after: handshake,
                    },
                }
                .into());
            }
            link.take_frames(&mut [], &mut no_grams)?;
        }
        link.flush()?;
        if let Some(h) = link.core.hello() {
            set_write_bound(&mut *link.t, super::silence_after(h.keepalive_ms))?;
        }
        Ok(link)
    }

    /// The core (figures, the publisher's STREAM_HELLO).
    pub fn core(&self) -> &Subscriber {
        &self.core
    }

    /// The transport's label.
    pub fn transport_kind(&self) -> &'static str {
        self.t.kind()
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        if !self.core.control().is_empty() {
            let tx = Transmit::Parts {
                parts: [self.core.control(), &[], &[]],
                what: "APPLIED",
            };
            write_parts(&mut *self.t, &tx)?;
            self.core.transmitted(now());
        }
        Ok(())
    }

    fn guard<T>(&mut self, r: Result<T, StreamError>) -> Result<T, StreamError> {
        if r.is_err() {
            let _ = self.flush();
        }
        r
    }

    /// Executes every whole frame in the buffer; returns grams executed
    /// and whether the stream ended.
    fn take_frames(
        &mut self,
        blob: &mut [u8],
        host: &mut dyn StreamHost,
    ) -> Result<(u64, bool), StreamError> {
        let mut grams = 0;
        loop {
            let filled = self.recv.filled();
            if filled.len() >= FRAME_HEADER_LEN {
                let r = match FrameHeader::parse(filled) {
                    Ok(h) => self.core.check_header(&h),
                    Err(e) => Err(self.core.refuse(StreamViolation::decode("frame header")(e))),
                };
                self.guard(r)?;
            }
            let next = whole_frame(self.recv.filled()).map_err(|v| self.core.refuse(v));
            let (h, len) = match self.guard(next)? {
                Some(f) => f,
                None => return Ok((grams, false)),
            };
            let r = self
                .core
                .handle_frame(h, &self.recv.filled()[FRAME_HEADER_LEN..len], blob, host, now());
            self.recv.consume(len);
            match self.guard(r)? {
                Polled::Grams(n) => grams += n,
                Polled::Ended => return Ok((grams, true)),
            }
        }
    }

    /// Waits up to `timeout` for grams and executes every one that
    /// arrived over `blob`, in order, through `host`; answers APPLIED.
    pub fn poll(
        &mut self,
        blob: &mut [u8],
        host: &mut dyn StreamHost,
        timeout: Duration,
    ) -> Result<Polled, StreamError> {
        if self.core.is_ended() {
            return Ok(Polled::Ended);
        }
        let deadline = now() + timeout;
        let mut grams = 0;
        loop {
            let (n, ended) = self.take_frames(blob, host)?;
            grams += n;
            if ended {
                self.flush()?;
                let _ = self.t.shutdown_write();
                return Ok(Polled::Ended);
            }
            self.core.flush_applied(now());
            let r = self.core.handle_timeout(now());
            self.guard(r)?;
            self.flush()?;
            if grams > 0 || now() >= deadline {
                return Ok(Polled::Grams(grams));
            }
            let wake = self.core.poll_timeout().map_or(deadline, |t| t.min(deadline));
            read_once(
                &mut *self.t,
                &mut self.recv,
                &mut self.read_timeout,
                wake,
                "SGRAM",
            )?;
        }
    }

    /// Figures so far.
    pub fn report(&self) -> SubscriberReport {
        self.core.report()
    }
}
