//! PROBE answers (docs/wire.md §10.10): whether this receiver holds each
//! file the sender probes, in order; older versions of probed files adopted
//! into the index within a budget (so their chunks serve the new version);
//! the PROBE_REPLY bitmap once the PROBE flagged LAST is in.

use pfs_wire::files::{parse_probe, ProbeHead, FLAG_LAST, PROBE_HEAD_LEN};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, FrameType};

use super::core::{malformed, FilesReceiver, ADOPT_MAX_BYTES, ADOPT_MAX_CHUNKS, MAX_PROBE_ENTRIES};
use super::host::FilesHost;
use crate::files::FilesViolation;
use crate::SessionError;

/// The answers so far, and what adopting may still cost.
#[derive(Debug)]
pub(super) struct ProbeAnswers {
    /// Answers to the PROBE entries so far.
    held: Vec<bool>,
    /// Bytes of existing destination files this session may still read to
    /// index them, and chunk records it may still add (see
    /// [`ADOPT_MAX_BYTES`], [`ADOPT_MAX_CHUNKS`]).
    adopt_left: u64,
    adopt_chunks_left: u64,
    /// The PROBE flagged LAST arrived.
    last: bool,
    /// PROBE_REPLY was queued: no more PROBE frames.
    pub(super) done: bool,
}

impl Default for ProbeAnswers {
    fn default() -> Self {
        Self {
            held: Vec::new(),
            adopt_left: ADOPT_MAX_BYTES,
            adopt_chunks_left: ADOPT_MAX_CHUNKS,
            last: false,
            done: false,
        }
    }
}

impl ProbeAnswers {
    /// Checks the head of a PROBE: after the last, out of order or past
    /// [`MAX_PROBE_ENTRIES`] it is refused.
    fn check(&self, head: &ProbeHead) -> Result<(), FilesViolation> {
        if self.last {
            return Err(FilesViolation::ProbeAfterLast);
        }
        if head.first_no != self.held.len() as u64 {
            return Err(FilesViolation::ProbeOrder {
                first: head.first_no,
                expected: self.held.len() as u64,
            });
        }
        if self.held.len() + head.count as usize > MAX_PROBE_ENTRIES {
            return Err(FilesViolation::ProbeLimit {
                max: MAX_PROBE_ENTRIES,
            });
        }
        Ok(())
    }

    /// Whether the PROBE flagged LAST is in and no reply was queued yet.
    pub(super) fn reply_due(&self) -> bool {
        self.last && !self.done
    }

    /// Queues the PROBE_REPLY frames into `out`: the bitmap of held
    /// entries, in order, as many frames as it takes.
    pub(super) fn reply(&mut self, out: &mut Vec<u8>) {
        let per_frame = (MAX_CONTROL_BODY as usize - PROBE_HEAD_LEN) * 8;
        let held = std::mem::take(&mut self.held);
        self.done = true;
        let mut body = Vec::with_capacity(MAX_CONTROL_BODY as usize);
        let mut first = 0usize;
        loop {
            let part = &held[first..(first + per_frame).min(held.len())];
            body.clear();
            body.extend_from_slice(
                &ProbeHead {
                    first_no: first as u64,
                    count: part.len() as u32,
                }
                .emit(),
            );
            body.resize(PROBE_HEAD_LEN + part.len().div_ceil(8), 0);
            for (j, &h) in part.iter().enumerate() {
                if h {
                    body[PROBE_HEAD_LEN + j / 8] |= 1 << (j % 8);
                }
            }
            first += part.len();
            let last = first == held.len();
            put_frame(
                out,
                FrameType::ProbeReply,
                if last { FLAG_LAST } else { 0 },
                &body,
            );
            if last {
                return;
            }
        }
    }
}

impl FilesReceiver {
    /// One PROBE body: whether this receiver holds each file (§10.10).
    pub(super) fn probe_frame<'s, H: FilesHost<'s>>(
        &mut self,
        flags: u16,
        body: &[u8],
        host: &mut H,
    ) -> Result<(), SessionError> {
        if self.probe.last {
            return Err(FilesViolation::ProbeAfterLast.into());
        }
        let (head, entries) = parse_probe(body).map_err(malformed("PROBE"))?;
        self.probe.check(&head)?;
        self.budget.charge(u64::from(head.count))?;
        let mut adopted = false;
        // Adopting is work this frame makes the receiver do, within the
        // same limit as hashing (skipped, not refused, past it).
        let mut frame_left = self.budget.frame_left();
        for e in entries {
            let e = e.map_err(malformed("PROBE entry"))?;
            // A path that is not valid is not held.
            let Ok(rel) = self.scope.full_path(e.path) else {
                self.probe.held.push(false);
                continue;
            };
            let mtime_ns = i128::from(e.mtime_sec) * 1_000_000_000 + i128::from(e.mtime_nsec);
            let mut held = host.holds(&rel, e.size, mtime_ns, &e.key);
            let p = &mut self.probe;
            let budget = p.adopt_left.min(frame_left);
            let min_chunk = u64::from(self.scope.params.min());
            // A file's chunks, at most: its size over the smallest chunk.
            let chunk_room = p.adopt_chunks_left.saturating_mul(min_chunk);
            if !held && budget > 0 && !self.scope.dry_run {
                // The file at that path is an older version, most likely:
                // its chunks may serve the new one (rsync's basis file),
                // or it is the same bytes under another mtime.
                let max = budget.min(chunk_room);
                let (read, same) = host.adopt(&rel, &self.scope.params, max, (e.size, &e.key));
                p.adopt_left = p.adopt_left.saturating_sub(read);
                frame_left = frame_left.saturating_sub(read);
                p.adopt_chunks_left = p.adopt_chunks_left.saturating_sub(read.div_ceil(min_chunk));
                adopted |= read > 0;
                held = same;
            }
            self.probe.held.push(held);
        }
        if adopted {
            self.commit(host)?;
        }
        self.probe.last = flags & FLAG_LAST != 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_wire::Frame;

    fn answers(held: Vec<bool>) -> ProbeAnswers {
        ProbeAnswers {
            held,
            last: true,
            ..ProbeAnswers::default()
        }
    }

    #[test]
    fn the_reply_is_a_bitmap_in_order() {
        let mut a = answers(vec![true, false, true, true, false, false, false, false, true]);
        assert!(a.reply_due());
        let mut out = Vec::new();
        a.reply(&mut out);
        assert!(a.done && !a.reply_due());
        let (frame, used) = Frame::parse(&out).expect("frame");
        assert_eq!(used, out.len());
        assert_eq!(frame.header.frame_type, FrameType::ProbeReply);
        assert_eq!(frame.header.flags, FLAG_LAST);
        let head = ProbeHead {
            first_no: 0,
            count: 9,
        }
        .emit();
        assert_eq!(&frame.body[..PROBE_HEAD_LEN], &head[..]);
        assert_eq!(&frame.body[PROBE_HEAD_LEN..], &[0b0000_1101, 0b0000_0001]);
    }

    #[test]
    fn a_long_reply_takes_several_frames() {
        let per_frame = (MAX_CONTROL_BODY as usize - PROBE_HEAD_LEN) * 8;
        let mut a = answers(vec![true; per_frame + 3]);
        let mut out = Vec::new();
        a.reply(&mut out);
        let (first, used) = Frame::parse(&out).expect("first");
        assert_eq!(first.header.flags, 0);
        let (second, rest) = Frame::parse(&out[used..]).expect("second");
        assert_eq!(used + rest, out.len());
        assert_eq!(second.header.flags, FLAG_LAST);
        let head = ProbeHead {
            first_no: per_frame as u64,
            count: 3,
        }
        .emit();
        assert_eq!(&second.body[..PROBE_HEAD_LEN], &head[..]);
        assert_eq!(&second.body[PROBE_HEAD_LEN..], &[0b111]);
    }

    #[test]
    fn probes_come_in_order_and_before_the_last() {
        let mut a = ProbeAnswers {
            held: vec![false; 4],
            ..ProbeAnswers::default()
        };
        assert!(a
            .check(&ProbeHead {
                first_no: 4,
                count: 2
            })
            .is_ok());
        assert!(matches!(
            a.check(&ProbeHead {
                first_no: 3,
                count: 2
            }),
            Err(FilesViolation::ProbeOrder {
                first: 3,
                expected: 4
            })
        ));
        assert!(matches!(
            a.check(&ProbeHead {
                first_no: 4,
                count: MAX_PROBE_ENTRIES as u32
            }),
            Err(FilesViolation::ProbeLimit { .. })
        ));
        a.last = true;
        assert!(matches!(
            a.check(&ProbeHead {
                first_no: 4,
                count: 1
            }),
            Err(FilesViolation::ProbeAfterLast)
        ));
    }
}
