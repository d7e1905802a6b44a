//! Streaming from the shell: what `pfs pub` and `pfs sub` do, over
//! [`crate::stream`] (docs/wire.md §15).
//!
//! [`publish`] reads records from a file or stdin — one a line, or
//! fixed-size binary records — batches them into grams (MESSAGEs, WRITEs at
//! successive offsets, or REFERENCEs from `OFFSET LEN` lines) and waits for
//! the subscriber to apply them. A [`Subscriber`] admits publishers one at a
//! time, as a gram server admits senders (keys, rights: a key's `stream=`
//! level in `authorized_keys` is what it may send), and prints, counts or
//! runs a pCPU kernel over what they send; WRITEs land in its blob, and
//! the fingerprint regions they touched are hashed again so the blob's
//! record (a named blob's stored one too) follows its bytes.
//!
//! The transport options are the caller's (the `pfs` grammar's): it passes
//! a [`crate::gram::Target`] to [`publish`] and a bound listener to
//! [`Subscriber::serve`].

mod publish;
mod subscribe;

use std::path::PathBuf;
use std::time::Duration;

pub use publish::{publish, Published};
pub use subscribe::{Counts, SubEvent, Subscriber};

use crate::blob::BlobArgs;
use crate::keys::{ClientAuthArgs, KeysError, ServerAuthArgs};
use crate::stream::StreamError;

#[cfg(feature = "clap")]
const PUB_HELP: &str = "Examples:
  printf 'a\\nb\\nc\\n' | pfs pub --to 127.0.0.1:7879 --size 64M   # three MESSAGEs, one a line
  tail -f app.log | pfs pub --to 127.0.0.1:7879 --batch 256 --linger-ms 5
  pfs pub --to 127.0.0.1:7879 --input events.bin --record-size 64 --json
  pfs pub --to 127.0.0.1:7879 --input patch.bin --write-at 1M   # WRITEs at 1 MiB (replication)
  printf '0 4K\\n1M 64K\\n' | pfs pub --to 127.0.0.1:7879 --refs   # REFERENCEs, for pfs sub --kernel
  pfs pub --to sub.example:7879 --identity ~/.config/pfs/identity --server-key sub.pub

Both sides hold the same blob (same --size and --seed, or the same --blob-name): a stream starts
only on matching fingerprints. Records are batched, --batch a gram, a partial batch sent after
--linger-ms without input and at the end; pfs pub exits once the subscriber applied every gram.";

#[cfg(feature = "clap")]
const SUB_HELP: &str = "Examples:
  pfs sub --listen 127.0.0.1:7879 --size 64M --print        # each message on its own line
  pfs sub --listen 127.0.0.1:7879 --size 64M --count --once --json
  pfs sub --listen 127.0.0.1:7879 --kernel crc32c           # a pCPU kernel over every REFERENCE
  pfs sub --blob-name replica --no-fill --blob-keep         # a replica: WRITEs land in the named blob
  pfs sub --listen 0.0.0.0:7879 --authorized-keys keys      # keys required; `stream=ref` or
                                                            # `stream=message` on a key's line narrows it

A publisher that breaks the rules (an entry outside the blob, a WRITE without the right, garbage)
ends only its own session, the blob as its last good gram left it; the next one is served.
The listening line and reports go to stderr with --print (stdout carries the messages).";

/// `pfs pub`'s options (its transport options are the caller's).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(after_help = PUB_HELP))]
pub struct PubArgs {
    /// Subscriber address: host:port for tcp and udp, the socket path for unix and shm.
    #[cfg_attr(feature = "clap", arg(long, value_name = "ADDR"))]
    pub to: String,
    /// Read records from this file [default: stdin].
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub input: Option<PathBuf>,
    /// Fixed-size binary records of N bytes (the last may be shorter) instead of one record a line.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = crate::parse::parse_size_u32))]
    pub record_size: Option<u32>,
    /// Records per gram (fewer when the subscriber's gram limits are reached first).
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 1024,
                                     value_parser = clap::value_parser!(u32).range(1..)))]
    pub batch: u32,
    /// Send a partial batch once no record has come for this many milliseconds.
    #[cfg_attr(feature = "clap", arg(long, value_name = "MS", default_value_t = 10))]
    pub linger_ms: u64,
    /// Publish the records as WRITEs into the subscriber's blob at successive offsets from
    /// OFFSET (lines keep their newline: the input's bytes land unchanged), not as MESSAGEs.
    /// This blob gets the same bytes.
    #[cfg_attr(feature = "clap", arg(long, value_name = "OFFSET", value_parser = crate::parse::parse_size))]
    pub write_at: Option<u64>,
    /// Each input line is `OFFSET LEN` (sizes as K/M/G): published as a REFERENCE to those bytes
    /// of the blob both sides hold (what `pfs sub --kernel` computes over), not as a MESSAGE.
    #[cfg_attr(feature = "clap", arg(long, conflicts_with_all = ["write_at", "record_size"]))]
    pub refs: bool,
    /// Longest to wait for the subscriber: for room in its window, and for its last APPLIED (seconds).
    #[cfg_attr(feature = "clap", arg(long, value_name = "SECS", default_value_t = 30.0))]
    pub timeout: f64,
    /// Keys and encryption.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub auth: ClientAuthArgs,
    /// Blob (the same bytes as the subscriber's).
    #[cfg_attr(feature = "clap", command(flatten))]
    pub blob: BlobArgs,
    /// Print the report as JSON on stdout.
    #[cfg_attr(feature = "clap", arg(long))]
    pub json: bool,
}

/// `pfs sub`'s options (its transport options are the caller's).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "clap", command(after_help = SUB_HELP,
    group = clap::ArgGroup::new("action").args(["print", "count", "kernel"])))]
pub struct SubArgs {
    /// Address to listen on: host:port for tcp and udp (loopback unless given), a socket path for
    /// unix and shm.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "ADDR", default_value = "127.0.0.1:7879")
    )]
    pub listen: String,
    /// Write every MESSAGE to stdout, one a line (reports then go to stderr).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "json"))]
    pub print: bool,
    /// With --print: the messages' bytes only, no newline after each.
    #[cfg_attr(feature = "clap", arg(long, requires = "print"))]
    pub raw: bool,
    /// Count the entries of every kind and their bytes; in the report.
    #[cfg_attr(feature = "clap", arg(long))]
    pub count: bool,
    /// Run this built-in read-only pCPU kernel over every REFERENCE entry (fnv1a64, xxh3,
    /// crc32c, sum, count:B, histogram, gather); its result is in the report. A key needs
    /// the `exec` right.
    #[cfg_attr(feature = "clap", arg(long, value_name = "KERNEL"))]
    pub kernel: Option<String>,
    /// Serve one publisher, then exit with its status.
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "max_sessions"))]
    pub once: bool,
    /// Exit after this many connections (publishers served, refused or denied), with the last one's status.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub max_sessions: Option<u64>,
    /// Most bytes of one gram taken (its frame body).
    #[cfg_attr(feature = "clap", arg(long, default_value = "4M", value_parser = crate::parse::parse_size_u32))]
    pub max_gram: u32,
    /// Keys and admission (`stream=ref|message` on a key's line limits what it may send).
    #[cfg_attr(feature = "clap", command(flatten))]
    pub auth: ServerAuthArgs,
    /// Blob.
    #[cfg_attr(feature = "clap", command(flatten))]
    pub blob: BlobArgs,
    /// Print JSON on stdout, one object a line and event.
    #[cfg_attr(feature = "clap", arg(long))]
    pub json: bool,
}

/// Why `pfs pub` or `pfs sub` stopped.
#[derive(Debug, thiserror::Error)]
pub enum PubSubError {
    /// A duration option that is not a positive number of seconds.
    #[error("{option} must be a positive number of seconds (got {got})")]
    Seconds {
        /// The option.
        option: &'static str,
        /// Its value.
        got: f64,
    },
    /// `--record-size 0`.
    #[error("--record-size must be at least 1 byte")]
    EmptyRecords,
    /// The input file could not be opened.
    #[error("--input {}: {source}", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading the input failed.
    #[error("reading the input: {0}")]
    Read(#[source] std::io::Error),
    /// A `--refs` line that is not `OFFSET LEN`.
    #[error("--refs: input line {line} is not `OFFSET LEN`: {text:?}")]
    BadRef {
        /// Its number, from 1.
        line: u64,
        /// What it says.
        text: String,
    },
    /// The subscriber's window stayed full.
    #[error("the subscriber applied nothing for {0:?}: its window stayed full (see --timeout)")]
    Stalled(Duration),
    /// `--kernel` names no kernel.
    #[error(transparent)]
    Kernel(#[from] pfs_exec::kernel::KernelError),
    /// `--kernel` names a kernel that writes.
    #[error("--kernel {}: in-place kernels would modify the blob the publishers reference", .0.name())]
    InPlaceKernel(pfs_exec::kernel::KernelId),
    /// The key options could not become security settings.
    #[error(transparent)]
    Keys(#[from] KeysError),
    /// The blob, the connection or the stream's opening.
    #[error(transparent)]
    Lib(#[from] crate::Error),
    /// The stream ended in an error.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// A sent WRITE could not go into this side's blob.
    #[error("writing into this blob: {0}")]
    Write(#[from] pfs_blob::BlobWriteError),
    /// The blob's fingerprint record could not be updated.
    #[error("updating the blob's fingerprint: {0}")]
    Record(#[from] pfs_blob::BlobError),
    /// The listener failed.
    #[error("accepting a connection: {0}")]
    Accept(#[source] std::io::Error),
}

/// MB/s, decimal.
fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// The fingerprint regions (of `region_size` bytes) that `len` bytes at
/// `offset` touch: those a write makes stale.
fn regions_touched(offset: u64, len: u64, region_size: u32) -> std::ops::Range<usize> {
    let rs = u64::from(region_size.max(1));
    if len == 0 {
        return 0..0;
    }
    (offset / rs) as usize..((offset + len - 1) / rs) as usize + 1
}

#[cfg(test)]
mod tests {
    use super::regions_touched;

    #[test]
    fn a_write_touches_the_regions_it_overlaps() {
        assert_eq!(regions_touched(0, 0, 4096), 0..0);
        assert_eq!(regions_touched(0, 1, 4096), 0..1);
        assert_eq!(regions_touched(4095, 2, 4096), 0..2);
        assert_eq!(regions_touched(8192, 4096, 4096), 2..3);
    }
}
