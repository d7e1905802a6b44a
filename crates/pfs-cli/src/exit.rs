//! Exit codes, documented in `pfs --help` and README.md.

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

/// The exit code of a session that ended in `e`.
pub fn of_session(e: &SessionError) -> i32 {
    match e {
        SessionError::Refused { code, .. } if *code == pfs_wire::ErrorCode::Auth as u16 => AUTH,
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
pub fn of_stream(e: &packetfs::stream::StreamError) -> i32 {
    use packetfs::stream::{PublishError, StreamError as S};
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
pub fn of_packetfs(e: &packetfs::Error) -> i32 {
    match e {
        packetfs::Error::Blob(_) => FAILURE,
        packetfs::Error::Transport(_) => TRANSPORT,
        packetfs::Error::Secure(s) => of_secure(s),
        packetfs::Error::Session(s) => of_session(s),
        packetfs::Error::Stream(s) => of_stream(s),
    }
}

/// Maps an error to its exit code.
pub fn classify(e: &anyhow::Error) -> i32 {
    if let Some(p) = e.downcast_ref::<packetfs::Error>() {
        return of_packetfs(p);
    }
    match e.downcast_ref::<packetfs::pubsub::PubSubError>() {
        Some(packetfs::pubsub::PubSubError::Lib(p)) => return of_packetfs(p),
        Some(packetfs::pubsub::PubSubError::Stream(s)) => return of_stream(s),
        _ => {}
    }
    if e.downcast_ref::<crate::config::ConfigError>().is_some() {
        return USAGE;
    }
    if let Some(s) = e.downcast_ref::<pfs_auth::SecureError>() {
        return of_secure(s);
    }
    if let Some(m) = e.downcast_ref::<pfs_mount::MountError>() {
        return crate::command::mount_exit_code(m);
    }
    match e.downcast_ref::<SessionError>() {
        Some(s) => of_session(s),
        None => match e.downcast_ref::<pfs_transport::TransportError>() {
            Some(_) => TRANSPORT,
            None => FAILURE,
        },
    }
}

/// An error and its causes on one line, each cause once ([`packetfs::report::error_line`]).
pub fn describe(e: &anyhow::Error) -> String {
    packetfs::report::error_line(e.as_ref())
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let os = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = anyhow::Error::new(pfs_transport::TransportError::Connect {
            addr: "127.0.0.1:1".into(),
            source: os,
        });
        let text = describe(&e);
        assert_eq!(text.matches("refused").count(), 1, "{text}");
        assert!(text.starts_with("cannot connect to 127.0.0.1:1: "), "{text}");
        let wrapped = anyhow::Error::msg("inner").context("outer");
        assert_eq!(describe(&wrapped), "outer: inner");
    }
}
