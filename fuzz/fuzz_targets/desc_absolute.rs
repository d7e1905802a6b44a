//! Input: first byte = desc_count, the rest = an absolute descriptor table.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::desc_absolute(data));
