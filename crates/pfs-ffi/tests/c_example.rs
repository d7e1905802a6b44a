//! The C examples compile against the committed header and link
//! libpfs_ffi.so: examples/c/blob_info.c prints what the Rust library sees
//! (the same length, fingerprint and first bytes); examples/c/stream_count.c
//! streams messages, references and writes between a publisher and a
//! subscriber thread over TCP loopback and checks every byte.

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

/// Compiles examples/c/`name`.c into `dir`, linked with libpfs_ffi.so in `lib`.
fn compile(name: &str, lib: &Path, dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-pthread", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("crates/pfs-ffi/include"))
        .arg(root.join(format!("examples/c/{name}.c")))
        .arg("-L")
        .arg(lib)
        .args(["-lpfs_ffi", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (install gcc, or set CC)"));
    assert!(
        built.status.success(),
        "the C example {name}.c does not compile:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    exe
}

#[test]
#[ignore = "needs a C compiler (cc, or CC=…)"]
fn the_c_example_compiles_runs_and_agrees_with_rust() {
    let lib = build_the_shared_library();
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("blob_info", &lib, dir.path());
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

#[test]
#[ignore = "needs a C compiler (cc, or CC=…)"]
fn the_c_streaming_example_delivers_every_entry_byte_exact() {
    let lib = build_the_shared_library();
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("stream_count", &lib, dir.path());
    let run = Command::new(&exe).env("LD_LIBRARY_PATH", &lib).output().unwrap();
    assert!(
        run.status.success(),
        "stream_count failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // 200 grams of a message ("record N"), a 512-byte reference and a
    // 256-byte write: 1,890 + 102,400 + 51,200 bytes.
    let expected = "outside: status 1: pfs_publication_offer: cannot publish this gram: reference of 16 bytes at \
                    4194304 reaches outside the 4194304-byte blob\n\
                    published 200 grams, 600 entries, applied 200, digests matched 1\n\
                    subscribed 200 grams in order yes, 200 messages, 200 references, 200 writes, 155490 bytes\n\
                    checksums equal: yes\n\
                    fingerprints equal: yes\n";
    assert_eq!(String::from_utf8_lossy(&run.stdout), expected);
}
