//! What the catch-up replica core asks of its host besides bytes and time:
//! its blob's bytes and region hashes, writes into it, and the region
//! hashes kept true while it is rewritten ([`ReplicaHost`]). [`BlobReplica`]
//! is the host over a mapped [`pfs_blob::Blob`]; tests use their own.

use std::sync::Arc;

use pfs_blob::{Blob, BlobWriter, Fingerprint};

use crate::error::LocalError;

/// The replica's blob, as the core uses it.
pub trait ReplicaHost {
    /// The blob's bytes.
    fn data(&self) -> &[u8];
    /// Fingerprint region size.
    fn region_size(&self) -> u32;
    /// Hash of region `i` (the fingerprint's BLAKE3), as last recorded.
    fn region_hash(&self, i: usize) -> [u8; 32];
    /// Regions `regions` are about to be rewritten: record them as unknown
    /// (a process killed midway must not keep hashes that claim old bytes).
    fn invalidate(&mut self, regions: &[usize]) -> Result<(), LocalError>;
    /// Writes `bytes` at `offset` (inside the blob: the core checked).
    fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), LocalError>;
    /// Hashes `regions` again from the bytes now there; returns the root.
    fn rehash(&mut self, regions: &[usize]) -> Result<[u8; 32], LocalError>;
}

/// The host over a mapped blob: writes go through its [`BlobWriter`],
/// region hashes through [`Blob::invalidate_regions`] and
/// [`Blob::rehash_regions`] (a named blob's metadata follows).
#[derive(Debug)]
pub struct BlobReplica<'a> {
    blob: &'a Blob,
    writer: BlobWriter<'a>,
    fp: Arc<Fingerprint>,
}

impl<'a> BlobReplica<'a> {
    /// The host of `blob`.
    pub fn new(blob: &'a Blob) -> Self {
        Self {
            blob,
            writer: blob.writer(),
            fp: blob.fingerprint(),
        }
    }
}

impl ReplicaHost for BlobReplica<'_> {
    fn data(&self) -> &[u8] {
        self.blob.as_slice()
    }

    fn region_size(&self) -> u32 {
        self.fp.region_size
    }

    fn region_hash(&self, i: usize) -> [u8; 32] {
        self.fp.regions.get(i).copied().unwrap_or([0; 32])
    }

    fn invalidate(&mut self, regions: &[usize]) -> Result<(), LocalError> {
        self.fp = self.blob.invalidate_regions(regions)?;
        Ok(())
    }

    fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), LocalError> {
        Ok(self.writer.write(offset, bytes)?)
    }

    fn rehash(&mut self, regions: &[usize]) -> Result<[u8; 32], LocalError> {
        self.fp = self.blob.rehash_regions(regions)?;
        Ok(self.fp.root)
    }
}

/// The host over a plain mutable slice and a fingerprint kept in memory
/// only (a stream subscriber's blob, which it holds as `&mut [u8]`):
/// invalidated and rehashed regions change [`SliceReplica::fingerprint`],
/// which the caller keeps for its next session; no stored metadata
/// follows.
#[derive(Debug)]
pub struct SliceReplica<'a> {
    data: &'a mut [u8],
    fp: Fingerprint,
}

impl<'a> SliceReplica<'a> {
    /// The host of `data`, whose region hashes are `fp`'s.
    pub fn new(data: &'a mut [u8], fp: Fingerprint) -> Self {
        Self { data, fp }
    }

    /// The fingerprint as the catch-up left it.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fp
    }

    fn update(&mut self, regions: &[usize], hash: impl Fn(&[u8]) -> [u8; 32]) -> [u8; 32] {
        let rs = self.fp.region_size as usize;
        let mut hashes = std::mem::take(&mut self.fp.regions);
        for &i in regions {
            let start = i.saturating_mul(rs).min(self.data.len());
            let end = start.saturating_add(rs).min(self.data.len());
            if let Some(h) = hashes.get_mut(i) {
                *h = hash(&self.data[start..end]);
            }
        }
        self.fp = Fingerprint::from_regions(self.fp.region_size, self.fp.blob_len, hashes);
        self.fp.root
    }
}

impl ReplicaHost for SliceReplica<'_> {
    fn data(&self) -> &[u8] {
        self.data
    }

    fn region_size(&self) -> u32 {
        self.fp.region_size
    }

    fn region_hash(&self, i: usize) -> [u8; 32] {
        self.fp.regions.get(i).copied().unwrap_or([0; 32])
    }

    fn invalidate(&mut self, regions: &[usize]) -> Result<(), LocalError> {
        // All zeros: no content hashes to that (wire §16.6).
        self.update(regions, |_| [0; 32]);
        Ok(())
    }

    fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), LocalError> {
        // The core checked the range against this blob.
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.data.len());
        let end = start.saturating_add(bytes.len()).min(self.data.len());
        self.data[start..end].copy_from_slice(&bytes[..end - start]);
        Ok(())
    }

    fn rehash(&mut self, regions: &[usize]) -> Result<[u8; 32], LocalError> {
        Ok(self.update(regions, |b| *blake3::hash(b).as_bytes()))
    }
}
