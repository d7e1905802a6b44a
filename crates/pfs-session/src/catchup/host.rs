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
