//! Backing selection without hugetlbfs: THP or base pages, and the warnings
//! that explain every fallback.

use std::path::Path;

use pfs_blob::{BackingKind, Blob, BlobConfig};

const MIB: u64 = 1 << 20;

/// The bracketed THP mode, e.g. "[madvise]", if THP exists on this kernel.
fn mode(file: &str) -> Option<String> {
    let s = std::fs::read_to_string(file).ok()?;
    let a = s.find('[')?;
    let b = s[a..].find(']')?;
    Some(s[a..=a + b].to_owned())
}

#[test]
fn anonymous_blob_reports_thp_consistent_with_policy() {
    let opts = BlobConfig {
        size: 64 * MIB,
        threads: 2,
        ..BlobConfig::default()
    };
    let (blob, setup) = Blob::open_or_create(&opts).unwrap();
    assert!(!setup.reused_existing);
    assert_eq!(blob.len(), 64 * MIB);
    assert_eq!(blob.name(), None);
    assert_eq!(blob.path(), None);
    let b = blob.backing();
    let m = mode("/sys/kernel/mm/transparent_hugepage/enabled");
    println!("THP mode {m:?}: backing {b:?}");
    match m.as_deref() {
        Some("[never]") | None => {
            assert_eq!(b.kind, BackingKind::SmallPages);
            assert_eq!(b.huge_bytes, 0);
            if let Some(m) = &m {
                assert!(b.warnings.iter().any(|w| w.contains(m.as_str())), "{b:?}");
            }
        }
        Some(m) => match b.kind {
            BackingKind::Thp => {
                assert!(b.huge_bytes > 0 && b.huge_bytes <= blob.len());
                assert_eq!(b.page_size % (2 * MIB), 0, "{b:?}");
                assert!(b.warnings.is_empty(), "{b:?}");
            }
            BackingKind::SmallPages => {
                // Allowed (memory fragmented), but it must say so.
                assert!(b.warnings.iter().any(|w| w.contains(m)), "{b:?}");
            }
            BackingKind::HugeTlbFs => panic!("no hugetlbfs was asked for: {b:?}"),
        },
    }
}

#[test]
fn non_hugetlbfs_huge_dir_falls_back_with_warning() {
    let tmp = tempfile::tempdir().unwrap();
    // Anonymous.
    let opts = BlobConfig {
        size: 4 * MIB,
        huge_dir: Some(tmp.path().to_path_buf()),
        ..BlobConfig::default()
    };
    let (blob, _) = Blob::open_or_create(&opts).unwrap();
    let b = blob.backing();
    assert_ne!(b.kind, BackingKind::HugeTlbFs);
    let w = b.warnings.iter().find(|w| w.contains("not a hugetlbfs mount"));
    let w = w.unwrap_or_else(|| panic!("{b:?}"));
    assert!(
        w.contains(&tmp.path().display().to_string()) && w.contains("falling back"),
        "{w}"
    );

    // Named: falls back to the blob dir and says so.
    let store = tempfile::tempdir().unwrap();
    let named = BlobConfig {
        name: Some("fallback".into()),
        dir: Some(store.path().to_path_buf()),
        ..opts
    };
    let (blob, _) = Blob::open_or_create(&named).unwrap();
    assert!(blob.path().unwrap().starts_with(store.path()));
    assert!(blob
        .backing()
        .warnings
        .iter()
        .any(|w| w.contains("not a hugetlbfs mount")));
}

#[test]
#[ignore = "needs /dev/shm"]
fn named_blob_on_tmpfs_reports_shmem_policy() {
    assert!(
        Path::new("/dev/shm").is_dir(),
        "needs /dev/shm: it is missing here"
    );
    let tmp = tempfile::Builder::new()
        .prefix("pfs-blob-test")
        .tempdir_in("/dev/shm")
        .unwrap();
    let opts = BlobConfig {
        name: Some("shm".into()),
        size: 16 * MIB,
        dir: Some(tmp.path().to_path_buf()),
        ..BlobConfig::default()
    };
    let (blob, _) = Blob::open_or_create(&opts).unwrap();
    let b = blob.backing();
    println!(
        "shmem THP {:?}: {b:?}",
        mode("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
    );
    match b.kind {
        BackingKind::Thp => assert!(b.huge_bytes > 0),
        BackingKind::SmallPages => {
            assert!(
                b.warnings
                    .iter()
                    .any(|w| w.contains("named blob on tmpfs: shmem THP is")),
                "{b:?}"
            )
        }
        BackingKind::HugeTlbFs => panic!("{b:?}"),
    }
}

#[test]
fn zero_sizes_are_refused() {
    let r = Blob::open_or_create(&BlobConfig {
        size: 0,
        ..BlobConfig::default()
    });
    assert!(matches!(r, Err(pfs_blob::BlobError::ZeroSize)));
    let r = Blob::open_or_create(&BlobConfig {
        size: 4096,
        region_size: 0,
        ..BlobConfig::default()
    });
    assert!(matches!(r, Err(pfs_blob::BlobError::ZeroRegionSize)));
}
