//! Executing one gram's descriptors over the receiver's own blob.
//!
//! The peer never dictates the receiver's memory: every descriptor is
//! checked against the blob length before its bytes are touched.

use pfs_wire::{DescIter, Descriptor, WireError};

use crate::integrity::Digest;

/// What executing a gram produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GramOutcome {
    /// Digest of the concatenated referenced ranges.
    pub digest: u64,
    /// Sum of descriptor lengths.
    pub effective_bytes: u64,
    /// Descriptors executed.
    pub descriptors: u32,
}

/// Why a gram could not be executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// A descriptor reaches outside the blob.
    #[error("descriptor #{index} (offset {offset}, len {len}) is outside the {blob_len}-byte blob")]
    OutOfBounds {
        /// Index of the descriptor in its gram.
        index: u32,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u32,
        /// The receiver's blob length.
        blob_len: u64,
    },
    /// The descriptor table is malformed.
    #[error("malformed descriptor table: {0}")]
    Wire(#[from] WireError),
    /// A descriptor is longer than the receiver accepts.
    #[error("descriptor #{index} is {len} bytes long; this receiver accepts at most {max}")]
    TooLong {
        /// Index of the descriptor in its gram.
        index: u32,
        /// Its length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The gram references more bytes than the receiver executes per gram.
    #[error("the gram references more than {max} bytes; this receiver executes at most {max} per gram")]
    TooMuchWork {
        /// The limit.
        max: u64,
    },
}

/// What a receiver will execute for one gram: the caps on amplification
/// (a few bytes of descriptor can name a whole blob).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GramLimits {
    /// Longest descriptor.
    pub max_desc_len: u32,
    /// Most effective bytes in one gram.
    pub max_effective: u64,
}

impl GramLimits {
    /// No caps beyond the blob's bounds.
    pub const NONE: GramLimits = GramLimits {
        max_desc_len: u32::MAX,
        max_effective: u64::MAX,
    };

    /// Checks descriptor `index` of length `len` after `so_far` effective bytes.
    #[inline]
    pub fn check(&self, index: u32, len: u32, so_far: u64) -> Result<(), ExecError> {
        if len > self.max_desc_len {
            return Err(ExecError::TooLong {
                index,
                len,
                max: self.max_desc_len,
            });
        }
        if so_far + u64::from(len) > self.max_effective {
            return Err(ExecError::TooMuchWork {
                max: self.max_effective,
            });
        }
        Ok(())
    }
}

/// The blob bytes `d` refers to, or `OutOfBounds`.
#[inline]
pub fn resolve(blob: &[u8], d: Descriptor, index: u32) -> Result<&[u8], ExecError> {
    let oob = ExecError::OutOfBounds {
        index,
        offset: d.offset,
        len: d.len,
        blob_len: blob.len() as u64,
    };
    let start = usize::try_from(d.offset).map_err(|_| oob)?;
    let end = start.checked_add(d.len as usize).ok_or(oob)?;
    blob.get(start..end).ok_or(oob)
}

/// Runs the digest kernel over every descriptor of a gram. `digest` is reset
/// first and holds the result afterwards.
#[inline]
pub fn execute_gram(
    blob: &[u8],
    descs: DescIter<'_>,
    digest: &mut Digest,
    limits: GramLimits,
) -> Result<GramOutcome, ExecError> {
    digest.reset();
    let mut effective_bytes = 0u64;
    let mut descriptors = 0u32;
    for d in descs {
        let d = d?;
        limits.check(descriptors, d.len, effective_bytes)?;
        let bytes = resolve(blob, d, descriptors)?;
        digest.update(bytes);
        effective_bytes += u64::from(d.len);
        descriptors += 1;
    }
    Ok(GramOutcome {
        digest: digest.value(),
        effective_bytes,
        descriptors,
    })
}

/// Digest of `descs` over `blob` (sender side: the value it puts in the gram header).
pub fn digest_descriptors(blob: &[u8], descs: &[Descriptor], digest: &mut Digest) -> Result<u64, ExecError> {
    digest.reset();
    for (i, &d) in descs.iter().enumerate() {
        digest.update(resolve(blob, d, i as u32)?);
    }
    Ok(digest.value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_wire::desc::encode_table;
    use pfs_wire::{Encoding, IntegrityAlg};

    #[test]
    fn digest_equals_hash_of_concatenation() {
        let blob: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let descs = [
            Descriptor { offset: 100, len: 50 },
            Descriptor { offset: 10, len: 20 },
        ];
        let mut concat = blob[100..150].to_vec();
        concat.extend_from_slice(&blob[10..30]);
        for enc in [Encoding::Absolute, Encoding::Arithmetic] {
            let table = encode_table(enc, &descs).unwrap();
            let mut d = Digest::new(IntegrityAlg::Xxh3);
            let out = execute_gram(&blob, DescIter::new(&table, enc, 2), &mut d, GramLimits::NONE).unwrap();
            assert_eq!(out.digest, twox_hash::XxHash3_64::oneshot(&concat));
            assert_eq!(out.effective_bytes, 70);
            assert_eq!(out.descriptors, 2);
            assert_eq!(digest_descriptors(&blob, &descs, &mut d).unwrap(), out.digest);
        }
    }

    #[test]
    fn out_of_bounds_is_reported_with_index() {
        let blob = vec![0u8; 1000];
        let descs = [
            Descriptor { offset: 0, len: 10 },
            Descriptor { offset: 995, len: 10 },
        ];
        let table = encode_table(Encoding::Absolute, &descs).unwrap();
        let mut d = Digest::new(IntegrityAlg::Fnv1a);
        let err = execute_gram(
            &blob,
            DescIter::new(&table, Encoding::Absolute, 2),
            &mut d,
            GramLimits::NONE,
        );
        assert_eq!(
            err,
            Err(ExecError::OutOfBounds {
                index: 1,
                offset: 995,
                len: 10,
                blob_len: 1000
            })
        );
        let huge = [Descriptor {
            offset: u64::MAX - 1,
            len: 1,
        }];
        let table = encode_table(Encoding::Absolute, &huge).unwrap();
        assert!(matches!(
            execute_gram(
                &blob,
                DescIter::new(&table, Encoding::Absolute, 1),
                &mut d,
                GramLimits::NONE
            ),
            Err(ExecError::OutOfBounds { index: 0, .. })
        ));
    }
}
