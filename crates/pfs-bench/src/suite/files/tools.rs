//! The programs the files study times, each as a real child process: `pfs
//! serve` (started in one place, [`start_pfs_server`], from its storage
//! arguments) and `pfs send`, an rsync daemon and `rsync`, sshd and `scp`,
//! and the local floors `cp -a` and `tar | tar`. [`timed`] is the one
//! measurement of a row: client wall time plus the filesystem's sync, CPU of
//! client and server, wire bytes.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::fs::BenchFs;
use crate::child::{
    free_port, run_client, serve_listening, tool, wait_children_reaped, wait_listening, ChildGuard,
};
use crate::suite::conventional::{prepare_sshd, scp_command, sshd_tools, user_name};
use crate::suite::netpath::NetPath;

/// One timed run.
#[derive(Debug)]
pub struct Timed {
    /// Client wall time plus the sync of the filesystem, seconds.
    pub elapsed: f64,
    /// The sync's share of `elapsed`.
    pub sync: f64,
    /// Bytes through the path's interface (0 for a local copy).
    pub wire: u64,
    /// User CPU of client and server, seconds.
    pub user: f64,
    /// System CPU of client and server, seconds.
    pub sys: f64,
    /// The client's stdout.
    pub stdout: String,
}

/// CPU seconds of reaped children of this process so far.
fn children_cpu() -> (f64, f64) {
    let u = pfs_sys::children_usage();
    (u.user_us as f64 / 1e6, u.sys_us as f64 / 1e6)
}

/// Times `client` to completion (within 30 minutes) against the running
/// server `server` (its process tree's CPU counted), over `net` (`None`: a
/// local copy, no wire), then syncs `fs` inside the timed part.
pub fn timed(
    server: Option<u32>,
    client: Command,
    net: Option<&NetPath>,
    fs: &BenchFs,
) -> anyhow::Result<Timed> {
    let server_cpu = |pid: u32| -> anyhow::Result<(f64, f64)> {
        wait_children_reaped(pid, Duration::from_secs(5));
        pfs_sys::tree_cpu_seconds(pid).context("server CPU")
    };
    let (su0, ss0) = server.map(server_cpu).transpose()?.unwrap_or_default();
    let (cu0, cs0) = children_cpu();
    let program = client.get_program().to_string_lossy().into_owned();
    let wire0 = net.map(NetPath::wire_counter).unwrap_or(0);
    let t0 = Instant::now();
    let out = run_client(client, Duration::from_secs(1800))?;
    let t1 = Instant::now();
    let synced = fs.sync();
    let t2 = Instant::now();
    let wire = net.map(NetPath::wire_counter).unwrap_or(0).saturating_sub(wire0);
    if !out.status.success() {
        bail!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    synced?;
    let (su1, ss1) = server.map(server_cpu).transpose()?.unwrap_or_default();
    let (cu1, cs1) = children_cpu();
    Ok(Timed {
        elapsed: (t2 - t0).as_secs_f64(),
        sync: (t2 - t1).as_secs_f64(),
        wire,
        user: (su1 - su0) + (cu1 - cu0),
        sys: (ss1 - ss0) + (cs1 - cs0),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    })
}

/// How `pfs serve` keeps what it receives, on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum StorageKind {
    /// `--dest DIR` alone: one copy, deduplicated against the destination's
    /// own files (chunk index in DEST/.pfs).
    DestOnly,
    /// `--store DIR --dest DIR`: every chunk also kept in a content store.
    Store,
}

impl StorageKind {
    /// What PFS row labels add for it (`pfs serve`'s default, --dest alone,
    /// is the plain label).
    pub fn label_tag(self) -> Option<&'static str> {
        match self {
            Self::DestOnly => None,
            Self::Store => Some("with store"),
        }
    }

    /// What the receiver starts from, in a row label.
    pub fn empty(self) -> &'static str {
        match self {
            Self::Store => "empty store",
            Self::DestOnly => "empty destination",
        }
    }
}

/// Where one `pfs serve` keeps what it receives: its storage arguments.
#[derive(Debug, Clone)]
pub struct ServeStorage {
    /// `--dest`.
    pub dest: PathBuf,
    /// `--store` (store mode only).
    pub store: Option<PathBuf>,
}

impl ServeStorage {
    /// Storage of `kind` in `dir` (`dir/dest`, and `dir/store` when it has one).
    pub fn new(kind: StorageKind, dir: &Path) -> Self {
        Self {
            dest: dir.join("dest"),
            store: (kind == StorageKind::Store).then(|| dir.join("store")),
        }
    }

    /// The arguments `pfs serve` gets.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        if let Some(store) = &self.store {
            a.push("--store".into());
            a.push(store.clone().into());
        }
        a.push("--dest".into());
        a.push(self.dest.clone().into());
        a
    }

    /// Every directory the receiver writes (its disk use).
    pub fn dirs(&self) -> Vec<&Path> {
        let mut d = vec![self.dest.as_path()];
        d.extend(self.store.as_deref());
        d
    }

    /// Removes what the receiver wrote.
    pub fn remove(&self) {
        for d in self.dirs() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A `pfs serve` child on a free loopback port.
#[derive(Debug)]
pub struct PfsServer {
    /// The `pfs` it runs, which its senders run too.
    pub exe: PathBuf,
    pub guard: ChildGuard,
    pub addr: String,
    /// What a sender adds to reach it: its keys, when it requires them.
    pub send_args: Vec<OsString>,
}

/// Key files of the protected rows: the server's identity, the client's,
/// and an `authorized_keys` listing the client.
#[derive(Debug)]
pub struct BenchKeys {
    server: PathBuf,
    client: PathBuf,
    authorized: PathBuf,
}

impl BenchKeys {
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
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
    fn send_args(&self) -> Vec<OsString> {
        vec![
            "--identity".into(),
            self.client.clone().into(),
            "--server-key".into(),
            pfs_auth::public_path(&self.server).into(),
        ]
    }
}

/// Starts `pfs serve` receiving into `storage` — the one place the study
/// starts a receiver, so its storage mode is decided by the caller's
/// [`ServeStorage`] alone.
pub fn start_pfs_server(
    exe: &Path,
    storage: &ServeStorage,
    keys: Option<&BenchKeys>,
) -> anyhow::Result<PfsServer> {
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--json"])
        .args(storage.args());
    if let Some(k) = keys {
        cmd.arg("--identity")
            .arg(&k.server)
            .arg("--authorized-keys")
            .arg(&k.authorized);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().context("starting pfs serve")?;
    let stdout = child.stdout.take().context("pfs serve stdout")?;
    let stderr = child.stderr.take().context("pfs serve stderr")?;
    let mut guard = ChildGuard::new(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                // Keep draining so the server never blocks on stdout.
                continue;
            }
        }
    });
    // The first lines of stderr say why a server that exits did; the rest
    // is drained so it never blocks.
    let why = std::thread::spawn(move || {
        let mut first = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if first.len() < 4 && !line.contains(" INFO ") {
                first.push(line);
            }
        }
        first.join(" / ")
    });
    match serve_listening(&rx, Duration::from_secs(30)) {
        Some(addr) => Ok(PfsServer {
            exe: exe.to_path_buf(),
            guard,
            addr,
            send_args: keys.map(BenchKeys::send_args).unwrap_or_default(),
        }),
        None => {
            let exited = guard.wait_timeout(Duration::from_secs(2)).is_some();
            drop(guard);
            let said = if exited {
                why.join().unwrap_or_default()
            } else {
                String::new()
            };
            bail!(
                "pfs serve {} did not start listening{}",
                storage
                    .args()
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            )
        }
    }
}

/// Whether this `pfs` can serve `kind`: starts a server of that mode in
/// `dir` and sees it listen. `Err` says why not, in pfs's own words.
pub fn check_storage(exe: &Path, kind: StorageKind, dir: &Path) -> anyhow::Result<()> {
    let storage = ServeStorage::new(kind, dir);
    let server = start_pfs_server(exe, &storage, None);
    storage.remove();
    server.map(drop)
}

/// One `pfs send` of `src` (its contents land under `remote`).
pub fn pfs_send(
    server: &PfsServer,
    src: &Path,
    remote: &str,
    cache: &Path,
    extra: &[&str],
    net: &NetPath,
    fs: &BenchFs,
) -> anyhow::Result<(Timed, serde_json::Value)> {
    let mut cmd = Command::new(&server.exe);
    cmd.arg("send")
        .arg(src)
        .arg("--to")
        .arg(format!("{}:{remote}", server.addr))
        .arg("--cache-dir")
        .arg(cache)
        .args(["--json", "--progress", "never"])
        .args(extra)
        .args(&server.send_args);
    let t = timed(Some(server.guard.id()), cmd, Some(net), fs)?;
    let v: serde_json::Value = serde_json::from_str(&t.stdout).context("pfs send --json output")?;
    Ok((t, v))
}

/// The receiver's account of a `pfs send --json`, for a row's notes.
pub fn pfs_notes(v: &serde_json::Value) -> String {
    let r = &v["receiver"];
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0) as f64 / 1e6;
    format!(
        "written {}, unchanged {}, same content {}; literal {:.1} MB, matched {:.1} MB, repaired {:.1} MB; index fetched {} entries",
        r["files_written"], r["files_unchanged"], r["files_metadata_only"], n(&r["literal_bytes"]), n(&r["matched_bytes"]),
        n(&r["repaired_bytes"]), v["index_entries_fetched"]
    )
}

/// An rsync daemon serving one writable module.
#[derive(Debug)]
pub struct RsyncDaemon {
    pub guard: ChildGuard,
    pub port: u16,
}

pub fn start_rsyncd(dir: &Path, module: &Path) -> anyhow::Result<RsyncDaemon> {
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
pub fn rsync_send(
    d: &RsyncDaemon,
    src: &Path,
    remote: &str,
    compress: bool,
    net: &NetPath,
    fs: &BenchFs,
) -> anyhow::Result<(Timed, String)> {
    let mut cmd = Command::new(tool("rsync", "rsync"));
    cmd.args(["-a", "--stats", if compress { "-z" } else { "--no-compress" }])
        .arg(format!("{}/", src.display()))
        .arg(format!("rsync://127.0.0.1:{}/pfs/{remote}/", d.port));
    let t = timed(Some(d.guard.id()), cmd, Some(net), fs)?;
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
pub fn scp_send(
    scratch: &Path,
    src: &Path,
    dst: &Path,
    net: &NetPath,
    fs: &BenchFs,
) -> anyhow::Result<Timed> {
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
    // The SSH handshake is in the row, as a user would see it.
    timed(Some(guard.id()), client, Some(net), fs)
}

/// A local copy that sets the floor: no network, no protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// `cp -a SRC/. DST`.
    Cp,
    /// `tar -C SRC -cf - . | tar -C DST -xf -`.
    Tar,
}

impl Floor {
    /// Its label's tool part.
    pub fn tool(self) -> &'static str {
        match self {
            Self::Cp => "cp -a",
            Self::Tar => "tar | tar",
        }
    }

    /// The command copying the contents of `src` into the empty `dst`.
    pub fn command(self, src: &Path, dst: &Path) -> Command {
        match self {
            Self::Cp => {
                let mut c = Command::new("cp");
                c.arg("-a").arg(src.join(".")).arg(dst);
                c
            }
            Self::Tar => {
                // A pipeline needs a shell; the paths go in as arguments, never
                // into the script text.
                let mut c = Command::new("sh");
                c.args(["-c", "set -e; tar -C \"$1\" -cf - . | tar -C \"$2\" -xf -", "sh"])
                    .arg(src)
                    .arg(dst);
                c
            }
        }
    }
}

/// Times `floor` copying the contents of `src` into a new `dst`.
pub fn floor_copy(floor: Floor, src: &Path, dst: &Path, fs: &BenchFs) -> anyhow::Result<Timed> {
    std::fs::create_dir_all(dst).with_context(|| format!("creating {}", dst.display()))?;
    timed(None, floor.command(src, dst), None, fs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_arguments() {
        let s = ServeStorage::new(StorageKind::Store, Path::new("/x"));
        let a: Vec<String> = s
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(a, ["--store", "/x/store", "--dest", "/x/dest"]);
        assert_eq!(s.dirs(), [Path::new("/x/dest"), Path::new("/x/store")]);
        let d = ServeStorage::new(StorageKind::DestOnly, Path::new("/x"));
        let a: Vec<String> = d
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(a, ["--dest", "/x/dest"]);
        assert_eq!(d.dirs(), [Path::new("/x/dest")]);
        assert_eq!(StorageKind::DestOnly.label_tag(), None);
        assert_eq!(StorageKind::Store.label_tag(), Some("with store"));
    }

    #[test]
    fn floors_copy_contents_with_odd_names() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src dir $x");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a b"), b"hello").unwrap();
        std::os::unix::fs::symlink("sub/a b", src.join("l")).unwrap();
        for floor in [Floor::Cp, Floor::Tar] {
            let dst = d.path().join(format!("dst '{}'", floor.tool()));
            std::fs::create_dir_all(&dst).unwrap();
            let out = floor.command(&src, &dst).output().unwrap();
            assert!(
                out.status.success(),
                "{floor:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(std::fs::read(dst.join("sub/a b")).unwrap(), b"hello", "{floor:?}");
            assert_eq!(std::fs::read_link(dst.join("l")).unwrap(), Path::new("sub/a b"));
            assert!(super::super::tree::same_tree(&src, &dst).unwrap());
        }
    }
}
