//! Input: first byte selects a mount frame body (MOUNT_HELLO,
//! MOUNT_ACCEPT, LIST, RECIPE_ASK, RECIPE, FETCH, DATA); the rest is that
//! body. Decoding never panics and whatever decodes re-encodes to the same
//! bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::mount(data));
