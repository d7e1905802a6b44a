//! Input: a selector byte, then a streaming-session body (STREAM_HELLO,
//! STREAM_ACCEPT, APPLIED or SGRAM). Whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::stream(data));
