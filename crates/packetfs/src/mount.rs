//! The mount client: a lazy, read-only view of a tree a `pfs serve --dest`
//! holds. [`open`] runs the opening on a connection (the whole listing
//! arrives in one round trip); a file's recipe travels when it is first
//! read and a chunk only when a read needs it and the local cache lacks it.
//! [`Session::read`] reads without FUSE; [`Session::mount`] puts the view
//! in the kernel. Everything here is `pfs-mount`'s, but [`unmount`] and
//! [`cache_name`].
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
