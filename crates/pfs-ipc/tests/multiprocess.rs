//! Multi-process tests: the test binary re-executes itself as the peer
//! process (`child_entry`, selected by `PFS_IPC_CHILD`), so client and
//! server are separate processes with separate address spaces, as in use.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pfs_ipc::{
    layout, Allow, Endpoint, IpcError, IpcListener, MsgKind, RendezvousConfig, WaitConfig, WaitStrategy,
};

const CHILD_ENV: &str = "PFS_IPC_CHILD";

/// Deterministic message sizes and contents, shared by both processes.
struct Script(u64);

impl Script {
    fn next_len(&mut self, max: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % (max as u64 + 1)) as usize
    }
}

fn fill(seq: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    if buf.len() >= 8 {
        buf[..8].copy_from_slice(&seq.to_le_bytes());
    }
}

fn check(seq: u64, got: &[u8], len: usize) {
    assert_eq!(got.len(), len, "message {seq}: length");
    let mut want = vec![0u8; len];
    fill(seq, &mut want);
    assert!(got == want.as_slice(), "message {seq}: content differs");
}

fn spawn_child(role: &str, path: &Path, extra: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .env("PFS_IPC_PATH", path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads child stdout lines until one starts with `prefix`.
fn wait_line(child: &mut Child, prefix: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(out);
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "child ended before {prefix:?}"
        );
        // libtest prints "test child_entry ... " without a newline first.
        if let Some(at) = line.find(prefix) {
            return line[at..].trim().to_string();
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn strategy() -> WaitStrategy {
    std::env::var("PFS_IPC_WAIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WaitStrategy::SpinFutex)
}

/// Entry point of every child process; a no-op in the normal test run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let path = PathBuf::from(std::env::var("PFS_IPC_PATH").unwrap());
    let code = match role.as_str() {
        "stream" => child_stream(&path),
        "slow-consumer" => child_slow_consumer(&path),
        "flood" => child_flood(&path),
        "corrupt" => child_corrupt(&path),
        "server" => child_server(&path),
        other => panic!("unknown child role {other}"),
    };
    std::process::exit(code);
}

fn connect(path: &Path) -> Endpoint {
    Endpoint::connect(path, WaitConfig::with(strategy())).unwrap()
}

/// Sends N messages of random sizes, mixing send and loan.
fn child_stream(path: &Path) -> i32 {
    let mut ep = connect(path);
    let n = env_u64("PFS_IPC_N", 1000);
    let max = env_u64("PFS_IPC_MAX", 256) as usize;
    let mut script = Script(0x9e37_79b9_7f4a_7c15);
    let mut buf = vec![0u8; max];
    for seq in 0..n {
        let len = script.next_len(max);
        if seq % 3 == 0 {
            let mut loan = ep.loan(len).unwrap();
            fill(seq, &mut loan);
            loan.commit();
        } else {
            fill(seq, &mut buf[..len]);
            ep.send(&buf[..len]).unwrap();
        }
    }
    // Wait for the reader's acknowledgement so our rings outlive its reads.
    let ack = ep.recv().unwrap();
    assert_eq!(ack.bytes(), b"done");
    0
}

/// Fills the ring with try_send, counting would-blocks, then finishes.
fn child_slow_consumer(path: &Path) -> i32 {
    let mut ep = connect(path);
    let n = env_u64("PFS_IPC_N", 1000);
    let mut would_block = 0u64;
    let mut buf = vec![0u8; 1000];
    for seq in 0..n {
        fill(seq, &mut buf);
        loop {
            match ep.try_send(&buf) {
                Ok(()) => break,
                Err(IpcError::WouldBlock) => {
                    would_block += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) => panic!("try_send: {e}"),
            }
        }
    }
    println!("WOULDBLOCK {would_block}");
    std::io::stdout().flush().unwrap();
    let ack = ep.recv().unwrap();
    assert_eq!(ack.bytes(), b"done");
    0
}

/// Sends forever until killed.
fn child_flood(path: &Path) -> i32 {
    let mut ep = connect(path);
    println!("CONNECTED");
    std::io::stdout().flush().unwrap();
    let mut seq = 0u64;
    loop {
        let _ = ep.send(&seq.to_le_bytes());
        seq += 1;
    }
}

/// Connects, then corrupts the rings per `PFS_IPC_CORRUPT`, then waits on stdin.
fn child_corrupt(path: &Path) -> i32 {
    let mut ep = connect(path);
    let (region, cap) = ep.debug_region();
    let c2s_data = layout::ring_offset(layout::CLIENT_TO_SERVER, cap) + layout::CONTROL_BYTES;
    let s2c_tail = layout::ring_offset(layout::SERVER_TO_CLIENT, cap) + layout::TAIL;
    let len = region.len();
    match std::env::var("PFS_IPC_CORRUPT").unwrap().as_str() {
        "length" => {
            // A real message whose header we then rewrite: valid tag, absurd length.
            ep.send(b"hello").unwrap();
            let meta = (1u64 << 32) | u64::from(u32::MAX);
            ep.debug_write_region(c2s_data + 8, &meta.to_le_bytes());
        }
        "kind" => {
            ep.send(b"hello").unwrap();
            let meta = (77u64 << 32) | 5;
            ep.debug_write_region(c2s_data + 8, &meta.to_le_bytes());
        }
        "reference" => {
            ep.send_ref(0, 16).unwrap();
            // Rewrite the reference's offset to point far outside the blob.
            ep.debug_write_region(c2s_data + 16, &(u64::MAX - 8).to_le_bytes());
            ep.send(b"after").unwrap();
        }
        "tail" => {
            // Our consumer index in the server's sending ring: impossible value.
            ep.debug_write_region(s2c_tail, &u64::MAX.to_le_bytes());
        }
        "everything" => {
            let mut script = Script(42);
            let junk: Vec<u8> = (0..len).map(|_| script.next_len(255) as u8).collect();
            ep.debug_write_region(0, &junk);
        }
        other => panic!("unknown corruption {other}"),
    }
    println!("CORRUPTED");
    std::io::stdout().flush().unwrap();
    // Stay alive (and connected) until the parent closes our stdin.
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    0
}

/// An echo server (for client-side death detection).
fn child_server(path: &Path) -> i32 {
    let opts = RendezvousConfig {
        wait: WaitConfig::with(strategy()),
        ..RendezvousConfig::default()
    };
    let listener = IpcListener::bind(path, opts).unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    loop {
        if let Ok(mut ep) = listener.accept() {
            while ep.serve_one(|req, tx| tx.send(req)).is_ok() {}
        }
    }
}

fn listener(dir: &Path, ring: usize, blob: usize) -> IpcListener {
    let opts = RendezvousConfig {
        ring_bytes: ring,
        blob_bytes: blob,
        ..RendezvousConfig::default()
    };
    IpcListener::bind(&dir.join("ipc.sock"), opts).unwrap()
}

fn stream_case(wait: WaitStrategy, n: u64, max: usize, ring: usize) {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), ring, 0);
    let env = [
        ("PFS_IPC_N", n.to_string()),
        ("PFS_IPC_MAX", max.to_string()),
        ("PFS_IPC_WAIT", wait.as_str().to_string()),
    ];
    let mut child = spawn_child("stream", l.path(), &env);
    let mut ep = l.accept().unwrap();
    let mut script = Script(0x9e37_79b9_7f4a_7c15);
    for seq in 0..n {
        let len = script.next_len(max);
        let msg = ep.recv().unwrap();
        assert_eq!(msg.kind(), MsgKind::Inline);
        check(seq, msg.bytes(), len);
    }
    // Exactly once: nothing more arrives.
    assert!(matches!(ep.try_recv(), Ok(None)));
    ep.send(b"done").unwrap();
    assert!(child.wait().unwrap().success());
    // The client closed: end of stream, not a hang.
    assert!(matches!(
        ep.recv_timeout(Duration::from_secs(10)),
        Err(IpcError::Closed)
    ));
}

/// 10^6 messages of random sizes through a small ring: in order, exactly
/// once, intact, across thousands of wrap-arounds.
#[test]
fn million_messages_in_order_exactly_once() {
    stream_case(WaitStrategy::SpinFutex, 1_000_000, 256, 64 << 10);
}

#[test]
fn every_wait_strategy_delivers() {
    for wait in [WaitStrategy::SpinYield, WaitStrategy::Spin] {
        stream_case(wait, 20_000, 2000, 16 << 10);
    }
}

/// A consumer slower than the producer: the producer sees would-block,
/// nothing is overwritten or lost.
#[test]
fn full_ring_with_slow_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), 8 << 10, 0);
    let n = 300u64;
    let mut child = spawn_child("slow-consumer", l.path(), &[("PFS_IPC_N", n.to_string())]);
    let mut ep = l.accept().unwrap();
    for seq in 0..n {
        if seq % 10 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        let msg = ep.recv().unwrap();
        check(seq, msg.bytes(), 1000);
    }
    let line = wait_line(&mut child, "WOULDBLOCK");
    let blocked: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(blocked > 0, "the producer never found the ring full");
    ep.send(b"done").unwrap();
    assert!(child.wait().unwrap().success());
}

fn corrupt_case(kind: &str, expect: impl Fn(&Result<Vec<u8>, IpcError>) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), 16 << 10, 1 << 20);
    let mut child = spawn_child("corrupt", l.path(), &[("PFS_IPC_CORRUPT", kind.to_string())]);
    let mut ep = l.accept().unwrap();
    wait_line(&mut child, "CORRUPTED");
    let got = ep
        .recv_timeout(Duration::from_millis(300))
        .map(|m| m.bytes().to_vec());
    assert!(expect(&got), "{kind}: unexpected {got:?}");
    if kind == "tail" {
        // The corruption is in what we read as a producer: fill the ring.
        let err = (0..10_000)
            .map(|_| ep.try_send(&[0u8; 1000]))
            .find(|r| !matches!(r, Ok(()) | Err(IpcError::WouldBlock)))
            .expect("a full ring must re-read the corrupt tail");
        assert!(matches!(err, Err(IpcError::Protocol(_))), "{err:?}");
    }
    if kind == "reference" {
        // The bad reference was skipped; the next message still arrives.
        assert_eq!(ep.recv().unwrap().bytes(), b"after");
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // This process is alive and the listener serves a well-behaved client.
    let mut good = spawn_child("stream", l.path(), &[("PFS_IPC_N", "100".into())]);
    let mut ep = l.accept().unwrap();
    let mut script = Script(0x9e37_79b9_7f4a_7c15);
    for seq in 0..100 {
        let len = script.next_len(256);
        check(seq, ep.recv().unwrap().bytes(), len);
    }
    ep.send(b"done").unwrap();
    assert!(good.wait().unwrap().success());
}

#[test]
fn garbage_length_is_a_protocol_error() {
    corrupt_case("length", |r| matches!(r, Err(IpcError::Protocol(_))));
}

#[test]
fn garbage_kind_is_a_protocol_error() {
    corrupt_case("kind", |r| matches!(r, Err(IpcError::Protocol(_))));
}

#[test]
fn out_of_blob_reference_is_skipped() {
    corrupt_case("reference", |r| matches!(r, Err(IpcError::BadReference { .. })));
}

#[test]
fn garbage_consumer_index_is_a_protocol_error() {
    corrupt_case("tail", |r| matches!(r, Err(IpcError::Timeout(_))));
}

#[test]
fn random_garbage_over_the_whole_region() {
    // Random bytes match no tag: the receiver just sees nothing (bounded
    // wait), and a send eventually reads the garbage tail and errors.
    corrupt_case("everything", |r| {
        matches!(
            r,
            Err(IpcError::Timeout(_) | IpcError::Protocol(_) | IpcError::Closed)
        )
    });
}

/// Client killed with SIGKILL mid-stream: the server's receive loop ends
/// with an error within the liveness bound; a new client works afterwards.
#[test]
fn sigkill_of_the_client_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), 64 << 10, 0);
    for round in 0..2 {
        let mut child = spawn_child("flood", l.path(), &[]);
        let mut ep = l.accept().unwrap();
        wait_line(&mut child, "CONNECTED");
        for _ in 0..1000 {
            ep.recv().unwrap();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let err = loop {
            match ep.recv() {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err, IpcError::PeerDied { .. } | IpcError::PeerClosed),
            "round {round}: {err}"
        );
        assert!(!ep.peer_alive());
    }
}

/// Server killed: a client blocked in `call` gets an error, not a hang.
#[test]
fn sigkill_of_the_server_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("srv.sock");
    let mut server = spawn_child("server", &path, &[]);
    wait_line(&mut server, "READY");
    let mut ep = connect(&path);
    assert_eq!(ep.call(b"ping").unwrap().bytes(), b"ping");
    server.kill().unwrap();
    server.wait().unwrap();
    let err = ep.call(b"ping").map(|m| m.bytes().to_vec()).unwrap_err();
    assert!(
        matches!(err, IpcError::PeerDied { .. } | IpcError::PeerClosed),
        "{err}"
    );
    // A restarted server at the same path (stale socket replaced) serves again.
    let mut server = spawn_child("server", &path, &[]);
    wait_line(&mut server, "READY");
    let mut ep = connect(&path);
    assert_eq!(ep.call(b"again").unwrap().bytes(), b"again");
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn blob_references_are_read_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), 16 << 10, 4 << 20);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    l.write_blob(1 << 20, &pattern).unwrap();
    let path = l.path().to_path_buf();
    let server = std::thread::spawn(move || {
        let mut ep = l.accept().unwrap();
        let msg = ep.recv().unwrap();
        assert_eq!(
            msg.kind(),
            MsgKind::Ref {
                offset: 1 << 20,
                len: 4096
            }
        );
        let sum: u64 = msg.bytes().iter().map(|&b| u64::from(b)).sum();
        drop(msg);
        ep.send(&sum.to_le_bytes()).unwrap();
    });
    let mut ep = connect(&path);
    assert_eq!(&ep.blob()[1 << 20..(1 << 20) + 4096], pattern.as_slice());
    ep.send_ref(1 << 20, 4096).unwrap();
    let want: u64 = pattern.iter().map(|&b| u64::from(b)).sum();
    assert_eq!(ep.recv().unwrap().bytes(), want.to_le_bytes());
    assert!(matches!(ep.send_ref(4 << 20, 1), Err(IpcError::OutOfBlob { .. })));
    server.join().unwrap();
}

#[test]
fn socket_is_private_and_credentials_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("priv.sock");
    let opts = RendezvousConfig {
        allow: Allow::Uids(vec![4_000_000]),
        ..RendezvousConfig::default()
    };
    let l = IpcListener::bind(&path, opts).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let server = std::thread::spawn(move || l.accept().map(|_| ()));
    let err = Endpoint::connect(&path, WaitConfig::default()).unwrap_err();
    assert!(
        matches!(err, IpcError::RefusedByServer { ref reason } if reason.contains("not allowed")),
        "{err}"
    );
    assert!(matches!(server.join().unwrap(), Err(IpcError::Refused(_))));
    // A second server on a live path is refused; a non-socket path is never removed.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"keep").unwrap();
    assert!(IpcListener::bind(&file, RendezvousConfig::default()).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

#[test]
fn messages_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let l = listener(dir.path(), 4096, 0);
    let path = l.path().to_path_buf();
    let server = std::thread::spawn(move || l.accept().unwrap());
    let mut ep = connect(&path);
    let _server_ep = server.join().unwrap();
    let max = ep.max_message();
    assert!(matches!(
        ep.try_send(&vec![0u8; max + 1]),
        Err(IpcError::TooLarge { .. })
    ));
    assert!(ep.try_send(&vec![0u8; max]).is_ok());
}
