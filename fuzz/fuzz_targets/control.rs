//! Input: a COMPLETE or ERROR body, tried as sender summary, receiver report
//! and ERROR; each that decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::control(data));
