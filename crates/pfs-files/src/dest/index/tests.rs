use std::fs;

use super::*;

fn rp(s: &str) -> RelPath {
    RelPath::parse(s.as_bytes()).unwrap()
}

fn stat(size: u64, ino: u64) -> FileStat {
    FileStat {
        ino,
        size,
        mtime_ns: 1,
        ctime_ns: 2,
        mode: 0o644,
    }
}

fn h(n: u8) -> Hash {
    [n; 32]
}

fn open(root: &Arc<DestRoot>) -> (DestIndex, Vec<String>) {
    DestIndex::open(root.clone(), false).unwrap()
}

#[test]
fn published_chunks_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    let (ix, notes) = open(&root);
    assert!(notes.is_empty());
    let (id, generation) = ix.identity();
    assert_eq!(generation, 0);
    ix.publish(&rp("a/f"), &stat(100, 7), &[(0, 60, h(1)), (60, 40, h(2))]);
    // Visible here at once, to senders only once committed.
    assert_eq!(ix.lookup(&h(2)), Some((60, 40)));
    assert_eq!(ix.identity().1, 0);
    assert_eq!(ix.commit().unwrap(), 2);
    ix.publish(&rp("g"), &stat(10, 8), &[(0, 10, h(3))]);
    assert_eq!(ix.commit().unwrap(), 1);
    assert_eq!(ix.identity(), (id, 3));
    assert_eq!(
        ix.records_since(2)[0].offset,
        100,
        "the second file starts after the first"
    );
    drop(ix);

    let (ix, notes) = open(&root);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(ix.identity(), (id, 3));
    assert_eq!(ix.lookup(&h(3)), Some((100, 10)));
    match ix.file_at(60, 40) {
        FileAt::File(f) => assert_eq!((f.base, f.rel, f.size, f.ino), (0, rp("a/f"), 100, 7)),
        other => panic!("{other:?}"),
    }
    assert_eq!(ix.file_at(90, 20), FileAt::Outside, "crosses the file's end");
    assert_eq!(ix.file_at(500, 1), FileAt::Outside);
    assert_eq!(ix.records_since(99), Vec::new());
    assert_eq!(ix.stats().files, 2);
}

#[test]
fn a_replaced_or_changed_file_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    let (ix, _) = open(&root);
    ix.publish(&rp("f"), &stat(10, 1), &[(0, 10, h(1))]);
    ix.publish(&rp("f"), &stat(20, 2), &[(0, 20, h(2))]);
    ix.publish(&rp("g"), &stat(5, 3), &[(0, 5, h(3))]);
    ix.commit().unwrap();
    assert_eq!(ix.lookup(&h(1)), None, "replaced at its path");
    assert_eq!(ix.file_at(0, 10), FileAt::Gone);
    ix.drop_file(30);
    assert_eq!(ix.lookup(&h(3)), None);
    assert_eq!(ix.lookup(&h(2)), Some((10, 20)));
    drop(ix);
    // The replacement is in the file too.
    let (ix, _) = open(&root);
    assert_eq!(ix.lookup(&h(1)), None);
    assert_eq!(ix.lookup(&h(2)), Some((10, 20)));
}

#[test]
fn a_torn_tail_is_cut_off_under_a_new_id() {
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    let (ix, _) = open(&root);
    ix.publish(&rp("f"), &stat(10, 1), &[(0, 10, h(1))]);
    ix.commit().unwrap();
    let id = ix.identity().0;
    drop(ix);
    let path = dir.path().join(".pfs/index");
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(&[KIND_CHUNK, 44, 0, 1, 2, 3]);
    fs::write(&path, &bytes).unwrap();
    let (ix, notes) = open(&root);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_ne!(ix.identity().0, id);
    assert_eq!(ix.identity().1, 1);
    assert_eq!(ix.lookup(&h(1)), Some((0, 10)));
    drop(ix);
    let (_, notes) = open(&root);
    assert!(notes.is_empty(), "rewritten clean: {notes:?}");
}

#[test]
fn a_damaged_header_starts_afresh_and_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    fs::create_dir_all(dir.path().join(".pfs")).unwrap();
    fs::write(
        dir.path().join(".pfs/index"),
        b"not an index at all, not even close to one............",
    )
    .unwrap();
    let (ix, notes) = open(&root);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(ix.identity().1, 0);
    assert!(dir.path().join(".pfs/index.damaged").exists());
}

#[test]
fn a_symlinked_state_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".pfs")).unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    let err = DestIndex::open(root, false).unwrap_err();
    assert!(err.to_string().contains("state directory"), "{err}");
    assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

#[test]
fn partial_ranges_serve_until_their_file_lands() {
    let dir = tempfile::tempdir().unwrap();
    let root = Arc::new(DestRoot::open(dir.path()).unwrap());
    let (ix, _) = open(&root);
    let (temp, target) = (rp(".pfs/tmp/0123456789abcdef"), rp("big"));
    ix.publish_part(&temp, &target, 9, &[(0, 100, h(1)), (100, 50, h(2))]);
    ix.publish_part(&temp, &target, 9, &[(150, 70, h(3))]);
    ix.commit().unwrap();
    match ix.file_at(150, 70) {
        FileAt::File(f) => {
            assert_eq!((&f.rel, f.offset, f.size, f.partial), (&temp, 150, 70, true));
            assert!(f.still(9, 10), "a partial file may be shorter than its range");
            assert!(!f.still(8, 1000), "but not another inode");
        }
        other => panic!("{other:?}"),
    }
    // Claimed by the session that writes it: not offered for removal.
    assert_eq!(ix.drop_parts(&rp("other")), Vec::<RelPath>::new());
    drop(ix);
    // After a restart nothing claims it; it is kept for a later send.
    let (ix, notes) = open(&root);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(ix.part_temps(), std::slice::from_ref(&temp));
    assert_eq!(ix.lookup(&h(3)), Some((150, 70)));
    // Its file lands: the ranges die and the temporary file is to go.
    ix.publish(&target, &stat(220, 10), &[(0, 220, h(4))]);
    assert_eq!(ix.drop_parts(&target), [temp]);
    assert_eq!(ix.lookup(&h(1)), None);
    assert!(ix.part_temps().is_empty());
    assert_eq!(ix.drop_parts(&target), Vec::<RelPath>::new(), "once");
}
