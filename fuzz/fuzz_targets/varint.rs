//! Input: bytes starting with a LEB128 varint. A decoded varint is in shortest
//! form and re-encodes to the bytes it used; zigzag round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::varint(data));
