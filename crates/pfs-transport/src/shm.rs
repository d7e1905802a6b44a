//! Shared-memory transport: the frame byte stream carried over a pair of
//! `pfs-ipc` rings between two processes on one host.
//!
//! A vectored write becomes one ring record (or several, for writes larger
//! than half the ring), gathered straight into loaned ring space: one copy,
//! no system call while the peer keeps up. Reads copy out of the ring
//! ([`pfs_ipc::Receiver::read_stream`]). End of stream is the peer closing
//! its ring; a peer that dies is reported as `ConnectionReset` within the
//! liveness interval of the wait options, never a hang.

use std::io::{self, IoSlice};
use std::path::Path;
use std::time::Duration;

use pfs_ipc::{Endpoint, IpcError, IpcListener, RendezvousConfig, WaitConfig, WaitStrategy};

use crate::{Listener, Transport, TransportError};

/// Settings of a shared-memory connection.
#[derive(Debug, Clone)]
pub struct ShmConfig {
    /// Bytes of each direction's ring (server side; a power of two).
    pub ring_bytes: usize,
    /// How an idle side waits: busy-spin, spin-then-yield or spin-then-futex.
    pub wait: WaitStrategy,
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self {
            // Room for a whole payload gram (1 MiB slab) in one record.
            ring_bytes: 4 << 20,
            // Near-zero idle CPU; the fast path still has no system call.
            wait: WaitStrategy::SpinFutex,
        }
    }
}

impl ShmConfig {
    fn wait_config(&self) -> WaitConfig {
        WaitConfig::with(self.wait)
    }
}

/// One shared-memory connection.
#[derive(Debug)]
pub struct ShmTransport {
    ep: Endpoint,
    peer: String,
    read_timeout: Option<Duration>,
    /// How long a write waits for ring space.
    write_timeout: Option<Duration>,
}

impl ShmTransport {
    /// Connects to the `pfs serve --transport shm` socket at `path`.
    pub fn connect(path: &Path, cfg: &ShmConfig) -> Result<Self, TransportError> {
        let ep = Endpoint::connect(path, cfg.wait_config()).map_err(|e| TransportError::Connect {
            addr: path.display().to_string(),
            source: to_io(e),
        })?;
        Ok(Self::new(ep, path))
    }

    fn new(ep: Endpoint, path: &Path) -> Self {
        let peer = format!("{} (pid {})", path.display(), ep.peer_pid());
        Self {
            ep,
            peer,
            read_timeout: None,
            write_timeout: None,
        }
    }
}

/// The io::Error a transport user expects for each IPC failure.
fn to_io(e: IpcError) -> io::Error {
    let kind = match &e {
        IpcError::Io { source, .. } | IpcError::PathIo { source, .. } | IpcError::Memfd { source, .. } => {
            source.kind()
        }
        IpcError::NotASocket { .. } => io::ErrorKind::AlreadyExists,
        IpcError::AddrInUse { .. } => io::ErrorKind::AddrInUse,
        IpcError::WouldBlock => io::ErrorKind::WouldBlock,
        IpcError::Timeout(_) => io::ErrorKind::TimedOut,
        IpcError::PeerDied { .. } | IpcError::PeerClosed => io::ErrorKind::ConnectionReset,
        IpcError::Closed => io::ErrorKind::BrokenPipe,
        IpcError::Refused(_) | IpcError::RefusedByServer { .. } => io::ErrorKind::ConnectionRefused,
        IpcError::Protocol(_)
        | IpcError::Handshake(_)
        | IpcError::RefInByteStream
        | IpcError::BadReference { .. } => io::ErrorKind::InvalidData,
        IpcError::BadRingSize { .. } | IpcError::TooLarge { .. } | IpcError::OutOfBlob { .. } => {
            io::ErrorKind::InvalidInput
        }
        // IpcError is non_exhaustive: a new variant is a local failure until mapped.
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

impl Transport for ShmTransport {
    fn kind(&self) -> &'static str {
        "SHM"
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let len = total.min(self.ep.max_message());
        if len == 0 {
            return Ok(0);
        }
        let mut loan = self.ep.loan_timeout(len, self.write_timeout).map_err(to_io)?;
        let mut at = 0;
        for b in bufs {
            let n = b.len().min(len - at);
            loan[at..at + n].copy_from_slice(&b[..n]);
            at += n;
            if at == len {
                break;
            }
        }
        loan.commit();
        Ok(len)
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.ep.read_stream(buf, self.read_timeout).map_err(to_io)
    }

    fn read_ready(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.ep.read_stream_ready(buf).map_err(to_io)
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if timeout == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero read timeout is not a timeout",
            ));
        }
        self.read_timeout = timeout;
        Ok(())
    }

    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if timeout == Some(Duration::ZERO) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero write timeout is not a timeout",
            ));
        }
        // The ring has no socket option: the wait for space is bounded instead.
        self.write_timeout = timeout;
        Ok(())
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.ep.close();
        Ok(())
    }
}

/// A listening shared-memory rendezvous socket (mode 0600, same-user
/// clients only); removes its path on drop.
#[derive(Debug)]
pub struct ShmListener {
    inner: IpcListener,
}

impl ShmListener {
    /// Binds the rendezvous socket at `path` (a stale socket is replaced;
    /// a live server or a non-socket path is refused).
    pub fn bind(path: &Path, cfg: &ShmConfig) -> Result<Self, TransportError> {
        let opts = RendezvousConfig {
            ring_bytes: cfg.ring_bytes,
            wait: cfg.wait_config(),
            ..RendezvousConfig::default()
        };
        let inner = IpcListener::bind(path, opts).map_err(|e| TransportError::Listen {
            addr: path.display().to_string(),
            source: to_io(e),
        })?;
        Ok(Self { inner })
    }
}

impl Listener for ShmListener {
    type Conn = ShmTransport;

    fn accept(&self) -> io::Result<ShmTransport> {
        let ep = self.inner.accept().map_err(to_io)?;
        Ok(ShmTransport::new(ep, self.inner.path()))
    }

    fn local_addr(&self) -> String {
        self.inner.path().display().to_string()
    }
}
