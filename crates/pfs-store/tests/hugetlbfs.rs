//! A store whose blob lives on hugetlbfs.
//!
//! Uses an existing hugetlbfs mount, or (as root) mounts one under a temp
//! dir for the test's duration: ignored unless asked for (`cargo test --
//! --ignored`; CI runs it as root), and failing, saying why, when neither
//! works. With no free huge pages it checks that running out of them is a
//! clean [`StoreError::NoSpace`] at reserve time, not a SIGBUS, then
//! reserves a few (root) for the round trip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_all_present, chunk, open, put};
use pfs_store::{StoreBacking, StoreConfig, StoreError};

/// Unmounts on drop.
struct TempMount {
    dir: tempfile::TempDir,
}

impl Drop for TempMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}

/// A hugetlbfs mount point from /proc/mounts.
fn existing_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, point, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "hugetlbfs").then(|| PathBuf::from(point))
    })
}

/// An existing mount, or one of our own (root only).
fn hugetlbfs() -> Result<(PathBuf, Option<TempMount>), String> {
    if let Some(p) = existing_mount() {
        return Ok((p, None));
    }
    if !rustix::process::geteuid().is_root() {
        return Err("no hugetlbfs mount and not root, cannot mount one".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let status = Command::new("mount")
        .args(["-t", "hugetlbfs", "none"])
        .arg(dir.path())
        .status()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if !status.success() {
        return Err(format!("mount -t hugetlbfs failed ({status})"));
    }
    let path = dir.path().to_path_buf();
    Ok((path, Some(TempMount { dir })))
}

/// Huge pages this test added to the default pool; the old size is put
/// back on drop.
struct Pool {
    old_nr: u64,
}

const NR: &str = "/proc/sys/vm/nr_hugepages";

impl Pool {
    /// Adds `n` pages to the default pool (root only).
    fn reserve(n: u64) -> Result<Self, String> {
        let old_nr: u64 = std::fs::read_to_string(NR)
            .map_err(|e| format!("{NR}: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("{NR}: {e}"))?;
        std::fs::write(NR, (old_nr + n).to_string()).map_err(|e| format!("writing {NR}: {e}"))?;
        Ok(Self { old_nr })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.old_nr.to_string());
    }
}

/// Free huge pages of `page_size` bytes, if visible.
fn free_huge_pages(page_size: u64) -> u64 {
    let p = format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB/free_hugepages",
        page_size / 1024
    );
    std::fs::read_to_string(p)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root (mounts hugetlbfs, reserves huge pages)"]
fn store_on_hugetlbfs() {
    let (mount, guard) = hugetlbfs().unwrap_or_else(|why| panic!("needs root or a hugetlbfs mount: {why}"));
    let mut pool = None;
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreConfig {
        huge_dir: Some(mount.clone()),
        ..StoreConfig::with_capacity(64 << 20)
    };
    let (page, blob_path) = {
        let store = open(dir.path(), &opts);
        let b = store.backing().clone();
        assert_eq!(b.kind, StoreBacking::HugeTlbFs);
        assert!(
            b.description.contains("persists until reboot/unmount"),
            "{}",
            b.description
        );
        assert!(b.blob_path.starts_with(std::fs::canonicalize(&mount).unwrap()));
        let free = free_huge_pages(b.page_size);
        if free < 2 {
            // No pool: reserving must fail cleanly, not SIGBUS later.
            let e = store.reserve(1000).unwrap_err();
            assert!(matches!(e, StoreError::NoSpace { .. }), "{e}");
            assert!(e.to_string().contains("nr_hugepages"), "{e}");
            assert_eq!(store.stats().used, 0);
            // The round trip, on pages of our own.
            pool = Some(Pool::reserve(8).unwrap_or_else(|why| {
                panic!("needs root to reserve huge pages for the round trip (the clean out-of-space error was checked): {why}")
            }));
            let free = free_huge_pages(b.page_size);
            assert!(free >= 2, "needs free huge pages: {free} after reserving 8");
        }
        (b.page_size, b.blob_path)
    };
    let chunks: Vec<Vec<u8>> = (0..8).map(|i| chunk(i, 100_000)).collect();
    {
        let store = open(dir.path(), &opts);
        assert!(store.recovery().is_clean(), "{:?}", store.recovery());
        put(&store, &chunks);
        assert_all_present(&store, &chunks);
        let st = store.stats();
        assert_eq!(st.file_len % page, 0, "hugetlbfs file grows in huge pages");
    }
    // Reopen: still there (until reboot/unmount), and the index points at it.
    {
        let store = open(dir.path(), &opts);
        assert!(store.recovery().is_clean(), "{:?}", store.recovery());
        assert_all_present(&store, &chunks);
        assert!(store.verify_all(2).is_empty());
    }
    // Simulate a reboot: the hugetlbfs file is gone, the index is not.
    std::fs::remove_file(&blob_path).unwrap();
    {
        let store = open(dir.path(), &opts);
        let rec = store.recovery();
        assert!(rec.blob_missing && rec.new_identity, "{rec:?}");
        assert_eq!(store.stats().chunks, 0);
    }
    cleanup(&blob_path, guard);
    drop(pool);
}

fn cleanup(blob: &Path, guard: Option<TempMount>) {
    let _ = std::fs::remove_file(blob);
    drop(guard);
}
