//! Latency sample buffers and their summary. Buffers are allocated and
//! touched before a timed loop, so the loop never allocates or page-faults;
//! percentiles come from sorting after it.

use serde::{Deserialize, Serialize};

/// `n` samples, every page written once now so that the timed loop does not
/// take the first-touch page faults (a zeroed `vec!` would be mapped lazily).
pub fn prefaulted(n: usize) -> Vec<i64> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, i64::MIN);
    v
}

/// Distribution of one set of time-stamp differences, in ticks (TSC cycles,
/// or nanoseconds without a TSC). Differences are signed: a time stamp taken
/// on another core may be behind (TSC skew), and the report must show that.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Samples.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest.
    pub min: i64,
    /// Median (nearest rank).
    pub p50: i64,
    /// 99th percentile (nearest rank).
    pub p99: i64,
    /// 99.9th percentile (nearest rank).
    pub p999: i64,
    /// Largest.
    pub max: i64,
    /// Samples below zero: the receiver's clock read earlier than the sender's.
    pub negative: u64,
}

/// Sorts `samples` in place and summarises them; `None` when empty.
pub fn summarize(samples: &mut [i64]) -> Option<LatencyStats> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let n = samples.len();
    // Nearest rank: the smallest sample with at least q·n samples at or below it.
    let rank = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    let sum: i128 = samples.iter().map(|&v| i128::from(v)).sum();
    Some(LatencyStats {
        count: n as u64,
        mean: sum as f64 / n as f64,
        min: samples[0],
        p50: rank(0.50),
        p99: rank(0.99),
        p999: rank(0.999),
        max: samples[n - 1],
        negative: samples.iter().take_while(|&&v| v < 0).count() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<i64> = (1..=1000).rev().collect();
        let s = summarize(&mut v).unwrap();
        assert_eq!((s.count, s.min, s.max), (1000, 1, 1000));
        assert_eq!((s.p50, s.p99, s.p999), (500, 990, 999));
        assert!((s.mean - 500.5).abs() < 1e-9);
        assert_eq!(s.negative, 0);
    }

    #[test]
    fn small_and_negative_samples() {
        let mut one = [7];
        let s = summarize(&mut one).unwrap();
        assert_eq!((s.p50, s.p99, s.p999), (7, 7, 7));
        let mut skewed = [-5, 10, -1, 20];
        let s = summarize(&mut skewed).unwrap();
        assert_eq!(s.negative, 2);
        assert_eq!(s.min, -5);
        assert!(summarize(&mut []).is_none());
    }

    #[test]
    fn prefaulted_has_the_length_asked() {
        assert_eq!(prefaulted(3).len(), 3);
        assert!(prefaulted(0).is_empty());
    }
}
