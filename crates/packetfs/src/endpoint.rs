//! Where a peer is and how it is reached: the transport options of `pfs`
//! ([`TransportArgs`], clap arguments with the `clap` feature), the
//! [`Target`] a sender's address and options name, and the listener a
//! server's bind.

use std::path::{Path, PathBuf};

use pfs_transport::{AnyListener, ShmListener, TcpConfig, TcpListener, UdpListener, UnixListener};

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
