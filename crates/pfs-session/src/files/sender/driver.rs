//! The blocking driver of the sender core over a byte-stream
//! [`Transport`]; the host it runs the core with is [`LocalSource`].

use std::time::Duration;

use pfs_transport::Transport;

use super::core::{FilesSender, FilesSenderEvent};
use super::host::FilesPrepare;
use super::local::LocalSource;
use super::store_hex;
use super::{FilesItem, FilesProgress, FilesSenderConfig, FilesSenderOutcome};
use crate::files::bwlimit::{write_paced, BwLimit};
use crate::framing::{now, tell_receiver, RecvBuf};
use crate::SessionError;
use pfs_sys::thread_usage;

/// Runs one files session over `t`: handshake, probe, index, plan, stream,
/// corrections, report. Regular files in `items` without a recipe are
/// hashed and asked about (PROBE) when the receiver's store is not empty,
/// then those the receiver lacks are chunked, all through `prep`; items
/// that cannot be read are left out with a warning.
pub fn send_files<T: Transport + ?Sized>(
    t: &mut T,
    items: &mut Vec<FilesItem>,
    cfg: &FilesSenderConfig,
    prep: &mut dyn FilesPrepare,
    progress: &mut dyn FnMut(&FilesProgress),
) -> Result<FilesSenderOutcome, SessionError> {
    let result = send(t, items, cfg, prep, progress);
    tell_receiver(t, result)
}

fn send<T: Transport + ?Sized>(
    t: &mut T,
    items: &mut Vec<FilesItem>,
    cfg: &FilesSenderConfig,
    prep: &mut dyn FilesPrepare,
    progress: &mut dyn FnMut(&FilesProgress),
) -> Result<FilesSenderOutcome, SessionError> {
    let usage0 = thread_usage().plus(&t.helper_usage());
    let mut src = LocalSource::new(prep, cfg.index_cache_dir.clone());
    let mut core = FilesSender::new(items, cfg, now())?;
    let mut buf = RecvBuf::new(core.buffer_capacity());
    t.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| SessionError::transport("setup", e))?;
    let mut warnings = Vec::new();
    let mut limit = cfg.bwlimit.map(|rate| BwLimit::new(rate, now()));
    loop {
        if let Some(tx) = core.poll_transmit(now(), &mut src)? {
            let what = tx.what();
            let written = match limit.as_mut() {
                Some(l) => write_paced(t, &tx, l, now, std::thread::sleep),
                None => tx.write_to(t),
            };
            if let Err(e) = written {
                return Err(explain_write_failure(t, &mut buf, e, what));
            }
            core.transmitted();
        }
        while let Some(FilesSenderEvent::Progress(p)) = core.poll_event() {
            progress(&p);
        }
        warnings.extend(core.take_warnings());
        if core.is_done() {
            break;
        }
        if core.wants_input() {
            let used = core.handle_input(now(), buf.filled(), &mut src)?;
            buf.consume(used);
            if !core.wants_input() {
                continue;
            }
            let want = core.want(buf.filled());
            buf.read_for(t, want, core.awaiting(), || core.timed_out())?;
            core.handle_timeout(now())?;
        }
    }
    if core.is_dry_run() {
        let _ = t.shutdown_write();
    }
    let usage = thread_usage().plus(&t.helper_usage()).since(&usage0);
    Ok(outcome(core, usage, warnings))
}

/// What the finished session `core` learnt and did.
fn outcome(mut core: FilesSender<'_>, usage: pfs_sys::Usage, warnings: Vec<String>) -> FilesSenderOutcome {
    let accept = core.accept().copied();
    let (fetched, cached) = core.index_counts();
    let (sent, received) = core.wire_bytes();
    let report = core.take_report();
    let deletion = core.take_deletion();
    let (repaired_chunks, repaired_bytes) = core.repaired();
    let elapsed = now() - core.started();
    let (report, messages) = match report {
        Some((r, m)) => (Some(r), m),
        None => (None, String::new()),
    };
    FilesSenderOutcome {
        plan: core.summary(),
        store_id: accept.map(|a| store_hex(&a.store_id)).unwrap_or_default(),
        store_generation: accept.map_or(0, |a| a.generation),
        index_entries_fetched: fetched,
        index_entries_cached: cached,
        probed: core.probed(),
        report,
        messages,
        wire_bytes_sent: sent,
        wire_bytes_received: received,
        repaired_chunks,
        repaired_bytes,
        elapsed,
        usage,
        warnings,
        unreadable: core.unreadable(),
        dropped: core.dropped(),
        deletion,
        receiver_empty: accept
            .is_some_and(|a| a.generation == 0 && a.flags & pfs_wire::files::ACCEPT_OCCUPIED == 0),
    }
}

/// After a failed write the receiver has usually said why in an ERROR
/// frame before closing; prefer that message to a bare EPIPE.
fn explain_write_failure<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    err: std::io::Error,
    during: &'static str,
) -> SessionError {
    let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
    for _ in 0..64 {
        match buf.read_from(t, crate::framing::frame_want(buf.filled()).min(buf.capacity())) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Ok(Some(f)) = crate::framing::split_frame(buf.filled(), buf.capacity()) {
            if f.header.frame_type == pfs_wire::FrameType::Error {
                return crate::framing::refusal(f.body);
            }
            break;
        }
    }
    SessionError::transport(during, err)
}
