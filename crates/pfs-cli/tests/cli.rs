//! End-to-end tests of the `pfs` binary, run as a user would run it.
//!
//! Every child process is bounded: one-shot commands are killed after
//! [`common::CMD_TIMEOUT`], servers exit by themselves (`--once` / `--max-sessions`)
//! and are killed by a drop guard otherwise. Servers always listen on
//! `127.0.0.1:0` and the test learns the port from their first stdout line.
//! Tests that use named blobs point `PFS_BLOB_DIR` / `PFS_META_DIR` of the
//! child (never of the test process) at a private temporary directory.

mod common;
use common::{run, ChildGuard, Out, Server};

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Blob size used throughout.
const SIZE: &str = "16M";
/// Effective bytes of one transfer.
const BYTES: &str = "64M";
const BYTES_N: u64 = 64 << 20;

const LABEL_PAYLOAD: &str = "PFS-With-Payload-TCP";
const LABEL_OFFSET: &str = "Native PFS Offset-only Mode - TCP";
const LABEL_ARITH: &str = "Native PFS Arithmetic Mode - TCP";

// ---------------------------------------------------------------------------
// helpers

/// A private directory for named blobs: under /dev/shm when it exists.
fn blob_tempdir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            return d;
        }
    }
    tempfile::tempdir().expect("create a temporary directory")
}

/// `pfs ARGS…`, with the blob store pointed at `store` when given.
fn pfs(args: &[&str], store: Option<&Path>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(args);
    if let Some(dir) = store {
        cmd.env("PFS_BLOB_DIR", dir).env("PFS_META_DIR", dir);
    }
    cmd
}

impl Server {
    /// Starts `pfs serve --listen 127.0.0.1:0 ARGS…` and waits for its listening line.
    fn start(args: &[&str], store: Option<&Path>) -> Server {
        Self::start_at("127.0.0.1:0", args, store)
    }

    /// Starts `pfs serve --listen LISTEN ARGS…` and waits for its listening line.
    fn start_at(listen: &str, args: &[&str], store: Option<&Path>) -> Server {
        let mut all = vec!["serve", "--listen", listen];
        all.extend_from_slice(args);
        Server::spawn(pfs(&all, store))
    }
}

/// `pfs send --to ADDR --size 16M --bytes 64M --json EXTRA…`.
fn send(addr: &str, extra: &[&str], store: Option<&Path>) -> Out {
    let mut args = vec!["send", "--to", addr, "--size", SIZE, "--bytes", BYTES, "--json"];
    args.extend_from_slice(extra);
    run(pfs(&args, store))
}

/// Asserts a successful send's report and returns its JSON.
fn expect_good_send(out: &Out, what: &str) -> Value {
    out.expect_code(0, what);
    let v = out.json(what);
    assert_eq!(v["receiver"]["integrity"], "OK", "{what}: {v:#}");
    assert_eq!(
        v["receiver"]["effective_bytes"].as_u64(),
        Some(BYTES_N),
        "{what}: {v:#}"
    );
    v
}

fn f64_of(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

// ---------------------------------------------------------------------------
// 1. help, version, usage errors

#[test]
fn help_of_pfs_and_transfer_subcommands_has_examples() {
    for sub in [&[][..], &["send"], &["serve"], &["bench"]] {
        let mut args = sub.to_vec();
        args.push("--help");
        let out = run(pfs(&args, None));
        out.expect_code(0, &format!("pfs {args:?}"));
        assert!(
            out.stdout.contains("Examples"),
            "pfs {args:?} has no Examples section:\n{}",
            out.stdout
        );
        assert!(out.stdout.contains("Usage: pfs"), "pfs {args:?}:\n{}", out.stdout);
    }
    // The top-level help documents the exit codes the other tests rely on.
    // (Help text is wrapped to the terminal width: compare with whitespace collapsed.)
    let top = run(pfs(&["--help"], None));
    let flat = top.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for code in ["3 integrity MISMATCH", "4 refused by peer", "5 transport failure"] {
        assert!(
            flat.contains(code),
            "pfs --help does not document {code:?}:\n{}",
            top.stdout
        );
    }
}

#[test]
fn help_of_blob_subcommand_has_examples() {
    let out = run(pfs(&["blob", "--help"], None));
    out.expect_code(0, "pfs blob --help");
    for sub in ["create", "info", "verify", "rm", "list"] {
        assert!(
            out.stdout.contains(sub),
            "pfs blob --help does not list {sub}:\n{}",
            out.stdout
        );
    }
    assert!(
        out.stdout.contains("Examples"),
        "pfs blob --help has no Examples section:\n{}",
        out.stdout
    );
}

#[test]
fn version_prints_name_and_version() {
    let out = run(pfs(&["--version"], None));
    out.expect_code(0, "pfs --version");
    let line = out.stdout.trim();
    assert!(
        line.starts_with(&format!("pfs {}", env!("CARGO_PKG_VERSION"))),
        "unexpected version line {line:?}"
    );
    // The git revision rides along in parentheses.
    assert!(
        line.contains('(') && line.ends_with(')'),
        "no revision in {line:?}"
    );
}

#[test]
fn version_json_names_the_program_and_its_version() {
    let out = run(pfs(&["--version", "--json"], None));
    out.expect_code(0, "pfs --version --json");
    let v = out.json("pfs --version --json");
    assert_eq!(v["name"], "pfs", "{v}");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"), "{v}");
    // The commit, when the build knew it, is the text version's too.
    if let Some(commit) = v["commit"].as_str() {
        let text = run(pfs(&["-V"], None));
        assert!(text.stdout.contains(&format!("({commit})")), "{}", text.stdout);
    }
    // --json alone is not a version request: a usage error.
    run(pfs(&["--json"], None)).expect_code(2, "pfs --json");
}

#[test]
fn bad_size_is_a_usage_error_naming_the_value() {
    let out = run(pfs(&["send", "--to", "x", "--size", "12Q"], None));
    out.expect_code(2, "pfs send --size 12Q");
    assert!(
        out.stderr.contains("12Q"),
        "stderr does not name the bad value:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("--size"),
        "stderr does not name the option:\n{}",
        out.stderr
    );
    assert!(
        out.stdout.is_empty(),
        "usage error wrote to stdout:\n{}",
        out.stdout
    );
}

// ---------------------------------------------------------------------------
// 2. named blob lifecycle

#[test]
fn blob_lifecycle_create_info_list_verify_corrupt_rm() {
    let store = blob_tempdir();
    let dir = Some(store.path());

    let create = run(pfs(
        &[
            "blob",
            "create",
            "--blob-name",
            "t1",
            "--size",
            SIZE,
            "--seed",
            "42",
            "--json",
        ],
        dir,
    ));
    create.expect_code(0, "blob create");
    let c = create.json("blob create");
    let fp = c["fingerprint"]
        .as_str()
        .expect("create JSON: fingerprint")
        .to_string();
    assert_eq!(fp.len(), 64, "fingerprint should be 32 bytes of hex: {fp}");
    assert!(
        fp.bytes().all(|b| b.is_ascii_hexdigit()),
        "fingerprint not hex: {fp}"
    );
    assert!(
        c["size"].as_u64().expect("create JSON: size") >= 16 << 20,
        "{c:#}"
    );
    assert!(!c["backing"].is_null(), "create JSON has no backing: {c:#}");
    assert_eq!(c["name"], "t1");
    assert_eq!(c["seed"].as_u64(), Some(42));
    let path = PathBuf::from(c["path"].as_str().expect("create JSON: path"));
    assert!(
        path.starts_with(store.path()),
        "blob {} is not in PFS_BLOB_DIR {}",
        path.display(),
        store.path().display()
    );
    assert!(path.is_file(), "blob file {} missing", path.display());

    let info = run(pfs(&["blob", "info", "--blob-name", "t1", "--json"], dir));
    info.expect_code(0, "blob info");
    let i = info.json("blob info");
    assert_eq!(
        i["root_hex"].as_str(),
        Some(fp.as_str()),
        "info disagrees with create: {i:#}"
    );
    assert_eq!(i["size"], c["size"]);
    assert_eq!(i["name"], "t1");

    let list = run(pfs(&["blob", "list"], dir));
    list.expect_code(0, "blob list");
    assert!(
        list.stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some("t1")),
        "blob list does not show t1:\n{}",
        list.stdout
    );

    let verify = run(pfs(&["blob", "verify", "--blob-name", "t1"], dir));
    verify.expect_code(0, "blob verify (intact)");
    assert!(
        verify.stdout.contains("OK"),
        "verify does not say OK:\n{}",
        verify.stdout
    );

    // Flip one byte in the blob file.
    let offset: u64 = 5_000_000;
    {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open blob file");
        let mut b = [0u8; 1];
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.read_exact(&mut b).unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.write_all(&[!b[0]]).unwrap();
        f.sync_all().unwrap();
    }
    let verify = run(pfs(&["blob", "verify", "--blob-name", "t1"], dir));
    verify.expect_code(3, "blob verify (corrupted)");
    assert!(
        verify.stdout.contains("DIFFERS"),
        "verify does not report the difference:\n{}",
        verify.stdout
    );
    let ranges: Vec<(u64, u64)> = verify
        .stdout
        .lines()
        .filter_map(|l| {
            let r = l.trim().strip_prefix("bytes ")?.strip_suffix(" differ")?;
            let (a, b) = r.split_once("..")?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    assert!(
        ranges.iter().any(|&(a, b)| a <= offset && offset < b),
        "no differing range contains offset {offset}: {ranges:?}\n{}",
        verify.stdout
    );
    // The JSON form agrees.
    let vj = run(pfs(&["blob", "verify", "--blob-name", "t1", "--json"], dir));
    vj.expect_code(3, "blob verify --json (corrupted)");
    let vj = vj.json("blob verify --json");
    assert_eq!(vj["ok"], false);
    assert_eq!(vj["stored_root_hex"].as_str(), Some(fp.as_str()));
    assert_ne!(vj["actual_root_hex"].as_str(), Some(fp.as_str()));
    let pairs = vj["differing"].as_array().expect("differing");
    assert!(
        pairs
            .iter()
            .any(|p| p[0].as_u64().unwrap_or(u64::MAX) <= offset && offset < p[1].as_u64().unwrap_or(0)),
        "{vj:#}"
    );

    let rm = run(pfs(&["blob", "rm", "--blob-name", "t1"], dir));
    rm.expect_code(0, "blob rm");
    assert!(
        !path.exists(),
        "blob file {} still exists after rm",
        path.display()
    );

    let info = run(pfs(&["blob", "info", "--blob-name", "t1"], dir));
    info.expect_code(1, "blob info after rm");
    assert!(
        info.stderr.contains("t1"),
        "error does not name the blob:\n{}",
        info.stderr
    );
    assert!(
        info.stderr.contains("no blob named"),
        "unclear error:\n{}",
        info.stderr
    );

    let list = run(pfs(&["blob", "list"], dir));
    list.expect_code(0, "blob list after rm");
    assert!(
        !list
            .stdout
            .lines()
            .any(|l| l.split_whitespace().next() == Some("t1")),
        "{}",
        list.stdout
    );
}

// ---------------------------------------------------------------------------
// 3. every mode × integrity against one server

#[test]
fn send_serve_every_mode_and_integrity() {
    let cases = [
        ("payload", LABEL_PAYLOAD),
        ("offset", LABEL_OFFSET),
        ("arith", LABEL_ARITH),
    ];
    let integrities = ["xxh3", "fnv1a"];
    // Six mode × integrity runs plus one arith/sequential run.
    let sessions = cases.len() * integrities.len() + 1;
    let server = Server::start(
        &["--max-sessions", &sessions.to_string(), "--size", SIZE, "--json"],
        None,
    );

    for (mode, label) in cases {
        for integrity in integrities {
            let what = format!("send --mode {mode} --integrity {integrity}");
            let out = send(&server.addr, &["--mode", mode, "--integrity", integrity], None);
            let v = expect_good_send(&out, &what);
            let r = &v["receiver"];
            assert_eq!(r["label"], label, "{what}: {v:#}");
            assert_eq!(r["mode"], mode, "{what}: {v:#}");
            assert_eq!(r["integrity_alg"], integrity, "{what}: {v:#}");
            assert_eq!(r["mismatched_grams"].as_u64(), Some(0), "{what}: {v:#}");
            assert!(r["wire_bytes"].as_u64().unwrap_or(0) > 0, "{what}: {v:#}");
            let ratio = f64_of(&r["wire_ratio"], "wire_ratio");
            if mode == "payload" {
                assert!(ratio >= 1.0, "{what}: payload wire_ratio {ratio} < 1");
            } else {
                assert!(ratio < 0.01, "{what}: wire_ratio {ratio} is not ≪ 1");
            }
            // The sender's own view agrees with the receiver's.
            assert_eq!(
                v["sender"]["effective_bytes"].as_u64(),
                Some(BYTES_N),
                "{what}: {v:#}"
            );
            assert_eq!(v["sender"]["grams"], r["grams"], "{what}: {v:#}");
            assert_eq!(v["sender"]["descriptors"], r["descriptors"], "{what}: {v:#}");
        }
    }

    let out = send(
        &server.addr,
        &["--mode", "arith", "--pattern", "sequential"],
        None,
    );
    let v = expect_good_send(&out, "send --mode arith --pattern sequential");
    assert_eq!(v["receiver"]["label"], LABEL_ARITH);
    assert_eq!(v["sender"]["pattern"], "sequential");
    let per_desc = f64_of(
        &v["sender"]["table_bytes_per_descriptor"],
        "table_bytes_per_descriptor",
    );
    assert!(
        per_desc <= 4.0,
        "arith/sequential uses {per_desc} table bytes per descriptor (> 4)"
    );

    // The server stops by itself after the last session, having reported each one.
    let done = server.finish();
    done.expect_code(0, "pfs serve --max-sessions");
    let reports: Vec<Value> = done
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "report")
        .collect();
    assert_eq!(reports.len(), sessions, "server stdout:\n{}", done.stdout);
    assert!(
        reports.iter().all(|r| r["stats"]["integrity"] == "OK"),
        "server stdout:\n{}",
        done.stdout
    );
}

/// Same-host transports: every mode over shared-memory rings and over a
/// Unix socket, labelled with the transport that carried it.
#[test]
fn send_serve_same_host_transports_every_mode() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (transport, kind) in [("shm", "SHM"), ("unix", "UNIX")] {
        let sock = dir.path().join(format!("{transport}.sock"));
        let sock = sock.to_str().expect("utf-8 temp path");
        let server = Server::start_at(
            sock,
            &[
                "--transport",
                transport,
                "--max-sessions",
                "3",
                "--size",
                SIZE,
                "--json",
            ],
            None,
        );
        assert_eq!(server.addr, sock);
        for (mode, label) in [
            ("payload", "PFS-With-Payload-"),
            ("offset", "Native PFS Offset-only Mode - "),
            ("arith", "Native PFS Arithmetic Mode - "),
        ] {
            let what = format!("send --transport {transport} --mode {mode}");
            let out = send(sock, &["--transport", transport, "--mode", mode], None);
            let v = expect_good_send(&out, &what);
            assert_eq!(v["receiver"]["label"], format!("{label}{kind}"), "{what}: {v:#}");
            assert_eq!(v["receiver"]["transport"], kind, "{what}: {v:#}");
        }
        let done = server.finish();
        done.expect_code(0, &format!("pfs serve --transport {transport}"));
        // The server removes its socket when it exits.
        assert!(!Path::new(sock).exists(), "{sock} left behind");
    }
}

/// An SHM sender killed mid-transfer: the server reports that session as
/// failed, does not hang, and serves the next sender.
#[test]
fn shm_sender_killed_mid_transfer_server_serves_next() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let sock = dir.path().join("shm.sock");
    let sock = sock.to_str().expect("utf-8 temp path");
    let server = Server::start_at(
        sock,
        &["--transport", "shm", "--max-sessions", "2", "--size", SIZE],
        None,
    );
    let mut long = pfs(
        &[
            "send",
            "--transport",
            "shm",
            "--to",
            sock,
            "--size",
            SIZE,
            "--bytes",
            "1T",
            "--log-interval",
            "0.05",
        ],
        None,
    );
    long.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = ChildGuard(Some(long.spawn().expect("spawn pfs send")));
    let stderr = child
        .0
        .as_mut()
        .and_then(|c| c.stderr.take())
        .expect("stderr pipe");
    // A progress line means the session is under way.
    let mut lines = BufReader::new(stderr).lines();
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.starts_with("send"));
    assert!(started, "the long sender printed no progress line");
    if let Some(mut c) = child.0.take() {
        c.kill().expect("SIGKILL the sender");
        let _ = c.wait();
    }
    let out = send(sock, &["--transport", "shm", "--mode", "offset"], None);
    expect_good_send(&out, "send after a killed sender");
    let done = server.finish();
    done.expect_code(0, "pfs serve --transport shm --max-sessions 2");
    assert!(
        done.stderr.contains("1 session(s) completed, 1 failed"),
        "server stderr:\n{}",
        done.stderr
    );
}

#[test]
fn shm_flags_with_tcp_are_refused() {
    let out = run(pfs(
        &[
            "send",
            "--to",
            "127.0.0.1:1",
            "--shm-wait",
            "spin",
            "--size",
            SIZE,
        ],
        None,
    ));
    assert_ne!(out.status.code(), Some(0));
    assert!(
        out.stderr.contains("only with --transport shm"),
        "stderr:\n{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------
// 4. damaged receiver blob → repaired by default (wire §13), MISMATCH on
//    both sides with --no-repair

/// Creates named blob `name` (SIZE, seed 7) in `dir`, then flips one byte
/// at each of `offsets` in its file: its recorded fingerprint still says
/// seed 7, so a server reuses it and HELLO is accepted, but grams that
/// touch those bytes do not match. Returns the blob file's path.
fn damaged_named_blob(dir: Option<&Path>, name: &str, offsets: &[u64]) -> PathBuf {
    let create = run(pfs(
        &[
            "blob",
            "create",
            "--blob-name",
            name,
            "--size",
            SIZE,
            "--seed",
            "7",
            "--json",
        ],
        dir,
    ));
    create.expect_code(0, "blob create");
    let path = PathBuf::from(create.json("blob create")["path"].as_str().expect("path"));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open blob file");
    for &offset in offsets {
        let mut b = [0u8; 1];
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.read_exact(&mut b).unwrap();
        f.seek(SeekFrom::Start(offset)).unwrap();
        f.write_all(&[b[0] ^ 0x01]).unwrap();
    }
    f.sync_all().unwrap();
    path
}

#[test]
fn corrupted_receiver_blob_is_reported_as_mismatch() {
    let store = blob_tempdir();
    let dir = Some(store.path());
    damaged_named_blob(dir, "m1", &[1_000_000]);

    let server = Server::start(
        &[
            "--once",
            "--no-repair",
            "--blob-name",
            "m1",
            "--size",
            SIZE,
            "--seed",
            "7",
        ],
        dir,
    );
    // The sender holds an intact anonymous blob of the same size and seed.
    let out = run(pfs(
        &[
            "send",
            "--to",
            &server.addr,
            "--size",
            SIZE,
            "--seed",
            "7",
            "--mode",
            "offset",
            "--bytes",
            BYTES,
            "--desc-per-gram",
            "16",
        ],
        dir,
    ));
    out.expect_code(3, "send to a receiver with a damaged blob");
    assert!(out.stderr.contains("MISMATCH"), "sender stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains("gram #"),
        "sender stderr does not name the gram:\n{}",
        out.stderr
    );
    assert!(out.stdout.contains("MISMATCH"), "sender report:\n{}", out.stdout);

    let done = server.finish();
    done.expect_code(3, "pfs serve --once after a mismatching session");
    assert!(
        done.stderr.contains("MISMATCH"),
        "server stderr:\n{}",
        done.stderr
    );
    // The named blob was reused, not recreated.
    assert!(
        done.stderr.contains("reused existing blob"),
        "server stderr:\n{}",
        done.stderr
    );
    // --no-repair left the damage where it was.
    let verify = run(pfs(&["blob", "verify", "--blob-name", "m1"], dir));
    verify.expect_code(3, "blob verify after --no-repair");
}

#[test]
fn corrupted_receiver_blob_is_repaired_and_the_next_send_is_clean() {
    let store = blob_tempdir();
    let dir = Some(store.path());
    damaged_named_blob(dir, "m2", &[1_000_000, 6_000_000, 11_000_000]);
    let server = Server::start(
        &[
            "--max-sessions",
            "2",
            "--json",
            "--blob-name",
            "m2",
            "--size",
            SIZE,
            "--seed",
            "7",
        ],
        dir,
    );
    let send = |what: &str| {
        let out = run(pfs(
            &[
                "send",
                "--to",
                &server.addr,
                "--size",
                SIZE,
                "--seed",
                "7",
                "--mode",
                "offset",
                "--bytes",
                BYTES,
                "--desc-per-gram",
                "16",
                "--json",
            ],
            dir,
        ));
        expect_good_send(&out, what)["receiver"].clone()
    };
    let first = send("send to a damaged receiver");
    let mismatched = first["mismatched_grams"].as_u64().expect("mismatched_grams");
    assert!(mismatched >= 3, "each damaged byte is in some gram: {first:#}");
    assert_eq!(first["repaired_grams"].as_u64(), Some(mismatched), "{first:#}");
    assert_eq!(first["nak_grams"].as_u64(), Some(mismatched), "{first:#}");
    assert!(first["repaired_bytes"].as_u64().unwrap() > 0, "{first:#}");
    assert_eq!(first["repair"], true, "{first:#}");
    assert_eq!(first["sample_interval"].as_u64(), Some(1), "{first:#}");
    assert_eq!(first["checked_grams"], first["grams"], "{first:#}");
    // The repairs reached the named blob's file: the next session finds
    // nothing to repair, and the blob verifies against its record.
    let second = send("second send");
    assert_eq!(second["mismatched_grams"].as_u64(), Some(0), "{second:#}");
    assert_eq!(second["repaired_grams"].as_u64(), Some(0), "{second:#}");
    let done = server.finish();
    done.expect_code(0, "pfs serve --max-sessions 2");
    let reports: Vec<Value> = done
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "report")
        .collect();
    assert_eq!(reports.len(), 2, "server stdout:\n{}", done.stdout);
    assert_eq!(reports[0]["stats"]["repaired_grams"].as_u64(), Some(mismatched));
    let verify = run(pfs(&["blob", "verify", "--blob-name", "m2"], dir));
    verify.expect_code(0, "blob verify after the repairs");
}

/// A receiver from before the corrections plane refuses HELLO's
/// `CORRECTIONS` flag (its `hello_flags` were reserved): `pfs send`
/// connects again without it and runs today's session. The old receiver
/// is played by a proxy that refuses the first connection as such a
/// receiver would and passes the second, flag-free, to a real `pfs serve`.
#[test]
fn a_receiver_from_before_the_corrections_plane_gets_a_plain_session() {
    let server = Server::start(&["--once", "--size", SIZE, "--seed", "4"], None);
    let old = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = old.local_addr().unwrap().to_string();
    let upstream = server.addr.clone();
    let proxy = std::thread::spawn(move || -> Vec<u16> {
        let mut flags_seen = Vec::new();
        for attempt in 0..2 {
            let (mut c, _) = old.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut head = [0u8; 16];
            c.read_exact(&mut head).unwrap();
            let len = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len];
            c.read_exact(&mut body).unwrap();
            let flags = u16::from_le_bytes([body[4], body[5]]);
            flags_seen.push(flags);
            if attempt == 0 {
                // What a version-1 receiver answers to a non-zero reserved field.
                let mut msg = Vec::new();
                pfs_wire::ErrorFrame {
                    code: pfs_wire::ErrorCode::BadFrame as u16,
                    message: "malformed HELLO from peer: reserved field is not zero",
                }
                .emit(&mut msg);
                let mut frame = Vec::new();
                pfs_wire::put_frame(&mut frame, pfs_wire::FrameType::Error, 0, &msg);
                c.write_all(&frame).unwrap();
                continue;
            }
            let mut up = TcpStream::connect(&upstream).unwrap();
            up.write_all(&head).unwrap();
            up.write_all(&body).unwrap();
            let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            let back = std::thread::spawn(move || std::io::copy(&mut up2, &mut c2));
            let _ = std::io::copy(&mut c, &mut up);
            let _ = up.shutdown(std::net::Shutdown::Write);
            let _ = back.join();
        }
        flags_seen
    });
    let out = send(
        &addr,
        &["--seed", "4", "--mode", "offset", "--integrity-sample", "4"],
        None,
    );
    let v = expect_good_send(&out, "send through an old receiver");
    assert!(
        out.stderr.contains("predates the corrections plane"),
        "stderr:\n{}",
        out.stderr
    );
    assert_eq!(proxy.join().unwrap(), [1, 0], "CORRECTIONS, then none");
    // Today's report: no corrections block.
    assert_eq!(v["receiver"]["repaired_grams"], Value::Null, "{v:#}");
    assert_eq!(v["receiver"]["sample_interval"], Value::Null, "{v:#}");
    server.finish().expect_code(0, "pfs serve --once");
}

#[test]
fn integrity_sample_checks_one_gram_in_n() {
    let server = Server::start(&["--max-sessions", "2", "--size", SIZE, "--seed", "3"], None);
    let send = |extra: &[&str], what: &str| {
        let mut args = vec!["--seed", "3", "--mode", "offset", "--desc-per-gram", "16"];
        args.extend_from_slice(extra);
        expect_good_send(&send(&server.addr, &args, None), what)["receiver"].clone()
    };
    let all = send(&[], "every gram");
    let sampled = send(&["--integrity-sample", "16"], "one gram in 16");
    assert_eq!(all["sample_interval"].as_u64(), Some(1), "{all:#}");
    assert_eq!(all["checked_grams"], all["grams"], "{all:#}");
    assert_eq!(all["checked_bytes"], all["effective_bytes"], "{all:#}");
    let grams = sampled["grams"].as_u64().unwrap();
    assert_eq!(sampled["sample_interval"].as_u64(), Some(16), "{sampled:#}");
    assert_eq!(
        sampled["checked_grams"].as_u64(),
        Some(grams.div_ceil(16)),
        "{sampled:#}"
    );
    assert!(
        sampled["checked_bytes"].as_u64().unwrap() < sampled["effective_bytes"].as_u64().unwrap(),
        "{sampled:#}"
    );
    server.finish().expect_code(0, "pfs serve --max-sessions 2");
}

// ---------------------------------------------------------------------------
// 5. refusals, and the server carries on

#[test]
fn refused_senders_exit_4_and_server_keeps_serving() {
    let server = Server::start(&["--max-sessions", "3", "--size", SIZE, "--seed", "1"], None);

    let out = run(pfs(
        &[
            "send",
            "--to",
            &server.addr,
            "--size",
            SIZE,
            "--seed",
            "2",
            "--bytes",
            BYTES,
        ],
        None,
    ));
    out.expect_code(4, "send with a different seed");
    assert!(
        out.stderr.contains("fingerprint differs"),
        "stderr:\n{}",
        out.stderr
    );

    let out = run(pfs(
        &[
            "send",
            "--to",
            &server.addr,
            "--size",
            "32M",
            "--seed",
            "1",
            "--bytes",
            BYTES,
        ],
        None,
    ));
    out.expect_code(4, "send with a different size");
    assert!(
        out.stderr.contains("blob size differs"),
        "stderr:\n{}",
        out.stderr
    );

    let out = send(&server.addr, &["--seed", "1", "--mode", "offset"], None);
    expect_good_send(&out, "good send after two refusals");

    let done = server.finish();
    done.expect_code(0, "pfs serve --max-sessions 3");
    assert!(
        done.stderr.contains("1 session(s) completed, 2 failed"),
        "server stderr:\n{}",
        done.stderr
    );
}

// ---------------------------------------------------------------------------
// 6. a client that does not speak the protocol

#[test]
fn garbage_client_gets_error_frame_and_server_carries_on() {
    let server = Server::start(&["--max-sessions", "2", "--size", SIZE], None);

    let mut s = TcpStream::connect(&server.addr).expect("connect to pfs serve");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"hello world, not a frame!!").expect("write garbage");
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            // A reset after the ERROR frame ends the conversation too.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    assert!(
        reply.starts_with(b"PFSG"),
        "reply does not start with the frame magic: {reply:?}"
    );
    assert!(
        reply.len() >= 16 + 8,
        "reply too short for an ERROR frame: {reply:?}"
    );
    assert_eq!(reply[5], 5, "reply frame type is not ERROR: {reply:?}");
    let body_len = u32::from_le_bytes(reply[8..12].try_into().unwrap()) as usize;
    assert_eq!(
        reply.len(),
        16 + body_len,
        "ERROR frame length disagrees with the bytes received"
    );
    let msg_len = u32::from_le_bytes(reply[20..24].try_into().unwrap()) as usize;
    let msg = String::from_utf8_lossy(&reply[24..24 + msg_len.min(reply.len() - 24)]);
    assert!(
        msg.contains("bad magic"),
        "ERROR frame message does not say what was wrong: {msg:?}"
    );
    drop(s);

    let out = send(&server.addr, &["--mode", "offset"], None);
    expect_good_send(&out, "good send after a garbage client");

    let done = server.finish();
    done.expect_code(0, "pfs serve --max-sessions 2");
    assert!(
        done.stderr.contains("1 session(s) completed, 1 failed"),
        "server stderr:\n{}",
        done.stderr
    );
    assert!(
        done.stderr.contains("bad magic"),
        "server stderr does not log the bad client:\n{}",
        done.stderr
    );
}

// ---------------------------------------------------------------------------
// 7. nobody listening

#[test]
fn send_to_closed_port_exits_5() {
    // Bind then release an ephemeral port so nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let out = run(pfs(
        &["send", "--to", &addr, "--size", SIZE, "--bytes", BYTES],
        None,
    ));
    out.expect_code(5, "send to a closed port");
    assert!(out.stderr.contains("cannot connect"), "stderr:\n{}", out.stderr);
    assert!(
        out.stderr.contains(&addr),
        "stderr does not name the address:\n{}",
        out.stderr
    );
}

// ---------------------------------------------------------------------------
// 8. bench smoke test

#[test]
fn bench_smoke_json_and_reports() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outdir = tmp.path().join("bench-out");
    let out = run(pfs(
        &[
            "bench",
            "--size",
            SIZE,
            "--scale",
            "0.005",
            "--json",
            "--out",
            outdir.to_str().expect("utf-8 path"),
        ],
        None,
    ));
    out.expect_code(0, "pfs bench");
    let v = out.json("pfs bench --json");

    let rev = v["header"]["git_revision"].as_str().expect("header.git_revision");
    assert!(!rev.is_empty());
    assert_eq!(
        v["header"]["blob_bytes"].as_u64(),
        Some(16 << 20),
        "{:#}",
        v["header"]
    );

    let rows = v["rows"].as_array().expect("rows");
    let labels: Vec<&str> = rows.iter().filter_map(|r| r["label"].as_str()).collect();
    for want in [
        LABEL_OFFSET,
        LABEL_ARITH,
        LABEL_PAYLOAD,
        "Conventional (xxh3 loop)",
        "Conventional (iperf3)",
    ] {
        assert!(labels.contains(&want), "no {want:?} row in {labels:?}");
    }
    for r in rows {
        let label = r["label"].as_str().unwrap_or_default();
        let notes = r["notes"].as_str().unwrap_or_default();
        assert!(!notes.starts_with("failed"), "row {label} failed: {notes}");
        if label.starts_with("PFS-") || label.starts_with("Native PFS") {
            assert_eq!(r["integrity"], "OK", "row {label}: {r:#}");
            assert!(
                f64_of(&r["effective_mb"], "effective_mb") > 0.0,
                "row {label}: {r:#}"
            );
            assert!(f64_of(&r["wire_mb"], "wire_mb") > 0.0, "row {label}: {r:#}");
        }
        if label == "Conventional (iperf3)" {
            let iperf_present = Command::new("iperf3")
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !iperf_present {
                assert!(
                    notes.starts_with("skipped: iperf3 not installed"),
                    "iperf3 row: {notes}"
                );
            }
        }
    }

    for f in ["bench.csv", "bench.json", "bench.md"] {
        assert!(
            outdir.join(f).is_file(),
            "{f} not written to {}",
            outdir.display()
        );
    }
    let csv = std::fs::read_to_string(outdir.join("bench.csv")).expect("read bench.csv");
    let header = csv.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("label,purpose,effective_mb,wire_mb,wire_ratio"),
        "bench.csv header: {header}"
    );
    assert_eq!(csv.lines().count(), rows.len() + 1, "bench.csv rows:\n{csv}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(outdir.join("bench.json")).expect("read bench.json"))
            .expect("bench.json is JSON");
    assert_eq!(json["rows"].as_array().map(Vec::len), Some(rows.len()));
    let md = std::fs::read_to_string(outdir.join("bench.md")).expect("read bench.md");
    assert!(md.contains(LABEL_OFFSET), "bench.md:\n{md}");
}
