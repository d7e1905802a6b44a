//! The server side of mount (read) sessions (docs/wire.md §12): a client
//! (`pfs mount`) that connected to a files server with MOUNT_HELLO gets the
//! listing of a directory beneath its `dir=`, then, request by request, a
//! file's recipe (its content-defined chunks' lengths and BLAKE3 hashes)
//! and runs of its chunks.
//!
//! This module owns what the server does for such a client; the dispatch
//! between FILES_HELLO and MOUNT_HELLO is [`crate::server::serve_files`]'s.
//!
//! - [`core`]: [`MountServer`], the protocol as a state machine without
//!   I/O: one whole frame in, the frames that answer it out through a
//!   [`FrameOut`] (a recipe's frames go out while its file is still being
//!   cut), file-system work through a [`MountHost`]. Every number the
//!   client sends is checked against the listing and the recipes this
//!   session made; every chunk is checked against its hash before it is sent.
//! - [`host`]: the [`MountHost`] trait (list a tree, cut a file, read a
//!   chunk) and [`LocalMountHost`] over a [`pfs_files::DestRoot`]: nothing
//!   is resolved through a symlink, nothing is created or written but the
//!   recipe cache, and the server's own state (`.pfs`) is neither listed
//!   nor mountable.
//! - [`driver`]: [`serve_mount`], the core over a blocking transport.
//!
//! Recipes are cached across sessions in a [`MountRecipes`]
//! (`DEST/.pfs/mount-recipes`, a [`pfs_files::RecipeCache`]): a file asked
//! again unchanged (same device, inode, size, mtime and ctime) is not read again.

pub mod core;
pub mod driver;
pub mod host;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pfs_files::{ChunkParams, DestRoot, Entry, Recipe, RecipeCache};

pub use self::core::{BadDir, FrameOut, MountServer, MountViolation};
pub use driver::serve_mount;
pub use host::{Cut, ListError, Listed, Listing, LocalMountHost, MountHost};

/// Most entries a server lists, by default, whatever the client takes.
pub const DEFAULT_MAX_ENTRIES: u64 = 16 << 20;
/// Most chunks one FETCH may ask for, by default.
pub const DEFAULT_MAX_FETCH_CHUNKS: u32 = 1024;
/// Largest DATA body a server sends, by default (less if the client asks).
pub const DEFAULT_MAX_DATA_BODY: u32 = 1 << 20;
/// Most recipe chunks one session keeps for the files its client asked
/// about, by default (48 bytes each: about 100 MB). Past it the oldest
/// recipes are forgotten and cut again (or found in the cache) if the
/// client fetches from them again.
pub const DEFAULT_MAX_SESSION_CHUNKS: u64 = 2 << 20;
/// Name of the recipe cache in the destination's `.pfs`.
pub const RECIPE_CACHE_FILE: &str = "mount-recipes";

/// Settings of the mount sessions of a files server.
#[derive(Debug, Clone)]
pub struct MountServerConfig {
    /// How files are cut (announced as `chunk_avg`); the `pfs send`
    /// default, so recipes match the chunks senders deduplicate with.
    pub params: ChunkParams,
    /// Most LIST entries, whatever the client's `max_entries`.
    pub max_entries: u64,
    /// Most chunks one FETCH may ask for (`max_fetch_chunks`).
    pub max_fetch_chunks: u32,
    /// Largest DATA body sent (the client's `max_data_body` if smaller).
    pub max_data_body: u32,
    /// Most recipe chunks one session keeps (see [`DEFAULT_MAX_SESSION_CHUNKS`]).
    pub max_session_chunks: u64,
    /// Threads that cut one file larger than a window (0: one per core).
    pub cut_threads: usize,
    /// Longest wait for MOUNT_HELLO (or FILES_HELLO) after admission.
    pub hello_timeout: Duration,
    /// Longest a request frame may take to arrive once begun, plus one
    /// second per `min_frame_rate` bytes of it.
    pub frame_timeout: Duration,
    /// Longest wait between requests; `None` (default): a mount is idle
    /// as long as nobody reads it.
    pub idle_timeout: Option<Duration>,
    /// Longest one frame may take to be written, plus one second per
    /// `min_frame_rate` bytes: a client that stops reading is dropped.
    pub write_timeout: Duration,
    /// See `frame_timeout` and `write_timeout`.
    pub min_frame_rate: u64,
    /// Recipes shared by every session, if cached.
    pub recipes: Option<Arc<MountRecipes>>,
}

impl Default for MountServerConfig {
    fn default() -> Self {
        Self {
            params: ChunkParams::default(),
            max_entries: DEFAULT_MAX_ENTRIES,
            max_fetch_chunks: DEFAULT_MAX_FETCH_CHUNKS,
            max_data_body: DEFAULT_MAX_DATA_BODY,
            max_session_chunks: DEFAULT_MAX_SESSION_CHUNKS,
            cut_threads: 0,
            hello_timeout: Duration::from_secs(30),
            frame_timeout: Duration::from_secs(30),
            idle_timeout: None,
            write_timeout: crate::framing::DEFAULT_WRITE_TIMEOUT,
            min_frame_rate: crate::framing::DEFAULT_MIN_FRAME_RATE,
            recipes: None,
        }
    }
}

/// What one mount session served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountServerOutcome {
    /// The directory mounted, as the client named it (lossy UTF-8; empty:
    /// all its key may read).
    pub dir: String,
    /// The client's `session_nonce`.
    pub session_nonce: u64,
    /// LIST entries sent.
    pub entries: u64,
    /// Entries left out of the listing: neither file, directory nor
    /// symlink, unreadable, vanished, or a path too long for the wire.
    pub skipped: u64,
    /// RECIPE_ASKs answered.
    pub recipes: u64,
    /// Recipes found in the cache shared by sessions (not read again).
    pub recipes_cached: u64,
    /// Recipes answered `GONE` (the file changed or vanished since listed).
    pub recipes_gone: u64,
    /// FETCH requests answered.
    pub fetches: u64,
    /// Chunks sent (DATA `BYTES` entries).
    pub chunks: u64,
    /// Bytes of those chunks.
    pub bytes: u64,
    /// DATA `GONE` entries: a chunk whose file changed, vanished or could
    /// not be read, or whose bytes no longer match the recipe.
    pub gone: u64,
    /// File bytes read to cut recipes.
    pub bytes_cut: u64,
    /// What went wrong without ending the session (the recipe cache not saved).
    pub warnings: Vec<String>,
}

/// The recipe cache could not be written (logged; no session fails for it).
#[derive(Debug, thiserror::Error)]
#[error("mount recipe cache {} not saved: {source}", .path.display())]
pub struct RecipesNotSaved {
    /// The cache's file.
    pub path: std::path::PathBuf,
    /// Why.
    pub source: pfs_files::FilesError,
}

/// Recipes of the files mount sessions cut, shared by every session of a
/// server and kept across restarts: a [`RecipeCache`] behind a lock.
#[derive(Debug)]
pub struct MountRecipes {
    cache: Mutex<RecipeCache>,
}

impl MountRecipes {
    /// The cache of `dest`: `DEST/.pfs/mount-recipes` (`.pfs` created if
    /// missing). Returns a warning for the log if its file could not be
    /// read (it then starts empty) or `.pfs` could not be made.
    pub fn open(dest: &DestRoot) -> (Self, Option<String>) {
        let made = dest.state_dir().err().map(|e| format!("mount recipe cache: {e}"));
        let path = dest.path().join(pfs_files::STATE_DIR).join(RECIPE_CACHE_FILE);
        let (cache, warning) = Self::at(path);
        (cache, made.or(warning))
    }

    /// The cache saved at `path`.
    pub fn at(path: impl Into<PathBuf>) -> (Self, Option<String>) {
        let (cache, warning) = RecipeCache::open(path);
        (
            Self {
                cache: Mutex::new(cache),
            },
            warning.map(|w| format!("mount recipe cache: {w}")),
        )
    }

    /// Recipes held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recipe of `entry` if it is cached for this very version of the
    /// file (see [`RecipeCache::get`]).
    pub fn get(&self, entry: &Entry, params: &ChunkParams) -> Option<Recipe> {
        self.lock().get(entry, params).cloned()
    }

    /// Keeps `recipe` for `entry` (see [`RecipeCache::put`]).
    pub fn put(&self, entry: &Entry, params: &ChunkParams, recipe: Recipe) {
        self.lock().put(entry, params, recipe);
    }

    /// Writes the cache to its file.
    pub fn save(&self) -> Result<(), RecipesNotSaved> {
        let mut c = self.lock();
        c.save().map_err(|source| RecipesNotSaved {
            path: c.path().to_path_buf(),
            source,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecipeCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}
