//! Violations of the files protocol by a peer.

use pfs_wire::ErrorCode;

/// What a files-protocol peer did wrong.
///
/// Transitional: the checks of the files sessions still carry their message
/// as text ([`FilesViolation::Unconverted`]); the sans-I/O files core gives
/// each its own variant and removes this one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilesViolation {
    /// A check not yet given its own variant.
    #[error("{message}")]
    Unconverted {
        /// The ERROR code sent.
        code: ErrorCode,
        /// What was wrong.
        message: String,
    },
}

impl FilesViolation {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Unconverted { code, .. } => *code,
        }
    }
}

/// A violation as a session error (transitional helper, see [`FilesViolation`]).
pub(crate) fn reject(code: ErrorCode, message: String) -> crate::SessionError {
    crate::error::Violation::Files(FilesViolation::Unconverted { code, message }).into()
}

/// A local failure as a session error (transitional helper, see [`FilesViolation`]).
pub(crate) fn local(message: String) -> crate::SessionError {
    crate::error::LocalError::Unconverted(message).into()
}
