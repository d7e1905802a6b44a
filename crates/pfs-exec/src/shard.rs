//! The sharded executor: runs one kernel over a descriptor schedule on N
//! pThreads.
//!
//! A schedule is first *prepared*: cut into fixed chunks of
//! [`CHUNK_DESCS`] descriptors, each chunk encoded (absolute or arithmetic)
//! into its own self-contained table and every descriptor bounds-checked
//! against the blob — an out-of-range schedule is rejected before anything
//! runs. Execution then hands chunk numbers to the workers round-robin
//! through one SPSC ring per worker; each worker decodes its chunk's table
//! inside the kernel loop (arithmetic deltas included: no absolute table is
//! ever materialised), and returns the chunk's partial result through its
//! own result ring. The coordinating thread folds the partials strictly in
//! chunk order, so the answer does not depend on the number of workers.

use std::time::{Duration, Instant};

use pfs_wire::{DescIter, Descriptor, Encoding, TableWriter, WireError};
use rtrb::{Consumer, Producer, RingBuffer};

use crate::execute::{resolve, ExecError};
use crate::kernel::{Acc, Kernel, KernelId, Output, CHUNK_DESCS};
use crate::schedule::Schedule;

/// A schedule ready to run: self-contained encoded chunks, all in bounds.
#[derive(Debug, Clone)]
pub struct Prepared {
    encoding: Encoding,
    chunks: Vec<Chunk>,
    descriptors: u64,
    effective_bytes: u64,
    table_bytes: u64,
}

#[derive(Debug, Clone)]
struct Chunk {
    table: Vec<u8>,
    count: u32,
}

/// Why a schedule cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// A descriptor reaches outside the blob (found while preparing, before any execution).
    #[error("schedule rejected before execution: {0}")]
    Rejected(ExecError),
    /// The kernel cannot run on this many pThreads.
    #[error("kernel {kernel} cannot run on {threads} pThreads: {why}")]
    NotShardable {
        /// Kernel name.
        kernel: String,
        /// Requested threads.
        threads: usize,
        /// Why.
        why: &'static str,
    },
    /// A file of grams does not decode.
    #[error("gram file: at byte {at}: {problem}")]
    BadGramFile {
        /// Offset of the offending frame in the file.
        at: usize,
        /// What is wrong with it.
        problem: GramFileProblem,
    },
    /// A worker failed (a bug: prepared schedules are in bounds).
    #[error("pThread failed: {0}")]
    Worker(WorkerFailure),
}

/// What is wrong with one frame of a gram file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GramFileProblem {
    /// The frame does not parse.
    #[error("{0}")]
    Frame(WireError),
    /// A frame other than GRAM.
    #[error("{found} frame where GRAM was expected")]
    NotGram {
        /// Name of the frame type found.
        found: &'static str,
    },
    /// The GRAM body does not parse.
    #[error("{0}")]
    Gram(WireError),
    /// Grams out of sequence.
    #[error("gram #{seq} where #{due} was due")]
    OutOfSequence {
        /// Sequence number found.
        seq: u64,
        /// Sequence number due.
        due: u64,
    },
    /// A descriptor of the gram does not decode.
    #[error("gram #{gram}: {source}")]
    Descriptor {
        /// Sequence number of the gram.
        gram: u64,
        /// The decode error.
        source: WireError,
    },
}

/// How a pThread failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WorkerFailure {
    /// A prepared descriptor table did not decode.
    #[error("{0}")]
    Table(WireError),
    /// A prepared descriptor did not resolve in the blob.
    #[error("{0}")]
    Exec(ExecError),
    /// A pThread panicked.
    #[error("a pThread panicked")]
    Panicked,
    /// The run ended with chunks left unexecuted.
    #[error("only {done} of {total} chunks completed")]
    Incomplete {
        /// Chunks folded into the result.
        done: usize,
        /// Chunks in the schedule.
        total: usize,
    },
}

impl Prepared {
    /// Prepares every gram of `schedule` against a blob of `blob_len` bytes.
    pub fn from_schedule(
        mut schedule: Schedule,
        encoding: Encoding,
        blob_len: u64,
    ) -> Result<Self, ShardError> {
        let mut descs = Vec::new();
        let mut all = Vec::new();
        while schedule.next_gram(&mut descs) {
            all.extend_from_slice(&descs);
        }
        Self::from_descriptors(&all, encoding, blob_len)
    }

    /// Prepares the descriptors of a file of GRAM frames (as `pfs serve
    /// --record` writes them), in sequence order; every frame and table is
    /// decoded and every descriptor bounds-checked before anything runs.
    /// Returns the schedule and the number of grams.
    pub fn from_gram_file(
        bytes: &[u8],
        encoding: Encoding,
        blob_len: u64,
    ) -> Result<(Self, u64), ShardError> {
        let bad = |at: usize, problem: GramFileProblem| ShardError::BadGramFile { at, problem };
        let mut descs = Vec::new();
        let mut at = 0usize;
        let mut grams = 0u64;
        while at < bytes.len() {
            let (frame, used) =
                pfs_wire::Frame::parse(&bytes[at..]).map_err(|e| bad(at, GramFileProblem::Frame(e)))?;
            if frame.header.frame_type != pfs_wire::FrameType::Gram {
                return Err(bad(
                    at,
                    GramFileProblem::NotGram {
                        found: frame.header.frame_type.name(),
                    },
                ));
            }
            let gram = pfs_wire::Gram::parse(frame.body).map_err(|e| bad(at, GramFileProblem::Gram(e)))?;
            if gram.header.seq != grams {
                return Err(bad(
                    at,
                    GramFileProblem::OutOfSequence {
                        seq: gram.header.seq,
                        due: grams,
                    },
                ));
            }
            for d in gram.descriptors() {
                descs.push(d.map_err(|source| bad(at, GramFileProblem::Descriptor { gram: grams, source }))?);
            }
            grams += 1;
            at += used;
        }
        Ok((Self::from_descriptors(&descs, encoding, blob_len)?, grams))
    }

    /// Prepares an explicit descriptor list.
    pub fn from_descriptors(
        descs: &[Descriptor],
        encoding: Encoding,
        blob_len: u64,
    ) -> Result<Self, ShardError> {
        let mut chunks = Vec::with_capacity(descs.len().div_ceil(CHUNK_DESCS));
        let mut effective_bytes = 0u64;
        let mut table_bytes = 0u64;
        for (c, part) in descs.chunks(CHUNK_DESCS).enumerate() {
            let mut w = TableWriter::new(encoding, part.len());
            for (i, &d) in part.iter().enumerate() {
                let in_bounds = d.end().is_some_and(|end| end <= blob_len);
                if !in_bounds {
                    return Err(ShardError::Rejected(ExecError::OutOfBounds {
                        index: (c * CHUNK_DESCS + i) as u32,
                        offset: d.offset,
                        len: d.len,
                        blob_len,
                    }));
                }
                w.push(d).map_err(|_| {
                    ShardError::Rejected(ExecError::OutOfBounds {
                        index: (c * CHUNK_DESCS + i) as u32,
                        offset: d.offset,
                        len: d.len,
                        blob_len,
                    })
                })?;
                effective_bytes += u64::from(d.len);
            }
            table_bytes += w.as_bytes().len() as u64;
            chunks.push(Chunk {
                table: w.as_bytes().to_vec(),
                count: w.count(),
            });
        }
        Ok(Self {
            encoding,
            chunks,
            descriptors: descs.len() as u64,
            effective_bytes,
            table_bytes,
        })
    }

    /// Descriptors in the schedule.
    pub fn descriptors(&self) -> u64 {
        self.descriptors
    }

    /// Sum of descriptor lengths.
    pub fn effective_bytes(&self) -> u64 {
        self.effective_bytes
    }

    /// Bytes of all chunk tables (the schedule's size in this encoding).
    pub fn table_bytes(&self) -> u64 {
        self.table_bytes
    }

    /// The encoding of the chunk tables.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Worker threads (pThreads), ≥ 1.
    pub threads: usize,
    /// Pin worker i to CPU `cpus[i % cpus.len()]` (empty = unpinned).
    pub cpus: Vec<usize>,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct ShardReport {
    /// The kernel's result.
    pub output: Output,
    /// Wall time of execution (preparation excluded).
    pub elapsed: Duration,
    /// Effective bytes per worker.
    pub per_thread_bytes: Vec<u64>,
    /// Chunks executed.
    pub chunks: u64,
}

/// Runs `kernel` over `prepared` on a read-only blob (in-place kernels: use [`run_mut`]).
pub fn run(
    blob: &[u8],
    prepared: &Prepared,
    kernel: Kernel,
    cfg: &ShardConfig,
) -> Result<ShardReport, ShardError> {
    if kernel.id.in_place() {
        return Err(ShardError::NotShardable {
            kernel: kernel.id.name(),
            threads: cfg.threads,
            why: "it modifies the blob: run it with run_mut",
        });
    }
    let threads = cfg.threads.max(1);
    if threads > 1 && !kernel.id.shardable() {
        return Err(ShardError::NotShardable {
            kernel: kernel.id.name(),
            threads,
            why: kernel
                .id
                .not_shardable_reason()
                .unwrap_or("its result depends on byte order across descriptors"),
        });
    }
    let started = Instant::now();
    let (output, per_thread_bytes) = if threads == 1 {
        // The one pThread is a thread of its own, so pinning it never moves the caller.
        let single = || -> Result<(Output, Vec<u64>), ShardError> {
            pin(cfg, 0);
            let mut total = kernel.acc();
            let mut bytes = 0u64;
            let stream = !kernel.id.shardable();
            for chunk in &prepared.chunks {
                if stream {
                    bytes += run_chunk(blob, prepared.encoding, chunk, kernel, &mut total)?;
                } else {
                    let mut acc = kernel.acc();
                    bytes += run_chunk(blob, prepared.encoding, chunk, kernel, &mut acc)?;
                    kernel.combine(&mut total, acc);
                }
            }
            Ok((kernel.finish(total), vec![bytes]))
        };
        std::thread::scope(|s| s.spawn(single).join())
            .map_err(|_| ShardError::Worker(WorkerFailure::Panicked))??
    } else {
        run_sharded(blob, prepared, kernel, cfg, threads)?
    };
    Ok(ShardReport {
        output,
        elapsed: started.elapsed(),
        per_thread_bytes,
        chunks: prepared.chunks.len() as u64,
    })
}

/// Runs an in-place kernel (xor/add) over `prepared` on one pThread.
pub fn run_mut(
    blob: &mut [u8],
    prepared: &Prepared,
    kernel: Kernel,
    cfg: &ShardConfig,
) -> Result<ShardReport, ShardError> {
    if cfg.threads > 1 {
        return Err(ShardError::NotShardable {
            kernel: kernel.id.name(),
            threads: cfg.threads,
            why: "in-place kernels run on one pThread in this version (overlapping descriptors would race)",
        });
    }
    let started = Instant::now();
    let single = || -> Result<(Output, u64), ShardError> {
        pin(cfg, 0);
        let mut total = kernel.acc();
        let mut bytes = 0u64;
        for chunk in &prepared.chunks {
            let mut acc = kernel.acc();
            for (i, d) in DescIter::new(&chunk.table, prepared.encoding, chunk.count).enumerate() {
                let d = d.map_err(|e| ShardError::Worker(WorkerFailure::Table(e)))?;
                let (start, end) = (d.offset as usize, d.offset as usize + d.len as usize);
                let oob = ExecError::OutOfBounds {
                    index: i as u32,
                    offset: d.offset,
                    len: d.len,
                    blob_len: blob.len() as u64,
                };
                let range = blob
                    .get_mut(start..end)
                    .ok_or(ShardError::Worker(WorkerFailure::Exec(oob)))?;
                kernel.update_mut(&mut acc, range);
                bytes += u64::from(d.len);
            }
            kernel.combine(&mut total, acc);
        }
        Ok((kernel.finish(total), bytes))
    };
    let (output, bytes) = std::thread::scope(|s| s.spawn(single).join())
        .map_err(|_| ShardError::Worker(WorkerFailure::Panicked))??;
    Ok(ShardReport {
        output,
        elapsed: started.elapsed(),
        per_thread_bytes: vec![bytes],
        chunks: prepared.chunks.len() as u64,
    })
}

fn pin(cfg: &ShardConfig, worker: usize) {
    if cfg.cpus.is_empty() {
        return;
    }
    let cpu = cfg.cpus[worker % cfg.cpus.len()];
    // Best effort: an unavailable CPU leaves the thread unpinned.
    let _ = pfs_sys::pin_current_thread(cpu);
}

/// Executes one chunk into `acc`, decoding its table in the loop. Returns bytes.
#[inline]
fn run_chunk(
    blob: &[u8],
    encoding: Encoding,
    chunk: &Chunk,
    kernel: Kernel,
    acc: &mut Acc,
) -> Result<u64, ShardError> {
    let mut bytes = 0u64;
    let gather = kernel.id == KernelId::Gather;
    // Gather copies each chunk into a per-thread buffer (reused, so the copy
    // is real but allocation-free after the first chunk); the output is the
    // chained digest of what was gathered.
    GATHERED.with_borrow_mut(|out| {
        out.clear();
        for (i, d) in DescIter::new(&chunk.table, encoding, chunk.count).enumerate() {
            let d = d.map_err(|e| ShardError::Worker(WorkerFailure::Table(e)))?;
            let range = resolve(blob, d, i as u32).map_err(|e| ShardError::Worker(WorkerFailure::Exec(e)))?;
            if gather {
                kernel.gather_into(acc, range, out);
            } else {
                kernel.update(acc, range);
            }
            bytes += u64::from(d.len);
        }
        Ok(bytes)
    })
}

thread_local! {
    /// Where the gather kernel copies a chunk's ranges.
    static GATHERED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Sentinel chunk number telling a worker to stop.
const STOP: usize = usize::MAX;
/// Chunks queued per worker ahead of execution.
const RING: usize = 64;

fn run_sharded(
    blob: &[u8],
    prepared: &Prepared,
    kernel: Kernel,
    cfg: &ShardConfig,
    threads: usize,
) -> Result<(Output, Vec<u64>), ShardError> {
    let n_chunks = prepared.chunks.len();
    std::thread::scope(|scope| {
        let mut work_tx: Vec<Producer<usize>> = Vec::with_capacity(threads);
        let mut done_rx: Vec<Consumer<(usize, Acc)>> = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for w in 0..threads {
            let (tx, mut rx) = RingBuffer::<usize>::new(RING);
            let (mut done_tx, drx) = RingBuffer::<(usize, Acc)>::new(RING);
            work_tx.push(tx);
            done_rx.push(drx);
            handles.push(scope.spawn(move || -> Result<u64, ShardError> {
                pin(cfg, w);
                let mut bytes = 0u64;
                loop {
                    let idx = match rx.pop() {
                        Ok(i) => i,
                        Err(_) => {
                            idle();
                            continue;
                        }
                    };
                    if idx == STOP {
                        return Ok(bytes);
                    }
                    let mut acc = kernel.acc();
                    bytes += run_chunk(blob, prepared.encoding, &prepared.chunks[idx], kernel, &mut acc)?;
                    let mut item = (idx, acc);
                    // Paired with the coordinator's pop in chunk order.
                    loop {
                        match done_tx.push(item) {
                            Ok(()) => break,
                            Err(rtrb::PushError::Full(back)) => {
                                item = back;
                                idle();
                            }
                        }
                    }
                }
            }));
        }

        // Feed chunk numbers round-robin and fold results in chunk order.
        let mut total = kernel.acc();
        let mut next_feed = 0usize;
        let mut next_fold = 0usize;
        while next_fold < n_chunks {
            let mut progressed = false;
            while next_feed < n_chunks {
                let w = next_feed % threads;
                if work_tx[w].push(next_feed).is_err() {
                    break;
                }
                next_feed += 1;
                progressed = true;
            }
            // Chunk k comes back from worker k % threads, in order per worker.
            while next_fold < n_chunks {
                match done_rx[next_fold % threads].pop() {
                    Ok((idx, acc)) => {
                        debug_assert_eq!(idx, next_fold);
                        kernel.combine(&mut total, acc);
                        next_fold += 1;
                        progressed = true;
                    }
                    Err(_) => break,
                }
            }
            if !progressed {
                if handles.iter().any(|h| h.is_finished()) {
                    break; // a worker died; its error is reported below
                }
                // Workers own the cores; the coordinator only naps.
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        // Tell every worker to stop; keep draining result rings so that a
        // worker blocked on a full one (after another worker failed) can
        // reach its STOP.
        let mut stopped = vec![false; threads];
        while !handles.iter().all(|h| h.is_finished()) {
            for w in 0..threads {
                if !stopped[w] {
                    stopped[w] = work_tx[w].push(STOP).is_ok();
                }
                while done_rx[w].pop().is_ok() {}
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let mut per_thread = Vec::with_capacity(threads);
        for h in handles {
            match h.join() {
                Ok(Ok(bytes)) => per_thread.push(bytes),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(ShardError::Worker(WorkerFailure::Panicked)),
            }
        }
        if next_fold < n_chunks {
            return Err(ShardError::Worker(WorkerFailure::Incomplete {
                done: next_fold,
                total: n_chunks,
            }));
        }
        Ok((kernel.finish(total), per_thread))
    })
}

/// What an idle worker does: spin briefly, then give the core away.
#[inline]
fn idle() {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

/// The ids of kernels that [`run`] accepts on `threads` pThreads.
pub fn runnable(threads: usize) -> Vec<KernelId> {
    KernelId::all_builtin()
        .into_iter()
        .filter(|k| !k.in_place() && (threads == 1 || k.shardable()))
        .collect()
}

/// Runs a kernel given as three functions — `init`, `update` (one
/// descriptor's bytes) and, when the kernel can be split, `combine` (fold the
/// next chunk's state into the running one) — with the same chunking as the
/// built-in kernels, on one pThread. Without `combine` one state runs over
/// the whole stream. Used for user kernels.
pub fn run_fn(
    blob: &[u8],
    prepared: &Prepared,
    init: &(dyn Fn() -> u64 + Sync),
    update: &(dyn Fn(u64, &[u8]) -> u64 + Sync),
    combine: Option<&(dyn Fn(u64, u64) -> u64 + Sync)>,
    cfg: &ShardConfig,
) -> Result<(u64, Duration), ShardError> {
    let started = Instant::now();
    let single = || -> Result<u64, ShardError> {
        pin(cfg, 0);
        let mut total = init();
        for chunk in &prepared.chunks {
            let mut state = if combine.is_some() { init() } else { total };
            for (i, d) in DescIter::new(&chunk.table, prepared.encoding, chunk.count).enumerate() {
                let d = d.map_err(|e| ShardError::Worker(WorkerFailure::Table(e)))?;
                let range =
                    resolve(blob, d, i as u32).map_err(|e| ShardError::Worker(WorkerFailure::Exec(e)))?;
                state = update(state, range);
            }
            total = match combine {
                Some(c) => c(total, state),
                None => state,
            };
        }
        Ok(total)
    };
    let value = std::thread::scope(|s| s.spawn(single).join())
        .map_err(|_| ShardError::Worker(WorkerFailure::Panicked))??;
    Ok((value, started.elapsed()))
}
