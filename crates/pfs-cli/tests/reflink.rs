//! One copy on disk where the filesystem shares blocks: a `pfs serve
//! --dest` on Btrfs and on XFS (loop-mounted images made here) receives a
//! file, then the same file under another name and a copy grown at its
//! end. The copies must arrive byte-exact and take (almost) no new disk
//! space: their blocks are reflinks of the first file's.
//!
//! Needs root (mount) and mkfs.btrfs / mkfs.xfs: ignored unless asked for
//! (`--ignored`; CI runs them as root), failing, saying what is missing,
//! elsewhere. Every child is bounded (see `common`).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{noise, run, Server};

/// A loop-mounted image of `fs`, unmounted (and removed) on drop.
struct Mounted {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// A 1 GiB sparse image of `fs` (mkfs `args`), mounted; fails saying why
/// when this host cannot.
fn mount(fs: &str, args: &[&str]) -> Mounted {
    assert!(
        rustix::process::geteuid().is_root(),
        "needs root: loop-mounting a {fs} image needs root"
    );
    let mkfs = format!("mkfs.{fs}");
    assert!(
        Command::new(&mkfs).arg("-V").output().is_ok(),
        "needs {mkfs}: it is not installed"
    );
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let dir = tempfile::tempdir_in(base).expect("temporary directory");
    let img = dir.path().join("img");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    fs::File::create(&img).unwrap().set_len(1 << 30).unwrap();
    let made = Command::new(&mkfs).args(args).arg(&img).output().expect("mkfs");
    assert!(
        made.status.success(),
        "{mkfs}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mounted = Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(&mnt)
        .output()
        .expect("mount");
    assert!(
        mounted.status.success(),
        "needs loop-mounting a {fs} image: {}",
        String::from_utf8_lossy(&mounted.stderr).trim()
    );
    Mounted { _dir: dir, mnt }
}

/// Bytes used on the filesystem of `p`.
fn used(p: &Path) -> u64 {
    let st = rustix::fs::statvfs(p).expect("statvfs");
    (st.f_blocks - st.f_bfree) * st.f_frsize
}

fn copies_share_blocks(fs_name: &str, mkfs_args: &[&str]) {
    let m = mount(fs_name, mkfs_args);
    let work = tempfile::tempdir().expect("temporary directory");
    let cache = work.path().join("cache");
    let data = noise(48 << 20, 7);
    let mut grown = data.clone();
    grown.extend_from_slice(&noise(1 << 20, 8));
    let sources = [
        ("one", "a.bin", &data),
        ("two", "b.bin", &data),
        ("three", "c.bin", &grown),
    ];
    for (dir, name, bytes) in &sources {
        fs::create_dir_all(work.path().join(dir)).unwrap();
        fs::write(work.path().join(dir).join(name), bytes).unwrap();
    }
    let dest = m.mnt.join("dest");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(["serve", "--json", "--listen", "127.0.0.1:0", "--dest"])
        .arg(&dest);
    let server = Server::spawn(cmd);
    let mut before = 0;
    for (i, (dir, name, bytes)) in sources.iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
        cmd.arg("send")
            .arg(format!("{}/", work.path().join(dir).display()))
            .args([
                "--to",
                &format!("{}:{dir}", server.addr),
                "--json",
                "--progress",
                "never",
            ])
            .arg("--cache-dir")
            .arg(&cache);
        let out = run(cmd);
        out.expect_code(0, dir);
        let v = out.json(dir);
        assert_eq!(v["receiver"]["files_written"], 1, "{dir}: {v:#}");
        assert_eq!(
            &fs::read(dest.join(dir).join(name)).unwrap(),
            *bytes,
            "{dir} byte-exact"
        );
        rustix::fs::sync();
        let now = used(&m.mnt);
        if i > 0 {
            // The appended MiB is new; the 48 shared MiB must not be.
            let grew = now.saturating_sub(before);
            assert!(
                grew < 8 << 20,
                "{fs_name}: {dir} took {grew} bytes of disk: its blocks were written, not shared"
            );
        }
        before = now;
    }
}

#[test]
#[ignore = "needs root and mkfs.btrfs"]
fn copies_share_blocks_on_btrfs() {
    copies_share_blocks("btrfs", &["-q", "-f"]);
}

#[test]
#[ignore = "needs root and mkfs.xfs"]
fn copies_share_blocks_on_xfs() {
    copies_share_blocks("xfs", &["-q", "-f", "-m", "reflink=1"]);
}
