//! The mount server as a state machine without I/O: a whole frame from
//! the client in, the frames answering it out through a [`FrameOut`], the
//! work on files through a [`MountHost`].
//!
//! Frames are pushed out as they are made rather than polled: a recipe's
//! first frames leave while the host is still cutting the file, and a DATA
//! frame is one header plus one body buffer, reused, that the chunks were
//! read into in place (one vectored write per frame, nothing allocated per
//! chunk). Requests are answered one at a time, in the order they came, so
//! the frames of two answers never interleave.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::Arc;

use pfs_files::{ChunkRef, Recipe, RelPath, STATE_DIR};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::mount::{
    emit_recipe_entry, parse_fetch, Hash, ListKind, MountAccept, MountHello, RecipeAsk, RecipeHead, ReqHead,
    ServeStatus, DATA_BYTES, DATA_ENTRY_FIXED_LEN, DATA_GONE, DATA_HEAD_LEN, FLAG_LAST, RECIPE_ENTRY_LEN,
    RECIPE_HEAD_LEN,
};
use pfs_wire::{ErrorCode, FrameHeader, FrameType, FRAME_HEADER_LEN};

use super::host::{Cut, ListError, Listed, MountHost};
use super::{MountServerConfig, MountServerOutcome};
use crate::error::{LimitExceeded, Violation};
use crate::framing::refusal;
use crate::SessionError;

/// Where the frames of a mount session go.
pub trait FrameOut: Send {
    /// Sends one whole frame: `header`, then its body made of `parts`
    /// (at most three), as one vectored write.
    fn send(&mut self, header: &[u8; FRAME_HEADER_LEN], parts: &[&[u8]]) -> io::Result<()>;
}

/// Most RECIPE entries in one frame: as many as fit a control frame (1,819).
pub const RECIPE_ENTRIES_PER_FRAME: usize = (MAX_CONTROL_BODY as usize - RECIPE_HEAD_LEN) / RECIPE_ENTRY_LEN;

/// What a mount client did wrong (or asked that this server will not do).
#[derive(Debug, thiserror::Error)]
pub enum MountViolation {
    /// MOUNT_HELLO's `dir` is no directory the client may mount.
    #[error("cannot mount {dir:?}: {why}")]
    BadDir {
        /// As the client named it (lossy UTF-8).
        dir: String,
        /// Why not.
        why: BadDir,
    },
    /// The tree has more entries than the client takes or the server lists.
    #[error("the tree has more than {limit} entries, the {whose} limit")]
    TooManyEntries {
        /// The smaller limit.
        limit: u64,
        /// `client's` (its `max_entries`) or `server's`.
        whose: &'static str,
    },
    /// The client takes DATA bodies too small for this server's largest chunk.
    #[error(
        "the client takes DATA bodies of at most {client} bytes; this server's largest chunk needs {need}"
    )]
    DataBodyTooSmall {
        /// The client's `max_data_body`.
        client: u32,
        /// What one largest chunk needs.
        need: u64,
    },
    /// RECIPE_ASK or FETCH named an entry that is not a listed file.
    #[error("entry {entry} is {what}, not a listed file")]
    NotAFile {
        /// The entry number.
        entry: u64,
        /// What it is.
        what: &'static str,
    },
    /// A FETCH run past its file's recipe.
    #[error("FETCH run of entry {entry} asks for chunks {first}..{end} of a recipe of {chunks}")]
    PastRecipe {
        /// The entry.
        entry: u64,
        /// The run's first chunk.
        first: u32,
        /// One past its last.
        end: u64,
        /// Chunks in the recipe.
        chunks: u64,
    },
}

impl MountViolation {
    /// The ERROR code that tells the client.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::TooManyEntries { .. } | Self::DataBodyTooSmall { .. } => ErrorCode::Limit,
            Self::BadDir { .. } | Self::NotAFile { .. } | Self::PastRecipe { .. } => ErrorCode::Protocol,
        }
    }
}

/// Why MOUNT_HELLO's `dir` cannot be mounted ([`MountViolation::BadDir`]).
#[derive(Debug, thiserror::Error)]
pub enum BadDir {
    /// It is not a safe relative path.
    #[error("{0}")]
    Path(pfs_files::PathError),
    /// It is the server's state directory.
    #[error("{STATE_DIR} is the server's own state")]
    StateDir,
    /// It cannot be listed.
    #[error("not a directory beneath what this key may read ({0})")]
    NotListed(ListError),
}

impl From<MountViolation> for SessionError {
    fn from(v: MountViolation) -> Self {
        SessionError::Violation(Violation::Mount(v))
    }
}

/// A file's recipe as this session knows it; `None`: the file is gone.
type Known = Option<Arc<Recipe>>;

/// The server side of one mount session (see the module docs).
#[derive(Debug)]
pub struct MountServer {
    cfg: MountServerConfig,
    /// MOUNT_HELLO was answered.
    serving: bool,
    entries: Vec<Listed>,
    /// Recipes made or found this session, by entry, and in the order they
    /// were kept (the oldest are forgotten first).
    recipes: HashMap<u64, Known>,
    kept: VecDeque<u64>,
    /// Chunks in `recipes` (a gone file counts one).
    kept_chunks: u64,
    /// DATA body (its head first), negotiated size, reused for every frame.
    data: Box<[u8]>,
    /// LIST and RECIPE bodies, reused.
    scratch: Vec<u8>,
    outcome: MountServerOutcome,
}

impl MountServer {
    /// A session awaiting MOUNT_HELLO.
    pub fn new(cfg: &MountServerConfig) -> Self {
        Self {
            cfg: MountServerConfig {
                recipes: None,
                ..cfg.clone()
            },
            serving: false,
            entries: Vec::new(),
            recipes: HashMap::new(),
            kept: VecDeque::new(),
            kept_chunks: 0,
            data: Box::default(),
            scratch: Vec::new(),
            outcome: MountServerOutcome::default(),
        }
    }

    /// What the session served so far.
    pub fn outcome(&self) -> &MountServerOutcome {
        &self.outcome
    }

    /// Whether MOUNT_HELLO was answered: requests are served.
    pub fn serving(&self) -> bool {
        self.serving
    }

    /// The listing sent (empty before MOUNT_HELLO was answered).
    pub fn entries(&self) -> &[Listed] {
        &self.entries
    }

    /// Handles one whole frame from the client; its answer is sent to
    /// `out` before this returns. An error ends the session (the driver
    /// tells the client when [`SessionError::tell_peer`] says so).
    pub fn handle_frame(
        &mut self,
        header: FrameHeader,
        body: &[u8],
        host: &mut dyn MountHost,
        out: &mut dyn FrameOut,
    ) -> Result<(), SessionError> {
        match (self.serving, header.frame_type) {
            (_, FrameType::Error) => Err(refusal(body)),
            (false, FrameType::MountHello) => self.hello(body, host, out),
            (true, FrameType::RecipeAsk) => self.recipe_ask(body, host, out),
            (true, FrameType::Fetch) => self.fetch(body, host, out),
            (serving, got) => Err(Violation::UnexpectedFrame {
                expected: if serving {
                    "RECIPE_ASK or FETCH"
                } else {
                    "MOUNT_HELLO"
                },
                got,
            }
            .into()),
        }
    }

    fn hello(
        &mut self,
        body: &[u8],
        host: &mut dyn MountHost,
        out: &mut dyn FrameOut,
    ) -> Result<(), SessionError> {
        let h = MountHello::parse(body).map_err(SessionError::malformed("MOUNT_HELLO"))?;
        self.outcome.dir = String::from_utf8_lossy(h.dir).into_owned();
        self.outcome.session_nonce = h.session_nonce;
        let max_data_body = h.max_data_body.min(self.cfg.max_data_body);
        // The largest chunk, its entry head and the DATA head fit one frame.
        let need = u64::from(self.cfg.params.max()) + (DATA_ENTRY_FIXED_LEN + DATA_HEAD_LEN) as u64;
        if need > u64::from(max_data_body) {
            return Err(MountViolation::DataBodyTooSmall {
                client: h.max_data_body,
                need,
            }
            .into());
        }
        let bad_dir = |why: BadDir| MountViolation::BadDir {
            dir: String::from_utf8_lossy(h.dir).into_owned(),
            why,
        };
        let dir = match h.dir {
            [] => None,
            d => Some(RelPath::parse(d).map_err(|e| bad_dir(BadDir::Path(e)))?),
        };
        if dir
            .as_ref()
            .is_some_and(|d| d.components().any(|c| c == STATE_DIR.as_bytes()))
        {
            return Err(bad_dir(BadDir::StateDir).into());
        }
        let (limit, whose) = match u64::from(h.max_entries) < self.cfg.max_entries {
            true => (u64::from(h.max_entries), "client's"),
            false => (self.cfg.max_entries, "server's"),
        };
        let listing = host.list(dir.as_ref(), limit).map_err(|e| match e {
            ListError::TooMany { .. } => MountViolation::TooManyEntries { limit, whose },
            e => bad_dir(BadDir::NotListed(e)),
        })?;
        self.entries = listing.entries;
        self.outcome.entries = self.entries.len() as u64;
        self.outcome.skipped = listing.skipped;
        self.data = vec![0u8; max_data_body as usize].into_boxed_slice();
        let accept = MountAccept {
            entries: self.entries.len() as u64,
            chunk_avg: self.cfg.params.avg(),
            max_fetch_chunks: self.cfg.max_fetch_chunks,
            max_data_body,
            root_mode: listing.root_mode,
            root_mtime_sec: listing.root_mtime_sec,
            root_mtime_nsec: listing.root_mtime_nsec,
        };
        send(out, FrameType::MountAccept, 0, &[&accept.emit()], "MOUNT_ACCEPT")?;
        let body = &mut self.scratch;
        body.clear();
        for e in &self.entries {
            let e = e.as_entry();
            if body.len() + e.encoded_len() > MAX_CONTROL_BODY as usize {
                send(out, FrameType::List, 0, &[body], "LIST")?;
                body.clear();
            }
            e.emit_into(body);
        }
        send(out, FrameType::List, FLAG_LAST, &[body], "LIST")?;
        self.serving = true;
        Ok(())
    }

    /// The listed regular file `entry`.
    fn file(&self, entry: u64) -> Result<&Listed, MountViolation> {
        let what = match usize::try_from(entry).ok().and_then(|i| self.entries.get(i)) {
            Some(e) if e.kind == ListKind::File => return Ok(e),
            Some(e) if e.kind == ListKind::Dir => "a directory",
            Some(_) => "a symlink",
            None => "not listed",
        };
        Err(MountViolation::NotAFile { entry, what })
    }

    fn recipe_ask(
        &mut self,
        body: &[u8],
        host: &mut dyn MountHost,
        out: &mut dyn FrameOut,
    ) -> Result<(), SessionError> {
        let ask = RecipeAsk::parse(body).map_err(SessionError::malformed("RECIPE_ASK"))?;
        self.file(ask.entry)?;
        self.outcome.recipes += 1;
        let mut frames = RecipeFrames::new(ask.req, std::mem::take(&mut self.scratch));
        let known = match self.recipes.get(&ask.entry) {
            Some(k) => k.clone(),
            None => {
                let file = &self.entries[ask.entry as usize];
                // A large file is cut as its frames go out; a sink that
                // failed to send stops the cut.
                let cut = host.recipe(file, &mut |chunks: &[ChunkRef]| frames.stream(chunks, out));
                let known = self.keep(ask.entry, cut);
                frames.failed()?;
                known
            }
        };
        let result = match &known {
            Some(r) => frames.finish(&r.chunks, out),
            None => {
                self.outcome.recipes_gone += 1;
                frames.gone(out)
            }
        };
        self.scratch = frames.body;
        result
    }

    /// Remembers what `cut` gave for `entry`, forgetting the oldest recipes
    /// past the session's limit (they are cut again if asked again).
    fn keep(&mut self, entry: u64, cut: Cut) -> Known {
        let known = match cut {
            Cut::Recipe { recipe, cached } => {
                self.outcome.recipes_cached += u64::from(cached);
                Some(recipe)
            }
            Cut::Gone => None,
        };
        let weight = |k: &Known| k.as_ref().map_or(1, |r| r.chunks.len().max(1) as u64);
        while self.kept_chunks + weight(&known) > self.cfg.max_session_chunks {
            let Some(old) = self.kept.pop_front() else { break };
            if let Some(k) = self.recipes.remove(&old) {
                self.kept_chunks -= weight(&k);
            }
        }
        self.kept_chunks += weight(&known);
        self.kept.push_back(entry);
        self.recipes.insert(entry, known.clone());
        known
    }

    /// The recipe of listed file `entry`, cut now if this session has none
    /// (a client may fetch from a file whose recipe it holds from before).
    fn known(&mut self, entry: u64, host: &mut dyn MountHost) -> Known {
        if let Some(k) = self.recipes.get(&entry) {
            return k.clone();
        }
        let cut = host.recipe(&self.entries[entry as usize], &mut |_: &[ChunkRef]| true);
        self.keep(entry, cut)
    }

    fn fetch(
        &mut self,
        body: &[u8],
        host: &mut dyn MountHost,
        out: &mut dyn FrameOut,
    ) -> Result<(), SessionError> {
        let (head, runs) = parse_fetch(body).map_err(SessionError::malformed("FETCH"))?;
        let asked: u64 = runs.iter().map(|r| u64::from(r.count)).sum();
        if asked > u64::from(self.cfg.max_fetch_chunks) {
            return Err(LimitExceeded::Peer {
                what: "chunks in one FETCH",
                asked,
                limit: u64::from(self.cfg.max_fetch_chunks),
            }
            .into());
        }
        for r in &runs {
            self.file(r.entry)?;
        }
        // Every run is checked before the first DATA frame: an answer, once
        // begun, is never cut short by a bad run further on.
        let mut known = Vec::with_capacity(runs.len());
        for r in &runs {
            let k = self.known(r.entry, host);
            if let Some(recipe) = &k {
                let end = u64::from(r.first) + u64::from(r.count);
                if end > recipe.chunks.len() as u64 {
                    return Err(MountViolation::PastRecipe {
                        entry: r.entry,
                        first: r.first,
                        end,
                        chunks: recipe.chunks.len() as u64,
                    }
                    .into());
                }
            }
            known.push(k);
        }
        self.outcome.fetches += 1;
        let mut data = DataFrames {
            req: head.req,
            body: &mut self.data,
            used: DATA_HEAD_LEN,
            count: 0,
        };
        let out_of = &mut self.outcome;
        for (r, k) in runs.iter().zip(&known) {
            let file = &self.entries[r.entry as usize];
            let Some(recipe) = k else {
                for _ in 0..r.count {
                    data.gone(out)?;
                    out_of.gone += 1;
                }
                continue;
            };
            for c in &recipe.chunks[r.first as usize..(r.first + r.count) as usize] {
                let sent = data.chunk(out, c, |buf| host.read_chunk(r.entry, file, c.offset, buf))?;
                if sent {
                    out_of.chunks += 1;
                    out_of.bytes += u64::from(c.len);
                } else {
                    out_of.gone += 1;
                }
            }
        }
        data.flush(out, FLAG_LAST)
    }
}

/// Sends one frame of `ty` whose body is `parts`.
fn send(
    out: &mut dyn FrameOut,
    ty: FrameType,
    flags: u16,
    parts: &[&[u8]],
    what: &'static str,
) -> Result<(), SessionError> {
    let length: usize = parts.iter().map(|p| p.len()).sum();
    let header = FrameHeader {
        frame_type: ty,
        flags,
        length: length as u32,
    }
    .emit();
    out.send(&header, parts)
        .map_err(|e| SessionError::transport(what, e))
}

/// The RECIPE frames answering one RECIPE_ASK, built in a reused body.
struct RecipeFrames {
    req: u32,
    /// Index of the first chunk of the frame being built.
    first: u64,
    /// Entries in it.
    count: usize,
    body: Vec<u8>,
    /// A send that failed while the file was being cut.
    error: Option<io::Error>,
}

impl RecipeFrames {
    fn new(req: u32, mut body: Vec<u8>) -> Self {
        body.clear();
        body.resize(RECIPE_HEAD_LEN, 0);
        Self {
            req,
            first: 0,
            count: 0,
            body,
            error: None,
        }
    }

    /// Chunks handed out by a cut still running: all but the last go out
    /// now (the last is kept so that the final frame, flagged `LAST`, is
    /// never empty). Returns false, stopping the cut, once a send failed.
    fn stream(&mut self, chunks: &[ChunkRef], out: &mut dyn FrameOut) -> bool {
        if self.error.is_some() {
            return false;
        }
        let mut go = || -> io::Result<()> {
            for c in chunks {
                self.push(c, out)?;
            }
            if self.count > 1 {
                let mut last = [0u8; RECIPE_ENTRY_LEN];
                let at = self.body.len() - RECIPE_ENTRY_LEN;
                last.copy_from_slice(&self.body[at..]);
                self.body.truncate(at);
                self.count -= 1;
                self.flush(0, ServeStatus::Ok, out)?;
                self.body.extend_from_slice(&last);
                self.count = 1;
            }
            Ok(())
        };
        match go() {
            Ok(()) => true,
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    /// The send that failed during the cut, as the session's error.
    fn failed(&mut self) -> Result<(), SessionError> {
        match self.error.take() {
            Some(e) => Err(SessionError::transport("RECIPE", e)),
            None => Ok(()),
        }
    }

    /// Appends one entry, sending the frame first if it is full.
    fn push(&mut self, c: &ChunkRef, out: &mut dyn FrameOut) -> io::Result<()> {
        if self.count == RECIPE_ENTRIES_PER_FRAME {
            self.flush(0, ServeStatus::Ok, out)?;
        }
        emit_recipe_entry(&mut self.body, c.len, &c.hash);
        self.count += 1;
        Ok(())
    }

    /// Sends the frame being built and starts the next.
    fn flush(&mut self, flags: u16, status: ServeStatus, out: &mut dyn FrameOut) -> io::Result<()> {
        let head = RecipeHead {
            req: self.req,
            status,
            first: self.first,
            count: self.count as u32,
        };
        self.body[..RECIPE_HEAD_LEN].copy_from_slice(&head.emit());
        let header = FrameHeader {
            frame_type: FrameType::Recipe,
            flags,
            length: self.body.len() as u32,
        }
        .emit();
        out.send(&header, &[&self.body])?;
        self.first += self.count as u64;
        self.count = 0;
        self.body.truncate(RECIPE_HEAD_LEN);
        Ok(())
    }

    /// Sends the rest of `chunks` (those not streamed yet), the last frame
    /// flagged `LAST` (an empty recipe: one frame of no entries).
    fn finish(&mut self, chunks: &[ChunkRef], out: &mut dyn FrameOut) -> Result<(), SessionError> {
        let done = self.first as usize + self.count;
        let mut go = || -> io::Result<()> {
            for c in &chunks[done.min(chunks.len())..] {
                self.push(c, out)?;
            }
            self.flush(FLAG_LAST, ServeStatus::Ok, out)
        };
        go().map_err(|e| SessionError::transport("RECIPE", e))
    }

    /// Ends the answer with `GONE`: alone, or after frames of a cut that
    /// found the file changed (the client discards them, docs/wire.md §12.5).
    fn gone(&mut self, out: &mut dyn FrameOut) -> Result<(), SessionError> {
        self.body.truncate(RECIPE_HEAD_LEN);
        self.count = 0;
        self.flush(FLAG_LAST, ServeStatus::Gone, out)
            .map_err(|e| SessionError::transport("RECIPE", e))
    }
}

/// The DATA frames answering one FETCH, built in the session's DATA body.
struct DataFrames<'b> {
    req: u32,
    body: &'b mut [u8],
    /// Bytes of `body` in use, the head included.
    used: usize,
    count: u32,
}

impl DataFrames<'_> {
    /// Makes room for an entry of `len` bytes after its head, sending the
    /// frame first if it would not fit.
    fn room(&mut self, len: usize, out: &mut dyn FrameOut) -> Result<(), SessionError> {
        if self.used + DATA_ENTRY_FIXED_LEN + len > self.body.len() && self.count > 0 {
            self.flush(out, 0)?;
        }
        Ok(())
    }

    /// Adds chunk `c`, read by `read` straight into the frame and checked
    /// against its hash; a chunk that cannot be read or does not match is
    /// a `GONE` entry. Returns whether its bytes were sent.
    fn chunk(
        &mut self,
        out: &mut dyn FrameOut,
        c: &ChunkRef,
        read: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<bool, SessionError> {
        let len = c.len as usize;
        // Chunks fit a frame by the check at MOUNT_HELLO; one that would
        // not (a recipe cut with other bounds) is not served.
        if DATA_HEAD_LEN + DATA_ENTRY_FIXED_LEN + len > self.body.len() {
            self.gone(out)?;
            return Ok(false);
        }
        self.room(len, out)?;
        let at = self.used;
        let bytes = &mut self.body[at + DATA_ENTRY_FIXED_LEN..at + DATA_ENTRY_FIXED_LEN + len];
        if !(read(bytes) && matches(bytes, &c.hash)) {
            self.put_gone();
            return Ok(false);
        }
        self.body[at] = DATA_BYTES;
        self.body[at + 1..at + DATA_ENTRY_FIXED_LEN].copy_from_slice(&c.len.to_le_bytes());
        self.used += DATA_ENTRY_FIXED_LEN + len;
        self.count += 1;
        Ok(true)
    }

    /// Adds a `GONE` entry.
    fn gone(&mut self, out: &mut dyn FrameOut) -> Result<(), SessionError> {
        self.room(0, out)?;
        self.put_gone();
        Ok(())
    }

    fn put_gone(&mut self) {
        let at = self.used;
        self.body[at] = DATA_GONE;
        self.body[at + 1..at + DATA_ENTRY_FIXED_LEN].fill(0);
        self.used += DATA_ENTRY_FIXED_LEN;
        self.count += 1;
    }

    /// Sends the frame built so far (one vectored write: header and body).
    fn flush(&mut self, out: &mut dyn FrameOut, flags: u16) -> Result<(), SessionError> {
        let head = ReqHead {
            req: self.req,
            count: self.count,
        };
        self.body[..DATA_HEAD_LEN].copy_from_slice(&head.emit());
        send(out, FrameType::Data, flags, &[&self.body[..self.used]], "DATA")?;
        self.used = DATA_HEAD_LEN;
        self.count = 0;
        Ok(())
    }
}

/// BLAKE3 of `bytes` is `hash`.
fn matches(bytes: &[u8], hash: &Hash) -> bool {
    blake3::hash(bytes).as_bytes() == hash
}
