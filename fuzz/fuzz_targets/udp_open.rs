//! Input: `[addr, seconds, datagram…]`, an OPEN at the UDP listener's
//! admission (address token; see `src/udp.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

// The target uses the check, not the list of targets.
#[allow(dead_code)]
#[path = "../src/udp.rs"]
mod udp;

fuzz_target!(|data: &[u8]| udp::open(data));
