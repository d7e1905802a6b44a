//! Congestion control of the UDP transport: rate- and delay-based, after
//! BBR (version 1). The sender paces at a gain times the bottleneck
//! bandwidth it measured (the highest delivery rate of the last ten round
//! trips) and keeps at most twice the bandwidth-delay product in flight
//! (bandwidth × the lowest RTT of the last ten seconds).
//!
//! Why this shape: a loss-based controller halves its window on every
//! loss, so random loss on a long link starves it (TCP cubic at 1 % over
//! 50 ms). Here loss does not move the rate at all: only the delivery
//! rate and the RTT do. Random loss of a fraction `p` lowers a delivery
//! sample by `p`; the probing phase (gain 1.25) more than makes up for it
//! while `p` < 20 %, so the estimate stays at the link's rate. A queue
//! (a competing flow, an overfull bottleneck) shows as RTT above the
//! minimum: the in-flight cap of 2 × BDP bounds what this flow adds to it,
//! and the periodic probe of the minimum RTT (4 packets in flight for
//! 200 ms every 10 s) drains it, which leaves room to a competing TCP flow.
//!
//! Pure arithmetic: the connection core feeds it rate samples and asks for
//! the pacing rate and the window.

use std::time::{Duration, Instant};

/// Startup's gain, 2/ln 2: doubles the delivery rate every round trip.
const HIGH_GAIN: f64 = 2.885;
/// Gains of the eight phases of a bandwidth probe cycle.
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// Rounds the bandwidth filter remembers.
const BW_ROUNDS: usize = 10;
/// How long a minimum RTT stays valid before it is probed again.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// How long a probe of the minimum RTT holds the window at its floor.
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// Smallest window, in datagrams.
const MIN_WINDOW_PACKETS: u64 = 4;
/// The window is sized for at least this RTT even when the measured one is
/// shorter: on a host path the minimum RTT (tens of microseconds) misses
/// the scheduling and ACK-batching delays a typical round trip has, and a
/// window of 2 × BDP by it would stall the sender. Pacing still uses the
/// measured rate, so this only lets up to this much queue build.
const MIN_WINDOW_RTT: Duration = Duration::from_millis(1);

/// One delivery-rate sample, taken when an ACK acknowledges new data.
#[derive(Debug, Clone, Copy)]
pub struct RateSample {
    /// Bytes delivered over the sample's interval.
    pub delivered: u64,
    /// The interval (the longer of the send and the ACK spans).
    pub interval: Duration,
    /// RTT of the newest packet the ACK acknowledged.
    pub rtt: Duration,
    /// Bytes delivered (connection total) when that packet was sent.
    pub prior_delivered: u64,
    /// The packet was sent while the application gave less than the window.
    pub app_limited: bool,
}

/// What the controller is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Doubling the rate each round until it stops growing.
    Startup,
    /// Draining the queue Startup built.
    Drain,
    /// Cruising at the measured rate, probing above it one phase in eight.
    ProbeBw,
    /// Holding the window at its floor to measure the minimum RTT again.
    ProbeRtt,
}

/// The controller's state.
#[derive(Debug, Clone)]
pub struct Controller {
    mss: u64,
    mode: Mode,
    bw: [u64; BW_ROUNDS],
    min_rtt: Option<Duration>,
    min_rtt_stamp: Option<Instant>,
    round: u64,
    next_round_delivered: u64,
    round_start: bool,
    full_bw: u64,
    full_bw_rounds: u32,
    filled_pipe: bool,
    cycle_index: usize,
    cycle_stamp: Option<Instant>,
    probe_rtt_done: Option<Instant>,
    prior_window: u64,
    pacing_gain: f64,
    window_gain: f64,
    window: u64,
    initial_window: u64,
    pacing_rate: u64,
}

impl Controller {
    /// A controller for datagrams of `mss` bytes, starting with a window of
    /// `initial_packets` datagrams.
    pub fn new(mss: u64, initial_packets: u64) -> Self {
        let window = mss * initial_packets.max(MIN_WINDOW_PACKETS);
        Self {
            mss,
            mode: Mode::Startup,
            bw: [0; BW_ROUNDS],
            min_rtt: None,
            min_rtt_stamp: None,
            round: 0,
            next_round_delivered: 0,
            round_start: false,
            full_bw: 0,
            full_bw_rounds: 0,
            filled_pipe: false,
            cycle_index: 0,
            cycle_stamp: None,
            probe_rtt_done: None,
            prior_window: 0,
            pacing_gain: HIGH_GAIN,
            window_gain: HIGH_GAIN,
            window,
            initial_window: window,
            // Until the first RTT sample: the initial window per millisecond.
            pacing_rate: (HIGH_GAIN * window as f64 * 1000.0) as u64,
        }
    }

    /// The congestion window, in bytes.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The pacing rate, in bytes per second.
    pub fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    /// The bottleneck bandwidth estimate, in bytes per second.
    pub fn bandwidth(&self) -> u64 {
        self.bw.iter().copied().max().unwrap_or(0)
    }

    /// The minimum RTT seen in the window, if any.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn bdp(&self, gain: f64) -> u64 {
        match self.min_rtt {
            Some(rtt) if self.bandwidth() > 0 => (gain * self.bandwidth() as f64 * rtt.as_secs_f64()) as u64,
            _ => self.window,
        }
    }

    /// The window's target: `gain` × BDP, the RTT at least [`MIN_WINDOW_RTT`].
    fn window_target(&self, gain: f64) -> u64 {
        match self.min_rtt {
            Some(rtt) if self.bandwidth() > 0 => {
                (gain * self.bandwidth() as f64 * rtt.max(MIN_WINDOW_RTT).as_secs_f64()) as u64
            }
            _ => self.window,
        }
    }

    /// Takes one ACK's rate sample. `delivered` is the connection's total
    /// of bytes delivered after it, `acked` the bytes it newly acknowledged,
    /// `in_flight` the bytes still in flight.
    pub fn on_ack(&mut self, now: Instant, sample: &RateSample, delivered: u64, acked: u64, in_flight: u64) {
        self.update_round(sample, delivered);
        self.update_bandwidth(sample);
        self.update_min_rtt(now, sample.rtt);
        self.check_full_pipe(sample);
        self.update_mode(now, in_flight);
        self.set_pacing_rate();
        self.set_window(acked);
    }

    fn update_round(&mut self, sample: &RateSample, delivered: u64) {
        self.round_start = false;
        if sample.prior_delivered >= self.next_round_delivered {
            self.next_round_delivered = delivered;
            self.round += 1;
            self.round_start = true;
            self.bw[(self.round % BW_ROUNDS as u64) as usize] = 0;
        }
    }

    fn update_bandwidth(&mut self, sample: &RateSample) {
        let nanos = sample.interval.as_nanos().max(1);
        let rate = (u128::from(sample.delivered) * 1_000_000_000 / nanos) as u64;
        // An application-limited sample only ever raises the estimate.
        if !sample.app_limited || rate >= self.bandwidth() {
            let slot = &mut self.bw[(self.round % BW_ROUNDS as u64) as usize];
            *slot = (*slot).max(rate);
        }
    }

    fn update_min_rtt(&mut self, now: Instant, rtt: Duration) {
        let expired = self
            .min_rtt_stamp
            .is_some_and(|t| now.saturating_duration_since(t) > MIN_RTT_WINDOW);
        if self.min_rtt.is_none_or(|m| rtt <= m) || (expired && self.mode != Mode::ProbeRtt) {
            if expired && self.min_rtt.is_some_and(|m| rtt > m) && self.mode != Mode::ProbeRtt {
                self.enter_probe_rtt();
            }
            self.min_rtt = Some(rtt);
            self.min_rtt_stamp = Some(now);
        }
    }

    fn enter_probe_rtt(&mut self) {
        self.mode = Mode::ProbeRtt;
        self.prior_window = self.window;
        self.pacing_gain = 1.0;
        self.window_gain = 1.0;
        self.probe_rtt_done = None;
    }

    fn check_full_pipe(&mut self, sample: &RateSample) {
        if self.filled_pipe || !self.round_start || sample.app_limited {
            return;
        }
        let bw = self.bandwidth();
        if bw >= self.full_bw + self.full_bw / 4 {
            self.full_bw = bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds += 1;
        if self.full_bw_rounds >= 3 {
            self.filled_pipe = true;
        }
    }

    fn update_mode(&mut self, now: Instant, in_flight: u64) {
        match self.mode {
            Mode::Startup if self.filled_pipe => {
                self.mode = Mode::Drain;
                self.pacing_gain = 1.0 / HIGH_GAIN;
                self.window_gain = HIGH_GAIN;
            }
            Mode::Drain if in_flight <= self.bdp(1.0) => self.enter_probe_bw(now),
            Mode::ProbeBw => {
                let phase = self.min_rtt.unwrap_or(Duration::from_millis(1));
                let elapsed = self
                    .cycle_stamp
                    .is_some_and(|t| now.saturating_duration_since(t) > phase);
                let gain = CYCLE[self.cycle_index];
                let advance = if gain > 1.0 {
                    elapsed && in_flight >= self.bdp(gain)
                } else if gain < 1.0 {
                    elapsed || in_flight <= self.bdp(1.0)
                } else {
                    elapsed
                };
                // A probe that cannot fill its target (the application or
                // the peer's window holds it back) still ends after two phases.
                let stuck = gain > 1.0
                    && self
                        .cycle_stamp
                        .is_some_and(|t| now.saturating_duration_since(t) > phase * 2);
                if advance || stuck {
                    self.cycle_index = (self.cycle_index + 1) % CYCLE.len();
                    self.cycle_stamp = Some(now);
                    self.pacing_gain = CYCLE[self.cycle_index];
                }
            }
            Mode::ProbeRtt => {
                if self.probe_rtt_done.is_none() && in_flight <= MIN_WINDOW_PACKETS * self.mss {
                    self.probe_rtt_done = Some(now + PROBE_RTT_TIME);
                }
                if self.probe_rtt_done.is_some_and(|t| now >= t) {
                    self.min_rtt_stamp = Some(now);
                    self.window = self.window.max(self.prior_window);
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.mode = Mode::Startup;
                        self.pacing_gain = HIGH_GAIN;
                        self.window_gain = HIGH_GAIN;
                    }
                }
            }
            _ => {}
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.window_gain = 2.0;
        // Start in a cruise phase; the probe comes within the cycle.
        self.cycle_index = 2;
        self.cycle_stamp = Some(now);
        self.pacing_gain = CYCLE[self.cycle_index];
    }

    fn set_pacing_rate(&mut self) {
        let bw = self.bandwidth();
        if bw == 0 {
            return;
        }
        let rate = (self.pacing_gain * bw as f64) as u64;
        if self.filled_pipe || rate > self.pacing_rate {
            self.pacing_rate = rate.max(self.mss * 100);
        }
    }

    fn set_window(&mut self, acked: u64) {
        let mut floor = MIN_WINDOW_PACKETS * self.mss;
        if !self.filled_pipe {
            // Early samples span few packets and understate the path:
            // Startup never goes below the window it began with.
            floor = floor.max(self.initial_window);
        }
        if self.mode == Mode::ProbeRtt {
            self.window = floor;
            return;
        }
        let target = self.window_target(self.window_gain) + 3 * self.mss;
        // Startup too is held to its gain times the BDP measured so far
        // (the estimate doubles each round, so the window still does):
        // an uncapped window there overshoots the queue by many BDPs.
        self.window = (self.window + acked).min(target).max(floor);
    }

    /// A retransmission timeout fired: nothing was acknowledged for a
    /// probe interval. The window stays (loss is not a signal here); the
    /// caller resends the oldest data.
    pub fn on_timeout(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path of `rate` bytes/s and `rtt`, one ACK per round trip: the
    /// controller finds the rate, leaves Startup, and cruises near it.
    #[test]
    fn finds_the_bottleneck_rate() {
        let mss = 1400u64;
        let rate = 12_500_000u64; // 100 Mbit/s
        let rtt = Duration::from_millis(50);
        let bdp = rate * 50 / 1000;
        let mut cc = Controller::new(mss, 32);
        let start = Instant::now();
        let mut delivered = 0u64;
        for i in 1..=200u32 {
            let now = start + rtt * i;
            // What one round delivers: the window, the pacing and the path all cap it.
            let paced = cc.pacing_rate() / 20;
            let chunk = cc.window().min(paced).min(bdp);
            let prior = delivered;
            delivered += chunk;
            let sample = RateSample {
                delivered: chunk,
                interval: rtt,
                rtt,
                prior_delivered: prior,
                app_limited: false,
            };
            cc.on_ack(now, &sample, delivered, chunk, chunk.min(bdp));
        }
        assert!(
            matches!(cc.mode(), Mode::ProbeBw | Mode::ProbeRtt),
            "{:?}",
            cc.mode()
        );
        let bw = cc.bandwidth();
        assert!(bw <= rate && bw >= rate * 9 / 10, "estimate {bw} for {rate}");
        assert!(
            cc.window() >= bdp && cc.window() <= 2 * bdp + 3 * mss + 1,
            "window {}",
            cc.window()
        );
    }
}
