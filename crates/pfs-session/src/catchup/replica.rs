//! The replica side of a catch-up as a sans-I/O state machine: it sends
//! CATCHUP_BEGIN, compares the source's region hashes with its own, asks
//! with its block hashes about the regions that differ (a window of
//! [`HASHES_WINDOW`] bytes unanswered), writes the blocks it gets into its
//! blob after checking them against its own bounds and the runs it asked,
//! and at CATCHUP_END hashes the rewritten regions again and compares the
//! root with the source's.
//!
//! Memory per session, whatever the source sends: 16 bytes per region of
//! the blob at most (the regions that differ, and those rewritten), 48
//! bytes per unanswered run of hashes (at most [`HASHES_WINDOW`] / 48 of
//! them), one frame being built (≤ 32 KiB) — plus the driver's receive
//! buffer, which holds one CATCHUP_BLOCKS (≤ `max_blocks_body`).

use std::collections::VecDeque;
use std::time::Instant;

use pfs_blob::{BlockKey, BLOCK_HASH_LEN};
use pfs_wire::catchup::{
    BlockHashes, CatchupBegin, CatchupBlocks, CatchupEnd, RegionHashes, RunHead, FLAG_LAST, MAX_BLOCK_HASHES,
    RUN_HEAD_LEN,
};
use pfs_wire::{put_frame, FrameHeader, FrameType, WireError, FRAME_HEADER_LEN};

use super::host::ReplicaHost;
use super::{CatchUpConfig, CatchUpStats, CatchUpViolation, HASHES_WINDOW};
use crate::error::{Timeout, Violation};
use crate::framing::{refusal, split_frame};
use crate::SessionError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// CATCHUP_BEGIN is next.
    Begin,
    /// Comparing, asking and writing.
    Running,
    /// The source's END arrived; ours is queued.
    Done,
}

/// A run of block hashes sent and not yet wholly answered.
#[derive(Debug, Clone, Copy)]
struct Asked {
    end: u64,
    /// Blocks below this were answered (the next BLOCKS starts here or later).
    cursor: u64,
    /// Its frame's size, for the window.
    frame_len: usize,
}

/// Where the replica is in asking about the regions that differ.
#[derive(Debug, Default)]
struct Asking {
    /// Regions that differ, not yet asked about.
    regions: VecDeque<u64>,
    /// Blocks of the region being asked about: next, end.
    blocks: Option<(u64, u64)>,
    /// Runs asked and unanswered, oldest first.
    asked: VecDeque<Asked>,
    /// Bytes of their frames.
    window: usize,
    /// The empty LAST run was sent: nothing more is asked.
    finished: bool,
}

/// One replica of a catch-up, sans I/O.
///
/// # Call contract
/// The host (see [`super::catch_up_replica`]) loops: [`Self::poll_transmit`]
/// with its [`ReplicaHost`] until `None`, writing each frame whole; then,
/// unless [`Self::is_done`], feeds what has arrived to
/// [`Self::handle_input`] (one whole frame at a time; [`Self::want`] says
/// how many bytes it needs), reading first when it took nothing, at most
/// until [`Self::poll_timeout`], after which it calls
/// [`Self::handle_timeout`]. When done, [`Self::poll_transmit`] yields the
/// replica's CATCHUP_END. Whatever ends the catch-up, the host hashes
/// [`Self::rewritten`] regions again (a new attempt then resumes where
/// this one stopped).
#[derive(Debug)]
pub struct CatchUpReplica {
    cfg: CatchUpConfig,
    nonce: u64,
    key: BlockKey,
    /// The root the blob must have at the end (the source's, from HELLO).
    target: [u8; 32],
    state: State,
    /// The next region whose hash the source owes; `None` once all arrived.
    next_region: Option<u64>,
    asking: Asking,
    /// Regions invalidated (and so rewritten), in order.
    rewritten: Vec<usize>,
    out: Vec<u8>,
    stats: CatchUpStats,
    deadline: Instant,
}

impl CatchUpReplica {
    /// A catch-up of a session whose HELLO carried `sender_nonce` and the
    /// fingerprint root `target`; `replica_nonce` is this side's random
    /// nonce. The host's blob is `blob_len` bytes.
    pub fn new(
        sender_nonce: u64,
        replica_nonce: u64,
        target: [u8; 32],
        cfg: &CatchUpConfig,
        now: Instant,
    ) -> Self {
        Self {
            cfg: *cfg,
            nonce: replica_nonce,
            key: BlockKey::derive(sender_nonce, replica_nonce),
            target,
            state: State::Begin,
            next_region: Some(0),
            asking: Asking::default(),
            rewritten: Vec::new(),
            out: Vec::with_capacity(
                RUN_HEAD_LEN + FRAME_HEADER_LEN + MAX_BLOCK_HASHES as usize * BLOCK_HASH_LEN,
            ),
            stats: CatchUpStats::default(),
            deadline: now + cfg.idle_timeout,
        }
    }

    /// Whether the source's CATCHUP_END arrived (ours is then queued).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Counts so far.
    pub fn stats(&self) -> CatchUpStats {
        self.stats
    }

    /// Regions rewritten (or about to be): the host hashes them again if
    /// the catch-up ends early.
    pub fn rewritten(&self) -> &[usize] {
        &self.rewritten
    }

    /// Contiguous bytes the next frame needs.
    pub fn want(&self, input: &[u8]) -> usize {
        crate::framing::frame_want(input)
    }

    /// When [`Self::handle_timeout`] must run if nothing arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        (self.state != State::Done).then_some(self.deadline)
    }

    /// A deadline passed: the source went silent, or trickles a frame.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.poll_timeout() {
            Some(d) if now >= d => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error for a source that let the deadline pass.
    pub fn timed_out(&self) -> SessionError {
        SessionError::TimedOut {
            what: Timeout::Idle {
                during: "a catch-up frame",
                after: self.cfg.idle_timeout,
            },
        }
    }

    /// Progress interval of its configuration.
    pub fn log_interval(&self) -> Option<std::time::Duration> {
        self.cfg.log_interval
    }

    /// Largest CATCHUP_BLOCKS body this replica accepts.
    pub fn max_blocks_body(&self) -> u32 {
        self.cfg.max_blocks_body
    }

    /// The next frame to write, if any: BEGIN, a run of block hashes while
    /// the window allows, the empty LAST run, or (when done) END.
    #[must_use = "what to send next is lost unless it is sent"]
    pub fn poll_transmit(&mut self, host: &dyn ReplicaHost) -> Option<&[u8]> {
        if self.state == State::Done {
            // END is in `out`, for `end_frame`.
            return None;
        }
        self.out.clear();
        match self.state {
            State::Begin => {
                let begin = CatchupBegin {
                    replica_nonce: self.nonce,
                    block_size: self.cfg.block_size,
                    max_blocks_body: self.cfg.max_blocks_body,
                    regions: region_count(host),
                };
                put_frame(&mut self.out, FrameType::CatchupBegin, 0, &begin.emit());
                self.state = State::Running;
            }
            State::Running | State::Done => self.next_hashes(host),
        }
        self.stats.wire_bytes += self.out.len() as u64;
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// Builds the next CATCHUP_HASHES into `out`, if the window allows one.
    fn next_hashes(&mut self, host: &dyn ReplicaHost) {
        let a = &mut self.asking;
        if a.finished {
            return;
        }
        let bs = u64::from(self.cfg.block_size);
        let data = host.data();
        let len = data.len() as u64;
        if a.blocks.is_none() {
            if let Some(r) = a.regions.pop_front() {
                let rs = u64::from(host.region_size());
                let start = r * rs / bs;
                let end = ((r + 1) * rs).min(len).div_ceil(bs);
                a.blocks = Some((start, end));
            }
        }
        let Some((next, end)) = a.blocks else {
            if self.next_region.is_none() && a.asked.is_empty() {
                // Everything asked was answered: the empty LAST run.
                let mut body = Vec::with_capacity(RUN_HEAD_LEN);
                BlockHashes::emit(0, std::iter::empty(), &mut body);
                put_frame(&mut self.out, FrameType::CatchupHashes, FLAG_LAST, &body);
                a.finished = true;
            }
            return;
        };
        let count = (end - next).min(u64::from(MAX_BLOCK_HASHES));
        let frame_len = FRAME_HEADER_LEN + RUN_HEAD_LEN + count as usize * BLOCK_HASH_LEN;
        if a.window > 0 && a.window + frame_len > HASHES_WINDOW {
            return;
        }
        // Written in place: header, head, then each block's hash.
        self.out.extend_from_slice(
            &FrameHeader {
                frame_type: FrameType::CatchupHashes,
                flags: 0,
                length: (frame_len - FRAME_HEADER_LEN) as u32,
            }
            .emit(),
        );
        self.out.extend_from_slice(
            &RunHead {
                first: next,
                count: count as u32,
            }
            .emit(),
        );
        for b in next..next + count {
            let from = (b * bs) as usize;
            let to = ((b + 1) * bs).min(len) as usize;
            self.out.extend_from_slice(&self.key.hash(&data[from..to]));
        }
        a.asked.push_back(Asked {
            end: next + count,
            cursor: next,
            frame_len,
        });
        a.window += frame_len;
        a.blocks = (next + count < end).then_some((next + count, end));
        self.stats.blocks_compared += count;
    }

    /// Consumes the first frame in `input` if it is whole; returns the
    /// bytes used. Blocks are written into the host's blob here.
    pub fn handle_input(
        &mut self,
        now: Instant,
        input: &[u8],
        host: &mut dyn ReplicaHost,
    ) -> Result<usize, SessionError> {
        if self.state != State::Running || input.len() < FRAME_HEADER_LEN {
            return Ok(0);
        }
        let fh = FrameHeader::parse(input).map_err(SessionError::malformed("frame header"))?;
        if fh.frame_type == FrameType::CatchupBlocks && fh.length > self.cfg.max_blocks_body {
            return Err(Violation::from(CatchUpViolation::BlocksTooLarge {
                len: fh.length,
                max: self.cfg.max_blocks_body,
            })
            .into());
        }
        let Some(frame) = split_frame(input, self.cfg.max_blocks_body.max(64 * 1024) as usize)? else {
            return Ok(0);
        };
        let body = frame.body;
        match fh.frame_type {
            FrameType::Error => return Err(refusal(body)),
            FrameType::CatchupRegions if self.next_region.is_some() => self.regions(fh.flags, body, host)?,
            FrameType::CatchupBlocks => self.blocks(fh.flags, body, host)?,
            FrameType::CatchupEnd => self.end(body, host)?,
            other => {
                return Err(Violation::UnexpectedFrame {
                    expected: "CATCHUP_REGIONS, CATCHUP_BLOCKS or CATCHUP_END",
                    got: other,
                }
                .into())
            }
        }
        self.stats.wire_bytes += frame.len as u64;
        self.deadline = now + self.cfg.idle_timeout;
        Ok(frame.len)
    }

    /// A run of the source's region hashes: those that differ from ours
    /// are marked rewritten and queued for asking.
    fn regions(&mut self, flags: u16, body: &[u8], host: &mut dyn ReplicaHost) -> Result<(), SessionError> {
        let run = RegionHashes::parse(body).map_err(SessionError::malformed("CATCHUP_REGIONS"))?;
        let total = region_count(host);
        let expected = self.next_region.unwrap_or(total);
        let end = run.head.first + u64::from(run.head.count);
        let violation = if run.head.first != expected {
            Some(CatchUpViolation::RegionOrder {
                got: run.head.first,
                expected,
            })
        } else if end > total {
            Some(CatchUpViolation::RegionsPastEnd { end, regions: total })
        } else if flags & FLAG_LAST != 0 && end != total {
            Some(CatchUpViolation::RegionsShort { end, regions: total })
        } else {
            None
        };
        if let Some(v) = violation {
            return Err(Violation::from(v).into());
        }
        let first_new = self.rewritten.len();
        for (i, theirs) in run.hashes().enumerate() {
            let r = run.head.first + i as u64;
            if host.region_hash(r as usize) != *theirs {
                self.rewritten.push(r as usize);
                self.asking.regions.push_back(r);
            }
        }
        // Before any block of them can arrive: a kill midway leaves them unknown.
        if self.rewritten.len() > first_new {
            host.invalidate(&self.rewritten[first_new..])?;
        }
        self.stats.regions = end;
        self.stats.regions_differing = self.rewritten.len() as u64;
        self.next_region = (end < total).then_some(end);
        Ok(())
    }

    /// Blocks answering the oldest run asked: checked against it and this
    /// blob, then written.
    fn blocks(&mut self, flags: u16, body: &[u8], host: &mut dyn ReplicaHost) -> Result<(), SessionError> {
        let bs = self.cfg.block_size;
        let len = host.data().len() as u64;
        let blocks = CatchupBlocks::parse(body, bs, len).map_err(|error| -> SessionError {
            match error {
                WireError::DescriptorOverflow => {
                    let (first, count) = RunHead::parse(body).map_or((0, 0), |h| (h.first, h.count));
                    Violation::from(CatchUpViolation::BlocksOutside { first, count }).into()
                }
                error => SessionError::Malformed {
                    context: "CATCHUP_BLOCKS",
                    error,
                },
            }
        })?;
        let (first, count) = (blocks.head.first, blocks.head.count);
        let end = first + u64::from(count);
        let last = flags & FLAG_LAST != 0;
        if count == 0 && !last {
            return Err(Violation::from(CatchUpViolation::BlocksEmpty).into());
        }
        let Some(run) = self.asking.asked.front_mut() else {
            return Err(Violation::from(CatchUpViolation::BlocksUnasked { first, end }).into());
        };
        let inside = if count == 0 {
            first >= run.cursor && first <= run.end
        } else {
            first >= run.cursor && end <= run.end
        };
        if !inside {
            return Err(Violation::from(CatchUpViolation::BlocksUnasked { first, end }).into());
        }
        if count > 0 {
            host.write(first * u64::from(bs), blocks.bytes)?;
            run.cursor = end;
            self.stats.blocks_moved += u64::from(count);
            self.stats.bytes_moved += blocks.bytes.len() as u64;
        }
        if last {
            let done = self.asking.asked.pop_front().map_or(0, |r| r.frame_len);
            self.asking.window -= done;
        }
        Ok(())
    }

    /// The source's CATCHUP_END: everything was asked and answered; hash
    /// the rewritten regions again and compare roots, then queue our END.
    fn end(&mut self, body: &[u8], host: &mut dyn ReplicaHost) -> Result<(), SessionError> {
        let theirs = CatchupEnd::parse(body).map_err(SessionError::malformed("CATCHUP_END"))?;
        let missing = if self.next_region.is_some() {
            Some("region hashes")
        } else if !self.asking.finished {
            Some("runs of block hashes not asked yet")
        } else if !self.asking.asked.is_empty() {
            Some("runs of block hashes not answered")
        } else {
            None
        };
        if let Some(what) = missing {
            return Err(Violation::from(CatchUpViolation::EndEarly { what }).into());
        }
        let root = host.rehash(&self.rewritten)?;
        self.rewritten.clear();
        if root != self.target || theirs.root != self.target {
            return Err(Violation::from(CatchUpViolation::RootMismatch {
                replica: root,
                wanted: theirs.root,
            })
            .into());
        }
        let end = CatchupEnd {
            blocks_compared: self.stats.blocks_compared,
            blocks_moved: self.stats.blocks_moved,
            bytes_moved: self.stats.bytes_moved,
            root,
        };
        self.out.clear();
        put_frame(&mut self.out, FrameType::CatchupEnd, 0, &end.emit());
        self.state = State::Done;
        Ok(())
    }

    /// The replica's CATCHUP_END, once done (write it, then the session
    /// goes on).
    pub fn end_frame(&self) -> Option<&[u8]> {
        (self.state == State::Done && !self.out.is_empty()).then_some(&self.out[..])
    }
}

/// Regions of the host's blob.
fn region_count(host: &dyn ReplicaHost) -> u64 {
    (host.data().len() as u64).div_ceil(u64::from(host.region_size().max(1)))
}
