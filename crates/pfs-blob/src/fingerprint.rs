//! Blob identity: BLAKE3 per fixed-size region plus a root over them.
//!
//! Peers compare roots in HELLO; when roots differ, the region hashes say
//! which byte ranges differ so only those need repair. Layout of the root
//! input (version-tagged so the format can change):
//! `"pfs-fp-v1" || le64(blob_len) || le32(region_size) || region hashes`.

use std::ops::Range;

use crate::error::FingerprintMismatch;
use crate::fill::resolve_threads;

/// Domain tag of the root hash.
const ROOT_TAG: &[u8] = b"pfs-fp-v1";

/// Region hashes and root of one blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fingerprint {
    /// Bytes per region; the last region may be shorter.
    pub region_size: u32,
    /// Length of the fingerprinted blob in bytes.
    pub blob_len: u64,
    /// BLAKE3 of each region, in order.
    pub regions: Vec<[u8; 32]>,
    /// BLAKE3 of the tag, shape and region hashes (see the module docs).
    pub root: [u8; 32],
}

impl Fingerprint {
    /// Fingerprint `data`, hashing regions on up to `threads` threads
    /// (0 = all cores). The result does not depend on `threads`.
    ///
    /// # Panics
    /// If `region_size` is 0.
    pub fn compute(data: &[u8], region_size: u32, threads: usize) -> Fingerprint {
        assert!(region_size > 0, "fingerprint region size must be > 0");
        let rs = region_size as usize;
        let n = data.len().div_ceil(rs);
        let mut regions = vec![[0u8; 32]; n];
        let threads = resolve_threads(threads).min(n.max(1));
        if threads <= 1 {
            hash_regions(data, rs, 0, &mut regions);
        } else {
            // Contiguous runs of regions per thread keep each thread streaming.
            let per = n.div_ceil(threads);
            std::thread::scope(|s| {
                for (t, out) in regions.chunks_mut(per).enumerate() {
                    s.spawn(move || hash_regions(data, rs, t * per, out));
                }
            });
        }
        Self::from_regions(region_size, data.len() as u64, regions)
    }

    /// Rebuild a fingerprint (and its root) from stored region hashes.
    pub fn from_regions(region_size: u32, blob_len: u64, regions: Vec<[u8; 32]>) -> Fingerprint {
        let mut h = blake3::Hasher::new();
        h.update(ROOT_TAG);
        h.update(&blob_len.to_le_bytes());
        h.update(&region_size.to_le_bytes());
        for r in &regions {
            h.update(r);
        }
        Fingerprint {
            region_size,
            blob_len,
            regions,
            root: *h.finalize().as_bytes(),
        }
    }

    /// Number of regions a blob of `blob_len` bytes has.
    pub fn region_count(blob_len: u64, region_size: u32) -> usize {
        usize::try_from(blob_len.div_ceil(u64::from(region_size.max(1)))).unwrap_or(usize::MAX)
    }

    /// Byte range covered by region `i`.
    pub fn region_range(&self, i: usize) -> Range<u64> {
        let start = i as u64 * u64::from(self.region_size);
        let end = (start + u64::from(self.region_size)).min(self.blob_len);
        start..end
    }

    /// Byte ranges whose regions differ between `self` and `other`, in order,
    /// adjacent ones merged. Empty when the blobs are identical.
    pub fn diff(&self, other: &Fingerprint) -> Result<Vec<Range<u64>>, FingerprintMismatch> {
        if self.blob_len != other.blob_len {
            return Err(FingerprintMismatch::Len {
                ours: self.blob_len,
                theirs: other.blob_len,
            });
        }
        if self.region_size != other.region_size {
            return Err(FingerprintMismatch::RegionSize {
                ours: self.region_size,
                theirs: other.region_size,
            });
        }
        let mut out: Vec<Range<u64>> = Vec::new();
        let pairs = self.regions.iter().zip(&other.regions).enumerate();
        for (i, _) in pairs.filter(|(_, (a, b))| a != b) {
            let r = self.region_range(i);
            match out.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => out.push(r),
            }
        }
        Ok(out)
    }

    /// The root as 64 lowercase hex characters.
    pub fn root_hex(&self) -> String {
        hex(&self.root)
    }

    /// The first 16 hex characters of the root, for logs and reports.
    pub fn short(&self) -> String {
        let mut s = self.root_hex();
        s.truncate(16);
        s
    }

    /// The region hashes concatenated, as stored next to a named blob.
    pub(crate) fn regions_bytes(&self) -> Vec<u8> {
        self.regions.iter().flatten().copied().collect()
    }
}

/// Hash the regions starting at region index `first` into `out`.
fn hash_regions(data: &[u8], rs: usize, first: usize, out: &mut [[u8; 32]]) {
    for (k, slot) in out.iter_mut().enumerate() {
        let start = (first + k) * rs;
        let end = (start + rs).min(data.len());
        *slot = *blake3::hash(&data[start..end]).as_bytes();
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_blob_has_no_regions() {
        let fp = Fingerprint::compute(&[], 16, 2);
        assert!(fp.regions.is_empty());
        assert_eq!(fp.root_hex().len(), 64);
        assert_eq!(fp.short(), fp.root_hex()[..16]);
    }

    #[test]
    fn root_covers_shape() {
        // Same bytes, different region size -> different root.
        let data = vec![7u8; 100];
        let a = Fingerprint::compute(&data, 10, 1);
        let b = Fingerprint::compute(&data, 20, 1);
        assert_ne!(a.root, b.root);
        assert_eq!(a.regions.len(), 10);
        assert_eq!(b.regions.len(), 5);
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
