//! Exit codes, documented in `pfs --help` and README.md.

use pfs_session::SessionError;

/// Success.
pub const OK: i32 = 0;
/// Any other failure (bad option value, local I/O, blob errors).
pub const FAILURE: i32 = 1;
/// Command-line usage error (clap's own code).
#[allow(dead_code)]
pub const USAGE: i32 = 2;
/// The transfer ran but integrity did not hold (MISMATCH).
pub const INTEGRITY: i32 = 3;
/// The peer refused the session (blob mismatch, limits, version, busy).
pub const REFUSED: i32 = 4;
/// Transport failure or the peer vanished mid-session.
pub const TRANSPORT: i32 = 5;
/// A file transfer ran but some entries were not written (listed in the report).
pub const PARTIAL: i32 = 6;

/// Maps an error to its exit code.
pub fn classify(e: &anyhow::Error) -> i32 {
    match e.downcast_ref::<SessionError>() {
        Some(SessionError::Refused { .. }) => REFUSED,
        Some(SessionError::Io { .. } | SessionError::PeerClosed { .. }) => TRANSPORT,
        Some(_) => FAILURE,
        None => match e.downcast_ref::<pfs_transport::TransportError>() {
            Some(_) => TRANSPORT,
            None => FAILURE,
        },
    }
}
