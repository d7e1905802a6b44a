//! File sends and receives: a sender walks files and trees, cuts them into
//! content-defined chunks and asks the receiver which it lacks; only those
//! travel, the rest are referenced. The receiver rebuilds each file in its
//! destination from chunks it already holds (its index or a store) plus
//! the literal ones, checks every chunk's BLAKE3, and reports.
//!
//! Sender: [`scan_items`] (or build [`FilesItem`]s), then [`send_files`]
//! with a [`FilesSenderConfig`] and a [`LocalPrepare`] on a connection.
//! Receiver: [`receive_files`] into a [`DestRoot`], or [`serve_files`] for
//! a listener. The pieces below (chunking, manifests, the walk) are
//! `pfs-files`'s; the sessions are `pfs-session`'s.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use pfs_files::{
    escape, escape_path, ChunkParams, DestRoot, Escaped, Excludes, FilesError, Manifest, RelPath, WalkConfig,
    XattrScope,
};
pub use pfs_session::files::{
    itemize, receive_files, scan_items, send_files, ChunkIndex, DeletedKind, FilesItem, FilesProgress,
    FilesReceiverConfig, FilesReceiverOutcome, FilesSenderConfig, FilesSenderOutcome, ItemKind,
    ItemizeConfig, Itemized, LocalPrepare, ScanConfig, Scanned,
};
pub use pfs_session::{serve_files, FilesPlace, FilesPlaces, FilesSessionOutcome};
pub use pfs_store::{Durability, Store, StoreConfig};

/// Sender settings with the defaults `pfs send PATH…` uses: into the
/// receiver's destination root (no remote directory), probing for files the
/// receiver already holds, no compression, no deletion, a five-minute reply
/// timeout, a fresh session nonce. Change fields with struct update syntax.
///
/// ```
/// use packetfs::files::{sender_config, ChunkParams, FilesSenderConfig};
/// let cfg = FilesSenderConfig { remote_dir: b"backups".to_vec(), ..sender_config(&ChunkParams::default()) };
/// assert!(cfg.probe && !cfg.dry_run);
/// ```
pub fn sender_config(params: &ChunkParams) -> FilesSenderConfig {
    FilesSenderConfig {
        remote_dir: Vec::new(),
        dry_run: false,
        compress: None,
        chunk_avg: params.avg(),
        index_cache_dir: None,
        reply_timeout: Duration::from_secs(300),
        session_nonce: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        probe: true,
        probe_all: false,
        delete: None,
        checksum: false,
        bwlimit: None,
        preserve: Default::default(),
        sparse: true,
        stream_min: Some(pfs_session::files::DEFAULT_STREAM_MIN),
        top_mtime_ns: None,
    }
}

/// Why an `ADDR[:REMOTE_DIR]` does not name a receiver: a usage mistake,
/// each naming the right form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// A network address without `:PORT` (`10.0.0.1`).
    #[error("{to:?} has no port: the form is HOST:PORT[:DIR], e.g. {to}:7878")]
    NoPort {
        /// The address given.
        to: String,
    },
    /// Nothing before the port's `:` (or an IPv6 address without brackets).
    #[error("{to:?} has no host: the form is HOST:PORT[:DIR] ([V6ADDR]:PORT[:DIR] for IPv6)")]
    NoHost {
        /// The address given.
        to: String,
    },
    /// What stands where the port goes is not one (rsync's `host:dir`).
    #[error("{to:?}: {port:?} is not a port (1-65535): the form is HOST:PORT[:DIR], e.g. host:7878:{port} (rsync's HOST:DIR has no port)")]
    BadPort {
        /// The address given.
        to: String,
        /// The word where the port goes.
        port: String,
    },
    /// `host:7878:/etc`: the directory is beneath the receiver's `--dest`,
    /// so an absolute one would be re-rooted, not honoured.
    #[error("{to:?}: the remote directory {dir:?} is absolute; it is a directory beneath the receiver's --dest: give it relative (HOST:PORT:{})", dir.trim_start_matches('/'))]
    AbsoluteDir {
        /// The address given.
        to: String,
        /// The directory given.
        dir: String,
    },
    /// A remote directory where no files are sent (a blob session).
    #[error("{to:?}: a remote directory is for files (pfs send PATH… --to HOST:PORT:DIR); a blob session takes HOST:PORT")]
    DirWithoutFiles {
        /// The address given.
        to: String,
    },
}

/// Splits and checks `ADDR[:REMOTE_DIR]` (`pfs send PATH… --to`, `pfs
/// mount`): for a `network` address (TCP, UDP) `HOST:PORT` (or
/// `[V6]:PORT`) and the part after it, for socket paths the part after the
/// first `:`. The remote directory loses trailing `/`s; an absolute one is
/// refused, as are a missing or non-numeric port and a missing host.
///
/// ```
/// use packetfs::files::{parse_target, TargetError};
/// assert_eq!(parse_target("h:7878:a/b/", true), Ok(("h:7878".into(), "a/b".into())));
/// assert_eq!(parse_target("/tmp/p.sock:in", false), Ok(("/tmp/p.sock".into(), "in".into())));
/// assert!(matches!(parse_target("h:backups", true), Err(TargetError::BadPort { .. })));
/// ```
pub fn parse_target(to: &str, network: bool) -> Result<(String, String), TargetError> {
    let (addr, dir) = if network {
        let port_colon = if to.starts_with('[') {
            to.find("]:").map(|i| i + 1)
        } else {
            to.find(':')
        };
        let Some(p) = port_colon else {
            return Err(TargetError::NoPort { to: to.to_string() });
        };
        let host = to[..p].trim_start_matches('[').trim_end_matches(']');
        let rest = &to[p + 1..];
        let (port, dir) = rest.split_once(':').unwrap_or((rest, ""));
        if port.parse::<u16>().map_or(true, |n| n == 0) {
            // `::1:7878`: the host is empty and the port is `:1:…`.
            if host.is_empty() {
                return Err(TargetError::NoHost { to: to.to_string() });
            }
            return Err(TargetError::BadPort {
                to: to.to_string(),
                port: port.to_string(),
            });
        }
        if host.is_empty() {
            return Err(TargetError::NoHost { to: to.to_string() });
        }
        (&to[..p + 1 + port.len()], dir)
    } else {
        to.split_once(':').unwrap_or((to, ""))
    };
    if dir.starts_with('/') {
        return Err(TargetError::AbsoluteDir {
            to: to.to_string(),
            dir: dir.to_string(),
        });
    }
    Ok((addr.to_string(), dir.trim_end_matches('/').to_string()))
}

/// [`parse_target`] for a blob session: `HOST:PORT` (or a socket path),
/// with no remote directory.
pub fn parse_blob_target(to: &str, network: bool) -> Result<String, TargetError> {
    match parse_target(to, network)? {
        (addr, dir) if dir.is_empty() => Ok(addr),
        _ => Err(TargetError::DirWithoutFiles { to: to.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_split() {
        let t = true;
        let ok = |to: &str, net| parse_target(to, net).unwrap();
        assert_eq!(ok("127.0.0.1:7878", t), ("127.0.0.1:7878".into(), String::new()));
        assert_eq!(ok("h:7878:a/b/", t), ("h:7878".into(), "a/b".into()));
        assert_eq!(ok("[::1]:7878:x", t), ("[::1]:7878".into(), "x".into()));
        assert_eq!(ok("[::1]:7878", t), ("[::1]:7878".into(), String::new()));
        let s = false;
        assert_eq!(ok("/tmp/p.sock:in", s), ("/tmp/p.sock".into(), "in".into()));
        assert_eq!(ok("/tmp/p.sock", s), ("/tmp/p.sock".into(), String::new()));
    }

    #[test]
    fn address_mistakes_name_the_form() {
        let err = |to: &str, net| parse_target(to, net).unwrap_err();
        assert!(matches!(err("10.0.0.1", true), TargetError::NoPort { .. }));
        assert!(matches!(err("[::1]", true), TargetError::NoPort { .. }));
        assert!(matches!(err("::1:7878", true), TargetError::NoHost { .. }));
        assert!(matches!(err(":7878", true), TargetError::NoHost { .. }));
        assert_eq!(
            err("host:backups", true),
            TargetError::BadPort {
                to: "host:backups".into(),
                port: "backups".into()
            }
        );
        assert!(matches!(err("host:0", true), TargetError::BadPort { .. }));
        assert!(matches!(err("host:70000:x", true), TargetError::BadPort { .. }));
        assert_eq!(
            err("host:7878:/etc", true),
            TargetError::AbsoluteDir {
                to: "host:7878:/etc".into(),
                dir: "/etc".into()
            }
        );
        assert!(matches!(
            err("/tmp/p.sock:/etc", false),
            TargetError::AbsoluteDir { .. }
        ));
        for e in [
            err("10.0.0.1", true),
            err("host:dir", true),
            err("h:1:/etc", true),
        ] {
            assert!(e.to_string().contains("HOST:PORT"), "{e}");
        }
    }
}
