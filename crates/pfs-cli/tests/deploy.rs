//! `pfs serve` as deployed: a config file, JSON logs with one line per
//! session, and SIGTERM/SIGINT (stop accepting, grace period, cut).
//!
//! Every child is bounded (see `common`); waits on files or events have a
//! deadline that only guards against a hang, never a timing assertion.
//! HOME is a temporary directory, so no identity of the machine is used.

mod common;
use common::{run, Out, Server};

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest wait for a file-system condition (a hang guard only).
const HANG_GUARD: Duration = Duration::from_secs(120);
/// Name prefix of the receiver's temporary files.
/// Where the receiver writes files before renaming them into place.
const TEMP_DIR: &str = ".pfs/tmp";

fn pfs(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pfs"));
    c.env("HOME", home).env_remove("XDG_CONFIG_HOME");
    c
}

/// `len` pseudo-random bytes (BLAKE3 in XOF mode): nothing deduplicates.
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(b"pfs deploy test data");
    h.update(&seed.to_le_bytes());
    let mut v = vec![0u8; len];
    h.finalize_xof().fill(&mut v);
    v
}

fn send_file(home: &Path, file: &Path, to: &str) -> Command {
    let mut c = pfs(home);
    c.arg("send")
        .arg(file)
        .args(["--to", to, "--json", "--progress", "never", "--cache-dir"])
        .arg(home.join("cache"));
    c
}

fn signal(server: &Server, sig: rustix::process::Signal) {
    let child = server.guard.0.as_ref().expect("server child");
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, sig).expect("signal pfs serve");
}

/// The JSON log lines on stderr whose `event` is `session`.
fn session_lines(out: &Out) -> Vec<Value> {
    out.stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "session")
        .collect()
}

/// The `files_report` event on stdout.
fn files_report(out: &Out) -> Value {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "files_report")
        .unwrap_or_else(|| {
            panic!(
                "no files_report on stdout:\n{}\n--- stderr ---\n{}",
                out.stdout, out.stderr
            )
        })
}

/// A config file and the equivalent flags serve alike: same report, the
/// file lands where the file's relative paths say, and the session's log
/// line carries who, what and how much.
#[test]
fn config_file_serves_like_its_flags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let data = random_bytes(1, 300_000);
    let src = home.join("a.bin");
    fs::write(&src, &data).expect("write source");

    let mut reports = Vec::new();
    for with_file in [false, true] {
        let dir = home.join(if with_file { "by-file" } else { "by-flags" });
        fs::create_dir_all(&dir).expect("mkdir");
        let mut cmd = pfs(home);
        if with_file {
            let conf = dir.join("serve.toml");
            // Relative paths: beside the file.
            fs::write(
                &conf,
                "# a test server\nlisten = \"127.0.0.1:0\"\nstore = \"store\"\ndest = \"dest\"\n\
                 max_sessions = 1\njson = true\nlog_format = \"json\"\nmax_clients = 2\n",
            )
            .expect("write config");
            cmd.arg("serve").arg("--config").arg(&conf);
        } else {
            cmd.args(["serve", "--listen", "127.0.0.1:0", "--store"])
                .arg(dir.join("store"))
                .arg("--dest")
                .arg(dir.join("dest"))
                .args([
                    "--max-sessions",
                    "1",
                    "--json",
                    "--log-format",
                    "json",
                    "--max-clients",
                    "2",
                ]);
        }
        let server = Server::spawn(cmd);
        let sent = run(send_file(home, &src, &server.addr));
        sent.expect_code(0, "pfs send");
        let out = server.finish();
        out.expect_code(0, "pfs serve --max-sessions 1");
        assert_eq!(fs::read(dir.join("dest/a.bin")).expect("landed"), data);
        let lines = session_lines(&out);
        assert_eq!(lines.len(), 1, "one session line:\n{}", out.stderr);
        let l = &lines[0];
        assert_eq!(l["level"], "INFO", "{l}");
        assert_eq!(l["key"], "-", "{l}");
        assert!(
            l["peer"].as_str().is_some_and(|p| p.starts_with("127.0.0.1:")),
            "{l}"
        );
        assert_eq!(l["service"], "files", "{l}");
        assert_eq!(l["files_written"], 1, "{l}");
        assert_eq!(l["files_unchanged"], 0, "{l}");
        assert_eq!(l["files_failed"], 0, "{l}");
        assert_eq!(l["files_deleted"], 0, "{l}");
        assert_eq!(l["effective_bytes"], data.len() as u64, "{l}");
        assert!(l["wire_bytes"].as_u64().is_some_and(|w| w > 0), "{l}");
        assert!(l["bytes_in"].as_u64().is_some_and(|w| w > 0), "{l}");
        assert!(l["duration_s"].as_f64().is_some(), "{l}");
        assert_eq!(l["outcome"], "ok", "{l}");
        let r = files_report(&out);
        reports.push((
            r["files_written"].clone(),
            r["effective_bytes"].clone(),
            r["literal_bytes"].clone(),
        ));
    }
    assert_eq!(reports[0].0, 1, "{reports:?}");
    assert_eq!(reports[0], reports[1], "flags and file gave different reports");
}

/// A send with `--delete` that removes an entry: the session's log line
/// counts it (`files_deleted`), as the human result line does.
#[test]
fn deletions_are_in_the_session_log_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let (src, dest) = (home.join("src"), home.join("dest"));
    fs::create_dir_all(&src).expect("mkdir src");
    fs::create_dir_all(&dest).expect("mkdir dest");
    fs::write(src.join("keep.txt"), b"kept\n").expect("write source");
    fs::write(dest.join("stale.txt"), b"only at the destination\n").expect("write stale");
    let mut cmd = pfs(home);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-sessions",
        "1",
        "--log-format",
        "json",
        "--dest",
    ])
    .arg(&dest);
    let server = Server::spawn(cmd);
    let mut send = pfs(home);
    send.arg("send")
        .arg(format!("{}/", src.display()))
        .args([
            "--to",
            &server.addr,
            "--delete",
            "--progress",
            "never",
            "--cache-dir",
        ])
        .arg(home.join("cache"));
    run(send).expect_code(0, "pfs send --delete");
    let out = server.finish();
    out.expect_code(0, "pfs serve --max-sessions 1");
    assert!(!dest.join("stale.txt").exists(), "stale.txt not deleted");
    let lines = session_lines(&out);
    assert_eq!(lines.len(), 1, "one session line:\n{}", out.stderr);
    assert_eq!(lines[0]["files_deleted"], 1, "{}", lines[0]);
    assert!(out.stdout.contains(", 1 deleted;"), "{}", out.stdout);
}

/// An unknown key is refused with its name and line, before anything starts.
#[test]
fn config_unknown_key_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let conf = tmp.path().join("serve.toml");
    fs::write(&conf, "listen = \"127.0.0.1:0\"\n\nmax_client = 3\n").expect("write config");
    let out = run({
        let mut c = pfs(tmp.path());
        c.arg("serve").arg("--config").arg(&conf);
        c
    });
    out.expect_code(2, "pfs serve --config with an unknown key");
    assert!(
        out.stderr.contains("unknown field `max_client`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("line 3"), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "nothing listened: {}", out.stdout);
}

/// A flag on the command line overrides the same key in the file.
#[test]
fn config_flag_overrides_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let conf = tmp.path().join("serve.toml");
    fs::write(
        &conf,
        "listen = \"127.0.0.1:0\"\nsize = \"8M\"\nlog_format = \"text\"\nlog_level = \"error\"\n",
    )
    .expect("write config");
    let mut cmd = pfs(tmp.path());
    cmd.arg("serve").arg("--config").arg(&conf).args([
        "--log-format",
        "json",
        "--log-level",
        "info",
        "--once",
    ]);
    let server = Server::spawn(cmd);
    signal(&server, rustix::process::Signal::TERM);
    let out = server.finish();
    out.expect_code(0, "pfs serve stopped by SIGTERM");
    // JSON (the flag), at info (the flag): the stop is logged as JSON.
    let stopped = out
        .stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|v| v["signal"] == "SIGTERM" && v["level"] == "INFO");
    assert!(stopped, "no JSON info line about SIGTERM:\n{}", out.stderr);
}

/// SIGTERM and SIGINT on an idle server: it exits 0 (bounded by the hang
/// guard of `finish`, not timed).
#[test]
fn signal_on_an_idle_server_exits_zero() {
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut cmd = pfs(tmp.path());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--store"])
            .arg(tmp.path().join("store"))
            .arg("--dest")
            .arg(tmp.path().join("dest"));
        let server = Server::spawn(cmd);
        signal(&server, sig);
        let out = server.finish();
        out.expect_code(0, &format!("pfs serve after {sig:?}"));
        // The first log line names the build.
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(&format!("pfs {} (", env!("CARGO_PKG_VERSION"))) && first.contains("starting"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("stopped: 0 session(s) completed, 0 failed"),
            "{}",
            out.stderr
        );
    }
}

/// Forwards one connection from `listener` to `to`: everything the server
/// says, but only the first `limit` bytes the client says; then holds the
/// connection open, silent: a sender stopped mid-file.
fn pausing_proxy(listener: TcpListener, to: String, limit: usize) {
    thread::spawn(move || {
        let Ok((mut client, _)) = listener.accept() else {
            return;
        };
        let Ok(mut server) = TcpStream::connect(&to) else {
            return;
        };
        let (Ok(mut client_r), Ok(mut server_w)) = (client.try_clone(), server.try_clone()) else {
            return;
        };
        thread::spawn(move || {
            let _ = std::io::copy(&mut server, &mut client);
        });
        let mut buf = vec![0u8; 64 << 10];
        let mut sent = 0;
        while sent < limit {
            let n = match client_r.read(&mut buf[..(limit - sent).min(64 << 10)]) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if server_w.write_all(&buf[..n]).is_err() {
                return;
            }
            sent += n;
        }
        // Hold both sockets until the test ends (the process exits).
        thread::park();
        drop((client_r, server_w));
    });
}

/// The receiver's temporary files in the destination `dir`.
fn temps_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir.join(TEMP_DIR))
        .map(|it| {
            it.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGTERM while a sender has stopped mid-file: after the grace period the
/// session is cut, the server exits 0, the file never appears under its
/// final name and its temporary file is gone; the session's log line says
/// it failed, and why.
#[test]
fn sigterm_cuts_a_paused_files_session_cleanly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let dest = home.join("dest");
    let size = 4 << 20;
    let src = home.join("big.bin");
    fs::write(&src, random_bytes(2, size)).expect("write source");
    let mut cmd = pfs(home);
    cmd.arg("serve")
        .args([
            "--listen",
            "127.0.0.1:0",
            "--json",
            "--log-format",
            "json",
            "--shutdown-grace",
            "1",
            "--store",
        ])
        .arg(home.join("store"))
        .arg("--dest")
        .arg(&dest);
    let server = Server::spawn(cmd);
    let proxy = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let proxy_addr = proxy.local_addr().expect("proxy address").to_string();
    pausing_proxy(proxy, server.addr.clone(), size / 2);
    let mut sender = send_file(home, &src, &proxy_addr);
    sender
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _sender = Kill(sender.spawn().expect("spawn pfs send"));

    // Mid-file: the receiver holds the file under a temporary name.
    let deadline = Instant::now() + HANG_GUARD;
    while temps_in(&dest).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no temporary file appeared in {}",
            dest.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
    signal(&server, rustix::process::Signal::TERM);
    let out = server.finish();
    out.expect_code(0, "pfs serve after SIGTERM and a cut session");
    assert!(
        !dest.join("big.bin").exists(),
        "a cut file landed under its final name"
    );
    assert_eq!(
        temps_in(&dest),
        Vec::<String>::new(),
        "temporary files left in dest"
    );
    let lines = session_lines(&out);
    assert_eq!(lines.len(), 1, "one session line:\n{}", out.stderr);
    let l = &lines[0];
    assert_eq!(l["level"], "WARN", "{l}");
    assert_eq!(l["service"], "files", "{l}");
    assert_eq!(l["key"], "-", "{l}");
    let outcome = l["outcome"].as_str().unwrap_or_default();
    assert!(
        outcome.starts_with("failed: ") && outcome.contains("session cut"),
        "{l}"
    );
    assert!(l["bytes_in"].as_u64().is_some_and(|b| b > 0), "{l}");
    // Stdout keeps its event objects: the cut session is a session_failed.
    assert!(out.stdout.contains("\"session_failed\""), "{}", out.stdout);
}

/// A server shutdown that cuts a transfer reaches the client as what it
/// is: "the server is shutting down; run again to resume", exit 9 — not a
/// `Broken pipe`. Running the send again against the server back up
/// completes it. The sender is slowed by `--bwlimit` so that the cut (no
/// grace period) meets it mid-file; the wait for its temporary file is a
/// hang guard, not a timing assertion.
#[test]
fn a_shutdown_mid_transfer_tells_the_client_to_run_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let dest = home.join("dest");
    let data = random_bytes(9, 2 << 20);
    let src = home.join("big.bin");
    fs::write(&src, &data).expect("write source");
    let serve = || {
        let mut cmd = pfs(home);
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--shutdown-grace",
            "0",
            "--dest",
        ])
        .arg(&dest);
        Server::spawn(cmd)
    };
    let server = serve();
    let mut sender = send_file(home, &src, &server.addr);
    sender
        .args(["--bwlimit", "256K"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = sender.spawn().expect("spawn pfs send");
    let deadline = Instant::now() + HANG_GUARD;
    while temps_in(&dest).is_empty() {
        assert!(Instant::now() < deadline, "no temporary file appeared");
        thread::sleep(Duration::from_millis(20));
    }
    signal(&server, rustix::process::Signal::TERM);
    server.finish().expect_code(0, "pfs serve after SIGTERM");
    let out = common::collect(child, "pfs send cut by the shutdown");
    out.expect_code(9, "pfs send whose server shut down");
    assert!(
        out.stderr
            .contains("the server is shutting down; run again to resume"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("Broken pipe"), "{}", out.stderr);

    // Run again: it completes.
    let server = serve();
    run(send_file(home, &src, &server.addr)).expect_code(0, "pfs send again");
    assert_eq!(fs::read(dest.join("big.bin")).expect("landed"), data);
}
