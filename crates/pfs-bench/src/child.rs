//! Child processes of a study: a guard that kills and reaps its child on
//! every exit path (Ctrl-C included, through [`crate::cleanup`]), tool lookup
//! (`PFS_BENCH_<TOOL>` overrides), free ports, readiness waits, a client run
//! with a deadline, and a process tree's CPU time from `/proc`.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::cleanup::{self, Undo};

/// A child process killed (and reaped) on every exit path, Ctrl-C included.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    ticket: u64,
}

impl ChildGuard {
    /// Takes ownership of `child`.
    pub fn new(child: Child) -> Self {
        let ticket = cleanup::on_interrupt(Undo::Process(child.id()));
        Self {
            child: Some(child),
            ticket,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.child.as_mut()?.try_wait() {
                Ok(Some(status)) => {
                    // Reaped: its pid may be reused, so Ctrl-C must not kill it any more.
                    cleanup::done(self.ticket);
                    return Some(status);
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return None,
            }
        }
        None
    }

    /// The child's stdout pipe, if it was piped and not taken yet.
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.as_mut().and_then(|c| c.stdout.take())
    }

    /// The child's stderr pipe, if it was piped and not taken yet.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.as_mut().and_then(|c| c.stderr.take())
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Forget the pid before reaping it: a reaped pid may be reused.
        cleanup::done(self.ticket);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The program to run for `tool`, honouring `PFS_BENCH_<TOOL>`.
pub fn tool(name: &str, default: &str) -> String {
    std::env::var(format!("PFS_BENCH_{}", name.to_ascii_uppercase())).unwrap_or_else(|_| default.to_string())
}

/// Whether `program` can be found (absolute path, or on PATH).
pub fn have(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).exists();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

/// A free TCP port (bound and released; the tools bind it right after).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts on `ip:port`, or the server died, or `timeout`.
pub fn wait_listening(server: &mut ChildGuard, ip: &str, port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let addr = format!("{ip}:{port}");
    while Instant::now() < deadline {
        if !server.running() {
            bail!("the server exited before listening on {addr}");
        }
        if TcpStream::connect_timeout(&addr.parse()?, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listened on {addr} within {timeout:?}")
}

/// Waits up to `timeout` for `pfs serve --json` (whose stdout lines arrive on
/// `lines`) to print its `listening` event; returns the address it names.
/// `None` when the lines stop or the time is up (the caller says why).
pub fn serve_listening(lines: &mpsc::Receiver<String>, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["event"] == "listening" {
            // An event without an address is no readiness: keep waiting.
            if let Some(addr) = v["addr"].as_str() {
                return Some(addr.to_string());
            }
        }
    }
    None
}

/// Runs a client command to completion within `timeout`, draining its
/// stdout and stderr on threads so a chatty client never blocks on a pipe.
pub fn run_client(cmd: Command, timeout: Duration) -> anyhow::Result<std::process::Output> {
    let program = cmd.get_program().to_owned();
    match run_client_until(cmd, timeout)? {
        Some(out) => Ok(out),
        None => bail!("{program:?} did not finish within {timeout:?}"),
    }
}

/// [`run_client`], but a client still running at `timeout` is killed and
/// `None` returned (the caller reports what it did).
pub fn run_client_until(mut cmd: Command, timeout: Duration) -> anyhow::Result<Option<std::process::Output>> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
    );
    let mut guard = ChildGuard::new(child);
    let Some(status) = guard.wait_timeout(timeout) else {
        // Killed and reaped. Its own children (scp's ssh) may hold the
        // pipes a little longer: the drain threads end when they exit.
        drop(guard);
        return Ok(None);
    };
    drop(guard);
    Ok(Some(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }))
}

/// Waits until `pid` has no children left (the per-connection processes
/// were reaped, so their CPU shows in `pfs_sys::tree_cpu_seconds`).
pub fn wait_children_reaped(pid: u32, timeout: Duration) {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match std::fs::read_to_string(&path) {
            Ok(s) if s.trim().is_empty() => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => {
                // No children file on this kernel: give the daemon a moment.
                std::thread::sleep(Duration::from_millis(300));
                return;
            }
        }
    }
}

pub fn taskset(cmd: Command, cpu: Option<usize>) -> Command {
    match cpu {
        Some(cpu) if have("taskset") => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string()])
                .arg(cmd.get_program())
                .args(cmd.get_args());
            c
        }
        _ => cmd,
    }
}
