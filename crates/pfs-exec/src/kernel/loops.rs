//! The inner loops of the built-in kernels, written so that the compiler
//! vectorises them for the baseline target (no `unsafe`, no intrinsics):
//! fixed-width `chunks_exact` blocks, independent accumulators, no
//! loop-carried dependency through memory. `count` is the exception: it
//! comes from `bytecount`, which dispatches to AVX2 at run time.

/// Bytes per block when an in-place kernel mutates then hashes (fits L1).
pub(crate) const FUSE_BLOCK: usize = 8 * 1024;

#[inline(always)]
fn le_word(bytes: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*bytes)
}

/// Wrapping sum of the little-endian u64 words of `bytes`; a tail of fewer
/// than 8 bytes is zero-padded into one last word.
#[inline]
pub(crate) fn sum_words(bytes: &[u8]) -> u64 {
    let mut blocks = bytes.chunks_exact(32);
    let mut acc = [0u64; 4];
    for block in &mut blocks {
        for (a, w) in acc.iter_mut().zip(block.chunks_exact(8)) {
            *a = a.wrapping_add(le_word(w.try_into().expect("chunks_exact(8)")));
        }
    }
    let mut sum = acc.iter().fold(0u64, |s, &a| s.wrapping_add(a));
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        sum = sum.wrapping_add(le_word(w.try_into().expect("chunks_exact(8)")));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        sum = sum.wrapping_add(u64::from_le_bytes(last));
    }
    sum
}

/// Number of bytes of `bytes` equal to `needle`. `bytecount` picks its
/// AVX2 or SSE2 kernel at run time; it reaches memory bandwidth where a
/// portable SWAR loop on the baseline target stops at about two thirds.
#[inline]
pub(crate) fn count_eq(bytes: &[u8], needle: u8) -> u64 {
    bytecount::count(bytes, needle) as u64
}

/// Adds the byte-value counts of `bytes` to `counts`.
#[inline]
pub(crate) fn histogram_add(counts: &mut [u64; 256], bytes: &[u8]) {
    if bytes.len() < 1024 {
        // Short ranges: zeroing and folding sub-histograms costs more than
        // the store-to-load stalls it saves.
        for &b in bytes {
            counts[usize::from(b)] += 1;
        }
        return;
    }
    // Four sub-histograms so that consecutive equal bytes do not wait on
    // each other's increments. u32 counters: a block of 2^30 bytes puts
    // at most 2^28 into any one of them.
    let mut sub = [[0u32; 256]; 4];
    for block in bytes.chunks(1 << 30) {
        let mut words = block.chunks_exact(8);
        for w in &mut words {
            let w = le_word(w.try_into().expect("chunks_exact(8)"));
            sub[0][(w & 0xff) as usize] += 1;
            sub[1][((w >> 8) & 0xff) as usize] += 1;
            sub[2][((w >> 16) & 0xff) as usize] += 1;
            sub[3][((w >> 24) & 0xff) as usize] += 1;
            sub[0][((w >> 32) & 0xff) as usize] += 1;
            sub[1][((w >> 40) & 0xff) as usize] += 1;
            sub[2][((w >> 48) & 0xff) as usize] += 1;
            sub[3][(w >> 56) as usize] += 1;
        }
        for &b in words.remainder() {
            sub[0][usize::from(b)] += 1;
        }
        for (v, c) in counts.iter_mut().enumerate() {
            *c += sub.iter().map(|s| u64::from(s[v])).sum::<u64>();
        }
        sub = [[0u32; 256]; 4];
    }
}

/// `b ^= k` for every byte.
#[inline]
pub(crate) fn xor_in_place(bytes: &mut [u8], k: u8) {
    for b in bytes {
        *b ^= k;
    }
}

/// `b = b.wrapping_add(k)` for every byte.
#[inline]
pub(crate) fn add_in_place(bytes: &mut [u8], k: u8) {
    for b in bytes {
        *b = b.wrapping_add(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect()
    }

    #[test]
    fn loops_match_naive_across_block_edges() {
        let data = blob(3 * 32 * 255 + 77);
        for len in [
            0,
            1,
            7,
            8,
            9,
            31,
            32,
            33,
            1023,
            1024,
            1025,
            8160,
            8161,
            data.len(),
        ] {
            let d = &data[..len];
            let naive_sum = d.chunks(8).fold(0u64, |s, w| {
                let mut b = [0u8; 8];
                b[..w.len()].copy_from_slice(w);
                s.wrapping_add(u64::from_le_bytes(b))
            });
            assert_eq!(sum_words(d), naive_sum, "len {len}");
            for needle in [0u8, 0x41, 0x7f, 0x80, 0xff] {
                let naive = d.iter().filter(|&&b| b == needle).count() as u64;
                assert_eq!(count_eq(d, needle), naive, "len {len}");
            }
            let mut h = [0u64; 256];
            histogram_add(&mut h, d);
            let mut naive = [0u64; 256];
            d.iter().for_each(|&b| naive[usize::from(b)] += 1);
            assert_eq!(h, naive, "len {len}");
        }
    }

    #[test]
    fn count_all_equal() {
        // Every byte matches, and none of the neighbouring values does.
        for v in [0u8, 0x01, 0x7f, 0x80, 0xfe, 0xff] {
            let data = vec![v; 2 * 32 * 255 + 40];
            assert_eq!(count_eq(&data, v), data.len() as u64, "{v:#x}");
            assert_eq!(count_eq(&data, v ^ 0x80), 0, "{v:#x}");
            assert_eq!(count_eq(&data, v ^ 0x01), 0, "{v:#x}");
        }
    }
}
