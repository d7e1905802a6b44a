//! Integrity digests over the concatenation of a gram's referenced ranges.
//!
//! The digest of a gram is the hash of its effective bytes — the referenced
//! ranges concatenated in table order — so it does not depend on how the
//! bytes were split into descriptors and can be checked with any
//! xxh3/FNV-1a implementation.

use pfs_wire::IntegrityAlg;
use std::hash::Hasher;
use twox_hash::XxHash3_64;

/// FNV-1a 64 offset basis.
pub const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Continues an FNV-1a 64 state over `bytes`. Byte-serial by definition;
/// kept for comparison with the original prototype's figures.
#[inline]
pub fn fnv1a64(mut state: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        state ^= u64::from(b);
        state = state.wrapping_mul(FNV_PRIME);
    }
    state
}

/// Streaming digest of one gram. XXH3 comes from `twox-hash`, which picks
/// its AVX2 kernel at run time (the SSE2 build of other crates runs at
/// ~60% of the speed on this class of machine).
/// Reused across grams with [`Digest::reset`]
/// so the hot path does not allocate.
#[derive(Clone)]
pub enum Digest {
    /// No integrity: always 0.
    None,
    /// XXH3-64, seed 0.
    Xxh3(Box<XxHash3_64>),
    /// FNV-1a 64.
    Fnv1a(u64),
}

impl core::fmt::Debug for Digest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::None => "Digest::None",
            Self::Xxh3(_) => "Digest::Xxh3",
            Self::Fnv1a(_) => "Digest::Fnv1a",
        })
    }
}

impl Digest {
    /// A fresh digest for `alg`.
    pub fn new(alg: IntegrityAlg) -> Self {
        match alg {
            IntegrityAlg::None => Self::None,
            IntegrityAlg::Xxh3 => Self::Xxh3(Box::new(XxHash3_64::new())),
            IntegrityAlg::Fnv1a => Self::Fnv1a(FNV_OFFSET_BASIS),
        }
    }

    /// Back to the empty state, keeping the allocation.
    #[inline]
    pub fn reset(&mut self) {
        match self {
            Self::None => {}
            Self::Xxh3(h) => **h = XxHash3_64::new(),
            Self::Fnv1a(s) => *s = FNV_OFFSET_BASIS,
        }
    }

    /// Feeds the next referenced range.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::None => {}
            Self::Xxh3(h) => h.write(bytes),
            Self::Fnv1a(s) => *s = fnv1a64(*s, bytes),
        }
    }

    /// The digest of everything fed since the last reset.
    #[inline]
    pub fn value(&self) -> u64 {
        match self {
            Self::None => 0,
            Self::Xxh3(h) => h.finish(),
            Self::Fnv1a(s) => *s,
        }
    }
}

/// One step of the end-to-end chain over per-gram digests (see `docs/wire.md`).
#[inline]
pub fn e2e_chain(prev: u64, seq: u64, gram_value: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..].copy_from_slice(&gram_value.to_le_bytes());
    XxHash3_64::oneshot_with_seed(prev, &buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fnv1a_known_values() {
        // Published FNV-1a 64 test values.
        assert_eq!(fnv1a64(FNV_OFFSET_BASIS, b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(FNV_OFFSET_BASIS, b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(FNV_OFFSET_BASIS, b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn xxh3_matches_one_shot() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let mut d = Digest::new(IntegrityAlg::Xxh3);
        d.update(&data[..1234]);
        d.update(&data[1234..]);
        assert_eq!(d.value(), XxHash3_64::oneshot(&data));
        d.reset();
        assert_eq!(d.value(), XxHash3_64::oneshot(b""));
    }

    proptest! {
        #[test]
        fn split_independent(data: Vec<u8>, cut in 0usize..1000, fnv: bool) {
            let cut = cut.min(data.len());
            let alg = if fnv { IntegrityAlg::Fnv1a } else { IntegrityAlg::Xxh3 };
            let mut a = Digest::new(alg);
            a.update(&data);
            let mut b = Digest::new(alg);
            b.update(&data[..cut]);
            b.update(&data[cut..]);
            prop_assert_eq!(a.value(), b.value());
        }
    }
}
