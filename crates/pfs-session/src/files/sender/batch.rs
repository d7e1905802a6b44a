//! The send side of the sender core: the frame being built, the frames
//! ready to go out (in order), and the BATCH that small FILE/CHUNKS frames
//! gather in before they go out as one write — a zstd BATCH with
//! `--compress`, the frames as they are without it. Large frames go alone,
//! after the BATCH so far. It also owns the session's zstd context, shared
//! by BATCH frames and literal chunks.

use std::collections::VecDeque;

use pfs_wire::files::batch_head;
use pfs_wire::{put_frame, Frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

use crate::error::LocalError;
use crate::files::bwlimit::frame_target;
use crate::files::{SENDER_FRAME_TARGET, SENDER_FRAME_WORK};
use crate::framing::Transmit;
use crate::SessionError;

/// Frames up to this size ride in a BATCH; larger ones go alone.
const BATCH_FRAME_MAX: usize = 64 << 10;
/// A BATCH is sent when its frames reach this size.
const BATCH_TARGET: usize = 1 << 20;
/// Length of a BATCH body's head (its raw length and what follows).
const BATCH_HEAD_LEN: usize = 8;

/// A zstd compression context and the level it is set to (the context
/// itself has no `Debug`).
pub(super) struct Compressor {
    ctx: zstd::bulk::Compressor<'static>,
    level: i32,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").field("level", &self.level).finish()
    }
}

impl Compressor {
    /// A context at level 1.
    pub(super) fn new() -> Result<Self, SessionError> {
        let ctx = zstd::bulk::Compressor::new(1).map_err(|source| LocalError::Zstd {
            what: "compression context",
            source,
        })?;
        Ok(Self { ctx, level: 1 })
    }

    /// Compresses `src` into `dst` (replacing its contents) at `level`,
    /// switching the context's level only when it changes.
    pub(super) fn compress_into(
        &mut self,
        level: i32,
        src: &[u8],
        dst: &mut Vec<u8>,
    ) -> std::io::Result<usize> {
        if self.level != level {
            self.ctx.set_compression_level(level)?;
            self.level = level;
        }
        dst.clear();
        dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
        self.ctx.compress_to_buffer(src, dst)
    }
}

/// What is ready to go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// `out`: control frames.
    Out,
    /// `batch_hdr` + head + `zout`: one BATCH.
    Batch,
    /// `raw`: the batched frames as they are, one write (no `--compress`).
    Raw,
    /// `frame_hdr` + `frame`: one large frame.
    Frame(&'static str),
}

/// The sender's outgoing frames: see the module doc. The frame being built
/// (FILE, CHUNKS, FILE_DONE, FILE_DROP, REPAIR) is [`Self::frame`]; once
/// built, [`Self::queue`] batches it or queues it alone. One transmission
/// at a time is handed out ([`Self::transmit`]) until
/// [`Self::transmitted`] says it was written.
#[derive(Debug)]
pub(super) struct Outbox {
    /// Control frames, one write.
    out: Vec<u8>,
    ready: VecDeque<Ready>,
    /// Small frames waiting to go out as one BATCH.
    batch: Vec<u8>,
    /// Chunk bytes the frames in `batch` name.
    batch_work: u64,
    /// BATCH size to aim at (smaller when paced: `bwlimit`).
    batch_target: usize,
    batch_hdr: [u8; FRAME_HEADER_LEN],
    batch_head: [u8; BATCH_HEAD_LEN],
    /// Compressed BATCH body.
    zout: Vec<u8>,
    /// Batched frames going out as they are.
    raw: Vec<u8>,
    /// `--compress`: the zstd level of BATCH frames and literal chunks.
    pub(super) compress: Option<i32>,
    /// The frame being built, and the header it goes out with when alone.
    pub(super) frame: Vec<u8>,
    frame_hdr: [u8; FRAME_HEADER_LEN],
    /// The extended attributes of the FILE being built, encoded.
    pub(super) xattrs: Vec<u8>,
    /// Frame size to aim at (smaller when paced: `bwlimit`).
    pub(super) frame_target: usize,
    /// The session's zstd context, and a buffer for one compressed chunk.
    pub(super) z: Compressor,
    pub(super) zbuf: Vec<u8>,
    /// Bytes written to the transport.
    sent: u64,
}

impl Outbox {
    /// Nothing queued; frames compressed at `compress`, sized for `bwlimit`.
    pub(super) fn new(compress: Option<i32>, bwlimit: Option<u64>) -> Result<Self, SessionError> {
        Ok(Self {
            out: Vec::new(),
            ready: VecDeque::new(),
            batch: Vec::with_capacity(BATCH_TARGET + BATCH_FRAME_MAX),
            batch_work: 0,
            batch_target: bwlimit.map_or(BATCH_TARGET, |r| frame_target(r, BATCH_TARGET)),
            batch_hdr: [0; FRAME_HEADER_LEN],
            batch_head: [0; BATCH_HEAD_LEN],
            zout: Vec::new(),
            raw: Vec::new(),
            compress,
            frame: Vec::with_capacity(SENDER_FRAME_TARGET + (1 << 20)),
            frame_hdr: [0; FRAME_HEADER_LEN],
            xattrs: Vec::new(),
            frame_target: bwlimit.map_or(SENDER_FRAME_TARGET, |r| frame_target(r, SENDER_FRAME_TARGET)),
            z: Compressor::new()?,
            zbuf: Vec::new(),
            sent: 0,
        })
    }

    /// Whether nothing is ready to go out.
    pub(super) fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// Bytes written so far.
    pub(super) fn sent(&self) -> u64 {
        self.sent
    }

    /// A control frame, after what is queued (control frames queued one
    /// after another go out in one write).
    pub(super) fn control(&mut self, ty: FrameType, flags: u16, body: &[u8]) {
        put_frame(&mut self.out, ty, flags, body);
        self.ready_out();
    }

    fn ready_out(&mut self) {
        if self.ready.back() != Some(&Ready::Out) {
            self.ready.push_back(Ready::Out);
        }
    }

    /// The frame in [`Self::frame`], naming `work` chunk bytes, goes out:
    /// small ones in the BATCH (never more than [`SENDER_FRAME_WORK`] in
    /// one), large ones alone (after the BATCH so far).
    pub(super) fn queue(&mut self, ty: FrameType, what: &'static str, work: u64) -> Result<(), SessionError> {
        let len = FRAME_HEADER_LEN + self.frame.len();
        if len > BATCH_FRAME_MAX {
            self.flush()?;
            return self.alone(ty, 0, what);
        }
        if self.batch_work + work > SENDER_FRAME_WORK {
            // Leaves only this frame in the batch: below the batch target, so
            // no second BATCH is queued before this one is sent.
            self.flush()?;
        }
        put_frame(&mut self.batch, ty, 0, &self.frame);
        self.batch_work += work;
        if self.batch.len() >= self.batch_target {
            self.flush()?;
        }
        Ok(())
    }

    /// The frame in [`Self::frame`] goes out alone, with `flags`, after
    /// what is queued (the BATCH so far must have been flushed).
    pub(super) fn alone(
        &mut self,
        ty: FrameType,
        flags: u16,
        what: &'static str,
    ) -> Result<(), SessionError> {
        self.frame_hdr = FrameHeader {
            frame_type: ty,
            flags,
            length: u32::try_from(self.frame.len()).map_err(|_| LocalError::FrameTooLarge { what })?,
        }
        .emit();
        self.ready.push_back(Ready::Frame(what));
        Ok(())
    }

    /// The queued frames, ready to go: as one zstd BATCH with `--compress`;
    /// without it as they are, in one write (compressing a batch of small
    /// files' literals costs the sender more CPU than a fast link saves:
    /// the Linux tree at level 1, ~2 s of a 9 s cold send).
    pub(super) fn flush(&mut self) -> Result<(), SessionError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let Some(level) = self.compress else {
            // One flush per stream step, sent before the next step: as with
            // `zout`, nothing is waiting in `raw`.
            debug_assert!(self.raw.is_empty());
            std::mem::swap(&mut self.batch, &mut self.raw);
            self.batch.clear();
            self.batch_work = 0;
            self.ready.push_back(Ready::Raw);
            return Ok(());
        };
        self.z
            .compress_into(level, &self.batch, &mut self.zout)
            .map_err(|source| LocalError::Zstd {
                what: "compressing a batch",
                source,
            })?;
        self.batch_head = batch_head(self.batch.len() as u32);
        self.batch_hdr = FrameHeader {
            frame_type: FrameType::Batch,
            flags: 0,
            length: (self.batch_head.len() + self.zout.len()) as u32,
        }
        .emit();
        self.batch.clear();
        self.batch_work = 0;
        self.ready.push_back(Ready::Batch);
        Ok(())
    }

    /// A control frame that goes out in control BATCH frames
    /// ([`Self::flush_control`]), not alone (PROBE).
    pub(super) fn batch_control(&mut self, ty: FrameType, flags: u16, body: &[u8]) {
        put_frame(&mut self.batch, ty, flags, body);
    }

    /// The frames of [`Self::batch_control`] as control BATCH frames, each
    /// at most the batch target raw, compressed at the session's level (1
    /// without `--compress`).
    pub(super) fn flush_control(&mut self) {
        let raw = std::mem::take(&mut self.batch);
        let level = self.compress.unwrap_or(1);
        let mut rest = &raw[..];
        while !rest.is_empty() {
            let mut end = 0;
            while end < rest.len() {
                let Ok((_, used)) = Frame::parse(&rest[end..]) else {
                    break;
                };
                if end > 0 && end + used > self.batch_target {
                    break;
                }
                end += used;
            }
            let part = &rest[..end.max(1).min(rest.len())];
            match self.z.compress_into(level, part, &mut self.zout) {
                Ok(_) => {
                    let mut body = batch_head(part.len() as u32).to_vec();
                    body.extend_from_slice(&self.zout);
                    put_frame(&mut self.out, FrameType::Batch, 0, &body);
                }
                // Not compressible here: the frames go as they are.
                Err(_) => self.out.extend_from_slice(part),
            }
            rest = &rest[part.len()..];
        }
        self.ready_out();
        self.batch = raw;
        self.batch.clear();
    }

    /// The next transmission, if any is ready.
    pub(super) fn transmit(&self) -> Option<Transmit<'_>> {
        self.ready.front().map(|r| match *r {
            Ready::Out => Transmit::Parts {
                parts: [&self.out[..], &[], &[]],
                what: "control frame",
            },
            Ready::Batch => Transmit::Parts {
                parts: [&self.batch_hdr[..], &self.batch_head[..], &self.zout[..]],
                what: "BATCH",
            },
            Ready::Raw => Transmit::Parts {
                parts: [&self.raw[..], &[], &[]],
                what: "FILE and CHUNKS frames",
            },
            Ready::Frame(what) => Transmit::Parts {
                parts: [&self.frame_hdr[..], &self.frame[..], &[]],
                what,
            },
        })
    }

    /// The transmission of [`Self::transmit`] was written.
    pub(super) fn transmitted(&mut self) {
        let n = match self.ready.pop_front() {
            Some(Ready::Out) => {
                let n = self.out.len();
                self.out.clear();
                n
            }
            Some(Ready::Batch) => FRAME_HEADER_LEN + self.batch_head.len() + self.zout.len(),
            Some(Ready::Raw) => {
                let n = self.raw.len();
                self.raw.clear();
                n
            }
            Some(Ready::Frame(_)) => FRAME_HEADER_LEN + self.frame.len(),
            None => 0,
        };
        self.sent += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_wire::files::parse_batch;

    /// Everything queued, written out in order; the bytes of each write.
    fn drain(o: &mut Outbox) -> Vec<(&'static str, Vec<u8>)> {
        let mut writes = Vec::new();
        while let Some(t) = o.transmit() {
            let mut bytes = Vec::new();
            t.append_to(&mut bytes);
            writes.push((t.what(), bytes));
            o.transmitted();
        }
        writes
    }

    /// The frames in `bytes`, as (type, body).
    fn frames(mut bytes: &[u8]) -> Vec<(FrameType, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (f, used) = Frame::parse(bytes).expect("frame");
            out.push((f.header.frame_type, f.body.to_vec()));
            bytes = &bytes[used..];
        }
        out
    }

    fn build(o: &mut Outbox, body: &[u8]) {
        o.frame.clear();
        o.frame.extend_from_slice(body);
    }

    #[test]
    fn small_frames_go_as_one_write_and_large_ones_alone_after_them() {
        let mut o = Outbox::new(None, None).expect("outbox");
        build(&mut o, b"file one");
        o.queue(FrameType::File, "FILE", 0).expect("queue");
        build(&mut o, &[7; 100]);
        o.queue(FrameType::Chunks, "CHUNKS", 100).expect("queue");
        assert!(o.is_empty(), "small frames wait for the batch target");
        build(&mut o, &vec![9; BATCH_FRAME_MAX]);
        o.queue(FrameType::Chunks, "CHUNKS", 1 << 16).expect("queue");
        let writes = drain(&mut o);
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].0, "FILE and CHUNKS frames");
        let small = frames(&writes[0].1);
        assert_eq!(small.len(), 2);
        assert_eq!(small[0], (FrameType::File, b"file one".to_vec()));
        assert_eq!(writes[1].0, "CHUNKS");
        assert_eq!(
            frames(&writes[1].1),
            vec![(FrameType::Chunks, vec![9; BATCH_FRAME_MAX])]
        );
        let total: usize = writes.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(o.sent(), total as u64, "every written byte is counted");
    }

    #[test]
    fn a_compressed_batch_holds_the_frames_as_queued() {
        let mut o = Outbox::new(Some(3), None).expect("outbox");
        o.control(FrameType::Plan, 0, b"plan");
        for i in 0..10u8 {
            build(&mut o, &[i; 300]);
            o.queue(FrameType::Chunks, "CHUNKS", 300).expect("queue");
        }
        o.flush().expect("flush");
        let writes = drain(&mut o);
        assert_eq!(writes.len(), 2, "the control frame, then one BATCH");
        assert_eq!(frames(&writes[0].1), vec![(FrameType::Plan, b"plan".to_vec())]);
        let batch = frames(&writes[1].1);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].0, FrameType::Batch);
        let (raw_len, z) = parse_batch(&batch[0].1).expect("BATCH body");
        let raw = zstd::bulk::decompress(z, raw_len as usize).expect("zstd");
        let inner = frames(&raw);
        assert_eq!(inner.len(), 10);
        assert!(inner
            .iter()
            .enumerate()
            .all(|(i, (ty, b))| *ty == FrameType::Chunks && b == &vec![i as u8; 300]));
    }

    #[test]
    fn no_batch_names_more_chunk_bytes_than_one_frame_may() {
        let mut o = Outbox::new(None, None).expect("outbox");
        build(&mut o, b"a");
        o.queue(FrameType::Chunks, "CHUNKS", SENDER_FRAME_WORK - 1)
            .expect("queue");
        build(&mut o, b"b");
        o.queue(FrameType::Chunks, "CHUNKS", 2).expect("queue");
        // Each step's frames are written before the next step.
        let first = drain(&mut o);
        assert_eq!(first.len(), 1, "the second frame starts a new batch");
        assert_eq!(frames(&first[0].1), vec![(FrameType::Chunks, b"a".to_vec())]);
        o.flush().expect("flush");
        let second = drain(&mut o);
        assert_eq!(frames(&second[0].1), vec![(FrameType::Chunks, b"b".to_vec())]);
    }

    #[test]
    fn control_batches_stay_under_the_batch_target_raw() {
        let mut o = Outbox::new(None, None).expect("outbox");
        // PROBE bodies are control bodies: at most 64 KiB each.
        let body = vec![5u8; 60 << 10];
        for _ in 0..40 {
            o.batch_control(FrameType::Probe, 0, &body);
        }
        o.flush_control();
        let writes = drain(&mut o);
        assert_eq!(writes.len(), 1, "control BATCH frames go in one write");
        let batches = frames(&writes[0].1);
        let mut inner = 0;
        for (ty, b) in &batches {
            assert_eq!(*ty, FrameType::Batch);
            let (raw_len, z) = parse_batch(b).expect("BATCH body");
            assert!(raw_len as usize <= BATCH_TARGET);
            let raw = zstd::bulk::decompress(z, raw_len as usize).expect("zstd");
            inner += frames(&raw).len();
        }
        assert_eq!(inner, 40);
        assert!(batches.len() >= 3);
    }
}
