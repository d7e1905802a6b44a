//! `pfs bench files`: file transfer against the baselines people use, in one
//! run, on loopback. Four PacketFS rows — a cold send of random data into an
//! empty store, its unchanged re-send, version A of a real data set into an
//! empty store, then version B over A — and the same version pair through
//! an rsync daemon (delta transfer, B over A) and scp (full copy of B).
//!
//! Every row runs the real binaries as child processes: `pfs serve --store
//! --dest` / `pfs send`, `rsync --daemon` / `rsync`, `sshd` / `scp -r`.
//! Elapsed is the client's wall time; CPU is client + server (rusage of the
//! reaped client, `/proc` of the server tree); wire bytes come from the
//! loopback interface counters (TCP/IP headers included, for every row
//! alike). Destinations and the store live on tmpfs so that the disk does
//! not decide the comparison; each destination tree is compared with its
//! source after the timed part.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::conventional::{prepare_sshd, scp_command, sshd_tools, user_name};
use super::netpath::NetPath;
use super::row::Row;
use super::table::{data, measured};
use crate::child::{
    free_port, have, run_client, serve_listening, tool, wait_children_reaped, wait_listening, ChildGuard,
};
use crate::report::{Cell, Column, Header, Table};
use crate::scratch::{memory_dir, Scratch};
use crate::{Binary, Outcome};

/// `pfs bench files`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  pfs bench files                                  # fetch (once) the version pair, run every row
  pfs bench files --pair ./v1 ./v2 --out bench-files
  pfs bench files --cold-size 256M --only pfs

The version pair defaults to the one scripts/fetch-version-pair.sh downloads and
caches (two successive releases of a package from a package registry).")]
pub struct BenchFilesArgs {
    /// Version pair: two directories, A then B (default: fetched by scripts/fetch-version-pair.sh).
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub pair: Option<Vec<PathBuf>>,
    /// Bytes of random data for the cold send and the unchanged re-send.
    #[arg(long, default_value = "1G", value_parser = crate::args::parse_size)]
    pub cold_size: u64,
    /// Only rows whose label contains this text (case-insensitive); repeatable.
    #[arg(long, value_name = "TEXT")]
    pub only: Vec<String>,
    /// Write CSV, JSON and Markdown here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A data set on disk and its size.
#[derive(Debug, Clone)]
struct Tree {
    dir: PathBuf,
    bytes: u64,
    files: u64,
}

fn tree_of(dir: &Path) -> anyhow::Result<Tree> {
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                bytes += e.metadata()?.len();
                files += 1;
            }
        }
    }
    Ok(Tree {
        dir: dir.to_path_buf(),
        bytes,
        files,
    })
}

/// Random, incompressible files (xorshift; no two blocks alike) of `total` bytes.
fn make_cold_tree(dir: &Path, total: u64) -> anyhow::Result<Tree> {
    std::fs::create_dir_all(dir)?;
    let per_file = 64u64 << 20;
    let mut left = total;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0;
    while left > 0 {
        let size = left.min(per_file);
        let path = dir.join(format!("part-{n:04}.bin"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut written = 0u64;
        while written < size {
            for w in buf.chunks_exact_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                w.copy_from_slice(&state.to_le_bytes());
            }
            let k = (size - written).min(buf.len() as u64) as usize;
            std::io::Write::write_all(&mut f, &buf[..k])?;
            written += k as u64;
        }
        left -= size;
        n += 1;
    }
    tree_of(dir)
}

/// The version pair: given, or fetched (and cached) by the repository's script.
fn version_pair(args: &BenchFilesArgs) -> anyhow::Result<(Tree, Tree)> {
    if let Some(p) = &args.pair {
        return Ok((tree_of(&p[0])?, tree_of(&p[1])?));
    }
    let script = std::env::var_os("PFS_FILES_FETCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-version-pair.sh"));
    if !script.exists() {
        bail!(
            "no --pair given and {} is missing (set PFS_FILES_FETCH to the fetch script)",
            script.display()
        );
    }
    eprintln!(
        "pfs bench files: fetching the version pair with {} (cached after the first run)…",
        script.display()
    );
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed (see its messages above)", script.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
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

/// Copies `t` to `parent/tree` (outside the timed part).
fn stage(t: &Tree, parent: &Path) -> anyhow::Result<Tree> {
    std::fs::create_dir_all(parent)?;
    let dst = parent.join("tree");
    let out = Command::new("cp")
        .arg("-a")
        .arg(&t.dir)
        .arg(&dst)
        .output()
        .context("running cp")?;
    if !out.status.success() {
        bail!(
            "cp -a {}: {}",
            t.dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    tree_of(&dst)
}

/// Compares two trees file by file (content, and that every file exists).
fn same_tree(a: &Path, b: &Path) -> anyhow::Result<bool> {
    // One pair of buffers for the whole walk: allocating per file churns
    // memory right before the next timed row.
    let mut bufs = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(a.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(r);
            } else if t.is_file() {
                let (x, y) = (a.join(&r), b.join(&r));
                let (mx, my) = (std::fs::metadata(&x)?, std::fs::metadata(&y));
                match my {
                    Ok(my) if my.len() == mx.len() => {}
                    _ => return Ok(false),
                }
                if !same_file(&x, &y, &mut bufs)? {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

fn same_file(x: &Path, y: &Path, (bx, by): &mut (Vec<u8>, Vec<u8>)) -> anyhow::Result<bool> {
    let (mut fx, mut fy) = (std::fs::File::open(x)?, std::fs::File::open(y)?);
    loop {
        let n = read_full(&mut fx, bx)?;
        let m = read_full(&mut fy, by)?;
        if n != m || bx[..n] != by[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// CPU seconds of reaped children of this process so far.
fn children_cpu() -> (f64, f64) {
    let u = pfs_sys::children_usage();
    (u.user_us as f64 / 1e6, u.sys_us as f64 / 1e6)
}

/// One timed client run against a running server; fills a row.
struct Timed {
    elapsed: f64,
    wire: u64,
    user: f64,
    sys: f64,
    stdout: String,
}

fn timed(server_pid: u32, client: Command, net: &NetPath) -> anyhow::Result<Timed> {
    wait_children_reaped(server_pid, Duration::from_secs(5));
    let (su0, ss0) = pfs_sys::tree_cpu_seconds(server_pid).context("server CPU")?;
    let (cu0, cs0) = children_cpu();
    let program = client.get_program().to_string_lossy().into_owned();
    let wire0 = net.wire_counter();
    let t0 = Instant::now();
    let out = run_client(client, Duration::from_secs(1800))?;
    let elapsed = t0.elapsed().as_secs_f64();
    let wire = net.wire_counter().saturating_sub(wire0);
    if !out.status.success() {
        bail!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    wait_children_reaped(server_pid, Duration::from_secs(5));
    let (su1, ss1) = pfs_sys::tree_cpu_seconds(server_pid).context("server CPU")?;
    let (cu1, cs1) = children_cpu();
    Ok(Timed {
        elapsed,
        wire,
        user: (su1 - su0) + (cu1 - cu0),
        sys: (ss1 - ss0) + (cs1 - cs0),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    })
}

fn row_of(label: &str, data: &Tree, t: &Timed, same: bool, notes: String) -> Row {
    let mut r = Row::measured(label, "Transfer", data.bytes, t.wire, t.elapsed, t.user, t.sys);
    r.transport = "TCP".into();
    r.integrity = if same { "OK" } else { "MISMATCH" }.into();
    r.notes = notes;
    r
}

/// A `pfs serve --store --dest` child on a free loopback port.
struct PfsServer {
    guard: ChildGuard,
    addr: String,
    /// What a sender adds to reach it: its keys, when it requires them.
    send_args: Vec<std::ffi::OsString>,
}

/// Key files of the protected rows: the server's identity, the client's,
/// and an `authorized_keys` listing the client.
struct BenchKeys {
    server: PathBuf,
    client: PathBuf,
    authorized: PathBuf,
}

impl BenchKeys {
    fn new(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let server = dir.join("server");
        let client = dir.join("client");
        for p in [&server, &client] {
            pfs_auth::Identity::generate()?.save(p, "pfs bench files", true)?;
        }
        let authorized = dir.join("authorized_keys");
        std::fs::copy(pfs_auth::public_path(&client), &authorized)?;
        Ok(Self {
            server,
            client,
            authorized,
        })
    }

    /// What `pfs send` adds: our identity, the server's key pinned.
    fn send_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--identity".into(),
            self.client.clone().into(),
            "--server-key".into(),
            pfs_auth::public_path(&self.server).into(),
        ]
    }
}

fn start_pfs_server(
    exe: &Path,
    store: &Path,
    dest: &Path,
    keys: Option<&BenchKeys>,
) -> anyhow::Result<PfsServer> {
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--json", "--store"])
        .arg(store)
        .arg("--dest")
        .arg(dest);
    if let Some(k) = keys {
        cmd.arg("--identity")
            .arg(&k.server)
            .arg("--authorized-keys")
            .arg(&k.authorized);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("starting pfs serve")?;
    let stdout = child.stdout.take().context("pfs serve stdout")?;
    let guard = ChildGuard::new(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                // Keep draining so the server never blocks on stdout.
                continue;
            }
        }
    });
    match serve_listening(&rx, Duration::from_secs(30)) {
        Some(addr) => Ok(PfsServer {
            guard,
            addr,
            send_args: keys.map(BenchKeys::send_args).unwrap_or_default(),
        }),
        None => bail!("pfs serve did not start listening"),
    }
}

/// One `pfs send` of `src` (its contents land under `remote`).
fn pfs_send(
    exe: &Path,
    server: &PfsServer,
    src: &Path,
    remote: &str,
    cache: &Path,
    extra: &[&str],
    net: &NetPath,
) -> anyhow::Result<(Timed, serde_json::Value)> {
    let mut cmd = Command::new(exe);
    cmd.arg("send")
        .arg(src)
        .arg("--to")
        .arg(format!("{}:{remote}", server.addr))
        .arg("--cache-dir")
        .arg(cache)
        .args(["--json", "--progress", "never"])
        .args(extra)
        .args(&server.send_args);
    let t = timed(server.guard.id(), cmd, net)?;
    let v: serde_json::Value = serde_json::from_str(&t.stdout).context("pfs send --json output")?;
    Ok((t, v))
}

fn pfs_notes(v: &serde_json::Value) -> String {
    let r = &v["receiver"];
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0) as f64 / 1e6;
    format!(
        "written {}, unchanged {}, same content {}; literal {:.1} MB, matched {:.1} MB, repaired {:.1} MB; index fetched {} entries",
        r["files_written"], r["files_unchanged"], r["files_metadata_only"], n(&r["literal_bytes"]), n(&r["matched_bytes"]),
        n(&r["repaired_bytes"]), v["index_entries_fetched"]
    )
}

/// An rsync daemon serving one writable module.
struct RsyncDaemon {
    guard: ChildGuard,
    port: u16,
}

fn start_rsyncd(dir: &Path, module: &Path) -> anyhow::Result<RsyncDaemon> {
    let rsync = tool("rsync", "rsync");
    let port = free_port()?;
    let root = rustix::process::geteuid().is_root();
    let config = format!(
        "port = {port}\naddress = 127.0.0.1\nuse chroot = {chroot}\nmunge symlinks = no\nlog file = {log}\n{ids}[pfs]\n    path = {path}\n    read only = no\n",
        // Symlinks arrive unmunged only in a chroot (which needs root).
        chroot = if root { "yes" } else { "no" },
        log = dir.join("rsyncd.log").display(),
        ids = if root { "uid = root\ngid = root\n" } else { "" },
        path = module.display(),
    );
    std::fs::create_dir_all(module)?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("rsyncd.conf"), config)?;
    let mut cmd = Command::new(&rsync);
    cmd.args(["--daemon", "--no-detach", "--config"])
        .arg(dir.join("rsyncd.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut guard = ChildGuard::new(cmd.spawn().context("starting rsync --daemon")?);
    wait_listening(&mut guard, "127.0.0.1", port, Duration::from_secs(10))?;
    Ok(RsyncDaemon { guard, port })
}

/// `rsync -a --stats SRC/ rsync://…/pfs/REMOTE/` (delta transfer: the default).
fn rsync_send(
    d: &RsyncDaemon,
    src: &Path,
    remote: &str,
    compress: bool,
    net: &NetPath,
) -> anyhow::Result<(Timed, String)> {
    let mut cmd = Command::new(tool("rsync", "rsync"));
    cmd.args(["-a", "--stats", if compress { "-z" } else { "--no-compress" }])
        .arg(format!("{}/", src.display()))
        .arg(format!("rsync://127.0.0.1:{}/pfs/{remote}/", d.port));
    let t = timed(d.guard.id(), cmd, net)?;
    let stats = t
        .stdout
        .lines()
        .filter(|l| l.starts_with("Literal data") || l.starts_with("Matched data"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("; ");
    Ok((t, stats))
}

/// `scp -O -r` of `src` to `dst` through a private sshd.
fn scp_send(scratch: &Path, src: &Path, dst: &Path, net: &NetPath) -> anyhow::Result<Timed> {
    let (sshd, scp) = sshd_tools().map_err(|why| anyhow::anyhow!(why))?;
    let dir = scratch.join("ssh");
    let port = free_port()?;
    prepare_sshd(&dir, "127.0.0.1", port)?;
    let mut server = Command::new(&sshd);
    server
        .arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(dir.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut guard = ChildGuard::new(server.spawn().context("starting sshd")?);
    wait_listening(&mut guard, "127.0.0.1", port, Duration::from_secs(10))?;
    let mut client = scp_command(&scp, &dir, port);
    // Legacy protocol (-O): SFTP-mode scp refuses symlinks to directories.
    client
        .args(["-O", "-r"])
        .arg(src)
        .arg(format!("{}@127.0.0.1:{}", user_name(), dst.display()));
    timed(guard.id(), client, net)
}

/// The files study's part of its report header (after the [`crate::report::Host`] facts).
#[derive(Debug, Serialize)]
pub struct FilesSettings {
    /// Version A's directory.
    pub version_a: String,
    /// Version B's directory.
    pub version_b: String,
    /// Version A's bytes.
    pub version_a_bytes: u64,
    /// Version B's bytes.
    pub version_b_bytes: u64,
    /// Version A's files.
    pub version_a_files: u64,
    /// Version B's files.
    pub version_b_files: u64,
    /// Bytes of the cold data.
    pub cold_bytes: u64,
    /// Where sources, stores and destinations live.
    pub placement: String,
    /// Units and definitions.
    pub units: String,
}

/// The files study's report header.
pub type FilesHeader = Header<FilesSettings>;

/// Runs the study; [`Outcome::Failed`] when a row failed or a tree did not arrive intact.
pub fn run(args: BenchFilesArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let (header, rows) = collect(&args, pfs)?;
    let data = data(&rows);
    let doc = serde_json::json!({"header": header, "rows": data.json()});
    if args.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", table(&header, &rows));
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("files.csv"), data.csv())?;
        std::fs::write(dir.join("files.json"), serde_json::to_string_pretty(&doc)?)?;
        std::fs::write(dir.join("files.md"), markdown(&header, &rows))?;
        eprintln!(
            "pfs bench files: wrote files.csv, files.json, files.md to {}",
            dir.display()
        );
    }
    let failed = rows
        .iter()
        .any(|r| r.notes.starts_with("failed") || r.integrity == "MISMATCH");
    Ok(if failed { Outcome::Failed } else { Outcome::Passed })
}

/// The rows of the study (also the files row group of `pfs bench --full`).
pub fn collect(args: &BenchFilesArgs, pfs: &Binary) -> anyhow::Result<(FilesHeader, Vec<Row>)> {
    let only: Vec<String> = args.only.iter().map(|s| s.to_lowercase()).collect();
    let want = |label: &str| only.is_empty() || only.iter().any(|o| label.to_lowercase().contains(o));
    let net = NetPath::Loopback;
    let (a, b) = version_pair(args)?;
    // Staged copies of A and B, the cold data, and at any time one tool's
    // store and destinations (each is removed after its rows).
    let need = 3 * (a.bytes + b.bytes) + 3 * args.cold_size + (1 << 30);
    let base = memory_dir(need).unwrap_or_else(|| {
        eprintln!(
            "pfs bench files: /dev/shm has less than {:.1} GB free; using /var/tmp (disk speed will show in the rows)",
            need as f64 / 1e9
        );
        Path::new("/var/tmp")
    });
    let scratch = Scratch::new(base, "pfs-bench-files")?;
    eprintln!(
        "pfs bench files: version A {} ({} files, {:.1} MB), version B {} ({} files, {:.1} MB)",
        a.dir.display(),
        a.files,
        a.bytes as f64 / 1e6,
        b.dir.display(),
        b.files,
        b.bytes as f64 / 1e6
    );
    // Both versions under one name ("tree") on tmpfs, so each tool writes B
    // over A at the same place and reads its sources at memory speed.
    let (a, b) = (
        stage(&a, &scratch.path().join("a"))?,
        stage(&b, &scratch.path().join("b"))?,
    );
    let cold = make_cold_tree(&scratch.path().join("cold-src").join("cold"), args.cold_size)?;
    // The sender's quick-check cache ignores files modified within the last
    // 2 s (their mtime could still change within one timestamp tick); data
    // sent in practice is older than that, so let the fresh data age.
    std::thread::sleep(Duration::from_millis(2100));
    let mut rows: Vec<Row> = Vec::new();

    // PacketFS: one server, one store, one destination for all four rows.
    let store = scratch.path().join("pfs-store");
    let dest = scratch.path().join("pfs-dest");
    let cache = scratch.path().join("pfs-cache");
    let pfs_rows = [
        "PFS files: cold send (random data, empty store)",
        "PFS files: unchanged re-send (quick check)",
        "PFS files: version A (store holds the cold data only)",
        "PFS files: version B over A",
    ];
    if pfs_rows.iter().any(|l| want(l)) {
        match start_pfs_server(&pfs.path, &store, &dest, None) {
            Err(e) => rows.extend(pfs_rows.iter().map(|l| Row::failed(l, "Transfer", &e))),
            Ok(server) => {
                // Random data does not compress; source trees do (zstd level 3
                // on literal chunks, kept only where it saves bytes).
                let jobs: [(&str, &Tree, &str, &[&str]); 4] = [
                    (pfs_rows[0], &cold, "cold", &[]),
                    (pfs_rows[1], &cold, "cold", &[]),
                    (pfs_rows[2], &a, "pair", &["--compress"]),
                    (pfs_rows[3], &b, "pair", &["--compress"]),
                ];
                for (label, data, remote, extra) in jobs {
                    if !want(label) {
                        continue;
                    }
                    eprintln!("pfs bench files: {label} …");
                    let name = data.dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
                    let landed = dest.join(remote).join(name);
                    let row = pfs_send(&pfs.path, &server, &data.dir, remote, &cache, extra, &net).and_then(
                        |(t, v)| {
                            let same = same_tree(&data.dir, &landed)?;
                            let flags = if extra.is_empty() {
                                String::new()
                            } else {
                                format!("{}; ", extra.join(" "))
                            };
                            Ok(row_of(label, data, &t, same, format!("{flags}{}", pfs_notes(&v))))
                        },
                    );
                    rows.push(row.unwrap_or_else(|e| Row::failed(label, "Transfer", &e)));
                }
                drop(server);
            }
        }
        // Memory back before the next tool (tmpfs).
        for d in [&store, &dest, &cache] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    // The version pair again with every session protected (keys required by
    // the server, records sealed with the preferred cipher): its own
    // server, store and destination, A then B over A.
    let cipher = pfs_auth::Cipher::preferred().name();
    let protected_rows = [
        format!("PFS files ({cipher}): version A (empty store)"),
        format!("PFS files ({cipher}): version B over A"),
    ];
    if protected_rows.iter().any(|l| want(l)) {
        let started = BenchKeys::new(&scratch.path().join("pfs-keys"))
            .and_then(|k| start_pfs_server(&pfs.path, &store, &dest, Some(&k)).map(|s| (k, s)));
        match started {
            Err(e) => rows.extend(protected_rows.iter().map(|l| Row::failed(l, "Transfer", &e))),
            Ok((_keys, server)) => {
                for (label, data) in [(&protected_rows[0], &a), (&protected_rows[1], &b)] {
                    if !want(label) {
                        continue;
                    }
                    eprintln!("pfs bench files: {label} …");
                    let name = data.dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
                    let landed = dest.join("pair").join(name);
                    let extra = ["--compress"];
                    let row = pfs_send(&pfs.path, &server, &data.dir, "pair", &cache, &extra, &net).and_then(
                        |(t, v)| {
                            let same = same_tree(&data.dir, &landed)?;
                            Ok(row_of(
                                label,
                                data,
                                &t,
                                same,
                                format!("--compress, keys; {}", pfs_notes(&v)),
                            ))
                        },
                    );
                    rows.push(row.unwrap_or_else(|e| Row::failed(label, "Transfer", &e)));
                }
                drop(server);
            }
        }
        for d in [&store, &dest, &cache] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    // rsync daemon: A into an empty module, then B over it (delta transfer).
    let rsync_rows = [
        "Conventional (rsync): version A",
        "Conventional (rsync): version B over A (delta)",
        "Conventional (rsync -z): version B over A (delta, compressed)",
    ];
    if rsync_rows.iter().any(|l| want(l)) {
        if !have(&tool("rsync", "rsync")) {
            for l in rsync_rows {
                rows.push(Row::skipped(
                    l,
                    "Transfer",
                    "rsync not installed (apt-get install rsync)".into(),
                ));
            }
        } else {
            let module = scratch.path().join("rsync-module");
            match start_rsyncd(&scratch.path().join("rsync"), &module) {
                Err(e) => rows.extend(rsync_rows.iter().map(|l| Row::failed(l, "Transfer", &e))),
                Ok(d) => {
                    let runs = [
                        (rsync_rows[0], &a, false),
                        (rsync_rows[1], &b, false),
                        (rsync_rows[2], &b, true),
                    ];
                    for (label, data, z) in runs {
                        if !want(label) {
                            continue;
                        }
                        eprintln!("pfs bench files: {label} …");
                        // The compressed run starts from its own copy of A (not timed).
                        let remote = if z { "treez" } else { "tree" };
                        if z {
                            let _ = stage(&a, &module.join("z"));
                            let _ = std::fs::rename(module.join("z").join("tree"), module.join("treez"));
                        }
                        let row = rsync_send(&d, &data.dir, remote, z, &net).and_then(|(t, stats)| {
                            let same = same_tree(&data.dir, &module.join(remote))?;
                            let how = if z { "-a -z" } else { "-a" };
                            Ok(row_of(
                                label,
                                data,
                                &t,
                                same,
                                format!("daemon, {how} (delta transfer); {stats}"),
                            ))
                        });
                        rows.push(row.unwrap_or_else(|e| Row::failed(label, "Transfer", &e)));
                        if z {
                            let _ = std::fs::remove_dir_all(module.join("treez"));
                        }
                    }
                    drop(d);
                }
            }
            let _ = std::fs::remove_dir_all(&module);
        }
    }

    let scp_label = "Conventional (scp): version B (full copy)";
    if want(scp_label) {
        eprintln!("pfs bench files: {scp_label} …");
        let dst = scratch.path().join("scp-dest");
        let row = std::fs::create_dir_all(&dst)
            .map_err(anyhow::Error::from)
            .and_then(|()| scp_send(scratch.path(), &b.dir, &dst, &net))
            .and_then(|t| {
                let landed = dst.join(b.dir.file_name().unwrap_or_default());
                let same = same_tree(&b.dir, &landed)?;
                Ok(row_of(
                    scp_label,
                    &b,
                    &t,
                    same,
                    "scp -O -r (legacy protocol; follows symlinks), Compression=no; receiver CPU = sshd tree"
                        .into(),
                ))
            });
        rows.push(row.unwrap_or_else(|e| {
            if e.to_string().contains("not installed") || e.to_string().contains("needs root") {
                Row::skipped(scp_label, "Transfer", format!("{e:#}"))
            } else {
                Row::failed(scp_label, "Transfer", &e)
            }
        }));
    }
    add_ratios(&mut rows);

    let header = FilesHeader::new(
        pfs,
        FilesSettings {
            version_a: a.dir.display().to_string(),
            version_b: b.dir.display().to_string(),
            version_a_bytes: a.bytes,
            version_b_bytes: b.bytes,
            version_a_files: a.files,
            version_b_files: b.files,
            cold_bytes: cold.bytes,
            placement: format!(
                "sources on their own filesystem (page cache warm after the first read); stores and destinations on tmpfs ({})",
                scratch.path().display()
            ),
            units: "MB = 10^6 bytes; elapsed = client wall time; CPU = client + server; wire = loopback interface bytes".into(),
        },
    );
    Ok((header, rows))
}

/// `B over A` against rsync's delta transfer, and `scp`: wire, elapsed, CPU.
fn add_ratios(rows: &mut [Row]) {
    let find = |rows: &[Row], l: &str| rows.iter().find(|r| r.label == l && r.ran()).cloned();
    if let Some(plain) = find(rows, "PFS files: version B over A") {
        for r in rows.iter_mut().filter(|r| {
            r.ran() && r.label.starts_with("PFS files (") && r.label.ends_with("version B over A")
        }) {
            let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
            r.notes.push_str(&format!(
                "; vs plain: elapsed {:.2}×, CPU {:.2}×, wire {:.2}×",
                ratio(r.elapsed_s, plain.elapsed_s),
                ratio(r.cpu_total_s, plain.cpu_total_s),
                ratio(r.wire_mb, plain.wire_mb)
            ));
        }
    }
    let Some(rsync) = find(rows, "Conventional (rsync): version B over A (delta)") else {
        return;
    };
    let scp = find(rows, "Conventional (scp): version B (full copy)");
    let snapshot = rows.to_vec();
    for r in rows
        .iter_mut()
        .filter(|r| r.label == "PFS files: version B over A" && r.ran())
    {
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut s = format!(
            "; vs rsync delta: wire {:.2}×, elapsed {:.2}×, CPU {:.2}×",
            ratio(r.wire_mb, rsync.wire_mb),
            ratio(r.elapsed_s, rsync.elapsed_s),
            ratio(r.cpu_total_s, rsync.cpu_total_s)
        );
        if let Some(z) = find(
            &snapshot,
            "Conventional (rsync -z): version B over A (delta, compressed)",
        ) {
            s.push_str(&format!(
                ", vs rsync -z: wire {:.2}×",
                ratio(r.wire_mb, z.wire_mb)
            ));
        }
        if let Some(scp) = &scp {
            s.push_str(&format!(
                ", vs scp: elapsed {:.2}×",
                ratio(r.elapsed_s, scp.elapsed_s)
            ));
        }
        r.notes.push_str(&s);
    }
}

/// Columns of the terminal and Markdown tables (CSV and JSON carry every field).
const VIEW: [Column; 9] = [
    Column::text("label", 52),
    Column::num("eff_MB", 9),
    Column::num("wire_MB", 10),
    Column::num("wire/eff", 8),
    Column::num("time_s", 8),
    Column::num("eff_MB/s", 9),
    Column::num("CPU_s", 7),
    Column::text("check", 8),
    Column::text("notes", 0),
];

fn view(rows: &[Row]) -> Table {
    let mut t = Table::new(&VIEW);
    for r in rows {
        t.push(vec![
            Cell::text(&r.label),
            measured(r, r.effective_mb, 1),
            measured(r, r.wire_mb, 3),
            measured(r, r.wire_ratio, 4),
            measured(r, r.elapsed_s, 3),
            measured(r, r.effective_mb_s, 1),
            measured(r, r.cpu_total_s, 2),
            Cell::text(&r.integrity),
            Cell::text(&r.notes),
        ]);
    }
    t
}

fn table(header: &FilesHeader, rows: &[Row]) -> String {
    let (h, st) = (&header.host, &header.study);
    let mut s = format!(
        "pfs bench files — {} · kernel {} · {} · {} cores\nversion A {} ({} files, {:.1} MB) · version B {} ({} files, {:.1} MB) · cold {:.1} MB\n{}\n\n",
        h.git_revision, h.kernel, h.cpu_model, h.cores, st.version_a, st.version_a_files, st.version_a_bytes as f64 / 1e6,
        st.version_b, st.version_b_files, st.version_b_bytes as f64 / 1e6, st.cold_bytes as f64 / 1e6, st.placement
    );
    s.push_str(&view(rows).text());
    s.push_str(&format!("\n{}\n", st.units));
    s
}

fn markdown(header: &FilesHeader, rows: &[Row]) -> String {
    let (h, st) = (&header.host, &header.study);
    let mut s = format!(
        "Revision `{}` · {} cores · {} · kernel {}  \nVersion A `{}` ({} files, {:.1} MB); version B `{}` ({} files, {:.1} MB); cold data {:.1} MB  \n{}\n\n",
        h.git_revision, h.cores, h.cpu_model, h.kernel, st.version_a, st.version_a_files, st.version_a_bytes as f64 / 1e6,
        st.version_b, st.version_b_files, st.version_b_bytes as f64 / 1e6, st.cold_bytes as f64 / 1e6, st.placement
    );
    s.push_str(&view(rows).markdown());
    s.push_str(&format!("\n{}\n", st.units));
    s
}
