//! The receiver's record of the files it wrote (or, for `--checksum`, read
//! and hashed): destination path → the file's identity when recorded
//! (inode, size, ctime) and its content hash.
//!
//! Each record also keeps the file's XXH3-128 ([`crate::QuickDigest`]),
//! which is what a sender asks about before it chunks (PROBE).
//!
//! When a sender offers a file whose BLAKE3 equals the recorded one and the
//! destination file is still the one recorded (same inode, size and ctime:
//! nothing wrote to it, renamed it or changed its metadata since), its
//! content is already right: only mode and mtime need setting, no chunk is
//! read or written. ctime cannot be set from user space, so a file edited
//! and "restored" with `touch -d` no longer matches and is rebuilt; a stale
//! or missing record only costs a rebuild, never a wrong file.
//!
//! Stored as one file in the cache format of [`crate::cache`] (magic,
//! version, body, BLAKE3), rewritten atomically; a corrupt file is ignored
//! with a warning.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cache::{corrupt, load, put_u32, put_u64, store, Reader};
use crate::error::{CacheWarning, FilesError};
use crate::QuickDigest;

const MAGIC: &[u8; 8] = b"PFSDMAN3";
/// The format before records said which chunk size their file hash was
/// computed with: read, its hashes marked as of unknown parameters.
const MAGIC_BEFORE_AVG: &[u8; 8] = b"PFSDMAN2";

/// What was written at one destination path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Inode of the file.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// ctime (ns since the epoch) after the last metadata change we made.
    pub ctime_ns: i128,
    /// The file hash of the content (computed from its chunk list: it
    /// depends on the chunk parameters).
    pub hash: [u8; 32],
    /// The average chunk size `hash` was computed with; 0: not known (a
    /// record from before), so `hash` is compared with nothing.
    pub chunk_avg: u32,
    /// XXH3-128 of the content.
    pub digest: QuickDigest,
}

impl Written {
    /// The record for `meta` (of the file just written) with file hash
    /// `hash` (computed with chunks of average `chunk_avg`) and `digest`.
    pub fn of(meta: &std::fs::Metadata, hash: [u8; 32], chunk_avg: u32, digest: QuickDigest) -> Self {
        Self {
            ino: meta.ino(),
            size: meta.size(),
            ctime_ns: ctime_ns(meta),
            hash,
            chunk_avg,
            digest,
        }
    }

    /// The record for the file just found as `st` with content `hash` and `digest`.
    pub fn of_stat(st: &crate::FileStat, hash: [u8; 32], chunk_avg: u32, digest: QuickDigest) -> Self {
        Self {
            ino: st.ino,
            size: st.size,
            ctime_ns: st.ctime_ns,
            hash,
            chunk_avg,
            digest,
        }
    }

    /// Whether `meta` still describes the file recorded.
    pub fn still(&self, meta: &std::fs::Metadata) -> bool {
        meta.is_file() && self.still_stat(&crate::FileStat::of(meta))
    }

    /// [`Written::still`] for a regular file's [`crate::FileStat`].
    pub fn still_stat(&self, st: &crate::FileStat) -> bool {
        st.ino == self.ino && st.size == self.size && st.ctime_ns == self.ctime_ns
    }
}

fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

/// Paths are not attacker-chosen keys in any way that matters here (one
/// sender fills its own records), so a fast hash beats SipHash's defence.
type PathMap = HashMap<Vec<u8>, Written, std::hash::BuildHasherDefault<twox_hash::XxHash3_64>>;

/// The manifest of one destination root, shared by concurrent sessions.
#[derive(Debug)]
pub struct Manifest {
    path: PathBuf,
    map: Mutex<PathMap>,
}

impl Manifest {
    /// Loads `path` (missing: empty; unreadable or corrupt: empty plus a warning).
    pub fn open(path: impl Into<PathBuf>) -> (Self, Option<CacheWarning>) {
        let path = path.into();
        let loaded = match load(&path, MAGIC, "destination manifest") {
            Err(CacheWarning::Foreign { .. }) => {
                load(&path, MAGIC_BEFORE_AVG, "destination manifest").map(|b| b.map(|b| (b, false)))
            }
            other => other.map(|b| b.map(|b| (b, true))),
        };
        let (map, warning) = match loaded {
            Ok(None) => (PathMap::default(), None),
            Ok(Some((body, with_avg))) => match decode(&body, with_avg) {
                Ok(m) => (m, None),
                Err(detail) => (PathMap::default(), Some(corrupt(&path, detail))),
            },
            Err(w) => (PathMap::default(), Some(w)),
        };
        (
            Self {
                path,
                map: Mutex::new(map),
            },
            warning,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PathMap> {
        match self.map.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The record of destination path `rel`, if any.
    pub fn get(&self, rel: &[u8]) -> Option<Written> {
        self.lock().get(rel).copied()
    }

    /// Records (or replaces) what was written at `rel`.
    pub fn insert(&self, rel: &[u8], w: Written) {
        self.lock().insert(rel.to_vec(), w);
    }

    /// Records kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where it is saved.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the manifest atomically (temporary file, fsync, rename).
    pub fn save(&self) -> Result<(), FilesError> {
        let body = {
            let map = self.lock();
            let mut body = Vec::with_capacity(8 + map.len() * 96);
            put_u64(&mut body, map.len() as u64);
            for (rel, w) in map.iter() {
                put_u32(&mut body, rel.len() as u32);
                body.extend_from_slice(rel);
                put_u64(&mut body, w.ino);
                put_u64(&mut body, w.size);
                body.extend_from_slice(&w.ctime_ns.to_le_bytes());
                body.extend_from_slice(&w.hash);
                put_u32(&mut body, w.chunk_avg);
                body.extend_from_slice(&w.digest);
            }
            body
        };
        store(&self.path, MAGIC, &body)
    }
}

/// The body of a manifest; `with_avg`: records carry their `chunk_avg`
/// (the current format), else it is 0.
fn decode(body: &[u8], with_avg: bool) -> Result<PathMap, &'static str> {
    let mut r = Reader(body);
    let n = r.u64()?;
    // Each record takes at least 88 bytes (84 before `chunk_avg`): a count
    // larger than that is a lie.
    if n > body.len() as u64 / if with_avg { 88 } else { 84 } {
        return Err("record count exceeds the file");
    }
    let mut map = PathMap::with_capacity_and_hasher(n as usize, Default::default());
    for _ in 0..n {
        let len = r.u32()? as usize;
        let rel = r.take(len)?.to_vec();
        let ino = r.u64()?;
        let size = r.u64()?;
        let ctime_ns = i128::from_le_bytes(r.array()?);
        let hash = r.array()?;
        let chunk_avg = if with_avg { r.u32()? } else { 0 };
        let digest = r.array()?;
        map.insert(
            rel,
            Written {
                ino,
                size,
                ctime_ns,
                hash,
                chunk_avg,
                digest,
            },
        );
    }
    if !r.0.is_empty() {
        return Err("trailing bytes");
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_reopen_and_staleness() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let (m, w) = Manifest::open(dir.path().join("manifest"));
        assert!(w.is_none() && m.is_empty());
        m.insert(b"a/f", Written::of(&meta, [7; 32], 32 << 10, [9; 16]));
        m.save().unwrap();
        let (m2, w) = Manifest::open(dir.path().join("manifest"));
        assert!(w.is_none());
        let rec = m2.get(b"a/f").unwrap();
        assert_eq!(
            (rec.hash, rec.chunk_avg, rec.digest),
            ([7; 32], 32 << 10, [9; 16])
        );
        assert!(rec.still(&std::fs::metadata(&file).unwrap()));
        // Any write changes ctime (and here the size): no longer the file recorded.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&file, b"abcd").unwrap();
        assert!(!rec.still(&std::fs::metadata(&file).unwrap()));
    }

    #[test]
    fn corrupt_manifest_is_ignored_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("manifest");
        let (m, _) = Manifest::open(&p);
        m.insert(
            b"x",
            Written {
                ino: 1,
                size: 2,
                ctime_ns: 3,
                hash: [0; 32],
                chunk_avg: 0,
                digest: [0; 16],
            },
        );
        m.save().unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let (m, w) = Manifest::open(&p);
        assert!(m.is_empty());
        assert!(w.is_some());
    }

    #[test]
    fn records_from_before_chunk_avg_load_with_it_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("manifest");
        let mut body = Vec::new();
        put_u64(&mut body, 1);
        put_u32(&mut body, 1);
        body.extend_from_slice(b"x");
        put_u64(&mut body, 5);
        put_u64(&mut body, 6);
        body.extend_from_slice(&7i128.to_le_bytes());
        body.extend_from_slice(&[8; 32]);
        body.extend_from_slice(&[9; 16]);
        store(&p, MAGIC_BEFORE_AVG, &body).unwrap();
        let (m, w) = Manifest::open(&p);
        assert!(w.is_none(), "{w:?}");
        let rec = m.get(b"x").unwrap();
        assert_eq!(
            (rec.ino, rec.size, rec.hash, rec.chunk_avg, rec.digest),
            (5, 6, [8; 32], 0, [9; 16])
        );
    }
}
