//! A plain TCP listener made `same_user_only` admits its own user and
//! root and refuses every other local user, as Unix sockets do. Needs root
//! (to connect as another user): ignored unless asked for (`--ignored`; CI
//! runs them as root), failing, saying so, when not root.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use pfs_transport::{Listener, TcpConfig, TcpListener, TcpTransport, Transport};

/// The uid a refused client runs as (`nobody` on Debian).
const OTHER_UID: u32 = 65534;

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// Connects to `port` as `uid` with bash's /dev/tcp, writes a line, and
/// holds the connection until the server closes it (or 10 s pass).
fn connect_as(uid: u32, port: u16) -> std::process::Child {
    Command::new("bash")
        .args([
            "-c",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port}; echo hello >&3; timeout 10 cat <&3 >/dev/null"),
        ])
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn bash")
}

#[test]
#[ignore = "needs root"]
fn another_users_client_is_refused_and_ours_is_served() {
    assert!(is_root(), "needs root: to connect as another user");
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())
        .unwrap()
        .same_user_only();
    let port = listener.socket_addr().unwrap().port();

    let mut other = connect_as(OTHER_UID, port);
    let refused = listener
        .accept()
        .expect_err("another user's client must be refused");
    assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied, "{refused}");
    assert!(
        refused.to_string().contains(&format!("uid {OTHER_UID}")),
        "{refused}"
    );
    // The refused connection is closed: its client ends.
    assert!(other.wait().is_ok());

    // Our own user (root here) is served on the same listener.
    let client = std::thread::spawn(move || {
        let mut c = TcpTransport::connect(&format!("127.0.0.1:{port}"), &TcpConfig::default()).unwrap();
        c.write_all(b"ours").unwrap();
    });
    let mut served = listener.accept().expect("our own user is served");
    let mut got = [0u8; 4];
    served.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ours");
    client.join().unwrap();
}

#[test]
#[ignore = "needs root"]
fn without_the_check_any_user_is_served() {
    assert!(is_root(), "needs root: to connect as another user");
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let port = listener.socket_addr().unwrap().port();
    let mut other = connect_as(OTHER_UID, port);
    let mut served = listener.accept().expect("no uid check: served");
    let mut got = [0u8; 6];
    served.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello\n");
    drop(served);
    assert!(other.wait().is_ok());
}
