//! Errors of the IPC layer.

use std::io;
use std::time::Duration;

use crate::ring::RingError;

/// What went wrong on an IPC endpoint or listener.
#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: io::Error,
    },
    /// The other side refused the connection (credentials, version, limits).
    #[error("connection refused: {0}")]
    Refused(String),
    /// The rendezvous exchange was malformed.
    #[error("bad rendezvous message: {0}")]
    Handshake(String),
    /// The peer wrote something into shared memory no correct peer writes.
    /// The endpoint is unusable afterwards; this process is unaffected.
    #[error("protocol error: {0}")]
    Protocol(#[from] RingError),
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
    pub(crate) fn io(context: impl Into<String>, source: impl Into<io::Error>) -> Self {
        Self::Io {
            context: context.into(),
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
