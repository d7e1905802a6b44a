//! `pfs send -i/--itemize-changes`, `-n/--dry-run` listing what would
//! travel, and names with control characters escaped (`\#ooo`) in every
//! human line, end to end against a `pfs serve --dest` on loopback.
//!
//! Every child is bounded (see `common`); each test has its own temporary
//! directory and sender cache.

mod common;

use common::{run, Out, Server};

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// A private working directory: `src/tree`, `dest`, `cache` beneath it.
struct Dirs {
    _tmp: tempfile::TempDir,
    tree: PathBuf,
    dest: PathBuf,
    cache: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let p = tmp.path().to_path_buf();
    let d = Dirs {
        tree: p.join("src/tree"),
        dest: p.join("dest"),
        cache: p.join("cache"),
        _tmp: tmp,
    };
    fs::create_dir_all(&d.tree).expect("mkdir src/tree");
    d
}

/// `pfs serve --listen 127.0.0.1:0 --dest DEST` (a destination index, no store).
fn serve(d: &Dirs, extra: &[&str]) -> Server {
    let mut cmd = pfs();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--dest"])
        .arg(&d.dest)
        .args(extra);
    Server::spawn(cmd)
}

/// `pfs send TREE/ --to ADDR --progress never --cache-dir CACHE EXTRA…`.
fn send(d: &Dirs, addr: &str, extra: &[&str]) -> Out {
    let mut cmd = pfs();
    cmd.arg("send")
        .arg(format!("{}/", d.tree.display()))
        .args(["--to", addr, "--progress", "never", "--cache-dir"])
        .arg(&d.cache)
        .args(extra);
    run(cmd)
}

fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).expect("create parent directory");
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// The lines of `out`'s stdout before its summary line.
fn items(out: &Out) -> Vec<&str> {
    out.stdout
        .lines()
        .take_while(|l| !l.starts_with("sent ") && !l.starts_with("dry run over "))
        .collect()
}

/// Every entry beneath `root` with its content (files) or target (links),
/// but the receiver's own state (`.pfs`: a probe may add index records).
fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in fs::read_dir(&dir).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.file_name() == Some(".pfs".as_ref()) {
                continue;
            }
            let m = fs::symlink_metadata(&p).expect("lstat");
            let what = if m.is_dir() {
                todo.push(p.clone());
                b"dir".to_vec()
            } else if m.is_symlink() {
                fs::read_link(&p)
                    .expect("readlink")
                    .as_os_str()
                    .as_bytes()
                    .to_vec()
            } else {
                fs::read(&p).expect("read")
            };
            out.push((p, what));
        }
    }
    out.sort();
    out
}

#[test]
fn an_itemized_dry_run_lists_what_would_travel_and_changes_nothing() {
    let d = dirs();
    write(&d.tree.join("changed.txt"), b"version one");
    write(&d.tree.join("keep.txt"), b"kept as it is");
    write(&d.tree.join("old.txt"), b"to be deleted");
    write(&d.tree.join("sub/kept.txt"), b"kept too");
    write(&d.tree.join("empty"), b"");
    let server = serve(&d, &[]);
    // A first send: the receiver holds nothing, every entry is new. Later,
    // files it holds (the empty one too) are not listed.
    let first = send(&d, &server.addr, &["-i"]);
    first.expect_code(0, "first send");
    assert_eq!(
        items(&first),
        [
            ">f+++++++++ changed.txt",
            ">f+++++++++ empty",
            ">f+++++++++ keep.txt",
            ">f+++++++++ old.txt",
            "cd+++++++++ sub/",
            ">f+++++++++ sub/kept.txt",
        ],
        "{}",
        first.stdout
    );

    // A changed file (another size), a new file, a new directory, a
    // symlink, and a file gone from the source.
    write(&d.tree.join("changed.txt"), b"version two, longer");
    write(&d.tree.join("new.txt"), b"new");
    fs::create_dir(d.tree.join("newdir")).expect("mkdir newdir");
    std::os::unix::fs::symlink("keep.txt", d.tree.join("link")).expect("symlink");
    fs::remove_file(d.tree.join("old.txt")).expect("rm old.txt");
    let before = snapshot(&d.dest);

    let out = send(&d, &server.addr, &["-n", "-i", "--delete"]);
    out.expect_code(0, "itemized dry run");
    let want = [
        ">f????..... changed.txt",
        "cL?.?...... link -> keep.txt",
        ">f????..... new.txt",
        "?d..??..... newdir/",
        ".d..??..... sub/",
        "*deleting   old.txt",
    ];
    assert_eq!(items(&out), want, "{}", out.stdout);
    assert!(out.stdout.contains("dry run over TCP: "), "{}", out.stdout);
    assert_eq!(snapshot(&d.dest), before, "a dry run changed the destination");

    // Without -i: the names alone, as rsync's -n -v.
    let out = send(&d, &server.addr, &["--dry-run", "--delete"]);
    out.expect_code(0, "dry run");
    assert_eq!(
        items(&out),
        [
            "changed.txt",
            "link -> keep.txt",
            "new.txt",
            "newdir/",
            "sub/",
            "deleting old.txt"
        ],
        "{}",
        out.stdout
    );

    // --json: the same list, as items.
    let out = send(&d, &server.addr, &["-n", "-i", "--delete", "--json"]);
    out.expect_code(0, "dry run --json");
    let v = out.json("dry run --json");
    let got: Vec<(String, String)> = v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {v:#}"))
        .iter()
        .map(|i| {
            (
                i["change"].as_str().unwrap().into(),
                i["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    let paths = ["changed.txt", "link", "new.txt", "newdir", "sub", "old.txt"];
    let changes = want.map(|l| l.split_once(' ').unwrap().0);
    let expect: Vec<(String, String)> = changes
        .iter()
        .zip(paths)
        .map(|(c, p)| (c.to_string(), p.to_string()))
        .collect();
    assert_eq!(got, expect, "{v:#}");
    assert_eq!(v["items"][1]["target"], "keep.txt", "{v:#}");
    assert_eq!(snapshot(&d.dest), before, "a dry run changed the destination");

    // The real send: the same items, then a re-send lists only what the
    // receiver always sets again (directories and the link).
    let out = send(&d, &server.addr, &["-i", "--delete"]);
    out.expect_code(0, "itemized send");
    assert_eq!(items(&out), want, "{}", out.stdout);
    assert!(!d.dest.join("old.txt").exists());
    assert_eq!(
        fs::read(d.dest.join("changed.txt")).unwrap(),
        b"version two, longer"
    );
    let again = send(&d, &server.addr, &["-i", "--delete"]);
    again.expect_code(0, "itemized re-send");
    assert_eq!(
        items(&again),
        [
            "cL?.?...... link -> keep.txt",
            "?d..??..... newdir/",
            ".d..??..... sub/"
        ],
        "{}",
        again.stdout
    );
}

#[test]
fn a_name_with_a_newline_is_escaped_in_every_human_line() {
    let d = dirs();
    let evil = "evil\ndeleting important.txt";
    let shown = r"evil\#012deleting important.txt";
    write(&d.tree.join(evil), b"a name that forges a line");
    write(&d.tree.join("dir/x"), b"x");
    // At the destination: a stale entry with the name (for --delete), and a
    // file where the source has a directory holding one (a failed entry).
    write(&d.dest.join("stale\ndeleting important.txt"), b"stale");
    write(&d.dest.join(format!("dir/{evil}")), b"in the way");
    fs::create_dir_all(d.tree.join(format!("dir/{evil}/inner"))).expect("mkdir");
    // A socket (never sent: the sender warns, naming it).
    let _sock = std::os::unix::net::UnixListener::bind(d.tree.join("sock\ndeleting important.txt"))
        .expect("bind a socket in the tree");
    let server = serve(&d, &[]);

    let forged = |text: &str| text.lines().any(|l| l.starts_with("deleting important.txt"));
    for extra in [&["-n", "--delete"][..], &["-n", "-i", "--delete"]] {
        let out = send(&d, &server.addr, extra);
        assert!(out.stdout.contains(shown), "{extra:?}: {}", out.stdout);
        assert!(
            out.stdout.contains(r"stale\#012deleting important.txt"),
            "{extra:?}: {}",
            out.stdout
        );
        assert!(
            out.stderr.contains(r"sock\#012deleting important.txt: "),
            "{extra:?}: {}",
            out.stderr
        );
        assert!(!forged(&out.stdout) && !forged(&out.stderr), "{extra:?}: {out:?}");
    }
    // JSON keeps the real name.
    let out = send(&d, &server.addr, &["-n", "--json"]);
    let v: Value = out.json("dry run --json");
    let names: Vec<&str> = v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {v:#}"))
        .iter()
        .filter_map(|i| i["path"].as_str())
        .collect();
    assert!(names.contains(&evil), "{v:#}");
    drop(server);

    // A real send with a failed entry: the client's and the server's lines.
    let server = serve(&d, &["--once"]);
    let out = send(&d, &server.addr, &["-i"]);
    assert!(
        out.stdout.contains(&format!(">f????..... {shown}")),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains(&format!("dir/{shown}")), "{}", out.stderr);
    assert!(!forged(&out.stdout) && !forged(&out.stderr), "{out:?}");
    let log = server.finish();
    let logged = format!("{}\n{}", log.stdout, log.stderr);
    assert!(logged.contains(&format!("dir/{shown}")), "{log:?}");
    assert!(!forged(&log.stdout) && !forged(&log.stderr), "{log:?}");
}
