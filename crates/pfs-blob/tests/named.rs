//! Named blobs: create, reuse, mismatch, verify, remove, drop semantics.
//! Every test uses its own directory through `BlobConfig::dir` and the
//! `*_in` functions, so nothing touches the process environment.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use pfs_blob::{
    fill_seeded, info_in, list_in, remove_in, verify_in, Blob, BlobConfig, BlobError, Fill, Fingerprint,
};
use tempfile::TempDir;

const MIB: u64 = 1 << 20;

/// A scratch dir on tmpfs when there is one (the real default), else $TMPDIR.
fn scratch() -> TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("pfs-blob-test")
            .tempdir_in("/dev/shm")
        {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn opts(dir: &Path, name: &str, size: u64) -> BlobConfig {
    BlobConfig {
        name: Some(name.to_owned()),
        size,
        dir: Some(dir.to_path_buf()),
        threads: 2,
        region_size: 64 << 10,
        ..BlobConfig::default()
    }
}

fn blob_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("pfs-{name}.blob"))
}

#[test]
fn lifecycle_create_reuse_mismatch_verify_remove() {
    let tmp = scratch();
    let dir = tmp.path();
    let o = opts(dir, "life", 4 * MIB);

    let (a, setup) = Blob::open_or_create(&o).unwrap();
    assert!(!setup.reused_existing);
    assert_eq!(a.len(), 4 * MIB);
    assert_eq!(a.name(), Some("life"));
    assert_eq!(a.seed(), Some(0x5EED));
    let path = blob_path(dir, "life");
    assert_eq!(
        a.path().unwrap().canonicalize().unwrap(),
        path.canonicalize().unwrap()
    );
    let mut want = vec![0u8; (4 * MIB) as usize];
    fill_seeded(&mut want, 0x5EED, 1);
    assert!(a.as_slice() == want.as_slice());
    assert_eq!(*a.fingerprint(), Fingerprint::compute(&want, 64 << 10, 1));
    assert_eq!(a.recompute_fingerprint(3), *a.fingerprint());

    // Metadata is there and says what was made.
    let meta = info_in("life", None, dir).unwrap();
    assert_eq!(meta.size, 4 * MIB);
    assert_eq!(meta.fill, "seed:0x5eed");
    assert_eq!(meta.seed, Some(0x5EED));
    assert_eq!(meta.region_size, 64 << 10);
    assert_eq!(meta.root_hex, a.fingerprint().root_hex());
    assert_eq!(meta.backing, a.backing().kind.as_str());
    assert!(dir.join("pfs-life.json").exists());
    assert_eq!(std::fs::metadata(dir.join("pfs-life.fp")).unwrap().len(), 64 * 32);
    let listed = list_in(None, dir).unwrap();
    assert_eq!(
        listed.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["life"]
    );

    // Reopen: reuses, same bytes, same fingerprint, no fill.
    let (b, setup) = Blob::open_or_create(&o).unwrap();
    assert!(setup.reused_existing);
    assert_eq!(setup.fill_s, 0.0);
    assert_eq!(b.fingerprint(), a.fingerprint());
    assert!(b.as_slice() == a.as_slice());
    // Fill::None matches any existing content.
    let (c, setup) = Blob::open_or_create(&BlobConfig {
        fill: Fill::None,
        ..o.clone()
    })
    .unwrap();
    assert!(setup.reused_existing);
    assert_eq!(c.seed(), Some(0x5EED));
    drop(c);

    // Size and seed mismatches are refused and leave the file untouched.
    let before = std::fs::read(&path).unwrap();
    for bad in [
        BlobConfig {
            size: 8 * MIB,
            ..o.clone()
        },
        BlobConfig {
            fill: Fill::Seed(1),
            ..o.clone()
        },
    ] {
        match Blob::open_or_create(&bad) {
            Err(BlobError::Mismatch { name, .. }) => assert_eq!(name, "life"),
            other => panic!("expected Mismatch, got {other:?}"),
        }
        let err = Blob::open_or_create(&bad).unwrap_err().to_string();
        assert!(err.contains("pfs blob rm life"), "{err}");
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * MIB);
    assert!(std::fs::read(&path).unwrap() == before);

    // Verify passes, then a flipped byte on disk is found in its region.
    let v = verify_in("life", None, 2, dir).unwrap();
    assert!(v.ok, "{v:?}");
    assert!(v.differing.is_empty());
    assert_eq!(v.stored_root_hex, v.actual_root_hex);
    let at = 3 * MIB + 12345;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_at(&[!before[at as usize]], at).unwrap();
    drop(f);
    let v = verify_in("life", None, 2, dir).unwrap();
    assert!(!v.ok);
    let region = 64 * 1024;
    let start = at / region * region;
    assert_eq!(v.differing, vec![start..start + region]);
    // The shared mapping sees the write too.
    assert_eq!(b.as_slice()[at as usize], !before[at as usize]);

    // Remove while mappings are live: they keep reading (no SIGBUS).
    remove_in("life", None, dir).unwrap();
    assert!(!path.exists());
    assert!(!dir.join("pfs-life.json").exists());
    assert!(matches!(
        info_in("life", None, dir),
        Err(BlobError::NotFound { .. })
    ));
    assert!(matches!(
        remove_in("life", None, dir),
        Err(BlobError::NotFound { .. })
    ));
    assert_eq!(b.as_slice()[..4096], before[..4096]);
    assert_eq!(
        b.as_slice()[(4 * MIB - 1) as usize],
        before[(4 * MIB - 1) as usize]
    );
    assert_eq!(
        Fingerprint::compute(b.as_slice(), 64 << 10, 2).regions[0],
        a.fingerprint().regions[0]
    );
    drop(a); // creator's unlink finds nothing to unlink: fine
    drop(b);
}

#[test]
fn drop_unlinks_unless_keep() {
    let tmp = scratch();
    let dir = tmp.path();
    let (a, _) = Blob::open_or_create(&opts(dir, "gone", MIB)).unwrap();
    assert!(blob_path(dir, "gone").exists());
    drop(a);
    assert!(!blob_path(dir, "gone").exists());
    assert!(!dir.join("pfs-gone.json").exists());
    assert!(!dir.join("pfs-gone.fp").exists());

    let keep = BlobConfig {
        keep: true,
        ..opts(dir, "kept", MIB)
    };
    let (a, _) = Blob::open_or_create(&keep).unwrap();
    let root = a.fingerprint().root;
    drop(a);
    assert!(blob_path(dir, "kept").exists());
    // A process that only reuses never unlinks, even without keep.
    let (b, setup) = Blob::open_or_create(&opts(dir, "kept", MIB)).unwrap();
    assert!(setup.reused_existing);
    assert_eq!(b.fingerprint().root, root);
    drop(b);
    assert!(blob_path(dir, "kept").exists());
    remove_in("kept", None, dir).unwrap();
    // No temp files left behind.
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn size_is_rounded_up_with_a_warning() {
    let tmp = scratch();
    let (a, _) = Blob::open_or_create(&opts(tmp.path(), "odd", MIB + 1)).unwrap();
    assert_eq!(a.len() % 4096, 0);
    assert!(a.len() > MIB);
    assert!(
        a.backing().warnings.iter().any(|w| w.contains("rounded up")),
        "{:?}",
        a.backing().warnings
    );
    // Reopening with the same unrounded size matches the rounded blob.
    let (b, setup) = Blob::open_or_create(&opts(tmp.path(), "odd", MIB + 1)).unwrap();
    assert!(setup.reused_existing);
    assert_eq!(b.len(), a.len());
}

#[test]
fn blob_file_without_metadata_is_incomplete() {
    let tmp = scratch();
    let dir = tmp.path();
    let path = blob_path(dir, "half");
    std::fs::write(&path, vec![1u8; 4096]).unwrap();
    match Blob::open_or_create(&opts(dir, "half", 4096)) {
        Err(BlobError::Incomplete { name, .. }) => assert_eq!(name, "half"),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    assert!(matches!(
        info_in("half", None, dir),
        Err(BlobError::Incomplete { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 4096]);
    remove_in("half", None, dir).unwrap();
    assert!(!path.exists());
}

#[test]
fn bad_names_are_refused() {
    let tmp = scratch();
    for name in ["", "a/b", "../x", "sp ace", &"n".repeat(65)] {
        let r = Blob::open_or_create(&opts(tmp.path(), name, 4096));
        assert!(matches!(r, Err(BlobError::BadName { .. })), "{name:?}");
        assert!(matches!(
            info_in(name, None, tmp.path()),
            Err(BlobError::BadName { .. })
        ));
    }
}

#[test]
fn fill_from_file() {
    let tmp = scratch();
    let dir = tmp.path();
    let src = dir.join("src.bin");
    let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &content).unwrap();
    let o = BlobConfig {
        fill: Fill::File(src.clone()),
        ..opts(dir, "fromfile", 16384)
    };
    let (a, _) = Blob::open_or_create(&o).unwrap();
    assert_eq!(&a.as_slice()[..10_000], content.as_slice());
    assert!(a.as_slice()[10_000..].iter().all(|&b| b == 0));
    assert_eq!(a.seed(), None);
    assert_eq!(
        info_in("fromfile", None, dir).unwrap().fill,
        format!("file:{}", src.display())
    );
    // Same file again reuses; a seed request does not match.
    assert!(Blob::open_or_create(&o).unwrap().1.reused_existing);
    assert!(matches!(
        Blob::open_or_create(&opts(dir, "fromfile", 16384)),
        Err(BlobError::Mismatch { .. })
    ));

    let small = BlobConfig {
        fill: Fill::File(src),
        ..opts(dir, "toosmall", 4096)
    };
    assert!(matches!(
        Blob::open_or_create(&small),
        Err(BlobError::FileTooLarge { .. })
    ));
    assert!(!blob_path(dir, "toosmall").exists());
}

#[test]
fn concurrent_open_creates_once() {
    let tmp = scratch();
    let dir = tmp.path();
    let o = opts(dir, "race", 8 * MIB);
    let results: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| Blob::open_or_create(&o).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let created = results.iter().filter(|(_, r)| !r.reused_existing).count();
    assert_eq!(created, 1);
    let root = results[0].0.fingerprint().root;
    assert!(results.iter().all(|(b, _)| b.fingerprint().root == root));
}

#[test]
fn stored_fingerprint_corruption_is_detected() {
    let tmp = scratch();
    let dir = tmp.path();
    let o = BlobConfig {
        keep: true,
        ..opts(dir, "fpbad", MIB)
    };
    drop(Blob::open_or_create(&o).unwrap());
    let fp = dir.join("pfs-fpbad.fp");
    let mut bytes = std::fs::read(&fp).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&fp, &bytes).unwrap();
    assert!(matches!(
        Blob::open_or_create(&o),
        Err(BlobError::CorruptMeta { .. })
    ));
    assert!(matches!(
        verify_in("fpbad", None, 1, dir),
        Err(BlobError::CorruptMeta { .. })
    ));
}
