//! End-to-end tests of protected sessions and the server's admission
//! policy, run as a user would: `pfs keygen` key files, `pfs serve
//! --authorized-keys`, `pfs send --server-key` / `known_hosts`.
//!
//! Every child is bounded (see `common`); servers listen on `127.0.0.1:0`
//! and exit by `--max-sessions`.

mod common;
use common::{run, Out, Server};

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// A key pair written by `pfs keygen`; returns the private key's path.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut cmd = pfs();
    cmd.args(["keygen", "--json", "-f"]).arg(&path);
    run(cmd).expect_code(0, "keygen");
    path
}

fn public_line(private: &Path) -> String {
    fs::read_to_string(pfs_auth::public_path(private))
        .unwrap()
        .trim()
        .to_string()
}

struct Setup {
    tmp: tempfile::TempDir,
    server_id: PathBuf,
    alice: PathBuf,
    bob: PathBuf,
    store: PathBuf,
    dest: PathBuf,
    src: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let server_id = keygen(t, "server");
    let alice = keygen(t, "alice");
    let bob = keygen(t, "bob");
    let src = t.join("src");
    fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(src.join("data.bin"), &data).unwrap();
    fs::write(src.join("note.txt"), b"hello\n").unwrap();
    Setup {
        store: t.join("store"),
        dest: t.join("dest"),
        src,
        server_id,
        alice,
        bob,
        tmp,
    }
}

impl Setup {
    fn authorized(&self, lines: &[String]) -> PathBuf {
        let p = self.tmp.path().join("authorized_keys");
        fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    fn serve(&self, authorized: &Path, sessions: u32) -> Server {
        self.serve_keeping(authorized, sessions, true)
    }

    /// [`Self::serve`], with a content store or (`store` false) one copy.
    fn serve_keeping(&self, authorized: &Path, sessions: u32, store: bool) -> Server {
        let mut cmd = pfs();
        cmd.args(["serve", "--json", "--listen", "127.0.0.1:0", "--dest"])
            .arg(&self.dest);
        if store {
            cmd.arg("--store").arg(&self.store);
        }
        cmd.arg("--identity")
            .arg(&self.server_id)
            .arg("--authorized-keys")
            .arg(authorized)
            .args(["--max-sessions", &sessions.to_string()]);
        Server::spawn(cmd)
    }

    /// `pfs send SRC/… --to ADDR[:DIR]` as `identity`, pinning `server_key`.
    fn send(&self, to: &str, identity: Option<&Path>, server_key: Option<&Path>, extra: &[&str]) -> Out {
        let mut cmd = pfs();
        cmd.arg("send")
            .arg(self.src.join("data.bin"))
            .arg(self.src.join("note.txt"))
            .args(["--to", to, "--json", "--progress", "never", "--cache-dir"])
            .arg(self.tmp.path().join("cache"))
            .args(extra);
        // No stray default identity or known_hosts from the machine.
        cmd.env("XDG_CONFIG_HOME", self.tmp.path().join("config"));
        if let Some(id) = identity {
            cmd.arg("--identity").arg(id);
        }
        if let Some(k) = server_key {
            cmd.arg("--server-key").arg(pfs_auth::public_path(k));
        }
        run(cmd)
    }
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn unknown_keys_and_wrong_servers_are_refused_and_the_server_keeps_serving() {
    let s = setup();
    let ak = s.authorized(&[public_line(&s.alice)]);
    let mut server = s.serve(&ak, 4);
    let addr = server.addr.clone();

    // Bob's key is not listed: one generic refusal, exit 8, nothing written.
    let bob = s.send(&addr, Some(&s.bob), Some(&s.server_id), &[]);
    bob.expect_code(8, "unlisted key");
    assert!(bob.stderr.contains("not authorized"), "{}", bob.stderr);
    // Alice pins the wrong server key (her own): refused before she reveals herself.
    let wrong = s.send(&addr, Some(&s.alice), Some(&s.alice), &[]);
    wrong.expect_code(8, "wrong server key");
    assert!(wrong.stderr.contains("is pinned"), "{}", wrong.stderr);
    // No key at all.
    let plain = s.send(&addr, None, None, &[]);
    plain.expect_code(8, "plain to a keyed server");
    assert!(
        plain.stderr.contains("requires an authenticated session"),
        "{}",
        plain.stderr
    );
    assert!(files_under(&s.dest).is_empty(), "{:?}", files_under(&s.dest));

    // Alice, pinned correctly: served.
    let ok = s.send(&addr, Some(&s.alice), Some(&s.server_id), &[]);
    ok.expect_code(0, "alice");
    assert_eq!(
        fs::read(s.dest.join("data.bin")).unwrap(),
        fs::read(s.src.join("data.bin")).unwrap()
    );
    let denied = server.wait_event("denied");
    assert!(
        denied["reason"].as_str().unwrap().contains("authorized_keys"),
        "{denied}"
    );
    let admitted = server.wait_event("admitted");
    let alice_key = pfs_auth::Identity::load(&s.alice).unwrap().public();
    assert_eq!(admitted["key"], alice_key.fingerprint());
    server.finish();
}

#[test]
fn a_confined_key_cannot_write_outside_its_directory() {
    let s = setup();
    fs::create_dir_all(s.dest.join("b")).unwrap();
    fs::create_dir_all(s.dest.join("a")).unwrap();
    // A symlink inside the confined directory pointing at a sibling.
    symlink("../b", s.dest.join("a/escape")).unwrap();
    let ak = s.authorized(&[format!("{} dir=a", public_line(&s.alice))]);
    let server = s.serve(&ak, 4);
    let addr = server.addr.clone();
    let key = Some(s.server_id.as_path());

    // Lands under dest/a, whatever remote directory is asked for.
    s.send(&format!("{addr}:b"), Some(&s.alice), key, &[])
        .expect_code(0, "into a/b");
    assert!(s.dest.join("a/b/data.bin").is_file());
    // An absolute remote directory is refused as a usage error (it would
    // not be where it says), before anything connects.
    let abs = s.send(&format!("{addr}:/etc"), Some(&s.alice), key, &[]);
    abs.expect_code(2, "absolute");
    assert!(abs.stderr.contains("is absolute"), "{}", abs.stderr);
    assert!(!s.dest.join("a/etc").exists(), "{:?}", files_under(&s.dest));
    for (target, what) in [
        (format!("{addr}:../b"), "parent"),
        (format!("{addr}:escape"), "symlink"),
    ] {
        let out = s.send(&target, Some(&s.alice), key, &[]);
        assert_ne!(out.code(), Some(0), "{what}: {}", out.stderr);
    }
    assert!(
        files_under(&s.dest.join("b")).is_empty(),
        "{:?}",
        files_under(&s.dest)
    );
    drop(server);
}

#[test]
fn a_confined_directory_that_is_a_symlink_is_refused() {
    let s = setup();
    let outside = s.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::create_dir_all(&s.dest).unwrap();
    symlink(&outside, s.dest.join("x")).unwrap();
    let ak = s.authorized(&[format!("{} dir=x", public_line(&s.alice))]);
    let server = s.serve(&ak, 1);
    let out = s.send(&server.addr, Some(&s.alice), Some(&s.server_id), &[]);
    assert_ne!(out.code(), Some(0), "{}", out.stderr);
    assert!(files_under(&outside).is_empty());
    server.finish();
}

#[test]
fn rights_are_enforced_and_groups_do_not_share_chunks() {
    for store in [true, false] {
        rights_and_groups(store);
    }
}

fn rights_and_groups(store: bool) {
    let s = setup();
    let carol = keygen(s.tmp.path(), "carol");
    let dave = keygen(s.tmp.path(), "dave");
    let ak = s.authorized(&[
        format!("{} dir=alice group=team", public_line(&s.alice)),
        format!("{} dir=bob", public_line(&s.bob)),
        format!("{} dir=carol group=team", public_line(&carol)),
        format!("{} no-files", public_line(&dave)),
    ]);
    let mut server = s.serve_keeping(&ak, 4, store);
    let addr = server.addr.clone();
    let key = Some(s.server_id.as_path());
    let literal = |out: &Out| -> u64 {
        let v: Value = out.json("send");
        v["receiver"]["literal_bytes"].as_u64().unwrap()
    };

    let first = s.send(&addr, Some(&s.alice), key, &[]);
    first.expect_code(0, "alice");
    assert!(literal(&first) >= 300_000);
    // Bob is in a group of his own: Alice's chunks are not his to reference.
    let other = s.send(&addr, Some(&s.bob), key, &[]);
    other.expect_code(0, "bob");
    assert!(
        literal(&other) >= 300_000,
        "bob referenced another group's chunks"
    );
    // Carol shares Alice's group: her copy travels as references.
    let same = s.send(&addr, Some(&carol), key, &[]);
    same.expect_code(0, "carol");
    assert!(literal(&same) < 1000, "carol: {}", literal(&same));
    // Dave may not send files: told which right he lacks.
    let denied = s.send(&addr, Some(&dave), key, &[]);
    denied.expect_code(8, "no-files");
    assert!(denied.stderr.contains("no-files"), "{}", denied.stderr);
    if store {
        assert!(s.store.join("groups/group-team").is_dir());
    } else {
        assert!(s.dest.join(".pfs/groups/group-team/index").is_file());
        assert!(!s.store.exists());
    }
    server.wait_event("denied");
    server.finish();
}

#[test]
fn known_hosts_pins_and_an_unknown_server_is_refused_with_the_line_to_add() {
    let s = setup();
    let ak = s.authorized(&[public_line(&s.alice)]);
    let server = s.serve(&ak, 2);
    let addr = server.addr.clone();
    let kh = s.tmp.path().join("known_hosts");
    fs::write(&kh, "").unwrap();
    let kh_arg = kh.to_str().unwrap();

    let unknown = s.send(&addr, Some(&s.alice), None, &["--known-hosts", kh_arg]);
    unknown.expect_code(8, "unknown server");
    let line = format!("{addr} {}", public_line(&s.server_id));
    let line = line.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    assert!(unknown.stderr.contains(&line), "{}\nwant {line}", unknown.stderr);

    fs::write(&kh, format!("{line}\n")).unwrap();
    s.send(&addr, Some(&s.alice), None, &["--known-hosts", kh_arg])
        .expect_code(0, "pinned in known_hosts");
    server.finish();
}

#[test]
fn serve_on_a_non_loopback_address_needs_keys_or_an_explicit_opt_out() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = pfs();
    cmd.args(["serve", "--listen", "0.0.0.0:0", "--size", "1M", "--once"])
        .env("XDG_CONFIG_HOME", tmp.path());
    let out = run(cmd);
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("--authorized-keys"), "{}", out.stderr);

    // With the opt-out it starts (and warns); loopback needs nothing.
    for extra in [
        &["--listen", "0.0.0.0:0", "--insecure-no-auth"][..],
        &["--listen", "127.0.0.1:0"],
    ] {
        let mut cmd = pfs();
        cmd.args(["serve", "--size", "1M", "--max-sessions", "1"])
            .args(extra)
            .env("XDG_CONFIG_HOME", tmp.path());
        let server = Server::spawn(cmd);
        assert!(!server.addr.is_empty());
        drop(server);
    }
}

#[test]
fn blob_sessions_run_protected_with_both_ciphers_and_honour_no_blob() {
    let s = setup();
    let ak = s.authorized(&[public_line(&s.alice), format!("{} no-blob", public_line(&s.bob))]);
    let mut cmd = pfs();
    cmd.args([
        "serve",
        "--json",
        "--listen",
        "127.0.0.1:0",
        "--size",
        "8M",
        "--max-sessions",
        "3",
    ])
    .arg("--identity")
    .arg(&s.server_id)
    .arg("--authorized-keys")
    .arg(&ak);
    let server = Server::spawn(cmd);
    for cipher in ["aes-256-gcm", "chacha20-poly1305"] {
        let mut send = pfs();
        send.args([
            "send",
            "--to",
            &server.addr,
            "--size",
            "8M",
            "--mode",
            "payload",
            "--bytes",
            "4M",
            "--json",
        ])
        .args(["--cipher", cipher, "--identity"])
        .arg(&s.alice)
        .arg("--server-key")
        .arg(pfs_auth::public_path(&s.server_id));
        let out = run(send);
        out.expect_code(0, cipher);
        let v = out.json(cipher);
        assert_eq!(v["receiver"]["integrity"], "OK", "{v:#}");
    }
    let mut send = pfs();
    send.args(["send", "--to", &server.addr, "--size", "8M", "--bytes", "4M"])
        .arg("--identity")
        .arg(&s.bob)
        .arg("--server-key")
        .arg(pfs_auth::public_path(&s.server_id));
    let out = run(send);
    out.expect_code(8, "no-blob");
    assert!(out.stderr.contains("no-blob"), "{}", out.stderr);
    server.finish();
}

#[test]
fn a_unix_socket_server_refuses_another_users_client() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run a client as another user");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_pfs");
    let probe = Command::new("runuser")
        .args(["-u", "nobody", "--", bin, "--version"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: runuser cannot run {bin} as nobody here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let sock = tmp.path().join("pfs.sock");
    let mut cmd = pfs();
    cmd.args([
        "serve",
        "--transport",
        "unix",
        "--size",
        "1M",
        "--max-sessions",
        "1",
        "--listen",
    ])
    .arg(&sock)
    .env("XDG_CONFIG_HOME", tmp.path());
    let server = Server::spawn(cmd);
    // Let anyone connect at the file-system level: only the credential check stands.
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o777)).unwrap();
    let other = Command::new("runuser")
        .args([
            "-u",
            "nobody",
            "--",
            bin,
            "send",
            "--transport",
            "unix",
            "--size",
            "1M",
            "--bytes",
            "1M",
            "--to",
        ])
        .arg(&sock)
        .env("XDG_CONFIG_HOME", tmp.path())
        .output()
        .unwrap();
    assert!(!other.status.success(), "another user's client was served");
    let mut own = pfs();
    own.args([
        "send",
        "--transport",
        "unix",
        "--size",
        "1M",
        "--bytes",
        "1M",
        "--to",
    ])
    .arg(&sock)
    .env("XDG_CONFIG_HOME", tmp.path());
    run(own).expect_code(0, "own user");
    let out = server.finish();
    assert!(out.stderr.contains("uid"), "{}", out.stderr);
}

/// What a man in the middle does to the client's stream.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Flips one bit.
    Flip,
    /// Closes both connections (a truncated stream).
    Cut,
    /// Holds the client's first bytes back this long (a slow blob setup).
    Hold(std::time::Duration),
}

/// A one-connection TCP proxy to `upstream` that applies `damage` to the
/// client → server bytes once `after` of them have passed. Returns its address.
fn man_in_the_middle(
    upstream: String,
    after: usize,
    damage: Damage,
) -> (String, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        let server = TcpStream::connect(upstream).unwrap();
        let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let (mut s_in, mut c_out) = (server.try_clone().unwrap(), client.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut s_in, &mut c_out);
            let _ = c_out.shutdown(Shutdown::Write);
        });
        if let Damage::Hold(d) = damage {
            std::thread::sleep(d);
        }
        let mut passed = 0usize;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match c_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if passed <= after && after < passed + n {
                match damage {
                    Damage::Hold(_) => {}
                    Damage::Flip => buf[after - passed] ^= 0x10,
                    Damage::Cut => {
                        let _ = s_out.write_all(&buf[..after - passed]);
                        let _ = server.shutdown(Shutdown::Both);
                        let _ = client.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
            passed += n;
            if s_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = s_out.shutdown(Shutdown::Write);
    });
    (addr, handle)
}

#[test]
fn a_tampered_or_cut_stream_ends_the_session_and_lands_nothing() {
    for damage in [Damage::Flip, Damage::Cut] {
        let s = setup();
        // A file large enough that the damage falls inside it.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let big: Vec<u8> = (0..4_000_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        fs::write(s.src.join("data.bin"), &big).unwrap();
        let ak = s.authorized(&[public_line(&s.alice)]);
        let server = s.serve(&ak, 1);
        let (via, proxy) = man_in_the_middle(server.addr.clone(), 2_000_000, damage);
        let out = s.send(&via, Some(&s.alice), Some(&s.server_id), &[]);
        assert_ne!(out.code(), Some(0), "{damage:?}: the damaged session succeeded");
        let _ = proxy.join();
        let served = server.finish();
        let says = match damage {
            Damage::Flip => "failed authentication",
            Damage::Cut => "cut short",
            Damage::Hold(_) => unreachable!("not a damage that fails"),
        };
        assert!(
            served.stderr.contains(says),
            "{damage:?}: server said:\n{}",
            served.stderr
        );
        let landed = files_under(&s.dest);
        assert!(
            !landed.iter().any(|p| p.ends_with("data.bin")),
            "{damage:?}: the damaged file landed: {landed:?}"
        );
        assert!(
            !landed.iter().any(|p| p.starts_with(".pfs/tmp")),
            "{damage:?}: temporary files left: {landed:?}"
        );
    }
}

#[test]
fn a_plain_sender_may_be_silent_longer_than_the_handshake_timeout() {
    // `pfs send` connects before it sets up its blob: its first bytes may
    // come late. Only the handshake, once started, has --handshake-timeout.
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = pfs();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--size",
        "1M",
        "--once",
        "--handshake-timeout",
        "1",
    ])
    .env("XDG_CONFIG_HOME", tmp.path());
    let server = Server::spawn(cmd);
    let hold = Damage::Hold(std::time::Duration::from_secs(2));
    let (via, proxy) = man_in_the_middle(server.addr.clone(), usize::MAX, hold);
    let mut send = pfs();
    send.args(["send", "--to", &via, "--size", "1M", "--bytes", "1M"])
        .env("XDG_CONFIG_HOME", tmp.path());
    run(send).expect_code(0, "a sender silent for 2 s");
    let _ = proxy.join();
    server.finish().expect_code(0, "server");
}

#[test]
#[ignore = "needs root"]
fn a_plain_loopback_tcp_server_serves_only_its_own_user() {
    use std::os::unix::process::CommandExt;
    assert!(
        rustix::process::getuid().is_root(),
        "needs root: to connect as another user"
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = pfs();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--size",
        "1M",
        "--max-sessions",
        "1",
    ])
    .env("XDG_CONFIG_HOME", tmp.path());
    let server = Server::spawn(cmd);
    let port = server.addr.rsplit(':').next().unwrap().to_string();

    // uid 65534 (nobody) connects and writes: refused before a byte is read.
    let other = Command::new("bash")
        .args([
            "-c",
            &format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port} && echo garbage >&3 && timeout 10 cat <&3 >/dev/null"
            ),
        ])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("bash as nobody");
    assert!(other.status.code().is_some(), "{other:?}");

    // The server's own user is then served (it counts the one session it runs).
    let mut send = pfs();
    send.args([
        "send",
        "--to",
        &server.addr,
        "--size",
        "1M",
        "--grams",
        "1",
        "--mode",
        "offset",
    ])
    .env("XDG_CONFIG_HOME", tmp.path());
    run(send).expect_code(0, "the server's own user");
    let out = server.finish();
    out.expect_code(0, "serve");
    assert!(
        out.stderr.contains("refused a TCP client of uid 65534"),
        "the refusal is logged with the uid:\n{}",
        out.stderr
    );
}

/// Issue 26: with `dir=tenants` for one key and `dir=tenants/a` for
/// another, the first wrote into `tenants/a/.pfs` (key a's state), deleted
/// it with `--delete` and planted `.pfs/tmp -> ../../b`, and key a's sends
/// failed from then on, across restarts. No path through a `.pfs` is a
/// sender's; `--delete` leaves every `.pfs`; a state directory damaged
/// before (by hand here) is repaired at start and logged.
#[test]
fn a_key_cannot_touch_the_state_of_a_key_nested_in_its_directory() {
    let s = setup();
    let ak = s.authorized(&[
        format!("{} dir=tenants", public_line(&s.bob)),
        format!("{} dir=tenants/a", public_line(&s.alice)),
    ]);
    let key = Some(s.server_id.as_path());
    let server = s.serve_keeping(&ak, 4, false);
    let addr = server.addr.clone();
    s.send(&addr, Some(&s.alice), key, &[])
        .expect_code(0, "alice first");
    let state = s.dest.join("tenants/a/.pfs");
    assert!(state.join("tmp").is_dir());

    // Bob sends a tree holding `a/.pfs/tmp -> ../../b` and a file in `a/.pfs`.
    let bob_tree = s.tmp.path().join("bob-tree");
    fs::create_dir_all(bob_tree.join("a/.pfs")).unwrap();
    symlink("../../b", bob_tree.join("a/.pfs/tmp")).unwrap();
    fs::write(bob_tree.join("a/.pfs/manifest"), b"forged").unwrap();
    fs::write(bob_tree.join("x.txt"), b"x").unwrap();
    let bob_send = |tree: &Path, extra: &[&str]| {
        let mut cmd = pfs();
        cmd.arg("send")
            .arg(format!("{}/", tree.display()))
            .args(["--to", &addr, "--json", "--progress", "never", "--cache-dir"])
            .arg(s.tmp.path().join("cache-bob"))
            .arg("--identity")
            .arg(&s.bob)
            .arg("--server-key")
            .arg(pfs_auth::public_path(&s.server_id))
            .args(extra)
            .env("XDG_CONFIG_HOME", s.tmp.path().join("config"));
        run(cmd)
    };
    let out = bob_send(&bob_tree, &[]);
    assert_ne!(out.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("`.pfs`"), "{}", out.stderr);
    assert!(fs::symlink_metadata(state.join("tmp")).unwrap().is_dir());
    assert_ne!(
        fs::read(state.join("manifest")).ok().as_deref(),
        Some(&b"forged"[..])
    );
    // --delete from a tree without `a`: a's files go, its state stays.
    let clean = s.tmp.path().join("bob-clean");
    fs::create_dir_all(&clean).unwrap();
    fs::write(clean.join("x.txt"), b"x").unwrap();
    bob_send(&clean, &["--delete"]).expect_code(0, "bob --delete");
    assert!(
        !s.dest.join("tenants/a/data.bin").exists(),
        "{:?}",
        files_under(&s.dest)
    );
    assert!(state.join("tmp").is_dir());
    // Alice is served.
    s.send(&addr, Some(&s.alice), key, &[])
        .expect_code(0, "alice after bob");
    assert!(s.dest.join("tenants/a/data.bin").is_file());
    drop(server);

    // Damage done before this fix (by hand here): repaired at the next start.
    let b = s.dest.join("tenants/b");
    fs::create_dir_all(&b).unwrap();
    fs::remove_dir_all(state.join("tmp")).unwrap();
    symlink("../../b", state.join("tmp")).unwrap();
    let server = s.serve_keeping(&ak, 1, false);
    s.send(&server.addr, Some(&s.alice), key, &[])
        .expect_code(0, "alice with a repaired state directory");
    let log = server.finish();
    assert!(
        log.stderr.contains(".pfs/tmp was a symlink; moved aside"),
        "{}",
        log.stderr
    );
    assert!(fs::symlink_metadata(state.join("tmp")).unwrap().is_dir());
    assert!(files_under(&b).is_empty(), "{:?}", files_under(&b));
}

/// Sends `sig` to a running `pfs serve`.
fn signal(server: &Server, sig: rustix::process::Signal) {
    let child = server.guard.0.as_ref().expect("server child");
    rustix::process::kill_process(rustix::process::Pid::from_child(child), sig).expect("signal pfs serve");
}

/// SIGHUP reloads `authorized_keys` without a restart: a key added is
/// admitted, a key removed is refused, a file that does not parse keeps the
/// set in use (and says so). The server runs on throughout.
#[test]
fn sighup_reloads_authorized_keys_and_a_bad_file_keeps_the_old_set() {
    use rustix::process::Signal;
    let s = setup();
    let ak = s.authorized(&[public_line(&s.alice)]);
    let mut server = s.serve(&ak, 100);
    let addr = server.addr.clone();
    s.send(&addr, Some(&s.bob), Some(&s.server_id), &[])
        .expect_code(8, "bob before he is listed");

    // Bob added.
    s.authorized(&[public_line(&s.alice), public_line(&s.bob)]);
    signal(&server, Signal::HUP);
    assert_eq!(server.wait_event("reloaded")["keys"], 2);
    s.send(&addr, Some(&s.bob), Some(&s.server_id), &[])
        .expect_code(0, "bob once listed");

    // Alice removed.
    s.authorized(&[public_line(&s.bob)]);
    signal(&server, Signal::HUP);
    assert_eq!(server.wait_event("reloaded")["keys"], 1);
    let alice = s.send(&addr, Some(&s.alice), Some(&s.server_id), &[]);
    alice.expect_code(8, "alice once removed");
    assert!(alice.stderr.contains("not authorized"), "{}", alice.stderr);

    // A file that does not parse: the set in use stays.
    s.authorized(&[public_line(&s.bob), "pfs-x25519 not-a-key".to_string()]);
    signal(&server, Signal::HUP);
    let failed = server.wait_event("reload_failed");
    assert_eq!(failed["keys"], 1, "{failed}");
    assert!(
        failed["error"].as_str().unwrap_or_default().contains(":2:"),
        "{failed}"
    );
    s.send(&addr, Some(&s.bob), Some(&s.server_id), &[])
        .expect_code(0, "bob after a bad reload");
    s.send(&addr, Some(&s.alice), Some(&s.server_id), &[])
        .expect_code(8, "alice after a bad reload");

    signal(&server, Signal::TERM);
    let out = server.finish();
    out.expect_code(0, "pfs serve after SIGHUPs and SIGTERM");
    for line in [
        "reloaded: 2 keys",
        "reloaded: 1 keys",
        "reload failed, keeping the 1 keys in use",
    ] {
        assert!(out.stderr.contains(line), "no {line:?} in:\n{}", out.stderr);
    }
}

/// A server-side failure reaches the client naming the problem, not the
/// server's absolute paths (the server's log keeps them): here the key's
/// group index cannot be opened, a file standing where its directory goes.
#[test]
fn server_failures_reach_the_client_without_the_servers_paths() {
    let s = setup();
    let mut kg = pfs();
    kg.args(["keygen", "--json", "--force", "-f"]).arg(&s.alice);
    let fingerprint = run(kg).json("keygen")["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_string();
    let group = format!("key-{}", fingerprint.trim_start_matches("blake3:"));
    let groups = s.dest.join(".pfs/groups");
    fs::create_dir_all(&groups).unwrap();
    fs::write(groups.join(&group), b"in the way\n").unwrap();
    let ak = s.authorized(&[format!("dir=backups/alice {}", public_line(&s.alice))]);
    let server = s.serve_keeping(&ak, 1, false);
    let addr = server.addr.clone();
    let out = s.send(&addr, Some(&s.alice), Some(&s.server_id), &[]);
    out.expect_code(4, "a send whose place cannot be opened");
    let dest = s.dest.display().to_string();
    assert!(out.stderr.contains("not a directory"), "{}", out.stderr);
    assert!(out.stderr.contains(&group), "{}", out.stderr);
    assert!(
        !out.stderr.contains(&dest),
        "the server's path reached the client: {}",
        out.stderr
    );
    assert!(
        !out.stderr.contains(&*s.tmp.path().to_string_lossy()),
        "{}",
        out.stderr
    );
    let served = server.finish();
    assert!(
        served.stderr.contains(&dest),
        "the server's log keeps the path: {}",
        served.stderr
    );
}

/// With `--config`, SIGHUP reads the config file again: its
/// `authorized_keys` path is the one reloaded, and any other setting it
/// changed is named as applying at the next start.
#[test]
fn sighup_rereads_the_config_files_keys_path_and_names_what_it_does_not_reload() {
    use rustix::process::Signal;
    let s = setup();
    let t = s.tmp.path();
    fs::write(t.join("keys1"), public_line(&s.alice) + "\n").unwrap();
    fs::write(
        t.join("keys2"),
        public_line(&s.alice) + "\n" + &public_line(&s.bob) + "\n",
    )
    .unwrap();
    let conf = t.join("serve.toml");
    let write_conf = |keys: &str, max_clients: u32| {
        let text = format!(
            "listen = \"127.0.0.1:0\"\njson = true\ndest = \"dest\"\nidentity = \"server\"\n\
             authorized_keys = \"{keys}\"\nmax_clients = {max_clients}\n"
        );
        fs::write(&conf, text).unwrap();
    };
    write_conf("keys1", 4);
    let mut cmd = pfs();
    cmd.arg("serve").arg("--config").arg(&conf);
    let mut server = Server::spawn(cmd);
    let addr = server.addr.clone();
    s.send(&addr, Some(&s.bob), Some(&s.server_id), &[])
        .expect_code(8, "bob, not in keys1");
    write_conf("keys2", 8);
    signal(&server, Signal::HUP);
    assert_eq!(server.wait_event("reloaded")["keys"], 2);
    s.send(&addr, Some(&s.bob), Some(&s.server_id), &[])
        .expect_code(0, "bob, in keys2");
    signal(&server, Signal::TERM);
    let out = server.finish();
    out.expect_code(0, "pfs serve --config after SIGHUP and SIGTERM");
    assert!(
        out.stderr
            .contains("max_clients changed; only authorized_keys is reloaded"),
        "{}",
        out.stderr
    );
}
