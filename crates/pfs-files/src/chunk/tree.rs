//! The whole-file BLAKE3 hash, computed in parallel from aligned windows.
//!
//! BLAKE3 is a tree hash: a subtree that starts at an offset aligned to its
//! (power-of-two) size has a chaining value that depends only on its bytes
//! and that offset. The chunker reads a file in windows of `W` bytes (`W` a
//! power of two, a multiple of the 1 KiB BLAKE3 chunk), so window `k` covers
//! `[k*W, (k+1)*W)` and is a complete subtree (the last one may be short: it
//! is the right edge of the tree, which BLAKE3 allows). Each window is hashed
//! on its own thread with [`window_cv`]; [`root_hash`] joins the chaining
//! values in the same shape BLAKE3's own tree has (the left subtree of a node
//! always holds the largest power of two of windows smaller than the total),
//! so the result is exactly `blake3::hash` of the whole file. Tests check this
//! against `blake3::hash` for lengths around every boundary.

use blake3::hazmat::{merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode};

/// Chaining value of one window of a multi-window input: `bytes` start at
/// `offset`, which must be a multiple of the window size, itself a power of two
/// no smaller than `bytes.len()` (except for the last window, which may be short).
pub(crate) fn window_cv(bytes: &[u8], offset: u64) -> ChainingValue {
    let mut h = blake3::Hasher::new();
    h.set_input_offset(offset);
    h.update(bytes);
    h.finalize_non_root()
}

/// Root hash from the chaining values of at least two consecutive windows.
pub(crate) fn root_hash(cvs: &[ChainingValue]) -> [u8; 32] {
    assert!(cvs.len() >= 2, "a single window is hashed as a root directly");
    let split = left_len(cvs.len());
    let left = merge(&cvs[..split]);
    let right = merge(&cvs[split..]);
    *merge_subtrees_root(&left, &right, Mode::Hash).as_bytes()
}

/// Chaining value of a subtree made of `cvs` (non-root).
fn merge(cvs: &[ChainingValue]) -> ChainingValue {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let split = left_len(cvs.len());
    merge_subtrees_non_root(&merge(&cvs[..split]), &merge(&cvs[split..]), Mode::Hash)
}

/// Windows in the left subtree of `n >= 2` windows: the largest power of two
/// smaller than `n`. With equal power-of-two windows (the last one possibly
/// short but non-empty) this is the split BLAKE3 makes in bytes.
fn left_len(n: usize) -> usize {
    debug_assert!(n >= 2);
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

/// `blake3::hash(data)` computed window by window (sequentially; tests and
/// small inputs).
#[cfg(test)]
pub(crate) fn hash_by_windows(data: &[u8], window: usize) -> [u8; 32] {
    if data.len() <= window {
        return *blake3::hash(data).as_bytes();
    }
    let cvs: Vec<_> = data
        .chunks(window)
        .enumerate()
        .map(|(k, w)| window_cv(w, (k * window) as u64))
        .collect();
    root_hash(&cvs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_len_is_largest_power_below() {
        assert_eq!(left_len(2), 1);
        assert_eq!(left_len(3), 2);
        assert_eq!(left_len(4), 2);
        assert_eq!(left_len(5), 4);
        assert_eq!(left_len(8), 4);
        assert_eq!(left_len(9), 8);
    }

    #[test]
    fn windows_give_the_plain_hash() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for window in [1024usize, 2048, 4096] {
            for len in [
                0, 1, 1023, 1024, 1025, 2047, 2048, 2049, 3072, 4095, 4096, 4097, 5000, 8191, 8192, 8193,
                12_288, 13_000, 16_384, 17_000, 33_000, 40_000,
            ] {
                assert_eq!(
                    hash_by_windows(&data[..len], window),
                    *blake3::hash(&data[..len]).as_bytes(),
                    "len {len} window {window}"
                );
            }
        }
    }
}
