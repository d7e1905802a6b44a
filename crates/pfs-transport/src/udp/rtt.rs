//! The round-trip time estimator of a UDP connection (after RFC 9002 §5):
//! the smoothed RTT and its variation, the latest and the lowest sample,
//! and the durations derived from them (loss delay, probe timeout). Pure
//! arithmetic on the samples the connection core takes from ACKs.

use std::time::Duration;

/// RTT assumed before the first sample.
pub const INITIAL_RTT: Duration = Duration::from_millis(100);

/// The RTT state of one connection.
#[derive(Debug, Clone, Copy)]
pub struct RttEstimator {
    /// Smoothed RTT, once a sample arrived.
    smoothed: Option<Duration>,
    /// Mean deviation of the samples from the smoothed RTT.
    var: Duration,
    /// The newest sample.
    latest: Duration,
    /// The lowest sample (for reports; decisions use the smoothed RTT).
    min: Option<Duration>,
}

impl Default for RttEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl RttEstimator {
    /// No sample yet: [`INITIAL_RTT`], half of it as the variation.
    pub const fn new() -> Self {
        Self {
            smoothed: None,
            var: Duration::from_millis(INITIAL_RTT.as_millis() as u64 / 2),
            latest: INITIAL_RTT,
            min: None,
        }
    }

    /// Takes one sample and the peer's ACK delay (already capped at the
    /// largest it may claim). The first sample sets the smoothed RTT; later
    /// ones move it by an eighth (less the ACK delay, when the sample is
    /// longer than it) and the variation by a quarter.
    pub fn update(&mut self, sample: Duration, ack_delay: Duration) {
        self.latest = sample;
        self.min = Some(self.min.map_or(sample, |m| m.min(sample)));
        match self.smoothed {
            None => {
                self.smoothed = Some(sample);
                self.var = sample / 2;
            }
            Some(srtt) => {
                let adjusted = if sample > ack_delay {
                    sample - ack_delay
                } else {
                    sample
                };
                let diff = srtt.abs_diff(adjusted);
                self.var = (self.var * 3 + diff) / 4;
                self.smoothed = Some((srtt * 7 + adjusted) / 8);
            }
        }
    }

    /// The smoothed RTT, if a sample arrived.
    pub fn smoothed(&self) -> Option<Duration> {
        self.smoothed
    }

    /// The smoothed RTT, or [`INITIAL_RTT`] before the first sample.
    pub fn get(&self) -> Duration {
        self.smoothed.unwrap_or(INITIAL_RTT)
    }

    /// The mean deviation of the samples.
    pub fn var(&self) -> Duration {
        self.var
    }

    /// The newest sample ([`INITIAL_RTT`] before the first).
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The lowest sample so far.
    pub fn min(&self) -> Option<Duration> {
        self.min
    }

    /// How much older than an acknowledged packet one in flight may be
    /// before it is lost: 9/8 of the larger of the smoothed and the latest
    /// RTT, at least 1 ms.
    pub fn loss_delay(&self) -> Duration {
        let rtt = self.get().max(self.latest);
        (rtt * 9 / 8).max(Duration::from_millis(1))
    }

    /// The probe timeout before any backoff: the smoothed RTT, four times
    /// the variation (at least 1 ms) and the peer's largest ACK delay.
    pub fn pto_base(&self, max_ack_delay: Duration) -> Duration {
        self.get() + (self.var * 4).max(Duration::from_millis(1)) + max_ack_delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn first_sample_sets_the_smoothed_rtt_and_half_as_variation() {
        let mut rtt = RttEstimator::new();
        assert_eq!(rtt.smoothed(), None);
        assert_eq!(rtt.get(), INITIAL_RTT);
        assert_eq!(rtt.var(), INITIAL_RTT / 2);
        rtt.update(40 * MS, 10 * MS);
        // The first sample is taken whole: the ACK delay is not subtracted.
        assert_eq!(rtt.smoothed(), Some(40 * MS));
        assert_eq!(rtt.var(), 20 * MS);
        assert_eq!(rtt.latest(), 40 * MS);
    }

    #[test]
    fn later_samples_move_it_by_an_eighth_less_the_ack_delay() {
        let mut rtt = RttEstimator::new();
        rtt.update(40 * MS, Duration::ZERO);
        rtt.update(52 * MS, 4 * MS);
        // adjusted 48: srtt = (7·40 + 48)/8 = 41, var = (3·20 + 8)/4 = 17.
        assert_eq!(rtt.smoothed(), Some(41 * MS));
        assert_eq!(rtt.var(), 17 * MS);
        assert_eq!(rtt.latest(), 52 * MS);
        // A sample shorter than the delay is taken whole.
        rtt.update(2 * MS, 4 * MS);
        assert_eq!(rtt.smoothed(), Some((41 * MS * 7 + 2 * MS) / 8));
        // The loss delay follows the larger of smoothed and latest.
        rtt.update(80 * MS, Duration::ZERO);
        assert_eq!(rtt.loss_delay(), rtt.get().max(80 * MS) * 9 / 8);
    }

    #[test]
    fn min_rtt_is_the_lowest_sample() {
        let mut rtt = RttEstimator::new();
        assert_eq!(rtt.min(), None);
        for (sample, min) in [(30, 30), (20, 20), (50, 20), (25, 20), (19, 19)] {
            rtt.update(sample * MS, Duration::ZERO);
            assert_eq!(rtt.min(), Some(min * MS));
        }
    }

    #[test]
    fn probe_timeout_is_srtt_four_variations_and_the_ack_delay() {
        let rtt = RttEstimator::new();
        assert_eq!(rtt.pto_base(MS), INITIAL_RTT + INITIAL_RTT * 2 + MS);
        let mut rtt = RttEstimator::new();
        rtt.update(10 * MS, Duration::ZERO);
        assert_eq!(rtt.pto_base(MS), 10 * MS + 20 * MS + MS);
        // A steady path: the variation decays, the 1 ms floor holds.
        for _ in 0..200 {
            rtt.update(10 * MS, Duration::ZERO);
        }
        assert_eq!(rtt.pto_base(2 * MS), 10 * MS + MS + 2 * MS);
        // The loss delay has a floor of 1 ms too.
        let mut fast = RttEstimator::new();
        fast.update(Duration::from_micros(100), Duration::ZERO);
        assert_eq!(fast.loss_delay(), MS);
    }
}
