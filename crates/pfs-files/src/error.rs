//! Typed errors for the files layer.
//!
//! [`PathError`] is a small `Copy` error for everything that is wrong with a
//! *name* (a relative path from a peer, a symlink target): the receiver hits
//! it on every entry and must be able to return it cheaply. [`FilesError`]
//! covers the operations that touch the filesystem (scan, chunk, place files,
//! caches) and carries the path and OS error. [`ChunkParamsError`] says which
//! chunk-size bound was violated. [`CacheWarning`] is not an error: a cache
//! that cannot be read is replaced by an empty one and the warning says why.

use std::io;
use std::path::PathBuf;

/// Why a relative path or a symlink target was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path has no bytes.
    #[error("empty path")]
    Empty,
    /// The path starts with `/`; peers may only send paths relative to the destination.
    #[error("absolute path: only paths relative to the destination are accepted")]
    Absolute,
    /// A `.` or `..` component; peers may not navigate.
    #[error("path contains a `.` or `..` component")]
    DotComponent,
    /// Two consecutive `/` or a trailing `/`.
    #[error("path contains an empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    /// A NUL byte; no Unix filesystem accepts it.
    #[error("path contains a NUL byte")]
    Nul,
    /// One component is longer than 255 bytes (NAME_MAX).
    #[error("a path component is longer than 255 bytes")]
    ComponentTooLong,
    /// The whole path is longer than 4095 bytes (PATH_MAX - 1).
    #[error("path is longer than 4095 bytes")]
    TooLong,
    /// A component of the destination path is a symlink, or something that is
    /// not a directory stands where a directory is needed. Remove it from the
    /// destination if it should be replaced.
    #[error("a symlink or non-directory is in the way inside the destination; remove it to replace it")]
    NotADirectory,
    /// The path has a `.pfs` component: that name holds a receiver's own
    /// state ([`crate::dest::STATE_DIR`]), at the root of a destination or
    /// of another key's destination beneath it.
    #[error("`.pfs` holds a receiver's state (anywhere in a destination); a sender may not write there")]
    Reserved,
    /// A hard link's target is not a regular file (or is the link itself).
    #[error("not a regular file to make a hard link to")]
    NotRegularFile,
}

/// A chunk-size bound outside what the chunker supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "bad chunk sizes min={min} avg={avg} max={max}: need 64 <= min <= 1 MiB, \
     256 <= avg <= 4 MiB (a power of two), 1 KiB <= max <= 16 MiB and min <= avg <= max"
)]
pub struct ChunkParamsError {
    /// Requested minimum chunk size.
    pub min: u32,
    /// Requested average chunk size.
    pub avg: u32,
    /// Requested maximum chunk size.
    pub max: u32,
}

/// Everything that can go wrong scanning, chunking, placing files or saving caches.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// A filesystem operation on a path failed.
    #[error("{op} {}: {source}", crate::escape_path(path))]
    Io {
        /// What was being done, e.g. "open", "read", "rename".
        op: &'static str,
        /// The path involved (for destination operations: relative to the destination root).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A path or symlink target was refused.
    #[error("{path}: {source}")]
    Path {
        /// The offending path, escaped ([`crate::escape()`]).
        path: String,
        /// Why it was refused.
        #[source]
        source: PathError,
    },

    /// A POSIX ACL attribute from a peer that is not one Linux reads; it
    /// was not set.
    #[error("{path}: {source}")]
    Acl {
        /// The entry, escaped ([`crate::escape()`]).
        path: String,
        /// What is wrong with it.
        #[source]
        source: crate::xattr::acl::AclError,
    },

    /// Bad chunk parameters.
    #[error(transparent)]
    Params(#[from] ChunkParamsError),

    /// The file changed size or mtime while it was being read; its recipe would
    /// not describe one consistent version. Retry, or exclude files that are
    /// being written to.
    #[error(
        "{} changed while it was being read; retry, or exclude files that are being written",
        crate::escape_path(path)
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },

    /// Streamed chunking stopped because its consumer went away (the file
    /// was given up on).
    #[error("{}: chunking stopped, nobody wanted the rest", crate::escape_path(path))]
    Stopped {
        /// The file.
        path: PathBuf,
    },

    /// A root given to the scanner has no usable name (such as `/`).
    #[error(
        "{}: cannot send a root without a name; name a directory below it",
        crate::escape_path(path)
    )]
    UnnamedRoot {
        /// The root as given.
        path: PathBuf,
    },

    /// Two roots have the same basename, or two roots given as their
    /// contents (a trailing slash) hold the same name: they would land on
    /// the same destination path.
    #[error("two sources would both land at \"{name}\" and overwrite each other at the destination; send them separately")]
    DuplicateRoot {
        /// The shared basename, escaped ([`crate::escape()`]).
        name: String,
    },

    /// An exclude pattern is empty (`""` or `/`).
    #[error("bad exclude pattern {pattern:?}: empty pattern")]
    EmptyExclude {
        /// The pattern as given.
        pattern: String,
    },

    /// An exclude pattern is not a valid glob.
    #[error("bad exclude pattern {pattern:?}: {}", source.kind())]
    BadExclude {
        /// The pattern as given (all patterns, space-separated, if the set
        /// as a whole failed to build).
        pattern: String,
        /// What the glob parser said.
        #[source]
        source: globset::Error,
    },

    /// A non-regular file was handed to the chunker.
    #[error("{} is not a regular file", crate::escape_path(path))]
    NotAFile {
        /// The path.
        path: PathBuf,
    },

    /// The rayon pool for parallel chunking could not be built.
    #[error("starting {threads} chunking threads: {source}")]
    ThreadPool {
        /// Requested number of threads.
        threads: usize,
        /// What rayon said.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },

    /// No cache directory could be determined.
    #[error("neither XDG_CACHE_HOME nor HOME is set; pass a cache directory explicitly")]
    NoCacheDir,
}

impl FilesError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FilesError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// Why a cache file was ignored. The cache starts empty instead; show the
/// warning and carry on (the cache only saves work).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheWarning {
    /// The file could not be read.
    #[error("ignoring cache {}: {source}", crate::escape_path(path))]
    Unreadable {
        /// The cache file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file is not a pfs cache of this kind.
    #[error("ignoring cache {}: not a pfs {kind} cache", crate::escape_path(path))]
    Foreign {
        /// The cache file.
        path: PathBuf,
        /// "recipe" or "index".
        kind: &'static str,
    },
    /// A pfs cache written by another format version.
    #[error(
        "ignoring cache {}: format version {found}, this pfs reads {expected}",
        crate::escape_path(path)
    )]
    Version {
        /// The cache file.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// Truncated, checksum mismatch, or inconsistent content.
    #[error(
        "ignoring cache {}: corrupt ({detail}); it will be rebuilt",
        crate::escape_path(path)
    )]
    Corrupt {
        /// The cache file.
        path: PathBuf,
        /// What was wrong.
        detail: &'static str,
    },
}
