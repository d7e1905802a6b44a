//! Scalar reference implementations: each kernel's definition computed the
//! obvious way, byte by byte, from the descriptors' bytes in order. Slow on
//! purpose; the tests hold the fast kernels to these.

use core::ops::Range;
use twox_hash::XxHash3_64;

use super::{KernelId, Output, CHUNK_DESCS};
use crate::integrity::{fnv1a64, FNV_OFFSET_BASIS};

/// The result of kernel `id` over `descs`, the bytes of each descriptor in
/// schedule order.
///
/// For the in-place kernels (`xor`, `add`) each slice is the input that
/// descriptor sees when it runs, and the blob is not touched; when
/// descriptors overlap, a later one sees the earlier ones' writes, which
/// [`reference_in_place`] models.
pub fn reference(id: KernelId, descs: &[&[u8]]) -> Output {
    match id {
        KernelId::Fnv1a64 => {
            let mut h = FNV_OFFSET_BASIS;
            for d in descs {
                h = fnv1a64(h, d);
            }
            Output::U64(h)
        }
        KernelId::Xxh3 => {
            let owned: Vec<Vec<u8>> = descs.iter().map(|d| d.to_vec()).collect();
            Output::U64(chained_xxh3(&owned))
        }
        KernelId::Crc32c => {
            let mut crc = !0u32;
            for &b in descs.iter().flat_map(|d| d.iter()) {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0x82f6_3b78
                    } else {
                        crc >> 1
                    };
                }
            }
            Output::U64(u64::from(!crc))
        }
        KernelId::SumU64 => {
            let mut sum = 0u64;
            for d in descs {
                for (i, &b) in d.iter().enumerate() {
                    // Byte i of a descriptor is byte i % 8 of word i / 8.
                    sum = sum.wrapping_add(u64::from(b) << (8 * (i % 8)));
                }
            }
            Output::U64(sum)
        }
        KernelId::CountByte(needle) => {
            let n = descs
                .iter()
                .flat_map(|d| d.iter())
                .filter(|&&b| b == needle)
                .count();
            Output::U64(n as u64)
        }
        KernelId::Histogram => {
            let mut counts = vec![0u64; 256];
            for &b in descs.iter().flat_map(|d| d.iter()) {
                counts[usize::from(b)] += 1;
            }
            Output::Histogram(counts)
        }
        KernelId::XorImm(_) | KernelId::AddImm(_) => {
            let modified: Vec<Vec<u8>> = descs
                .iter()
                .map(|d| d.iter().map(|&b| apply(id, b)).collect())
                .collect();
            bytes_output(&modified)
        }
        KernelId::Gather => {
            let owned: Vec<Vec<u8>> = descs.iter().map(|d| d.to_vec()).collect();
            bytes_output(&owned)
        }
    }
}

/// Runs kernel `id` over `ranges` of `blob` in order, one descriptor after
/// the other — so overlapping in-place descriptors each apply once, the
/// later one over the earlier one's result — and returns its result. The
/// in-place kernels modify `blob`; the others only read it.
///
/// # Panics
/// If a range is outside `blob`.
pub fn reference_in_place(id: KernelId, blob: &mut [u8], ranges: &[Range<usize>]) -> Output {
    if !id.in_place() {
        let descs: Vec<&[u8]> = ranges.iter().map(|r| &blob[r.clone()]).collect();
        return reference(id, &descs);
    }
    let modified: Vec<Vec<u8>> = ranges
        .iter()
        .map(|r| {
            for b in &mut blob[r.clone()] {
                *b = apply(id, *b);
            }
            blob[r.clone()].to_vec()
        })
        .collect();
    bytes_output(&modified)
}

/// One byte through an in-place kernel.
fn apply(id: KernelId, b: u8) -> u8 {
    match id {
        KernelId::XorImm(k) => b ^ k,
        KernelId::AddImm(k) => b.wrapping_add(k),
        _ => b,
    }
}

/// `Output::Bytes` over the given per-descriptor bytes.
fn bytes_output(descs: &[Vec<u8>]) -> Output {
    Output::Bytes {
        bytes: descs.iter().map(|d| d.len() as u64).sum(),
        xxh3: chained_xxh3(descs),
    }
}

/// XXH3-64 of each chunk's concatenated bytes, folded in chunk order.
fn chained_xxh3(descs: &[Vec<u8>]) -> u64 {
    let mut r = 0u64;
    for chunk in descs.chunks(CHUNK_DESCS) {
        let concat: Vec<u8> = chunk.concat();
        if !concat.is_empty() {
            let h = XxHash3_64::oneshot(&concat);
            r = XxHash3_64::oneshot_with_seed(r, &h.to_le_bytes());
        }
    }
    r
}
