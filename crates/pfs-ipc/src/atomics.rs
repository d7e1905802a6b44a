//! Atomics used by the ring: std's in normal builds, loom's under
//! `--cfg loom` so the model tests explore every interleaving.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
