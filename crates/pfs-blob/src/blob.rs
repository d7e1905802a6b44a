//! The [`Blob`]: one mapping, how it is backed, what it holds, and its
//! lifecycle (create or reuse, prefault, fill, fingerprint, unlink on drop).
//!
//! Backing is chosen in this order and every step down is reported as a
//! warning in [`BackingReport::warnings`]:
//! 1. a file on the hugetlbfs mount given as `huge_dir`;
//! 2. anonymous memory (or, for a named blob, a file in the default blob dir,
//!    tmpfs) with `MADV_HUGEPAGE`; smaps then says whether THP was obtained;
//! 3. base pages.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use memmap2::{Advice, MmapMut};
use pfs_sys::{base_page_size, FsInfo, FsType};

use crate::backing::{
    fstatfs, hugepages_available, smaps_huge, statfs, thp_mode, thp_pmd_size, BackingKind, BackingReport,
    ThpScope,
};
use crate::error::{BlobError, BlobShape, MetaProblem};
use crate::fill::{fill_seeded, resolve_threads};
use crate::fingerprint::Fingerprint;
use crate::map::{self, BlobWriter, PrefaultMethod};
use crate::named::{
    blob_file_name, find_meta, load_fingerprint, remove_meta, validate_name, write_meta, BlobMeta, Dirs,
    NameLock,
};
use crate::DEFAULT_REGION_SIZE;

/// The fill label of a named blob whose bytes a catch-up rewrote: no
/// longer a seed's or a file's (reopen it with `Fill::None`).
pub const CAUGHT_UP_FILL: &str = "catch-up";

/// Where the initial content of a new blob comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fill {
    /// The deterministic generator of [`crate::fill_seeded`].
    Seed(u64),
    /// The bytes of a file, zero-padded to the blob size.
    File(PathBuf),
    /// Leave the content as mapped (zeros for a new blob).
    None,
}

impl Fill {
    /// Label stored in metadata: `seed:0x5eed`, `file:/path` or `none`.
    pub fn label(&self) -> String {
        match self {
            Fill::Seed(s) => format!("seed:{s:#x}"),
            Fill::File(p) => format!("file:{}", p.display()),
            Fill::None => "none".to_owned(),
        }
    }

    fn seed(&self) -> Option<u64> {
        match self {
            Fill::Seed(s) => Some(*s),
            _ => None,
        }
    }
}

/// How to open or create a blob.
#[derive(Debug, Clone)]
pub struct BlobConfig {
    /// `None`: anonymous, process-private, gone at exit. `Some`: a named blob
    /// file other processes can map.
    pub name: Option<String>,
    /// Size in bytes; rounded up to the page size in use (hugetlbfs page, else
    /// the base page), with a warning when that changes it.
    pub size: u64,
    /// Initial content of a new blob. For an existing named blob it must
    /// match what the blob was filled with (`Fill::None` matches anything).
    pub fill: Fill,
    /// A hugetlbfs mount to put the blob on; anything else falls back with a warning.
    pub huge_dir: Option<PathBuf>,
    /// Fault every page in before returning (timed as `prefault_s`).
    pub prefault: bool,
    /// Keep a named blob created by this process after the [`Blob`] drops.
    pub keep: bool,
    /// Threads for prefault, fill and fingerprint; 0 = all cores.
    pub threads: usize,
    /// Fingerprint region size in bytes.
    pub region_size: u32,
    /// Directory for named blob files and metadata, overriding `/dev/shm`,
    /// `/dev/shm/pfs-meta` and `$PFS_BLOB_DIR` / `$PFS_META_DIR` (tests use it
    /// to avoid mutating the process environment).
    pub dir: Option<PathBuf>,
}

impl Default for BlobConfig {
    fn default() -> Self {
        BlobConfig {
            name: None,
            size: 1 << 30,
            fill: Fill::Seed(0x5EED),
            huge_dir: None,
            prefault: true,
            keep: false,
            threads: 0,
            region_size: DEFAULT_REGION_SIZE,
            dir: None,
        }
    }
}

/// Time spent in each setup phase, reported apart from steady state.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SetupReport {
    /// Creating the file (if any) and mapping it, seconds.
    pub map_s: f64,
    /// Faulting every page in, seconds.
    pub prefault_s: f64,
    /// Writing the initial content, seconds.
    pub fill_s: f64,
    /// Computing (or loading) the fingerprint, seconds.
    pub fingerprint_s: f64,
    /// An existing named blob was mapped instead of creating one.
    pub reused_existing: bool,
}

/// The mapped blob. Read it with [`Blob::as_slice`]; descriptors index into it.
pub struct Blob {
    map: MmapMut,
    /// Serializes repair writes ([`Blob::writer`]).
    repair: std::sync::Mutex<()>,
    backing: BackingReport,
    /// The current identity: replaced (never edited in place) when a
    /// catch-up rewrites regions, so a reader's snapshot stays whole.
    fingerprint: RwLock<Arc<Fingerprint>>,
    /// Held by the one catch-up writing into this blob at a time.
    catch_up: Mutex<()>,
    name: Option<String>,
    path: Option<PathBuf>,
    meta_dir: Option<PathBuf>,
    seed: Option<u64>,
    /// Named, created by this process and not `keep`.
    unlink_on_drop: bool,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blob")
            .field("len", &self.len())
            .field("name", &self.name)
            .field("path", &self.path)
            .field("backing", &self.backing.kind)
            .field("root", &self.fingerprint().short())
            .finish_non_exhaustive()
    }
}

/// A mapping made, before prefault and fill.
struct Mapped {
    map: MmapMut,
    /// Page size if the mapping is on hugetlbfs.
    hugetlb_page: Option<u64>,
    /// The file's filesystem; `None` for anonymous memory.
    fs_type: Option<FsType>,
}

/// Unlinks a half-created blob file unless disarmed.
struct TmpGuard(Option<PathBuf>);

impl Drop for TmpGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

impl Blob {
    /// Map the blob described by `opts`: reuse an existing named blob that
    /// matches, or create (map, prefault, fill, fingerprint) a new one.
    pub fn open_or_create(opts: &BlobConfig) -> Result<(Blob, SetupReport), BlobError> {
        if opts.size == 0 {
            return Err(BlobError::ZeroSize);
        }
        if opts.region_size == 0 {
            return Err(BlobError::ZeroRegionSize);
        }
        if usize::try_from(opts.size).is_err() {
            return Err(BlobError::TooLarge { size: opts.size });
        }
        if let Fill::File(p) = &opts.fill {
            let file_len = fs::metadata(p).map_err(|e| BlobError::io("stat", p, e))?.len();
            if file_len > opts.size {
                return Err(BlobError::FileTooLarge {
                    path: p.clone(),
                    file_len,
                    blob_len: opts.size,
                });
            }
        }
        match &opts.name {
            None => create_anon(opts),
            Some(name) => open_named(name, opts),
        }
    }

    /// The blob's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.map
    }

    /// The blob's bytes, writable (exclusive use: in-place kernels, tests).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// A writer that repairs ranges while sessions hold [`Blob::as_slice`]
    /// views: serialized, bounds-checked writes into the same mapping (a
    /// named blob's file keeps them).
    pub fn writer(&self) -> BlobWriter<'_> {
        BlobWriter::new(&self.map, &self.repair)
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Always false: zero-size blobs are refused at creation.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The backing obtained, with warnings.
    pub fn backing(&self) -> &BackingReport {
        &self.backing
    }

    /// Identity computed at fill time, or loaded from a reused blob's
    /// metadata (not recomputed: bit rot is caught by per-gram integrity and
    /// by [`crate::verify`]); after a catch-up, the regions it rewrote are
    /// hashed again ([`Blob::rehash_regions`]). A snapshot: a later
    /// catch-up replaces it, it never changes under the caller.
    pub fn fingerprint(&self) -> Arc<Fingerprint> {
        Arc::clone(&self.fingerprint.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Hash the current content again (0 threads = all cores).
    pub fn recompute_fingerprint(&self, threads: usize) -> Fingerprint {
        Fingerprint::compute(&self.map, self.fingerprint().region_size, threads)
    }

    /// The right to write this blob by catch-up, if no other catch-up holds
    /// it: two catch-ups from senders with different bytes would otherwise
    /// interleave their writes.
    pub fn try_catch_up(&self) -> Option<MutexGuard<'_, ()>> {
        match self.catch_up.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Marks `regions` as unknown before a catch-up writes into them: their
    /// hashes become all zeros (no content hashes to that), in memory and,
    /// for a named blob, in its stored metadata, so that a process killed
    /// midway never leaves a stored hash that claims bytes the region no
    /// longer holds. [`Blob::rehash_regions`] puts real hashes back.
    pub fn invalidate_regions(&self, regions: &[usize]) -> Result<Arc<Fingerprint>, BlobError> {
        self.update_regions(regions, |_| [0; 32])
    }

    /// Hashes `regions` again from the current content (after a catch-up
    /// wrote them), updates the root, and stores the result with a named
    /// blob's metadata (whose fill becomes `catch-up`: the bytes are no
    /// longer the seed's). Returns the new fingerprint.
    pub fn rehash_regions(&self, regions: &[usize]) -> Result<Arc<Fingerprint>, BlobError> {
        let rs = self.fingerprint().region_size as usize;
        self.update_regions(regions, |i| {
            let start = i.saturating_mul(rs).min(self.map.len());
            let end = start.saturating_add(rs).min(self.map.len());
            *blake3::hash(&self.map[start..end]).as_bytes()
        })
    }

    fn update_regions(
        &self,
        regions: &[usize],
        hash: impl Fn(usize) -> [u8; 32],
    ) -> Result<Arc<Fingerprint>, BlobError> {
        let mut slot = self.fingerprint.write().unwrap_or_else(PoisonError::into_inner);
        let mut hashes = slot.regions.clone();
        for &i in regions {
            if let Some(h) = hashes.get_mut(i) {
                *h = hash(i);
            }
        }
        let fp = Arc::new(Fingerprint::from_regions(slot.region_size, slot.blob_len, hashes));
        if let (Some(dir), Some(name)) = (&self.meta_dir, &self.name) {
            if let Some(found) = find_meta(&Dirs::new(Some(dir)), name)? {
                let meta = BlobMeta {
                    fill: CAUGHT_UP_FILL.to_owned(),
                    seed: None,
                    root_hex: fp.root_hex(),
                    ..found.meta
                };
                write_meta(dir, &meta, &fp)?;
            }
        }
        *slot = Arc::clone(&fp);
        Ok(fp)
    }

    /// File of a named blob.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Name of a named blob.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Seed the content was generated from, if any.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
}

impl Drop for Blob {
    fn drop(&mut self) {
        // Unlink only: other processes mapping the file keep valid memory.
        if !self.unlink_on_drop {
            return;
        }
        if let Some(p) = &self.path {
            let _ = fs::remove_file(p);
        }
        if let (Some(d), Some(n)) = (&self.meta_dir, &self.name) {
            remove_meta(d, n);
        }
    }
}

/// `size` rounded up to a multiple of `page`.
fn round_up(size: u64, page: u64) -> Result<u64, BlobError> {
    size.div_ceil(page)
        .checked_mul(page)
        .filter(|&l| usize::try_from(l).is_ok())
        .ok_or(BlobError::TooLarge { size })
}

/// `Some((dir, page size))` if `huge_dir` is a hugetlbfs mount; otherwise a
/// warning naming `fallback`.
fn probe_huge_dir(opts: &BlobConfig, fallback: &str, warnings: &mut Vec<String>) -> Option<(PathBuf, u64)> {
    let dir = opts.huge_dir.as_ref()?;
    match statfs(dir) {
        Ok(FsInfo {
            fs_type: FsType::HugeTlbFs,
            block_size: page,
        }) => Some((dir.clone(), page)),
        Ok(FsInfo { fs_type, .. }) => {
            warnings.push(format!(
                "--huge-dir {} is not a hugetlbfs mount (statfs f_type={:#x}, {fs_type}); falling back to {fallback}",
                dir.display(),
                fs_type.magic()
            ));
            None
        }
        Err(e) => {
            warnings.push(format!("--huge-dir unusable ({e}); falling back to {fallback}"));
            None
        }
    }
}

/// Why a blob file could not be made on hugetlbfs. Never returned to a
/// caller: the blob falls back to other pages and this becomes a warning line.
#[derive(Debug, thiserror::Error)]
enum HugeFileError {
    /// The rounded size does not fit in this process.
    #[error("{0}")]
    Size(BlobError),
    /// The hugepage pool has too few free pages.
    #[error(
        "hugetlbfs {dir}: blob needs {need} pages of {} KiB but only {avail} are free \
         (raise /proc/sys/vm/nr_hugepages)",
        page / 1024
    )]
    PoolShort {
        dir: PathBuf,
        need: u64,
        page: u64,
        avail: u64,
    },
    #[error("cannot create {path} on hugetlbfs: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("cannot size {path} to {len} bytes on hugetlbfs: {source}")]
    SetLen {
        path: PathBuf,
        len: u64,
        source: std::io::Error,
    },
    #[error("mapping {len} bytes on hugetlbfs {dir} failed: {source}")]
    Map {
        dir: PathBuf,
        len: u64,
        source: std::io::Error,
    },
}

/// Create `path` on hugetlbfs at `size` rounded to `page` and map it.
/// On failure, the file is gone.
fn create_hugetlbfs_file(path: &Path, page: u64, size: u64) -> Result<(MmapMut, u64), HugeFileError> {
    let dir = || path.parent().unwrap_or(Path::new("/")).to_path_buf();
    let len = round_up(size, page).map_err(HugeFileError::Size)?;
    let need = len / page;
    // Faulting a hugetlb page the pool cannot supply is SIGBUS; refuse early.
    if let Some(avail) = hugepages_available(page) {
        if need > avail {
            return Err(HugeFileError::PoolShort {
                dir: dir(),
                need,
                page,
                avail,
            });
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|source| HugeFileError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    let mut guard = TmpGuard(Some(path.to_path_buf()));
    file.set_len(len).map_err(|source| HugeFileError::SetLen {
        path: path.to_path_buf(),
        len,
        source,
    })?;
    // MAP_SHARED on hugetlbfs reserves the pages now, so a short pool fails
    // here with ENOMEM instead of at first touch.
    let map = map::map_file_shared(&file, len as usize).map_err(|source| HugeFileError::Map {
        dir: dir(),
        len,
        source,
    })?;
    guard.0 = None;
    Ok((map, len))
}

fn create_anon(opts: &BlobConfig) -> Result<(Blob, SetupReport), BlobError> {
    let threads = resolve_threads(opts.threads);
    let mut warnings = Vec::new();
    let mut report = SetupReport::default();
    let t0 = Instant::now();
    let huge = probe_huge_dir(opts, "anonymous memory with THP", &mut warnings);
    let mut mapped = None;
    if let Some((dir, page)) = huge {
        static ANON_SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = ANON_SEQ.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".pfs-anon-{}-{seq}.blob.tmp", std::process::id()));
        match create_hugetlbfs_file(&path, page, opts.size) {
            Ok((map, _)) => {
                // Unlinked at once: the mapping holds the pages, the name
                // would only leak them if we crashed.
                let _ = fs::remove_file(&path);
                mapped = Some(Mapped {
                    map,
                    hugetlb_page: Some(page),
                    fs_type: Some(FsType::HugeTlbFs),
                });
            }
            Err(w) => warnings.push(format!("{w}; falling back to anonymous memory with THP")),
        }
    }
    let mut mapped = match mapped {
        Some(m) => m,
        None => {
            let len = round_up(opts.size, base_page_size())?;
            let map = MmapMut::map_anon(len as usize).map_err(|source| BlobError::MapAnon { len, source })?;
            advise_hugepage(&map, &mut warnings);
            Mapped {
                map,
                hugetlb_page: None,
                fs_type: None,
            }
        }
    };
    note_rounding(opts.size, &mapped, &mut warnings);
    report.map_s = t0.elapsed().as_secs_f64();

    prefault(opts, &mut mapped, threads, true, &mut report, &mut warnings)?;
    fill(opts, &mut mapped.map, threads, &mut report)?;
    let t = Instant::now();
    let fingerprint = Fingerprint::compute(&mapped.map, opts.region_size, threads);
    report.fingerprint_s = t.elapsed().as_secs_f64();
    let touched = opts.prefault || opts.fill != Fill::None;
    let backing = backing_report(&mapped, touched, None, warnings);
    let blob = Blob {
        map: mapped.map,
        repair: std::sync::Mutex::new(()),
        backing,
        fingerprint: RwLock::new(Arc::new(fingerprint)),
        catch_up: Mutex::new(()),
        name: None,
        path: None,
        meta_dir: None,
        seed: opts.fill.seed(),
        unlink_on_drop: false,
    };
    Ok((blob, report))
}

fn open_named(name: &str, opts: &BlobConfig) -> Result<(Blob, SetupReport), BlobError> {
    validate_name(name)?;
    let dirs = Dirs::new(opts.dir.as_deref());
    fs::create_dir_all(&dirs.blob_dir).map_err(|e| BlobError::io("create dir", &dirs.blob_dir, e))?;
    // Held until the blob is complete: a second process waits, then reuses.
    let _lock = NameLock::acquire(&dirs.blob_dir, name)?;

    if let Some(found) = find_meta(&dirs, name)? {
        if found.meta.path.exists() {
            return reuse_named(found.meta, &found.meta_dir, opts);
        }
        // Metadata whose blob file is gone (interrupted removal): stale.
        for d in [&dirs.blob_dir, &dirs.huge_meta_dir] {
            remove_meta(d, name);
        }
    }
    let huge_dir: Option<&Path> = opts.huge_dir.as_deref();
    if let Some(path) = dirs
        .candidate_blob_paths(name, huge_dir)
        .into_iter()
        .find(|p| p.exists())
    {
        return Err(BlobError::Incomplete {
            name: name.to_owned(),
            path,
        });
    }
    create_named(name, opts, &dirs)
}

fn reuse_named(meta: BlobMeta, meta_dir: &Path, opts: &BlobConfig) -> Result<(Blob, SetupReport), BlobError> {
    let name = meta.name.clone();
    let threads = resolve_threads(opts.threads);
    let mut warnings = Vec::new();
    let mut report = SetupReport {
        reused_existing: true,
        ..SetupReport::default()
    };

    let granule = if meta.backing == BackingKind::HugeTlbFs.as_str() {
        meta.page_size.max(1)
    } else {
        base_page_size()
    };
    let fill_ok = match &opts.fill {
        Fill::None => true,
        Fill::Seed(s) => meta.seed == Some(*s),
        f @ Fill::File(_) => meta.fill == f.label(),
    };
    if round_up(opts.size, granule)? != meta.size || !fill_ok {
        return Err(BlobError::Mismatch {
            name,
            existing: BlobShape {
                size: meta.size,
                fill: meta.fill.clone(),
            },
            requested: BlobShape {
                size: opts.size,
                fill: opts.fill.label(),
            },
        });
    }
    let stored = load_fingerprint(meta_dir, &meta)?;

    let t0 = Instant::now();
    // Never truncate or resize: open without create/truncate, check length.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&meta.path)
        .map_err(|e| BlobError::io("open", &meta.path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| BlobError::io("stat", &meta.path, e))?
        .len();
    if file_len != meta.size {
        return Err(BlobError::CorruptMeta {
            path: crate::named::json_path(meta_dir, &name),
            problem: MetaProblem::FileSize {
                file_len,
                meta_len: meta.size,
            },
        });
    }
    let fs = fstatfs(&file, &meta.path)?;
    let map =
        map::map_file_shared(&file, meta.size as usize).map_err(|e| BlobError::io("map", &meta.path, e))?;
    let hugetlb_page = fs.hugetlbfs_page_size();
    if hugetlb_page.is_none() {
        advise_hugepage(&map, &mut warnings);
    }
    let mut mapped = Mapped {
        map,
        hugetlb_page,
        fs_type: Some(fs.fs_type),
    };
    if let Some(h) = &opts.huge_dir {
        if !meta.path.starts_with(h) {
            warnings.push(format!(
                "blob {name:?} already exists at {}; reusing it there, not on --huge-dir {} \
                 (remove it with `pfs blob rm {name}` to move it)",
                meta.path.display(),
                h.display()
            ));
        }
    }
    report.map_s = t0.elapsed().as_secs_f64();

    prefault(opts, &mut mapped, threads, false, &mut report, &mut warnings)?;

    let t = Instant::now();
    let fingerprint = if opts.region_size == stored.region_size {
        stored
    } else {
        warnings.push(format!(
            "stored fingerprint uses {}-byte regions, {} requested; recomputed",
            stored.region_size, opts.region_size
        ));
        Fingerprint::compute(&mapped.map, opts.region_size, threads)
    };
    report.fingerprint_s = t.elapsed().as_secs_f64();

    // A reused blob's pages were touched by its creator; for shared file
    // pages the page cache already holds them.
    let backing = backing_report(&mapped, true, meta.path.parent(), warnings);
    let blob = Blob {
        map: mapped.map,
        repair: std::sync::Mutex::new(()),
        backing,
        fingerprint: RwLock::new(Arc::new(fingerprint)),
        catch_up: Mutex::new(()),
        name: Some(name),
        path: Some(meta.path),
        meta_dir: Some(meta_dir.to_path_buf()),
        seed: meta.seed,
        unlink_on_drop: false,
    };
    Ok((blob, report))
}

fn create_named(name: &str, opts: &BlobConfig, dirs: &Dirs) -> Result<(Blob, SetupReport), BlobError> {
    let threads = resolve_threads(opts.threads);
    let mut warnings = Vec::new();
    let mut report = SetupReport::default();
    let tmp_name = format!(".pfs-{name}.blob.tmp.{}", std::process::id());
    let fallback = format!("a file in {}", dirs.blob_dir.display());

    let t0 = Instant::now();
    let huge = probe_huge_dir(opts, &fallback, &mut warnings);
    // (mapping, blob dir, metadata dir)
    let mut made: Option<(Mapped, PathBuf, PathBuf)> = None;
    if let Some((hdir, page)) = &huge {
        let tmp = hdir.join(&tmp_name);
        // We hold the name lock, so a leftover temp of ours is from a crash.
        let _ = fs::remove_file(&tmp);
        match create_hugetlbfs_file(&tmp, *page, opts.size) {
            Ok((map, _)) => {
                let mapped = Mapped {
                    map,
                    hugetlb_page: Some(*page),
                    fs_type: Some(FsType::HugeTlbFs),
                };
                made = Some((mapped, hdir.clone(), dirs.huge_meta_dir.clone()));
            }
            Err(w) => warnings.push(format!("{w}; falling back to {fallback}")),
        }
    }
    let (mut mapped, blob_dir, meta_dir) = match made {
        Some(m) => m,
        None => {
            let dir = dirs.blob_dir.clone();
            let fs_type = statfs(&dir)?.fs_type;
            let len = round_up(opts.size, base_page_size())?;
            check_space(&dir, len)?;
            let tmp = dir.join(&tmp_name);
            let _ = fs::remove_file(&tmp);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&tmp)
                .map_err(|e| BlobError::io("create", &tmp, e))?;
            let mut guard = TmpGuard(Some(tmp.clone()));
            file.set_len(len).map_err(|e| BlobError::io("set_len", &tmp, e))?;
            let map = map::map_file_shared(&file, len as usize).map_err(|e| BlobError::io("map", &tmp, e))?;
            // Re-armed below for whichever directory the blob ended up in.
            guard.0 = None;
            advise_hugepage(&map, &mut warnings);
            let mapped = Mapped {
                map,
                hugetlb_page: None,
                fs_type: Some(fs_type),
            };
            (mapped, dir.clone(), dir)
        }
    };
    let tmp_path = blob_dir.join(&tmp_name);
    let final_path = blob_dir.join(blob_file_name(name));
    let mut guard = TmpGuard(Some(tmp_path.clone()));
    note_rounding(opts.size, &mapped, &mut warnings);
    report.map_s = t0.elapsed().as_secs_f64();

    prefault(opts, &mut mapped, threads, true, &mut report, &mut warnings)?;
    fill(opts, &mut mapped.map, threads, &mut report)?;
    let t = Instant::now();
    let fingerprint = Fingerprint::compute(&mapped.map, opts.region_size, threads);
    report.fingerprint_s = t.elapsed().as_secs_f64();

    let touched = opts.prefault || opts.fill != Fill::None;
    let backing = backing_report(&mapped, touched, Some(&blob_dir), warnings);
    let meta = BlobMeta {
        name: name.to_owned(),
        size: mapped.map.len() as u64,
        fill: opts.fill.label(),
        seed: opts.fill.seed(),
        region_size: opts.region_size,
        root_hex: fingerprint.root_hex(),
        backing: backing.kind.as_str().to_owned(),
        page_size: backing.page_size,
        path: absolute(&final_path),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    write_meta(&meta_dir, &meta, &fingerprint)?;
    // The blob appears under its name only once its metadata is complete.
    if let Err(e) = fs::rename(&tmp_path, &final_path) {
        remove_meta(&meta_dir, name);
        return Err(BlobError::io("rename", &final_path, e));
    }
    guard.0 = None;

    let blob = Blob {
        map: mapped.map,
        repair: std::sync::Mutex::new(()),
        backing,
        fingerprint: RwLock::new(Arc::new(fingerprint)),
        catch_up: Mutex::new(()),
        name: Some(name.to_owned()),
        path: Some(meta.path),
        meta_dir: Some(meta_dir),
        seed: opts.fill.seed(),
        unlink_on_drop: !opts.keep,
    };
    Ok((blob, report))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A sparse file on tmpfs that outgrows the filesystem SIGBUSes on touch;
/// refuse up front when the space is visibly not there.
fn check_space(dir: &Path, need: u64) -> Result<(), BlobError> {
    let st = rustix::fs::statvfs(dir).map_err(|e| BlobError::io("statvfs", dir, e.into()))?;
    let avail = st.f_bavail.saturating_mul(st.f_frsize);
    if avail < need {
        return Err(BlobError::NoSpace {
            dir: dir.to_path_buf(),
            need,
            avail,
        });
    }
    Ok(())
}

fn advise_hugepage(map: &MmapMut, warnings: &mut Vec<String>) {
    if let Err(e) = map.advise(Advice::HugePage) {
        warnings.push(format!("madvise(MADV_HUGEPAGE) failed: {e}"));
    }
}

fn note_rounding(requested: u64, mapped: &Mapped, warnings: &mut Vec<String>) {
    let len = mapped.map.len() as u64;
    if len != requested {
        let page = mapped.hugetlb_page.unwrap_or_else(base_page_size);
        warnings.push(format!(
            "size {requested} bytes rounded up to {len} bytes (a multiple of the {page}-byte page)"
        ));
    }
}

fn prefault(
    opts: &BlobConfig,
    mapped: &mut Mapped,
    threads: usize,
    fresh: bool,
    report: &mut SetupReport,
    warnings: &mut Vec<String>,
) -> Result<(), BlobError> {
    if !opts.prefault {
        return Ok(());
    }
    let t = Instant::now();
    let page = mapped.hugetlb_page.unwrap_or_else(thp_pmd_size) as usize;
    match map::prefault(&mut mapped.map, page, threads, fresh) {
        Ok(PrefaultMethod::PopulateWrite) => {}
        Ok(PrefaultMethod::Touch) => {
            warnings.push("MADV_POPULATE_WRITE unsupported (Linux < 5.14); touched each page instead".into())
        }
        Err(e) => {
            return Err(BlobError::Prefault {
                offset: e.offset,
                len: e.len,
                source: e.source,
            })
        }
    }
    report.prefault_s = t.elapsed().as_secs_f64();
    Ok(())
}

/// Write the initial content of a fresh mapping (all zeros before this).
fn fill(
    opts: &BlobConfig,
    map: &mut MmapMut,
    threads: usize,
    report: &mut SetupReport,
) -> Result<(), BlobError> {
    let t = Instant::now();
    match &opts.fill {
        Fill::Seed(seed) => fill_seeded(map, *seed, threads),
        Fill::File(path) => {
            let mut f = File::open(path).map_err(|e| BlobError::io("open", path, e))?;
            let file_len = f.metadata().map_err(|e| BlobError::io("stat", path, e))?.len();
            let blob_len = map.len() as u64;
            if file_len > blob_len {
                return Err(BlobError::FileTooLarge {
                    path: path.clone(),
                    file_len,
                    blob_len,
                });
            }
            // The rest of the mapping is already zero: it is fresh.
            f.read_exact(&mut map[..file_len as usize])
                .map_err(|e| BlobError::io("read", path, e))?;
        }
        Fill::None => return Ok(()),
    }
    report.fill_s = t.elapsed().as_secs_f64();
    Ok(())
}

/// Ask the kernel what backs `mapped` now.
fn backing_report(
    mapped: &Mapped,
    touched: bool,
    dir: Option<&Path>,
    mut warnings: Vec<String>,
) -> BackingReport {
    let len = mapped.map.len() as u64;
    if let Some(page) = mapped.hugetlb_page {
        return BackingReport {
            kind: BackingKind::HugeTlbFs,
            page_size: page,
            huge_bytes: len,
            warnings,
        };
    }
    let huge = match smaps_huge(mapped.map.as_ptr() as usize, mapped.map.len()) {
        Ok(s) => s.thp_bytes().min(len),
        Err(e) => {
            warnings.push(format!("cannot read /proc/self/smaps ({e}); assuming base pages"));
            0
        }
    };
    if huge > 0 {
        return BackingReport {
            kind: BackingKind::Thp,
            page_size: thp_pmd_size(),
            huge_bytes: huge,
            warnings,
        };
    }
    let base = base_page_size();
    let kib = base / 1024;
    let scope = if mapped.fs_type.is_some() {
        ThpScope::Shmem
    } else {
        ThpScope::Anon
    };
    let mode = thp_mode(scope).unwrap_or_else(|| "unavailable".to_owned());
    let why = match (scope, mapped.fs_type) {
        _ if !touched => format!(
            "no page touched yet (prefault off, no fill), so no huge pages yet; reporting {kib} KiB pages"
        ),
        (ThpScope::Anon, _) if mode == "[never]" => format!("THP mode is {mode}; using {kib} KiB pages"),
        (ThpScope::Anon, _) => format!(
            "THP mode is {mode} but the kernel gave this mapping no huge pages (AnonHugePages 0 kB); \
             using {kib} KiB pages"
        ),
        (ThpScope::Shmem, Some(FsType::Tmpfs)) => {
            format!("named blob on tmpfs: shmem THP is {mode}; using {kib} KiB pages")
        }
        (ThpScope::Shmem, t) => format!(
            "named blob on a non-tmpfs filesystem{} (statfs f_type={:#x}, {}); using {kib} KiB pages",
            dir.map(|d| format!(" at {}", d.display())).unwrap_or_default(),
            t.map_or(0, |t| t.magic()),
            t.map_or_else(|| "unknown".to_owned(), |t| t.to_string())
        ),
    };
    warnings.push(why);
    BackingReport {
        kind: BackingKind::SmallPages,
        page_size: base,
        huge_bytes: 0,
        warnings,
    }
}
