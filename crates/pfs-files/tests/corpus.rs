//! Runs the ACL fuzz target's seed corpus (`fuzz/corpus/acl`) through its
//! check on the stable toolchain, so each `cargo test` exercises it without
//! libFuzzer.

use std::fs;
use std::panic;
use std::path::Path;

#[path = "../../../fuzz/src/acl.rs"]
mod checks;

#[test]
fn corpus_files_pass_the_fuzz_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut failures = Vec::new();
    for &(target, check) in checks::ACL_TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no seed files in {}", dir.display());
        for f in files {
            let data = fs::read(&f).unwrap();
            if panic::catch_unwind(|| check(&data)).is_err() {
                failures.push(f.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "corpus files failed: {failures:#?}");
}
