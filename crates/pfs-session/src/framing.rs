//! Framing shared by both protocols, sans I/O: whole frames out of a byte
//! slice, ERROR frames in and out, and the receive buffer the drivers fill
//! from a transport and hand to a core.

use std::io::{self, IoSlice};
use std::time::Instant;

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
    /// One gram: frame header, gram header and descriptor table, then
    /// `ranges` of `blob` as the payload slab (straight from the mapping).
    Gram {
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
            Self::Gram { .. } => "GRAM",
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

/// The deadline after a call that consumed `used` bytes of whole frames
/// and left `rest` (the start of the next frame, if any): whole frames are
/// progress and restart the `timeout`; bytes of a frame still arriving are
/// not, so a peer trickling bytes cannot hold a session open. A frame that
/// is still arriving gets, once, one more second per MB of its length (big
/// bodies at modest rates). `allowance_at` remembers which frame (by the
/// stream offset `consumed` where it starts) already had its allowance.
pub fn frame_deadline(
    deadline: Instant,
    now: Instant,
    timeout: std::time::Duration,
    used: usize,
    rest: &[u8],
    consumed: u64,
    allowance_at: &mut Option<u64>,
) -> Instant {
    let mut deadline = if used > 0 { now + timeout } else { deadline };
    if *allowance_at != Some(consumed) {
        if let Ok(h) = FrameHeader::parse(rest) {
            deadline += std::time::Duration::from_secs(u64::from(h.length) / 1_000_000);
            *allowance_at = Some(consumed);
        }
    }
    deadline
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

/// Appends the ERROR frame that tells the peer about `err`.
pub fn put_error(out: &mut Vec<u8>, err: &SessionError) {
    let message = match err {
        SessionError::Violation(v) => v.to_string(),
        SessionError::Rejected(r) => r.to_string(),
        other => other.to_string(),
    };
    let mut body = Vec::with_capacity(message.len() + 8);
    ErrorFrame {
        code: err.code() as u16,
        message: &message,
    }
    .emit(&mut body);
    put_frame(out, FrameType::Error, 0, &body);
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
    let mut frame = Vec::with_capacity(128);
    put_error(&mut frame, err);
    let _ = t.write_all(&frame);
}

/// The receive buffer of a driver: one `read` fills as much of it as the
/// kernel has, so small frames are batched; a core consumes from the front
/// in place. Counts every byte read.
#[derive(Debug)]
pub struct RecvBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    read_bytes: u64,
}

impl RecvBuf {
    /// A buffer whose largest contiguous unit is `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: vec![0u8; capacity.max(64 * 1024)].into_boxed_slice(),
            start: 0,
            end: 0,
            read_bytes: 0,
        }
    }

    /// Bytes waiting to be consumed.
    pub fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The first `n` waiting bytes were consumed.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Bytes read from the transport so far.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    /// One read, after making room for `want` contiguous bytes from the
    /// front (compacting when the tail is too small). Returns bytes read;
    /// 0 is end of stream. `want` beyond the capacity is the caller's bug
    /// and reads nothing more than fits.
    pub fn read_from<T: Transport + ?Sized>(&mut self, t: &mut T, want: usize) -> io::Result<usize> {
        if self.buf.len() - self.start < want || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A read into no room would return 0 and look like end of
            // stream; a core never leaves a full buffer unconsumed, so say so.
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "receive buffer full and not consumed",
            ));
        }
        loop {
            match t.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    self.read_bytes += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One read for a core awaiting `awaiting`: end of stream is
    /// [`SessionError::PeerClosed`], a read timeout is the core's own
    /// `timed_out` error, any other failure a transport error.
    pub fn read_for<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        want: usize,
        awaiting: &'static str,
        timed_out: impl FnOnce() -> SessionError,
    ) -> Result<(), SessionError> {
        match self.read_from(t, want) {
            Ok(0) => Err(SessionError::PeerClosed { during: awaiting }),
            Ok(_) => Ok(()),
            Err(e) if is_timeout(&e) => Err(timed_out()),
            Err(e) => Err(SessionError::transport(awaiting, e)),
        }
    }

    /// Largest contiguous unit.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
}

/// Whether an I/O error is a read timeout.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// `now`, for drivers (cores never read the clock).
#[inline]
pub fn now() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use pfs_wire::{put_frame, FrameType};

    use super::frame_deadline;

    #[test]
    fn only_whole_frames_restart_the_deadline() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let mut allowance = None;
        let mut frame = Vec::new();
        put_frame(&mut frame, FrameType::Plan, 0, &[0; 40]);
        // Half a frame trickles in at t0 + 29 s: the deadline stays t0 + 30 s
        // (a 40-byte body earns no allowance).
        let d = frame_deadline(
            t0 + timeout,
            t0 + Duration::from_secs(29),
            timeout,
            0,
            &frame[..20],
            0,
            &mut allowance,
        );
        assert_eq!(d, t0 + timeout);
        // More of the same frame: still no later.
        let d = frame_deadline(
            d,
            t0 + Duration::from_secs(29),
            timeout,
            0,
            &frame[..30],
            0,
            &mut allowance,
        );
        assert_eq!(d, t0 + timeout);
        // The frame completes at t0 + 29 s: a new timeout from then.
        let d = frame_deadline(
            d,
            t0 + Duration::from_secs(29),
            timeout,
            frame.len(),
            &[],
            56,
            &mut allowance,
        );
        assert_eq!(d, t0 + Duration::from_secs(59));
    }

    #[test]
    fn a_big_frame_gets_one_second_per_mb_once() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let mut allowance = None;
        let header = pfs_wire::FrameHeader {
            frame_type: FrameType::Chunks,
            flags: 0,
            length: 8_000_000,
        }
        .emit();
        let d = frame_deadline(t0 + timeout, t0, timeout, 0, &header, 100, &mut allowance);
        assert_eq!(d, t0 + Duration::from_secs(38));
        // The same frame seen again earns nothing more.
        let d = frame_deadline(d, t0, timeout, 0, &header, 100, &mut allowance);
        assert_eq!(d, t0 + Duration::from_secs(38));
    }
}
