//! Named blobs on disk: where their files and metadata live, and the
//! operations on them that do not need a live [`crate::Blob`]
//! (`info`, `verify`, `list`, `remove`).
//!
//! Layout, for blob `NAME`:
//! - blob file `<dir>/pfs-NAME.blob`, where `dir` is the hugetlbfs mount when
//!   one was given and worked, else the default blob dir (`/dev/shm`, or
//!   `$PFS_BLOB_DIR`, or an explicit override);
//! - metadata `pfs-NAME.json` ([`BlobMeta`]) and `pfs-NAME.fp` (region hashes,
//!   32 bytes each) in the metadata dir: the blob's own dir, except on
//!   hugetlbfs (no `write(2)` there), where it is `/dev/shm/pfs-meta`
//!   (or `$PFS_META_DIR`, or the override);
//! - `.pfs-NAME.lock` in the default blob dir, `flock`ed while a process
//!   creates or opens the blob, so two processes never fill it twice.
//!
//! The JSON file appears last (after the region hashes), and the blob file is
//! renamed into place only after both: a blob file without metadata is an
//! interrupted creation, never a blob in use.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{BlobError, MetaProblem};
use crate::fingerprint::{hex, Fingerprint};
use crate::map;

/// Default directory of named blob files and their metadata (tmpfs).
const DEFAULT_BLOB_DIR: &str = "/dev/shm";
/// Default metadata directory for blobs on hugetlbfs.
const DEFAULT_HUGE_META_DIR: &str = "/dev/shm/pfs-meta";
/// Environment variable overriding the named-blob directory (default `/dev/shm`).
pub const ENV_BLOB_DIR: &str = "PFS_BLOB_DIR";
/// Environment variable overriding the metadata directory of hugetlbfs blobs
/// (default `/dev/shm/pfs-meta`).
pub const ENV_META_DIR: &str = "PFS_META_DIR";

/// Stored description of a named blob (`pfs-NAME.json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobMeta {
    /// Blob name.
    pub name: String,
    /// Blob length in bytes (after rounding to the page size).
    pub size: u64,
    /// How it was filled: `seed:0x5eed`, `file:/path` or `none`.
    pub fill: String,
    /// The fill seed, when filled from a seed.
    pub seed: Option<u64>,
    /// Fingerprint region size.
    pub region_size: u32,
    /// Fingerprint root, lowercase hex.
    pub root_hex: String,
    /// Backing obtained at creation (`hugetlbfs`, `thp`, `4k`).
    pub backing: String,
    /// Page size obtained at creation.
    pub page_size: u64,
    /// Absolute path of the blob file.
    pub path: PathBuf,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix: u64,
}

/// Result of [`verify`]: stored fingerprint against the bytes now in the file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerifyReport {
    /// Blob name.
    pub name: String,
    /// True iff the recomputed root equals the stored one.
    pub ok: bool,
    /// Root stored at creation.
    pub stored_root_hex: String,
    /// Root of the current content.
    pub actual_root_hex: String,
    /// Byte ranges of regions that differ, merged; `[start, end]` pairs in JSON.
    #[serde(serialize_with = "ranges_as_pairs")]
    pub differing: Vec<Range<u64>>,
    /// Time spent mapping and hashing, seconds.
    pub elapsed_s: f64,
}

fn ranges_as_pairs<S: serde::Serializer>(r: &[Range<u64>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(r.iter().map(|r| [r.start, r.end]))
}

/// Check a blob name against `[A-Za-z0-9._-]{1,64}`.
pub fn validate_name(name: &str) -> Result<(), BlobError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(BlobError::BadName {
            name: name.to_owned(),
        })
    }
}

/// Where named blobs live for one call, after applying overrides.
#[derive(Debug, Clone)]
pub(crate) struct Dirs {
    /// Directory of non-hugetlbfs blob files, their metadata and the locks.
    pub blob_dir: PathBuf,
    /// Metadata directory for blobs on hugetlbfs.
    pub huge_meta_dir: PathBuf,
}

impl Dirs {
    /// `dir` overrides both directories; otherwise the environment, then the defaults.
    pub fn new(dir: Option<&Path>) -> Dirs {
        match dir {
            Some(d) => Dirs {
                blob_dir: d.to_path_buf(),
                huge_meta_dir: d.to_path_buf(),
            },
            None => Dirs {
                blob_dir: env_dir(ENV_BLOB_DIR, DEFAULT_BLOB_DIR),
                huge_meta_dir: env_dir(ENV_META_DIR, DEFAULT_HUGE_META_DIR),
            },
        }
    }

    /// Metadata directories to search, blob dir first.
    fn meta_dirs(&self) -> Vec<&Path> {
        let mut v = vec![self.blob_dir.as_path()];
        if self.huge_meta_dir != self.blob_dir {
            v.push(&self.huge_meta_dir);
        }
        v
    }

    /// Places a blob file of this name may be, given the caller's `huge_dir`.
    pub fn candidate_blob_paths(&self, name: &str, huge_dir: Option<&Path>) -> Vec<PathBuf> {
        let mut v = Vec::new();
        if let Some(h) = huge_dir {
            v.push(h.join(blob_file_name(name)));
        }
        v.push(self.blob_dir.join(blob_file_name(name)));
        v
    }
}

fn env_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(default), PathBuf::from)
}

pub(crate) fn blob_file_name(name: &str) -> String {
    format!("pfs-{name}.blob")
}

pub(crate) fn json_path(meta_dir: &Path, name: &str) -> PathBuf {
    meta_dir.join(format!("pfs-{name}.json"))
}

pub(crate) fn fp_path(meta_dir: &Path, name: &str) -> PathBuf {
    meta_dir.join(format!("pfs-{name}.fp"))
}

/// Metadata found for a name, and the directory it was found in.
#[derive(Debug)]
pub(crate) struct Found {
    pub meta_dir: PathBuf,
    pub meta: BlobMeta,
}

/// Look for `pfs-NAME.json` in the metadata directories.
pub(crate) fn find_meta(dirs: &Dirs, name: &str) -> Result<Option<Found>, BlobError> {
    for d in dirs.meta_dirs() {
        let p = json_path(d, name);
        match fs::read(&p) {
            Ok(bytes) => {
                let meta: BlobMeta =
                    serde_json::from_slice(&bytes).map_err(|source| BlobError::Json { path: p, source })?;
                return Ok(Some(Found {
                    meta_dir: d.to_path_buf(),
                    meta,
                }));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(BlobError::io("read", p, e)),
        }
    }
    Ok(None)
}

/// Load the stored fingerprint of a blob and check it against its metadata.
pub(crate) fn load_fingerprint(meta_dir: &Path, meta: &BlobMeta) -> Result<Fingerprint, BlobError> {
    let p = fp_path(meta_dir, &meta.name);
    let bytes = fs::read(&p).map_err(|e| BlobError::io("read", &p, e))?;
    let corrupt = |problem: MetaProblem| BlobError::CorruptMeta {
        path: p.clone(),
        problem,
    };
    if meta.region_size == 0 {
        return Err(corrupt(MetaProblem::ZeroRegionSize));
    }
    let n = Fingerprint::region_count(meta.size, meta.region_size);
    if bytes.len() != n.saturating_mul(32) {
        return Err(corrupt(MetaProblem::RegionHashesLen {
            got: bytes.len(),
            expected: n.saturating_mul(32),
            regions: n,
        }));
    }
    let regions = bytes
        .chunks_exact(32)
        .map(|c| <[u8; 32]>::try_from(c).unwrap_or([0; 32]))
        .collect();
    let fp = Fingerprint::from_regions(meta.region_size, meta.size, regions);
    if fp.root_hex() != meta.root_hex {
        return Err(corrupt(MetaProblem::RootMismatch {
            computed: fp.short(),
            stored: meta.root_hex.chars().take(16).collect(),
        }));
    }
    Ok(fp)
}

/// Write `pfs-NAME.fp` then `pfs-NAME.json`, each via a temp file and rename,
/// so a reader sees either nothing or complete metadata.
pub(crate) fn write_meta(meta_dir: &Path, meta: &BlobMeta, fp: &Fingerprint) -> Result<(), BlobError> {
    fs::create_dir_all(meta_dir).map_err(|e| BlobError::io("create dir", meta_dir, e))?;
    let json = serde_json::to_vec_pretty(meta).map_err(|source| BlobError::Json {
        path: json_path(meta_dir, &meta.name),
        source,
    })?;
    write_atomic(&fp_path(meta_dir, &meta.name), &fp.regions_bytes())?;
    write_atomic(&json_path(meta_dir, &meta.name), &json)
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<(), BlobError> {
    let file_name = path.file_name().and_then(|s| s.to_str()).unwrap_or("meta");
    let tmp = path.with_file_name(format!(".{file_name}.tmp.{}", std::process::id()));
    let res = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        BlobError::io("write", path, e)
    })
}

/// Remove metadata files of `name` in `meta_dir`; true if any existed.
pub(crate) fn remove_meta(meta_dir: &Path, name: &str) -> bool {
    let a = fs::remove_file(json_path(meta_dir, name)).is_ok();
    let b = fs::remove_file(fp_path(meta_dir, name)).is_ok();
    a || b
}

/// An exclusive `flock` on `.pfs-NAME.lock`, held while a process creates or
/// opens a named blob; released on drop.
#[derive(Debug)]
pub(crate) struct NameLock {
    _file: File,
}

impl NameLock {
    pub fn acquire(blob_dir: &Path, name: &str) -> Result<NameLock, BlobError> {
        let p = blob_dir.join(format!(".pfs-{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| BlobError::io("open lock", &p, e))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| BlobError::io("flock", &p, e.into()))?;
        Ok(NameLock { _file: file })
    }
}

/// Stored metadata of a named blob.
pub fn info(name: &str, huge_dir: Option<&Path>) -> Result<BlobMeta, BlobError> {
    info_at(name, huge_dir, None)
}

/// [`info`] with blob and metadata directories overridden by `dir`.
pub fn info_in(name: &str, huge_dir: Option<&Path>, dir: &Path) -> Result<BlobMeta, BlobError> {
    info_at(name, huge_dir, Some(dir))
}

fn info_at(name: &str, huge_dir: Option<&Path>, dir: Option<&Path>) -> Result<BlobMeta, BlobError> {
    validate_name(name)?;
    let dirs = Dirs::new(dir);
    match find_meta(&dirs, name)? {
        Some(f) if f.meta.path.exists() => Ok(f.meta),
        _ => match existing_blob_file(&dirs, name, huge_dir) {
            Some(path) => Err(BlobError::Incomplete {
                name: name.to_owned(),
                path,
            }),
            None => Err(BlobError::NotFound {
                name: name.to_owned(),
            }),
        },
    }
}

fn existing_blob_file(dirs: &Dirs, name: &str, huge_dir: Option<&Path>) -> Option<PathBuf> {
    dirs.candidate_blob_paths(name, huge_dir)
        .into_iter()
        .find(|p| p.exists())
}

/// Remove a named blob: unlink its file and metadata. Never truncates, so
/// processes that still map it keep valid (now anonymous) memory.
pub fn remove(name: &str, huge_dir: Option<&Path>) -> Result<(), BlobError> {
    remove_at(name, huge_dir, None)
}

/// [`remove`] with blob and metadata directories overridden by `dir`.
pub fn remove_in(name: &str, huge_dir: Option<&Path>, dir: &Path) -> Result<(), BlobError> {
    remove_at(name, huge_dir, Some(dir))
}

fn remove_at(name: &str, huge_dir: Option<&Path>, dir: Option<&Path>) -> Result<(), BlobError> {
    validate_name(name)?;
    let dirs = Dirs::new(dir);
    let mut removed = false;
    if let Some(f) = find_meta(&dirs, name)? {
        removed |= unlink(&f.meta.path)?;
    }
    for p in dirs.candidate_blob_paths(name, huge_dir) {
        removed |= unlink(&p)?;
    }
    for d in dirs.meta_dirs() {
        removed |= remove_meta(d, name);
    }
    let _ = fs::remove_file(dirs.blob_dir.join(format!(".pfs-{name}.lock")));
    if removed {
        Ok(())
    } else {
        Err(BlobError::NotFound {
            name: name.to_owned(),
        })
    }
}

/// Unlink `p`; Ok(false) if it did not exist.
fn unlink(p: &Path) -> Result<bool, BlobError> {
    match fs::remove_file(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(BlobError::io("unlink", p, e)),
    }
}

/// Every named blob with readable metadata, sorted by name.
pub fn list(huge_dir: Option<&Path>) -> Result<Vec<BlobMeta>, BlobError> {
    list_at(huge_dir, None)
}

/// [`list`] with blob and metadata directories overridden by `dir`.
pub fn list_in(huge_dir: Option<&Path>, dir: &Path) -> Result<Vec<BlobMeta>, BlobError> {
    list_at(huge_dir, Some(dir))
}

fn list_at(_huge_dir: Option<&Path>, dir: Option<&Path>) -> Result<Vec<BlobMeta>, BlobError> {
    // Metadata of hugetlbfs blobs lives in the huge meta dir whatever the
    // caller's huge_dir, so both directories are always scanned.
    let dirs = Dirs::new(dir);
    let mut out: Vec<BlobMeta> = Vec::new();
    for d in dirs.meta_dirs() {
        let entries = match fs::read_dir(d) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(BlobError::io("read dir", d, e)),
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(fname) = file_name.to_str() else {
                continue;
            };
            let Some(name) = fname.strip_prefix("pfs-").and_then(|s| s.strip_suffix(".json")) else {
                continue;
            };
            if validate_name(name).is_err() || out.iter().any(|m| m.name == name) {
                continue;
            }
            // Skip metadata we cannot parse: `info NAME` reports why.
            if let Ok(bytes) = fs::read(entry.path()) {
                if let Ok(meta) = serde_json::from_slice::<BlobMeta>(&bytes) {
                    out.push(meta);
                }
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Map a named blob read-only, recompute its fingerprint with `threads`
/// threads (0 = all cores) and compare with the stored one.
pub fn verify(name: &str, huge_dir: Option<&Path>, threads: usize) -> Result<VerifyReport, BlobError> {
    verify_at(name, huge_dir, threads, None)
}

/// [`verify`] with blob and metadata directories overridden by `dir`.
pub fn verify_in(
    name: &str,
    huge_dir: Option<&Path>,
    threads: usize,
    dir: &Path,
) -> Result<VerifyReport, BlobError> {
    verify_at(name, huge_dir, threads, Some(dir))
}

fn verify_at(
    name: &str,
    huge_dir: Option<&Path>,
    threads: usize,
    dir: Option<&Path>,
) -> Result<VerifyReport, BlobError> {
    let meta = info_at(name, huge_dir, dir)?;
    let dirs = Dirs::new(dir);
    let found = find_meta(&dirs, name)?.ok_or_else(|| BlobError::NotFound {
        name: name.to_owned(),
    })?;
    let stored = load_fingerprint(&found.meta_dir, &meta)?;
    let t0 = Instant::now();
    let file = File::open(&meta.path).map_err(|e| BlobError::io("open", &meta.path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| BlobError::io("stat", &meta.path, e))?
        .len();
    if file_len != meta.size {
        return Err(BlobError::CorruptMeta {
            path: json_path(&found.meta_dir, name),
            problem: MetaProblem::FileSize {
                file_len,
                meta_len: meta.size,
            },
        });
    }
    let len = usize::try_from(meta.size).map_err(|_| BlobError::TooLarge { size: meta.size })?;
    let m = map::map_file_readonly(&file, len).map_err(|e| BlobError::io("map", &meta.path, e))?;
    let actual = Fingerprint::compute(&m, meta.region_size, threads);
    let elapsed_s = t0.elapsed().as_secs_f64();
    // Same shape by construction (both from meta.size and meta.region_size).
    let differing = stored.diff(&actual).unwrap_or_default();
    Ok(VerifyReport {
        name: name.to_owned(),
        ok: stored.root == actual.root,
        stored_root_hex: hex(&stored.root),
        actual_root_hex: actual.root_hex(),
        differing,
        elapsed_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        // ".." is harmless: a name only ever becomes part of "pfs-NAME.blob".
        for ok in ["a", "blob-1", "A.b_c", "..", &"x".repeat(64)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "a b", "\u{e9}", &"x".repeat(65)] {
            assert!(
                matches!(validate_name(bad), Err(BlobError::BadName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn verify_report_serializes_pairs() {
        let r = VerifyReport {
            name: "x".into(),
            ok: false,
            stored_root_hex: "a".into(),
            actual_root_hex: "b".into(),
            differing: vec![0..4, 8..12],
            elapsed_s: 0.0,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["differing"], serde_json::json!([[0, 4], [8, 12]]));
    }
}
