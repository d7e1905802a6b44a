//! hugetlbfs backing, end to end. Needs root (to reserve pages and mount):
//! ignored unless asked for (`cargo test -- --ignored`, CI runs it as root);
//! run without what it needs, it fails saying what is missing. This is the
//! only test in its binary, so nothing else runs while it changes
//! /proc/sys/vm/nr_hugepages.

use std::path::{Path, PathBuf};
use std::process::Command;

use pfs_blob::{hugetlbfs_page_size, info_in, remove_in, verify_in, BackingKind, Blob, BlobConfig};

const MIB: u64 = 1 << 20;
const NR: &str = "/proc/sys/vm/nr_hugepages";
const FREE: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

fn read_u64(p: &str) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Unmounts and restores the pool size on drop, also when the test panics.
struct Setup {
    mount: Option<PathBuf>,
    old_nr: u64,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(m) = &self.mount {
            let _ = Command::new("umount").arg(m).status();
        }
        let _ = std::fs::write(NR, self.old_nr.to_string());
    }
}

fn skip(reason: &str) -> ! {
    panic!("needs root and hugetlbfs: {reason}");
}

#[test]
#[ignore = "needs root (reserves huge pages, mounts hugetlbfs)"]
fn hugetlbfs_named_and_anonymous() {
    if !rustix::process::geteuid().is_root() {
        skip("not root");
    }
    let Some(old_nr) = read_u64(NR) else {
        skip("no /proc/sys/vm/nr_hugepages");
    };
    let mut setup = Setup { mount: None, old_nr };
    // 32 pages for the named 64 MiB blob, 4 for the anonymous one.
    if std::fs::write(NR, (old_nr + 36).to_string()).is_err() {
        skip("cannot write nr_hugepages");
    }
    let free = read_u64(FREE).unwrap_or(0);
    if free < 36 {
        skip(&format!("only {free} free 2 MiB pages after reserving"));
    }
    let mnt = tempfile::tempdir().unwrap();
    let ok = Command::new("mount")
        .args(["-t", "hugetlbfs", "-o", "pagesize=2M", "none"])
        .arg(mnt.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("mount -t hugetlbfs failed");
    }
    setup.mount = Some(mnt.path().to_path_buf());
    let huge: &Path = mnt.path();
    assert_eq!(hugetlbfs_page_size(huge).unwrap(), Some(2 * MIB));

    let meta = tempfile::tempdir().unwrap();
    let opts = BlobConfig {
        name: Some("huge".into()),
        size: 64 * MIB,
        huge_dir: Some(huge.to_path_buf()),
        dir: Some(meta.path().to_path_buf()),
        threads: 2,
        ..BlobConfig::default()
    };
    {
        let (a, setup_a) = Blob::open_or_create(&opts).unwrap();
        println!("{:?} {setup_a:?}", a.backing());
        assert_eq!(a.backing().kind, BackingKind::HugeTlbFs);
        assert_eq!(a.backing().page_size, 2 * MIB);
        assert_eq!(a.backing().huge_bytes, 64 * MIB);
        assert_eq!(a.len(), 64 * MIB);
        assert!(a.path().unwrap().starts_with(huge));
        let mut want = vec![0u8; (64 * MIB) as usize];
        pfs_blob::fill_seeded(&mut want, 0x5EED, 1);
        assert!(a.as_slice() == want.as_slice());

        // Metadata lives outside hugetlbfs.
        let m = info_in("huge", Some(huge), meta.path()).unwrap();
        assert_eq!(m.backing, "hugetlbfs");
        assert_eq!(m.page_size, 2 * MIB);
        assert!(meta.path().join("pfs-huge.json").exists());
        assert!(verify_in("huge", Some(huge), 2, meta.path()).unwrap().ok);

        let (b, setup_b) = Blob::open_or_create(&opts).unwrap();
        assert!(setup_b.reused_existing);
        assert_eq!(b.backing().kind, BackingKind::HugeTlbFs);
        assert_eq!(b.fingerprint(), a.fingerprint());

        // More than the pool holds: falls back, saying why, no SIGBUS.
        // Only checkable when the pool is just what this test reserved.
        if free > 36 {
            skip(&format!(
                "the pool-exhaustion check needs no other huge page pool: {free} huge pages were free"
            ));
        } else {
            let big = BlobConfig {
                name: Some("toobig".into()),
                size: 128 * MIB,
                ..opts.clone()
            };
            let (c, _) = Blob::open_or_create(&big).unwrap();
            println!("{:?}", c.backing());
            assert_ne!(c.backing().kind, BackingKind::HugeTlbFs);
            assert!(
                c.backing().warnings.iter().any(|w| w.contains("nr_hugepages")),
                "{:?}",
                c.backing()
            );
            assert!(c.path().unwrap().starts_with(meta.path()));
        }
    }
    // The creator dropped without keep: file and metadata are gone.
    assert!(!huge.join("pfs-huge.blob").exists());
    assert!(remove_in("huge", Some(huge), meta.path()).is_err());

    // Anonymous blob on hugetlbfs: its file is unlinked at once.
    let anon = BlobConfig {
        size: 8 * MIB,
        huge_dir: Some(huge.to_path_buf()),
        ..BlobConfig::default()
    };
    let (d, _) = Blob::open_or_create(&anon).unwrap();
    assert_eq!(d.backing().kind, BackingKind::HugeTlbFs);
    assert_eq!(std::fs::read_dir(huge).unwrap().count(), 0);
    drop(d);
    drop(setup);
}
