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

/// Splits `ADDR[:REMOTE_DIR]` (`pfs send PATH… --to`, `pfs mount`): for a
/// `network` address (TCP, UDP) the part after `host:port` (or
/// `[v6]:port`), for socket paths the part after the first `:`.
///
/// ```
/// use packetfs::files::split_target;
/// assert_eq!(split_target("h:7878:a/b/", true), ("h:7878".into(), "a/b".into()));
/// assert_eq!(split_target("/tmp/p.sock:in", false), ("/tmp/p.sock".into(), "in".into()));
/// ```
pub fn split_target(to: &str, network: bool) -> (String, String) {
    let split_at = if network {
        let port_colon = if to.starts_with('[') {
            to.find("]:").map(|i| i + 1)
        } else {
            to.find(':')
        };
        port_colon.and_then(|p| to[p + 1..].find(':').map(|q| p + 1 + q))
    } else {
        to.find(':')
    };
    match split_at {
        Some(i) => (to[..i].to_string(), to[i + 1..].trim_matches('/').to_string()),
        None => (to.to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_split() {
        let t = true;
        assert_eq!(
            split_target("127.0.0.1:7878", t),
            ("127.0.0.1:7878".into(), String::new())
        );
        assert_eq!(split_target("h:7878:a/b/", t), ("h:7878".into(), "a/b".into()));
        assert_eq!(split_target("[::1]:7878:x", t), ("[::1]:7878".into(), "x".into()));
        assert_eq!(
            split_target("[::1]:7878", t),
            ("[::1]:7878".into(), String::new())
        );
        let s = false;
        assert_eq!(
            split_target("/tmp/p.sock:in", s),
            ("/tmp/p.sock".into(), "in".into())
        );
        assert_eq!(
            split_target("/tmp/p.sock", s),
            ("/tmp/p.sock".into(), String::new())
        );
    }
}
