//! The zero-copy same-host client (`pfs mount --direct SOCKET`): an
//! application on the mounting host opens a mounted file through `pfs-ipc`
//! and reads it from shared memory, with no system call per read — the
//! ZUFS idea of letting the application map the server's resources.
//!
//! The mount serves a `pfs-ipc` rendezvous socket with one shared blob (a
//! sealed memfd). `open` is one request/response on the rings: the mount
//! makes sure every chunk of the file is in its cache (fetching what is
//! not), copies the checked chunks once into the blob, and answers with a
//! blob reference `(offset, len)`. From then on the application reads the
//! file as a slice of its mapping of the blob ([`DirectClient::bytes`],
//! [`DirectClient::read_at`]): a `memcpy`, no system call, no daemon. A
//! file is placed once per mount and never moves; the blob's size bounds
//! what can be open this way (`--direct-size`).
//!
//! Who may connect: processes of the mount's own user (`SO_PEERCRED`), who
//! could read the cache anyway; such a process can also write the blob,
//! so the blob is no boundary between processes of that user.
//!
//! Requests: `O` + path below the mounted directory. Answers: a blob
//! reference for the file, or inline `E` + a message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pfs_ipc::{Endpoint, IpcError, IpcListener, MsgKind, RendezvousConfig, WaitConfig, WaitStrategy};

use crate::proto::Want;
use crate::state::{ReadError, Shared};
use crate::tree::Kind;

/// Alignment of placed files in the blob.
const ALIGN: u64 = 4096;

/// Why a direct open failed.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    /// The IPC layer failed (connect, rings, peer gone).
    #[error(transparent)]
    Ipc(#[from] IpcError),
    /// The mount refused the open; its reason, as it sent it.
    #[error("{reason}")]
    Refused {
        /// The mount's reason (a path and why it cannot be placed).
        reason: String,
    },
    /// The direct listener's thread could not be started.
    #[error("starting the direct listener: {0}")]
    Spawn(std::io::Error),
}

/// Why the mount could not place a file for a direct client (sent to the
/// client as its refusal).
#[derive(Debug, thiserror::Error)]
enum Unplaced {
    #[error("{path}: no such file in the mount")]
    NoSuchFile { path: String },
    #[error("{path}: not a regular file")]
    NotAFile { path: String },
    #[error("{path}: another open is still placing it")]
    Busy { path: String },
    #[error(
        "{path}: {size} bytes do not fit the direct blob ({left} of {blob_len} bytes left); remount with a larger --direct-size"
    )]
    NoRoom {
        path: String,
        size: u64,
        left: u64,
        blob_len: u64,
    },
    #[error("{path}: {error:?}")]
    Read { path: String, error: ReadError },
    #[error("{path}: chunk {index} not readable from the cache")]
    Unreadable { path: String, index: u32 },
    #[error("{0}")]
    Blob(IpcError),
}

/// Where files are in the blob. A file is placed outside the lock (its
/// chunks may have to be fetched); others' opens go on meanwhile, and a
/// second open of the same file waits for the first.
#[derive(Debug, Default)]
struct Placement {
    next: u64,
    files: HashMap<u64, Slot>,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    /// Placed: offset and length.
    Ready(u64, u64),
    /// Being placed by another open.
    Placing,
}

#[derive(Debug, Default)]
struct Placer {
    state: Mutex<Placement>,
    placed: std::sync::Condvar,
}

/// The mount's side: a listener thread and one thread per client.
#[derive(Debug)]
pub struct DirectServer {
    path: PathBuf,
}

impl Drop for DirectServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves direct clients of `shared` on the socket `path`, with a shared
/// blob of `blob_bytes`.
pub fn serve(shared: Arc<Shared>, path: &Path, blob_bytes: usize) -> Result<DirectServer, DirectError> {
    let listener = Arc::new(IpcListener::bind(
        path,
        RendezvousConfig {
            blob_bytes,
            ring_bytes: 64 << 10,
            ..RendezvousConfig::default()
        },
    )?);
    let placement = Arc::new(Placer::default());
    std::thread::Builder::new()
        .name("pfs-mount-direct".into())
        .spawn(move || loop {
            match listener.accept() {
                Ok(ep) => {
                    let (shared, listener, placement) = (shared.clone(), listener.clone(), placement.clone());
                    let _ = std::thread::Builder::new()
                        .name("pfs-mount-direct-client".into())
                        .spawn(move || serve_client(ep, &shared, &listener, &placement));
                }
                Err(e) => tracing::debug!("direct client refused: {e}"),
            }
        })
        .map_err(DirectError::Spawn)?;
    Ok(DirectServer {
        path: path.to_path_buf(),
    })
}

fn serve_client(mut ep: Endpoint, shared: &Shared, listener: &IpcListener, placement: &Placer) {
    loop {
        let served = ep.serve_one(|req, tx| match req.split_first() {
            Some((b'O', path)) => match place(shared, listener, placement, path) {
                Ok((offset, len)) => tx.send_ref(offset, len),
                Err(why) => tx.send(format!("E{why}").as_bytes()),
            },
            _ => tx.send(b"Eunknown request"),
        });
        if served.is_err() {
            return;
        }
    }
}

/// Puts the file at `path` in the blob (once) and returns where.
fn place(
    shared: &Shared,
    listener: &IpcListener,
    placer: &Placer,
    path: &[u8],
) -> Result<(u64, u64), Unplaced> {
    let lossy = String::from_utf8_lossy(path);
    let ino = shared.tree.resolve(path).ok_or_else(|| Unplaced::NoSuchFile {
        path: lossy.to_string(),
    })?;
    let node = shared
        .tree
        .node(ino)
        .filter(|n| n.kind == Kind::File)
        .ok_or_else(|| Unplaced::NotAFile {
            path: lossy.to_string(),
        })?;
    let size = node.size;
    let entry = ino - 2;
    let blob_len = listener.blob().len() as u64;
    // Claim the file's range (or wait for another open placing it).
    let offset = {
        let deadline = std::time::Instant::now() + shared.timeout * 4;
        let mut p = placer.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match p.files.get(&ino) {
                Some(&Slot::Ready(at, len)) => return Ok((at, len)),
                Some(Slot::Placing) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(Unplaced::Busy {
                            path: lossy.to_string(),
                        });
                    }
                    p = placer
                        .placed
                        .wait_timeout(p, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => break,
            }
        }
        let offset = p.next.div_ceil(ALIGN) * ALIGN;
        if offset.checked_add(size).is_none_or(|end| end > blob_len) {
            return Err(Unplaced::NoRoom {
                path: lossy.to_string(),
                size,
                left: blob_len.saturating_sub(offset),
                blob_len,
            });
        }
        // A placement that fails keeps its range unused: the blob only grows.
        p.next = offset + size;
        p.files.insert(ino, Slot::Placing);
        offset
    };
    let placed = copy_in(shared, listener, entry, size, offset, &lossy);
    let mut p = placer.state.lock().unwrap_or_else(|e| e.into_inner());
    match &placed {
        Ok(()) => {
            p.files.insert(ino, Slot::Ready(offset, size));
        }
        Err(_) => {
            p.files.remove(&ino);
        }
    }
    drop(p);
    placer.placed.notify_all();
    placed.map(|()| (offset, size))
}

/// Fetches what the cache lacks of file `entry` and copies its checked
/// chunks into the blob at `offset`.
fn copy_in(
    shared: &Shared,
    listener: &IpcListener,
    entry: u64,
    size: u64,
    offset: u64,
    lossy: &str,
) -> Result<(), Unplaced> {
    let read = |error| Unplaced::Read {
        path: lossy.to_string(),
        error,
    };
    let chunks: Vec<Want> = shared
        .with_recipe(entry, size, |r| r.wants(entry).collect())
        .map_err(read)?;
    let batch = shared.accept.max_fetch_chunks.clamp(1, 1024) as usize;
    let mut at = offset;
    for part in chunks.chunks(batch) {
        let missing: Vec<Want> = part
            .iter()
            .filter(|w| shared.cache.get_checked(&w.hash).is_none())
            .copied()
            .collect();
        if !missing.is_empty() {
            shared.fetch(&missing).map_err(read)?;
        }
        for w in part {
            let held = shared
                .cache
                .get_checked(&w.hash)
                .ok_or_else(|| Unplaced::Unreadable {
                    path: lossy.to_string(),
                    index: w.index,
                })?;
            listener.write_blob(at, held.bytes()).map_err(Unplaced::Blob)?;
            at += u64::from(w.len);
        }
    }
    Ok(())
}

/// An application's connection to a mount's direct socket.
#[derive(Debug)]
pub struct DirectClient {
    ep: Endpoint,
}

/// A file opened through [`DirectClient::open`]: its range of the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectFile {
    offset: u64,
    len: u64,
}

impl DirectFile {
    /// The file's size.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// An empty file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl DirectClient {
    /// Connects to the socket a `pfs mount --direct SOCKET` serves.
    pub fn connect(socket: &Path) -> Result<Self, DirectError> {
        Ok(Self {
            ep: Endpoint::connect(socket, WaitConfig::with(WaitStrategy::SpinFutex))?,
        })
    }

    /// Opens the file at `path` (below the mounted directory): fetches what
    /// the mount's cache lacks, places it in shared memory, and returns its
    /// range there. The one round trip of a file's life.
    pub fn open(&mut self, path: &str) -> Result<DirectFile, DirectError> {
        let mut req = Vec::with_capacity(path.len() + 1);
        req.push(b'O');
        req.extend_from_slice(path.as_bytes());
        let msg = self.ep.call(&req)?;
        match msg.kind() {
            MsgKind::Ref { offset, len } => Ok(DirectFile { offset, len }),
            MsgKind::Inline => {
                let text = String::from_utf8_lossy(msg.bytes());
                Err(DirectError::Refused {
                    reason: text.strip_prefix('E').unwrap_or(&text).to_string(),
                })
            }
        }
    }

    /// The whole file, as a view of shared memory.
    pub fn bytes(&self, f: &DirectFile) -> &[u8] {
        let blob = self.ep.blob();
        let start = usize::try_from(f.offset).unwrap_or(usize::MAX).min(blob.len());
        let end = start
            .saturating_add(usize::try_from(f.len).unwrap_or(usize::MAX))
            .min(blob.len());
        &blob[start..end]
    }

    /// Copies from `pos` of the file into `buf`; returns bytes copied
    /// (short at the end of the file). No system call.
    pub fn read_at(&self, f: &DirectFile, pos: u64, buf: &mut [u8]) -> usize {
        let b = self.bytes(f);
        let from = usize::try_from(pos).unwrap_or(usize::MAX).min(b.len());
        let n = buf.len().min(b.len() - from);
        buf[..n].copy_from_slice(&b[from..from + n]);
        n
    }
}
