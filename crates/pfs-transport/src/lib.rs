//! PacketFS transports: byte streams that carry frames, behind one trait so
//! that the session layer and one conformance suite (`tests/conformance.rs`)
//! serve every implementation.
//!
//! Owns socket setup (buffer sizes, `TCP_NODELAY`, timeouts), vectored
//! writes that finish whole grams, listening/connecting, and the receive
//! buffer drivers read into ([`RecvBuf`]). Knows nothing of frame types.

use std::io::{self, IoSlice};
use std::time::Duration;

pub mod peer_uid;
pub mod recv_buf;
pub mod shm;
pub mod tcp;
pub mod udp;
pub mod unix;

pub use pfs_sys::Usage;
pub use recv_buf::{RecvBuf, RecvError};
pub use shm::{ShmConfig, ShmListener, ShmTransport};
pub use tcp::{TcpConfig, TcpListener, TcpTransport};
pub use udp::{DatagramKeys, UdpConfig, UdpListener, UdpTransport};
pub use unix::{UnixListener, UnixTransport};

/// Linux `IOV_MAX`: the most iovecs one `writev` accepts.
pub const IOV_MAX: usize = 1024;

/// A reliable, ordered byte stream between two peers.
pub trait Transport: Send {
    /// Short name used in labels: `TCP`, `UNIX`, `SHM`.
    fn kind(&self) -> &'static str;

    /// Human-readable peer address.
    fn peer(&self) -> String;

    /// Writes one vectored write, returning bytes accepted (may be partial).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Reads into `buf`; `Ok(0)` means the peer closed its sending side.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Reads what has already arrived, without waiting: `Ok(None)` when
    /// nothing has, `Ok(Some(0))` at end of stream. A writer uses it to
    /// take the peer's few frames between its own writes (a blob sender
    /// reading NAKs between grams). The default says nothing ever arrived:
    /// correct for a caller that reads with [`Transport::read`] later, only
    /// later than it could.
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let _ = buf;
        Ok(None)
    }

    /// Bounds how long a `read` may block (`None` = forever).
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Bounds how long one write call may block waiting for the peer to
    /// take bytes (`None` = forever): a peer that never reads cannot hold
    /// a writer. A write that times out fails with `WouldBlock` or
    /// `TimedOut`, possibly after a partial write.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Closes the sending side; the peer reads end-of-stream.
    fn shutdown_write(&mut self) -> io::Result<()>;

    /// CPU time of threads the transport runs for this connection (UDP's
    /// I/O thread), so a session's CPU figures include it; zero for
    /// transports whose work happens in the caller's thread or the kernel.
    fn helper_usage(&self) -> pfs_sys::Usage {
        pfs_sys::Usage::default()
    }

    /// The UDP connection's counters (datagrams, resent bytes, losses,
    /// RTT, offloads); `None` for the other transports.
    fn udp_report(&self) -> Option<udp::UdpReport> {
        None
    }

    /// Installs a protected session's datagram keys (`docs/wire.md`
    /// §14.7): UDP tags every datagram from now on and drops the peer's
    /// untagged or forged ones. Stream transports, whose bytes the kernel
    /// delivers, ignore it; every wrapper forwards it.
    fn protect_datagrams(&mut self, keys: &udp::DatagramKeys) {
        let _ = keys;
    }

    /// Writes every byte of `bufs`, in as few `writev` calls as the kernel
    /// allows (at most [`IOV_MAX`] slices per call). Returns bytes written.
    fn write_all_vectored(&mut self, mut bufs: &mut [IoSlice<'_>]) -> io::Result<u64> {
        let mut total = 0u64;
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            let n = bufs.len().min(IOV_MAX);
            match self.write_vectored(&bufs[..n]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "transport accepted no bytes",
                    ))
                }
                Ok(written) => {
                    total += written as u64;
                    IoSlice::advance_slices(&mut bufs, written);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    /// Writes every byte of `buf`.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<u64> {
        self.write_all_vectored(&mut [IoSlice::new(buf)])
    }

    /// Fills `buf` completely, or fails with `UnexpectedEof` if the peer closes first.
    fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read(buf) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed the connection",
                    ))
                }
                Ok(n) => buf = &mut buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A boxed transport is a transport: lets one server or client pick the
/// transport at run time.
impl<T: Transport + ?Sized> Transport for Box<T> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn peer(&self) -> String {
        (**self).peer()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (**self).write_vectored(bufs)
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read(buf)
    }
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).read_ready(buf)
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        (**self).shutdown_write()
    }
    fn helper_usage(&self) -> pfs_sys::Usage {
        (**self).helper_usage()
    }
    fn udp_report(&self) -> Option<udp::UdpReport> {
        (**self).udp_report()
    }
    fn protect_datagrams(&mut self, keys: &udp::DatagramKeys) {
        (**self).protect_datagrams(keys)
    }
}

/// A borrowed transport is a transport: lets a wrapper (a protected
/// session, bytes put back in front) run over a connection it does not own.
impl<T: Transport + ?Sized> Transport for &mut T {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }
    fn peer(&self) -> String {
        (**self).peer()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (**self).write_vectored(bufs)
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read(buf)
    }
    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).read_ready(buf)
    }
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        (**self).shutdown_write()
    }
    fn helper_usage(&self) -> pfs_sys::Usage {
        (**self).helper_usage()
    }
    fn udp_report(&self) -> Option<udp::UdpReport> {
        (**self).udp_report()
    }
    fn protect_datagrams(&mut self, keys: &udp::DatagramKeys) {
        (**self).protect_datagrams(keys)
    }
}

/// [`Transport::read_ready`] for a stream socket (TCP, Unix): what one
/// non-blocking `recv` gives, whatever the socket's read timeout.
pub(crate) fn recv_ready(socket: impl std::os::fd::AsFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    if buf.is_empty() {
        // recv would return 0, which means end of stream.
        return Ok(None);
    }
    match rustix::net::recv(socket, buf, rustix::net::RecvFlags::DONTWAIT) {
        Ok((n, _)) => Ok(Some(n)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Resolves `addr` (`host:port`): every address it names, at least one.
pub(crate) fn resolve(addr: &str) -> Result<Vec<std::net::SocketAddr>, TransportError> {
    use std::net::ToSocketAddrs;
    let all: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|source| TransportError::BadAddress {
            addr: addr.into(),
            source,
        })?
        .collect();
    if all.is_empty() {
        return Err(TransportError::Unresolved { addr: addr.into() });
    }
    Ok(all)
}

/// A listener of any of this crate's kinds, chosen at run time.
#[derive(Debug)]
pub enum AnyListener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix stream socket.
    Unix(UnixListener),
    /// Shared-memory rings.
    Shm(ShmListener),
    /// UDP datagrams.
    Udp(udp::UdpListener),
}

impl AnyListener {
    /// Short name of the transport: `TCP`, `UNIX`, `SHM`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Tcp(_) => "TCP",
            Self::Unix(_) => "UNIX",
            Self::Shm(_) => "SHM",
            Self::Udp(_) => "UDP",
        }
    }
}

impl Listener for AnyListener {
    type Conn = Box<dyn Transport>;

    fn accept(&self) -> io::Result<Box<dyn Transport>> {
        Ok(match self {
            Self::Tcp(l) => Box::new(l.accept()?),
            Self::Unix(l) => Box::new(l.accept()?),
            Self::Shm(l) => Box::new(l.accept()?),
            Self::Udp(l) => Box::new(l.accept()?),
        })
    }

    fn local_addr(&self) -> String {
        match self {
            Self::Tcp(l) => l.local_addr(),
            Self::Unix(l) => l.local_addr(),
            Self::Shm(l) => l.local_addr(),
            Self::Udp(l) => l.local_addr(),
        }
    }
}

/// Accepts connections of one transport kind.
pub trait Listener: Send + Sync {
    /// The connection type.
    type Conn: Transport + 'static;

    /// Blocks until the next connection.
    fn accept(&self) -> io::Result<Self::Conn>;

    /// The bound address, printable (`127.0.0.1:7878`, a socket path).
    fn local_addr(&self) -> String;
}

/// Why a listener or connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The address does not parse, or name resolution failed.
    #[error("bad address {addr:?}: {source}")]
    BadAddress {
        /// What was given.
        addr: String,
        /// The parse or resolver error.
        #[source]
        source: io::Error,
    },
    /// The address resolved to no socket address.
    #[error("bad address {addr:?}: resolved to nothing")]
    Unresolved {
        /// What was given.
        addr: String,
    },
    /// bind/listen failed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Address.
        addr: String,
        /// OS error.
        source: io::Error,
    },
    /// connect failed.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Address.
        addr: String,
        /// OS error.
        source: io::Error,
    },
}
