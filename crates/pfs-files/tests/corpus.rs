//! Runs the ACL fuzz target's seed corpus (`fuzz/corpus/acl`) through its
//! check on the stable toolchain, so each `cargo test` exercises it without
//! libFuzzer.

#[path = "../../../fuzz/src/acl.rs"]
mod checks;
#[path = "../../../fuzz/src/seeds.rs"]
mod seeds;

#[test]
fn corpus_files_pass_the_fuzz_checks() {
    seeds::run(env!("CARGO_MANIFEST_DIR"), checks::ACL_TARGETS);
}
