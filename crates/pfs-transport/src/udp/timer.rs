//! The timer table of a UDP connection: one deadline per [`Timer`] kind.
//! The connection sets a deadline where the event that moves it happens
//! (an ACK owed, an OPEN sent, a loss pending), or, for those that follow
//! from its state (idle, keepalive, stall, probe, pacing, unreachable),
//! once before it reads the table. Its next deadline is the table's
//! earliest; when it passes, the connection handles each expired kind in
//! the order of the enum.

use std::time::Instant;

/// What a deadline is for. The order is the order expired timers are
/// handled in: a connection that failed by one is not handled further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// A CLOSE waits to be sent (due at once).
    Close,
    /// The opening exchange must be over by then.
    Connect,
    /// The peer must have sent something valid by then.
    Idle,
    /// An ICMP port unreachable ends the connection then, unless a valid
    /// packet arrives before.
    Unreachable,
    /// Bytes in flight must have been acknowledged by then.
    Stall,
    /// A packet in flight becomes old enough to be lost (time threshold).
    Loss,
    /// The probe timeout: ACKs stopped while bytes are in flight.
    Pto,
    /// OPEN (client) or OPEN_ACK (server) goes out again.
    OpenResend,
    /// A held-back ACK is due.
    Ack,
    /// Nothing was sent for the keepalive interval: an ACK goes out.
    Keepalive,
    /// The pacer lets the next DATA packet go.
    Pacing,
}

impl Timer {
    /// Every kind, in the order expired ones are handled.
    pub const ALL: [Timer; 11] = [
        Timer::Close,
        Timer::Connect,
        Timer::Idle,
        Timer::Unreachable,
        Timer::Stall,
        Timer::Loss,
        Timer::Pto,
        Timer::OpenResend,
        Timer::Ack,
        Timer::Keepalive,
        Timer::Pacing,
    ];
}

/// One optional deadline per [`Timer`]: a fixed array, no allocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct TimerTable {
    at: [Option<Instant>; Timer::ALL.len()],
}

impl TimerTable {
    /// Arms `timer` for `at`, replacing its deadline.
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer as usize] = Some(at);
    }

    /// Disarms `timer`.
    pub fn clear(&mut self, timer: Timer) {
        self.at[timer as usize] = None;
    }

    /// Arms `timer` for `at`, or disarms it if `at` is `None`.
    pub fn put(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer as usize] = at;
    }

    /// Disarms every timer.
    pub fn clear_all(&mut self) {
        self.at = [None; Timer::ALL.len()];
    }

    /// The deadline of `timer`, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer as usize]
    }

    /// Whether `timer` is armed and its deadline is at or before `now`.
    pub fn expired(&self, timer: Timer, now: Instant) -> bool {
        self.at[timer as usize].is_some_and(|at| at <= now)
    }

    /// The earliest armed timer and its deadline (the first in handling
    /// order among equal deadlines).
    pub fn next(&self) -> Option<(Timer, Instant)> {
        let mut best: Option<(Timer, Instant)> = None;
        for (timer, at) in Timer::ALL.into_iter().zip(self.at) {
            if let Some(at) = at {
                if best.is_none_or(|(_, b)| at < b) {
                    best = Some((timer, at));
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_table_returns_the_earliest_timer() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let mut table = TimerTable::default();
        assert_eq!(table.next(), None);
        table.set(Timer::Idle, t0 + 100 * ms);
        table.set(Timer::Pacing, t0 + 3 * ms);
        table.set(Timer::Ack, t0 + 5 * ms);
        assert_eq!(table.next(), Some((Timer::Pacing, t0 + 3 * ms)));
        assert!(table.expired(Timer::Pacing, t0 + 3 * ms));
        assert!(!table.expired(Timer::Ack, t0 + 3 * ms));
        table.clear(Timer::Pacing);
        assert_eq!(table.next(), Some((Timer::Ack, t0 + 5 * ms)));
        // Equal deadlines: the first in handling order.
        table.set(Timer::Loss, t0 + 5 * ms);
        assert_eq!(table.next(), Some((Timer::Loss, t0 + 5 * ms)));
        table.put(Timer::Loss, None);
        table.put(Timer::Ack, None);
        assert_eq!(table.next(), Some((Timer::Idle, t0 + 100 * ms)));
        // Every kind has its own slot.
        for (i, timer) in Timer::ALL.into_iter().enumerate() {
            table.set(timer, t0 + Duration::from_secs(10) - ms * i as u32);
            assert_eq!(
                table.get(timer),
                Some(t0 + Duration::from_secs(10) - ms * i as u32)
            );
        }
        table.set(Timer::Idle, t0);
        assert_eq!(table.next(), Some((Timer::Idle, t0)));
        table.clear_all();
        assert_eq!(table.next(), None);
    }
}
