//! Input: first byte selects a blob session's corrections-plane body (gram
//! NAK, REPAIR, COMPLETE report with its corrections block); the rest is
//! that body. Decoding never panics and whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::corrections(data));
