//! Protected sessions over any [`Transport`]: the blocking handshake
//! drivers ([`connect`], [`accept`]) and [`SecureTransport`], a transport
//! whose bytes travel in sealed records. The session protocols run over it
//! unchanged: they see a byte stream.
//!
//! Every handshake wait has one absolute deadline, so a peer trickling
//! bytes cannot hold a handshake longer than it.

use std::io::{self, IoSlice};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pfs_transport::Transport;
use pfs_wire::{ErrorFrame, FrameHeader, FrameType, FRAME_HEADER_LEN as FRAME_HEADER};

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
    /// Start to verdict.
    pub timeout: Duration,
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
        Self {
            at: Instant::now() + total,
            total,
            cancel,
        }
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
    let mut st = SecureTransport::new(t, est);
    // The verdict: status, u16 length, reason.
    let mut head = [0u8; 3];
    read_secure(&mut st, &deadline, &mut head)?;
    let len = u16::from_be_bytes([head[1], head[2]]) as usize;
    let mut reason = vec![0u8; len];
    read_secure(&mut st, &deadline, &mut reason)?;
    match head[0] {
        ACCEPTED => {
            st.inner
                .set_read_timeout(None)
                .map_err(|source| SecureError::Io {
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
        if Instant::now() >= self.deadline {
            return Err(SecureError::TimedOut(Duration::ZERO, "verdict"));
        }
        self.st.write_all(&v).map(drop).map_err(|source| SecureError::Io {
            during: "verdict",
            source,
        })
    }
}

/// Runs the server's side of a handshake whose first [`HANDSHAKE_HEADER`]
/// bytes (`head`, already read to tell a protected connection from a plain
/// one) start with `PFSN`. Returns the client, proven but not yet admitted.
/// A failure costs nothing beyond this call: the caller drops `t`.
pub fn accept<T: Transport>(
    mut t: T,
    head: [u8; HANDSHAKE_HEADER],
    sec: &ServerSecurity,
    cancel: &AtomicBool,
) -> Result<PendingClient<T>, SecureError> {
    let deadline = Deadline::new(sec.timeout, Some(cancel));
    let h = MessageHeader::parse(&head)?;
    let mut hs1 = head.to_vec();
    hs1.resize(HANDSHAKE_HEADER + h.len, 0);
    deadline.read_exact(&mut t, &mut hs1[HANDSHAKE_HEADER..], "HS1")?;
    let (hs, _proposal, hs2) = ServerHandshake::accept(sec.identity.private_bytes(), sec.psk.as_ref(), &hs1)?;
    write(&mut t, &hs2, "HS2")?;
    let hs3 = read_message(&mut t, &deadline, "HS3")?;
    let est = hs.finish(&hs3)?;
    t.set_read_timeout(None).map_err(|source| SecureError::Io {
        during: "HS3",
        source,
    })?;
    Ok(PendingClient {
        st: SecureTransport::new(t, est),
        deadline: deadline.at,
    })
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
        }
    }
}

impl<T> SecureTransport<T> {
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
        if let Err(e) = self.inner.write_all(&self.out) {
            // Part of a record may be out: nothing sent after it could open.
            self.closed = true;
            return Err(e);
        }
        Ok(taken)
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
            let end = self.raw.end;
            let n = if wait {
                self.inner.read(&mut self.inbuf[end..])?
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
            self.raw.end += n;
        }
    }
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
        self.inner.set_read_timeout(timeout)
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(timeout)
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
    let mut head = [0u8; HANDSHAKE_HEADER];
    Deadline::new(timeout, Some(cancel)).read_exact(t, &mut head, "first bytes")?;
    t.set_read_timeout(None).map_err(|source| SecureError::Io {
        during: "first bytes",
        source,
    })?;
    Ok(head)
}
