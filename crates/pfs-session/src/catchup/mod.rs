//! Blob catch-up (docs/wire.md §16): a replica whose blob differs from the
//! source's is brought to the source's bytes, moving only the blocks that
//! differ, before grams (or a stream) flow.
//!
//! Two levels of comparison: the fingerprint's region hashes, which both
//! sides already hold (the source sends its own, the replica compares them
//! with its own at no hashing cost), then, inside the regions that differ
//! only, fixed blocks hashed with a per-session key
//! ([`pfs_blob::BlockKey`]). The source answers each run of the replica's
//! block hashes with the blocks whose hashes differ; at the end the replica
//! hashes the regions it rewrote again and both sides compare roots.
//!
//! - [`source`] and [`replica`] are the sans-I/O cores;
//! - [`host`] holds the replica's host trait, [`ReplicaHost`] (its blob:
//!   bytes, region hashes, writes), and [`BlobReplica`], the host over a
//!   [`pfs_blob::Blob`];
//! - [`driver`] runs a core over a blocking [`pfs_transport::Transport`]:
//!   [`catch_up_source`] and [`catch_up_replica`], which a gram session
//!   calls after HELLO_ACK and a streaming session may call after its own
//!   handshake.

pub mod driver;
pub mod host;
pub mod replica;
pub mod source;

use std::time::Duration;

use pfs_wire::ErrorCode;

pub use driver::{catch_up_replica, catch_up_source};
pub use host::{BlobReplica, ReplicaHost, SliceReplica};
pub use replica::CatchUpReplica;
pub use source::CatchUpSource;

/// Most bytes of CATCHUP_HASHES frames (headers included) a replica keeps
/// written and unanswered; one frame is always allowed when none is.
pub const HASHES_WINDOW: usize = 64 * 1024;
/// Largest CATCHUP_BLOCKS body a replica accepts by default.
pub const DEFAULT_MAX_BLOCKS_BODY: u32 = 1 << 20;

/// Catch-up settings of either side.
#[derive(Debug, Clone, Copy)]
pub struct CatchUpConfig {
    /// Replica: bytes per block it asks for ([`pfs_blob::DEFAULT_BLOCK_SIZE`]).
    pub block_size: u32,
    /// Replica: largest CATCHUP_BLOCKS body it accepts (also capped by its
    /// receive buffer).
    pub max_blocks_body: u32,
    /// Longest wait for the peer's next frame.
    pub idle_timeout: Duration,
    /// Progress event interval (`None`: never).
    pub log_interval: Option<Duration>,
    /// Replica: longest a frame it writes may take (a source that never
    /// reads cannot hold it).
    pub write_timeout: Duration,
}

impl Default for CatchUpConfig {
    fn default() -> Self {
        Self {
            block_size: pfs_blob::DEFAULT_BLOCK_SIZE,
            max_blocks_body: DEFAULT_MAX_BLOCKS_BODY,
            idle_timeout: Duration::from_secs(60),
            log_interval: None,
            write_timeout: crate::framing::DEFAULT_WRITE_TIMEOUT,
        }
    }
}

/// What a catch-up did, either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CatchUpStats {
    /// Regions whose hashes were compared (all of the blob).
    pub regions: u64,
    /// Regions that differed.
    pub regions_differing: u64,
    /// Blocks whose hashes were compared (those of differing regions).
    pub blocks_compared: u64,
    /// Blocks moved: sent (source) or written (replica).
    pub blocks_moved: u64,
    /// Bytes of those blocks.
    pub bytes_moved: u64,
    /// Bytes of catch-up frames this side wrote and read, headers included.
    pub wire_bytes: u64,
    /// Wall time of the catch-up, nanoseconds (measured by the driver).
    pub elapsed_ns: u64,
}

/// Progress of a catch-up, for long ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpProgress {
    /// Counts so far.
    pub stats: CatchUpStats,
    /// Regions of the blob.
    pub regions_total: u64,
}

/// A catch-up frame that breaks the rules of §16.6.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatchUpViolation {
    /// A block size that is not a power of two ≥ 4096 dividing the region size.
    #[error("block size {block_size} does not divide the {region_size}-byte regions in powers of two of at least 4096")]
    BlockSize {
        /// The block size asked for.
        block_size: u32,
        /// The region size.
        region_size: u32,
    },
    /// A BLOCKS limit below one block.
    #[error(
        "the replica accepts CATCHUP_BLOCKS bodies of {max} bytes, less than one {block_size}-byte block"
    )]
    BlocksBodyLimit {
        /// Its limit.
        max: u32,
        /// The block size.
        block_size: u32,
    },
    /// The peers' blobs have other region counts.
    #[error("the replica's blob has {theirs} regions, this one {ours}")]
    RegionCount {
        /// The peer's.
        theirs: u64,
        /// Ours.
        ours: u64,
    },
    /// A run of region hashes that does not continue the previous one.
    #[error("region hashes from #{got}, expected #{expected}")]
    RegionOrder {
        /// Where it starts.
        got: u64,
        /// Where the previous run ended.
        expected: u64,
    },
    /// Region hashes past the last region.
    #[error("region hashes up to #{end}, the blob has {regions} regions")]
    RegionsPastEnd {
        /// The run's end.
        end: u64,
        /// Regions of the blob.
        regions: u64,
    },
    /// The last run of region hashes ends before the last region.
    #[error("the last run of region hashes ends at #{end} of {regions}")]
    RegionsShort {
        /// The run's end.
        end: u64,
        /// Regions of the blob.
        regions: u64,
    },
    /// A run of block hashes outside the blob, or not inside one region.
    #[error("block hashes #{first}..#{end} are not blocks of one region of this blob")]
    HashesOutside {
        /// First block.
        first: u64,
        /// One past the last.
        end: u64,
    },
    /// An empty run of block hashes without `LAST`, or `LAST` on a non-empty one.
    #[error(
        "CATCHUP_HASHES of {count} blocks with LAST={last}: only an empty run ends the asking, and it must"
    )]
    HashesLast {
        /// Blocks in the run.
        count: u32,
        /// Its flag.
        last: bool,
    },
    /// Blocks that answer no run asked, or not in order.
    #[error("blocks #{first}..#{end} answer no run of hashes asked, or not in order")]
    BlocksUnasked {
        /// First block.
        first: u64,
        /// One past the last.
        end: u64,
    },
    /// Blocks outside this blob.
    #[error("blocks #{first}.. (+{count}) lie outside this blob")]
    BlocksOutside {
        /// First block.
        first: u64,
        /// Blocks in the run.
        count: u32,
    },
    /// An empty run of blocks that does not end its answer.
    #[error("an empty CATCHUP_BLOCKS without LAST")]
    BlocksEmpty,
    /// A BLOCKS body over the replica's limit.
    #[error("CATCHUP_BLOCKS body of {len} bytes exceeds the limit of {max}")]
    BlocksTooLarge {
        /// Its length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// CATCHUP_END before every run was asked and answered.
    #[error("CATCHUP_END before the catch-up was complete ({what})")]
    EndEarly {
        /// What was still missing.
        what: &'static str,
    },
    /// After the catch-up the replica's root is still not the source's.
    #[error(
        "after catch-up the replica's blob fingerprint is {}, the source's {}",
        crate::short_hex(replica),
        crate::short_hex(wanted)
    )]
    RootMismatch {
        /// The replica's root after the catch-up.
        replica: [u8; 32],
        /// The source's root.
        wanted: [u8; 32],
    },
}

impl CatchUpViolation {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::BlockSize { .. } | Self::BlocksBodyLimit { .. } => ErrorCode::Unsupported,
            Self::RegionCount { .. } | Self::RootMismatch { .. } => ErrorCode::BlobMismatch,
            Self::RegionsPastEnd { .. } | Self::HashesOutside { .. } | Self::BlocksOutside { .. } => {
                ErrorCode::OutOfBounds
            }
            Self::BlocksTooLarge { .. } => ErrorCode::Limit,
            Self::RegionOrder { .. }
            | Self::RegionsShort { .. }
            | Self::HashesLast { .. }
            | Self::BlocksUnasked { .. }
            | Self::BlocksEmpty
            | Self::EndEarly { .. } => ErrorCode::Protocol,
        }
    }
}
