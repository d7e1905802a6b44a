//! PacketFS receiver store: the persistent blob and chunk index behind
//! `pfs serve --store DIR`.
//!
//! A sender ships `(offset, len)` descriptors for chunks the receiver already
//! holds and payload only for the rest. This crate owns the receiver's side
//! of that bargain across restarts:
//! - the **blob file**, mapped once for the whole capacity and grown as data
//!   arrives ([`Store::bytes`] slices stay valid for the store's life);
//! - the **chunk index** (BLAKE3 → blob offset, length), crash-safe: never an
//!   entry pointing at bytes that are not there;
//! - concurrent sessions: one [`Store::reserve`] + many
//!   [`Reservation::append`] (a `memcpy`, no syscall) + one
//!   [`Reservation::commit`] per file or batch; lookups from any thread;
//! - the capacity limit ([`StoreError::Full`] before anything is written)
//!   and disk space (`fallocate` at reserve time: ENOSPC is an error, never a
//!   SIGBUS);
//! - identity for index caching by senders ([`StoreIdentity`],
//!   [`Store::entries_since`]), integrity checks ([`Store::verify`],
//!   [`Store::verify_all`]) and the corrections plane's [`Store::repair`].
//!
//! It does not chunk files or speak the wire protocol (`pfs-files`,
//! `pfs-session` do).
//!
//! # Files
//!
//! Every file is created mode 0600 (an older store's files are made so
//! when opened), a new store directory 0700: the chunks are what other
//! clients sent.
//!
//! | path | what |
//! |---|---|
//! | `DIR/lock` | empty; `flock`ed exclusively while a store is open ([`StoreError::Locked`]) |
//! | `DIR/index` | header + append-only records (below) |
//! | `DIR/blob` | the blob, a regular file (base pages; persists, until reboot on tmpfs) |
//! | `HUGE/pfs-store-<id>.blob` | instead of `DIR/blob` when created with a hugetlbfs [`StoreConfig::huge_dir`]: huge pages, the file grows in huge-page steps, and it **persists until reboot or unmount** while the index in `DIR` persists; a store whose blob vanished reopens empty (under a new identity) |
//!
//! The blob file is mapped `MAP_SHARED | MAP_NORESERVE` for the whole
//! capacity (rounded up to the growth step: 1 MiB, or the huge page); its
//! length only grows, by `fallocate`, and nothing beyond it is ever touched.
//! Reservations start at 64-byte boundaries; chunks are packed inside them.
//! On copy-on-write filesystems (btrfs, zfs) a preallocation does not fully
//! guarantee later writes; keep stores on ext4, xfs, tmpfs or hugetlbfs.
//!
//! `DIR/index`, integers little-endian:
//!
//! ```text
//! header, 512 bytes
//!   0    8  magic "PFSINDEX"
//!   8    4  format version (1)
//!  12    4  header length (512)
//!  16   16  store id (random at creation; replaced when recovery drops records)
//!  32    1  blob location: 0 = DIR/blob, 1 = hugetlbfs file at the path below
//!  33    1  reserved, 0
//!  34    2  blob path length (0 for DIR/blob, at most 440)
//!  36    4  record length (48)
//!  40    8  page size of the blob when the store was created
//!  48    8  creation time, seconds since the Unix epoch
//!  56  440  blob path bytes, zero padded
//! 496   12  reserved, 0
//! 508    4  CRC-32C of bytes 0..508
//! record i at 512 + 48 * i; i is the sequence number, generation = count
//!   0   32  BLAKE3 of the chunk
//!  32    8  blob offset
//!  40    4  chunk length
//!  44    4  CRC-32C of bytes 0..44
//! ```
//!
//! A later record for the same hash supersedes an earlier one (a repair that
//! had to re-append). A file with another magic or version is refused
//! ([`StoreError::BadFormat`]) and never overwritten.
//!
//! # Crash safety
//!
//! A commit writes in this order: blob bytes flushed (`msync`, and
//! `fdatasync` if the file grew), then index records appended and the index
//! `fdatasync`ed, then the entries published to lookups. So a record on
//! disk always describes bytes already on disk. Opening replays the index
//! and
//! - stops at the first record that fails its CRC (torn or damaged tail) and
//!   drops it and everything after it, and a trailing partial record;
//! - drops records whose range ends beyond the blob file;
//! - allocates after the end of the last surviving chunk (space of
//!   uncommitted reservations is reused), and shortens the blob file to it
//!   (rounded up to the growth step): reservations of a process that stopped
//!   do not keep disk space.
//!
//! If anything was dropped, the index is rewritten (temp file, fsync,
//! rename) under a **new store id**, so a sender's index cached under the
//! old `(id, generation)` is never mistaken for the new contents.
//! [`Store::recovery`] reports what happened. With [`Durability::None`] the
//! flushes are skipped (tests, benchmarks); the order is kept.
//!
//! # Concurrency
//!
//! Reservations are carved by a bump allocator under a mutex, so two are
//! never overlapping; a reservation's chunks are invisible until its commit.
//! Commits flush their own bytes in parallel, then append records under the
//! index lock (one `fdatasync` each, serialized). When two sessions commit
//! the same hash, the first wins the index entry; the other's commit returns
//! the winner's location (its own copy stays as unused space). Lookups use
//! 16 read-mostly shards. [`Store::bytes`] never hands out bytes a
//! reservation is still writing; [`Store::repair`] rewrites committed bytes
//! in place, and a concurrent reader of that chunk may see a mix of old and
//! new bytes (they were already damaged).
//!
//! # Example
//!
//! ```no_run
//! use pfs_store::{Store, StoreConfig};
//!
//! let store = Store::open("/srv/pfs-store".as_ref(), &StoreConfig::with_capacity(64 << 30))?;
//! let chunks: Vec<&[u8]> = vec![b"first chunk", b"second chunk"];
//! let mut r = store.reserve(chunks.iter().map(|c| c.len() as u64).sum())?;
//! for c in &chunks {
//!     let hash = *blake3::hash(c).as_bytes();
//!     r.append_unchecked(&hash, c)?; // dedup: known chunks take no space
//! }
//! let locs = r.commit()?; // durable, then visible to lookups
//! assert_eq!(store.bytes(locs[0])?, chunks[0]);
//! let id = store.identity();
//! println!("{} chunks, store {} generation {}", store.stats().chunks, id.id_hex(), id.generation);
//! # Ok::<(), pfs_store::StoreError>(())
//! ```

mod backing;
mod error;
mod index;
mod map;
mod store;

pub use backing::{Backing, StoreBacking};
pub use error::hex;
pub use error::{FormatProblem, InputProblem, StoreError};
pub use store::{
    random_id, ChunkHash, ChunkLoc, Durability, IndexRecord, RecoveryReport, Reservation, Store, StoreConfig,
    StoreIdentity, StoreStats, DEFAULT_CAPACITY,
};

/// Index format version this crate reads and writes.
pub const INDEX_FORMAT_VERSION: u32 = index::FORMAT_VERSION;

#[cfg(test)]
mod tests {
    /// Session threads share one store.
    #[test]
    fn store_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Store>();
        check::<crate::Reservation<'_>>();
    }
}
