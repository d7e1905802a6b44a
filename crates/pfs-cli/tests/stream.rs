//! `pfs pub` and `pfs sub` (docs/wire.md §15) run as a user would: lines
//! from stdin printed by the subscriber, records counted, `--write-at`
//! replicating into a named blob, a `stream=ref` key refused its writes
//! with the blob unchanged, and a garbage connection refused while the
//! next publisher is served.

mod common;
use common::{collect, drain, run, wait_bounded, ChildGuard, Out, Server, CMD_TIMEOUT, LISTEN_TIMEOUT};

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Both sides' blob: small, the default seed.
const SIZE: &str = "1M";

fn pfs(args: &[&str], dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(args)
        .env("PFS_BLOB_DIR", dir)
        .env("PFS_META_DIR", dir)
        // No default identity or known_hosts from the machine.
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"));
    cmd
}

/// A `pfs sub` (on a free loopback port unless `extra` says `--listen`),
/// in JSON (listening line and reports on stdout).
fn sub_json(extra: &[&str], dir: &Path) -> Server {
    let mut args = vec!["sub", "--size", SIZE, "--json"];
    if !extra.contains(&"--listen") {
        args.extend(["--listen", "127.0.0.1:0"]);
    }
    args.extend_from_slice(extra);
    Server::spawn(pfs(&args, dir))
}

/// `pfs pub --to addr` fed `input` on stdin.
fn publish(addr: &str, input: &[u8], extra: &[&str], dir: &Path) -> Out {
    let mut args = vec!["pub", "--to", addr, "--size", SIZE];
    args.extend_from_slice(extra);
    let mut cmd = pfs(&args, dir);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn pfs pub");
    let mut stdin = child.stdin.take().expect("stdin pipe");
    stdin.write_all(input).expect("write pfs pub's stdin");
    drop(stdin);
    collect(child, "pfs pub")
}

/// The JSON events a finished `pfs sub --json` printed, by name.
fn events(out: &Out, name: &str) -> Vec<serde_json::Value> {
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == name)
        .collect()
}

fn blob_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("pfs-{name}.blob"))
}

fn read_at(path: &Path, offset: usize, len: usize) -> Vec<u8> {
    let all = std::fs::read(path).expect("read the blob file");
    all[offset..offset + len].to_vec()
}

#[test]
fn lines_from_stdin_are_printed_by_the_subscriber() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    // With --print, stdout carries only the messages: the listening line
    // is on stderr.
    let mut cmd = pfs(
        &[
            "sub",
            "--listen",
            "127.0.0.1:0",
            "--size",
            SIZE,
            "--print",
            "--once",
        ],
        dir,
    );
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn pfs sub");
    let stdout = drain(child.stdout.take().expect("stdout pipe"));
    let (tx, stderr_lines) = mpsc::channel();
    let stderr = child.stderr.take().expect("stderr pipe");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut guard = ChildGuard(Some(child));
    let mut seen = Vec::new();
    let addr = loop {
        let line = stderr_lines
            .recv_timeout(LISTEN_TIMEOUT)
            .unwrap_or_else(|e| panic!("no listening line from pfs sub ({e}): {seen:?}"));
        if let Some(a) = line.strip_prefix("pfs sub: listening on ") {
            break a.split(' ').next().expect("address").to_string();
        }
        seen.push(line);
    };

    let out = publish(&addr, b"a\nb\nc\n", &[], dir);
    out.expect_code(0, "pfs pub");
    assert!(
        out.stdout
            .contains("3 record(s) as message entries in 1 gram(s) over TCP, applied 1; integrity OK"),
        "{}",
        out.stdout
    );

    let mut child = guard.0.take().expect("pfs sub");
    let status = wait_bounded(&mut child, CMD_TIMEOUT).expect("pfs sub --once exits");
    let printed = stdout.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
    let rest: Vec<String> = stderr_lines.try_iter().collect();
    assert_eq!(status.code(), Some(0), "pfs sub: {rest:?}");
    assert_eq!(printed, "a\nb\nc\n", "stderr: {rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("3 entries") && l.ends_with("integrity OK")),
        "{rest:?}"
    );
}

#[test]
fn count_json_counts_records_and_bytes_on_both_sides() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub = sub_json(&["--count", "--once"], dir);
    // Two records a gram: 2 grams for 3 records.
    let out = publish(&sub.addr, b"a\nbb\nccc\n", &["--batch", "2", "--json"], dir);
    out.expect_code(0, "pfs pub --json");
    let v = out.json("pfs pub --json");
    assert_eq!(v["transport"], "TCP", "{v:#}");
    assert_eq!(v["integrity"], "OK", "{v:#}");
    assert_eq!(v["entries_as"], "message", "{v:#}");
    let p = &v["publisher"];
    assert_eq!(p["records"], 3, "{v:#}");
    assert_eq!(p["grams"], 2, "{v:#}");
    assert_eq!(p["applied"], 2, "{v:#}");
    assert_eq!(p["effective_bytes"], 6, "{v:#}");
    let wire = p["wire_bytes"].as_u64().expect("wire_bytes");
    assert_eq!(
        wire,
        p["wire_bytes_sent"].as_u64().unwrap() + p["wire_bytes_received"].as_u64().unwrap(),
        "{v:#}"
    );
    assert!(wire > 6, "{v:#}");
    for rate in ["elapsed_s", "effective_mb_s", "wire_mb_s", "records_per_s"] {
        assert!(p[rate].as_f64().is_some(), "{rate}: {v:#}");
    }

    let done = sub.finish();
    done.expect_code(0, "pfs sub --once");
    let reports = events(&done, "report");
    assert_eq!(reports.len(), 1, "{}", done.stdout);
    let r = &reports[0];
    assert_eq!(r["stats"]["grams"], 2, "{r:#}");
    assert_eq!(r["stats"]["integrity"], "OK", "{r:#}");
    assert_eq!(r["stats"]["transport"], "TCP", "{r:#}");
    let c = &r["count"];
    assert_eq!(
        (c["messages"].as_u64(), c["message_bytes"].as_u64()),
        (Some(3), Some(6)),
        "{r:#}"
    );
    assert_eq!(
        (c["writes"].as_u64(), c["references"].as_u64()),
        (Some(0), Some(0)),
        "{r:#}"
    );
}

#[test]
fn write_at_replicates_records_into_the_named_blob() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub = sub_json(&["--once", "--blob-name", "replica", "--blob-keep"], dir);
    let before = read_at(&blob_file(dir, "replica"), 0, 1 << 20);
    // Fixed-size binary records, the last one short: the file's bytes
    // land unchanged at 64 KiB.
    let record: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(7) ^ 0xa5).collect();
    let input = dir.join("records.bin");
    std::fs::write(&input, &record).expect("write the input");
    let out = run(pfs(
        &[
            "pub",
            "--to",
            &sub.addr,
            "--size",
            SIZE,
            "--input",
            input.to_str().unwrap(),
            "--record-size",
            "16",
            "--write-at",
            "64K",
            "--json",
        ],
        dir,
    ));
    out.expect_code(0, "pfs pub --write-at");
    let v = out.json("pfs pub --write-at");
    assert_eq!(v["entries_as"], "write", "{v:#}");
    assert_eq!(v["publisher"]["records"], 3, "{v:#}");
    let done = sub.finish();
    done.expect_code(0, "pfs sub --once");
    assert_eq!(
        events(&done, "report")[0]["stats"]["written_bytes"],
        40,
        "{}",
        done.stdout
    );

    let after = read_at(&blob_file(dir, "replica"), 0, 1 << 20);
    assert_eq!(&after[64 << 10..(64 << 10) + 40], &record[..]);
    // Nothing else changed.
    assert_eq!(&after[..64 << 10], &before[..64 << 10]);
    assert_eq!(&after[(64 << 10) + 40..], &before[(64 << 10) + 40..]);
    // The blob's record follows its bytes: it verifies.
    run(pfs(&["blob", "verify", "--blob-name", "replica"], dir)).expect_code(0, "pfs blob verify");
}

/// A key pair written by `pfs keygen`; returns the private key's path.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut cmd = pfs(&["keygen", "-f"], dir);
    cmd.arg(&path);
    run(cmd).expect_code(0, "pfs keygen");
    path
}

#[test]
fn a_reference_only_key_is_refused_its_writes_and_the_blob_is_unchanged() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub_key = keygen(dir, "sub");
    let pub_key = keygen(dir, "publisher");
    let line = std::fs::read_to_string(dir.join("publisher.pub")).expect("publisher.pub");
    let keys = dir.join("authorized_keys");
    std::fs::write(&keys, format!("{} stream=ref\n", line.trim())).expect("authorized_keys");

    let sub = sub_json(
        &[
            "--max-sessions",
            "3",
            "--blob-name",
            "guarded",
            "--blob-keep",
            "--count",
            "--authorized-keys",
            keys.to_str().unwrap(),
            "--identity",
            sub_key.to_str().unwrap(),
        ],
        dir,
    );
    let before = read_at(&blob_file(dir, "guarded"), 0, 1 << 20);
    let server_key = dir.join("sub.pub");
    let as_key = [
        "--identity",
        pub_key.to_str().unwrap(),
        "--server-key",
        server_key.to_str().unwrap(),
    ];
    let mut write = as_key.to_vec();
    write.extend(["--write-at", "0"]);
    let out = publish(&sub.addr, b"overwrite\n", &write, dir);
    out.expect_code(4, "pfs pub --write-at with a stream=ref key");
    assert!(
        out.stderr.contains(
            "cannot publish this gram: the subscriber does not let this publisher send write entries"
        ),
        "{}",
        out.stderr
    );
    // The same key may not send messages either; references it may, but
    // pfs pub sends none: its messages are refused the same way.
    let out = publish(&sub.addr, b"hello\n", &as_key, dir);
    out.expect_code(4, "pfs pub (messages) with a stream=ref key");
    assert!(
        out.stderr
            .contains("does not let this publisher send message entries"),
        "{}",
        out.stderr
    );
    // References it may send.
    let mut refs = as_key.to_vec();
    refs.push("--refs");
    publish(&sub.addr, b"0 4K\n", &refs, dir).expect_code(0, "pfs pub --refs with a stream=ref key");
    let done = sub.finish();
    done.expect_code(0, "pfs sub: its last publisher succeeded");
    let failed = events(&done, "session_failed");
    assert_eq!(failed.len(), 2, "{}", done.stdout);
    let reports = events(&done, "report");
    assert_eq!(reports.len(), 1, "{}", done.stdout);
    assert_eq!(reports[0]["stream_rights"], "ref", "{}", done.stdout);
    assert_eq!(reports[0]["count"]["reference_bytes"], 4096, "{}", done.stdout);
    assert_eq!(
        read_at(&blob_file(dir, "guarded"), 0, 1 << 20),
        before,
        "the blob changed"
    );
}

#[test]
fn garbage_is_refused_and_the_next_publisher_is_served() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub = sub_json(&["--max-sessions", "2", "--count"], dir);
    {
        let mut s = std::net::TcpStream::connect(&sub.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        s.write_all(&[0x5a; 96]).expect("write garbage");
        // The subscriber answers (an ERROR frame) and closes.
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
    }
    let out = publish(&sub.addr, b"after\n", &[], dir);
    out.expect_code(0, "pfs pub after the garbage");
    let done = sub.finish();
    done.expect_code(0, "pfs sub: its last session succeeded");
    let failed = events(&done, "session_failed");
    assert_eq!(failed.len(), 1, "{}", done.stdout);
    let error = failed[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("refused peer"), "{error}");
    let reports = events(&done, "report");
    assert_eq!(reports.len(), 1, "{}", done.stdout);
    assert_eq!(reports[0]["count"]["message_bytes"], 5, "{}", done.stdout);
}

#[test]
fn a_kernel_computes_over_the_references_a_publisher_sends() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub = sub_json(
        &["--once", "--kernel", "sum", "--blob-name", "held", "--blob-keep"],
        dir,
    );
    let out = publish(&sub.addr, b"0 4K\n8K 4K\n", &["--refs", "--json"], dir);
    out.expect_code(0, "pfs pub --refs");
    let v = out.json("pfs pub --refs");
    assert_eq!(v["entries_as"], "reference", "{v:#}");
    assert_eq!(v["publisher"]["effective_bytes"], 8192, "{v:#}");
    let done = sub.finish();
    done.expect_code(0, "pfs sub --kernel sum");
    let r = &events(&done, "report")[0];
    assert_eq!(r["exec"]["kernel"], "sum", "{r:#}");
    // The wrapping sum of the little-endian u64 words both ranges hold.
    let blob = std::fs::read(blob_file(dir, "held")).expect("read the blob");
    let want = [0..4096usize, 8192..12288]
        .into_iter()
        .flat_map(|range| {
            blob[range]
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
                .collect::<Vec<_>>()
        })
        .fold(0u64, u64::wrapping_add);
    assert_eq!(r["exec"]["output"]["U64"].as_u64(), Some(want), "{r:#}");
    assert_eq!(
        r["stats"]["wire_bytes"].as_u64().map(|w| w < 8192),
        Some(true),
        "{r:#}"
    );
}

#[test]
fn records_travel_over_a_unix_socket_too() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sock = dir.join("sub.sock");
    let sock = sock.to_str().expect("utf-8 path");
    let sub = sub_json(
        &["--once", "--count", "--transport", "unix", "--listen", sock],
        dir,
    );
    assert_eq!(sub.addr, sock);
    let out = publish(sock, b"one\ntwo\n", &["--transport", "unix", "--json"], dir);
    out.expect_code(0, "pfs pub --transport unix");
    assert_eq!(out.json("pfs pub")["transport"], "UNIX");
    let done = sub.finish();
    done.expect_code(0, "pfs sub --transport unix");
    let r = &events(&done, "report")[0];
    assert_eq!(r["stats"]["transport"], "UNIX", "{r:#}");
    assert_eq!(r["count"]["messages"], 2, "{r:#}");
}

/// Reads one frame from `t`: its type and body.
fn read_frame(t: &mut dyn packetfs::transport::Transport) -> (pfs_wire::FrameType, Vec<u8>) {
    let mut head = [0u8; pfs_wire::FRAME_HEADER_LEN];
    t.read_exact(&mut head).expect("a frame header");
    let h = pfs_wire::FrameHeader::parse(&head).expect("a valid frame header");
    let mut body = vec![0u8; h.length as usize];
    t.read_exact(&mut body).expect("a frame body");
    (h.frame_type, body)
}

#[test]
fn a_write_sent_anyway_by_a_reference_only_key_is_refused_by_the_subscriber() {
    use pfs_wire::stream::{EntryKind, EntryTables, StreamHello};
    use pfs_wire::{put_frame, Encoding, FrameType, IntegrityAlg};

    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let sub_key = keygen(dir, "sub");
    let pub_key = keygen(dir, "hostile");
    let line = std::fs::read_to_string(dir.join("hostile.pub")).expect("hostile.pub");
    let keys = dir.join("authorized_keys");
    std::fs::write(&keys, format!("{} stream=ref\n", line.trim())).expect("authorized_keys");
    let sub = sub_json(
        &[
            "--once",
            "--blob-name",
            "guarded",
            "--blob-keep",
            "--authorized-keys",
            keys.to_str().unwrap(),
            "--identity",
            sub_key.to_str().unwrap(),
        ],
        dir,
    );
    let before = read_at(&blob_file(dir, "guarded"), 0, 1 << 20);

    // A publisher that ignores the rights STREAM_ACCEPT grants: raw frames
    // over a protected connection as the stream=ref key.
    let auth = packetfs::keys::ClientAuthArgs {
        identity: Some(pub_key),
        server_key: Some(dir.join("sub.pub").display().to_string()),
        known_hosts: Some(dir.join("known_hosts")),
        ..Default::default()
    };
    let security = packetfs::keys::client_security(&auth, &sub.addr, true).expect("client security");
    let target = packetfs::gram::Target::Tcp {
        addr: sub.addr.clone(),
        sock_buf: 0,
    };
    let mut t = target
        .connect_as(security.as_ref(), packetfs::keys::Service::Blob)
        .expect("admitted");
    let ours =
        packetfs::blob::open_blob(&packetfs::blob::study_blob(1 << 20, 0x5eed, None), true).expect("blob");
    let view = ours.view();
    let hello = StreamHello {
        blob_len: 1 << 20,
        region_size: view.region_size,
        integrity: IntegrityAlg::None,
        stream_index: 0,
        stream_count: 1,
        keepalive_ms: 1000,
        session_nonce: 7,
        fingerprint: view.fingerprint,
    };
    let mut out = Vec::new();
    put_frame(&mut out, FrameType::StreamHello, 0, &hello.emit());
    t.write_all(&out).expect("STREAM_HELLO");
    let (kind, accept) = read_frame(&mut *t);
    assert_eq!(kind, FrameType::StreamAccept);
    let granted = pfs_wire::stream::StreamAccept::parse(&accept).expect("STREAM_ACCEPT");
    assert_eq!(granted.rights, 0, "stream=ref grants neither writes nor messages");

    let mut tables = EntryTables::default();
    tables.push(EntryKind::Write, 4096, 8).expect("entry");
    let mut body = tables
        .header(0, Encoding::Absolute, IntegrityAlg::None, 0)
        .emit()
        .to_vec();
    body.extend_from_slice(tables.table(Encoding::Absolute));
    body.extend_from_slice(b"OVERRIDE");
    out.clear();
    put_frame(&mut out, FrameType::Sgram, 0, &body);
    t.write_all(&out).expect("SGRAM");
    let (kind, _) = read_frame(&mut *t);
    assert_eq!(kind, FrameType::Error, "the subscriber answers with an ERROR");
    drop(t);

    let done = sub.finish();
    done.expect_code(4, "pfs sub --once: its publisher was refused");
    let failed = events(&done, "session_failed");
    assert_eq!(failed.len(), 1, "{}", done.stdout);
    let error = failed[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("refused peer (AUTH): SGRAM seq 0: write entry without the right to send it"),
        "{error}"
    );
    assert_eq!(
        read_at(&blob_file(dir, "guarded"), 0, 1 << 20),
        before,
        "the blob changed"
    );
}
