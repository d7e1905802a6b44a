//! File-transfer sessions (docs/wire.md §10): a sender moves files and trees
//! into a receiver's destination directory, deduplicated against the
//! receiver's store. The sender sends descriptors `(offset, len)` into the
//! store blob for chunks the store holds and literal bytes for the rest; the
//! receiver checks every chunk against its hash, rebuilds each file under a
//! temporary name, checks the file hash of its chunks and renames it into place.
//! Chunks whose stored bytes turn out damaged are NAKed after the stream and
//! REPAIRed by the sender (the corrections plane).
//!
//! Both sides are sans-I/O cores ([`FilesSender`], [`FilesReceiver`]) with
//! a host trait for the work on files and store ([`FilesSource`],
//! [`FilesHost`]) and a thin blocking driver ([`send_files`],
//! [`receive_files`]); [`error`] holds the typed violations, [`bwlimit`]
//! the sender's pacing (`--bwlimit`).

pub mod bwlimit;
pub mod error;
pub mod receiver;
pub mod sender;

pub use bwlimit::{parse_rate, BwLimit, RateError};
pub use error::{FilesViolation, IndexFault};

pub use receiver::{
    receive_files, ChunkIndex, Copied, FilesHost, FilesReceiver, FilesReceiverConfig, FilesReceiverEvent,
    FilesReceiverOutcome, Holding, Lent, LocalHost, SharedChunkIndex, StoreInfo, COMMIT_EVERY_CHUNKS,
    DEFAULT_MAX_FRAME_WORK, DEFAULT_MAX_RESERVATION, DEFAULT_MAX_RESERVATION_PERCENT,
    DEFAULT_MAX_SESSION_MEMORY, DEFAULT_MAX_UNVERIFIED_BYTES, MAX_DELETED_NAMED,
};
pub use sender::{
    classify, send_files, ChunkPlan, DeleteConfig, DeleteStatus, DeletedKind, DeletionOutcome, FilesItem,
    FilesMeter, FilesPlanSummary, FilesPrepare, FilesProgress, FilesSender, FilesSenderConfig,
    FilesSenderEvent, FilesSenderOutcome, FilesSource, LocalPrepare, LocalSource, MeterRate, MeterReading,
    PreserveConfig, ScanConfig, Scanned, SendPhase, Unreadable,
};
pub use sender::{itemize, ItemKind, ItemText, ItemizeConfig, Itemized};
pub use sender::{
    plan_chunk, save_recipes, scan_items, ChunkStream, Streamed, Unsendable, DEFAULT_STREAM_MIN, STREAM_AHEAD,
};

/// Largest CHUNKS/REPAIR body a receiver accepts by default.
pub const DEFAULT_MAX_CHUNKS_BODY: u32 = 8 << 20;
/// Target size of the CHUNKS frames a sender builds.
pub const SENDER_FRAME_TARGET: usize = 4 << 20;
/// Most chunk bytes (referenced or literal) a sender puts in one frame or
/// BATCH, plus one chunk: what one frame makes a receiver hash stays well
/// under its `max_frame_work` (a quarter of the default).
pub const SENDER_FRAME_WORK: u64 = 256 << 20;
/// Longest chunk either side accepts (content-defined chunks are far
/// smaller; this bounds what one entry can make the receiver allocate).
pub const MAX_CHUNK_LEN: u32 = 16 << 20;
/// INDEX entries per frame: as many as fit in a control frame.
pub const INDEX_ENTRIES_PER_FRAME: usize =
    pfs_wire::frame::MAX_CONTROL_BODY as usize / pfs_wire::files::INDEX_ENTRY_LEN;

/// BLAKE3 of `bytes` equals `hash`.
pub(crate) fn hash_matches(bytes: &[u8], hash: &[u8; 32]) -> bool {
    blake3::hash(bytes).as_bytes() == hash
}
