//! Kernel names: what `--exec KERNEL` / `pfs exec KERNEL` accept.

use core::fmt;
use core::str::FromStr;

/// The names [`KernelId::parse`] accepts, for help texts and errors.
pub const ACCEPTED_NAMES: &str = "fnv1a64 (alias fnv1a), xxh3, crc32c, sum, count:<byte>, histogram, \
     xor:<byte>, add:<byte>, gather — <byte> is 0..=255, decimal (65) or hex (0x41)";

/// A built-in kernel, with its immediate where it takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// FNV-1a 64 over the whole stream (byte-serial, not shardable).
    Fnv1a64,
    /// XXH3-64 per chunk, chained over chunks.
    Xxh3,
    /// CRC32C of the whole stream.
    Crc32c,
    /// Wrapping sum of little-endian u64 words.
    SumU64,
    /// Number of bytes equal to the immediate.
    CountByte(u8),
    /// 256 byte-value counters.
    Histogram,
    /// In place: every byte `b` becomes `b ^ imm`.
    XorImm(u8),
    /// In place: every byte `b` becomes `b.wrapping_add(imm)`.
    AddImm(u8),
    /// Copy the referenced bytes, in order, to an output.
    Gather,
}

/// Why a kernel name was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// Not a built-in kernel name.
    #[error("unknown kernel `{spec}`; built-in kernels: {ACCEPTED_NAMES}")]
    UnknownKernel {
        /// The spec as given.
        spec: String,
    },
    /// The immediate after `:` is not a byte value.
    #[error("bad immediate in `{spec}`: expected a byte value 0..=255, decimal (65) or hex (0x41)")]
    BadImmediate {
        /// The spec as given.
        spec: String,
    },
    /// `count`, `xor` or `add` without `:<byte>`.
    #[error("kernel `{name}` needs an immediate byte, e.g. `{name}:0x41`")]
    MissingImmediate {
        /// The kernel's name.
        name: String,
    },
    /// An immediate given to a kernel that takes none.
    #[error("kernel `{name}` takes no immediate")]
    UnexpectedImmediate {
        /// The kernel's name.
        name: String,
    },
}

impl KernelId {
    /// Parses a CLI kernel name (case-insensitive): `fnv1a64` | `fnv1a`,
    /// `xxh3`, `crc32c`, `sum`, `count:0x41` | `count:65`, `histogram`,
    /// `xor:0x5a`, `add:1`, `gather`.
    pub fn parse(s: &str) -> Result<KernelId, KernelError> {
        let spec = s.trim();
        let lower = spec.to_ascii_lowercase();
        let (name, imm) = match lower.split_once(':') {
            Some((name, imm)) => (name, Some(imm)),
            None => (lower.as_str(), None),
        };
        let plain = |id: KernelId| match imm {
            None => Ok(id),
            Some(_) => Err(KernelError::UnexpectedImmediate {
                name: name.to_owned(),
            }),
        };
        let with_byte = |make: fn(u8) -> KernelId| match imm {
            None => Err(KernelError::MissingImmediate {
                name: name.to_owned(),
            }),
            Some(imm) => parse_byte(imm)
                .map(make)
                .ok_or_else(|| KernelError::BadImmediate {
                    spec: spec.to_owned(),
                }),
        };
        match name {
            "fnv1a64" | "fnv1a" => plain(Self::Fnv1a64),
            "xxh3" => plain(Self::Xxh3),
            "crc32c" => plain(Self::Crc32c),
            "sum" => plain(Self::SumU64),
            "count" => with_byte(Self::CountByte),
            "histogram" => plain(Self::Histogram),
            "xor" => with_byte(Self::XorImm),
            "add" => with_byte(Self::AddImm),
            "gather" => plain(Self::Gather),
            _ => Err(KernelError::UnknownKernel {
                spec: spec.to_owned(),
            }),
        }
    }

    /// Canonical name; [`KernelId::parse`] of it gives `self` back.
    /// Immediates are printed as two hex digits (`count:0x41`).
    pub fn name(&self) -> String {
        match *self {
            Self::Fnv1a64 => "fnv1a64".into(),
            Self::Xxh3 => "xxh3".into(),
            Self::Crc32c => "crc32c".into(),
            Self::SumU64 => "sum".into(),
            Self::CountByte(b) => format!("count:{b:#04x}"),
            Self::Histogram => "histogram".into(),
            Self::XorImm(k) => format!("xor:{k:#04x}"),
            Self::AddImm(k) => format!("add:{k:#04x}"),
            Self::Gather => "gather".into(),
        }
    }

    /// Whether the kernel mutates the blob (the executor calls
    /// [`Kernel::update_mut`](super::Kernel::update_mut) for these).
    pub fn in_place(&self) -> bool {
        matches!(self, Self::XorImm(_) | Self::AddImm(_))
    }

    /// Whether chunks can run on different pThreads and be combined.
    /// False only for FNV-1a 64.
    pub fn shardable(&self) -> bool {
        self.not_shardable_reason().is_none()
    }

    /// Why the kernel cannot run with `--pthreads` > 1, if it cannot.
    pub fn not_shardable_reason(&self) -> Option<&'static str> {
        match self {
            Self::Fnv1a64 => Some(
                "fnv1a64 is a byte-serial hash over the whole stream: each chunk needs the state \
                 the previous chunk ended with, so it cannot be split across pThreads; run it \
                 with --pthreads 1, or use xxh3 or crc32c, which combine per chunk",
            ),
            _ => None,
        }
    }

    /// One of each kernel (`count:0x00`, `xor:0x5a`, `add:0x01`), for
    /// benchmarks and tests.
    pub fn all_builtin() -> Vec<KernelId> {
        vec![
            Self::Fnv1a64,
            Self::Xxh3,
            Self::Crc32c,
            Self::SumU64,
            Self::CountByte(0),
            Self::Histogram,
            Self::XorImm(0x5a),
            Self::AddImm(0x01),
            Self::Gather,
        ]
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for KernelId {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// `65` or `0x41` (already lower-cased) as a byte.
fn parse_byte(s: &str) -> Option<u8> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) if !hex.is_empty() && !hex.starts_with('+') => u8::from_str_radix(hex, 16).ok(),
        Some(_) => None,
        None if !s.starts_with('+') => s.parse().ok(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediates() {
        assert_eq!(parse_byte("0x41"), Some(0x41));
        assert_eq!(parse_byte("65"), Some(65));
        assert_eq!(parse_byte("0xff"), Some(255));
        assert_eq!(parse_byte("256"), None);
        assert_eq!(parse_byte("0x100"), None);
        assert_eq!(parse_byte("0x"), None);
        assert_eq!(parse_byte("+1"), None);
        assert_eq!(parse_byte("0x+1"), None);
        assert_eq!(parse_byte("-1"), None);
        assert_eq!(parse_byte(""), None);
    }
}
