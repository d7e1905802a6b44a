//! The command-line grammar of the studies (clap derive): `pfs-bench`'s own
//! flags (also reached as `pfs bench`), its study subcommands, the value
//! enums they share with `pfs` commands, and the size and number parsers
//! the study arguments use.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

pub use packetfs::parse::{EncodingArg, PatternArg};

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
    /// Streaming mode as a message transport: 64 B, 1 KiB, 64 KiB messages/s, MB/s and MB per CPU-second, and the 64 B round trip, against send() per message, batched writev and a socket ping-pong.
    Stream(crate::stream::StreamArgs),
    /// The server side of one `pfs bench ipc` row (started by the study itself).
    #[command(hide = true)]
    IpcPeer(crate::ipc::IpcPeerArgs),
    /// One side of the suite's QUIC baseline, `Conventional (QUIC, quinn)` (started by the suite).
    #[command(hide = true)]
    QuicPeer(crate::suite::quic::QuicPeerArgs),
}

// The parsers are packetfs's (typed errors); the studies' own value
// parsers build on them with `?` into `String`, which clap prints as is.

/// Parses `0x…` hex or decimal ([`packetfs::parse::parse_u64`]).
pub fn parse_u64(s: &str) -> Result<u64, String> {
    packetfs::parse::parse_u64(s).map_err(|e| e.to_string())
}

/// Parses a size: `4096`, `64K`, `1G`, `1GiB` (binary), `1GB`, `500MB`
/// (decimal) ([`packetfs::parse::parse_size`]).
pub fn parse_size(s: &str) -> Result<u64, String> {
    packetfs::parse::parse_size(s).map_err(|e| e.to_string())
}

/// A size that must fit in 32 bits ([`packetfs::parse::parse_size_u32`]).
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    packetfs::parse::parse_size_u32(s).map_err(|e| e.to_string())
}
