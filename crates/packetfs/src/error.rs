//! The error of this crate's own operations: opening a blob, connecting to
//! a peer, running a session. Each variant keeps the lower crate's typed
//! error as it is, so a caller can still tell a refusal from a transport
//! failure (the `pfs` binary maps them to exit codes).

/// Why a blob could not be opened, a peer not reached or a session not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Mapping, filling or fingerprinting the blob failed.
    #[error("blob setup failed")]
    Blob(#[source] pfs_blob::BlobError),
    /// The connection could not be opened or broke.
    #[error(transparent)]
    Transport(#[from] pfs_transport::TransportError),
    /// The handshake of a protected session failed (docs/wire.md §11).
    #[error(transparent)]
    Secure(#[from] pfs_auth::SecureError),
    /// The session ended in an error (refused, timed out, malformed …).
    #[error(transparent)]
    Session(#[from] pfs_session::SessionError),
    /// A streaming session could not open (refused, timed out …).
    #[error(transparent)]
    Stream(#[from] pfs_session::stream::StreamError),
}
