//! Repair, the corrections plane of a files session (docs/wire.md §10.8):
//! after the stream the receiver NAKs the chunks whose bytes did not match
//! (a damaged store, a file that changed); the sender finds each named
//! chunk in its files, reads it again and sends it in REPAIR frames.

use std::collections::{HashMap, HashSet};

use pfs_files::ChunkRef;
use pfs_wire::files::{ChunksHeader, Hash, CHUNKS_FIXED_LEN, FLAG_LAST};
use pfs_wire::FrameType;

use super::batch::Outbox;
use super::fill::push_literal;
use super::host::FilesSource;
use super::FilesItem;
use crate::SessionError;

/// Where a chunk is: item number, offset in its file, length.
type Place = (usize, u64, u32);

/// The chunks NAKed and how far their REPAIR went: see the module doc.
#[derive(Debug, Default)]
pub(super) struct Repair {
    /// Hashes NAKed so far (until the last NAK).
    wanted: Vec<Hash>,
    /// The NAKed chunks found in the files, in file order.
    list: Vec<(Hash, Place)>,
    /// The next one to send.
    next: usize,
    /// Chunks and bytes repaired.
    repaired: (u64, u64),
}

impl Repair {
    /// A NAK named these hashes.
    pub(super) fn nak<'h>(&mut self, hashes: impl Iterator<Item = &'h Hash>) {
        self.wanted.extend(hashes.copied());
    }

    /// Whether no NAK awaits its REPAIR (FILES_END may come).
    pub(super) fn is_idle(&self) -> bool {
        self.wanted.is_empty()
    }

    /// Chunks and bytes repaired.
    pub(super) fn repaired(&self) -> (u64, u64) {
        self.repaired
    }

    /// The NAKs are complete: find each named chunk in the files (the
    /// first place it occurs; a hash found nowhere is not sent, and the
    /// receiver fails the files that wait for it).
    pub(super) fn start(&mut self, items: &[FilesItem]) {
        let want: HashSet<Hash> = self.wanted.drain(..).collect();
        let mut found: HashMap<Hash, Place> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            if let Some(r) = &item.recipe {
                for c in &r.chunks {
                    if want.contains(&c.hash) {
                        found.entry(c.hash).or_insert((i, c.offset, c.len));
                    }
                }
            }
        }
        let mut list: Vec<_> = found.into_iter().collect();
        list.sort_by_key(|(_, (i, off, _))| (*i, *off));
        self.list = list;
        self.next = 0;
    }

    /// The next REPAIR frame, queued in `out`: the named chunks' bytes,
    /// read again. A chunk that cannot be read is left out with a warning.
    /// Returns whether it was the last.
    pub(super) fn step<S: FilesSource + ?Sized>(
        &mut self,
        items: &[FilesItem],
        src: &mut S,
        out: &mut Outbox,
        warnings: &mut Vec<String>,
    ) -> Result<bool, SessionError> {
        out.frame.clear();
        out.frame.extend_from_slice(&[0; CHUNKS_FIXED_LEN]);
        let mut count = 0u32;
        while self.next < self.list.len() && out.frame.len() < out.frame_target {
            let (hash, (i, offset, len)) = self.list[self.next];
            self.next += 1;
            let chunk = ChunkRef { hash, offset, len };
            // Checked whether or not the file changed: bytes that do not
            // match would be refused anyway (and cost the wire).
            let mut changed = Some(String::new());
            let head = out.frame.len();
            let item = &items[i];
            if let Err(why) = push_literal(out, src, item, &chunk, &mut changed) {
                // The receiver fails the files that wait for this chunk.
                out.frame.truncate(head);
                warnings.push(format!(
                    "{} not repaired: {why}",
                    pfs_files::escape_path(&item.entry.abs)
                ));
                continue;
            }
            self.repaired.0 += 1;
            self.repaired.1 += u64::from(len);
            count += 1;
        }
        out.frame[..CHUNKS_FIXED_LEN].copy_from_slice(
            &ChunksHeader {
                file_no: ChunksHeader::REPAIR,
                count,
            }
            .emit(),
        );
        let last = self.next >= self.list.len();
        out.alone(FrameType::Repair, if last { FLAG_LAST } else { 0 }, "REPAIR")?;
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{file_item, recipe_of, MemFiles};
    use super::*;
    use pfs_wire::files::parse_chunks;
    use pfs_wire::Frame;

    #[test]
    fn named_chunks_are_found_once_in_file_order_and_sent_again() {
        let a = vec![1u8; 300];
        let b = vec![2u8; 200];
        let mut items = vec![file_item("a", 300), file_item("b", 200)];
        items[0].recipe = Some(recipe_of(&a, 100));
        items[1].recipe = Some(recipe_of(&b, 100));
        let mut src = MemFiles::new(vec![("a", a), ("b", b)]);
        let h = |it: &FilesItem, k: usize| it.recipe.as_ref().expect("recipe").chunks[k].hash;
        // Every chunk of `a` has a0's bytes: a0 is where it is read.
        let (b1, a2) = (h(&items[1], 1), h(&items[0], 2));
        let mut r = Repair::default();
        r.nak([b1, a2, [0xee; 32]].iter());
        assert!(!r.is_idle());
        r.start(&items);
        assert!(r.is_idle());
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut warnings = Vec::new();
        assert!(r.step(&items, &mut src, &mut out, &mut warnings).expect("REPAIR"));
        assert!(warnings.is_empty());
        assert_eq!(r.repaired(), (2, 200), "the unknown hash is not sent");
        let mut bytes = Vec::new();
        out.transmit().expect("REPAIR ready").append_to(&mut bytes);
        let (f, _) = Frame::parse(&bytes).expect("frame");
        assert_eq!(
            (f.header.frame_type, f.header.flags),
            (FrameType::Repair, FLAG_LAST)
        );
        let (head, entries) = parse_chunks(f.body).expect("REPAIR body");
        assert_eq!((head.file_no, head.count), (ChunksHeader::REPAIR, 2));
        let lens: Vec<u32> = entries.map(|e| e.expect("entry").len).collect();
        assert_eq!(lens, [100, 100]);
        assert_eq!(r.list[0].1, (0, 0, 100), "a's chunk first, at its first place");
    }

    #[test]
    fn a_chunk_that_no_longer_matches_is_left_out_with_a_warning() {
        let a = vec![1u8; 200];
        let mut items = vec![file_item("a", 200)];
        items[0].recipe = Some(recipe_of(&[vec![1u8; 100], vec![3u8; 100]].concat(), 100));
        let want = items[0].recipe.as_ref().expect("recipe").chunks[1].hash;
        let mut src = MemFiles::new(vec![("a", a)]);
        let mut r = Repair::default();
        r.nak([want].iter());
        r.start(&items);
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut warnings = Vec::new();
        assert!(r.step(&items, &mut src, &mut out, &mut warnings).expect("REPAIR"));
        assert_eq!(r.repaired(), (0, 0));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("not repaired"), "{warnings:?}");
    }
}
