//! What the file system threads and the link thread share: the tree, each
//! file's recipe (complete, or still arriving), the chunks asked and not
//! yet here, the cache, the counters, and the one condition variable every
//! waiting reader sleeps on.
//!
//! A read finds the chunks under its range, takes those the cache holds
//! (checked once per chunk and mount), asks the link for the rest in one
//! FETCH and waits until each is in the cache, or its answer says it is
//! gone, or the link is down, or its deadline passes: a vanished server
//! costs an uncached read `EIO` within the timeout, never a hang.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use pfs_wire::mount::{Hash, MountAccept};

use crate::cache::{Cache, Held};
use crate::link::LinkError;
use crate::proto::Want;
use crate::tree::{Kind, Tree};

/// A file's recipe: where each chunk starts, and its hash.
#[derive(Debug, Default)]
pub struct Recipe {
    /// Start of each chunk, then the file's size (chunks + 1 values).
    pub starts: Vec<u64>,
    /// Each chunk's hash.
    pub hashes: Vec<Hash>,
    /// Chunks this mount has checked in the cache already.
    checked: Vec<AtomicBool>,
}

impl Recipe {
    fn push(&mut self, len: u32, hash: Hash) {
        let end = self.end() + u64::from(len);
        if self.starts.is_empty() {
            self.starts.push(0);
        }
        self.starts.push(end);
        self.hashes.push(hash);
        self.checked.push(AtomicBool::new(false));
    }

    /// Bytes described so far.
    pub fn end(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Chunks.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// No chunks (an empty file).
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Indices of the chunks overlapping `[from, to)` (`to` ≤ [`Self::end`]).
    pub fn covering(&self, from: u64, to: u64) -> std::ops::Range<usize> {
        if from >= to || self.is_empty() {
            return 0..0;
        }
        // The last start ≤ from, and the first start ≥ to.
        let first = self.starts.partition_point(|&s| s <= from).saturating_sub(1);
        let last = self.starts.partition_point(|&s| s < to).min(self.len());
        first..last
    }

    /// Chunk `i`: start, length, hash.
    pub fn chunk(&self, i: usize) -> (u64, u32, Hash) {
        (
            self.starts[i],
            (self.starts[i + 1] - self.starts[i]) as u32,
            self.hashes[i],
        )
    }

    /// Every chunk of file `entry` as a [`Want`], in order.
    pub fn wants(&self, entry: u64) -> impl Iterator<Item = Want> + '_ {
        (0..self.len()).map(move |i| {
            let (_, len, hash) = self.chunk(i);
            Want {
                entry,
                index: i as u32,
                len,
                hash,
            }
        })
    }
}

/// Requests for the link thread.
#[derive(Debug)]
pub enum Ask {
    /// RECIPE_ASK for a file.
    Recipe {
        /// Listing entry.
        entry: u64,
        /// Its size.
        size: u64,
    },
    /// FETCH of chunks (any number; the link splits them).
    Fetch(Vec<Want>),
    /// The link is down and a reader needs it: connect again.
    Reconnect,
    /// Files read in listing order: fetch the next ones' recipes and the
    /// chunks the cache lacks, before they are opened.
    Readahead(Vec<u64>),
}

/// Readahead across files starts after this many files were read from
/// their start one after another in listing order (`tar`, `cp -r`,
/// `diff -r`); a single file read never triggers it.
const READAHEAD_AFTER: u32 = 2;
/// Files read ahead at most, beyond the one being read.
const READAHEAD_FILES: u32 = 64;
/// Bytes read ahead at most.
const READAHEAD_BYTES: u64 = 16 << 20;

/// Files to read ahead after the file at `pos` of an order (`at` gives
/// the inode at a position) was read from its start; updates `q`.
fn next_files(q: &mut Sequence, pos: u32, at: impl Fn(u32) -> Option<u64>, tree: &Tree) -> Vec<u64> {
    q.run = match q.last {
        Some(l) if l.checked_add(1) == Some(pos) => q.run + 1,
        Some(l) if l == pos => q.run,
        _ => 1,
    };
    q.last = Some(pos);
    // Ask again only when half the window was used.
    if q.run < READAHEAD_AFTER || (q.ahead > pos && q.ahead - pos > READAHEAD_FILES / 2) {
        return Vec::new();
    }
    let mut files = Vec::new();
    let mut bytes = 0u64;
    let mut no = q.ahead.max(pos + 1);
    while no <= pos + READAHEAD_FILES {
        let Some(ino) = at(no) else { break };
        let size = tree.node(ino).map_or(0, |n| n.size);
        // A file past the budget is not read ahead: it would hold the link
        // (answers come in order) for what nobody asked yet.
        if bytes + size > READAHEAD_BYTES {
            break;
        }
        bytes += size;
        files.push(ino - 2);
        no += 1;
    }
    q.ahead = no;
    files
}

/// Whether files are being read one after another.
#[derive(Debug, Default)]
struct Sequence {
    /// The last file read from its start (its `file_no`).
    last: Option<u32>,
    /// Files in a row read so.
    run: u32,
    /// Files up to here were asked for already.
    ahead: u32,
}

/// Counters, for `user.pfs.stats` and the report at unmount.
#[derive(Debug, Default)]
pub struct Stats {
    /// Read calls served.
    pub reads: AtomicU64,
    /// Bytes returned to readers.
    pub bytes_read: AtomicU64,
    /// Reads answered with an error.
    pub read_errors: AtomicU64,
    /// Recipes asked for.
    pub recipes: AtomicU64,
    /// Chunks fetched from the server (checked).
    pub chunks_fetched: AtomicU64,
    /// Their bytes.
    pub bytes_fetched: AtomicU64,
    /// Chunk uses served from the local cache.
    pub chunks_local: AtomicU64,
    /// Cached chunks that failed their check (fetched again).
    pub cache_damaged: AtomicU64,
    /// Chunks the server could not serve.
    pub chunks_gone: AtomicU64,
    /// Chunks kept in memory because the cache was full.
    pub spilled: AtomicU64,
    /// Bytes received from the server, frames included.
    pub wire_in: AtomicU64,
    /// Bytes sent to it.
    pub wire_out: AtomicU64,
    /// Opens served on a backing file (passthrough).
    pub passthrough_opens: AtomicU64,
    /// Times the link was opened again after it ended.
    pub reconnects: AtomicU64,
    /// Files read ahead (their recipe asked, their chunks fetched) before
    /// they were opened.
    pub readahead_files: AtomicU64,
}

impl Stats {
    /// The counters as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "reads": g(&self.reads), "bytes_read": g(&self.bytes_read), "read_errors": g(&self.read_errors),
            "recipes": g(&self.recipes), "chunks_fetched": g(&self.chunks_fetched),
            "bytes_fetched": g(&self.bytes_fetched), "chunks_local": g(&self.chunks_local),
            "cache_damaged": g(&self.cache_damaged), "chunks_gone": g(&self.chunks_gone),
            "spilled": g(&self.spilled), "wire_in": g(&self.wire_in), "wire_out": g(&self.wire_out),
            "passthrough_opens": g(&self.passthrough_opens), "reconnects": g(&self.reconnects),
            "readahead_files": g(&self.readahead_files),
        })
    }
}

/// Why a read failed.
#[derive(Debug, Clone)]
pub enum ReadError {
    /// Not a regular file of the tree.
    NotAFile,
    /// The server could not serve this version of the file, or the link is
    /// down, or the deadline passed: `EIO`.
    Io(Eio),
}

/// Why a read that needs the server fails with `EIO`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Eio {
    /// The read's deadline passed.
    #[error("no answer from the server within {0:?}")]
    NoAnswer(Duration),
    /// The link is down (and may not come back in time).
    #[error(transparent)]
    Down(#[from] Down),
    /// The link thread is gone.
    #[error("the mount is shutting down")]
    ShuttingDown,
    /// The server cannot serve the file as listed.
    #[error("{path}: changed or gone on the server since the mount")]
    FileGone {
        /// The file.
        path: String,
    },
    /// The server cannot serve a chunk of the file as listed.
    #[error("{path}: chunk {index} changed or gone on the server since the mount")]
    ChunkGone {
        /// The file.
        path: String,
        /// The chunk's index in the file.
        index: u32,
    },
    /// A chunk fetched for this read left the cache before it was read.
    #[error("chunk {0} fetched but not readable from the cache")]
    Unreadable(usize),
}

/// Why the link to the server is down.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Down {
    /// The mount is stopping.
    #[error("the mount is shutting down")]
    ShuttingDown,
    /// The connection broke, the server went silent or broke the protocol.
    #[error("link to the server ended: {0}")]
    Ended(Arc<LinkError>),
    /// A reconnection listed another tree: the mount stays down.
    #[error("the server's tree changed since the mount: unmount and mount again to see it")]
    TreeChanged,
    /// The last reconnection failed.
    #[error("the server cannot be reached: {0}")]
    Unreachable(Arc<dyn std::error::Error + Send + Sync>),
}

#[derive(Debug, Default)]
struct State {
    /// Recipes being received.
    partial: HashMap<u64, Recipe>,
    /// Recipes asked (partial or not yet started).
    asked: HashSet<u64>,
    /// Files the server said it cannot serve.
    gone_files: HashSet<u64>,
    /// Chunks asked and not answered.
    inflight: HashSet<Hash>,
    /// Chunks the server could not serve, by file and index (the same
    /// bytes in another file may still be served). Forgotten on reconnect.
    gone_chunks: HashSet<(u64, u32)>,
    /// Why the link is down, while it is.
    down: Option<Down>,
    /// The link will not come back (the tree changed, or shutting down).
    down_for_good: bool,
    /// A reconnection was asked for and has not ended.
    reconnecting: bool,
    /// When the last reconnection failed.
    last_failed: Option<Instant>,
}

/// A failed reconnection is not tried again sooner than this: reads of a
/// server that is gone fail at once instead of each waiting to connect.
const RETRY_GAP: Duration = Duration::from_secs(1);

/// Everything shared (module docs).
#[derive(Debug)]
pub struct Shared {
    /// The listing.
    pub tree: Tree,
    /// What the server announced.
    pub accept: MountAccept,
    /// The local chunk cache.
    pub cache: Cache,
    /// Counters.
    pub stats: Stats,
    /// Longest a read waits for the server.
    pub timeout: Duration,
    recipes: Vec<OnceLock<Arc<Recipe>>>,
    /// The link thread can connect again.
    can_reconnect: bool,
    sequence: Mutex<Sequence>,
    /// The same per directory (its files in order), by directory inode.
    dirs: Mutex<HashMap<u64, Sequence>>,
    state: Mutex<State>,
    changed: Condvar,
    asks: Mutex<Sender<Ask>>,
}

impl Shared {
    /// Shared state of a session opened with `accept` and `tree`; `asks`
    /// reaches the link thread.
    pub fn new(
        accept: MountAccept,
        tree: Tree,
        cache: Cache,
        timeout: Duration,
        asks: Sender<Ask>,
        can_reconnect: bool,
    ) -> Self {
        let recipes = (0..tree.entries()).map(|_| OnceLock::new()).collect();
        Self {
            tree,
            accept,
            cache,
            stats: Stats::default(),
            timeout,
            recipes,
            can_reconnect,
            sequence: Mutex::new(Sequence::default()),
            dirs: Mutex::new(HashMap::new()),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            asks: Mutex::new(asks),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, ask: Ask) -> bool {
        let tx = self.asks.lock().unwrap_or_else(|p| p.into_inner());
        tx.send(ask).is_ok()
    }

    fn wait<'a>(
        &self,
        g: MutexGuard<'a, State>,
        deadline: Instant,
    ) -> Result<MutexGuard<'a, State>, ReadError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadError::Io(Eio::NoAnswer(self.timeout)));
        }
        let (g, _) = self
            .changed
            .wait_timeout(g, deadline - now)
            .unwrap_or_else(|p| p.into_inner());
        Ok(g)
    }

    /// Waits while the link is down and a reconnection may bring it back
    /// (asking for one if none runs); `Err` if it cannot.
    fn revive<'a>(
        &self,
        mut g: MutexGuard<'a, State>,
        deadline: Instant,
    ) -> Result<MutexGuard<'a, State>, ReadError> {
        loop {
            let Some(why) = g.down.clone() else { return Ok(g) };
            if g.down_for_good || !self.can_reconnect {
                return Err(ReadError::Io(why.into()));
            }
            if !g.reconnecting {
                if g.last_failed.is_some_and(|t| t.elapsed() < RETRY_GAP) {
                    return Err(ReadError::Io(why.into()));
                }
                g.reconnecting = true;
                if !self.send(Ask::Reconnect) {
                    return Err(ReadError::Io(Eio::ShuttingDown));
                }
            }
            g = self.wait(g, deadline)?;
        }
    }

    /// The complete recipe of `entry`, if here.
    pub fn recipe(&self, entry: u64) -> Option<&Arc<Recipe>> {
        self.recipes.get(usize::try_from(entry).ok()?)?.get()
    }

    /// Waits until the recipe of `entry` covers `[0, to)` and calls `f`
    /// with it (complete or still arriving), asking for it if nobody has.
    pub fn with_recipe<R>(&self, entry: u64, to: u64, f: impl FnOnce(&Recipe) -> R) -> Result<R, ReadError> {
        if let Some(r) = self.recipe(entry) {
            return Ok(f(r));
        }
        let deadline = Instant::now() + self.timeout;
        let mut g = self.lock();
        loop {
            if let Some(r) = self.recipe(entry) {
                drop(g);
                return Ok(f(r));
            }
            if g.gone_files.contains(&entry) {
                return Err(ReadError::Io(Eio::FileGone {
                    path: self.tree.path_of(entry + 2),
                }));
            }
            if g.down.is_some() {
                g = self.revive(g, deadline)?;
                continue;
            }
            if let Some(p) = g.partial.get(&entry) {
                if p.end() >= to {
                    return Ok(f(p));
                }
            }
            if g.asked.insert(entry) {
                let size = self.tree.node(entry + 2).map_or(0, |n| n.size);
                self.stats.recipes.fetch_add(1, Ordering::Relaxed);
                if !self.send(Ask::Recipe { entry, size }) {
                    return Err(ReadError::Io(Eio::ShuttingDown));
                }
            }
            g = self.wait(g, deadline)?;
        }
    }

    /// The chunk's bytes from the cache, checked (once per mount and
    /// recipe chunk when `checked` is given).
    pub fn local(&self, hash: &Hash, checked: Option<&AtomicBool>) -> Option<Held<'_>> {
        if let Some(c) = checked {
            if c.load(Ordering::Relaxed) {
                if let Some(h) = self.cache.get(hash) {
                    return Some(h);
                }
            }
        }
        let got = self.cache.get(hash)?;
        if blake3::hash(got.bytes()).as_bytes() != hash {
            self.stats.cache_damaged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if let Some(c) = checked {
            c.store(true, Ordering::Relaxed);
        }
        Some(got)
    }

    /// Makes sure every chunk of `wants` is in the cache: asks for those
    /// that are not (and not asked already) and waits for all of them.
    pub fn fetch(&self, wants: &[Want]) -> Result<(), ReadError> {
        let deadline = Instant::now() + self.timeout;
        let mut g = self.revive(self.lock(), deadline)?;
        if let Some(w) = wants.iter().find(|w| g.gone_chunks.contains(&(w.entry, w.index))) {
            return Err(self.gone(w));
        }
        let mut ask = Vec::new();
        let mut seen = HashSet::new();
        for w in wants {
            // The caller found these missing (or damaged) in the cache; a
            // chunk another reader fetched meanwhile costs one more fetch,
            // never a hash under this lock.
            if seen.insert(w.hash) && !g.inflight.contains(&w.hash) {
                g.inflight.insert(w.hash);
                ask.push(*w);
            }
        }
        if !ask.is_empty() && !self.send(Ask::Fetch(ask)) {
            return Err(ReadError::Io(Eio::ShuttingDown));
        }
        loop {
            // Waiting on what is in flight (ours or another reader's).
            let mut waiting = false;
            for w in wants {
                if g.inflight.contains(&w.hash) {
                    waiting = true;
                } else if g.gone_chunks.contains(&(w.entry, w.index)) {
                    return Err(self.gone(w));
                }
            }
            if !waiting {
                return Ok(());
            }
            if let Some(why) = &g.down {
                return Err(ReadError::Io(why.clone().into()));
            }
            g = self.wait(g, deadline)?;
        }
    }

    fn gone(&self, w: &Want) -> ReadError {
        ReadError::Io(Eio::ChunkGone {
            path: self.tree.path_of(w.entry + 2),
            index: w.index,
        })
    }

    /// Copies `[offset, offset + out.len())` of file `ino` into `out`,
    /// fetching what the cache lacks. Returns bytes copied (short at EOF).
    pub fn read(&self, ino: u64, offset: u64, out: &mut Vec<u8>, size: usize) -> Result<(), ReadError> {
        let node = self
            .tree
            .node(ino)
            .filter(|n| n.kind == Kind::File)
            .ok_or(ReadError::NotAFile)?;
        let entry = ino - 2;
        out.clear();
        if offset >= node.size || size == 0 {
            return Ok(());
        }
        if offset == 0 {
            self.note_start(ino);
        }
        let to = node.size.min(offset.saturating_add(size as u64));
        // (chunk index, start, len, hash) under the range.
        let chunks: Vec<(usize, u64, u32, Hash)> = self.with_recipe(entry, to, |r| {
            r.covering(offset, to)
                .map(|i| {
                    let (s, l, h) = r.chunk(i);
                    (i, s, l, h)
                })
                .collect()
        })?;
        let complete = self.recipe(entry);
        let checked = |i: usize| complete.as_ref().and_then(|r| r.checked.get(i));
        let mut missing = Vec::new();
        for &(i, _, len, hash) in &chunks {
            if self.local(&hash, checked(i)).is_none() {
                missing.push(Want {
                    entry,
                    index: i as u32,
                    len,
                    hash,
                });
            }
        }
        let local = chunks.len() - missing.len();
        self.stats.chunks_local.fetch_add(local as u64, Ordering::Relaxed);
        if !missing.is_empty() {
            self.fetch(&missing)?;
        }
        out.reserve((to - offset) as usize);
        for &(i, start, len, hash) in &chunks {
            let held = self
                .local(&hash, checked(i))
                .ok_or(ReadError::Io(Eio::Unreadable(i)))?;
            let b = held.bytes();
            let from = offset.max(start) - start;
            let end = (to.min(start + u64::from(len)) - start) as usize;
            out.extend_from_slice(&b[from as usize..end]);
        }
        Ok(())
    }

    /// A file was read from its start. Two orders are watched: the whole
    /// tree's listing order (`tar`, `cp -r` read a tree as it is listed),
    /// and each directory's files in turn (a reader that sorts names, or
    /// visits subdirectories later). After [`READAHEAD_AFTER`] files in a
    /// row in either, the link is asked to read the next ones ahead.
    fn note_start(&self, ino: u64) {
        let Some(node) = self.tree.node(ino) else { return };
        let tree = &self.tree;
        let by_listing = {
            let mut q = self.sequence.lock().unwrap_or_else(|p| p.into_inner());
            next_files(&mut q, node.file_no, |no| tree.file(no), tree)
        };
        let by_dir = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            if dirs.len() > 4096 {
                dirs.clear();
            }
            let q = dirs.entry(node.parent).or_default();
            let siblings = tree.node(node.parent).map_or(&[][..], |d| &d.files[..]);
            next_files(q, node.sibling_no, |no| siblings.get(no as usize).copied(), tree)
        };
        let mut files = by_listing;
        for e in by_dir {
            if !files.contains(&e) {
                files.push(e);
            }
        }
        if files.is_empty() {
            return;
        }
        self.stats
            .readahead_files
            .fetch_add(files.len() as u64, Ordering::Relaxed);
        let _ = self.send(Ask::Readahead(files));
    }

    /// For the link's readahead: takes the asking of `entry`'s recipe on
    /// itself unless it is here or asked already.
    pub fn claim_recipe(&self, entry: u64) -> bool {
        if self.recipe(entry).is_some() {
            return false;
        }
        let mut g = self.lock();
        if g.down.is_some() || g.gone_files.contains(&entry) || !g.asked.insert(entry) {
            return false;
        }
        self.stats.recipes.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// For the link's readahead: the chunks of `entry`'s complete recipe
    /// that the cache lacks and nobody asked for, now marked in flight.
    pub fn claim_chunks(&self, entry: u64) -> Vec<Want> {
        let Some(r) = self.recipe(entry).cloned() else {
            return Vec::new();
        };
        let mut lacking: Vec<Want> = r
            .wants(entry)
            .filter(|w| self.cache.get(&w.hash).is_none())
            .collect();
        let mut g = self.lock();
        lacking.retain(|w| g.inflight.insert(w.hash));
        lacking
    }

    // ---- the link thread's side ----

    /// More of a recipe arrived.
    pub fn recipe_part(&self, entry: u64, chunks: &[(u32, Hash)], last: bool) {
        let mut g = self.lock();
        let p = g.partial.entry(entry).or_default();
        for &(len, hash) in chunks {
            p.push(len, hash);
        }
        if last {
            let mut done = g.partial.remove(&entry).unwrap_or_default();
            if done.starts.is_empty() {
                done.starts.push(0);
            }
            g.asked.remove(&entry);
            if let Some(slot) = self.recipes.get(entry as usize) {
                let _ = slot.set(Arc::new(done));
            }
        }
        drop(g);
        self.changed.notify_all();
    }

    /// The server cannot serve file `entry`.
    pub fn recipe_gone(&self, entry: u64) {
        let mut g = self.lock();
        g.partial.remove(&entry);
        g.asked.remove(&entry);
        g.gone_files.insert(entry);
        drop(g);
        self.changed.notify_all();
    }

    /// Chunks arrived (checked by the link) and went to the cache: no longer
    /// in flight, and not to be hashed again by their readers.
    pub fn arrived(&self, wants: &[Want]) {
        for w in wants {
            if let Some(c) = self.recipe(w.entry).and_then(|r| r.checked.get(w.index as usize)) {
                c.store(true, Ordering::Relaxed);
            }
        }
        let mut g = self.lock();
        for w in wants {
            g.inflight.remove(&w.hash);
        }
        drop(g);
        self.changed.notify_all();
    }

    /// Chunks that arrived but only reached the memory spill: no longer in
    /// flight; their readers check them.
    pub fn arrived_unchecked<'h>(&self, hashes: impl Iterator<Item = &'h Hash>) {
        let mut g = self.lock();
        for h in hashes {
            g.inflight.remove(h);
        }
        drop(g);
        self.changed.notify_all();
    }

    /// A chunk the server could not serve.
    pub fn chunk_gone(&self, w: &Want) {
        self.stats.chunks_gone.fetch_add(1, Ordering::Relaxed);
        let mut g = self.lock();
        g.inflight.remove(&w.hash);
        g.gone_chunks.insert((w.entry, w.index));
        drop(g);
        self.changed.notify_all();
    }

    /// The link ended: everything waiting fails now, and every later read
    /// that needs the server fails at once.
    pub fn link_down(&self, why: Down) {
        let mut g = self.lock();
        if g.down.is_none() {
            g.down = Some(why);
        }
        g.inflight.clear();
        g.asked.clear();
        g.partial.clear();
        drop(g);
        self.changed.notify_all();
    }

    /// The link is up again (a reconnection listed the same tree).
    pub fn link_up(&self) {
        let mut g = self.lock();
        if !g.down_for_good {
            g.down = None;
        }
        g.reconnecting = false;
        g.last_failed = None;
        // A new session: what one could not serve, another may.
        g.gone_chunks.clear();
        g.gone_files.clear();
        drop(g);
        self.changed.notify_all();
    }

    /// A reconnection failed; readers waiting for it fail.
    pub fn reconnect_failed(&self, why: Down) {
        let mut g = self.lock();
        g.reconnecting = false;
        g.last_failed = Some(Instant::now());
        g.down = Some(why);
        drop(g);
        self.changed.notify_all();
    }

    /// The link is down and stays so, for `why`.
    pub fn link_down_for_good(&self, why: Down) {
        let mut g = self.lock();
        g.down_for_good = true;
        g.reconnecting = false;
        g.down = Some(why);
        g.inflight.clear();
        g.asked.clear();
        g.partial.clear();
        drop(g);
        self.changed.notify_all();
    }

    /// Why the link is down, if it is (for logs and the report).
    pub fn down(&self) -> Option<String> {
        self.lock().down.as_ref().map(ToString::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covering_finds_the_chunks_under_a_range() {
        let mut r = Recipe::default();
        r.push(10, [1; 32]);
        r.push(10, [2; 32]);
        r.push(5, [3; 32]);
        assert_eq!(r.end(), 25);
        assert_eq!(r.covering(0, 1), 0..1);
        assert_eq!(r.covering(9, 11), 0..2);
        assert_eq!(r.covering(10, 20), 1..2);
        assert_eq!(r.covering(19, 25), 1..3);
        assert_eq!(r.covering(24, 25), 2..3);
        assert_eq!(r.covering(5, 5), 0..0);
        assert_eq!(r.chunk(2), (20, 5, [3; 32]));
    }
}
