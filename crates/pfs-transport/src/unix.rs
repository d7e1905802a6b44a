//! Unix-domain stream transport: same-host peers without the TCP stack.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener as StdUnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Listener, Transport, TransportError};

/// One Unix stream connection.
#[derive(Debug)]
pub struct UnixTransport {
    stream: UnixStream,
    peer: String,
}

impl UnixTransport {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> Result<Self, TransportError> {
        let stream = UnixStream::connect(path).map_err(|source| TransportError::Connect {
            addr: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            stream,
            peer: path.display().to_string(),
        })
    }

    /// A connected pair (tests, same-process peers).
    pub fn pair() -> io::Result<(Self, Self)> {
        let (a, b) = UnixStream::pair()?;
        Ok((
            Self {
                stream: a,
                peer: "pair".into(),
            },
            Self {
                stream: b,
                peer: "pair".into(),
            },
        ))
    }
}

impl Transport for UnixTransport {
    fn kind(&self) -> &'static str {
        "UNIX"
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

/// A listening Unix socket; removes its path on drop.
#[derive(Debug)]
pub struct UnixListener {
    inner: StdUnixListener,
    path: PathBuf,
}

impl UnixListener {
    /// Binds `path` (which must not exist).
    pub fn bind(path: &Path) -> Result<Self, TransportError> {
        let inner = StdUnixListener::bind(path).map_err(|source| TransportError::Listen {
            addr: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            inner,
            path: path.to_path_buf(),
        })
    }
}

impl Drop for UnixListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Listener for UnixListener {
    type Conn = UnixTransport;

    /// Accepts only this server's own user or root (`SO_PEERCRED`), as the
    /// shared-memory transport does: a plain session over a socket another
    /// user can reach must not let that user write.
    fn accept(&self) -> io::Result<UnixTransport> {
        let (stream, _) = self.inner.accept()?;
        let cred = rustix::net::sockopt::socket_peercred(&stream)?;
        let me = rustix::process::getuid();
        if cred.uid != me && !cred.uid.is_root() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refused a Unix-socket client of uid {} (this server runs as uid {})",
                    cred.uid.as_raw(),
                    me.as_raw()
                ),
            ));
        }
        Ok(UnixTransport {
            stream,
            peer: self.path.display().to_string(),
        })
    }

    fn local_addr(&self) -> String {
        self.path.display().to_string()
    }
}
