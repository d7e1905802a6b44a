//! PacketFS files layer: files and trees ↔ chunk recipes.
//!
//! A sender describes each file as a [`Recipe`]: content-defined chunks, each
//! named by its BLAKE3 hash, plus the hash of the whole file. The receiver
//! already holds many chunks in its blob and gets descriptors for those and
//! literal bytes for the rest. This crate has no network code; it owns:
//!
//! - [`walk`]: the paths a user names → ordered [`Entry`]s, with excludes;
//! - [`chunk`]: bytes and files → [`Recipe`]s, fast and in parallel;
//! - [`cache`]: the sender's quick-check [`RecipeCache`] and its copy of a
//!   receiver's chunk index ([`IndexCache`]);
//! - [`path`] and [`dest`]: [`RelPath`], the only form a path takes between
//!   peers, and [`DestRoot`], which confines every receiver-side write
//!   beneath the destination directory;
//! - [`manifest`]: the receiver's record of the files it wrote, so content
//!   it already holds is not rewritten;
//! - [`xattr`]: which extended attributes travel, and reading them;
//! - [`mod@escape`]: names in human output, control characters escaped as rsync does;
//! - [`error`]: typed errors.
//!
//! ```no_run
//! use pfs_files::{chunk_files, scan, ChunkParams, WalkKind, Excludes, RecipeCache};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let params = ChunkParams::default();
//! let excludes = Excludes::new(&["*.tmp".to_string(), "target/".to_string()])?;
//! let tree = scan(&["./photos".into()], &excludes)?;
//! for s in &tree.skipped {
//!     eprintln!("warning: skipping {}: {}", s.path.display(), s.reason);
//! }
//! let (mut cache, warning) = RecipeCache::open(RecipeCache::default_path()?);
//! if let Some(w) = warning {
//!     eprintln!("warning: {w}");
//! }
//! // Chunk only the files the cache does not know.
//! let todo: Vec<_> = tree
//!     .entries
//!     .iter()
//!     .filter(|e| matches!(e.kind, WalkKind::File { .. }))
//!     .filter(|e| cache.get(e, &params).is_none())
//!     .collect();
//! for (entry, recipe) in todo.iter().zip(chunk_files(&todo, &params, 0)?) {
//!     let recipe = recipe?;
//!     println!("{} {} bytes, {} chunks", entry.rel, recipe.size, recipe.chunks.len());
//!     cache.put(entry, &params, recipe);
//! }
//! cache.save()?;
//! # Ok(()) }
//! ```

pub mod cache;
pub mod chunk;
pub mod dest;
pub mod error;
pub mod escape;
pub mod manifest;
pub mod path;
pub mod walk;
pub mod xattr;

pub use cache::{default_cache_dir, index_key, IndexCache, RecipeCache, INDEX_PREFIX};
pub use chunk::{
    chunk_and_digest_open_file, chunk_bytes, chunk_file, chunk_file_streaming, chunk_files,
    chunk_files_metered, chunk_lengths, chunk_open_file_streaming, digest_file, digest_files,
    digest_files_metered, digest_open_file, quick_digest, ChunkParams, ChunkRef, ChunkSink, FileHasher,
    QuickDigest, Recipe, FILE_HASH_CONTEXT,
};
pub use dest::{
    may_chown, set_file_times_and_mode, DestIndex, DestRoot, FileSpec, FileStat, LandError, Landing, Linked,
    ParkedTemp, Placement, Removed, StatCache, StateRepair, Symlinked, TempFile, STATE_DIR,
};
pub use error::{CacheWarning, ChunkParamsError, FilesError, PathError};
pub use escape::{escape, escape_path, Escaped};
pub use manifest::{Manifest, Written};
pub use path::{check_symlink_target, symlink_is_safe, RelPath};
pub use walk::{
    scan, scan_with, Entry, EntryMeta, Excludes, Scan, SkipReason, Skipped, WalkConfig, WalkKind,
};
pub use xattr::XattrScope;
