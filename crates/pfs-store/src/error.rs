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
    #[error("{context}: {source}")]
    Io {
        /// What was being done and to which path, e.g. "fdatasync /srv/pfs/index".
        context: String,
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
        /// What is wrong and what to do.
        reason: String,
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
        reason: String,
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

impl StoreError {
    /// An [`StoreError::Io`] with `what` and the path in its context.
    pub(crate) fn io(what: &str, path: &std::path::Path, source: io::Error) -> Self {
        StoreError::Io {
            context: format!("{what} {}", path.display()),
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
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
