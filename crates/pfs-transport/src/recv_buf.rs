//! The receive buffer every stream driver reads into: the one frame
//! reassembler of the workspace (sessions' drivers through
//! `pfs_session::framing::RecvBuf`, the mount's link thread directly).
//!
//! One `read` fills as much of it as the kernel has, so small frames are
//! batched; the consumer (a core, or the mount's link) takes whole frames
//! from the front in place and says how many bytes it used. Bytes are
//! moved only when the tail is too short for the unit the consumer waits
//! for. It knows nothing of frame types: the consumer parses headers
//! (`pfs_wire::FrameHeader`) and asks for `header + body` bytes.

use std::io;

use crate::Transport;

/// A receive buffer filled from a [`Transport`] and consumed from the
/// front. Counts every byte read.
#[derive(Debug)]
pub struct RecvBuf {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    read_bytes: u64,
}

/// Why a [`RecvBuf::read_for`] got no bytes (other than the caller's own
/// timeout, which it builds itself).
#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    /// The peer closed its sending side.
    #[error("peer closed the connection during {during}")]
    Closed {
        /// What was awaited.
        during: &'static str,
    },
    /// The read failed.
    #[error("transport error during {during}: {source}")]
    Io {
        /// What was awaited.
        during: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl RecvBuf {
    /// A buffer whose largest contiguous unit is `capacity` bytes (at
    /// least 64 KiB).
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: vec![0u8; capacity.max(64 * 1024)].into_boxed_slice(),
            start: 0,
            end: 0,
            read_bytes: 0,
        }
    }

    /// Bytes waiting to be consumed.
    // Across the crate boundary on every frame a core takes.
    #[inline]
    pub fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The first `n` waiting bytes were consumed.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Bytes read from the transport so far.
    #[inline]
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes
    }

    /// Largest contiguous unit.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// One read, after making room for `want` contiguous bytes from the
    /// front (compacting when the tail is too small). Returns bytes read;
    /// 0 is end of stream. `want` beyond the capacity is the caller's bug
    /// and reads nothing more than fits.
    pub fn read_from<T: Transport + ?Sized>(&mut self, t: &mut T, want: usize) -> io::Result<usize> {
        self.make_room(want)?;
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

    /// [`Self::read_from`] without waiting ([`Transport::read_ready`]):
    /// `Ok(None)` when nothing has arrived, `Ok(Some(0))` at end of stream.
    pub fn read_ready_from<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        want: usize,
    ) -> io::Result<Option<usize>> {
        self.make_room(want)?;
        loop {
            match t.read_ready(&mut self.buf[self.end..]) {
                Ok(n) => {
                    let k = n.unwrap_or(0);
                    self.end += k;
                    self.read_bytes += k as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// One read for a consumer awaiting `awaiting`: end of stream is
    /// [`RecvError::Closed`], a read timeout is the consumer's own
    /// `timed_out` error, any other failure [`RecvError::Io`] (both
    /// converted into the consumer's error type `E`).
    pub fn read_for<T: Transport + ?Sized, E: From<RecvError>>(
        &mut self,
        t: &mut T,
        want: usize,
        awaiting: &'static str,
        timed_out: impl FnOnce() -> E,
    ) -> Result<(), E> {
        match self.read_from(t, want) {
            Ok(0) => Err(RecvError::Closed { during: awaiting }.into()),
            Ok(_) => Ok(()),
            Err(e) if is_timeout(&e) => Err(timed_out()),
            Err(source) => Err(RecvError::Io {
                during: awaiting,
                source,
            }
            .into()),
        }
    }

    /// Compacts so that `want` contiguous bytes fit from the front, and
    /// fails if no byte of room is left.
    fn make_room(&mut self, want: usize) -> io::Result<()> {
        if self.buf.len() - self.start < want || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // A read into no room would return 0 and look like end of
            // stream; a consumer never leaves a full buffer unconsumed, so
            // say so.
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "receive buffer full and not consumed",
            ));
        }
        Ok(())
    }
}

/// Whether an I/O error is a read timeout.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io::{self, IoSlice};
    use std::time::Duration;

    use super::{RecvBuf, RecvError};
    use crate::Transport;

    /// A transport whose reads return the scripted results in order.
    #[derive(Debug, Default)]
    struct Script {
        reads: VecDeque<io::Result<Vec<u8>>>,
    }

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
            match self.reads.pop_front() {
                Some(Ok(bytes)) => {
                    let n = bytes.len().min(buf.len());
                    buf[..n].copy_from_slice(&bytes[..n]);
                    if n < bytes.len() {
                        self.reads.push_front(Ok(bytes[n..].to_vec()));
                    }
                    Ok(n)
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

    fn script(reads: Vec<io::Result<Vec<u8>>>) -> Script {
        Script { reads: reads.into() }
    }

    #[test]
    fn reads_append_and_consume_takes_from_the_front() {
        let mut t = script(vec![Ok(b"abc".to_vec()), Ok(b"def".to_vec())]);
        let mut b = RecvBuf::new(0);
        assert_eq!(b.capacity(), 64 * 1024);
        assert_eq!(b.read_from(&mut t, 1).unwrap(), 3);
        assert_eq!(b.read_from(&mut t, 1).unwrap(), 3);
        assert_eq!(b.filled(), b"abcdef");
        b.consume(2);
        assert_eq!(b.filled(), b"cdef");
        b.consume(4);
        assert_eq!(b.filled(), b"");
        assert_eq!(b.read_bytes(), 6);
        // End of stream.
        assert_eq!(b.read_from(&mut t, 1).unwrap(), 0);
    }

    #[test]
    fn a_unit_that_does_not_fit_the_tail_is_compacted_to_the_front() {
        let cap = 64 * 1024;
        let mut t = script(vec![Ok(vec![1; cap - 10]), Ok(vec![2; 100])]);
        let mut b = RecvBuf::new(cap);
        b.read_from(&mut t, cap).unwrap();
        b.consume(cap - 20);
        assert_eq!(b.filled().len(), 10);
        // 100 contiguous bytes wanted: the 10 waiting move to the front.
        b.read_from(&mut t, 100).unwrap();
        assert_eq!(b.filled().len(), 110);
        assert!(b.filled()[..10].iter().all(|&x| x == 1));
        assert!(b.filled()[10..].iter().all(|&x| x == 2));
    }

    #[test]
    fn a_full_buffer_not_consumed_is_an_error_not_end_of_stream() {
        let cap = 64 * 1024;
        let mut t = script(vec![Ok(vec![0; cap]), Ok(vec![0; 1])]);
        let mut b = RecvBuf::new(cap);
        assert_eq!(b.read_from(&mut t, cap).unwrap(), cap);
        let e = b.read_from(&mut t, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
    }

    #[derive(Debug)]
    enum Mine {
        Recv(RecvError),
        Late,
    }

    impl From<RecvError> for Mine {
        fn from(e: RecvError) -> Self {
            Self::Recv(e)
        }
    }

    #[test]
    fn read_for_names_what_was_awaited() {
        let mut t = script(vec![
            Err(io::ErrorKind::Interrupted.into()),
            Ok(b"x".to_vec()),
            Err(io::ErrorKind::WouldBlock.into()),
            Err(io::ErrorKind::ConnectionReset.into()),
        ]);
        let mut b = RecvBuf::new(0);
        // An interrupted read is retried.
        assert!(b.read_for(&mut t, 1, "HELLO", || Mine::Late).is_ok());
        assert!(matches!(
            b.read_for(&mut t, 1, "HELLO", || Mine::Late),
            Err(Mine::Late)
        ));
        let e = b.read_for(&mut t, 1, "HELLO", || Mine::Late).unwrap_err();
        assert!(matches!(e, Mine::Recv(RecvError::Io { during: "HELLO", .. })));
        let e = b.read_for(&mut t, 1, "ACK", || Mine::Late).unwrap_err();
        let Mine::Recv(e) = e else { panic!("{e:?}") };
        assert_eq!(e.to_string(), "peer closed the connection during ACK");
    }
}
