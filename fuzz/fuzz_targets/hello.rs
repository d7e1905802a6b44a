//! Input: a HELLO body. A decoded HELLO re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::hello(data));
