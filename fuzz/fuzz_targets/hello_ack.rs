//! Input: a HELLO_ACK body. A decoded HELLO_ACK re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::hello_ack(data));
