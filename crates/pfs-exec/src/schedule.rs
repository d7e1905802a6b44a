//! Seeded descriptor schedules: the synthetic workloads that senders,
//! `pfs exec` and the benchmarks run. The same spec and seed give the same
//! descriptors on every host.
//!
//! * `random` — lengths uniform in `[align, max_len]` (multiples of `align`),
//!   offsets uniform and aligned, anywhere the range fits.
//! * `sequential` — random lengths as above, each descriptor starting where
//!   the previous one ended, wrapping to 0 at the end of the blob.
//! * `strided` — fixed length `max_len`, every other `max_len` block
//!   (stride `2 * max_len`), wrapping to 0.

use pfs_wire::Descriptor;

/// Access pattern of a generated schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Uniformly random aligned ranges.
    Random,
    /// Back-to-back ranges.
    Sequential,
    /// Fixed-size ranges at a fixed stride.
    Strided,
}

impl Pattern {
    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Sequential => "sequential",
            Self::Strided => "strided",
        }
    }
}

/// How long a schedule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Total {
    /// Exactly this many full grams.
    Grams(u64),
    /// Exactly this many effective bytes (the last descriptor is trimmed).
    Bytes(u64),
}

/// Everything that determines a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSpec {
    /// Generator seed.
    pub seed: u64,
    /// Descriptors per gram.
    pub desc_per_gram: u32,
    /// Longest descriptor.
    pub max_len: u32,
    /// Offset and length alignment.
    pub align: u32,
    /// Access pattern.
    pub pattern: Pattern,
    /// Length of the run.
    pub total: Total,
    /// Length of the blob the schedule indexes.
    pub blob_len: u64,
}

/// Why a spec cannot produce a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `align` is 0 or not a power of two.
    #[error("--align must be a power of two ≥ 1 (got {0})")]
    BadAlign(u32),
    /// `max_len` is smaller than `align` or larger than the blob.
    #[error("--max-len {max_len} must be ≥ --align {align} and ≤ the blob length {blob_len}")]
    BadMaxLen {
        /// Requested max length.
        max_len: u32,
        /// Requested alignment.
        align: u32,
        /// Blob length.
        blob_len: u64,
    },
    /// No descriptors per gram.
    #[error("--desc-per-gram must be ≥ 1")]
    NoDescriptors,
}

impl ScheduleSpec {
    /// Checks the spec.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.align == 0 || !self.align.is_power_of_two() {
            return Err(SpecError::BadAlign(self.align));
        }
        if self.max_len < self.align || u64::from(self.max_len) > self.blob_len {
            return Err(SpecError::BadMaxLen {
                max_len: self.max_len,
                align: self.align,
                blob_len: self.blob_len,
            });
        }
        if self.desc_per_gram == 0 {
            return Err(SpecError::NoDescriptors);
        }
        Ok(())
    }

    /// Mean descriptor length of the pattern, for planning.
    pub fn mean_len(&self) -> f64 {
        match self.pattern {
            Pattern::Strided => f64::from(self.max_len),
            _ => (f64::from(self.align) + f64::from(self.max_len / self.align * self.align)) / 2.0,
        }
    }

    /// Effective bytes this schedule will produce, when known up front.
    pub fn planned_bytes(&self) -> Option<u64> {
        match self.total {
            Total::Bytes(b) => Some(b),
            Total::Grams(_) if self.pattern == Pattern::Strided => {
                Some(self.planned_grams()? * u64::from(self.desc_per_gram) * u64::from(self.max_len))
            }
            Total::Grams(_) => None,
        }
    }

    /// Grams this schedule will produce, when known up front.
    pub fn planned_grams(&self) -> Option<u64> {
        match self.total {
            Total::Grams(g) => Some(g),
            Total::Bytes(_) => None,
        }
    }
}

/// SplitMix64: tiny, fast, and the same everywhere.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift.
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// A running schedule: call [`Schedule::next_gram`] until it returns false.
#[derive(Debug, Clone)]
pub struct Schedule {
    spec: ScheduleSpec,
    rng: SplitMix64,
    cursor: u64,
    grams_done: u64,
    bytes_done: u64,
}

impl Schedule {
    /// Starts a schedule.
    pub fn new(spec: ScheduleSpec) -> Result<Self, SpecError> {
        spec.validate()?;
        Ok(Self {
            spec,
            rng: SplitMix64(spec.seed),
            cursor: 0,
            grams_done: 0,
            bytes_done: 0,
        })
    }

    /// The spec.
    pub fn spec(&self) -> &ScheduleSpec {
        &self.spec
    }

    #[inline]
    fn random_len(&mut self) -> u32 {
        let units = u64::from(self.spec.max_len / self.spec.align);
        ((self.rng.below(units) + 1) * u64::from(self.spec.align)) as u32
    }

    #[inline]
    fn next_desc(&mut self) -> Descriptor {
        let align = u64::from(self.spec.align);
        let blob_len = self.spec.blob_len;
        match self.spec.pattern {
            Pattern::Random => {
                let len = self.random_len();
                let slots = (blob_len - u64::from(len)) / align + 1;
                Descriptor {
                    offset: self.rng.below(slots) * align,
                    len,
                }
            }
            Pattern::Sequential => {
                let len = self.random_len();
                if self.cursor + u64::from(len) > blob_len {
                    self.cursor = 0;
                }
                let d = Descriptor {
                    offset: self.cursor,
                    len,
                };
                self.cursor += u64::from(len);
                d
            }
            Pattern::Strided => {
                let len = self.spec.max_len;
                if self.cursor + u64::from(len) > blob_len {
                    self.cursor = 0;
                }
                let d = Descriptor {
                    offset: self.cursor,
                    len,
                };
                self.cursor += 2 * u64::from(len);
                d
            }
        }
    }

    /// Fills `out` (cleared first) with the next gram's descriptors.
    /// Returns false when the schedule is exhausted.
    pub fn next_gram(&mut self, out: &mut Vec<Descriptor>) -> bool {
        out.clear();
        match self.spec.total {
            Total::Grams(g) if self.grams_done >= g => return false,
            Total::Bytes(b) if self.bytes_done >= b => return false,
            _ => {}
        }
        for _ in 0..self.spec.desc_per_gram {
            let mut d = self.next_desc();
            if let Total::Bytes(b) = self.spec.total {
                let left = b - self.bytes_done;
                if left == 0 {
                    break;
                }
                d.len = d.len.min(u32::try_from(left).unwrap_or(u32::MAX));
            }
            self.bytes_done += u64::from(d.len);
            out.push(d);
        }
        self.grams_done += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: Pattern, total: Total) -> ScheduleSpec {
        ScheduleSpec {
            seed: 7,
            desc_per_gram: 64,
            max_len: 4096,
            align: 64,
            pattern,
            total,
            blob_len: 1 << 20,
        }
    }

    #[test]
    fn deterministic_in_bounds_and_aligned() {
        for p in [Pattern::Random, Pattern::Sequential, Pattern::Strided] {
            let mut a = Schedule::new(spec(p, Total::Grams(50))).unwrap();
            let mut b = Schedule::new(spec(p, Total::Grams(50))).unwrap();
            let (mut ga, mut gb) = (Vec::new(), Vec::new());
            let mut grams = 0;
            while a.next_gram(&mut ga) {
                assert!(b.next_gram(&mut gb));
                assert_eq!(ga, gb);
                assert_eq!(ga.len(), 64);
                for d in &ga {
                    assert!(d.end().unwrap() <= 1 << 20, "{p:?} {d:?}");
                    assert_eq!(d.offset % 64, 0);
                    assert!(d.len >= 64 && d.len <= 4096 && d.len % 64 == 0);
                }
                grams += 1;
            }
            assert_eq!(grams, 50);
        }
    }

    #[test]
    fn bytes_total_is_exact() {
        let mut s = Schedule::new(spec(Pattern::Random, Total::Bytes(1_000_003))).unwrap();
        let mut g = Vec::new();
        let mut total = 0u64;
        while s.next_gram(&mut g) {
            total += g.iter().map(|d| u64::from(d.len)).sum::<u64>();
        }
        assert_eq!(total, 1_000_003);
    }

    #[test]
    fn sequential_is_back_to_back() {
        let mut s = Schedule::new(spec(Pattern::Sequential, Total::Grams(3))).unwrap();
        let mut g = Vec::new();
        s.next_gram(&mut g);
        for w in g.windows(2) {
            assert!(w[1].offset == w[0].end().unwrap() || w[1].offset == 0);
        }
    }

    #[test]
    fn rejects_bad_specs() {
        let mut s = spec(Pattern::Random, Total::Grams(1));
        s.align = 48;
        assert_eq!(Schedule::new(s).map(|_| ()), Err(SpecError::BadAlign(48)));
        let mut s = spec(Pattern::Random, Total::Grams(1));
        s.max_len = 2 << 20;
        assert!(matches!(Schedule::new(s), Err(SpecError::BadMaxLen { .. })));
    }
}
