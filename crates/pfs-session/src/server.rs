//! A receiver that keeps serving: accepts connections, admits each one
//! (a Noise handshake and the key's rights, or a plain connection where the
//! policy allows it), runs each session on its own thread (up to a limit),
//! reports what happened, and carries on after a client that misbehaves or
//! dies.
//!
//! The accept loop never waits on a client: admission runs on the
//! connection's own thread under one absolute deadline. Connections still
//! being admitted are capped apart from `max_clients`; when that cap is
//! reached the oldest is dropped, so a flood of silent connections cannot
//! keep an authorized client out.
//!
//! A [`Shutdown`] stops it in two steps: stop accepting (running sessions
//! go on), then cut what still runs. Every connection is wrapped so that a
//! cut is seen within [`CUT_POLL`] by a session waiting to read, and by the
//! next write of one that is sending.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pfs_auth::{AuthorizedKeys, Cipher, Prefixed, PublicKey, Rights, SecureError, ServerSecurity, Service};
use pfs_transport::{Listener, Transport};
use pfs_wire::{ErrorCode, FrameHeader, FrameType, FRAME_HEADER_LEN};

use crate::error::{Timeout, Violation};
use crate::files::{receive_files, FilesReceiverConfig, FilesReceiverOutcome};
use crate::gram::{receive_session, GramProgress, GramReceiverConfig, GramReceiverOutcome};
use crate::mount::{serve_mount, MountServeOutcome, MountServerConfig};
use crate::{BlobView, SessionError};
use pfs_files::DestRoot;
use pfs_sys::pin_current_thread;

/// Who may connect, and how.
#[derive(Debug, Clone)]
pub struct Admission {
    /// This server's identity: protected sessions are possible. `None`:
    /// only plain connections.
    pub security: Option<ServerSecurity>,
    /// Client keys and their rights. `None`: any key that completes the
    /// handshake may do everything (an open server that still encrypts).
    pub authorized: Option<AuthorizedKeys>,
    /// Plain (unauthenticated, unencrypted) connections are served. Off
    /// whenever `authorized` is set.
    pub allow_plain: bool,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            security: None,
            authorized: None,
            allow_plain: true,
        }
    }
}

/// How long a new connection may be silent by default: the gram receiver's
/// wait for the first byte of HELLO before this check existed.
pub const DEFAULT_FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(60);

/// Server settings, whichever protocol it serves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Sessions served at once; more are refused with ERROR(BUSY).
    pub max_clients: usize,
    /// Connections being admitted at once (first bytes, handshake); past
    /// it the oldest is dropped.
    pub max_admitting: usize,
    /// Longest a new connection may stay silent before its first bytes
    /// (a plain sender connects, then sets up its blob before its HELLO);
    /// the handshake then has its own deadline (`ServerSecurity::timeout`).
    pub first_bytes_timeout: Duration,
    /// Stop after this many sessions (successful or not); `None` = forever.
    pub max_sessions: Option<u64>,
    /// Pin session threads to this CPU.
    pub pin_cpu: Option<usize>,
    /// Who may connect.
    pub admission: Admission,
    /// Tells the server to stop (shared with whoever handles the signals).
    pub shutdown: Arc<Shutdown>,
}

/// Stops a server: [`Shutdown::stop`] ends the accept loop (running
/// sessions go on), [`Shutdown::cut`] then ends the sessions still running.
#[derive(Debug, Default)]
pub struct Shutdown {
    stopping: AtomicBool,
    cut: AtomicBool,
}

impl Shutdown {
    /// Stops accepting: the accept loop ends when its `accept` next returns
    /// (the caller wakes a blocked `accept`, e.g. by connecting to the
    /// listener); connections not yet admitted are dropped, admitted
    /// sessions run on.
    pub fn stop(&self) {
        // Paired with the Acquire loads in is_stopping.
        self.stopping.store(true, Ordering::Release);
    }

    /// Cuts the sessions still running (and stops accepting): a session
    /// waiting to read fails within [`CUT_POLL`], one sending fails at its
    /// next write, each with [`io::ErrorKind::ConnectionAborted`].
    pub fn cut(&self) {
        self.stop();
        // Paired with the Acquire loads in is_cut.
        self.cut.store(true, Ordering::Release);
    }

    /// Whether [`Shutdown::stop`] (or `cut`) was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether [`Shutdown::cut`] was called.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}

/// Longest a session waiting to read goes without seeing a cut.
pub const CUT_POLL: Duration = Duration::from_millis(100);

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_clients: 4,
            max_admitting: 64,
            first_bytes_timeout: DEFAULT_FIRST_BYTES_TIMEOUT,
            max_sessions: None,
            pin_cpu: None,
            admission: Admission::default(),
            shutdown: Arc::default(),
        }
    }
}

/// An admitted client: where from, who, with what rights.
#[derive(Debug, Clone)]
pub struct Client {
    /// Peer address.
    pub addr: String,
    /// Its proven key; `None` for a plain connection.
    pub key: Option<PublicKey>,
    /// The record cipher; `None` for a plain connection.
    pub cipher: Option<Cipher>,
    /// What it may do. A plain client may do everything, in the shared
    /// group (empty name).
    pub rights: Rights,
}

impl Client {
    /// `blake3:…` of its key, or `-` for a plain connection.
    pub fn fingerprint(&self) -> String {
        self.key.map_or_else(|| "-".into(), |k| k.fingerprint())
    }
}

/// What the server reports as it runs; `O` is a finished session's outcome
/// ([`GramReceiverOutcome`] or [`FilesSessionOutcome`]).
#[derive(Debug)]
pub enum ServerEvent<'a, O> {
    /// A connection was accepted.
    Accepted {
        /// Peer address.
        peer: &'a str,
    },
    /// A connection was admitted: its session starts.
    Admitted {
        /// Who.
        client: &'a Client,
    },
    /// A connection was not admitted (failed handshake, unknown key, a
    /// right it lacks, plain where keys are required); the server goes on.
    Denied {
        /// Peer address.
        peer: &'a str,
        /// Its key, when the handshake got that far.
        key: Option<PublicKey>,
        /// Why (the client was told only a generic reason for a failed
        /// handshake or an unknown key).
        reason: &'a str,
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
        /// Who ran it.
        client: &'a Client,
        /// Its duration and the bytes its connection carried.
        traffic: Traffic,
        /// The outcome.
        outcome: &'a O,
    },
    /// A session ended in an error (a cut one too); the server goes on.
    Failed {
        /// Peer address.
        peer: &'a str,
        /// Who ran it.
        client: &'a Client,
        /// Its duration and the bytes its connection carried.
        traffic: Traffic,
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

/// An admitted session's duration, and the bytes its connection carried
/// (handshake and record overhead included, unlike a report's wire bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Admission to end.
    pub elapsed: Duration,
    /// Bytes read from the connection.
    pub bytes_in: u64,
    /// Bytes written to it.
    pub bytes_out: u64,
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
    let offer = Offer {
        service: Service::Blob,
        runs_kernels: receiver.exec.is_some(),
    };
    serve_loop(listener, cfg, offer, on_event, &|conn, client| {
        let peer = client.addr.as_str();
        let mut progress = |p: &GramProgress| on_event(ServerEvent::Progress { peer, progress: p });
        receive_session(conn, blob, receiver, &mut progress)
    })
}

/// Where one client's files land: its store (its group's), its
/// destination root (its `dir=`), and the record of what that root holds.
#[derive(Debug, Clone)]
pub struct FilesPlace {
    /// Where the chunks the client deduplicates against are: a store, or
    /// the destination's own index.
    pub chunks: crate::files::receiver::SharedChunkIndex,
    /// The root its files are written beneath.
    pub dest: Arc<DestRoot>,
    /// What was written into `dest`, if recorded.
    pub manifest: Option<Arc<pfs_files::Manifest>>,
}

/// Finds (opening on first use) the place of a client; an `Err` refuses
/// the client with that message.
pub type PlaceFn<'a> = dyn Fn(&Client) -> Result<FilesPlace, String> + Sync + 'a;

/// What a session of a files server was: files received (FILES_HELLO,
/// docs/wire.md §10) or a tree served to a mount (MOUNT_HELLO, §12).
#[derive(Debug)]
pub enum FilesSessionOutcome {
    /// Files were sent to this server.
    Received(FilesReceiverOutcome),
    /// A client mounted a tree this server holds.
    Served(MountServeOutcome),
}

/// Serves files sessions (docs/wire.md §10) and mount sessions (§12), each
/// client in the place `place` gives it, until `max_sessions` have ended.
/// Returns (completed, failed). Sessions run concurrently; clients of one
/// group share a store.
///
/// A connection's first frame says which: FILES_HELLO (the key needs its
/// `files` right) goes to [`receive_files`], MOUNT_HELLO (the `read`
/// right) to [`serve_mount`], anything else is refused with ERROR
/// `PROTOCOL`. A key lacking the right is answered ERROR `AUTH` and
/// reported as [`ServerEvent::Denied`].
pub fn serve_files<L: Listener>(
    listener: &L,
    place: &PlaceFn<'_>,
    cfg: &ServerConfig,
    files_cfg: &FilesReceiverConfig,
    mount_cfg: &MountServerConfig,
    on_event: &(dyn Fn(ServerEvent<'_, FilesSessionOutcome>) + Sync),
) -> (u64, u64) {
    let offer = Offer {
        service: Service::Files,
        runs_kernels: false,
    };
    serve_loop(listener, cfg, offer, on_event, &|conn, client| {
        let head = first_header(conn, mount_cfg.hello_timeout).map_err(|e| match e.tell_peer() {
            true => tell(conn, e),
            false => e,
        })?;
        let kind = FrameHeader::parse(&head).map(|h| h.frame_type);
        let (needs, lacking) = match kind {
            Ok(FrameType::FilesHello) => (client.rights.files, "this key may not send files (no-files)"),
            Ok(FrameType::MountHello) => (client.rights.read, "this key may not read (no-read)"),
            Ok(got) => {
                return Err(tell(
                    conn,
                    Violation::UnexpectedFrame {
                        expected: "FILES_HELLO or MOUNT_HELLO",
                        got,
                    }
                    .into(),
                ))
            }
            Err(error) => {
                let context = "the first frame's header";
                return Err(tell(conn, SessionError::Malformed { context, error }));
            }
        };
        if !needs {
            refuse(conn, ErrorCode::Auth, lacking);
            return Err(Violation::Unauthorized(lacking.to_string()).into());
        }
        let here = place(client).map_err(|message| {
            let e = SessionError::Local(crate::LocalError::Place(message.clone()));
            refuse(conn, ErrorCode::Internal, &message);
            e
        })?;
        // The header read here is read again by the session.
        let mut conn = Prefixed::new(conn, &head);
        if kind == Ok(FrameType::MountHello) {
            return serve_mount(&mut conn, &here.dest, mount_cfg).map(FilesSessionOutcome::Served);
        }
        let cfg = FilesReceiverConfig {
            manifest: here.manifest.clone(),
            ..files_cfg.clone()
        };
        receive_files(&mut conn, here.chunks.get(), &here.dest, &cfg).map(FilesSessionOutcome::Received)
    })
}

/// The header of a files connection's first frame, within `timeout`.
fn first_header(conn: &mut dyn Transport, timeout: Duration) -> Result<[u8; FRAME_HEADER_LEN], SessionError> {
    let during = "the first frame";
    let mut head = [0u8; FRAME_HEADER_LEN];
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| SessionError::transport(during, e))?;
    let read = conn.read_exact(&mut head).map_err(|e| match e {
        e if crate::framing::is_timeout(&e) => SessionError::TimedOut {
            what: Timeout::Idle {
                during,
                after: timeout,
            },
        },
        e => SessionError::transport(during, e),
    });
    // The session sets its own deadlines.
    let _ = conn.set_read_timeout(None);
    read?;
    Ok(head)
}

/// Tells the peer about `e` (best effort) and returns it.
fn tell(conn: &mut dyn Transport, e: SessionError) -> SessionError {
    crate::framing::send_error(conn, &e);
    e
}

/// What this server serves, for the rights check.
#[derive(Debug, Clone, Copy)]
struct Offer {
    service: Service,
    runs_kernels: bool,
}

/// Runs one session on an admitted connection.
type SessionFn<'a, O> = dyn Fn(&mut dyn Transport, &Client) -> Result<O, SessionError> + Sync + 'a;

/// Connections being admitted, oldest first, each with its cancel flag.
#[derive(Default)]
struct Admitting {
    next_id: u64,
    queue: VecDeque<(u64, Arc<AtomicBool>)>,
}

/// The accept loop shared by both kinds of server: each connection is
/// admitted on its own thread, then runs `session` if one of
/// `max_clients` slots frees within 2 s (else ERROR BUSY). A session's
/// outcome is reported as [`ServerEvent::Finished`], its error as
/// [`ServerEvent::Failed`]. Ends at `max_sessions` or on a shutdown, once
/// every session has ended.
fn serve_loop<L: Listener, O>(
    listener: &L,
    cfg: &ServerConfig,
    offer: Offer,
    on_event: &(dyn Fn(ServerEvent<'_, O>) + Sync),
    session: &SessionFn<'_, O>,
) -> (u64, u64) {
    let shutdown = &*cfg.shutdown;
    let active = AtomicUsize::new(0);
    let ok = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    // Connections counted toward max_sessions (a BUSY refusal gives its
    // count back), and those whose fate is not known yet.
    let started = AtomicU64::new(0);
    let undecided = AtomicUsize::new(0);
    let admitting = Mutex::new(Admitting::default());
    std::thread::scope(|scope| loop {
        if shutdown.is_stopping() {
            cancel_admitting(&admitting);
            break;
        }
        if let Some(max) = cfg.max_sessions {
            if started.load(Ordering::Acquire) >= max {
                // A connection still waiting for a slot may yet be
                // refused and give its count back.
                if undecided.load(Ordering::Acquire) == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        }
        let accepted = listener.accept();
        // The connection that woke a stopping loop, or one that came as it
        // stopped, is dropped unanswered.
        if shutdown.is_stopping() {
            continue;
        }
        let conn = match accepted {
            Ok(c) => c,
            Err(error) => {
                on_event(ServerEvent::AcceptFailed { error: &error });
                // Out of descriptors or memory: give the system a moment.
                // A refused peer (another user's, on a Unix socket) is no
                // reason to slow everyone else down.
                if error.kind() != std::io::ErrorKind::PermissionDenied {
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            }
        };
        let peer = conn.peer();
        on_event(ServerEvent::Accepted { peer: &peer });
        let (id, cancel) = admit_slot(&admitting, cfg.max_admitting);
        started.fetch_add(1, Ordering::AcqRel);
        undecided.fetch_add(1, Ordering::AcqRel);
        let (active, ok, failed, started, undecided, admitting) =
            (&active, &ok, &failed, &started, &undecided, &admitting);
        scope.spawn(move || {
            let mut decided = Decided(undecided, false);
            let mut conn = match Cuttable::new(conn, shutdown) {
                Ok(c) => c,
                Err(e) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    leave_queue(admitting, id);
                    decided.done();
                    let reason = format!("setting up the connection: {e}");
                    on_event(ServerEvent::Denied {
                        peer: &peer,
                        key: None,
                        reason: &reason,
                    });
                    return;
                }
            };
            // Matched as a temporary, so that its borrow of `conn` ends when
            // `transport` is dropped.
            let (mut transport, client) = match admit(&mut conn, &peer, cfg, offer, &cancel) {
                Ok(a) => {
                    leave_queue(admitting, id);
                    a
                }
                Err(reason) => {
                    leave_queue(admitting, id);
                    failed.fetch_add(1, Ordering::Relaxed);
                    decided.done();
                    on_event(ServerEvent::Denied {
                        peer: &peer,
                        key: reason.key,
                        reason: &reason.text,
                    });
                    return;
                }
            };
            // A session that just sent its report may not have released its
            // slot yet; give slots a moment to free before refusing.
            let patience = Instant::now() + Duration::from_secs(2);
            let slot = loop {
                let n = active.load(Ordering::Acquire);
                if n < cfg.max_clients {
                    // Paired with the fetch_sub in SlotGuard::drop.
                    if active
                        .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        break Some(SlotGuard(active));
                    }
                    continue;
                }
                if Instant::now() >= patience || shutdown.is_stopping() {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            let slot = slot.filter(|_| !shutdown.is_stopping());
            let Some(_slot) = slot else {
                if shutdown.is_stopping() {
                    refuse(
                        &mut *transport,
                        ErrorCode::Busy,
                        "server shutting down; retry later",
                    );
                } else {
                    refuse_busy(&mut *transport, cfg.max_clients);
                }
                started.fetch_sub(1, Ordering::AcqRel);
                decided.done();
                on_event(ServerEvent::Busy { peer: &peer });
                return;
            };
            decided.done();
            if let Some(cpu) = cfg.pin_cpu {
                let _ = pin_current_thread(cpu);
            }
            on_event(ServerEvent::Admitted { client: &client });
            let t0 = Instant::now();
            let result = session(&mut *transport, &client);
            // The wrappers above the connection are done with it: its
            // counters are final.
            drop(transport);
            let traffic = Traffic {
                elapsed: t0.elapsed(),
                bytes_in: conn.bytes_in,
                bytes_out: conn.bytes_out,
            };
            match result {
                Ok(outcome) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                    on_event(ServerEvent::Finished {
                        peer: &peer,
                        client: &client,
                        traffic,
                        outcome: &outcome,
                    });
                }
                // A right the session's first frame needed: a refusal.
                Err(SessionError::Violation(Violation::Unauthorized(reason))) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    on_event(ServerEvent::Denied {
                        peer: &peer,
                        key: client.key,
                        reason: &reason,
                    });
                }
                Err(error) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    on_event(ServerEvent::Failed {
                        peer: &peer,
                        client: &client,
                        traffic,
                        error: &error,
                    });
                }
            }
        });
    });
    (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed))
}

/// Marks a connection's fate as known (once), however its thread ends.
struct Decided<'a>(&'a AtomicUsize, bool);

impl Decided<'_> {
    fn done(&mut self) {
        if !self.1 {
            self.1 = true;
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Decided<'_> {
    fn drop(&mut self) {
        self.done();
    }
}

/// Enters a connection into the admission queue, cancelling the oldest
/// when the queue is full.
fn admit_slot(admitting: &Mutex<Admitting>, max: usize) -> (u64, Arc<AtomicBool>) {
    let mut a = admitting.lock().unwrap_or_else(|p| p.into_inner());
    while a.queue.len() >= max.max(1) {
        if let Some((_, oldest)) = a.queue.pop_front() {
            oldest.store(true, Ordering::Release);
        }
    }
    let id = a.next_id;
    a.next_id += 1;
    let cancel = Arc::new(AtomicBool::new(false));
    a.queue.push_back((id, cancel.clone()));
    (id, cancel)
}

/// Drops every connection still being admitted (their admission reads
/// see the flag within their poll interval).
fn cancel_admitting(admitting: &Mutex<Admitting>) {
    let a = admitting.lock().unwrap_or_else(|p| p.into_inner());
    for (_, cancel) in &a.queue {
        cancel.store(true, Ordering::Release);
    }
}

fn leave_queue(admitting: &Mutex<Admitting>, id: u64) {
    let mut a = admitting.lock().unwrap_or_else(|p| p.into_inner());
    a.queue.retain(|(i, _)| *i != id);
}

/// Why a connection was not admitted.
struct DenyReason {
    key: Option<PublicKey>,
    text: String,
}

impl DenyReason {
    fn new(key: Option<PublicKey>, text: impl Into<String>) -> Self {
        Self {
            key,
            text: text.into(),
        }
    }
}

/// What every refused handshake is told, whatever went wrong: a prober
/// learns nothing about which step failed or which keys exist.
const GENERIC_REFUSAL: &str = "not authorized";

/// Admits one connection: reads its first bytes, runs the handshake and
/// the rights check, or lets a plain connection through where allowed.
fn admit<'c, C: Transport>(
    conn: &'c mut C,
    peer: &str,
    cfg: &ServerConfig,
    offer: Offer,
    cancel: &AtomicBool,
) -> Result<(Box<dyn Transport + 'c>, Client), DenyReason> {
    let policy = &cfg.admission;
    let head = pfs_auth::read_head(&mut *conn, cfg.first_bytes_timeout, cancel)
        .map_err(|e| DenyReason::new(None, format!("before its first bytes: {e}")))?;
    if !pfs_auth::is_handshake(&head) {
        if !policy.allow_plain {
            let msg = "this server requires an authenticated session: connect with a key \
                       (pfs send --server-key KEY, or a known_hosts entry for this server)";
            refuse(&mut *conn, ErrorCode::Auth, msg);
            return Err(DenyReason::new(None, "plain connection where keys are required"));
        }
        let client = Client {
            addr: peer.to_string(),
            key: None,
            cipher: None,
            rights: plain_rights(),
        };
        return Ok((Box::new(Prefixed::new(conn, &head)), client));
    }
    let Some(sec) = &policy.security else {
        refuse(
            &mut *conn,
            ErrorCode::Auth,
            "this server has no identity and accepts only plain sessions on this address",
        );
        return Err(DenyReason::new(
            None,
            "handshake, but this server has no identity",
        ));
    };
    let pending = pfs_auth::accept(&mut *conn, head, sec, cancel).map_err(|e| {
        let text = match e {
            SecureError::TimedOut(..) => format!("handshake: {e}"),
            other => format!("handshake failed: {other}"),
        };
        DenyReason::new(None, text)
    })?;
    let key = pending.peer();
    let proposal = pending.proposal();
    let rights = match &policy.authorized {
        // An open server: every key may do everything, in the shared group.
        None => plain_rights(),
        Some(keys) => match keys.rights(&key) {
            Some(r) => r.clone(),
            None => {
                let _ = pending.refuse(GENERIC_REFUSAL);
                return Err(DenyReason::new(Some(key), "key not in authorized_keys"));
            }
        },
    };
    let lacking = if proposal.service != offer.service {
        Some(format!(
            "this server offers {}, not {}",
            offer.service.name(),
            proposal.service.name()
        ))
    } else if offer.service == Service::Blob && !rights.blob {
        Some("this key may not run blob sessions (no-blob)".to_string())
    } else if offer.service == Service::Files && !rights.files && !rights.read {
        // Which of the two the session needs, its first frame tells.
        Some("this key may neither send files nor read them (no-files, no-read)".to_string())
    } else if offer.runs_kernels && !rights.exec {
        Some("this server runs an --exec kernel over every gram and this key may not (no-exec)".to_string())
    } else {
        None
    };
    if let Some(why) = lacking {
        let _ = pending.refuse(&why);
        return Err(DenyReason::new(Some(key), why));
    }
    let st = pending
        .admit()
        .map_err(|e| DenyReason::new(Some(key), format!("sending the verdict: {e}")))?;
    let client = Client {
        addr: peer.to_string(),
        key: Some(key),
        cipher: Some(proposal.cipher),
        rights,
    };
    Ok((Box::new(st), client))
}

/// A plain client's rights: everything, in the shared (unnamed) group.
fn plain_rights() -> Rights {
    Rights {
        dir: Default::default(),
        blob: true,
        files: true,
        read: true,
        exec: true,
        group: String::new(),
    }
}

/// Decrements the active-session count when dropped.
struct SlotGuard<'a>(&'a AtomicUsize);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        // Paired with the compare_exchange that took the slot.
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn refuse_busy(conn: &mut dyn Transport, max: usize) {
    let msg = format!("receiver busy: {max} sessions already running; retry later");
    refuse(conn, ErrorCode::Busy, &msg);
}

/// Best-effort ERROR frame before closing.
fn refuse<T: Transport + ?Sized>(conn: &mut T, code: ErrorCode, msg: &str) {
    let mut frame = Vec::new();
    crate::framing::put_error_frame(&mut frame, code, msg);
    let _ = conn.write_all(&frame);
    let _ = conn.shutdown_write();
}

/// A connection a [`Shutdown`] can cut, counting the bytes it carries.
/// Reads wait at most [`CUT_POLL`] at a time, so the flag is seen; a
/// caller's own read timeout is kept, give or take one poll.
struct Cuttable<'s, T> {
    inner: T,
    shutdown: &'s Shutdown,
    /// The read timeout the caller asked for.
    timeout: Option<Duration>,
    bytes_in: u64,
    bytes_out: u64,
}

impl<'s, T: Transport> Cuttable<'s, T> {
    fn new(mut inner: T, shutdown: &'s Shutdown) -> io::Result<Self> {
        inner.set_read_timeout(Some(CUT_POLL))?;
        Ok(Self {
            inner,
            shutdown,
            timeout: None,
            bytes_in: 0,
            bytes_out: 0,
        })
    }

    fn check(&self) -> io::Result<()> {
        if self.shutdown.is_cut() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "session cut: the server is shutting down",
            ));
        }
        Ok(())
    }
}

impl<T: Transport> Transport for Cuttable<'_, T> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn helper_usage(&self) -> pfs_sys::Usage {
        self.inner.helper_usage()
    }
    fn udp_report(&self) -> Option<pfs_transport::udp::UdpReport> {
        self.inner.udp_report()
    }
    fn protect_datagrams(&mut self, keys: &pfs_transport::DatagramKeys) {
        self.inner.protect_datagrams(keys)
    }
    fn peer(&self) -> String {
        self.inner.peer()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.check()?;
        let n = self.inner.write_vectored(bufs)?;
        self.bytes_out += n as u64;
        Ok(n)
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // When the caller's timeout will have passed; known from the first
        // poll that comes back empty (the clock is read only when idle).
        let mut until: Option<Instant> = None;
        loop {
            self.check()?;
            match self.inner.read(buf) {
                Ok(n) => {
                    self.bytes_in += n as u64;
                    return Ok(n);
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    let Some(total) = self.timeout else { continue };
                    if total <= CUT_POLL {
                        return Err(e);
                    }
                    let at = *until.get_or_insert_with(|| Instant::now() + (total - CUT_POLL));
                    if Instant::now() >= at {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.check()?;
        let n = self.inner.read_ready(buf)?;
        self.bytes_in += n.unwrap_or(0) as u64;
        Ok(n)
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let poll = timeout.map_or(CUT_POLL, |t| t.min(CUT_POLL));
        self.inner.set_read_timeout(Some(poll))?;
        self.timeout = timeout;
        Ok(())
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
}
