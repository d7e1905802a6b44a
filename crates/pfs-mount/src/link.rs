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

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_transport::recv_buf::is_timeout;
use pfs_transport::{RecvBuf, Transport};
use pfs_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_LEN};
use pfs_wire::mount::Hash;
use pfs_wire::WireError;

use crate::proto::{Event, ProtoError, Requests, Want};
use crate::state::{Ask, Down, Shared};
use crate::{Connector, Reopen, MAX_DATA_BODY};

/// How long a read waits for bytes before the queue is looked at again.
const POLL: Duration = Duration::from_micros(500);

/// Why the link (or the opening) could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A frame header that does not decode.
    #[error("a frame from the server does not decode: {0}")]
    Undecodable(WireError),
    /// A bulk frame larger than MOUNT_HELLO allowed.
    #[error("{} of {len} bytes, more than the {max} announced", .frame.name())]
    TooLarge {
        /// Its type.
        frame: FrameType,
        /// Its body length.
        len: usize,
        /// The largest body announced.
        max: usize,
    },
    /// End of stream.
    #[error("the server closed the connection")]
    Closed,
    /// A read failed.
    #[error("reading from the server: {0}")]
    Read(io::Error),
    /// A write failed (or timed out: the server stopped reading).
    #[error("writing to the server: {0}")]
    Write(io::Error),
    /// MOUNT_HELLO could not be sent.
    #[error("sending MOUNT_HELLO: {0}")]
    SendHello(io::Error),
    /// The transport refused a read timeout.
    #[error("setting a read timeout: {0}")]
    ReadTimeout(io::Error),
    /// The transport refused a write timeout.
    #[error("setting a write timeout: {0}")]
    WriteTimeout(io::Error),
    /// No listing before the opening's deadline.
    #[error("no listing from the server within {0:?}")]
    NoListing(Duration),
    /// Answers were due and nothing arrived for the session's timeout.
    #[error("the server sent nothing for {0:?}")]
    Silent(Duration),
    /// A thread of the mount could not be started.
    #[error("starting the {thread} thread: {source}")]
    Spawn {
        /// Which thread.
        thread: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// An answer broke the protocol, or the server sent ERROR.
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

/// What [`next_frame`] found.
#[derive(Debug)]
pub enum Next {
    /// A whole frame of this many bytes (header included) is at the front
    /// of the buffer; the caller consumes it when done.
    Frame(FrameHeader, usize),
    /// No whole frame yet; nothing arrived within the read timeout.
    Idle,
}

/// The receive buffer of a link taking bulk bodies up to `max_bulk` bytes.
pub fn recv_buf(max_bulk: usize) -> RecvBuf {
    RecvBuf::new((max_bulk + FRAME_HEADER_LEN).max(128 << 10))
}

/// The next whole frame at the front of `buf`, reading at most once. A
/// bulk body above `max_bulk` is an error (control bodies are bounded by
/// the header's own check).
pub fn next_frame(buf: &mut RecvBuf, t: &mut dyn Transport, max_bulk: usize) -> Result<Next, LinkError> {
    loop {
        let have = buf.filled();
        let want = if have.len() >= FRAME_HEADER_LEN {
            let h = FrameHeader::parse(have).map_err(LinkError::Undecodable)?;
            let len = h.length as usize;
            if h.frame_type.is_bulk() && len > max_bulk {
                return Err(LinkError::TooLarge {
                    frame: h.frame_type,
                    len,
                    max: max_bulk,
                });
            }
            let total = FRAME_HEADER_LEN + len;
            if have.len() >= total {
                return Ok(Next::Frame(h, total));
            }
            total
        } else {
            FRAME_HEADER_LEN
        };
        match buf.read_from(t, want) {
            Ok(0) => return Err(LinkError::Closed),
            Ok(_) => {}
            Err(e) if is_timeout(&e) => return Ok(Next::Idle),
            Err(e) => return Err(LinkError::Read(e)),
        }
    }
}

/// Runs the link until `stop`. When the link ends, the readers are told
/// ([`Shared::link_down`]); with `again`, a reader that needs the server
/// asks for a new connection ([`Ask::Reconnect`]) and the link goes on once
/// one lists the same tree.
pub(crate) fn run(
    mut conn: Box<dyn Transport>,
    mut reader: RecvBuf,
    mut requests: Requests,
    asks: Receiver<Ask>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    mut again: Option<(Connector, Reopen)>,
) {
    loop {
        let why = match pump(&mut *conn, &mut reader, &mut requests, &asks, &shared, &stop) {
            Ok(()) => {
                shared.link_down_for_good(Down::ShuttingDown);
                let _ = conn.shutdown_write();
                return;
            }
            Err(e) => {
                tracing::warn!("mount: link to the server ended: {e}");
                Down::Ended(Arc::new(e))
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
) -> Option<(Box<dyn Transport>, RecvBuf, Requests)> {
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
            let (opened, reader, _, _) = crate::run_opening(&mut *c, &reopen.params, reopen.timeout)?;
            Ok((c, reader, opened))
        });
        match attempt {
            Ok((c, reader, opened)) if opened.digest == reopen.digest => {
                shared.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                return Some((c, reader, Requests::new(&opened.accept)));
            }
            Ok(_) => {
                let why = Down::TreeChanged;
                tracing::warn!("mount: {why}");
                shared.link_down_for_good(why);
                return None;
            }
            Err(e) => {
                tracing::info!("mount: reconnecting: {e}");
                shared.reconnect_failed(Down::Unreachable(Arc::from(e)));
            }
        }
    }
}

fn pump(
    conn: &mut dyn Transport,
    reader: &mut RecvBuf,
    requests: &mut Requests,
    asks: &Receiver<Ask>,
    shared: &Shared,
    stop: &AtomicBool,
) -> Result<(), LinkError> {
    conn.set_read_timeout(Some(POLL))
        .map_err(LinkError::ReadTimeout)?;
    // A server that stops reading ends the link instead of blocking it.
    conn.set_write_timeout(Some(shared.timeout))
        .map_err(LinkError::WriteTimeout)?;
    let mut out = Vec::with_capacity(64 << 10);
    // Files read ahead whose recipe is on its way: fetch when it is here.
    let mut follow: std::collections::HashSet<u64> = std::collections::HashSet::new();
    // An ask taken while answers were being read, sent next.
    let mut stash: Option<Ask> = None;
    let mut last_heard = Instant::now();
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
                    match next_frame(reader, conn, MAX_DATA_BODY as usize)? {
                        Next::Idle => {}
                        Next::Frame(h, len) => {
                            let body = &reader.filled()[FRAME_HEADER_LEN..len];
                            on_frame(requests, shared, h, body, &desc)?;
                            reader.consume(len);
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
            let before = reader.read_bytes();
            let next = next_frame(reader, conn, MAX_DATA_BODY as usize)?;
            shared
                .stats
                .wire_in
                .fetch_add(reader.read_bytes() - before, Ordering::Relaxed);
            match next {
                Next::Idle => {
                    if last_heard.elapsed() > shared.timeout {
                        return Err(LinkError::Silent(shared.timeout));
                    }
                    break;
                }
                Next::Frame(h, len) => {
                    last_heard = Instant::now();
                    let body = &reader.filled()[FRAME_HEADER_LEN..len];
                    let done = on_frame(requests, shared, h, body, &desc);
                    reader.consume(len);
                    let done = done?;
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
fn flush(conn: &mut dyn Transport, out: &mut Vec<u8>, shared: &Shared) -> Result<(), LinkError> {
    if out.is_empty() {
        return Ok(());
    }
    conn.write_all(out).map_err(LinkError::Write)?;
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io::{self, IoSlice};
    use std::time::Duration;

    use pfs_transport::Transport;
    use pfs_wire::frame::{FrameHeader, FrameType, FRAME_HEADER_LEN};
    use pfs_wire::put_frame;

    use super::{next_frame, recv_buf, LinkError, Next};

    /// A transport whose reads return the scripted results in order, then
    /// end of stream.
    #[derive(Debug, Default)]
    struct Script(VecDeque<io::Result<Vec<u8>>>);

    impl Transport for Script {
        fn kind(&self) -> &'static str {
            "SCRIPT"
        }
        fn peer(&self) -> String {
            "script".into()
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            Ok(bufs.iter().map(|b| b.len()).sum())
        }
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.0.pop_front() {
                Some(Ok(b)) => {
                    buf[..b.len()].copy_from_slice(&b);
                    Ok(b.len())
                }
                Some(Err(e)) => Err(e),
                None => Ok(0),
            }
        }
        fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
        fn set_write_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
        fn shutdown_write(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn frame(t: FrameType, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_frame(&mut out, t, 0, body);
        out
    }

    #[test]
    fn frames_split_across_reads_come_out_whole_and_in_place() {
        let a = frame(FrameType::Recipe, b"first");
        let b = frame(FrameType::Data, &[7; 300]);
        let mut stream = a.clone();
        stream.extend_from_slice(&b);
        let (x, y) = stream.split_at(a.len() + 5);
        let mut t = Script(
            [
                Ok(x[..3].to_vec()),
                Ok(x[3..].to_vec()),
                Err(io::ErrorKind::WouldBlock.into()),
                Ok(y.to_vec()),
            ]
            .into(),
        );
        let mut buf = recv_buf(1 << 20);
        let Next::Frame(h, len) = next_frame(&mut buf, &mut t, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!((h.frame_type, len), (FrameType::Recipe, a.len()));
        assert_eq!(&buf.filled()[FRAME_HEADER_LEN..len], b"first");
        buf.consume(len);
        // Half of the next frame, then the read times out: idle.
        assert!(matches!(
            next_frame(&mut buf, &mut t, 1 << 20).unwrap(),
            Next::Idle
        ));
        let Next::Frame(h, len) = next_frame(&mut buf, &mut t, 1 << 20).unwrap() else {
            panic!("a whole frame")
        };
        assert_eq!((h.frame_type, len), (FrameType::Data, b.len()));
        buf.consume(len);
        assert_eq!(buf.read_bytes(), stream.len() as u64);
        let e = next_frame(&mut buf, &mut t, 1 << 20).unwrap_err();
        assert!(matches!(e, LinkError::Closed), "{e}");
        assert_eq!(e.to_string(), "the server closed the connection");
    }

    #[test]
    fn a_bulk_body_over_the_limit_and_bad_headers_end_the_link() {
        let big = FrameHeader {
            frame_type: FrameType::Data,
            flags: 0,
            length: 1001,
        }
        .emit();
        let mut t = Script([Ok(big.to_vec())].into());
        let e = next_frame(&mut recv_buf(1000), &mut t, 1000).unwrap_err();
        assert_eq!(e.to_string(), "DATA of 1001 bytes, more than the 1000 announced");
        let mut t = Script([Ok(vec![0xee; FRAME_HEADER_LEN])].into());
        let e = next_frame(&mut recv_buf(1000), &mut t, 1000).unwrap_err();
        assert!(matches!(e, LinkError::Undecodable(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with("a frame from the server does not decode: "),
            "{e}"
        );
        let mut t = Script([Err(io::ErrorKind::ConnectionReset.into())].into());
        let e = next_frame(&mut recv_buf(1000), &mut t, 1000).unwrap_err();
        assert!(e.to_string().starts_with("reading from the server: "), "{e}");
    }
}
