//! The sending side of a files session: learn the receiver's store index
//! (cached per store id and generation, so a second send fetches only the
//! delta), decide per chunk between a descriptor into the store and literal
//! bytes, announce the totals, stream FILE and CHUNKS frames, answer NAKs
//! with REPAIRs, and return the receiver's report.
//!
//! - [`core`]: the sans-I/O core [`FilesSender`] — replies and `now` in;
//!   frames to send, a deadline and progress events out. It orchestrates
//!   named parts, each in its own (private) module: `reply` (the receive
//!   side), `batch` (the send side: BATCH frames, zstd), `probe`, `index`
//!   (index fetch), `plan` (how each chunk travels), `stream` (the
//!   stream's position, STREAMED files, progress), `fill` (FILE and
//!   CHUNKS frames), `repair` and `delete` (deletion).
//! - [`host`]: the core's host traits, [`FilesSource`] (file bytes,
//!   hashing, chunking, the index cache) and [`FilesPrepare`].
//! - [`local`]: [`LocalSource`] and [`LocalPrepare`], those hosts on this
//!   machine's files.
//! - [`driver`]: [`send_files`], the core over a blocking transport.
//! - [`meter`]: [`FilesMeter`], the send's progress for a display thread
//!   (hashing and chunking included), its rate and its one-line text.
//! - [`scan`]: [`scan_items`], the paths a user names as [`FilesItem`]s
//!   with what the quick-check cache knows, before the session.
//! - [`mod@itemize`]: what travelled (or would), one rsync-style
//!   `--itemize-changes` item per entry, from the items after the session.

mod batch;
pub mod core;
mod delete;
pub mod driver;
mod fill;
pub mod host;
mod index;
pub mod itemize;
pub mod local;
pub mod meter;
mod plan;
mod probe;
mod repair;
mod reply;
pub mod scan;
mod stream;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use pfs_files::{Entry, Recipe, WalkKind};
use pfs_wire::files::{EntryKind, FilesReport, Hash};

use pfs_sys::Usage;

pub use self::core::{FilesSender, FilesSenderEvent, MAX_INDEX_BATCH};
pub use driver::send_files;
pub use host::{FilesPrepare, FilesSource, Streamed, Unreadable, Unsendable};
pub use itemize::{itemize, ItemKind, ItemText, ItemizeConfig, Itemized};
pub use local::{ChunkAhead, ChunkStream, LocalPrepare, LocalSource, STREAM_AHEAD};
pub use meter::{FilesMeter, MeterRate, MeterReading, SendPhase};
pub use pfs_wire::files::{DeleteStatus, DeletedKind};
pub use scan::{save_recipes, scan_items, ScanConfig, Scanned};

/// One entry to send, with its recipe if it is a regular file.
#[derive(Debug, Clone)]
pub struct FilesItem {
    /// What and where.
    pub entry: Entry,
    /// The file's chunks (regular files; `None` until it is chunked).
    pub recipe: Option<Recipe>,
    /// Size and XXH3-128 of the whole file: cached, or from the probe pass
    /// (files without a cached recipe, when the receiver's store is not
    /// empty). Files with a digest are asked about (PROBE).
    pub digest: Option<(u64, pfs_files::QuickDigest)>,
    /// The receiver said it holds this file: FILE with HELD, no CHUNKS.
    pub held: bool,
    /// The receiver said (PROBE) it holds this file as it is: `held`, or
    /// an empty file (sent as usual: HELD needs content), which a listing
    /// leaves out ([`itemize()`]).
    pub there: bool,
    /// A hard link to the earlier item at this path (`-H`): FILE with
    /// LINKED, never read.
    pub hard_link: Option<pfs_files::RelPath>,
    /// Sent STREAMED (docs/wire.md §10.13): its FILE goes out before it is
    /// chunked, its chunks as they are cut, FILE_DONE at the end.
    pub streamed: bool,
    /// Being chunked in the background (`FilesSource::chunk_ahead`): the
    /// recipe is collected when its FILE is next.
    pub pending: bool,
}

impl FilesItem {
    /// An entry with no work done on it yet.
    pub fn new(entry: Entry, recipe: Option<Recipe>) -> Self {
        Self {
            entry,
            recipe,
            digest: None,
            held: false,
            there: false,
            hard_link: None,
            streamed: false,
            pending: false,
        }
    }

    /// The size the scan found (0 unless a regular file): what a STREAMED
    /// FILE announces.
    fn announced_size(&self) -> u64 {
        match self.entry.kind {
            WalkKind::File { size } => size,
            _ => 0,
        }
    }

    /// What the file may add to the receiver's store before it is chunked
    /// (PLAN's `pending_bytes`): its size, or for a sparse file its
    /// allocated bytes and [`SPARSE_SLACK`], since its holes are zero
    /// chunks that travel as new bytes once. The receiver reserves the
    /// rest as it arrives, should this be short.
    fn pending_share(&self) -> u64 {
        let size = self.announced_size();
        size.min(self.entry.meta.allocated.saturating_add(SPARSE_SLACK))
    }

    /// A regular file whose content travels (not a hard link of another).
    fn is_file(&self) -> bool {
        matches!(self.entry.kind, WalkKind::File { .. }) && self.hard_link.is_none()
    }

    /// Size and the `file_hash` field of its FILE frame: the recipe's file
    /// hash, or for a HELD file its XXH3-128 and 16 zero bytes.
    fn size_and_hash(&self) -> Option<(u64, Hash)> {
        if self.held {
            let (size, digest) = self.digest?;
            let mut h = [0u8; 32];
            h[..16].copy_from_slice(&digest);
            return Some((size, h));
        }
        self.recipe.as_ref().map(|r| (r.size, r.file_hash))
    }
}

/// Sender settings of a files session.
#[derive(Debug, Clone)]
pub struct FilesSenderConfig {
    /// Sub-directory of the receiver's destination (relative; empty = root).
    pub remote_dir: Vec<u8>,
    /// Plan only: learn the index, classify, send nothing else.
    pub dry_run: bool,
    /// zstd level for literal chunks (`None` = send them raw).
    pub compress: Option<i32>,
    /// Average chunk size used (told to the receiver, informational).
    pub chunk_avg: u32,
    /// Where index caches live (`None` = no cache: fetch the whole index).
    pub index_cache_dir: Option<PathBuf>,
    /// Longest wait for each receiver reply.
    pub reply_timeout: Duration,
    /// Session identifier.
    pub session_nonce: u64,
    /// Ask the receiver which files it holds before chunking them (PROBE).
    pub probe: bool,
    /// Ask about every regular file (PROBE, implies `probe`), those with a
    /// cached recipe too, so that the send knows each file the receiver
    /// holds: set when what travels is listed ([`itemize()`], `-i`,
    /// `--dry-run`). Costs one XXH3-128 pass over files with a cached
    /// recipe but no cached digest.
    pub probe_all: bool,
    /// Have the receiver remove what the tree lacks (rsync's `--delete`).
    pub delete: Option<DeleteConfig>,
    /// Have the receiver decide "unchanged" by content, not size and mtime
    /// (rsync's `--checksum`; the sender rehashes every file itself).
    pub checksum: bool,
    /// Most bytes per second written to the transport (`None`: as fast as
    /// it goes): the driver paces its writes ([`crate::files::BwLimit`]) and
    /// the core builds frames that take [`crate::files::bwlimit::FRAME_SECONDS`]
    /// at most.
    pub bwlimit: Option<u64>,
    /// Owner, group and hard links (extended attributes travel when the
    /// scan read them).
    pub preserve: PreserveConfig,
    /// Files of at least this many bytes that have no recipe yet are sent
    /// STREAMED, chunked while they are sent (`None`: every file is chunked
    /// before its FILE). Never in a dry run or with `checksum`.
    pub stream_min: Option<u64>,
    /// The receiver leaves runs of zeros as holes (the default; false is
    /// `--no-sparse`: FILES_HELLO's `NO_SPARSE`, every byte written).
    pub sparse: bool,
    /// The mtime (ns since the epoch) of the directory whose contents are
    /// sent (`DIR/`), for the receiver to set on the remote directory
    /// itself (FILES_END, docs/wire.md §10.9); `None` sends none.
    pub top_mtime_ns: Option<i128>,
}

/// New bytes a sparse file may send besides its allocated ones: chunks
/// that straddle a data extent carry zeros from the holes beside it, and
/// a run of zeros travels once (one chunk of each length). An estimate
/// for the receiver's up-front reservation only.
pub const SPARSE_SLACK: u64 = 4 << 20;

/// Default [`FilesSenderConfig::stream_min`]: two chunking windows, so
/// smaller files keep being chunked many at a time on every thread.
pub const DEFAULT_STREAM_MIN: u64 = 16 << 20;

/// What a sender carries besides content, mode and mtime (rsync's `-o -g -H`;
/// `-X -A` are the scan's [`pfs_files::WalkConfig`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreserveConfig {
    /// Numeric owner (applied by a receiver running as root).
    pub owner: bool,
    /// Numeric group (likewise).
    pub group: bool,
    /// Files that are hard links of one another arrive as hard links.
    pub hard_links: bool,
}

/// What a sender asks the receiver to remove (docs/wire.md §10.12).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteConfig {
    /// The destination directory itself is one of the tree's directories
    /// (a directory's contents were sent: `DIR/`).
    pub root: bool,
    /// Exclude patterns: destination entries they match are kept.
    pub protect: Vec<String>,
}

/// What the receiver removed because the sender's tree lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionOutcome {
    /// Whether it removed (in a dry run, would remove) anything, or why not.
    pub status: DeleteStatus,
    /// Entries removed (or that would be), all counted.
    pub count: u64,
    /// The entries it named (at most [`crate::files::MAX_DELETED_NAMED`]),
    /// relative to the remote directory, a directory after its contents.
    pub entries: Vec<(DeletedKind, String)>,
}

/// How one chunk travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkPlan {
    /// As a descriptor into the receiver's store blob.
    Ref {
        /// Offset in the store blob.
        offset: u64,
    },
    /// As a hash the receiver will hold by then (sent earlier in this session).
    Known,
    /// As literal bytes.
    Literal,
}

/// What a send will move, decided before anything is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FilesPlanSummary {
    /// Entries (files, directories, symlinks).
    pub entries: u64,
    /// Regular files.
    pub files: u64,
    /// Sum of file sizes.
    pub total_bytes: u64,
    /// Bytes sent as descriptors into the store.
    pub matched_bytes: u64,
    /// Bytes that repeat a chunk sent earlier in this session.
    pub known_bytes: u64,
    /// Bytes sent literally.
    pub literal_bytes: u64,
    /// Chunks.
    pub chunks: u64,
    /// Literal chunks.
    pub literal_chunks: u64,
    /// Files the receiver already holds (PROBE): no chunks sent.
    pub held_files: u64,
    /// Their bytes.
    pub held_bytes: u64,
    /// Files sent STREAMED (chunked while sent).
    pub streamed_files: u64,
    /// Bytes of files not chunked yet (streamed, or chunked while the
    /// stream goes out): PLAN's `pending_bytes`. Each file's share moves to
    /// the other counts when its chunks are known; 0 at the end.
    pub pending_bytes: u64,
}

impl FilesPlanSummary {
    /// Adds the chunk counts of `other` (descriptors, known, literal).
    fn add_chunks(&mut self, other: &Self) {
        self.chunks += other.chunks;
        self.matched_bytes += other.matched_bytes;
        self.known_bytes += other.known_bytes;
        self.literal_bytes += other.literal_bytes;
        self.literal_chunks += other.literal_chunks;
    }

    /// Takes away what `add_chunks(other)` added.
    fn remove_chunks(&mut self, other: &Self) {
        self.chunks = self.chunks.saturating_sub(other.chunks);
        self.matched_bytes = self.matched_bytes.saturating_sub(other.matched_bytes);
        self.known_bytes = self.known_bytes.saturating_sub(other.known_bytes);
        self.literal_bytes = self.literal_bytes.saturating_sub(other.literal_bytes);
        self.literal_chunks = self.literal_chunks.saturating_sub(other.literal_chunks);
    }

    /// The chunk counts of `chunks` travelling as `plan` says.
    fn of_plan(chunks: &[pfs_files::ChunkRef], plan: &[ChunkPlan]) -> Self {
        let mut s = Self::default();
        for (c, p) in chunks.iter().zip(plan) {
            let len = u64::from(c.len);
            s.chunks += 1;
            match p {
                ChunkPlan::Ref { .. } => s.matched_bytes += len,
                ChunkPlan::Known => s.known_bytes += len,
                ChunkPlan::Literal => {
                    s.literal_bytes += len;
                    s.literal_chunks += 1;
                }
            }
        }
        s
    }
}

/// Sender-side progress.
#[derive(Debug, Clone, Copy)]
pub struct FilesProgress {
    /// Entries sent.
    pub entries: u64,
    /// Entries in the session.
    pub total_entries: u64,
    /// File bytes described so far (effective bytes on their way), counted
    /// per CHUNKS frame: it moves inside a large file.
    pub bytes: u64,
    /// File bytes in the plan.
    pub total_bytes: u64,
    /// Bytes written to the transport.
    pub wire_bytes: u64,
    /// Since the stream started.
    pub elapsed: Duration,
}

/// A finished (or planned) files session, from the sender's side.
#[derive(Debug, Clone)]
pub struct FilesSenderOutcome {
    /// The classification.
    pub plan: FilesPlanSummary,
    /// Receiver store identity (hex) and generation when we connected.
    pub store_id: String,
    /// Store generation reported in FILES_ACCEPT.
    pub store_generation: u64,
    /// Index entries fetched this time (the rest came from the cache).
    pub index_entries_fetched: u64,
    /// Index entries known from the cache before the fetch.
    pub index_entries_cached: u64,
    /// Files asked about with PROBE.
    pub probed: u64,
    /// The receiver's report (`None` for a dry run).
    pub report: Option<FilesReport<'static>>,
    /// The report's messages (failed entries).
    pub messages: String,
    /// Bytes this side wrote to the transport.
    pub wire_bytes_sent: u64,
    /// Bytes this side read from the transport.
    pub wire_bytes_received: u64,
    /// Chunks repaired on request.
    pub repaired_chunks: u64,
    /// Bytes sent in REPAIR frames.
    pub repaired_bytes: u64,
    /// Whole session, connect to report.
    pub elapsed: Duration,
    /// This thread's CPU over the session.
    pub usage: Usage,
    /// Warnings (cache trouble, files that changed while sent).
    pub warnings: Vec<String>,
    /// Entries left out because they could not be read (each also has a
    /// warning): the transfer is partial. The driver counts those the
    /// session could not read; a caller adds [`Scanned::unreadable`].
    pub unreadable: u64,
    /// Entries given up on while streaming (FILE_DROP: changed, shrunk or
    /// unreadable after their FILE was sent); also in the receiver's
    /// `files_failed`, listed in its messages with the reason.
    pub dropped: u64,
    /// What the receiver removed, when the session asked for DELETE and sent it.
    pub deletion: Option<DeletionOutcome>,
    /// The receiver said it holds nothing here: an empty index (generation
    /// 0) and, with a destination index, a remote directory without entries
    /// (FILES_ACCEPT without `OCCUPIED`). Every entry is new there (a
    /// receiver with a fresh `--store` does not look at its destination).
    pub receiver_empty: bool,
}

/// Decides, per chunk of every file, how it travels: a descriptor when
/// `lookup` knows it (with the same length), a known-hash reference when
/// an earlier chunk of this send carries it, literal bytes otherwise.
/// A file not chunked yet (STREAMED, or chunked in the background) counts
/// in `pending_bytes` until [`plan_chunk`] classifies its chunks as they
/// come. Returns the hashes this plan sends literally.
pub fn classify(
    items: &[FilesItem],
    lookup: impl Fn(&Hash) -> Option<(u64, u32)>,
) -> (Vec<Vec<ChunkPlan>>, FilesPlanSummary, HashSet<Hash>) {
    let mut sum = FilesPlanSummary::default();
    let mut sent: HashSet<Hash> = HashSet::new();
    let plans = items
        .iter()
        .map(|item| {
            sum.entries += 1;
            if item.held {
                let size = item.size_and_hash().map_or(0, |(n, _)| n);
                sum.files += 1;
                sum.total_bytes += size;
                sum.held_files += 1;
                sum.held_bytes += size;
                return Vec::new();
            }
            if item.streamed || item.pending {
                let size = item.announced_size();
                sum.files += 1;
                sum.streamed_files += u64::from(item.streamed);
                sum.total_bytes += size;
                sum.pending_bytes += item.pending_share();
                return Vec::new();
            }
            let Some(recipe) = &item.recipe else {
                return Vec::new();
            };
            sum.files += 1;
            sum.total_bytes += recipe.size;
            recipe
                .chunks
                .iter()
                .map(|c| plan_chunk(c, &lookup, &mut sent, &mut sum))
                .collect()
        })
        .collect();
    (plans, sum, sent)
}

/// How chunk `c` travels (see [`classify`]), counted in `sum`.
pub fn plan_chunk(
    c: &pfs_files::ChunkRef,
    lookup: impl Fn(&Hash) -> Option<(u64, u32)>,
    sent: &mut HashSet<Hash>,
    sum: &mut FilesPlanSummary,
) -> ChunkPlan {
    sum.chunks += 1;
    let len = u64::from(c.len);
    match lookup(&c.hash) {
        Some((offset, l)) if l == c.len => {
            sum.matched_bytes += len;
            ChunkPlan::Ref { offset }
        }
        _ if !sent.insert(c.hash) => {
            sum.known_bytes += len;
            ChunkPlan::Known
        }
        _ => {
            sum.literal_bytes += len;
            sum.literal_chunks += 1;
            ChunkPlan::Literal
        }
    }
}

/// The entries that are regular files still to be chunked (not held,
/// no recipe yet).
fn unchunked(items: &[FilesItem]) -> Vec<usize> {
    (0..items.len())
        .filter(|&i| items[i].is_file() && items[i].recipe.is_none() && !items[i].held)
        .collect()
}

fn entry_kind(e: &Entry) -> (EntryKind, &[u8]) {
    match &e.kind {
        WalkKind::File { .. } => (EntryKind::File, &[]),
        WalkKind::Dir => (EntryKind::Dir, &[]),
        WalkKind::Symlink { target } => (EntryKind::Symlink, target),
    }
}

fn store_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Helpers of the parts' unit tests: entries, recipes, and a source of
/// files held in memory.
#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashMap;
    use std::path::PathBuf;

    use pfs_files::{ChunkRef, Entry, EntryMeta, IndexCache, Recipe, RelPath, WalkKind};

    use super::host::{FilesSource, Unreadable};
    use super::FilesItem;
    use crate::error::{LocalError, Violation};
    use crate::files::FilesViolation;
    use crate::SessionError;

    /// The files-protocol violation `e` is.
    pub(crate) fn files_violation(e: SessionError) -> FilesViolation {
        match e {
            SessionError::Violation(Violation::Files(v)) => v,
            other => panic!("not a files-protocol violation: {other}"),
        }
    }

    fn entry(rel: &str, kind: WalkKind) -> Entry {
        Entry {
            rel: RelPath::parse(rel.as_bytes()).expect("a relative path"),
            kind,
            mode: 0o644,
            mtime_ns: 1_700_000_000_000_000_000,
            dev: 1,
            ino: rel.len() as u64,
            abs: PathBuf::from("/src").join(rel),
            meta: EntryMeta::default(),
        }
    }

    /// A regular file of `size` bytes, not chunked.
    pub(crate) fn file_item(rel: &str, size: u64) -> FilesItem {
        FilesItem::new(entry(rel, WalkKind::File { size }), None)
    }

    /// A directory.
    pub(crate) fn dir_item(rel: &str) -> FilesItem {
        FilesItem::new(entry(rel, WalkKind::Dir), None)
    }

    /// A recipe of 100-byte chunks with these hashes.
    pub(crate) fn recipe(hashes: &[[u8; 32]]) -> Recipe {
        let chunks = hashes
            .iter()
            .enumerate()
            .map(|(i, h)| ChunkRef {
                hash: *h,
                offset: i as u64 * 100,
                len: 100,
            })
            .collect::<Vec<_>>();
        Recipe {
            size: chunks.len() as u64 * 100,
            file_hash: [0; 32],
            chunks,
        }
    }

    /// The recipe of `bytes` cut into `len`-byte chunks (BLAKE3 each).
    pub(crate) fn recipe_of(bytes: &[u8], len: usize) -> Recipe {
        let chunks = bytes
            .chunks(len)
            .enumerate()
            .map(|(i, c)| ChunkRef {
                hash: *blake3::hash(c).as_bytes(),
                offset: (i * len) as u64,
                len: c.len() as u32,
            })
            .collect();
        Recipe {
            size: bytes.len() as u64,
            file_hash: [0; 32],
            chunks,
        }
    }

    /// Files in memory by relative path: reads only (the parts' tests
    /// need no hashing, chunking or index cache).
    pub(crate) struct MemFiles(HashMap<String, Vec<u8>>);

    impl MemFiles {
        pub(crate) fn new(files: Vec<(&str, Vec<u8>)>) -> Self {
            Self(files.into_iter().map(|(p, b)| (p.to_string(), b)).collect())
        }
    }

    impl FilesSource for MemFiles {
        fn digest(&mut self, _items: &mut [FilesItem], _which: &[usize]) -> Unreadable {
            Vec::new()
        }
        fn chunk(&mut self, _items: &mut [FilesItem], _which: &[usize]) -> Unreadable {
            Vec::new()
        }
        fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>) {
            let (mut c, _) = IndexCache::open(std::env::temp_dir().join("pfs-no-cache"), store_id);
            c.reset();
            (c, None)
        }
        fn save_index(&mut self, _cache: &IndexCache) -> Option<String> {
            None
        }
        fn read(
            &mut self,
            item: &FilesItem,
            offset: u64,
            buf: &mut [u8],
        ) -> Result<Option<String>, LocalError> {
            let rel = String::from_utf8_lossy(item.entry.rel.as_bytes()).into_owned();
            let bytes = &self.0[&rel];
            let start = offset as usize;
            match bytes.get(start..start + buf.len()) {
                Some(b) => buf.copy_from_slice(b),
                None => {
                    return Err(LocalError::Io {
                        what: "read",
                        path: item.entry.abs.clone(),
                        source: std::io::ErrorKind::UnexpectedEof.into(),
                    })
                }
            }
            Ok(None)
        }
    }
}
