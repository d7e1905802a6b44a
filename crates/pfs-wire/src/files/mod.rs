//! Bodies of the files frames: a sender moves files and trees into a
//! receiver's destination, sending descriptors `(offset, len)` into the
//! receiver's store blob for chunks it holds and literal bytes for the rest.
//!
//! Session (sender S, receiver R; every frame in the usual envelope):
//! ```text
//! S: FILES_HELLO                 R: FILES_ACCEPT (store id, generation)
//! S: (PROBE* with LAST          R: PROBE_REPLY* with LAST)?   optional
//! S: INDEX_REQUEST (from gen)   R: INDEX* (entries since gen; last has LAST)
//! S: PLAN (totals)              R: ACK (space reserved) | ERROR
//! S: (FILE CHUNKS* (FILE_DONE | FILE_DROP)?)* DELETE? FILES_END
//!                               R: (NAK* with LAST, S: REPAIR* with LAST)?
//!                               R: DELETED* with LAST (if DELETE)
//!                               R: FILES_END with REPORT
//! ```
//! Every decoder here is zero-copy (views into the body), bounds-checked and
//! panic-free; the receiver applies its own limits on top.
//!
//! One file per frame group, each holding its frames' field tables:
//! `session` (FILES_HELLO, FILES_ACCEPT, the FILES_END report), `index`
//! (INDEX_REQUEST, INDEX), `plan` (PLAN and its ACK), `entry` (FILE),
//! `chunks` (CHUNKS and REPAIR bodies, BATCH), `probe` (PROBE, PROBE_REPLY),
//! `repair` (NAK), `file_done` (FILE_DONE), `file_drop` (FILE_DROP) and `delete` (DELETE, DELETED).
//! Everything public is re-exported here, so callers name
//! `pfs_wire::files::X` whatever file `X` lives in.

mod attrs;
mod chunks;
mod delete;
mod entry;
mod file_done;
mod file_drop;
mod index;
mod plan;
mod probe;
mod repair;
mod session;

pub use attrs::{FileExtra, Xattrs, MAX_XATTR_NAME};
pub use chunks::{
    batch_head, emit_entry_head, parse_batch, parse_chunks, tag, ChunkData, ChunkEntry, ChunkIter,
    ChunksHeader, BATCH_FIXED_LEN, CHUNKS_FIXED_LEN,
};
pub use delete::{
    parse_deleted, DeleteRequest, DeleteStatus, DeletedEntry, DeletedHead, DeletedIter, DeletedKind,
    DELETED_ENTRY_FIXED_LEN, DELETED_HEAD_LEN, DELETE_HEAD_LEN, DELETE_ROOT, MAX_DELETE_RULES,
};
pub use entry::{
    EntryKind, FileEntry, FILE_FIXED_LEN, FILE_HELD, FILE_LINKED, FILE_LISTED, FILE_STREAMED, MAX_PATH_LEN,
};
pub use file_done::{FileDone, FILE_DONE_LEN};
pub use file_drop::{FileDrop, FILE_DROP_FIXED_LEN, MAX_DROP_REASON};
pub use index::{
    parse_index, parse_index_request, IndexEntry, INDEX_ENTRY_LEN, INDEX_KEY_LEN, INDEX_REQUEST_LEN,
};
pub use plan::{Plan, PlanAck, PLAN_ACK_LEN, PLAN_LEN};
pub use probe::{
    parse_probe, parse_probe_reply, ProbeEntry, ProbeHead, ProbeIter, PROBE_ENTRY_FIXED_LEN, PROBE_HEAD_LEN,
};
pub use repair::parse_nak;
pub use session::{
    FilesAccept, FilesHello, FilesReport, TopMtime, ACCEPT_OCCUPIED, FILES_ACCEPT_LEN, FILES_HELLO_FIXED_LEN,
    FILES_REPORT_FIXED_LEN, FLAG_FILES_REPORT, HELLO_CHECKSUM, HELLO_COMPRESS, HELLO_DELETE, HELLO_DRY_RUN,
    HELLO_NO_SPARSE, MAX_REMOTE_DIR_LEN, MAX_REPORT_TEXT, TOP_MTIME_LEN,
};

/// Version of the files exchange carried in FILES_HELLO.
pub const FILES_VERSION: u16 = 1;
/// Flag on INDEX, NAK, REPAIR and DELETED: the last frame of its series.
pub const FLAG_LAST: u16 = 0x0001;

/// BLAKE3 digest of a chunk or file.
pub type Hash = [u8; 32];

/// A nanoseconds field (FILE, PROBE) below one second, as the spec requires.
fn valid_nsec(nsec: u32) -> bool {
    nsec < 1_000_000_000
}
