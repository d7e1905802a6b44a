//! Runs the protected-session seed corpus (`fuzz/corpus/handshake`,
//! `fuzz/corpus/record`) through the fuzz targets' checks on the stable
//! toolchain, so each `cargo test` exercises them without libFuzzer.

#[path = "../../../fuzz/src/auth.rs"]
mod checks;
#[path = "../../../fuzz/src/seeds.rs"]
mod seeds;

#[test]
fn corpus_files_pass_the_fuzz_checks() {
    seeds::run(env!("CARGO_MANIFEST_DIR"), checks::AUTH_TARGETS);
}
