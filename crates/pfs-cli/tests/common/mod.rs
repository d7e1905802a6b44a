//! Helpers shared by the integration tests.
//!
//! Each test file includes this module and uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest any single command may run before the test kills it and fails.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest a server may take to print its listening line.
pub const LISTEN_TIMEOUT: Duration = Duration::from_secs(60);

/// Splits one CSV line, honouring double quotes.
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

/// What a finished command left behind.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with the whole output unless the exit code is `want`.
    pub fn expect_code(&self, want: i32, what: &str) -> &Self {
        assert_eq!(
            self.code(),
            Some(want),
            "{what}: expected exit code {want}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn json(&self, what: &str) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{what}: stdout is not JSON ({e}):\n{}\n--- stderr ---\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Reads a pipe to the end on a thread; the result arrives on the channel.
pub fn drain<R: Read + Send + 'static>(mut r: R) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

/// Kills and reaps a child on drop unless it was taken out first.
#[derive(Debug)]
pub struct ChildGuard(pub Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` to exit, at most `timeout`; kills it and returns None past that.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Collects the output of a spawned child (stdout and stderr piped), waiting
/// at most [`CMD_TIMEOUT`]; panics, after killing it, past that.
pub fn collect(mut child: Child, what: &str) -> Out {
    let out_rx = drain(child.stdout.take().expect("stdout pipe"));
    let err_rx = drain(child.stderr.take().expect("stderr pipe"));
    let status = wait_bounded(&mut child, CMD_TIMEOUT);
    let stdout = out_rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let stderr = err_rx.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let Some(status) = status else {
        panic!("{what} did not finish within {CMD_TIMEOUT:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    };
    Out {
        status,
        stdout,
        stderr,
    }
}

/// Runs a command to completion (bounded by [`CMD_TIMEOUT`]) and collects its output.
pub fn run(mut cmd: Command) -> Out {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn pfs");
    collect(child, &format!("{cmd:?}"))
}

/// A running `pfs serve`, killed on drop.
#[derive(Debug)]
pub struct Server {
    pub guard: ChildGuard,
    pub addr: String,
    pub lines: mpsc::Receiver<String>,
    pub stderr: mpsc::Receiver<String>,
    /// Stdout lines already read (the listening line included).
    pub seen: Vec<String>,
}

impl Server {
    /// Spawns `cmd` (a `pfs serve …`) and waits for its listening line.
    pub fn spawn(mut cmd: Command) -> Server {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn pfs serve");
        let stdout = child.stdout.take().expect("stdout pipe");
        let stderr = drain(child.stderr.take().expect("stderr pipe"));
        let guard = ChildGuard(Some(child));
        // Keep draining stdout for the server's whole life: a full pipe would stall it.
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            guard,
            addr: String::new(),
            lines,
            stderr,
            seen: Vec::new(),
        };
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match server.lines.recv_timeout(left) {
                Ok(line) => {
                    let addr = listening_addr(&line);
                    server.seen.push(line);
                    if let Some(addr) = addr {
                        server.addr = addr;
                        return server;
                    }
                }
                Err(e) => {
                    if let Some(mut c) = server.guard.0.take() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    let err = server
                        .stderr
                        .recv_timeout(Duration::from_secs(5))
                        .unwrap_or_default();
                    panic!("pfs serve never printed its listening line ({e}); stdout so far {:?}\n--- stderr ---\n{err}", server.seen);
                }
            }
        }
    }

    /// Waits (bounded) for the server to exit by itself; returns its output.
    pub fn finish(mut self) -> Out {
        let mut child = self.guard.0.take().expect("server child");
        let status = wait_bounded(&mut child, CMD_TIMEOUT);
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        // The stdout thread ends at EOF once the process is gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
        let stdout = self.seen.join("\n");
        let Some(status) = status else {
            panic!("pfs serve did not exit within {CMD_TIMEOUT:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
        };
        Out {
            status,
            stdout,
            stderr,
        }
    }
}

/// The address in `pfs serve: listening on ADDR (TRANSPORT)` or
/// `{"event":"listening","addr":ADDR}`.
pub fn listening_addr(line: &str) -> Option<String> {
    if let Some(rest) = line.strip_prefix("pfs serve: listening on ") {
        let rest = rest.trim();
        let addr = rest.rsplit_once(" (").map_or(rest, |(addr, _)| addr);
        return Some(addr.to_string());
    }
    let v: Value = serde_json::from_str(line).ok()?;
    if v["event"] == "listening" {
        return v["addr"].as_str().map(str::to_string);
    }
    None
}

impl Server {
    /// The next JSON event named `event` the server prints (bounded).
    #[allow(dead_code)]
    pub fn wait_event(&mut self, event: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|e| {
                panic!(
                    "no {event:?} event from pfs serve ({e}); stdout so far:\n{}",
                    self.seen.join("\n")
                )
            });
            self.seen.push(line.clone());
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if v["event"] == event {
                    return v;
                }
            }
        }
    }
}

/// Deterministic incompressible bytes (xorshift64).
#[allow(dead_code)]
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(len);
    v
}
