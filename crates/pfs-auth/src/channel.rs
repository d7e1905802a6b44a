//! Protected sessions over any [`Transport`]: the blocking handshake
//! drivers ([`connect`], [`accept`]) and [`SecureTransport`], a transport
//! whose bytes travel in sealed records. The session protocols run over it
//! unchanged: they see a byte stream.
//!
//! Every handshake wait has one absolute deadline, so a peer trickling
//! bytes cannot hold a handshake longer than it. After the handshake, a
//! record must arrive whole within [`DEFAULT_RECORD_TIMEOUT`] of waiting
//! from its first byte, and a write of records ends at the deadline its caller set with
//! `set_write_timeout` however the peer paces its reads.

use std::io::{self, IoSlice};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pfs_transport::Transport;
use pfs_wire::{ErrorCode, ErrorFrame, FrameHeader, FrameType, FRAME_HEADER_LEN as FRAME_HEADER};

use crate::handshake::{
    ClientHandshake, Established, HandshakeError, MessageHeader, Proposal, Psk, ServerHandshake,
    HANDSHAKE_HEADER, HANDSHAKE_MAGIC,
};
use crate::policy::{known_hosts_line, HostCheck, KnownHosts};
use crate::record::{
    Cipher, Opener, RecordError, RecordHeader, RecordKind, Sealer, MAX_RECORD, MAX_RECORD_PLAINTEXT,
    RECORD_HEADER,
};
use crate::{Identity, PublicKey};

/// Records sealed into one buffer and written with one call: fewer system
/// calls for large writes, each record still at most 256 KiB.
const WRITE_BATCH: usize = 4;

/// How long a handshake may take, start to verdict, by default.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a receiver may wait for the rest of a record once its first
/// byte arrived, by default (time spent waiting in reads: the receiver's
/// own work between reads is not the peer's). The largest record (262,160
/// bytes) then needs 26 kB/s: a link slower than that cannot carry a
/// protected session, and a peer trickling a record loses the session
/// after this long, whatever the per-frame deadlines above it allow.
pub const DEFAULT_RECORD_TIMEOUT: Duration = Duration::from_secs(10);

/// Empty DATA records accepted in a row. A sender has no reason to send
/// one (ours never does); a few are tolerated, a stream of them (work for
/// the receiver, no bytes for the session) ends the session.
pub const MAX_EMPTY_RECORDS: u32 = 8;

/// Why a protected session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    /// The transport failed.
    #[error("transport error during the handshake ({during}): {source}")]
    Io {
        /// The step.
        during: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The peer did not finish the handshake in time.
    #[error("handshake not finished within {0:?} (during {1})")]
    TimedOut(Duration, &'static str),
    /// The peer's bytes were not a valid handshake (or the keys did not match).
    #[error("{0}")]
    Handshake(#[from] HandshakeError),
    /// The server's key is pinned nowhere.
    #[error(
        "server {addr} presented key {fingerprint}, which is not in {known_hosts}; if you trust it, \
         add this line to that file (or pass --server-key): {line}",
        fingerprint = key.fingerprint(), line = known_hosts_line(addr, key)
    )]
    UnknownServer {
        /// The address as given.
        addr: String,
        /// The key it presented.
        key: PublicKey,
        /// Where pins are read from.
        known_hosts: String,
    },
    /// The server presented another key than the one pinned.
    #[error(
        "server {addr} presented key {got_fp}, but {expected_fps} is pinned ({source_of_pin}): \
         refused (the server's key changed, or someone is in the middle)",
        got_fp = got.fingerprint(),
        expected_fps = expected.iter().map(|k| k.fingerprint()).collect::<Vec<_>>().join(" or ")
    )]
    WrongServer {
        /// The address as given.
        addr: String,
        /// What was presented.
        got: PublicKey,
        /// What is pinned.
        expected: Vec<PublicKey>,
        /// `--server-key` or the known_hosts path.
        source_of_pin: String,
    },
    /// The server dropped this pending connection to admit a newer one
    /// (its admission queue was full).
    #[error("connection dropped: too many connections were being admitted")]
    Dropped,
    /// The server refused this client after the handshake.
    #[error("server refused this client (our key {fingerprint}): {reason}")]
    Refused {
        /// Our own key's fingerprint, to look for in the server's file.
        fingerprint: String,
        /// The server's reason.
        reason: String,
    },
    /// The server answered the handshake with a plain ERROR frame (busy,
    /// or it does not speak protected sessions).
    #[error("server refused the connection ({code}): {message}")]
    PlainRefusal {
        /// The ERROR code.
        code: u16,
        /// Its message.
        message: String,
    },
}

/// Which server key the client accepts.
#[derive(Debug, Clone)]
pub enum Pin {
    /// Exactly this key (`--server-key`).
    Key(PublicKey),
    /// Whatever `known_hosts` pins for the address.
    KnownHosts {
        /// The parsed file.
        hosts: KnownHosts,
        /// Its path, for messages.
        path: PathBuf,
    },
}

/// A client's handshake settings.
#[derive(Debug, Clone)]
pub struct ClientSecurity {
    /// Our static key pair.
    pub identity: Identity,
    /// The server key we accept.
    pub pin: Pin,
    /// A pre-shared key, if the server requires one.
    pub psk: Option<Psk>,
    /// The record cipher.
    pub cipher: Cipher,
    /// Keys rotate after 2^this bytes per direction.
    pub rotate_log2: u8,
    /// Start to verdict.
    pub timeout: Duration,
}

/// A server's handshake settings.
#[derive(Debug, Clone)]
pub struct ServerSecurity {
    /// Our static key pair.
    pub identity: Identity,
    /// A pre-shared key every client must also hold.
    pub psk: Option<Psk>,
    /// Start to verdict: the deadline starts when the connection is
    /// accepted (see [`accept_by`]).
    pub timeout: Duration,
    /// Waiting for the rest of a record (see [`DEFAULT_RECORD_TIMEOUT`]).
    pub record_timeout: Duration,
}

/// What a protected session knows about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The peer's proven key.
    pub peer: PublicKey,
    /// The record cipher.
    pub cipher: Cipher,
    /// The client's proposal.
    pub proposal: Proposal,
    /// Names this session: the Noise handshake hash.
    pub handshake_hash: [u8; 32],
}

/// One absolute deadline for a whole handshake, and a flag another thread
/// may set to abandon it (a server dropping its oldest pending connection).
struct Deadline<'a> {
    at: Instant,
    total: Duration,
    cancel: Option<&'a AtomicBool>,
}

/// How often a cancellable wait looks at its flag.
const CANCEL_POLL: Duration = Duration::from_millis(100);

impl<'a> Deadline<'a> {
    fn new(total: Duration, cancel: Option<&'a AtomicBool>) -> Self {
        Self::at(Instant::now() + total, total, cancel)
    }

    /// Ends at `at`; `total` is what errors report.
    fn at(at: Instant, total: Duration, cancel: Option<&'a AtomicBool>) -> Self {
        Self { at, total, cancel }
    }

    /// Fills `buf` from `t` before the deadline.
    fn read_exact<T: Transport + ?Sized>(
        &self,
        t: &mut T,
        mut buf: &mut [u8],
        during: &'static str,
    ) -> Result<(), SecureError> {
        while !buf.is_empty() {
            if self.cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
                return Err(SecureError::Dropped);
            }
            let left = self.at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SecureError::TimedOut(self.total, during));
            }
            let wait = if self.cancel.is_some() {
                left.min(CANCEL_POLL)
            } else {
                left
            };
            t.set_read_timeout(Some(wait))
                .map_err(|source| SecureError::Io { during, source })?;
            match t.read(buf) {
                Ok(0) => {
                    return Err(SecureError::Io {
                        during,
                        source: io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection"),
                    })
                }
                Ok(n) => buf = &mut buf[n..],
                Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted) => {}
                // The loop decides: the deadline, or the flag, or wait on.
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(source) => return Err(SecureError::Io { during, source }),
            }
        }
        Ok(())
    }
}

/// Reads one whole handshake message (header included); a plain ERROR
/// frame in its place (a server refusing before any handshake) becomes
/// [`SecureError::PlainRefusal`].
fn read_message<T: Transport + ?Sized>(
    t: &mut T,
    deadline: &Deadline,
    during: &'static str,
) -> Result<Vec<u8>, SecureError> {
    let mut head = [0u8; HANDSHAKE_HEADER];
    deadline.read_exact(t, &mut head, during)?;
    if head[..4] != HANDSHAKE_MAGIC {
        return Err(plain_refusal(t, deadline, &head, during)?);
    }
    let h = MessageHeader::parse(&head)?;
    let mut msg = head.to_vec();
    msg.resize(HANDSHAKE_HEADER + h.len, 0);
    deadline.read_exact(t, &mut msg[HANDSHAKE_HEADER..], during)?;
    Ok(msg)
}

/// Decodes a plain ERROR frame whose first bytes are `head`.
fn plain_refusal<T: Transport + ?Sized>(
    t: &mut T,
    deadline: &Deadline,
    head: &[u8; HANDSHAKE_HEADER],
    during: &'static str,
) -> Result<SecureError, SecureError> {
    let not = HandshakeError::NotHandshake("the server answered with something else");
    let mut frame = [0u8; FRAME_HEADER];
    frame[..HANDSHAKE_HEADER].copy_from_slice(head);
    deadline.read_exact(t, &mut frame[HANDSHAKE_HEADER..], during)?;
    let h = FrameHeader::parse(&frame).map_err(|_| not.clone())?;
    if h.frame_type != FrameType::Error || h.length as usize > 64 << 10 {
        return Err(not.into());
    }
    let mut body = vec![0u8; h.length as usize];
    deadline.read_exact(t, &mut body, during)?;
    let e = ErrorFrame::parse(&body).map_err(|_| not)?;
    Ok(SecureError::PlainRefusal {
        code: e.code,
        message: e.message.to_string(),
    })
}

fn write<T: Transport + ?Sized>(t: &mut T, bytes: &[u8], during: &'static str) -> Result<(), SecureError> {
    t.write_all(bytes)
        .map(drop)
        .map_err(|source| SecureError::Io { during, source })
}

/// Verdict status bytes (docs/wire.md §11.3).
const ACCEPTED: u8 = 0;
const REFUSED: u8 = 1;

/// Opens a protected session to a server over `t` (already connected to
/// `addr`, the address as the user gave it): handshake, pin check (before
/// our identity is revealed to the server), verdict.
pub fn connect<T: Transport>(
    mut t: T,
    addr: &str,
    service: crate::handshake::Service,
    sec: &ClientSecurity,
) -> Result<SecureTransport<T>, SecureError> {
    let deadline = Deadline::new(sec.timeout, None);
    let proposal = Proposal {
        cipher: sec.cipher,
        rotate_log2: sec.rotate_log2,
        service,
    };
    let (mut hs, hs1) = ClientHandshake::start(sec.identity.private_bytes(), sec.psk.as_ref(), proposal)?;
    write(&mut t, &hs1, "HS1")?;
    let hs2 = read_message(&mut t, &deadline, "HS2")?;
    let server = hs.read_answer(&hs2)?;
    check_pin(&sec.pin, addr, &server)?;
    let (hs3, est) = hs.finish()?;
    write(&mut t, &hs3, "HS3")?;
    // A server that cannot finish the handshake (a wrong pre-shared key)
    // has no keys to seal a verdict with and answers a plain ERROR frame
    // instead: a record never starts with its magic.
    let mut first = [0u8; HANDSHAKE_HEADER];
    deadline.read_exact(&mut t, &mut first, "verdict")?;
    if first[..4] == pfs_wire::MAGIC {
        return Err(plain_refusal(&mut t, &deadline, &first, "verdict")?);
    }
    let mut st = SecureTransport::new(t, est);
    st.preload(&first);
    // The verdict: status, u16 length, reason.
    let mut head = [0u8; 3];
    read_secure(&mut st, &deadline, &mut head)?;
    let len = u16::from_be_bytes([head[1], head[2]]) as usize;
    let mut reason = vec![0u8; len];
    read_secure(&mut st, &deadline, &mut reason)?;
    match head[0] {
        ACCEPTED => {
            st.set_read_timeout(None).map_err(|source| SecureError::Io {
                during: "verdict",
                source,
            })?;
            Ok(st)
        }
        _ => Err(SecureError::Refused {
            fingerprint: sec.identity.public().fingerprint(),
            reason: String::from_utf8_lossy(&reason).into_owned(),
        }),
    }
}

fn read_secure<T: Transport>(
    st: &mut SecureTransport<T>,
    deadline: &Deadline,
    buf: &mut [u8],
) -> Result<(), SecureError> {
    deadline.read_exact(st, buf, "verdict")
}

fn check_pin(pin: &Pin, addr: &str, server: &PublicKey) -> Result<(), SecureError> {
    match pin {
        Pin::Key(k) if k == server => Ok(()),
        Pin::Key(k) => Err(SecureError::WrongServer {
            addr: addr.into(),
            got: *server,
            expected: vec![*k],
            source_of_pin: "--server-key".into(),
        }),
        Pin::KnownHosts { hosts, path } => match hosts.check(addr, server) {
            HostCheck::Known => Ok(()),
            HostCheck::Unknown => Err(SecureError::UnknownServer {
                addr: addr.into(),
                key: *server,
                known_hosts: path.display().to_string(),
            }),
            HostCheck::Changed { pinned } => Err(SecureError::WrongServer {
                addr: addr.into(),
                got: *server,
                expected: pinned,
                source_of_pin: path.display().to_string(),
            }),
        },
    }
}

/// A handshake the server finished: who the client is and what it asked,
/// awaiting the server's decision.
#[derive(Debug)]
pub struct PendingClient<T: Transport> {
    st: SecureTransport<T>,
    deadline: Instant,
}

impl<T: Transport> PendingClient<T> {
    /// The client's proven key.
    pub fn peer(&self) -> PublicKey {
        self.st.info.peer
    }

    /// What the client asked for.
    pub fn proposal(&self) -> Proposal {
        self.st.info.proposal
    }

    /// Accepts the client: sends the verdict, returns the session's transport.
    pub fn admit(mut self) -> Result<SecureTransport<T>, SecureError> {
        self.send_verdict(ACCEPTED, "")?;
        Ok(self.st)
    }

    /// Refuses the client with `reason`; the connection is then closed.
    pub fn refuse(mut self, reason: &str) -> Result<(), SecureError> {
        self.send_verdict(REFUSED, reason)?;
        let _ = self.st.shutdown_write();
        Ok(())
    }

    fn send_verdict(&mut self, status: u8, reason: &str) -> Result<(), SecureError> {
        let reason = &reason.as_bytes()[..reason.len().min(1024)];
        let mut v = vec![status];
        v.extend_from_slice(&(reason.len() as u16).to_be_bytes());
        v.extend_from_slice(reason);
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SecureError::TimedOut(Duration::ZERO, "verdict"));
        }
        // A client that does not read its verdict holds nothing past the
        // handshake's deadline.
        let during = "verdict";
        self.st
            .set_write_timeout(Some(left))
            .map_err(|source| SecureError::Io { during, source })?;
        let sent = self.st.write_all(&v).map(drop);
        let _ = self.st.set_write_timeout(None);
        sent.map_err(|source| SecureError::Io { during, source })
    }
}

/// Runs the server's side of a handshake whose first [`HANDSHAKE_HEADER`]
/// bytes (`head`, already read to tell a protected connection from a plain
/// one) start with `PFSN`, with `sec.timeout` from now to the verdict.
/// Returns the client, proven but not yet admitted. A failure costs
/// nothing beyond this call: the caller drops `t`.
pub fn accept<T: Transport>(
    t: T,
    head: [u8; HANDSHAKE_HEADER],
    sec: &ServerSecurity,
    cancel: &AtomicBool,
) -> Result<PendingClient<T>, SecureError> {
    accept_by(t, head, sec, Instant::now() + sec.timeout, cancel)
}

/// [`accept`] with the verdict due at `deadline` (a server counts it from
/// the moment it accepted the connection: reading `head` took part of it).
pub fn accept_by<T: Transport>(
    mut t: T,
    head: [u8; HANDSHAKE_HEADER],
    sec: &ServerSecurity,
    deadline: Instant,
    cancel: &AtomicBool,
) -> Result<PendingClient<T>, SecureError> {
    let deadline = Deadline::at(deadline, sec.timeout, Some(cancel));
    let h = MessageHeader::parse(&head).map_err(|e| refuse_handshake(&mut t, e))?;
    let mut hs1 = head.to_vec();
    hs1.resize(HANDSHAKE_HEADER + h.len, 0);
    deadline.read_exact(&mut t, &mut hs1[HANDSHAKE_HEADER..], "HS1")?;
    let (hs, _proposal, hs2) = ServerHandshake::accept(sec.identity.private_bytes(), sec.psk.as_ref(), &hs1)
        .map_err(|e| refuse_handshake(&mut t, e))?;
    write(&mut t, &hs2, "HS2")?;
    let hs3 = read_message(&mut t, &deadline, "HS3").map_err(|e| match e {
        SecureError::Handshake(h) => refuse_handshake(&mut t, h),
        other => other,
    })?;
    let est = hs.finish(&hs3).map_err(|e| refuse_handshake(&mut t, e))?;
    t.set_read_timeout(None).map_err(|source| SecureError::Io {
        during: "HS3",
        source,
    })?;
    let mut st = SecureTransport::new(t, est);
    st.record_timeout = sec.record_timeout;
    Ok(PendingClient {
        st,
        deadline: deadline.at,
    })
}

/// What a client whose handshake failed at Noise (a wrong pre-shared key,
/// a tampered message) is told: nothing about which step failed.
const HANDSHAKE_REFUSAL: &str = "not authorized";

/// Answers a handshake the server cannot finish with a plain ERROR `AUTH`
/// frame (no keys exist to seal a verdict with; docs/wire.md §11.3), best
/// effort, and returns the error. A proposal or pattern the server does
/// not take is named; a Noise failure gets the generic refusal.
fn refuse_handshake<T: Transport + ?Sized>(t: &mut T, e: HandshakeError) -> SecureError {
    let told = match &e {
        HandshakeError::Noise(_) => HANDSHAKE_REFUSAL.to_string(),
        other => format!("handshake refused: {other}"),
    };
    let mut body = Vec::with_capacity(told.len() + 8);
    ErrorFrame {
        code: ErrorCode::Auth as u16,
        message: &told,
    }
    .emit(&mut body);
    let mut frame = Vec::with_capacity(FRAME_HEADER + body.len());
    pfs_wire::put_frame(&mut frame, FrameType::Error, 0, &body);
    // A small frame into an empty send buffer: it does not block.
    let _ = t.write_all(&frame);
    let _ = t.shutdown_write();
    e.into()
}

/// Whether the first bytes of a connection open a handshake.
pub fn is_handshake(head: &[u8]) -> bool {
    head.starts_with(&HANDSHAKE_MAGIC)
}

/// A transport whose bytes travel in sealed records (docs/wire.md §11.4).
#[derive(Debug)]
pub struct SecureTransport<T> {
    inner: T,
    sealer: Sealer,
    opener: Opener,
    info: SessionInfo,
    /// The record being sealed and written.
    out: Vec<u8>,
    /// Raw bytes from the peer; `raw` are not yet opened, `plain` are
    /// opened and not yet returned.
    inbuf: Vec<u8>,
    raw: Range<usize>,
    plain: Range<usize>,
    /// The peer sent its close record.
    peer_closed: bool,
    /// We sent ours.
    closed: bool,
    /// A record failed: the stream is dead.
    broken: Option<RecordError>,
    /// Waiting for the rest of a record.
    record_timeout: Duration,
    /// How long reads have waited for the rest of the record at
    /// `raw.start` since its first byte arrived; `None` while no record is
    /// partly here. Time this side spends elsewhere (a receiver hashing a
    /// frame) is not the peer's and does not count.
    record_waited: Option<Duration>,
    /// The read timeout the caller set, and the one the inner transport
    /// has (shorter while a record's deadline is nearer).
    read_timeout: Option<Duration>,
    inner_read_timeout: Option<Duration>,
    /// The write timeout the caller set: each write of records ends by
    /// then, whatever the peer's reads allow.
    write_timeout: Option<Duration>,
    /// Empty DATA records opened in a row.
    empty_run: u32,
}

impl<T: Transport> SecureTransport<T> {
    /// Wraps `inner` once the handshake is over; its datagrams, if it has
    /// any, are tagged from now on (`docs/wire.md` §14.7).
    fn new(mut inner: T, est: Established) -> Self {
        inner.protect_datagrams(&est.datagram_keys);
        Self {
            inner,
            info: SessionInfo {
                peer: est.peer,
                cipher: est.proposal.cipher,
                proposal: est.proposal,
                handshake_hash: est.handshake_hash,
            },
            sealer: est.sealer,
            opener: est.opener,
            out: Vec::new(),
            // Small until a large record arrives: a session that only
            // exchanges control frames (and every handshake) stays cheap.
            inbuf: vec![0u8; 64 << 10],
            raw: 0..0,
            plain: 0..0,
            peer_closed: false,
            closed: false,
            broken: None,
            record_timeout: DEFAULT_RECORD_TIMEOUT,
            record_waited: None,
            read_timeout: None,
            inner_read_timeout: None,
            write_timeout: None,
            empty_run: 0,
        }
    }
}

impl<T> SecureTransport<T> {
    /// How long a record may take from its first byte to its last
    /// (default [`DEFAULT_RECORD_TIMEOUT`]); past it the session fails
    /// with [`RecordError::Late`].
    pub fn set_record_timeout(&mut self, timeout: Duration) {
        self.record_timeout = timeout;
    }

    /// Bytes already read from the inner transport, to be opened first.
    fn preload(&mut self, bytes: &[u8]) {
        self.inbuf[..bytes.len()].copy_from_slice(bytes);
        self.raw = 0..bytes.len();
        self.record_waited = Some(Duration::ZERO);
    }

    /// The session's parameters and the peer's key.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// Key rotations so far (sent, received).
    pub fn rotations(&self) -> (u64, u64) {
        (self.sealer.rotations(), self.opener.rotations())
    }

    /// The transport underneath.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The transport underneath, mutably: bytes written to it bypass the
    /// records (and will fail to open at the peer).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

fn invalid(e: RecordError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<T: Transport> SecureTransport<T> {
    /// Seals `plain` (at most one record's worth) and writes the record.
    /// Seals up to [`WRITE_BATCH`] records' worth of `bufs` (a CLOSE record
    /// alone) and writes them with one call; returns the plaintext bytes taken.
    fn send_record(&mut self, kind: RecordKind, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.out.clear();
        let mut taken = 0;
        let mut slices = bufs.iter().map(|b| &b[..]).filter(|b| !b.is_empty());
        let mut pending: &[u8] = slices.next().unwrap_or(&[]);
        for _ in 0..WRITE_BATCH {
            let start = self.out.len();
            self.out.resize(start + RECORD_HEADER, 0);
            let mut in_record = 0;
            while in_record < MAX_RECORD_PLAINTEXT && !pending.is_empty() {
                let n = pending.len().min(MAX_RECORD_PLAINTEXT - in_record);
                self.out.extend_from_slice(&pending[..n]);
                pending = &pending[n..];
                in_record += n;
                if pending.is_empty() {
                    pending = slices.next().unwrap_or(&[]);
                }
            }
            self.sealer
                .seal_from(kind, &mut self.out, start)
                .map_err(invalid)?;
            taken += in_record;
            if pending.is_empty() || kind == RecordKind::Close {
                break;
            }
        }
        let deadline = self.write_timeout.map(|t| Instant::now() + t);
        if let Err(e) = write_all_by(&mut self.inner, &self.out, deadline) {
            // Part of a record may be out: nothing sent after it could open.
            self.closed = true;
            return Err(e);
        }
        Ok(taken)
    }

    /// Ends the stream if the record partly here is past its deadline.
    fn check_record_deadline(&mut self) -> io::Result<()> {
        if let Some(waited) = self.record_waited {
            if waited >= self.record_timeout {
                let e = RecordError::Late(self.record_timeout);
                self.broken = Some(e.clone());
                return Err(invalid(e));
            }
        }
        Ok(())
    }

    /// Before a waiting read: the inner transport wakes by the deadline of
    /// the record partly here, or the caller's timeout if that is sooner.
    /// Changed only when it moves by more than [`TIMEOUT_SLACK`]: not one
    /// system call per read.
    fn arm_read_timeout(&mut self) -> io::Result<()> {
        let record_left = self.record_waited.map(|w| self.record_timeout.saturating_sub(w));
        let want = match (self.read_timeout, record_left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|w| w.max(Duration::from_millis(1)));
        let stale = match (want, self.inner_read_timeout) {
            (Some(w), Some(set)) => w + TIMEOUT_SLACK < set || w > set + TIMEOUT_SLACK,
            (w, set) => w != set,
        };
        if stale {
            self.inner.set_read_timeout(want)?;
            self.inner_read_timeout = want;
        }
        Ok(())
    }

    /// Plaintext from the records that have arrived: opens a record once it
    /// is whole. `wait`: read the inner transport until one is; otherwise
    /// take only what it already has (`Ok(None)`: no whole record yet).
    fn read_records(&mut self, buf: &mut [u8], wait: bool) -> io::Result<Option<usize>> {
        loop {
            if !self.plain.is_empty() {
                let n = buf.len().min(self.plain.len());
                buf[..n].copy_from_slice(&self.inbuf[self.plain.start..self.plain.start + n]);
                self.plain.start += n;
                return Ok(Some(n));
            }
            if self.peer_closed {
                return Ok(Some(0));
            }
            if let Some(e) = &self.broken {
                return Err(invalid(e.clone()));
            }
            if self.raw.len() >= RECORD_HEADER {
                let head: [u8; RECORD_HEADER] = self.inbuf[self.raw.start..self.raw.start + RECORD_HEADER]
                    .try_into()
                    .expect("four bytes");
                let len = match RecordHeader::parse(head) {
                    Ok(h) => h.record_len(),
                    Err(e) => {
                        self.broken = Some(e);
                        continue;
                    }
                };
                if self.raw.len() >= len {
                    let start = self.raw.start;
                    let record = &mut self.inbuf[start..start + len];
                    match self.opener.open(record) {
                        Ok((kind, plain)) => {
                            let n = plain.len();
                            self.plain = start + RECORD_HEADER..start + RECORD_HEADER + n;
                            self.raw.start += len;
                            self.peer_closed = kind == RecordKind::Close;
                            // The next record's bytes, if any, came with
                            // the last read: its clock starts now.
                            self.record_waited = (!self.raw.is_empty()).then_some(Duration::ZERO);
                            self.empty_run = if n == 0 && kind == RecordKind::Data {
                                self.empty_run + 1
                            } else {
                                0
                            };
                            if self.empty_run > MAX_EMPTY_RECORDS {
                                self.broken = Some(RecordError::EmptyRun(self.empty_run));
                            }
                        }
                        Err(e) => self.broken = Some(e),
                    }
                    continue;
                }
                // Room for the whole record after what is already here.
                if self.raw.start + len > self.inbuf.len() {
                    self.compact();
                }
                if len > self.inbuf.len() {
                    // Two records' room: one arriving while one is read.
                    self.inbuf.resize(2 * MAX_RECORD, 0);
                }
            } else if self.raw.start + RECORD_HEADER > self.inbuf.len() {
                self.compact();
            }
            self.check_record_deadline()?;
            let end = self.raw.end;
            let n = if wait {
                self.arm_read_timeout()?;
                let t0 = self.record_waited.map(|_| Instant::now());
                let read = self.inner.read(&mut self.inbuf[end..]);
                if let (Some(t0), Some(w)) = (t0, self.record_waited.as_mut()) {
                    *w += t0.elapsed();
                }
                match read {
                    Ok(n) => n,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        // The record's deadline, if that is what woke us.
                        self.check_record_deadline()?;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            } else {
                match self.inner.read_ready(&mut self.inbuf[end..])? {
                    Some(n) => n,
                    None => return Ok(None),
                }
            };
            if n == 0 {
                let what = if self.raw.is_empty() {
                    "the connection ended without the peer's close record: the stream was cut short"
                } else {
                    "the connection ended inside a record: the stream was cut short"
                };
                // Not `UnexpectedEof`: callers take that for a peer that
                // closed; this is a stream someone cut, and must say so.
                return Err(io::Error::new(io::ErrorKind::ConnectionAborted, what));
            }
            if self.raw.is_empty() {
                self.record_waited = Some(Duration::ZERO);
            }
            self.raw.end += n;
        }
    }
}

/// How far a read timeout may drift from the wanted one before it is set
/// again.
const TIMEOUT_SLACK: Duration = Duration::from_millis(250);

/// Writes all of `bytes` by `deadline` (`None`: no deadline): each write
/// call may block only until then, so a peer reading a little now and
/// then cannot stretch it.
fn write_all_by<T: Transport + ?Sized>(
    t: &mut T,
    mut bytes: &[u8],
    deadline: Option<Instant>,
) -> io::Result<()> {
    let late = || io::Error::new(io::ErrorKind::TimedOut, "write deadline passed");
    while !bytes.is_empty() {
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            t.set_write_timeout(Some(left))?;
        }
        match t.write_vectored(&[IoSlice::new(bytes)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if deadline.is_some()
                    && matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
            {
                return Err(late())
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl<T: Transport> Transport for SecureTransport<T> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn helper_usage(&self) -> pfs_transport::Usage {
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
        if self.closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "write after close"));
        }
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        self.send_record(RecordKind::Data, bufs)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Waiting, the inner transport always answers with a count.
        self.read_records(buf, true).map(|n| n.unwrap_or(0))
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.read_records(buf, false)
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(timeout)?;
        self.read_timeout = timeout;
        self.inner_read_timeout = timeout;
        Ok(())
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)?;
        self.write_timeout = timeout;
        Ok(())
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        if !self.closed {
            self.send_record(RecordKind::Close, &[])?;
            self.closed = true;
        }
        self.inner.shutdown_write()
    }
}

impl<T> SecureTransport<T> {
    /// Moves the unopened bytes to the front of the buffer.
    fn compact(&mut self) {
        let n = self.raw.len();
        self.inbuf.copy_within(self.raw.clone(), 0);
        self.raw = 0..n;
    }
}

/// A transport with some bytes already read from it (to tell a plain
/// connection from a protected one) put back in front.
#[derive(Debug)]
pub struct Prefixed<T> {
    inner: T,
    head: Vec<u8>,
    at: usize,
}

impl<T> Prefixed<T> {
    /// `head` is returned by `read` before anything from `inner`.
    pub fn new(inner: T, head: &[u8]) -> Self {
        Self {
            inner,
            head: head.to_vec(),
            at: 0,
        }
    }
}

impl<T: Transport> Transport for Prefixed<T> {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn helper_usage(&self) -> pfs_transport::Usage {
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
        self.inner.write_vectored(bufs)
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.head.len() {
            let n = buf.len().min(self.head.len() - self.at);
            buf[..n].copy_from_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        if self.at < self.head.len() {
            return self.read(buf).map(Some);
        }
        self.inner.read_ready(buf)
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
}

/// Reads the first [`HANDSHAKE_HEADER`] bytes of a new connection within
/// `timeout`, unless `cancel` is set first (a plain frame header is longer,
/// so both kinds of connection have them).
pub fn read_head<T: Transport + ?Sized>(
    t: &mut T,
    timeout: Duration,
    cancel: &AtomicBool,
) -> Result<[u8; HANDSHAKE_HEADER], SecureError> {
    read_head_by(t, Instant::now() + timeout, timeout, cancel).map(|(head, _)| head)
}

/// Reads the first [`HANDSHAKE_HEADER`] bytes of a new connection: the
/// first byte by `first_by`, the rest within `rest` of the first, unless
/// `cancel` is set first. Returns them and when the first arrived.
pub fn read_head_by<T: Transport + ?Sized>(
    t: &mut T,
    first_by: Instant,
    rest: Duration,
    cancel: &AtomicBool,
) -> Result<([u8; HANDSHAKE_HEADER], Instant), SecureError> {
    let during = "first bytes";
    let mut head = [0u8; HANDSHAKE_HEADER];
    let total = first_by.saturating_duration_since(Instant::now());
    Deadline::at(first_by, total, Some(cancel)).read_exact(t, &mut head[..1], during)?;
    let first = Instant::now();
    Deadline::at(first + rest, rest, Some(cancel)).read_exact(t, &mut head[1..], during)?;
    t.set_read_timeout(None)
        .map_err(|source| SecureError::Io { during, source })?;
    Ok((head, first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_transport::UnixTransport;

    /// A handshake over a socket pair: (client, server).
    fn pair() -> (SecureTransport<UnixTransport>, SecureTransport<UnixTransport>) {
        let (client_id, server_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (a, mut b) = UnixTransport::pair().unwrap();
        let ssec = ServerSecurity {
            identity: server_id.clone(),
            psk: None,
            timeout: Duration::from_secs(10),
            record_timeout: DEFAULT_RECORD_TIMEOUT,
        };
        let csec = ClientSecurity {
            identity: client_id,
            pin: Pin::Key(server_id.public()),
            psk: None,
            cipher: Cipher::Aes256Gcm,
            rotate_log2: 20,
            timeout: Duration::from_secs(10),
        };
        std::thread::scope(|s| {
            let server = s.spawn(move || {
                let no = AtomicBool::new(false);
                let head = read_head(&mut b, Duration::from_secs(10), &no).unwrap();
                accept(b, head, &ssec, &no).unwrap().admit().unwrap()
            });
            let client = connect(a, "pair", crate::Service::Files, &csec).unwrap();
            (client, server.join().unwrap())
        })
    }

    /// Seals `n` empty DATA records and writes them raw.
    fn empty_records(c: &mut SecureTransport<UnixTransport>, n: u32) {
        let mut out = Vec::new();
        for _ in 0..n {
            let start = out.len();
            out.resize(start + RECORD_HEADER, 0);
            c.sealer.seal_from(RecordKind::Data, &mut out, start).unwrap();
        }
        c.inner.write_all(&out).unwrap();
    }

    #[test]
    fn a_few_empty_records_pass_a_run_of_them_ends_the_session() {
        let (mut c, mut s) = pair();
        empty_records(&mut c, MAX_EMPTY_RECORDS);
        c.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        s.read_exact(&mut one).unwrap();
        assert_eq!(&one, b"x");
        empty_records(&mut c, MAX_EMPTY_RECORDS + 1);
        c.write_all(b"y").unwrap();
        let e = s.read_exact(&mut one).unwrap_err();
        let run = e.get_ref().and_then(|e| e.downcast_ref::<RecordError>());
        assert_eq!(run, Some(&RecordError::EmptyRun(MAX_EMPTY_RECORDS + 1)), "{e}");
    }
}
