//! Built-in pCPU kernels: what a receiver runs over the bytes a descriptor
//! schedule references.
//!
//! # Chunking
//! A schedule is executed as fixed **chunks** of [`CHUNK_DESCS`] descriptors
//! in schedule order (the last chunk may be shorter), independent of the
//! number of pThreads. For each chunk the executor starts [`Kernel::acc`],
//! feeds every descriptor of the chunk in order ([`Kernel::update`], or
//! [`Kernel::update_mut`] for [`in_place`](KernelId::in_place) kernels, or
//! [`Kernel::gather_into`] for `gather`), and folds the chunk into the
//! running result with [`Kernel::combine`], strictly in chunk order; the
//! running result may start as a fresh `acc()` or as the first chunk. For
//! `fnv1a64` it instead keeps one `Acc` for the whole stream. Because the
//! chunking is fixed, every result is the same for any thread count.
//!
//! # Definitions
//! Zero-length descriptors contribute nothing (but still count as
//! descriptors for chunking); offsets and lengths need no alignment.
//! "Chained XXH3" below means: `h_c` = XXH3-64 (seed 0) of the
//! concatenation of chunk `c`'s bytes; `r_0 = 0`,
//! `r = XXH3-64(seed = r, data = le_u64(h_c))` for each chunk in order,
//! skipping chunks that carry no bytes.
//!
//! | kernel | result |
//! |---|---|
//! | `fnv1a64` | FNV-1a 64 (basis `0xcbf29ce484222325`, prime `0x100000001b3`) of the concatenation of all bytes; [`Output::U64`]. Byte-serial: not shardable. |
//! | `xxh3` | chained XXH3 over all bytes; [`Output::U64`]. |
//! | `crc32c` | CRC32C (Castagnoli) of the concatenation, chunks joined with `crc32c_combine`; [`Output::U64`] (the u32 widened). |
//! | `sum` | wrapping sum, over every descriptor, of its little-endian u64 words; a tail of < 8 bytes is zero-padded into one last word (per descriptor, not across descriptors); [`Output::U64`]. |
//! | `count:B` | number of bytes equal to `B`; [`Output::U64`]. |
//! | `histogram` | 256 counters of byte values; [`Output::Histogram`]. |
//! | `xor:K` / `add:K` | in place, every referenced byte `b` becomes `b ^ K` / `b.wrapping_add(K)`; [`Output::Bytes`] with the bytes modified and the chained XXH3 of the *modified* bytes in order. Overlapping descriptors each apply once, in order. |
//! | `gather` | the referenced bytes, in order, appended to an output buffer; [`Output::Bytes`] with the bytes gathered and the chained XXH3 of the gathered stream. |
//!
//! [`reference()`] computes each definition the slow, obvious way; the tests
//! hold the kernels to it.
//!
//! # Example: driving a kernel the way the executor does
//! ```
//! use pfs_exec::kernel::{reference, Kernel, KernelId, CHUNK_DESCS};
//!
//! let blob: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
//! let descs: Vec<&[u8]> = (0..200).map(|i| &blob[i * 37..i * 37 + i % 50]).collect();
//! let k = Kernel::new(KernelId::parse("xxh3")?);
//! let mut total = k.acc();
//! for chunk in descs.chunks(CHUNK_DESCS) {
//!     let mut acc = k.acc();
//!     for d in chunk {
//!         k.update(&mut acc, d);
//!     }
//!     k.combine(&mut total, acc);
//! }
//! assert_eq!(k.finish(total), reference(KernelId::Xxh3, &descs));
//! # Ok::<(), pfs_exec::kernel::KernelError>(())
//! ```

mod chain;
mod id;
mod loops;
mod reference;

pub use id::{KernelError, KernelId, ACCEPTED_NAMES};
pub use reference::{reference, reference_in_place};

use chain::Chain;
use loops::FUSE_BLOCK;

use crate::integrity::{fnv1a64, FNV_OFFSET_BASIS};

/// Descriptors per chunk: the unit of work, of sharding and of combining.
pub const CHUNK_DESCS: usize = 64;

/// Running state of one chunk (or, for `fnv1a64`, of the whole stream).
/// Made by [`Kernel::acc`]; only the kernel that made it may use it.
#[derive(Debug, Clone)]
pub struct Acc(State);

#[derive(Debug, Clone)]
enum State {
    /// `fnv1a64`: the hash state and the bytes fed so far.
    Fnv { state: u64, bytes: u64 },
    /// `crc32c`: the CRC of the bytes fed and their count.
    Crc { crc: u32, len: u64 },
    /// `sum`, `count`.
    Word(u64),
    /// `histogram`.
    Histogram(Box<[u64; 256]>),
    /// `xxh3`, `xor`, `add`, `gather`.
    Chain(Chain),
}

/// A kernel's final result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Output {
    /// `fnv1a64`, `xxh3`, `crc32c`, `sum`, `count`.
    U64(u64),
    /// `histogram`: 256 counters, indexed by byte value.
    Histogram(Vec<u64>),
    /// `xor`, `add`: bytes modified and chained XXH3 of the modified bytes;
    /// `gather`: bytes gathered and chained XXH3 of the gathered stream.
    Bytes {
        /// Bytes modified or gathered.
        bytes: u64,
        /// Chained XXH3 of those bytes, in order.
        xxh3: u64,
    },
}

/// A built-in kernel: cheap to copy, stateless; all state is in [`Acc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel {
    /// Which kernel.
    pub id: KernelId,
}

impl Kernel {
    /// The kernel `id`.
    pub fn new(id: KernelId) -> Self {
        Self { id }
    }

    /// Fresh state: the start of a chunk, and the identity of
    /// [`combine`](Self::combine). Allocates only for `histogram` (2 KiB);
    /// the chained kernels allocate their hasher on their first byte.
    pub fn acc(&self) -> Acc {
        Acc(match self.id {
            KernelId::Fnv1a64 => State::Fnv {
                state: FNV_OFFSET_BASIS,
                bytes: 0,
            },
            KernelId::Crc32c => State::Crc { crc: 0, len: 0 },
            KernelId::SumU64 | KernelId::CountByte(_) => State::Word(0),
            KernelId::Histogram => State::Histogram(Box::new([0; 256])),
            KernelId::Xxh3 | KernelId::XorImm(_) | KernelId::AddImm(_) | KernelId::Gather => {
                State::Chain(Chain::default())
            }
        })
    }

    /// Feeds one descriptor's bytes. Call it for every descriptor of the
    /// chunk, in order.
    ///
    /// For the in-place kernels (`xor`, `add`) this is a dry run: it
    /// accounts for the bytes as they *would* be after the kernel, without
    /// touching them (the executor calls [`update_mut`](Self::update_mut)
    /// for those). For `gather` it accounts without copying.
    ///
    /// # Panics
    /// If `acc` was made by another kernel.
    #[inline]
    pub fn update(&self, acc: &mut Acc, bytes: &[u8]) {
        match (self.id, &mut acc.0) {
            (KernelId::Fnv1a64, State::Fnv { state, bytes: n }) => {
                *state = fnv1a64(*state, bytes);
                *n += bytes.len() as u64;
            }
            (KernelId::Xxh3 | KernelId::Gather, State::Chain(c)) => c.write(bytes),
            (KernelId::XorImm(_) | KernelId::AddImm(_), State::Chain(c)) => {
                let mut buf = [0u8; FUSE_BLOCK];
                for block in bytes.chunks(FUSE_BLOCK) {
                    let copy = &mut buf[..block.len()];
                    copy.copy_from_slice(block);
                    apply_in_place(self.id, copy);
                    c.write(copy);
                }
            }
            (KernelId::Crc32c, State::Crc { crc, len }) => {
                *crc = crc32c::crc32c_append(*crc, bytes);
                *len += bytes.len() as u64;
            }
            (KernelId::SumU64, State::Word(s)) => *s = s.wrapping_add(loops::sum_words(bytes)),
            (KernelId::CountByte(needle), State::Word(s)) => {
                *s = s.wrapping_add(loops::count_eq(bytes, needle));
            }
            (KernelId::Histogram, State::Histogram(h)) => loops::histogram_add(h, bytes),
            _ => foreign_acc(self.id),
        }
    }

    /// Feeds one descriptor's bytes, mutating them first for the in-place
    /// kernels (`xor`, `add`); the others delegate to
    /// [`update`](Self::update) and leave the bytes alone.
    ///
    /// # Panics
    /// If `acc` was made by another kernel.
    #[inline]
    pub fn update_mut(&self, acc: &mut Acc, bytes: &mut [u8]) {
        match (self.id, &mut acc.0) {
            (KernelId::XorImm(_) | KernelId::AddImm(_), State::Chain(c)) => {
                // Mutate and hash block by block, while the block is in L1.
                for block in bytes.chunks_mut(FUSE_BLOCK) {
                    apply_in_place(self.id, block);
                    c.write(block);
                }
            }
            _ => self.update(acc, bytes),
        }
    }

    /// `gather`: appends `bytes` to `out` and accounts for them. Any other
    /// kernel: the same as [`update`](Self::update), `out` untouched.
    ///
    /// # Panics
    /// If `acc` was made by another kernel.
    #[inline]
    pub fn gather_into(&self, acc: &mut Acc, bytes: &[u8], out: &mut Vec<u8>) {
        match (self.id, &mut acc.0) {
            (KernelId::Gather, State::Chain(c)) => {
                out.reserve(bytes.len());
                for block in bytes.chunks(FUSE_BLOCK) {
                    out.extend_from_slice(block);
                    c.write(block);
                }
            }
            _ => self.update(acc, bytes),
        }
    }

    /// Folds `next`, the state of the chunk that follows `acc` in schedule
    /// order, into `acc`. A fresh [`acc`](Self::acc) is the identity on
    /// either side. Not associative for the chained kernels: fold left to
    /// right, one chunk at a time.
    ///
    /// # Panics
    /// If `acc` was made by another kernel; for `fnv1a64`, if both sides
    /// carry bytes (it is byte-serial: the executor continues one `Acc`
    /// over the whole stream instead); for the chained kernels, if `next`
    /// is itself a combination of several chunks while `acc` is not empty.
    pub fn combine(&self, acc: &mut Acc, next: Acc) {
        match (&mut acc.0, next.0) {
            (State::Fnv { state, bytes }, State::Fnv { state: s2, bytes: b2 }) => {
                if *bytes == 0 {
                    (*state, *bytes) = (s2, b2);
                } else if b2 != 0 {
                    panic!(
                        "cannot combine two fnv1a64 states: {}",
                        KernelId::Fnv1a64.not_shardable_reason().unwrap_or_default()
                    );
                }
            }
            (State::Crc { crc, len }, State::Crc { crc: c2, len: l2 }) => {
                let l2_usize = usize::try_from(l2).expect("a chunk's length fits in usize");
                *crc = crc32c::crc32c_combine(*crc, c2, l2_usize);
                *len += l2;
            }
            (State::Word(a), State::Word(b)) => *a = a.wrapping_add(b),
            (State::Histogram(a), State::Histogram(b)) => {
                for (x, y) in a.iter_mut().zip(b.iter()) {
                    *x += y;
                }
            }
            (State::Chain(a), State::Chain(b)) => a.combine(b),
            _ => foreign_acc(self.id),
        }
    }

    /// The result.
    ///
    /// # Panics
    /// If `acc` was made by another kernel.
    pub fn finish(&self, acc: Acc) -> Output {
        match (self.id, acc.0) {
            (KernelId::Fnv1a64, State::Fnv { state, .. }) => Output::U64(state),
            (KernelId::Crc32c, State::Crc { crc, .. }) => Output::U64(u64::from(crc)),
            (KernelId::SumU64 | KernelId::CountByte(_), State::Word(s)) => Output::U64(s),
            (KernelId::Histogram, State::Histogram(h)) => Output::Histogram(h.to_vec()),
            (KernelId::Xxh3, State::Chain(c)) => Output::U64(c.finish()),
            (KernelId::XorImm(_) | KernelId::AddImm(_) | KernelId::Gather, State::Chain(c)) => {
                Output::Bytes {
                    bytes: c.bytes,
                    xxh3: c.finish(),
                }
            }
            _ => foreign_acc(self.id),
        }
    }
}

/// Applies an in-place kernel to `bytes`.
#[inline(always)]
fn apply_in_place(id: KernelId, bytes: &mut [u8]) {
    match id {
        KernelId::XorImm(k) => loops::xor_in_place(bytes, k),
        KernelId::AddImm(k) => loops::add_in_place(bytes, k),
        _ => {}
    }
}

#[cold]
#[track_caller]
fn foreign_acc(id: KernelId) -> ! {
    panic!("kernel {id}: this Acc was made by another kernel")
}
