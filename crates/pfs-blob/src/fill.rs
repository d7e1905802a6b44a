//! The deterministic seeded generator that gives both peers the same blob.
//!
//! Word `i` (64-bit, little-endian) of a blob filled from `seed` is the
//! splitmix64 finalizer applied to `seed + (i + 1) * 0x9E3779B97F4A7C15`
//! (wrapping). Every word depends only on `(seed, i)`, so the buffer can be
//! split across threads at any word boundary and the bytes come out the same
//! for any thread count.

use std::num::NonZeroUsize;

/// The splitmix64 increment (2^64 / golden ratio).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Below this size spawning threads costs more than it saves.
const PARALLEL_MIN_BYTES: usize = 4 << 20;

/// splitmix64's output function (Steele, Lea, Flood 2014).
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `i` of a blob filled from `seed`: the reference formula.
///
/// ```
/// let mut buf = [0u8; 16];
/// pfs_blob::fill_seeded(&mut buf, 7, 1);
/// assert_eq!(buf[8..16], pfs_blob::fill_seeded_word(7, 1).to_le_bytes());
/// ```
#[inline]
pub fn fill_seeded_word(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Resolve a thread count: 0 means "all available cores".
pub(crate) fn resolve_threads(threads: usize) -> usize {
    if threads == 0 {
        std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
    } else {
        threads
    }
}

/// Fill `buf` with the seeded sequence, as if `buf` were the whole blob
/// starting at word 0. `threads == 0` uses all available cores; the result
/// does not depend on the thread count.
pub fn fill_seeded(buf: &mut [u8], seed: u64, threads: usize) {
    let threads = resolve_threads(threads);
    if threads <= 1 || buf.len() < PARALLEL_MIN_BYTES {
        fill_from_word(buf, seed, 0);
        return;
    }
    // Chunks start on word boundaries; the last one also takes the tail bytes.
    let words = buf.len() / 8;
    let words_per = words.div_ceil(threads);
    let chunk_bytes = words_per * 8;
    std::thread::scope(|s| {
        let mut rest = &mut buf[..];
        let mut first_word = 0u64;
        while rest.len() > chunk_bytes {
            let (head, tail) = rest.split_at_mut(chunk_bytes);
            let w = first_word;
            s.spawn(move || fill_from_word(head, seed, w));
            first_word += words_per as u64;
            rest = tail;
        }
        // The calling thread does the last chunk rather than idling.
        fill_from_word(rest, seed, first_word);
    });
}

/// Fill `chunk` with words `first_word..`; trailing bytes take the low bytes
/// of the next word.
fn fill_from_word(chunk: &mut [u8], seed: u64, first_word: u64) {
    // x advances by GAMMA per word, which equals (i + 1) * GAMMA modulo 2^64;
    // the loop body is then independent per word and pipelines well.
    let mut x = seed.wrapping_add(first_word.wrapping_add(1).wrapping_mul(GAMMA));
    let mut words = chunk.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&mix(x).to_le_bytes());
        x = x.wrapping_add(GAMMA);
    }
    let tail = words.into_remainder();
    if !tail.is_empty() {
        let last = mix(x).to_le_bytes();
        tail.copy_from_slice(&last[..tail.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // splitmix64 seeded with 0: first outputs are well known.
        assert_eq!(fill_seeded_word(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(fill_seeded_word(0, 1), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(fill_seeded_word(0, 2), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn matches_formula_with_tail() {
        let mut buf = vec![0u8; 8 * 5 + 3];
        fill_seeded(&mut buf, 0x5EED, 1);
        for i in 0..5u64 {
            let at = i as usize * 8;
            assert_eq!(buf[at..at + 8], fill_seeded_word(0x5EED, i).to_le_bytes());
        }
        assert_eq!(buf[40..], fill_seeded_word(0x5EED, 5).to_le_bytes()[..3]);
    }
}
