//! The session's deadlines: how long each phase may wait for its next
//! frame (the handshake, the sender's preparation, the stream), on the
//! per-frame clock shared with the other cores.

use std::time::{Duration, Instant};

use super::core::Phase;
use super::FilesReceiverConfig;
use crate::framing::FrameClock;

/// The timeouts of [`FilesReceiverConfig`] and the absolute deadline of the
/// frame awaited.
#[derive(Debug)]
pub(super) struct Deadlines {
    /// Per-frame, absolute deadlines.
    pub(super) clock: FrameClock,
    handshake: Duration,
    prepare: Duration,
    pub(super) idle: Duration,
}

impl Deadlines {
    /// FILES_HELLO awaited from `now`.
    pub(super) fn new(cfg: &FilesReceiverConfig, now: Instant) -> Self {
        Self {
            clock: FrameClock::new(now, cfg.handshake_timeout, cfg.min_frame_rate),
            handshake: cfg.handshake_timeout,
            prepare: cfg.prepare_timeout,
            idle: cfg.idle_timeout,
        }
    }

    /// How long the next frame of `phase` may take to arrive.
    pub(super) fn of(&self, phase: Phase) -> Duration {
        match phase {
            Phase::Hello => self.handshake,
            // The sender hashes and chunks what the receiver lacks between
            // its PROBE answers and its PLAN: minutes for a large tree.
            Phase::Index | Phase::Plan => self.handshake.max(self.prepare),
            _ => self.idle,
        }
    }

    /// The stream begins (or goes on) at `now`: the next frame has the idle timeout.
    pub(super) fn stream_from(&mut self, now: Instant) {
        self.clock.next_frame(now, self.idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_has_its_timeout() {
        let cfg = FilesReceiverConfig {
            handshake_timeout: Duration::from_secs(3),
            prepare_timeout: Duration::from_secs(50),
            idle_timeout: Duration::from_secs(7),
            ..FilesReceiverConfig::default()
        };
        let now = Instant::now();
        let d = Deadlines::new(&cfg, now);
        assert_eq!(d.of(Phase::Hello), Duration::from_secs(3));
        assert_eq!(d.of(Phase::Index), Duration::from_secs(50));
        assert_eq!(d.of(Phase::Plan), Duration::from_secs(50));
        assert_eq!(d.of(Phase::Stream), Duration::from_secs(7));
        assert_eq!(d.of(Phase::Repair), Duration::from_secs(7));
        // A prepare timeout shorter than the handshake's does not shorten it.
        let d = Deadlines::new(
            &FilesReceiverConfig {
                prepare_timeout: Duration::from_secs(1),
                ..cfg
            },
            now,
        );
        assert_eq!(d.of(Phase::Index), Duration::from_secs(3));
        assert_eq!(d.clock.deadline(), now + Duration::from_secs(3));
    }
}
