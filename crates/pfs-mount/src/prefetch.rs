//! `pfs mount --prefetch`: one background thread walks every file in
//! listing order and fetches the chunks the cache lacks, one FETCH of at
//! most the server's limit at a time, so readers' requests (which the link
//! sends as they come) wait behind at most one batch.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::state::Shared;

/// Runs until every file is fetched, `stop` is set, or the link is down.
pub fn run(shared: &Shared, stop: &AtomicBool) {
    let batch = shared.accept.max_fetch_chunks.clamp(1, 1024) as usize;
    let inodes: Vec<u64> = shared.tree.file_inodes().collect();
    let (mut files, mut failed) = (0u64, 0u64);
    for ino in inodes {
        if stop.load(Ordering::Relaxed) || shared.down().is_some() {
            break;
        }
        let entry = ino - 2;
        let size = shared.tree.node(ino).map_or(0, |n| n.size);
        let missing = shared.with_recipe(entry, size, |r| {
            r.wants(entry)
                .filter(|w| shared.cache.get(&w.hash).is_none())
                .collect::<Vec<_>>()
        });
        let ok = match missing {
            Ok(m) => m
                .chunks(batch)
                .all(|part| !stop.load(Ordering::Relaxed) && shared.fetch(part).is_ok()),
            Err(_) => false,
        };
        if ok {
            files += 1;
        } else {
            failed += 1;
        }
    }
    tracing::info!("prefetch: {files} file(s) complete, {failed} not");
}
