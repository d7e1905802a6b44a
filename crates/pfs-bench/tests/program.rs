//! The `pfs-bench` program finds the `pfs` binary it drives, or says how to
//! build it; `--pfs` may stand anywhere on the command line.

use std::process::Command;
use std::sync::Mutex;

/// Held while a test copies an executable or starts a process: a copy still
/// open for writing when another thread forks makes its exec fail (ETXTBSY).
static SPAWN: Mutex<()> = Mutex::new(());

/// A copy of `pfs-bench` alone in a directory, with nothing on PATH.
fn alone() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let exe = dir.path().join("pfs-bench");
    std::fs::copy(env!("CARGO_BIN_EXE_pfs-bench"), &exe).expect("copy pfs-bench");
    (dir, exe)
}

#[test]
fn without_pfs_it_names_the_build_command() {
    let _spawn = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let (dir, exe) = alone();
    let out = Command::new(&exe)
        .arg("exec")
        .env("PATH", dir.path())
        .output()
        .expect("run pfs-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cargo build --release -p pfs-cli"), "{stderr}");
    assert!(stderr.contains("--pfs PATH"), "{stderr}");
}

#[test]
fn a_pfs_path_that_is_not_there_is_an_error() {
    let _spawn = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temporary directory");
    let missing = dir.path().join("no-such-pfs");
    let out = Command::new(env!("CARGO_BIN_EXE_pfs-bench"))
        .args(["--pfs".as_ref(), missing.as_os_str(), "exec".as_ref()])
        .output()
        .expect("run pfs-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no such file"), "{stderr}");
}

#[test]
fn help_lists_the_pfs_option_and_every_study() {
    let _spawn = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_pfs-bench"))
        .arg("--help")
        .output()
        .expect("run pfs-bench --help");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout.contains("Usage: pfs-bench"), "{stdout}");
    for word in [
        "--pfs <PATH>",
        "io-primitives",
        "exec",
        "ipc",
        "files",
        "mount",
        "stream",
        "Examples",
    ] {
        assert!(stdout.contains(word), "pfs-bench --help lacks {word}:\n{stdout}");
    }
}

/// The README's main command builds both binaries and runs this program:
/// one command, on a fresh machine, that prints the table with its baselines.
#[test]
fn the_readme_main_command_builds_and_runs_pfs_bench() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a first sh block");
    let main = block
        .lines()
        .find(|l| l.contains("the main job"))
        .expect("a line marked `the main job`");
    assert!(
        main.starts_with("cargo build --release -p pfs-cli -p pfs-bench && target/release/pfs-bench "),
        "{main}"
    );
    assert!(
        block.lines().any(|l| l.starts_with("cargo test --workspace ")),
        "{block}"
    );
}
