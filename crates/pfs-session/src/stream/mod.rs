//! Streaming sessions (`docs/wire.md` §15): an application publishes its
//! own grams — references into the blob both sides hold, writes into the
//! subscriber's blob, messages for the subscriber's code — and a
//! subscriber executes them in order, under a window it opens with
//! APPLIED frames.
//!
//! Owns: the two sans-I/O cores, [`Publisher`] (builds grams into its own
//! reusable buffers, keeps the window and the applied position, keepalive
//! and silence deadlines) and [`Subscriber`] (checks every gram against its
//! limits, rights and its **own** blob before it applies any entry, then
//! applies writes and hands the resolved entries to its [`StreamHost`]);
//! their errors; and the thin blocking drivers [`PublisherLink`] and
//! [`SubscriberLink`] that run them over a [`pfs_transport::Transport`].
//! The library's `packetfs::stream` builds its `Publication` and
//! `Subscription` on these.

mod driver;
mod host;
mod publisher;
mod subscriber;
#[cfg(test)]
mod tests;

use std::time::Duration;

use pfs_wire::stream::EntryEncodeError;
use pfs_wire::{ErrorCode, FrameType, WireError};

use crate::SessionError;

pub use driver::{PublisherLink, ReplicaCatchUp, SourceCatchUp, SubscriberLink};
pub use host::{GramEntries, ResolvedEntry, StreamHost};
pub use publisher::{Claim, GramWriter, Offer, Publisher, PublisherConfig, PublisherReport};
pub use subscriber::{Polled, Subscriber, SubscriberConfig, SubscriberReport};

/// Silence bound: a side that heard nothing from its peer for this many of
/// the peer's keepalive intervals ends the session (`docs/wire.md` §15.6).
pub const SILENCE_INTERVALS: u32 = 3;

/// What a side knows of its own blob for the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBlob {
    /// Length in bytes.
    pub len: u64,
    /// Fingerprint region size.
    pub region_size: u32,
    /// Fingerprint root.
    pub fingerprint: [u8; 32],
}

impl StreamBlob {
    /// The identity of a [`crate::BlobView`].
    pub fn of(view: &crate::BlobView<'_>) -> Self {
        Self {
            len: view.data.len() as u64,
            region_size: view.region_size,
            fingerprint: view.fingerprint,
        }
    }
}

/// Why a streaming session, or one call on it, failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The transport failed, the peer closed, sent bytes that do not
    /// decode, or refused us with an ERROR frame.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The peer broke the protocol or our limits; it was told so in an
    /// ERROR frame and the session ended.
    #[error("refused peer ({code}): {0}", code = .0.code().name())]
    Violation(#[from] StreamViolation),
    /// The peer sent nothing for [`SILENCE_INTERVALS`] of its keepalive
    /// intervals: it is gone or stuck.
    #[error("the {peer} sent nothing for {after:?} (3 × its keepalive interval): it is gone or stuck; the session ended")]
    Silent {
        /// `publisher` or `subscriber`.
        peer: &'static str,
        /// The bound that passed.
        after: Duration,
    },
    /// This gram cannot be published (nothing was sent; the session goes on).
    #[error("cannot publish this gram: {0}")]
    Publish(#[from] PublishError),
    /// The session has ended (closed, or failed earlier).
    #[error("the stream has ended")]
    Ended,
}

/// Why the gram being built cannot be sent; the session is unharmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// An entry cannot be encoded (too long, or its end overflows).
    #[error("{0}")]
    Entry(EntryEncodeError),
    /// The gram is larger than the subscriber takes.
    #[error("a gram of {body} bytes exceeds the subscriber's max_gram_body of {max}; split it")]
    GramTooLarge {
        /// Body bytes it would take.
        body: u64,
        /// The subscriber's limit.
        max: u32,
    },
    /// More entries than the subscriber takes in one gram.
    #[error("{entries} entries exceed the subscriber's max_entries of {max}; split the gram")]
    TooManyEntries {
        /// Entries in the gram.
        entries: u32,
        /// The subscriber's limit.
        max: u32,
    },
    /// The subscriber did not grant this kind of entry to this publisher.
    #[error("the subscriber does not let this publisher send {kind} entries")]
    NoRight {
        /// `write` or `message`.
        kind: &'static str,
    },
    /// A reference or write reaches outside the blob.
    #[error("{kind} of {len} bytes at {offset} reaches outside the {blob_len}-byte blob")]
    OutOfBounds {
        /// `reference` or `write`.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// The blob's length.
        blob_len: u64,
    },
    /// The previous gram is sealed and not yet written (a driver bug).
    #[error("the previous gram has not been written yet")]
    Unsent,
}

/// What a peer did that a streaming session does not allow. The side that
/// sees it sends ERROR with [`StreamViolation::code`] and ends the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamViolation {
    /// The blobs differ (length, region size or fingerprint).
    #[error("blobs differ: {what} (publisher {theirs}, subscriber {ours})")]
    BlobMismatch {
        /// Which property.
        what: &'static str,
        /// The publisher's value, as text.
        theirs: String,
        /// The subscriber's value, as text.
        ours: String,
    },
    /// A frame that does not decode.
    #[error("malformed {context}: {error}")]
    Decode {
        /// Which frame.
        context: &'static str,
        /// Why.
        error: WireError,
    },
    /// A frame the session's state does not allow.
    #[error("expected {expected}, got {}", got.name())]
    Unexpected {
        /// What the state allows.
        expected: &'static str,
        /// What arrived.
        got: FrameType,
    },
    /// A gram out of order.
    #[error("SGRAM seq {got} where {expected} was due")]
    Sequence {
        /// The next `seq` due.
        expected: u64,
        /// What arrived.
        got: u64,
    },
    /// A gram whose integrity algorithm is not STREAM_HELLO's.
    #[error("SGRAM integrity {got} where the session uses {expected}")]
    Integrity {
        /// Negotiated.
        expected: u8,
        /// Received.
        got: u8,
    },
    /// A count or size over the subscriber's limits or window.
    #[error("SGRAM {what} {got} exceeds the limit of {limit}")]
    Limit {
        /// Which quantity.
        what: &'static str,
        /// Its value.
        got: u64,
        /// The limit.
        limit: u64,
    },
    /// An entry this publisher has no right to send.
    #[error("SGRAM seq {seq}: {kind} entry without the right to send it")]
    NoRight {
        /// The gram.
        seq: u64,
        /// `write` or `message`.
        kind: &'static str,
    },
    /// A reference or write outside the subscriber's own blob.
    #[error("SGRAM seq {seq}: {kind} of {len} bytes at {offset} reaches outside the subscriber's {blob_len}-byte blob")]
    OutOfBounds {
        /// The gram.
        seq: u64,
        /// `reference` or `write`.
        kind: &'static str,
        /// Its offset.
        offset: u64,
        /// Its length.
        len: u32,
        /// The subscriber's blob length.
        blob_len: u64,
    },
    /// APPLIED going back, or past what was sent; STREAM_END's count off.
    #[error("{what}: {got} where {bound} was the bound")]
    Position {
        /// Which position.
        what: &'static str,
        /// What arrived.
        got: u64,
        /// The bound it broke.
        bound: u64,
    },
    /// The fingerprints differ, the publisher offered catch-up, and this
    /// subscriber does not take it.
    #[error("blobs differ: fingerprint (publisher {publisher}, subscriber {subscriber}), and this subscriber does not allow catch-up into its blob (it needs `pfs sub --allow-catch-up` / SubscriptionConfig::allow_catch_up, and no `no-catch-up` on the publisher key's authorized_keys line)")]
    CatchUpRefused {
        /// The publisher's root, short hex.
        publisher: String,
        /// The subscriber's root, short hex.
        subscriber: String,
    },
    /// STREAM_ACCEPT takes a catch-up STREAM_HELLO did not offer.
    #[error("STREAM_ACCEPT takes a catch-up the publisher did not offer")]
    CatchUpUnasked,
    /// STREAM_ACCEPT does not echo STREAM_HELLO's nonce.
    #[error("STREAM_ACCEPT echoes nonce {got:#x}, not {sent:#x}")]
    Nonce {
        /// Sent.
        sent: u64,
        /// Echoed.
        got: u64,
    },
}

impl StreamViolation {
    /// The ERROR code that tells the peer (`docs/wire.md` §15.7).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::BlobMismatch { .. } | Self::CatchUpRefused { .. } => ErrorCode::BlobMismatch,
            Self::CatchUpUnasked => ErrorCode::Protocol,
            Self::Decode {
                error: WireError::UnsupportedVersion(_),
                ..
            } => ErrorCode::Version,
            Self::Decode {
                error: WireError::TooLarge,
                ..
            } => ErrorCode::Limit,
            Self::Decode { .. } => ErrorCode::BadFrame,
            Self::Unexpected { .. } | Self::Sequence { .. } | Self::Position { .. } | Self::Nonce { .. } => {
                ErrorCode::Protocol
            }
            Self::Integrity { .. } => ErrorCode::Unsupported,
            Self::Limit { .. } => ErrorCode::Limit,
            Self::NoRight { .. } => ErrorCode::Auth,
            Self::OutOfBounds { .. } => ErrorCode::OutOfBounds,
        }
    }

    /// A decode error of `context`.
    pub(crate) fn decode(context: &'static str) -> impl Fn(WireError) -> Self {
        move |error| Self::Decode { context, error }
    }
}

/// Timestamps both cores keep: when this side last sent a frame and last
/// heard from its peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timers {
    pub last_sent: std::time::Instant,
    pub last_heard: std::time::Instant,
}

impl Timers {
    pub fn new(now: std::time::Instant) -> Self {
        Self {
            last_sent: now,
            last_heard: now,
        }
    }
}

/// Milliseconds of a keepalive interval as carried on the wire (≥ 1).
pub(crate) fn keepalive_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1)
}

/// The silence bound for a peer that announced `ms`.
pub(crate) fn silence_after(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms)) * SILENCE_INTERVALS
}
