//! The one error type of the decode path: small, `Copy`, no allocation.

use core::fmt;

/// Why a byte string is not a valid PacketFS frame or field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the field or header needs.
    Truncated,
    /// The first four bytes are not `PFSG`.
    BadMagic,
    /// A protocol version this build does not speak.
    UnsupportedVersion(u8),
    /// The frame header CRC32C does not match its bytes.
    BadHeaderCrc,
    /// A frame type number that is not assigned.
    UnknownFrameType(u8),
    /// A declared length disagrees with the bytes present or with another length.
    LengthMismatch,
    /// A declared length exceeds a protocol or receiver limit.
    TooLarge,
    /// A descriptor encoding number that is not assigned.
    UnknownEncoding(u8),
    /// An integrity algorithm number that is not assigned.
    UnknownIntegrity(u8),
    /// A transfer mode number that is not assigned.
    UnknownMode(u8),
    /// A flag bit that is not defined for this frame is set, or flags contradict lengths.
    BadFlags,
    /// A reserved field is not zero.
    ReservedNonZero,
    /// A varint runs past 10 bytes or past `u64::MAX`.
    VarintOverflow,
    /// A varint is not in its shortest form.
    VarintNonCanonical,
    /// A descriptor's offset or end does not fit in 64 bits, or its length in 32.
    DescriptorOverflow,
    /// The descriptor table ends before `desc_count` descriptors were read.
    TableTruncated,
    /// Bytes are left in the descriptor table after `desc_count` descriptors.
    TrailingBytes,
    /// A text field is not valid UTF-8.
    BadUtf8,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated: fewer bytes than the header or field needs"),
            Self::BadMagic => f.write_str("bad magic (not a PacketFS frame)"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported protocol version {v}"),
            Self::BadHeaderCrc => f.write_str("frame header CRC32C mismatch"),
            Self::UnknownFrameType(t) => write!(f, "unknown frame type {t}"),
            Self::LengthMismatch => f.write_str("declared lengths disagree"),
            Self::TooLarge => f.write_str("declared length exceeds the limit"),
            Self::UnknownEncoding(e) => write!(f, "unknown descriptor encoding {e}"),
            Self::UnknownIntegrity(i) => write!(f, "unknown integrity algorithm {i}"),
            Self::UnknownMode(m) => write!(f, "unknown transfer mode {m}"),
            Self::BadFlags => f.write_str("undefined or inconsistent flag bits"),
            Self::ReservedNonZero => f.write_str("reserved field is not zero"),
            Self::VarintOverflow => f.write_str("varint overflows 64 bits"),
            Self::VarintNonCanonical => f.write_str("varint is not in shortest form"),
            Self::DescriptorOverflow => f.write_str("descriptor offset/length overflows"),
            Self::TableTruncated => f.write_str("descriptor table ends early"),
            Self::TrailingBytes => f.write_str("trailing bytes after the last descriptor"),
            Self::BadUtf8 => f.write_str("text field is not UTF-8"),
        }
    }
}

impl std::error::Error for WireError {}
