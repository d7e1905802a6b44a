//! The source side of a catch-up as a sans-I/O state machine: it waits for
//! the replica's CATCHUP_BEGIN, sends its region hashes, answers each run
//! of the replica's block hashes with the blocks whose hashes differ (their
//! bytes straight from the blob, no copy), and ends with CATCHUP_END.

use std::time::Instant;

use pfs_blob::{block_size_ok, BlockKey, Fingerprint};
use pfs_wire::catchup::{
    BlockHashes, CatchupBegin, CatchupEnd, RegionHashes, RunHead, FLAG_LAST, MAX_REGION_HASHES, RUN_HEAD_LEN,
};
use pfs_wire::{put_frame, FrameHeader, FrameType};

use super::{CatchUpConfig, CatchUpStats, CatchUpViolation};
use crate::error::{Timeout, Violation};
use crate::framing::{frame_want, refusal, split_frame, Transmit};
use crate::SessionError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for CATCHUP_BEGIN.
    AwaitBegin,
    /// Sending region hashes; the next run starts at this region.
    Regions(u64),
    /// Answering runs of block hashes.
    Answering,
    /// The replica asked its last: CATCHUP_END is next.
    SendEnd,
    /// Waiting for the replica's CATCHUP_END.
    AwaitEnd,
    Done,
}

/// What the replica set in CATCHUP_BEGIN.
#[derive(Debug, Clone)]
struct Params {
    key: BlockKey,
    block_size: u32,
    /// Most blocks in one CATCHUP_BLOCKS.
    blocks_per_frame: u64,
}

/// The run of block hashes being answered: which of its blocks differ,
/// and where the next CATCHUP_BLOCKS starts.
#[derive(Debug, Default)]
struct Answer {
    first: u64,
    /// One flag per block of the run (reused buffer, ≤ 2048).
    differs: Vec<bool>,
    /// Index in `differs` of the next block to look at; `None`: answered.
    cursor: Option<usize>,
}

/// One source of a catch-up, sans I/O.
///
/// # Call contract
/// The host (see [`super::catch_up_source`]) loops: [`Self::poll_transmit`]
/// until `None`, sending each [`Transmit`] whole; then, unless
/// [`Self::is_done`], feeds what has arrived to [`Self::handle_input`]
/// (one whole frame at a time; [`Self::want`] says how many bytes it
/// needs), reading first when it took nothing, at most until
/// [`Self::poll_timeout`], after which it calls [`Self::handle_timeout`].
/// Once done, [`Self::stats`] and [`Self::replica_end`] say what happened.
#[derive(Debug)]
pub struct CatchUpSource<'b> {
    data: &'b [u8],
    fp: &'b Fingerprint,
    sender_nonce: u64,
    cfg: CatchUpConfig,
    state: State,
    params: Option<Params>,
    answer: Answer,
    /// A frame header and head (the bytes of BLOCKS follow from the blob).
    out: Vec<u8>,
    stats: CatchUpStats,
    deadline: Option<Instant>,
    replica_end: Option<CatchupEnd>,
}

impl<'b> CatchUpSource<'b> {
    /// A catch-up of `data` (whose fingerprint is `fp`) in the session whose
    /// HELLO carried `sender_nonce`, starting at `now`.
    pub fn new(
        data: &'b [u8],
        fp: &'b Fingerprint,
        sender_nonce: u64,
        cfg: &CatchUpConfig,
        now: Instant,
    ) -> Self {
        Self {
            data,
            fp,
            sender_nonce,
            cfg: *cfg,
            state: State::AwaitBegin,
            params: None,
            answer: Answer::default(),
            out: Vec::with_capacity(MAX_REGION_HASHES as usize * 32 + 64),
            stats: CatchUpStats::default(),
            deadline: Some(now + cfg.idle_timeout),
            replica_end: None,
        }
    }

    /// Whether the replica's CATCHUP_END arrived.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Counts so far.
    pub fn stats(&self) -> CatchUpStats {
        self.stats
    }

    /// The replica's CATCHUP_END, once done.
    pub fn replica_end(&self) -> Option<CatchupEnd> {
        self.replica_end
    }

    /// Contiguous bytes the next frame needs.
    pub fn want(&self, input: &[u8]) -> usize {
        frame_want(input)
    }

    /// When [`Self::handle_timeout`] must run if nothing arrives.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// A deadline passed: the replica went silent.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), SessionError> {
        match self.deadline {
            Some(d) if now >= d => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error for a replica that let the deadline pass.
    pub fn timed_out(&self) -> SessionError {
        SessionError::TimedOut {
            what: Timeout::Reply {
                during: "catch-up",
                after: self.cfg.idle_timeout,
            },
        }
    }

    /// What to send next, or `None` while input is awaited or at the end.
    #[must_use = "what to send next is lost unless it is sent"]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        self.out.clear();
        match self.state {
            State::Regions(first) => {
                let total = self.fp.regions.len() as u64;
                let end = (first + u64::from(MAX_REGION_HASHES)).min(total);
                let run = &self.fp.regions[first as usize..end as usize];
                let mut body = Vec::with_capacity(RUN_HEAD_LEN + run.len() * 32);
                RegionHashes::emit(first, run.iter(), &mut body);
                let flags = if end == total { FLAG_LAST } else { 0 };
                put_frame(&mut self.out, FrameType::CatchupRegions, flags, &body);
                self.stats.wire_bytes += self.out.len() as u64;
                self.stats.regions = end;
                self.state = if end == total {
                    self.deadline = Some(now + self.cfg.idle_timeout);
                    State::Answering
                } else {
                    State::Regions(end)
                };
                Some(Transmit::Parts {
                    parts: [&self.out, &[], &[]],
                    what: "CATCHUP_REGIONS",
                })
            }
            State::Answering => self.next_blocks(now),
            State::SendEnd => {
                let end = CatchupEnd {
                    blocks_compared: self.stats.blocks_compared,
                    blocks_moved: self.stats.blocks_moved,
                    bytes_moved: self.stats.bytes_moved,
                    root: self.fp.root,
                };
                put_frame(&mut self.out, FrameType::CatchupEnd, 0, &end.emit());
                self.stats.wire_bytes += self.out.len() as u64;
                self.state = State::AwaitEnd;
                self.deadline = Some(now + self.cfg.idle_timeout);
                Some(Transmit::Parts {
                    parts: [&self.out, &[], &[]],
                    what: "CATCHUP_END",
                })
            }
            State::AwaitBegin | State::AwaitEnd | State::Done => None,
        }
    }

    /// The next CATCHUP_BLOCKS of the run being answered: its head here,
    /// its bytes straight from the blob.
    fn next_blocks(&mut self, now: Instant) -> Option<Transmit<'_>> {
        let at = self.answer.cursor?;
        let params = self.params.as_ref()?;
        let a = &self.answer;
        let start = a.differs[at..].iter().position(|&d| d).map(|p| at + p);
        let (first, count) = match start {
            Some(s) => {
                let run = a.differs[s..]
                    .iter()
                    .take(params.blocks_per_frame as usize)
                    .take_while(|&&d| d)
                    .count();
                (s, run)
            }
            None => (a.differs.len(), 0),
        };
        let next = first + count;
        let last = !a.differs[next..].iter().any(|&d| d);
        let head = RunHead {
            first: a.first + first as u64,
            count: count as u32,
        };
        let bs = u64::from(params.block_size);
        let len = self.data.len() as u64;
        let from = (head.first * bs).min(len) as usize;
        let to = ((head.first + u64::from(head.count)) * bs).min(len) as usize;
        let data = self.data;
        let bytes = &data[from..to];
        self.out.extend_from_slice(
            &FrameHeader {
                frame_type: FrameType::CatchupBlocks,
                flags: if last { FLAG_LAST } else { 0 },
                length: (RUN_HEAD_LEN + bytes.len()) as u32,
            }
            .emit(),
        );
        self.out.extend_from_slice(&head.emit());
        self.stats.wire_bytes += (self.out.len() + bytes.len()) as u64;
        self.stats.blocks_moved += u64::from(head.count);
        self.stats.bytes_moved += bytes.len() as u64;
        self.answer.cursor = (!last).then_some(next);
        self.deadline = Some(now + self.cfg.idle_timeout);
        Some(Transmit::Parts {
            parts: [&self.out, bytes, &[]],
            what: "CATCHUP_BLOCKS",
        })
    }

    /// Consumes the first frame in `input` if it is whole and the source
    /// has nothing left to send; returns the bytes used.
    pub fn handle_input(&mut self, now: Instant, input: &[u8]) -> Result<usize, SessionError> {
        if self.answer.cursor.is_some() || matches!(self.state, State::Regions(_) | State::SendEnd) {
            return Ok(0);
        }
        let Some(frame) = split_frame(input, 64 * 1024)? else {
            return Ok(0);
        };
        let (fh, body) = (frame.header, frame.body);
        self.stats.wire_bytes += frame.len as u64;
        self.deadline = Some(now + self.cfg.idle_timeout);
        let unexpected = |expected| -> SessionError {
            Violation::UnexpectedFrame {
                expected,
                got: fh.frame_type,
            }
            .into()
        };
        match (self.state, fh.frame_type) {
            (_, FrameType::Error) => return Err(refusal(body)),
            (State::AwaitBegin, FrameType::CatchupBegin) => self.begin(body)?,
            (State::AwaitBegin, _) => return Err(unexpected("CATCHUP_BEGIN")),
            (State::Answering, FrameType::CatchupHashes) => self.hashes(fh.flags, body)?,
            (State::Answering, _) => return Err(unexpected("CATCHUP_HASHES")),
            (State::AwaitEnd, FrameType::CatchupEnd) => {
                let end = CatchupEnd::parse(body).map_err(SessionError::malformed("CATCHUP_END"))?;
                if end.root != self.fp.root {
                    return Err(Violation::from(CatchUpViolation::RootMismatch {
                        replica: end.root,
                        wanted: self.fp.root,
                    })
                    .into());
                }
                self.replica_end = Some(end);
                self.state = State::Done;
                self.deadline = None;
            }
            (State::AwaitEnd, _) => return Err(unexpected("CATCHUP_END")),
            (State::Regions(_) | State::SendEnd | State::Done, _) => return Err(unexpected("nothing")),
        }
        Ok(frame.len)
    }

    /// CATCHUP_BEGIN: the replica's block size, limit and nonce.
    fn begin(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let b = CatchupBegin::parse(body).map_err(SessionError::malformed("CATCHUP_BEGIN"))?;
        let regions = self.fp.regions.len() as u64;
        let violation = if b.regions != regions {
            Some(CatchUpViolation::RegionCount {
                theirs: b.regions,
                ours: regions,
            })
        } else if !block_size_ok(b.block_size, self.fp.region_size) {
            Some(CatchUpViolation::BlockSize {
                block_size: b.block_size,
                region_size: self.fp.region_size,
            })
        } else if (b.max_blocks_body as usize) < RUN_HEAD_LEN + b.block_size as usize {
            Some(CatchUpViolation::BlocksBodyLimit {
                max: b.max_blocks_body,
                block_size: b.block_size,
            })
        } else {
            None
        };
        if let Some(v) = violation {
            return Err(Violation::from(v).into());
        }
        self.params = Some(Params {
            key: BlockKey::derive(self.sender_nonce, b.replica_nonce),
            block_size: b.block_size,
            blocks_per_frame: ((b.max_blocks_body as usize - RUN_HEAD_LEN) / b.block_size as usize) as u64,
        });
        self.state = State::Regions(0);
        Ok(())
    }

    /// CATCHUP_HASHES: compare the run with this blob's blocks; the
    /// answer goes out from [`Self::poll_transmit`].
    fn hashes(&mut self, flags: u16, body: &[u8]) -> Result<(), SessionError> {
        let run = BlockHashes::parse(body).map_err(SessionError::malformed("CATCHUP_HASHES"))?;
        let last = flags & FLAG_LAST != 0;
        if last != (run.head.count == 0) {
            return Err(Violation::from(CatchUpViolation::HashesLast {
                count: run.head.count,
                last,
            })
            .into());
        }
        if last {
            self.state = State::SendEnd;
            return Ok(());
        }
        let Some(p) = self.params.as_ref() else {
            return Err(Violation::UnexpectedFrame {
                expected: "CATCHUP_BEGIN",
                got: FrameType::CatchupHashes,
            }
            .into());
        };
        let bs = u64::from(p.block_size);
        let len = self.data.len() as u64;
        let first = run.head.first;
        let end = first + u64::from(run.head.count);
        let per_region = u64::from(self.fp.region_size) / bs;
        // Inside the blob, and inside one region (a replica asks region by region).
        if end > len.div_ceil(bs) || first / per_region != (end - 1) / per_region {
            return Err(Violation::from(CatchUpViolation::HashesOutside { first, end }).into());
        }
        if first.is_multiple_of(per_region) {
            // A replica asks about a region from its first block on.
            self.stats.regions_differing += 1;
        }
        self.answer.first = first;
        self.answer.differs.clear();
        for (i, theirs) in run.hashes().enumerate() {
            let b = first + i as u64;
            let from = (b * bs) as usize;
            let to = ((b + 1) * bs).min(len) as usize;
            self.answer
                .differs
                .push(p.key.hash(&self.data[from..to]) != *theirs);
        }
        self.stats.blocks_compared += u64::from(run.head.count);
        self.answer.cursor = Some(0);
        Ok(())
    }
}
