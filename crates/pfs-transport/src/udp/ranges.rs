//! Sets of half-open `u64` ranges, merged as they are inserted: the stream
//! bytes a receiver holds above what it delivered, the bytes a sender has
//! had acknowledged or must send again, and the packet numbers a receiver
//! will acknowledge.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent ranges `start..end`, keyed by start.
#[derive(Debug, Clone, Default)]
pub struct RangeSet {
    map: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Adds `r`, merging with every range it touches. Returns how many of
    /// its values were new.
    pub fn insert(&mut self, r: Range<u64>) -> u64 {
        if r.start >= r.end {
            return 0;
        }
        let (mut start, mut end) = (r.start, r.end);
        let mut covered = 0u64;
        // The range that starts at or before `start` and reaches it.
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= start {
                if e >= end {
                    return 0;
                }
                covered += e - start;
                start = s;
                self.map.remove(&s);
            }
        }
        // Ranges that start inside `start..=end`.
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            self.map.remove(&s);
            covered += e.min(r.end).saturating_sub(s.max(r.start));
            end = end.max(e);
        }
        self.map.insert(start, end);
        (r.end - r.start) - covered
    }

    /// Removes `r` from the set.
    pub fn remove(&mut self, r: Range<u64>) {
        if r.start >= r.end {
            return;
        }
        if let Some((&s, &e)) = self.map.range(..r.start).next_back() {
            if e > r.start {
                self.map.insert(s, r.start);
                if e > r.end {
                    self.map.insert(r.end, e);
                    return;
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(r.start..r.end).next() {
            self.map.remove(&s);
            if e > r.end {
                self.map.insert(r.end, e);
                break;
            }
        }
    }

    /// Whether every value of `r` is in the set.
    pub fn contains(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        matches!(self.map.range(..=r.start).next_back(), Some((_, &e)) if e >= r.end)
    }

    /// Whether inserting `r` would merge with a range already held (so the
    /// number of ranges would not grow).
    pub fn touches(&self, r: Range<u64>) -> bool {
        if let Some((_, &e)) = self.map.range(..=r.start).next_back() {
            if e >= r.start {
                return true;
            }
        }
        self.map.range(r.start..=r.end).next().is_some()
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.iter().next().map(|(&s, &e)| s..e)
    }

    /// The highest range.
    pub fn last(&self) -> Option<Range<u64>> {
        self.map.iter().next_back().map(|(&s, &e)| s..e)
    }

    /// Removes and returns the lowest range, cut to at most `max` values.
    pub fn pop_first(&mut self, max: u64) -> Option<Range<u64>> {
        let (&s, &e) = self.map.iter().next()?;
        self.map.remove(&s);
        let end = e.min(s.saturating_add(max));
        if end < e {
            self.map.insert(end, e);
        }
        Some(s..end)
    }

    /// Drops the lowest ranges until at most `max` remain.
    pub fn keep_highest(&mut self, max: usize) {
        while self.map.len() > max {
            self.map.pop_first();
        }
    }

    /// Every range, highest first.
    pub fn iter_rev(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().rev().map(|(&s, &e)| s..e)
    }

    /// Every range, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// Total number of values in the set.
    pub fn total(&self) -> u64 {
        self.map.iter().map(|(&s, &e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(s: &RangeSet) -> Vec<(u64, u64)> {
        s.iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn insert_merges_and_counts_new_values() {
        let mut s = RangeSet::new();
        assert_eq!(s.insert(10..20), 10);
        assert_eq!(s.insert(30..40), 10);
        assert_eq!(s.insert(15..35), 10);
        assert_eq!(ranges(&s), vec![(10, 40)]);
        assert_eq!(s.insert(12..18), 0);
        assert_eq!(s.insert(40..41), 1);
        assert_eq!(s.insert(0..5), 5);
        assert_eq!(s.insert(5..10), 5);
        assert_eq!(ranges(&s), vec![(0, 41)]);
        assert_eq!(s.insert(50..60), 10);
        assert_eq!(s.insert(45..70), 15);
        assert_eq!(ranges(&s), vec![(0, 41), (45, 70)]);
    }

    #[test]
    fn remove_splits() {
        let mut s = RangeSet::new();
        s.insert(0..100);
        s.remove(10..20);
        s.remove(50..60);
        assert_eq!(ranges(&s), vec![(0, 10), (20, 50), (60, 100)]);
        s.remove(5..70);
        assert_eq!(ranges(&s), vec![(0, 5), (70, 100)]);
        assert!(s.contains(70..100));
        assert!(!s.contains(4..6));
        assert_eq!(s.pop_first(3), Some(0..3));
        assert_eq!(ranges(&s), vec![(3, 5), (70, 100)]);
        s.keep_highest(1);
        assert_eq!(ranges(&s), vec![(70, 100)]);
        assert_eq!(s.total(), 30);
    }

    #[test]
    fn matches_a_bitmap_model() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut s = RangeSet::new();
        let mut model = [false; 256];
        for _ in 0..2000 {
            let a = next() % 256;
            let b = (a + next() % 24).min(256);
            if next() % 3 == 0 {
                s.remove(a..b);
                model[a as usize..b as usize].fill(false);
            } else {
                let fresh = model[a as usize..b as usize].iter().filter(|v| !**v).count() as u64;
                assert_eq!(s.insert(a..b), fresh);
                model[a as usize..b as usize].fill(true);
            }
            let mut from_set = [false; 256];
            for r in s.iter() {
                from_set[r.start as usize..r.end as usize].fill(true);
            }
            assert!(from_set == model);
            // Disjoint and non-adjacent.
            let v: Vec<_> = s.iter().collect();
            assert!(v.windows(2).all(|w| w[0].end < w[1].start));
        }
    }
}
