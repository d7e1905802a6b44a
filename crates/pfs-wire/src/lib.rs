//! PacketFS wire format, sans-I/O.
//!
//! Owns the byte layout of everything that crosses a transport: the frame
//! envelope ([`frame`]), the gram header and view ([`gram`]), the descriptor
//! codecs ([`desc`], [`varint`]) and the control frames ([`hello`],
//! [`control`]). No sockets, no clocks, no allocation on the decode path.
//! Every decoder takes untrusted `&[u8]`, checks lengths before reading, and
//! returns a typed [`WireError`] instead of panicking. The byte-level spec,
//! with test vectors, is `docs/wire.md`; the vectors are checked by
//! `tests/vectors.rs`.

pub mod control;
pub mod desc;
mod error;
pub mod files;
pub mod frame;
pub mod gram;
pub mod hello;
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

// Little-endian readers. Callers have already checked `buf.len() >= at + N`
// (every call site slices a checked fixed-size header first).
#[inline]
pub(crate) fn rd_u16(buf: &[u8], at: usize) -> u16 {
    let mut b = [0u8; 2];
    b.copy_from_slice(&buf[at..at + 2]);
    u16::from_le_bytes(b)
}

#[inline]
pub(crate) fn rd_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

#[inline]
pub(crate) fn rd_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
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
