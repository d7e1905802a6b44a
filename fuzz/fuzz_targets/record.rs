//! Input: bytes for the protected-session record decoder (see `src/auth.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the checks.
#[allow(dead_code)]
#[path = "../src/auth.rs"]
mod auth;

fuzz_target!(|data: &[u8]| auth::record(data));
