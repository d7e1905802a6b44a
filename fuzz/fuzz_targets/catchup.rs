//! Input: first byte selects a blob catch-up body (CATCHUP_BEGIN, REGIONS,
//! HASHES, BLOCKS, END, docs/wire.md §16); the rest is that body. Decoding
//! never panics and whatever decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::catchup(data));
