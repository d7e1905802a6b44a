//! `pfs mount` end to end: a `pfs serve --dest` holding a tree (sent with
//! `pfs send`), mounted with FUSE, read through the kernel. Byte-exact
//! cold and cached; one file of a large tree fetches only that file's
//! chunks; a damaged cache chunk is fetched again, never returned; a
//! killed server costs EIO within the timeout while cached files stay
//! readable and the mount unmounts; passthrough and the direct client.
//!
//! Needs root and /dev/fuse; elsewhere each test says why it skips. Every
//! child is bounded (see `common`); every mount is unmounted on drop.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{noise, run, Server};
use serde_json::Value;

/// Fails, saying what is missing, unless this process may mount FUSE
/// (the tests that call it are `#[ignore = "needs root and FUSE"]`).
fn need_mount() {
    assert!(
        rustix::process::geteuid().is_root(),
        "needs root: mounting FUSE here needs root"
    );
    assert!(
        Path::new("/dev/fuse").exists(),
        "needs FUSE: /dev/fuse is missing"
    );
}

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// A served tree: the server, and the tree it was sent from.
struct Served {
    server: Server,
    work: tempfile::TempDir,
}

impl Served {
    fn src(&self) -> PathBuf {
        self.work.path().join("src")
    }
}

/// Starts `pfs serve --dest` and sends it `make`'s tree (as `src/`).
fn serve(make: impl FnOnce(&Path)) -> Served {
    let work = tempfile::tempdir().expect("temporary directory");
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    make(&src);
    let mut cmd = pfs();
    cmd.args(["serve", "--json", "--listen", "127.0.0.1:0", "--dest"])
        .arg(work.path().join("dest"));
    let server = Server::spawn(cmd);
    let mut send = pfs();
    send.arg("send")
        .arg(&src)
        .args([
            "--to",
            &server.addr,
            "--json",
            "--progress",
            "never",
            "--cache-dir",
        ])
        .arg(work.path().join("send-cache"));
    run(send).expect_code(0, "pfs send");
    Served { server, work }
}

/// A mounted `pfs mount`, unmounted on drop.
struct Mounted {
    at: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

fn mount(addr: &str, at: &Path, cache: &Path, extra: &[&str]) -> Mounted {
    fs::create_dir_all(at).unwrap();
    let mut cmd = pfs();
    cmd.args(["mount", addr])
        .arg(at)
        .arg("--cache")
        .arg(cache)
        .arg("--json")
        .args(extra);
    let out = run(cmd);
    out.expect_code(0, "pfs mount");
    let v = out.json("pfs mount");
    assert_eq!(v["event"], "mounted", "{v}");
    Mounted { at: at.to_path_buf() }
}

fn umount(m: Mounted) {
    let mut cmd = pfs();
    cmd.arg("umount").arg(&m.at);
    run(cmd).expect_code(0, "pfs umount");
    std::mem::forget(m);
}

fn stats(m: &Mounted) -> Value {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::getxattr(&m.at, "user.pfs.stats", &mut buf).expect("user.pfs.stats");
    serde_json::from_slice(&buf[..n]).expect("stats JSON")
}

/// Every entry of `a` is in `b` with the same kind, bytes, target and mode.
fn same_tree(a: &Path, b: &Path) {
    let out = Command::new("diff")
        .arg("-r")
        .arg(a)
        .arg(b)
        .output()
        .expect("diff");
    assert!(
        out.status.success(),
        "diff -r {} {}: {}",
        a.display(),
        b.display(),
        String::from_utf8_lossy(&out.stdout)
    );
    for e in walk(a) {
        let rel = e.strip_prefix(a).unwrap();
        let (ma, mb) = (
            fs::symlink_metadata(&e).unwrap(),
            fs::symlink_metadata(b.join(rel)).unwrap(),
        );
        assert_eq!(ma.file_type(), mb.file_type(), "{}", rel.display());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            ma.permissions().mode() & 0o7777,
            mb.permissions().mode() & 0o7777,
            "{}",
            rel.display()
        );
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&e).unwrap(), fs::read_link(b.join(rel)).unwrap());
        }
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(p).unwrap() {
        let path = e.unwrap().path();
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

fn small_tree(src: &Path) {
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::write(src.join("a/text.txt"), b"hello\n".repeat(1000)).unwrap();
    fs::write(src.join("a/b/big.bin"), noise(3 << 20, 1)).unwrap();
    fs::write(src.join("a/b/copy.bin"), noise(3 << 20, 1)).unwrap();
    fs::write(src.join("a/b/c/empty"), b"").unwrap();
    fs::write(src.join("top.bin"), noise(200_000, 2)).unwrap();
    symlink("a/text.txt", src.join("link")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(src.join("top.bin"), fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
#[ignore = "needs root and FUSE"]
fn a_tree_reads_byte_exact_cold_then_from_the_cache() {
    need_mount();
    let s = serve(small_tree);
    let cache = s.work.path().join("cache");
    let at = s.work.path().join("mnt");
    let m = mount(&s.server.addr, &at, &cache, &[]);
    same_tree(&s.src(), &at.join("src"));
    let cold = stats(&m);
    // The two equal 3 MiB files travel once.
    let fetched = cold["bytes_fetched"].as_u64().unwrap();
    let tree: u64 = walk(&s.src())
        .iter()
        .filter(|p| fs::symlink_metadata(p).unwrap().is_file())
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        fetched <= tree - (3 << 20) + 4096,
        "fetched {fetched} of a {tree}-byte tree: {cold}"
    );
    assert_eq!(cold["read_errors"], 0, "{cold}");
    umount(m);

    // Remounted over the same cache: nothing travels.
    let m = mount(&s.server.addr, &at, &cache, &[]);
    same_tree(&s.src(), &at.join("src"));
    let warm = stats(&m);
    assert_eq!(warm["chunks_fetched"], 0, "{warm}");
    assert!(warm["chunks_local"].as_u64().unwrap() > 0, "{warm}");
    umount(m);
}

#[test]
#[ignore = "needs root and FUSE"]
fn one_file_of_a_large_tree_fetches_only_its_chunks() {
    need_mount();
    let s = serve(|src| {
        for d in 0..10 {
            fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
            for f in 0..40 {
                fs::write(src.join(format!("d{d}/f{f}")), noise(64 << 10, d * 100 + f + 1)).unwrap();
            }
        }
    });
    let at = s.work.path().join("mnt");
    let m = mount(&s.server.addr, &at, &s.work.path().join("cache"), &[]);
    assert_eq!(fs::read_dir(at.join("src")).unwrap().count(), 10);
    let got = fs::read(at.join("src/d7/f13")).unwrap();
    assert!(got == noise(64 << 10, 714), "d7/f13 differs");
    let v = stats(&m);
    assert_eq!(v["recipes"], 1, "{v}");
    assert_eq!(v["bytes_fetched"], 64 << 10, "{v}");
    umount(m);
}

#[test]
#[ignore = "needs root and FUSE"]
fn a_damaged_chunk_in_the_cache_is_fetched_again_never_returned() {
    need_mount();
    let s = serve(|src| fs::write(src.join("f.bin"), noise(1 << 20, 9)).unwrap());
    let at = s.work.path().join("mnt");
    let cache = s.work.path().join("cache");
    let m = mount(&s.server.addr, &at, &cache, &[]);
    assert!(
        fs::read(at.join("src/f.bin")).unwrap() == noise(1 << 20, 9),
        "content differs"
    );
    umount(m);
    // Flip one byte in the middle of the cache's blob.
    let blob = cache.join("blob");
    let mut bytes = fs::read(&blob).unwrap();
    let mid = (1 << 20) / 2;
    bytes[mid] ^= 0x55;
    fs::write(&blob, &bytes).unwrap();
    let m = mount(&s.server.addr, &at, &cache, &[]);
    assert!(
        fs::read(at.join("src/f.bin")).unwrap() == noise(1 << 20, 9),
        "content differs"
    );
    let v = stats(&m);
    assert!(v["cache_damaged"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["chunks_fetched"].as_u64().unwrap() >= 1, "{v}");
    umount(m);
}

#[test]
#[ignore = "needs root and FUSE"]
fn a_killed_server_costs_eio_cached_files_stay_readable_and_a_restart_is_found_again() {
    need_mount();
    let mut s = serve(|src| {
        fs::write(src.join("read.bin"), noise(300_000, 3)).unwrap();
        fs::write(src.join("unread.bin"), noise(300_000, 4)).unwrap();
    });
    let at = s.work.path().join("mnt");
    let m = mount(
        &s.server.addr,
        &at,
        &s.work.path().join("cache"),
        &["--timeout", "3"],
    );
    assert!(
        fs::read(at.join("src/read.bin")).unwrap() == noise(300_000, 3),
        "content differs"
    );
    if let Some(mut c) = s.server.guard.0.take() {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let e = fs::read(at.join("src/unread.bin")).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::IO.raw_os_error()),
        "{e}"
    );
    // The kernel's page cache may answer this; drop it so the daemon must.
    fs::write("/proc/sys/vm/drop_caches", "3").ok();
    assert!(
        fs::read(at.join("src/read.bin")).unwrap() == noise(300_000, 3),
        "content differs"
    );
    assert!(fs::metadata(at.join("src/unread.bin")).is_ok());
    // The server comes back on the same address: the next reads reconnect.
    let mut cmd = pfs();
    cmd.args(["serve", "--json", "--listen", &s.server.addr, "--dest"])
        .arg(s.work.path().join("dest"));
    let _again = Server::spawn(cmd);
    let mut got = None;
    for _ in 0..100 {
        if let Ok(b) = fs::read(at.join("src/unread.bin")) {
            got = Some(b);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        got == Some(noise(300_000, 4)),
        "no reconnection to the restarted server"
    );
    assert_eq!(stats(&m)["reconnects"], 1);
    umount(m);
    assert!(matches!(fs::read_dir(&at).map(|d| d.count()), Ok(0)));
}

#[test]
#[ignore = "needs root and FUSE"]
fn passthrough_and_the_direct_client_read_the_same_bytes() {
    need_mount();
    let s = serve(|src| fs::write(src.join("f.bin"), noise(2 << 20, 5)).unwrap());
    let at = s.work.path().join("mnt");
    let sock = s.work.path().join("direct.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let m = mount(
        &s.server.addr,
        &at,
        &s.work.path().join("cache"),
        &["--passthrough", "--direct", &sock_arg],
    );
    // First open: not local yet, served by the daemon; it fills the cache.
    assert!(
        fs::read(at.join("src/f.bin")).unwrap() == noise(2 << 20, 5),
        "content differs"
    );
    // All local now: the next open goes to a backing file.
    fs::write("/proc/sys/vm/drop_caches", "3").ok();
    assert!(
        fs::read(at.join("src/f.bin")).unwrap() == noise(2 << 20, 5),
        "content differs"
    );
    let v = stats(&m);
    assert!(v["passthrough_opens"].as_u64().unwrap() >= 1, "{v}");

    let mut client = pfs_mount::direct::DirectClient::connect(&sock).expect("direct socket");
    let f = client.open("src/f.bin").expect("direct open");
    assert!(
        client.bytes(&f) == noise(2 << 20, 5).as_slice(),
        "direct bytes differ"
    );
    let mut buf = [0u8; 4096];
    assert_eq!(client.read_at(&f, 4096 * 100, &mut buf), 4096);
    assert!(
        buf[..] == noise(2 << 20, 5)[4096 * 100..4096 * 101],
        "direct read_at differs"
    );
    drop(client);
    umount(m);
}

/// The pid of the `pfs mount … --foreground` process serving `at`.
fn daemon_of(at: &Path) -> Option<i32> {
    let want = at.as_os_str().as_encoded_bytes();
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let ours = args.contains(&&b"--foreground"[..]) && args.contains(&want);
        ours.then_some(pid)
    })
}

/// Waits (a hang guard, not a timing assertion) for process `pid` to end.
fn gone(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let alive = fs::read_to_string(format!("/proc/{pid}/stat"))
            // A zombie (state Z) has ended; its parent has not reaped it.
            .is_ok_and(|s| {
                s.rsplit(')')
                    .next()
                    .is_some_and(|r| !r.trim_start().starts_with('Z'))
            });
        if !alive {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// The mount process ends on `pfs umount`, and on SIGTERM even while a
/// file held open keeps its lazily unmounted mount alive (it used to
/// ignore every later SIGTERM, holding its cache lock); the cache is then
/// free for the next mount.
#[test]
#[ignore = "needs root and FUSE"]
fn the_mount_process_ends_on_umount_and_on_sigterm_with_a_file_open() {
    need_mount();
    let s = serve(|src| fs::write(src.join("f.bin"), noise(100_000, 5)).unwrap());
    let (at, cache) = (s.work.path().join("mnt"), s.work.path().join("cache"));
    let at_c = {
        fs::create_dir_all(&at).unwrap();
        fs::canonicalize(&at).unwrap()
    };

    let m = mount(&s.server.addr, &at, &cache, &[]);
    let pid = daemon_of(&at_c).expect("the mount process");
    umount(m);
    assert!(gone(pid), "the mount process outlived pfs umount");

    let m = mount(&s.server.addr, &at, &cache, &[]);
    let pid = daemon_of(&at_c).expect("the mount process");
    let held = fs::File::open(at.join("src/f.bin")).expect("open a file in the mount");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM");
    assert!(gone(pid), "the mount process ignored SIGTERM with a file open");
    drop(held);
    std::mem::forget(m);
    // The cache lock went with it: a new mount opens the same cache.
    let m = mount(&s.server.addr, &at, &cache, &[]);
    umount(m);
}
