//! A receiver that keeps serving: accepts connections, runs each session on
//! its own thread (up to a limit), reports what happened, and carries on
//! after a client that misbehaves or dies.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pfs_transport::{Listener, Transport};
use pfs_wire::{put_frame, ErrorCode, ErrorFrame, FrameType};

use crate::files::{receive_files, FilesReceiverConfig, FilesReceiverOutcome};
use crate::gram::{receive_session, GramProgress, GramReceiverConfig, GramReceiverOutcome};
use crate::{BlobView, SessionError};
use pfs_files::DestRoot;
use pfs_store::Store;
use pfs_sys::pin_current_thread;

/// Server settings, whichever protocol it serves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Sessions served at once; more are refused with ERROR(BUSY).
    pub max_clients: usize,
    /// Stop after this many sessions (successful or not); `None` = forever.
    pub max_sessions: Option<u64>,
    /// Pin session threads to this CPU.
    pub pin_cpu: Option<usize>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_clients: 4,
            max_sessions: None,
            pin_cpu: None,
        }
    }
}

/// What the server reports as it runs; `O` is a finished session's outcome
/// ([`GramReceiverOutcome`] or [`FilesReceiverOutcome`]).
#[derive(Debug)]
pub enum ServerEvent<'a, O> {
    /// A connection was accepted.
    Accepted {
        /// Peer address.
        peer: &'a str,
    },
    /// Periodic progress of a session.
    Progress {
        /// Peer address.
        peer: &'a str,
        /// Progress so far.
        progress: &'a GramProgress,
    },
    /// A session completed with a report.
    Finished {
        /// Peer address.
        peer: &'a str,
        /// The outcome.
        outcome: &'a O,
    },
    /// A session ended in an error; the server goes on.
    Failed {
        /// Peer address.
        peer: &'a str,
        /// What went wrong.
        error: &'a SessionError,
    },
    /// A connection was refused because `max_clients` sessions are running.
    Busy {
        /// Peer address.
        peer: &'a str,
    },
    /// `accept` failed (e.g. out of file descriptors); the server goes on.
    AcceptFailed {
        /// The OS error.
        error: &'a std::io::Error,
    },
}

/// Serves gram sessions on `listener` over `blob` until `max_sessions` have
/// ended. Returns (sessions that completed, sessions that failed).
pub fn serve<L: Listener>(
    listener: &L,
    blob: &BlobView<'_>,
    cfg: &ServerConfig,
    receiver: &GramReceiverConfig,
    on_event: &(dyn Fn(ServerEvent<'_, GramReceiverOutcome>) + Sync),
) -> (u64, u64) {
    serve_loop(listener, cfg, on_event, &|conn, peer| {
        let mut progress = |p: &GramProgress| on_event(ServerEvent::Progress { peer, progress: p });
        let outcome = receive_session(conn, blob, receiver, &mut progress)?;
        on_event(ServerEvent::Finished {
            peer,
            outcome: &outcome,
        });
        Ok(())
    })
}

/// Serves files sessions (docs/wire.md §10) into `dest`, deduplicated
/// against `store`, until `max_sessions` have ended. Returns (completed,
/// failed). Sessions run concurrently on one store.
pub fn serve_files<L: Listener>(
    listener: &L,
    store: &Store,
    dest: &DestRoot,
    cfg: &ServerConfig,
    files_cfg: &FilesReceiverConfig,
    on_event: &(dyn Fn(ServerEvent<'_, FilesReceiverOutcome>) + Sync),
) -> (u64, u64) {
    serve_loop(listener, cfg, on_event, &|conn, peer| {
        let outcome = receive_files(conn, store, dest, files_cfg)?;
        on_event(ServerEvent::Finished {
            peer,
            outcome: &outcome,
        });
        Ok(())
    })
}

/// Runs one session on an accepted connection (given its peer name).
type SessionFn<'a, C> = dyn Fn(&mut C, &str) -> Result<(), SessionError> + Sync + 'a;

/// The accept loop shared by both kinds of server: one thread per session,
/// at most `max_clients` at once (more get ERROR BUSY), `session` run on
/// each connection; its error is reported as [`ServerEvent::Failed`].
fn serve_loop<L: Listener, O>(
    listener: &L,
    cfg: &ServerConfig,
    on_event: &(dyn Fn(ServerEvent<'_, O>) + Sync),
    session: &SessionFn<'_, L::Conn>,
) -> (u64, u64) {
    let active = AtomicUsize::new(0);
    let ok = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let mut started = 0u64;
    std::thread::scope(|scope| {
        while cfg.max_sessions.is_none_or(|m| started < m) {
            let mut conn = match listener.accept() {
                Ok(c) => c,
                Err(error) => {
                    on_event(ServerEvent::AcceptFailed { error: &error });
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
            };
            let peer = conn.peer();
            on_event(ServerEvent::Accepted { peer: &peer });
            // A session that just sent its report may not have released its
            // slot yet; give slots a moment to free before refusing.
            let patience = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while active.load(Ordering::Acquire) >= cfg.max_clients && std::time::Instant::now() < patience {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if active.load(Ordering::Acquire) >= cfg.max_clients {
                refuse_busy(&mut conn, cfg.max_clients);
                on_event(ServerEvent::Busy { peer: &peer });
                continue;
            }
            started += 1;
            // Paired with the fetch_sub in SlotGuard::drop.
            active.fetch_add(1, Ordering::AcqRel);
            let (active, ok, failed) = (&active, &ok, &failed);
            scope.spawn(move || {
                // Releases the slot however the session ends, a panicking
                // event handler included.
                let _slot = SlotGuard(active);
                if let Some(cpu) = cfg.pin_cpu {
                    let _ = pin_current_thread(cpu);
                }
                match session(&mut conn, &peer) {
                    Ok(()) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        on_event(ServerEvent::Failed {
                            peer: &peer,
                            error: &error,
                        });
                    }
                }
            });
        }
    });
    (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
}

/// Decrements the active-session count when dropped.
struct SlotGuard<'a>(&'a AtomicUsize);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        // Paired with the fetch_add before the session thread was spawned.
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn refuse_busy<T: Transport>(conn: &mut T, max: usize) {
    let msg = format!("receiver busy: {max} sessions already running; retry later");
    let mut body = Vec::new();
    ErrorFrame {
        code: ErrorCode::Busy as u16,
        message: &msg,
    }
    .emit(&mut body);
    let mut frame = Vec::new();
    put_frame(&mut frame, FrameType::Error, 0, &body);
    let _ = conn.write_all(&frame);
}
