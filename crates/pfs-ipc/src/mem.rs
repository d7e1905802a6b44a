//! Shared mappings: the only module of this crate with `unsafe`. Owns the
//! step from a file descriptor (memfd) to typed access — atomics at
//! aligned offsets, byte slices for payload — with every offset
//! bounds-checked here, so the rest of the crate is safe code.
//!
//! Memory in these mappings is also written by another process. Atomic
//! words are accessed only through atomics; payload bytes are handed out as
//! slices under the ring protocol (the producer does not write a record
//! until the consumer has released it). A misbehaving peer can still change
//! bytes under a slice: it then corrupts its own messages, which is the
//! isolation the crate promises, not memory safety of this process's own
//! data.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64};

use memmap2::{MmapOptions, MmapRaw};

use crate::layout;
use crate::ring::RingMem;

/// A shared, read-write mapping of a whole file descriptor.
#[derive(Debug)]
pub struct Mapping {
    map: MmapRaw,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; concurrent access goes
// through atomics or through slices whose exclusivity the ring protocol
// provides (see the module docs). The raw pointer is not tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out atomics and slices.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write, prefaulted.
    pub fn map<F: AsRawFd>(fd: &F, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let map = MmapOptions::new().len(len).populate().map_raw(fd.as_raw_fd())?;
        Ok(Self { map, len })
    }

    /// Asks for transparent huge pages (best effort).
    pub fn advise_huge(&self) -> io::Result<()> {
        self.map.advise(memmap2::Advice::HugePage)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The atomic u64 at `off`. Panics on a misaligned or out-of-bounds
    /// offset (a bug in this crate; peer values are validated before).
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off.checked_add(8).is_some_and(|end| end <= self.len),
            "u64 at {off}"
        );
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned);
        // AtomicU64 has the size and alignment of u64; the mapping lives as
        // long as `&self`.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU64) }
    }

    /// The atomic u32 at `off`.
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off.checked_add(4).is_some_and(|end| end <= self.len),
            "u32 at {off}"
        );
        // SAFETY: as in `u64_at`, for 4 bytes.
        unsafe { &*(self.map.as_mut_ptr().add(off) as *const AtomicU32) }
    }

    fn check(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "range {off}+{len} of {}",
            self.len
        );
    }

    /// `len` bytes at `off`, read-only.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        self.check(off, len);
        // SAFETY: in bounds of a live mapping; see the module docs for
        // why a shared slice over peer-writable memory is used.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(off), len) }
    }

    /// `len` bytes at `off`, writable. Callers hold the ring reservation
    /// (or the blob range) that makes them the only writer in this process.
    #[allow(clippy::mut_from_ref)]
    pub fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        self.check(off, len);
        // SAFETY: in bounds of a live mapping; exclusivity within this
        // process comes from the `&mut` borrow the caller holds on its
        // Sender (loans) or on the endpoint (blob writes).
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(off), len) }
    }

    /// Copies `src` to `off`.
    pub fn write(&self, off: usize, src: &[u8]) {
        self.check(off, src.len());
        // SAFETY: destination in bounds; source is a separate Rust slice,
        // so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_mut_ptr().add(off), src.len()) }
    }
}

/// One ring inside a mapped region: its control page and data area.
#[derive(Debug, Clone, Copy)]
pub struct ShmRing<'a> {
    map: &'a Mapping,
    control: usize,
    data: usize,
    cap: usize,
}

impl<'a> ShmRing<'a> {
    /// Ring `index` (0 = client to server, 1 = server to client) of a
    /// region whose rings have `cap` data bytes each.
    pub fn new(map: &'a Mapping, index: usize, cap: usize) -> Self {
        let control = layout::ring_offset(index, cap);
        assert!(
            control + layout::CONTROL_BYTES + cap <= map.len(),
            "ring {index} outside region"
        );
        Self {
            map,
            control,
            data: control + layout::CONTROL_BYTES,
            cap,
        }
    }

    /// Payload bytes at data offset `off`.
    pub fn payload(&self, off: usize, len: usize) -> &'a [u8] {
        assert!(off + len <= self.cap);
        self.map.bytes(self.data + off, len)
    }

    /// Writable payload bytes at data offset `off` (a reserved slot).
    #[allow(clippy::mut_from_ref)]
    pub fn payload_mut(&self, off: usize, len: usize) -> &'a mut [u8] {
        assert!(off + len <= self.cap);
        self.map.bytes_mut(self.data + off, len)
    }

    /// The consumer's futex word, borrowed from the mapping.
    pub fn consumer_sleep_word(&self) -> &'a AtomicU32 {
        self.map.u32_at(self.control + layout::CONSUMER_SLEEP)
    }

    /// The producer's futex word, borrowed from the mapping.
    pub fn producer_sleep_word(&self) -> &'a AtomicU32 {
        self.map.u32_at(self.control + layout::PRODUCER_SLEEP)
    }
}

impl RingMem for ShmRing<'_> {
    #[inline]
    fn cap(&self) -> usize {
        self.cap
    }
    #[inline]
    fn tag(&self, off: usize) -> &AtomicU64 {
        self.map.u64_at(self.data + off)
    }
    #[inline]
    fn meta(&self, off: usize) -> &AtomicU64 {
        self.map.u64_at(self.data + off + 8)
    }
    #[inline]
    fn tail(&self) -> &AtomicU64 {
        self.map.u64_at(self.control + layout::TAIL)
    }
    #[inline]
    fn closed(&self) -> &AtomicU32 {
        self.map.u32_at(self.control + layout::CLOSED)
    }
    #[inline]
    fn consumer_sleep(&self) -> &AtomicU32 {
        self.map.u32_at(self.control + layout::CONSUMER_SLEEP)
    }
    #[inline]
    fn producer_sleep(&self) -> &AtomicU32 {
        self.map.u32_at(self.control + layout::PRODUCER_SLEEP)
    }
}
