//! Blocking drivers of the gram cores over a byte-stream [`Transport`]: they
//! own the socket, the clock, CPU accounting and the recording file; the
//! cores own the protocol.

use std::io::{BufWriter, Write};
use std::time::Duration;

use pfs_transport::Transport;
use pfs_wire::{FrameHeader, FrameType, GramHeader};

use super::host::GramSink;
use super::receiver::{GramReceiver, GramReceiverConfig, GramReceiverEvent, GramReceiverOutcome};
use super::sender::{GramSender, GramSenderConfig, GramSenderEvent, GramSenderOutcome};
use super::{GramProgress, HelloRejection};
use crate::catchup::{
    catch_up_replica, catch_up_source, BlobReplica, CatchUpConfig, CatchUpProgress, CatchUpStats,
};
use crate::error::LocalError;
use crate::framing::{is_timeout, now, send_error, tell_receiver, write_reply, ReadTimeout, RecvBuf};
use crate::{BlobView, SessionError};
use pfs_sys::{max_rss_bytes, thread_usage, Usage};

/// Runs one sending session: handshake, grams, summary, report.
pub fn send_session<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &GramSenderConfig,
    on_progress: &mut dyn FnMut(&GramProgress),
) -> Result<GramSenderOutcome, SessionError> {
    send_session_with(t, blob, cfg, on_progress, &mut |_| {})
}

/// [`send_session`], with the progress of a catch-up (`cfg.catch_up`, wire
/// §16) reported to `on_catch_up` every `cfg.log_interval`.
pub fn send_session_with<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &GramSenderConfig,
    on_progress: &mut dyn FnMut(&GramProgress),
    on_catch_up: &mut dyn FnMut(&CatchUpProgress),
) -> Result<GramSenderOutcome, SessionError> {
    let result = send(t, blob, cfg, on_progress, on_catch_up);
    tell_receiver(t, result)
}

fn send<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &GramSenderConfig,
    on_progress: &mut dyn FnMut(&GramProgress),
    on_catch_up: &mut dyn FnMut(&CatchUpProgress),
) -> Result<GramSenderOutcome, SessionError> {
    let mut core = GramSender::new(*blob, cfg)?;
    let mut buf = RecvBuf::new(core.buffer_capacity());
    t.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| SessionError::transport("setup", e))?;
    let mut usage0 = Usage::default();
    let mut usage = Usage::default();
    // Bytes written since the receiver's side was last looked at, and when.
    let mut unlooked = 0u64;
    let mut looked = now();
    loop {
        let clock = now();
        if let Some(tx) = core.poll_transmit(clock)? {
            let what = tx.what();
            match tx.write_to(t) {
                Ok(n) => unlooked += n,
                Err(e) => return Err(explain_write_failure(t, &mut core, &mut buf, e, what)),
            }
        }
        while let Some(event) = core.poll_event() {
            match event {
                GramSenderEvent::CatchUp => {
                    let live = blob.live.ok_or(LocalError::CatchUpNeedsBlob)?;
                    let fp = live.fingerprint();
                    let catch_up = CatchUpConfig {
                        idle_timeout: cfg.reply_timeout,
                        log_interval: cfg.log_interval,
                        ..CatchUpConfig::default()
                    };
                    let stats = catch_up_source(
                        t,
                        &mut buf,
                        blob.data,
                        &fp,
                        cfg.session_nonce,
                        &catch_up,
                        on_catch_up,
                    )?;
                    t.set_read_timeout(Some(cfg.reply_timeout))
                        .map_err(|e| SessionError::transport("setup", e))?;
                    core.caught_up(now(), stats);
                }
                GramSenderEvent::Started => usage0 = thread_usage().plus(&t.helper_usage()),
                GramSenderEvent::Progress(p) => on_progress(&p),
                GramSenderEvent::Sent => usage = thread_usage().plus(&t.helper_usage()).since(&usage0),
                GramSenderEvent::Finished => {}
            }
        }
        if core.is_done() {
            break;
        }
        if core.reads_between_writes() && (unlooked >= LOOK_EVERY || clock >= looked + LOOK_AFTER) {
            // NAKs that arrived while grams went out (wire §13.4): taken
            // without waiting, answered before the next gram.
            unlooked = 0;
            looked = clock;
            take_ready(t, &mut core, &mut buf)?;
        }
        if core.wants_input() {
            // A frame already here first: each may owe a REPAIR, sent at
            // the top of the loop before the next is read.
            let used = core.handle_input(now(), buf.filled())?;
            if used > 0 {
                buf.consume(used);
                continue;
            }
            let want = core.want(buf.filled());
            read_into(t, &mut buf, want, "reply").map_err(|e| match e {
                SessionError::Transport { source, .. } if is_timeout(&source) => core.timed_out(),
                other => other,
            })?;
            let used = core.handle_input(now(), buf.filled())?;
            buf.consume(used);
            core.handle_timeout(now())?;
        }
    }
    core.outcome(usage).ok_or(SessionError::PeerClosed {
        during: "COMPLETE report",
    })
}

/// A sender looks at what the receiver sent (one `read_ready`: a system
/// call on sockets) after this many bytes written or [`LOOK_AFTER`],
/// whichever comes first: a NAK waits little for its REPAIR, and small
/// grams do not pay a call each.
const LOOK_EVERY: u64 = 256 * 1024;
/// See [`LOOK_EVERY`].
const LOOK_AFTER: Duration = Duration::from_millis(1);

/// Feeds the sender every whole frame that has arrived, without waiting.
fn take_ready<T: Transport + ?Sized>(
    t: &mut T,
    core: &mut GramSender<'_>,
    buf: &mut RecvBuf,
) -> Result<(), SessionError> {
    loop {
        loop {
            let used = core.handle_input(now(), buf.filled())?;
            if used == 0 {
                break;
            }
            buf.consume(used);
        }
        let want = core.want(buf.filled());
        match buf.read_ready_from(t, want) {
            Ok(Some(0)) => return Err(SessionError::PeerClosed { during: "grams" }),
            Ok(Some(_)) => {}
            Ok(None) => return Ok(()),
            Err(e) => return Err(SessionError::transport("reading NAKs", e)),
        }
    }
}

/// One read into `buf`; end of stream is [`SessionError::PeerClosed`].
fn read_into<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    want: usize,
    during: &'static str,
) -> Result<(), SessionError> {
    match buf.read_from(t, want.min(buf.capacity())) {
        Ok(0) => Err(SessionError::PeerClosed { during }),
        Ok(_) => Ok(()),
        Err(e) => Err(SessionError::transport(during, e)),
    }
}

/// After a failed write the receiver has usually said why in an ERROR
/// frame before closing; prefer that message to a bare EPIPE.
fn explain_write_failure<T: Transport + ?Sized>(
    t: &mut T,
    core: &mut GramSender<'_>,
    buf: &mut RecvBuf,
    err: std::io::Error,
    during: &'static str,
) -> SessionError {
    let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
    loop {
        match core.handle_input(now(), buf.filled()) {
            Err(refused @ SessionError::Refused { .. }) => return refused,
            Err(_) => break,
            Ok(used) => buf.consume(used),
        }
        let want = core.want(buf.filled());
        if read_into(t, buf, want, during).is_err() {
            break;
        }
    }
    SessionError::transport(during, err)
}

/// Records every received gram's header and table (no payload) as
/// payload-free GRAM frames: what `pfs exec --gram-file` reads.
#[derive(Debug)]
pub struct GramRecorder {
    out: Option<BufWriter<std::fs::File>>,
}

impl GramRecorder {
    fn open(dir: &std::path::Path, nonce: u64) -> Result<Self, LocalError> {
        let path = dir.join(format!("session-{nonce:016x}.grams"));
        let file = std::fs::File::create(&path).map_err(|source| LocalError::Io {
            what: "cannot record grams to",
            path,
            source,
        })?;
        Ok(Self {
            out: Some(BufWriter::new(file)),
        })
    }

    fn none() -> Self {
        Self { out: None }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self.out.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl GramSink for GramRecorder {
    fn gram(&mut self, gh: &GramHeader, table: &[u8]) -> std::io::Result<()> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let header = GramHeader {
            payload_len: 0,
            flags: 0,
            ..*gh
        };
        let length = (pfs_wire::GRAM_HEADER_LEN + table.len()) as u32;
        out.write_all(
            &FrameHeader {
                frame_type: FrameType::Gram,
                flags: 0,
                length,
            }
            .emit(),
        )?;
        out.write_all(&header.emit())?;
        out.write_all(table)
    }
}

/// The receiver's catch-up (wire §16) into `live`, one at a time per blob.
fn replicate<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    cfg: &GramReceiverConfig,
    live: Option<&pfs_blob::Blob>,
    nonce: u64,
    target: [u8; 32],
) -> Result<CatchUpStats, SessionError> {
    // The core takes a catch-up only with a live blob; without one it is
    // refused like any other sender whose blob differs.
    let live = live.ok_or(SessionError::Rejected(HelloRejection::CatchUpRefused {
        sender: target,
        receiver: [0; 32],
    }))?;
    let Some(_writing) = live.try_catch_up() else {
        return Err(HelloRejection::CatchUpBusy.into());
    };
    let mut host = BlobReplica::new(live);
    let catch_up = CatchUpConfig {
        idle_timeout: cfg.idle_timeout,
        write_timeout: cfg.write_timeout,
        ..cfg.catch_up_cfg
    };
    catch_up_replica(t, buf, &mut host, nonce, target, &catch_up, &mut |_| {})
}

/// Runs one receiving session on an accepted connection. On a protocol
/// violation the peer gets an ERROR frame and the error is returned.
pub fn receive_session<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &GramReceiverConfig,
    on_progress: &mut dyn FnMut(&GramProgress),
) -> Result<GramReceiverOutcome, SessionError> {
    let mut core = GramReceiver::new(*blob, cfg, now());
    match receive(t, &mut core, cfg, blob.live, on_progress) {
        Ok(o) => Ok(o),
        Err(e) => {
            // The ERROR frame too: a peer that does not read cannot hold us.
            let _ = t.set_write_timeout(Some(cfg.write_timeout));
            if e.tell_peer() {
                send_error(t, &e);
            } else if let SessionError::Transport { source, .. } = &e {
                if is_timeout(source) {
                    send_error(t, &core.timed_out());
                }
            }
            Err(e)
        }
    }
}

fn receive<T: Transport + ?Sized>(
    t: &mut T,
    core: &mut GramReceiver<'_>,
    cfg: &GramReceiverConfig,
    live: Option<&pfs_blob::Blob>,
    on_progress: &mut dyn FnMut(&GramProgress),
) -> Result<GramReceiverOutcome, SessionError> {
    let mut buf = RecvBuf::new(core.buffer_capacity());
    let mut recorder = GramRecorder::none();
    let mut usage0 = Usage::default();
    let mut read_timeout = ReadTimeout::default();
    loop {
        if buf.filled().len() < core.want() {
            // Wake at the core's deadline, not a fixed idle time later.
            read_timeout
                .update(t, core.poll_timeout(), now())
                .map_err(|e| SessionError::transport("setup", e))?;
            buf.read_for(t, core.want(), core.awaiting(), || core.timed_out())?;
            // A peer that trickles bytes keeps the socket busy but not the
            // session: the core's deadline catches it.
            core.handle_timeout(now())?;
        }
        let used = core.handle_input(now(), buf.filled(), &mut recorder)?;
        buf.consume(used);
        if let Some(bytes) = core.poll_transmit() {
            write_reply(t, bytes, cfg.write_timeout, cfg.min_frame_rate)
                .map_err(|e| SessionError::transport("HELLO_ACK or NAK", e))?;
            core.transmitted();
        }
        while let Some(event) = core.poll_event() {
            match event {
                GramReceiverEvent::Accepted { nonce } => {
                    if let Some(dir) = &cfg.record_dir {
                        recorder = GramRecorder::open(dir, nonce)?;
                    }
                }
                GramReceiverEvent::CatchUp { nonce, target } => {
                    let stats = replicate(t, &mut buf, cfg, live, nonce, target)?;
                    core.caught_up(now(), stats);
                    // The catch-up moved the transport's read timeout.
                    read_timeout = ReadTimeout::default();
                }
                GramReceiverEvent::Started => usage0 = thread_usage().plus(&t.helper_usage()),
                GramReceiverEvent::Progress(p) => on_progress(&p),
                GramReceiverEvent::Summary => {
                    let usage = thread_usage().plus(&t.helper_usage()).since(&usage0);
                    core.finish(now(), usage, max_rss_bytes());
                }
            }
        }
        if core.is_done() {
            break;
        }
    }
    if let Some(bytes) = core.poll_transmit() {
        write_reply(t, bytes, cfg.write_timeout, cfg.min_frame_rate)
            .map_err(|e| SessionError::transport("COMPLETE report", e))?;
        core.transmitted();
    }
    let _ = t.shutdown_write();
    recorder.finish().map_err(|source| LocalError::Io {
        what: "recording grams to",
        path: cfg.record_dir.clone().unwrap_or_default(),
        source,
    })?;
    core.outcome()
        .cloned()
        .ok_or(SessionError::PeerClosed { during: "COMPLETE" })
}
