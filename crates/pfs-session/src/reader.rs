//! Buffered frame reading over a [`Transport`]: one `read` syscall fills as
//! much of the buffer as the kernel has, so small frames are batched, and a
//! payload slab is streamed through the same buffer in chunks instead of
//! being held whole. Counts every byte read (the receiver's wire bytes).

use std::io;
use std::time::Instant;

use pfs_transport::Transport;
use pfs_wire::{FrameHeader, WireError, FRAME_HEADER_LEN};

use crate::SessionError;

/// Reusable receive buffer with wire-byte accounting.
#[derive(Debug)]
pub struct FrameReader {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    wire_bytes: u64,
    deadline: Option<Instant>,
}

impl FrameReader {
    /// A reader whose largest contiguous `take` is `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: vec![0u8; capacity.max(64 * 1024)].into_boxed_slice(),
            start: 0,
            end: 0,
            wire_bytes: 0,
            deadline: None,
        }
    }

    /// A reader with no buffer (allocates nothing). It is what a session
    /// holds while its real reader is taken out with `std::mem::replace` to
    /// process a frame body in place (the body borrows the reader, the
    /// processing borrows the session); nothing reads from it.
    pub fn empty() -> Self {
        Self {
            buf: Box::new([]),
            start: 0,
            end: 0,
            wire_bytes: 0,
            deadline: None,
        }
    }

    /// Fails reads that return after `deadline`: the socket's read timeout
    /// catches a silent peer, this catches one that trickles bytes to keep a
    /// frame (and a session slot) open.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Bytes read from the transport so far.
    pub fn wire_bytes(&self) -> u64 {
        self.wire_bytes
    }

    /// Largest `take` this reader supports.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// One read into the free tail of the buffer (compacting first if the
    /// tail is too small for `want` more bytes). Returns bytes read; 0 = EOF.
    fn read_more<T: Transport + ?Sized>(&mut self, t: &mut T, want: usize) -> io::Result<usize> {
        if self.buf.len() - self.end < want {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            match t.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    self.wire_bytes += n as u64;
                    if self.deadline.is_some_and(|d| Instant::now() > d) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "frame not complete before its deadline",
                        ));
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn ensure<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        n: usize,
        what: &'static str,
    ) -> Result<(), SessionError> {
        debug_assert!(n <= self.buf.len());
        while self.buffered() < n {
            let need = n - self.buffered();
            if self
                .read_more(t, need)
                .map_err(|e| SessionError::transport(what, e))?
                == 0
            {
                return Err(SessionError::PeerClosed { during: what });
            }
        }
        Ok(())
    }

    /// Reads and checks the next frame header. `Ok(None)` when the peer
    /// closed cleanly between frames.
    pub fn next_header<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
    ) -> Result<Option<FrameHeader>, SessionError> {
        let at_boundary = self.buffered() == 0;
        if at_boundary
            && self
                .read_more(t, FRAME_HEADER_LEN)
                .map_err(|e| SessionError::transport("frame header", e))?
                == 0
        {
            return Ok(None);
        }
        self.ensure(t, FRAME_HEADER_LEN, "frame header")?;
        let hdr =
            FrameHeader::parse(&self.buf[self.start..self.end]).map_err(|e| SessionError::Malformed {
                context: "frame header",
                error: e,
            })?;
        self.start += FRAME_HEADER_LEN;
        Ok(Some(hdr))
    }

    /// The next `n` bytes, contiguous. `n` must not exceed [`Self::capacity`].
    pub fn take<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        n: usize,
        what: &'static str,
    ) -> Result<&[u8], SessionError> {
        if n > self.buf.len() {
            return Err(SessionError::Malformed {
                context: what,
                error: WireError::TooLarge,
            });
        }
        self.ensure(t, n, what)?;
        let s = self.start;
        self.start += n;
        Ok(&self.buf[s..s + n])
    }

    /// Passes the next `n` bytes to `f` in buffer-sized chunks, in order.
    pub fn stream<T: Transport + ?Sized, E>(
        &mut self,
        t: &mut T,
        mut n: u64,
        what: &'static str,
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Result<(), E>, SessionError> {
        while n > 0 {
            if self.buffered() == 0 {
                self.start = 0;
                self.end = 0;
                if self
                    .read_more(t, 1)
                    .map_err(|e| SessionError::transport(what, e))?
                    == 0
                {
                    return Err(SessionError::PeerClosed { during: what });
                }
            }
            let k = (self.buffered() as u64).min(n) as usize;
            let chunk = &self.buf[self.start..self.start + k];
            self.start += k;
            n -= k as u64;
            if let Err(e) = f(chunk) {
                return Ok(Err(e));
            }
        }
        Ok(Ok(()))
    }
}
