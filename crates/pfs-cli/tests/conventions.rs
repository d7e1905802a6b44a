//! rsync's conventions in `pfs send PATH… --to ADDR[:DIR]`, end to end
//! against a `pfs serve --store --dest` on loopback: a trailing slash sends
//! a directory's contents, `--delete`, the content check when size and
//! mtime match, `--checksum`, hard links, owner and group, xattrs and ACLs.
//!
//! Every child is bounded (see `common`): senders run within
//! `common::CMD_TIMEOUT`, servers are killed on drop, every wait on a
//! server event has a deadline. Each test has its own temporary directory
//! and sender cache.

mod common;

use common::{run, Out, Server};

use std::fs;
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
