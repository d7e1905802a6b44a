//! Input: first byte = desc_count, the rest = an arithmetic descriptor table. A
//! table that decodes must re-encode to the same bytes (shortest-form varints
//! make the encoding unique).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::desc_arithmetic(data));
