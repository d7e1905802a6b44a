//! The receiving side of a files session: answer with the store's identity
//! and index delta, reserve store space for the plan (or refuse before any
//! destination file is touched), rebuild each file from store chunks and
//! literals under a temporary name, verify, rename into place; NAK damaged
//! chunks after the stream and apply the sender's REPAIRs; report.
//!
//! Everything the peer sends is checked before use: frames by the wire
//! crate, paths by [`pfs_files::RelPath`] and [`pfs_files::DestRoot`] (never outside the
//! destination, never through a symlink), store offsets against the store,
//! every chunk against its BLAKE3, every file against its whole-file hash.
//!
//! - [`core`] and `stream`: the sans-I/O core [`FilesReceiver`] — bytes
//!   and `now` in; frames to send, a deadline, events and host actions out.
//! - [`host`]: the [`FilesHost`] trait of those actions, and [`LocalHost`]
//!   over a [`pfs_store::Store`] and a [`pfs_files::Landing`].
//! - [`driver`]: [`receive_files`], the core over a blocking transport.

pub mod core;
pub mod driver;
pub mod host;
mod stream;

use std::time::Duration;

use pfs_files::Manifest;
use pfs_wire::files::FilesReport;

pub use self::core::{FilesReceiver, FilesReceiverEvent, MAX_PROBE_ENTRIES};
pub use driver::receive_files;
pub use host::{FilesHost, LocalHost, StoreInfo};

/// Receiver settings of files sessions.
#[derive(Debug, Clone)]
pub struct FilesReceiverConfig {
    /// Longest wait for FILES_HELLO, INDEX_REQUEST and PLAN.
    pub handshake_timeout: Duration,
    /// Longest silence tolerated while files stream.
    pub idle_timeout: Duration,
    /// Largest CHUNKS/REPAIR body accepted.
    pub max_chunks_body: u32,
    /// Commit (make durable and indexed) appended chunks at least every
    /// this many bytes, so an interrupted transfer keeps what arrived.
    pub commit_every: u64,
    /// fsync each file before renaming it into place.
    pub fsync_files: bool,
    /// Record of the files written into this destination: a file offered
    /// again with the content it already has only gets its metadata set.
    pub manifest: Option<std::sync::Arc<Manifest>>,
}

impl Default for FilesReceiverConfig {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
            max_chunks_body: crate::files::DEFAULT_MAX_CHUNKS_BODY,
            commit_every: 256 << 20,
            fsync_files: false,
            manifest: None,
        }
    }
}

/// A finished files session, from the receiver's side.
#[derive(Debug, Clone)]
pub struct FilesReceiverOutcome {
    /// The report sent to the sender (its `messages` are in `messages`).
    pub report: FilesReport<'static>,
    /// One `path: reason` line per failed entry.
    pub messages: String,
    /// The sender only planned (`--dry-run`); nothing was written.
    pub dry_run: bool,
    /// Remote directory the sender asked for (lossy UTF-8).
    pub remote_dir: String,
}
