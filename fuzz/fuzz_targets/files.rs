//! Input: first byte selects a files frame body (PLAN ACK, FILES_HELLO,
//! FILES_ACCEPT, INDEX_REQUEST, INDEX, PLAN, FILE, CHUNKS/REPAIR, NAK,
//! FILES_END report, PROBE, PROBE_REPLY, FILE_DROP, DELETE, DELETED,
//! FILE_DONE); the rest is that body. Decoding never panics and
//! whatever decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::files(data));
