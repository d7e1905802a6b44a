//! Input: a mode and a POSIX ACL attribute from a peer, fed to the
//! receiver's ACL parser and clipper (see `src/acl.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

// The target uses the check, not the list of targets.
#[allow(dead_code)]
#[path = "../src/acl.rs"]
mod acl;

fuzz_target!(|data: &[u8]| acl::acl(data));
