//! The gram protocol (docs/wire.md §1–§9): a sender builds grams from a
//! schedule over its blob, the receiver executes each over its own copy and
//! answers the sender's summary with its authoritative report.
//!
//! - [`sender`] and [`receiver`] are the sans-I/O cores: bytes and `now`
//!   in; frames to send, deadlines and events out. No socket, clock or file
//!   descriptor inside.
//! - [`host`] holds the receiver's host trait, [`GramSink`].
//! - [`corrections`] is their corrections plane (docs/wire.md §13): which
//!   grams are checked, the receiver's NAKs and repairs, the sender's
//!   answers.
//! - [`driver`] runs a core over a blocking [`pfs_transport::Transport`].

pub mod corrections;
pub mod driver;
pub mod host;
pub mod receiver;
pub mod sender;

use pfs_wire::{Encoding, ErrorCode, IntegrityAlg, Mode};

pub use driver::{receive_session, send_session, send_session_with, GramRecorder};
pub use host::{Discard, GramSink};
pub use receiver::{GramReceiver, GramReceiverConfig, GramReceiverEvent, GramReceiverOutcome};
pub use sender::{GramSender, GramSenderConfig, GramSenderEvent, GramSenderOutcome, DEFAULT_PAYLOAD_BUDGET};

/// Progress of a gram session, either side: what was sent (sender) or
/// executed (receiver) so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GramProgress {
    /// Grams so far.
    pub grams: u64,
    /// Effective bytes so far.
    pub effective_bytes: u64,
    /// Wire bytes so far.
    pub wire_bytes: u64,
    /// Time since steady state began (HELLO_ACK for the sender, the first
    /// frame after it for the receiver).
    pub elapsed: std::time::Duration,
    /// Effective bytes the sender planned (0 = unknown).
    pub planned_bytes: u64,
}

/// A gram that breaks the session's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GramViolation {
    /// A GRAM body shorter than the gram header.
    #[error("GRAM body of {len} bytes is shorter than its header")]
    ShortBody {
        /// The body length.
        len: u32,
    },
    /// A gram out of sequence.
    #[error("gram #{got} arrived, expected #{expected}")]
    Sequence {
        /// Its sequence number.
        got: u64,
        /// The next one expected.
        expected: u64,
    },
    /// Encoding or integrity other than negotiated.
    #[error("gram #{seq} uses {}/{}, the session negotiated {}/{}", encoding.name(), integrity.name(), session_encoding.name(), session_integrity.name())]
    NotNegotiated {
        /// The gram.
        seq: u64,
        /// Its encoding.
        encoding: Encoding,
        /// Its integrity algorithm.
        integrity: IntegrityAlg,
        /// The session's encoding.
        session_encoding: Encoding,
        /// The session's integrity algorithm.
        session_integrity: IntegrityAlg,
    },
    /// Descriptor count or table length over the limits.
    #[error("gram #{seq}: {count} descriptors / {table_len}-byte table exceeds the limits ({max_count} / {max_table_len})")]
    TableLimit {
        /// The gram.
        seq: u64,
        /// Its descriptor count.
        count: u32,
        /// Its table length.
        table_len: u32,
        /// The limit on descriptors.
        max_count: u32,
        /// The limit on table bytes.
        max_table_len: u32,
    },
    /// Payload over the limit.
    #[error("gram #{seq}: {len}-byte payload exceeds the limit of {max}")]
    PayloadLimit {
        /// The gram.
        seq: u64,
        /// Its payload length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A payload in a mode without one, or none in payload mode.
    #[error("gram #{seq}: payload of {len} bytes in {} mode", mode.name())]
    PayloadInMode {
        /// The gram.
        seq: u64,
        /// Its payload length.
        len: u32,
        /// The session's mode.
        mode: Mode,
    },
    /// Descriptors reference more bytes than the payload carries.
    #[error("gram #{seq}: descriptors reference more bytes than the {len}-byte payload")]
    PayloadShort {
        /// The gram.
        seq: u64,
        /// Its payload length.
        len: u32,
    },
    /// Payload bytes left over after the last descriptor.
    #[error("gram #{seq}: {left} payload bytes not referenced by any descriptor")]
    PayloadLeftOver {
        /// The gram.
        seq: u64,
        /// Bytes left over.
        left: u64,
    },
    /// A descriptor outside this blob, too long, or too much work.
    #[error("gram #{seq}: {error}")]
    Descriptor {
        /// The gram.
        seq: u64,
        /// Why.
        error: pfs_exec::ExecError,
    },
    /// A REPAIR that answers no NAK, or not the oldest one unanswered.
    #[error("REPAIR for gram #{seq}, but {}", match expected { Some(e) => format!("the oldest NAK unanswered is for gram #{e}"), None => "no NAK is unanswered".to_string() })]
    RepairUnasked {
        /// The gram the REPAIR names.
        seq: u64,
        /// The gram of the oldest NAK unanswered, if any.
        expected: Option<u64>,
    },
    /// A REPAIR whose ranges differ from its NAK's.
    #[error("REPAIR for gram #{seq} names other ranges than its NAK")]
    RepairRanges {
        /// The gram.
        seq: u64,
    },
    /// A NAK the sender cannot answer: not asked for, not a gram of this
    /// session, or ranges that are not the gram's.
    #[error("NAK for gram #{seq}: {why}")]
    NakRefused {
        /// The gram the NAK names.
        seq: u64,
        /// Why it is refused.
        why: &'static str,
    },
    /// NAK or REPAIR with frame flags (LAST belongs to files sessions).
    #[error("{frame} with frame flags {flags:#06x} in a blob session")]
    CorrectionFlags {
        /// NAK or REPAIR.
        frame: &'static str,
        /// The flags.
        flags: u16,
    },
}

impl GramViolation {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ShortBody { .. } | Self::PayloadShort { .. } | Self::PayloadLeftOver { .. } => {
                ErrorCode::BadFrame
            }
            Self::Sequence { .. }
            | Self::PayloadInMode { .. }
            | Self::RepairUnasked { .. }
            | Self::RepairRanges { .. }
            | Self::NakRefused { .. } => ErrorCode::Protocol,
            Self::CorrectionFlags { .. } => ErrorCode::BadFrame,
            Self::NotNegotiated { .. } => ErrorCode::Unsupported,
            Self::TableLimit { .. } | Self::PayloadLimit { .. } => ErrorCode::Limit,
            Self::Descriptor { error, .. } => match error {
                pfs_exec::ExecError::OutOfBounds { .. } => ErrorCode::OutOfBounds,
                pfs_exec::ExecError::Wire(_) => ErrorCode::BadFrame,
                pfs_exec::ExecError::TooLong { .. } | pfs_exec::ExecError::TooMuchWork { .. } => {
                    ErrorCode::Limit
                }
            },
        }
    }
}

/// A HELLO this receiver will not serve, though it is well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloRejection {
    /// Offset-only or arithmetic with integrity none and no kernel: nothing to run.
    #[error("{} mode with integrity none would execute nothing on this receiver; use --integrity xxh3 or fnv1a (or start the receiver with --exec KERNEL)", mode.name())]
    NothingToExecute {
        /// The mode asked for.
        mode: Mode,
    },
    /// Authentication method 0 with data.
    #[error("authentication method 0 (none) must carry no data, got {len} bytes")]
    AuthData {
        /// Bytes of authentication data.
        len: usize,
    },
    /// An authentication method this receiver does not speak.
    #[error("authentication method {method} is not supported by this receiver (it accepts: none)")]
    AuthMethod {
        /// The method asked for.
        method: u8,
    },
    /// The encoding does not belong to the mode.
    #[error("mode {} uses the {} encoding, HELLO asked for {}", mode.name(), mode.encoding().name(), encoding.name())]
    Encoding {
        /// The mode.
        mode: Mode,
        /// The encoding asked for.
        encoding: Encoding,
    },
    /// Blob lengths differ.
    #[error("blob size differs: sender {sender} bytes, receiver {receiver} bytes (use the same --size and --seed on both sides)")]
    BlobSize {
        /// The sender's blob length.
        sender: u64,
        /// This blob's length.
        receiver: u64,
    },
    /// Blob fingerprints differ.
    #[error("blob fingerprint differs: sender {} (region {sender_region} B), receiver {} (region {receiver_region} B); the peers do not hold the same bytes (check --seed / --blob-name, or `pfs blob verify`; `pfs send --catch-up` brings a receiver started with --allow-catch-up to the sender's bytes)", crate::short_hex(sender), crate::short_hex(receiver))]
    Fingerprint {
        /// The sender's root.
        sender: [u8; 32],
        /// Its region size.
        sender_region: u32,
        /// This blob's root.
        receiver: [u8; 32],
        /// Its region size.
        receiver_region: u32,
    },
    /// The fingerprints differ, the sender offered catch-up, and this
    /// receiver does not allow it.
    #[error("blob fingerprint differs: sender {}, receiver {}, and this receiver does not allow catch-up into its blob for this sender (it needs `pfs serve --allow-catch-up`, and no `no-catch-up` on the key's authorized_keys line; or give both sides the same --seed)", crate::short_hex(sender), crate::short_hex(receiver))]
    CatchUpRefused {
        /// The sender's root.
        sender: [u8; 32],
        /// This blob's root.
        receiver: [u8; 32],
    },
    /// Another catch-up is writing this blob.
    #[error("another catch-up is writing this receiver's blob; try again when it is done")]
    CatchUpBusy,
    /// More descriptors per gram than allowed.
    #[error("{asked} descriptors per gram exceeds this receiver's limit of {limit}")]
    DescPerGram {
        /// Asked for.
        asked: u32,
        /// Allowed.
        limit: u32,
    },
    /// Longer descriptors than allowed.
    #[error("descriptor length {asked} exceeds this receiver's limit of {limit}")]
    DescLen {
        /// Asked for.
        asked: u32,
        /// Allowed.
        limit: u32,
    },
    /// The files receiver cannot record grams.
    #[error("cannot record grams to {}: {reason}", path.display())]
    Record {
        /// The recording file.
        path: std::path::PathBuf,
        /// The OS error kind.
        reason: std::io::ErrorKind,
    },
}

impl HelloRejection {
    /// The ERROR code that tells the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NothingToExecute { .. } | Self::Encoding { .. } => ErrorCode::Unsupported,
            Self::AuthData { .. } | Self::AuthMethod { .. } => ErrorCode::Auth,
            Self::BlobSize { .. } | Self::Fingerprint { .. } | Self::CatchUpRefused { .. } => {
                ErrorCode::BlobMismatch
            }
            Self::CatchUpBusy => ErrorCode::Busy,
            Self::DescPerGram { .. } | Self::DescLen { .. } => ErrorCode::Limit,
            Self::Record { .. } => ErrorCode::Internal,
        }
    }
}
