//! Building the frames that carry an entry, in the [`Outbox`]'s frame:
//! its FILE, and CHUNKS (or REPAIR) frames whose literal chunks are read by
//! the host straight into the frame (one copy from the page cache), checked
//! against their planned hash once the file is known to have changed, and
//! zstd-compressed when that is smaller.

use pfs_files::{ChunkRef, WalkKind};
use pfs_wire::files::{
    emit_entry_head, tag, ChunksHeader, EntryKind, FileEntry, FileExtra, Xattrs, CHUNKS_FIXED_LEN,
    FILE_FIXED_LEN,
};
use pfs_wire::frame::MAX_CONTROL_BODY;

use super::batch::Outbox;
use std::sync::Arc;

use super::host::{FilesSource, Unsendable};
use super::{entry_kind, ChunkPlan, FilesItem, PreserveConfig};
use crate::files::{hash_matches, SENDER_FRAME_WORK};

/// The FILE body of entry `no` (`item`) into `out`'s frame. `listing`: a
/// dry run of DELETE, the entry flagged LISTED with nothing else. Returns
/// a warning when extended attributes had to be left out.
pub(super) fn file_frame(
    out: &mut Outbox,
    item: &FilesItem,
    no: usize,
    listing: bool,
    preserve: PreserveConfig,
) -> Option<String> {
    let e = &item.entry;
    let (kind, link) = entry_kind(e);
    let linked = item.hard_link.as_ref().filter(|_| !listing);
    let link = linked.map_or(link, |t| t.as_bytes());
    let warning = if listing {
        out.xattrs.clear();
        None
    } else {
        encode_xattrs(&mut out.xattrs, e, link.len())
    };
    let (size, file_hash, chunk_count) = match (&item.recipe, item.size_and_hash()) {
        _ if listing || linked.is_some() => match e.kind {
            WalkKind::File { size } => (size, [0; 32], 0),
            _ => (0, [0; 32], 0),
        },
        (_, Some((size, hash))) if item.held => (size, hash, 0),
        // Count and hash come in FILE_DONE; the size is the scan's.
        _ if item.streamed => (item.announced_size(), [0; 32], 0),
        (Some(r), _) => (r.size, r.file_hash, r.chunks.len() as u32),
        _ => (0, [0; 32], 0),
    };
    out.frame.clear();
    FileEntry {
        file_no: no as u64,
        kind,
        mode: e.mode,
        mtime_sec: e.mtime_ns.div_euclid(1_000_000_000) as i64,
        mtime_nsec: e.mtime_ns.rem_euclid(1_000_000_000) as u32,
        size,
        chunk_count,
        file_hash,
        path: e.rel.as_bytes(),
        link_target: link,
        held: item.held && !listing,
        extra: FileExtra {
            listed: listing,
            linked: linked.is_some(),
            streamed: item.streamed && !listing && linked.is_none(),
            uid: preserve.owner.then_some(e.meta.uid),
            gid: preserve.group.then_some(e.meta.gid),
            xattrs: Xattrs::parse(&out.xattrs).unwrap_or_default(),
        },
    }
    .emit(&mut out.frame);
    debug_assert!(kind != EntryKind::File || chunk_count == 0 || item.recipe.is_some());
    warning
}

/// The extended attributes of `e` into `buf`, as many as a FILE frame
/// (a control frame) holds beside its path and a link of `link_len`
/// bytes; a warning if some had to be left out.
fn encode_xattrs(buf: &mut Vec<u8>, e: &pfs_files::Entry, link_len: usize) -> Option<String> {
    buf.clear();
    if e.meta.xattrs.is_empty() {
        return None;
    }
    // Whatever else the frame holds, it stays a control frame.
    let room = MAX_CONTROL_BODY as usize - FILE_FIXED_LEN - e.rel.as_bytes().len() - link_len - 17;
    let attrs = e.meta.xattrs.iter().map(|(n, v)| (&n[..], &v[..]));
    let left_out = Xattrs::encode(attrs, room, buf);
    (left_out > 0).then(|| {
        format!(
            "{}: {left_out} extended attributes not sent (more than one FILE frame holds)",
            pfs_files::escape_path(&e.abs)
        )
    })
}

/// One CHUNKS frame of entry `no` (`item`) from `chunks[first]` on into
/// `out`'s frame, each chunk travelling as `plan` says; returns the chunk
/// after the last one in it and the chunk bytes it names (what it makes
/// the receiver hash), or why the file cannot be sent (unreadable, shorter
/// than planned, or changed). `changed` is how the file changed since it
/// was scanned, once known.
#[allow(clippy::too_many_arguments)]
pub(super) fn chunks_frame<S: FilesSource + ?Sized>(
    out: &mut Outbox,
    changed: &mut Option<String>,
    src: &mut S,
    item: &FilesItem,
    no: usize,
    chunks: &[ChunkRef],
    plan: &[ChunkPlan],
    first: usize,
) -> Result<(usize, u64), Unsendable> {
    out.frame.clear();
    out.frame.extend_from_slice(&[0; CHUNKS_FIXED_LEN]);
    let mut i = first;
    let mut work = 0u64;
    let n = chunks.len().min(plan.len());
    while i < n && out.frame.len() < out.frame_target && work < SENDER_FRAME_WORK {
        let c = &chunks[i];
        work += u64::from(c.len);
        match plan[i] {
            ChunkPlan::Ref { offset } => {
                emit_entry_head(&mut out.frame, tag::REF, &c.hash, c.len);
                out.frame.extend_from_slice(&offset.to_le_bytes());
            }
            ChunkPlan::Known => emit_entry_head(&mut out.frame, tag::KNOWN, &c.hash, c.len),
            ChunkPlan::Literal => push_literal(out, src, item, c, changed)?,
        }
        i += 1;
    }
    let count = (i - first) as u32;
    out.frame[..CHUNKS_FIXED_LEN].copy_from_slice(
        &ChunksHeader {
            file_no: no as u64,
            count,
        }
        .emit(),
    );
    Ok((i, work))
}

/// Appends one literal entry to `out`'s frame: the chunk's bytes read by
/// `src` straight into the frame, or zstd-compressed when that is smaller
/// (with `--compress`). Once the file is known to have `changed` since it
/// was scanned, the bytes are checked against the chunk's hash first. An
/// error says why the chunk cannot be sent (the frame then ends in a
/// partial entry).
pub(super) fn push_literal<S: FilesSource + ?Sized>(
    out: &mut Outbox,
    src: &mut S,
    item: &FilesItem,
    c: &ChunkRef,
    changed: &mut Option<String>,
) -> Result<(), Unsendable> {
    let (hash, len) = (&c.hash, c.len);
    let frame = &mut out.frame;
    let head = frame.len();
    emit_entry_head(frame, tag::LITERAL, hash, len);
    let start = frame.len();
    frame.resize(start + len as usize, 0);
    match src.read(item, c.offset, &mut frame[start..]) {
        Ok(Some(how)) => *changed = Some(how),
        Ok(None) => {}
        Err(e) => return Err(Unsendable::Read(Arc::new(e))),
    }
    if let Some(how) = changed.as_deref() {
        if !hash_matches(&frame[start..], hash) {
            let how = if how.is_empty() { "changed" } else { how };
            return Err(Unsendable::Changed {
                how: how.to_owned(),
                start: c.offset,
                end: c.offset + u64::from(len),
            });
        }
    }
    if let Some(level) = out.compress {
        // Compression that saves nothing is not worth the receiver's time.
        if let Ok(n) = out.z.compress_into(level, &frame[start..], &mut out.zbuf) {
            if n + 4 < len as usize {
                frame.truncate(head);
                emit_entry_head(frame, tag::ZSTD, hash, len);
                frame.extend_from_slice(&(n as u32).to_le_bytes());
                frame.extend_from_slice(&out.zbuf[..n]);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{dir_item, file_item, recipe_of, MemFiles};
    use super::*;
    use pfs_wire::files::{parse_chunks, ChunkData};

    /// The tag and length of each entry of a CHUNKS body.
    fn entries(frame: &[u8]) -> Vec<(u8, u32)> {
        let (_, it) = parse_chunks(frame).expect("CHUNKS body");
        it.map(|e| {
            let e = e.expect("entry");
            let t = match e.data {
                ChunkData::Ref { .. } => tag::REF,
                ChunkData::Known => tag::KNOWN,
                ChunkData::Literal(_) => tag::LITERAL,
                ChunkData::Zstd(_) => tag::ZSTD,
            };
            (t, e.len)
        })
        .collect()
    }

    #[test]
    fn a_chunks_frame_carries_each_chunk_as_planned_and_counts_its_work() {
        let bytes: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let mut item = file_item("a", 300);
        item.recipe = Some(recipe_of(&bytes, 100));
        let chunks = item.recipe.as_ref().expect("recipe").chunks.clone();
        let plan = [
            ChunkPlan::Ref { offset: 4096 },
            ChunkPlan::Known,
            ChunkPlan::Literal,
        ];
        let mut src = MemFiles::new(vec![("a", bytes)]);
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut changed = None;
        let (end, work) =
            chunks_frame(&mut out, &mut changed, &mut src, &item, 3, &chunks, &plan, 0).expect("frame");
        assert_eq!((end, work), (3, 300));
        assert_eq!(
            entries(&out.frame),
            [(tag::REF, 100), (tag::KNOWN, 100), (tag::LITERAL, 100)]
        );
        let (head, _) = parse_chunks(&out.frame).expect("CHUNKS body");
        assert_eq!((head.file_no, head.count), (3, 3));
    }

    #[test]
    fn literals_that_compress_go_compressed_and_a_changed_file_is_checked() {
        let bytes = vec![0u8; 4096];
        let mut item = file_item("z", 4096);
        item.recipe = Some(recipe_of(&bytes, 4096));
        let chunks = item.recipe.as_ref().expect("recipe").chunks.clone();
        let mut src = MemFiles::new(vec![("z", bytes)]);
        let mut out = Outbox::new(Some(1), None).expect("outbox");
        let mut changed = Some("it was modified since it was scanned".to_string());
        chunks_frame(
            &mut out,
            &mut changed,
            &mut src,
            &item,
            0,
            &chunks,
            &[ChunkPlan::Literal],
            0,
        )
        .expect("the bytes still match");
        assert_eq!(entries(&out.frame), [(tag::ZSTD, 4096)]);

        // The file now holds other bytes than the ones planned.
        let mut src = MemFiles::new(vec![("z", vec![1u8; 4096])]);
        let why = chunks_frame(
            &mut out,
            &mut changed,
            &mut src,
            &item,
            0,
            &chunks,
            &[ChunkPlan::Literal],
            0,
        )
        .expect_err("the bytes no longer match");
        assert!(why.to_string().contains("no longer match"), "{why}");
    }

    #[test]
    fn a_file_frame_of_a_listed_or_held_entry_says_so() {
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut item = file_item("held", 500);
        item.held = true;
        item.digest = Some((500, [3; 16]));
        assert_eq!(
            file_frame(&mut out, &item, 7, false, PreserveConfig::default()),
            None
        );
        let f = FileEntry::parse(&out.frame).expect("FILE body");
        assert_eq!((f.file_no, f.size, f.chunk_count, f.held), (7, 500, 0, true));
        assert_eq!(&f.file_hash[..16], &[3; 16]);
        file_frame(&mut out, &item, 7, true, PreserveConfig::default());
        let f = FileEntry::parse(&out.frame).expect("FILE body");
        assert!(f.extra.listed && !f.held);
        file_frame(&mut out, &dir_item("d"), 8, false, PreserveConfig::default());
        let f = FileEntry::parse(&out.frame).expect("FILE body");
        assert_eq!(f.kind, EntryKind::Dir);
    }
}
