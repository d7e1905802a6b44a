//! Typed errors of every store operation.
//!
//! One enum, [`StoreError`], because the store's operations share their
//! failure modes (I/O on the same three files, the same capacity). Messages
//! say what happened *and* what the user can do about it.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong opening, filling, reading or repairing a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A file or syscall operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done, e.g. "fdatasync", "open lock file", "grow blob file".
        op: &'static str,
        /// The file or directory it was done to.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A reservation does not fit under the configured capacity. Nothing was
    /// written and the store is unchanged.
    #[error(
        "store full: {need} bytes needed but only {free} of the {capacity}-byte capacity are free; \
         reopen the store with a larger capacity or point the server at another store directory"
    )]
    Full {
        /// Bytes requested.
        need: u64,
        /// Bytes still free under the capacity.
        free: u64,
        /// The capacity limit.
        capacity: u64,
    },

    /// The filesystem holding the blob file cannot provide the space (the
    /// capacity limit was not reached). Nothing was indexed.
    #[error(
        "no space for {need} more bytes in the blob file {path}: {source}; free space on that \
         filesystem (on hugetlbfs: raise vm.nr_hugepages) or lower the store capacity"
    )]
    NoSpace {
        /// The blob file.
        path: PathBuf,
        /// Bytes the file had to grow by.
        need: u64,
        /// The OS error (ENOSPC or EDQUOT).
        #[source]
        source: io::Error,
    },

    /// Another process (or another `Store` in this process) holds the store.
    #[error(
        "store {dir} is in use by another pfs process (lock {dir}/lock is held); stop that \
         process or use another store directory"
    )]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },

    /// A file in the store directory is not a store file this version can
    /// read. It was left untouched.
    #[error("{path} is not a usable pfs store file: {reason}; it was left untouched")]
    BadFormat {
        /// The offending file.
        path: PathBuf,
        /// What is wrong (its Display also says what to do).
        reason: FormatProblem,
    },

    /// The index says the blob lives on a hugetlbfs mount that is not there
    /// any more (unmounted, or the machine rebooted without remounting it).
    #[error(
        "the store keeps its blob on hugetlbfs at {path}, but {dir} is not a hugetlbfs mount; \
         mount it again (mount -t hugetlbfs none {dir}) or remove the store directory to \
         start an empty store"
    )]
    HugeTlbFsMissing {
        /// The recorded blob path.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },

    /// Options or arguments that cannot work (zero capacity, a repair
    /// source that overlaps its destination, an over-long path).
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong.
        reason: InputProblem,
    },

    /// Data handed in does not hash to the hash it was presented with.
    #[error(
        "chunk data hashes to {actual_hex} but was presented as {expected_hex}; the sender's \
         data or hash is wrong, nothing was written"
    )]
    HashMismatch {
        /// The hash the caller claimed, lowercase hex.
        expected_hex: String,
        /// BLAKE3 of the data, lowercase hex.
        actual_hex: String,
    },

    /// A range lies outside the part of the blob that holds finished data
    /// (beyond the blob, or inside a reservation still being written).
    #[error(
        "blob range {offset}+{len} is outside the store's readable data ({readable} bytes); \
         the descriptor is wrong or names a chunk that is not committed yet"
    )]
    OutOfRange {
        /// Range start.
        offset: u64,
        /// Range length.
        len: u64,
        /// Bytes of the blob that are readable right now, from offset 0
        /// (ranges above it may still be readable between live reservations).
        readable: u64,
    },

    /// An append does not fit in what is left of its reservation.
    #[error(
        "chunk of {len} bytes does not fit in the {left} bytes left of its reservation; \
         reserve the total size of the chunks up front"
    )]
    ReservationExhausted {
        /// Chunk length.
        len: u64,
        /// Bytes left in the reservation.
        left: u64,
    },

    /// Chunks are at most `u32::MAX` bytes (the index stores a 32-bit length).
    #[error("chunk of {len} bytes is larger than the 4 GiB - 1 chunk limit; split it")]
    ChunkTooLarge {
        /// Chunk length.
        len: u64,
    },
}

/// Why a file in the store directory is not a store file this version can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatProblem {
    /// The index does not start with the index magic.
    #[error(
        "it does not start with the pfs store index magic \"PFSINDEX\"; give the server an \
         empty directory or one created by pfs as its store"
    )]
    NotAnIndex,
    /// The index was written by another format version.
    #[error(
        "index format version {found}, this pfs reads version {supported}; open the store with \
         the pfs release that created it"
    )]
    Version {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The index is shorter than its header.
    #[error(
        "it is {len} bytes, shorter than the {header_len}-byte index header; move the store \
         directory away to start an empty store"
    )]
    Short {
        /// File length.
        len: u64,
        /// Header length.
        header_len: u64,
    },
    /// The index header is damaged.
    #[error("{what}: the index header is damaged; move the store directory away to start an empty store")]
    DamagedHeader {
        /// Which check failed: "header checksum mismatch", "unexpected header
        /// or record length", "unknown blob location".
        what: &'static str,
    },
    /// A non-empty blob file exists but the index does not.
    #[error(
        "a non-empty blob file without {index}: not a store pfs created, or its index was \
         deleted; move the file away to start an empty store here"
    )]
    BlobWithoutIndex {
        /// The missing index file.
        index: PathBuf,
    },
}

/// Why options or arguments cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputProblem {
    /// A store of capacity zero was asked for.
    #[error("store capacity must be greater than zero")]
    ZeroCapacity,
    /// The hugetlbfs blob path does not fit in the index header.
    #[error("hugetlbfs blob path {path} is longer than {max} bytes; use a shorter mount path")]
    HugeTlbFsPathTooLong {
        /// The blob path.
        path: PathBuf,
        /// Longest path the header holds, bytes.
        max: usize,
    },
    /// Repair data borrowed from the very bytes it would overwrite.
    #[error("repair data is a slice of the bytes it would overwrite; pass a copy")]
    RepairOverlapsTarget,
}

impl StoreError {
    /// An [`StoreError::Io`]: `op` failed on `path`.
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// A [`StoreError::HashMismatch`] for the two hashes.
    pub(crate) fn mismatch(expected: &[u8; 32], actual: &[u8; 32]) -> Self {
        StoreError::HashMismatch {
            expected_hex: hex(expected),
            actual_hex: hex(actual),
        }
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
