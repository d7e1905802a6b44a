//! The blocking driver of the receiver core over a byte-stream
//! [`Transport`]: it owns the socket, the clock and CPU accounting; the
//! core owns the protocol, the [`LocalHost`] the store and the files.

use pfs_files::{DestRoot, Landing};
use pfs_transport::Transport;

use super::core::{FilesReceiver, FilesReceiverEvent};
use super::local::{ChunkIndex, LocalHost};
use super::{FilesReceiverConfig, FilesReceiverOutcome};
use crate::framing::{is_timeout, now, send_error_beneath, write_reply, ReadTimeout, RecvBuf};
use crate::SessionError;
use pfs_sys::{thread_usage, Usage};

/// Runs one files session on an accepted connection into `dest`, with the
/// chunks held in `chunks` (a store, or the destination's index). A
/// protocol violation sends ERROR and returns the error; entries that
/// cannot be written (refused path, disk full) fail individually and are
/// listed in the report. Chunks (and, without a store, files) that arrived
/// before the session ended, however it ended, are committed to the index.
pub fn receive_files<T: Transport + ?Sized>(
    t: &mut T,
    chunks: ChunkIndex<'_>,
    dest: &DestRoot,
    cfg: &FilesReceiverConfig,
) -> Result<FilesReceiverOutcome, SessionError> {
    let usage0 = thread_usage().plus(&t.helper_usage());
    let mut core = FilesReceiver::new(cfg, now())?;
    let mut host = LocalHost::new(chunks, Landing::new(dest, cfg.manifest.clone(), cfg.fsync_files));
    let result = run(t, &mut core, &mut host, cfg, &usage0);
    // Whatever happened, keep the verified chunks that arrived.
    let salvage = host.salvage();
    match result {
        Ok(out) => {
            salvage.map_err(crate::LocalError::Store)?;
            Ok(out)
        }
        Err(e) => {
            // The ERROR frame too: a peer that does not read cannot hold us.
            let _ = t.set_write_timeout(Some(cfg.write_timeout));
            if e.tell_peer() {
                send_error_beneath(t, &e, Some(dest.path()));
            }
            Err(e)
        }
    }
}

fn run<'s, T: Transport + ?Sized>(
    t: &mut T,
    core: &mut FilesReceiver,
    host: &mut LocalHost<'s>,
    cfg: &FilesReceiverConfig,
    usage0: &Usage,
) -> Result<FilesReceiverOutcome, SessionError> {
    let mut buf = RecvBuf::new(core.buffer_capacity());
    let mut read_timeout = ReadTimeout::default();
    loop {
        let used = core.handle_input(now(), buf.filled(), host)?;
        buf.consume(used);
        while let Some(event) = core.poll_event() {
            match event {
                FilesReceiverEvent::Accepted => {}
                FilesReceiverEvent::Finished => {
                    core.report(now(), thread_usage().plus(&t.helper_usage()).since(usage0))
                }
            }
        }
        if let Some(bytes) = core.poll_transmit() {
            // Replies have a deadline too: a peer that never reads its
            // NAKs or its report does not keep the session.
            write_reply(t, bytes, cfg.write_timeout, cfg.min_frame_rate)
                .map_err(|e| SessionError::transport(core.awaiting(), e))?;
            core.transmitted();
        }
        if core.is_done() {
            return Ok(core.outcome());
        }
        // The socket wakes us near the core's deadline.
        read_timeout
            .update(t, core.poll_timeout(), now())
            .map_err(|e| SessionError::transport("setup", e))?;
        let want = core.want(buf.filled());
        match buf.read_from(t, want) {
            Ok(0) => core.handle_close(now(), !buf.filled().is_empty())?,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(SessionError::transport(core.awaiting(), e)),
        }
        core.handle_timeout(now())?;
    }
}
