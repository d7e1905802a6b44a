//! Endpoints written as one string — `tcp:127.0.0.1:7878`,
//! `unix:/run/pfs.sock`, `shm:/run/pfs-shm.sock`, `udp:10.0.0.2:7878` —
//! for programs that take an address from a user or another language (the
//! C and Python bindings): the same text connects ([`Endpoint::target`])
//! or listens ([`Endpoint::listen`]), with each transport's default
//! settings.
//!
//! ```
//! use packetfs::endpoint::Endpoint;
//! let e: Endpoint = "tcp:127.0.0.1:0".parse()?;
//! let listener = e.listen()?;
//! let bound = Endpoint::bound(&listener); // the port the system chose
//! assert!(bound.to_string().starts_with("tcp:127.0.0.1:"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use pfs_transport::{AnyListener, Listener, ShmConfig, ShmListener, TcpConfig, TcpListener, UnixListener};

use crate::gram::Target;

/// A transport and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// TCP `host:port`.
    Tcp(String),
    /// A Unix stream socket path.
    Unix(PathBuf),
    /// A shared-memory rendezvous socket path.
    Shm(PathBuf),
    /// UDP `host:port`.
    Udp(String),
}

/// Why an endpoint string was refused, or could not listen.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// No `kind:` prefix of the four known.
    #[error("endpoint {given:?} must start with tcp:, unix:, shm: or udp: (e.g. tcp:127.0.0.1:7878)")]
    Kind {
        /// The endpoint as given.
        given: String,
    },
    /// The prefix is followed by nothing.
    #[error("endpoint {given:?} has no address after its kind")]
    Empty {
        /// The endpoint as given.
        given: String,
    },
    /// Binding the listener failed.
    #[error(transparent)]
    Listen(#[from] pfs_transport::TransportError),
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Self, EndpointError> {
        let (kind, addr) = s
            .split_once(':')
            .ok_or_else(|| EndpointError::Kind { given: s.into() })?;
        if addr.is_empty() {
            return Err(EndpointError::Empty { given: s.into() });
        }
        Ok(match kind {
            "tcp" => Self::Tcp(addr.into()),
            "unix" => Self::Unix(addr.into()),
            "shm" => Self::Shm(addr.into()),
            "udp" => Self::Udp(addr.into()),
            _ => return Err(EndpointError::Kind { given: s.into() }),
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "tcp:{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
            Self::Shm(p) => write!(f, "shm:{}", p.display()),
            Self::Udp(a) => write!(f, "udp:{a}"),
        }
    }
}

impl Endpoint {
    /// Where a publisher (or sender) connects to reach this endpoint.
    pub fn target(&self) -> Target {
        match self {
            Self::Tcp(addr) => Target::Tcp {
                addr: addr.clone(),
                sock_buf: 0,
            },
            Self::Unix(p) => Target::Unix(p.clone()),
            Self::Shm(p) => Target::Shm(p.clone(), ShmConfig::default()),
            Self::Udp(addr) => Target::Udp {
                addr: addr.clone(),
                cfg: pfs_transport::UdpConfig::default(),
            },
        }
    }

    /// Binds a listener here (TCP port 0: the system picks one; see
    /// [`Endpoint::bound`]).
    pub fn listen(&self) -> Result<AnyListener, EndpointError> {
        Ok(match self {
            Self::Tcp(addr) => AnyListener::Tcp(TcpListener::bind(addr, TcpConfig::default())?),
            Self::Unix(p) => AnyListener::Unix(UnixListener::bind(p)?),
            Self::Shm(p) => AnyListener::Shm(ShmListener::bind(p, &ShmConfig::default())?),
            Self::Udp(addr) => AnyListener::Udp(pfs_transport::UdpListener::bind(
                addr,
                pfs_transport::UdpConfig::default(),
            )?),
        })
    }

    /// The endpoint a listener is bound to, to hand to publishers.
    pub fn bound(listener: &AnyListener) -> Self {
        let addr = listener.local_addr();
        match listener {
            AnyListener::Tcp(_) => Self::Tcp(addr),
            AnyListener::Unix(_) => Self::Unix(addr.into()),
            AnyListener::Shm(_) => Self::Shm(addr.into()),
            AnyListener::Udp(_) => Self::Udp(addr),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_print_back() {
        for text in [
            "tcp:127.0.0.1:7878",
            "unix:/run/pfs.sock",
            "shm:/tmp/x",
            "udp:[::1]:9",
        ] {
            let e: Endpoint = text.parse().unwrap();
            assert_eq!(e.to_string(), text);
        }
        assert_eq!("tcp:h:1".parse::<Endpoint>().unwrap().target().addr_text(), "h:1");
    }

    #[test]
    fn bad_endpoints_say_what_is_wrong() {
        assert!(matches!(
            "127.0.0.1:7878".parse::<Endpoint>(),
            Err(EndpointError::Kind { .. })
        ));
        assert!(matches!(
            "http:x".parse::<Endpoint>(),
            Err(EndpointError::Kind { .. })
        ));
        assert!(matches!(
            "tcp:".parse::<Endpoint>(),
            Err(EndpointError::Empty { .. })
        ));
    }
}
