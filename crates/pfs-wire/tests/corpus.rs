//! Runs every file of the fuzz seed corpus (`fuzz/corpus/<target>/`)
//! through the same checks as the fuzz targets, on the stable toolchain, so
//! that each `cargo test` exercises the corpus without nightly or libFuzzer.
//! The checks assert that decoding does not panic and that whatever decodes
//! re-encodes to the same bytes.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

// The fuzz crate is its own workspace (it needs nightly), so its checks are
// included by path rather than as a dependency.
#[path = "../../../fuzz/src/lib.rs"]
mod checks;

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_directory_has_a_target() {
    // The protected-session targets' checks live in fuzz/src/auth.rs and
    // run in crates/pfs-auth/tests/corpus.rs; the UDP connection's and
    // admission's in fuzz/src/udp.rs, run in crates/pfs-transport/tests/corpus.rs;
    // the ACL parser's in fuzz/src/acl.rs, run in crates/pfs-files/tests/corpus.rs.
    let mut known: Vec<&str> = checks::TARGETS.iter().map(|(name, _)| *name).collect();
    known.extend(["handshake", "record", "udp_conn", "udp_open", "udp_tagged", "acl"]);
    for entry in fs::read_dir(corpus_root()).expect("fuzz/corpus exists") {
        let entry = entry.expect("directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            known.contains(&name.as_str()),
            "fuzz/corpus/{name} has no fuzz target"
        );
    }
}

#[test]
fn corpus_files_pass_the_fuzz_checks() {
    let mut failures = Vec::new();
    let mut total = 0;
    for &(target, check) in checks::TARGETS {
        let dir = corpus_root().join(target);
        let files = files_in(&dir);
        assert!(!files.is_empty(), "no seed files in {}", dir.display());
        for file in files {
            let data = fs::read(&file).expect("read corpus file");
            total += 1;
            if panic::catch_unwind(|| check(&data)).is_err() {
                failures.push(format!("{target}: {}", file.display()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} corpus files failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
