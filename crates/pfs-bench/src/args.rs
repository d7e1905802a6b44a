//! The command-line grammar of the studies (clap derive): `pfs bench`'s own
//! flags, its study subcommands, the value enums they share with other `pfs`
//! commands, and the size and number parsers. `pfs-cli` flattens these into
//! its grammar unchanged, so `--help` reads the same wherever they are defined.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

/// Access pattern on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
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

/// `pfs bench`
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// A separate study instead of the main suite.
    #[command(subcommand)]
    pub study: Option<BenchStudy>,
    /// Larger sizes (longer runs, steadier numbers).
    #[arg(long)]
    pub full: bool,
    /// Blob size for both peers.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// hugetlbfs mount for both peers' blobs.
    #[arg(long, value_name = "DIR")]
    pub huge_dir: Option<PathBuf>,
    /// Access pattern of the main PFS rows (sequential rows for offset/arith are always added).
    #[arg(long, value_enum, default_value_t = PatternArg::Random)]
    pub pattern: PatternArg,
    /// Descriptors per gram.
    #[arg(long, default_value_t = 1024)]
    pub desc_per_gram: u32,
    /// Longest descriptor.
    #[arg(long, default_value = "256K", value_parser = parse_size_u32)]
    pub max_len: u32,
    /// Only rows whose label, integrity or pattern contains this text (case-insensitive); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Do not pin sender and receiver to separate CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Network path of every row: loopback, or a veth pair into a network namespace the harness creates (root).
    #[arg(long, value_enum, default_value_t = PathArg::Loopback)]
    pub path: PathArg,
    /// MTU of the veth pair with `--path veth`, or of the emulated link's devices with `--link`.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Every network row over an emulated link (root): SPEC is any subset of
    /// rtt=50ms,loss=1%,rate=500mbit (units: us/ms/s, %, kbit/mbit/gbit).
    /// Two network namespaces joined by TUN devices, a delay line (rtt/2 each
    /// way), random loss per packet in the kernel (nftables, each way) and a
    /// rate cap with a one-BDP drop-tail queue in the delay line. The header
    /// gives the link's measured ceiling and delay. Example:
    /// `pfs bench --link rtt=50ms,loss=1%,rate=500mbit`.
    #[arg(long, value_name = "SPEC", value_parser = crate::emulink::parse_link_spec, conflicts_with = "path")]
    pub link: Option<crate::emulink::LinkSpec>,
    /// With --link: run every row once per loss rate in LIST (percent,
    /// comma-separated; replaces the spec's loss) and print goodput by loss.
    /// Example: `--link rtt=50ms,rate=500mbit --link-loss-sweep 0,1,5,20`.
    #[arg(long, value_name = "LIST", value_parser = parse_loss_sweep, requires = "link")]
    pub link_loss_sweep: Option<LossSweep>,
    /// Multiply every row's transfer size (and iperf3's duration) by this factor.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Write bench.csv, bench.json and bench.md here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The loss rates of `--link-loss-sweep`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossSweep(pub Vec<crate::emulink::Loss>);

fn parse_loss_sweep(s: &str) -> Result<LossSweep, String> {
    crate::emulink::parse_loss_list(s).map(LossSweep)
}

/// Network path of the benchmark suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PathArg {
    /// 127.0.0.1.
    Loopback,
    /// A veth pair into a network namespace created (and removed) by the harness.
    Veth,
}

/// Studies run by `pfs bench <study>`.
#[derive(Debug, Subcommand)]
pub enum BenchStudy {
    /// Socket I/O primitives study: send() vs sendmsg() vs MSG_ZEROCOPY vs PacketFS grams.
    IoPrimitives(crate::io_primitives::IoPrimitivesArgs),
    /// Every built-in pCPU kernel, on 1 and 2 pThreads, against a plain 64-bit read loop over the same bytes.
    Exec(crate::exec::BenchExecArgs),
    /// IPC latency study: 32-byte messages between two processes, one-way TSC latency per method vs Unix socket + epoll.
    Ipc(crate::ipc::IpcArgs),
    /// File transfer on tmpfs and/or ext4: a cold file, cold and unchanged sends, a small-file and a large version pair, against rsync, scp, cp -a and tar | tar.
    #[command(alias = "sync")]
    Files(crate::suite::files::BenchFilesArgs),
    /// pfs mount: fio on one file (tmpfs, page cache warm, direct=1, cold), tree metadata, first byte of a remote file, whole-tree read vs pfs send.
    Mount(crate::mount::BenchMountArgs),
    /// The server side of one `pfs bench ipc` row (started by the study itself).
    #[command(hide = true)]
    IpcPeer(crate::ipc::IpcPeerArgs),
    /// One side of the suite's QUIC baseline, `Conventional (QUIC, quinn)` (started by the suite).
    #[command(hide = true)]
    QuicPeer(crate::suite::quic::QuicPeerArgs),
}

/// Parses `0x…` hex or decimal.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    let s = s.trim().replace('_', "");
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|e| format!("{s:?} is not a number: {e}"))
}

/// Parses a size: `4096`, `64K`, `1G`, `1GiB` (binary), `1GB`, `500MB` (decimal).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits_end);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 4096, 64K, 1G, 500MB)"))?;
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
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (use K, M, G, T, KB, MB, GB, TB)"
            ))
        }
    };
    let bytes = value * mult;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// A size that must fit in 32 bits.
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    u32::try_from(v).map_err(|_| format!("{s:?} exceeds 4 GiB - 1"))
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
}
