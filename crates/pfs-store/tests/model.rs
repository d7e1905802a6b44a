//! Random operation sequences against a model (the set of committed chunks),
//! with reopens in between.

mod common;

use std::collections::BTreeSet;

use common::{chunk, fast_opts, hash, open};
use pfs_store::{Store, StoreError};
use proptest::prelude::*;

/// Contents are drawn from a small pool so dedup happens often.
const POOL: u8 = 24;

fn content(id: u8) -> Vec<u8> {
    chunk(u64::from(id), 1 + (usize::from(id) * 397) % 3000)
}

#[derive(Debug, Clone)]
enum Op {
    /// One reservation with these chunks, committed.
    Commit(Vec<u8>),
    /// One reservation with these chunks, dropped.
    Abandon(Vec<u8>),
    /// Two reservations open at once; the second is committed or dropped.
    Interleave(Vec<u8>, Vec<u8>, bool),
    /// Re-send a chunk through the corrections plane.
    Repair(u8),
    /// Ask for more than the capacity.
    Overfill,
    /// Close and open again.
    Reopen,
}

fn ids() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0..POOL, 0..8)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => ids().prop_map(Op::Commit),
        2 => ids().prop_map(Op::Abandon),
        2 => (ids(), ids(), any::<bool>()).prop_map(|(a, b, c)| Op::Interleave(a, b, c)),
        1 => (0..POOL).prop_map(Op::Repair),
        1 => Just(Op::Overfill),
        2 => Just(Op::Reopen),
    ]
}

fn fill<'s>(store: &'s Store, ids: &[u8]) -> pfs_store::Reservation<'s> {
    let total = ids.iter().map(|&i| content(i).len() as u64).sum();
    let mut r = store.reserve(total).unwrap();
    for &i in ids {
        let c = content(i);
        let loc = r.append_unchecked(&hash(&c), &c).unwrap();
        assert_eq!(loc.len as usize, c.len());
    }
    r
}

fn check(store: &Store, model: &BTreeSet<u8>) {
    for id in 0..POOL {
        let c = content(id);
        match store.lookup(&hash(&c)) {
            Some(loc) => {
                assert!(model.contains(&id), "chunk {id} indexed but never committed");
                assert_eq!(store.bytes(loc).unwrap(), &c[..], "chunk {id}");
            }
            None => assert!(!model.contains(&id), "committed chunk {id} missing"),
        }
    }
    // One record per committed chunk (repairs in place add none).
    let id = store.identity();
    assert_eq!(id.generation, model.len() as u64);
    let mut seen: Vec<_> = store.entries_since(0).iter().map(|e| e.hash).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), model.len());
    assert_eq!(store.stats().chunks, model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn ops_match_model(ops in prop::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = fast_opts();
        let mut store = open(dir.path(), &opts);
        let mut model = BTreeSet::new();
        for op in ops {
            match op {
                Op::Commit(ids) => {
                    let locs = fill(&store, &ids).commit().unwrap();
                    prop_assert_eq!(locs.len(), ids.len());
                    for (&i, loc) in ids.iter().zip(&locs) {
                        prop_assert_eq!(store.lookup(&hash(&content(i))), Some(*loc));
                    }
                    model.extend(ids);
                }
                Op::Abandon(ids) => drop(fill(&store, &ids)),
                Op::Interleave(a, b, commit_b) => {
                    let ra = fill(&store, &a);
                    let rb = fill(&store, &b);
                    if commit_b {
                        rb.commit().unwrap();
                        model.extend(b);
                    } else {
                        drop(rb);
                    }
                    ra.commit().unwrap();
                    model.extend(a);
                }
                Op::Repair(i) => {
                    let c = content(i);
                    let loc = store.repair(&hash(&c), &c).unwrap();
                    prop_assert!(store.verify(&hash(&c), loc));
                    model.insert(i);
                }
                Op::Overfill => {
                    let before = store.stats();
                    let r = store.reserve(opts.capacity + 1);
                    let full = matches!(r, Err(StoreError::Full { .. }));
                    prop_assert!(full);
                    prop_assert_eq!(store.stats(), before);
                }
                Op::Reopen => {
                    let id = store.identity();
                    drop(store);
                    store = open(dir.path(), &opts);
                    prop_assert!(store.recovery().is_clean());
                    prop_assert_eq!(store.identity(), id);
                }
            }
            check(&store, &model);
        }
        prop_assert!(store.verify_all(2).is_empty());
    }
}
