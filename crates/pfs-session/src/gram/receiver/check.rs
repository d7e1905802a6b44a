//! A gram's integrity check on the receiver: the digest of a checked gram
//! (and a digest that reads nothing for an unchecked one), its decoded
//! descriptors, and in payload mode the slab's pieces that differ from
//! this blob, held until the gram's digest says whether the slab is the
//! sender's bytes (then they repair the blob, wire.md §13.6).
//!
//! Every buffer is kept from gram to gram: checking allocates only while
//! a session's largest gram grows.

use pfs_blob::BlobWriter;
use pfs_exec::Digest;
use pfs_wire::{Descriptor, IntegrityAlg};

use crate::gram::corrections::MAX_LOCAL_REPAIR;

/// The check of the gram being received.
#[derive(Debug)]
pub(super) struct GramCheck {
    /// The digest of checked grams (the session's algorithm).
    pub(super) digest: Digest,
    /// The digest of unchecked grams: none, so their bytes are not read.
    pub(super) skip: Digest,
    /// The current payload gram is checked.
    pub(super) checking: bool,
    /// Some slab byte differs from this blob.
    pub(super) differs: bool,
    /// Payload mode: the table's descriptors, decoded and checked; a
    /// REPAIR: the NAK's ranges.
    pub(super) descs: Vec<Descriptor>,
    /// Payload mode: the slab's pieces that differ from the blob.
    local: Vec<u8>,
    /// Where each held piece goes: (blob offset, length).
    local_at: Vec<(usize, usize)>,
    /// Some differing piece did not fit the hold: no repair of this gram.
    local_lost: bool,
}

impl Default for GramCheck {
    fn default() -> Self {
        Self {
            digest: Digest::new(IntegrityAlg::None),
            skip: Digest::new(IntegrityAlg::None),
            checking: true,
            differs: false,
            descs: Vec::new(),
            local: Vec::new(),
            local_at: Vec::new(),
            local_lost: false,
        }
    }
}

impl GramCheck {
    /// The session negotiated `integrity` and at most `max_descs` descriptors a gram.
    pub(super) fn negotiated(&mut self, integrity: IntegrityAlg, max_descs: u32) {
        self.digest = Digest::new(integrity);
        self.descs = Vec::with_capacity(max_descs.min(1 << 16) as usize);
    }

    /// A payload gram begins; `checking`: it is checked.
    pub(super) fn begin_payload(&mut self, checking: bool) {
        self.descs.clear();
        self.digest.reset();
        self.differs = false;
        self.checking = checking;
        self.local.clear();
        self.local_at.clear();
        self.local_lost = false;
    }

    /// `chunk` of the slab, for the blob bytes `here` at `start`: hashed,
    /// and held if it differs (when the session `repairs` and the hold has
    /// room).
    #[inline]
    pub(super) fn slab(&mut self, chunk: &[u8], here: &[u8], start: usize, repairs: bool) {
        if chunk != here {
            self.differs = true;
            // Held until the digest tells whether the slab is the
            // sender's bytes (then they repair the blob).
            if repairs && self.local.len() + chunk.len() <= MAX_LOCAL_REPAIR {
                self.local.extend_from_slice(chunk);
                self.local_at.push((start, chunk.len()));
            } else {
                self.local_lost = true;
            }
        }
        self.digest.update(chunk);
    }

    /// Whether the held pieces are all of the differing ones.
    pub(super) fn holds_all(&self) -> bool {
        !self.local_lost
    }

    /// Writes the held pieces through `writer`; false if a write failed.
    pub(super) fn write_held(&self, writer: BlobWriter<'_>) -> bool {
        let mut at = 0;
        let mut written = true;
        for &(start, len) in &self.local_at {
            written &= writer.write(start as u64, &self.local[at..at + len]).is_ok();
            at += len;
        }
        written
    }

    /// The digest of `blob`'s bytes under [`Self::descs`] (checked against
    /// this blob before: a range outside it would be skipped).
    pub(super) fn digest_of(&mut self, blob: &[u8]) -> u64 {
        self.digest.reset();
        for d in &self.descs {
            if let Some(bytes) = blob.get(d.offset as usize..d.offset as usize + d.len as usize) {
                self.digest.update(bytes);
            }
        }
        self.digest.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_pieces_are_held_and_hashed() {
        let blob = b"abcdefgh";
        let mut c = GramCheck::default();
        c.negotiated(IntegrityAlg::Xxh3, 16);
        c.begin_payload(true);
        c.slab(b"abc", &blob[0..3], 0, true);
        assert!(!c.differs);
        c.slab(b"XY", &blob[3..5], 3, true);
        assert!(c.differs && c.holds_all());
        assert_eq!(c.local_at, [(3, 2)]);
        assert_eq!(c.local, b"XY");
        let mut whole = Digest::new(IntegrityAlg::Xxh3);
        whole.update(b"abc");
        whole.update(b"XY");
        assert_eq!(c.digest.value(), whole.value());
        // The next gram starts clean.
        c.begin_payload(false);
        assert!(!c.differs && !c.checking && c.local.is_empty() && c.local_at.is_empty());
    }

    #[test]
    fn without_repairs_nothing_is_held() {
        let mut c = GramCheck::default();
        c.begin_payload(true);
        c.slab(b"X", b"a", 0, false);
        assert!(c.differs && !c.holds_all());
        assert!(c.local.is_empty());
    }

    #[test]
    fn the_digest_of_the_ranges() {
        let blob = b"0123456789";
        let mut c = GramCheck::default();
        c.negotiated(IntegrityAlg::Xxh3, 4);
        c.descs.push(Descriptor { offset: 2, len: 3 });
        c.descs.push(Descriptor { offset: 7, len: 2 });
        let mut d = Digest::new(IntegrityAlg::Xxh3);
        d.update(b"234");
        d.update(b"78");
        assert_eq!(c.digest_of(blob), d.value());
    }
}
