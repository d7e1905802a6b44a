//! Errors of a session, both protocols, both sides. Each variant is one kind
//! of failure with its own exit code in the CLI: the transport failed, the
//! peer vanished or went silent, the peer broke the protocol, we refused the
//! peer, the peer refused us, a limit was exceeded, or this side failed on
//! its own.

use std::io;
use std::time::Duration;

use pfs_exec::ExecError;
use pfs_wire::{ErrorCode, FrameType, WireError};

use crate::catchup::CatchUpViolation;
use crate::files::FilesViolation;
use crate::gram::{GramViolation, HelloRejection};
use crate::mount::MountViolation;

/// Why a session ended without a report.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A transport read or write failed.
    #[error("transport error during {during}: {source}")]
    Transport {
        /// What was being done.
        during: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The peer closed the connection early.
    #[error("peer closed the connection during {during}")]
    PeerClosed {
        /// What was being read.
        during: &'static str,
    },
    /// The peer was silent (or trickled bytes) past a deadline.
    #[error("{what}")]
    TimedOut {
        /// What was awaited, and for how long.
        what: Timeout,
    },
    /// The peer sent bytes that do not decode.
    #[error("malformed {context} from peer: {error}")]
    Malformed {
        /// Which field or frame.
        context: &'static str,
        /// The decode error.
        error: WireError,
    },
    /// The peer broke the protocol; it was told so in an ERROR frame.
    #[error("refused peer ({}): {}", .0.code().name(), .0)]
    Violation(#[from] Violation),
    /// The peer asked for something this side does not do (another blob,
    /// an unsupported mode, authentication); it was told so.
    #[error("refused peer ({}): {}", .0.code().name(), .0)]
    Rejected(#[from] HelloRejection),
    /// A request exceeds a limit, ours or the peer's.
    #[error("{0}")]
    Limit(#[from] LimitExceeded),
    /// The peer refused us with an ERROR frame.
    #[error("peer refused ({}): {message}", code_name(*code))]
    Refused {
        /// Raw code received.
        code: u16,
        /// The peer's message, as it sent it.
        message: String,
    },
    /// This side cannot go on: its own schedule, files, store or disk.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// Executing our own schedule over our own blob failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// A deadline that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Timeout {
    /// No frame, or a frame not complete, before the idle or handshake deadline.
    #[error("closing an idle or too slow session: {during} not complete before its deadline ({after:?})")]
    Idle {
        /// What was awaited.
        during: &'static str,
        /// The deadline's length.
        after: Duration,
    },
    /// The receiver's report did not arrive after the last gram.
    #[error(
        "no report from the receiver within {after:?} after the last gram (it may still be executing a backlog)"
    )]
    Report {
        /// The reply timeout.
        after: Duration,
    },
    /// The peer did not answer the opening frame.
    #[error("no {during} from the peer within {after:?}")]
    Reply {
        /// What was awaited.
        during: &'static str,
        /// The reply timeout.
        after: Duration,
    },
}

/// What the peer did that the protocol does not allow.
#[derive(Debug, thiserror::Error)]
pub enum Violation {
    /// A frame type the session's state does not allow.
    #[error("expected {expected}, got {}", got.name())]
    UnexpectedFrame {
        /// What the state allows.
        expected: &'static str,
        /// What arrived.
        got: FrameType,
    },
    /// A frame whose body length is wrong for its type.
    #[error("{frame} body of {len} bytes")]
    BodyLength {
        /// The frame.
        frame: &'static str,
        /// Its length.
        len: u32,
    },
    /// A gram-protocol violation.
    #[error(transparent)]
    Gram(#[from] GramViolation),
    /// A files-protocol violation.
    #[error(transparent)]
    Files(#[from] FilesViolation),
    /// A mount-protocol violation.
    #[error(transparent)]
    Mount(#[from] MountViolation),
    /// A catch-up violation (docs/wire.md §16).
    #[error(transparent)]
    CatchUp(#[from] CatchUpViolation),
    /// The client's key lacks the right its first frame needs (`no-files`
    /// for FILES_HELLO, `no-read` for MOUNT_HELLO); the server reports it
    /// as a refused admission.
    #[error("{0}")]
    Unauthorized(&'static str),
}

impl Violation {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::UnexpectedFrame { .. } => ErrorCode::Protocol,
            Self::BodyLength { .. } => ErrorCode::BadFrame,
            Self::Gram(v) => v.code(),
            Self::Files(v) => v.code(),
            Self::Mount(v) => v.code(),
            Self::CatchUp(v) => v.code(),
            Self::Unauthorized(_) => ErrorCode::Auth,
        }
    }
}

/// A count or size over a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    /// The sender's planned grams exceed what the receiver advertised.
    #[error("{what}: {asked} exceeds the receiver's limit of {limit}{hint}")]
    Receiver {
        /// Which quantity.
        what: &'static str,
        /// What this side would send.
        asked: u64,
        /// The receiver's limit.
        limit: u64,
        /// Which option lowers it (starts with "; " when present).
        hint: &'static str,
    },
    /// The peer asked for more than this side's limits allow.
    #[error("{what}: {asked} exceeds this receiver's limit of {limit}")]
    Peer {
        /// Which quantity.
        what: &'static str,
        /// What the peer asked for.
        asked: u64,
        /// This side's limit.
        limit: u64,
    },
    /// The receiver's store cannot take the plan's new bytes; refused
    /// before anything was written.
    #[error(
        "receiver full: this transfer needs {need} new bytes, {free} of {capacity} are free (the \
         destination's filesystem, or --store-capacity of a receiver with --store); nothing was written"
    )]
    StoreFull {
        /// New bytes the plan needs.
        need: u64,
        /// Bytes free.
        free: u64,
        /// The store's capacity.
        capacity: u64,
    },
    /// The receiver's store filled up during the transfer (more new bytes
    /// than planned, or another session took the space).
    #[error(
        "receiver full: {need} more bytes needed during the transfer, the store has {free} free of {capacity}"
    )]
    StoreFilled {
        /// Bytes needed.
        need: u64,
        /// Bytes free.
        free: u64,
        /// The store's capacity.
        capacity: u64,
    },
    /// The filesystem holding the receiver's store cannot grow it (ENOSPC
    /// or EDQUOT), below the store's own capacity.
    #[error(
        "receiver full: {need} more bytes do not fit on the filesystem holding its store (its \
         --store-capacity is not reached)"
    )]
    DiskFull {
        /// Bytes the store had to grow by.
        need: u64,
    },
}

/// This side's own failure (not the peer's, not the transport's).
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The schedule cannot be built.
    #[error("schedule: {0}")]
    Schedule(#[from] pfs_exec::schedule::SpecError),
    /// The schedule was made for a blob of another length.
    #[error("the schedule is for a {schedule}-byte blob, the blob has {blob} bytes")]
    ScheduleBlobLength {
        /// Blob length the schedule names.
        schedule: u64,
        /// This blob's length.
        blob: u64,
    },
    /// A descriptor this side built does not encode.
    #[error("descriptor {offset}+{len}: {error}")]
    Encode {
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u32,
        /// Why.
        error: pfs_wire::desc::EncodeError,
    },
    /// A frame this side built exceeds the wire's 4 GiB body limit.
    #[error("{what} exceeds 4 GiB")]
    FrameTooLarge {
        /// Which frame.
        what: &'static str,
    },
    /// The server could not give an admitted client its store or
    /// destination (e.g. its `dir=` cannot be created).
    #[error("{0}")]
    Place(crate::places::PlaceError),
    /// A local file or directory operation failed.
    #[error("{what} {}: {source}", pfs_files::escape_path(path))]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: std::path::PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The receiver's store failed.
    #[error(transparent)]
    Store(#[from] pfs_store::StoreError),
    /// The files layer failed (walk, chunking, destination).
    #[error(transparent)]
    Files(#[from] pfs_files::FilesError),
    /// Catch-up was offered without the mapped blob whose region hashes it sends.
    #[error("catch-up needs the mapped blob (its region hashes), and this session has only its bytes")]
    CatchUpNeedsBlob,
    /// This side's blob could not record a catch-up (its metadata).
    #[error("blob: {0}")]
    Blob(#[from] pfs_blob::BlobError),
    /// A catch-up write into this side's blob was refused.
    #[error("blob write: {0}")]
    BlobWrite(#[from] pfs_blob::BlobWriteError),
    /// zstd failed on this side's own bytes (a context, or compressing).
    #[error("zstd: {what}: {source}")]
    Zstd {
        /// What was being done.
        what: &'static str,
        /// zstd's error.
        source: io::Error,
    },
}

impl From<pfs_transport::RecvError> for SessionError {
    /// A driver's read: end of stream is [`SessionError::PeerClosed`], a
    /// failed read [`SessionError::Transport`] (an unexpected end of file
    /// being `PeerClosed` too).
    fn from(e: pfs_transport::RecvError) -> Self {
        match e {
            pfs_transport::RecvError::Closed { during } => Self::PeerClosed { during },
            pfs_transport::RecvError::Io { during, source } => Self::transport(during, source),
        }
    }
}

impl SessionError {
    /// A transport error; end of stream becomes [`SessionError::PeerClosed`].
    pub(crate) fn transport(during: &'static str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::UnexpectedEof {
            return Self::PeerClosed { during };
        }
        Self::Transport { during, source }
    }

    /// A decode failure of the peer's bytes.
    pub(crate) fn malformed(context: &'static str) -> impl FnOnce(WireError) -> Self {
        move |error| Self::Malformed { context, error }
    }

    /// The ERROR code that describes this error to a peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Violation(v) => v.code(),
            Self::Rejected(r) => r.code(),
            Self::Limit(_) => ErrorCode::Limit,
            Self::Malformed {
                error: WireError::UnsupportedVersion(_),
                ..
            } => ErrorCode::Version,
            Self::Malformed {
                error: WireError::TooLarge,
                ..
            } => ErrorCode::Limit,
            Self::Malformed { .. } => ErrorCode::BadFrame,
            Self::TimedOut { .. } => ErrorCode::Protocol,
            Self::Exec(ExecError::OutOfBounds { .. }) => ErrorCode::OutOfBounds,
            Self::Exec(ExecError::Wire(_)) => ErrorCode::BadFrame,
            _ => ErrorCode::Internal,
        }
    }

    /// Whether the peer should be told with an ERROR frame: not when it is
    /// gone, and not its own ERROR echoed back.
    pub fn tell_peer(&self) -> bool {
        !matches!(
            self,
            Self::PeerClosed { .. } | Self::Refused { .. } | Self::Transport { .. }
        )
    }
}

/// Name of a raw ERROR code, or `code N` when unknown.
pub fn code_name(code: u16) -> String {
    ErrorCode::from_u16(code)
        .map(|c| c.name().to_string())
        .unwrap_or_else(|| format!("code {code}"))
}
