//! The sending side of a files session: learn the receiver's store index
//! (cached per store id and generation, so a second send fetches only the
//! delta), decide per chunk between a descriptor into the store and literal
//! bytes, announce the totals, stream FILE and CHUNKS frames, answer NAKs
//! with REPAIRs, and return the receiver's report.

use std::collections::HashMap;
use std::fs::File;
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pfs_files::{Entry, EntryKind as LocalKind, IndexCache, Recipe};
use pfs_transport::Transport;
use pfs_wire::files::{
    emit_entry_head, parse_batch, parse_index, parse_nak, parse_probe_reply, tag, ChunksHeader, EntryKind,
    FileEntry, FilesAccept, FilesHello, FilesReport, Hash, Plan, PlanAck, ProbeEntry, ProbeHead,
    FLAG_FILES_REPORT, FLAG_LAST, HELLO_COMPRESS, HELLO_DRY_RUN, INDEX_KEY_LEN, INDEX_REQUEST_LEN,
    PROBE_ENTRY_FIXED_LEN, PROBE_HEAD_LEN,
};
use pfs_wire::{Frame, FrameHeader, FrameType};

use super::{refused, write_frame, FilesViolation, IndexFault, SENDER_FRAME_TARGET};
use crate::reader::FrameReader;
use crate::sys::{thread_usage, Usage};
use crate::LocalError;
use crate::SessionError;

/// One entry to send, with its recipe if it is a regular file.
#[derive(Debug, Clone)]
pub struct FilesItem {
    /// What and where.
    pub entry: Entry,
    /// The file's chunks (regular files; `None` until it is chunked).
    pub recipe: Option<Recipe>,
    /// Size and XXH3-128 of the whole file: cached, or from the probe pass
    /// (files without a cached recipe, when the receiver's store is not
    /// empty). Files with a digest are asked about (PROBE).
    pub digest: Option<(u64, pfs_files::QuickDigest)>,
    /// The receiver said it holds this file: FILE with HELD, no CHUNKS.
    pub held: bool,
}

impl FilesItem {
    /// An entry with no work done on it yet.
    pub fn new(entry: Entry, recipe: Option<Recipe>) -> Self {
        Self {
            entry,
            recipe,
            digest: None,
            held: false,
        }
    }

    fn is_file(&self) -> bool {
        matches!(self.entry.kind, LocalKind::File { .. })
    }

    /// Size and the `file_hash` field of its FILE frame: the BLAKE3 from
    /// the recipe, or for a HELD file its XXH3-128 and 16 zero bytes.
    fn size_and_hash(&self) -> Option<(u64, Hash)> {
        if self.held {
            let (size, digest) = self.digest?;
            let mut h = [0u8; 32];
            h[..16].copy_from_slice(&digest);
            return Some((size, h));
        }
        self.recipe.as_ref().map(|r| (r.size, r.file_hash))
    }
}

/// The reading a sender defers until it knows what the receiver holds:
/// whole-file hashes for the probe, then chunking of the files the receiver
/// lacks. Items that cannot be read are returned with the reason; the
/// session leaves them out.
pub trait FilesPrepare {
    /// Sets `digest` (size and XXH3-128) of `items[i]` for each `i` in `which`.
    fn hash(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)>;
    /// Sets `recipe` of `items[i]` for each `i` in `which`.
    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)>;
}

/// [`FilesPrepare`] on this machine's files with [`pfs_files::digest_files`]
/// and [`pfs_files::chunk_files`]; counts the time it spends.
#[derive(Debug, Clone)]
pub struct LocalPrepare {
    /// Chunking parameters.
    pub params: pfs_files::ChunkParams,
    /// Worker threads (0 = one per core).
    pub threads: usize,
    /// Time spent hashing and chunking.
    pub spent: Duration,
    /// Files hashed whole for the probe, and their bytes.
    pub hashed: (u64, u64),
    /// Files chunked, and their bytes.
    pub chunked: (u64, u64),
}

impl LocalPrepare {
    /// A preparer with these parameters.
    pub fn new(params: pfs_files::ChunkParams, threads: usize) -> Self {
        Self {
            params,
            threads,
            spent: Duration::ZERO,
            hashed: (0, 0),
            chunked: (0, 0),
        }
    }

    fn run<R>(
        &mut self,
        items: &mut [FilesItem],
        which: &[usize],
        work: impl FnOnce(
            &[&Entry],
            &pfs_files::ChunkParams,
            usize,
        ) -> Result<Vec<Result<R, pfs_files::FilesError>>, pfs_files::FilesError>,
        mut put: impl FnMut(&mut FilesItem, R),
    ) -> Vec<(usize, String)> {
        if which.is_empty() {
            return Vec::new();
        }
        let t0 = Instant::now();
        let entries: Vec<&Entry> = which.iter().map(|&i| &items[i].entry).collect();
        let results = match work(&entries, &self.params, self.threads) {
            Ok(r) => r,
            Err(e) => return which.iter().map(|&i| (i, e.to_string())).collect(),
        };
        let mut failed = Vec::new();
        for (&i, r) in which.iter().zip(results) {
            match r {
                Ok(r) => put(&mut items[i], r),
                Err(e) => failed.push((i, e.to_string())),
            }
        }
        self.spent += t0.elapsed();
        failed
    }
}

impl FilesPrepare for LocalPrepare {
    fn hash(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)> {
        let mut done = (0, 0);
        let failed = self.run(items, which, pfs_files::digest_files, |it, d| {
            done.0 += 1;
            done.1 += d.0;
            it.digest = Some(d);
        });
        self.hashed = (self.hashed.0 + done.0, self.hashed.1 + done.1);
        failed
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)> {
        let mut done = (0, 0);
        let failed = self.run(items, which, pfs_files::chunk_files, |it, r| {
            done.0 += 1;
            done.1 += r.size;
            it.recipe = Some(r);
        });
        self.chunked = (self.chunked.0 + done.0, self.chunked.1 + done.1);
        failed
    }
}

/// Sender settings of a files session.
#[derive(Debug, Clone)]
pub struct FilesSendConfig {
    /// Sub-directory of the receiver's destination (relative; empty = root).
    pub remote_dir: Vec<u8>,
    /// Plan only: learn the index, classify, send nothing else.
    pub dry_run: bool,
    /// zstd level for literal chunks (`None` = send them raw).
    pub compress: Option<i32>,
    /// Average chunk size used (told to the receiver, informational).
    pub chunk_avg: u32,
    /// Where index caches live (`None` = no cache: fetch the whole index).
    pub index_cache_dir: Option<PathBuf>,
    /// Longest wait for each receiver reply.
    pub reply_timeout: Duration,
    /// Session identifier.
    pub session_nonce: u64,
    /// Ask the receiver which files it holds before chunking them (PROBE).
    pub probe: bool,
}

/// How one chunk travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkPlan {
    /// As a descriptor into the receiver's store blob.
    Ref {
        /// Offset in the store blob.
        offset: u64,
    },
    /// As a hash the receiver will hold by then (sent earlier in this session).
    Known,
    /// As literal bytes.
    Literal,
}

/// What a send will move, decided before anything is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FilesPlanSummary {
    /// Entries (files, directories, symlinks).
    pub entries: u64,
    /// Regular files.
    pub files: u64,
    /// Sum of file sizes.
    pub total_bytes: u64,
    /// Bytes sent as descriptors into the store.
    pub matched_bytes: u64,
    /// Bytes that repeat a chunk sent earlier in this session.
    pub known_bytes: u64,
    /// Bytes sent literally.
    pub literal_bytes: u64,
    /// Chunks.
    pub chunks: u64,
    /// Literal chunks.
    pub literal_chunks: u64,
    /// Files the receiver already holds (PROBE): no chunks sent.
    pub held_files: u64,
    /// Their bytes.
    pub held_bytes: u64,
}

/// Sender-side progress.
#[derive(Debug, Clone, Copy)]
pub struct FilesSendProgress {
    /// Entries sent.
    pub entries: u64,
    /// File bytes described so far (effective bytes on their way).
    pub bytes: u64,
    /// File bytes in the plan.
    pub total_bytes: u64,
    /// Bytes written to the transport.
    pub wire_bytes: u64,
    /// Since the stream started.
    pub elapsed: Duration,
}

/// A finished (or planned) files session, from the sender's side.
#[derive(Debug, Clone)]
pub struct FilesSendOutcome {
    /// The classification.
    pub plan: FilesPlanSummary,
    /// Receiver store identity (hex) and generation when we connected.
    pub store_id: String,
    /// Store generation reported in FILES_ACCEPT.
    pub store_generation: u64,
    /// Index entries fetched this time (the rest came from the cache).
    pub index_entries_fetched: u64,
    /// Index entries known from the cache before the fetch.
    pub index_entries_cached: u64,
    /// Files asked about with PROBE.
    pub probed: u64,
    /// The receiver's report (`None` for a dry run).
    pub report: Option<FilesReport<'static>>,
    /// The report's messages (failed entries).
    pub messages: String,
    /// Bytes this side wrote to the transport.
    pub wire_bytes_sent: u64,
    /// Bytes this side read from the transport.
    pub wire_bytes_received: u64,
    /// Chunks repaired on request.
    pub repaired_chunks: u64,
    /// Bytes sent in REPAIR frames.
    pub repaired_bytes: u64,
    /// Whole session, connect to report.
    pub elapsed: Duration,
    /// This thread's CPU over the session.
    pub usage: Usage,
    /// Warnings (cache trouble, files that changed while sent).
    pub warnings: Vec<String>,
}

/// Decides, per chunk of every file, how it travels: a descriptor when
/// `lookup` knows it (with the same length), a known-hash reference when
/// an earlier chunk of this send carries it, literal bytes otherwise.
pub fn classify(
    items: &[FilesItem],
    lookup: impl Fn(&Hash) -> Option<(u64, u32)>,
) -> (Vec<Vec<ChunkPlan>>, FilesPlanSummary) {
    let mut sum = FilesPlanSummary::default();
    let mut sent: HashMap<Hash, ()> = HashMap::new();
    let plans = items
        .iter()
        .map(|item| {
            sum.entries += 1;
            if item.held {
                let size = item.size_and_hash().map_or(0, |(n, _)| n);
                sum.files += 1;
                sum.total_bytes += size;
                sum.held_files += 1;
                sum.held_bytes += size;
                return Vec::new();
            }
            let Some(recipe) = &item.recipe else {
                return Vec::new();
            };
            sum.files += 1;
            sum.total_bytes += recipe.size;
            recipe
                .chunks
                .iter()
                .map(|c| {
                    sum.chunks += 1;
                    let len = u64::from(c.len);
                    match lookup(&c.hash) {
                        Some((offset, l)) if l == c.len => {
                            sum.matched_bytes += len;
                            ChunkPlan::Ref { offset }
                        }
                        _ if sent.insert(c.hash, ()).is_some() => {
                            sum.known_bytes += len;
                            ChunkPlan::Known
                        }
                        _ => {
                            sum.literal_bytes += len;
                            sum.literal_chunks += 1;
                            ChunkPlan::Literal
                        }
                    }
                })
                .collect()
        })
        .collect();
    (plans, sum)
}

struct Sender<'a, T: Transport + ?Sized> {
    t: &'a mut T,
    reader: FrameReader,
    cfg: &'a FilesSendConfig,
    wire_sent: u64,
    /// Small FILE/CHUNKS frames waiting to go out as one BATCH.
    batch: Vec<u8>,
    /// Compressed BATCH body.
    zout: Vec<u8>,
    /// One compression context for the whole session: creating one per
    /// call costs more than compressing a small batch or chunk.
    zctx: zstd::bulk::Compressor<'static>,
    /// Level the context is set to.
    zlevel: i32,
}

/// Largest index BATCH (compressed or not) a sender accepts.
const MAX_INDEX_BATCH: u32 = 1 << 20;

/// One INDEX body into the cache; returns whether it was the last.
fn index_frame(
    cache: &mut IndexCache,
    from: u64,
    fetched: &mut u64,
    flags: u16,
    body: &[u8],
) -> Result<bool, SessionError> {
    let entries = parse_index(body).map_err(|error| SessionError::Malformed {
        context: "INDEX",
        error,
    })?;
    let batch: Vec<_> = entries.map(|e| (e.key, e.offset, e.len)).collect();
    *fetched += batch.len() as u64;
    cache.extend(from + *fetched, batch);
    Ok(flags & FLAG_LAST != 0)
}

/// Frames up to this size ride in a BATCH; larger ones go alone.
const BATCH_FRAME_MAX: usize = 64 << 10;
/// A BATCH is sent when its frames reach this size.
const BATCH_TARGET: usize = 1 << 20;

fn store_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl<T: Transport + ?Sized> Sender<'_, T> {
    /// Queues a FILE or CHUNKS frame: small ones are batched (many small
    /// files per write, compressed), large ones flush the batch and go alone.
    fn queue(&mut self, ty: FrameType, body: &[u8], during: &'static str) -> Result<(), SessionError> {
        self.queue_flagged(ty, 0, body, during)
    }

    fn queue_flagged(
        &mut self,
        ty: FrameType,
        flags: u16,
        body: &[u8],
        during: &'static str,
    ) -> Result<(), SessionError> {
        let len = pfs_wire::FRAME_HEADER_LEN + body.len();
        if len > BATCH_FRAME_MAX {
            self.flush_batch()?;
            return self.send(ty, flags, body, during);
        }
        pfs_wire::put_frame(&mut self.batch, ty, flags, body);
        if self.batch.len() >= BATCH_TARGET {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// The compression context and level for literal chunks, if wanted.
    fn zstd_for_literals(&mut self) -> Option<(&mut zstd::bulk::Compressor<'static>, &mut i32, i32)> {
        let level = self.cfg.compress?;
        Some((&mut self.zctx, &mut self.zlevel, level))
    }

    /// Sends the queued frames as one zstd-compressed BATCH.
    fn flush_batch(&mut self) -> Result<(), SessionError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // Level 1 unless the user asked for compression: the batch is mostly
        // paths and descriptors, which compress at any level.
        let level = self.cfg.compress.unwrap_or(1);
        compress_into(
            &mut self.zctx,
            &mut self.zlevel,
            level,
            &self.batch,
            &mut self.zout,
        )
        .map_err(|source| LocalError::Zstd {
            what: "compressing a batch",
            source,
        })?;
        let head = pfs_wire::files::batch_head(self.batch.len() as u32);
        let header = FrameHeader {
            frame_type: FrameType::Batch,
            flags: 0,
            length: (head.len() + self.zout.len()) as u32,
        }
        .emit();
        let parts = &mut [
            IoSlice::new(&header),
            IoSlice::new(&head),
            IoSlice::new(&self.zout),
        ];
        let sent = self.t.write_all_vectored(parts);
        self.batch.clear();
        match sent {
            Ok(n) => {
                self.wire_sent += n;
                Ok(())
            }
            Err(e) => Err(self.explain(SessionError::transport("BATCH", e), "BATCH")),
        }
    }

    fn send(
        &mut self,
        ty: FrameType,
        flags: u16,
        body: &[u8],
        during: &'static str,
    ) -> Result<(), SessionError> {
        match write_frame(self.t, ty, flags, body, during) {
            Ok(n) => {
                self.wire_sent += n;
                Ok(())
            }
            Err(e) => Err(self.explain(e, during)),
        }
    }

    /// After a failed write the receiver has usually said why (ERROR).
    fn explain(&mut self, err: SessionError, during: &'static str) -> SessionError {
        let _ = self.t.set_read_timeout(Some(Duration::from_secs(2)));
        match self.reply(during) {
            Err(refused @ SessionError::Refused { .. }) => refused,
            _ => err,
        }
    }

    fn reply(&mut self, during: &'static str) -> Result<(FrameHeader, Vec<u8>), SessionError> {
        let hdr = self
            .reader
            .next_header(self.t)?
            .ok_or(SessionError::PeerClosed { during })?;
        if hdr.frame_type.is_bulk() || hdr.length > pfs_wire::frame::MAX_CONTROL_BODY {
            return Err(FilesViolation::BadReply {
                frame: hdr.frame_type,
                len: hdr.length,
                during,
            }
            .into());
        }
        let body = self.reader.take(self.t, hdr.length as usize, during)?.to_vec();
        if hdr.frame_type == FrameType::Error {
            return Err(refused(&body));
        }
        Ok((hdr, body))
    }

    /// Reads the INDEX frames (alone or in BATCH frames) up to the one
    /// flagged LAST into `cache`; returns the entries fetched.
    fn read_index(&mut self, cache: &mut IndexCache, from: u64) -> Result<u64, SessionError> {
        let mut fetched = 0u64;
        let mut raw = Vec::new();
        loop {
            let hdr = self
                .reader
                .next_header(self.t)?
                .ok_or(SessionError::PeerClosed { during: "INDEX" })?;
            if hdr.length > MAX_INDEX_BATCH {
                return Err(FilesViolation::BadReply {
                    frame: hdr.frame_type,
                    len: hdr.length,
                    during: "INDEX",
                }
                .into());
            }
            let body = self.reader.take(self.t, hdr.length as usize, "INDEX")?;
            let last = match hdr.frame_type {
                FrameType::Error => return Err(refused(body)),
                FrameType::Index => index_frame(cache, from, &mut fetched, hdr.flags, body)?,
                FrameType::Batch => {
                    let (raw_len, z) = parse_batch(body).map_err(|error| SessionError::Malformed {
                        context: "BATCH",
                        error,
                    })?;
                    if raw_len > MAX_INDEX_BATCH {
                        return Err(FilesViolation::BadIndex {
                            what: IndexFault::TooLarge { len: raw_len },
                        }
                        .into());
                    }
                    raw.resize(raw_len as usize, 0);
                    match zstd::bulk::decompress_to_buffer(z, &mut raw[..]) {
                        Ok(n) if n == raw_len as usize => {}
                        _ => {
                            return Err(FilesViolation::BadIndex {
                                what: IndexFault::Corrupt,
                            }
                            .into())
                        }
                    }
                    let mut rest = &raw[..];
                    let mut last = false;
                    while !rest.is_empty() {
                        let (f, used) = Frame::parse(rest).map_err(|error| SessionError::Malformed {
                            context: "frame in an index BATCH",
                            error,
                        })?;
                        if f.header.frame_type != FrameType::Index || last {
                            return Err(FilesViolation::BadIndex {
                                what: IndexFault::Malformed,
                            }
                            .into());
                        }
                        last = index_frame(cache, from, &mut fetched, f.header.flags, f.body)?;
                        rest = &rest[used..];
                    }
                    last
                }
                other => {
                    return Err(FilesViolation::UnexpectedReply {
                        expected: "INDEX",
                        got: other,
                    }
                    .into())
                }
            };
            if last {
                return Ok(fetched);
            }
        }
    }

    fn expect(
        &mut self,
        want: FrameType,
        during: &'static str,
    ) -> Result<(FrameHeader, Vec<u8>), SessionError> {
        let (h, body) = self.reply(during)?;
        if h.frame_type != want {
            return Err(FilesViolation::UnexpectedReply {
                expected: want.name(),
                got: h.frame_type,
            }
            .into());
        }
        Ok((h, body))
    }
}

/// Asks the receiver which regular files it already holds (PROBE), marks
/// them `held`; returns how many entries were probed.
fn probe<T: Transport + ?Sized>(s: &mut Sender<'_, T>, items: &mut [FilesItem]) -> Result<u64, SessionError> {
    // Files hashed whole in this session (a cached recipe has only BLAKE3).
    let asked: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].is_file() && items[i].digest.is_some_and(|(n, _)| n > 0))
        .collect();
    if asked.is_empty() {
        return Ok(0);
    }
    let max_body = pfs_wire::frame::MAX_CONTROL_BODY as usize;
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
            let Some((size, digest)) = it.digest else {
                unreachable!("only items with a digest are asked about")
            };
            let mut key = [0u8; INDEX_KEY_LEN];
            key.copy_from_slice(&digest[..INDEX_KEY_LEN]);
            ProbeEntry {
                size,
                mtime_sec: it.entry.mtime_ns.div_euclid(1_000_000_000) as i64,
                mtime_nsec: it.entry.mtime_ns.rem_euclid(1_000_000_000) as u32,
                key,
                path,
            }
            .emit(&mut body);
            k += 1;
        }
        let head = ProbeHead {
            first_no: first as u64,
            count: (k - first) as u32,
        };
        body[..PROBE_HEAD_LEN].copy_from_slice(&head.emit());
        let flags = if k == asked.len() { FLAG_LAST } else { 0 };
        s.queue_flagged(FrameType::Probe, flags, &body, "PROBE")?;
        first = k;
    }
    s.flush_batch()?;
    // The receiver answers after the last PROBE, in order.
    let mut next = 0usize;
    loop {
        let (h, body) = s.expect(FrameType::ProbeReply, "PROBE_REPLY")?;
        let (head, bits) = parse_probe_reply(&body).map_err(|error| SessionError::Malformed {
            context: "PROBE_REPLY",
            error,
        })?;
        let count = head.count as usize;
        if head.first_no != next as u64 || next + count > asked.len() {
            return Err(FilesViolation::ProbeReplyOrder {
                first: head.first_no,
                count: head.count,
                expected: next as u64,
                asked: asked.len() as u64,
            }
            .into());
        }
        for j in 0..count {
            items[asked[next + j]].held = bits[j / 8] & (1 << (j % 8)) != 0;
        }
        next += count;
        if h.flags & FLAG_LAST != 0 {
            break;
        }
    }
    if next != asked.len() {
        return Err(FilesViolation::ProbeReplyShort {
            answered: next as u64,
            asked: asked.len() as u64,
        }
        .into());
    }
    Ok(asked.len() as u64)
}

/// Leaves out the items `prep` could not read, with a warning each.
fn drop_failed(items: &mut Vec<FilesItem>, failed: Vec<(usize, String)>, warnings: &mut Vec<String>) {
    if failed.is_empty() {
        return;
    }
    let mut gone = vec![false; items.len()];
    for (i, why) in failed {
        warnings.push(format!("skipping {}: {why}", items[i].entry.abs.display()));
        gone[i] = true;
    }
    let mut k = 0;
    items.retain(|_| {
        k += 1;
        !gone[k - 1]
    });
}

/// Runs one files session over `t`: handshake, probe, index, plan, stream,
/// corrections, report. Regular files in `items` without a recipe are
/// hashed and asked about (PROBE) when the receiver's store is not empty,
/// then those the receiver lacks are chunked, all through `prep`; items
/// that cannot be read are left out with a warning.
pub fn send_files<T: Transport + ?Sized>(
    t: &mut T,
    items: &mut Vec<FilesItem>,
    cfg: &FilesSendConfig,
    prep: &mut dyn FilesPrepare,
    progress: &mut dyn FnMut(&FilesSendProgress),
) -> Result<FilesSendOutcome, SessionError> {
    let started = Instant::now();
    let usage0 = thread_usage();
    let mut warnings = Vec::new();
    t.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| SessionError::transport("setup", e))?;
    let mut s = Sender {
        t,
        reader: FrameReader::new(MAX_INDEX_BATCH as usize + 64 * 1024),
        cfg,
        wire_sent: 0,
        batch: Vec::with_capacity(BATCH_TARGET + BATCH_FRAME_MAX),
        zout: Vec::new(),
        zctx: zstd::bulk::Compressor::new(1).map_err(|source| LocalError::Zstd {
            what: "compression context",
            source,
        })?,
        zlevel: 1,
    };
    let mut hello = Vec::new();
    FilesHello {
        flags: if cfg.dry_run { HELLO_DRY_RUN } else { 0 }
            | if cfg.compress.is_some() { HELLO_COMPRESS } else { 0 },
        auth_method: 0,
        chunk_avg: cfg.chunk_avg,
        session_nonce: cfg.session_nonce,
        remote_dir: &cfg.remote_dir,
        auth: &[],
    }
    .emit(&mut hello);
    s.send(FrameType::FilesHello, 0, &hello, "FILES_HELLO")?;
    let (_, body) = s.expect(FrameType::FilesAccept, "FILES_ACCEPT")?;
    let accept = FilesAccept::parse(&body).map_err(|error| SessionError::Malformed {
        context: "FILES_ACCEPT",
        error,
    })?;

    // Whole files first: with a store that holds anything, files not yet
    // chunked are hashed whole and the receiver asked which it holds; only
    // the rest are chunked. An empty store holds nothing to ask about.
    let unchunked = |items: &[FilesItem]| -> Vec<usize> {
        (0..items.len())
            .filter(|&i| items[i].is_file() && items[i].recipe.is_none() && !items[i].held)
            .collect()
    };
    let mut probed = 0;
    if accept.generation > 0 && cfg.probe {
        let todo: Vec<usize> = unchunked(items)
            .into_iter()
            .filter(|&i| items[i].digest.is_none())
            .collect();
        let failed = prep.hash(items, &todo);
        drop_failed(items, failed, &mut warnings);
        probed = probe(&mut s, items)?;
    }
    let todo = unchunked(items);
    let failed = prep.chunk(items, &todo);
    drop_failed(items, failed, &mut warnings);

    // The index: cached per store id, fetched from the cached generation on.
    let (mut cache, warning) = match &cfg.index_cache_dir {
        Some(dir) => IndexCache::open(dir, accept.store_id),
        None => IndexCache::open(std::env::temp_dir().join("pfs-no-cache"), accept.store_id),
    };
    if let Some(w) = warning {
        warnings.push(w.to_string());
    }
    if cfg.index_cache_dir.is_none() || cache.generation() > accept.generation {
        // No cache wanted, or the store lost entries (a crash dropped a
        // torn tail): start over.
        cache.reset();
    }
    let cached = cache.len() as u64;
    let from = cache.generation();
    s.send(
        FrameType::IndexRequest,
        0,
        &from.to_le_bytes()[..INDEX_REQUEST_LEN],
        "INDEX_REQUEST",
    )?;
    let fetched = s.read_index(&mut cache, from)?;
    if cfg.index_cache_dir.is_some() {
        if let Err(e) = cache.save() {
            warnings.push(format!("index cache not saved: {e}"));
        }
    }

    let (plans, summary) = classify(items, |h| cache.lookup(h));
    let mut outcome = FilesSendOutcome {
        plan: summary,
        store_id: store_hex(&accept.store_id),
        store_generation: accept.generation,
        index_entries_fetched: fetched,
        index_entries_cached: cached,
        probed,
        report: None,
        messages: String::new(),
        wire_bytes_sent: 0,
        wire_bytes_received: 0,
        repaired_chunks: 0,
        repaired_bytes: 0,
        elapsed: Duration::ZERO,
        usage: Usage::default(),
        warnings,
    };
    if cfg.dry_run {
        let _ = s.t.shutdown_write();
        outcome.wire_bytes_sent = s.wire_sent;
        outcome.wire_bytes_received = s.reader.wire_bytes();
        outcome.elapsed = started.elapsed();
        outcome.usage = thread_usage().since(&usage0);
        return Ok(outcome);
    }

    let plan = Plan {
        entries: summary.entries,
        files: summary.files,
        total_bytes: summary.total_bytes,
        literal_bytes: summary.literal_bytes,
        chunks: summary.chunks,
    };
    s.send(FrameType::Plan, 0, &plan.emit(), "PLAN")?;
    let (_, body) = s.expect(FrameType::Ack, "PLAN acknowledgement")?;
    PlanAck::parse(&body).map_err(|error| SessionError::Malformed {
        context: "ACK",
        error,
    })?;

    // The stream.
    let stream_start = Instant::now();
    let mut frame = Vec::with_capacity(SENDER_FRAME_TARGET + (1 << 20));
    let mut zbuf = Vec::new();
    let mut done_bytes = 0u64;
    let mut last_progress = Instant::now();
    let items: &[FilesItem] = items;
    for (no, (item, plan)) in items.iter().zip(&plans).enumerate() {
        send_entry(
            &mut s,
            no as u64,
            item,
            plan,
            &mut frame,
            &mut zbuf,
            &mut outcome.warnings,
        )?;
        done_bytes += item.recipe.as_ref().map_or(0, |r| r.size);
        if last_progress.elapsed() >= Duration::from_millis(200) {
            last_progress = Instant::now();
            progress(&FilesSendProgress {
                entries: no as u64 + 1,
                bytes: done_bytes,
                total_bytes: summary.total_bytes,
                wire_bytes: s.wire_sent,
                elapsed: stream_start.elapsed(),
            });
        }
    }
    progress(&FilesSendProgress {
        entries: items.len() as u64,
        bytes: done_bytes,
        total_bytes: summary.total_bytes,
        wire_bytes: s.wire_sent,
        elapsed: stream_start.elapsed(),
    });
    s.flush_batch()?;
    s.send(FrameType::FilesEnd, 0, &[], "FILES_END")?;

    // Corrections, then the report.
    let report = loop {
        let (h, body) = s.reply("the report")?;
        match h.frame_type {
            FrameType::Nak => {
                let mut wanted: Vec<Hash> = Vec::new();
                let mut last = h.flags & FLAG_LAST != 0;
                let hashes = parse_nak(&body).map_err(|error| SessionError::Malformed {
                    context: "NAK",
                    error,
                })?;
                wanted.extend(hashes.copied());
                while !last {
                    let (h, body) = s.expect(FrameType::Nak, "NAK")?;
                    last = h.flags & FLAG_LAST != 0;
                    let hashes = parse_nak(&body).map_err(|error| SessionError::Malformed {
                        context: "NAK",
                        error,
                    })?;
                    wanted.extend(hashes.copied());
                }
                let (chunks, bytes) = repair(&mut s, items, &wanted, &mut frame)?;
                outcome.repaired_chunks += chunks;
                outcome.repaired_bytes += bytes;
            }
            FrameType::FilesEnd if h.flags & FLAG_FILES_REPORT != 0 => {
                let r = FilesReport::parse(&body).map_err(|error| SessionError::Malformed {
                    context: "FILES_END report",
                    error,
                })?;
                outcome.messages = r.messages.to_string();
                break FilesReport { messages: "", ..r };
            }
            other => {
                return Err(FilesViolation::UnexpectedReply {
                    expected: "NAK or FILES_END",
                    got: other,
                }
                .into())
            }
        }
    };
    outcome.report = Some(report);
    outcome.wire_bytes_sent = s.wire_sent;
    outcome.wire_bytes_received = s.reader.wire_bytes();
    outcome.elapsed = started.elapsed();
    outcome.usage = thread_usage().since(&usage0);
    Ok(outcome)
}

fn entry_kind(e: &Entry) -> (EntryKind, &[u8]) {
    match &e.kind {
        LocalKind::File { .. } => (EntryKind::File, &[]),
        LocalKind::Dir => (EntryKind::Dir, &[]),
        LocalKind::Symlink { target } => (EntryKind::Symlink, target),
    }
}

fn io_local(what: &'static str, path: &std::path::Path, source: std::io::Error) -> SessionError {
    LocalError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// FILE, then its CHUNKS frames (entries and literal bytes read straight
/// into the frame buffer: one copy from the page cache).
fn send_entry<T: Transport + ?Sized>(
    s: &mut Sender<'_, T>,
    no: u64,
    item: &FilesItem,
    plan: &[ChunkPlan],
    frame: &mut Vec<u8>,
    zbuf: &mut Vec<u8>,
    warnings: &mut Vec<String>,
) -> Result<(), SessionError> {
    let e = &item.entry;
    let (kind, link) = entry_kind(e);
    let (size, file_hash, chunk_count) = match (&item.recipe, item.size_and_hash()) {
        (_, Some((size, hash))) if item.held => (size, hash, 0),
        (Some(r), _) => (r.size, r.file_hash, r.chunks.len() as u32),
        _ => (0, [0; 32], 0),
    };
    let mtime_sec = e.mtime_ns.div_euclid(1_000_000_000) as i64;
    let mtime_nsec = e.mtime_ns.rem_euclid(1_000_000_000) as u32;
    frame.clear();
    FileEntry {
        file_no: no,
        kind,
        mode: e.mode,
        mtime_sec,
        mtime_nsec,
        size,
        chunk_count,
        file_hash,
        path: e.rel.as_bytes(),
        link_target: link,
        held: item.held,
    }
    .emit(frame);
    s.queue(FrameType::File, frame, "FILE")?;
    let Some(recipe) = item.recipe.as_ref().filter(|_| !item.held) else {
        return Ok(());
    };
    if recipe.chunks.is_empty() {
        return Ok(());
    }
    let needs_read = plan.contains(&ChunkPlan::Literal);
    let file = if needs_read {
        let f = File::open(&e.abs).map_err(|err| io_local("open", &e.abs, err))?;
        if let Ok(meta) = f.metadata() {
            use std::os::unix::fs::MetadataExt;
            let now_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
            if meta.size() != recipe.size || now_ns != e.mtime_ns {
                warnings.push(format!(
                    "{} changed since it was scanned; the receiver will refuse it",
                    e.abs.display()
                ));
            }
        }
        Some(f)
    } else {
        None
    };
    let mut i = 0;
    while i < recipe.chunks.len() {
        frame.clear();
        frame.extend_from_slice(&[0; pfs_wire::files::CHUNKS_FIXED_LEN]);
        let mut count = 0u32;
        while i < recipe.chunks.len() && frame.len() < SENDER_FRAME_TARGET {
            let c = &recipe.chunks[i];
            match plan[i] {
                ChunkPlan::Ref { offset } => {
                    emit_entry_head(frame, tag::REF, &c.hash, c.len);
                    frame.extend_from_slice(&offset.to_le_bytes());
                }
                ChunkPlan::Known => emit_entry_head(frame, tag::KNOWN, &c.hash, c.len),
                ChunkPlan::Literal => {
                    let f = file
                        .as_ref()
                        .ok_or_else(|| io_local("read", &e.abs, std::io::ErrorKind::NotFound.into()))?;
                    push_literal(frame, zbuf, f, c.offset, c.len, &c.hash, s.zstd_for_literals())
                        .map_err(|err| io_local("read", &e.abs, err))?;
                }
            }
            count += 1;
            i += 1;
        }
        frame[..pfs_wire::files::CHUNKS_FIXED_LEN]
            .copy_from_slice(&ChunksHeader { file_no: no, count }.emit());
        s.queue(FrameType::Chunks, frame, "CHUNKS")?;
    }
    Ok(())
}

/// Appends one literal entry: the chunk's bytes read from `f` straight into
/// the frame, or zstd-compressed when that is smaller.
fn push_literal(
    frame: &mut Vec<u8>,
    zbuf: &mut Vec<u8>,
    f: &File,
    offset: u64,
    len: u32,
    hash: &Hash,
    compress: Option<(&mut zstd::bulk::Compressor<'static>, &mut i32, i32)>,
) -> std::io::Result<()> {
    let head = frame.len();
    emit_entry_head(frame, tag::LITERAL, hash, len);
    let start = frame.len();
    frame.resize(start + len as usize, 0);
    f.read_exact_at(&mut frame[start..], offset)?;
    if let Some((zctx, zlevel, level)) = compress {
        // Compression that saves nothing is not worth the receiver's time.
        if let Ok(n) = compress_into(zctx, zlevel, level, &frame[start..], zbuf) {
            if n + 4 < len as usize {
                frame.truncate(head);
                emit_entry_head(frame, tag::ZSTD, hash, len);
                frame.extend_from_slice(&(n as u32).to_le_bytes());
                frame.extend_from_slice(&zbuf[..n]);
            }
        }
    }
    Ok(())
}

/// Compresses `src` into `dst` (replacing its contents) with the session's
/// context, switching its level only when it changes.
fn compress_into(
    zctx: &mut zstd::bulk::Compressor<'static>,
    current: &mut i32,
    level: i32,
    src: &[u8],
    dst: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if *current != level {
        zctx.set_compression_level(level)?;
        *current = level;
    }
    dst.clear();
    dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
    zctx.compress_to_buffer(src, dst)
}

/// Answers a NAK: the named chunks' bytes, read again from the files.
fn repair<T: Transport + ?Sized>(
    s: &mut Sender<'_, T>,
    items: &[FilesItem],
    wanted: &[Hash],
    frame: &mut Vec<u8>,
) -> Result<(u64, u64), SessionError> {
    let want: HashMap<Hash, ()> = wanted.iter().map(|h| (*h, ())).collect();
    let mut found: HashMap<Hash, (usize, u64, u32)> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(r) = &item.recipe {
            for c in &r.chunks {
                if want.contains_key(&c.hash) {
                    found.entry(c.hash).or_insert((i, c.offset, c.len));
                }
            }
        }
    }
    let mut zbuf = Vec::new();
    let (mut chunks, mut bytes) = (0u64, 0u64);
    let mut list: Vec<_> = found.into_iter().collect();
    list.sort_by_key(|(_, (i, off, _))| (*i, *off));
    let mut k = 0;
    loop {
        frame.clear();
        frame.extend_from_slice(&[0; pfs_wire::files::CHUNKS_FIXED_LEN]);
        let mut count = 0u32;
        while k < list.len() && frame.len() < SENDER_FRAME_TARGET {
            let (hash, (i, off, len)) = &list[k];
            let path = &items[*i].entry.abs;
            let f = File::open(path).map_err(|e| io_local("open", path, e))?;
            push_literal(frame, &mut zbuf, &f, *off, *len, hash, s.zstd_for_literals())
                .map_err(|e| io_local("read", path, e))?;
            chunks += 1;
            bytes += u64::from(*len);
            count += 1;
            k += 1;
        }
        frame[..pfs_wire::files::CHUNKS_FIXED_LEN].copy_from_slice(
            &ChunksHeader {
                file_no: ChunksHeader::REPAIR,
                count,
            }
            .emit(),
        );
        let last = k >= list.len();
        s.send(
            FrameType::Repair,
            if last { FLAG_LAST } else { 0 },
            frame,
            "REPAIR",
        )?;
        if last {
            return Ok((chunks, bytes));
        }
    }
}
