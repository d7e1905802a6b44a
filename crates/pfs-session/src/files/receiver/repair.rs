//! The receiver's side of the corrections plane: chunks whose bytes were
//! not (correctly) here are NAKed once each after the stream; the files
//! holding them wait, closed, with their holes; each REPAIR's good bytes go
//! into every hole waiting for them; after the last REPAIR the waiting
//! files land or fail.

use std::collections::{HashMap, HashSet};
use std::io::IoSlice;

use pfs_files::{FileSpec, LandError, RelPath};
use pfs_wire::files::{parse_chunks, ChunkData, Hash, FLAG_LAST};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, FrameType};

use super::core::{malformed, FilesReceiver};
use super::host::FilesHost;
use crate::files::{hash_matches, FilesViolation, MAX_CHUNK_LEN};
use crate::SessionError;

/// A file waiting for REPAIRs.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) no: u64,
    pub(super) rel: RelPath,
    pub(super) size: u64,
    pub(super) mode: u32,
    pub(super) mtime_ns: i128,
    pub(super) file_hash: Hash,
    /// The file hash of the chunks received (see `stream::Rebuild`).
    pub(super) digest: Hash,
    /// Its holes, until the first REPAIR moves them into the map of holes
    /// by hash.
    pub(super) holes: Vec<(u64, Hash, u32)>,
    /// Holes not filled yet.
    pub(super) missing: usize,
    /// Filling a hole failed.
    pub(super) broken: Option<LandError>,
}

/// Why a file waiting for REPAIRs cannot be finished.
#[derive(Debug, thiserror::Error)]
enum Unfinished {
    #[error(transparent)]
    Land(#[from] LandError),
    #[error("chunks missing or damaged at the receiver were not repaired")]
    NotRepaired,
}

/// What the corrections plane keeps: the hashes to NAK and the files
/// waiting for their REPAIRs.
#[derive(Debug, Default)]
pub(super) struct Corrections {
    /// Hashes to NAK, once each, in the order they were found.
    nak: Vec<Hash>,
    nak_seen: HashSet<Hash>,
    /// Files waiting for REPAIRs.
    pub(super) waiting: Vec<Waiting>,
    /// Holes of the waiting files by hash: (index in `waiting`, offset),
    /// filled as REPAIRs arrive.
    holes_by_hash: HashMap<Hash, Vec<(usize, u64)>>,
}

impl Corrections {
    /// Whether `hash` was NAKed already.
    pub(super) fn is_naked(&self, hash: &Hash) -> bool {
        self.nak_seen.contains(hash)
    }

    /// NAKs `hash` after the stream; true the first time.
    pub(super) fn nak(&mut self, hash: &Hash) -> bool {
        let fresh = self.nak_seen.insert(*hash);
        if fresh {
            self.nak.push(*hash);
        }
        fresh
    }

    /// Queues the NAK frames into `out`, the last flagged LAST; false (and
    /// nothing queued) when nothing is to be NAKed.
    pub(super) fn queue_naks(&mut self, out: &mut Vec<u8>) -> bool {
        if self.nak.is_empty() {
            return false;
        }
        let per_frame = MAX_CONTROL_BODY as usize / 32;
        let naks = std::mem::take(&mut self.nak);
        let mut body = Vec::with_capacity(MAX_CONTROL_BODY as usize);
        let mut batches = naks.chunks(per_frame).peekable();
        while let Some(batch) = batches.next() {
            body.clear();
            body.extend(batch.iter().flatten());
            let flags = if batches.peek().is_none() { FLAG_LAST } else { 0 };
            put_frame(out, FrameType::Nak, flags, &body);
        }
        true
    }

    /// The places waiting for `hash`, once each: on the first call, the
    /// waiting files' holes move into the map by hash.
    fn take_spots(&mut self, hash: &Hash) -> Option<Vec<(usize, u64)>> {
        if self.holes_by_hash.is_empty() {
            for (i, w) in self.waiting.iter_mut().enumerate() {
                for (at, h, _) in std::mem::take(&mut w.holes) {
                    self.holes_by_hash.entry(h).or_default().push((i, at));
                }
            }
        }
        self.holes_by_hash.remove(hash)
    }
}

impl FilesReceiver {
    /// FILES_END: the last file ends; NAK what is missing, or finish.
    pub(super) fn files_end<'s, H: FilesHost<'s>>(&mut self, host: &mut H) -> Result<(), SessionError> {
        self.end_file(host)?;
        self.commit(host)?;
        if self.repairs.queue_naks(&mut self.out) {
            self.enter_repair();
        } else {
            self.finish_all(host);
        }
        Ok(())
    }

    /// One REPAIR frame: the good bytes of each NAKed chunk go into every
    /// hole waiting for them (and repair the store, if there is one; they
    /// are never kept in memory); after the last, finish the waiting files.
    pub(super) fn repair_frame<'s, H: FilesHost<'s>>(
        &mut self,
        flags: u16,
        body: &[u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        let (_, entries) = parse_chunks(body).map_err(malformed("REPAIR"))?;
        for e in entries {
            let e = e.map_err(malformed("REPAIR entry"))?;
            if !self.repairs.is_naked(e.hash) || e.len == 0 || e.len > MAX_CHUNK_LEN {
                return Err(FilesViolation::RepairNotNaked.into());
            }
            self.budget.work(u64::from(e.len))?;
            let mut zbuf = std::mem::take(&mut self.inflate.zbuf);
            let bytes: Result<&[u8], FilesViolation> = match e.data {
                ChunkData::Literal(b) if b.len() == e.len as usize => Ok(b),
                ChunkData::Zstd(c) => match self.inflate.exact(c, &mut zbuf, e.len as usize) {
                    true => Ok(&zbuf),
                    false => Err(FilesViolation::RepairZstd),
                },
                _ => Err(FilesViolation::RepairWithoutBytes),
            };
            let result = bytes.map(|bytes| self.repaired(e.hash, bytes, host));
            self.inflate.zbuf = zbuf;
            result?;
        }
        if flags & FLAG_LAST != 0 {
            self.finish_all(host);
        }
        Ok(())
    }

    /// The bytes of one REPAIR entry: if they match their hash, into the
    /// store and every hole waiting for them.
    fn repaired<'s, H: FilesHost<'s>>(&mut self, hash: &Hash, bytes: &[u8], host: &mut H) {
        if hash_matches(bytes, hash) {
            self.stats.report.repaired_bytes += bytes.len() as u64;
            if let Err(err) = host.repair(hash, bytes) {
                self.stats.note(&format!("store repair failed: {err}\n"));
            }
            self.fill_holes(hash, bytes, host);
        }
    }

    /// Writes the good `bytes` of `hash` into every hole waiting for
    /// them, each file reopened for its writes and parked again.
    fn fill_holes<'s, H: FilesHost<'s>>(&mut self, hash: &Hash, bytes: &[u8], host: &mut H) {
        let Some(spots) = self.repairs.take_spots(hash) else {
            return;
        };
        let waiting = &mut self.repairs.waiting;
        let mut open: Option<usize> = None;
        for (i, at) in spots {
            let Some(w) = waiting.get_mut(i) else {
                continue;
            };
            if w.broken.is_none() {
                match host.write(w.no, at, &mut [IoSlice::new(bytes)]) {
                    Ok(()) => {
                        w.missing -= 1;
                        host.wrote_chunk(w.no, at, hash, bytes.len() as u32);
                    }
                    Err(e) => w.broken = Some(e),
                }
            }
            if let Some(j) = open.filter(|&j| j != i) {
                host.park(waiting[j].no);
            }
            open = Some(i);
        }
        if let Some(j) = open {
            host.park(waiting[j].no);
        }
    }

    /// Finishes the files that waited for REPAIRs, one at a time (each
    /// reopened, landed or failed, closed), so their number never costs
    /// descriptors.
    pub(super) fn finish_waiting<'s, H: FilesHost<'s>>(&mut self, host: &mut H) {
        self.repairs.holes_by_hash.clear();
        for w in std::mem::take(&mut self.repairs.waiting) {
            let why = match w.broken {
                Some(e) => Some(Unfinished::Land(e)),
                None if w.missing > 0 => Some(Unfinished::NotRepaired),
                None => None,
            };
            match why {
                None => {
                    let spec = FileSpec {
                        rel: &w.rel,
                        size: w.size,
                        mtime_ns: w.mtime_ns,
                        mode: w.mode,
                        file_hash: w.file_hash,
                        held: false,
                    };
                    self.land(w.no, &spec, w.digest, None, host);
                }
                Some(why) => {
                    host.discard(w.no);
                    self.stats.fail(w.rel.as_bytes(), why);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_wire::Frame;

    #[test]
    fn each_hash_is_naked_once_in_order() {
        let mut c = Corrections::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(!c.is_naked(&a));
        assert!(c.nak(&a));
        assert!(c.nak(&b));
        assert!(!c.nak(&a));
        assert!(c.is_naked(&a) && c.is_naked(&b));
        let mut out = Vec::new();
        assert!(c.queue_naks(&mut out));
        let (frame, used) = Frame::parse(&out).expect("NAK");
        assert_eq!(used, out.len());
        assert_eq!(frame.header.frame_type, FrameType::Nak);
        assert_eq!(frame.header.flags, FLAG_LAST);
        assert_eq!(frame.body, [a, b].concat());
        // Queued once; a REPAIR for them is still let in.
        assert!(!c.queue_naks(&mut out));
        assert!(c.is_naked(&b));
    }

    #[test]
    fn many_naks_take_several_frames() {
        let per_frame = MAX_CONTROL_BODY as usize / 32;
        let mut c = Corrections::default();
        for i in 0..per_frame + 1 {
            let mut h = [0u8; 32];
            h[..8].copy_from_slice(&(i as u64).to_le_bytes());
            c.nak(&h);
        }
        let mut out = Vec::new();
        c.queue_naks(&mut out);
        let (first, used) = Frame::parse(&out).expect("first");
        assert_eq!((first.header.flags, first.body.len()), (0, per_frame * 32));
        let (second, _) = Frame::parse(&out[used..]).expect("second");
        assert_eq!((second.header.flags, second.body.len()), (FLAG_LAST, 32));
    }

    #[test]
    fn holes_are_found_by_hash_once() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let mut c = Corrections::default();
        c.waiting.push(Waiting {
            no: 0,
            rel: RelPath::parse(b"f").expect("path"),
            size: 30,
            mode: 0o644,
            mtime_ns: 0,
            file_hash: [0; 32],
            digest: [0; 32],
            holes: vec![(0, a, 10), (10, b, 10), (20, a, 10)],
            missing: 3,
            broken: None,
        });
        assert_eq!(c.take_spots(&a), Some(vec![(0, 0), (0, 20)]));
        assert_eq!(c.take_spots(&a), None);
        assert_eq!(c.take_spots(&b), Some(vec![(0, 10)]));
        assert!(c.waiting[0].holes.is_empty());
    }
}
