//! The receiving side of a files session: answer with the store's identity
//! and index delta, reserve store space for the plan (or refuse before any
//! destination file is touched), rebuild each file from store chunks and
//! literals under a temporary name, verify, rename into place; NAK damaged
//! chunks after the stream and apply the sender's REPAIRs; report.
//!
//! Everything the peer sends is checked before use: frames by the wire
//! crate, paths by [`pfs_files::RelPath`] and [`pfs_files::DestRoot`] (never outside the
//! destination, never through a symlink), store offsets against the store,
//! every chunk against its BLAKE3, every file's chunk list against its file hash.
//!
//! - [`core`]: the sans-I/O core [`FilesReceiver`] — bytes and `now` in;
//!   frames to send, a deadline, events and host actions out — and its
//!   phases and handshake. Its named parts, a module each: `budget` (the
//!   session's limits and what it used), `deadline` (timeouts per phase),
//!   `scope` (what FILES_HELLO asked for), `probe` (PROBE answers and
//!   adopting older versions), `stream` (the file stream reassembled),
//!   `repair` (NAKs, REPAIRs, files waiting), `delete` (the session's side
//!   of DELETE), `attrs` (owner, group, extended attributes and hard
//!   links), `inflate` (zstd) and `stats` (the report).
//! - [`host`]: the [`FilesHost`] trait of those actions; [`local`]: its
//!   I/O implementation [`LocalHost`] over a [`pfs_store::Store`] (or a
//!   destination index) and a [`pfs_files::Landing`].
//! - [`driver`]: [`receive_files`], the core over a blocking transport.

mod attrs;
mod budget;
mod clone;
pub mod core;
mod deadline;
mod delete;
pub mod driver;
pub mod host;
mod inflate;
pub mod local;
mod probe;
mod repair;
mod scope;
mod stats;
mod stream;

use std::time::Duration;

use pfs_files::Manifest;
use pfs_wire::files::FilesReport;

pub use self::core::{FilesReceiver, FilesReceiverEvent, MAX_PROBE_ENTRIES};
pub use delete::MAX_DELETED_NAMED;
pub use driver::receive_files;
pub use host::{Copied, FilesHost, Lent, StoreInfo};
pub use local::{ChunkIndex, Holding, LocalHost, SharedChunkIndex};

/// Most bookkeeping bytes one session may make a receiver keep, by default
/// (chunks awaiting REPAIR, the NAK list, files waiting, directories whose
/// metadata is set at the end, PROBE answers).
pub const DEFAULT_MAX_SESSION_MEMORY: u64 = 64 << 20;
/// Most bytes one frame (a BATCH with everything in it counts as one) may
/// make a receiver hash or decompress, by default. A sender keeps its frames
/// under [`crate::files::SENDER_FRAME_WORK`], a quarter of it.
pub const DEFAULT_MAX_FRAME_WORK: u64 = 1 << 30;
/// Most bytes of REF/KNOWN chunks one session may name that turn out not
/// to match their hash (work that yields nothing; they are NAKed), by default.
pub const DEFAULT_MAX_UNVERIFIED_BYTES: u64 = 256 << 20;
/// Most store space one session holds reserved at a time, by default.
pub const DEFAULT_MAX_RESERVATION: u64 = 1 << 30;
/// Largest share of the store's capacity one session holds reserved at a
/// time, in percent, by default.
pub const DEFAULT_MAX_RESERVATION_PERCENT: u8 = 25;
/// Longest a receiver waits, by default, for a sender hashing and chunking
/// before its INDEX_REQUEST or PLAN (about 100 GB of new data at the
/// chunking rate of two cores).
pub const DEFAULT_PREPARE_TIMEOUT: Duration = Duration::from_secs(600);
/// New bytes after which a receiver commits what arrived, by default: at
/// most this much is sent again after the receiver is killed (files that
/// landed stay; a file received half-way is checkpointed).
pub const DEFAULT_COMMIT_EVERY: u64 = 64 << 20;
/// The store appends of a session are committed at least every this many
/// chunks (each one appended costs memory until its commit).
pub const COMMIT_EVERY_CHUNKS: u64 = 64 << 10;

/// Receiver settings of files sessions. The limits hold whatever the peer
/// declares (docs/security.md lists them with what a peer hitting
/// one gets).
#[derive(Debug, Clone)]
pub struct FilesReceiverConfig {
    /// Longest wait for FILES_HELLO (and at least this for INDEX_REQUEST and PLAN).
    pub handshake_timeout: Duration,
    /// Longest wait for INDEX_REQUEST and PLAN: the sender hashes and
    /// chunks the files the receiver lacks meanwhile.
    pub prepare_timeout: Duration,
    /// Longest wait for the next frame while files stream.
    pub idle_timeout: Duration,
    /// A frame still arriving earns one more second before its deadline
    /// per this many of its bytes (see [`crate::framing::FrameClock`]).
    pub min_frame_rate: u64,
    /// Longest a reply (ACK, INDEX, NAK, the report, ERROR) may take to be
    /// written, plus one second per `min_frame_rate` bytes of it.
    pub write_timeout: Duration,
    /// Largest CHUNKS/REPAIR body accepted.
    pub max_chunks_body: u32,
    /// Most bookkeeping bytes the session may make the receiver keep.
    pub max_session_memory: u64,
    /// Most bytes one frame may make the receiver hash or decompress.
    pub max_frame_work: u64,
    /// Most bytes of REF/KNOWN chunks that fail their hash check per session.
    pub max_unverified_bytes: u64,
    /// Most store space the session holds reserved at a time (a PLAN asking
    /// more gets this much, and more only as bytes arrive).
    pub max_reservation: u64,
    /// The same as a percentage of the store's capacity (the smaller wins).
    pub max_reservation_percent: u8,
    /// Commit (make durable and indexed) appended chunks at least every
    /// this many new bytes, so an interrupted transfer keeps what arrived
    /// (without a store, a file being received is checkpointed too).
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
            prepare_timeout: DEFAULT_PREPARE_TIMEOUT,
            idle_timeout: Duration::from_secs(120),
            min_frame_rate: crate::framing::DEFAULT_MIN_FRAME_RATE,
            write_timeout: crate::framing::DEFAULT_WRITE_TIMEOUT,
            max_chunks_body: crate::files::DEFAULT_MAX_CHUNKS_BODY,
            max_session_memory: DEFAULT_MAX_SESSION_MEMORY,
            max_frame_work: DEFAULT_MAX_FRAME_WORK,
            max_unverified_bytes: DEFAULT_MAX_UNVERIFIED_BYTES,
            max_reservation: DEFAULT_MAX_RESERVATION,
            max_reservation_percent: DEFAULT_MAX_RESERVATION_PERCENT,
            commit_every: DEFAULT_COMMIT_EVERY,
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
