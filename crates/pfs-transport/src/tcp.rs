//! TCP transport: large socket buffers, `TCP_NODELAY` (grams are written
//! whole, so Nagle only delays the small control frames), loopback by
//! default on the listening side.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::{Listener, Transport, TransportError};

/// Socket tuning shared by both sides.
#[derive(Debug, Clone, Copy)]
pub struct TcpConfig {
    /// `SO_SNDBUF`/`SO_RCVBUF` request in bytes; 0 leaves the kernel's
    /// autotuning alone (which on Linux often grows further than an explicit
    /// value is allowed to).
    pub socket_buffer: usize,
    /// Connect timeout.
    pub connect_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            socket_buffer: 0,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

fn tune(sock: SockRef<'_>, cfg: &TcpConfig) -> io::Result<()> {
    sock.set_nodelay(true)?;
    if cfg.socket_buffer > 0 {
        sock.set_send_buffer_size(cfg.socket_buffer)?;
        sock.set_recv_buffer_size(cfg.socket_buffer)?;
    }
    Ok(())
}

/// One TCP connection.
#[derive(Debug)]
pub struct TcpTransport {
    stream: TcpStream,
    peer: String,
}

impl TcpTransport {
    /// Connects to `addr` (`host:port`).
    pub fn connect(addr: &str, cfg: &TcpConfig) -> Result<Self, TransportError> {
        let resolved = crate::resolve(addr)?;
        let mut last = None;
        for sa in resolved {
            match Self::connect_one(sa, cfg) {
                Ok(t) => return Ok(t),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(source) => TransportError::Connect {
                addr: addr.into(),
                source,
            },
            None => TransportError::Unresolved { addr: addr.into() },
        })
    }

    fn connect_one(sa: SocketAddr, cfg: &TcpConfig) -> io::Result<Self> {
        let sock = Socket::new(Domain::for_address(sa), Type::STREAM, Some(Protocol::TCP))?;
        // Buffer sizes must be set before connect to influence the window scale.
        tune(SockRef::from(&sock), cfg)?;
        sock.connect_timeout(&sa.into(), cfg.connect_timeout)?;
        let stream: TcpStream = sock.into();
        Ok(Self {
            stream,
            peer: sa.to_string(),
        })
    }

    /// Wraps an accepted stream.
    pub fn from_stream(stream: TcpStream, cfg: &TcpConfig) -> io::Result<Self> {
        tune(SockRef::from(&stream), cfg)?;
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        Ok(Self { stream, peer })
    }

    /// The effective kernel buffer sizes (send, receive), for reports.
    pub fn buffer_sizes(&self) -> (usize, usize) {
        let s = SockRef::from(&self.stream);
        (
            s.send_buffer_size().unwrap_or(0),
            s.recv_buffer_size().unwrap_or(0),
        )
    }
}

impl Transport for TcpTransport {
    fn kind(&self) -> &'static str {
        "TCP"
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.stream.write_vectored(bufs)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        crate::recv_ready(&self.stream, buf)
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        // SO_SNDTIMEO: a send blocked on a full socket buffer gives up.
        self.stream.set_write_timeout(timeout)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.stream.shutdown(Shutdown::Write)
    }
}

/// Refuses (`PermissionDenied`, which the accept loop skips without delay)
/// a client whose socket belongs to another user than this process's, root
/// excepted, or whose socket is not on this host.
fn check_same_user(peer: SocketAddr, local: SocketAddr) -> io::Result<()> {
    let me = rustix::process::getuid().as_raw();
    match crate::peer_uid::tcp_socket_uid(peer, local)? {
        Some(uid) if uid == me || uid == 0 => Ok(()),
        Some(uid) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refused a TCP client of uid {uid} from {peer} (this plain server serves only uid {me} and root)"),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refused a TCP client from {peer}: its socket is not on this host (a plain loopback server serves only local users)"),
        )),
    }
}

/// A listening TCP socket.
#[derive(Debug)]
pub struct TcpListener {
    inner: std::net::TcpListener,
    cfg: TcpConfig,
    same_user: bool,
}

impl TcpListener {
    /// Binds `addr`. Callers decide whether a non-loopback address is allowed.
    pub fn bind(addr: &str, cfg: TcpConfig) -> Result<Self, TransportError> {
        let sa = crate::resolve(addr)?[0];
        let listen = |sa: SocketAddr| -> io::Result<std::net::TcpListener> {
            let sock = Socket::new(Domain::for_address(sa), Type::STREAM, Some(Protocol::TCP))?;
            sock.set_reuse_address(true)?;
            if cfg.socket_buffer > 0 {
                // Inherited by accepted sockets; set before listen so the window scale fits.
                sock.set_recv_buffer_size(cfg.socket_buffer)?;
                sock.set_send_buffer_size(cfg.socket_buffer)?;
            }
            sock.bind(&sa.into())?;
            sock.listen(128)?;
            Ok(sock.into())
        };
        let inner = listen(sa).map_err(|source| TransportError::Listen {
            addr: addr.into(),
            source,
        })?;
        Ok(Self {
            inner,
            cfg,
            same_user: false,
        })
    }

    /// Accepts only clients owned by this process's user or by root, as the
    /// Unix and shared-memory listeners do: a plain server on a loopback
    /// port must not let another local user write through it. The owner is
    /// read from the kernel's socket diagnostics ([`crate::peer_uid`]), so
    /// this works only for clients on this host; others are refused.
    pub fn same_user_only(mut self) -> Self {
        self.same_user = true;
        self
    }

    /// The bound socket address.
    pub fn socket_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl Listener for TcpListener {
    type Conn = TcpTransport;

    fn accept(&self) -> io::Result<TcpTransport> {
        let (stream, peer) = self.inner.accept()?;
        if self.same_user {
            check_same_user(peer, stream.local_addr()?)?;
        }
        TcpTransport::from_stream(stream, &self.cfg)
    }

    fn local_addr(&self) -> String {
        self.inner
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into())
    }
}
