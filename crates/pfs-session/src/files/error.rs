//! Violations of the files protocol by a peer: one variant per kind, each
//! with the facts the ERROR frame and the user see, and its ERROR code.

use pfs_files::PathError;
use pfs_wire::{ErrorCode, FrameType};

use super::MAX_CHUNK_LEN;

/// What a files-protocol peer did wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilesViolation {
    /// A frame the session's state does not allow.
    #[error("expected {expected}, got {}{}", got.name(), if *got == FrameType::Hello {
        " (this receiver serves file transfers: `pfs send PATH… --to`; blob sessions need a `pfs serve` without --store)"
    } else { "" })]
    Unexpected {
        /// What the state allows.
        expected: &'static str,
        /// What arrived.
        got: FrameType,
    },
    /// A frame type that may not appear where it did.
    #[error("{} is not allowed {place}", frame.name())]
    NotAllowed {
        /// The frame.
        frame: FrameType,
        /// Where it appeared ("inside a BATCH", "while files stream" …).
        place: &'static str,
    },
    /// A frame longer than this side accepts for its type.
    #[error("{} frame of {len} bytes exceeds this receiver's limit of {limit}", frame.name())]
    FrameTooLarge {
        /// The frame.
        frame: FrameType,
        /// Its body length.
        len: u32,
        /// The limit.
        limit: u32,
    },
    /// An authentication method this side does not support.
    #[error("authentication method {method} is not supported by this receiver (it accepts: none)")]
    Auth {
        /// The method asked for.
        method: u8,
    },
    /// FILES_HELLO named a remote directory that is not a safe relative path.
    #[error("remote directory {dir:?} refused: {error}")]
    RemoteDir {
        /// The directory, lossily shown.
        dir: String,
        /// Why.
        error: PathError,
    },
    /// A PLAN in a session the sender opened as a dry run.
    #[error("PLAN in a dry-run session")]
    PlanInDryRun,
    /// A BATCH that would decompress to more than the limit.
    #[error("BATCH of {raw_len} bytes exceeds this receiver's limit of {limit}")]
    BatchTooLarge {
        /// Its stated raw length.
        raw_len: u32,
        /// The limit.
        limit: u32,
    },
    /// A BATCH whose zstd does not decompress to its stated length.
    #[error("BATCH does not decompress to its stated length")]
    BatchLength,
    /// A PROBE after the one flagged LAST.
    #[error("PROBE after the last one")]
    ProbeAfterLast,
    /// A PROBE that does not continue where the previous one ended.
    #[error("PROBE from entry {first} (expected {expected})")]
    ProbeOrder {
        /// Its first entry number.
        first: u64,
        /// The next entry number expected.
        expected: u64,
    },
    /// More PROBE entries than one session may ask about.
    #[error("more than {max} PROBE entries in one session")]
    ProbeLimit {
        /// The limit.
        max: usize,
    },
    /// A FILE out of order.
    #[error("FILE {got} out of order (expected {expected})")]
    FileOrder {
        /// Its number.
        got: u64,
        /// The number expected.
        expected: u64,
    },
    /// CHUNKS while no regular file is open.
    #[error("CHUNKS without a FILE")]
    ChunksWithoutFile,
    /// CHUNKS for another file than the open one.
    #[error("CHUNKS for file {got} while file {open} is open")]
    ChunksForOtherFile {
        /// The file the CHUNKS name.
        got: u64,
        /// The open file.
        open: u64,
    },
    /// FILE_DROP naming another file than the one whose CHUNKS are expected.
    #[error("FILE_DROP of file {got} while {}", match open {
        Some(no) => format!("file {no} is streaming"),
        None => "no file is streaming".to_string(),
    })]
    DropNotStreaming {
        /// The file it names.
        got: u64,
        /// The file streaming, if any.
        open: Option<u64>,
    },
    /// FILE_DONE naming another file than a streamed one whose CHUNKS are
    /// expected.
    #[error("FILE_DONE of file {got} while {}", match open {
        Some(no) => format!("file {no} is open and not STREAMED, or another file"),
        None => "no file is streaming".to_string(),
    })]
    DoneNotStreaming {
        /// The file it names.
        got: u64,
        /// The file open, if any.
        open: Option<u64>,
    },
    /// FILE_DONE whose count disagrees with what arrived, or that came
    /// before the chunks reached the FILE's size.
    #[error("FILE_DONE of file {file}: {said} chunks said, {got} received; {seen} of {size} bytes")]
    DoneMismatch {
        /// The file.
        file: u64,
        /// FILE_DONE's `chunk_count`.
        said: u32,
        /// Chunks received.
        got: u32,
        /// Bytes received.
        seen: u64,
        /// The FILE's size.
        size: u64,
    },
    /// A STREAMED file ended (another FILE or FILES_END came) without FILE_DONE.
    #[error("file {file} was STREAMED and ended without FILE_DONE")]
    DoneMissing {
        /// The file.
        file: u64,
    },
    /// A chunk of length 0 or over [`MAX_CHUNK_LEN`].
    #[error("chunk of {len} bytes (1 … {MAX_CHUNK_LEN} accepted)")]
    ChunkLength {
        /// Its length.
        len: u32,
    },
    /// More chunks or bytes than the FILE announced.
    #[error("file {file}: more chunks or bytes than its FILE announced")]
    FileOverflow {
        /// The file.
        file: u64,
    },
    /// A FILE announcing more chunks than bytes (every chunk has one byte
    /// at least): refused before anything is sized by it.
    #[error("file {file} announces {chunks} chunks for {size} bytes (a chunk has at least one byte)")]
    ChunkCount {
        /// The FILE's number.
        file: u64,
        /// Its `chunk_count`.
        chunks: u32,
        /// Its `size`.
        size: u64,
    },
    /// A file ended before all the chunks or bytes its FILE announced.
    #[error("file {file} ended after {seen} of {size} bytes ({missing} chunks missing)")]
    FileShort {
        /// The file.
        file: u64,
        /// Bytes received.
        seen: u64,
        /// Bytes announced.
        size: u64,
        /// Chunks not received.
        missing: u32,
    },
    /// A literal entry whose byte count is not its stated length.
    #[error("literal length mismatch")]
    LiteralLength,
    /// A zstd chunk that does not decompress to its stated length.
    #[error("zstd chunk does not decompress to its stated length")]
    ChunkZstd,
    /// A descriptor outside the receiver's store.
    #[error("descriptor {offset}+{len} lies outside the store")]
    OutsideStore {
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u32,
    },
    /// A REPAIR for a chunk that was not NAKed.
    #[error("REPAIR of a chunk not NAKed")]
    RepairNotNaked,
    /// A REPAIR entry whose zstd does not decompress to its length.
    #[error("bad zstd in REPAIR")]
    RepairZstd,
    /// A REPAIR entry without bytes (a descriptor, or a short literal).
    #[error("REPAIR entries carry bytes")]
    RepairWithoutBytes,
    /// A FILE flagged `LISTED` outside a dry run, or one without it in a
    /// dry run's listing.
    #[error("FILE {file}: LISTED is for a dry run's listing only (dry run: {dry_run})")]
    Listing {
        /// The FILE's number.
        file: u64,
        /// Whether the session is a dry run.
        dry_run: bool,
    },
    /// A DELETE rule that is not a valid exclude pattern.
    #[error("DELETE rule {rule:?} is not a valid pattern")]
    DeleteRule {
        /// The rule.
        rule: String,
    },
    /// (Sender side) the receiver's index breaks the rules.
    #[error("receiver sent {what}")]
    BadIndex {
        /// What was wrong with it.
        what: IndexFault,
    },
    /// (Sender side) PROBE_REPLY frames that do not answer the PROBE.
    #[error("receiver answered PROBE entries {first}..+{count}, expected from {expected} of {asked}")]
    ProbeReplyOrder {
        /// First entry answered.
        first: u64,
        /// Entries answered.
        count: u32,
        /// Next entry expected.
        expected: u64,
        /// Entries asked about.
        asked: u64,
    },
    /// (Sender side) fewer answers than PROBE entries.
    #[error("receiver answered {answered} of {asked} PROBE entries")]
    ProbeReplyShort {
        /// Entries answered.
        answered: u64,
        /// Entries asked about.
        asked: u64,
    },
    /// (Sender side) a reply of a type or size not allowed where it came.
    #[error("receiver sent a {} frame of {len} bytes during {during}", frame.name())]
    BadReply {
        /// The frame.
        frame: FrameType,
        /// Its body length.
        len: u32,
        /// What was awaited.
        during: &'static str,
    },
    /// (Sender side) a reply other than the one awaited.
    #[error("expected {expected} from the receiver, got {}", got.name())]
    UnexpectedReply {
        /// What was awaited.
        expected: &'static str,
        /// What arrived.
        got: FrameType,
    },
}

/// What was wrong with the index a receiver sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexFault {
    /// A frame or batch over the sender's limit.
    #[error("an index frame of {len} bytes")]
    TooLarge {
        /// Its length.
        len: u32,
    },
    /// A batch that does not decompress to its stated length.
    #[error("a corrupt index batch")]
    Corrupt,
    /// A batch with frames other than INDEX, or after the last.
    #[error("a malformed index batch")]
    Malformed,
}

impl FilesViolation {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Unexpected { .. }
            | Self::NotAllowed { .. }
            | Self::RemoteDir { .. }
            | Self::PlanInDryRun
            | Self::ProbeAfterLast
            | Self::ProbeOrder { .. }
            | Self::FileOrder { .. }
            | Self::ChunksWithoutFile
            | Self::ChunksForOtherFile { .. }
            | Self::DropNotStreaming { .. }
            | Self::DoneNotStreaming { .. }
            | Self::DoneMismatch { .. }
            | Self::DoneMissing { .. }
            | Self::FileOverflow { .. }
            | Self::ChunkCount { .. }
            | Self::FileShort { .. }
            | Self::RepairNotNaked
            | Self::Listing { .. }
            | Self::DeleteRule { .. }
            | Self::ProbeReplyOrder { .. }
            | Self::ProbeReplyShort { .. }
            | Self::BadReply { .. }
            | Self::UnexpectedReply { .. } => ErrorCode::Protocol,
            Self::FrameTooLarge { .. }
            | Self::BatchTooLarge { .. }
            | Self::ProbeLimit { .. }
            | Self::ChunkLength { .. } => ErrorCode::Limit,
            Self::Auth { .. } => ErrorCode::Auth,
            Self::BatchLength
            | Self::LiteralLength
            | Self::ChunkZstd
            | Self::RepairZstd
            | Self::RepairWithoutBytes
            | Self::BadIndex { .. } => ErrorCode::BadFrame,
            Self::OutsideStore { .. } => ErrorCode::OutOfBounds,
        }
    }
}

impl From<FilesViolation> for crate::SessionError {
    fn from(v: FilesViolation) -> Self {
        crate::error::Violation::Files(v).into()
    }
}
