//! Framing shared by the protocols, sans I/O: whole frames out of a byte
//! slice, ERROR frames in and out, and (re-exported from pfs-transport)
//! the receive buffer the drivers fill from a transport and hand to a core.

use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use pfs_transport::{Transport, IOV_MAX};
use pfs_wire::{put_frame, ErrorFrame, FrameHeader, FrameType, FRAME_HEADER_LEN, GRAM_HEADER_LEN};

use crate::SessionError;

/// One whole frame at the front of a byte slice.
#[derive(Debug, Clone, Copy)]
pub struct WholeFrame<'a> {
    /// Its header.
    pub header: FrameHeader,
    /// Its body.
    pub body: &'a [u8],
    /// Bytes it spans, header included.
    pub len: usize,
}

/// The first whole frame in `input`; `None` while it is incomplete. A body
/// longer than `max_body` is an error (it could never fit the receive buffer).
pub fn split_frame(input: &[u8], max_body: usize) -> Result<Option<WholeFrame<'_>>, SessionError> {
    if input.len() < FRAME_HEADER_LEN {
        return Ok(None);
    }
    let header = FrameHeader::parse(input).map_err(SessionError::malformed("frame header"))?;
    let len = header.length as usize;
    if len > max_body {
        return Err(SessionError::Malformed {
            context: header.frame_type.name(),
            error: pfs_wire::WireError::TooLarge,
        });
    }
    let end = FRAME_HEADER_LEN + len;
    Ok((input.len() >= end).then(|| WholeFrame {
        header,
        body: &input[FRAME_HEADER_LEN..end],
        len: end,
    }))
}

/// Bytes [`split_frame`] needs before it can return the frame that starts `input`.
pub fn frame_want(input: &[u8]) -> usize {
    match FrameHeader::parse(input) {
        Ok(h) => FRAME_HEADER_LEN + h.length as usize,
        Err(_) => FRAME_HEADER_LEN,
    }
}

/// What a core asks its driver to send next: one vectored write, with no
/// byte copied on the way.
#[derive(Debug)]
pub enum Transmit<'a> {
    /// Up to three slices, in order (empty ones are skipped): control
    /// frames, a files frame's header and body, a BATCH.
    Parts {
        /// The slices.
        parts: [&'a [u8]; 3],
        /// What it is, for error messages.
        what: &'static str,
    },
    /// One gram (or a blob session's REPAIR, whose 32-byte head takes the
    /// gram header's place): frame header, gram header and descriptor
    /// table, then `ranges` of `blob` as the payload slab (straight from
    /// the mapping).
    Gram {
        /// GRAM or REPAIR, for error messages.
        what: &'static str,
        /// Frame header.
        frame_header: &'a [u8; FRAME_HEADER_LEN],
        /// Gram header.
        gram_header: &'a [u8; GRAM_HEADER_LEN],
        /// Descriptor table.
        table: &'a [u8],
        /// The blob the ranges index.
        blob: &'a [u8],
        /// Payload ranges `(start, end)`, adjacent ones merged.
        ranges: &'a [(usize, usize)],
    },
}

impl Transmit<'_> {
    /// What it is, for error messages.
    pub fn what(&self) -> &'static str {
        match self {
            Self::Parts { what, .. } => what,
            Self::Gram { what, .. } => what,
        }
    }

    /// Writes it whole (one vectored write; a gram with more ranges than
    /// `IOV_MAX` is split there). Returns bytes written.
    pub fn write_to<T: Transport + ?Sized>(&self, t: &mut T) -> io::Result<u64> {
        match self {
            Self::Parts { parts, .. } => t.write_all_vectored(&mut parts.map(IoSlice::new)),
            Self::Gram {
                frame_header,
                gram_header,
                table,
                blob,
                ranges,
                ..
            } => {
                let mut iov = [IoSlice::new(&[]); IOV_MAX];
                iov[0] = IoSlice::new(&frame_header[..]);
                iov[1] = IoSlice::new(&gram_header[..]);
                iov[2] = IoSlice::new(table);
                let mut n = 3;
                let mut written = 0u64;
                for &(s, e) in ranges.iter() {
                    if n == IOV_MAX {
                        written += t.write_all_vectored(&mut iov[..n])?;
                        n = 0;
                    }
                    iov[n] = IoSlice::new(&blob[s..e]);
                    n += 1;
                }
                written += t.write_all_vectored(&mut iov[..n])?;
                Ok(written)
            }
        }
    }

    /// Appends its bytes to `out`, as a stream would carry them (tests, and
    /// transports that need one buffer).
    pub fn append_to(&self, out: &mut Vec<u8>) {
        match self {
            Self::Parts { parts, .. } => parts.iter().for_each(|p| out.extend_from_slice(p)),
            Self::Gram {
                frame_header,
                gram_header,
                table,
                blob,
                ranges,
                ..
            } => {
                out.extend_from_slice(&frame_header[..]);
                out.extend_from_slice(&gram_header[..]);
                out.extend_from_slice(table);
                for &(s, e) in ranges.iter() {
                    out.extend_from_slice(&blob[s..e]);
                }
            }
        }
    }
}

/// How long a receiver's reply (ACK, NAK, report, ERROR) may take to be
/// written, by default, before the session ends: a peer that never reads
/// holds a session no longer than this.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The rate a frame still arriving earns time at, by default: 1 MB/s.
pub const DEFAULT_MIN_FRAME_RATE: u64 = 1_000_000;

/// Per-frame, absolute deadlines: the one mechanism of every core that
/// awaits frames (both receivers, and the files sender awaiting replies).
///
/// A frame must begin arriving within `timeout` of the end of the one
/// before it (or of the phase change that made it due). While it arrives,
/// every `min_rate` of its bytes earn one second, so the deadline is
/// `frame due + timeout + ⌊arrived / min_rate⌋ s`: a peer sending at least
/// `min_rate` never runs out of time, one trickling a byte now and then
/// loses the session when `timeout` is spent, and nothing a peer declares
/// (a frame's length) moves the deadline by itself.
#[derive(Debug, Clone, Copy)]
pub struct FrameClock {
    /// When the current frame is due, plus its `timeout`.
    base: Instant,
    /// Bytes of the current frame that have arrived (never decreases
    /// until the next frame).
    arrived: u64,
    min_rate: u64,
}

impl FrameClock {
    /// A clock whose first frame has `timeout` from `now`; frames earn time
    /// at `min_rate` bytes per second (at least 1).
    pub fn new(now: Instant, timeout: Duration, min_rate: u64) -> Self {
        Self {
            base: now + timeout,
            arrived: 0,
            min_rate: min_rate.max(1),
        }
    }

    /// Whole frames ended (or the phase changed) at `now`: the next frame
    /// has `timeout` from now, plus what its bytes earn.
    pub fn next_frame(&mut self, now: Instant, timeout: Duration) {
        self.base = now + timeout;
        self.arrived = 0;
    }

    /// `n` bytes of the current frame have arrived in all (smaller values
    /// than before change nothing).
    pub fn arrived(&mut self, n: u64) {
        self.arrived = self.arrived.max(n);
    }

    /// Bytes of the frame that starts `rest` that have arrived (at most its
    /// whole length), for [`Self::arrived`].
    pub fn arrived_of(&mut self, rest: &[u8]) {
        let whole =
            FrameHeader::parse(rest).map_or(FRAME_HEADER_LEN, |h| FRAME_HEADER_LEN + h.length as usize);
        self.arrived(rest.len().min(whole) as u64);
    }

    /// When the session times out unless more of the frame arrives.
    pub fn deadline(&self) -> Instant {
        // Whole seconds: a few bytes of a header earn nothing.
        self.base + Duration::from_secs(self.arrived / self.min_rate)
    }
}

/// Writes `bytes` (a receiver's reply) within `timeout` plus one second
/// per `min_rate` bytes of it: [`write_all_before`] with that deadline.
pub fn write_reply<T: Transport + ?Sized>(
    t: &mut T,
    bytes: &[u8],
    timeout: Duration,
    min_rate: u64,
) -> io::Result<u64> {
    let start = now();
    let deadline = start + timeout + Duration::from_secs(bytes.len() as u64 / min_rate.max(1));
    write_all_before(t, &mut [IoSlice::new(bytes)], deadline, now)
}

/// The read timeout a driver keeps on its transport so it wakes near its
/// core's deadline. Changed only when the wanted value moves by more than
/// a second: not one syscall per read.
#[derive(Debug, Default)]
pub struct ReadTimeout {
    set: Option<Duration>,
}

impl ReadTimeout {
    /// Sets the transport's read timeout to the time left until `deadline`
    /// (at least 1 ms; `None`: no deadline), unless already close to it.
    pub fn update<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        deadline: Option<Instant>,
        now: Instant,
    ) -> io::Result<()> {
        let wait = deadline.map(|d| d.saturating_duration_since(now).max(Duration::from_millis(1)));
        let stale = match (wait, self.set) {
            (Some(w), Some(set)) => w + Duration::from_secs(1) < set || w > set + Duration::from_secs(1),
            (w, set) => w != set,
        };
        if stale {
            t.set_read_timeout(wait)?;
            self.set = wait;
        }
        Ok(())
    }
}

/// Writes all of `bufs` before `deadline` (`now` reads the clock): each
/// write call may block only until the deadline, so a peer that stops
/// reading cannot hold the writer longer than that, however it paces its
/// reads. A write that runs out of time fails with `TimedOut`.
pub fn write_all_before<T: Transport + ?Sized>(
    t: &mut T,
    mut bufs: &mut [IoSlice<'_>],
    deadline: Instant,
    now: impl Fn() -> Instant,
) -> io::Result<u64> {
    let mut total = 0u64;
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let left = deadline.saturating_duration_since(now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "write deadline passed"));
        }
        t.set_write_timeout(Some(left))?;
        let n = bufs.len().min(IOV_MAX);
        match t.write_vectored(&bufs[..n]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                total += written as u64;
                IoSlice::advance_slices(&mut bufs, written);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "write deadline passed"))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// The peer's ERROR frame body, as an error.
pub fn refusal(body: &[u8]) -> SessionError {
    match ErrorFrame::parse(body) {
        Ok(f) => SessionError::Refused {
            code: f.code,
            message: f.message.to_string(),
        },
        Err(e) => SessionError::Refused {
            code: 0,
            message: format!("undecodable ERROR frame: {e}"),
        },
    }
}

/// Appends an ERROR frame (`code`, `message`) to `out`: the one place
/// ERROR bytes are built, for sessions and for the server's refusals.
pub fn put_error_frame(out: &mut Vec<u8>, code: pfs_wire::ErrorCode, message: &str) {
    let mut body = Vec::with_capacity(message.len() + 8);
    ErrorFrame {
        code: code as u16,
        message,
    }
    .emit(&mut body);
    put_frame(out, FrameType::Error, 0, &body);
}

/// Appends the ERROR frame that tells the peer about `err`, with no
/// absolute path of this host in it ([`crate::peer_text`]).
pub fn put_error(out: &mut Vec<u8>, err: &SessionError) {
    put_error_beneath(out, err, None);
}

/// [`put_error`], paths beneath `root` (the peer's destination) shown
/// relative to it.
pub fn put_error_beneath(out: &mut Vec<u8>, err: &SessionError, root: Option<&std::path::Path>) {
    let message = match err {
        SessionError::Violation(v) => v.to_string(),
        SessionError::Rejected(r) => r.to_string(),
        other => other.to_string(),
    };
    put_error_frame(out, err.code(), &crate::peer_text::for_peer(&message, root));
}

/// A sender's result, after telling the receiver when the receiver is the
/// reason it failed (it broke the protocol, sent bytes that do not decode,
/// or advertised limits this sender cannot meet): best effort, so the
/// receiver's log says why the session ended.
pub fn tell_receiver<T: Transport + ?Sized, O>(
    t: &mut T,
    result: Result<O, SessionError>,
) -> Result<O, SessionError> {
    if let Err(e @ (SessionError::Violation(_) | SessionError::Malformed { .. } | SessionError::Limit(_))) =
        &result
    {
        send_error(t, e);
    }
    result
}

/// Sends an ERROR frame about `err`, best effort (the peer may be gone).
pub fn send_error<T: Transport + ?Sized>(t: &mut T, err: &SessionError) {
    send_error_beneath(t, err, None);
}

/// [`send_error`] from a server writing beneath `root` (the peer's
/// destination): its paths are shown relative to it.
pub fn send_error_beneath<T: Transport + ?Sized>(
    t: &mut T,
    err: &SessionError,
    root: Option<&std::path::Path>,
) {
    let mut frame = Vec::with_capacity(128);
    put_error_beneath(&mut frame, err, root);
    let _ = t.write_all(&frame);
}

/// The receive buffer of a driver ([`pfs_transport::RecvBuf`], shared with
/// the mount's link): a read error converts into [`SessionError`] through
/// `From<RecvError>`.
pub use pfs_transport::recv_buf::{is_timeout, RecvBuf, RecvError};

/// `now`, for drivers (cores never read the clock).
#[inline]
pub fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use pfs_wire::{put_frame, FrameType};

    use super::FrameClock;

    #[test]
    fn only_whole_frames_restart_the_deadline() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let mut clock = FrameClock::new(t0, timeout, 1_000_000);
        let mut frame = Vec::new();
        put_frame(&mut frame, FrameType::Plan, 0, &[0; 40]);
        // Half a frame trickles in at t0 + 29 s: 20 bytes earn nothing.
        clock.arrived_of(&frame[..20]);
        assert_eq!(clock.deadline(), t0 + timeout);
        clock.arrived_of(&frame[..30]);
        assert_eq!(clock.deadline(), t0 + timeout);
        // The frame completes at t0 + 29 s: a new timeout from then.
        clock.next_frame(t0 + Duration::from_secs(29), timeout);
        assert_eq!(clock.deadline(), t0 + Duration::from_secs(59));
    }

    #[test]
    fn a_declared_length_earns_nothing_arrived_bytes_do() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let mut clock = FrameClock::new(t0, timeout, 1_000_000);
        let header = pfs_wire::FrameHeader {
            frame_type: FrameType::Chunks,
            flags: 0,
            length: 8_000_000,
        }
        .emit();
        // Only the header is here: a huge declared body buys no time.
        clock.arrived_of(&header);
        assert_eq!(clock.deadline(), t0 + timeout);
        // 4 MB of it arrived: 4 s earned, at the minimum rate.
        let mut part = header.to_vec();
        part.resize(4_000_000, 0);
        clock.arrived_of(&part);
        assert_eq!(clock.deadline(), t0 + timeout + Duration::from_secs(4));
        // A shorter view of the same frame takes nothing back.
        clock.arrived_of(&part[..100]);
        assert_eq!(clock.deadline(), t0 + timeout + Duration::from_secs(4));
        // Bytes beyond the frame (the next one) do not count for this one.
        part.resize(10_000_000, 0);
        clock.arrived_of(&part);
        assert_eq!(clock.deadline(), t0 + timeout + Duration::from_secs(8));
    }
}
