//! PacketFS blob: the large memory region both peers hold identically.
//!
//! A blob is mapped once, prefaulted and filled (from a shared seed, a file,
//! or left as is) outside the timed path; descriptors `(offset, len)` then
//! index into it. This crate owns:
//! - backing selection and reporting ([`BackingReport`]): hugetlbfs, transparent
//!   huge pages or base pages, reporting what was *obtained*;
//! - the deterministic generator both peers fill from ([`fill_seeded`]);
//! - blob identity ([`Fingerprint`]): per-region BLAKE3 and a root, updated
//!   when a catch-up rewrites regions ([`Blob::rehash_regions`]);
//! - the finer, per-session keyed block hashes of catch-up ([`BlockKey`]);
//! - named blobs shared between processes and their metadata
//!   ([`info`], [`verify`], [`list`], [`remove`]);
//! - repairs: rewriting ranges while sessions read the blob ([`BlobWriter`]).
//!
//! ```no_run
//! use pfs_blob::{Blob, BlobConfig};
//! let opts = BlobConfig { size: 64 << 20, ..BlobConfig::default() };
//! let (blob, setup) = Blob::open_or_create(&opts)?;
//! println!("{} {} fill {:.3}s", blob.backing().kind, blob.fingerprint().short(), setup.fill_s);
//! # Ok::<(), pfs_blob::BlobError>(())
//! ```

mod backing;
mod blob;
mod blocks;
mod error;
mod fill;
mod fingerprint;
mod map;
mod named;

pub use backing::{hugetlbfs_page_size, BackingKind, BackingReport};
pub use blob::{Blob, BlobConfig, Fill, SetupReport, CAUGHT_UP_FILL};
pub use blocks::{block_size_ok, BlockKey, BLOCK_HASH_LEN, DEFAULT_BLOCK_SIZE, MIN_BLOCK_SIZE};
pub use error::{BlobError, BlobShape, FingerprintMismatch, MetaProblem};
pub use fill::{fill_seeded, fill_seeded_word};
pub use fingerprint::Fingerprint;
pub use map::{BlobWriteError, BlobWriter};
pub use named::{
    info, info_in, list, list_in, remove, remove_in, validate_name, verify, verify_in, BlobMeta,
    VerifyReport, ENV_BLOB_DIR, ENV_META_DIR,
};

/// Default fingerprint region size: 1 MiB.
pub const DEFAULT_REGION_SIZE: u32 = 1 << 20;

#[cfg(test)]
mod tests {
    /// Peers share one blob across worker threads.
    #[test]
    fn blob_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Blob>();
    }
}
