//! Typed errors for every blob operation.
//!
//! One enum for the blob lifecycle ([`BlobError`]) and one small `Copy` error
//! for comparing fingerprints ([`FingerprintMismatch`]), which callers hit on
//! the session path and must be cheap to return.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong creating, opening, inspecting or removing a blob.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// A blob name outside `[A-Za-z0-9._-]{1,64}`.
    #[error("bad blob name {name:?}: use 1 to 64 characters from [A-Za-z0-9._-]")]
    BadName {
        /// The rejected name.
        name: String,
    },

    /// A zero-byte blob was requested; there is nothing to map.
    #[error("blob size must be greater than zero")]
    ZeroSize,

    /// A zero fingerprint region size was requested.
    #[error("fingerprint region size must be greater than zero")]
    ZeroRegionSize,

    /// The blob does not fit in the address space of this process.
    #[error("blob size {size} bytes does not fit in this process's address space")]
    TooLarge {
        /// Requested size in bytes.
        size: u64,
    },

    /// A file or syscall operation on a path failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done, e.g. "create", "map", "statfs".
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Mapping anonymous memory failed.
    #[error("mapping {len} bytes of anonymous memory: {source}")]
    MapAnon {
        /// Mapping length in bytes.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `MADV_POPULATE_WRITE` reported that pages could not be provided
    /// (out of memory, tmpfs full, hugepage pool empty). Reported instead of a
    /// later SIGBUS.
    #[error("prefaulting {len} bytes at offset {offset}: {source}")]
    Prefault {
        /// Offset of the failing range.
        offset: u64,
        /// Length of the failing range.
        len: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Not enough free space in the filesystem that would hold the blob file;
    /// touching the pages later would raise SIGBUS.
    #[error("not enough space in {dir}: blob needs {need} bytes, {avail} available")]
    NoSpace {
        /// Directory that would hold the blob.
        dir: PathBuf,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        avail: u64,
    },

    /// A named blob exists but differs from what was requested. It is left untouched.
    #[error(
        "blob {name:?} already exists with {existing}, but {requested} was requested; \
         it was left untouched (remove it with `pfs blob rm {name}`)"
    )]
    Mismatch {
        /// Blob name.
        name: String,
        /// What the existing blob is.
        existing: BlobShape,
        /// What was requested.
        requested: BlobShape,
    },

    /// A named blob file exists but its metadata does not: a creation was
    /// interrupted or the metadata was deleted.
    #[error(
        "blob {name:?} is incomplete: {path} exists but its metadata is missing \
         (remove it with `pfs blob rm {name}`)"
    )]
    Incomplete {
        /// Blob name.
        name: String,
        /// The blob file found.
        path: PathBuf,
    },

    /// No named blob of that name exists.
    #[error("no blob named {name:?}")]
    NotFound {
        /// Blob name.
        name: String,
    },

    /// Stored metadata is unreadable or inconsistent with the blob file.
    #[error("blob metadata {path} is corrupt: {problem}")]
    CorruptMeta {
        /// The metadata file.
        path: PathBuf,
        /// What is wrong with it.
        problem: MetaProblem,
    },

    /// Metadata could not be encoded or decoded as JSON.
    #[error("blob metadata {path}: {source}")]
    Json {
        /// The metadata file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },

    /// `Fill::File` names a file larger than the blob.
    #[error("fill file {path} is {file_len} bytes, larger than the {blob_len}-byte blob")]
    FileTooLarge {
        /// The fill file.
        path: PathBuf,
        /// Its length.
        file_len: u64,
        /// The blob length.
        blob_len: u64,
    },
}

impl BlobError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        BlobError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Size and fill of a blob, as stored or as requested (see [`BlobError::Mismatch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobShape {
    /// Size in bytes.
    pub size: u64,
    /// Fill label: `seed:0x5eed`, `file:/path` or `none`.
    pub fill: String,
}

impl std::fmt::Display for BlobShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "size {} bytes, fill {}", self.size, self.fill)
    }
}

/// What is wrong with a named blob's stored metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetaProblem {
    /// The metadata says the fingerprint region size is zero.
    #[error("region size 0")]
    ZeroRegionSize,
    /// The fingerprint file holds the wrong number of region hashes.
    #[error("{got} bytes of region hashes, expected {expected} ({regions} regions)")]
    RegionHashesLen {
        /// Bytes in the fingerprint file.
        got: usize,
        /// Bytes expected (32 per region).
        expected: usize,
        /// Regions the size and region size call for.
        regions: usize,
    },
    /// The stored region hashes do not give the stored root.
    #[error("region hashes give root {computed} but the metadata says {stored}")]
    RootMismatch {
        /// Root of the stored region hashes, short hex.
        computed: String,
        /// Root in the metadata, short hex.
        stored: String,
    },
    /// The blob file's length differs from the metadata's size.
    #[error("blob file is {file_len} bytes, metadata says {meta_len}")]
    FileSize {
        /// Length of the blob file.
        file_len: u64,
        /// Size in the metadata.
        meta_len: u64,
    },
}

/// Two fingerprints cannot be compared region by region because they describe
/// blobs of different shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintMismatch {
    /// The blobs have different lengths.
    #[error("blob lengths differ: {ours} vs {theirs} bytes")]
    Len {
        /// Our blob length.
        ours: u64,
        /// The other blob length.
        theirs: u64,
    },
    /// The fingerprints use different region sizes.
    #[error("fingerprint region sizes differ: {ours} vs {theirs} bytes")]
    RegionSize {
        /// Our region size.
        ours: u32,
        /// The other region size.
        theirs: u32,
    },
}
