//! Input: datagrams from a hostile peer, some tagged with the peer's real
//! key, fed to a UDP connection core with datagram keys (see `src/udp.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

// The target uses the check, not the list of targets.
#[allow(dead_code)]
#[path = "../src/udp.rs"]
mod udp;

fuzz_target!(|data: &[u8]| udp::tagged(data));
