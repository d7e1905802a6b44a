//! A ring over an array of atomic words, for tests: std atomics in unit
//! tests (and miri), loom's under `--cfg loom`, so one memory type serves
//! both. Payload words are written with Relaxed stores, so a missing
//! happens-before shows up as a stale value.

use crate::atomics::{AtomicU32, AtomicU64};
use crate::ring::RingMem;

pub struct WordRing {
    pub words: Vec<AtomicU64>,
    tail: AtomicU64,
    flags: [AtomicU32; 3],
}

impl WordRing {
    pub fn new(cap: usize) -> Self {
        Self {
            words: (0..cap / 8).map(|_| AtomicU64::new(0)).collect(),
            tail: AtomicU64::new(0),
            flags: [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
        }
    }
}

impl RingMem for WordRing {
    fn cap(&self) -> usize {
        self.words.len() * 8
    }
    fn tag(&self, off: usize) -> &AtomicU64 {
        &self.words[off / 8]
    }
    fn meta(&self, off: usize) -> &AtomicU64 {
        &self.words[off / 8 + 1]
    }
    fn tail(&self) -> &AtomicU64 {
        &self.tail
    }
    fn closed(&self) -> &AtomicU32 {
        &self.flags[0]
    }
    fn consumer_sleep(&self) -> &AtomicU32 {
        &self.flags[1]
    }
    fn producer_sleep(&self) -> &AtomicU32 {
        &self.flags[2]
    }
}
