//! The single-producer/single-consumer record ring: positions, record
//! headers, space accounting and the validation of everything read from
//! shared memory. Generic over [`RingMem`] so that the same code runs on a
//! shared mapping in production and on a loom model in `--cfg loom` tests.
//!
//! Layout of one ring (offsets inside its data area of `cap` bytes, a power
//! of two): records start on [`ALIGN`]-byte boundaries and never straddle
//! the end of the area; a PAD record fills the rest of the area when the
//! next record does not fit. Each record starts with a 16-byte header:
//!
//! ```text
//! word 0  tag   = position ^ key   (u64; written last, with Release)
//! word 1  meta  = kind << 32 | len (u64)
//! bytes 16..    payload (len bytes)
//! ```
//!
//! `position` is the record's byte position in the infinite stream (never
//! wraps in practice: 2^64 bytes), `key` a random per-ring secret exchanged
//! over the rendezvous socket. The consumer spins on the tag of the record
//! it expects next, so a message costs one cache-line transfer: no separate
//! head index to poll. A tag is only valid for one position of one lap, and
//! stale bytes from earlier laps (headers or payload) match it with
//! probability 2^-64 thanks to the key.
//!
//! The consumer publishes how far it has released in `tail`, on its own
//! cache line; the producer reads it only when its cached copy says the ring
//! is full. Every value read from the peer — tags, meta words, `tail` — is
//! checked before use: a corrupt value is a [`RingError`], never an
//! out-of-bounds access or an endless loop.

use std::fmt;

use crate::atomics::{fence, AtomicU32, AtomicU64, Ordering};

/// Record start alignment: one cache line, so a small message and its
/// header arrive in one transfer.
pub const ALIGN: usize = 64;
/// Bytes of a record header.
pub const HEADER: usize = 16;

/// Kinds of record.
pub const KIND_DATA: u32 = 1;
/// A blob reference: 16 bytes of payload, `(offset: u64, len: u64)`.
pub const KIND_REF: u32 = 2;
/// Filler to the end of the data area.
pub const KIND_PAD: u32 = 3;

/// Shared words and data area of one ring. Offsets passed in are always
/// multiples of 8 and inside the data area; implementations may assert it.
pub trait RingMem {
    /// Size of the data area in bytes (a power of two, multiple of [`ALIGN`]).
    fn cap(&self) -> usize;
    /// The tag word of the record starting at `off`.
    fn tag(&self, off: usize) -> &AtomicU64;
    /// The meta word of the record starting at `off`.
    fn meta(&self, off: usize) -> &AtomicU64;
    /// Consumer's released position.
    fn tail(&self) -> &AtomicU64;
    /// Nonzero once the producer has closed the ring.
    fn closed(&self) -> &AtomicU32;
    /// Futex word: 1 while the consumer sleeps waiting for data.
    fn consumer_sleep(&self) -> &AtomicU32;
    /// Futex word: 1 while the producer sleeps waiting for space.
    fn producer_sleep(&self) -> &AtomicU32;
}

/// A value read from shared memory that no correct peer would write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The consumer's released position is behind its previous value or
    /// ahead of what was produced.
    BadTail {
        /// Value read.
        tail: u64,
        /// Our produced position.
        head: u64,
        /// Last valid value.
        previous: u64,
    },
    /// A record header names an unknown kind.
    BadKind {
        /// Record position.
        pos: u64,
        /// Kind read.
        kind: u32,
    },
    /// A record's length runs past the end of the data area, or a PAD does
    /// not end exactly there, or a reference record is not 16 bytes.
    BadLength {
        /// Record position.
        pos: u64,
        /// Length read.
        len: u32,
        /// Bytes left to the end of the area.
        room: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadTail { tail, head, previous } => write!(
                f,
                "peer wrote an impossible consumer index {tail} (produced up to {head}, previous {previous})"
            ),
            Self::BadKind { pos, kind } => write!(f, "record at position {pos} has unknown kind {kind}"),
            Self::BadLength { pos, len, room } => write!(
                f,
                "record at position {pos} claims {len} bytes but only {room} fit before the end of the ring"
            ),
        }
    }
}

impl std::error::Error for RingError {}

const fn align_up(n: usize) -> usize {
    (n + ALIGN - 1) & !(ALIGN - 1)
}

/// Largest payload a ring of `cap` bytes carries in one record. Half the
/// ring, so a record always fits once the consumer has caught up.
pub const fn max_payload(cap: usize) -> usize {
    cap / 2 - HEADER
}

/// Space the producer has claimed for one record, not yet published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Stream position of the record.
    pub pos: u64,
    /// Offset of the payload in the data area.
    pub payload_off: usize,
    /// Payload length.
    pub len: usize,
}

/// Producer side state (private to the producing process).
#[derive(Debug)]
pub struct Producer {
    head: u64,
    cached_tail: u64,
    key: u64,
    cap: usize,
}

impl Producer {
    /// A producer for a fresh ring of `cap` bytes with tag key `key`.
    pub fn new(cap: usize, key: u64) -> Self {
        assert!(cap.is_power_of_two() && cap >= 2 * ALIGN, "ring capacity {cap}");
        Self {
            head: 0,
            cached_tail: 0,
            key,
            cap,
        }
    }

    /// Position the next record will take.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Largest payload of one record.
    pub fn max_payload(&self) -> usize {
        max_payload(self.cap)
    }

    /// Reloads the consumer's released position, validating it.
    fn refresh_tail<M: RingMem>(&mut self, mem: &M) -> Result<(), RingError> {
        let tail = mem.tail().load(Ordering::Acquire);
        if tail < self.cached_tail || tail > self.head {
            return Err(RingError::BadTail {
                tail,
                head: self.head,
                previous: self.cached_tail,
            });
        }
        self.cached_tail = tail;
        Ok(())
    }

    fn free(&self) -> usize {
        self.cap - (self.head - self.cached_tail) as usize
    }

    /// Claims room for a record of `len` payload bytes. `Ok(None)`: not
    /// enough room until the consumer releases more. May publish a PAD
    /// record to skip the end of the area. `len` must be at most
    /// [`Producer::max_payload`].
    #[inline]
    pub fn reserve<M: RingMem>(&mut self, mem: &M, len: usize) -> Result<Option<Slot>, RingError> {
        debug_assert!(len <= self.max_payload());
        let rec = align_up(HEADER + len);
        loop {
            let off = (self.head as usize) & (self.cap - 1);
            let room = self.cap - off;
            let need = if rec <= room { rec } else { room };
            if need > self.free() {
                self.refresh_tail(mem)?;
                if need > self.free() {
                    return Ok(None);
                }
            }
            if rec <= room {
                return Ok(Some(Slot {
                    pos: self.head,
                    payload_off: off + HEADER,
                    len,
                }));
            }
            // Does not fit before the end: pad to the end, retry at offset 0.
            self.write_header(mem, off, KIND_PAD, room as u32);
            self.head += room as u64;
        }
    }

    #[inline]
    fn write_header<M: RingMem>(&self, mem: &M, off: usize, kind: u32, len: u32) {
        mem.meta(off)
            .store((u64::from(kind) << 32) | u64::from(len), Ordering::Relaxed);
        // Release: payload and meta become visible no later than the tag.
        mem.tag(off).store(self.head ^ self.key, Ordering::Release);
    }

    /// Publishes a reserved slot whose payload has been written.
    #[inline]
    pub fn publish<M: RingMem>(&mut self, mem: &M, slot: Slot, kind: u32) {
        debug_assert_eq!(slot.pos, self.head, "slots are published in order");
        let off = slot.payload_off - HEADER;
        self.write_header(mem, off, kind, slot.len as u32);
        self.head += align_up(HEADER + slot.len) as u64;
    }

    /// After publishing: true if the consumer announced it sleeps and must
    /// be woken. Dekker pattern with [`Consumer::announce_sleep`]: tag store
    /// then fence then flag load here, flag store then fence then tag load
    /// there, so at least one side sees the other.
    #[inline]
    pub fn consumer_needs_wake<M: RingMem>(&self, mem: &M) -> bool {
        fence(Ordering::SeqCst);
        mem.consumer_sleep().load(Ordering::Relaxed) != 0
    }

    /// Announces that the producer is about to sleep waiting for space;
    /// returns true if space appeared meanwhile (then do not sleep).
    pub fn announce_sleep<M: RingMem>(&mut self, mem: &M, len: usize) -> Result<bool, RingError> {
        mem.producer_sleep().store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let rec = align_up(HEADER + len);
        let off = (self.head as usize) & (self.cap - 1);
        let need = rec.min(self.cap - off);
        self.refresh_tail(mem)?;
        Ok(need <= self.free())
    }

    /// Marks the ring closed: the consumer reads what was published, then
    /// end-of-stream.
    pub fn close<M: RingMem>(&self, mem: &M) {
        mem.closed().store(1, Ordering::Release);
    }
}

/// A published record the consumer is looking at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Stream position.
    pub pos: u64,
    /// [`KIND_DATA`] or [`KIND_REF`].
    pub kind: u32,
    /// Offset of the payload in the data area.
    pub payload_off: usize,
    /// Payload length.
    pub len: usize,
}

impl Record {
    fn next(&self) -> u64 {
        self.pos + align_up(HEADER + self.len) as u64
    }
}

/// Consumer side state (private to the consuming process).
///
/// Released space is published to the producer lazily — every eighth of
/// the ring, and whenever the consumer finds the ring empty — so that a
/// producer polling for space does not pull the `tail` line away on every
/// message.
#[derive(Debug)]
pub struct Consumer {
    pos: u64,
    published: u64,
    key: u64,
    cap: usize,
}

impl Consumer {
    /// A consumer for a fresh ring of `cap` bytes with tag key `key`.
    pub fn new(cap: usize, key: u64) -> Self {
        assert!(cap.is_power_of_two() && cap >= 2 * ALIGN, "ring capacity {cap}");
        Self {
            pos: 0,
            published: 0,
            key,
            cap,
        }
    }

    /// Position of the next record.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Position last published to the producer.
    pub fn published(&self) -> u64 {
        self.published
    }

    /// The next published record, if any. Skips PAD records (releasing
    /// them). The record stays in the ring until [`Consumer::release`].
    #[inline]
    pub fn peek<M: RingMem>(&mut self, mem: &M) -> Result<Option<Record>, RingError> {
        loop {
            let off = (self.pos as usize) & (self.cap - 1);
            if mem.tag(off).load(Ordering::Acquire) != self.pos ^ self.key {
                // Caught up: give everything back before anyone waits.
                self.publish(mem);
                return Ok(None);
            }
            let meta = mem.meta(off).load(Ordering::Relaxed);
            let kind = (meta >> 32) as u32;
            let len = meta as u32;
            let room = self.cap - off;
            match kind {
                KIND_PAD => {
                    if len as usize != room {
                        return Err(RingError::BadLength {
                            pos: self.pos,
                            len,
                            room,
                        });
                    }
                    self.pos += room as u64;
                }
                KIND_DATA | KIND_REF => {
                    let fits = HEADER + len as usize <= room && len as usize <= max_payload(self.cap);
                    if !fits || (kind == KIND_REF && len != 16) {
                        return Err(RingError::BadLength {
                            pos: self.pos,
                            len,
                            room,
                        });
                    }
                    return Ok(Some(Record {
                        pos: self.pos,
                        kind,
                        payload_off: off + HEADER,
                        len: len as usize,
                    }));
                }
                _ => return Err(RingError::BadKind { pos: self.pos, kind }),
            }
        }
    }

    /// Gives a record's space back. Returns true if released space was
    /// published to the producer now (then check [`Consumer::producer_needs_wake`]).
    #[inline]
    pub fn release<M: RingMem>(&mut self, mem: &M, rec: Record) -> bool {
        debug_assert_eq!(rec.pos, self.pos, "records are released in order");
        self.pos = rec.next();
        if self.pos - self.published >= (self.cap / 8) as u64 {
            self.publish(mem)
        } else {
            false
        }
    }

    /// Publishes every released byte to the producer; true if there was any.
    #[inline]
    pub fn publish<M: RingMem>(&mut self, mem: &M) -> bool {
        if self.published == self.pos {
            return false;
        }
        self.published = self.pos;
        mem.tail().store(self.pos, Ordering::Release);
        true
    }

    /// After releasing: true if the producer announced it sleeps waiting
    /// for space and must be woken.
    #[inline]
    pub fn producer_needs_wake<M: RingMem>(&self, mem: &M) -> bool {
        fence(Ordering::SeqCst);
        mem.producer_sleep().load(Ordering::Relaxed) != 0
    }

    /// Announces that the consumer is about to sleep; returns true if a
    /// record (or close) appeared meanwhile (then do not sleep).
    pub fn announce_sleep<M: RingMem>(&self, mem: &M) -> bool {
        mem.consumer_sleep().store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let off = (self.pos as usize) & (self.cap - 1);
        mem.tag(off).load(Ordering::Relaxed) == self.pos ^ self.key
            || mem.closed().load(Ordering::Relaxed) != 0
    }

    /// True once the producer closed the ring. Check after [`Consumer::peek`]
    /// returned `None`, then peek once more: records published before the
    /// close are visible by then.
    pub fn is_closed<M: RingMem>(&self, mem: &M) -> bool {
        mem.closed().load(Ordering::Acquire) != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    use crate::test_ring::WordRing as HeapRing;

    #[test]
    fn records_wrap_with_pad_and_fill_exactly() {
        let cap = 1024;
        let mem = HeapRing::new(cap);
        let mut p = Producer::new(cap, 0xfeed);
        let mut c = Consumer::new(cap, 0xfeed);
        let mut sent = Vec::new();
        let mut got = Vec::new();
        for round in 0..200usize {
            let len = (round * 37) % (max_payload(cap) + 1);
            loop {
                match p.reserve(&mem, len).unwrap() {
                    Some(slot) => {
                        p.publish(&mem, slot, KIND_DATA);
                        sent.push((slot.pos, len));
                        break;
                    }
                    None => {
                        // Drain: the consumer publishes its tail once it finds the ring empty.
                        while let Some(r) = c.peek(&mem).unwrap() {
                            got.push((r.pos, r.len));
                            c.release(&mem, r);
                        }
                    }
                }
            }
        }
        while let Some(r) = c.peek(&mem).unwrap() {
            got.push((r.pos, r.len));
            c.release(&mem, r);
        }
        assert_eq!(sent, got);
        assert!(p.head() > 20 * cap as u64, "wrapped many times");
    }

    #[test]
    fn full_ring_is_reported_not_overwritten() {
        let cap = 256;
        let mem = HeapRing::new(cap);
        let mut p = Producer::new(cap, 1);
        let mut published = 0;
        while let Some(slot) = p.reserve(&mem, 8).unwrap() {
            p.publish(&mem, slot, KIND_DATA);
            published += 1;
        }
        assert_eq!(published, cap / ALIGN);
        let mut c = Consumer::new(cap, 1);
        for _ in 0..published {
            let r = c.peek(&mem).unwrap().unwrap();
            c.release(&mem, r);
        }
        assert_eq!(c.peek(&mem).unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error() {
        let cap = 256;
        let mem = HeapRing::new(cap);
        let mut c = Consumer::new(cap, 7);
        // A header with the right tag and an absurd length.
        mem.tag(0).store(7, Ordering::Relaxed);
        mem.meta(0)
            .store((u64::from(KIND_DATA) << 32) | 4000, Ordering::Relaxed);
        assert!(matches!(c.peek(&mem), Err(RingError::BadLength { .. })));
        mem.meta(0).store((99u64 << 32) | 4, Ordering::Relaxed);
        assert!(matches!(c.peek(&mem), Err(RingError::BadKind { kind: 99, .. })));
        mem.meta(0)
            .store((u64::from(KIND_PAD) << 32) | 64, Ordering::Relaxed);
        assert!(matches!(c.peek(&mem), Err(RingError::BadLength { .. })));
        mem.meta(0)
            .store((u64::from(KIND_REF) << 32) | 8, Ordering::Relaxed);
        assert!(matches!(c.peek(&mem), Err(RingError::BadLength { .. })));
        // A consumer index ahead of what was produced.
        let mut p = Producer::new(cap, 7);
        for _ in 0..cap / ALIGN {
            let s = p.reserve(&mem, 8).unwrap().unwrap();
            p.publish(&mem, s, KIND_DATA);
        }
        mem.tail().store(u64::MAX, Ordering::Relaxed);
        assert!(matches!(p.reserve(&mem, 8), Err(RingError::BadTail { .. })));
    }

    #[test]
    fn stale_tags_from_an_earlier_lap_are_not_records() {
        let cap = 256;
        let mem = HeapRing::new(cap);
        let mut p = Producer::new(cap, 3);
        let mut c = Consumer::new(cap, 3);
        for _ in 0..cap / ALIGN {
            let s = p.reserve(&mem, 8).unwrap().unwrap();
            p.publish(&mem, s, KIND_DATA);
            let r = c.peek(&mem).unwrap().unwrap();
            c.release(&mem, r);
        }
        // One full lap consumed: offset 0 still holds the lap-0 header.
        assert_eq!(c.peek(&mem).unwrap(), None);
    }

    #[test]
    fn threads_exchange_in_order() {
        let cap = 4096;
        let mem = HeapRing::new(cap);
        let n = if cfg!(miri) { 300 } else { 100_000 };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut p = Producer::new(cap, 9);
                for i in 0..n as u64 {
                    let len = 8 + (i as usize % 5) * 40;
                    let slot = loop {
                        if let Some(slot) = p.reserve(&mem, len).unwrap() {
                            break slot;
                        }
                        std::hint::spin_loop();
                    };
                    // Payload: the sequence number in the first word.
                    mem.words[slot.payload_off / 8].store(i, Ordering::Relaxed);
                    p.publish(&mem, slot, KIND_DATA);
                }
            });
            let mut c = Consumer::new(cap, 9);
            for i in 0..n as u64 {
                let r = loop {
                    if let Some(r) = c.peek(&mem).unwrap() {
                        break r;
                    }
                    std::hint::spin_loop();
                };
                assert_eq!(r.len, 8 + (i as usize % 5) * 40);
                assert_eq!(mem.words[r.payload_off / 8].load(Ordering::Relaxed), i);
                c.release(&mem, r);
            }
        });
    }
}
