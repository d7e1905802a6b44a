//! Probing (docs/wire.md §10.9): before chunking, the sender asks a
//! receiver whose store is not empty which whole files it already holds
//! (PROBE: size, mtime and an XXH3-128 key per file); the files it holds
//! go as FILE with HELD and are never chunked.

use pfs_wire::files::{
    parse_probe_reply, ProbeEntry, ProbeHead, FLAG_LAST, INDEX_KEY_LEN, PROBE_ENTRY_FIXED_LEN, PROBE_HEAD_LEN,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::FrameType;

use super::batch::Outbox;
use super::core::malformed;
use super::{unchunked, FilesItem};
use crate::files::FilesViolation;
use crate::SessionError;

/// The files asked about and how far the answers came: see the module doc.
#[derive(Debug, Default)]
pub(super) struct Probe {
    /// Item numbers asked about, in PROBE order.
    asked: Vec<usize>,
    /// The next one an answer is due for.
    next: usize,
    /// Files asked about, once every answer came.
    probed: u64,
}

impl Probe {
    /// The items to hash whole before asking: with `all` (a store that
    /// holds nothing, whose destination is `OCCUPIED`; or a send that lists
    /// what travels, [`crate::files::FilesSenderConfig::probe_all`]) every
    /// file, chunked or not (a recipe is of no use against an empty index,
    /// and the receiver indexes the older versions of the files it lacks);
    /// otherwise the files not yet chunked. Files already hashed are not
    /// hashed again.
    pub(super) fn to_hash(items: &[FilesItem], all: bool) -> Vec<usize> {
        let asked = match all {
            true => (0..items.len())
                .filter(|&i| items[i].is_file() && !items[i].held)
                .collect(),
            false => unchunked(items),
        };
        asked.into_iter().filter(|&i| items[i].digest.is_none()).collect()
    }

    /// Files asked about (0 until every answer came).
    pub(super) fn probed(&self) -> u64 {
        self.probed
    }

    /// PROBE frames for the files hashed whole, in control BATCH frames;
    /// false if there are none. Empty files only with `empty` (a send that
    /// lists what travels): the answer tells the listing, not the stream (a
    /// HELD file has content).
    pub(super) fn queue(&mut self, items: &[FilesItem], out: &mut Outbox, empty: bool) -> bool {
        let asked: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].is_file() && items[i].digest.is_some_and(|(n, _)| n > 0 || empty))
            .collect();
        if asked.is_empty() {
            return false;
        }
        let max_body = MAX_CONTROL_BODY as usize;
        let mut body = Vec::with_capacity(max_body);
        let mut first = 0usize;
        let mut k = 0usize;
        while k < asked.len() {
            body.clear();
            body.extend_from_slice(&[0; PROBE_HEAD_LEN]);
            while k < asked.len() {
                let it = &items[asked[k]];
                let path = it.entry.rel.as_bytes();
                if body.len() + PROBE_ENTRY_FIXED_LEN + path.len() > max_body {
                    break;
                }
                probe_entry(it).emit(&mut body);
                k += 1;
            }
            let head = ProbeHead {
                first_no: first as u64,
                count: (k - first) as u32,
            };
            body[..PROBE_HEAD_LEN].copy_from_slice(&head.emit());
            let flags = if k == asked.len() { FLAG_LAST } else { 0 };
            out.batch_control(FrameType::Probe, flags, &body);
            first = k;
        }
        self.asked = asked;
        self.next = 0;
        out.flush_control();
        true
    }

    /// One PROBE_REPLY: marks the files the receiver holds; returns whether
    /// every answer came (the last reply).
    pub(super) fn reply(
        &mut self,
        flags: u16,
        body: &[u8],
        items: &mut [FilesItem],
    ) -> Result<bool, SessionError> {
        let (head, bits) = parse_probe_reply(body).map_err(malformed("PROBE_REPLY"))?;
        let count = head.count as usize;
        let next = self.next;
        if head.first_no != next as u64 || next + count > self.asked.len() {
            return Err(FilesViolation::ProbeReplyOrder {
                first: head.first_no,
                count: head.count,
                expected: next as u64,
                asked: self.asked.len() as u64,
            }
            .into());
        }
        for j in 0..count {
            let it = &mut items[self.asked[next + j]];
            it.there = bits[j / 8] & (1 << (j % 8)) != 0;
            it.held = it.there && it.digest.is_some_and(|(n, _)| n > 0);
        }
        self.next += count;
        if flags & FLAG_LAST == 0 {
            return Ok(false);
        }
        if self.next != self.asked.len() {
            return Err(FilesViolation::ProbeReplyShort {
                answered: self.next as u64,
                asked: self.asked.len() as u64,
            }
            .into());
        }
        self.probed = self.asked.len() as u64;
        Ok(true)
    }
}

/// The PROBE entry of a file hashed whole.
fn probe_entry(it: &FilesItem) -> ProbeEntry<'_> {
    let (size, digest) = it.digest.unwrap_or_default();
    let mut key = [0u8; INDEX_KEY_LEN];
    key.copy_from_slice(&digest[..INDEX_KEY_LEN]);
    ProbeEntry {
        size,
        mtime_sec: it.entry.mtime_ns.div_euclid(1_000_000_000) as i64,
        mtime_nsec: it.entry.mtime_ns.rem_euclid(1_000_000_000) as u32,
        key,
        path: it.entry.rel.as_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{file_item, files_violation};
    use super::*;

    /// A PROBE_REPLY body: `count` answers from `first`, `held` bits.
    fn reply_body(first: u64, count: u32, held: &[u8]) -> Vec<u8> {
        let mut body = ProbeHead {
            first_no: first,
            count,
        }
        .emit()
        .to_vec();
        body.extend_from_slice(held);
        body
    }

    /// Three files hashed whole, and one directory.
    fn asked() -> (Probe, Vec<FilesItem>) {
        let mut items: Vec<FilesItem> = (0..3).map(|i| file_item(&format!("f{i}"), 100)).collect();
        for it in &mut items {
            it.digest = Some((100, [1; 16]));
        }
        items.push(super::super::tests::dir_item("d"));
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut p = Probe::default();
        assert!(p.queue(&items, &mut out, false));
        assert!(!out.is_empty(), "the PROBE frames are ready");
        (p, items)
    }

    #[test]
    fn replies_mark_the_files_held_in_order() {
        let (mut p, mut items) = asked();
        assert!(!p.reply(0, &reply_body(0, 2, &[0b10]), &mut items).expect("first"));
        assert!(p
            .reply(FLAG_LAST, &reply_body(2, 1, &[0b1]), &mut items)
            .expect("last"));
        let held: Vec<bool> = items.iter().map(|i| i.held).collect();
        assert_eq!(held, [false, true, true, false]);
        assert_eq!(p.probed(), 3);
    }

    #[test]
    fn an_empty_file_is_asked_about_only_for_a_listing_and_never_held() {
        let mut items = vec![file_item("empty", 0), file_item("full", 5)];
        items[0].digest = Some((0, [2; 16]));
        items[1].digest = Some((5, [3; 16]));
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut p = Probe::default();
        assert!(p.queue(&items, &mut out, false));
        assert!(p.asked == [1]);
        let mut p = Probe::default();
        assert!(p.queue(&items, &mut out, true));
        assert!(p.asked == [0, 1]);
        assert!(p
            .reply(FLAG_LAST, &reply_body(0, 2, &[0b11]), &mut items)
            .expect("reply"));
        let seen: Vec<(bool, bool)> = items.iter().map(|i| (i.there, i.held)).collect();
        assert_eq!(seen, [(true, false), (true, true)]);
    }

    #[test]
    fn a_reply_out_of_order_or_short_is_refused() {
        let (mut p, mut items) = asked();
        let err = p
            .reply(0, &reply_body(1, 1, &[0]), &mut items)
            .expect_err("out of order");
        assert!(matches!(
            files_violation(err),
            FilesViolation::ProbeReplyOrder { .. }
        ));
        let err = p
            .reply(0, &reply_body(0, 4, &[0]), &mut items)
            .expect_err("more than asked");
        assert!(matches!(
            files_violation(err),
            FilesViolation::ProbeReplyOrder { .. }
        ));
        let (mut p, mut items) = asked();
        let err = p
            .reply(FLAG_LAST, &reply_body(0, 2, &[0]), &mut items)
            .expect_err("short");
        assert!(matches!(
            files_violation(err),
            FilesViolation::ProbeReplyShort {
                answered: 2,
                asked: 3
            }
        ));
    }

    #[test]
    fn nothing_to_ask_without_digests_and_hashed_files_are_not_hashed_again() {
        let mut items: Vec<FilesItem> = (0..3).map(|i| file_item(&format!("f{i}"), 100)).collect();
        let mut out = Outbox::new(None, None).expect("outbox");
        assert!(!Probe::default().queue(&items, &mut out, false));
        assert!(out.is_empty());
        items[1].digest = Some((100, [0; 16]));
        assert_eq!(Probe::to_hash(&items, true), [0, 2]);
        items[2].held = true;
        assert_eq!(Probe::to_hash(&items, true), [0]);
    }

    #[test]
    fn a_send_that_lists_asks_about_files_with_a_cached_recipe_too() {
        let mut items: Vec<FilesItem> = (0..2).map(|i| file_item(&format!("f{i}"), 100)).collect();
        items[0].recipe = Some(super::super::tests::recipe(&[[1; 32]]));
        assert_eq!(Probe::to_hash(&items, false), [1]);
        assert_eq!(Probe::to_hash(&items, true), [0, 1]);
    }
}
