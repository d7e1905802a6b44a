//! Input: bytes for the protected-session handshake decoder (see `src/auth.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/auth.rs"]
mod auth;

fuzz_target!(|data: &[u8]| auth::handshake(data));
