//! Persistent caches that let a sender skip work: [`RecipeCache`] (recipes of
//! local files) and [`IndexCache`] (a receiver's chunk index).
//!
//! # Recipe cache (rsync's quick check)
//! A file whose absolute path, device, inode, size, mtime and ctime match a
//! cached entry (chunked with the same [`ChunkParams`]) is assumed unchanged
//! and its recipe is reused without reading it. Like git, this trusts the
//! file's times; unlike rsync's quick check, a tool that rewrites a file in
//! place and then restores its old mtime and size does not defeat it: the
//! rewrite changes the ctime, which no tool can set (a chmod or a rename
//! changes it too, and costs one re-read). To avoid git's "racily clean" problem, [`RecipeCache::put`]
//! ignores files modified less than [`RACY_WINDOW_NS`] before the call: such a
//! file could change again within the same timestamp tick. Entries not used
//! for [`EXPIRE_SECS`] are dropped when saving.
//!
//! # Index cache
//! What a sender knows about one receiver store (identified by its 16-byte
//! store id): chunk hash → `(offset, len)` in the receiver's blob, up to a
//! generation number. After connecting, the sender asks for the entries
//! added since [`IndexCache::generation`] and [`extend`](IndexCache::extend)s.
//!
//! # File format
//! Both files are: 8-byte magic, `u32` format version, body, then the
//! BLAKE3 hash of everything before it. Integers are little-endian. A file
//! with another magic, another version, a bad checksum or inconsistent
//! content is ignored (the cache starts empty) and `open` returns a
//! [`CacheWarning`]; it is never an error. Saving writes a temporary file in
//! the same directory, fsyncs it and renames it over the old one, so a crash
//! leaves the old or the new cache.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::chunk::{ChunkParams, ChunkRef, Recipe};
use crate::error::{CacheWarning, FilesError};
use crate::walk::{Entry, WalkKind};
use crate::QuickDigest;

/// Files modified this recently (nanoseconds) are not cached; see the module docs.
pub const RACY_WINDOW_NS: i128 = 2_000_000_000;
/// Recipe-cache entries unused for this long (seconds) are dropped on save.
pub const EXPIRE_SECS: u64 = 30 * 24 * 3600;

const RECIPE_MAGIC: &[u8; 8] = b"PFSRCPC4";
/// Earlier recipe caches, replaced without a warning: before records had a
/// ctime, and before the file hash came from the chunk list.
const RECIPE_MAGICS_BEFORE: [&[u8; 8]; 2] = [b"PFSRCPC2", b"PFSRCPC3"];
const INDEX_MAGIC: &[u8; 8] = b"PFSIDX2\0";
const VERSION: u32 = 1;
const SUM_LEN: usize = 32;

/// The per-user cache directory: `$XDG_CACHE_HOME/pfs`, else `$HOME/.cache/pfs`.
/// A relative or empty `XDG_CACHE_HOME` is ignored, as the XDG spec says.
pub fn default_cache_dir() -> Result<PathBuf, FilesError> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

fn cache_dir_from(xdg: Option<OsString>, home: Option<OsString>) -> Result<PathBuf, FilesError> {
    if let Some(x) = xdg.filter(|v| Path::new(v).is_absolute()) {
        return Ok(PathBuf::from(x).join("pfs"));
    }
    match home.filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("pfs")),
        None => Err(FilesError::NoCacheDir),
    }
}

/// Keys are this machine's own paths and BLAKE3 prefixes: a fast hash is
/// enough (nothing hostile chooses them).
type FastHash = std::hash::BuildHasherDefault<twox_hash::XxHash3_64>;
type RecipeMap = HashMap<Vec<u8>, Cached, FastHash>;

/// Quick-check cache of file recipes (see the module docs).
#[derive(Debug)]
pub struct RecipeCache {
    path: PathBuf,
    map: RecipeMap,
    now_s: u64,
}

/// One cached recipe and the stat fields it is valid for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cached {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    params: ChunkParams,
    last_used_s: u64,
    /// The chunks, if the file was chunked.
    recipe: Option<Recipe>,
    /// Its XXH3-128, if it was digested whole (see [`crate::digest_file`]).
    digest: Option<QuickDigest>,
}

/// Record flags in the cache file.
const HAS_RECIPE: u8 = 1;
const HAS_DIGEST: u8 = 2;

impl Cached {
    fn matches(&self, e: &Entry, size: u64, params: &ChunkParams) -> bool {
        self.dev == e.dev
            && self.ino == e.ino
            && self.size == size
            && self.mtime_ns == e.mtime_ns
            && self.ctime_ns == e.meta.ctime_ns
            && self.params == *params
    }
}

impl RecipeCache {
    /// Load the cache at `path`. A missing file gives an empty cache; an
    /// unreadable, foreign or corrupt one gives an empty cache and a warning.
    pub fn open(path: impl Into<PathBuf>) -> (Self, Option<CacheWarning>) {
        let path = path.into();
        let mut cache = Self {
            path,
            map: RecipeMap::default(),
            now_s: unix_now_s(),
        };
        let warning = match load(&cache.path, RECIPE_MAGIC, "recipe") {
            Ok(None) => None,
            Ok(Some(body)) => match decode_recipes(&body) {
                Ok(map) => {
                    cache.map = map;
                    None
                }
                Err(detail) => Some(corrupt(&cache.path, detail)),
            },
            // An earlier format: simply replaced on the next save.
            Err(CacheWarning::Foreign { .. })
                if RECIPE_MAGICS_BEFORE.iter().any(|m| starts_with(&cache.path, m)) =>
            {
                None
            }
            Err(w) => Some(w),
        };
        (cache, warning)
    }

    /// `default_cache_dir()/recipes.bin`.
    pub fn default_path() -> Result<PathBuf, FilesError> {
        Ok(default_cache_dir()?.join("recipes.bin"))
    }

    /// Where this cache is saved.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of cached recipes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The cached recipe for `entry` if its path, device, inode, size and
    /// mtime all match and it was made with `params`.
    pub fn get(&mut self, entry: &Entry, params: &ChunkParams) -> Option<&Recipe> {
        self.valid(entry, params)?.recipe.as_ref()
    }

    /// The cached whole-file XXH3-128 for `entry`, under the same conditions
    /// as [`RecipeCache::get`].
    pub fn get_digest(&mut self, entry: &Entry, params: &ChunkParams) -> Option<QuickDigest> {
        self.valid(entry, params)?.digest
    }

    /// The record for `entry`'s path if it still describes `entry`; marks it used.
    fn valid(&mut self, entry: &Entry, params: &ChunkParams) -> Option<&mut Cached> {
        let WalkKind::File { size } = entry.kind else {
            return None;
        };
        let c = self
            .map
            .get_mut(entry.abs.as_os_str().as_bytes())
            .filter(|c| c.matches(entry, size, params))?;
        c.last_used_s = self.now_s;
        Some(c)
    }

    /// Remember the whole-file XXH3-128 of `entry` (beside its recipe, if
    /// one is cached for the same stat; else alone). Same rules as
    /// [`RecipeCache::put`].
    pub fn put_digest(&mut self, entry: &Entry, params: &ChunkParams, digest: QuickDigest) {
        if let Some(c) = self.record_for(entry, params, None) {
            c.digest = Some(digest);
        }
    }

    /// The record to fill for `entry`: the one cached for its path if it
    /// still describes `entry`, else a new empty one replacing it. `None`
    /// (nothing is cached) for non-files, a size other than `size`, and
    /// files modified less than [`RACY_WINDOW_NS`] ago.
    fn record_for(&mut self, entry: &Entry, params: &ChunkParams, size: Option<u64>) -> Option<&mut Cached> {
        let WalkKind::File { size: now } = entry.kind else {
            return None;
        };
        if size.is_some_and(|s| s != now) || entry.mtime_ns > unix_now_ns() - RACY_WINDOW_NS {
            return None;
        }
        let key = entry.abs.as_os_str().as_bytes();
        if self.valid(entry, params).is_none() {
            let fresh = Cached {
                dev: entry.dev,
                ino: entry.ino,
                size: now,
                mtime_ns: entry.mtime_ns,
                ctime_ns: entry.meta.ctime_ns,
                params: *params,
                last_used_s: self.now_s,
                recipe: None,
                digest: None,
            };
            self.map.insert(key.to_vec(), fresh);
        }
        self.map.get_mut(key)
    }

    /// Remember `recipe` for `entry` (replacing what was cached for its
    /// path; a digest cached for the same version of the file stays).
    /// Ignored for non-files, for a recipe whose size differs from the
    /// entry's, and for files modified less than [`RACY_WINDOW_NS`] ago.
    pub fn put(&mut self, entry: &Entry, params: &ChunkParams, recipe: Recipe) {
        if let Some(c) = self.record_for(entry, params, Some(recipe.size)) {
            c.recipe = Some(recipe);
        }
    }

    /// Write the cache atomically (temporary file + rename), dropping entries
    /// unused for [`EXPIRE_SECS`]. Creates the directory if needed.
    pub fn save(&mut self) -> Result<(), FilesError> {
        let cutoff = self.now_s.saturating_sub(EXPIRE_SECS);
        self.map.retain(|_, c| c.last_used_s >= cutoff);
        // Encoded a piece at a time: no buffer the size of the file.
        let mut w = CacheWriter::create(&self.path, RECIPE_MAGIC)?;
        let mut body = Vec::with_capacity(1 << 20);
        put_u64(&mut body, self.map.len() as u64);
        // Map order: the file is a snapshot, not a canonical encoding.
        for (k, c) in &self.map {
            if body.len() >= 1 << 20 {
                w.write(&body)?;
                body.clear();
            }
            put_u32(&mut body, k.len() as u32);
            body.extend_from_slice(k);
            put_u64(&mut body, c.dev);
            put_u64(&mut body, c.ino);
            put_u64(&mut body, c.size);
            body.extend_from_slice(&c.mtime_ns.to_le_bytes());
            body.extend_from_slice(&c.ctime_ns.to_le_bytes());
            put_u32(&mut body, c.params.min());
            put_u32(&mut body, c.params.avg());
            put_u32(&mut body, c.params.max());
            put_u64(&mut body, c.last_used_s);
            let flags = if c.recipe.is_some() { HAS_RECIPE } else { 0 }
                | if c.digest.is_some() { HAS_DIGEST } else { 0 };
            body.push(flags);
            if let Some(d) = &c.digest {
                body.extend_from_slice(d);
            }
            if let Some(recipe) = &c.recipe {
                body.extend_from_slice(&recipe.file_hash);
                put_u64(&mut body, recipe.chunks.len() as u64);
                for ch in &recipe.chunks {
                    body.extend_from_slice(&ch.hash);
                    put_u32(&mut body, ch.len);
                }
            }
        }
        w.write(&body)?;
        w.finish()
    }
}

fn decode_recipes(body: &[u8]) -> Result<RecipeMap, &'static str> {
    let mut r = Reader(body);
    let n = r.u64()?;
    // Smallest possible record (a digest alone): see `save`.
    const MIN_RECORD: u64 = 4 + 8 * 3 + 16 * 2 + 12 + 8 + 1 + 16;
    if n > body.len() as u64 / MIN_RECORD {
        return Err("entry count larger than the file");
    }
    let mut map = RecipeMap::with_capacity_and_hasher(n as usize, FastHash::default());
    for _ in 0..n {
        let klen = r.u32()? as usize;
        let key = r.take(klen)?.to_vec();
        let dev = r.u64()?;
        let ino = r.u64()?;
        let size = r.u64()?;
        let mtime_ns = i128::from_le_bytes(r.array()?);
        let ctime_ns = i128::from_le_bytes(r.array()?);
        let (min, avg, max) = (r.u32()?, r.u32()?, r.u32()?);
        let params = ChunkParams::with_bounds(min, avg, max).map_err(|_| "bad chunk parameters")?;
        let last_used_s = r.u64()?;
        let flags = r.array::<1>()?[0];
        if flags & !(HAS_RECIPE | HAS_DIGEST) != 0 || flags == 0 {
            return Err("bad record flags");
        }
        let digest = if flags & HAS_DIGEST != 0 {
            Some(r.array()?)
        } else {
            None
        };
        let recipe = if flags & HAS_RECIPE != 0 {
            let file_hash = r.array()?;
            let nchunks = r.u64()?;
            if nchunks > r.0.len() as u64 / 36 {
                return Err("chunk count larger than the file");
            }
            let mut chunks = Vec::with_capacity(nchunks as usize);
            let mut offset = 0u64;
            for _ in 0..nchunks {
                let hash = r.array()?;
                let len = r.u32()?;
                if len == 0 || len > params.max() {
                    return Err("chunk length out of range");
                }
                chunks.push(ChunkRef { hash, offset, len });
                offset += u64::from(len);
            }
            if offset != size {
                return Err("chunks do not add up to the file size");
            }
            Some(Recipe {
                size,
                file_hash,
                chunks,
            })
        } else {
            None
        };
        let c = Cached {
            dev,
            ino,
            size,
            mtime_ns,
            ctime_ns,
            params,
            last_used_s,
            recipe,
            digest,
        };
        map.insert(key, c);
    }
    if !r.0.is_empty() {
        return Err("trailing bytes");
    }
    Ok(map)
}

/// A sender's copy of one receiver store's chunk index (see the module docs).
#[derive(Debug)]
pub struct IndexCache {
    path: PathBuf,
    store_id: [u8; 16],
    generation: u64,
    map: IndexMap,
}

/// Bytes of a chunk hash the index keys on. A sender that finds a chunk
/// under a prefix another chunk shares sends a descriptor to the wrong
/// bytes; the receiver checks every descriptor against the full hash and
/// asks for the right bytes (NAK/REPAIR), so a collision costs a repair,
/// never a wrong file. With 2^64 prefixes that is practically never.
pub const INDEX_PREFIX: usize = 8;

/// The index key of a chunk hash.
pub fn index_key(hash: &[u8; 32]) -> [u8; INDEX_PREFIX] {
    let mut k = [0u8; INDEX_PREFIX];
    k.copy_from_slice(&hash[..INDEX_PREFIX]);
    k
}

impl IndexCache {
    /// Load the cache for `store_id` from `dir` (file `index-<hex id>.bin`).
    /// Missing, unreadable, foreign or corrupt files give an empty cache at
    /// generation 0 (plus a warning for the last three).
    pub fn open(dir: impl AsRef<Path>, store_id: [u8; 16]) -> (Self, Option<CacheWarning>) {
        let hex: String = store_id.iter().map(|b| format!("{b:02x}")).collect();
        let path = dir.as_ref().join(format!("index-{hex}.bin"));
        let mut cache = Self {
            path,
            store_id,
            generation: 0,
            map: IndexMap::default(),
        };
        let warning = match load(&cache.path, INDEX_MAGIC, "index") {
            Ok(None) => None,
            Ok(Some(body)) => match decode_index(&body, &store_id) {
                Ok(Some((generation, map))) => {
                    cache.generation = generation;
                    cache.map = map;
                    None
                }
                Ok(None) => Some(CacheWarning::Foreign {
                    path: cache.path.clone(),
                    kind: "index (for another store)",
                }),
                Err(detail) => Some(corrupt(&cache.path, detail)),
            },
            Err(w) => Some(w),
        };
        (cache, warning)
    }

    /// Where this cache is saved.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The receiver store this describes.
    pub fn store_id(&self) -> [u8; 16] {
        self.store_id
    }

    /// The receiver generation this cache is complete up to (0: nothing known).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of known chunks.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no chunk is known.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Where the receiver holds the chunk with this hash, if it does (by
    /// its [`INDEX_PREFIX`]-byte key; see [`index_key`]).
    pub fn lookup(&self, hash: &[u8; 32]) -> Option<(u64, u32)> {
        self.map.get(&index_key(hash)).copied()
    }

    /// Add the receiver's entries `(key, offset, len)` made after
    /// [`generation`](Self::generation), up to `generation` (which becomes
    /// the new generation). A later entry for a known key replaces it.
    pub fn extend(
        &mut self,
        generation: u64,
        entries: impl IntoIterator<Item = ([u8; INDEX_PREFIX], u64, u32)>,
    ) {
        self.map
            .extend(entries.into_iter().map(|(h, off, len)| (h, (off, len))));
        self.generation = generation;
    }

    /// Forget everything (the receiver no longer knows our generation, e.g.
    /// its store was rebuilt).
    pub fn reset(&mut self) {
        self.map.clear();
        self.generation = 0;
    }

    /// Write the cache atomically (temporary file + rename).
    pub fn save(&self) -> Result<(), FilesError> {
        let mut body = Vec::with_capacity(16 + 16 + self.map.len() * ENTRY_LEN as usize);
        body.extend_from_slice(&self.store_id);
        put_u64(&mut body, self.generation);
        put_u64(&mut body, self.map.len() as u64);
        let mut entries: Vec<_> = self.map.iter().collect();
        entries.sort_unstable_by_key(|(h, _)| **h);
        for (h, (off, len)) in entries {
            body.extend_from_slice(h);
            put_u64(&mut body, *off);
            put_u32(&mut body, *len);
        }
        store(&self.path, INDEX_MAGIC, &body)
    }
}

type IndexMap = HashMap<[u8; INDEX_PREFIX], (u64, u32), FastHash>;

/// Bytes of one saved index entry: key, offset, length.
const ENTRY_LEN: u64 = INDEX_PREFIX as u64 + 8 + 4;

/// `Ok(None)`: a valid file for another store.
fn decode_index(body: &[u8], want: &[u8; 16]) -> Result<Option<(u64, IndexMap)>, &'static str> {
    let mut r = Reader(body);
    let id: [u8; 16] = r.array()?;
    if id != *want {
        return Ok(None);
    }
    let generation = r.u64()?;
    let n = r.u64()?;
    if n.checked_mul(ENTRY_LEN) != Some(r.0.len() as u64) {
        return Err("entry count does not match the file size");
    }
    let mut map = IndexMap::with_capacity_and_hasher(n as usize, FastHash::default());
    for _ in 0..n {
        let h = r.array()?;
        let off = r.u64()?;
        let len = r.u32()?;
        map.insert(h, (off, len));
    }
    Ok(Some((generation, map)))
}

/// Whether the file at `path` starts with `magic`.
fn starts_with(path: &Path, magic: &[u8; 8]) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && head == *magic
}

/// Read and check a cache file: `Ok(None)` if it does not exist, the body
/// (between header and checksum) if it is valid.
pub(crate) fn load(
    path: &Path,
    magic: &[u8; 8],
    kind: &'static str,
) -> Result<Option<Vec<u8>>, CacheWarning> {
    let mut bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CacheWarning::Unreadable {
                path: path.into(),
                source,
            })
        }
    };
    if bytes.len() < 8 || bytes[..8] != magic[..] {
        return Err(CacheWarning::Foreign {
            path: path.into(),
            kind,
        });
    }
    if bytes.len() < 12 + SUM_LEN {
        return Err(corrupt(path, "truncated"));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(CacheWarning::Version {
            path: path.into(),
            found: version,
            expected: VERSION,
        });
    }
    let split = bytes.len() - SUM_LEN;
    if blake3::hash(&bytes[..split]).as_bytes()[..] != bytes[split..] {
        return Err(corrupt(path, "checksum mismatch"));
    }
    bytes.truncate(split);
    bytes.drain(..12);
    Ok(Some(bytes))
}

/// Write header + body + checksum to a temporary file beside `path`, fsync,
/// and rename it over `path`.
pub(crate) fn store(path: &Path, magic: &[u8; 8], body: &[u8]) -> Result<(), FilesError> {
    let mut w = CacheWriter::create(path, magic)?;
    w.write(body)?;
    w.finish()
}

/// A cache file written piece by piece (no whole-file buffer): header,
/// body, BLAKE3 of both; to a temporary name, renamed into place at the end.
pub(crate) struct CacheWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<io::BufWriter<fs::File>>,
    sum: blake3::Hasher,
}

impl CacheWriter {
    pub(crate) fn create(path: &Path, magic: &[u8; 8]) -> Result<Self, FilesError> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        fs::create_dir_all(dir).map_err(|e| FilesError::io("create cache directory", dir, e))?;
        static SAVES: AtomicU64 = AtomicU64::new(0);
        let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
        tmp_name.push(format!(
            ".tmp.{}.{}",
            std::process::id(),
            SAVES.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        let file = fs::File::create(&tmp).map_err(|e| FilesError::io("write cache", path, e))?;
        let mut w = Self {
            path: path.to_path_buf(),
            tmp,
            file: Some(io::BufWriter::with_capacity(1 << 20, file)),
            sum: blake3::Hasher::new(),
        };
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(magic);
        put_u32(&mut header, VERSION);
        w.write(&header)?;
        Ok(w)
    }

    pub(crate) fn write(&mut self, piece: &[u8]) -> Result<(), FilesError> {
        self.sum.update(piece);
        let result = match self.file.as_mut() {
            Some(f) => f.write_all(piece),
            None => Err(io::Error::other("cache writer already failed")),
        };
        result.map_err(|e| self.fail(e))
    }

    /// Checksum, then rename into place. No fsync: after a crash a torn
    /// file fails its checksum and is ignored with a warning, which only
    /// costs a re-read.
    pub(crate) fn finish(mut self) -> Result<(), FilesError> {
        let sum = self.sum.finalize();
        let result = match self.file.take() {
            Some(mut f) => f
                .write_all(sum.as_bytes())
                .and_then(|()| f.flush())
                .and_then(|()| fs::rename(&self.tmp, &self.path)),
            None => Err(io::Error::other("cache writer already failed")),
        };
        result.map_err(|e| self.fail(e))
    }

    fn fail(&mut self, e: io::Error) -> FilesError {
        self.file = None;
        let _ = fs::remove_file(&self.tmp);
        FilesError::io("write cache", &self.path, e)
    }
}

impl Drop for CacheWriter {
    fn drop(&mut self) {
        // Not finished: leave no temporary behind.
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

pub(crate) fn corrupt(path: &Path, detail: &'static str) -> CacheWarning {
    CacheWarning::Corrupt {
        path: path.into(),
        detail,
    }
}

pub(crate) fn put_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub(crate) fn put_u64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// Bounds-checked little-endian reader; every method fails instead of panicking.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("truncated");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, &'static str> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, &'static str> {
        self.array().map(u64::from_le_bytes)
    }
}

fn unix_now_ns() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
