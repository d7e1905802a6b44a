//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;

use pfs_store::{ChunkHash, ChunkLoc, Durability, Store, StoreConfig};

/// `len` deterministic pseudo-random bytes from `seed`.
pub fn chunk(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut h = blake3::Hasher::new();
    h.update(&seed.to_le_bytes());
    h.finalize_xof().fill(&mut out);
    out
}

/// BLAKE3 of `data`.
pub fn hash(data: &[u8]) -> ChunkHash {
    *blake3::hash(data).as_bytes()
}

/// 64 MiB, fsync on commit.
pub fn opts() -> StoreConfig {
    StoreConfig::with_capacity(64 << 20)
}

/// 64 MiB, no flushes.
pub fn fast_opts() -> StoreConfig {
    StoreConfig {
        durability: Durability::None,
        ..opts()
    }
}

/// One reservation for all of `chunks`, appended (checked) and committed.
pub fn put(store: &Store, chunks: &[Vec<u8>]) -> Vec<ChunkLoc> {
    let total = chunks.iter().map(|c| c.len() as u64).sum();
    let mut r = store.reserve(total).expect("reserve");
    for c in chunks {
        r.append(&hash(c), c).expect("append");
    }
    r.commit().expect("commit")
}

/// Open, panicking with the error.
pub fn open(dir: &Path, opts: &StoreConfig) -> Store {
    Store::open(dir, opts).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
}

/// Every chunk is indexed and its bytes check out.
pub fn assert_all_present(store: &Store, chunks: &[Vec<u8>]) {
    for c in chunks {
        let h = hash(c);
        let loc = store.lookup(&h).expect("chunk indexed");
        assert_eq!(store.bytes(loc).unwrap(), &c[..]);
        assert!(store.verify(&h, loc));
    }
}
