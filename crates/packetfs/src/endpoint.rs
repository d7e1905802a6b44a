//! Where a peer is and how it is reached: the transport options of `pfs`
//! ([`TransportArgs`], clap arguments with the `clap` feature), the
//! [`Target`] a sender's address and options name, and the listener a
//! server's bind ([`bind`]).
//!
//! For programs that take an address from a user or another language (the
//! C and Python bindings), an [`Endpoint`] is the same in one string —
//! `tcp:127.0.0.1:7878`, `unix:/run/pfs.sock`, `shm:/run/pfs-shm.sock`,
//! `udp:10.0.0.2:7878` — that connects ([`Endpoint::target`]) or listens
//! ([`Endpoint::listen`]) with each transport's default settings.
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
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pfs_transport::{
    AnyListener, Listener, ShmConfig, ShmListener, TcpConfig, TcpListener, UdpListener, UnixListener,
};

use crate::gram::Target;

/// Transport options that contradict each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransportArgsError {
    /// `--shm-wait` or `--shm-ring` with another transport.
    #[error("--shm-wait and --shm-ring apply only with --transport shm")]
    ShmOnly,
    /// `--mtu` with another transport than UDP.
    #[error("--mtu applies only with --transport udp")]
    MtuUdpOnly,
    /// An MTU out of range.
    #[error("--mtu {0}: give 576 … 65535 bytes")]
    Mtu(u32),
}

/// Which transport carries the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TransportArg {
    /// TCP (address `host:port`).
    Tcp,
    /// Unix stream socket, same host (address: a socket path).
    Unix,
    /// Shared-memory rings, same host (address: the rendezvous socket path).
    Shm,
    /// UDP datagrams (address `host:port`): a reliable stream with selective ACKs, every gap
    /// NAKed at once, and paced, rate-based congestion control — for long or lossy links.
    Udp,
}

impl TransportArg {
    /// Whether peers may be on other hosts (TCP, UDP): keys are then required off loopback.
    pub fn is_network(self) -> bool {
        matches!(self, Self::Tcp | Self::Udp)
    }
}

/// How an idle side of a shared-memory connection waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ShmWaitArg {
    /// Busy-spin: lowest latency, one core at 100 % per waiting side.
    Spin,
    /// Spin, then yield the CPU.
    Yield,
    /// Spin, then sleep on a futex in shared memory (idle CPU ≈ 0).
    Futex,
}

/// Transport selection, shared by `send` and `serve`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct TransportArgs {
    /// Transport: tcp or udp, or for same-host peers unix or shm (shared-memory rings).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = TransportArg::Tcp))]
    pub transport: TransportArg,
    /// udp: the path's MTU in bytes (576–65535); datagrams are this less the IP and UDP
    /// headers [default: 1500]. Both sides use the smaller of their two values.
    #[cfg_attr(feature = "clap", arg(long, value_name = "BYTES"))]
    pub mtu: Option<u32>,
    /// shm: how an idle side waits.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value_t = ShmWaitArg::Futex))]
    pub shm_wait: ShmWaitArg,
    /// shm (serve): bytes of each direction's ring (a power of two, 4K … 1G).
    #[cfg_attr(feature = "clap", arg(long, default_value = "4M", value_parser = crate::parse::parse_size))]
    pub shm_ring: u64,
}

impl TransportArgs {
    /// The shared-memory settings.
    pub fn shm(&self) -> pfs_transport::ShmConfig {
        pfs_transport::ShmConfig {
            ring_bytes: usize::try_from(self.shm_ring).unwrap_or(usize::MAX),
            wait: match self.shm_wait {
                ShmWaitArg::Spin => pfs_ipc::WaitStrategy::Spin,
                ShmWaitArg::Yield => pfs_ipc::WaitStrategy::SpinYield,
                ShmWaitArg::Futex => pfs_ipc::WaitStrategy::SpinFutex,
            },
        }
    }

    /// Flags that only apply to shm, given with another transport: an error
    /// rather than a silently ignored setting.
    pub fn check(&self) -> Result<(), TransportArgsError> {
        let shm_flags_changed = self.shm_wait != ShmWaitArg::Futex || self.shm_ring != 4 << 20;
        if self.transport != TransportArg::Shm && shm_flags_changed {
            return Err(TransportArgsError::ShmOnly);
        }
        match self.mtu {
            Some(_) if self.transport != TransportArg::Udp => Err(TransportArgsError::MtuUdpOnly),
            Some(mtu) if !(576..=65535).contains(&mtu) => Err(TransportArgsError::Mtu(mtu)),
            _ => Ok(()),
        }
    }

    /// The UDP settings for a peer at `addr` (IPv6 headers are 20 bytes longer).
    pub fn udp(&self, addr: &str) -> pfs_transport::UdpConfig {
        let mtu = self.mtu.unwrap_or(1500);
        let headers = if addr.starts_with('[') { 48 } else { 28 };
        let datagram = mtu.saturating_sub(headers).clamp(
            u32::from(pfs_wire::datagram::MIN_DATAGRAM),
            u32::from(pfs_wire::datagram::MAX_DATAGRAM),
        );
        pfs_transport::UdpConfig {
            max_datagram: datagram as u16,
            ..pfs_transport::UdpConfig::default()
        }
    }
}

/// The target `to` names over `t`'s transport.
pub fn target(to: &str, t: &TransportArgs, sock_buf: u64) -> Target {
    match t.transport {
        TransportArg::Tcp => Target::Tcp {
            addr: to.to_string(),
            sock_buf: sock_buf as usize,
        },
        TransportArg::Unix => Target::Unix(PathBuf::from(to)),
        TransportArg::Shm => Target::Shm(PathBuf::from(to), t.shm()),
        TransportArg::Udp => Target::Udp {
            addr: to.to_string(),
            cfg: t.udp(to),
        },
    }
}

/// Binds a listener on `listen` over `t`'s transport; a TCP one admits
/// only this user's peers (and root's) when `local_users_only`
/// ([`crate::keys::local_users_only`]).
pub fn bind(
    listen: &str,
    t: &TransportArgs,
    sock_buf: u64,
    local_users_only: bool,
) -> Result<AnyListener, pfs_transport::TransportError> {
    Ok(match t.transport {
        TransportArg::Tcp => {
            let tcp = TcpConfig {
                socket_buffer: sock_buf as usize,
                ..TcpConfig::default()
            };
            let listener = TcpListener::bind(listen, tcp)?;
            if local_users_only {
                AnyListener::Tcp(listener.same_user_only())
            } else {
                AnyListener::Tcp(listener)
            }
        }
        TransportArg::Unix => AnyListener::Unix(UnixListener::bind(Path::new(listen))?),
        TransportArg::Shm => AnyListener::Shm(ShmListener::bind(Path::new(listen), &t.shm())?),
        TransportArg::Udp => AnyListener::Udp(UdpListener::bind(listen, t.udp(listen))?),
    })
}

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
            Self::Udp(addr) => {
                AnyListener::Udp(UdpListener::bind(addr, pfs_transport::UdpConfig::default())?)
            }
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
