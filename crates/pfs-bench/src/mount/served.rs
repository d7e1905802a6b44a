//! The served tree and its mounts: one `pfs serve --dest DIR` child for the
//! whole study, and `pfs mount … --foreground` children, each unmounted and
//! reaped on every exit path (Ctrl-C included: the unmount is registered
//! with [`crate::cleanup`] after the process, so it runs first).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::child::ChildGuard;
use crate::cleanup::{self, Undo};

/// Why this host cannot run the mount rows, or `None` when it can.
pub fn mount_unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (mounts FUSE and drops the page cache)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (modprobe fuse?)".into());
    }
    None
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches` (root).
pub fn drop_caches() -> anyhow::Result<()> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").context("echo 3 > /proc/sys/vm/drop_caches")
}

/// What a running mount's process reported when it came up.
#[derive(Debug, Clone)]
pub struct Mounted {
    /// Wall time from starting `pfs mount` to its `mounted` line, ms.
    pub up_ms: f64,
    /// The session's opening (MOUNT_HELLO to the last LIST), ms, as it reports.
    pub opened_ms: f64,
    /// Entries of the listing.
    pub entries: u64,
}

/// A `pfs mount --foreground` child and its mount point.
#[derive(Debug)]
pub struct Mount {
    guard: Option<ChildGuard>,
    dir: PathBuf,
    ticket: u64,
    /// What it said when it came up.
    pub up: Mounted,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Mount {
    /// Mounts `source` (`HOST:PORT[:DIR]`) at `dir` with its chunk cache in
    /// `cache`, `threads` FUSE workers; waits until it is up.
    pub fn start(
        pfs: &Path,
        source: &str,
        dir: &Path,
        cache: &Path,
        threads: u16,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut cmd = Command::new(pfs);
        cmd.arg("mount")
            .arg(source)
            .arg(dir)
            .arg("--cache")
            .arg(cache)
            // No spill in memory during a row: the cache holds every chunk.
            .args(["--cache-size", "64G", "--threads", &threads.to_string()])
            .args(["--foreground", "--json"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let t0 = Instant::now();
        let mut child = cmd.spawn().context("starting pfs mount")?;
        let stdout = child.stdout.take().context("pfs mount stdout")?;
        let stderr = child.stderr.take().context("pfs mount stderr")?;
        let guard = ChildGuard::new(child);
        // Registered after the process: on Ctrl-C it is unmounted before it is killed.
        let ticket = cleanup::on_interrupt(Undo::Mount(dir.to_path_buf()));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut first = Vec::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if first.len() < 4 && !line.contains(" INFO ") {
                    first.push(line);
                }
            }
            first.join(" / ")
        });
        let mut m = Self {
            guard: Some(guard),
            dir: dir.to_path_buf(),
            ticket,
            up: Mounted {
                up_ms: 0.0,
                opened_ms: 0.0,
                entries: 0,
            },
            stderr: Some(stderr),
        };
        let deadline = t0 + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                    if v["event"] == "mounted" {
                        m.up = Mounted {
                            up_ms: t0.elapsed().as_secs_f64() * 1e3,
                            opened_ms: v["opened_ms"].as_f64().unwrap_or(0.0),
                            entries: v["entries"].as_u64().unwrap_or(0),
                        };
                        return Ok(m);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(_) => {
                    let why = m.stop_and_say();
                    bail!(
                        "pfs mount {source} did not come up{}",
                        if why.is_empty() {
                            " within 120 s".to_string()
                        } else {
                            format!(": {why}")
                        }
                    );
                }
            }
            if !m.guard.as_mut().is_some_and(ChildGuard::running) {
                let why = m.stop_and_say();
                bail!(
                    "pfs mount {source} exited before mounting{}",
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(": {why}")
                    }
                );
            }
        }
    }

    /// The mount process's id.
    pub fn pid(&self) -> u32 {
        self.guard.as_ref().map_or(0, ChildGuard::id)
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The counters of the live mount (`user.pfs.stats` on its root).
    pub fn stats(&self) -> anyhow::Result<serde_json::Value> {
        let mut buf = vec![0u8; 64 << 10];
        let n = rustix::fs::getxattr(&self.dir, pfs_stats_xattr(), &mut buf[..])
            .with_context(|| format!("getxattr user.pfs.stats on {}", self.dir.display()))?;
        serde_json::from_slice(&buf[..n]).context("user.pfs.stats is not JSON")
    }

    /// Unmounts, waits for the process to end, and returns its first
    /// stderr lines (empty when it said nothing).
    fn stop_and_say(&mut self) -> String {
        cleanup::unmount(&self.dir);
        cleanup::done(self.ticket);
        if let Some(mut g) = self.guard.take() {
            // It ends by itself once unmounted; killed (by the guard) if not.
            let _ = g.wait_timeout(Duration::from_secs(5));
        }
        self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }

    /// Unmounts and reaps the process.
    pub fn stop(mut self) {
        let _ = self.stop_and_say();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.guard.is_some() {
            let _ = self.stop_and_say();
        }
    }
}

/// The name of the stats attribute (the mount crate's constant, spelled here
/// so the bench does not link the FUSE client).
fn pfs_stats_xattr() -> &'static str {
    "user.pfs.stats"
}

/// A counter of [`Mount::stats`].
pub fn counter(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}
