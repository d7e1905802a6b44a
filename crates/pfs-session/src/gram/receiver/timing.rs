//! The receiver's deadlines: HELLO has the handshake timeout from its
//! first byte, every later frame the idle timeout from the end of the one
//! before; a frame still arriving earns time by its bytes (the per-frame
//! [`FrameClock`] shared with the files cores). It also names what the
//! receiver awaits, for the error of a peer that lets a deadline pass.

use std::time::{Duration, Instant};

use super::GramReceiverConfig;
use crate::error::Timeout;
use crate::framing::FrameClock;
use crate::SessionError;

/// What the receiver awaits, and by when.
#[derive(Debug)]
pub(super) struct Timing {
    /// Longest silence tolerated mid-session.
    idle: Duration,
    handshake: Duration,
    /// The first byte of HELLO arrived (its handshake deadline is set).
    hello_begun: bool,
    /// Per-frame, absolute deadlines.
    clock: FrameClock,
    /// `wire_in` where the frame now arriving began, and its whole length.
    frame_at: (u64, u64),
    /// What is awaited (for error messages).
    pub(super) awaiting: &'static str,
    /// The timeout of what is awaited.
    awaiting_for: Duration,
}

impl Timing {
    /// HELLO awaited from `now` (its first byte may take the idle timeout).
    pub(super) fn new(cfg: &GramReceiverConfig, now: Instant) -> Self {
        Self {
            idle: cfg.idle_timeout,
            handshake: cfg.handshake_timeout,
            hello_begun: false,
            clock: FrameClock::new(now, cfg.idle_timeout, cfg.min_frame_rate),
            frame_at: (0, 0),
            awaiting: "HELLO",
            awaiting_for: cfg.idle_timeout,
        }
    }

    /// Input arrived at `now`: from its first byte HELLO has the handshake
    /// timeout (once: later bytes do not move it), so a peer trickling
    /// bytes cannot hold the slot.
    pub(super) fn input(&mut self, now: Instant) {
        if !self.hello_begun {
            self.hello_begun = true;
            self.set(now, "HELLO", self.handshake);
        }
    }

    /// `awaiting` is due `after` from `now`.
    pub(super) fn set(&mut self, now: Instant, awaiting: &'static str, after: Duration) {
        self.clock.next_frame(now, after);
        self.awaiting = awaiting;
        self.awaiting_for = after;
    }

    /// A frame is complete at `now`: the next one has the idle timeout to arrive.
    pub(super) fn next_frame(&mut self, now: Instant) {
        self.set(now, "frame", self.idle);
    }

    /// A frame of `len` bytes after its header began at `wire_in`.
    pub(super) fn begin_frame(&mut self, wire_in: u64, whole: u64) {
        self.frame_at = (wire_in, whole);
    }

    /// Between frames, `rest` is buffered: the bytes of the next header
    /// that arrived.
    pub(super) fn between_frames(&mut self, rest: &[u8]) {
        self.clock.arrived_of(rest);
    }

    /// Inside a frame: `wire_in` consumed and `buffered` more bytes here.
    pub(super) fn inside_frame(&mut self, wire_in: u64, buffered: usize) {
        let (at, whole) = self.frame_at;
        self.clock.arrived((wire_in - at + buffered as u64).min(whole));
    }

    /// When the awaited frame is late.
    pub(super) fn deadline(&self) -> Instant {
        self.clock.deadline()
    }

    /// The error for a peer that let the current deadline pass.
    pub(super) fn timed_out(&self) -> SessionError {
        SessionError::TimedOut {
            what: Timeout::Idle {
                during: self.awaiting,
                after: self.awaiting_for,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> GramReceiverConfig {
        GramReceiverConfig {
            handshake_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(9),
            ..GramReceiverConfig::default()
        }
    }

    #[test]
    fn hello_has_the_handshake_timeout_from_its_first_byte_once() {
        let t0 = Instant::now();
        let mut t = Timing::new(&cfg(), t0);
        assert_eq!(t.deadline(), t0 + Duration::from_secs(9));
        let t1 = t0 + Duration::from_secs(5);
        t.input(t1);
        assert_eq!(t.deadline(), t1 + Duration::from_secs(2));
        t.input(t1 + Duration::from_secs(1));
        assert_eq!(t.deadline(), t1 + Duration::from_secs(2));
        assert!(matches!(
            t.timed_out(),
            SessionError::TimedOut {
                what: Timeout::Idle { during: "HELLO", .. }
            }
        ));
    }

    #[test]
    fn later_frames_have_the_idle_timeout() {
        let t0 = Instant::now();
        let mut t = Timing::new(&cfg(), t0);
        t.input(t0);
        t.next_frame(t0);
        assert_eq!(t.awaiting, "frame");
        assert_eq!(t.deadline(), t0 + Duration::from_secs(9));
        t.set(t0, "REPAIR", Duration::from_secs(1));
        assert!(matches!(
            t.timed_out(),
            SessionError::TimedOut {
                what: Timeout::Idle { during: "REPAIR", after }
            } if after == Duration::from_secs(1)
        ));
    }
}
