//! Congestion control of the UDP transport: rate- and delay-based, after
//! BBR (version 1). The sender paces at a gain times the bottleneck
//! bandwidth it measured (the highest delivery rate of the last ten round
//! trips) and keeps at most twice the bandwidth-delay product in flight
//! (bandwidth × the lowest RTT of the last ten seconds).
//!
//! Why this shape: a loss-based controller halves its window on every
//! loss, so random loss on a long link starves it (TCP cubic at 1 % over
//! 50 ms). Here random loss does not move the rate: only the delivery
//! rate and the RTT do. Random loss of a fraction `p` lowers a delivery
//! sample by `p`; the probing phase (gain 1.25) more than makes up for it
//! while `p` < 20 %, so the estimate stays at the link's rate.
//!
//! Loss that comes with a queue is congestion, and is answered like TCP
//! answers it (after BBR version 2's `inflight_hi`). A round trip is
//! *queued* when even its fastest RTT sample sat above the path's base RTT
//! (the lowest of the last two minutes) by an eighth of it plus 1 ms: a
//! queue that stood for the whole round, which this flow's own probing
//! (one phase in eight) does not build. The path's random loss rate is
//! learned from rounds that were not queued. A queued round is
//! *congested* when it lost more packets than random loss explains: more
//! than the expected count plus three standard deviations plus two. A
//! congested round caps the bytes in flight at 0.7 × the most the round
//! had (at most one cut per two rounds: a cut shows a round later). The
//! cap grows back by an eighth per round with no queue and, while a queue
//! stands, as CUBIC's window grows after a cut (RFC 9438); it goes once it
//! passes the window.
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
/// Weight of one unqueued round in the random loss rate's average.
const RANDOM_LOSS_WEIGHT: f64 = 1.0 / 8.0;
/// Packets a round must settle to count towards the random loss rate.
const RANDOM_LOSS_MIN_PACKETS: u64 = 32;
/// The in-flight cap after a congested round, as a share of the most the
/// round had in flight (CUBIC's β).
const BETA: f64 = 0.7;
/// Packets the cap grows per round at least.
const QUEUED_GROWTH_PACKETS: u64 = 2;
/// CUBIC's constant C (RFC 9438), packets per second cubed.
const CUBIC_C: f64 = 0.4;
/// How long one slot of the base RTT history spans; the base RTT is the
/// lowest of [`BASE_RTT_SLOTS`] slots, so a longer path (a route change)
/// becomes the base within two minutes.
const BASE_RTT_SLOT: Duration = Duration::from_secs(30);
/// Slots of the base RTT history.
const BASE_RTT_SLOTS: usize = 4;
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
    /// The congestion answer's cap on bytes in flight, when one holds.
    inflight_hi: Option<u64>,
    /// Bytes acknowledged and lost in the current round.
    round_acked: u64,
    round_lost: u64,
    /// The fastest RTT sample and the most in flight in the current round.
    round_min_rtt: Option<Duration>,
    round_max_in_flight: u64,
    /// The round of the last cut, when it came, and the in-flight bytes it cut.
    cut_round: u64,
    cut_at: Option<Instant>,
    cut_from: u64,
    /// Congested rounds so far.
    congested_rounds: u64,
    /// Queued rounds and rounds with significant loss so far (for traces).
    queued_rounds: u64,
    lossy_rounds: u64,
    /// Share of packets lost at random (learned from unqueued rounds).
    random_loss: f64,
    /// Lowest RTT per [`BASE_RTT_SLOT`], newest last, and when the newest began.
    base_rtt: [Option<Duration>; BASE_RTT_SLOTS],
    base_rtt_stamp: Option<Instant>,
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
            inflight_hi: None,
            round_acked: 0,
            round_lost: 0,
            round_min_rtt: None,
            round_max_in_flight: 0,
            cut_round: 0,
            cut_at: None,
            cut_from: 0,
            congested_rounds: 0,
            queued_rounds: 0,
            lossy_rounds: 0,
            random_loss: 0.0,
            base_rtt: [None; BASE_RTT_SLOTS],
            base_rtt_stamp: None,
        }
    }

    /// The cap on bytes in flight that congestion set, if one holds.
    pub fn inflight_cap(&self) -> Option<u64> {
        self.inflight_hi
    }

    /// Round trips found congested (loss above random with a standing queue).
    pub fn congested_rounds(&self) -> u64 {
        self.congested_rounds
    }

    /// Round trips so far.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// Round trips found queued (their fastest RTT sample above the base RTT).
    pub fn queued_rounds(&self) -> u64 {
        self.queued_rounds
    }

    /// Round trips that lost more packets than random loss explains.
    pub fn lossy_rounds(&self) -> u64 {
        self.lossy_rounds
    }

    /// The share of packets the path loses at random, as learned so far.
    pub fn random_loss(&self) -> f64 {
        self.random_loss
    }

    /// The lowest RTT of the last two minutes.
    pub fn base_rtt(&self) -> Option<Duration> {
        self.base_rtt.iter().flatten().min().copied()
    }

    /// Takes `bytes` declared lost.
    pub fn on_loss(&mut self, bytes: u64) {
        self.round_lost += bytes;
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
        if self.round_start {
            self.end_round(now);
        }
        self.round_acked += acked;
        self.round_min_rtt = Some(self.round_min_rtt.map_or(sample.rtt, |m| m.min(sample.rtt)));
        // What was in flight before this ACK settled its bytes.
        self.round_max_in_flight = self.round_max_in_flight.max(in_flight + acked);
        self.update_base_rtt(now, sample.rtt);
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

    fn update_base_rtt(&mut self, now: Instant, rtt: Duration) {
        let start = *self.base_rtt_stamp.get_or_insert(now);
        if now.saturating_duration_since(start) >= BASE_RTT_SLOT {
            self.base_rtt.rotate_left(1);
            self.base_rtt[BASE_RTT_SLOTS - 1] = None;
            self.base_rtt_stamp = Some(now);
        }
        let newest = &mut self.base_rtt[BASE_RTT_SLOTS - 1];
        *newest = Some(newest.map_or(rtt, |m| m.min(rtt)));
    }

    /// Judges the round that just ended: congested (cut the in-flight cap),
    /// queued (grow the cap slowly) or clear (grow it fast).
    /// CUBIC's window `t` after the last cut (RFC 9438 §4.2, C = 0.4,
    /// β = 0.7, in packets of `mss`): back at the window it was cut from
    /// after K = ∛(W_max·(1 − β)/C) seconds, then growing past it.
    fn cubic_cap(&self, now: Instant) -> u64 {
        let Some(at) = self.cut_at else {
            return 0;
        };
        let w_max = self.cut_from as f64 / self.mss as f64;
        let k = (w_max * (1.0 - BETA) / CUBIC_C).cbrt();
        let t = now.saturating_duration_since(at).as_secs_f64();
        let w = CUBIC_C * (t - k).powi(3) + w_max;
        (w.max(0.0) * self.mss as f64) as u64
    }

    fn end_round(&mut self, now: Instant) {
        // Packets, from bytes: a round's losses are a count of datagrams.
        let settled = (self.round_acked + self.round_lost).div_ceil(self.mss);
        let lost = self.round_lost.div_ceil(self.mss);
        let queued = match (self.round_min_rtt, self.base_rtt()) {
            (Some(fastest), Some(base)) => fastest > base + base / 8 + Duration::from_millis(1),
            _ => false,
        };
        let expected = self.random_loss * settled as f64;
        let lossy = lost as f64 > expected + 3.0 * expected.sqrt() + 2.0;
        self.queued_rounds += u64::from(queued);
        self.lossy_rounds += u64::from(lossy);
        if !queued && settled >= RANDOM_LOSS_MIN_PACKETS {
            let rate = lost as f64 / settled as f64;
            self.random_loss += (rate - self.random_loss) * RANDOM_LOSS_WEIGHT;
        }
        let floor = MIN_WINDOW_PACKETS * self.mss;
        if lossy && queued {
            self.congested_rounds += 1;
            if self.round >= self.cut_round + 2 {
                self.cut_at = Some(now);
                self.cut_from = self.round_max_in_flight;
                let cap = (BETA * self.round_max_in_flight as f64) as u64;
                self.inflight_hi = Some(self.inflight_hi.map_or(cap, |hi| hi.min(cap)).max(floor));
                self.cut_round = self.round;
            }
        } else if let Some(hi) = self.inflight_hi {
            // Grow only a cap that held the flow back this round.
            if self.round_max_in_flight + 2 * self.mss >= hi {
                let step = if queued {
                    // Behind a standing queue, grow as CUBIC would since
                    // the cut, so two such flows share the queue.
                    self.cubic_cap(now).saturating_sub(hi)
                } else {
                    hi / 8
                };
                // At least two packets, at most half the cap per round (RFC 9438's bound).
                let grown = hi + step.clamp(QUEUED_GROWTH_PACKETS * self.mss, hi / 2);
                let ceiling = self.window_target(2.0) + 3 * self.mss;
                self.inflight_hi = (grown < ceiling).then_some(grown);
            }
        }
        self.round_acked = 0;
        self.round_lost = 0;
        self.round_min_rtt = None;
        self.round_max_in_flight = 0;
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
        let cap = self.inflight_hi.unwrap_or(u64::MAX);
        self.window = (self.window + acked).min(target).min(cap).max(floor);
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
