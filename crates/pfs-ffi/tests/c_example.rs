//! The C example (examples/c/blob_info.c) compiles against the committed
//! header, links libpfs_ffi.so and prints what the Rust library sees: the
//! same length, fingerprint and first bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

/// target/<profile>/, where this test binary lives (in its deps/).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// Builds libpfs_ffi.so into this run's target directory: cargo builds
/// only the rlib for a crate's tests.
fn build_the_shared_library() -> PathBuf {
    let profile = profile_dir();
    let target = profile.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "-p", "pfs-ffi", "--lib"])
        .arg("--target-dir")
        .arg(target);
    if profile.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("running cargo");
    assert!(status.success(), "cargo build -p pfs-ffi failed");
    let lib = profile.join("libpfs_ffi.so");
    assert!(lib.exists(), "cargo built no {}", lib.display());
    profile
}

#[test]
#[ignore = "needs a C compiler (cc, or CC=…)"]
fn the_c_example_compiles_runs_and_agrees_with_rust() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = build_the_shared_library();
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("blob_info");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("crates/pfs-ffi/include"))
        .arg(root.join("examples/c/blob_info.c"))
        .arg("-L")
        .arg(&lib)
        .args(["-lpfs_ffi", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (install gcc, or set CC)"));
    assert!(
        built.status.success(),
        "the C example does not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(&exe).env("LD_LIBRARY_PATH", &lib).output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "blob_info failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    let rust = packetfs::blob::open_blob(&packetfs::blob::study_blob(4 << 20, 42, None), true).unwrap();
    let data = rust.blob.as_slice();
    let expected = format!(
        "packetfs {}\nlen {}\nfingerprint {}\nfirst {:02x} {:02x} {:02x} {:02x}\nsize 0: status 1: pfs_blob_open: size must be > 0\n",
        env!("CARGO_PKG_VERSION"),
        4 << 20,
        rust.blob.fingerprint().root_hex(),
        data[0],
        data[1],
        data[2],
        data[3],
    );
    assert_eq!(out, expected);
}
