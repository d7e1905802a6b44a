//! Exit codes of `pfs send` that mean something (src/exit.rs), end to end:
//! 7 when the peer breaks the protocol, 5 when nobody listens. The peer
//! that breaks the protocol is a raw TCP listener in this test, answering
//! HELLO with a frame the sender does not allow there.
//!
//! Every child process is bounded by [`common::CMD_TIMEOUT`]; the fake
//! peer's socket reads by [`PEER_TIMEOUT`].

mod common;
use common::run;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use pfs_wire::{put_frame, ErrorCode, ErrorFrame, Frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

/// Longest the fake peer waits for the sender's bytes.
const PEER_TIMEOUT: Duration = Duration::from_secs(60);

fn pfs(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(args);
    cmd
}

/// Reads one whole frame; its header and body.
fn read_frame(s: &mut TcpStream) -> std::io::Result<(FrameHeader, Vec<u8>)> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut head)?;
    let h = FrameHeader::parse(&head)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e:?}")))?;
    let mut body = vec![0u8; h.length as usize];
    s.read_exact(&mut body)?;
    Ok((h, body))
}

/// What the fake peer saw: the first frame's type, and every byte the
/// sender wrote after it until it closed.
struct PeerLog {
    first: FrameType,
    after: Vec<u8>,
}

/// A one-connection listener on 127.0.0.1:0 that reads the first frame,
/// answers with `reply`, then reads until the sender closes.
fn fake_peer(reply: Vec<u8>) -> (String, mpsc::Receiver<std::io::Result<PeerLog>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local addr").to_string();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let session = || -> std::io::Result<PeerLog> {
            let (mut s, _) = listener.accept()?;
            s.set_read_timeout(Some(PEER_TIMEOUT))?;
            let (h, _) = read_frame(&mut s)?;
            s.write_all(&reply)?;
            let mut after = Vec::new();
            s.read_to_end(&mut after)?;
            Ok(PeerLog {
                first: h.frame_type,
                after,
            })
        };
        let _ = tx.send(session());
    });
    (addr, rx)
}

#[test]
fn a_peer_that_answers_hello_with_a_gram_exits_7() {
    // A well-formed frame of the wrong type: GRAM where HELLO_ACK is due
    // (gram/sender.rs: Violation::UnexpectedFrame in AwaitAck).
    let mut reply = Vec::new();
    put_frame(&mut reply, FrameType::Gram, 0, &[]);
    let (addr, peer) = fake_peer(reply);
    let out = run(pfs(&[
        "send", "--to", &addr, "--size", "1M", "--grams", "1", "--mode", "offset",
    ]));
    out.expect_code(7, "a GRAM instead of HELLO_ACK");
    assert!(
        out.stderr.contains("expected HELLO_ACK, got GRAM"),
        "stderr does not name the problem:\n{}",
        out.stderr
    );
    assert!(out.stderr.contains("PROTOCOL"), "stderr:\n{}", out.stderr);

    // The sender wrote nothing after HELLO but one ERROR frame telling the
    // peer why it ends the session.
    let log = peer
        .recv_timeout(PEER_TIMEOUT)
        .expect("the fake peer finished")
        .expect("the fake peer's session");
    assert_eq!(log.first, FrameType::Hello);
    assert_error_frame(&log.after, ErrorCode::Protocol, "expected HELLO_ACK");
}

/// `after` is exactly one ERROR frame with `code` whose message contains
/// `needle`.
fn assert_error_frame(after: &[u8], code: ErrorCode, needle: &str) {
    let (f, used) = Frame::parse(after).expect("the sender's ERROR frame");
    assert_eq!(f.header.frame_type, FrameType::Error);
    assert_eq!(used, after.len(), "nothing after the ERROR frame");
    let e = ErrorFrame::parse(f.body).expect("ERROR body");
    assert_eq!(e.code, code as u16);
    assert!(e.message.contains(needle), "{}", e.message);
}

#[test]
fn a_peer_that_answers_hello_with_garbage_exits_7() {
    // Bytes that are not a frame header at all.
    let (addr, peer) = fake_peer(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec());
    let out = run(pfs(&[
        "send", "--to", &addr, "--size", "1M", "--grams", "1", "--mode", "offset",
    ]));
    out.expect_code(7, "garbage instead of HELLO_ACK");
    assert!(
        out.stderr.contains("malformed frame header from peer"),
        "stderr does not name the problem:\n{}",
        out.stderr
    );
    let log = peer
        .recv_timeout(PEER_TIMEOUT)
        .expect("the fake peer finished")
        .expect("the fake peer's session");
    assert_eq!(log.first, FrameType::Hello);
    assert_error_frame(&log.after, ErrorCode::BadFrame, "frame header");
}

#[test]
fn an_unreachable_peer_fails_before_the_blob_is_set_up() {
    // Port 1 on loopback: nothing listens there (tcpmux is not a service
    // anyone runs), so connect is refused at once.
    let out = run(pfs(&["send", "--to", "127.0.0.1:1", "--size", "64M"]));
    out.expect_code(5, "send to 127.0.0.1:1");
    let err = &out.stderr;
    assert!(err.contains("cannot connect to 127.0.0.1:1"), "stderr:\n{err}");
    assert_eq!(
        err.matches("Connection refused").count(),
        1,
        "the OS error once:\n{err}"
    );
    // Connect comes first: no blob was mapped, filled or described.
    assert!(!err.contains("blob (anonymous)"), "a blob was set up:\n{err}");
    assert!(!err.contains("fill"), "a blob was filled:\n{err}");
    assert!(out.stdout.is_empty(), "stdout:\n{}", out.stdout);
}

/// Address mistakes are usage errors (2) that show `HOST:PORT[:DIR]`, before
/// anything is read or connected: no port, rsync's `host:dir`, an absolute
/// remote directory (refused, not re-rooted beneath `--dest`). Files sends,
/// blob sends and mounts check alike.
#[test]
fn address_mistakes_are_usage_errors_naming_the_form() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"x").expect("write");
    let file = file.to_str().expect("utf-8 path");
    for (to, needle) in [
        ("10.0.0.1", "has no port"),
        ("backup.example:photos", "is not a port"),
        ("127.0.0.1:7878:/etc", "is absolute"),
        ("::1:7878", "has no host"),
    ] {
        let out = run(pfs(&["send", file, "--to", to, "--progress", "never"]));
        out.expect_code(2, &format!("pfs send --to {to}"));
        assert!(
            out.stderr.contains("--to") && out.stderr.contains(needle) && out.stderr.contains("HOST:PORT"),
            "--to {to}: {}",
            out.stderr
        );
    }
    // A blob session takes HOST:PORT, and no remote directory.
    for to in ["10.0.0.1", "127.0.0.1:7878:dir"] {
        let out = run(pfs(&["send", "--to", to, "--bytes", "1M"]));
        out.expect_code(2, &format!("pfs send (blob) --to {to}"));
        assert!(out.stderr.contains("HOST:PORT"), "{}", out.stderr);
    }
    // `pfs mount` checks its SOURCE the same way, before anything starts.
    let out = run(pfs(&["mount", "10.0.0.1", dir.path().to_str().expect("utf-8")]));
    out.expect_code(2, "pfs mount 10.0.0.1 DIR");
    assert!(
        out.stderr.contains("SOURCE") && out.stderr.contains("HOST:PORT"),
        "{}",
        out.stderr
    );
}
