//! The data sets of the files study and what a receiver keeps of them: trees
//! on disk (files, bytes, the blocks they will take), generated random data,
//! staged copies, the check that a received tree matches its source, and the
//! disk a receiver's directories use.

use std::collections::HashSet;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

/// Blocks a filesystem hands out (ext4 and tmpfs alike here): the unit the
/// harness sizes its ext4 image in.
pub const BLOCK: u64 = 4096;

/// A data set on disk and its size.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Its top directory.
    pub dir: PathBuf,
    /// Bytes of its regular files.
    pub bytes: u64,
    /// Regular files.
    pub files: u64,
    /// Directories, the top one included.
    pub dirs: u64,
    /// Bytes it takes in [`BLOCK`]s: each file and directory rounded up.
    pub block_bytes: u64,
}

impl Tree {
    /// Inodes a copy of it takes (files, directories; symlinks are few).
    pub fn inodes(&self) -> u64 {
        self.files + self.dirs
    }
}

/// Rounds `n` up to whole [`BLOCK`]s.
pub fn blocks(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// Measures the tree under `dir` (symlinks are not followed).
pub fn tree_of(dir: &Path) -> anyhow::Result<Tree> {
    let (mut bytes, mut files, mut dirs, mut block_bytes) = (0u64, 0u64, 1u64, BLOCK);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                dirs += 1;
                block_bytes += BLOCK;
                stack.push(e.path());
            } else if t.is_file() {
                let len = e.metadata()?.len();
                bytes += len;
                block_bytes += blocks(len);
                files += 1;
            }
        }
    }
    Ok(Tree {
        dir: dir.to_path_buf(),
        bytes,
        files,
        dirs,
        block_bytes,
    })
}

/// Writes `size` random, incompressible bytes (xorshift from `seed`; no two
/// blocks alike) to `path`.
fn write_random(path: &Path, size: u64, seed: u64, buf: &mut [u8]) -> anyhow::Result<()> {
    let mut state = seed | 1;
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    let mut written = 0u64;
    while written < size {
        for w in buf.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            w.copy_from_slice(&state.to_le_bytes());
        }
        let k = (size - written).min(buf.len() as u64) as usize;
        std::io::Write::write_all(&mut f, &buf[..k])?;
        written += k as u64;
    }
    std::io::Write::flush(&mut f)?;
    Ok(())
}

/// Random data of `total` bytes in files of at most `per_file` bytes
/// (`part-NNNN.bin`) under `dir`.
pub fn make_random_tree(dir: &Path, total: u64, per_file: u64) -> anyhow::Result<Tree> {
    std::fs::create_dir_all(dir)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut left, mut n) = (total, 0u64);
    while left > 0 {
        let size = left.min(per_file.max(1));
        // A seed per file: a file never repeats another's bytes.
        let seed = 0x9e37_79b9_7f4a_7c15u64 ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d);
        write_random(&dir.join(format!("part-{n:04}.bin")), size, seed, &mut buf)?;
        left -= size;
        n += 1;
    }
    tree_of(dir)
}

/// Copies `t` to `parent/tree` with `cp -a` (outside the timed part).
pub fn stage(t: &Tree, parent: &Path) -> anyhow::Result<Tree> {
    std::fs::create_dir_all(parent)?;
    let dst = parent.join("tree");
    let out = Command::new("cp")
        .arg("-a")
        .arg(&t.dir)
        .arg(&dst)
        .output()
        .context("running cp")?;
    if !out.status.success() {
        bail!(
            "cp -a {}: {}",
            t.dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    tree_of(&dst)
}

/// Compares two trees file by file (content, and that every file of `a`
/// exists in `b`).
pub fn same_tree(a: &Path, b: &Path) -> anyhow::Result<bool> {
    // One pair of buffers for the whole walk: allocating per file churns
    // memory right before the next timed row.
    let mut bufs = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(a.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(r);
            } else if t.is_file() {
                let (x, y) = (a.join(&r), b.join(&r));
                let (mx, my) = (std::fs::metadata(&x)?, std::fs::metadata(&y));
                match my {
                    Ok(my) if my.len() == mx.len() => {}
                    _ => return Ok(false),
                }
                if !same_file(&x, &y, &mut bufs)? {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

fn same_file(x: &Path, y: &Path, (bx, by): &mut (Vec<u8>, Vec<u8>)) -> anyhow::Result<bool> {
    let (mut fx, mut fy) = (std::fs::File::open(x)?, std::fs::File::open(y)?);
    loop {
        let n = read_full(&mut fx, bx)?;
        let m = read_full(&mut fy, by)?;
        if n != m || bx[..n] != by[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The name of the directory a destination keeps its own state in
/// (`pfs serve --dest DIR` without `--store`): receiver overhead, not data.
pub const DEST_STATE: &str = ".pfs";

/// What a receiver keeps on disk after a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskUse {
    /// Allocated bytes (`st_blocks` × 512) of everything under the
    /// receiver's directories — destination, store, index — each inode once.
    pub receiver: u64,
    /// Allocated bytes of the received trees alone: the destination without
    /// its [`DEST_STATE`] directory.
    pub held: u64,
    /// Bytes of the regular files it holds (their length).
    pub held_data: u64,
}

impl DiskUse {
    /// Receiver disk over what the held trees take themselves (1.0 = no
    /// second copy, no index).
    pub fn ratio(&self) -> f64 {
        if self.held > 0 {
            self.receiver as f64 / self.held as f64
        } else {
            0.0
        }
    }
}

/// Allocation of `dirs` (the receiver's directories) and of the trees held
/// in `dest`. Symlinks are not followed; a hard-linked inode counts once.
pub fn disk_use(dirs: &[&Path], dest: &Path) -> anyhow::Result<DiskUse> {
    let mut seen = HashSet::new();
    let mut receiver = 0u64;
    for d in dirs {
        receiver += allocated(d, &mut seen, None)?.0;
    }
    let (held, held_data) = allocated(dest, &mut HashSet::new(), Some(DEST_STATE))?;
    Ok(DiskUse {
        receiver,
        held,
        held_data,
    })
}

/// (allocated bytes, regular file bytes) under `top`, `top` included;
/// `skip` names a child of `top` left out.
fn allocated(top: &Path, seen: &mut HashSet<(u64, u64)>, skip: Option<&str>) -> anyhow::Result<(u64, u64)> {
    let (mut alloc, mut data) = (0u64, 0u64);
    let m = match std::fs::symlink_metadata(top) {
        Ok(m) => m,
        // A receiver that never created its directory holds nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e).with_context(|| format!("stat {}", top.display())),
    };
    let mut stack = vec![(top.to_path_buf(), m)];
    while let Some((p, m)) = stack.pop() {
        if seen.insert((m.dev(), m.ino())) {
            alloc += m.blocks() * 512;
            if m.is_file() {
                data += m.len();
            }
        }
        if m.is_dir() {
            for e in std::fs::read_dir(&p).with_context(|| format!("reading {}", p.display()))? {
                let e = e?;
                if p == top && skip.is_some_and(|s| e.file_name() == s) {
                    continue;
                }
                let em = e.metadata()?;
                stack.push((e.path(), em));
            }
        }
    }
    Ok((alloc, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_counts_files_dirs_and_blocks() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("x/y")).unwrap();
        std::fs::write(d.path().join("a"), [1u8; 10]).unwrap();
        std::fs::write(d.path().join("x/y/b"), vec![2u8; 5000]).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("link")).unwrap();
        let t = tree_of(d.path()).unwrap();
        assert_eq!((t.files, t.dirs, t.bytes), (2, 3, 5010));
        // Three directories, one block for `a`, two for `b`.
        assert_eq!(t.block_bytes, 6 * BLOCK);
        assert_eq!(t.inodes(), 5);
    }

    #[test]
    fn random_tree_is_split_and_never_repeats() {
        let d = tempfile::tempdir().unwrap();
        let t = make_random_tree(&d.path().join("r"), 3 * 4096 + 100, 4096).unwrap();
        assert_eq!((t.files, t.bytes), (4, 3 * 4096 + 100));
        let a = std::fs::read(d.path().join("r/part-0000.bin")).unwrap();
        let b = std::fs::read(d.path().join("r/part-0001.bin")).unwrap();
        assert_ne!(a, b);
        assert_ne!(a[..2048], a[2048..]);
    }

    #[test]
    fn same_tree_sees_a_changed_byte_and_a_missing_file() {
        let d = tempfile::tempdir().unwrap();
        let a = make_random_tree(&d.path().join("a"), 10_000, 4000).unwrap();
        let b = stage(&a, &d.path().join("b")).unwrap();
        assert!(same_tree(&a.dir, &b.dir).unwrap());
        let f = b.dir.join("part-0001.bin");
        let mut bytes = std::fs::read(&f).unwrap();
        bytes[17] ^= 1;
        std::fs::write(&f, bytes).unwrap();
        assert!(!same_tree(&a.dir, &b.dir).unwrap());
        std::fs::remove_file(&f).unwrap();
        assert!(!same_tree(&a.dir, &b.dir).unwrap());
    }

    #[test]
    fn disk_use_counts_inodes_once_and_leaves_state_out_of_held() {
        let d = tempfile::tempdir().unwrap();
        let (dest, store) = (d.path().join("dest"), d.path().join("store"));
        std::fs::create_dir_all(dest.join(DEST_STATE)).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(dest.join("f"), vec![7u8; 100_000]).unwrap();
        std::fs::hard_link(dest.join("f"), dest.join("g")).unwrap();
        std::fs::write(dest.join(DEST_STATE).join("index"), vec![1u8; 50_000]).unwrap();
        std::fs::write(store.join("blob"), vec![3u8; 100_000]).unwrap();
        let u = disk_use(&[&dest, &store], &dest).unwrap();
        let f = std::fs::metadata(dest.join("f")).unwrap().blocks() * 512;
        assert!(f >= 100_000);
        // The held trees: f (once, though linked twice) and dest itself.
        assert_eq!(u.held_data, 100_000, "one inode, counted once");
        assert!(u.held >= f && u.held < f + 3 * BLOCK, "{u:?}");
        // The receiver: held + the state directory + the store.
        assert!(u.receiver >= u.held + 150_000, "{u:?}");
        assert!(u.ratio() > 1.5);
        let none = disk_use(&[&d.path().join("absent")], &d.path().join("absent")).unwrap();
        assert_eq!(none, DiskUse::default());
        assert_eq!(none.ratio(), 0.0);
    }
}
