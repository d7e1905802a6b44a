//! The chunk plan of a send: how each chunk of each file travels
//! (descriptor into the store, KNOWN hash, literal bytes) and the totals
//! PLAN announces. The first plan ([`super::classify`]) gives the totals;
//! each file is planned again when its turn comes in the stream, in stream
//! order, so that KNOWN names only chunks sent before it, and files chunked
//! late (in the background, or STREAMED) move from `pending_bytes` to the
//! chunk counts as their chunks become known.

use std::collections::HashSet;

use pfs_files::{ChunkRef, IndexCache};
use pfs_wire::files::Hash;

use super::{classify, plan_chunk, ChunkPlan, FilesItem, FilesPlanSummary};

/// The per-chunk plan of every entry and the send's totals: see the module doc.
#[derive(Debug, Default)]
pub(super) struct Plans {
    /// Per entry, how each of its chunks travels.
    plans: Vec<Vec<ChunkPlan>>,
    summary: FilesPlanSummary,
    /// Hashes sent literally so far: a later chunk names them KNOWN.
    sent: HashSet<Hash>,
}

/// The chunks of a file planned as they are cut (STREAMED): how each
/// travels and what they add to the totals once the file is done.
#[derive(Debug, Default)]
pub(super) struct Partial {
    /// Bytes of the file still counted in the totals' `pending_bytes`.
    pub(super) pending: u64,
    pub(super) plan: Vec<ChunkPlan>,
    pub(super) sum: FilesPlanSummary,
}

impl Plans {
    /// Plans every entry against the index (`cache`); the totals for PLAN.
    pub(super) fn classify(&mut self, items: &[FilesItem], cache: &IndexCache) -> FilesPlanSummary {
        let (plans, summary, _) = classify(items, |h| cache.lookup(h));
        self.plans = plans;
        self.summary = summary;
        summary
    }

    /// The totals so far.
    pub(super) fn summary(&self) -> FilesPlanSummary {
        self.summary
    }

    /// File bytes in the plan.
    pub(super) fn total_bytes(&self) -> u64 {
        self.summary.total_bytes
    }

    /// How the chunks of entry `no` travel.
    pub(super) fn of(&self, no: usize) -> &[ChunkPlan] {
        self.plans.get(no).map_or(&[], Vec::as_slice)
    }

    /// `bytes` of a file are no longer pending (it was collected, or
    /// dropped).
    pub(super) fn unpend(&mut self, bytes: u64) {
        self.summary.pending_bytes = self.summary.pending_bytes.saturating_sub(bytes);
    }

    /// Plans the chunks of entry `no` again, now that it is its turn: the
    /// plan made for PLAN could not know the chunks of files chunked later,
    /// nor which of its literals an earlier file sends first. KNOWN then
    /// names only chunks sent before it. Held files and hard links have no
    /// chunks to plan.
    pub(super) fn replan(&mut self, no: usize, item: &FilesItem, cache: Option<&IndexCache>) {
        if item.held || item.hard_link.is_some() {
            return;
        }
        let (Some(recipe), Some(old)) = (item.recipe.as_ref(), self.plans.get_mut(no)) else {
            return;
        };
        let lookup = |h: &Hash| cache.and_then(|c| c.lookup(h));
        let mut sum = FilesPlanSummary::default();
        let plan: Vec<ChunkPlan> = recipe
            .chunks
            .iter()
            .map(|c| plan_chunk(c, lookup, &mut self.sent, &mut sum))
            .collect();
        self.summary
            .remove_chunks(&FilesPlanSummary::of_plan(&recipe.chunks, old));
        self.summary.add_chunks(&sum);
        *old = plan;
    }

    /// Plans the chunks of a STREAMED file cut since the last call.
    pub(super) fn extend(&mut self, part: &mut Partial, chunks: &[ChunkRef], cache: Option<&IndexCache>) {
        let lookup = |h: &Hash| cache.and_then(|c| c.lookup(h));
        while part.plan.len() < chunks.len() {
            let c = &chunks[part.plan.len()];
            part.plan
                .push(plan_chunk(c, lookup, &mut self.sent, &mut part.sum));
        }
    }

    /// A STREAMED file is done: its pending bytes become what it sent, and
    /// its plan the plan of entry `no`.
    pub(super) fn settle(&mut self, no: usize, part: Partial) {
        self.unpend(part.pending);
        self.summary.add_chunks(&part.sum);
        if let Some(p) = self.plans.get_mut(no) {
            *p = part.plan;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{file_item, recipe};
    use super::*;

    fn cache(dir: &tempfile::TempDir, held: &[[u8; 32]]) -> IndexCache {
        let (mut c, _) = IndexCache::open(dir.path(), [1; 16]);
        c.reset();
        let entries = held.iter().enumerate().map(|(i, h)| {
            let mut key = [0; 8];
            key.copy_from_slice(&h[..8]);
            (key, i as u64 * 100, 100)
        });
        c.extend(1, entries.collect::<Vec<_>>());
        c
    }

    #[test]
    fn a_replan_in_stream_order_names_known_only_what_was_sent_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ix = cache(&dir, &[[9; 32]]);
        // Both files carry chunk [2; 32]; the second also one the store holds.
        let mut items = vec![file_item("a", 200), file_item("b", 200)];
        items[0].recipe = Some(recipe(&[[1; 32], [2; 32]]));
        items[1].recipe = Some(recipe(&[[2; 32], [9; 32]]));
        let mut p = Plans::default();
        let first = p.classify(&items, &ix);
        assert_eq!(
            (first.literal_chunks, first.known_bytes, first.matched_bytes),
            (2, 100, 100)
        );
        // The second file's turn comes first: its [2; 32] is literal now.
        p.replan(1, &items[1], Some(&ix));
        assert_eq!(p.of(1), [ChunkPlan::Literal, ChunkPlan::Ref { offset: 0 }]);
        p.replan(0, &items[0], Some(&ix));
        assert_eq!(p.of(0), [ChunkPlan::Literal, ChunkPlan::Known]);
        let s = p.summary();
        assert_eq!(
            (s.chunks, s.literal_chunks, s.known_bytes, s.matched_bytes),
            (4, 2, 100, 100)
        );
    }

    #[test]
    fn a_sparse_file_counts_its_allocated_bytes_as_pending_not_its_holes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ix = cache(&dir, &[]);
        let mut items = vec![file_item("disk.img", 1 << 30), file_item("dense", 64 << 20)];
        items[0].entry.meta.allocated = 12 << 10;
        items[1].entry.meta.allocated = 64 << 20;
        for i in &mut items {
            i.streamed = true;
        }
        let s = Plans::default().classify(&items, &ix);
        assert_eq!(s.total_bytes, (1 << 30) + (64 << 20));
        assert_eq!(
            s.pending_bytes,
            (12 << 10) + super::super::SPARSE_SLACK + (64 << 20)
        );
    }

    #[test]
    fn a_streamed_file_moves_from_pending_to_its_chunks_when_settled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ix = cache(&dir, &[]);
        let mut items = vec![file_item("big", 200)];
        items[0].streamed = true;
        let mut p = Plans::default();
        assert_eq!(p.classify(&items, &ix).pending_bytes, 200);
        let mut part = Partial {
            pending: 200,
            ..Partial::default()
        };
        let chunks = recipe(&[[3; 32], [3; 32]]).chunks;
        p.extend(&mut part, &chunks[..1], Some(&ix));
        p.extend(&mut part, &chunks, Some(&ix));
        assert_eq!(part.plan, [ChunkPlan::Literal, ChunkPlan::Known]);
        p.settle(0, part);
        let s = p.summary();
        assert_eq!(
            (s.pending_bytes, s.chunks, s.literal_bytes, s.known_bytes),
            (0, 2, 100, 100)
        );
        assert_eq!(p.of(0).len(), 2);
    }
}
