//! `pfs mount`: a lazy, read-only view of a tree that a `pfs serve --dest`
//! holds (docs/wire.md §12).
//!
//! [`open`] runs the session's opening on a connection (MOUNT_HELLO, then
//! the whole listing: the directory appears after one round trip) and
//! starts the link thread. From then on a file's recipe travels when the
//! file is first read, and a chunk only when a read needs it and the local
//! cache (a `pfs-store` shared by every mount of the host) does not hold
//! it; every chunk is checked against its BLAKE3 before it is kept or
//! returned. [`Session::mount`] puts it in the kernel with `fuser`;
//! [`Session::read`] reads through the same path without FUSE.
//!
//! Modules: [`proto`] (the session's rules, sans-I/O), [`tree`] (the
//! listing), [`state`] (what readers and the link share), [`cache`] (the
//! local store), [`link`] (the connection's thread), [`fs`] (the kernel's
//! view), [`backing`] (passthrough's backing files), [`direct`] (the
//! zero-copy same-host client), [`prefetch`] (`--prefetch`).

pub mod backing;
pub mod cache;
pub mod direct;
pub mod fs;
pub mod link;
pub mod prefetch;
pub mod proto;
pub mod state;
pub mod tree;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pfs_transport::{RecvBuf, Transport};
use pfs_wire::frame::FRAME_HEADER_LEN;

pub use fs::STATS_XATTR;
pub use link::LinkError;
pub use proto::ProtoError;
pub use state::{Down, Eio, ReadError, Shared};

/// Largest DATA body this client takes.
pub const MAX_DATA_BODY: u32 = 4 << 20;
/// Default most listing entries taken.
pub const DEFAULT_MAX_ENTRIES: u32 = 1 << 24;

/// Settings of one mount.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Directory to mount, below what the key may read (empty: all).
    pub dir: Vec<u8>,
    /// The local chunk cache's directory.
    pub cache_dir: PathBuf,
    /// Its capacity in bytes.
    pub cache_capacity: u64,
    /// Longest a read waits for the server (and the opening for the listing).
    pub timeout: Duration,
    /// Most listing entries taken.
    pub max_entries: u32,
    /// FUSE worker threads.
    pub threads: usize,
    /// Let other users see the mount (`allow_other`).
    pub allow_other: bool,
    /// Name shown in `/proc/mounts`.
    pub fsname: String,
    /// Fetch every file's missing chunks in the background.
    pub prefetch: bool,
    /// Open files whose chunks are all local on a backing file the kernel
    /// reads directly (FUSE passthrough).
    pub passthrough: bool,
}

/// Why a mount could not start.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The connection failed during the opening.
    #[error(transparent)]
    Link(link::LinkError),
    /// The server broke the protocol or refused.
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// The local cache could not be opened.
    #[error("the local cache in {dir}: {source}")]
    Cache {
        /// Its directory.
        dir: PathBuf,
        /// Why.
        source: pfs_store::StoreError,
    },
    /// The kernel refused the mount.
    #[error("mounting at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A running session: the listing is in and the link thread runs.
#[derive(Debug)]
pub struct Session {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    link: Option<JoinHandle<()>>,
    prefetch: Option<JoinHandle<()>>,
    /// How long the opening took (MOUNT_HELLO to the last LIST).
    pub opened_in: Duration,
}

/// Opens connections to the server again after the link ends (the
/// reconnection must find the same tree).
pub type Connector = Box<dyn FnMut() -> Result<Box<dyn Transport>, ConnectError> + Send>;

/// Why a [`Connector`] could not connect (any error, its sources kept).
pub type ConnectError = Box<dyn std::error::Error + Send + Sync>;

/// What an opening needs to run again on a new connection.
#[derive(Debug, Clone)]
pub(crate) struct Reopen {
    pub params: proto::HelloParams,
    pub timeout: Duration,
    pub digest: [u8; 32],
}

/// Runs the opening (MOUNT_HELLO, MOUNT_ACCEPT, the listing) on `conn`.
/// Returns the session, the reader (it may hold bytes of what follows),
/// and the bytes read and written.
pub(crate) fn run_opening(
    conn: &mut dyn Transport,
    params: &proto::HelloParams,
    timeout: Duration,
) -> Result<(proto::Opened, RecvBuf, u64, u64), MountError> {
    let mut out = Vec::new();
    let mut opening = proto::Opening::new(params.clone(), &mut out);
    conn.write_all(&out)
        .map_err(|e| MountError::Link(LinkError::SendHello(e)))?;
    conn.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| MountError::Link(LinkError::ReadTimeout(e)))?;
    let mut reader = link::recv_buf(MAX_DATA_BODY as usize);
    let deadline = Instant::now() + timeout;
    loop {
        match link::next_frame(&mut reader, conn, MAX_DATA_BODY as usize).map_err(MountError::Link)? {
            link::Next::Idle => {
                if Instant::now() > deadline {
                    return Err(MountError::Link(LinkError::NoListing(timeout)));
                }
            }
            link::Next::Frame(h, len) => {
                let body = &reader.filled()[FRAME_HEADER_LEN..len];
                let opened = opening.on_frame(h.frame_type, h.flags, body)?;
                reader.consume(len);
                if let Some(o) = opened {
                    let bytes_in = reader.read_bytes();
                    return Ok((o, reader, bytes_in, out.len() as u64));
                }
            }
        }
    }
}

/// Runs the opening on `conn` and starts the link thread. With `reconnect`
/// ([`open_with`]), a link that ended (the server restarted or closed an
/// idle session, the network dropped) is opened again when a read needs
/// it, and the mount goes on if the server lists the same tree; while the
/// server cannot be reached, uncached reads fail with `EIO` (a failed
/// attempt is not repeated for a second).
pub fn open(conn: Box<dyn Transport>, cfg: &MountConfig) -> Result<Session, MountError> {
    open_with(conn, cfg, None)
}

/// [`open`], with a way to reconnect.
pub fn open_with(
    mut conn: Box<dyn Transport>,
    cfg: &MountConfig,
    reconnect: Option<Connector>,
) -> Result<Session, MountError> {
    let t0 = Instant::now();
    let params = proto::HelloParams {
        dir: cfg.dir.clone(),
        max_entries: cfg.max_entries,
        max_data_body: MAX_DATA_BODY,
        session_nonce: nonce(),
    };
    let (opened, reader, bytes_in, bytes_out) = run_opening(&mut *conn, &params, cfg.timeout)?;
    let again = reconnect.map(|c| {
        (
            c,
            Reopen {
                params,
                timeout: cfg.timeout,
                digest: opened.digest,
            },
        )
    });
    let cache = open_cache(cfg)?;
    let (tx, rx) = channel();
    let requests = proto::Requests::new(&opened.accept);
    let shared = Arc::new(Shared::new(
        opened.accept,
        opened.tree,
        cache,
        cfg.timeout,
        tx,
        again.is_some(),
    ));
    shared.stats.wire_in.fetch_add(bytes_in, Ordering::Relaxed);
    shared.stats.wire_out.fetch_add(bytes_out, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let link = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::Builder::new()
            .name("pfs-mount-link".into())
            .spawn(move || link::run(conn, reader, requests, rx, shared, stop, again))
            .map_err(|source| {
                MountError::Link(LinkError::Spawn {
                    thread: "link",
                    source,
                })
            })?
    };
    let prefetch = if cfg.prefetch {
        let (shared, stop) = (shared.clone(), stop.clone());
        Some(
            std::thread::Builder::new()
                .name("pfs-mount-prefetch".into())
                .spawn(move || prefetch::run(&shared, &stop))
                .map_err(|source| {
                    MountError::Link(LinkError::Spawn {
                        thread: "prefetch",
                        source,
                    })
                })?,
        )
    } else {
        None
    };
    Ok(Session {
        shared,
        stop,
        link: Some(link),
        prefetch,
        opened_in: t0.elapsed(),
    })
}

/// Opens the cache; one held by another process is waited for a moment
/// (a mount unmounted just now may still be closing it).
fn open_cache(cfg: &MountConfig) -> Result<cache::Cache, MountError> {
    let patience = Instant::now() + CACHE_LOCK_PATIENCE;
    loop {
        match cache::Cache::open(&cfg.cache_dir, cfg.cache_capacity) {
            Ok(c) => return Ok(c),
            Err(pfs_store::StoreError::Locked { .. }) if Instant::now() < patience => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(source) => {
                return Err(MountError::Cache {
                    dir: cfg.cache_dir.clone(),
                    source,
                })
            }
        }
    }
}

/// How long a cache held by another process is waited for.
const CACHE_LOCK_PATIENCE: Duration = Duration::from_secs(5);

fn nonce() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

impl Session {
    /// What readers and the link share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Reads `[offset, offset + len)` of the file at `path` (below the
    /// mounted directory) through the same path the mount uses.
    pub fn read(&self, path: &str, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let ino = self
            .shared
            .tree
            .resolve(path.as_bytes())
            .ok_or(ReadError::NotAFile)?;
        let mut out = Vec::new();
        self.shared.read(ino, offset, &mut out, len)?;
        Ok(out)
    }

    /// The kernel configuration of a mount of this session.
    pub fn fuse_config(cfg: &MountConfig) -> fuser::Config {
        use fuser::MountOption as O;
        let mut c = fuser::Config::default();
        c.mount_options = vec![
            O::RO,
            O::FSName(cfg.fsname.clone()),
            O::Subtype("pfs".into()),
            O::DefaultPermissions,
            O::NoAtime,
            O::NoDev,
            O::NoSuid,
        ];
        if cfg.allow_other {
            c.acl = fuser::SessionACL::All;
        }
        c.n_threads = Some(cfg.threads.max(1));
        c.clone_fd = cfg.threads > 1;
        c
    }

    /// Mounts at `mountpoint` and serves from background threads until
    /// unmounted (`fusermount -u`, `pfs umount`) or the handle is dropped.
    pub fn mount(
        &self,
        mountpoint: &Path,
        cfg: &MountConfig,
    ) -> Result<fuser::BackgroundSession, MountError> {
        let fs = fs::MountFs::new(
            self.shared.clone(),
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
            cfg.passthrough.then(|| cfg.cache_dir.join("files")),
        );
        fuser::spawn_mount(fs, mountpoint, &Self::fuse_config(cfg)).map_err(|source| MountError::Mount {
            path: mountpoint.to_path_buf(),
            source,
        })
    }

    /// Stops the link (and prefetch) and returns the counters.
    pub fn close(mut self) -> serde_json::Value {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.prefetch.take() {
            let _ = p.join();
        }
        if let Some(l) = self.link.take() {
            let _ = l.join();
        }
        self.report()
    }

    /// Counters and tree totals as JSON.
    pub fn report(&self) -> serde_json::Value {
        let (chunks, bytes) = self.shared.cache.held();
        let mut v = self.shared.stats.to_json();
        if let Some(m) = v.as_object_mut() {
            m.insert("entries".into(), self.shared.tree.entries().into());
            m.insert("files".into(), self.shared.tree.files().into());
            m.insert("tree_bytes".into(), self.shared.tree.bytes().into());
            m.insert("cache_chunks".into(), chunks.into());
            m.insert("cache_bytes".into(), bytes.into());
            m.insert("opened_ms".into(), (self.opened_in.as_secs_f64() * 1e3).into());
            if let Some(why) = self.shared.down() {
                m.insert("link".into(), why.into());
            }
        }
        v
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
