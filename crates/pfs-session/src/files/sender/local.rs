//! The sender core's host on this machine (the I/O side of
//! [`super::host`]): [`LocalSource`] reads files
//! with `pread` and keeps the index cache in a directory; [`LocalPrepare`]
//! hashes and chunks files on all cores ([`pfs_files::digest_files`],
//! [`pfs_files::chunk_files`]), counts the time it spends and, given a
//! [`FilesMeter`], the bytes it reads. Everything here does I/O or reads
//! the clock; the core does neither.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_files::{Entry, IndexCache, WalkKind};

use super::host::{first_failure, FilesPrepare, FilesSource, Streamed, Unreadable};
use super::meter::{FilesMeter, SendPhase};
use super::FilesItem;
use crate::error::LocalError;

/// Files being chunked in order on threads of their own while the session
/// goes on; their recipes are collected one by one as their turn comes.
#[derive(Debug)]
pub struct ChunkAhead {
    rx: std::sync::mpsc::Receiver<Vec<Chunked>>,
    /// Results received and not collected yet, by position in the list.
    ready: std::collections::HashMap<usize, Result<pfs_files::Recipe, String>>,
}

/// A position in the list and its recipe, or why it could not be chunked.
type Chunked = (usize, Result<pfs_files::Recipe, String>);

/// Files chunked per batch after the first: enough to keep every thread
/// busy, few enough that the stream never waits long for its next file.
const AHEAD_BATCH: usize = 256;
/// The first batch is small: the stream starts as soon as it is done.
const AHEAD_FIRST: usize = 16;

impl ChunkAhead {
    /// Starts chunking `entries` (position `k` in the list is collected as
    /// `k`) on `threads` threads (0 = one per core).
    pub fn start(
        entries: Vec<Entry>,
        params: pfs_files::ChunkParams,
        threads: usize,
    ) -> std::io::Result<Self> {
        // Batches done but not collected: bounded, so a stalled session does
        // not chunk a whole tree into memory ahead of it.
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        std::thread::Builder::new()
            .name("pfs-ahead".into())
            .spawn(move || {
                let read = AtomicU64::new(0);
                let mut at = 0;
                while at < entries.len() {
                    let n = if at == 0 { AHEAD_FIRST } else { AHEAD_BATCH };
                    let batch: Vec<&Entry> = entries[at..(at + n).min(entries.len())].iter().collect();
                    let done: Vec<Chunked> =
                        match pfs_files::chunk_files_metered(&batch, &params, threads, &read) {
                            Ok(results) => (at..)
                                .zip(results.into_iter().map(|r| r.map_err(|e| e.to_string())))
                                .collect(),
                            Err(e) => (at..at + batch.len()).map(|k| (k, Err(e.to_string()))).collect(),
                        };
                    at += batch.len();
                    if tx.send(done).is_err() {
                        // The session is gone.
                        return;
                    }
                }
            })?;
        Ok(Self {
            rx,
            ready: std::collections::HashMap::new(),
        })
    }

    /// The result of position `k`, waiting for it.
    pub fn take(&mut self, k: usize) -> Result<pfs_files::Recipe, String> {
        loop {
            if let Some(r) = self.ready.remove(&k) {
                return r;
            }
            match self.rx.recv() {
                Ok(batch) => self.ready.extend(batch),
                Err(_) => return Err("the chunking thread ended before this file was chunked".into()),
            }
        }
    }
}

/// A file being cut and hashed on threads of its own, its chunks handed
/// over in file order as they are ready ([`pfs_files::chunk_file_streaming`]).
/// At most [`STREAM_AHEAD`] runs of chunks wait: the chunker stays a few
/// windows ahead of the sender and no more.
#[derive(Debug)]
pub struct ChunkStream {
    rx: std::sync::mpsc::Receiver<StreamMsg>,
}

/// Runs of chunks (one per 8 MiB window) a [`ChunkStream`] may hold.
pub const STREAM_AHEAD: usize = 4;

#[derive(Debug)]
enum StreamMsg {
    Chunks(Vec<pfs_files::ChunkRef>),
    Done(Result<pfs_files::Recipe, pfs_files::FilesError>),
}

impl ChunkStream {
    /// Starts chunking `path` on `threads` threads (0 = one per core).
    pub fn start(path: PathBuf, params: pfs_files::ChunkParams, threads: usize) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel(STREAM_AHEAD);
        // Not joined: a session that stops early drops the receiving end,
        // and the thread ends at its next window.
        std::thread::Builder::new()
            .name("pfs-stream".into())
            .spawn(move || {
                let read = AtomicU64::new(0);
                let chunks = tx.clone();
                // False once nobody listens: the chunker stops reading.
                let mut sink =
                    move |c: &[pfs_files::ChunkRef]| chunks.send(StreamMsg::Chunks(c.to_vec())).is_ok();
                let result = pfs_files::chunk_file_streaming(&path, &params, threads, &read, &mut sink);
                let _ = tx.send(StreamMsg::Done(result));
            })?;
        Ok(Self { rx })
    }

    /// The next run of chunks (appended to `out`), or the end.
    pub fn next(&mut self, out: &mut Vec<pfs_files::ChunkRef>) -> Streamed {
        match self.rx.recv() {
            Ok(StreamMsg::Chunks(c)) => {
                out.extend_from_slice(&c);
                Streamed::More
            }
            Ok(StreamMsg::Done(Ok(r))) => Streamed::Done(r),
            Ok(StreamMsg::Done(Err(e))) => Streamed::Failed(e.to_string()),
            Err(_) => Streamed::Failed("its chunking thread ended before the file did".into()),
        }
    }
}

/// [`FilesPrepare`] on this machine's files with [`pfs_files::digest_files`]
/// and [`pfs_files::chunk_files`]; counts the time it spends.
#[derive(Debug, Clone)]
pub struct LocalPrepare {
    /// Chunking parameters.
    pub params: pfs_files::ChunkParams,
    /// Worker threads (0 = one per core).
    pub threads: usize,
    /// Time the send waited on hashing and chunking: all of it for work done
    /// before the stream, only the waits for files chunked in the background
    /// (chunking that overlapped the stream is not in it; streamed files
    /// are not in it at all).
    pub spent: Duration,
    /// Files hashed whole for the probe, and their bytes.
    pub hashed: (u64, u64),
    /// Files chunked, and their bytes.
    pub chunked: (u64, u64),
    /// Where the bytes read while hashing and chunking are counted.
    meter: Option<Arc<FilesMeter>>,
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
            meter: None,
        }
    }

    /// Counts its phases and the bytes it reads in `meter`.
    pub fn metered(mut self, meter: Arc<FilesMeter>) -> Self {
        self.meter = Some(meter);
        self
    }

    #[allow(clippy::type_complexity)]
    fn run<R>(
        &mut self,
        phase: SendPhase,
        items: &mut [FilesItem],
        which: &[usize],
        work: impl FnOnce(
            &[&Entry],
            &pfs_files::ChunkParams,
            usize,
            &AtomicU64,
        ) -> Result<Vec<Result<R, pfs_files::FilesError>>, pfs_files::FilesError>,
        mut put: impl FnMut(&mut FilesItem, R),
    ) -> Unreadable {
        if which.is_empty() {
            return Vec::new();
        }
        let t0 = Instant::now();
        let entries: Vec<&Entry> = which.iter().map(|&i| &items[i].entry).collect();
        let unmetered = AtomicU64::new(0);
        let read = match &self.meter {
            Some(m) => {
                let bytes = entries
                    .iter()
                    .map(|e| match e.kind {
                        WalkKind::File { size } => size,
                        _ => 0,
                    })
                    .sum();
                m.begin(phase, bytes, entries.len() as u64);
                m.read_counter()
            }
            None => &unmetered,
        };
        let results = match work(&entries, &self.params, self.threads, read) {
            Ok(r) => r,
            Err(e) => {
                let e = Arc::new(e);
                return which.iter().map(|&i| (i, Arc::clone(&e))).collect();
            }
        };
        let mut failed = Vec::new();
        for (&i, r) in which.iter().zip(results) {
            match r {
                Ok(r) => put(&mut items[i], r),
                Err(e) => failed.push((i, Arc::new(e))),
            }
        }
        self.spent += t0.elapsed();
        failed
    }
}

impl FilesPrepare for LocalPrepare {
    fn chunk_ahead(&mut self, entries: Vec<Entry>) -> Option<ChunkAhead> {
        ChunkAhead::start(entries, self.params, self.threads).ok()
    }

    fn note_chunked(&mut self, bytes: u64, waited: Duration) {
        self.chunked = (self.chunked.0 + 1, self.chunked.1 + bytes);
        self.spent += waited;
    }

    fn stream(&mut self, entry: &Entry) -> Option<ChunkStream> {
        let stream = ChunkStream::start(entry.abs.clone(), self.params, self.threads).ok()?;
        if let WalkKind::File { size } = entry.kind {
            self.chunked = (self.chunked.0 + 1, self.chunked.1 + size);
        }
        Some(stream)
    }

    fn hash(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        let mut done = (0, 0);
        let failed = self.run(
            SendPhase::Hash,
            items,
            which,
            pfs_files::digest_files_metered,
            |it, d| {
                done.0 += 1;
                done.1 += d.0;
                it.digest = Some(d);
            },
        );
        self.hashed = (self.hashed.0 + done.0, self.hashed.1 + done.1);
        failed
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        let mut done = (0, 0);
        let failed = self.run(
            SendPhase::Chunk,
            items,
            which,
            pfs_files::chunk_files_metered,
            |it, r| {
                done.0 += 1;
                done.1 += r.size;
                it.recipe = Some(r);
            },
        );
        self.chunked = (self.chunked.0 + done.0, self.chunked.1 + done.1);
        failed
    }
}

/// The sender core's host on this machine.
pub struct LocalSource<'p> {
    prep: &'p mut dyn FilesPrepare,
    cache_dir: Option<PathBuf>,
    /// The file read last, kept open for its next chunk.
    open: Option<(PathBuf, File)>,
    /// The file being cut for a STREAMED send.
    streaming: Option<ChunkStream>,
    /// Files being chunked in the background, and each one's position in
    /// that list by item number.
    ahead: Option<(ChunkAhead, std::collections::HashMap<usize, usize>)>,
}

impl std::fmt::Debug for LocalSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSource")
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl<'p> LocalSource<'p> {
    /// A source preparing files with `prep`, caching indexes in `cache_dir`.
    pub fn new(prep: &'p mut dyn FilesPrepare, cache_dir: Option<PathBuf>) -> Self {
        Self {
            prep,
            cache_dir,
            open: None,
            streaming: None,
            ahead: None,
        }
    }
}

impl FilesSource for LocalSource<'_> {
    fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        self.prep.hash(items, which)
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        self.prep.chunk(items, which)
    }

    fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>) {
        let (mut cache, warning) = match &self.cache_dir {
            Some(dir) => IndexCache::open(dir, store_id),
            None => IndexCache::open(std::env::temp_dir().join("pfs-no-cache"), store_id),
        };
        if self.cache_dir.is_none() {
            // No cache wanted: fetch the whole index.
            cache.reset();
        }
        (cache, warning.map(|w| w.to_string()))
    }

    fn save_index(&mut self, cache: &IndexCache) -> Option<String> {
        self.cache_dir.as_ref()?;
        cache.save().err().map(|e| format!("index cache not saved: {e}"))
    }

    fn chunk_ahead(&mut self, items: &[FilesItem], which: &[usize]) -> bool {
        let entries = which.iter().map(|&i| items[i].entry.clone()).collect();
        let Some(ahead) = self.prep.chunk_ahead(entries) else {
            return false;
        };
        let at = which.iter().enumerate().map(|(k, &i)| (i, k)).collect();
        self.ahead = Some((ahead, at));
        true
    }

    fn chunk_one(&mut self, items: &mut [FilesItem], no: usize) -> Result<(), String> {
        let Some(k) = self.ahead.as_ref().and_then(|(_, at)| at.get(&no).copied()) else {
            return first_failure(&self.prep.chunk(items, &[no]));
        };
        let t0 = Instant::now();
        let got = match self.ahead.as_mut() {
            Some((ahead, _)) => ahead.take(k),
            None => Err("no file is being chunked".into()),
        };
        let recipe = got?;
        self.prep.note_chunked(recipe.size, t0.elapsed());
        items[no].recipe = Some(recipe);
        Ok(())
    }

    fn stream_start(&mut self, item: &FilesItem) -> bool {
        self.streaming = self.prep.stream(&item.entry);
        self.streaming.is_some()
    }

    fn stream_stop(&mut self) {
        // Dropping the receiving end stops the thread at its next window.
        self.streaming = None;
    }

    fn stream_next(&mut self, out: &mut Vec<pfs_files::ChunkRef>) -> Streamed {
        match self.streaming.as_mut() {
            Some(s) => s.next(out),
            None => Streamed::Failed("no file is being streamed".into()),
        }
    }

    fn read(&mut self, item: &FilesItem, offset: u64, buf: &mut [u8]) -> Result<Option<String>, LocalError> {
        let e = &item.entry;
        let io = |what, source| LocalError::Io {
            what,
            path: e.abs.clone(),
            source,
        };
        let mut changed = None;
        if self.open.as_ref().is_none_or(|(p, _)| p != &e.abs) {
            self.open = None;
            let f = File::open(&e.abs).map_err(|source| io("open", source))?;
            if let (Ok(meta), Some(r)) = (f.metadata(), item.recipe.as_ref()) {
                use std::os::unix::fs::MetadataExt;
                let now_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
                if meta.size() < r.size {
                    // Its end cannot be sent: no need to read up to it.
                    return Err(io("read", shrank(r.size, meta.size())));
                }
                if meta.size() != r.size || now_ns != e.mtime_ns {
                    changed = Some(match meta.size() == r.size {
                        true => "it was modified since it was scanned".to_string(),
                        false => format!(
                            "it grew from {} to {} bytes since it was scanned",
                            r.size,
                            meta.size()
                        ),
                    });
                }
            }
            self.open = Some((e.abs.clone(), f));
        }
        let Some((_, f)) = self.open.as_ref() else {
            return Ok(changed);
        };
        f.read_exact_at(buf, offset)
            .map_err(|source| match source.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    let end = offset + buf.len() as u64;
                    let size = f.metadata().map_or(offset, |m| m.len());
                    io("read", shrank(end, size))
                }
                _ => io("read", source),
            })?;
        Ok(changed)
    }
}

/// The error of a file that ends before the byte `needed` its recipe says
/// it has.
fn shrank(needed: u64, size: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("it shrank to {size} bytes since it was scanned (byte {needed} was planned)"),
    )
}
