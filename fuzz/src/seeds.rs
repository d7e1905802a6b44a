//! Runs fuzz targets' seed corpora through their checks on the stable
//! toolchain. Included by path (`#[path]`) from the `tests/corpus.rs` of
//! each crate whose checks live beside the fuzz targets (pfs-auth,
//! pfs-files, pfs-transport), so every `cargo test` exercises the seeds
//! without libFuzzer; not a module of the fuzz crate itself.

use std::fs;
use std::panic;
use std::path::Path;

/// A fuzz target's check: panics on what it finds wrong.
type Check = fn(&[u8]);

/// Runs every seed file of each target in `targets` (its directory under
/// `fuzz/corpus`, beside `manifest_dir`'s crate) through the target's
/// check; panics naming every file whose check panicked.
pub fn run(manifest_dir: &str, targets: &[(&str, Check)]) {
    let root = Path::new(manifest_dir).join("../../fuzz/corpus");
    let mut failures = Vec::new();
    for &(target, check) in targets {
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
