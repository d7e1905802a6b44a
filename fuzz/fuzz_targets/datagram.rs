//! Input: one UDP datagram of the datagram transport (docs/wire.md §14).
//! Decoding never panics and whatever decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::datagram(data));
