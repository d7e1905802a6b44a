//! A receiver that keeps serving: accepts connections, admits each one
//! (a Noise handshake and the key's rights, or a plain connection where the
//! policy allows it), runs each session on its own thread (up to a limit),
//! reports what happened, and carries on after a client that misbehaves or
//! dies.
//!
//! The accept loop never waits on a client: admission runs on the
//! connection's own thread under absolute deadlines (the first byte, then
//! the handshake, counted from the accept). Connections still being
//! admitted are capped apart from `max_clients`; when that cap is reached
//! one is dropped as `crate::admitting` chooses (never first the client
//! of an address that is not flooding), so a flood of connections cannot
//! keep an authorized client out. One key holds at most `max_per_key`
//! slots (`crate::slots`), so no key keeps the others out either.
//!
//! A [`Shutdown`] stops it in two steps: stop accepting (running sessions
//! go on), then cut what still runs. Every connection is wrapped so that a
//! cut is seen within [`CUT_POLL`] by a session waiting to read, and by the
//! next write of one that is sending.

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pfs_auth::handshake::HANDSHAKE_HEADER;
use pfs_auth::{AuthorizedKeys, Cipher, Prefixed, PublicKey, Rights, SecureError, ServerSecurity, Service};
use pfs_transport::{Listener, Transport};
use pfs_wire::{ErrorCode, FrameHeader, FrameType, FRAME_HEADER_LEN};

use crate::admitting::{Admitting, Source, Ticket};
use crate::error::{Timeout, Violation};
use crate::files::{receive_files, FilesReceiverConfig, FilesReceiverOutcome};
use crate::gram::{receive_session, GramProgress, GramReceiverConfig, GramReceiverOutcome};
use crate::metrics::{Flow, Limit, LiveSession, Metrics, Refusal};
use crate::mount::{serve_mount, MountServerConfig, MountServerOutcome};
use crate::slots::{Full, Slot, Slots};
use crate::{BlobView, SessionError};
use pfs_files::DestRoot;
use pfs_sys::pin_current_thread;

/// Who may connect, and how.
#[derive(Debug, Clone)]
pub struct Admission {
    /// This server's identity: protected sessions are possible. `None`:
    /// only plain connections.
    pub security: Option<ServerSecurity>,
    /// Client keys and their rights, replaceable while the server runs
    /// (a reload). `None`: any key that completes the handshake may do
    /// everything (an open server that still encrypts).
    pub authorized: Option<KeyRing>,
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

/// The `authorized_keys` a server admits by, which a reload replaces
/// while it runs ([`KeyRing::replace`]). Each admission looks its key up in
/// the set current at that moment and copies the key's rights into its
/// [`Client`]: a session keeps the rights it was admitted with, whatever
/// reloads follow, and only new sessions see a new set.
#[derive(Debug, Clone)]
pub struct KeyRing(Arc<Mutex<Arc<AuthorizedKeys>>>);

impl KeyRing {
    /// A ring holding `keys`.
    pub fn new(keys: AuthorizedKeys) -> Self {
        Self(Arc::new(Mutex::new(Arc::new(keys))))
    }

    /// The set admissions use now.
    pub fn current(&self) -> Arc<AuthorizedKeys> {
        // A poisoned lock still holds a whole set: the swap below cannot
        // leave half of one.
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `keys` the set for admissions from now on; returns the old one.
    pub fn replace(&self, keys: AuthorizedKeys) -> Arc<AuthorizedKeys> {
        let new = Arc::new(keys);
        std::mem::replace(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()), new)
    }
}

impl From<AuthorizedKeys> for KeyRing {
    fn from(keys: AuthorizedKeys) -> Self {
        Self::new(keys)
    }
}

/// How long a new connection may be silent by default: the gram receiver's
/// wait for the first byte of HELLO before this check existed.
pub const DEFAULT_FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(60);

/// Sessions one key may run at once unless set: half the slots (at least
/// one), so a key holding its cap leaves as many slots to every other key,
/// and a single client may still run parallel sessions.
pub fn default_max_per_key(max_clients: usize) -> usize {
    (max_clients / 2).max(1)
}

/// How long the rest of a connection's first bytes may take after the
/// first one (a plain HELLO has as long again as its receiver allows from
/// that first byte; a handshake must end within its own deadline).
const HEAD_REST_TIMEOUT: Duration = Duration::from_secs(10);

/// Server settings, whichever protocol it serves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Sessions served at once; more are refused with ERROR(BUSY).
    pub max_clients: usize,
    /// Sessions one client key may run at once (plain connections are
    /// counted only against `max_clients`); more are refused with
    /// ERROR(BUSY). `None`: [`default_max_per_key`] of `max_clients`.
    pub max_per_key: Option<usize>,
    /// Connections being admitted at once (first bytes, handshake); past
    /// it one is dropped as `admitting` orders them: from the source that
    /// failed admission most often, then the one with the most connections
    /// being admitted, a silent one first, the oldest first, and one from
    /// a source that completed admission before only when no other is left.
    pub max_admitting: usize,
    /// Longest a new connection may stay silent before its first bytes
    /// (a plain sender connects, then sets up its blob before its HELLO);
    /// the handshake then has its own deadline (`ServerSecurity::timeout`).
    pub first_bytes_timeout: Duration,
    /// Stop after this many sessions (successful or not); `None` = forever.
    pub max_sessions: Option<u64>,
    /// Pin session threads to this CPU.
    pub pin_cpu: Option<usize>,
    /// Where the server counts what it does (`crate::metrics`); `None`:
    /// nothing is counted.
    pub metrics: Option<Arc<Metrics>>,
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
            max_per_key: None,
            max_admitting: 64,
            first_bytes_timeout: DEFAULT_FIRST_BYTES_TIMEOUT,
            max_sessions: None,
            pin_cpu: None,
            metrics: None,
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
    /// What its handshake proposed; `None` for a plain connection.
    pub service: Option<Service>,
    /// When its session's first frame began: a plain connection's first
    /// byte (read during admission), a protected one's verdict. The first
    /// frame's deadline counts from here.
    pub hello_from: Instant,
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
    /// A connection was refused because `max_clients` sessions are
    /// running, or `max_per_key` of its key's (or the server is stopping).
    Busy {
        /// Peer address.
        peer: &'a str,
        /// What the client was told.
        reason: &'a str,
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
    serve_loop(listener, cfg, offer, on_event, &|conn, client, _| {
        let peer = client.addr.as_str();
        let mut progress = |p: &GramProgress| on_event(ServerEvent::Progress { peer, progress: p });
        // The HELLO's time counts from its first byte, read at admission.
        let receiver = GramReceiverConfig {
            handshake_timeout: left_of(receiver.handshake_timeout, client.hello_from),
            // A key without the right is refused a catch-up like any sender
            // whose blob differs (`no-catch-up` in authorized_keys).
            catch_up: receiver.catch_up && client.rights.catch_up,
            ..receiver.clone()
        };
        receive_session(conn, blob, &receiver, &mut progress)
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
pub type PlaceFn<'a> = dyn Fn(&Client) -> Result<FilesPlace, crate::places::PlaceError> + Sync + 'a;

/// What a session of a files server was: files received (FILES_HELLO,
/// docs/wire.md §10) or a tree served to a mount (MOUNT_HELLO, §12).
#[derive(Debug)]
pub enum FilesSessionOutcome {
    /// Files were sent to this server.
    Received(FilesReceiverOutcome),
    /// A client mounted a tree this server holds.
    Served(MountServerOutcome),
}

/// Serves files sessions (docs/wire.md §10) and mount sessions (§12), each
/// client in the place `place` gives it, until `max_sessions` have ended.
/// Returns (completed, failed). Sessions run concurrently; clients of one
/// group share a store.
///
/// A connection's first frame says which: FILES_HELLO (the key needs its
/// `files` right) goes to [`receive_files`], MOUNT_HELLO (the `read`
/// right) to [`serve_mount`], anything else is refused with ERROR
/// `PROTOCOL`. A protected client's verdict already checked the right its
/// proposed service (file transfer or mounting) needs, and its first frame
/// must be that service's (else ERROR `PROTOCOL`); a key lacking the right
/// is answered ERROR `AUTH` and reported as [`ServerEvent::Denied`].
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
    serve_loop(listener, cfg, offer, on_event, &|conn, client, live| {
        files_or_mount(conn, (client, live), place, files_cfg, mount_cfg)
    })
}

/// One admitted connection of a files server: its first frame says which
/// session it runs, in the client's place.
fn files_or_mount(
    conn: &mut dyn Transport,
    (client, live): (&Client, &LiveSession),
    place: &PlaceFn<'_>,
    files_cfg: &FilesReceiverConfig,
    mount_cfg: &MountServerConfig,
) -> Result<FilesSessionOutcome, SessionError> {
    let (head, service) = first_service(conn, client, mount_cfg.hello_timeout)?;
    live.set_service(service);
    let here = place(client).map_err(|e| {
        // The peer learns what failed, not where on this host.
        refuse(
            conn,
            ErrorCode::Internal,
            &crate::peer_text::for_peer(&e.to_string(), None),
        );
        SessionError::Local(crate::LocalError::Place(e))
    })?;
    // The header read here is read again by the session.
    let mut conn = Prefixed::new(conn, &head);
    // The first frame's time counts from its first byte.
    if service == Service::Mount {
        let mount_cfg = MountServerConfig {
            hello_timeout: left_of(mount_cfg.hello_timeout, client.hello_from),
            ..mount_cfg.clone()
        };
        return serve_mount(&mut conn, &here.dest, &mount_cfg).map(FilesSessionOutcome::Served);
    }
    let cfg = FilesReceiverConfig {
        manifest: here.manifest.clone(),
        handshake_timeout: left_of(files_cfg.handshake_timeout, client.hello_from),
        ..files_cfg.clone()
    };
    receive_files(&mut conn, here.chunks.get(), &here.dest, &cfg).map(FilesSessionOutcome::Received)
}

/// Reads the header of a files connection's first frame (within
/// `hello_timeout` of its first byte) and checks what it asks: FILES_HELLO
/// needs the `files` right, MOUNT_HELLO the `read` right, and a protected
/// session's must be the service its handshake proposed. Returns the
/// header and the service; the peer is told why it is refused.
fn first_service(
    conn: &mut dyn Transport,
    client: &Client,
    hello_timeout: Duration,
) -> Result<([u8; FRAME_HEADER_LEN], Service), SessionError> {
    let head = first_header(conn, client.hello_from, hello_timeout).map_err(|e| match e.tell_peer() {
        true => tell(conn, e),
        false => e,
    })?;
    let kind = FrameHeader::parse(&head).map(|h| h.frame_type);
    let (proposed, needs, lacking) = match kind {
        Ok(FrameType::FilesHello) => (
            Service::Files,
            client.rights.files,
            "this key may not send files (no-files)",
        ),
        Ok(FrameType::MountHello) => (
            Service::Mount,
            client.rights.read,
            "this key may not read (no-read)",
        ),
        Ok(got) => {
            let expected = "FILES_HELLO or MOUNT_HELLO";
            return Err(tell(conn, Violation::UnexpectedFrame { expected, got }.into()));
        }
        Err(error) => {
            let context = "the first frame's header";
            return Err(tell(conn, SessionError::Malformed { context, error }));
        }
    };
    if !needs {
        refuse(conn, ErrorCode::Auth, lacking);
        return Err(Violation::Unauthorized(lacking).into());
    }
    // A protected session does what its handshake proposed (the verdict
    // checked the right for that).
    if client.service.is_some_and(|s| s != proposed) {
        let expected = match client.service {
            Some(Service::Mount) => "MOUNT_HELLO (the handshake proposed mounting)",
            _ => "FILES_HELLO (the handshake proposed file transfer)",
        };
        let got = kind.unwrap_or(FrameType::Error);
        return Err(tell(conn, Violation::UnexpectedFrame { expected, got }.into()));
    }
    Ok((head, proposed))
}

/// What is left of `timeout` counted from `from`.
fn left_of(timeout: Duration, from: Instant) -> Duration {
    timeout.saturating_sub(from.elapsed())
}

/// The header of a files connection's first frame, within `timeout` of
/// `from` (its first byte): trickled bytes do not move the deadline.
fn first_header(
    conn: &mut dyn Transport,
    from: Instant,
    timeout: Duration,
) -> Result<[u8; FRAME_HEADER_LEN], SessionError> {
    let during = "the first frame";
    let deadline = from + timeout;
    let mut head = [0u8; FRAME_HEADER_LEN];
    let mut got = 0;
    let read = loop {
        if got == head.len() {
            break Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let what = Timeout::Idle {
                during,
                after: timeout,
            };
            break Err(SessionError::TimedOut { what });
        }
        if let Err(e) = conn.set_read_timeout(Some(left)) {
            break Err(SessionError::transport(during, e));
        }
        match conn.read(&mut head[got..]) {
            Ok(0) => {
                let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection");
                break Err(SessionError::transport(during, eof));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The read waited for what was left: the deadline has passed
            // (a transport that fails at once with a timeout is not read
            // again in a loop).
            Err(e) if crate::framing::is_timeout(&e) => {
                let what = Timeout::Idle {
                    during,
                    after: timeout,
                };
                break Err(SessionError::TimedOut { what });
            }
            Err(e) => break Err(SessionError::transport(during, e)),
        }
    };
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

/// Runs one session on an admitted connection (its metrics told its
/// service once known).
type SessionFn<'a, O> =
    dyn Fn(&mut dyn Transport, &Client, &LiveSession) -> Result<O, SessionError> + Sync + 'a;

/// The bytes a completed session reconstructed, executed over or served,
/// for its metrics.
trait Effective {
    fn effective_bytes(&self) -> u64;
}

impl Effective for GramReceiverOutcome {
    fn effective_bytes(&self) -> u64 {
        self.report.effective_bytes
    }
}

impl Effective for FilesSessionOutcome {
    fn effective_bytes(&self) -> u64 {
        match self {
            Self::Received(r) => r.report.effective_bytes,
            Self::Served(m) => m.bytes,
        }
    }
}

/// The accept loop shared by both kinds of server: each connection is
/// admitted on its own thread, then runs `session` if one of
/// `max_clients` slots frees within 2 s, one of `max_per_key` for its key
/// (else ERROR BUSY). A session's
/// outcome is reported as [`ServerEvent::Finished`], its error as
/// [`ServerEvent::Failed`]. Ends at `max_sessions` or on a shutdown, once
/// every session has ended.
fn serve_loop<L: Listener, O: Effective>(
    listener: &L,
    cfg: &ServerConfig,
    offer: Offer,
    on_event: &(dyn Fn(ServerEvent<'_, O>) + Sync),
    session: &SessionFn<'_, O>,
) -> (u64, u64) {
    let server = Server::new(cfg, offer, on_event, session);
    std::thread::scope(|scope| {
        while let Some(conn) = server.next_connection(listener) {
            let arrival = server.arrive(conn);
            let server = &server;
            scope.spawn(move || server.connection(arrival));
        }
    });
    (
        server.ok.load(Ordering::Relaxed),
        server.failed.load(Ordering::Relaxed),
    )
}

/// What the accept loop and the connections' threads share: the settings,
/// the slots, the admission set and the counters.
struct Server<'a, O> {
    cfg: &'a ServerConfig,
    offer: Offer,
    on_event: &'a (dyn Fn(ServerEvent<'_, O>) + Sync),
    session: &'a SessionFn<'a, O>,
    shutdown: &'a Shutdown,
    slots: Slots,
    /// Sessions that completed, and connections that failed.
    ok: AtomicU64,
    failed: AtomicU64,
    /// Connections counted toward max_sessions (a BUSY refusal gives its
    /// count back), and those whose fate is not known yet.
    started: AtomicU64,
    undecided: AtomicUsize,
    admitting: Mutex<Admitting>,
}

/// A connection just accepted, entered in the admission set.
struct Arrival<C> {
    conn: C,
    peer: String,
    accepted_at: Instant,
    source: Source,
    ticket: Ticket,
}

impl<'a, O: Effective> Server<'a, O> {
    fn new(
        cfg: &'a ServerConfig,
        offer: Offer,
        on_event: &'a (dyn Fn(ServerEvent<'_, O>) + Sync),
        session: &'a SessionFn<'a, O>,
    ) -> Self {
        let per_key = cfg
            .max_per_key
            .unwrap_or_else(|| default_max_per_key(cfg.max_clients));
        Self {
            cfg,
            offer,
            on_event,
            session,
            shutdown: &cfg.shutdown,
            slots: Slots::new(cfg.max_clients, per_key),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            started: AtomicU64::new(0),
            undecided: AtomicUsize::new(0),
            admitting: Mutex::new(Admitting::default()),
        }
    }

    /// Waits for the next connection to admit; `None` once the loop ends
    /// (a shutdown, or `max_sessions` reached with every fate known).
    fn next_connection<L: Listener>(&self, listener: &L) -> Option<L::Conn> {
        loop {
            if self.shutdown.is_stopping() {
                lock(&self.admitting).cancel_all();
                return None;
            }
            if let Some(max) = self.cfg.max_sessions {
                if self.started.load(Ordering::Acquire) >= max {
                    // A connection still waiting for a slot may yet be
                    // refused and give its count back.
                    if self.undecided.load(Ordering::Acquire) == 0 {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
            }
            let accepted = listener.accept();
            // The connection that woke a stopping loop, or one that came as
            // it stopped, is dropped unanswered.
            if self.shutdown.is_stopping() {
                continue;
            }
            match accepted {
                Ok(conn) => return Some(conn),
                Err(error) => {
                    self.count(|m| m.accept_failed());
                    (self.on_event)(ServerEvent::AcceptFailed { error: &error });
                    // Out of descriptors or memory: give the system a moment.
                    // A refused peer (another user's, on a Unix socket) is no
                    // reason to slow everyone else down.
                    if error.kind() != std::io::ErrorKind::PermissionDenied {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        }
    }

    /// Counts a connection just accepted and enters it in the admission set.
    fn arrive<C: Transport>(&self, conn: C) -> Arrival<C> {
        let accepted_at = Instant::now();
        let peer = conn.peer();
        self.count(|m| m.accepted());
        (self.on_event)(ServerEvent::Accepted { peer: &peer });
        let source = Source::of(&peer);
        let ticket = lock(&self.admitting).enter(source, self.cfg.max_admitting);
        self.started.fetch_add(1, Ordering::AcqRel);
        self.undecided.fetch_add(1, Ordering::AcqRel);
        Arrival {
            conn,
            peer,
            accepted_at,
            source,
            ticket,
        }
    }

    /// One connection, on its own thread: admitted, given a slot, served,
    /// reported.
    fn connection<C: Transport>(&self, arrival: Arrival<C>) {
        let Arrival {
            conn,
            peer,
            accepted_at,
            source,
            ticket,
        } = arrival;
        let mut decided = Decided(&self.undecided, false);
        let flow = Arc::new(Flow::default());
        let farewell_ok = Arc::new(AtomicBool::new(false));
        let mut conn = match Cuttable::new(conn, self.shutdown, flow.clone(), farewell_ok.clone()) {
            Ok(c) => c,
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.count(|m| m.refused(Refusal::Closed, None));
                lock(&self.admitting).leave(ticket.id);
                decided.done();
                let reason = format!("setting up the connection: {e}");
                (self.on_event)(ServerEvent::Denied {
                    peer: &peer,
                    key: None,
                    reason: &reason,
                });
                return;
            }
        };
        let at = (&peer[..], accepted_at, source);
        let Some((mut transport, client)) = self.admit(&mut conn, at, &ticket, &mut decided) else {
            return;
        };
        let Some(_slot) = self.take_slot(&mut *transport, client.key, &peer, &mut decided) else {
            return;
        };
        decided.done();
        if let Some(cpu) = self.cfg.pin_cpu {
            let _ = pin_current_thread(cpu);
        }
        (self.on_event)(ServerEvent::Admitted { client: &client });
        let t0 = Instant::now();
        let service = client
            .service
            .or((self.offer.service == Service::Blob).then_some(Service::Blob));
        let live = self
            .cfg
            .metrics
            .as_ref()
            .map_or_else(LiveSession::default, |m| m.start(service, flow.clone()));
        let result = (self.session)(&mut *transport, &client, &live);
        if result.is_err() && self.shutdown.is_cut() {
            // Paired with the Acquire load in Cuttable's writes.
            farewell_ok.store(true, Ordering::Release);
            farewell(&mut *transport);
        }
        // The wrappers above the connection are done with it: its
        // counters are final.
        drop(transport);
        let traffic = Traffic {
            elapsed: t0.elapsed(),
            bytes_in: flow.bytes_in(),
            bytes_out: flow.bytes_out(),
        };
        if let Some(m) = &self.cfg.metrics {
            let at_end = (traffic.elapsed, self.shutdown.is_cut());
            m.end(live, self.offer.service, &result, O::effective_bytes, at_end);
        }
        self.finished(result, &peer, &client, traffic);
    }

    /// Admits the connection from `peer` accepted at `accepted_at` (see
    /// [`admit`]) and records the verdict for its `source`; `None` when it
    /// was denied (counted and reported).
    fn admit<'c, C: Transport>(
        &self,
        conn: &'c mut Cuttable<'_, C>,
        (peer, accepted_at, source): (&str, Instant, Source),
        ticket: &Ticket,
        decided: &mut Decided<'_>,
    ) -> Option<(Box<dyn Transport + 'c>, Client)> {
        let admitted = admit(conn, peer, accepted_at, self.cfg, self.offer, ticket);
        let mut admitting = lock(&self.admitting);
        admitting.leave(ticket.id);
        match admitted {
            Ok(a) => {
                admitting.prove(source);
                Some(a)
            }
            Err(reason) => {
                admitting.fail(source);
                drop(admitting);
                self.failed.fetch_add(1, Ordering::Relaxed);
                // A shutdown cancels admissions as a full set drops one.
                let kind = match reason.kind {
                    Refusal::Dropped if self.shutdown.is_stopping() => Refusal::Shutdown,
                    kind => kind,
                };
                self.count(|m| m.refused(kind, None));
                decided.done();
                (self.on_event)(ServerEvent::Denied {
                    peer,
                    key: reason.key,
                    reason: &reason.text,
                });
                None
            }
        }
    }

    /// A slot for a session of `key`, or ERROR BUSY (the connection's count
    /// given back, reported).
    fn take_slot(
        &self,
        transport: &mut dyn Transport,
        key: Option<PublicKey>,
        peer: &str,
        decided: &mut Decided<'_>,
    ) -> Option<Slot<'_>> {
        // A session that just sent its report may not have released its
        // slot yet; give slots a moment to free before refusing.
        let patience = Instant::now() + Duration::from_secs(2);
        let slot = loop {
            match self.slots.try_take(key) {
                Ok(slot) => break Ok(slot),
                Err(full) if Instant::now() >= patience || self.shutdown.is_stopping() => break Err(full),
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        let reason = match slot {
            Ok(slot) if !self.shutdown.is_stopping() => return Some(slot),
            Err(full) if !self.shutdown.is_stopping() => {
                let limit = match full {
                    Full::Server(_) => Limit::MaxClients,
                    Full::Key(_) => Limit::MaxPerKey,
                };
                self.count(|m| m.refused(Refusal::Busy, Some(limit)));
                busy_reason(full)
            }
            _ => {
                self.count(|m| m.refused(Refusal::Shutdown, None));
                "server shutting down; retry later".to_string()
            }
        };
        refuse(transport, ErrorCode::Busy, &reason);
        self.started.fetch_sub(1, Ordering::AcqRel);
        decided.done();
        (self.on_event)(ServerEvent::Busy {
            peer,
            reason: &reason,
        });
        None
    }

    /// Counts in the metrics, if any.
    fn count(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.cfg.metrics {
            f(m);
        }
    }

    /// Counts and reports how the session of `client` ended.
    fn finished(&self, result: Result<O, SessionError>, peer: &str, client: &Client, traffic: Traffic) {
        match result {
            Ok(outcome) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                (self.on_event)(ServerEvent::Finished {
                    peer,
                    client,
                    traffic,
                    outcome: &outcome,
                });
            }
            // A right the session's first frame needed: a refusal.
            Err(SessionError::Violation(Violation::Unauthorized(reason))) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                (self.on_event)(ServerEvent::Denied {
                    peer,
                    key: client.key,
                    reason,
                });
            }
            Err(error) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                (self.on_event)(ServerEvent::Failed {
                    peer,
                    client,
                    traffic,
                    error: &error,
                });
            }
        }
    }
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

fn lock(admitting: &Mutex<Admitting>) -> std::sync::MutexGuard<'_, Admitting> {
    admitting.lock().unwrap_or_else(|p| p.into_inner())
}

/// Why [`admit_one`] did not admit a connection (the client was told, as
/// the serve loop tells it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denied {
    /// Its key, when the handshake got that far.
    pub key: Option<PublicKey>,
    /// Why.
    pub reason: String,
}

/// Admits one connection accepted at `accepted_at` from `peer` to a server
/// of blob sessions, as [`serve`] admits each of its own: its first bytes,
/// the handshake and the key's rights under `cfg.admission` (a key needs
/// `blob`, and `exec` when the server `runs_kernels` over its grams), or a
/// plain connection where allowed. For a server that runs its sessions
/// itself, one at a time (`pfs sub`); returns the connection to speak on
/// (protected or plain) and who the client is.
pub fn admit_one<'c, C: Transport>(
    conn: &'c mut C,
    peer: &str,
    accepted_at: Instant,
    cfg: &ServerConfig,
    runs_kernels: bool,
) -> Result<(Box<dyn Transport + 'c>, Client), Denied> {
    let offer = Offer {
        service: Service::Blob,
        runs_kernels,
    };
    // Alone, never evicted: no other connection competes for admission.
    let ticket = Ticket {
        id: 0,
        cancel: Arc::default(),
        started: Arc::default(),
    };
    admit(conn, peer, accepted_at, cfg, offer, &ticket).map_err(|d| Denied {
        key: d.key,
        reason: d.text,
    })
}

/// Why a connection was not admitted.
struct DenyReason {
    key: Option<PublicKey>,
    text: String,
    /// How the metrics count it.
    kind: Refusal,
}

impl DenyReason {
    fn new(key: Option<PublicKey>, text: impl Into<String>) -> Self {
        Self {
            key,
            text: text.into(),
            kind: Refusal::Auth,
        }
    }

    fn kind(self, kind: Refusal) -> Self {
        Self { kind, ..self }
    }
}

/// What every refused handshake is told, whatever went wrong: a prober
/// learns nothing about which step failed or which keys exist.
const GENERIC_REFUSAL: &str = "not authorized";

/// Admits one connection: reads its first bytes, runs the handshake and
/// the rights check, or lets a plain connection through where allowed.
///
/// Deadlines, all absolute: the first byte by `accepted_at` +
/// `first_bytes_timeout`; the rest of the first bytes within
/// [`HEAD_REST_TIMEOUT`] of it; a handshake's verdict by `accepted_at` +
/// the handshake timeout (a client handshakes as soon as it connects).
fn admit<'c, C: Transport>(
    conn: &'c mut C,
    peer: &str,
    accepted_at: Instant,
    cfg: &ServerConfig,
    offer: Offer,
    ticket: &Ticket,
) -> Result<(Box<dyn Transport + 'c>, Client), DenyReason> {
    let policy = &cfg.admission;
    let cancel = &*ticket.cancel;
    let first_by = accepted_at + cfg.first_bytes_timeout;
    let (head, first_byte) = pfs_auth::read_head_by(&mut *conn, first_by, HEAD_REST_TIMEOUT, cancel)
        .map_err(|e| {
            DenyReason::new(None, format!("before its first bytes: {e}")).kind(Refusal::of_secure(&e))
        })?;
    // Paired with the Acquire load of the admission set's eviction choice.
    ticket.started.store(true, Ordering::Release);
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
            service: None,
            hello_from: first_byte,
        };
        return Ok((Box::new(Prefixed::new(conn, &head)), client));
    }
    admit_keyed(conn, peer, head, accepted_at, cfg, offer, cancel)
}

/// A connection that opened with a handshake: completed by `accepted_at`
/// plus the handshake timeout, the key's rights looked up and checked
/// against what it proposes, the verdict sent.
fn admit_keyed<'c, C: Transport>(
    conn: &'c mut C,
    peer: &str,
    head: [u8; HANDSHAKE_HEADER],
    accepted_at: Instant,
    cfg: &ServerConfig,
    offer: Offer,
    cancel: &AtomicBool,
) -> Result<(Box<dyn Transport + 'c>, Client), DenyReason> {
    let policy = &cfg.admission;
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
    let deadline = accepted_at + sec.timeout;
    // A handshake it cannot finish, `accept_by` answers with a plain ERROR.
    let pending = pfs_auth::accept_by(&mut *conn, head, sec, deadline, cancel).map_err(|e| {
        let kind = Refusal::of_secure(&e);
        let text = match e {
            SecureError::TimedOut(..) => format!("handshake: {e}"),
            other => format!("handshake failed: {other}"),
        };
        DenyReason::new(None, text).kind(kind)
    })?;
    let key = pending.peer();
    let proposal = pending.proposal();
    let rights = match &policy.authorized {
        // An open server: every key may do everything, in the shared group.
        None => plain_rights(),
        Some(ring) => match ring.current().rights(&key) {
            Some(r) => r.clone(),
            None => {
                let _ = pending.refuse(GENERIC_REFUSAL);
                return Err(DenyReason::new(Some(key), "key not in authorized_keys"));
            }
        },
    };
    if let Some(why) = lacking(offer, proposal.service, &rights) {
        let _ = pending.refuse(&why);
        return Err(DenyReason::new(Some(key), why));
    }
    let st = pending
        .admit()
        .map_err(|e| DenyReason::new(Some(key), format!("sending the verdict: {e}")).kind(Refusal::Closed))?;
    let client = Client {
        addr: peer.to_string(),
        key: Some(key),
        cipher: Some(proposal.cipher),
        rights,
        service: Some(proposal.service),
        hello_from: Instant::now(),
    };
    Ok((Box::new(st), client))
}

/// Why a key with `rights` may not have the `proposed` service of a
/// server offering `offer`, if it may not: the verdict refuses it, so a
/// key that could do nothing here never holds a slot.
fn lacking(offer: Offer, proposed: Service, rights: &Rights) -> Option<String> {
    let served = match offer.service {
        Service::Blob => proposed == Service::Blob,
        // A files server also serves its tree to mounts.
        Service::Files | Service::Mount => matches!(proposed, Service::Files | Service::Mount),
    };
    if !served {
        return Some(format!(
            "this server offers {}, not {}",
            offer.service.name(),
            proposed.name()
        ));
    }
    match proposed {
        Service::Blob if !rights.blob => Some("this key may not run blob sessions (no-blob)".into()),
        Service::Blob if offer.runs_kernels && !rights.exec => {
            Some("this server runs an --exec kernel over every gram and this key may not (no-exec)".into())
        }
        Service::Files if !rights.files => Some("this key may not send files (no-files)".into()),
        Service::Mount if !rights.read => Some("this key may not read (no-read)".into()),
        _ => None,
    }
}

/// A plain client's rights: everything, in the shared (unnamed) group.
fn plain_rights() -> Rights {
    Rights {
        dir: Default::default(),
        blob: true,
        files: true,
        read: true,
        exec: true,
        catch_up: true,
        stream: pfs_auth::StreamRights::Write,
        group: String::new(),
    }
}

/// What a client refused for want of a slot is told.
fn busy_reason(full: Full) -> String {
    match full {
        Full::Server(max) => format!("receiver busy: {max} sessions already running; retry later"),
        Full::Key(max) => {
            format!("this key already runs {max} sessions, the most one key may (--max-per-key); retry later")
        }
    }
}

/// Best-effort ERROR frame before closing.
fn refuse<T: Transport + ?Sized>(conn: &mut T, code: ErrorCode, msg: &str) {
    let mut frame = Vec::new();
    crate::framing::put_error_frame(&mut frame, code, msg);
    let _ = conn.write_all(&frame);
    let _ = conn.shutdown_write();
}

/// What a client is told when the server's shutdown cut its session.
pub const SHUTTING_DOWN_MESSAGE: &str = "the server is shutting down; run again to resume";

/// Longest the farewell may wait on a peer that does not read.
const FAREWELL_TIMEOUT: Duration = Duration::from_secs(1);

/// Tells the peer of a session the shutdown cut why it ended: ERROR
/// `SHUTTING_DOWN` on the session's own channel (sealed in a protected
/// session), best effort and bounded, then our side is closed. A peer that
/// was sending meets it when its next write fails and it reads what came.
fn farewell(t: &mut dyn Transport) {
    let _ = t.set_write_timeout(Some(FAREWELL_TIMEOUT));
    let mut frame = Vec::new();
    crate::framing::put_error_frame(&mut frame, ErrorCode::ShuttingDown, SHUTTING_DOWN_MESSAGE);
    let _ = t.write_all(&frame);
    let _ = t.shutdown_write();
}

/// A connection a [`Shutdown`] can cut, counting the bytes it carries.
/// Reads wait at most [`CUT_POLL`] at a time, so the flag is seen; a
/// caller's own read timeout is kept, give or take one poll.
struct Cuttable<'s, T> {
    inner: T,
    shutdown: &'s Shutdown,
    /// Set once the session has ended after a cut: writes pass again, for
    /// the one ERROR `SHUTTING_DOWN` that tells the peer ([`farewell`]).
    farewell: Arc<AtomicBool>,
    /// The read timeout the caller asked for.
    timeout: Option<Duration>,
    /// The bytes it carried, as its `Traffic` and the metrics see them.
    flow: Arc<Flow>,
}

impl<'s, T: Transport> Cuttable<'s, T> {
    fn new(
        mut inner: T,
        shutdown: &'s Shutdown,
        flow: Arc<Flow>,
        farewell: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        inner.set_read_timeout(Some(CUT_POLL))?;
        Ok(Self {
            inner,
            shutdown,
            farewell,
            timeout: None,
            flow,
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
        // Paired with the Release store in `connection`, after the session ended.
        if !self.farewell.load(Ordering::Acquire) {
            self.check()?;
        }
        let n = self.inner.write_vectored(bufs)?;
        self.flow.add_out(n);
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
                    self.flow.add_in(n);
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
        self.flow.add_in(n.unwrap_or(0));
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
