//! Input: bytes at the start of a stream. FrameHeader::parse and Frame::parse;
//! a decoded header re-encodes to its 16 bytes; a whole frame's body goes to
//! the decoder for its type.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pfs_wire_fuzz::frame_header(data));
