//! The local chunk cache: a `pfs-store` (a file-backed blob with its chunk
//! index, the same store `pfs serve --store` keeps) holding every chunk a
//! mount fetched, by BLAKE3. It is shared by every mount on the host that
//! uses the same directory, one at a time (the store takes a lock), and
//! whatever it holds is never fetched again, from any server.
//!
//! Nothing read from it is trusted: a chunk is checked against its hash the
//! first time a mount uses it (the recipe remembers chunks already checked),
//! and one that fails is fetched again and repaired in place. When the
//! store is full, fetched chunks are kept in a bounded memory spill instead
//! (oldest dropped first), so reads still work; they are fetched again
//! once dropped.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use pfs_store::{Durability, Store, StoreConfig, StoreError};
use pfs_wire::mount::Hash;

/// Bytes of fetched chunks kept in memory when the store is full.
const SPILL_BYTES: usize = 256 << 20;

/// The cache (module docs).
#[derive(Debug)]
pub struct Cache {
    store: Store,
    spill: Mutex<Spill>,
}

#[derive(Debug, Default)]
struct Spill {
    chunks: HashMap<Hash, Arc<[u8]>>,
    order: VecDeque<Hash>,
    bytes: usize,
}

/// Where a chunk's bytes are.
#[derive(Debug)]
pub enum Held<'a> {
    /// In the store's mapping.
    Store(&'a [u8]),
    /// In the memory spill.
    Spill(Arc<[u8]>),
}

impl Held<'_> {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Held::Store(b) => b,
            Held::Spill(b) => b,
        }
    }
}

impl Cache {
    /// Opens (or creates) the cache in `dir`, of at most `capacity` bytes.
    pub fn open(dir: &Path, capacity: u64) -> Result<Self, StoreError> {
        let cfg = StoreConfig {
            capacity,
            huge_dir: None,
            // A cache: every chunk is checked before use, so a crash that
            // loses or tears bytes costs a fetch, never a wrong read.
            durability: Durability::None,
        };
        Ok(Self {
            store: Store::open(dir, &cfg)?,
            spill: Mutex::new(Spill::default()),
        })
    }

    /// The chunk's bytes if the cache has them (unchecked).
    pub fn get(&self, hash: &Hash) -> Option<Held<'_>> {
        // The spill first: a chunk lands there when the store could not
        // take (or repair) it, so the store's copy may be the damaged one.
        {
            let spill = self.spill.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = spill.chunks.get(hash) {
                return Some(Held::Spill(b.clone()));
            }
        }
        let loc = self.store.lookup(hash)?;
        self.store.bytes(loc).ok().map(Held::Store)
    }

    /// The chunk's bytes if the cache has them and they match `hash`.
    pub fn get_checked(&self, hash: &Hash) -> Option<Held<'_>> {
        self.get(hash)
            .filter(|h| blake3::hash(h.bytes()).as_bytes() == hash)
    }

    /// Keeps checked chunks `(hash, bytes)` (one reservation for them all).
    /// A chunk the store holds already under damaged bytes is repaired in
    /// place. Returns the hashes that went to the memory spill instead
    /// (the store may still hold damaged bytes under them).
    pub fn put(&self, chunks: &[(Hash, &[u8])]) -> Vec<Hash> {
        let mut spilled = Vec::new();
        let mut fresh: Vec<(Hash, &[u8])> = Vec::with_capacity(chunks.len());
        for &(hash, bytes) in chunks {
            match self.store.lookup(&hash) {
                // Held: either intact (nothing to do) or damaged (repair
                // compares before it writes).
                Some(_) => {
                    if self.store.repair(&hash, bytes).is_err() {
                        self.spill(hash, bytes);
                        spilled.push(hash);
                    }
                }
                None => fresh.push((hash, bytes)),
            }
        }
        if fresh.is_empty() {
            return spilled;
        }
        let total: u64 = fresh.iter().map(|(_, b)| b.len() as u64).sum();
        let stored = self.store.reserve(total).and_then(|mut r| {
            for (hash, bytes) in &fresh {
                r.append_unchecked(hash, bytes)?;
            }
            r.commit()
        });
        if let Err(e) = stored {
            tracing::debug!("cache: {e}; keeping {} chunk(s) in memory", fresh.len());
            fresh.iter().for_each(|(h, b)| self.spill(*h, b));
            spilled.extend(fresh.iter().map(|(h, _)| *h));
        }
        spilled
    }

    fn spill(&self, hash: Hash, bytes: &[u8]) {
        let mut s = self.spill.lock().unwrap_or_else(|p| p.into_inner());
        if s.chunks.contains_key(&hash) {
            return;
        }
        while s.bytes + bytes.len() > SPILL_BYTES {
            let Some(old) = s.order.pop_front() else { break };
            if let Some(b) = s.chunks.remove(&old) {
                s.bytes -= b.len();
            }
        }
        s.bytes += bytes.len();
        s.order.push_back(hash);
        s.chunks.insert(hash, Arc::from(bytes));
    }

    /// Chunks and bytes in the store.
    pub fn held(&self) -> (u64, u64) {
        let s = self.store.stats();
        (s.chunks, s.chunk_bytes)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        self.store.dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_checks_and_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path(), 1 << 20).unwrap();
        let a = b"chunk a".as_slice();
        let ha = *blake3::hash(a).as_bytes();
        assert!(cache.get(&ha).is_none());
        assert!(cache.put(&[(ha, a)]).is_empty());
        assert_eq!(cache.get_checked(&ha).unwrap().bytes(), a);
        assert_eq!(cache.held().0, 1);
        // Full: the spill keeps it.
        let small = tempfile::tempdir().unwrap();
        let tiny = Cache::open(small.path(), 4).unwrap();
        assert_eq!(tiny.put(&[(ha, a)]), vec![ha]);
        assert_eq!(tiny.get_checked(&ha).unwrap().bytes(), a);
    }
}
