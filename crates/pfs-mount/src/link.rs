//! The link thread: the only user of the connection once the listing is
//! in. It takes [`Ask`]s from readers, sends them as RECIPE_ASK and FETCH
//! frames (many per write), reads the answers, checks them
//! ([`Requests`]), puts fetched chunks in the cache and wakes the readers.
//!
//! The transport has one handle for both directions, so the thread never
//! blocks in a read for long while asks may be waiting: with requests
//! outstanding it reads with a short timeout and looks at its queue in
//! between; with none it sleeps on the queue. A server silent for the
//! session's timeout while answers are due, a closed or broken connection,
//! or an answer that breaks the protocol ends the link: every waiting read
//! fails with `EIO` at once and later uncached reads fail at once; cached
//! reads go on.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_transport::Transport;
use pfs_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_LEN};
use pfs_wire::mount::Hash;

use crate::proto::{Event, ProtoError, Requests, Want};
use crate::state::{Ask, Shared};
use crate::{Connector, Reopen};

/// How long a read waits for bytes before the queue is looked at again.
const POLL: Duration = Duration::from_micros(500);

/// Reads whole frames from a transport whose reads may time out.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_bulk: usize,
}

/// What [`FrameReader::next`] found.
#[derive(Debug)]
pub enum Next {
    /// A whole frame is at `buf[range]` (header included).
    Frame(FrameHeader, std::ops::Range<usize>),
    /// No whole frame yet; nothing arrived within the read timeout.
    Idle,
}

impl FrameReader {
    /// A reader taking bulk bodies up to `max_bulk` bytes.
    pub fn new(max_bulk: usize) -> Self {
        Self {
            buf: vec![0; (max_bulk + FRAME_HEADER_LEN).max(128 << 10)],
            start: 0,
            end: 0,
            max_bulk,
        }
    }

    /// The frame bytes of a range [`Next::Frame`] gave (until the next call).
    pub fn bytes(&self, r: std::ops::Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// The next whole frame; reads at most once. `bytes_in` counts what
    /// was read.
    pub fn next(&mut self, t: &mut dyn Transport, bytes_in: &mut u64) -> Result<Next, String> {
        loop {
            let have = self.end - self.start;
            if have >= FRAME_HEADER_LEN {
                let h = FrameHeader::parse(&self.buf[self.start..self.end])
                    .map_err(|e| format!("a frame from the server does not decode: {e}"))?;
                let len = h.length as usize;
                if h.frame_type.is_bulk() && len > self.max_bulk {
                    return Err(format!(
                        "{} of {len} bytes, more than the {} announced",
                        h.frame_type.name(),
                        self.max_bulk
                    ));
                }
                let total = FRAME_HEADER_LEN + len;
                if have >= total {
                    let r = self.start..self.start + total;
                    self.start += total;
                    return Ok(Next::Frame(h, r));
                }
                if self.start + total > self.buf.len() {
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                }
            } else if self.start > 0 && self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.start + FRAME_HEADER_LEN > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match t.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => {
                    self.end += n;
                    *bytes_in += n as u64;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(Next::Idle)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading from the server: {e}")),
            }
        }
    }
}

/// Runs the link until `stop`. When the link ends, the readers are told
/// ([`Shared::link_down`]); with `again`, a reader that needs the server
/// asks for a new connection ([`Ask::Reconnect`]) and the link goes on once
/// one lists the same tree.
pub(crate) fn run(
    mut conn: Box<dyn Transport>,
    mut reader: FrameReader,
    mut requests: Requests,
    asks: Receiver<Ask>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    mut again: Option<(Connector, Reopen)>,
) {
    loop {
        let why = match pump(&mut *conn, &mut reader, &mut requests, &asks, &shared, &stop) {
            Ok(()) => {
                shared.link_down_for_good("the mount is shutting down".into());
                let _ = conn.shutdown_write();
                return;
            }
            Err(e) => {
                tracing::warn!("mount: link to the server ended: {e}");
                format!("link to the server ended: {e}")
            }
        };
        shared.link_down(why);
        let _ = conn.shutdown_write();
        let Some((connect, reopen)) = again.as_mut() else {
            return;
        };
        match wait_for_reconnect(connect, reopen, &asks, &shared, &stop) {
            Some((c, r, q)) => {
                (conn, reader, requests) = (c, r, q);
                shared.link_up();
                tracing::info!("mount: reconnected to the server");
            }
            None => return,
        }
    }
}

/// While the link is down: connects again each time a reader asks
/// ([`Ask::Reconnect`]) until a connection lists the same tree (`Some`),
/// the tree turns out to have changed, or `stop` (`None`). Other asks were
/// made before the link went down and were answered `EIO` already.
fn wait_for_reconnect(
    connect: &mut Connector,
    reopen: &Reopen,
    asks: &Receiver<Ask>,
    shared: &Shared,
    stop: &AtomicBool,
) -> Option<(Box<dyn Transport>, FrameReader, Requests)> {
    loop {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        match asks.recv_timeout(Duration::from_millis(200)) {
            Ok(Ask::Reconnect) => {}
            Ok(_) | Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return None,
        }
        let attempt = connect().and_then(|mut c| {
            let (opened, reader, _, _) =
                crate::run_opening(&mut *c, &reopen.params, reopen.timeout).map_err(|e| e.to_string())?;
            Ok((c, reader, opened))
        });
        match attempt {
            Ok((c, reader, opened)) if opened.digest == reopen.digest => {
                shared.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                return Some((c, reader, Requests::new(&opened.accept)));
            }
            Ok(_) => {
                let why = "the server's tree changed since the mount: unmount and mount again to see it";
                tracing::warn!("mount: {why}");
                shared.link_down_for_good(why.into());
                return None;
            }
            Err(e) => {
                tracing::info!("mount: reconnecting: {e}");
                shared.reconnect_failed(format!("the server cannot be reached: {e}"));
            }
        }
    }
}

fn pump(
    conn: &mut dyn Transport,
    reader: &mut FrameReader,
    requests: &mut Requests,
    asks: &Receiver<Ask>,
    shared: &Shared,
    stop: &AtomicBool,
) -> Result<(), String> {
    conn.set_read_timeout(Some(POLL))
        .map_err(|e| format!("setting a read timeout: {e}"))?;
    // A server that stops reading ends the link instead of blocking it.
    conn.set_write_timeout(Some(shared.timeout))
        .map_err(|e| format!("setting a write timeout: {e}"))?;
    let mut out = Vec::with_capacity(64 << 10);
    // Files read ahead whose recipe is on its way: fetch when it is here.
    let mut follow: std::collections::HashSet<u64> = std::collections::HashSet::new();
    // An ask taken while answers were being read, sent next.
    let mut stash: Option<Ask> = None;
    let mut last_heard = Instant::now();
    let mut bytes_in = 0u64;
    let desc = |entry: u64| shared.tree.path_of(entry + 2);
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Take what readers asked; sleep on the queue when nothing is due.
        let first = if let Some(a) = stash.take() {
            Some(a)
        } else if requests.outstanding() == 0 {
            match asks.recv_timeout(Duration::from_millis(200)) {
                Ok(a) => Some(a),
                Err(RecvTimeoutError::Timeout) => {
                    // Idle: look at the connection, so a server that went
                    // away is noticed (and reconnected to) before a read
                    // needs it. Nothing is due, so any frame is unasked.
                    let mut seen = 0;
                    match reader.next(conn, &mut seen)? {
                        Next::Idle => {}
                        Next::Frame(h, r) => {
                            let body = &reader.bytes(r)[FRAME_HEADER_LEN..];
                            on_frame(requests, shared, h, body, &desc).map_err(|e| e.to_string())?;
                        }
                    }
                    None
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        } else {
            None
        };
        if first.is_some() || requests.outstanding() == 0 {
            last_heard = Instant::now();
        }
        let mut next = first;
        loop {
            let a = match next.take() {
                Some(a) => a,
                None => match asks.try_recv() {
                    Ok(a) => a,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return Ok(()),
                },
            };
            match a {
                Ask::Recipe { entry, size } => requests.ask_recipe(entry, size, &mut out),
                Ask::Fetch(wants) => {
                    for part in wants.chunks(requests.max_fetch() as usize) {
                        requests.fetch(part, &mut out);
                    }
                }
                // Up already (another reader's ask brought it back).
                Ask::Reconnect => shared.link_up(),
                Ask::Readahead(entries) => {
                    for entry in entries {
                        if shared.claim_recipe(entry) {
                            let size = shared.tree.node(entry + 2).map_or(0, |n| n.size);
                            requests.ask_recipe(entry, size, &mut out);
                            follow.insert(entry);
                        } else {
                            fetch_lacking(requests, shared, entry, &mut out);
                        }
                    }
                }
            }
        }
        flush(conn, &mut out, shared)?;
        if requests.outstanding() == 0 {
            continue;
        }
        // Read what is there, frame by frame, until the socket is idle.
        loop {
            let before = bytes_in;
            let next = reader.next(conn, &mut bytes_in)?;
            shared
                .stats
                .wire_in
                .fetch_add(bytes_in - before, Ordering::Relaxed);
            match next {
                Next::Idle => {
                    if last_heard.elapsed() > shared.timeout {
                        return Err(format!("the server sent nothing for {:?}", shared.timeout));
                    }
                    break;
                }
                Next::Frame(h, r) => {
                    last_heard = Instant::now();
                    let frame = reader.bytes(r);
                    let body = &frame[FRAME_HEADER_LEN..];
                    let done = on_frame(requests, shared, h, body, &desc).map_err(|e| e.to_string())?;
                    // A file read ahead: its chunks follow its recipe.
                    if let Some(entry) = done.filter(|e| follow.remove(e)) {
                        fetch_lacking(requests, shared, entry, &mut out);
                        flush(conn, &mut out, shared)?;
                    }
                    if requests.outstanding() == 0 || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // A reader's ask goes out now, not after this stream
                    // of answers ends.
                    match asks.try_recv() {
                        Ok(a) => {
                            stash = Some(a);
                            break;
                        }
                        Err(TryRecvError::Empty) => {}
                        Err(TryRecvError::Disconnected) => return Ok(()),
                    }
                }
            }
        }
    }
}

/// Writes what `out` holds (requests, many per write) and counts it.
fn flush(conn: &mut dyn Transport, out: &mut Vec<u8>, shared: &Shared) -> Result<(), String> {
    if out.is_empty() {
        return Ok(());
    }
    conn.write_all(out)
        .map_err(|e| format!("writing to the server: {e}"))?;
    shared
        .stats
        .wire_out
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    out.clear();
    Ok(())
}

/// Asks for the chunks of `entry` (its recipe complete) the cache lacks.
fn fetch_lacking(requests: &mut Requests, shared: &Shared, entry: u64, out: &mut Vec<u8>) {
    let wants = shared.claim_chunks(entry);
    for part in wants.chunks(requests.max_fetch() as usize) {
        requests.fetch(part, out);
    }
}

/// Applies one answer frame: recipes to the shared state, chunks to the
/// cache (one reservation per frame), then wakes readers. Returns the
/// entry whose recipe this frame completed, if any.
fn on_frame(
    requests: &mut Requests,
    shared: &Shared,
    h: FrameHeader,
    body: &[u8],
    desc: &dyn Fn(u64) -> String,
) -> Result<Option<u64>, ProtoError> {
    let mut completed = None;
    let mut chunks: Vec<(Hash, &[u8])> = Vec::new();
    let mut wants: Vec<Want> = Vec::new();
    let mut gone: Vec<Want> = Vec::new();
    let mut failure = None;
    let r = requests.on_frame(h.frame_type, h.flags, body, desc, &mut |e| match e {
        Event::RecipePart {
            entry,
            chunks: c,
            last,
            ..
        } => {
            shared.recipe_part(entry, &c, last);
            if last {
                completed = Some(entry);
            }
        }
        Event::RecipeGone { entry } => shared.recipe_gone(entry),
        Event::Chunk { want, bytes } => {
            chunks.push((want.hash, bytes));
            wants.push(want);
        }
        Event::ChunkGone { want } => gone.push(want),
    });
    if let Err(e) = r {
        failure = Some(e);
    }
    if !chunks.is_empty() {
        let n = chunks.len() as u64;
        let bytes: u64 = chunks.iter().map(|(_, b)| b.len() as u64).sum();
        let spilled = shared.cache.put(&chunks);
        shared
            .stats
            .spilled
            .fetch_add(spilled.len() as u64, Ordering::Relaxed);
        // Only chunks the store now holds intact skip their readers' check.
        wants.retain(|w| !spilled.contains(&w.hash));
        shared.stats.chunks_fetched.fetch_add(n, Ordering::Relaxed);
        shared.stats.bytes_fetched.fetch_add(bytes, Ordering::Relaxed);
        shared.arrived(&wants);
        shared.arrived_unchecked(spilled.iter());
    }
    for w in gone {
        shared.chunk_gone(&w);
    }
    if h.frame_type == FrameType::Error {
        tracing::warn!("mount: the server ended the session");
    }
    failure.map_or(Ok(completed), Err)
}
