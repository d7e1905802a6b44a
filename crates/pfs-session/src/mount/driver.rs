//! The blocking driver of a mount session: it owns the socket and the
//! clock, reads whole frames and hands them to the [`MountServer`] core,
//! whose frames it writes each with one vectored write under a deadline;
//! [`LocalMountHost`] does the file-system work.

use std::io::{self, IoSlice};
use std::time::Duration;

use pfs_files::DestRoot;
use pfs_transport::Transport;
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::FRAME_HEADER_LEN;

use super::core::{FrameOut, MountServer};
use super::host::LocalMountHost;
use super::{MountServerConfig, MountServerOutcome};
use crate::error::Timeout;
use crate::framing::{
    frame_want, is_timeout, now, send_error_beneath, split_frame, write_all_before, FrameClock, ReadTimeout,
    RecvBuf,
};
use crate::SessionError;

/// Serves one mount session on `t` (whose first frame is MOUNT_HELLO)
/// beneath `dest`, the client's place, until the client closes between
/// requests. A protocol violation is answered with ERROR and returned; the
/// recipe cache is saved however the session ended.
pub fn serve_mount<T: Transport + ?Sized>(
    t: &mut T,
    dest: &DestRoot,
    cfg: &MountServerConfig,
) -> Result<MountServerOutcome, SessionError> {
    let mut core = MountServer::new(cfg);
    let mut host = LocalMountHost::new(dest, cfg);
    let result = run(t, &mut core, &mut host, cfg);
    let mut outcome = core.outcome().clone();
    outcome.bytes_cut = host.bytes_cut();
    outcome.warnings.extend(host.finish().map(|e| e.to_string()));
    // The ERROR frame and the close too: a client that does not read
    // cannot hold us.
    let _ = t.set_write_timeout(Some(cfg.write_timeout));
    if let Err(e) = &result {
        if e.tell_peer() {
            send_error_beneath(t, e, Some(dest.path()));
        }
    }
    // The client closed (or is told why not): close our side as well, so a
    // protected session ends with its CLOSE record, not cut short.
    let _ = t.shutdown_write();
    result.map(|()| outcome)
}

fn run<T: Transport + ?Sized>(
    t: &mut T,
    core: &mut MountServer,
    host: &mut LocalMountHost<'_>,
    cfg: &MountServerConfig,
) -> Result<(), SessionError> {
    let mut buf = RecvBuf::new(FRAME_HEADER_LEN + MAX_CONTROL_BODY as usize);
    let mut read_timeout = ReadTimeout::default();
    let mut clock = FrameClock::new(now(), cfg.hello_timeout, cfg.min_frame_rate);
    // When the client last had nothing pending: the idle wait runs from it.
    let mut idle_since = now();
    // Whether the clock runs for the frame whose bytes are waiting (the
    // first, MOUNT_HELLO, is timed from the start).
    let mut timed = true;
    loop {
        // Client frames are control frames: a larger one is refused.
        while let Some(f) = split_frame(buf.filled(), MAX_CONTROL_BODY as usize)? {
            let len = f.len;
            let mut out = Wire {
                t: &mut *t,
                timeout: cfg.write_timeout,
                min_rate: cfg.min_frame_rate,
            };
            core.handle_frame(f.header, f.body, host, &mut out)?;
            buf.consume(len);
            idle_since = now();
            timed = false;
        }
        let rest = buf.filled();
        let serving = core.serving();
        let (deadline, during, after) = if !serving {
            clock.arrived_of(rest);
            (Some(clock.deadline()), "MOUNT_HELLO", cfg.hello_timeout)
        } else if rest.is_empty() {
            timed = false;
            let idle = cfg.idle_timeout.map(|d| idle_since + d);
            (idle, "the next request", cfg.idle_timeout.unwrap_or_default())
        } else {
            // A request began arriving: it has its own deadline from now.
            if !timed {
                clock.next_frame(now(), cfg.frame_timeout);
                timed = true;
            }
            clock.arrived_of(rest);
            (Some(clock.deadline()), "a request frame", cfg.frame_timeout)
        };
        let at = now();
        if deadline.is_some_and(|d| at >= d) {
            return Err(SessionError::TimedOut {
                what: Timeout::Idle { during, after },
            });
        }
        read_timeout
            .update(t, deadline, at)
            .map_err(|e| SessionError::transport("setup", e))?;
        let want = frame_want(rest);
        match buf.read_from(t, want) {
            // The client closes between requests: the session is over.
            Ok(0) if serving && buf.filled().is_empty() => return Ok(()),
            Ok(0) => return Err(SessionError::PeerClosed { during }),
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(SessionError::transport("reading a request", e)),
        }
    }
}

/// A frame sink over a transport: each frame one vectored write, before
/// a deadline of `timeout` plus one second per `min_rate` bytes.
struct Wire<'t, T: ?Sized> {
    t: &'t mut T,
    timeout: Duration,
    min_rate: u64,
}

impl<T: Transport + ?Sized> FrameOut for Wire<'_, T> {
    fn send(&mut self, header: &[u8; FRAME_HEADER_LEN], parts: &[&[u8]]) -> io::Result<()> {
        let mut iov = [
            IoSlice::new(header),
            IoSlice::new(&[]),
            IoSlice::new(&[]),
            IoSlice::new(&[]),
        ];
        let n = 1 + parts.len().min(iov.len() - 1);
        let mut len = header.len();
        for (slot, p) in iov[1..n].iter_mut().zip(parts) {
            *slot = IoSlice::new(p);
            len += p.len();
        }
        let deadline = now() + self.timeout + Duration::from_secs(len as u64 / self.min_rate.max(1));
        write_all_before(self.t, &mut iov[..n], deadline, now).map(drop)
    }
}
