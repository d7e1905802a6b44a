//! The `pfs` binary is the product, not the benchmark: it depends on the
//! `packetfs` library and never on the harness, so it links no QUIC stack,
//! async runtime, certificate generator or plotting library.

use std::process::Command;
use std::sync::Mutex;

/// Held while a test copies an executable or starts a process: a copy still
/// open for writing when another thread forks makes its exec fail (ETXTBSY).
static SPAWN: Mutex<()> = Mutex::new(());

/// Crates that belong to the harness (`pfs-bench`) and must not reach `pfs`.
const HARNESS_ONLY: [&str; 5] = ["pfs-bench", "quinn", "tokio", "rcgen", "plotters"];

/// The package names in pfs-cli's normal dependency graph (`cargo tree -e normal`).
fn normal_graph() -> Vec<String> {
    let _spawn = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let out = Command::new(cargo)
        .args(["tree", "--offline", "--manifest-path", manifest, "-p", "pfs-cli"])
        .args(["-e", "normal", "--prefix", "none", "--format", "{p}"])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn pfs_links_no_harness_crate() {
    let graph = normal_graph();
    assert!(
        graph.iter().any(|p| p == "packetfs"),
        "pfs-cli builds on packetfs: {graph:?}"
    );
    for name in HARNESS_ONLY {
        assert!(
            !graph.iter().any(|p| p == name),
            "{name} is in pfs-cli's normal dependency graph (`cargo tree -p pfs-cli -e normal -i {name}` shows the path)"
        );
    }
}

#[test]
fn the_manifest_names_no_harness() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).expect("read");
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|s| s.split("\n[").next())
        .expect("a [dependencies] table");
    for name in HARNESS_ONLY {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(name)),
            "pfs-cli's Cargo.toml depends on {name}"
        );
    }
}

/// `pfs bench` runs the `pfs-bench` program; without it, it says how to build it.
#[test]
fn bench_without_the_harness_says_how_to_build_it() {
    let _spawn = SPAWN.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temporary directory");
    let pfs = dir.path().join("pfs");
    std::fs::copy(env!("CARGO_BIN_EXE_pfs"), &pfs).expect("copy pfs");
    let out = Command::new(&pfs)
        .args(["bench", "--json"])
        .env("PATH", dir.path())
        .output()
        .expect("run pfs bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pfs-bench") && stderr.contains("cargo build --release -p pfs-bench"),
        "{stderr}"
    );
}
