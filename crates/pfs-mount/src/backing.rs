//! Backing files for FUSE passthrough (`pfs mount --passthrough`): a file
//! whose chunks are all in the local cache is written out whole, once, as
//! `CACHE/files/<file hash>`, and the kernel then reads that file directly
//! (no request reaches this process). The cache's store scatters a file's
//! chunks, and the kernel needs one file per inode, hence the copy: it
//! costs the file's size again on disk, which is why passthrough is asked
//! for, not the default.
//!
//! The kernel reads a backing file without asking us, so one is trusted
//! only after every chunk of it was checked against the recipe: when it is
//! written (from checked chunks), and when a later mount finds it already
//! there (read back and checked chunk by chunk).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use pfs_files::FileHasher;
use pfs_wire::mount::Hash;

use crate::state::{ReadError, Shared};

/// Why a backing file was not made (the open then goes through the daemon).
#[derive(Debug)]
pub enum NotBacked {
    /// Some chunk is not in the cache yet.
    NotLocal,
    /// The recipe could not be had.
    Recipe(ReadError),
    /// Writing or reading the backing file failed.
    Io(std::io::Error),
}

/// The checked backing file of listing entry `entry`, made if needed.
pub fn backing_file(shared: &Shared, dir: &Path, entry: u64, size: u64) -> Result<File, NotBacked> {
    let chunks: Vec<(u32, Hash)> = shared
        .with_recipe(entry, size, |r| {
            (0..r.len()).map(|i| (r.chunk(i).1, r.chunk(i).2)).collect()
        })
        .map_err(NotBacked::Recipe)?;
    let mut h = FileHasher::new();
    chunks.iter().for_each(|(l, hash)| h.add(*l, hash));
    let path = dir.join(hex(&h.finish()));
    if let Ok(f) = File::open(&path) {
        if f.metadata().map(|m| m.len() == size).unwrap_or(false) && matches(&f, &chunks) {
            return Ok(f);
        }
    }
    for (_, hash) in &chunks {
        if shared.cache.get_checked(hash).is_none() {
            return Err(NotBacked::NotLocal);
        }
    }
    write(shared, dir, &path, &chunks).map_err(NotBacked::Io)?;
    File::open(&path).map_err(NotBacked::Io)
}

/// Whether the file's bytes are the chunks of the recipe.
fn matches(f: &File, chunks: &[(u32, Hash)]) -> bool {
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut buf = Vec::new();
    for (len, hash) in chunks {
        buf.resize(*len as usize, 0);
        if r.read_exact(&mut buf).is_err() || blake3::hash(&buf).as_bytes() != hash {
            return false;
        }
    }
    let mut probe = [0u8; 1];
    matches!(r.read(&mut probe), Ok(0))
}

/// Writes the file from checked cache chunks into a temporary name, then
/// renames it into place (a crash leaves no half file under the name).
fn write(shared: &Shared, dir: &Path, path: &Path, chunks: &[(u32, Hash)]) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp: PathBuf = dir.join(format!(".tmp-{}-{:x}", std::process::id(), nonce()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let result = (|| {
        for (_, hash) in chunks {
            let held = shared
                .cache
                .get_checked(hash)
                .ok_or_else(|| std::io::Error::other("a chunk left the cache while its file was written"))?;
            f.write_all(held.bytes())?;
        }
        f.sync_data()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn nonce() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
