//! `pfs bench mount`: `pfs mount` against the kernel's own file system and
//! against `pfs send`, in one run on loopback. Four sections:
//!
//! - **fio** (`randread 4k`, `read 1M`; `numjobs` 1 and 2) on one file, per
//!   read path ([`ReadPath`]): tmpfs (the baseline of every ratio), the
//!   mount with its page cache warm, with `direct=1` (every read reaches
//!   the daemon), passthrough (not built), cold (fresh cache, caches
//!   dropped, remounted before each job), the zero-copy direct client (not
//!   built);
//! - **metadata**: `ls -R` and an lstat of every entry of a many-file tree
//!   through a fresh mount, again, and on tmpfs;
//! - **first byte** of a large remote file, cold: 1 byte at offset 0 and
//!   4 KiB at a seeded random offset;
//! - **tree read**: every file of the tree read through a cold mount, vs
//!   `pfs send` of the same tree into an empty destination of the same
//!   server; bytes fetched vs the tree's unique chunk bytes.
//!
//! One `pfs serve --dest DIR` (a child process) serves everything; every
//! mount is a `pfs mount --foreground` child (`served.rs`). Rows that need
//! root or `/dev/fuse` say `skipped: …`; a row that fails says why and the
//! study goes on. Rendering is in `report.rs`.

mod fio;
mod report;
mod served;
mod walk;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

pub use fio::{FioResult, Workload, WORKLOADS};
use served::{counter, drop_caches, mount_unavailable, Mount};
use walk::{copy_tree, ls_r, read_all, stat_walk, synthetic_tree, SplitMix};

use crate::child::run_client;
use crate::report::{Reason, Skip, Status};
use crate::scratch::{memory_dir, Scratch};
use crate::suite::files::tools::{start_pfs_server, PfsServer, ServeStorage};
use crate::suite::files::tree::make_random_tree;
use crate::{Binary, Outcome};

/// `pfs bench mount`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  pfs bench mount                                  # every section, default sizes (a few minutes; root for the mount rows)
  pfs bench mount --out docs/bench/mount           # also CSV, JSON, Markdown and a PNG in docs/bench/mount
  pfs bench mount --only fio --runtime 10          # the fio section alone, 10 s per job
  pfs bench mount --only metadata --tree synthetic --tree-files 20000
  pfs bench mount --only first-byte --first-byte-size 4G
  pfs bench mount --tree ./some/tree --only tree-read

Sections (--only matches a section name or a row label): fio, metadata,
first-byte, tree-read.

fio: ioengine=psync, readonly, invalidate=0, group_reporting, JSON output;
randread bs=4k and read bs=1M at numjobs 1 and 2. Timed rows run
--runtime seconds after --ramp seconds not counted. Cold rows read the file
once per job (no ramp, stopped at --runtime) from a fresh mount with a fresh
cache after sync; echo 3 > /proc/sys/vm/drop_caches. Ratios are against
the tmpfs row of the same workload and numjobs, measured in the same run.

The many-file tree (--tree): `linux` (default) is version A of the pair that
scripts/fetch-version-pair.sh fetches and caches for `pfs bench files`
(78.6k files, 1.3 GB); when it cannot be had, the study says why and uses
the synthetic tree instead: --tree-files files (default 78,000) of random
bytes, 64 B to 64 KiB log-uniform, in 4,680 nested directories, drawn from
splitmix64 seeded with --seed.

Mount rows need root and /dev/fuse (each says `skipped: …` otherwise);
passthrough and the zero-copy direct client are not built yet and print —.
Every server and mount the study starts is stopped and unmounted on every
exit path, Ctrl-C included.")]
pub struct BenchMountArgs {
    /// Bytes of the fio test file. Example: --file-size 1G
    #[arg(long, default_value = "256M", value_parser = crate::args::parse_size)]
    pub file_size: u64,
    /// Seconds each timed fio job is measured (cold jobs: at most this long).
    #[arg(long, default_value_t = 5.0)]
    pub runtime: f64,
    /// Seconds each timed fio job runs before it is measured.
    #[arg(long, default_value_t = 1.0)]
    pub ramp: f64,
    /// FUSE worker threads of every mount (pfs mount --threads).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    /// Bytes of the remote file of the first-byte rows. Example: --first-byte-size 4G
    #[arg(long, default_value = "1G", value_parser = crate::args::parse_size)]
    pub first_byte_size: u64,
    /// Cold mounts per first-byte row (each row reports its median).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// The many-file tree: linux (version A of scripts/fetch-version-pair.sh), synthetic, or a directory.
    #[arg(long, default_value = "linux", value_name = "linux|synthetic|DIR")]
    pub tree: String,
    /// Files of the synthetic tree.
    #[arg(long, default_value_t = 78_000)]
    pub tree_files: u64,
    /// Seed of every generated byte, size and offset (splitmix64).
    #[arg(long, default_value = "0x5eed", value_parser = crate::args::parse_u64)]
    pub seed: u64,
    /// Only sections or rows whose name or label contains this text (case-insensitive); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Write mount-*.csv, mount.json, mount.md and mount.png here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// A result cell group that ran, was skipped for a stated reason, or failed:
/// its value beside the [`Status`] reasons every study uses.
#[derive(Debug, Clone, PartialEq)]
pub enum Measured<T> {
    /// Measured.
    Ok(T),
    /// Not run: why (a missing tool, no root, not built).
    Skipped(Reason),
    /// Tried and failed: why.
    Failed(Reason),
}

impl<T> Measured<T> {
    fn from(r: anyhow::Result<T>) -> Self {
        match r {
            Ok(v) => Self::Ok(v),
            Err(e) => Self::Failed(Reason::of(&e)),
        }
    }

    /// Not run, for this reason.
    pub fn skipped(why: impl Into<String>) -> Self {
        Self::Skipped(Reason::new(why))
    }

    /// Failed, for this reason.
    pub fn failed_because(why: impl Into<String>) -> Self {
        Self::Failed(Reason::new(why))
    }

    /// The value, when measured.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Self::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// Its status: ran, skipped or failed with the reason.
    pub fn status(&self) -> Status {
        match self {
            Self::Ok(_) => Status::Ran,
            Self::Skipped(w) => Status::Skipped(Skip::Unavailable(w.clone())),
            Self::Failed(w) => Status::Failed(w.clone()),
        }
    }

    /// `skipped: …` / `failed: …`, or nothing.
    pub fn why(&self) -> Option<String> {
        self.status().note()
    }

    /// The same reason for a measurement of another kind, when this one did not run.
    fn not_run<U>(&self) -> Option<Measured<U>> {
        match self {
            Self::Ok(_) => None,
            Self::Skipped(w) => Some(Measured::Skipped(w.clone())),
            Self::Failed(w) => Some(Measured::Failed(w.clone())),
        }
    }

    fn failed(&self) -> bool {
        matches!(self, Self::Failed(_))
    }
}

/// How the fio rows reach the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// The file on /dev/shm: the kernel alone.
    Tmpfs,
    /// Through the mount, the file read once before: the page cache answers.
    Warm,
    /// Through the mount with `direct=1`: every read reaches the daemon.
    Direct,
    /// Through the mount, FUSE passthrough to a local backing file.
    Passthrough,
    /// Through a fresh mount with a fresh cache: chunks fetched.
    Cold,
    /// The zero-copy client reading the cache without FUSE.
    DirectClient,
    /// `pread` of the file on /dev/shm in the direct client's own loop:
    /// the same harness, so the two compare without fio's overhead.
    TmpfsLoop,
}

impl ReadPath {
    /// Every path, in report order.
    pub const ALL: [ReadPath; 7] = [
        Self::Tmpfs,
        Self::Warm,
        Self::Direct,
        Self::Passthrough,
        Self::Cold,
        Self::TmpfsLoop,
        Self::DirectClient,
    ];

    /// Its row label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Tmpfs => "tmpfs (in-kernel)",
            Self::Warm => "pfs mount, page cache warm",
            Self::Direct => "pfs mount, direct=1 (daemon path)",
            Self::Passthrough => "pfs mount, passthrough, direct=1",
            Self::Cold => "pfs mount, cold (remote fetch)",
            Self::DirectClient => "direct client (zero-copy)",
            Self::TmpfsLoop => "tmpfs pread loop (the direct client's harness)",
        }
    }

    /// Why it cannot be measured by this build, when it cannot. The lead
    /// adds a path by deleting its line here and its arm in `fio_path`.
    pub fn not_built(self) -> Option<&'static str> {
        None
    }

    /// Whether it mounts.
    pub fn mounts(self) -> bool {
        !matches!(self, Self::Tmpfs | Self::TmpfsLoop)
    }
}

/// numjobs of every fio row.
pub const NUMJOBS: [u32; 2] = [1, 2];

/// One fio row: a path and a workload, at each numjobs.
#[derive(Debug, Clone)]
pub struct FioRow {
    /// How the file is reached.
    pub path: ReadPath,
    /// What is read.
    pub workload: Workload,
    /// Per [`NUMJOBS`] entry.
    pub runs: Vec<Measured<FioResult>>,
    /// Method and counters.
    pub notes: String,
}

/// One metadata row.
#[derive(Debug, Clone)]
pub struct MetaRow {
    /// Label.
    pub label: String,
    /// Seconds of `ls -R`.
    pub ls: Measured<f64>,
    /// Seconds and entries of the lstat walk.
    pub stat: Measured<(f64, u64)>,
    /// Method.
    pub notes: String,
}

/// One first-byte row: the median of its rounds.
#[derive(Debug, Clone)]
pub struct FirstByteRow {
    /// Label.
    pub label: String,
    /// What is read (`1 B at 0`).
    pub read: String,
    /// (open ms, read ms) per round.
    pub rounds: Measured<Vec<(f64, f64)>>,
    /// Whether the ≤ 50 ms target applies.
    pub target: bool,
    /// Counters and method.
    pub notes: String,
}

impl FirstByteRow {
    /// The median round by open + read (the lower middle one).
    pub fn median(&self) -> Option<(f64, f64)> {
        let r = self.rounds.ok()?;
        let mut v = r.clone();
        v.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
        v.get(v.len().checked_sub(1)? / 2).copied()
    }
}

/// One tree-read row.
#[derive(Debug, Clone)]
pub struct TreeRow {
    /// Label.
    pub label: String,
    /// What was measured.
    pub run: Measured<TreeRun>,
    /// Counters and method.
    pub notes: String,
}

/// A whole-tree run.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeRun {
    /// Files.
    pub files: u64,
    /// Bytes of them.
    pub bytes: u64,
    /// Seconds.
    pub secs: f64,
    /// CPU seconds of every process involved.
    pub cpu: f64,
    /// Bytes fetched from the server (mount: `bytes_fetched`; send: literal bytes sent).
    pub fetched: Option<u64>,
    /// Bytes that crossed the connection, as the client counts them.
    pub wire: Option<u64>,
}

/// The study's part of its report header.
#[derive(Debug, Clone, Serialize)]
pub struct MountSettings {
    /// `fio-3.33`, or why there is none.
    pub fio: String,
    /// FUSE: the kernel's io_uring switch and what this client uses.
    pub fuse: String,
    /// Whether the mount rows ran, or why not.
    pub mounts: String,
    /// fio test file bytes.
    pub file_bytes: u64,
    /// Timed fio jobs: measured seconds.
    pub runtime_s: f64,
    /// Timed fio jobs: seconds not counted first.
    pub ramp_s: f64,
    /// FUSE worker threads per mount.
    pub fuse_threads: u16,
    /// The first-byte file's bytes.
    pub first_byte_bytes: u64,
    /// Cold mounts per first-byte row.
    pub rounds: u32,
    /// The many-file tree as used.
    pub tree: String,
    /// Seed of generated data.
    pub seed: String,
    /// Where things live.
    pub placement: String,
    /// How rows are measured.
    pub method: String,
    /// Units.
    pub units: String,
}

/// The study's report header.
pub type MountHeader = crate::report::Header<MountSettings>;

/// Everything measured.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// fio rows.
    pub fio: Vec<FioRow>,
    /// Metadata rows.
    pub meta: Vec<MetaRow>,
    /// First-byte rows.
    pub first_byte: Vec<FirstByteRow>,
    /// Tree-read rows.
    pub tree: Vec<TreeRow>,
}

impl Results {
    fn failed(&self) -> bool {
        self.fio.iter().any(|r| r.runs.iter().any(Measured::failed))
            || self.meta.iter().any(|r| r.ls.failed() || r.stat.failed())
            || self.first_byte.iter().any(|r| r.rounds.failed())
            || self.tree.iter().any(|r| r.run.failed())
    }
}

/// The sections, as `--only` names them.
pub const SECTIONS: [&str; 4] = ["fio", "metadata", "first-byte", "tree-read"];

/// What `--only` selects.
struct Only(Vec<String>);

impl Only {
    fn wants(&self, section: &str, label: &str) -> bool {
        self.0.is_empty() || {
            let l = label.to_lowercase();
            self.0
                .iter()
                .any(|o| section.contains(o.as_str()) || l.contains(o.as_str()))
        }
    }
}

/// Runs the study.
pub fn run(args: BenchMountArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let (header, results) = collect(&args, pfs)?;
    let report = report::report(&header, &results);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        report::write(dir, &results, &report)?;
    }
    Ok(if results.failed() {
        Outcome::Failed
    } else {
        Outcome::Passed
    })
}

/// The study's shared state while it runs.
struct Study<'a> {
    args: &'a BenchMountArgs,
    pfs: &'a Binary,
    only: Only,
    scratch: Scratch,
    /// `Err(why)`: no fio.
    fio: Result<String, String>,
    /// `Some(why)`: no mounts on this host.
    no_mount: Option<String>,
    server: Option<Result<PfsServer, String>>,
    caches: u32,
}

fn log(what: &str) {
    eprintln!("pfs bench mount: {what}");
}

impl Study<'_> {
    fn dest(&self) -> PathBuf {
        self.scratch.path().join("dest")
    }

    /// The one server, started on first use.
    fn server(&mut self) -> Result<&PfsServer, String> {
        if self.server.is_none() {
            let storage = ServeStorage {
                dest: self.dest(),
                store: None,
            };
            let r = std::fs::create_dir_all(&storage.dest)
                .map_err(anyhow::Error::from)
                .and_then(|()| start_pfs_server(&self.pfs.path, &storage, None))
                .map_err(|e| format!("pfs serve --dest: {e:#}"));
            self.server = Some(r);
        }
        match self.server.as_ref() {
            Some(Ok(s)) => Ok(s),
            Some(Err(e)) => Err(e.clone()),
            None => Err("no server".into()),
        }
    }

    /// `HOST:PORT:DIR` of the served `dir`.
    fn source(&mut self, dir: &str) -> Result<String, String> {
        Ok(format!("{}:{dir}", self.server()?.addr))
    }

    /// A fresh, empty cache directory for one mount.
    fn fresh_cache(&mut self) -> PathBuf {
        self.caches += 1;
        let p = self.scratch.path().join(format!("cache-{}", self.caches));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    /// Mounts the served `dir` with a fresh cache at `mnt`.
    fn mount(&mut self, dir: &str, mnt: &str) -> anyhow::Result<(Mount, PathBuf)> {
        self.mount_with(dir, mnt, &[])
    }

    /// [`Self::mount`] with more `pfs mount` options.
    fn mount_with(&mut self, dir: &str, mnt: &str, extra: &[&str]) -> anyhow::Result<(Mount, PathBuf)> {
        let source = self.source(dir).map_err(anyhow::Error::msg)?;
        let cache = self.fresh_cache();
        let at = self.scratch.path().join(mnt);
        let m = Mount::start(&self.pfs.path, &source, &at, &cache, self.args.threads, extra)?;
        Ok((m, cache))
    }

    /// Stops `m` and removes its cache.
    fn unmount(&self, m: Mount, cache: &Path) {
        m.stop();
        let _ = std::fs::remove_dir_all(cache);
    }

    /// Why a mount row cannot run here, if it cannot.
    fn mount_skip(&self) -> Option<String> {
        self.no_mount.clone()
    }
}

/// Root of the scratch directory: /dev/shm when it has room for `need`.
fn scratch_base(need: u64) -> &'static Path {
    memory_dir(need).unwrap_or(Path::new("/var/tmp"))
}

/// Every row of the study and its header.
pub fn collect(args: &BenchMountArgs, pfs: &Binary) -> anyhow::Result<(MountHeader, Results)> {
    if !(args.runtime.is_finite() && args.runtime > 0.0 && args.ramp.is_finite() && args.ramp >= 0.0) {
        anyhow::bail!("--runtime must be > 0 and --ramp ≥ 0 seconds");
    }
    if args.file_size < 1 << 20 || args.first_byte_size < 8192 {
        anyhow::bail!("--file-size must be at least 1M and --first-byte-size at least 8K");
    }
    let only = Only(args.only.iter().map(|s| s.to_lowercase()).collect());
    let labels: Vec<(&str, String)> = section_labels();
    if !only.0.is_empty() && !labels.iter().any(|(s, l)| only.wants(s, l)) {
        anyhow::bail!(
            "--only {} matches no section or row (sections: {})",
            args.only.join(" --only "),
            SECTIONS.join(", ")
        );
    }
    // Memory for: the fio file twice, the first-byte file, the tree three
    // times (source, served copy, the mount's cache) — the Linux tree's size
    // as an upper bound.
    let need = args.file_size * 3 + args.first_byte_size * 2 + 4_500_000_000;
    let base = scratch_base(need);
    let scratch = Scratch::new(base, "pfs-bench-mount")?;
    let fio_version = fio::version();
    let no_mount = mount_unavailable();
    let mut st = Study {
        args,
        pfs,
        only,
        scratch,
        fio: fio_version.clone(),
        no_mount: no_mount.clone(),
        server: None,
        caches: 0,
    };
    let mut res = Results::default();
    let mut tree_about = "not run".to_string();
    if SECTIONS[..1]
        .iter()
        .any(|s| labels.iter().any(|(ls, l)| ls == s && st.only.wants(s, l)))
    {
        res.fio = fio_section(&mut st);
    }
    if labels
        .iter()
        .any(|(s, l)| *s == "first-byte" && st.only.wants(s, l))
    {
        res.first_byte = first_byte_section(&mut st);
    }
    if labels
        .iter()
        .any(|(s, l)| (*s == "metadata" || *s == "tree-read") && st.only.wants(s, l))
    {
        let (about, meta, tree) = tree_sections(&mut st);
        tree_about = about;
        res.meta = meta;
        res.tree = tree;
    }
    if let Some(Ok(server)) = st.server.take() {
        drop(server);
    }
    let uring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    let header = MountHeader::new(
        pfs,
        MountSettings {
            fio: fio_version.unwrap_or_else(|why| format!("none: {why}")),
            fuse: format!(
                "/sys/module/fuse/parameters/enable_uring = {uring}; FUSE over io_uring is not used either way (fuser, the FUSE library pfs mount runs on, reads /dev/fuse); the kernel's FUSE protocol version is not reported by fuser (7.45 on this machine's 6.18 kernel, docs/mount.md)"
            ),
            mounts: no_mount.map_or_else(
                || format!("pfs mount --foreground --threads {} per row, each with a fresh --cache", args.threads),
                |why| format!("skipped: {why}"),
            ),
            file_bytes: args.file_size,
            runtime_s: args.runtime,
            ramp_s: args.ramp,
            fuse_threads: args.threads,
            first_byte_bytes: args.first_byte_size,
            rounds: args.rounds,
            tree: tree_about,
            seed: format!("{:#x}", args.seed),
            placement: format!(
                "scratch in {}: the tmpfs copies, the server's --dest, every mount's cache; one pfs serve --dest on 127.0.0.1 serves every mount row; server bytes stay in memory (tmpfs), so cold = the mount's cache and page cache empty",
                base.display()
            ),
            method: "fio: ioengine=psync readonly invalidate=0 group_reporting; timed jobs time_based with ramp; cold jobs one pass per job (no ramp, capped at --runtime) after a fresh mount with a fresh cache and sync; echo 3 > drop_caches; ratios vs tmpfs of the same workload and numjobs, same run. first byte: fresh mount + fresh cache + drop_caches, then open(2) and one pread(2), timed apart; median round. tree read: one thread reads every file (1 MiB reads) through a fresh mount after drop_caches; pfs send of the same tree into an empty directory of the same server, fresh sender cache".into(),
            units: "iops = reads/s; MB/s = 10^6 bytes/s; vs tmpfs = row iops ÷ tmpfs iops (same workload, numjobs); 2j/1j = iops at numjobs 2 ÷ numjobs 1; ms = milliseconds; CPU = user + system of the reader, the mount daemon and the server".into(),
        },
    );
    Ok((header, res))
}

/// Every (section, label) the study can print, for `--only`.
fn section_labels() -> Vec<(&'static str, String)> {
    let mut v: Vec<(&str, String)> = ReadPath::ALL
        .iter()
        .map(|p| ("fio", p.label().to_string()))
        .collect();
    v.extend(META_LABELS.iter().map(|l| ("metadata", l.to_string())));
    v.extend(FIRST_BYTE_LABELS.iter().map(|l| ("first-byte", l.to_string())));
    v.extend(TREE_LABELS.iter().map(|l| ("tree-read", l.to_string())));
    v
}

const META_LABELS: [&str; 3] = [
    "tmpfs (the tree's source copy)",
    "pfs mount, first walk (fresh mount)",
    "pfs mount, again (kernel caches warm)",
];
const FIRST_BYTE_LABELS: [&str; 3] = [
    "tmpfs (a file of the same size)",
    "pfs mount, cold, file new to the server",
    "pfs mount, cold, server has its recipe",
];
const TREE_LABELS: [&str; 4] = [
    "tmpfs: read every file (the source copy)",
    "pfs send TREE --to (empty destination)",
    "pfs mount, cold: read every file",
    "pfs mount, cold: tar cf - (readdir order)",
];

// ---------------------------------------------------------------------------
// fio

fn fio_section(st: &mut Study<'_>) -> Vec<FioRow> {
    let paths: Vec<ReadPath> = ReadPath::ALL
        .iter()
        .copied()
        .filter(|p| st.only.wants("fio", p.label()))
        .collect();
    let rows_of = |p: ReadPath, why: Measured<FioResult>| -> Vec<FioRow> {
        WORKLOADS
            .iter()
            .map(|&w| FioRow {
                path: p,
                workload: w,
                runs: NUMJOBS.iter().map(|_| why.clone()).collect(),
                notes: String::new(),
            })
            .collect()
    };
    let mut out = Vec::new();
    // The file, on tmpfs, for the baseline and the server's copy.
    let local = st.scratch.path().join("tmpfs");
    log(&format!(
        "writing the {} MB fio file…",
        st.args.file_size / 1_000_000
    ));
    let file = match make_random_tree(&local, st.args.file_size, u64::MAX) {
        Ok(_) => local.join("part-0000.bin"),
        Err(e) => {
            for p in paths {
                out.extend(rows_of(
                    p,
                    Measured::failed_because(format!("writing the test file: {e:#}")),
                ));
            }
            return out;
        }
    };
    let size = st.args.file_size;
    let timed = fio::Timing::Timed {
        runtime: st.args.runtime,
        ramp: st.args.ramp,
    };
    for p in paths {
        if let Some(why) = p.not_built() {
            out.extend(rows_of(p, Measured::skipped(why)));
            continue;
        }
        if let Err(why) = &st.fio {
            out.extend(rows_of(p, Measured::skipped(why.clone())));
            continue;
        }
        if p.mounts() {
            if let Some(why) = st.mount_skip() {
                out.extend(rows_of(p, Measured::skipped(why)));
                continue;
            }
        }
        match p {
            ReadPath::Tmpfs => {
                for w in WORKLOADS {
                    let runs = NUMJOBS
                        .iter()
                        .map(|&n| {
                            log(&format!("fio {}: {} ×{n}…", p.label(), w.name));
                            Measured::from(fio::run(&fio::Job {
                                file: &file,
                                size,
                                workload: w,
                                numjobs: n,
                                direct: false,
                                timing: timed,
                            }))
                        })
                        .collect();
                    out.push(FioRow {
                        path: p,
                        workload: w,
                        runs,
                        notes: "the file on /dev/shm; buffered".into(),
                    });
                }
            }
            ReadPath::Warm | ReadPath::Direct | ReadPath::Passthrough => {
                out.extend(fio_mounted(st, p, &file, timed))
            }
            ReadPath::Cold => out.extend(fio_cold(st, &file)),
            ReadPath::TmpfsLoop => out.extend(loop_rows(p, &file, size, st.args.runtime, None)),
            ReadPath::DirectClient => out.extend(direct_client(st, &file, size)),
        }
    }
    out
}

/// Puts `file` in the server's `fio` directory (once).
fn serve_fio_file(st: &mut Study<'_>, file: &Path) -> anyhow::Result<()> {
    let dir = st.dest().join("fio");
    let target = dir.join("bench.dat");
    if !target.exists() {
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(file, &target).context("copying the fio file into the served directory")?;
    }
    st.server().map_err(anyhow::Error::msg)?;
    Ok(())
}

/// The warm and direct=1 rows: one mount, the file read once through it
/// first (every chunk local, every page cached), then the jobs.
fn fio_mounted(st: &mut Study<'_>, p: ReadPath, file: &Path, timing: fio::Timing) -> Vec<FioRow> {
    let size = st.args.file_size;
    let extra: &[&str] = if p == ReadPath::Passthrough {
        &["--passthrough"]
    } else {
        &[]
    };
    let setup = serve_fio_file(st, file).and_then(|()| {
        let (m, cache) = st.mount_with("fio", "mnt-fio", extra)?;
        let pre = read_all(m.dir());
        match pre {
            Ok(r) if r.bytes == size => Ok((m, cache, r)),
            Ok(r) => {
                st.unmount(m, &cache);
                anyhow::bail!(
                    "reading the file once through the mount gave {} bytes of {size}",
                    r.bytes
                )
            }
            Err(e) => {
                st.unmount(m, &cache);
                Err(e.context("reading the file once through the mount"))
            }
        }
    });
    let (m, cache, pre) = match setup {
        Ok(x) => x,
        Err(e) => {
            let why = Measured::failed_because(format!("{e:#}"));
            return WORKLOADS
                .iter()
                .map(|&w| FioRow {
                    path: p,
                    workload: w,
                    runs: NUMJOBS.iter().map(|_| why.clone()).collect(),
                    notes: String::new(),
                })
                .collect();
        }
    };
    // Passthrough is measured with direct=1 too: the reads skip the page
    // cache of the mount and go to the backing file, never the daemon.
    let direct = matches!(p, ReadPath::Direct | ReadPath::Passthrough);
    let target = m.dir().join("bench.dat");
    let mut rows = Vec::new();
    for w in WORKLOADS {
        let mut runs = Vec::new();
        let mut reads = Vec::new();
        for &n in &NUMJOBS {
            log(&format!("fio {}: {} ×{n}…", p.label(), w.name));
            let before = m.stats().ok();
            let r = fio::run(&fio::Job {
                file: &target,
                size,
                workload: w,
                numjobs: n,
                direct,
                timing,
            });
            let after = m.stats().ok();
            if let (Some(b), Some(a)) = (&before, &after) {
                reads.push(format!(
                    "×{n}: {} daemon reads, {} chunks fetched, {} passthrough opens",
                    counter(a, "reads") - counter(b, "reads"),
                    counter(a, "chunks_fetched") - counter(b, "chunks_fetched"),
                    counter(a, "passthrough_opens") - counter(b, "passthrough_opens")
                ));
            }
            runs.push(Measured::from(r));
        }
        let how = if p == ReadPath::Passthrough {
            "--passthrough, direct=1: the file's chunks all local, it is opened on a checked backing file the kernel reads (the daemon sees the open only); the backing file is in the cache on /dev/shm, whose direct reads are served from memory"
        } else if direct {
            "direct=1: every read reaches the daemon; every chunk in the local cache"
        } else {
            "buffered; the file read once through the mount before (page cache warm)"
        };
        rows.push(FioRow {
            path: p,
            workload: w,
            runs,
            notes: format!("{how} (first read {:.2} s); {}", pre.secs, reads.join(", ")),
        });
    }
    st.unmount(m, &cache);
    rows
}

/// The cold rows: per job, a fresh cache, a fresh mount, caches dropped,
/// one pass over the file.
fn fio_cold(st: &mut Study<'_>, file: &Path) -> Vec<FioRow> {
    let size = st.args.file_size;
    let cap = st.args.runtime;
    let served = serve_fio_file(st, file);
    let mut rows = Vec::new();
    for w in WORKLOADS {
        let mut runs = Vec::new();
        let mut said = Vec::new();
        for &n in &NUMJOBS {
            log(&format!("fio {}: {} ×{n}…", ReadPath::Cold.label(), w.name));
            let r = match &served {
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
                Ok(()) => st.mount("fio", "mnt-fio").and_then(|(m, cache)| {
                    let r = drop_caches().and_then(|()| {
                        fio::run(&fio::Job {
                            file: &m.dir().join("bench.dat"),
                            size,
                            workload: w,
                            numjobs: n,
                            direct: false,
                            timing: fio::Timing::OnePass { cap },
                        })
                    });
                    if let (Ok(res), Ok(s)) = (&r, m.stats()) {
                        said.push(format!(
                            "×{n}: {:.1} MB read in {:.2} s, {:.1} MB fetched in {} chunks, {} daemon reads",
                            res.io_bytes as f64 / 1e6,
                            res.runtime_ms as f64 / 1e3,
                            counter(&s, "bytes_fetched") as f64 / 1e6,
                            counter(&s, "chunks_fetched"),
                            counter(&s, "reads")
                        ));
                    }
                    st.unmount(m, &cache);
                    r
                }),
            };
            runs.push(Measured::from(r));
        }
        rows.push(FioRow {
            path: ReadPath::Cold,
            workload: w,
            runs,
            notes: {
                let mut n = format!(
                    "buffered, one pass per job (capped at {cap} s) after a fresh mount, fresh cache, drop_caches"
                );
                if !said.is_empty() {
                    n.push_str(&format!("; {}", said.join("; ")));
                }
                n
            },
        });
    }
    rows
}

// ---------------------------------------------------------------------------
// first byte

/// Seconds of `open` and of one `pread` of `len` bytes at `offset`.
fn open_and_read(path: &Path, offset: u64, len: usize) -> anyhow::Result<(f64, f64)> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    let t0 = Instant::now();
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let t1 = Instant::now();
    let n = f
        .read_at(&mut buf, offset)
        .with_context(|| format!("reading {}", path.display()))?;
    let t2 = Instant::now();
    if n == 0 {
        anyhow::bail!("read nothing at offset {offset}");
    }
    Ok(((t1 - t0).as_secs_f64() * 1e3, (t2 - t1).as_secs_f64() * 1e3))
}

fn first_byte_section(st: &mut Study<'_>) -> Vec<FirstByteRow> {
    let size = st.args.first_byte_size;
    let offset = SplitMix::new(st.args.seed).below(size / 4096 - 1) * 4096;
    let reads: [(String, u64, usize); 2] = [
        ("1 B at offset 0".into(), 0, 1),
        (format!("4 KiB at offset {offset} (seeded)"), offset, 4096),
    ];
    let rounds = st.args.rounds;
    let dir = st.dest().join("big");
    let mut rows = Vec::new();
    // The floor: the same reads of a file of the same size on tmpfs.
    if st.only.wants("first-byte", FIRST_BYTE_LABELS[0]) {
        let floor = st.scratch.path().join("big-floor");
        let made = make_random_tree(&floor, size, u64::MAX);
        for (what, off, len) in &reads {
            let r = match &made {
                Err(e) => Measured::failed_because(format!("writing the file: {e:#}")),
                Ok(_) => Measured::from(
                    (0..rounds)
                        .map(|_| open_and_read(&floor.join("part-0000.bin"), *off, *len))
                        .collect(),
                ),
            };
            rows.push(FirstByteRow {
                label: FIRST_BYTE_LABELS[0].into(),
                read: what.clone(),
                rounds: r,
                target: false,
                notes: "the file on /dev/shm, in the page cache: the floor".into(),
            });
        }
        let _ = std::fs::remove_dir_all(&floor);
    }
    let wanted = [
        st.only.wants("first-byte", FIRST_BYTE_LABELS[1]),
        st.only.wants("first-byte", FIRST_BYTE_LABELS[2]),
    ];
    if !wanted.iter().any(|&w| w) {
        return rows;
    }
    for (k, (what, off, len)) in reads.iter().enumerate() {
        // [new to the server, recipe cached by the server]: rounds and notes.
        let mut got: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        let mut notes: [Vec<String>; 2] = [Vec::new(), Vec::new()];
        let mut failure: Option<String> = st.mount_skip();
        let skipped = failure.is_some();
        for round in 0..rounds {
            if failure.is_some() {
                break;
            }
            // A file the server has never seen: its own bytes (no chunk in
            // common with the others), written now, aged past the 2 s in
            // which a quick-check cache does not trust an mtime.
            let seed = st.args.seed ^ (u64::from(round) << 32) ^ (k as u64) << 48;
            let sub = format!("big/r{k}-{round}");
            let file = dir.join(format!("r{k}-{round}")).join("part-0000.bin");
            let made = write_seeded(&file, size, seed);
            if let Err(e) = made {
                failure = Some(format!("writing the file: {e:#}"));
                break;
            }
            std::thread::sleep(Duration::from_millis(2100));
            for (state, want) in wanted.iter().enumerate() {
                // The cached state needs the first mount to have asked the recipe.
                if !want && state == 1 {
                    continue;
                }
                log(&format!(
                    "first byte, {what}, {}, round {} of {rounds}…",
                    ["file new to the server", "server has its recipe"][state],
                    round + 1
                ));
                let r = st.mount(&sub, "mnt-big").and_then(|(m, cache)| {
                    let r = drop_caches()
                        .and_then(|()| open_and_read(&m.dir().join("part-0000.bin"), *off, *len));
                    if let (Ok((o, rd)), Ok(s)) = (&r, m.stats()) {
                        notes[state].push(format!(
                            "{o:.1}+{rd:.1} ms ({} chunk(s), {:.1} kB fetched)",
                            counter(&s, "chunks_fetched"),
                            counter(&s, "bytes_fetched") as f64 / 1e3
                        ));
                    }
                    st.unmount(m, &cache);
                    r
                });
                match r {
                    Ok(x) => got[state].push(x),
                    Err(e) => {
                        failure = Some(format!("round {}: {e:#}", round + 1));
                        break;
                    }
                }
            }
            let _ = std::fs::remove_dir_all(file.parent().unwrap_or(&dir));
        }
        for (state, want) in wanted.iter().enumerate() {
            if !want {
                continue;
            }
            let how = [
                "a new file per round, written into the served directory (not sent) 2.1 s before: the server cuts its recipe on the first ask",
                "the same file again right after, on another fresh mount with a fresh cache: the server answers from its recipe cache",
            ][state];
            let measured = match &failure {
                Some(w) if skipped => Measured::skipped(w.clone()),
                Some(w) => Measured::failed_because(w.clone()),
                None => Measured::Ok(std::mem::take(&mut got[state])),
            };
            rows.push(FirstByteRow {
                label: FIRST_BYTE_LABELS[1 + state].into(),
                read: what.clone(),
                rounds: measured,
                target: *off == 0,
                notes: if notes[state].is_empty() {
                    how.into()
                } else {
                    format!(
                        "{how}; per round, after a fresh mount, fresh cache and drop_caches, open+read: {}",
                        notes[state].join(", ")
                    )
                },
            });
        }
    }
    rows
}

/// Writes `size` random bytes from `seed` (splitmix64) to a new `file`
/// (and its directory), so files of one run share no chunk.
fn write_seeded(file: &Path, size: u64, seed: u64) -> anyhow::Result<()> {
    use std::io::Write;
    if let Some(d) = file.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut rng = SplitMix::new(seed);
    let mut f = std::io::BufWriter::new(std::fs::File::create(file)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for w in buf.chunks_exact_mut(8) {
            w.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let k = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..k])?;
        left -= k as u64;
    }
    f.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// the many-file tree: metadata and whole-tree read

/// The tree the study uses: its directory and how it was had.
fn tree_source(st: &Study<'_>) -> (Option<PathBuf>, String) {
    let synthetic = |why: &str| {
        (
            None,
            format!(
                "synthetic: {} files of random bytes (64 B–64 KiB, log-uniform) in 4,680 nested directories, splitmix64 seed {:#x}{why}",
                st.args.tree_files, st.args.seed
            ),
        )
    };
    match st.args.tree.as_str() {
        "synthetic" => synthetic(""),
        "linux" => match linux_tree() {
            Ok(p) => {
                let about = format!(
                    "Linux source, version A of scripts/fetch-version-pair.sh: {}",
                    p.display()
                );
                (Some(p), about)
            }
            Err(e) => synthetic(&format!(" (the Linux tree is not available: {e:#})")),
        },
        dir => {
            let p = PathBuf::from(dir);
            let about = format!("given: {}", p.display());
            (Some(p), about)
        }
    }
}

/// Version A of the Linux pair, fetched (and cached) by the files study's
/// script (`PFS_FILES_FETCH` names another script).
fn linux_tree() -> anyhow::Result<PathBuf> {
    let script = std::env::var_os("PFS_FILES_FETCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scripts")
                .join("fetch-version-pair.sh")
        });
    if !script.exists() {
        anyhow::bail!("{} is missing", script.display());
    }
    log(&format!(
        "the Linux tree from {} (fetched once, cached after)…",
        script.display()
    ));
    let mut cmd = Command::new("bash");
    cmd.arg(&script);
    let out = run_client(cmd, Duration::from_secs(1800))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .context("the fetch script printed no directory")?;
    Ok(PathBuf::from(first.trim()))
}

fn tree_sections(st: &mut Study<'_>) -> (String, Vec<MetaRow>, Vec<TreeRow>) {
    let (given, mut about) = tree_source(st);
    let name = given
        .as_ref()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "synthetic".into());
    let src = st.scratch.path().join("src").join(&name);
    log(&format!("staging the tree in {}…", src.display()));
    let staged = match &given {
        Some(p) => copy_tree(p, &src),
        None => synthetic_tree(&src, st.args.tree_files, st.args.seed),
    };
    let only = Only(st.only.0.clone());
    let want_meta = |l: &str| only.wants("metadata", l);
    let want_tree = |l: &str| only.wants("tree-read", l);
    let mut meta = Vec::new();
    let mut tree = Vec::new();
    if let Err(e) = staged {
        let why = format!("staging the tree: {e:#}");
        for l in META_LABELS.iter().filter(|l| want_meta(l)) {
            meta.push(MetaRow {
                label: (*l).into(),
                ls: Measured::failed_because(why.clone()),
                stat: Measured::failed_because(why.clone()),
                notes: String::new(),
            });
        }
        for l in TREE_LABELS.iter().filter(|l| want_tree(l)) {
            tree.push(TreeRow {
                label: (*l).into(),
                run: Measured::failed_because(why.clone()),
                notes: String::new(),
            });
        }
        return (about, meta, tree);
    }
    if let Ok(t) = crate::suite::files::tree::tree_of(&src) {
        about.push_str(&format!(
            " ({} files, {} directories, {:.1} MB)",
            t.files,
            t.dirs,
            t.bytes as f64 / 1e6
        ));
    }
    // The source copy on tmpfs: the floor of both sections.
    if want_meta(META_LABELS[0]) {
        log("metadata on tmpfs…");
        let ls = Measured::from(ls_r(&src));
        let stat = Measured::from(stat_walk(&src));
        meta.push(MetaRow {
            label: META_LABELS[0].into(),
            ls,
            stat,
            notes: "the staged tree on /dev/shm (dentries and inodes in memory)".into(),
        });
    }
    if want_tree(TREE_LABELS[0]) {
        log("reading every file on tmpfs…");
        let r = read_all(&src).map(|r| TreeRun {
            files: r.files,
            bytes: r.bytes,
            secs: r.secs,
            cpu: r.cpu,
            fetched: None,
            wire: None,
        });
        tree.push(TreeRow {
            label: TREE_LABELS[0].into(),
            run: Measured::from(r),
            notes: "one thread, 1 MiB reads, the staged tree on /dev/shm".into(),
        });
    }
    // The send fills the server: every mount row below reads what it wrote.
    let mount_rows = META_LABELS[1..].iter().any(|l| want_meta(l))
        || want_tree(TREE_LABELS[2])
        || want_tree(TREE_LABELS[3]);
    let sent = if want_tree(TREE_LABELS[1]) || mount_rows {
        log("pfs send of the tree into an empty directory of the server…");
        Some(send_tree(st, &src))
    } else {
        None
    };
    if let Some(r) = &sent {
        if want_tree(TREE_LABELS[1]) {
            tree.push(TreeRow {
                label: TREE_LABELS[1].into(),
                run: match r {
                    Ok((run, _)) => Measured::Ok(*run),
                    Err(e) => Measured::failed_because(e.clone()),
                },
                notes: match r {
                    Ok((_, n)) => n.clone(),
                    Err(_) => String::new(),
                },
            });
        }
    }
    if !mount_rows {
        return (about, meta, tree);
    }
    let blocked: Option<Measured<()>> = match (&st.mount_skip(), &sent) {
        (Some(why), _) => Some(Measured::skipped(why.clone())),
        (None, Some(Err(e))) => Some(Measured::failed_because(format!(
            "the tree was not served (pfs send failed: {e})"
        ))),
        _ => None,
    };
    // The tree landed in the served `tree` directory under its own name.
    let served = "tree".to_string();
    // Metadata through the mount: ls -R on one fresh mount, the lstat walk
    // on another, each then again on the same mount.
    if META_LABELS[1..].iter().any(|l| want_meta(l)) {
        let (first, again) = match &blocked {
            Some(b) => {
                let (ls, stat) = blocked_pair(b);
                (
                    (ls.clone(), stat.clone(), String::new()),
                    (ls, stat, String::new()),
                )
            }
            None => meta_through_mount(st, &served, &name),
        };
        if want_meta(META_LABELS[1]) {
            meta.push(MetaRow {
                label: META_LABELS[1].into(),
                ls: first.0,
                stat: first.1,
                notes: first.2,
            });
        }
        if want_meta(META_LABELS[2]) {
            meta.push(MetaRow {
                label: META_LABELS[2].into(),
                ls: again.0,
                stat: again.1,
                notes: again.2,
            });
        }
    }
    // The same cold read two ways: a name-sorted reader, and tar.
    for (label, tar, what) in [
        (TREE_LABELS[2], false, "reading every file through a cold mount…"),
        (TREE_LABELS[3], true, "tar of the tree through a cold mount…"),
    ] {
        if !want_tree(label) {
            continue;
        }
        let (run, notes) = match blocked.as_ref().and_then(|b| b.not_run()) {
            Some(not_run) => (not_run, String::new()),
            None => {
                log(what);
                match read_through_mount(st, &served, &name, tar) {
                    Ok((run, n)) => (Measured::Ok(run), n),
                    Err(e) => (Measured::failed_because(format!("{e:#}")), String::new()),
                }
            }
        };
        tree.push(TreeRow {
            label: label.into(),
            run,
            notes,
        });
    }
    (about, meta, tree)
}

/// The ls and stat cells of a row that cannot run for `b`'s reason.
fn blocked_pair(b: &Measured<()>) -> (Measured<f64>, Measured<(f64, u64)>) {
    (
        b.not_run().unwrap_or_else(|| Measured::skipped("not run")),
        b.not_run().unwrap_or_else(|| Measured::skipped("not run")),
    )
}

type MetaCells = (Measured<f64>, Measured<(f64, u64)>, String);

/// (first, again) of the mount's metadata rows.
fn meta_through_mount(st: &mut Study<'_>, served: &str, name: &str) -> (MetaCells, MetaCells) {
    log("metadata through the mount (ls -R)…");
    let ls = st.mount(served, "mnt-meta").map(|(m, cache)| {
        let first = Measured::from(ls_r(&m.dir().join(name)));
        let again = Measured::from(ls_r(&m.dir().join(name)));
        let up = m.up.clone();
        st.unmount(m, &cache);
        (first, again, up)
    });
    log("metadata through the mount (lstat walk)…");
    let stat = st.mount(served, "mnt-meta").map(|(m, cache)| {
        let first = Measured::from(stat_walk(&m.dir().join(name)));
        let again = Measured::from(stat_walk(&m.dir().join(name)));
        st.unmount(m, &cache);
        (first, again)
    });
    let fail = |e: &anyhow::Error| format!("mounting: {e:#}");
    let (ls1, ls2, up) = match ls {
        Ok((a, b, up)) => (a, b, Some(up)),
        Err(e) => (
            Measured::failed_because(fail(&e)),
            Measured::failed_because(fail(&e)),
            None,
        ),
    };
    let (s1, s2) = match stat {
        Ok((a, b)) => (a, b),
        Err(e) => (
            Measured::failed_because(fail(&e)),
            Measured::failed_because(fail(&e)),
        ),
    };
    let first_notes = up
        .map(|u| {
            format!(
                "each walk on its own fresh mount (ls -R on one, the lstat walk on another); mount up in {:.0} ms (listing of {} entries in {:.0} ms), not in the walk's time",
                u.up_ms, u.entries, u.opened_ms
            )
        })
        .unwrap_or_default();
    (
        (ls1, s1, first_notes),
        (
            ls2,
            s2,
            "the same walk again on the same mount (entries and attributes cached by the kernel)".into(),
        ),
    )
}

/// `pfs send SRC --to SERVER:tree` into the server's empty `tree`
/// directory: the run and its notes.
fn send_tree(st: &mut Study<'_>, src: &Path) -> Result<(TreeRun, String), String> {
    let cache = st.scratch.path().join("send-cache");
    let server = st.server()?;
    let (exe, addr, pid) = (server.exe.clone(), server.addr.clone(), server.guard.id());
    let mut cmd = Command::new(&exe);
    cmd.arg("send")
        .arg(src)
        .arg("--to")
        .arg(format!("{addr}:tree"))
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--json", "--progress", "never"]);
    let server_cpu = || pfs_sys::tree_cpu_seconds(pid).map_or(0.0, |(u, s)| u + s);
    let children = || pfs_sys::children_usage().cpu_seconds();
    let (s0, c0) = (server_cpu(), children());
    let t0 = Instant::now();
    let out = run_client(cmd, Duration::from_secs(1800)).map_err(|e| format!("{e:#}"))?;
    let secs = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "pfs send failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    crate::child::wait_children_reaped(pid, Duration::from_secs(5));
    let cpu = (server_cpu() - s0) + (children() - c0);
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("pfs send --json output: {e}"))?;
    let r = &v["receiver"];
    let literal = r["literal_bytes"].as_u64();
    let t = crate::suite::files::tree::tree_of(src).map_err(|e| format!("{e:#}"))?;
    let run = TreeRun {
        files: t.files,
        bytes: t.bytes,
        secs,
        cpu,
        fetched: literal,
        wire: None,
    };
    let notes = format!(
        "client wall time, fresh sender cache, no --compress; literal {:.1} MB (the tree's unique chunk bytes), matched {:.1} MB; files written {}",
        literal.unwrap_or(0) as f64 / 1e6,
        r["matched_bytes"].as_u64().unwrap_or(0) as f64 / 1e6,
        r["files_written"]
    );
    Ok((run, notes))
}

/// Every file of the served tree read through a fresh mount after the
/// caches are dropped: the run and its notes.
fn read_through_mount(
    st: &mut Study<'_>,
    served: &str,
    name: &str,
    tar: bool,
) -> anyhow::Result<(TreeRun, String)> {
    let (m, cache) = st.mount(served, "mnt-tree")?;
    let server_pid = st.server().map(|s| s.guard.id()).unwrap_or(0);
    let cpu_of = |pid: u32| pfs_sys::tree_cpu_seconds(pid).map_or(0.0, |(u, s)| u + s);
    let mount_pid = m.pid();
    let r = drop_caches().and_then(|()| {
        let (s0, m0) = (cpu_of(server_pid), cpu_of(mount_pid));
        let r = if tar {
            tar_all(&m.dir().join(name))?
        } else {
            read_all(&m.dir().join(name))?
        };
        Ok((r, cpu_of(server_pid) - s0, cpu_of(mount_pid) - m0))
    });
    let stats = m.stats();
    st.unmount(m, &cache);
    let (r, server_cpu, daemon_cpu) = r?;
    let s = stats?;
    let run = TreeRun {
        files: r.files,
        bytes: r.bytes,
        secs: r.secs,
        cpu: r.cpu + server_cpu + daemon_cpu,
        fetched: Some(counter(&s, "bytes_fetched")),
        wire: Some(counter(&s, "wire_in") + counter(&s, "wire_out")),
    };
    let how = if tar {
        "tar cf - . | wc -c in the tree (GNU tar: entries in readdir order, subdirectories where they come)"
    } else {
        "one reader thread, 1 MiB reads, each directory's files in name order, then its subdirectories"
    };
    let notes = format!(
        "{how}, fresh mount and cache, drop_caches; CPU: reader {:.2} s, mount daemon {:.2} s, server {:.2} s; {} recipes, {} chunks fetched, {} local, {} daemon reads",
        r.cpu,
        daemon_cpu,
        server_cpu,
        counter(&s, "recipes"),
        counter(&s, "chunks_fetched"),
        counter(&s, "chunks_local"),
        counter(&s, "reads")
    );
    Ok((run, notes))
}

// ---------------------------------------------------------------------------
// The direct client, and the loop it is compared with

/// `tar cf - .` in `dir`, its output counted by `wc -c`: GNU tar's order
/// (readdir order, each subdirectory where it comes). CPU is tar's.
fn tar_all(dir: &Path) -> anyhow::Result<walk::ReadAll> {
    let c0 = pfs_sys::children_usage();
    let t0 = Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("tar cf - . | wc -c")
        .current_dir(dir)
        .output()
        .context("running tar (apt install tar)")?;
    let secs = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        anyhow::bail!("tar failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    // tar's stream has headers and padding: the bytes counted are the files'.
    let (files, bytes) = walk_files(dir)?;
    let cpu = pfs_sys::children_usage().since(&c0).cpu_seconds();
    Ok(walk::ReadAll {
        secs,
        files,
        bytes,
        cpu,
    })
}

/// Regular files beneath `dir` and their bytes (the tree is cached by now: cheap).
fn walk_files(dir: &Path) -> anyhow::Result<(u64, u64)> {
    let (mut n, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                n += 1;
                bytes += e.metadata()?.len();
            }
        }
    }
    Ok((n, bytes))
}

/// The direct client's rows: a mount with `--direct SOCKET`, the file
/// opened once through it (placed in shared memory), then the same loop as
/// [`loop_rows`] reading with `DirectClient::read_at`.
fn direct_client(st: &mut Study<'_>, file: &Path, size: u64) -> Vec<FioRow> {
    let p = ReadPath::DirectClient;
    let sock = st.scratch.path().join("direct.sock");
    let sock_arg = sock.display().to_string();
    let blob = format!("{}", size.next_power_of_two().max(1 << 20) * 2);
    let mounted = serve_fio_file(st, file)
        .and_then(|()| st.mount_with("fio", "mnt-fio", &["--direct", &sock_arg, "--direct-size", &blob]));
    let (m, cache) = match mounted {
        Ok(x) => x,
        Err(e) => return loop_rows(p, file, size, 0.0, Some(Err(format!("{e:#}")))),
    };
    let t0 = Instant::now();
    let opened = pfs_mount::direct::DirectClient::connect(&sock)
        .and_then(|mut c| c.open("bench.dat").map(|f| (c, f)))
        .map_err(|e| e.to_string());
    let open_s = t0.elapsed().as_secs_f64();
    let rows = match opened {
        Ok((c, f)) if f.len() == size => {
            drop(c);
            let mut rows = loop_rows(p, file, size, st.args.runtime, Some(Ok(sock.clone())));
            for r in &mut rows {
                r.notes = format!(
                    "pfs mount --direct: bench.dat opened once (fetched, placed in shared memory: {open_s:.2} s), then read with DirectClient::read_at (memcpy, no system call) in the loop of the row above; {}",
                    r.notes
                );
            }
            rows
        }
        Ok((_, f)) => loop_rows(
            p,
            file,
            size,
            0.0,
            Some(Err(format!("opened {} bytes of {size}", f.len()))),
        ),
        Err(e) => loop_rows(p, file, size, 0.0, Some(Err(e))),
    };
    st.unmount(m, &cache);
    rows
}

/// Random 4 KiB and sequential 1 MiB reads for `runtime` seconds per
/// numjobs, each job on its own thread: `pread` on `file` (`via` None) or
/// `DirectClient::read_at` over the socket in `via`.
fn loop_rows(
    p: ReadPath,
    file: &Path,
    size: u64,
    runtime: f64,
    via: Option<Result<PathBuf, String>>,
) -> Vec<FioRow> {
    WORKLOADS
        .iter()
        .map(|&w| {
            let bs: u64 = if w.bs == "4k" { 4096 } else { 1 << 20 };
            let random = w.rw == "randread";
            let runs = NUMJOBS
                .iter()
                .map(|&n| match &via {
                    Some(Err(e)) => Measured::failed_because(e.clone()),
                    _ => {
                        log(&format!("{}: {} ×{n}…", p.label(), w.name));
                        Measured::from(read_loop(file, via.as_ref().and_then(|v| v.as_ref().ok()), size, bs, random, n, runtime))
                    }
                })
                .collect();
            FioRow {
                path: p,
                workload: w,
                runs,
                notes: if via.is_none() {
                    "one thread per job: pread(2) of the file on /dev/shm into a reused buffer, offsets from a seeded xorshift (random) or in order (sequential); the direct client's baseline"
                        .into()
                } else {
                    String::new()
                },
            }
        })
        .collect()
}

/// One timed loop (see [`loop_rows`]).
fn read_loop(
    file: &Path,
    sock: Option<&PathBuf>,
    size: u64,
    bs: u64,
    random: bool,
    jobs: u32,
    runtime: f64,
) -> anyhow::Result<FioResult> {
    use std::os::unix::fs::FileExt;
    let blocks = (size / bs).max(1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let t0 = Instant::now();
    let counts: Vec<anyhow::Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|j| {
                let stop = &stop;
                s.spawn(move || -> anyhow::Result<u64> {
                    let mut buf = vec![0u8; bs as usize];
                    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(j + 1);
                    let mut next = |i: u64| {
                        if random {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            (x % blocks) * bs
                        } else {
                            (i % blocks) * bs
                        }
                    };
                    let mut ops = 0u64;
                    match sock {
                        None => {
                            let f = std::fs::File::open(file)?;
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                for _ in 0..256 {
                                    f.read_at(&mut buf, next(ops))?;
                                    ops += 1;
                                }
                            }
                        }
                        Some(sock) => {
                            let mut c = pfs_mount::direct::DirectClient::connect(sock)?;
                            let f = c.open("bench.dat")?;
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                for _ in 0..256 {
                                    c.read_at(&f, next(ops), &mut buf);
                                    ops += 1;
                                }
                            }
                        }
                    }
                    std::hint::black_box(&buf);
                    Ok(ops)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(runtime));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a reader thread panicked")))
            })
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut ops = 0;
    for c in counts {
        ops += c?;
    }
    Ok(FioResult {
        iops: ops as f64 / secs,
        bw_bytes: (ops * bs) as f64 / secs,
        io_bytes: ops * bs,
        runtime_ms: (secs * 1e3) as u64,
    })
}
