//! Store behaviour through the public API: round trips, dedup, reopen,
//! crash recovery, capacity, concurrency, repair, index deltas, locking.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;

use common::{assert_all_present, chunk, fast_opts, hash, open, opts, put};
use pfs_store::{ChunkLoc, Durability, Store, StoreConfig, StoreError};

const HEADER: u64 = 512;
const RECORD: u64 = 48;

#[test]
fn round_trip_dedup_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let a = chunk(1, 1000);
    let b = chunk(2, 5000);
    let (id, locs) = {
        let store = open(dir.path(), &opts());
        assert!(store.recovery().created);
        let mut r = store.reserve(6000).unwrap();
        let la = r.append(&hash(&a), &a).unwrap();
        let lb = r.append(&hash(&b), &b).unwrap();
        // Same chunk again in the same batch: same place, no space used.
        assert_eq!(r.append(&hash(&a), &a).unwrap(), la);
        assert_eq!(r.written(), 6000);
        assert_eq!(r.left(), 0);
        // Not visible before the commit.
        assert_eq!(store.lookup(&hash(&a)), None);
        assert_eq!(store.identity().generation, 0);
        let locs = r.commit().unwrap();
        assert_eq!(locs, vec![la, lb, la]);
        assert_all_present(&store, &[a.clone(), b.clone()]);
        assert_eq!(store.identity().generation, 2);

        // A committed chunk dedups in a later reservation and takes no space.
        let mut r = store.reserve(1000).unwrap();
        assert_eq!(r.append(&hash(&a), &a).unwrap(), la);
        assert_eq!(r.written(), 0);
        assert_eq!(r.commit().unwrap(), vec![la]);
        assert_eq!(store.identity().generation, 2);

        let st = store.stats();
        assert_eq!((st.chunks, st.chunk_bytes, st.generation), (2, 6000, 2));
        assert_eq!(st.capacity, 64 << 20);
        assert!(st.file_len >= st.used && st.used >= 6000);
        assert!(
            st.backing.description.contains("4 KiB pages"),
            "{}",
            st.backing.description
        );
        (store.identity().id, locs)
    };
    let store = open(dir.path(), &opts());
    let rec = store.recovery();
    assert!(rec.is_clean() && !rec.created && !rec.new_identity, "{rec:?}");
    assert_eq!(rec.records_replayed, 2);
    assert_eq!(store.identity().id, id);
    assert_eq!(store.identity().generation, 2);
    assert_eq!(store.lookup(&hash(&a)), Some(locs[0]));
    assert_eq!(store.lookup(&hash(&b)), Some(locs[1]));
    assert_all_present(&store, &[a, b]);
}

#[test]
fn append_checks_hash_and_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), &fast_opts());
    let a = chunk(1, 100);
    let mut r = store.reserve(150).unwrap();
    assert!(matches!(
        r.append(&[0; 32], &a),
        Err(StoreError::HashMismatch { .. })
    ));
    r.append(&hash(&a), &a).unwrap();
    let b = chunk(2, 51);
    let e = r.append(&hash(&b), &b).unwrap_err();
    assert!(
        matches!(e, StoreError::ReservationExhausted { len: 51, left: 50 }),
        "{e}"
    );
    assert_eq!(r.commit().unwrap().len(), 1);
}

#[test]
fn bytes_refuses_unfinished_and_foreign_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), &fast_opts());
    let a = chunk(1, 100);
    let mut r = store.reserve(100).unwrap();
    let loc = r.append(&hash(&a), &a).unwrap();
    // Still being written: not readable, not verifiable.
    assert!(matches!(store.bytes(loc), Err(StoreError::OutOfRange { .. })));
    assert!(!store.verify(&hash(&a), loc));
    r.commit().unwrap();
    assert_eq!(store.bytes(loc).unwrap(), &a[..]);
    let beyond = ChunkLoc {
        offset: 1 << 40,
        len: 10,
    };
    let e = store.bytes(beyond).unwrap_err();
    assert!(matches!(e, StoreError::OutOfRange { readable: 100, .. }), "{e}");
    let wrap = ChunkLoc {
        offset: u64::MAX - 2,
        len: 10,
    };
    assert!(store.bytes(wrap).is_err());
}

#[test]
fn dropped_reservation_indexes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = chunk(1, 3000);
    {
        let store = open(dir.path(), &opts());
        let mut r = store.reserve(3000).unwrap();
        r.append(&hash(&a), &a).unwrap();
        drop(r);
        assert_eq!(store.lookup(&hash(&a)), None);
        assert_eq!(store.identity().generation, 0);
        assert!(store.entries_since(0).is_empty());
    }
    let store = open(dir.path(), &opts());
    assert!(store.recovery().is_clean());
    assert_eq!(store.lookup(&hash(&a)), None);
    // The abandoned space is reused after a reopen.
    let locs = put(&store, std::slice::from_ref(&a));
    assert_eq!(locs[0].offset, 0);
    assert_all_present(&store, &[a]);
}

/// Commit `n` chunks, one commit each; returns them and the store id.
fn store_with(dir: &std::path::Path, n: u64) -> (Vec<Vec<u8>>, [u8; 16]) {
    let store = open(dir, &opts());
    let chunks: Vec<Vec<u8>> = (0..n).map(|i| chunk(100 + i, 700 + i as usize)).collect();
    for c in &chunks {
        put(&store, std::slice::from_ref(c));
    }
    assert_eq!(store.identity().generation, n);
    (chunks, store.identity().id)
}

#[test]
fn torn_index_tail_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (chunks, id) = store_with(dir.path(), 3);
    let index = dir.path().join("index");
    let f = OpenOptions::new().write(true).open(&index).unwrap();
    f.set_len(HEADER + 2 * RECORD + 20).unwrap();
    drop(f);

    let store = open(dir.path(), &opts());
    let rec = store.recovery().clone();
    assert_eq!(rec.records_replayed, 2);
    assert_eq!(rec.torn_bytes, 20);
    assert_eq!(rec.dropped_corrupt, 0);
    assert!(rec.new_identity && !rec.is_clean());
    assert!(
        rec.notes.iter().any(|n| n.contains("20 trailing")),
        "{:?}",
        rec.notes
    );
    assert_ne!(store.identity().id, id);
    assert_eq!(store.identity().generation, 2);
    assert_all_present(&store, &chunks[..2]);
    assert_eq!(store.lookup(&hash(&chunks[2])), None);
    assert_eq!(fs::metadata(&index).unwrap().len(), HEADER + 2 * RECORD);

    // The store goes on, and the next open is clean.
    put(&store, &chunks[2..]);
    let id2 = store.identity();
    drop(store);
    let store = open(dir.path(), &opts());
    assert!(store.recovery().is_clean());
    assert_eq!(store.identity(), id2);
    assert_all_present(&store, &chunks);
}

#[test]
fn garbage_after_the_index_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (chunks, id) = store_with(dir.path(), 2);
    let index = dir.path().join("index");
    let mut f = OpenOptions::new().append(true).open(&index).unwrap();
    f.write_all(&chunk(9, 100)).unwrap();
    drop(f);

    let store = open(dir.path(), &opts());
    let rec = store.recovery();
    assert_eq!(
        (rec.records_replayed, rec.dropped_corrupt, rec.torn_bytes),
        (2, 2, 4)
    );
    assert!(rec.new_identity);
    assert_ne!(store.identity().id, id);
    assert_all_present(&store, &chunks);
}

#[test]
fn damaged_record_drops_it_and_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (chunks, _) = store_with(dir.path(), 3);
    let index = dir.path().join("index");
    let f = OpenOptions::new().read(true).write(true).open(&index).unwrap();
    let mut byte = [0u8; 1];
    let at = HEADER + RECORD + 5;
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0xff], at).unwrap();
    drop(f);

    let store = open(dir.path(), &opts());
    let rec = store.recovery();
    assert_eq!((rec.records_replayed, rec.dropped_corrupt), (1, 2));
    assert!(
        rec.notes.iter().any(|n| n.contains("record 1")),
        "{:?}",
        rec.notes
    );
    assert_all_present(&store, &chunks[..1]);
    assert_eq!(store.lookup(&hash(&chunks[1])), None);
    assert_eq!(store.lookup(&hash(&chunks[2])), None);
}

#[test]
fn entries_beyond_the_blob_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let a = chunk(1, 1000);
    let b = chunk(2, 5000);
    let id = {
        let store = open(dir.path(), &opts());
        let la = put(&store, std::slice::from_ref(&a))[0];
        let lb = put(&store, std::slice::from_ref(&b))[0];
        assert_eq!(la.offset, 0);
        assert!(lb.offset >= 1000);
        store.identity().id
    };
    // Lose the blob's tail: `b` is no longer there.
    File::options()
        .write(true)
        .open(dir.path().join("blob"))
        .unwrap()
        .set_len(2000)
        .unwrap();

    let store = open(dir.path(), &opts());
    let rec = store.recovery();
    assert_eq!((rec.records_replayed, rec.dropped_beyond_blob), (1, 1));
    assert!(rec.new_identity);
    assert_ne!(store.identity().id, id);
    assert_eq!(store.identity().generation, 1);
    assert_all_present(&store, std::slice::from_ref(&a));
    assert_eq!(store.lookup(&hash(&b)), None);
    // Storing it again grows the file back.
    put(&store, std::slice::from_ref(&b));
    assert_all_present(&store, &[a, b]);
}

#[test]
fn blob_file_missing_reopens_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (_, id) = store_with(dir.path(), 2);
    fs::remove_file(dir.path().join("blob")).unwrap();
    let store = open(dir.path(), &opts());
    let rec = store.recovery();
    assert!(rec.blob_missing && rec.new_identity);
    assert_eq!(rec.dropped_beyond_blob, 2);
    assert_ne!(store.identity().id, id);
    assert_eq!(store.identity().generation, 0);
    assert_eq!(store.stats().chunks, 0);
}

#[test]
fn capacity_is_checked_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 1 << 20;
    let store = open(dir.path(), &StoreConfig::with_capacity(cap));
    let e = store.reserve(cap + 1).unwrap_err();
    match &e {
        StoreError::Full { need, free, capacity } => {
            assert_eq!((*need, *free, *capacity), (cap + 1, cap, cap))
        }
        other => panic!("{other}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("1048577") && msg.contains("capacity"), "{msg}");
    let st = store.stats();
    assert_eq!((st.used, st.file_len, st.free), (0, 0, cap));
    assert_eq!(fs::metadata(dir.path().join("blob")).unwrap().len(), 0);

    // Smaller reservations still work, up to exactly the capacity.
    let a = chunk(1, 1000);
    put(&store, std::slice::from_ref(&a));
    let free = store.stats().free;
    assert_eq!(free, cap - 1024);
    assert!(matches!(
        store.reserve(free + 1),
        Err(StoreError::Full { free: f, .. }) if f == free
    ));
    let mut r = store.reserve(free).unwrap();
    let big = chunk(2, free as usize);
    r.append(&hash(&big), &big).unwrap();
    r.commit().unwrap();
    assert_eq!(store.stats().free, 0);
    assert!(matches!(store.reserve(1), Err(StoreError::Full { free: 0, .. })));
    assert_all_present(&store, &[a, big]);
}

#[test]
fn two_sessions_append_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let shared: Vec<Vec<u8>> = (0..16)
        .map(|k| chunk(1_000 + k, 2000 + k as usize * 97))
        .collect();
    let mut all: Vec<Vec<u8>> = shared.clone();
    let own = |t: u64| -> Vec<Vec<u8>> {
        (0..40)
            .map(|k| chunk(t * 10_000 + k, 500 + k as usize * 31))
            .collect()
    };
    all.extend(own(1));
    all.extend(own(2));
    {
        let store = open(dir.path(), &opts());
        std::thread::scope(|s| {
            for t in 1..=2u64 {
                let store = &store;
                let shared = &shared;
                let mine = own(t);
                s.spawn(move || {
                    // Ten batches, each mixing own and shared chunks; the
                    // threads walk the shared ones in opposite orders.
                    for b in 0..10 {
                        let mut batch: Vec<Vec<u8>> = mine[b * 4..b * 4 + 4].to_vec();
                        let k = if t == 1 { b } else { 15 - b };
                        batch.push(shared[k].clone());
                        batch.push(shared[(k + 3) % 16].clone());
                        let locs = put(store, &batch);
                        for (c, loc) in batch.iter().zip(&locs) {
                            assert!(store.verify(&hash(c), *loc));
                            assert_eq!(store.lookup(&hash(c)), Some(*loc));
                        }
                    }
                });
            }
        });
        let used: Vec<Vec<u8>> = all
            .iter()
            .filter(|c| store.lookup(&hash(c)).is_some())
            .cloned()
            .collect();
        assert_eq!(used.len(), 80 + 16, "every chunk indexed");
        assert_all_present(&store, &all);
        // One record per distinct hash, whoever won.
        let entries = store.entries_since(0);
        assert_eq!(entries.len(), all.len());
        let mut hashes: Vec<_> = entries.iter().map(|e| e.hash).collect();
        hashes.sort();
        hashes.dedup();
        assert_eq!(hashes.len(), all.len());
        assert!(store.verify_all(2).is_empty());
    }
    let store = open(dir.path(), &opts());
    assert!(store.recovery().is_clean());
    assert_eq!(store.identity().generation, all.len() as u64);
    assert_all_present(&store, &all);
}

#[test]
fn same_chunk_in_two_open_reservations() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), &fast_opts());
    let a = chunk(7, 4096);
    let mut r1 = store.reserve(4096).unwrap();
    let mut r2 = store.reserve(4096).unwrap();
    let l1 = r1.append(&hash(&a), &a).unwrap();
    let l2 = r2.append(&hash(&a), &a).unwrap();
    assert_ne!(l1, l2, "both wrote their own copy");
    assert_eq!(r2.commit().unwrap(), vec![l2]);
    assert_eq!(r1.commit().unwrap(), vec![l2], "the first commit wins the entry");
    assert_eq!(store.identity().generation, 1);
    assert_eq!(store.lookup(&hash(&a)), Some(l2));
    // The loser's copy is still valid bytes.
    assert!(store.verify(&hash(&a), l1));
}

#[test]
fn repair_fixes_damaged_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let a = chunk(1, 3000);
    let b = chunk(2, 3000);
    let blob = dir.path().join("blob");
    {
        let store = open(dir.path(), &opts());
        let locs = put(&store, &[a.clone(), b.clone()]);
        // Damage `b` behind the store's back.
        let f = OpenOptions::new().write(true).open(&blob).unwrap();
        f.write_all_at(b"garbage", locs[1].offset + 100).unwrap();
        drop(f);
        assert!(store.verify(&hash(&a), locs[0]));
        assert!(!store.verify(&hash(&b), locs[1]));
        let bad = store.verify_all(2);
        assert_eq!(bad.len(), 1);
        assert_eq!((bad[0].hash, bad[0].loc), (hash(&b), locs[1]));

        // Wrong data: refused, nothing written.
        let e = store.repair(&hash(&b), &a).unwrap_err();
        assert!(matches!(e, StoreError::HashMismatch { .. }), "{e}");
        assert!(!store.verify(&hash(&b), locs[1]));

        let gen = store.identity().generation;
        assert_eq!(store.repair(&hash(&b), &b).unwrap(), locs[1], "fixed in place");
        assert!(store.verify(&hash(&b), locs[1]));
        assert!(store.verify_all(0).is_empty());
        assert_eq!(store.identity().generation, gen);
        // Repairing a healthy chunk is a no-op.
        assert_eq!(store.repair(&hash(&a), &a).unwrap(), locs[0]);

        // A chunk that was never stored is appended and indexed.
        let c = chunk(3, 500);
        let lc = store.repair(&hash(&c), &c).unwrap();
        assert_eq!(store.lookup(&hash(&c)), Some(lc));
        assert_eq!(store.identity().generation, gen + 1);
    }
    let store = open(dir.path(), &opts());
    assert!(store.recovery().is_clean());
    assert!(store.verify_all(1).is_empty());
    assert_all_present(&store, &[a, b]);
}

#[test]
fn entries_since_returns_exactly_the_delta() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), &fast_opts());
    let mut marks = vec![0u64];
    let mut batches = Vec::new();
    for i in 0..5u64 {
        let batch: Vec<Vec<u8>> = (0..=i).map(|k| chunk(i * 100 + k, 200)).collect();
        let locs = put(&store, &batch);
        batches.push(batch.iter().map(|c| hash(c)).zip(locs).collect::<Vec<_>>());
        marks.push(store.identity().generation);
    }
    assert_eq!(marks, vec![0, 1, 3, 6, 10, 15]);
    for (i, &g) in marks.iter().enumerate() {
        let want: Vec<_> = batches[i..].iter().flatten().copied().collect();
        let got: Vec<_> = store
            .entries_since(g)
            .into_iter()
            .map(|e| (e.hash, e.loc))
            .collect();
        assert_eq!(got, want, "since generation {g}");
    }
    assert!(store.entries_since(1000).is_empty());
    let (id, delta) = store.delta_since(10);
    assert_eq!((id.generation, delta.len()), (15, 5));
    assert_eq!(id, store.identity());
}

#[test]
fn second_open_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), &fast_opts());
    let e = Store::open(dir.path(), &fast_opts()).unwrap_err();
    assert!(
        matches!(&e, StoreError::Locked { dir: d } if d == dir.path()),
        "{e}"
    );
    assert!(e.to_string().contains(&dir.path().display().to_string()));
    drop(first);
    open(dir.path(), &fast_opts());
}

#[test]
fn foreign_files_are_refused_and_left_alone() {
    // An index that is not ours.
    let dir = tempfile::tempdir().unwrap();
    let junk = chunk(5, 600);
    fs::write(dir.path().join("index"), &junk).unwrap();
    let e = Store::open(dir.path(), &fast_opts()).unwrap_err();
    assert!(
        matches!(&e, StoreError::BadFormat { reason, .. } if reason.to_string().contains("magic")),
        "{e}"
    );
    assert_eq!(fs::read(dir.path().join("index")).unwrap(), junk);

    // A short one.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("index"), b"PFSINDEX").unwrap();
    let e = Store::open(dir.path(), &fast_opts()).unwrap_err();
    assert!(matches!(&e, StoreError::BadFormat { .. }), "{e}");

    // A blob without an index.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("blob"), &junk).unwrap();
    let e = Store::open(dir.path(), &fast_opts()).unwrap_err();
    assert!(matches!(&e, StoreError::BadFormat { .. }), "{e}");
    assert_eq!(fs::read(dir.path().join("blob")).unwrap(), junk);
    assert!(!dir.path().join("index").exists());

    // A newer format version.
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), &fast_opts()));
    let index = dir.path().join("index");
    let mut bytes = fs::read(&index).unwrap();
    bytes[8] = 9;
    fs::write(&index, &bytes).unwrap();
    let e = Store::open(dir.path(), &fast_opts()).unwrap_err();
    assert!(e.to_string().contains("version 9"), "{e}");
    assert_eq!(fs::read(&index).unwrap(), bytes);
}

#[test]
fn options_and_fallbacks() {
    let dir = tempfile::tempdir().unwrap();
    let e = Store::open(dir.path(), &StoreConfig::with_capacity(0)).unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput { .. }), "{e}");

    // A huge_dir that is not hugetlbfs: regular blob, with a note.
    let other = tempfile::tempdir().unwrap();
    let o = StoreConfig {
        huge_dir: Some(other.path().to_path_buf()),
        ..fast_opts()
    };
    let store = open(dir.path(), &o);
    assert_eq!(store.backing().kind, pfs_store::StoreBacking::File);
    assert!(store
        .recovery()
        .notes
        .iter()
        .any(|n| n.contains("not a hugetlbfs")));
    drop(store);

    // Reopening with a smaller capacity than used only stops new data.
    let store = open(dir.path(), &fast_opts());
    let a = chunk(1, 10_000);
    put(&store, std::slice::from_ref(&a));
    drop(store);
    let store = open(dir.path(), &StoreConfig::with_capacity(4096));
    assert_all_present(&store, &[a]);
    assert_eq!(store.stats().free, 0);
    assert!(matches!(store.reserve(1), Err(StoreError::Full { .. })));
}

/// Store files hold chunks other clients sent: owner-only, for new stores
/// and for stores made before that rule.
#[test]
fn store_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mode = |name: &str| std::fs::metadata(path.join(name)).unwrap().permissions().mode() & 0o777;
    {
        let store = Store::open(&path, &StoreConfig::with_capacity(1 << 20)).unwrap();
        let mut r = store.reserve(5).unwrap();
        r.append(blake3::hash(b"hello").as_bytes(), b"hello").unwrap();
        r.commit().unwrap();
    }
    for f in ["blob", "index", "lock"] {
        assert_eq!(mode(f), 0o600, "{f}");
        std::fs::set_permissions(path.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o700
    );
    drop(Store::open(&path, &StoreConfig::with_capacity(1 << 20)).unwrap());
    for f in ["blob", "index", "lock"] {
        assert_eq!(mode(f), 0o600, "{f} made private on open");
    }
}

/// A reservation a session never committed (it disconnected, the server
/// stopped) is not kept: at once while the store runs, and its disk space
/// at the next open.
#[test]
fn abandoned_reservations_are_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = StoreConfig {
        durability: Durability::None,
        ..StoreConfig::with_capacity(1 << 30)
    };
    {
        let store = Store::open(&path, &cfg).unwrap();
        let mut keep = store.reserve(5).unwrap();
        keep.append(blake3::hash(b"hello").as_bytes(), b"hello").unwrap();
        // A session reserves 90 MiB, another reserves after it, the first
        // goes away: its space is free again while the second lives.
        let gone = store.reserve(90 << 20).unwrap();
        let later = store.reserve(1 << 20).unwrap();
        drop(gone);
        assert!(store.stats().used < 2 << 20, "{:?}", store.stats());
        let again = store.reserve(80 << 20).unwrap();
        drop(again);
        drop(later);
        keep.commit().unwrap();
        // Simulate a crash holding a reservation: the blob file is longer
        // than the committed data when the store is next opened.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path.join("blob"))
            .unwrap();
        f.set_len(90 << 20).unwrap();
    }
    let store = Store::open(&path, &cfg).unwrap();
    let len = std::fs::metadata(path.join("blob")).unwrap().len();
    assert!(len <= 1 << 20, "blob file reclaimed to {len}");
    assert!(
        store.recovery().notes.iter().any(|n| n.contains("reclaimed")),
        "{:?}",
        store.recovery()
    );
    assert_eq!(
        store
            .bytes(store.lookup(blake3::hash(b"hello").as_bytes()).unwrap())
            .unwrap(),
        b"hello"
    );
    assert!(store.stats().free > (1 << 30) - (1 << 20));
}
