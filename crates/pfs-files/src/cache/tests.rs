use super::*;
use crate::chunk::chunk_bytes;
use crate::RelPath;

const OLD_MTIME: i128 = 1_600_000_000_000_000_000;

fn entry(abs: &str, size: u64, mtime_ns: i128) -> Entry {
    Entry {
        rel: RelPath::parse(b"f").unwrap(),
        kind: WalkKind::File { size },
        mode: 0o644,
        mtime_ns,
        dev: 7,
        ino: 42,
        abs: PathBuf::from(abs),
        meta: Default::default(),
    }
}

fn recipe(len: usize) -> Recipe {
    let data: Vec<u8> = (0..len as u32).map(|i| (i * 31 + i / 7) as u8).collect();
    chunk_bytes(&data, &ChunkParams::new(256).unwrap())
}

#[test]
fn put_get_save_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/recipes.bin");
    let p = ChunkParams::new(256).unwrap();
    let (mut c, w) = RecipeCache::open(&path);
    assert!(w.is_none() && c.is_empty());
    let e = entry("/data/f", 5000, OLD_MTIME);
    let r = recipe(5000);
    assert!(r.chunks.len() > 3);
    c.put(&e, &p, r.clone());
    let empty = entry("/data/empty", 0, OLD_MTIME);
    c.put(&empty, &p, Recipe::empty());
    assert_eq!(c.get(&e, &p), Some(&r));
    c.save().unwrap();

    let (mut c, w) = RecipeCache::open(&path);
    assert!(w.is_none(), "{w:?}");
    assert_eq!(c.len(), 2);
    assert_eq!(c.get(&e, &p), Some(&r));
    assert_eq!(c.get(&empty, &p), Some(&Recipe::empty()));
    // Any change of the key is a miss.
    assert!(c.get(&entry("/data/f", 5000, OLD_MTIME + 1), &p).is_none());
    assert!(c.get(&entry("/data/f", 5001, OLD_MTIME), &p).is_none());
    assert!(c.get(&entry("/data/g", 5000, OLD_MTIME), &p).is_none());
    assert!(c.get(&e, &ChunkParams::default()).is_none());
    let mut other_ino = e.clone();
    other_ino.ino = 43;
    assert!(c.get(&other_ino, &p).is_none());
    // Rewritten in place with size and mtime restored: the ctime moved.
    let mut rewritten = e.clone();
    rewritten.meta.ctime_ns = 1;
    assert!(c.get(&rewritten, &p).is_none());
    assert!(c.get_digest(&rewritten, &p).is_none());
    // Saving is repeatable and leaves no temporaries behind.
    c.save().unwrap();
    assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
}

#[test]
fn racy_and_mismatched_puts_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let p = ChunkParams::new(256).unwrap();
    let (mut c, _) = RecipeCache::open(dir.path().join("r.bin"));
    let now = unix_now_ns();
    c.put(&entry("/fresh", 100, now), &p, recipe(100));
    c.put(&entry("/future", 100, now + 10_000_000_000), &p, recipe(100));
    c.put(&entry("/wrong-size", 99, OLD_MTIME), &p, recipe(100));
    assert!(c.is_empty());
}

#[test]
fn bad_files_start_empty_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.bin");
    let p = ChunkParams::new(256).unwrap();
    let (mut c, _) = RecipeCache::open(&path);
    c.put(&entry("/data/f", 3000, OLD_MTIME), &p, recipe(3000));
    c.save().unwrap();
    let good = std::fs::read(&path).unwrap();

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("flipped byte", {
            let mut b = good.clone();
            let i = b.len() / 2;
            b[i] ^= 1;
            b
        }),
        ("truncated", good[..good.len() - 40].to_vec()),
        ("tiny", good[..10].to_vec()),
        ("empty", Vec::new()),
        (
            "foreign",
            b"hello world, this is not a cache file at all".to_vec(),
        ),
        ("version", {
            let mut b = good.clone();
            b[8] = 99;
            b
        }),
    ];
    for (what, bytes) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let (c, w) = RecipeCache::open(&path);
        assert!(c.is_empty(), "{what}");
        let w = w.unwrap_or_else(|| panic!("{what}: no warning"));
        match what {
            "foreign" | "empty" => assert!(matches!(w, CacheWarning::Foreign { .. }), "{what}: {w}"),
            "version" => assert!(matches!(w, CacheWarning::Version { found: 99, .. }), "{w}"),
            _ => assert!(matches!(w, CacheWarning::Corrupt { .. }), "{what}: {w}"),
        }
        assert!(w.to_string().contains("r.bin"));
    }
    // A directory where the file should be: unreadable.
    let (c, w) = RecipeCache::open(dir.path());
    assert!(c.is_empty());
    assert!(matches!(w, Some(CacheWarning::Unreadable { .. })));
}

#[test]
fn checksummed_garbage_is_still_refused() {
    // Valid header and checksum around a body that lies about its counts.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.bin");
    let mut body = Vec::new();
    put_u64(&mut body, u64::MAX);
    store(&path, RECIPE_MAGIC, &body).unwrap();
    let (c, w) = RecipeCache::open(&path);
    assert!(c.is_empty());
    assert!(matches!(w, Some(CacheWarning::Corrupt { .. })));
    let mut body = Vec::new();
    body.extend_from_slice(&[1; 16]);
    put_u64(&mut body, 5);
    put_u64(&mut body, 1 << 40);
    store(
        &dir.path().join("index-01010101010101010101010101010101.bin"),
        INDEX_MAGIC,
        &body,
    )
    .unwrap();
    let (c, w) = IndexCache::open(dir.path(), [1; 16]);
    assert!(c.is_empty() && c.generation() == 0);
    assert!(matches!(w, Some(CacheWarning::Corrupt { .. })));
}

#[test]
fn index_cache_extend_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let id = [0xab; 16];
    let (mut c, w) = IndexCache::open(dir.path(), id);
    assert!(w.is_none());
    assert_eq!((c.generation(), c.len()), (0, 0));
    let h = |i: u8| [i; 32];
    let k = |i: u8| index_key(&h(i));
    c.extend(3, [(k(1), 0, 100), (k(2), 100, 50)]);
    c.extend(5, [(k(3), 150, 10), (k(2), 160, 50)]);
    assert_eq!(c.generation(), 5);
    assert_eq!(c.lookup(&h(2)), Some((160, 50)));
    assert_eq!(c.lookup(&h(9)), None);
    c.save().unwrap();

    let (c2, w) = IndexCache::open(dir.path(), id);
    assert!(w.is_none());
    assert_eq!(c2.generation(), 5);
    assert_eq!(c2.len(), 3);
    for k in 1..=3 {
        assert_eq!(c2.lookup(&h(k)), c.lookup(&h(k)));
    }
    assert_eq!(c2.store_id(), id);
    // Another store's cache is a different file.
    let (other, w) = IndexCache::open(dir.path(), [1; 16]);
    assert!(w.is_none() && other.is_empty());
    // A file holding another store id is refused.
    std::fs::copy(c.path(), other.path()).unwrap();
    let (other, w) = IndexCache::open(dir.path(), [1; 16]);
    assert!(other.is_empty());
    assert!(matches!(w, Some(CacheWarning::Foreign { .. })));
    // Reset.
    let (mut c3, _) = IndexCache::open(dir.path(), id);
    c3.reset();
    assert_eq!((c3.generation(), c3.len()), (0, 0));
}

#[test]
fn cache_dir_resolution() {
    let os = |s: &str| Some(OsString::from(s));
    assert_eq!(
        cache_dir_from(os("/x/cache"), os("/home/u")).unwrap(),
        PathBuf::from("/x/cache/pfs")
    );
    assert_eq!(
        cache_dir_from(os("relative"), os("/home/u")).unwrap(),
        PathBuf::from("/home/u/.cache/pfs")
    );
    assert_eq!(
        cache_dir_from(os(""), os("/home/u")).unwrap(),
        PathBuf::from("/home/u/.cache/pfs")
    );
    assert!(matches!(cache_dir_from(None, None), Err(FilesError::NoCacheDir)));
    assert!(matches!(
        cache_dir_from(None, os("")),
        Err(FilesError::NoCacheDir)
    ));
}

#[test]
fn digests_are_cached_alone_or_beside_recipes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recipes.bin");
    let p = ChunkParams::new(256).unwrap();
    let (mut c, _) = RecipeCache::open(&path);
    let alone = entry("/data/alone", 5000, OLD_MTIME);
    let both = entry("/data/both", 4000, OLD_MTIME);
    let r = recipe(4000);
    c.put_digest(&alone, &p, [1; 16]);
    c.put(&both, &p, r.clone());
    c.put_digest(&both, &p, [2; 16]);
    // A digest for another version of the file replaces the stale record.
    let newer = entry("/data/both", 4000, OLD_MTIME + 5);
    c.save().unwrap();

    let (mut c, w) = RecipeCache::open(&path);
    assert!(w.is_none(), "{w:?}");
    assert_eq!(c.get_digest(&alone, &p), Some([1; 16]));
    assert!(c.get(&alone, &p).is_none(), "no recipe was cached for it");
    assert_eq!(c.get_digest(&both, &p), Some([2; 16]));
    assert_eq!(c.get(&both, &p), Some(&r));
    assert!(c.get_digest(&alone, &ChunkParams::default()).is_none());
    c.put_digest(&newer, &p, [3; 16]);
    assert!(c.get(&newer, &p).is_none());
    assert_eq!(c.get_digest(&newer, &p), Some([3; 16]));
    assert!(c.get_digest(&both, &p).is_none());
    // Racy files are not cached.
    let racy = entry("/data/racy", 10, unix_now_ns());
    c.put_digest(&racy, &p, [4; 16]);
    assert!(c.get_digest(&racy, &p).is_none());
}

#[test]
fn a_cache_from_before_ctimes_is_replaced_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recipes.bin");
    std::fs::write(&path, b"PFSRCPC2 and whatever followed").unwrap();
    let (c, w) = RecipeCache::open(&path);
    assert!(w.is_none() && c.is_empty(), "{w:?}");
    // Another format's magic: set aside with a warning, not read.
    std::fs::write(&path, b"PFSXXXXX").unwrap();
    assert!(matches!(
        RecipeCache::open(&path).1,
        Some(CacheWarning::Foreign { .. })
    ));
}
