//! Rendezvous: a server listens on a Unix socket path (mode 0600); a client
//! connects and says which wait strategy it uses; the server checks the
//! client's credentials (`SO_PEERCRED`) against its [`Allow`] rule, creates
//! the rings in a sealed memfd and passes it — plus the server's blob memfd
//! — with `SCM_RIGHTS`. The client checks the server's credentials, the
//! sizes (against `fstat`, not against anything in shared memory) and the
//! seals (a peer cannot shrink the file under our mapping and SIGBUS us).
//!
//! Messages on the socket (little-endian):
//!
//! ```text
//! request (32 B): magic "PFS-IPC1" | version u16 | wait u8 | 21 zero bytes
//! answer (128 B): magic | version u16 | status u8 (0 ok, 1 refused) | wait u8 | 4 zero |
//!                 ring_bytes u64 | blob_bytes u64 | key_c2s u64 | key_s2c u64 |
//!                 reason_len u32 | 4 zero | reason (up to 64 bytes of UTF-8)
//! ```
//! After the answer nothing more is sent; the socket stays open so each
//! side sees the other close it (liveness).

use std::fs;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{fcntl_add_seals, fcntl_get_seals, fstat, ftruncate, memfd_create, MemfdFlags, SealFlags};
use rustix::net::{
    recvmsg, sendmsg, sockopt, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::endpoint::{Endpoint, Link, Receiver, Sender};
use crate::error::{HandshakeError, IpcError, Refusal};
use crate::layout;
use crate::mem::Mapping;
use crate::wait::{PeerWatch, WaitConfig, WaitStrategy};

const MAGIC: [u8; 8] = *b"PFS-IPC1";
const VERSION: u16 = 1;
const REQUEST_LEN: usize = 32;
const ANSWER_LEN: usize = 128;
const REASON_MAX: usize = 64;

/// Which client users a server accepts (checked with `SO_PEERCRED`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Allow {
    /// Clients running as the server's own user.
    #[default]
    SameUser,
    /// Clients running as one of these uids.
    Uids(Vec<u32>),
    /// Any local user that can open the socket path (its mode still applies).
    Any,
}

impl Allow {
    fn permits(&self, uid: u32, own: u32) -> bool {
        match self {
            Self::SameUser => uid == own,
            Self::Uids(list) => list.contains(&uid),
            Self::Any => true,
        }
    }
}

/// Server-side settings.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    /// Bytes of each ring's data area (power of two, 4 KiB … 1 GiB).
    pub ring_bytes: usize,
    /// Bytes of the shared blob (0: none). One blob per server, shared by
    /// every client.
    pub blob_bytes: usize,
    /// Back the blob with hugetlbfs pages (`MFD_HUGETLB`; needs reserved
    /// huge pages); otherwise 4 KiB shmem with a transparent-huge-page hint.
    pub huge_blob: bool,
    /// Who may connect.
    pub allow: Allow,
    /// Mode of the socket path.
    pub socket_mode: u32,
    /// How long a connecting client may take to send its request.
    pub handshake_timeout: Duration,
    /// The server's wait strategy and timings.
    pub wait: WaitConfig,
}

impl Default for RendezvousConfig {
    fn default() -> Self {
        Self {
            ring_bytes: 1 << 20,
            blob_bytes: 0,
            huge_blob: false,
            allow: Allow::SameUser,
            socket_mode: 0o600,
            handshake_timeout: Duration::from_secs(5),
            wait: WaitConfig::default(),
        }
    }
}

fn sealed_memfd(name: &'static str, len: usize, huge: bool) -> Result<OwnedFd, IpcError> {
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    if huge {
        flags |= MemfdFlags::HUGETLB;
    }
    let fd = memfd_create(name, flags).map_err(|e| IpcError::memfd("memfd_create", name, len as u64, e))?;
    ftruncate(&fd, len as u64).map_err(|e| IpcError::memfd("size", name, len as u64, e))?;
    fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .map_err(|e| IpcError::memfd("seal", name, len as u64, e))?;
    Ok(fd)
}

fn map_fd(fd: &OwnedFd, len: usize, what: &'static str) -> Result<Mapping, IpcError> {
    Mapping::map(fd, len).map_err(|e| IpcError::memfd("map", what, len as u64, e))
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // getrandom without flags blocks only before the pool is initialised
    // at boot; a failure leaves zeros (keys then only guard against stale
    // data, which the zero key still does modulo positions).
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    u64::from_le_bytes(b)
}

/// Listens for IPC clients on a Unix socket path.
#[derive(Debug)]
pub struct IpcListener {
    sock: UnixListener,
    path: PathBuf,
    opts: RendezvousConfig,
    blob: Option<(OwnedFd, Arc<Mapping>)>,
    own_uid: u32,
}

impl IpcListener {
    /// Binds `path` (replacing a stale socket nobody listens on; refusing
    /// if a server answers there or the path is not a socket) and creates
    /// the shared blob.
    pub fn bind(path: &Path, opts: RendezvousConfig) -> Result<Self, IpcError> {
        if !opts.ring_bytes.is_power_of_two()
            || !(layout::MIN_RING..=layout::MAX_RING).contains(&opts.ring_bytes)
        {
            return Err(IpcError::BadRingSize {
                bytes: opts.ring_bytes,
                min: layout::MIN_RING,
                max: layout::MAX_RING,
            });
        }
        if let Ok(meta) = fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(IpcError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            if UnixStream::connect(path).is_ok() {
                return Err(IpcError::AddrInUse {
                    path: path.to_path_buf(),
                });
            }
            fs::remove_file(path).map_err(|e| IpcError::path_io("remove stale", path, e))?;
        }
        let sock = UnixListener::bind(path).map_err(|e| IpcError::path_io("bind", path, e))?;
        fs::set_permissions(path, fs::Permissions::from_mode(opts.socket_mode))
            .map_err(|e| IpcError::path_io("chmod", path, e))?;
        let blob = if opts.blob_bytes > 0 {
            let len = if opts.huge_blob {
                opts.blob_bytes.next_multiple_of(2 << 20)
            } else {
                opts.blob_bytes
            };
            let fd = sealed_memfd("pfs-ipc-blob", len, opts.huge_blob)?;
            let map = map_fd(&fd, len, "blob")?;
            if !opts.huge_blob {
                // Best effort: shmem THP depends on shmem_enabled.
                let _ = map.advise_huge();
            }
            Some((fd, Arc::new(map)))
        } else {
            None
        };
        Ok(Self {
            sock,
            path: path.to_path_buf(),
            opts,
            blob,
            own_uid: rustix::process::geteuid().as_raw(),
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The server's view of the shared blob (empty if none).
    pub fn blob(&self) -> &[u8] {
        match &self.blob {
            Some((_, m)) => m.bytes(0, m.len()),
            None => &[],
        }
    }

    /// Copies `data` into the shared blob at `offset` (e.g. to fill it
    /// before clients connect).
    pub fn write_blob(&self, offset: u64, data: &[u8]) -> Result<(), IpcError> {
        let blob_len = self.blob.as_ref().map_or(0, |(_, m)| m.len() as u64);
        let len = data.len() as u64;
        match &self.blob {
            Some((_, m)) if offset.checked_add(len).is_some_and(|e| e <= blob_len) => {
                m.write(offset as usize, data);
                Ok(())
            }
            _ => Err(IpcError::OutOfBlob {
                offset,
                len,
                blob_len,
            }),
        }
    }

    /// Waits for the next client and completes its rendezvous. A refused
    /// or broken client is an `Err`; the listener stays usable, so a
    /// server loops on `accept` and logs errors.
    pub fn accept(&self) -> Result<Endpoint, IpcError> {
        let (stream, _) = self.sock.accept().map_err(|e| IpcError::io("accept", e))?;
        self.handshake(stream)
    }

    fn handshake(&self, mut stream: UnixStream) -> Result<Endpoint, IpcError> {
        stream
            .set_read_timeout(Some(self.opts.handshake_timeout))
            .map_err(|e| IpcError::io("socket timeout", e))?;
        let cred = sockopt::socket_peercred(&stream).map_err(|e| IpcError::io("SO_PEERCRED", e))?;
        let uid = cred.uid.as_raw();
        let pid = cred.pid.as_raw_nonzero().get();
        let mut req = [0u8; REQUEST_LEN];
        stream
            .read_exact(&mut req)
            .map_err(|source| HandshakeError::IncompleteRequest { pid, source })?;
        // The client gets the reason as text in the answer.
        let refuse = |stream: &mut UnixStream, reason: Refusal| -> IpcError {
            let text = reason.to_string();
            let _ = stream.write_all(&answer(1, WaitStrategy::Spin, 0, 0, 0, 0, &text));
            IpcError::Refused(reason)
        };
        if req[..8] != MAGIC {
            return Err(refuse(&mut stream, Refusal::NotPfsClient));
        }
        let version = u16::from_le_bytes([req[8], req[9]]);
        if version != VERSION {
            return Err(refuse(
                &mut stream,
                Refusal::Version {
                    got: version,
                    speaks: VERSION,
                },
            ));
        }
        let Some(client_wait) = WaitStrategy::from_code(req[10]) else {
            return Err(refuse(&mut stream, Refusal::UnknownWait { code: req[10] }));
        };
        if !self.opts.allow.permits(uid, self.own_uid) {
            return Err(refuse(&mut stream, Refusal::UidNotAllowed { uid, pid }));
        }
        let cap = self.opts.ring_bytes;
        let region_len = layout::region_len(cap);
        let region_fd = sealed_memfd("pfs-ipc-rings", region_len, false)?;
        let region = map_fd(&region_fd, region_len, "rings")?;
        let (key_c2s, key_s2c) = (random_u64(), random_u64());
        let blob_len = self.blob.as_ref().map_or(0, |(_, m)| m.len() as u64);
        let msg = answer(
            0,
            self.opts.wait.strategy,
            cap as u64,
            blob_len,
            key_c2s,
            key_s2c,
            "",
        );
        let mut fds = vec![region_fd.as_fd()];
        if let Some((fd, _)) = &self.blob {
            fds.push(fd.as_fd());
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        cmsg.push(SendAncillaryMessage::ScmRights(&fds));
        let sent = sendmsg(&stream, &[IoSlice::new(&msg)], &mut cmsg, SendFlags::NOSIGNAL)
            .map_err(|e| IpcError::io("send rendezvous answer", e))?;
        if sent != msg.len() {
            stream
                .write_all(&msg[sent..])
                .map_err(|e| IpcError::io("send rendezvous answer", e))?;
        }
        let link = Arc::new(Link {
            region,
            cap,
            blob: self.blob.as_ref().map(|(_, m)| Arc::clone(m)),
            peer: PeerWatch::new(pid, stream),
        });
        let wait = self.opts.wait;
        Ok(Endpoint::from_parts(
            Sender::new(
                Arc::clone(&link),
                layout::SERVER_TO_CLIENT,
                key_s2c,
                wait,
                client_wait,
            ),
            Receiver::new(link, layout::CLIENT_TO_SERVER, key_c2s, wait, client_wait),
        ))
    }
}

impl Drop for IpcListener {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn answer(
    status: u8,
    wait: WaitStrategy,
    ring: u64,
    blob: u64,
    k1: u64,
    k2: u64,
    reason: &str,
) -> [u8; ANSWER_LEN] {
    let mut m = [0u8; ANSWER_LEN];
    m[..8].copy_from_slice(&MAGIC);
    m[8..10].copy_from_slice(&VERSION.to_le_bytes());
    m[10] = status;
    m[11] = wait.code();
    m[16..24].copy_from_slice(&ring.to_le_bytes());
    m[24..32].copy_from_slice(&blob.to_le_bytes());
    m[32..40].copy_from_slice(&k1.to_le_bytes());
    m[40..48].copy_from_slice(&k2.to_le_bytes());
    let mut end = reason.len().min(REASON_MAX);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    m[48..52].copy_from_slice(&(end as u32).to_le_bytes());
    m[56..56 + end].copy_from_slice(&reason.as_bytes()[..end]);
    m
}

fn u64_at(m: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&m[at..at + 8]);
    u64::from_le_bytes(b)
}

fn check_fd(fd: &OwnedFd, want: u64, what: &'static str) -> Result<(), IpcError> {
    let st = fstat(fd).map_err(|e| IpcError::memfd("fstat", what, want, e))?;
    if st.st_size as u64 != want {
        return Err(HandshakeError::FdSize {
            what,
            size: st.st_size as u64,
            announced: want,
        }
        .into());
    }
    let seals = fcntl_get_seals(fd).map_err(|e| IpcError::memfd("read seals of", what, want, e))?;
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(HandshakeError::NotSealed { what }.into());
    }
    Ok(())
}

impl Endpoint {
    /// Connects to the IPC server at `path`.
    pub fn connect(path: &Path, wait: WaitConfig) -> Result<Self, IpcError> {
        Self::connect_timeout(path, wait, Duration::from_secs(5))
    }

    /// [`Endpoint::connect`] waiting at most `timeout` for the server's answer.
    pub fn connect_timeout(path: &Path, wait: WaitConfig, timeout: Duration) -> Result<Self, IpcError> {
        let mut stream = UnixStream::connect(path).map_err(|e| IpcError::path_io("connect", path, e))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| IpcError::io("socket timeout", e))?;
        let cred = sockopt::socket_peercred(&stream).map_err(|e| IpcError::io("SO_PEERCRED", e))?;
        let own = rustix::process::geteuid().as_raw();
        let server_uid = cred.uid.as_raw();
        if server_uid != own && server_uid != 0 {
            return Err(IpcError::Refused(Refusal::ServerUid {
                path: path.to_path_buf(),
                uid: server_uid,
                own,
            }));
        }
        let pid = cred.pid.as_raw_nonzero().get();
        let mut req = [0u8; REQUEST_LEN];
        req[..8].copy_from_slice(&MAGIC);
        req[8..10].copy_from_slice(&VERSION.to_le_bytes());
        req[10] = wait.strategy.code();
        stream
            .write_all(&req)
            .map_err(|e| IpcError::io("send rendezvous request", e))?;

        let mut msg = [0u8; ANSWER_LEN];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let got = recvmsg(
            &stream,
            &mut [IoSliceMut::new(&mut msg)],
            &mut cmsg,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| IpcError::io("receive rendezvous answer", e))?
        .bytes;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        if got == 0 {
            return Err(HandshakeError::ServerClosed.into());
        }
        if got < ANSWER_LEN {
            stream
                .read_exact(&mut msg[got..])
                .map_err(|source| HandshakeError::ShortAnswer { source })?;
        }
        if msg[..8] != MAGIC {
            return Err(HandshakeError::NotPfsServer.into());
        }
        if msg[10] != 0 {
            let len = (u32::from_le_bytes([msg[48], msg[49], msg[50], msg[51]]) as usize).min(REASON_MAX);
            return Err(IpcError::RefusedByServer {
                reason: String::from_utf8_lossy(&msg[56..56 + len]).into_owned(),
            });
        }
        let server_wait =
            WaitStrategy::from_code(msg[11]).ok_or(HandshakeError::UnknownWait { code: msg[11] })?;
        let cap = u64_at(&msg, 16);
        let blob_len = u64_at(&msg, 24);
        let (key_c2s, key_s2c) = (u64_at(&msg, 32), u64_at(&msg, 40));
        if !cap.is_power_of_two() || !(layout::MIN_RING as u64..=layout::MAX_RING as u64).contains(&cap) {
            return Err(HandshakeError::RingSize { bytes: cap }.into());
        }
        let cap = cap as usize;
        let want_fds = if blob_len > 0 { 2 } else { 1 };
        if fds.len() != want_fds {
            return Err(HandshakeError::FdCount {
                expected: want_fds,
                got: fds.len(),
            }
            .into());
        }
        let region_len = layout::region_len(cap);
        check_fd(&fds[0], region_len as u64, "ring region")?;
        let region = map_fd(&fds[0], region_len, "rings")?;
        let blob = if blob_len > 0 {
            check_fd(&fds[1], blob_len, "blob")?;
            let len =
                usize::try_from(blob_len).map_err(|_| HandshakeError::BlobTooLarge { bytes: blob_len })?;
            Some(Arc::new(map_fd(&fds[1], len, "blob")?))
        } else {
            None
        };
        stream
            .set_read_timeout(None)
            .map_err(|e| IpcError::io("socket timeout", e))?;
        let link = Arc::new(Link {
            region,
            cap,
            blob,
            peer: PeerWatch::new(pid, stream),
        });
        Ok(Endpoint::from_parts(
            Sender::new(
                Arc::clone(&link),
                layout::CLIENT_TO_SERVER,
                key_c2s,
                wait,
                server_wait,
            ),
            Receiver::new(link, layout::SERVER_TO_CLIENT, key_s2c, wait, server_wait),
        ))
    }
}
