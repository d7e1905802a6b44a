//! The receive side of the sender core: when the awaited reply is late
//! (per-frame, absolute deadlines, [`FrameClock`]), the bytes read, and
//! what the receiver's FILES_ACCEPT and final report said.

use std::time::{Duration, Instant};

use pfs_wire::files::{FilesAccept, FilesReport};

use crate::framing::{FrameClock, DEFAULT_MIN_FRAME_RATE};

/// The receiver's replies so far: see the module doc.
#[derive(Debug)]
pub(super) struct Replies {
    /// Deadlines of the reply being awaited (`None` before the first wait).
    deadline: Option<FrameClock>,
    /// Bytes consumed.
    consumed: u64,
    /// FILES_ACCEPT: the store's id and generation.
    pub(super) accept: Option<FilesAccept>,
    /// The report and its messages (FILES_END; not in a dry run).
    pub(super) report: Option<(FilesReport<'static>, String)>,
}

impl Replies {
    /// Awaiting the first reply from `now` on.
    pub(super) fn new(now: Instant, timeout: Duration) -> Self {
        Self {
            deadline: Some(Self::clock(now, timeout)),
            consumed: 0,
            accept: None,
            report: None,
        }
    }

    fn clock(now: Instant, timeout: Duration) -> FrameClock {
        FrameClock::new(now, timeout, DEFAULT_MIN_FRAME_RATE)
    }

    /// A reply is awaited from `now` on (what was sent is written).
    pub(super) fn await_from(&mut self, now: Instant, timeout: Duration) {
        self.deadline = Some(Self::clock(now, timeout));
    }

    /// A whole reply of `len` bytes was handled.
    pub(super) fn handled(&mut self, len: usize) {
        self.consumed += len as u64;
    }

    /// `used` bytes of whole replies were handled at `now`, and `rest`
    /// (the start of the next one) is buffered: the next deadline.
    pub(super) fn arrived(&mut self, now: Instant, timeout: Duration, used: usize, rest: &[u8]) {
        if let Some(clock) = self.deadline.as_mut() {
            if used > 0 {
                clock.next_frame(now, timeout);
            }
            clock.arrived_of(rest);
        }
    }

    /// When the reply being awaited is late.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.deadline.map(|c| c.deadline())
    }

    /// Bytes consumed so far.
    pub(super) fn bytes(&self) -> u64 {
        self.consumed
    }
}
