//! Where things live in the shared region. The region holds two rings,
//! client→server then server→client; each is a 4 KiB control page followed
//! by its data area. Words written by different sides sit on different
//! 128-byte blocks (two cache lines: the adjacent-line prefetcher pulls
//! pairs), so the producer's and consumer's writes never share a line.

/// Bytes of a ring's control page.
pub const CONTROL_BYTES: usize = 4096;
/// `closed` flag (producer writes).
pub const CLOSED: usize = 0;
/// Consumer's released position (consumer writes).
pub const TAIL: usize = 128;
/// Consumer's futex word (consumer sets, producer clears).
pub const CONSUMER_SLEEP: usize = 256;
/// Producer's futex word (producer sets, consumer clears).
pub const PRODUCER_SLEEP: usize = 384;

/// Smallest ring data area.
pub const MIN_RING: usize = 4096;
/// Largest ring data area.
pub const MAX_RING: usize = 1 << 30;

/// Ring index of the client→server direction.
pub const CLIENT_TO_SERVER: usize = 0;
/// Ring index of the server→client direction.
pub const SERVER_TO_CLIENT: usize = 1;

/// Offset of ring `index`'s control page.
pub const fn ring_offset(index: usize, cap: usize) -> usize {
    index * (CONTROL_BYTES + cap)
}

/// Bytes of a region whose rings have `cap` data bytes each.
pub const fn region_len(cap: usize) -> usize {
    2 * (CONTROL_BYTES + cap)
}
