//! What the subscriber core asks of its host: a [`StreamHost`] receives
//! each gram, in order, as [`GramEntries`] — a lending iterator whose
//! entries are resolved to slices of the subscriber's own blob (REFERENCE,
//! WRITE after it was applied) and of the received frame (MESSAGE), with no
//! copy. Entries execute as they are taken, in table order, so a REFERENCE
//! after a WRITE to the same bytes sees the written bytes; those the host
//! does not take are executed after it returns.

use pfs_exec::integrity::Digest;
use pfs_wire::stream::{EntryIter, EntryKind};

/// Receives each gram the subscriber executes.
pub trait StreamHost {
    /// One gram, in `seq` order. Take its entries with
    /// [`GramEntries::next_entry`].
    fn gram(&mut self, gram: &mut GramEntries<'_>);
}

impl<F: FnMut(&mut GramEntries<'_>)> StreamHost for F {
    fn gram(&mut self, gram: &mut GramEntries<'_>) {
        self(gram)
    }
}

/// One entry, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedEntry<'a> {
    /// The referenced bytes of the subscriber's blob.
    Reference {
        /// Where they are.
        offset: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// Bytes just written into the subscriber's blob (the blob's slice).
    Write {
        /// Where they were written.
        offset: u64,
        /// The bytes, as the blob now holds them.
        bytes: &'a [u8],
    },
    /// A message's bytes, in the received frame.
    Message(&'a [u8]),
}

/// A gram being executed: its `seq` and its entries, taken one at a time.
/// Every entry was checked (bounds, rights, slab) before the first one
/// executes.
#[derive(Debug)]
pub struct GramEntries<'a> {
    seq: u64,
    count: u32,
    entries: EntryIter<'a>,
    blob: &'a mut [u8],
    digest: &'a mut Digest,
}

impl<'a> GramEntries<'a> {
    pub(crate) fn new(
        seq: u64,
        count: u32,
        entries: EntryIter<'a>,
        blob: &'a mut [u8],
        digest: &'a mut Digest,
    ) -> Self {
        Self {
            seq,
            count,
            entries,
            blob,
            digest,
        }
    }

    /// The gram's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Entries in the gram.
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Whether the gram has no entries.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Executes the next entry and returns it resolved; `None` after the
    /// last. A WRITE is applied to the blob before it is returned.
    #[allow(clippy::should_implement_trait)] // a lending iterator: items borrow `self`
    pub fn next_entry(&mut self) -> Option<ResolvedEntry<'_>> {
        // The core validated the whole table first, so no error remains.
        let e = self.entries.next()?.ok()?;
        let start = usize::try_from(e.offset).ok()?;
        let range = start..start.checked_add(e.len as usize)?;
        Some(match e.kind {
            EntryKind::Reference => {
                let bytes = self.blob.get(range)?;
                self.digest.update(bytes);
                ResolvedEntry::Reference {
                    offset: e.offset,
                    bytes,
                }
            }
            EntryKind::Write => {
                let dst = self.blob.get_mut(range)?;
                dst.copy_from_slice(e.slab);
                self.digest.update(dst);
                ResolvedEntry::Write {
                    offset: e.offset,
                    bytes: dst,
                }
            }
            EntryKind::Message => {
                self.digest.update(e.slab);
                ResolvedEntry::Message(e.slab)
            }
        })
    }

    /// Executes the entries the host did not take.
    pub(crate) fn drain(&mut self) {
        while self.next_entry().is_some() {}
    }
}
