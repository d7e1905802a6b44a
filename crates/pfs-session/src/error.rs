//! Errors of a session, one enum for both sides.

use std::io;

use pfs_exec::ExecError;
use pfs_wire::{ErrorCode, WireError};

/// Why a session ended without a report.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A transport read or write failed.
    #[error("transport error during {during}: {source}")]
    Io {
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
    /// The peer sent bytes that do not decode.
    #[error("malformed {context} from peer: {error}")]
    Wire {
        /// Which field or frame.
        context: &'static str,
        /// The decode error.
        error: WireError,
    },
    /// We refused the peer and told it so in an ERROR frame.
    #[error("refused peer ({}): {message}", code.name())]
    Rejected {
        /// Error code sent.
        code: ErrorCode,
        /// Message sent.
        message: String,
    },
    /// The peer refused us with an ERROR frame.
    #[error("peer refused ({code_name}): {message}")]
    Refused {
        /// Raw code received.
        code: u16,
        /// Its name, or `code N` when unknown.
        code_name: String,
        /// Message received.
        message: String,
    },
    /// Our own schedule or blob cannot produce a valid gram.
    #[error("local error: {0}")]
    Local(String),
    /// Executing a gram over our own blob failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
}

impl SessionError {
    pub(crate) fn io(during: &'static str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::UnexpectedEof {
            return Self::PeerClosed { during };
        }
        Self::Io { during, source }
    }

    /// The ERROR code that describes this error to a peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Rejected { code, .. } => *code,
            Self::Wire {
                error: WireError::UnsupportedVersion(_),
                ..
            } => ErrorCode::Version,
            Self::Wire {
                error: WireError::TooLarge,
                ..
            } => ErrorCode::Limit,
            Self::Wire { .. } => ErrorCode::BadFrame,
            Self::Exec(ExecError::OutOfBounds { .. }) => ErrorCode::OutOfBounds,
            Self::Exec(ExecError::Wire(_)) => ErrorCode::BadFrame,
            _ => ErrorCode::Internal,
        }
    }
}
