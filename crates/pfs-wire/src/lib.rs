//! PacketFS wire format, sans-I/O.
//!
//! Owns the byte layout of everything that crosses a transport: the frame
//! envelope ([`frame`]), the gram header and view ([`gram`]), the descriptor
//! codecs ([`desc`], [`varint`]), the control frames ([`hello`],
//! [`control`]), the corrections plane of blob sessions ([`corrections`]:
//! gram NAK and REPAIR, the report's corrections block), blob catch-up
//! ([`catchup`]: region and block hashes, the blocks that differ), the
//! files-session frames ([`files`], one file per frame group) and the
//! streaming-session frames ([`stream`]). No sockets, no clocks, no allocation on the decode path.
//! Every decoder takes untrusted `&[u8]`, checks lengths before reading, and
//! returns a typed [`WireError`] instead of panicking. The byte-level spec,
//! with test vectors, is `docs/wire.md`; the vectors are checked by
//! `tests/vectors.rs`.
//!
//! Each fixed layout (a header, a fixed body, the fixed head of a variable
//! body) is written down once, as a private `field` table of byte ranges
//! beside its codec, and both `parse` and `emit` use only those names. The
//! private `layout` module holds the table type, the compile-time check that
//! a table covers its structure exactly, and the bounds-checked reader and
//! the writer built on it.

pub mod catchup;
pub mod control;
pub mod corrections;
pub mod datagram;
pub mod desc;
mod error;
pub mod files;
pub mod frame;
pub mod gram;
pub mod hello;
mod layout;
pub mod mount;
pub mod stream;
pub mod varint;

pub use control::{ErrorCode, ErrorFrame, Report, SenderSummary};
pub use desc::{DescIter, Descriptor, Encoding, TableWriter};
pub use error::WireError;
pub use frame::{Frame, FrameHeader, FrameType, FRAME_HEADER_LEN, MAGIC, VERSION};
pub use gram::{Gram, GramHeader, GRAM_FLAG_PAYLOAD, GRAM_HEADER_LEN};
pub use hello::{Hello, HelloAck};

/// Transfer mode, carried in HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// `PFS-With-Payload-<T>`: the slab carries the referenced bytes; the receiver checks them.
    Payload = 0,
    /// `Native PFS Offset-only Mode - <T>`: descriptors only, absolute encoding.
    Offset = 1,
    /// `Native PFS Arithmetic Mode - <T>`: descriptors only, arithmetic encoding.
    Arith = 2,
}

impl Mode {
    /// Parses a mode number.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(Self::Payload),
            1 => Ok(Self::Offset),
            2 => Ok(Self::Arith),
            other => Err(WireError::UnknownMode(other)),
        }
    }

    /// The descriptor encoding this mode uses.
    pub fn encoding(self) -> Encoding {
        match self {
            Self::Payload | Self::Offset => Encoding::Absolute,
            Self::Arith => Encoding::Arithmetic,
        }
    }

    /// Whether grams of this mode carry a payload slab.
    pub fn carries_payload(self) -> bool {
        self == Self::Payload
    }

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Payload => "payload",
            Self::Offset => "offset",
            Self::Arith => "arith",
        }
    }
}

/// Integrity algorithm of a gram's `integrity_value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IntegrityAlg {
    /// No check (value must be 0).
    None = 0,
    /// XXH3-64, seed 0, over the concatenated effective bytes.
    Xxh3 = 1,
    /// FNV-1a 64 over the concatenated effective bytes.
    Fnv1a = 2,
}

impl IntegrityAlg {
    /// Parses an integrity algorithm number.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(Self::None),
            1 => Ok(Self::Xxh3),
            2 => Ok(Self::Fnv1a),
            other => Err(WireError::UnknownIntegrity(other)),
        }
    }

    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Xxh3 => "xxh3",
            Self::Fnv1a => "fnv1a",
        }
    }
}

/// Appends one complete frame (header + `body`) to `out`. For control frames;
/// grams go out as an iovec of their parts instead.
pub fn put_frame(out: &mut Vec<u8>, frame_type: FrameType, flags: u16, body: &[u8]) {
    let length = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(
        &FrameHeader {
            frame_type,
            flags,
            length,
        }
        .emit(),
    );
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::{control, corrections, files, frame, gram, hello, stream};

    proptest! {
        /// Every body decoder takes any bytes, short or long, without
        /// panicking; iterators are drained so their entries are read too.
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let b = &bytes[..];
            let _ = frame::Frame::parse(b);
            let _ = gram::Gram::parse(b).map(|g| g.descriptors().count());
            let _ = hello::Hello::parse(b);
            let _ = hello::HelloAck::parse(b);
            let _ = control::SenderSummary::parse(b);
            let _ = control::Report::parse(b);
            let _ = control::ErrorFrame::parse(b);
            let _ = corrections::GramNak::parse(b).map(|n| n.ranges.iter().count());
            let _ = corrections::GramRepair::parse(b).map(|r| r.ranges.iter().count());
            let _ = corrections::parse_report(b);
            let _ = files::FilesHello::parse(b);
            let _ = files::FilesAccept::parse(b);
            let _ = files::FilesReport::parse(b);
            let _ = files::parse_index_request(b);
            let _ = files::parse_index(b).map(Iterator::count);
            let _ = files::Plan::parse(b);
            let _ = files::PlanAck::parse(b);
            let _ = files::FileEntry::parse(b);
            let _ = files::parse_chunks(b).map(|(_, it)| it.count());
            let _ = files::parse_batch(b);
            let _ = files::parse_probe(b).map(|(_, it)| it.count());
            let _ = files::parse_probe_reply(b);
            let _ = files::parse_nak(b).map(Iterator::count);
            let _ = stream::StreamHello::parse(b);
            let _ = stream::StreamAccept::parse(b);
            let _ = stream::Applied::parse(b);
            let _ = stream::StreamGram::parse(b).map(|g| g.entries().count());
        }
    }
}
