//! SIGTERM and SIGINT on a server: stop accepting at once, give running
//! sessions a grace period (a second signal ends it), then cut them. The
//! server's loop returns once every session has ended.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_session::server::Shutdown;
use pfs_transport::{AnyListener, Listener};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use signal_hook::low_level::signal_name;

/// Why signals could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The listener's address (to wake its accept) could not be read.
    #[error("the listening address")]
    Address(#[source] std::io::Error),
    /// The signal handlers could not be installed.
    #[error("installing the signal handlers")]
    Signals(#[source] std::io::Error),
    /// The thread that waits for signals could not be started.
    #[error("starting the signal thread")]
    Thread(#[source] std::io::Error),
}

/// How long cut sessions have to end before the process exits anyway (a
/// session blocked writing to a peer that never reads sees no cut).
pub const CUT_BOUND: Duration = Duration::from_secs(10);

/// Where to connect to wake a listener blocked in `accept`.
#[derive(Debug)]
enum Wake {
    Tcp(SocketAddr),
    Path(PathBuf),
    Udp(pfs_transport::udp::UdpWaker),
}

impl Wake {
    fn of(listener: &AnyListener) -> Result<Self, ShutdownError> {
        Ok(match listener {
            AnyListener::Tcp(l) => {
                let mut addr = l.socket_addr().map_err(ShutdownError::Address)?;
                // Bound to every address: connect through loopback.
                if addr.ip().is_unspecified() {
                    addr.set_ip(match addr.ip() {
                        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    });
                }
                Self::Tcp(addr)
            }
            // The shm rendezvous is a Unix socket too: a connection that
            // closes at once makes its accept return an error.
            AnyListener::Unix(_) | AnyListener::Shm(_) => Self::Path(listener.local_addr().into()),
            AnyListener::Udp(l) => Self::Udp(l.waker()),
        })
    }

    fn wake(&self) {
        let result = match self {
            Self::Tcp(a) => TcpStream::connect_timeout(a, Duration::from_secs(1)).map(drop),
            Self::Path(p) => UnixStream::connect(p).map(drop),
            Self::Udp(w) => w.wake(),
        };
        if let Err(e) = result {
            tracing::debug!("waking the accept loop: {e}");
        }
    }
}

/// Handles SIGTERM and SIGINT from now on, on a thread of their own: the
/// first stops `shutdown` (no new sessions) and wakes `listener`'s accept;
/// after `grace`, or at a second signal, running sessions are cut; if they
/// have not ended [`CUT_BOUND`] later the process exits with status 1.
///
/// ```no_run
/// use packetfs::transport::{AnyListener, TcpConfig, TcpListener};
/// let listener = AnyListener::Tcp(TcpListener::bind("127.0.0.1:7878", TcpConfig::default())?);
/// let shutdown = std::sync::Arc::new(packetfs::session::server::Shutdown::default());
/// packetfs::shutdown::watch(&listener, shutdown.clone(), std::time::Duration::from_secs(30))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn watch(listener: &AnyListener, shutdown: Arc<Shutdown>, grace: Duration) -> Result<(), ShutdownError> {
    let wake = Wake::of(listener)?;
    let mut signals = Signals::new([SIGTERM, SIGINT]).map_err(ShutdownError::Signals)?;
    std::thread::Builder::new()
        .name("pfs-signals".into())
        .spawn(move || {
            let Some(sig) = signals.forever().next() else {
                return;
            };
            tracing::info!(
                signal = signal_name(sig).unwrap_or("signal"),
                grace_s = grace.as_secs_f64(),
                "stopping: no new sessions; running sessions have the grace period to finish"
            );
            shutdown.stop();
            wake.wake();
            let until = Instant::now() + grace;
            let second = loop {
                if let Some(s) = signals.pending().next() {
                    break Some(s);
                }
                if Instant::now() >= until {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match second {
                Some(s) => tracing::warn!(
                    signal = signal_name(s).unwrap_or("signal"),
                    "second signal: cutting running sessions"
                ),
                None => tracing::info!("grace period over: cutting running sessions"),
            }
            shutdown.cut();
            std::thread::sleep(CUT_BOUND);
            tracing::error!("sessions still running {CUT_BOUND:?} after being cut; exiting");
            std::process::exit(1);
        })
        .map_err(ShutdownError::Thread)?;
    Ok(())
}
