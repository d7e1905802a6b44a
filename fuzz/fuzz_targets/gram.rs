//! Input: a GRAM frame body. Gram::parse, then every descriptor of the table; a
//! fully decoded table re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::gram(data));
