//! rsync's conventions in `pfs send PATH… --to ADDR[:DIR]`, end to end
//! against a `pfs serve --store --dest` on loopback: a trailing slash sends
//! a directory's contents, `--delete`, the content check when size and
//! mtime match, `--checksum`, hard links, owner and group, xattrs and ACLs,
//! symlinks as they are (`--safe-links`), the top directory's mtime.
//!
//! Every child is bounded (see `common`): senders run within
//! `common::CMD_TIMEOUT`, servers are killed on drop, every wait on a
//! server event has a deadline. Each test has its own temporary directory
//! and sender cache.

mod common;

use common::{run, Out, Server};

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// A private working directory: `src`, `store`, `dest`, `cache` beneath it.
struct Dirs {
    _tmp: tempfile::TempDir,
    src: PathBuf,
    store: PathBuf,
    dest: PathBuf,
    cache: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let p = tmp.path().to_path_buf();
    let d = Dirs {
        src: p.join("src"),
        store: p.join("store"),
        dest: p.join("dest"),
        cache: p.join("cache"),
        _tmp: tmp,
    };
    fs::create_dir(&d.src).expect("mkdir src");
    d
}

/// `pfs serve --json --store STORE --dest DEST --listen 127.0.0.1:0`.
fn serve(d: &Dirs) -> Server {
    let mut cmd = pfs();
    cmd.args(["serve", "--json", "--listen", "127.0.0.1:0", "--store"])
        .arg(&d.store)
        .arg("--dest")
        .arg(&d.dest);
    Server::spawn(cmd)
}

/// `pfs send SOURCES… --to TO --json --progress never --cache-dir CACHE EXTRA…`;
/// a source given as a `&str` keeps its trailing slash.
fn send(d: &Dirs, sources: &[&str], to: &str, extra: &[&str]) -> Out {
    let mut cmd = pfs();
    cmd.arg("send")
        .args(sources)
        .args(["--to", to, "--json", "--progress", "never", "--cache-dir"])
        .arg(&d.cache)
        .args(extra);
    run(cmd)
}

/// Asserts a send that wrote everything (exit 0, nothing failed); its JSON.
fn good(out: &Out, what: &str) -> Value {
    out.expect_code(0, what);
    let v = out.json(what);
    assert_eq!(v["receiver"]["files_failed"], 0, "{what}: {v:#}");
    assert_eq!(v["messages"], "", "{what}: {v:#}");
    v
}

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).expect("create parent directory");
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A path as the `&str` a user would type, with a trailing slash if `slash`.
fn arg(p: &Path, slash: bool) -> String {
    let s = p.to_str().expect("test paths are UTF-8").to_string();
    if slash {
        s + "/"
    } else {
        s
    }
}

/// Relative paths of every entry beneath `root`, sorted.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// trailing slash

#[test]
fn a_trailing_slash_sends_the_contents() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a.txt"), b"a");
    write(&tree.join("sub/b.txt"), b"bb");
    write(&d.src.join("other/c.txt"), b"ccc");
    let server = serve(&d);
    let to = |dir: &str| format!("{}:{dir}", server.addr);

    // DIR/ puts DIR's entries directly under the remote directory.
    good(&send(&d, &[&arg(&tree, true)], &to("slash"), &[]), "tree/");
    assert_eq!(listing(&d.dest.join("slash")), ["a.txt", "sub", "sub/b.txt"]);
    // DIR keeps its name.
    good(&send(&d, &[&arg(&tree, false)], &to("named"), &[]), "tree");
    assert_eq!(
        listing(&d.dest.join("named")),
        ["tree", "tree/a.txt", "tree/sub", "tree/sub/b.txt"]
    );
    // Several sources: contents and named ones side by side.
    let v = good(
        &send(
            &d,
            &[&arg(&tree, true), &arg(&d.src.join("other"), false)],
            &to("mixed"),
            &[],
        ),
        "tree/ other",
    );
    assert_eq!(v["remote_dir"], "mixed", "{v:#}");
    assert_eq!(
        listing(&d.dest.join("mixed")),
        ["a.txt", "other", "other/c.txt", "sub", "sub/b.txt"]
    );
    assert_eq!(fs::read(d.dest.join("mixed/sub/b.txt")).unwrap(), b"bb");
    // Two contents holding one name are refused before anything is sent.
    let twin = d.src.join("twin");
    write(&twin.join("a.txt"), b"other a");
    let out = send(&d, &[&arg(&tree, true), &arg(&twin, true)], &to("clash"), &[]);
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.contains("\"a.txt\""), "{}", out.stderr);
    assert!(!d.dest.join("clash").exists());
    // A dry run plans the same entries and writes nothing.
    let v = send(&d, &[&arg(&tree, true)], &to("dry"), &["--dry-run"]);
    v.expect_code(0, "dry run");
    let v = v.json("dry run");
    assert_eq!(v["plan"]["entries"], 3, "{v:#}");
    assert_eq!(v["plan"]["files"], 2, "{v:#}");
    assert!(!d.dest.join("dry").exists());
}

// ---------------------------------------------------------------------------
// --delete

/// The `deleted` entries of a send's JSON.
fn deleted(v: &Value) -> Vec<String> {
    v["deleted"]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no deleted entries in {v:#}"))
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn delete_removes_what_the_source_lacks_and_nothing_else() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("keep.txt"), b"keep");
    write(&tree.join("sub/keep.bin"), b"bin");
    write(&tree.join("sub/old.txt"), b"old");
    write(&tree.join("gone/deep/x"), b"x");
    write(&tree.join("build.o"), b"object");
    let server = serve(&d);
    let to = format!("{}:site", server.addr);
    good(&send(&d, &[&arg(&tree, true)], &to, &[]), "first send");
    let site = d.dest.join("site");
    assert!(site.join("gone/deep/x").exists());

    // The source loses entries; the destination gains some of its own: a
    // symlink to a file outside the destination, a state directory at the
    // destination root, a file beside the remote directory.
    fs::remove_file(tree.join("sub/old.txt")).unwrap();
    fs::remove_dir_all(tree.join("gone")).unwrap();
    fs::remove_file(tree.join("build.o")).unwrap();
    let outside = d.src.join("outside.txt");
    write(&outside, b"precious");
    std::os::unix::fs::symlink(&outside, site.join("link-out")).unwrap();
    write(&site.join("extra/file"), b"e");
    write(&site.join("old.o"), b"excluded, so protected");
    write(&d.dest.join(".pfs/state"), b"receiver state");
    write(&d.dest.join("beside.txt"), b"not in the remote directory");

    // Without --delete nothing goes.
    good(&send(&d, &[&arg(&tree, true)], &to, &[]), "send without --delete");
    assert!(site.join("gone/deep/x").exists() && site.join("extra/file").exists());

    // A dry run lists what would go and removes nothing.
    let out = send(
        &d,
        &[&arg(&tree, true)],
        &to,
        &["--delete", "--dry-run", "--exclude", "*.o"],
    );
    out.expect_code(0, "dry run of --delete");
    let v = out.json("dry run of --delete");
    let would = deleted(&v);
    assert_eq!(
        would,
        [
            "extra/file",
            "extra/",
            "gone/deep/x",
            "gone/deep/",
            "gone/",
            "link-out",
            "sub/old.txt"
        ],
        "{v:#}"
    );
    assert_eq!(v["deleted"]["count"], 7, "{v:#}");
    assert_eq!(v["dry_run"], true, "{v:#}");
    assert!(site.join("gone/deep/x").exists() && site.join("sub/old.txt").exists());

    // The real thing: the same list, gone from the destination.
    let v = good(
        &send(&d, &[&arg(&tree, true)], &to, &["--delete", "--exclude", "*.o"]),
        "--delete",
    );
    assert_eq!(deleted(&v), would, "{v:#}");
    assert_eq!(v["receiver"]["files_deleted"], 7, "{v:#}");
    // build.o left the source, but `--exclude *.o` protects it, as rsync does.
    assert_eq!(
        listing(&site),
        ["build.o", "keep.txt", "old.o", "sub", "sub/keep.bin"]
    );
    // The link went as a link: its target is untouched.
    assert_eq!(fs::read(&outside).unwrap(), b"precious");
    // Outside the remote directory, and the receiver's state, nothing moved.
    assert_eq!(fs::read(d.dest.join(".pfs/state")).unwrap(), b"receiver state");
    assert!(d.dest.join("beside.txt").exists());

    // Human output: rsync's `deleting` lines.
    write(&site.join("stray"), b"s");
    let mut cmd = pfs();
    cmd.arg("send")
        .arg(arg(&tree, true))
        .args([
            "--to",
            &to,
            "--progress",
            "never",
            "--delete",
            "--exclude",
            "*.o",
            "--cache-dir",
        ])
        .arg(&d.cache);
    let out = run(cmd);
    out.expect_code(0, "human --delete");
    assert!(out.stdout.starts_with("deleting stray\n"), "{}", out.stdout);
}

#[test]
fn delete_stays_inside_named_directories_and_the_state_directory_is_never_written() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a"), b"a");
    let server = serve(&d);
    // A directory sent by name: only what is inside it can go.
    write(&d.dest.join("tree/stale"), b"s");
    write(&d.dest.join("other"), b"o");
    let v = good(
        &send(&d, &[&arg(&tree, false)], &server.addr, &["--delete"]),
        "tree --delete",
    );
    assert_eq!(deleted(&v), ["tree/stale"], "{v:#}");
    assert!(d.dest.join("other").exists());
    // The contents of a directory into the destination root: everything
    // else at the root goes, but the receiver's `.pfs` stays.
    write(&d.dest.join(".pfs/state"), b"receiver state");
    let v = good(
        &send(&d, &[&arg(&tree, true)], &server.addr, &["--delete"]),
        "tree/ --delete",
    );
    assert_eq!(deleted(&v), ["other", "tree/a", "tree/"], "{v:#}");
    // (.pfs/tmp is the receiver's too: its temporary files.)
    assert_eq!(listing(&d.dest), [".pfs", ".pfs/state", ".pfs/tmp", "a"]);
    // A sender may not write into `.pfs`, as a remote directory or by a name in it.
    let out = send(&d, &[&arg(&tree, false)], &format!("{}:.pfs", server.addr), &[]);
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr.contains(".pfs"), "{}", out.stderr);
    // Nor may an empty DIR/ with --delete, which names nothing to fail,
    // have `.pfs` emptied (refused at FILES_HELLO; the receiver's removal
    // never enters `.pfs` either: pfs-files' dest/delete.rs tests).
    let nothing = d.src.join("nothing");
    fs::create_dir(&nothing).unwrap();
    let out = send(
        &d,
        &[&arg(&nothing, true)],
        &format!("{}:.pfs", server.addr),
        &["--delete"],
    );
    assert_ne!(out.code(), Some(0), "{out:?}");
    assert_eq!(fs::read(d.dest.join(".pfs/state")).unwrap(), b"receiver state");
    // An empty directory's contents with --delete empty the remote directory.
    let empty = d.src.join("empty");
    fs::create_dir(&empty).unwrap();
    write(&d.dest.join("emptied/old"), b"o");
    let v = good(
        &send(
            &d,
            &[&arg(&empty, true)],
            &format!("{}:emptied", server.addr),
            &["--delete"],
        ),
        "empty/ --delete",
    );
    assert_eq!(deleted(&v), ["old"], "{v:#}");
    assert!(listing(&d.dest.join("emptied")).is_empty());
    let pfs_named = d.src.join("x/.pfs");
    write(&pfs_named.join("f"), b"f");
    let out = send(&d, &[&arg(&d.src.join("x"), true)], &server.addr, &[]);
    out.expect_code(6, "a tree holding .pfs at its top");
    assert_eq!(fs::read(d.dest.join(".pfs/state")).unwrap(), b"receiver state");
    assert!(!d.dest.join(".pfs/f").exists());
}

#[test]
fn nothing_is_deleted_when_an_entry_fails() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a"), b"a");
    let server = serve(&d);
    good(&send(&d, &[&arg(&tree, true)], &server.addr, &[]), "first send");
    write(&d.dest.join("stale"), b"s");
    // A `.pfs` inside the tree is refused by the receiver (a receiver's state).
    write(&tree.join("sub/.pfs/x"), b"x");
    let out = send(&d, &[&arg(&tree, true)], &server.addr, &["--delete"]);
    out.expect_code(6, "a failed entry");
    let v = out.json("a failed entry");
    assert_eq!(v["deleted"]["count"], 0, "{v:#}");
    assert_eq!(v["deleted"]["status"], "entries of the session failed", "{v:#}");
    assert!(
        out.stderr.contains("nothing deleted at the receiver"),
        "{}",
        out.stderr
    );
    assert!(d.dest.join("stale").exists());
}

// ---------------------------------------------------------------------------
// symlinks as they are, --safe-links, the top directory's mtime

/// mtime of `p` itself (a link's own), in ns since the epoch.
fn mtime_ns(p: &Path) -> i128 {
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
    i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
}

/// Sets the mtime of `p` itself (never a link's target).
fn set_own_mtime(p: &Path, secs: i64, nanos: i64) {
    let t = rustix::fs::Timespec {
        tv_sec: secs,
        tv_nsec: nanos as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: t,
        last_modification: t,
    };
    rustix::fs::utimensat(rustix::fs::CWD, p, &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", p.display()));
}

/// A tree of links rsync copies as they are: absolute, out of the tree,
/// dangling, a 300-byte target (one long component), beside an ordinary
/// file and link; each link with an mtime of its own, the tree's top last.
/// Returns (link path in the tree, target).
fn tree_of_links(tree: &Path) -> Vec<(&'static str, Vec<u8>)> {
    write(&tree.join("f"), b"file");
    fs::create_dir_all(tree.join("d")).unwrap();
    let links: Vec<(&str, Vec<u8>)> = vec![
        ("abs", b"/etc/passwd".to_vec()),
        ("d/out", b"../../../outside/secret".to_vec()),
        ("dangling", b"not-there".to_vec()),
        ("long", vec![b'x'; 300]),
        ("ok", b"f".to_vec()),
        ("d/up", b"../f".to_vec()),
    ];
    for (i, (l, t)) in links.iter().enumerate() {
        let p = tree.join(l);
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), &p).unwrap();
        set_own_mtime(&p, 1_600_000_000 + i as i64, 7 + i as i64);
    }
    set_own_mtime(&tree.join("d"), 1_500_000_000, 11);
    set_own_mtime(tree, 1_400_000_000, 13);
    links
}

#[test]
fn symlinks_arrive_as_they_are_with_their_mtimes_and_delete_still_runs() {
    let d = dirs();
    let tree = d.src.join("tree");
    let links = tree_of_links(&tree);
    let server = serve(&d);
    let to = format!("{}:site", server.addr);
    let v = good(&send(&d, &[&arg(&tree, true)], &to, &["--delete"]), "first send");
    assert_eq!(v["receiver"]["symlinks"], links.len(), "{v:#}");
    let site = d.dest.join("site");
    let mut inodes = Vec::new();
    for (l, t) in &links {
        let got = fs::read_link(site.join(l)).unwrap_or_else(|e| panic!("{l}: {e}"));
        assert_eq!(got.as_os_str().as_bytes(), &t[..], "{l}");
        assert_eq!(mtime_ns(&site.join(l)), mtime_ns(&tree.join(l)), "mtime of {l}");
        inodes.push(fs::symlink_metadata(site.join(l)).unwrap().ino());
    }
    // Directories' mtimes, the top's too (sent as `tree/`).
    assert_eq!(mtime_ns(&site.join("d")), mtime_ns(&tree.join("d")));
    assert_eq!(mtime_ns(&site), mtime_ns(&tree));

    // An extraneous file at the receiver goes; the unchanged links stay
    // as they are (the same inodes), the top's mtime is set again after
    // the removal changed it.
    write(&site.join("extra.txt"), b"not in the source");
    let v = good(&send(&d, &[&arg(&tree, true)], &to, &["--delete"]), "second send");
    assert_eq!(deleted(&v), ["extra.txt"], "{v:#}");
    assert!(!site.join("extra.txt").exists());
    for ((l, _), ino) in links.iter().zip(&inodes) {
        assert_eq!(
            fs::symlink_metadata(site.join(l)).unwrap().ino(),
            *ino,
            "{l} recreated"
        );
    }
    assert_eq!(mtime_ns(&site), mtime_ns(&tree));

    // A link whose mtime alone changed keeps its inode and gets the mtime;
    // one whose target changed is replaced.
    set_own_mtime(&tree.join("abs"), 1_650_000_000, 0);
    fs::remove_file(tree.join("dangling")).unwrap();
    std::os::unix::fs::symlink("elsewhere", tree.join("dangling")).unwrap();
    good(&send(&d, &[&arg(&tree, true)], &to, &[]), "third send");
    assert_eq!(fs::symlink_metadata(site.join("abs")).unwrap().ino(), inodes[0]);
    assert_eq!(mtime_ns(&site.join("abs")), 1_650_000_000_000_000_000);
    assert_eq!(
        fs::read_link(site.join("dangling")).unwrap(),
        Path::new("elsewhere")
    );
}

#[test]
fn safe_links_skips_links_that_leave_the_tree_and_is_no_failure() {
    let d = dirs();
    let tree = d.src.join("tree");
    tree_of_links(&tree);
    let server = serve(&d);
    let to = format!("{}:site", server.addr);
    write(&d.dest.join("site/extra.txt"), b"not in the source");
    let out = send(&d, &[&arg(&tree, true)], &to, &["--delete", "--safe-links"]);
    let v = good(&out, "--safe-links");
    assert_eq!(v["sender"]["symlinks_unsafe_skipped"], 2, "{v:#}");
    let named: Vec<&str> = v["sender"]["symlinks_unsafe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(named.len(), 2, "{v:#}");
    for (l, target) in [("abs", "/etc/passwd"), ("d/out", "../../../outside/secret")] {
        let path = tree.join(l);
        assert!(named.contains(&path.to_str().unwrap()), "{l} not listed: {v:#}");
        let line = format!("ignoring unsafe symlink {} -> {target}", path.display());
        assert!(
            out.stderr.contains(&line),
            "{l} not named on stderr: {}",
            out.stderr
        );
    }
    assert_eq!(v["receiver"]["symlinks"], 4, "{v:#}");
    let site = d.dest.join("site");
    assert!(fs::symlink_metadata(site.join("abs")).is_err());
    assert!(fs::symlink_metadata(site.join("d/out")).is_err());
    for l in ["dangling", "long", "ok", "d/up"] {
        assert!(fs::symlink_metadata(site.join(l)).unwrap().is_symlink(), "{l}");
    }
    // Skipped is not failed: --delete ran.
    assert_eq!(deleted(&v), ["extra.txt"], "{v:#}");

    // The summary line says so too.
    let mut cmd = pfs();
    cmd.arg("send")
        .arg(arg(&tree, true))
        .args(["--to", &to, "--progress", "never", "--safe-links", "--cache-dir"])
        .arg(&d.cache);
    let out = run(cmd);
    out.expect_code(0, "--safe-links, human output");
    assert!(
        out.stdout.contains("unsafe symlinks skipped (--safe-links): 2"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_top_directory_gets_its_mtime_in_a_remote_dir_and_at_the_root() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a/f"), b"f");
    set_own_mtime(&tree.join("a"), 1_300_000_000, 5);
    set_own_mtime(&tree, 1_200_000_000, 3);
    let server = serve(&d);
    good(
        &send(&d, &[&arg(&tree, true)], &format!("{}:x/y", server.addr), &[]),
        "into a remote directory",
    );
    assert_eq!(mtime_ns(&d.dest.join("x/y")), 1_200_000_000_000_000_003);
    assert_eq!(mtime_ns(&d.dest.join("x/y/a")), 1_300_000_000_000_000_005);
    good(
        &send(&d, &[&arg(&tree, true)], &server.addr, &[]),
        "into the root",
    );
    assert_eq!(mtime_ns(&d.dest), 1_200_000_000_000_000_003);
    // Sent under its own name (no slash): that is an entry like any other.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:named", server.addr), &[]),
        "under its name",
    );
    assert_eq!(mtime_ns(&d.dest.join("named/tree")), 1_200_000_000_000_000_003);
}

// ---------------------------------------------------------------------------
// content check and --checksum

/// Sets the modification time of `path` to `secs` since the epoch.
fn set_mtime(path: &Path, secs: u64) {
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs)))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

/// Rewrites `path` in place with `data` (same length) and its old mtime.
fn rewrite_keeping_size_and_mtime(path: &Path, data: &[u8]) {
    let before = fs::metadata(path).unwrap();
    assert_eq!(before.len(), data.len() as u64);
    let mtime = before.modified().unwrap();
    fs::write(path, data).unwrap();
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[test]
fn a_content_change_with_the_same_size_and_mtime_is_sent_again() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("version.h"), b"#define VERSION 41\n");
    write(&tree.join("same.txt"), b"unchanged");
    set_mtime(&tree.join("version.h"), 1_600_000_000);
    set_mtime(&tree.join("same.txt"), 1_600_000_000);
    let server = serve(&d);
    good(&send(&d, &[&arg(&tree, false)], &server.addr, &[]), "first send");
    // Release 42 of an archive: one byte differs, size and mtime do not.
    rewrite_keeping_size_and_mtime(&tree.join("version.h"), b"#define VERSION 42\n");
    let v = good(&send(&d, &[&arg(&tree, false)], &server.addr, &[]), "second send");
    assert_eq!(
        fs::read(d.dest.join("tree/version.h")).unwrap(),
        b"#define VERSION 42\n"
    );
    assert_eq!(v["receiver"]["files_written"], 1, "{v:#}");
    assert_eq!(v["receiver"]["files_unchanged"], 1, "{v:#}");
    let mtime = fs::metadata(d.dest.join("tree/version.h")).unwrap().mtime();
    assert_eq!(mtime, 1_600_000_000);
}

#[test]
fn checksum_compares_files_the_receiver_did_not_write() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a.txt"), b"sender's a");
    write(&tree.join("b.txt"), b"same bytes");
    write(&tree.join("c.txt"), b"same, newer");
    for f in ["a.txt", "b.txt"] {
        set_mtime(&tree.join(f), 1_600_000_000);
    }
    set_mtime(&tree.join("c.txt"), 1_700_000_000);
    // The destination got its copies some other way: same sizes and mtimes,
    // a.txt with other bytes, c.txt with the same bytes and an older mtime.
    let dest_tree = d.dest.join("tree");
    write(&dest_tree.join("a.txt"), b"stale a!!!");
    write(&dest_tree.join("b.txt"), b"same bytes");
    write(&dest_tree.join("c.txt"), b"same, newer");
    for f in ["a.txt", "b.txt"] {
        set_mtime(&dest_tree.join(f), 1_600_000_000);
    }
    set_mtime(&dest_tree.join("c.txt"), 1_600_000_000);
    let server = serve(&d);
    // By default, as with rsync, size and mtime decide for files the
    // receiver knows nothing about: a.txt stays as it is.
    let v = good(&send(&d, &[&arg(&tree, false)], &server.addr, &[]), "default");
    assert_eq!(fs::read(dest_tree.join("a.txt")).unwrap(), b"stale a!!!", "{v:#}");
    // --checksum reads both sides: a.txt is rewritten, b.txt left alone,
    // c.txt (same content, other mtime) only gets its mtime.
    set_mtime(&dest_tree.join("c.txt"), 1_600_000_000);
    let v = good(
        &send(&d, &[&arg(&tree, false)], &server.addr, &["--checksum"]),
        "--checksum",
    );
    assert_eq!(fs::read(dest_tree.join("a.txt")).unwrap(), b"sender's a");
    assert_eq!(v["receiver"]["files_written"], 1, "{v:#}");
    assert_eq!(v["receiver"]["files_unchanged"], 1, "{v:#}");
    assert_eq!(v["receiver"]["files_metadata_only"], 1, "{v:#}");
    assert_eq!(
        fs::metadata(dest_tree.join("c.txt")).unwrap().mtime(),
        1_700_000_000
    );
    // The sender read every file again (nothing from its cache).
    let read = |k: &str| v["sender"][k].as_u64().unwrap();
    assert!(read("files_hashed_whole") + read("files_chunked") >= 3, "{v:#}");
}

// ---------------------------------------------------------------------------
// --bwlimit (its pacing is tested on a simulated clock in pfs-session's
// `files::bwlimit`; here: the option end to end, without timing anything)

#[test]
fn bwlimit_sends_everything_and_refuses_what_is_not_a_rate() {
    let d = dirs();
    let tree = d.src.join("tree");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
    write(&tree.join("a.bin"), &data);
    write(&tree.join("small"), b"s");
    let server = serve(&d);
    let v = good(
        &send(&d, &[&arg(&tree, false)], &server.addr, &["--bwlimit", "8M"]),
        "--bwlimit 8M",
    );
    assert_eq!(v["bwlimit_bytes_per_s"], 8 << 20, "{v:#}");
    assert_eq!(fs::read(d.dest.join("tree/a.bin")).unwrap(), data);
    // 0 is no limit, as with rsync.
    let v = good(
        &send(&d, &[&arg(&tree, false)], &server.addr, &["--bwlimit", "0"]),
        "--bwlimit 0",
    );
    assert!(v["bwlimit_bytes_per_s"].is_null(), "{v:#}");
    for bad in ["fast", "1", "10Q"] {
        let out = send(&d, &[&arg(&tree, false)], &server.addr, &["--bwlimit", bad]);
        // Not a rate: a usage error (2); 1 KiB/s: too slow for one chunk (1).
        let want = if bad == "1" { 1 } else { 2 };
        assert_eq!(out.code(), Some(want), "--bwlimit {bad}: {out:?}");
        assert!(out.stderr.contains("--bwlimit"), "{}", out.stderr);
    }
}

// ---------------------------------------------------------------------------
// -H, -o -g, -X, -A

#[test]
fn hard_links_arrive_as_hard_links_with_h() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("a/orig"), b"one inode, three names");
    fs::create_dir_all(tree.join("b")).unwrap();
    fs::hard_link(tree.join("a/orig"), tree.join("b/link1")).unwrap();
    fs::hard_link(tree.join("a/orig"), tree.join("link2")).unwrap();
    write(&tree.join("other"), b"one inode, three names");
    let server = serve(&d);
    let v = good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:h", server.addr), &["-H"]),
        "-H",
    );
    let ino = |p: &str| fs::metadata(d.dest.join("h/tree").join(p)).unwrap().ino();
    assert_eq!(ino("a/orig"), ino("b/link1"));
    assert_eq!(ino("a/orig"), ino("link2"));
    assert_ne!(ino("a/orig"), ino("other"));
    assert_eq!(fs::metadata(d.dest.join("h/tree/a/orig")).unwrap().nlink(), 3);
    assert_eq!(
        fs::read(d.dest.join("h/tree/link2")).unwrap(),
        b"one inode, three names"
    );
    // The links were never read: two files' content crossed (orig, other).
    assert_eq!(v["sender"]["files_chunked"], 2, "{v:#}");
    // Sent again: nothing changes, the links stay.
    let v = good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:h", server.addr), &["-H"]),
        "-H again",
    );
    assert_eq!(v["receiver"]["files_written"], 0, "{v:#}");
    assert_eq!(ino("a/orig"), ino("link2"));
    // Without -H each name is a file of its own, as before.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:plain", server.addr), &[]),
        "no -H",
    );
    let plain = |p: &str| fs::metadata(d.dest.join("plain/tree").join(p)).unwrap().ino();
    assert_ne!(plain("a/orig"), plain("link2"));
}

#[test]
#[ignore = "needs root"]
fn owner_and_group_arrive_when_the_receiver_is_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "needs root: owner and group are applied only by a receiver running as root"
    );
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("f"), b"owned by nobody");
    fs::create_dir_all(tree.join("dir")).unwrap();
    std::os::unix::fs::symlink("f", tree.join("link")).unwrap();
    for p in ["f", "dir", "link"] {
        std::os::unix::fs::lchown(tree.join(p), Some(65534), Some(65534)).unwrap();
    }
    let server = serve(&d);
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:a", server.addr), &["-a"]),
        "-a",
    );
    for p in ["tree/f", "tree/dir", "tree/link"] {
        let m = fs::symlink_metadata(d.dest.join("a").join(p)).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534), "{p}");
    }
    // Giving the file its owner kept the receiver's record of its content:
    // a change that keeps size and mtime is still seen.
    rewrite_keeping_size_and_mtime(&tree.join("f"), b"owned by NOBODY");
    let v = good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:a", server.addr), &["-a"]),
        "-a again",
    );
    assert_eq!(v["receiver"]["files_written"], 1, "{v:#}");
    assert_eq!(fs::read(d.dest.join("a/tree/f")).unwrap(), b"owned by NOBODY");
    // -o alone: the owner, not the group.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:o", server.addr), &["-o"]),
        "-o",
    );
    let m = fs::metadata(d.dest.join("o/tree/f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 0));
    // Without them the receiver's user owns what it writes, as before.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:n", server.addr), &[]),
        "none",
    );
    assert_eq!(fs::metadata(d.dest.join("n/tree/f")).unwrap().uid(), 0);
}

/// Sets the extended attribute `name` of `path`; fails, saying so, if its
/// filesystem refuses it (the tests that call it are ignored unless asked for).
fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    if let Err(e) = rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty()) {
        panic!(
            "needs {name} on this filesystem: {} refuses it ({e})",
            path.display()
        );
    }
}

fn getxattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::lgetxattr(path, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

#[test]
#[ignore = "needs user xattrs on the temporary directory's filesystem"]
fn user_xattrs_arrive_with_x() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("f"), b"f");
    fs::create_dir_all(tree.join("dir")).unwrap();
    set_xattr(&tree.join("f"), "user.mime_type", b"text/plain");
    set_xattr(&tree.join("dir"), "user.note", b"a directory");
    set_xattr(&tree.join("f"), "user.empty", b"");
    let server = serve(&d);
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:x", server.addr), &["-X"]),
        "-X",
    );
    let at = |p: &str| d.dest.join("x/tree").join(p);
    assert_eq!(
        getxattr(&at("f"), "user.mime_type").as_deref(),
        Some(&b"text/plain"[..])
    );
    assert_eq!(getxattr(&at("f"), "user.empty").as_deref(), Some(&b""[..]));
    assert_eq!(
        getxattr(&at("dir"), "user.note").as_deref(),
        Some(&b"a directory"[..])
    );
    // A changed attribute on an unchanged file is applied again.
    set_xattr(&tree.join("f"), "user.mime_type", b"text/markdown");
    let v = good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:x", server.addr), &["-X"]),
        "-X again",
    );
    assert_eq!(v["receiver"]["files_written"], 0, "{v:#}");
    assert_eq!(
        getxattr(&at("f"), "user.mime_type").as_deref(),
        Some(&b"text/markdown"[..])
    );
    // Without -X none travel.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:plain", server.addr), &[]),
        "no -X",
    );
    assert_eq!(getxattr(&d.dest.join("plain/tree/f"), "user.mime_type"), None);
}

/// A POSIX ACL in the kernel's xattr form: owner rw-, user `uid` r--,
/// group r--, mask r--, other ---.
fn acl_with_user(uid: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, uid),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
#[ignore = "needs ACLs on the temporary directory's filesystem"]
fn acls_arrive_with_a() {
    let d = dirs();
    let tree = d.src.join("tree");
    write(&tree.join("f"), b"f");
    let acl = acl_with_user(4242);
    set_xattr(&tree.join("f"), "system.posix_acl_access", &acl);
    let server = serve(&d);
    // A named user arrives only where the receiver applies the sender's
    // owners: it runs as root and the sender sends them (-o -g).
    good(
        &send(
            &d,
            &[&arg(&tree, false)],
            &format!("{}:acl", server.addr),
            &["-A", "-o", "-g"],
        ),
        "-A -o -g",
    );
    let got = getxattr(&d.dest.join("acl/tree/f"), "system.posix_acl_access");
    if rustix::process::geteuid().is_root() {
        assert_eq!(got.as_deref(), Some(&acl[..]), "the ACL (user 4242 r--) arrived");
    } else {
        assert_eq!(got, None, "not root: the named user is dropped");
    }
    // -A alone: the named user is dropped (its mask folds into the group
    // entry: a minimal ACL, which is the mode), and the mode stays 0640.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:a", server.addr), &["-A"]),
        "-A",
    );
    let f = d.dest.join("a/tree/f");
    assert_eq!(getxattr(&f, "system.posix_acl_access"), None);
    assert_eq!(fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
    // -X alone carries user attributes, not ACLs.
    good(
        &send(&d, &[&arg(&tree, false)], &format!("{}:x", server.addr), &["-X"]),
        "-X",
    );
    assert_eq!(
        getxattr(&d.dest.join("x/tree/f"), "system.posix_acl_access"),
        None
    );
}
