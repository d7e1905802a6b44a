//! The session's budget: how much a peer may make this receiver keep
//! (bookkeeping bytes), work (bytes hashed or decompressed per frame),
//! waste (REF/KNOWN bytes that did not verify) and reserve (store space),
//! with what it has used so far. Past a limit the session ends (`LIMIT`).

use super::FilesReceiverConfig;
use crate::error::LimitExceeded;
use crate::SessionError;

/// The limits of [`FilesReceiverConfig`] and what the session has used of them.
#[derive(Debug)]
pub(super) struct Budget {
    /// Largest CHUNKS/REPAIR/BATCH body accepted.
    pub(super) max_chunks_body: u32,
    /// Most bookkeeping bytes kept for the peer.
    pub(super) max_memory: u64,
    max_frame_work: u64,
    max_unverified: u64,
    /// Most store space held reserved: bytes, and percent of the capacity.
    reservation: (u64, u8),
    /// Bookkeeping bytes kept for the peer so far (see [`Self::charge`]).
    memory: u64,
    /// Bytes hashed or decompressed for the frame being handled.
    frame_work: u64,
    /// Bytes of REF/KNOWN chunks that did not verify.
    unverified: u64,
}

impl Budget {
    /// Nothing used yet.
    pub(super) fn new(cfg: &FilesReceiverConfig) -> Self {
        Self {
            max_chunks_body: cfg.max_chunks_body,
            max_memory: cfg.max_session_memory,
            max_frame_work: cfg.max_frame_work,
            max_unverified: cfg.max_unverified_bytes,
            reservation: (cfg.max_reservation, cfg.max_reservation_percent),
            memory: 0,
            frame_work: 0,
            unverified: 0,
        }
    }

    /// Accounts `bytes` more of bookkeeping kept because of what the peer
    /// sent; past the session's limit the session ends (`LIMIT`).
    pub(super) fn charge(&mut self, bytes: u64) -> Result<(), SessionError> {
        self.memory += bytes;
        if self.memory > self.max_memory {
            return Err(LimitExceeded::Peer {
                what: "session memory (bytes kept for chunks awaiting REPAIR, files waiting, directories, PROBE answers)",
                asked: self.memory,
                limit: self.max_memory,
            }
            .into());
        }
        Ok(())
    }

    /// A new frame on the wire: its work starts from zero (a BATCH and
    /// everything it carries count as one frame).
    pub(super) fn new_frame(&mut self) {
        self.frame_work = 0;
    }

    /// Accounts `bytes` more hashed or decompressed for the frame being
    /// handled; past the limit the session ends (`LIMIT`), so one frame
    /// costs a bounded amount of CPU however few bytes it is on the wire.
    pub(super) fn work(&mut self, bytes: u64) -> Result<(), SessionError> {
        self.frame_work += bytes;
        if self.frame_work > self.max_frame_work {
            return Err(LimitExceeded::Peer {
                what: "bytes one frame makes the receiver hash or decompress",
                asked: self.frame_work,
                limit: self.max_frame_work,
            }
            .into());
        }
        Ok(())
    }

    /// Work the frame being handled may still do.
    pub(super) fn frame_left(&self) -> u64 {
        self.max_frame_work.saturating_sub(self.frame_work)
    }

    /// Accounts `len` bytes of a REF/KNOWN chunk that did not match its
    /// hash (hashing them was work for nothing).
    pub(super) fn unverified(&mut self, len: u32) -> Result<(), SessionError> {
        self.unverified += u64::from(len);
        if self.unverified > self.max_unverified {
            return Err(LimitExceeded::Peer {
                what: "bytes of REF/KNOWN chunks that did not match their hash",
                asked: self.unverified,
                limit: self.max_unverified,
            }
            .into());
        }
        Ok(())
    }

    /// Most store space this session may hold reserved in a store of `capacity`.
    pub(super) fn reservation_limit(&self, capacity: u64) -> u64 {
        let (max, percent) = self.reservation;
        let share = u128::from(capacity) * u128::from(percent.min(100)) / 100;
        max.min(share as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget::new(&FilesReceiverConfig {
            max_session_memory: 100,
            max_frame_work: 10,
            max_unverified_bytes: 5,
            max_reservation: 1000,
            max_reservation_percent: 25,
            ..FilesReceiverConfig::default()
        })
    }

    #[test]
    fn memory_is_cumulative_and_limited() {
        let mut b = budget();
        b.charge(60).expect("within");
        b.charge(40).expect("at the limit");
        assert!(matches!(
            b.charge(1),
            Err(SessionError::Limit(LimitExceeded::Peer {
                asked: 101,
                limit: 100,
                ..
            }))
        ));
    }

    #[test]
    fn work_is_per_frame() {
        let mut b = budget();
        b.work(10).expect("at the limit");
        assert_eq!(b.frame_left(), 0);
        assert!(b.work(1).is_err());
        b.new_frame();
        assert_eq!(b.frame_left(), 10);
        b.work(4).expect("new frame");
        assert_eq!(b.frame_left(), 6);
    }

    #[test]
    fn unverified_bytes_are_limited() {
        let mut b = budget();
        b.unverified(5).expect("at the limit");
        assert!(b.unverified(1).is_err());
    }

    #[test]
    fn reservation_is_the_smaller_of_bytes_and_share() {
        let b = budget();
        assert_eq!(b.reservation_limit(400), 100);
        assert_eq!(b.reservation_limit(1 << 20), 1000);
        assert_eq!(b.reservation_limit(0), 0);
    }
}
