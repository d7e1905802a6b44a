//! `pfs bench files`: file transfer against the tools people use, in one run,
//! on loopback, on each filesystem asked for (`--fs tmpfs,ext4`). Per
//! filesystem, four groups of rows, each receiver starting empty:
//!
//! - a cold single file of random data (1 GiB): PFS, rsync, `cp -a`, in
//!   rounds (`--rounds`, the tools' order rotating; each row its median run);
//! - cold random data in 64 MiB files, then its unchanged re-send: PFS;
//! - a small-file version pair (thousands of files, two successive releases
//!   of a source package): A then B over A for PFS and rsync, `cp -a` and
//!   `tar | tar` of A;
//! - the large version pair (the Linux tree): A then B over A for PFS, PFS
//!   with keys, rsync; B over a copy of A with `rsync -z`; `scp -r` of B;
//!   `cp -a` and `tar | tar` of A.
//!
//! Every row runs the real programs as children (`tools`); the sources,
//! destinations, stores and caches of a pass live on its filesystem (`fs`:
//! a tmpfs directory, or an ext4 image the harness loop-mounts, with the
//! page cache dropped before each row and its memory touched once before
//! the first). Elapsed is the client's wall time plus a `syncfs` of the
//! filesystem; CPU is client + server; wire bytes come from the loopback
//! interface counters. After each row the received
//! tree is compared with its source and the receiver's disk is measured
//! (`tree`). Ratios between rows of one filesystem go into the notes, and
//! the design's targets into a block under the table.

mod fs;
pub(crate) mod tools;
pub(crate) mod tree;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

pub use fs::FsKind;
use fs::{warm_list, BenchFs, Needs};
pub use tools::StorageKind;
use tools::{
    check_storage, floor_copy, pfs_notes, pfs_send, rsync_send, scp_send, start_pfs_server, start_rsyncd,
    BenchKeys, Floor, PfsServer, RsyncDaemon, ServeStorage, Timed,
};
use tree::{blocks, disk_use, make_random_tree, same_tree, stage, tree_of, DiskUse, Tree};

use super::netpath::NetPath;
use super::row::Row;
use super::table::{data, measured};
use crate::child::{have, tool, ChildGuard};
use crate::report::{Cell, Column, Header, Report, Section, Table, Target};
use crate::scratch::Scratch;
use crate::{Binary, Outcome};

/// `pfs bench files`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  pfs bench files                                  # fetch (once) both version pairs, every row on tmpfs
  pfs bench files --fs tmpfs,ext4 --out docs/bench/files    # the same rows on tmpfs, then on an ext4 image (root)
  pfs bench files --fs ext4 --only small-file      # the small-file pair alone, on ext4
  pfs bench files --pair ./v1 ./v2 --small-pair ./s1 ./s2 --cold-size 256M --cold-file-size 256M

The large version pair defaults to the one scripts/fetch-version-pair.sh
downloads and caches (two successive releases of the Linux source package),
the small-file pair to scripts/fetch-small-pair.sh's (two successive Django
sdists). A pair is fetched only when a row that needs it is selected.

--fs ext4 (root): the harness creates an ext4 image sized from the data,
formats it (mkfs.ext4), loop-mounts it in its scratch directory, and
unmounts and deletes it at the end and on Ctrl-C. Before each timed row it
drops the page cache (sync; echo 3 > /proc/sys/vm/drop_caches). Every row on
every filesystem ends with a syncfs of that filesystem inside its time.
Before the first timed row it writes, syncs and deletes one file of random
data as large as the largest data set (not timed), so the image's memory is
touched once before any row: in a VM a fresh page costs far more the first
time it is written, and the first row to write into it paid for that.

--rounds N (default 3): the cold single-file rows (PFS per receiver storage,
rsync, cp -a) run N rounds of every tool once, the order rotating from round
to round (round r starts at tool r mod k), each run into an empty
destination, the check passing on every run. Each row reports its median run
(by elapsed; the lower middle one for even N) and the elapsed range. Why: run
once in a fixed order, the first tool paid for the memory it touched first
(on one ext4 run, PFS first: 5.1 s of which 1.6 s syncfs; rsync after it:
1.0 s; by hand, the two are within 20 % of each other in either order).
Other rows run once.")]
pub struct BenchFilesArgs {
    /// Large version pair: two directories, A then B (default: fetched by scripts/fetch-version-pair.sh).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub pair: Option<Vec<PathBuf>>,
    /// Small-file version pair: two directories, A then B (default: fetched by scripts/fetch-small-pair.sh).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub small_pair: Option<Vec<PathBuf>>,
    /// Bytes of random data, in 64 MiB files, for the cold send and the unchanged re-send.
    #[arg(long, default_value = "1G", value_parser = crate::args::parse_size)]
    pub cold_size: u64,
    /// Bytes of the cold single-file rows (one file of random data).
    #[arg(long, default_value = "1G", value_parser = crate::args::parse_size)]
    pub cold_file_size: u64,
    /// Rounds of the cold single-file rows: every tool once per round, the order rotating; each row reports its median run. Example: --rounds 5
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Filesystems to run every row on, in this order: tmpfs, ext4 (a loop-mounted image; root). Example: --fs tmpfs,ext4
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tmpfs")]
    pub fs: Vec<FsKind>,
    /// Where the ext4 image goes (default: /dev/shm when it has room for the whole image, else /var/tmp). Example: --image-dir /var/tmp to put it on this host's disk
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// How each `pfs serve` keeps what it receives, one PFS row set per value: dest-only (--dest alone: one copy), store (--store and --dest: a second copy in a chunk store). Example: --receiver-storage dest-only
    #[arg(long, value_enum, value_delimiter = ',', default_value = "dest-only,store")]
    pub receiver_storage: Vec<StorageKind>,
    /// Only rows whose label contains this text (case-insensitive; labels end with their filesystem, e.g. `[ext4]`); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Write CSV, JSON and Markdown here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

impl BenchFilesArgs {
    /// Every row, on tmpfs, with the fetched pairs (the `pfs bench --full` row group).
    pub fn all_on_tmpfs(only: Vec<String>) -> Self {
        Self {
            pair: None,
            small_pair: None,
            cold_size: 1 << 30,
            cold_file_size: 1 << 30,
            rounds: 3,
            fs: vec![FsKind::Tmpfs],
            image_dir: None,
            receiver_storage: vec![StorageKind::DestOnly],
            only,
            out: None,
            json: false,
        }
    }
}

/// What a row moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    /// The cold single file into an empty receiver.
    ColdFile,
    /// The cold 64 MiB files into an empty receiver.
    ColdTree,
    /// The same again, unchanged.
    Resend,
    /// Small-file version A into an empty receiver.
    SmallA,
    /// Small-file version B over A.
    SmallB,
    /// Small-file version B over a copy of A that `cp -a` put in the
    /// destination (pfs never saw it: a destination filled by other means).
    SmallBCopied,
    /// Large version A into an empty receiver.
    PairA,
    /// Large version B over A (scp: B into an empty directory).
    PairB,
}

/// Who moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    /// `pfs send` to a `pfs serve` of this storage mode.
    Pfs(StorageKind),
    /// The same, every session protected (keys, sealed records).
    PfsKeys,
    Rsync,
    /// `rsync -z`, B over its own copy of A.
    RsyncZ,
    Scp,
    Floor(Floor),
}

/// Names that go into labels.
struct Naming {
    cold_file: String,
    cipher: &'static str,
    keys_storage: StorageKind,
}

impl Naming {
    fn label(&self, case: Case, tool: Tool) -> String {
        let pfs = |kind: StorageKind, prefix: String| {
            let what = match case {
                Case::ColdFile => format!("cold {} file ({})", self.cold_file, kind.empty()),
                Case::ColdTree => format!("cold send (random data, {})", kind.empty()),
                Case::Resend => "unchanged re-send (quick check)".into(),
                Case::SmallA => format!("small-file version A ({})", kind.empty()),
                Case::SmallB => "small-file version B over A".into(),
                Case::SmallBCopied => "small-file version B over a copy of A made by cp -a".into(),
                Case::PairA => format!("version A ({})", kind.empty()),
                Case::PairB => "version B over A".into(),
            };
            format!("{prefix}: {what}")
        };
        let data = |delta: &str| match case {
            Case::ColdFile => format!("cold {} file", self.cold_file),
            Case::ColdTree | Case::Resend => "cold send".into(),
            Case::SmallA => "small-file version A".into(),
            Case::SmallB => format!("small-file version B over A{delta}"),
            Case::SmallBCopied => format!("small-file version B over a copy of A{delta}"),
            Case::PairA => "version A".into(),
            Case::PairB => format!("version B over A{delta}"),
        };
        match tool {
            Tool::Pfs(kind) => match kind.label_tag() {
                None => pfs(kind, "PFS files".into()),
                Some(tag) => pfs(kind, format!("PFS files ({tag})")),
            },
            Tool::PfsKeys => pfs(self.keys_storage, format!("PFS files ({})", self.cipher)),
            Tool::Rsync => format!("Conventional (rsync): {}", data(" (delta)")),
            Tool::RsyncZ => format!("Conventional (rsync -z): {}", data(" (delta, compressed)")),
            Tool::Scp => "Conventional (scp): version B (full copy)".into(),
            Tool::Floor(f) => format!("Conventional ({}): {}", f.tool(), data("")),
        }
    }
}

/// Every row of one filesystem pass, in run order, before `--only`.
fn all_jobs(storage: &[StorageKind]) -> Vec<(Case, Tool)> {
    use Case::*;
    let mut j = Vec::new();
    j.extend(storage.iter().map(|&k| (ColdFile, Tool::Pfs(k))));
    j.extend([(ColdFile, Tool::Rsync), (ColdFile, Tool::Floor(Floor::Cp))]);
    for &k in storage {
        j.extend([(ColdTree, Tool::Pfs(k)), (Resend, Tool::Pfs(k))]);
    }
    for &k in storage {
        j.extend([(SmallA, Tool::Pfs(k)), (SmallB, Tool::Pfs(k))]);
    }
    // A store never adopts what is in the destination: one copy only.
    if storage.contains(&StorageKind::DestOnly) {
        j.push((SmallBCopied, Tool::Pfs(StorageKind::DestOnly)));
    }
    j.extend([
        (SmallA, Tool::Rsync),
        (SmallB, Tool::Rsync),
        (SmallA, Tool::Floor(Floor::Cp)),
        (SmallA, Tool::Floor(Floor::Tar)),
    ]);
    for &k in storage {
        j.extend([(PairA, Tool::Pfs(k)), (PairB, Tool::Pfs(k))]);
    }
    j.extend([
        (PairA, Tool::PfsKeys),
        (PairB, Tool::PfsKeys),
        (PairA, Tool::Rsync),
        (PairB, Tool::Rsync),
        (PairB, Tool::RsyncZ),
        (PairB, Tool::Scp),
        (PairA, Tool::Floor(Floor::Cp)),
        (PairA, Tool::Floor(Floor::Tar)),
    ]);
    j
}

/// The rows `--only` selects, with the rows they stand on: B over A needs A
/// first on the same receiver, the re-send needs the cold send.
fn selected(jobs: Vec<(Case, Tool)>, want: impl Fn(Case, Tool) -> bool) -> Vec<(Case, Tool)> {
    let before = |c: Case| match c {
        Case::Resend => Some(Case::ColdTree),
        Case::SmallB => Some(Case::SmallA),
        Case::PairB => Some(Case::PairA),
        _ => None,
    };
    let needs_before = |t: Tool| matches!(t, Tool::Pfs(_) | Tool::PfsKeys | Tool::Rsync);
    jobs.iter()
        .copied()
        .filter(|&(c, t)| {
            want(c, t)
                || jobs
                    .iter()
                    .any(|&(c2, t2)| t2 == t && needs_before(t) && before(c2) == Some(c) && want(c2, t2))
        })
        .collect()
}

/// One row of the study: its filesystem, what it moved and how, the
/// measured row, and what the receiver kept on disk after it.
#[derive(Debug, Clone)]
pub struct FilesRow {
    /// The filesystem it ran on.
    pub fs: FsKind,
    case: Case,
    tool: Tool,
    /// The measurements (label, elapsed, CPU, wire, check, notes).
    pub row: Row,
    /// The receiver's disk after the row (`None`: the row did not run).
    pub disk: Option<DiskUse>,
    /// The sync's share of the elapsed time, seconds.
    pub sync_s: f64,
    /// Runs the row was measured in (`--rounds` for the cold single file, else 1).
    pub rounds: u32,
    /// The fastest and slowest run's elapsed, seconds (`None`: the row did not run).
    pub elapsed_range: Option<(f64, f64)>,
}

/// The version pair given with `flag`, or fetched (and cached) by `script`
/// (overridden by the environment variable `env`).
fn fetched_pair(given: Option<&Vec<PathBuf>>, env: &str, script: &str) -> anyhow::Result<(Tree, Tree)> {
    if let Some(p) = given {
        return Ok((tree_of(&p[0])?, tree_of(&p[1])?));
    }
    let script = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts")
            .join(script)
    });
    if !script.exists() {
        bail!(
            "{} is missing (give the pair's directories, or set {env} to the fetch script)",
            script.display()
        );
    }
    eprintln!(
        "pfs bench files: fetching a version pair with {} (cached after the first run)…",
        script.display()
    );
    // Its progress goes straight to our stderr (a first fetch takes minutes).
    let mut child = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("running {}", script.display()))?;
    let mut stdout = child.stdout.take().context("fetch script stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let mut guard = ChildGuard::new(child);
    let Some(status) = guard.wait_timeout(Duration::from_secs(1800)) else {
        bail!("{} did not finish within 30 minutes", script.display());
    };
    drop(guard);
    if !status.success() {
        bail!("{} failed ({status}; see its messages above)", script.display());
    }
    let text = reader.join().unwrap_or_default();
    let dirs: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if dirs.len() < 2 {
        bail!(
            "{} printed {} directories, expected 2",
            script.display(),
            dirs.len()
        );
    }
    Ok((
        tree_of(Path::new(dirs[0].trim()))?,
        tree_of(Path::new(dirs[1].trim()))?,
    ))
}

/// The data of a run: what was fetched or given, and the generated sizes.
struct DataSets {
    cold_file: Option<u64>,
    cold_tree: Option<u64>,
    small: Option<(Tree, Tree)>,
    pair: Option<(Tree, Tree)>,
}

impl DataSets {
    /// What one filesystem pass needs at its fullest: every source, plus the
    /// largest group's receivers (PFS: destination and store; rsync: the
    /// tree and the copy for `-z`), with room for temporary files.
    fn needs(&self) -> Needs {
        let mut bytes = 0u64;
        let mut inodes = 0u64;
        let mut peak = (0u64, 0u64);
        let mut group = |src_bytes: u64, src_inodes: u64, factor: u64, one: (u64, u64)| {
            bytes += src_bytes;
            inodes += src_inodes;
            let g = (one.0 * factor / 2 + (64 << 20), one.1 * factor / 2);
            peak = (peak.0.max(g.0), peak.1.max(g.1));
        };
        if let Some(n) = self.cold_file {
            group(blocks(n), 2, 4, (blocks(n), 2));
        }
        if let Some(n) = self.cold_tree {
            group(blocks(n), 2 + n / (64 << 20), 4, (blocks(n), 2 + n / (64 << 20)));
        }
        for (a, b) in [&self.small, &self.pair].into_iter().flatten() {
            let one = (a.block_bytes.max(b.block_bytes), a.inodes().max(b.inodes()));
            group(a.block_bytes + b.block_bytes, a.inodes() + b.inodes(), 5, one);
        }
        Needs {
            bytes: bytes + peak.0,
            inodes: inodes + peak.1 + 1024,
        }
    }
}

/// Sources of one pass, staged on its filesystem.
struct Sources {
    cold_file: Option<Tree>,
    cold_tree: Option<Tree>,
    small: Option<(Tree, Tree)>,
    pair: Option<(Tree, Tree)>,
}

impl Sources {
    /// Bytes of the largest data set staged: what one row moves at most.
    fn largest(&self) -> u64 {
        let pairs = [&self.small, &self.pair].into_iter().flatten();
        [&self.cold_file, &self.cold_tree]
            .into_iter()
            .flatten()
            .chain(pairs.flat_map(|(a, b)| [a, b]))
            .map(|t| t.bytes)
            .max()
            .unwrap_or(0)
    }
}

fn stage_sources(fs: &BenchFs, d: &DataSets) -> anyhow::Result<Sources> {
    let src = fs.root().join("src");
    eprintln!("pfs bench files [{}]: staging the data…", fs.kind());
    let s = Sources {
        cold_file: d
            .cold_file
            .map(|n| make_random_tree(&src.join("one"), n, u64::MAX))
            .transpose()?,
        cold_tree: d
            .cold_tree
            .map(|n| make_random_tree(&src.join("cold"), n, 64 << 20))
            .transpose()?,
        // Both versions under one name ("tree"), so each tool writes B over A
        // at the same place.
        small: d
            .small
            .as_ref()
            .map(|(a, b)| anyhow::Ok((stage(a, &src.join("small-a"))?, stage(b, &src.join("small-b"))?)))
            .transpose()?,
        pair: d
            .pair
            .as_ref()
            .map(|(a, b)| anyhow::Ok((stage(a, &src.join("a"))?, stage(b, &src.join("b"))?)))
            .transpose()?,
    };
    // The sender's quick-check cache ignores files modified within the last
    // 2 s (their mtime could still change within one timestamp tick); data
    // sent in practice is older than that, so let the fresh data age.
    std::thread::sleep(Duration::from_millis(2100));
    Ok(s)
}

/// What every row of a pass shares.
struct Pass<'a> {
    fs: &'a BenchFs,
    pfs: &'a Binary,
    naming: &'a Naming,
    net: &'a NetPath,
    rows: Vec<FilesRow>,
}

/// One timed run of a row: its measurements, the receiver's disk after it,
/// and the sync's share of its elapsed time.
#[derive(Debug, Clone)]
struct Run {
    row: Row,
    disk: DiskUse,
    sync_s: f64,
}

/// The order of `k` tools in round `round`: starting at tool `round mod k`,
/// so that over k rounds each tool runs first once.
fn rotation(k: usize, round: usize) -> Vec<usize> {
    (0..k).map(|i| (round + i) % k).collect()
}

/// Which of the runs with these elapsed times is the median one: the middle
/// of them sorted (the lower middle for an even count, so the row reports a
/// run that happened, not an average of two); ties keep run order.
fn median_index(elapsed: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..elapsed.len()).collect();
    order.sort_by(|&a, &b| elapsed[a].total_cmp(&elapsed[b]));
    order.get(elapsed.len().checked_sub(1)? / 2).copied()
}

/// The row of a tool measured in rounds: its median run, with the rounds
/// and the elapsed range in its notes (after the sync's share, which stays
/// first), and that range.
fn median_run(mut runs: Vec<Run>) -> Option<(Run, (f64, f64))> {
    let elapsed: Vec<f64> = runs.iter().map(|r| r.row.elapsed_s).collect();
    let i = median_index(&elapsed)?;
    let lo = elapsed.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = elapsed.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let n = runs.len();
    let mut run = runs.swap_remove(i);
    let plural = if n == 1 { "" } else { "s" };
    let said = format!("median of {n} round{plural} (elapsed min–max {lo:.3}–{hi:.3} s)");
    run.row.notes = match run.row.notes.split_once("; ") {
        Some((sync, rest)) => format!("{sync}; {said}; {rest}"),
        None => format!("{}; {said}", run.row.notes),
    };
    Some((run, (lo, hi)))
}

impl Pass<'_> {
    fn label(&self, case: Case, tool: Tool) -> String {
        format!("{} [{}]", self.naming.label(case, tool), self.fs.kind())
    }

    /// A row measured once.
    fn push(&mut self, case: Case, tool: Tool, r: anyhow::Result<Run>) {
        self.push_runs(
            case,
            tool,
            1,
            r.map(|run| (run.row.elapsed_s, run.row.elapsed_s, run)),
        );
    }

    /// A row of `rounds` runs: `Ok` with the elapsed range and the run it reports.
    fn push_runs(&mut self, case: Case, tool: Tool, rounds: u32, r: anyhow::Result<(f64, f64, Run)>) {
        let label = self.label(case, tool);
        let (row, disk, sync_s, elapsed_range) = match r {
            Ok((lo, hi, run)) => (run.row, Some(run.disk), run.sync_s, Some((lo, hi))),
            Err(e) => {
                let row = if e.to_string().contains("not installed") || e.to_string().contains("needs root") {
                    Row::skipped(&label, "Transfer", format!("{e:#}"))
                } else {
                    Row::failed(&label, "Transfer", &e)
                };
                (row, None, 0.0, None)
            }
        };
        self.rows.push(FilesRow {
            fs: self.fs.kind(),
            case,
            tool,
            row,
            disk,
            sync_s,
            rounds,
            elapsed_range,
        });
    }

    /// A measured row: its numbers, the check of the received tree, its notes.
    fn row(&self, case: Case, tool: Tool, data: &Tree, t: &Timed, same: bool, notes: String) -> Row {
        let label = self.label(case, tool);
        let mut r = Row::measured(&label, "Transfer", data.bytes, t.wire, t.elapsed, t.user, t.sys);
        r.transport = if matches!(tool, Tool::Floor(_)) {
            "-"
        } else {
            "TCP"
        }
        .into();
        r.integrity = if same { "OK" } else { "MISMATCH" }.into();
        r.notes = format!("sync {:.2} s; {notes}", t.sync);
        r
    }

    /// One PFS step on a running server: page cache dropped, the send timed,
    /// the landed tree checked, the receiver's disk measured.
    fn pfs_step(
        &self,
        tool: Tool,
        server: &PfsServer,
        st: &ServeStorage,
        cache: &Path,
        keys: bool,
        (case, data, remote, extra): (Case, &Tree, &str, &[&str]),
    ) -> anyhow::Result<Run> {
        let name = data.dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let landed = st.dest.join(remote).join(name);
        self.fs.before_row()?;
        let (t, v) = pfs_send(server, &data.dir, remote, cache, extra, self.net, self.fs)?;
        let same = same_tree(&data.dir, &landed)?;
        let disk = disk_use(&st.dirs(), &st.dest)?;
        let mut flags: Vec<&str> = extra.to_vec();
        if keys {
            flags.push("keys");
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!("{}; ", flags.join(" "))
        };
        let row = self.row(case, tool, data, &t, same, format!("{flags}{}", pfs_notes(&v)));
        Ok(Run {
            row,
            disk,
            sync_s: t.sync,
        })
    }

    /// PFS rows on one server: `steps` of (case, data, remote dir, extra send flags).
    fn pfs_series(&mut self, tool: Tool, storage: StorageKind, steps: &[(Case, &Tree, &str, &[&str])]) {
        if steps.is_empty() {
            return;
        }
        let dir = self.fs.root().join("rx-pfs");
        let st = ServeStorage::new(storage, &dir);
        let cache = dir.join("sender-cache");
        let keys = match tool {
            Tool::PfsKeys => match BenchKeys::new(&dir.join("keys")) {
                Ok(k) => Some(k),
                Err(e) => {
                    for (case, ..) in steps {
                        self.push(*case, tool, Err(anyhow::anyhow!("keys: {e:#}")));
                    }
                    return;
                }
            },
            _ => None,
        };
        match start_pfs_server(&self.pfs.path, &st, keys.as_ref()) {
            Err(e) => {
                for (case, ..) in steps {
                    self.push(*case, tool, Err(anyhow::anyhow!("{e:#}")));
                }
            }
            Ok(server) => {
                for &step in steps {
                    eprintln!("pfs bench files: {} …", self.label(step.0, tool));
                    let r = self.pfs_step(tool, &server, &st, &cache, keys.is_some(), step);
                    self.push(step.0, tool, r);
                }
                drop(server);
            }
        }
        st.remove();
        let _ = std::fs::remove_dir_all(&dir);
        self.fs.trim();
    }

    /// One rsync step on a running daemon: page cache dropped, the transfer
    /// timed, the tree in the module checked, the module's disk measured.
    fn rsync_step(
        &self,
        d: &RsyncDaemon,
        module: &Path,
        (case, t, data, remote): (Case, Tool, &Tree, &str),
    ) -> anyhow::Result<Run> {
        let z = t == Tool::RsyncZ;
        self.fs.before_row()?;
        let (tm, stats) = rsync_send(d, &data.dir, remote, z, self.net, self.fs)?;
        let same = same_tree(&data.dir, &module.join(remote))?;
        let disk = disk_use(&[module], module)?;
        let how = if z { "-a -z" } else { "-a" };
        let notes = format!("daemon, {how} (delta transfer); {stats}");
        Ok(Run {
            row: self.row(case, t, data, &tm, same, notes),
            disk,
            sync_s: tm.sync,
        })
    }

    /// The PFS row of B sent over a copy of A that `cp -a` put where B
    /// lands (not timed), on a fresh `pfs serve --dest`: the receiver has
    /// never seen A, as after a migration from rsync.
    fn pfs_over_copy(&mut self, tool: Tool, a: &Tree, b: &Tree) {
        let case = Case::SmallBCopied;
        // Where `pfs_series` puts its destination: A goes there first.
        let st = ServeStorage::new(StorageKind::DestOnly, &self.fs.root().join("rx-pfs"));
        let name = b.dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
        let target = st.dest.join("copied").join(name);
        let placed = std::fs::create_dir_all(&target)
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                let out = std::process::Command::new("cp")
                    .arg("-a")
                    .arg(a.dir.join("."))
                    .arg(&target)
                    .output()?;
                anyhow::ensure!(
                    out.status.success(),
                    "cp -a: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                Ok(())
            });
        match placed {
            Ok(()) => self.pfs_series(
                tool,
                StorageKind::DestOnly,
                &[(case, b, "copied", &["--compress"])],
            ),
            Err(e) => {
                self.push(case, tool, Err(e));
                let _ = std::fs::remove_dir_all(self.fs.root().join("rx-pfs"));
            }
        }
    }

    /// rsync rows on one daemon: `steps` of (case, data, module dir, -z).
    fn rsync_series(&mut self, steps: &[(Case, Tool, &Tree, &str)], stage_z: Option<&Tree>) {
        if steps.is_empty() {
            return;
        }
        if !have(&tool("rsync", "rsync")) {
            for &(case, t, ..) in steps {
                self.push(case, t, Err(rsync_missing()));
            }
            return;
        }
        let dir = self.fs.root().join("rx-rsync");
        let module = dir.join("module");
        match start_rsyncd(&dir.join("conf"), &module) {
            Err(e) => {
                for &(case, t, ..) in steps {
                    self.push(case, t, Err(anyhow::anyhow!("{e:#}")));
                }
            }
            Ok(d) => {
                for &step in steps {
                    let (case, t, _, remote) = step;
                    let z = t == Tool::RsyncZ;
                    eprintln!("pfs bench files: {} …", self.label(case, t));
                    let target = module.join(remote);
                    // The compressed run starts from its own copy of A (not timed).
                    let staged = match (z, stage_z) {
                        (false, _) => Ok(()),
                        (true, None) => Err(anyhow::anyhow!("no version A to send B over")),
                        (true, Some(a)) => stage(a, &module.join("z")).and_then(|_| {
                            std::fs::rename(module.join("z").join("tree"), &target)?;
                            Ok(std::fs::remove_dir(module.join("z"))?)
                        }),
                    };
                    let r = staged.and_then(|()| self.rsync_step(&d, &module, step));
                    self.push(case, t, r);
                    if z {
                        let _ = std::fs::remove_dir_all(&target);
                    }
                }
                drop(d);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        self.fs.trim();
    }

    /// One local copy: `floor` of `data` into a new directory, removed after.
    fn floor_once(&self, case: Case, floor: Floor, data: &Tree) -> anyhow::Result<Run> {
        let tool = Tool::Floor(floor);
        let dst = self.fs.root().join("rx-floor");
        let r = self.fs.before_row().and_then(|()| {
            let t = floor_copy(floor, &data.dir, &dst, self.fs)?;
            let same = same_tree(&data.dir, &dst)?;
            let disk = disk_use(&[&dst], &dst)?;
            let notes = match floor {
                Floor::Cp => "local copy, cp -a SRC/. DST",
                Floor::Tar => "local copy, tar -C SRC -cf - . | tar -C DST -xf -",
            };
            Ok(Run {
                row: self.row(case, tool, data, &t, same, notes.into()),
                disk,
                sync_s: t.sync,
            })
        });
        let _ = std::fs::remove_dir_all(&dst);
        r
    }

    /// One local copy row.
    fn floor(&mut self, case: Case, floor: Floor, data: &Tree) {
        eprintln!("pfs bench files: {} …", self.label(case, Tool::Floor(floor)));
        let r = self.floor_once(case, floor, data);
        self.push(case, Tool::Floor(floor), r);
        self.fs.trim();
    }

    fn scp(&mut self, data: &Tree) {
        let (case, t) = (Case::PairB, Tool::Scp);
        eprintln!("pfs bench files: {} …", self.label(case, t));
        let dir = self.fs.root().join("rx-scp");
        let dst = dir.join("dest");
        let r = std::fs::create_dir_all(&dst)
            .map_err(anyhow::Error::from)
            .and_then(|()| self.fs.before_row())
            .and_then(|()| {
                let tm = scp_send(&dir, &data.dir, &dst, self.net, self.fs)?;
                let landed = dst.join(data.dir.file_name().unwrap_or_default());
                let same = same_tree(&data.dir, &landed)?;
                let disk = disk_use(&[&dst], &dst)?;
                let notes =
                    "scp -O -r (legacy protocol; follows symlinks), Compression=no; receiver CPU = sshd tree";
                Ok(Run {
                    row: self.row(case, t, data, &tm, same, notes.into()),
                    disk,
                    sync_s: tm.sync,
                })
            });
        self.push(case, t, r);
        let _ = std::fs::remove_dir_all(&dir);
        self.fs.trim();
    }

    /// One run of a cold single-file tool from nothing: its receiver (server
    /// or daemon, and the sender's cache) set up, the run, all of it removed
    /// again — untimed, so every run starts from an empty destination — and
    /// no trim, so the rounds after it write into memory already touched.
    fn cold_file_once(&self, tool: Tool, data: &Tree) -> anyhow::Result<Run> {
        let case = Case::ColdFile;
        match tool {
            Tool::Pfs(kind) => {
                let dir = self.fs.root().join("rx-pfs");
                let st = ServeStorage::new(kind, &dir);
                // A server per run: it must not remember the previous run's destination.
                let r = start_pfs_server(&self.pfs.path, &st, None).and_then(|server| {
                    self.pfs_step(
                        tool,
                        &server,
                        &st,
                        &dir.join("sender-cache"),
                        false,
                        (case, data, "one", &[]),
                    )
                });
                st.remove();
                let _ = std::fs::remove_dir_all(&dir);
                r
            }
            Tool::Rsync => {
                let dir = self.fs.root().join("rx-rsync");
                let module = dir.join("module");
                let r = start_rsyncd(&dir.join("conf"), &module)
                    .and_then(|d| self.rsync_step(&d, &module, (case, tool, data, "one")));
                let _ = std::fs::remove_dir_all(&dir);
                r
            }
            Tool::Floor(f) => self.floor_once(case, f, data),
            Tool::PfsKeys | Tool::RsyncZ | Tool::Scp => {
                bail!("{} is not a cold single-file row", self.label(case, tool))
            }
        }
    }

    /// The cold single-file rows, `rounds` rounds of every tool of `tools`
    /// once, the order rotating (see [`rotation`]); one row per tool, in the
    /// order of `tools`, reporting its median run. A run that fails or does
    /// not arrive intact fails its tool's row (its later rounds are not run).
    fn cold_file_rounds(&mut self, tools: &[Tool], data: &Tree, rounds: u32) {
        if tools.is_empty() {
            return;
        }
        let k = tools.len();
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); k];
        // Why a tool's row failed (its later rounds are not run), and whether
        // that was a received file that differs from its source.
        let mut failed: Vec<Option<anyhow::Error>> = tools
            .iter()
            .map(|&t| (t == Tool::Rsync && !have(&tool("rsync", "rsync"))).then(rsync_missing))
            .collect();
        let mut mismatch = vec![false; k];
        for round in 0..rounds {
            for i in rotation(k, round as usize) {
                if failed[i].is_some() {
                    continue;
                }
                let (tool, label) = (tools[i], self.label(Case::ColdFile, tools[i]));
                eprintln!("pfs bench files: {label} (round {} of {rounds}) …", round + 1);
                match self.cold_file_once(tool, data) {
                    Ok(run) if run.row.integrity == "OK" => {
                        eprintln!(
                            "pfs bench files:   {:.3} s (sync {:.3} s)",
                            run.row.elapsed_s, run.sync_s
                        );
                        runs[i].push(run);
                    }
                    Ok(_) => {
                        mismatch[i] = true;
                        failed[i] = Some(anyhow::anyhow!(
                            "round {} of {rounds}: the received file differs from its source",
                            round + 1
                        ));
                    }
                    Err(e) => failed[i] = Some(anyhow::anyhow!("round {} of {rounds}: {e:#}", round + 1)),
                }
            }
        }
        for (i, (runs, failed)) in runs.into_iter().zip(failed).enumerate() {
            let r = match (failed, median_run(runs)) {
                (Some(e), _) => Err(e),
                (None, Some((run, (lo, hi)))) => Ok((lo, hi, run)),
                (None, None) => Err(anyhow::anyhow!("no run")),
            };
            self.push_runs(Case::ColdFile, tools[i], rounds, r);
            if mismatch[i] {
                if let Some(last) = self.rows.last_mut() {
                    last.row.integrity = "MISMATCH".into();
                }
            }
        }
        self.fs.trim();
    }
}

fn rsync_missing() -> anyhow::Error {
    anyhow::anyhow!("rsync not installed (apt-get install rsync)")
}

/// A PFS step before it is selected: case, data (if staged), remote dir, send flags.
type Step<'a> = (Case, Option<&'a Tree>, &'static str, &'static [&'static str]);

/// The steps of `cases` that `jobs` selects for `t` and whose data exists.
fn pick<'a>(
    cases: &[Step<'a>],
    t: Tool,
    jobs: &[(Case, Tool)],
) -> Vec<(Case, &'a Tree, &'static str, &'static [&'static str])> {
    cases
        .iter()
        .filter_map(|&(c, d, remote, extra)| {
            d.filter(|_| jobs.contains(&(c, t)))
                .map(|d| (c, d, remote, extra))
        })
        .collect()
}

/// Runs the selected `jobs` on `fs` over the staged `src`.
fn run_pass(pass: &mut Pass<'_>, jobs: &[(Case, Tool)], src: &Sources, storage: &[StorageKind], rounds: u32) {
    let has = |c: Case, t: Tool| jobs.contains(&(c, t));
    let (small_a, small_b) = (src.small.as_ref().map(|p| &p.0), src.small.as_ref().map(|p| &p.1));
    let (pair_a, pair_b) = (src.pair.as_ref().map(|p| &p.0), src.pair.as_ref().map(|p| &p.1));

    // Cold single file: in rounds, the tools' order rotating.
    if let Some(d) = &src.cold_file {
        let tools: Vec<Tool> = storage
            .iter()
            .map(|&k| Tool::Pfs(k))
            .chain([Tool::Rsync, Tool::Floor(Floor::Cp)])
            .filter(|&t| has(Case::ColdFile, t))
            .collect();
        pass.cold_file_rounds(&tools, d, rounds);
    }
    // Cold files and their unchanged re-send.
    for &k in storage {
        let steps = pick(
            &[
                (Case::ColdTree, src.cold_tree.as_ref(), "cold", &[]),
                (Case::Resend, src.cold_tree.as_ref(), "cold", &[]),
            ],
            Tool::Pfs(k),
            jobs,
        );
        pass.pfs_series(Tool::Pfs(k), k, &steps);
    }
    // Small-file pair. A cold send goes uncompressed, as rsync's A row (no
    // -z): on loopback compressing only costs CPU (the Linux tree: zstd
    // level 3 took 4-5 s of CPU for 1.2 GB of literals). B over A goes with
    // --compress (zstd level 3 on literal chunks, kept only where it saves
    // bytes): it is the row whose wire is compared with rsync's.
    for &k in storage {
        let steps = pick(
            &[
                (Case::SmallA, small_a, "small", &[]),
                (Case::SmallB, small_b, "small", &["--compress"]),
            ],
            Tool::Pfs(k),
            jobs,
        );
        pass.pfs_series(Tool::Pfs(k), k, &steps);
    }
    let copied = Tool::Pfs(StorageKind::DestOnly);
    if let (true, Some(a), Some(b)) = (has(Case::SmallBCopied, copied), small_a, small_b) {
        pass.pfs_over_copy(copied, a, b);
    }
    let rs: Vec<_> = [(Case::SmallA, small_a), (Case::SmallB, small_b)]
        .into_iter()
        .filter_map(|(c, d)| {
            d.filter(|_| has(c, Tool::Rsync))
                .map(|d| (c, Tool::Rsync, d, "tree"))
        })
        .collect();
    pass.rsync_series(&rs, None);
    for f in [Floor::Cp, Floor::Tar] {
        if let (true, Some(d)) = (has(Case::SmallA, Tool::Floor(f)), small_a) {
            pass.floor(Case::SmallA, f, d);
        }
    }
    // Large pair (compression as for the small-file pair).
    for &k in storage {
        let steps = pick(
            &[
                (Case::PairA, pair_a, "pair", &[]),
                (Case::PairB, pair_b, "pair", &["--compress"]),
            ],
            Tool::Pfs(k),
            jobs,
        );
        pass.pfs_series(Tool::Pfs(k), k, &steps);
    }
    let steps = pick(
        &[
            (Case::PairA, pair_a, "pair", &[]),
            (Case::PairB, pair_b, "pair", &["--compress"]),
        ],
        Tool::PfsKeys,
        jobs,
    );
    let keys_storage = pass.naming.keys_storage;
    pass.pfs_series(Tool::PfsKeys, keys_storage, &steps);
    let rs: Vec<_> = [
        (Case::PairA, Tool::Rsync, pair_a, "tree"),
        (Case::PairB, Tool::Rsync, pair_b, "tree"),
        (Case::PairB, Tool::RsyncZ, pair_b, "treez"),
    ]
    .into_iter()
    .filter_map(|(c, t, d, remote)| d.filter(|_| has(c, t)).map(|d| (c, t, d, remote)))
    .collect();
    pass.rsync_series(&rs, pair_a);
    if let (true, Some(d)) = (has(Case::PairB, Tool::Scp), pair_b) {
        pass.scp(d);
    }
    for f in [Floor::Cp, Floor::Tar] {
        if let (true, Some(d)) = (has(Case::PairA, Tool::Floor(f)), pair_a) {
            pass.floor(Case::PairA, f, d);
        }
    }
}

/// The files study's part of its report header (after the [`crate::report::Machine`] facts).
#[derive(Debug, Serialize)]
pub struct FilesSettings {
    /// Large version A's directory.
    pub version_a: String,
    /// Large version B's directory.
    pub version_b: String,
    /// Large version A's bytes.
    pub version_a_bytes: u64,
    /// Large version B's bytes.
    pub version_b_bytes: u64,
    /// Large version A's files.
    pub version_a_files: u64,
    /// Large version B's files.
    pub version_b_files: u64,
    /// Small-file version A: directory, files, bytes.
    pub small_a: String,
    /// Small-file version B: directory, files, bytes.
    pub small_b: String,
    /// Bytes of the cold data in 64 MiB files.
    pub cold_bytes: u64,
    /// Bytes of the cold single file.
    pub cold_file_bytes: u64,
    /// Each filesystem of the run, as set up.
    pub filesystems: Vec<String>,
    /// How each `pfs serve` kept what it received.
    pub receiver_storage: String,
    /// The network path of every row.
    pub network: String,
    /// Where sources, stores and destinations live.
    pub placement: String,
    /// Page cache and durability: what every row starts and ends with.
    pub method: String,
    /// Units and definitions.
    pub units: String,
}

/// The files study's report header.
pub type FilesHeader = Header<FilesSettings>;

/// Runs the study; [`Outcome::Failed`] when a row failed or a tree did not arrive intact.
pub fn run(args: BenchFilesArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let (header, rows) = collect(&args, pfs)?;
    let report = report(&header, &rows);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("files.csv"), report.csv("rows").unwrap_or_default())?;
        std::fs::write(
            dir.join("files.json"),
            serde_json::to_string_pretty(&report.json())?,
        )?;
        std::fs::write(dir.join("files.md"), report.markdown())?;
        eprintln!(
            "pfs bench files: wrote files.csv, files.json, files.md to {}",
            dir.display()
        );
    }
    let failed = rows
        .iter()
        .any(|r| r.row.status.is_failed() || r.row.integrity == "MISMATCH");
    Ok(if failed { Outcome::Failed } else { Outcome::Passed })
}

fn dedup<T: PartialEq + Copy>(v: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// The rows of the study (also the files row group of `pfs bench --full`).
pub fn collect(args: &BenchFilesArgs, pfs: &Binary) -> anyhow::Result<(FilesHeader, Vec<FilesRow>)> {
    let kinds = dedup(&args.fs);
    let storage = dedup(&args.receiver_storage);
    if kinds.is_empty() || storage.is_empty() {
        bail!("--fs and --receiver-storage need at least one value each");
    }
    // Refuse what cannot run before fetching or writing anything.
    for &k in &kinds {
        BenchFs::preflight(k)?;
    }
    for &k in &storage {
        if k != StorageKind::Store {
            // --dest alone is recent: say so plainly when this pfs lacks it.
            let probe = Scratch::new(Path::new("/var/tmp"), "pfs-bench-files-probe")?;
            check_storage(&pfs.path, k, probe.path()).with_context(|| {
                format!(
                    "--receiver-storage {}: this pfs serve does not run without --store (use --receiver-storage store)",
                    clap::ValueEnum::to_possible_value(&k)
                        .map(|v| v.get_name().to_string())
                        .unwrap_or_default()
                )
            })?;
        }
    }
    let naming = Naming {
        cold_file: human_size(args.cold_file_size),
        cipher: pfs_auth::Cipher::preferred().name(),
        keys_storage: storage[0],
    };
    let only: Vec<String> = args.only.iter().map(|s| s.to_lowercase()).collect();
    let want_label = |label: &str| only.is_empty() || only.iter().any(|o| label.to_lowercase().contains(o));
    let jobs_of = |fs: FsKind| {
        selected(all_jobs(&storage), |c, t| {
            want_label(&format!("{} [{fs}]", naming.label(c, t)))
        })
    };
    let any = |f: &dyn Fn(Case) -> bool| kinds.iter().any(|&k| jobs_of(k).iter().any(|&(c, _)| f(c)));
    let data = DataSets {
        cold_file: any(&|c| c == Case::ColdFile).then_some(args.cold_file_size),
        cold_tree: any(&|c| matches!(c, Case::ColdTree | Case::Resend)).then_some(args.cold_size),
        small: if any(&|c| matches!(c, Case::SmallA | Case::SmallB | Case::SmallBCopied)) {
            Some(fetched_pair(
                args.small_pair.as_ref(),
                "PFS_FILES_SMALL_FETCH",
                "fetch-small-pair.sh",
            )?)
        } else {
            None
        },
        pair: if any(&|c| matches!(c, Case::PairA | Case::PairB)) {
            Some(fetched_pair(
                args.pair.as_ref(),
                "PFS_FILES_FETCH",
                "fetch-version-pair.sh",
            )?)
        } else {
            None
        },
    };
    for (what, p) in [("small-file", &data.small), ("large", &data.pair)] {
        if let Some((a, b)) = p {
            eprintln!(
                "pfs bench files: {what} pair: A {} ({} files, {:.1} MB), B {} ({} files, {:.1} MB)",
                a.dir.display(),
                a.files,
                a.bytes as f64 / 1e6,
                b.dir.display(),
                b.files,
                b.bytes as f64 / 1e6
            );
        }
    }
    // With root, every row runs in a network namespace of its own, so the
    // loopback counters see this study's bytes and no one else's.
    let net = if rustix::process::geteuid().is_root() {
        NetPath::private_loopback()?
    } else {
        NetPath::Loopback
    };
    let needs = data.needs();
    let warm = warm_list(&pfs.path, &tool("rsync", "rsync"));
    let mut rows: Vec<FilesRow> = Vec::new();
    let mut filesystems = Vec::new();
    for &kind in &kinds {
        let jobs = jobs_of(kind);
        if jobs.is_empty() {
            continue;
        }
        // A filesystem that cannot be set up or filled fails its own rows;
        // the other filesystems' rows still run.
        let failed = |rows: &mut Vec<FilesRow>, e: &anyhow::Error| {
            for &(c, t) in &jobs {
                let label = format!("{} [{kind}]", naming.label(c, t));
                rows.push(FilesRow {
                    fs: kind,
                    case: c,
                    tool: t,
                    row: Row::failed(&label, "Transfer", e),
                    disk: None,
                    sync_s: 0.0,
                    rounds: if c == Case::ColdFile { args.rounds } else { 1 },
                    elapsed_range: None,
                });
            }
        };
        let fs = match BenchFs::new(kind, needs, args.image_dir.as_deref(), warm.clone()) {
            Ok(fs) => fs,
            Err(e) => {
                filesystems.push(format!("{kind}: not set up: {e:#}"));
                failed(&mut rows, &e);
                continue;
            }
        };
        eprintln!("pfs bench files: {}", fs.about());
        filesystems.push(fs.about().to_string());
        let src = match stage_sources(&fs, &data) {
            Ok(s) => s,
            Err(e) => {
                failed(&mut rows, &e.context(format!("staging the data on {kind}")));
                continue;
            }
        };
        if let Err(e) = fs.pre_touch(src.largest()) {
            failed(&mut rows, &e.context(format!("pre-touching the {kind} image")));
            continue;
        }
        let mut pass = Pass {
            fs: &fs,
            pfs,
            naming: &naming,
            net: &net,
            rows: Vec::new(),
        };
        run_pass(&mut pass, &jobs, &src, &storage, args.rounds);
        rows.extend(pass.rows);
        drop(fs);
    }
    add_ratios(&mut rows);

    let (a, b) = data.pair.clone().unzip();
    let (sa, sb) = data.small.clone().unzip();
    let about = |t: &Option<Tree>| {
        t.as_ref()
            .map(|t| {
                format!(
                    "{} ({} files, {:.1} MB)",
                    t.dir.display(),
                    t.files,
                    t.bytes as f64 / 1e6
                )
            })
            .unwrap_or_else(|| "not run".into())
    };
    let header = FilesHeader::new(
        pfs,
        FilesSettings {
            version_a: a.as_ref().map(|t| t.dir.display().to_string()).unwrap_or_default(),
            version_b: b.as_ref().map(|t| t.dir.display().to_string()).unwrap_or_default(),
            version_a_bytes: a.as_ref().map_or(0, |t| t.bytes),
            version_b_bytes: b.as_ref().map_or(0, |t| t.bytes),
            version_a_files: a.as_ref().map_or(0, |t| t.files),
            version_b_files: b.as_ref().map_or(0, |t| t.files),
            small_a: about(&sa),
            small_b: about(&sb),
            cold_bytes: data.cold_tree.unwrap_or(0),
            cold_file_bytes: data.cold_file.unwrap_or(0),
            filesystems,
            receiver_storage: storage
                .iter()
                .map(|k| match k {
                    StorageKind::Store => "PFS files (with store): pfs serve --store DIR --dest DIR",
                    StorageKind::DestOnly => "PFS files: pfs serve --dest DIR (one copy; index in DEST/.pfs)",
                })
                .collect::<Vec<_>>()
                .join("; "),
            network: match &net {
                NetPath::Private(_) => net.name(),
                _ => format!("{} (the host's lo counters: other processes' loopback traffic counts too)", net.name()),
            },
            placement: "every row's sources, destination, store, rsync module, cp/tar target and the sender's cache on the filesystem named in its label; each receiver starts empty (B over A: over its own A)".into(),
            method: format!(
                "ext4: the image pre-touched before the first timed row (one file of random data as large as the largest data set written, synced and deleted, not trimmed), so no row pays for the first use of its memory; before each timed run on ext4: sync; echo 3 > /proc/sys/vm/drop_caches, then each tool run once with --version (data cold, programs warm); tmpfs has no cache to drop. Cold single file: {} of every tool, the order rotating (round r starts at tool r mod k), each run into an empty destination; each row is its median run by elapsed (the range in its notes); other rows run once. Every row, every filesystem: elapsed = client wall time + syncfs(2) of the row's filesystem right after the client exits (the sync's share is in the notes); no tool fsyncs on its own (pfs serve without --fsync)",
                match args.rounds {
                    1 => "1 round".to_string(),
                    n => format!("{n} rounds"),
                }
            ),
            units: "MB = 10^6 bytes; elapsed = client wall time + sync; CPU = client + server processes (not the kernel's writeback); wire = loopback interface bytes, both directions, TCP/IP headers included (0 for local copies); rx_disk = allocated blocks of everything the receiver keeps (destination, store, index); disk/held = rx_disk ÷ allocated blocks of the received trees alone".into(),
        },
    );
    Ok((header, rows))
}

/// `1 GiB`, `256 MiB`, or bytes.
fn human_size(n: u64) -> String {
    for (unit, name) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if n >= unit && n.is_multiple_of(unit) {
            return format!("{} {name}", n / unit);
        }
    }
    if n >= 1 << 20 {
        return format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64);
    }
    format!("{n} B")
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Ratios between rows of one filesystem, into the notes of the PFS rows
/// (and of rsync against the floors).
fn add_ratios(rows: &mut [FilesRow]) {
    let snapshot = rows.to_vec();
    let find = |fs: FsKind, c: Case, t: Tool| {
        snapshot
            .iter()
            .find(|r| r.fs == fs && r.case == c && r.tool == t && r.row.ran())
            .map(|r| &r.row)
    };
    for r in rows.iter_mut().filter(|r| r.row.ran()) {
        let (fs, c) = (r.fs, r.case);
        let mut parts: Vec<String> = Vec::new();
        let me = r.row.clone();
        let vs = |name: &str, other: Option<&Row>, wire: bool, cpu: bool| {
            other.map(|o| {
                let mut s = format!("vs {name}: elapsed {:.2}×", ratio(me.elapsed_s, o.elapsed_s));
                if wire {
                    s.push_str(&format!(", wire {:.2}×", ratio(me.wire_mb, o.wire_mb)));
                }
                if cpu {
                    s.push_str(&format!(", CPU {:.2}×", ratio(me.cpu_total_s, o.cpu_total_s)));
                }
                s
            })
        };
        let cp = find(fs, c, Tool::Floor(Floor::Cp));
        let tar = find(fs, c, Tool::Floor(Floor::Tar));
        match r.tool {
            Tool::Pfs(_) => {
                let delta = matches!(c, Case::SmallB | Case::SmallBCopied | Case::PairB);
                // rsync's B over its own A is the same situation for rsync.
                let rc = if c == Case::SmallBCopied { Case::SmallB } else { c };
                parts.extend(vs(
                    if delta { "rsync delta" } else { "rsync" },
                    find(fs, rc, Tool::Rsync),
                    delta,
                    true,
                ));
                parts.extend(vs("cp -a", cp, false, false));
                parts.extend(vs("tar | tar", tar, false, false));
                if c == Case::PairB {
                    if let Some(z) = find(fs, c, Tool::RsyncZ) {
                        parts.push(format!("vs rsync -z: wire {:.2}×", ratio(me.wire_mb, z.wire_mb)));
                    }
                    parts.extend(vs("scp", find(fs, c, Tool::Scp), false, false));
                }
            }
            Tool::PfsKeys => {
                let plain = snapshot
                    .iter()
                    .find(|p| p.fs == fs && p.case == c && matches!(p.tool, Tool::Pfs(_)) && p.row.ran())
                    .map(|p| &p.row);
                parts.extend(vs("plain", plain, true, true));
            }
            Tool::Rsync => {
                parts.extend(vs("cp -a", cp, false, false));
                parts.extend(vs("tar | tar", tar, false, false));
            }
            Tool::RsyncZ | Tool::Scp | Tool::Floor(_) => {}
        }
        if !parts.is_empty() {
            r.row.add_note(&parts.join("; "));
        }
    }
}

/// The targets of file transfer, per filesystem and receiver storage mode.
fn targets(rows: &[FilesRow]) -> Vec<Target> {
    let find = |fs: FsKind, c: Case, t: Tool| {
        rows.iter()
            .find(|r| r.fs == fs && r.case == c && r.tool == t && r.row.ran())
    };
    let mut out = Vec::new();
    let kinds = dedup(&rows.iter().map(|r| r.fs).collect::<Vec<_>>());
    let storages = dedup(
        &rows
            .iter()
            .filter_map(|r| match r.tool {
                Tool::Pfs(k) => Some(k),
                _ => None,
            })
            .collect::<Vec<_>>(),
    );
    for &fs in &kinds {
        for &k in &storages {
            let pfs = Tool::Pfs(k);
            let tag = k.label_tag().map(|t| format!(" ({t})")).unwrap_or_default();
            // `c` for PFS against `(oc, other)`: the same case, or the same
            // situation for the other tool.
            let mut check = |what: &str, c: Case, (oc, other): (Case, Tool), wire: bool, limit: f64| {
                if !rows.iter().any(|r| r.fs == fs && r.case == c && r.tool == pfs) {
                    return;
                }
                let value = find(fs, c, pfs).zip(find(fs, oc, other)).map(|(p, o)| {
                    if wire {
                        ratio(p.row.wire_mb, o.row.wire_mb)
                    } else {
                        ratio(p.row.elapsed_s, o.row.elapsed_s)
                    }
                });
                out.push(Target {
                    fs: Some(fs.to_string()),
                    what: format!("PFS{tag} {what}"),
                    value,
                    limit,
                    at_least: false,
                    unit: "×",
                });
            };
            check(
                "cold single file, elapsed vs rsync",
                Case::ColdFile,
                (Case::ColdFile, Tool::Rsync),
                false,
                1.0,
            );
            check(
                "cold single file, elapsed vs cp -a",
                Case::ColdFile,
                (Case::ColdFile, Tool::Floor(Floor::Cp)),
                false,
                1.2,
            );
            check(
                "small-file A (cold), elapsed vs rsync",
                Case::SmallA,
                (Case::SmallA, Tool::Rsync),
                false,
                0.8,
            );
            check(
                "small-file A (cold), elapsed vs tar | tar",
                Case::SmallA,
                (Case::SmallA, Tool::Floor(Floor::Tar)),
                false,
                1.3,
            );
            check(
                "small-file B over A, elapsed vs rsync",
                Case::SmallB,
                (Case::SmallB, Tool::Rsync),
                false,
                0.5,
            );
            check(
                "small-file B over A, wire vs rsync",
                Case::SmallB,
                (Case::SmallB, Tool::Rsync),
                true,
                1.0,
            );
            check(
                "large A (Linux pair, cold), elapsed vs rsync",
                Case::PairA,
                (Case::PairA, Tool::Rsync),
                false,
                1.0,
            );
            check(
                "large B over A, elapsed vs rsync",
                Case::PairB,
                (Case::PairB, Tool::Rsync),
                false,
                0.5,
            );
            check(
                "small-file B over a copy of A (cp -a), elapsed vs rsync B over A (ours, not a design target)",
                Case::SmallBCopied,
                (Case::SmallB, Tool::Rsync),
                false,
                1.0,
            );
            let worst = rows
                .iter()
                .filter(|r| r.fs == fs && r.tool == pfs)
                .filter_map(|r| r.disk.map(|d| (d.ratio(), r)))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            if rows.iter().any(|r| r.fs == fs && r.tool == pfs) {
                out.push(Target {
                    fs: Some(fs.to_string()),
                    at_least: false,
                    unit: "×",
                    what: format!(
                        "PFS{tag} receiver disk ÷ held trees, worst row{}",
                        worst
                            .map(|(_, r)| format!(" ({})", r.row.label.rsplit_once(" [").map_or("", |x| x.0)))
                            .unwrap_or_default()
                    ),
                    value: worst.map(|w| w.0),
                    limit: 1.05,
                });
            }
        }
    }
    out
}

/// What the targets block is and where its figures come from (said once,
/// above the block, in the text and Markdown reports).
const TARGETS_SAID: &str = "Targets (ratios of the rows above, same run, same filesystem; each figure is a target the design sets for file transfer, listed in docs/benchmarks.md)";

/// The targets block: one line each.
fn targets_table(t: &[Target]) -> Table {
    let mut table = Table::new(&[
        Column::text("fs", 5),
        Column::num("ratio", 6),
        Column::text("target", 8),
        Column::text("verdict", 7),
        Column::text("figure", 0),
    ]);
    for x in t {
        table.push(vec![
            Cell::text(x.fs.as_deref().unwrap_or_default()),
            // Three digits: a ratio of 0.502 against ≤ 0.50 must not read 0.50.
            x.value.map_or(Cell::Missing, |v| Cell::Num(v, 3)),
            Cell::text(format!("{} {:.2}{}", x.bound().sign(), x.limit, x.unit)),
            Cell::text(x.verdict().as_str()),
            Cell::text(&x.what),
        ]);
    }
    table
}

/// Every field of a row (CSV and JSON): the suite's, then the files study's.
fn files_data(rows: &[FilesRow]) -> Table {
    let base: Vec<Row> = rows.iter().map(|r| r.row.clone()).collect();
    let mut t = data(&base);
    t.columns.extend([
        Column::text("fs", 0),
        Column::num("sync_s", 0),
        Column::num("rx_disk_mb", 0),
        Column::num("held_mb", 0),
        Column::num("held_data_mb", 0),
        Column::num("disk_per_held", 0),
        Column::num("rounds", 0),
        Column::num("elapsed_min_s", 0),
        Column::num("elapsed_max_s", 0),
    ]);
    for (cells, r) in t.rows.iter_mut().zip(rows) {
        let d = r.disk;
        let mb = |f: fn(&DiskUse) -> u64| d.map_or(Cell::Missing, |d| Cell::Num(f(&d) as f64 / 1e6, 3));
        cells.extend([
            Cell::text(r.fs.name()),
            if r.row.ran() {
                Cell::Num(r.sync_s, 4)
            } else {
                Cell::Missing
            },
            mb(|d| d.receiver),
            mb(|d| d.held),
            mb(|d| d.held_data),
            d.map_or(Cell::Missing, |d| Cell::Num(d.ratio(), 4)),
            Cell::Int(u64::from(r.rounds)),
            r.elapsed_range.map_or(Cell::Missing, |(lo, _)| Cell::Num(lo, 4)),
            r.elapsed_range.map_or(Cell::Missing, |(_, hi)| Cell::Num(hi, 4)),
        ]);
    }
    t
}

/// Columns of the terminal and Markdown tables (CSV and JSON carry every field).
const VIEW: [Column; 11] = [
    Column::text("label", 70),
    Column::num("eff_MB", 8),
    Column::num("wire_MB", 9),
    Column::num("wire/eff", 8),
    Column::num("time_s", 7),
    Column::num("eff_MB/s", 8),
    Column::num("CPU_s", 6),
    Column::num("rx_disk_MB", 10),
    Column::num("disk/held", 9),
    Column::text("check", 8),
    Column::text("notes", 0),
];

fn view(rows: &[FilesRow]) -> Table {
    let mut t = Table::new(&VIEW);
    for fr in rows {
        let r = &fr.row;
        t.push(vec![
            Cell::text(&r.label),
            measured(r, r.effective_mb, 1),
            measured(r, r.wire_mb, 3),
            measured(r, r.wire_ratio, 4),
            measured(r, r.elapsed_s, 3),
            measured(r, r.effective_mb_s, 1),
            measured(r, r.cpu_total_s, 2),
            fr.disk
                .map_or(Cell::Missing, |d| Cell::Num(d.receiver as f64 / 1e6, 1)),
            fr.disk.map_or(Cell::Missing, |d| Cell::Num(d.ratio(), 2)),
            Cell::text(&r.integrity),
            Cell::text(r.notes_shown()),
        ]);
    }
    t
}

fn header_lines(header: &FilesHeader) -> Vec<String> {
    let st = &header.study;
    let mut l = vec![
        format!(
            "large pair: A {} ({} files, {:.1} MB) · B {} ({} files, {:.1} MB)",
            st.version_a,
            st.version_a_files,
            st.version_a_bytes as f64 / 1e6,
            st.version_b,
            st.version_b_files,
            st.version_b_bytes as f64 / 1e6
        ),
        format!("small-file pair: A {} · B {}", st.small_a, st.small_b),
        format!(
            "cold data: one file of {:.1} MB; {:.1} MB in 64 MiB files",
            st.cold_file_bytes as f64 / 1e6,
            st.cold_bytes as f64 / 1e6
        ),
    ];
    l.extend(st.filesystems.iter().cloned());
    l.push(format!("receiver storage: {}", st.receiver_storage));
    l.push(format!("network: {}", st.network));
    l.push(st.placement.clone());
    l.push(st.method.clone());
    l
}

/// The study's report: the rows (with the units below them), then the
/// targets (always in JSON, as a block when there are any).
fn report(header: &FilesHeader, rows: &[FilesRow]) -> Report {
    let mut r = Report::new("pfs bench files", header);
    r.lines = header_lines(header);
    r = r.section(Section::new("rows", view(rows), files_data(rows)).noted(header.study.units.clone()));
    let targets = targets(rows);
    if targets.is_empty() {
        r.extra.insert("targets".into(), serde_json::json!([]));
    } else {
        r = r.section(
            Section::new("targets", targets_table(&targets), Target::data(&targets)).titled(TARGETS_SAID),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    fn naming() -> Naming {
        Naming {
            cold_file: human_size(1 << 30),
            cipher: "aes-256-gcm",
            keys_storage: StorageKind::DestOnly,
        }
    }

    #[test]
    fn labels_name_tool_data_and_storage() {
        let n = naming();
        assert_eq!(
            n.label(Case::ColdFile, Tool::Pfs(StorageKind::Store)),
            "PFS files (with store): cold 1 GiB file (empty store)"
        );
        assert_eq!(
            n.label(Case::SmallA, Tool::Pfs(StorageKind::DestOnly)),
            "PFS files: small-file version A (empty destination)"
        );
        assert_eq!(
            n.label(Case::PairB, Tool::Rsync),
            "Conventional (rsync): version B over A (delta)"
        );
        assert_eq!(
            n.label(Case::SmallA, Tool::Floor(Floor::Tar)),
            "Conventional (tar | tar): small-file version A"
        );
        assert_eq!(
            n.label(Case::ColdFile, Tool::Floor(Floor::Cp)),
            "Conventional (cp -a): cold 1 GiB file"
        );
        assert_eq!(
            n.label(Case::PairA, Tool::PfsKeys),
            "PFS files (aes-256-gcm): version A (empty destination)"
        );
        // Every row of a pass has its own label.
        let jobs = all_jobs(&[StorageKind::Store, StorageKind::DestOnly]);
        let labels: Vec<String> = jobs.iter().map(|&(c, t)| n.label(c, t)).collect();
        assert_eq!(dedup(&labels.iter().collect::<Vec<_>>()).len(), labels.len());
    }

    #[test]
    fn only_keeps_the_rows_a_selected_row_stands_on() {
        let n = naming();
        let jobs = selected(all_jobs(&[StorageKind::DestOnly]), |c, t| {
            n.label(c, t).contains("small-file version B over A")
        });
        assert_eq!(
            jobs,
            [
                (Case::SmallA, Tool::Pfs(StorageKind::DestOnly)),
                (Case::SmallB, Tool::Pfs(StorageKind::DestOnly)),
                (Case::SmallA, Tool::Rsync),
                (Case::SmallB, Tool::Rsync),
            ]
        );
        let floors = selected(all_jobs(&[StorageKind::DestOnly]), |c, t| {
            n.label(c, t).contains("tar | tar")
        });
        assert_eq!(
            floors,
            [
                (Case::SmallA, Tool::Floor(Floor::Tar)),
                (Case::PairA, Tool::Floor(Floor::Tar))
            ]
        );
    }

    fn row(
        fs: FsKind,
        case: Case,
        tool: Tool,
        elapsed: f64,
        wire: u64,
        disk: Option<(u64, u64)>,
    ) -> FilesRow {
        let label = format!("{} [{fs}]", naming().label(case, tool));
        FilesRow {
            fs,
            case,
            tool,
            row: Row::measured(&label, "Transfer", 1_000_000, wire, elapsed, 1.0, 1.0),
            disk: disk.map(|(receiver, held)| DiskUse {
                receiver,
                held,
                held_data: held,
            }),
            sync_s: 0.0,
            rounds: 1,
            elapsed_range: Some((elapsed, elapsed)),
        }
    }

    #[test]
    fn a_row_that_did_not_run_has_no_figure_in_any_format() {
        let pfs = Tool::Pfs(StorageKind::DestOnly);
        let mut skipped = row(FsKind::Ext4, Case::ColdFile, Tool::Rsync, 1.0, 100, None);
        skipped.row = Row::skipped(&skipped.row.label.clone(), "Transfer", "needs root".into());
        skipped.elapsed_range = None;
        let label = skipped.row.label.clone();
        let rows = vec![
            row(FsKind::Ext4, Case::ColdFile, pfs, 3.0, 100, Some((200, 100))),
            skipped,
        ];
        let header = FilesHeader {
            machine: crate::report::Machine {
                tool: "pfs 0.1.0".into(),
                git_revision: "abc1234".into(),
                kernel: "6.1".into(),
                cpu_model: "test CPU".into(),
                cores: 2,
            },
            study: FilesSettings {
                version_a: "a".into(),
                version_b: "b".into(),
                version_a_bytes: 1,
                version_b_bytes: 1,
                version_a_files: 1,
                version_b_files: 1,
                small_a: "sa".into(),
                small_b: "sb".into(),
                cold_bytes: 1,
                cold_file_bytes: 1,
                filesystems: vec!["ext4".into()],
                receiver_storage: "dest".into(),
                network: "loopback".into(),
                placement: "tmpfs".into(),
                method: "cold cache".into(),
                units: "MB = 10^6".into(),
            },
        };
        let r = report(&header, &rows);
        crate::report::check_not_run_row(&r, &label);
        let t = &r.json()["targets"];
        assert_eq!(t[0]["verdict"], "not run", "{t}");
        assert!(t[0]["value"].is_null(), "{t}");
        assert!(r.text().contains("figure"));
    }

    #[test]
    fn ratios_and_targets_compare_rows_of_one_filesystem() {
        let pfs = Tool::Pfs(StorageKind::DestOnly);
        let mut rows = vec![
            row(FsKind::Ext4, Case::ColdFile, pfs, 3.0, 100, Some((200, 100))),
            row(
                FsKind::Ext4,
                Case::ColdFile,
                Tool::Rsync,
                2.0,
                100,
                Some((100, 100)),
            ),
            row(
                FsKind::Ext4,
                Case::ColdFile,
                Tool::Floor(Floor::Cp),
                1.0,
                0,
                Some((100, 100)),
            ),
            // Another filesystem's rsync must not be the reference.
            row(FsKind::Tmpfs, Case::ColdFile, Tool::Rsync, 30.0, 100, None),
            row(FsKind::Ext4, Case::SmallB, pfs, 1.0, 50, Some((100, 100))),
            row(
                FsKind::Ext4,
                Case::SmallB,
                Tool::Rsync,
                4.0,
                100,
                Some((100, 100)),
            ),
        ];
        add_ratios(&mut rows);
        assert!(
            rows[0].row.notes.contains("vs rsync: elapsed 1.50×, CPU 1.00×"),
            "{}",
            rows[0].row.notes
        );
        assert!(
            rows[0].row.notes.contains("vs cp -a: elapsed 3.00×"),
            "{}",
            rows[0].row.notes
        );
        assert!(
            rows[4]
                .row
                .notes
                .contains("vs rsync delta: elapsed 0.25×, wire 0.50×"),
            "{}",
            rows[4].row.notes
        );
        assert!(
            rows[1].row.notes.contains("vs cp -a: elapsed 2.00×"),
            "{}",
            rows[1].row.notes
        );
        let t = targets(&rows);
        let get = |fs: &str, what: &str| {
            t.iter()
                .find(|x| x.fs.as_deref() == Some(fs) && x.what.contains(what))
                .unwrap()
        };
        let cold = get("ext4", "cold single file, elapsed vs rsync");
        assert_eq!((cold.value, cold.verdict()), (Some(1.5), Verdict::Missed));
        assert_eq!(get("ext4", "elapsed vs cp -a").value, Some(3.0));
        let small = get("ext4", "small-file B over A, elapsed vs rsync");
        assert_eq!((small.value, small.verdict()), (Some(0.25), Verdict::Met));
        assert_eq!(get("ext4", "small-file B over A, wire").value, Some(0.5));
        let disk = get("ext4", "receiver disk");
        assert_eq!(disk.value, Some(2.0));
        assert!(
            disk.what
                .contains("(PFS files: cold 1 GiB file (empty destination))"),
            "{}",
            disk.what
        );
        // tmpfs ran no PFS row, and no small-file rows ran at all on tmpfs.
        assert!(t
            .iter()
            .filter(|x| x.fs.as_deref() == Some("tmpfs"))
            .all(|x| x.value.is_none()));
        assert!(!t
            .iter()
            .any(|x| x.fs.as_deref() == Some("ext4") && x.what.contains("large")));
    }

    #[test]
    fn data_table_adds_the_files_columns() {
        let rows = vec![row(
            FsKind::Ext4,
            Case::ColdFile,
            Tool::Rsync,
            2.0,
            100,
            Some((3_000_000, 2_000_000)),
        )];
        let t = files_data(&rows);
        let csv = t.csv();
        assert!(csv.lines().next().unwrap().ends_with(
            ",fs,sync_s,rx_disk_mb,held_mb,held_data_mb,disk_per_held,rounds,elapsed_min_s,elapsed_max_s"
        ));
        let j = t.json();
        assert_eq!(j[0]["fs"], "ext4");
        assert_eq!(j[0]["disk_per_held"], 1.5);
        assert_eq!(j[0]["rounds"], 1);
        assert_eq!(j[0]["elapsed_min_s"], 2.0);
        assert_eq!(j[0]["elapsed_max_s"], 2.0);
        let v = view(&rows).text();
        assert!(v.contains("[ext4]") && v.contains("1.50"), "{v}");
    }

    #[test]
    fn rounds_rotate_so_each_tool_runs_first_once() {
        assert_eq!(rotation(3, 0), [0, 1, 2]);
        assert_eq!(rotation(3, 1), [1, 2, 0]);
        assert_eq!(rotation(3, 2), [2, 0, 1]);
        assert_eq!(rotation(3, 3), [0, 1, 2]);
        assert_eq!(rotation(4, 5), [1, 2, 3, 0]);
        assert_eq!(rotation(1, 7), [0]);
        // Over k rounds every tool takes every place once.
        for k in 1..6 {
            for place in 0..k {
                let mut at: Vec<usize> = (0..k).map(|r| rotation(k, r)[place]).collect();
                at.sort_unstable();
                assert_eq!(at, (0..k).collect::<Vec<_>>(), "k {k}, place {place}");
            }
        }
    }

    #[test]
    fn median_is_the_middle_run_lower_for_even_counts() {
        assert_eq!(median_index(&[]), None);
        assert_eq!(median_index(&[5.0]), Some(0));
        assert_eq!(median_index(&[5.1, 1.0, 1.2]), Some(2));
        assert_eq!(median_index(&[1.0, 5.1, 1.2]), Some(2));
        assert_eq!(median_index(&[3.0, 1.0, 4.0, 2.0]), Some(3));
        assert_eq!(median_index(&[2.0, 9.0, 1.0, 8.0, 3.0]), Some(4));
        // Ties: the earlier run.
        assert_eq!(median_index(&[1.0, 1.0, 1.0]), Some(1));
        assert_eq!(median_index(&[2.0, 1.0, 2.0]), Some(0));
    }

    #[test]
    fn median_run_reports_that_run_with_rounds_and_range_in_its_notes() {
        let run = |elapsed: f64, cpu: f64, receiver: u64| {
            let mut row = Row::measured("x", "Transfer", 1_000_000, 2_000_000, elapsed, cpu, 0.0);
            row.notes = format!("sync 0.10 s; daemon, -a (run of {elapsed} s)");
            Run {
                row,
                disk: DiskUse {
                    receiver,
                    held: 100,
                    held_data: 100,
                },
                sync_s: 0.1,
            }
        };
        let (m, range) = median_run(vec![run(5.1, 4.0, 1), run(1.0, 1.0, 2), run(1.2, 1.5, 3)]).unwrap();
        assert_eq!(range, (1.0, 5.1));
        // Every figure is the median run's own, not a mix of runs.
        assert_eq!(
            (m.row.elapsed_s, m.row.cpu_total_s, m.disk.receiver),
            (1.2, 1.5, 3)
        );
        assert_eq!(
            m.row.notes,
            "sync 0.10 s; median of 3 rounds (elapsed min–max 1.000–5.100 s); daemon, -a (run of 1.2 s)"
        );
        let (one, range) = median_run(vec![run(2.0, 1.0, 1)]).unwrap();
        assert_eq!((one.row.elapsed_s, range), (2.0, (2.0, 2.0)));
        assert!(
            one.row
                .notes
                .contains("median of 1 round (elapsed min–max 2.000–2.000 s)"),
            "{}",
            one.row.notes
        );
        assert!(median_run(Vec::new()).is_none());
    }

    #[test]
    fn largest_data_set_bounds_the_pre_touch() {
        let t = |bytes: u64| Tree {
            dir: PathBuf::new(),
            bytes,
            files: 1,
            dirs: 1,
            block_bytes: bytes,
        };
        let s = Sources {
            cold_file: Some(t(100)),
            cold_tree: None,
            small: Some((t(20), t(30))),
            pair: Some((t(300), t(250))),
        };
        assert_eq!(s.largest(), 300);
        let none = Sources {
            cold_file: None,
            cold_tree: None,
            small: None,
            pair: None,
        };
        assert_eq!(none.largest(), 0);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(1 << 30), "1 GiB");
        assert_eq!(human_size(256 << 20), "256 MiB");
        assert_eq!(human_size(1_500_000), "1.4 MiB");
        assert_eq!(human_size(100), "100 B");
    }

    #[test]
    fn needs_cover_sources_and_the_largest_receiver() {
        let t = |bytes: u64, files: u64| Tree {
            dir: PathBuf::new(),
            bytes,
            files,
            dirs: 1,
            block_bytes: bytes,
        };
        let d = DataSets {
            cold_file: Some(1 << 30),
            cold_tree: None,
            small: Some((t(50 << 20, 7000), t(50 << 20, 7000))),
            pair: Some((t(1 << 30, 80_000), t(1 << 30, 80_000))),
        };
        let n = d.needs();
        // Sources: 1 GiB + 100 MiB + 2 GiB; peak: the large pair's 2.5 × 1 GiB.
        let sources = (1u64 << 30) + (100 << 20) + (2 << 30);
        assert!(n.bytes >= sources + (5 << 30) / 2, "{n:?}");
        assert!(n.bytes < sources + (3 << 30), "{n:?}");
        assert!(n.inodes >= 2 * 80_001 + 2 * 7001 + 5 * 80_001 / 2, "{n:?}");
    }
}
