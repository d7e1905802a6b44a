//! Trees of the mount study: a synthetic many-file tree (seeded, when the
//! Linux tree is not at hand), and the three things timed over a tree —
//! `ls -R`, a `symlink_metadata` of every entry, and a read of every file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};

/// splitmix64: the study's one seeded generator.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; the bias is negligible for small `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Directory fan-out and depth of the synthetic tree: 8 + 64 + 512 + 4096
/// directories (the Linux 6.1 tree has about 5,000 for 78,000 files).
const FANOUT: u64 = 8;
const DEPTH: u32 = 4;

/// Writes the synthetic tree under `dir`: `files` files of random bytes
/// spread over nested directories ([`FANOUT`]^1..[`DEPTH`]), sizes
/// log-uniform from 64 B to 64 KiB (mean ≈ 9.4 KB; the Linux tree's is
/// 16.5 KB), every draw from splitmix64 seeded with `seed`.
pub fn synthetic_tree(dir: &Path, files: u64, seed: u64) -> anyhow::Result<()> {
    let mut rng = SplitMix::new(seed);
    let mut dirs: Vec<PathBuf> = vec![dir.to_path_buf()];
    let mut level = vec![dir.to_path_buf()];
    for _ in 0..DEPTH {
        let mut next = Vec::new();
        for d in &level {
            for k in 0..FANOUT {
                next.push(d.join(format!("d{k}")));
            }
        }
        dirs.extend(next.iter().cloned());
        level = next;
    }
    for d in &dirs {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let mut buf = vec![0u8; 64 << 10];
    for i in 0..files {
        let d = &dirs[rng.below(dirs.len() as u64) as usize];
        // 2^6 .. 2^16 bytes, log-uniform.
        let exp = 6.0 + (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 10.0;
        let size = (2f64.powf(exp) as usize).clamp(64, buf.len());
        for w in buf[..size.div_ceil(8) * 8].chunks_exact_mut(8) {
            w.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let p = d.join(format!("f{i:06}.c"));
        std::fs::write(&p, &buf[..size]).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// `cp -a SRC DST` (DST must not exist).
pub fn copy_tree(src: &Path, dst: &Path) -> anyhow::Result<()> {
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p)?;
    }
    let out = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(dst)
        .stdin(Stdio::null())
        .output()
        .context("running cp -a")?;
    if !out.status.success() {
        bail!(
            "cp -a {}: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Seconds of `ls -R DIR > /dev/null`.
pub fn ls_r(dir: &Path) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let out = Command::new("ls")
        .arg("-R")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running ls -R")?;
    let s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "ls -R {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(s)
}

/// A walk of every entry below `dir` with `symlink_metadata` (lstat) on
/// each, depth first: (seconds, entries).
pub fn stat_walk(dir: &Path) -> anyhow::Result<(f64, u64)> {
    let t0 = Instant::now();
    let mut n = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            let m = std::fs::symlink_metadata(&p).with_context(|| format!("lstat {}", p.display()))?;
            n += 1;
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    Ok((t0.elapsed().as_secs_f64(), n))
}

/// What a read of every file found.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadAll {
    /// Seconds.
    pub secs: f64,
    /// Files read.
    pub files: u64,
    /// Bytes read.
    pub bytes: u64,
    /// CPU of the reading thread, seconds (user + system).
    pub cpu: f64,
}

/// Reads every regular file below `dir` to its end, one thread, 1 MiB
/// reads, in directory order (what `tar -cf - DIR | cat > /dev/null` does,
/// without tar's own work).
pub fn read_all(dir: &Path) -> anyhow::Result<ReadAll> {
    let u0 = pfs_sys::thread_usage();
    let t0 = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let p = e.path();
                let mut f = std::fs::File::open(&p).with_context(|| format!("opening {}", p.display()))?;
                loop {
                    let k = f
                        .read(&mut buf)
                        .with_context(|| format!("reading {}", p.display()))?;
                    if k == 0 {
                        break;
                    }
                    bytes += k as u64;
                }
                files += 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = pfs_sys::thread_usage().since(&u0).cpu_seconds();
    Ok(ReadAll {
        secs,
        files,
        bytes,
        cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_tree_is_seeded_and_walkable() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        synthetic_tree(&a, 300, 7).unwrap();
        synthetic_tree(&b, 300, 7).unwrap();
        let ra = read_all(&a).unwrap();
        let rb = read_all(&b).unwrap();
        assert_eq!(ra.files, 300);
        assert_eq!((ra.files, ra.bytes), (rb.files, rb.bytes));
        let (_, n) = stat_walk(&a).unwrap();
        let dirs: u64 = (1..=u64::from(DEPTH)).map(|k| FANOUT.pow(k as u32)).sum();
        assert_eq!(n, 300 + dirs);
        assert!(ls_r(&a).unwrap() >= 0.0);
        assert_eq!(SplitMix::new(1).next_u64(), SplitMix::new(1).next_u64());
    }
}
