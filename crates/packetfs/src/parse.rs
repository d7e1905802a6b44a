//! Sizes and numbers as people type them (`64K`, `1GiB`, `500MB`, `0x5eed`):
//! the parsers behind every size option of `pfs` and `pfs-bench`; and the
//! access pattern and descriptor encoding as options name them (with the
//! `clap` feature, usable as `clap` value enums).

use std::num::ParseIntError;

/// Why a size or number could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a decimal or `0x` hexadecimal number.
    #[error("{text:?} is not a number: {source}")]
    NotANumber {
        /// The text, without `_` separators.
        text: String,
        /// What the integer parser said.
        source: ParseIntError,
    },
    /// No number in front of the unit.
    #[error("{text:?} is not a size (examples: 4096, 64K, 1G, 500MB)")]
    NotASize {
        /// The text.
        text: String,
    },
    /// A unit this parser does not know.
    #[error("unknown size unit {unit:?} in {text:?} (use K, M, G, T, KB, MB, GB, TB)")]
    UnknownUnit {
        /// The unit, lower-cased.
        unit: String,
        /// The whole text.
        text: String,
    },
    /// Negative, or more than `u64::MAX` bytes.
    #[error("{text:?} is out of range")]
    OutOfRange {
        /// The text.
        text: String,
    },
    /// A size that must fit in 32 bits does not.
    #[error("{text:?} exceeds 4 GiB - 1")]
    Exceeds32Bits {
        /// The text.
        text: String,
    },
}

/// Parses `0x…` hex or decimal, with optional `_` separators.
///
/// ```
/// assert_eq!(packetfs::parse::parse_u64("0x5eed"), Ok(0x5eed));
/// assert_eq!(packetfs::parse::parse_u64("1_000"), Ok(1000));
/// ```
pub fn parse_u64(s: &str) -> Result<u64, ParseError> {
    let s = s.trim().replace('_', "");
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|source| ParseError::NotANumber {
        text: s.clone(),
        source,
    })
}

/// Parses a size: `4096`, `64K`, `1G`, `1GiB` (binary), `1GB`, `500MB` (decimal).
///
/// ```
/// use packetfs::parse::parse_size;
/// assert_eq!(parse_size("64K"), Ok(65536));
/// assert_eq!(parse_size("500MB"), Ok(500_000_000));
/// ```
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let t = s.trim().replace('_', "");
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let value: f64 = num
        .parse()
        .map_err(|_| ParseError::NotASize { text: s.to_string() })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => {
            return Err(ParseError::UnknownUnit {
                unit: other.to_string(),
                text: s.to_string(),
            })
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(ParseError::OutOfRange { text: s.to_string() });
    }
    Ok(bytes.round() as u64)
}

/// A size that must fit in 32 bits.
///
/// ```
/// assert_eq!(packetfs::parse::parse_size_u32("256K"), Ok(262_144));
/// assert!(packetfs::parse::parse_size_u32("8G").is_err());
/// ```
pub fn parse_size_u32(s: &str) -> Result<u32, ParseError> {
    let v = parse_size(s)?;
    u32::try_from(v).map_err(|_| ParseError::Exceeds32Bits { text: s.to_string() })
}

/// Access pattern on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PatternArg {
    /// Uniformly random aligned ranges.
    Random,
    /// Back-to-back ranges (arithmetic encoding: ~4 bytes per descriptor).
    Sequential,
    /// max-len blocks at stride 2 × max-len.
    Strided,
}

impl PatternArg {
    /// The generator pattern.
    pub fn pattern(self) -> pfs_exec::Pattern {
        match self {
            Self::Random => pfs_exec::Pattern::Random,
            Self::Sequential => pfs_exec::Pattern::Sequential,
            Self::Strided => pfs_exec::Pattern::Strided,
        }
    }
}

/// Descriptor table encoding on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EncodingArg {
    /// 12-byte descriptors (offset-mode).
    Absolute,
    /// Delta/varint descriptors decoded inside the kernel loop (arithmetic-mode).
    Arith,
}

impl EncodingArg {
    /// The wire encoding.
    pub fn encoding(self) -> pfs_wire::Encoding {
        match self {
            Self::Absolute => pfs_wire::Encoding::Absolute,
            Self::Arith => pfs_wire::Encoding::Arithmetic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1.5M"), Ok(1_572_864));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("abc").is_err());
        assert_eq!(parse_size_u32("256K"), Ok(262_144));
        assert!(parse_size_u32("8G").is_err());
        assert_eq!(parse_u64("0x5eed"), Ok(0x5eed));
        assert_eq!(parse_u64("42"), Ok(42));
    }

    #[test]
    fn messages_read_as_before() {
        assert_eq!(
            parse_size("abc").unwrap_err().to_string(),
            "\"abc\" is not a size (examples: 4096, 64K, 1G, 500MB)"
        );
        assert_eq!(
            parse_size("12Q").unwrap_err().to_string(),
            "unknown size unit \"q\" in \"12Q\" (use K, M, G, T, KB, MB, GB, TB)"
        );
        assert_eq!(
            parse_size_u32("8G").unwrap_err().to_string(),
            "\"8G\" exceeds 4 GiB - 1"
        );
        assert!(parse_u64("x1")
            .unwrap_err()
            .to_string()
            .starts_with("\"x1\" is not a number: "));
    }
}
