//! The mount client: a lazy, read-only view of a tree a `pfs serve --dest`
//! holds. [`open`] runs the opening on a connection (the whole listing
//! arrives in one round trip); a file's recipe travels when it is first
//! read and a chunk only when a read needs it and the local cache lacks it.
//! [`Session::read`] reads without FUSE; [`Session::mount`] puts the view
//! in the kernel. Everything here is `pfs-mount`'s, but [`unmount`],
//! [`cache_name`] and how a mount process ends ([`Stopper`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use packetfs::gram::Target;
//! use packetfs::mount::{open, MountConfig};
//!
//! let conn = Target::Tcp { addr: "127.0.0.1:7878".into(), sock_buf: 0 }.connect()?;
//! let cfg = MountConfig {
//!     dir: Vec::new(),
//!     cache_dir: "/var/tmp/pfs-mount-cache".into(),
//!     cache_capacity: 1 << 30,
//!     timeout: Duration::from_secs(30),
//!     max_entries: packetfs::mount::DEFAULT_MAX_ENTRIES,
//!     threads: 2,
//!     allow_other: false,
//!     fsname: "pfs:127.0.0.1:7878".into(),
//!     prefetch: false,
//!     passthrough: false,
//! };
//! let session = open(conn, &cfg)?;
//! if let Ok(head) = session.read("docs/README.md", 0, 4096) {
//!     println!("{} bytes", head.len());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

pub use pfs_mount::{
    open, open_with, MountConfig, MountError, ReadError, Session, DEFAULT_MAX_ENTRIES, STATS_XATTR,
};
pub use pfs_session::{serve_mount, MountServerConfig, MountServerOutcome};

/// Why a mount point could not be unmounted.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    /// umount2(2) as root failed.
    #[error("umount {}: {errno}{}", .path.display(), if *.errno == rustix::io::Errno::BUSY { " (files are open there; --lazy detaches it now)" } else { "" })]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// What the kernel said.
        errno: rustix::io::Errno,
    },
    /// The FUSE helper ran and failed.
    #[error("{helper} -u {} failed ({status})", .path.display())]
    Helper {
        /// `fusermount3` or `fusermount`.
        helper: &'static str,
        /// The mount point.
        path: PathBuf,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// Not root, and no FUSE helper could be started.
    #[error("unmounting {} needs root or fusermount3 (apt install fuse3): {}", .path.display(), .last.as_ref().map_or_else(String::new, |e| e.to_string()))]
    NoHelper {
        /// The mount point.
        path: PathBuf,
        /// Why the last helper tried could not be started.
        last: Option<std::io::Error>,
    },
}

/// Unmounts `path` (`lazy`: detached now, released when the last file
/// closes) as root with umount2(2), else through `fusermount3 -u` (or
/// `fusermount -u`), the setuid helper FUSE provides to users.
///
/// ```no_run
/// packetfs::mount::unmount(std::path::Path::new("/mnt/pfs"), false)?;
/// # Ok::<(), packetfs::mount::UnmountError>(())
/// ```
pub fn unmount(path: &Path, lazy: bool) -> Result<(), UnmountError> {
    if rustix::process::geteuid().is_root() {
        let flags = if lazy {
            rustix::mount::UnmountFlags::DETACH
        } else {
            rustix::mount::UnmountFlags::empty()
        };
        return rustix::mount::unmount(path, flags).map_err(|errno| UnmountError::Unmount {
            path: path.to_path_buf(),
            errno,
        });
    }
    let mut last = None;
    for helper in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(helper);
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        match cmd.arg(path).status() {
            Ok(s) if s.success() => return Ok(()),
            Ok(status) => {
                return Err(UnmountError::Helper {
                    helper,
                    path: path.to_path_buf(),
                    status,
                })
            }
            Err(e) => last = Some(e),
        }
    }
    Err(UnmountError::NoHelper {
        path: path.to_path_buf(),
        last,
    })
}

/// A directory name for a server address: the mount cache of one server
/// (`127.0.0.1:7878` → `127.0.0.1_7878`).
///
/// ```
/// assert_eq!(packetfs::mount::cache_name("[::1]:7878"), "___1__7878");
/// ```
pub fn cache_name(addr: &str) -> String {
    addr.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// How long a mount process may take to end once a signal came or the
/// mount is gone: an open file keeping a lazily unmounted mount alive, a
/// link stuck connecting to an unreachable server. Past it, it exits.
pub const CLOSE_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends the process (status 0) `bound` from now, from a thread that
/// sleeps: what was asked, an unmount or a signal, is done; the rest must
/// not keep the process, and with it the cache lock, alive (the cache is
/// crash-safe; its lock goes with the process).
pub fn exit_after(bound: std::time::Duration, why: &'static str) {
    let spawned = std::thread::Builder::new()
        .name("pfs-mount-exit".into())
        .spawn(move || {
            std::thread::sleep(bound);
            tracing::warn!("{why} {bound:?} later: exiting");
            std::process::exit(0);
        });
    if spawned.is_err() {
        // No thread for the bound: end now rather than risk no end.
        std::process::exit(0);
    }
}

/// A mount process's way to its end on SIGINT, SIGTERM and SIGHUP. The
/// first signal unmounts lazily (open files keep working until closed;
/// the mount ends then) — at once if the mount is up, else as soon as it
/// is ([`Stopper::mounted`]) — and bounds what is left at [`CLOSE_BOUND`];
/// a second signal exits at once. Signals are handled until the process
/// ends, so none is swallowed: a handler that stopped at its first unmount
/// let a mount kept alive by an open file (or one already gone while its
/// link was still closing) ignore every later SIGTERM, holding its cache
/// lock.
#[derive(Debug)]
pub struct Stopper {
    state: std::sync::Arc<StopState>,
    handle: signal_hook::iterator::Handle,
    waiter: std::thread::JoinHandle<()>,
}

#[derive(Debug)]
struct StopState {
    at: PathBuf,
    /// (the mount is up, a signal came).
    flags: std::sync::Mutex<(bool, bool)>,
}

impl StopState {
    fn flags(&self) -> std::sync::MutexGuard<'_, (bool, bool)> {
        self.flags.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn signalled(&self, sig: i32) {
        let mut st = self.flags();
        if std::mem::replace(&mut st.1, true) {
            tracing::warn!("signal {sig} again: exiting now");
            std::process::exit(0);
        }
        tracing::info!("signal {sig}: unmounting {}", self.at.display());
        if st.0 {
            self.unmount();
        }
        exit_after(CLOSE_BOUND, "still running after the signal");
    }

    fn unmount(&self) {
        if let Err(e) = unmount(&self.at, true) {
            // Already gone (unmounted from outside): the bound ends us.
            tracing::warn!("unmounting {}: {e}", self.at.display());
        }
    }
}

impl Stopper {
    /// Handles the signals from now on, for the mount at `at` (install it
    /// before mounting, so no signal can leave a dead mount behind).
    pub fn install(at: PathBuf) -> std::io::Result<Self> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = signals.handle();
        let state = std::sync::Arc::new(StopState {
            at,
            flags: std::sync::Mutex::new((false, false)),
        });
        let waiter = {
            let state = state.clone();
            std::thread::Builder::new()
                .name("pfs-mount-signals".into())
                .spawn(move || {
                    for sig in signals.forever() {
                        state.signalled(sig);
                    }
                })?
        };
        Ok(Self {
            state,
            handle,
            waiter,
        })
    }

    /// The mount is up: unmounted now if a signal came before.
    pub fn mounted(&self) {
        let mut st = self.state.flags();
        st.0 = true;
        if st.1 {
            self.state.unmount();
        }
    }

    /// The mount is gone (or never came): signals are no longer handled
    /// here, and what is left of the process has [`CLOSE_BOUND`] to end.
    pub fn unmounted(self) {
        self.handle.close();
        let _ = self.waiter.join();
        exit_after(CLOSE_BOUND, "the mount is gone but its link has not stopped");
    }
}

/// The environment variable by which a `pfs mount` started in the
/// foreground knows that the `pfs mount` that started it waits for its
/// word ([`Readiness`]).
pub const READY_ENV: &str = "PFS_MOUNT_DAEMON";

/// Tells a waiting `pfs mount` how it went, on the standard output it
/// reads (a plain foreground run has no one waiting).
#[derive(Debug)]
pub struct Readiness(pub bool);

impl Readiness {
    /// Whether this process is waited for ([`READY_ENV`], then removed).
    pub fn from_env() -> Self {
        let waited_for = std::env::var_os(READY_ENV).is_some();
        std::env::remove_var(READY_ENV);
        Self(waited_for)
    }

    /// One line, once; nothing is written to the standard output after it
    /// (the reader is gone).
    pub fn say(&mut self, word: &str) {
        use std::io::Write;
        if std::mem::take(&mut self.0) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(word.as_bytes());
            let _ = out.flush();
        }
    }
}
