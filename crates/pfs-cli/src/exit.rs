//! Exit codes, documented in `pfs --help` and README.md: the codes and the
//! library errors' mapping live in `packetfs::exit`; what only the binary
//! meets (anyhow chains, config and mount errors) is classified here.

use pfs_session::SessionError;

pub use packetfs::exit::*;

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
    if e.downcast_ref::<crate::config::ConfigError>().is_some()
        || e.downcast_ref::<packetfs::files::TargetError>().is_some()
    {
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
