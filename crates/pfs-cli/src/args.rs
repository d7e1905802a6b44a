//! Command-line grammar (clap derive). Shared option groups — blob, schedule,
//! output — are defined once and flattened into the subcommands that use them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use packetfs::blob::BlobArgs;
pub use packetfs::endpoint::{TransportArg, TransportArgs};
pub use packetfs::keys::{ClientAuthArgs, ServerAuthArgs};
pub use packetfs::parse::{parse_size, parse_size_u32, parse_u64, EncodingArg, PatternArg};
pub use packetfs::pubsub::{PubArgs, SubArgs};

const ABOUT: &str = "PacketFS: ship references (offset, length) into a blob both peers hold, not bytes.";

const AFTER_HELP: &str = "\
Sizes accept K/M/G/T (binary: KiB, MiB, …), KB/MB/GB (decimal) or plain bytes.
Rates are decimal MB/s (10^6 bytes per second).

Exit codes: 0 ok · 1 failure · 2 usage · 3 integrity MISMATCH · 4 refused by peer (pfs serve --once: the peer was refused) · 5 transport failure ·
6 partial transfer (entries not written, unreadable or changed while sent; listed) · 7 the peer broke the protocol ·
8 authentication failed (server key unknown or changed, our key refused, keys required) ·
9 the server shut down mid-session (\"the server is shutting down; run again to resume\")

Examples:
  pfs bench                                   # loopback suite: iperf3 + all PFS modes, one table
  pfs serve --listen 127.0.0.1:7878           # receiver (loopback only unless you say otherwise)
  pfs send --to 127.0.0.1:7878 --mode offset  # sender, same --size/--seed as the receiver
  pfs blob create --blob-name b1 --size 1G --seed 42 --blob-keep
  pfs serve --dest /srv/pfs/files             # receive files, deduplicated, one copy on disk
  pfs send ./build-42 --to 127.0.0.1:7878:builds --stats   # send a tree; only new chunks travel
  pfs keygen                                  # your key pair: ~/.config/pfs/identity{,.pub}
  pfs serve --listen 0.0.0.0:7878 --dest D --authorized-keys keys   # between hosts: keys required
  pfs send ./docs --to backup.example:7878 --server-key server.pub           # protected, server key pinned
  pfs mount 127.0.0.1:7878 /mnt/pfs           # the server's tree, read lazily (pfs umount /mnt/pfs)
  pfs sub --print & printf 'a\\nb\\n' | pfs pub --to 127.0.0.1:7879   # streaming: your own records as grams";

/// `pfs VERSION (GIT_REV)`: the revision `git describe` gave at build time.
pub const VERSION_LINE: &str = concat!("pfs ", env!("CARGO_PKG_VERSION"), " (", env!("PFS_GIT_REV"), ")");

/// The `pfs` command.
#[derive(Debug, Parser)]
#[command(name = "pfs", about = ABOUT, after_help = AFTER_HELP, disable_version_flag = true)]
#[command(subcommand_required = false, arg_required_else_help = true)]
pub struct Cli {
    /// Print the version (`pfs VERSION (GIT_REV)`) and exit.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// With --version: print `{"name":"pfs","version":…,"commit":…}` instead.
    #[arg(long, requires = "version")]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// `pfs bench …`: the `pfs-bench` program's arguments, passed on unread.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Its flags and study (`pfs bench --help` lists them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<std::ffi::OsString>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, inspect, verify, list or remove named blobs.
    #[command(
        subcommand,
        after_help = "Examples:
  pfs blob create --blob-name b1 --size 1G --seed 42
  pfs blob create --blob-name b2 --size 1G --huge-dir /mnt/huge
  pfs blob info --blob-name b1 --json
  pfs blob verify --blob-name b1
  pfs blob list
  pfs blob rm --blob-name b1"
    )]
    Blob(BlobCommand),
    /// Send files and trees (deduplicated against the receiver's store), or a seeded descriptor schedule.
    #[command(after_help = "Examples:
  pfs send ./dataset --to 10.0.0.2:7878                   # files: only chunks the receiver lacks travel
  pfs send a.img b/ --to 10.0.0.2:7878:backups --stats    # into backups/ under the receiver's --dest
  pfs send ./src --to 127.0.0.1:7878 -n -i --exclude target --exclude '*.o'   # itemized dry run
  pfs send ./logs --to 127.0.0.1:7878 --compress --json
  pfs send --to 127.0.0.1:7878 --mode offset --bytes 16G
  pfs send --to 127.0.0.1:7878 --mode arith --pattern sequential --integrity fnv1a --json
  pfs send --to 127.0.0.1:7878 --mode payload --bytes 4G --log-interval 1
  pfs send --to 127.0.0.1:7878 --mode offset --integrity-sample 16   # ask the receiver to check 1 gram in 16
  pfs send --transport shm --to /tmp/pfs.sock --mode offset   # same host, shared-memory rings

A gram whose digest does not match on the receiver is repaired (it NAKs it, the sender
sends just its bytes, the receiver writes and checks them again): the session then ends
OK, with repaired_grams / repaired_bytes in the report (exit 3 only for a mismatch left).")]
    Send(SendArgs),
    /// Receive sessions: execute every gram over this host's blob and report.
    #[command(after_help = "Examples:
  pfs serve                                   # 127.0.0.1:7878, 1 GiB blob from seed 0x5eed
  pfs serve --listen 0.0.0.0:7878             # explicit: accept remote senders
  pfs serve --once --json                     # one session, JSON report, exit status = its result
  pfs serve --blob-name shared --huge-dir /mnt/huge
  pfs serve --transport shm --listen /tmp/pfs.sock   # same-host senders over shared-memory rings
  pfs serve --blob-name shared --no-repair    # count mismatches, never rewrite the blob
  pfs serve --integrity-sample 16             # check one gram in 16, whatever senders ask
  pfs serve --dest /srv/pfs/files             # receive files (one copy; --store S adds a chunk history)
  pfs serve --config /etc/pfs/serve.toml --log-format json   # deployed: dist/pfs-serve.toml, dist/pfs-serve.service")]
    Serve(ServeArgs),
    /// Publish records read from stdin or a file to a `pfs sub`, batched into stream grams.
    Pub {
        #[command(flatten)]
        args: PubArgs,
        #[command(flatten)]
        transport: TransportArgs,
    },
    /// Subscribe: take publishers (`pfs pub`, the library's Publication) one at a time, execute their grams.
    Sub {
        #[command(flatten)]
        args: SubArgs,
        #[command(flatten)]
        transport: TransportArgs,
    },
    /// Execute a kernel over a descriptor schedule on this host's blob (pCPU), on N pThreads.
    #[command(after_help = "Examples:
  pfs exec --kernel xxh3 --bytes 16G                      # one pThread, random schedule
  pfs exec --kernel sum --pthreads 2 --pattern sequential --encoding arith
  pfs exec --kernel histogram --json
  pfs exec --kernel xor:0x5a --bytes 1G                   # in place, one pThread

  pfs exec --kernel user:/tmp/sum.so                      # a user kernel (examples/kernels/)
  pfs exec --kernel crc32c --gram-file rec/session-….grams  # a schedule recorded by pfs serve --record rec

Kernels: fnv1a64, xxh3, crc32c, sum, count:B, histogram, xor:K, add:K, gather, user:FILE.so[:PREFIX]")]
    Exec(ExecArgs),
    /// Run the benchmark suite on loopback: conventional baselines and every PFS mode, one table.
    ///
    /// Runs the `pfs-bench` program (`cargo build --release -p pfs-bench`); `pfs bench --help` is its help.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
    /// Create a static key pair (x25519, for Noise): the private key to FILE (0600), the public line to FILE.pub.
    #[command(after_help = "Examples:
  pfs keygen                                  # ~/.config/pfs/identity and identity.pub
  pfs keygen -f /etc/pfs/server.key -C server-a
  pfs keygen -f ./id --force --json           # replace an existing key; print JSON

The public line (pfs-x25519 BASE64 [# comment]) is what the other side lists in
its authorized keys (pfs serve --authorized-keys) or known hosts (pfs send,
pfs mount: --server-key, known_hosts).")]
    Keygen(KeygenArgs),
    /// Mount a tree a `pfs serve --dest` holds, read-only and lazily: files travel when read.
    #[command(after_help = "Examples:
  pfs mount 127.0.0.1:7878 /mnt/pfs               # all the server's tree; returns once mounted
  pfs mount 10.0.0.2:7878:builds/42 /mnt/b42 --server-key server.pub
  pfs mount 127.0.0.1:7878 /mnt/pfs --prefetch    # fetch everything in the background
  pfs mount 127.0.0.1:7878 /mnt/pfs -f --json     # stay in the foreground; JSON report at unmount
  pfs mount 127.0.0.1:7878 /mnt/pfs --passthrough # cached files read by the kernel directly
  pfs mount 127.0.0.1:7878 /mnt/pfs --direct /run/user/0/pfs.sock   # zero-copy reads for local apps
  getfattr -n user.pfs.stats --only-values /mnt/pfs   # what was fetched so far (JSON)
  pfs umount /mnt/pfs

The listing arrives first (one round trip); a file's chunks travel when it is
read, and only those the local cache (--cache: one per server by default)
lacks. Every chunk is checked against its BLAKE3 before it is kept or
returned. If the server goes away, uncached reads fail with EIO within
--timeout; cached files stay readable. The mount is read-only.")]
    Mount(MountArgs),
    /// Unmount a `pfs mount` (as `fusermount -u`).
    #[command(after_help = "Examples:
  pfs umount /mnt/pfs
  pfs umount --lazy /mnt/pfs      # detach now even if files are open")]
    Umount(UmountArgs),
}

/// `pfs mount`
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The server and the directory to mount: `HOST:PORT[:DIR]` (DIR below what the key may read),
    /// or `SOCKET[:DIR]` with --transport unix.
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// Where to mount it (an existing directory).
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// The local chunk cache, one mount at a time [default: $XDG_CACHE_HOME/pfs/mount/HOST_PORT,
    /// else ~/.cache/pfs/mount/HOST_PORT]. Mounts that give the same DIR (one after another)
    /// never fetch a chunk it holds, from any server.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Most bytes the cache holds (chunks past it are kept in memory, up to 256 MiB).
    #[arg(long, default_value = "16G", value_parser = parse_size)]
    pub cache_size: u64,
    /// Longest a read waits for the server before it fails with EIO (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub timeout: f64,
    /// FUSE worker threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Fetch every file's missing chunks in the background after mounting.
    #[arg(long)]
    pub prefetch: bool,
    /// Open files whose chunks are all cached on a backing file the kernel reads directly
    /// (FUSE passthrough; each such file is written out once more in the cache: CACHE/files).
    #[arg(long)]
    pub passthrough: bool,
    /// Let other users see the mount (needs user_allow_other in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// Serve applications of this host on a pfs-ipc socket: they open a file with one request
    /// and read it from shared memory with no system call (pfs_mount::direct::DirectClient).
    #[arg(long, value_name = "SOCKET")]
    pub direct: Option<PathBuf>,
    /// Bytes of the shared memory files are placed in for --direct (each opened file once).
    #[arg(long, default_value = "1G", value_parser = parse_size, requires = "direct")]
    pub direct_size: u64,
    /// Refuse a tree with more entries than this.
    #[arg(long, default_value_t = 1 << 24)]
    pub max_entries: u32,
    /// Stay in the foreground until unmounted (Ctrl-C unmounts); default: return once mounted.
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Where the background process writes its warnings (default: nowhere).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Print JSON: the mount line, and (in the foreground) the report at unmount.
    #[arg(long)]
    pub json: bool,
    /// Logs (warnings of the running mount: failed reads, a lost server).
    #[command(flatten)]
    pub log: LogArgs,
    /// Transport.
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Keys.
    #[command(flatten)]
    pub auth: ClientAuthArgs,
}

/// `pfs umount`
#[derive(Debug, Args)]
pub struct UmountArgs {
    /// The mount point.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
    /// Detach now even if files are open (they keep working until closed).
    #[arg(long)]
    pub lazy: bool,
}

/// `pfs blob …`
#[derive(Debug, Subcommand)]
pub enum BlobCommand {
    /// Create (or reuse) a named blob, fill it and record its fingerprint.
    Create {
        /// Blob options.
        #[command(flatten)]
        blob: BlobArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a named blob's recorded size, fill, fingerprint and backing.
    Info {
        /// Blob name.
        #[arg(long = "blob-name")]
        name: String,
        /// hugetlbfs directory the blob may live in.
        #[arg(long)]
        huge_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Recompute a named blob's fingerprint and report regions that differ from the record.
    Verify {
        /// Blob name.
        #[arg(long = "blob-name")]
        name: String,
        /// hugetlbfs directory the blob may live in.
        #[arg(long)]
        huge_dir: Option<PathBuf>,
        /// Threads (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a named blob (unlink only: processes that map it keep their view).
    Rm {
        /// Blob name.
        #[arg(long = "blob-name")]
        name: String,
        /// hugetlbfs directory the blob may live in.
        #[arg(long)]
        huge_dir: Option<PathBuf>,
    },
    /// List named blobs.
    List {
        /// hugetlbfs directory to look in as well.
        #[arg(long)]
        huge_dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Transfer mode on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// PFS-With-Payload: the slab carries the referenced bytes.
    Payload,
    /// Native offset-only: descriptors only, absolute encoding.
    Offset,
    /// Native arithmetic: descriptors only, delta/varint encoding.
    Arith,
}

impl ModeArg {
    /// The wire mode.
    pub fn mode(self) -> pfs_wire::Mode {
        match self {
            Self::Payload => pfs_wire::Mode::Payload,
            Self::Offset => pfs_wire::Mode::Offset,
            Self::Arith => pfs_wire::Mode::Arith,
        }
    }
}

/// Integrity algorithm on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IntegrityArg {
    /// XXH3-64 (fast; default).
    Xxh3,
    /// FNV-1a 64 (byte-serial; for comparison with the original figures).
    Fnv1a,
    /// No check.
    None,
}

impl IntegrityArg {
    /// The wire algorithm.
    pub fn alg(self) -> pfs_wire::IntegrityAlg {
        match self {
            Self::Xxh3 => pfs_wire::IntegrityAlg::Xxh3,
            Self::Fnv1a => pfs_wire::IntegrityAlg::Fnv1a,
            Self::None => pfs_wire::IntegrityAlg::None,
        }
    }
}

/// The seeded schedule a sender runs.
#[derive(Debug, Clone, Args)]
pub struct ScheduleArgs {
    /// Descriptors per gram.
    #[arg(long, default_value_t = 1024)]
    pub desc_per_gram: u32,
    /// Longest descriptor.
    #[arg(long, default_value = "256K", value_parser = parse_size_u32)]
    pub max_len: u32,
    /// Offset/length alignment (power of two).
    #[arg(long, default_value_t = 64)]
    pub align: u32,
    /// Number of grams to send.
    #[arg(long, conflicts_with = "bytes")]
    pub grams: Option<u64>,
    /// Effective bytes to send [default: 4G].
    #[arg(long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Access pattern.
    #[arg(long, value_enum, default_value_t = PatternArg::Random)]
    pub pattern: PatternArg,
    /// Schedule generator seed.
    #[arg(long, default_value = "1", value_parser = parse_u64)]
    pub schedule_seed: u64,
    /// Payload mode: most payload bytes per gram (cache-sized grams keep the digest pass and the kernel copy in L2).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub gram_payload_max: u64,
}

/// `pfs send`
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Files and directories to send: each arrives under its own name, and `DIR/` sends DIR's
    /// contents (as rsync: `pfs send photos/ --to h:7878:pics` fills `pics`). Without PATH,
    /// `pfs send` runs a seeded descriptor schedule against the receiver's blob (a benchmark).
    #[arg(value_name = "PATH",
          conflicts_with_all = ["mode", "integrity", "integrity_sample", "grams", "bytes", "pattern", "size", "seed", "blob_name", "fill_file", "no_fill"])]
    pub paths: Vec<PathBuf>,
    /// Receiver address: host:port for tcp, the socket path for unix and shm; with PATH…,
    /// `ADDR:REMOTE_DIR` writes under REMOTE_DIR of the receiver's --dest.
    #[arg(long, value_name = "ADDR")]
    pub to: String,
    /// File transfer options.
    #[command(flatten)]
    pub files: FileSendArgs,
    /// Transport.
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Keys and encryption.
    #[command(flatten)]
    pub auth: ClientAuthArgs,
    /// Transfer mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Offset)]
    pub mode: ModeArg,
    /// Integrity algorithm, per gram and end to end.
    #[arg(long, value_enum, default_value_t = IntegrityArg::Xxh3)]
    pub integrity: IntegrityArg,
    /// Ask the receiver to check one gram in N (gram seq a multiple of N): the others are
    /// neither hashed here nor read there. The receiver decides (pfs serve --integrity-sample
    /// overrides); the report says how many grams and bytes were checked.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub integrity_sample: u16,
    /// If the receiver's blob differs (other seed, older copy, empty), first bring it to this blob's bytes, moving only
    /// the blocks that differ (it must allow it: pfs serve --allow-catch-up). E.g. pfs send --catch-up --blob-name a --no-fill HOST:7878
    #[arg(long)]
    pub catch_up: bool,
    /// Schedule.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Blob.
    #[command(flatten)]
    pub blob: BlobArgs,
    /// Run options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of `pfs send PATH…` (file transfer).
#[derive(Debug, Clone, Args)]
pub struct FileSendArgs {
    /// Average content-defined chunk size (min = avg/4, max = 4 × avg).
    #[arg(long, default_value = "32K", value_parser = parse_size_u32, requires = "paths")]
    pub chunk_avg: u32,
    /// Compress literal chunks with zstd (kept only where it saves bytes).
    #[arg(long, requires = "paths")]
    pub compress: bool,
    /// zstd level for --compress.
    #[arg(long, default_value_t = 3, requires = "compress")]
    pub compress_level: i32,
    /// List what would travel (names; with -i the changes) and how (descriptors, literal bytes); send no data.
    #[arg(short = 'n', long, requires = "paths")]
    pub dry_run: bool,
    /// One line per entry that travels or changes, as rsync's `YXcstpoguax NAME`; `?` marks what the
    /// sender cannot know (the README lists which letters pfs knows); `items` in --json.
    #[arg(short = 'i', long, requires = "paths")]
    pub itemize_changes: bool,
    /// Remove, in each directory sent, what the source lacks, as rsync's --delete (`--exclude`d
    /// names stay; nothing if any entry failed). `pfs send site/ --to h:7878:www --delete`.
    #[arg(long, requires = "paths")]
    pub delete: bool,
    /// Find unchanged files by content, not size and mtime, as rsync's -c: every file is read
    /// on both sides (by default a file the receiver wrote is compared by content anyway).
    #[arg(short = 'c', long, requires = "paths")]
    pub checksum: bool,
    /// Write runs of zeros at the destination. By default (unlike rsync, which needs -S) sparse
    /// files stay sparse: holes are never read at the sender, and zeros land as holes.
    #[arg(long, requires = "paths")]
    pub no_sparse: bool,
    /// Most bytes per second to send, in rsync's units: KiB unless suffixed (K M G: 1024s,
    /// KB MB GB: 1000s, B: bytes), fractions allowed, 0 = no limit. `--bwlimit 10M`.
    #[arg(long, value_name = "RATE", value_parser = pfs_session::files::parse_rate, requires = "paths")]
    pub bwlimit: Option<u64>,
    /// Archive, as rsync's -a: what pfs keeps anyway (recursion, symlinks, permissions, mtimes)
    /// plus -o -g. Not -H -X -A (as rsync), nor devices and special files (never sent).
    #[arg(short = 'a', long, requires = "paths")]
    pub archive: bool,
    /// Files that are hard links of one another arrive as hard links (rsync's -H).
    #[arg(short = 'H', long, requires = "paths")]
    pub hard_links: bool,
    /// Owner, as a numeric uid (no name mapping), applied when the receiver runs as root (-o).
    #[arg(short = 'o', long, requires = "paths")]
    pub owner: bool,
    /// Group, as a numeric gid, applied when the receiver runs as root (-g).
    #[arg(short = 'g', long, requires = "paths")]
    pub group: bool,
    /// Extended attributes in the `user.` namespace (rsync's -X; others are never sent).
    #[arg(short = 'X', long, requires = "paths")]
    pub xattrs: bool,
    /// POSIX ACLs, carried as their system.posix_acl_* attributes (rsync's -A); never wider
    /// than the mode at the receiver, named users/groups only with -o/-g to a root receiver.
    #[arg(short = 'A', long, requires = "paths")]
    pub acls: bool,
    /// Skip symlinks whose target is absolute or climbs out of the destination, as rsync's
    /// --safe-links (each is listed; skipped is not failed). By default links are copied as they are.
    #[arg(long, requires = "paths")]
    pub safe_links: bool,
    /// Skip paths matching this glob (repeatable; without `/` it matches any file name, like rsync).
    #[arg(long, value_name = "PATTERN", requires = "paths")]
    pub exclude: Vec<String>,
    /// Print rsync-style transfer statistics.
    #[arg(long, requires = "paths")]
    pub stats: bool,
    /// Re-read every file and fetch the whole receiver index (no quick-check or index cache).
    #[arg(long, requires = "paths")]
    pub no_cache: bool,
    /// Chunk every file before asking the receiver anything (by default files
    /// not in the quick-check cache are first hashed whole and the receiver
    /// asked which it already holds; only the rest are chunked).
    #[arg(long, requires = "paths")]
    pub no_probe: bool,
    /// Cache directory [default: $XDG_CACHE_HOME/pfs or ~/.cache/pfs].
    #[arg(long, value_name = "DIR", requires = "paths")]
    pub cache_dir: Option<PathBuf>,
    /// Chunking threads (0 = all cores).
    #[arg(long, default_value_t = 0, requires = "paths")]
    pub threads: usize,
    /// Progress on stderr: a bar on a terminal (auto unless --json, always); elsewhere a plain line every
    /// --log-interval seconds, 1 by default (always; auto only with --log-interval). E.g. --progress always 2>send.log
    #[arg(long, value_enum, default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,
}

/// When to draw a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// A bar when stderr is a terminal and --json is not given; elsewhere lines only with --log-interval.
    Auto,
    /// A bar on a terminal, plain lines elsewhere.
    Always,
    /// Never.
    Never,
}

/// `pfs exec`
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Kernel: fnv1a64, xxh3, crc32c, sum, count:B, histogram, xor:K, add:K, gather, or
    /// `user:FILE.so[:PREFIX]` (see examples/kernels/).
    #[arg(long, default_value = "xxh3")]
    pub kernel: String,
    /// Worker threads (pThreads) the schedule is sharded across.
    #[arg(long, default_value_t = 1)]
    pub pthreads: usize,
    /// Encoding the schedule is executed from.
    #[arg(long, value_enum, default_value_t = EncodingArg::Absolute)]
    pub encoding: EncodingArg,
    /// Do not pin pThread i to CPU i.
    #[arg(long)]
    pub no_pin: bool,
    /// Execute the schedule recorded in this file of grams (`pfs serve --record`)
    /// instead of generating one.
    #[arg(long, value_name = "FILE")]
    pub gram_file: Option<PathBuf>,
    /// Schedule.
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Blob.
    #[command(flatten)]
    pub blob: BlobArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Options of a running session, shared by `send` and `serve`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Print progress every SECS seconds (stderr; every second by default on a terminal).
    #[arg(long, value_name = "SECS")]
    pub log_interval: Option<f64>,
    /// Pin the session thread(s) to this CPU.
    #[arg(long, value_name = "CPU")]
    pub pin: Option<usize>,
    /// Socket buffer size (0 = kernel autotuning).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub sock_buf: u64,
    /// Print JSON on stdout (`serve`: one JSON object per line and event).
    #[arg(long)]
    pub json: bool,
}

/// How much the server logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevelArg {
    /// Failures of the server itself.
    Error,
    /// Also sessions that failed, refused or denied connections.
    Warn,
    /// Also one line per session, admissions, start and stop.
    Info,
    /// Also every accepted connection.
    Debug,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object a line, the event's fields beside timestamp, level and message.
    Json,
}

/// The server's logs (stderr; its results stay on stdout).
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Least severe log events written to stderr.
    #[arg(long, value_enum, default_value_t = LogLevelArg::Info)]
    pub log_level: LogLevelArg,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text)]
    pub log_format: LogFormatArg,
}

/// `pfs serve`
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file: one key per flag, its long name with `_` for `-`
    /// (`max_clients = 8`); relative paths are relative to the file. Flags given here override it.
    /// Example: dist/pfs-serve.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on: host:port for tcp (loopback by default; any other address must be
    /// given explicitly), a socket path for unix and shm [default: 127.0.0.1:7878, or
    /// $XDG_RUNTIME_DIR/pfs.sock (else /tmp/pfs-UID.sock) for unix and shm].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Transport.
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Keys and admission.
    #[command(flatten)]
    pub auth: ServerAuthArgs,
    /// Serve one session, then exit with its status.
    #[arg(long, conflicts_with = "max_sessions")]
    pub once: bool,
    /// Exit after this many sessions.
    #[arg(long)]
    pub max_sessions: Option<u64>,
    /// Sessions served at once (more get ERROR BUSY).
    #[arg(long, default_value_t = 4)]
    pub max_clients: usize,
    /// Sessions one client key may run at once (more get ERROR BUSY), so that no key can hold
    /// every slot [default: max(1, max-clients / 2)]. Plain sessions count only toward
    /// --max-clients.
    #[arg(long, value_name = "N")]
    pub max_per_key: Option<usize>,
    /// Most descriptors per gram accepted.
    #[arg(long, default_value_t = 65_536)]
    pub max_desc_per_gram: u32,
    /// Largest payload slab accepted per gram.
    #[arg(long, default_value = "1G", value_parser = parse_size_u32)]
    pub max_payload: u32,
    /// Also run this read-only pCPU kernel over every received gram (e.g. xxh3, crc32c, sum, histogram).
    #[arg(long, value_name = "KERNEL")]
    pub exec: Option<String>,
    /// Record each session's grams (headers and descriptor tables, no payload) to
    /// `DIR/session-<nonce>.grams`, for `pfs exec --gram-file`.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
    /// Recompute the blob fingerprint at start and refuse to serve if it differs from the record.
    #[arg(long)]
    pub verify_blob: bool,
    /// Never repair this blob: a gram whose digest does not match is only counted (and the
    /// session exits 3), as before the corrections plane. By default a mismatching gram is
    /// NAKed and the sender's REPAIR bytes are written into the blob (a named blob keeps them).
    #[arg(long)]
    pub no_repair: bool,
    /// Check one gram in N whatever the sender asks (1: every gram); without it the sender's
    /// --integrity-sample is taken. Unchecked grams are bounds-checked, not read.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub integrity_sample: Option<u16>,
    /// Most bytes one session may repair (rewrite in the blob); mismatches past it are counted.
    #[arg(long, default_value = "1G", value_parser = parse_size, conflicts_with = "no_repair")]
    pub max_repair_bytes: u64,
    /// Let `pfs send --catch-up` rewrite this blob to the sender's bytes when they differ (one sender at a time; with
    /// --blob-name the bytes persist and a killed catch-up resumes). E.g. pfs serve --allow-catch-up --blob-name b --no-fill
    #[arg(long)]
    pub allow_catch_up: bool,
    /// Also keep every received chunk in this content store (blob file + chunk index; created
    /// if absent, reused across restarts) and deduplicate against it: a chunk history, at the
    /// cost of a second copy on disk. Without it, files are deduplicated against --dest's own.
    #[arg(long, value_name = "DIR", requires = "dest")]
    pub store: Option<PathBuf>,
    /// Receive files (`pfs send PATH… --to`) into this root (created if absent); nothing is
    /// written outside it. Deduplicated against the files it holds (one copy on disk; the chunk
    /// index, manifest and temporary files live in DIR/.pfs), including files put there by
    /// other means (the older version at a path a sender probes is read and indexed); on
    /// Btrfs or XFS, copied ranges share blocks (reflinks) instead of being written.
    #[arg(long, value_name = "DIR",
          conflicts_with_all = ["exec", "record", "verify_blob", "blob_name", "fill_file", "no_fill", "size", "seed",
                                "no_repair", "integrity_sample", "max_repair_bytes"])]
    pub dest: Option<PathBuf>,
    /// Most bytes the store's blob may hold; a transfer that would exceed it is refused before
    /// any destination file is touched.
    #[arg(long, default_value = "16G", value_parser = parse_size, requires = "store")]
    pub store_capacity: u64,
    /// fsync every received file before renaming it into place (the store is always synced before
    /// its index names new chunks).
    #[arg(long, requires = "dest")]
    pub fsync: bool,
    /// On SIGTERM or SIGINT: stop accepting at once, give running sessions SECS to finish, then
    /// cut them (their unfinished files are never left under their final names) and exit 0.
    /// A second signal cuts at once.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub shutdown_grace: f64,
    /// Close a `pfs mount` session that has asked for nothing for SECS (0: never), so idle
    /// mounts do not hold --max-clients slots; the mount connects again when a read needs it.
    #[arg(long, value_name = "SECS", default_value_t = 300.0, requires = "dest")]
    pub mount_idle_timeout: f64,
    /// Serve Prometheus metrics at http://IP:PORT/metrics (sessions, bytes, refusals, errors,
    /// durations, limits hit). Off by default. Unauthenticated: bind it to loopback or a private
    /// address. Example: --metrics-listen 127.0.0.1:9187
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Logs.
    #[command(flatten)]
    pub log: LogArgs,
    /// Blob.
    #[command(flatten)]
    pub blob: BlobArgs,
    /// Run options.
    #[command(flatten)]
    pub run: RunArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

/// `pfs keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Private key file (default: $XDG_CONFIG_HOME/pfs/identity or ~/.config/pfs/identity).
    #[arg(short = 'f', long = "file")]
    pub file: Option<std::path::PathBuf>,
    /// Comment appended to the public line after a `#` (e.g. user@host).
    #[arg(short = 'C', long, default_value = "")]
    pub comment: String,
    /// Replace an existing key pair.
    #[arg(long)]
    pub force: bool,
    /// Print JSON (paths, public line, fingerprint).
    #[arg(long)]
    pub json: bool,
}
