//! The exit codes `pfs` documents (`pfs --help`, README.md) and the
//! mapping from this crate's errors to them, so a program built on
//! [`crate`] can exit as `pfs` does for the same failure.
//!
//! ```
//! use packetfs::exit;
//! let e = packetfs::Error::Stream(packetfs::stream::StreamError::Ended);
//! assert_eq!(exit::of_packetfs(&e), exit::TRANSPORT);
//! ```

use pfs_session::SessionError;

/// Success.
pub const OK: i32 = 0;
/// Any other failure (bad option value, local I/O, blob errors).
pub const FAILURE: i32 = 1;
/// Command-line usage error (clap's own code), or a config file that cannot be used.
pub const USAGE: i32 = 2;
/// The transfer ran but integrity did not hold (MISMATCH).
pub const INTEGRITY: i32 = 3;
/// A session was refused: by the peer (blob mismatch, limits, version,
/// busy), or — seen from a receiver — the peer was refused by this side.
pub const REFUSED: i32 = 4;
/// Transport failure or the peer vanished mid-session.
pub const TRANSPORT: i32 = 5;
/// A file transfer ran but some entries were not written (listed in the report).
pub const PARTIAL: i32 = 6;
/// The peer broke the protocol (undecodable or out-of-order frames).
pub const PROTOCOL: i32 = 7;

/// Authentication failed: the server's key is unknown or changed, our key
/// was refused, the handshake failed, or the server requires keys.
pub const AUTH: i32 = 8;

/// The server shut down during the session (ERROR `SHUTTING_DOWN`): what
/// landed stays; running the command again resumes.
pub const SHUTDOWN: i32 = 9;

/// The exit code of a session that ended in `e`.
pub fn of_session(e: &SessionError) -> i32 {
    match e {
        SessionError::Refused { code, .. } if *code == pfs_wire::ErrorCode::Auth as u16 => AUTH,
        SessionError::Refused { code, .. } if *code == pfs_wire::ErrorCode::ShuttingDown as u16 => SHUTDOWN,
        SessionError::Refused { .. } | SessionError::Rejected(_) | SessionError::Limit(_) => REFUSED,
        SessionError::Transport { .. } | SessionError::PeerClosed { .. } | SessionError::TimedOut { .. } => {
            TRANSPORT
        }
        SessionError::Malformed { .. } | SessionError::Violation(_) => PROTOCOL,
        SessionError::Local(_) | SessionError::Exec(_) => FAILURE,
    }
}

/// The exit code of a failed handshake.
pub fn of_secure(e: &pfs_auth::SecureError) -> i32 {
    use pfs_auth::SecureError as S;
    match e {
        S::Io { .. } | S::TimedOut(..) | S::Dropped => TRANSPORT,
        S::PlainRefusal { code, .. } if *code == pfs_wire::ErrorCode::Busy as u16 => REFUSED,
        S::Handshake(_)
        | S::UnknownServer { .. }
        | S::WrongServer { .. }
        | S::Refused { .. }
        | S::PlainRefusal { .. } => AUTH,
    }
}

/// The exit code of a stream session that ended in `e`, on either side:
/// refused (a right the key lacks, another blob, a limit, an entry outside
/// the blob) 4, a broken protocol 7, a silent peer 5.
pub fn of_stream(e: &crate::stream::StreamError) -> i32 {
    use crate::stream::{PublishError, StreamError as S};
    use pfs_wire::ErrorCode;
    match e {
        S::Session(s) => of_session(s),
        S::Violation(v) => match v.code() {
            ErrorCode::BadFrame | ErrorCode::Protocol | ErrorCode::Version => PROTOCOL,
            _ => REFUSED,
        },
        S::Silent { .. } | S::Ended => TRANSPORT,
        S::Publish(PublishError::NoRight { .. }) => REFUSED,
        S::Publish(_) => FAILURE,
    }
}

/// The exit code of a library error.
pub fn of_packetfs(e: &crate::Error) -> i32 {
    match e {
        crate::Error::Blob(_) => FAILURE,
        crate::Error::Transport(_) => TRANSPORT,
        crate::Error::Secure(s) => of_secure(s),
        crate::Error::Session(s) => of_session(s),
        crate::Error::Stream(s) => of_stream(s),
    }
}
