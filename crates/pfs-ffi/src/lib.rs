//! The C interface of [`packetfs`]: what a C (or any FFI) program links
//! against, as `libpfs_ffi.so`, with the header `include/packetfs.h` that
//! cbindgen generates from this crate (`tests/header.rs` keeps the committed
//! header equal to cbindgen's output).
//!
//! Conventions, the same for every function:
//! - Handles are opaque pointers (`PfsBlob *`); a handle is freed once, by
//!   its `*_close` function, and never used after.
//! - Functions that can fail return an [`PfsStatus`] (`PFS_STATUS_OK` = 0).
//!   On failure, [`pfs_last_error`] gives the message for this thread.
//! - Nothing panics across the boundary: a panic inside is caught and
//!   reported as `PFS_STATUS_INTERNAL`.
//! - Pointers returned into a blob stay valid until the blob is closed.
//!
//! Modules: [`error`] owns the status codes and the per-thread last error;
//! [`blob`] the blob functions; [`stream`] publications, listeners and
//! subscriptions (streaming mode).

pub mod blob;
pub mod error;
pub mod stream;

pub use blob::{
    pfs_blob_close, pfs_blob_data, pfs_blob_data_mut, pfs_blob_fingerprint, pfs_blob_len, pfs_blob_open,
    pfs_blob_options_default, PfsBlob, PfsBlobOptions,
};
pub use error::{pfs_last_error, pfs_version, PfsStatus};
pub use stream::{
    pfs_listener_bind, pfs_listener_close, pfs_listener_endpoint, pfs_publication_applied,
    pfs_publication_close, pfs_publication_connect, pfs_publication_offer, pfs_publication_offer_blocking,
    pfs_publication_options_default, pfs_publication_wait_applied, pfs_subscription_accept,
    pfs_subscription_close, pfs_subscription_listen_accept, pfs_subscription_options_default,
    pfs_subscription_poll, PfsEntry, PfsGramCallback, PfsListener, PfsPublication, PfsPublicationOptions,
    PfsPublicationReport, PfsSubscription, PfsSubscriptionOptions, PfsSubscriptionReport, PFS_ENTRY_MESSAGE,
    PFS_ENTRY_REFERENCE, PFS_ENTRY_WRITE,
};
