//! Runs the UDP connection fuzz target's seed corpus (`fuzz/corpus/udp_conn`)
//! through its check on the stable toolchain, so each `cargo test`
//! exercises it without libFuzzer.

#[path = "../../../fuzz/src/udp.rs"]
mod checks;
#[path = "../../../fuzz/src/seeds.rs"]
mod seeds;

#[test]
fn corpus_files_pass_the_fuzz_checks() {
    seeds::run(env!("CARGO_MANIFEST_DIR"), checks::UDP_TARGETS);
}
