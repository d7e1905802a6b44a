//! A sender's first step, before it connects: scan the paths a user names
//! ([`pfs_files::scan`]) into [`FilesItem`]s and take what the quick-check
//! recipe cache knows about them; chunking waits for the session (files the
//! receiver holds are never chunked). With [`ScanConfig::safe_links`] the
//! symlinks rsync's `--safe-links` would skip are left out and listed
//! ([`Scanned::unsafe_links`]): skipped by choice, not unreadable, so the
//! send stays whole and `--delete` still runs. [`save_recipes`] remembers
//! this send's recipes and digests for the next one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pfs_files::{
    scan_with, symlink_is_safe, ChunkParams, Excludes, FilesError, RecipeCache, SkipReason, WalkConfig,
    WalkKind,
};

use super::FilesItem;

/// What to scan, and how.
#[derive(Debug, Clone)]
pub struct ScanConfig<'a> {
    /// The paths as the user gave them (`DIR/` sends DIR's contents).
    pub paths: &'a [PathBuf],
    /// Exclude patterns (rsync's syntax, see [`Excludes`]).
    pub exclude: &'a [String],
    /// The recipe cache file (`None`: no cache).
    pub cache: Option<PathBuf>,
    /// Chunking parameters the cached recipes must have been cut with.
    pub params: ChunkParams,
    /// Take nothing from the cache: every file is read again (`--checksum`);
    /// the cache is still opened, to be updated.
    pub reread: bool,
    /// What to read besides names, kinds, modes, times and owners.
    pub walk: WalkConfig,
    /// Leave out symlinks whose target is absolute or climbs out of the
    /// destination (rsync's `--safe-links`, [`symlink_is_safe`]).
    pub safe_links: bool,
}

/// What [`scan_items`] found.
#[derive(Debug)]
pub struct Scanned {
    /// The entries to send, with cached recipes and digests filled in.
    pub items: Vec<FilesItem>,
    /// Entries left out and cache trouble, one line each.
    pub warnings: Vec<String>,
    /// Entries the scan could not read or name (not special files, which
    /// are left out by design): the transfer will be partial.
    pub unreadable: usize,
    /// The recipe cache, to save after the session (`None` without one).
    pub cache: Option<RecipeCache>,
    /// A directory was given as its contents (`DIR/`).
    pub contents: bool,
    /// That directory's mtime (ns since the epoch), for the remote
    /// directory itself ([`super::FilesSenderConfig::top_mtime_ns`]).
    pub top_mtime_ns: Option<i128>,
    /// Symlinks left out by [`ScanConfig::safe_links`]: local path and target.
    pub unsafe_links: Vec<(PathBuf, Vec<u8>)>,
    /// Time the scan and the cache lookups took.
    pub elapsed: Duration,
}

/// Scans `cfg.paths` and takes what the quick-check cache knows.
pub fn scan_items(cfg: &ScanConfig<'_>) -> Result<Scanned, FilesError> {
    let t0 = Instant::now();
    let excludes = Excludes::new(cfg.exclude)?;
    let tree = scan_with(cfg.paths, &excludes, &cfg.walk)?;
    let mut warnings: Vec<String> = tree
        .skipped
        .iter()
        .map(|s| format!("skipping {}: {}", pfs_files::escape_path(&s.path), s.reason))
        .collect();
    let unreadable = tree
        .skipped
        .iter()
        .filter(|s| matches!(s.reason, SkipReason::Unreadable(_) | SkipReason::BadPath(_)))
        .count();
    let mut cache = cfg.cache.as_ref().map(|path| {
        let (cache, warning) = RecipeCache::open(path);
        warnings.extend(warning.map(|w| w.to_string()));
        cache
    });
    let params = &cfg.params;
    let mut unsafe_links = Vec::new();
    let items = tree
        .entries
        .into_iter()
        .filter(|e| match &e.kind {
            WalkKind::Symlink { target } if cfg.safe_links && !symlink_is_safe(&e.rel, target) => {
                unsafe_links.push((e.abs.clone(), target.clone()));
                false
            }
            _ => true,
        })
        .map(|e| {
            let (recipe, digest) = match (&e.kind, cache.as_mut().filter(|_| !cfg.reread)) {
                (WalkKind::File { size }, Some(c)) => (
                    c.get(&e, params).cloned(),
                    c.get_digest(&e, params).map(|d| (*size, d)),
                ),
                _ => (None, None),
            };
            let mut item = FilesItem::new(e, recipe);
            item.digest = digest;
            item
        })
        .collect();
    Ok(Scanned {
        items,
        warnings,
        unreadable,
        cache,
        contents: tree.contents,
        top_mtime_ns: tree.contents_mtime_ns,
        unsafe_links,
        elapsed: t0.elapsed(),
    })
}

/// Remembers the recipes and whole-file digests of this send for the next
/// one; a warning if the cache could not be saved.
pub fn save_recipes(cache: &mut RecipeCache, items: &[FilesItem], params: &ChunkParams) -> Option<String> {
    for it in items {
        if let Some(r) = &it.recipe {
            cache.put(&it.entry, params, r.clone());
        }
        if let Some((_, d)) = it.digest {
            cache.put_digest(&it.entry, params, d);
        }
    }
    cache
        .save()
        .err()
        .map(|e| format!("quick-check cache not saved: {e}"))
}
