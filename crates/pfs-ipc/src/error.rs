//! Errors of the IPC layer.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ring::RingError;

/// What went wrong on an IPC endpoint or listener.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IpcError {
    /// A local system call on a socket failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done, e.g. "accept", "SO_PEERCRED", "poll peer".
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A system call on the socket path failed.
    #[error("{op} {path}: {source}")]
    PathIo {
        /// What was being done: "bind", "chmod", "remove stale", "connect".
        op: &'static str,
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Creating, sizing, sealing, mapping or checking a shared-memory file failed.
    #[error("{op} {what} ({len} bytes): {source}")]
    Memfd {
        /// What was being done: "memfd_create", "size", "seal", "map", "fstat", "read seals of".
        op: &'static str,
        /// Which file: "pfs-ipc-rings" / "rings", "pfs-ipc-blob" / "blob", "ring region".
        what: &'static str,
        /// Its length in bytes (as created or as announced).
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `bind` found something at the socket path that is not a socket; it
    /// was left untouched.
    #[error("bind {path}: path exists and is not a socket")]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// `bind` found a live server at the socket path.
    #[error("bind {path}: a server is already listening there")]
    AddrInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// The configured ring size is outside what the layout supports.
    #[error("ring size {bytes} is not a power of two between {min} and {max}")]
    BadRingSize {
        /// Configured bytes per ring.
        bytes: usize,
        /// Smallest ring.
        min: usize,
        /// Largest ring.
        max: usize,
    },
    /// This side refused the other (credentials, version, wait strategy).
    #[error("connection refused: {0}")]
    Refused(Refusal),
    /// The server refused this client and said why.
    #[error("connection refused: {reason}")]
    RefusedByServer {
        /// The server's reason, as it sent it (at most 64 bytes of text).
        reason: String,
    },
    /// The rendezvous exchange was malformed.
    #[error("bad rendezvous message: {0}")]
    Handshake(#[from] HandshakeError),
    /// The peer wrote something into shared memory no correct peer writes.
    /// The endpoint is unusable afterwards; this process is unaffected.
    #[error("protocol error: {0}")]
    Protocol(#[from] RingError),
    /// The peer put a blob reference record where a byte stream was being
    /// read. The endpoint is unusable afterwards.
    #[error("protocol error: blob reference record in a byte stream")]
    RefInByteStream,
    /// A blob reference from the peer points outside the blob; the record
    /// was skipped and the endpoint stays usable.
    #[error("peer sent a blob reference {offset}+{len} outside the {blob_len}-byte blob")]
    BadReference {
        /// Offset named.
        offset: u64,
        /// Length named.
        len: u64,
        /// Blob size.
        blob_len: u64,
    },
    /// The peer process exited (or was killed).
    #[error("peer process {pid} exited")]
    PeerDied {
        /// Its pid.
        pid: i32,
    },
    /// The peer closed the connection while we waited on it.
    #[error("peer closed the connection")]
    PeerClosed,
    /// The peer closed its sending ring and everything in it has been read.
    #[error("end of stream: the peer closed its side")]
    Closed,
    /// A bounded wait expired.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// A `try_*` call could not proceed without waiting.
    #[error("operation would block")]
    WouldBlock,
    /// A message larger than one record of the ring.
    #[error("message of {len} bytes exceeds this ring's limit of {max} bytes per message")]
    TooLarge {
        /// Requested.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// `send_ref` outside our own blob, or no blob on this connection.
    #[error("blob range {offset}+{len} is outside the {blob_len}-byte blob")]
    OutOfBlob {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Blob size.
        blob_len: u64,
    },
}

impl IpcError {
    pub(crate) fn io(op: &'static str, source: impl Into<io::Error>) -> Self {
        Self::Io {
            op,
            source: source.into(),
        }
    }

    pub(crate) fn path_io(op: &'static str, path: &Path, source: impl Into<io::Error>) -> Self {
        Self::PathIo {
            op,
            path: path.to_path_buf(),
            source: source.into(),
        }
    }

    pub(crate) fn memfd(
        op: &'static str,
        what: &'static str,
        len: u64,
        source: impl Into<io::Error>,
    ) -> Self {
        Self::Memfd {
            op,
            what,
            len,
            source: source.into(),
        }
    }

    /// True for errors after which the endpoint can still be used
    /// (would-block, timeout, a skipped bad reference).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::WouldBlock | Self::Timeout(_) | Self::BadReference { .. }
        )
    }
}

/// Why one side of a rendezvous refused the other.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// (Server) the client's request does not start with the IPC magic.
    #[error("not a PacketFS IPC client")]
    NotPfsClient,
    /// (Server) the client speaks another rendezvous version.
    #[error("version {got} unsupported (server speaks {speaks})")]
    Version {
        /// The client's version.
        got: u16,
        /// The server's version.
        speaks: u16,
    },
    /// (Server) the client named a wait strategy this build does not know.
    #[error("unknown wait strategy code {code}")]
    UnknownWait {
        /// The code sent.
        code: u8,
    },
    /// (Server) the client's uid is not permitted by the server's `Allow` rule.
    #[error("uid {uid} (pid {pid}) is not allowed by this server")]
    UidNotAllowed {
        /// The client's uid (`SO_PEERCRED`).
        uid: u32,
        /// The client's pid.
        pid: i32,
    },
    /// (Client) the server runs as another user, and not as root.
    #[error("server at {path} runs as uid {uid}, not as us ({own}) or root")]
    ServerUid {
        /// The socket path.
        path: PathBuf,
        /// The server's uid (`SO_PEERCRED`).
        uid: u32,
        /// Our effective uid.
        own: u32,
    },
}

/// How the peer broke the rendezvous exchange.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// (Server) the client closed or stalled before sending its whole request.
    #[error("client pid {pid} sent no complete request: {source}")]
    IncompleteRequest {
        /// The client's pid.
        pid: i32,
        /// What the read ended with (EOF or timeout).
        #[source]
        source: io::Error,
    },
    /// (Client) the server closed the socket without answering.
    #[error("server closed the connection")]
    ServerClosed,
    /// (Client) the server's answer ended early.
    #[error("short answer: {source}")]
    ShortAnswer {
        /// What the read ended with (EOF or timeout).
        #[source]
        source: io::Error,
    },
    /// (Client) the answer does not start with the IPC magic.
    #[error("not a PacketFS IPC server")]
    NotPfsServer,
    /// (Client) the server named a wait strategy this build does not know.
    #[error("unknown wait strategy code {code}")]
    UnknownWait {
        /// The code sent.
        code: u8,
    },
    /// (Client) the announced ring size is not a power of two in range.
    #[error("ring size {bytes} out of range")]
    RingSize {
        /// Announced bytes per ring.
        bytes: u64,
    },
    /// (Client) the answer carried the wrong number of file descriptors.
    #[error("expected {expected} file descriptors, got {got}")]
    FdCount {
        /// Descriptors the announced sizes call for.
        expected: usize,
        /// Descriptors received.
        got: usize,
    },
    /// (Client) a passed memfd's size differs from the announced size.
    #[error("{what} is {size} bytes, the server announced {announced}")]
    FdSize {
        /// "ring region" or "blob".
        what: &'static str,
        /// Its size per `fstat`.
        size: u64,
        /// The size in the answer.
        announced: u64,
    },
    /// (Client) a passed memfd is not sealed against shrinking and growing.
    #[error("{what} is not sealed against resizing; refusing to map it")]
    NotSealed {
        /// "ring region" or "blob".
        what: &'static str,
    },
    /// (Client) the announced blob does not fit in this process's address space.
    #[error("blob of {bytes} bytes does not fit in this process's address space")]
    BlobTooLarge {
        /// Announced blob bytes.
        bytes: u64,
    },
}
