//! The gram a sender is building, in buffers reused gram after gram: the
//! schedule batch and how much of it is sent, the descriptor table, the
//! blob ranges of the payload slab (contiguous ranges merged, so one
//! vectored write sends them from the mapping) and the two headers.

use pfs_wire::{Descriptor, Encoding, TableWriter, FRAME_HEADER_LEN, GRAM_HEADER_LEN};

/// The buffers of the next gram.
#[derive(Debug)]
pub(super) struct GramBuild {
    /// The current schedule batch.
    pub(super) descs: Vec<Descriptor>,
    /// How much of the batch has been cut into grams.
    pub(super) first: usize,
    pub(super) table: TableWriter,
    /// Payload mode: the blob ranges of the slab, `(start, end)`.
    pub(super) ranges: Vec<(usize, usize)>,
    pub(super) frame_header: [u8; FRAME_HEADER_LEN],
    pub(super) gram_header: [u8; GRAM_HEADER_LEN],
    /// Most payload bytes per gram (`u64::MAX` without payload).
    budget: u64,
}

impl GramBuild {
    /// Buffers for grams of up to `per_gram` descriptors in `encoding`,
    /// cut at `budget` bytes.
    pub(super) fn new(encoding: Encoding, per_gram: usize, budget: u64) -> Self {
        Self {
            descs: Vec::with_capacity(per_gram),
            first: 0,
            table: TableWriter::new(encoding, per_gram),
            ranges: Vec::with_capacity(per_gram),
            frame_header: [0; FRAME_HEADER_LEN],
            gram_header: [0; GRAM_HEADER_LEN],
            budget,
        }
    }

    /// Whether the batch is all sent.
    pub(super) fn batch_done(&self) -> bool {
        self.first == self.descs.len()
    }

    /// The next gram's descriptors, `first..last` of the batch (not empty):
    /// as many as fit the budget, at least one. In payload mode a batch is
    /// cut into cache-sized grams: the digest pass leaves each range in L2
    /// just before the kernel copies it, which roughly halves the copy's cost.
    pub(super) fn cut(&mut self) -> (usize, usize) {
        let first = self.first;
        let mut last = first + 1;
        let mut bytes = u64::from(self.descs[first].len);
        while last < self.descs.len() && bytes + u64::from(self.descs[last].len) <= self.budget {
            bytes += u64::from(self.descs[last].len);
            last += 1;
        }
        self.first = last;
        (first, last)
    }
}

/// Adds `d` to a slab's `ranges`, merged with the last if contiguous.
#[inline]
pub(super) fn add_range(ranges: &mut Vec<(usize, usize)>, d: Descriptor) {
    let (s, e) = (d.offset as usize, d.offset as usize + d.len as usize);
    match ranges.last_mut() {
        Some(last) if last.1 == s => last.1 = e,
        _ => ranges.push((s, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(offset: u64, len: u32) -> Descriptor {
        Descriptor { offset, len }
    }

    #[test]
    fn grams_are_cut_at_the_budget() {
        let mut b = GramBuild::new(Encoding::Absolute, 8, 10);
        b.descs.extend([d(0, 4), d(4, 4), d(8, 4), d(20, 20), d(40, 1)]);
        assert_eq!(b.cut(), (0, 2));
        // A descriptor larger than the budget still makes a gram.
        assert_eq!(b.cut(), (2, 3));
        assert_eq!(b.cut(), (3, 4));
        assert!(!b.batch_done());
        assert_eq!(b.cut(), (4, 5));
        assert!(b.batch_done());
    }

    #[test]
    fn without_a_budget_a_batch_is_one_gram() {
        let mut b = GramBuild::new(Encoding::Absolute, 8, u64::MAX);
        b.descs.extend([d(0, 4), d(4, 4), d(100, 4)]);
        assert_eq!(b.cut(), (0, 3));
    }

    #[test]
    fn contiguous_ranges_merge() {
        let mut b = GramBuild::new(Encoding::Absolute, 8, u64::MAX);
        for x in [d(0, 4), d(4, 4), d(10, 2), d(12, 3), d(0, 1)] {
            add_range(&mut b.ranges, x);
        }
        assert_eq!(b.ranges, [(0, 8), (10, 15), (0, 1)]);
    }
}
