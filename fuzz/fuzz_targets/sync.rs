//! Input: first byte selects a sync frame body (PLAN ACK, SYNC_HELLO,
//! SYNC_ACCEPT, INDEX_REQUEST, INDEX, PLAN, FILE, CHUNKS/REPAIR, NAK,
//! SYNC_END report); the rest is that body. Decoding never panics and
//! whatever decodes re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::sync(data));
