//! The message API over a connected pair of rings: [`Sender`] (send, loan,
//! send_ref), [`Receiver`] (recv views, stream reads), and [`Endpoint`],
//! which holds both plus the synchronous [`Endpoint::call`].

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use crate::error::IpcError;
use crate::mem::{Mapping, ShmRing};
use crate::ring::{Consumer, Producer, Record, RingError, RingMem, Slot, KIND_DATA, KIND_REF};
use crate::wait::{self, PeerWatch, WaitConfig, WaitStrategy, Waitable};

/// What both halves of a connection share: mappings and the peer watch.
#[derive(Debug)]
pub(crate) struct Link {
    pub region: Mapping,
    pub cap: usize,
    pub blob: Option<Arc<Mapping>>,
    pub peer: PeerWatch,
}

impl Link {
    fn ring(&self, index: usize) -> ShmRing<'_> {
        ShmRing::new(&self.region, index, self.cap)
    }

    fn blob_len(&self) -> u64 {
        self.blob.as_ref().map_or(0, |b| b.len() as u64)
    }
}

/// The sending half: writes records into the outgoing ring.
#[derive(Debug)]
pub struct Sender {
    link: Arc<Link>,
    ring: usize,
    prod: Producer,
    wait: WaitConfig,
    peer_sleeps: bool,
    poisoned: Option<RingError>,
}

/// The receiving half: reads records from the incoming ring.
#[derive(Debug)]
pub struct Receiver {
    link: Arc<Link>,
    ring: usize,
    cons: Consumer,
    wait: WaitConfig,
    peer_sleeps: bool,
    poisoned: Option<RingError>,
    /// A data record partly consumed by [`Receiver::read_stream`].
    partial: Option<(Record, usize)>,
}

/// A connected endpoint: one sender, one receiver, a shared blob.
///
/// ```no_run
/// use pfs_ipc::{Endpoint, WaitConfig, WaitStrategy};
///
/// let mut ep = Endpoint::connect("/tmp/pfs.sock".as_ref(), WaitConfig::with(WaitStrategy::SpinFutex))?;
/// ep.send(b"hello")?;                       // one copy into the ring
/// let mut loan = ep.loan(64)?;              // zero copy: write in place…
/// loan.copy_from_slice(&[7u8; 64]);
/// loan.commit();                            // …then publish
/// ep.send_ref(4096, 1 << 20)?;              // a reference into the shared blob
/// let reply = ep.call(b"ping")?;            // request → response
/// assert_eq!(reply.bytes(), b"pong");
/// # Ok::<(), pfs_ipc::IpcError>(())
/// ```
#[derive(Debug)]
pub struct Endpoint {
    tx: Sender,
    rx: Receiver,
}

/// What a received record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgKind {
    /// Bytes inline in the ring.
    Inline,
    /// A range of the shared blob.
    Ref {
        /// Offset in the blob.
        offset: u64,
        /// Length.
        len: u64,
    },
}

/// A received message: a view into the ring (or the blob), valid until it
/// is dropped or [`Msg::release`]d, which gives its ring space back.
#[derive(Debug)]
pub struct Msg<'a> {
    rx: &'a mut Receiver,
    rec: Record,
    kind: MsgKind,
}

impl Msg<'_> {
    /// The message bytes: inline payload, or the referenced blob range.
    pub fn bytes(&self) -> &[u8] {
        match self.kind {
            MsgKind::Inline => self
                .rx
                .link
                .ring(self.rx.ring)
                .payload(self.rec.payload_off, self.rec.len),
            MsgKind::Ref { offset, len } => match &self.rx.link.blob {
                Some(blob) => blob.bytes(offset as usize, len as usize),
                None => &[],
            },
        }
    }

    /// Inline or a blob reference.
    pub fn kind(&self) -> MsgKind {
        self.kind
    }

    /// Length of [`Msg::bytes`].
    pub fn len(&self) -> usize {
        match self.kind {
            MsgKind::Inline => self.rec.len,
            MsgKind::Ref { len, .. } => len as usize,
        }
    }

    /// True for an empty message.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Gives the ring space back now (same as dropping the view).
    pub fn release(self) {}
}

impl Drop for Msg<'_> {
    fn drop(&mut self) {
        self.rx.release(self.rec);
    }
}

/// Ring space lent for writing a message in place; publish with
/// [`Loan::commit`]. Dropping a loan without committing sends nothing.
#[derive(Debug)]
pub struct Loan<'a> {
    tx: &'a mut Sender,
    slot: Slot,
}

impl Loan<'_> {
    /// Publishes the message.
    pub fn commit(self) {
        let slot = self.slot;
        self.tx.publish(slot, KIND_DATA);
    }
}

impl std::ops::Deref for Loan<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.tx
            .link
            .ring(self.tx.ring)
            .payload(self.slot.payload_off, self.slot.len)
    }
}

impl std::ops::DerefMut for Loan<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.tx
            .link
            .ring(self.tx.ring)
            .payload_mut(self.slot.payload_off, self.slot.len)
    }
}

/// Waiting for ring space.
struct Space<'s> {
    tx: &'s mut Sender,
    len: usize,
}

impl Waitable for Space<'_> {
    type Out = Slot;
    fn poll(&mut self) -> Result<Option<Slot>, IpcError> {
        let ring = self.tx.link.ring(self.tx.ring);
        self.tx
            .prod
            .reserve(&ring, self.len)
            .map_err(|e| self.tx.poison(e))
    }
    fn announce_sleep(&mut self) -> Result<bool, IpcError> {
        let ring = self.tx.link.ring(self.tx.ring);
        self.tx
            .prod
            .announce_sleep(&ring, self.len)
            .map_err(|e| self.tx.poison(e))
    }
    fn sleep_word(&self) -> &AtomicU32 {
        let link: &Link = &self.tx.link;
        ShmRing::new(&link.region, self.tx.ring, link.cap).producer_sleep_word()
    }
    fn check_peer(&self) -> Result<(), IpcError> {
        self.tx.link.peer.check()
    }
}

impl Sender {
    pub(crate) fn new(link: Arc<Link>, ring: usize, key: u64, wait: WaitConfig, peer: WaitStrategy) -> Self {
        let cap = link.cap;
        Self {
            link,
            ring,
            prod: Producer::new(cap, key),
            wait,
            peer_sleeps: peer == WaitStrategy::SpinFutex,
            poisoned: None,
        }
    }

    fn poison(&mut self, e: RingError) -> IpcError {
        self.poisoned = Some(e.clone());
        IpcError::Protocol(e)
    }

    fn check_len(&self, len: usize) -> Result<(), IpcError> {
        if let Some(e) = &self.poisoned {
            return Err(IpcError::Protocol(e.clone()));
        }
        let max = self.prod.max_payload();
        if len > max {
            return Err(IpcError::TooLarge { len, max });
        }
        Ok(())
    }

    /// Largest message one record carries (half the ring).
    pub fn max_message(&self) -> usize {
        self.prod.max_payload()
    }

    fn reserve(&mut self, len: usize, block: bool, timeout: Option<Duration>) -> Result<Slot, IpcError> {
        self.check_len(len)?;
        let ring = self.link.ring(self.ring);
        if let Some(slot) = self.prod.reserve(&ring, len).map_err(|e| self.poison(e))? {
            return Ok(slot);
        }
        if !block {
            return Err(IpcError::WouldBlock);
        }
        let opts = self.wait;
        wait::wait_for(&mut Space { tx: self, len }, &opts, timeout)
    }

    fn publish(&mut self, slot: Slot, kind: u32) {
        let ring = self.link.ring(self.ring);
        self.prod.publish(&ring, slot, kind);
        if self.peer_sleeps && self.prod.consumer_needs_wake(&ring) {
            wait::wake(ring.consumer_sleep());
        }
    }

    fn send_inner(&mut self, data: &[u8], block: bool, timeout: Option<Duration>) -> Result<(), IpcError> {
        let slot = self.reserve(data.len(), block, timeout)?;
        self.link
            .ring(self.ring)
            .payload_mut(slot.payload_off, slot.len)
            .copy_from_slice(data);
        self.publish(slot, KIND_DATA);
        Ok(())
    }

    /// Sends `data` (one copy into the ring), waiting while the ring is full.
    pub fn send(&mut self, data: &[u8]) -> Result<(), IpcError> {
        self.send_inner(data, true, None)
    }

    /// Sends `data`, or [`IpcError::WouldBlock`] if the ring is full.
    pub fn try_send(&mut self, data: &[u8]) -> Result<(), IpcError> {
        self.send_inner(data, false, None)
    }

    /// Sends `data`, waiting at most `timeout` for space.
    pub fn send_timeout(&mut self, data: &[u8], timeout: Duration) -> Result<(), IpcError> {
        self.send_inner(data, true, Some(timeout))
    }

    /// Lends `len` bytes of ring space to write a message in place (zero
    /// copy), waiting while the ring is full.
    pub fn loan(&mut self, len: usize) -> Result<Loan<'_>, IpcError> {
        let slot = self.reserve(len, true, None)?;
        Ok(Loan { tx: self, slot })
    }

    /// [`Sender::loan`], or [`IpcError::WouldBlock`] if the ring is full.
    pub fn try_loan(&mut self, len: usize) -> Result<Loan<'_>, IpcError> {
        let slot = self.reserve(len, false, None)?;
        Ok(Loan { tx: self, slot })
    }

    /// [`Sender::loan`], waiting at most `timeout` for space (`None`:
    /// forever): [`IpcError::Timeout`] when the peer does not make room.
    pub fn loan_timeout(&mut self, len: usize, timeout: Option<Duration>) -> Result<Loan<'_>, IpcError> {
        let slot = self.reserve(len, true, timeout)?;
        Ok(Loan { tx: self, slot })
    }

    fn send_ref_inner(&mut self, offset: u64, len: u64, block: bool) -> Result<(), IpcError> {
        let blob_len = self.link.blob_len();
        if offset.checked_add(len).is_none_or(|end| end > blob_len) {
            return Err(IpcError::OutOfBlob {
                offset,
                len,
                blob_len,
            });
        }
        let slot = self.reserve(16, block, None)?;
        let buf = self.link.ring(self.ring).payload_mut(slot.payload_off, 16);
        buf[..8].copy_from_slice(&offset.to_le_bytes());
        buf[8..].copy_from_slice(&len.to_le_bytes());
        self.publish(slot, KIND_REF);
        Ok(())
    }

    /// Sends a reference to `len` bytes at `offset` of the shared blob:
    /// the receiver reads them in place.
    pub fn send_ref(&mut self, offset: u64, len: u64) -> Result<(), IpcError> {
        self.send_ref_inner(offset, len, true)
    }

    /// [`Sender::send_ref`], or [`IpcError::WouldBlock`] if the ring is full.
    pub fn try_send_ref(&mut self, offset: u64, len: u64) -> Result<(), IpcError> {
        self.send_ref_inner(offset, len, false)
    }

    /// Closes the outgoing ring: the peer reads what was sent, then
    /// [`IpcError::Closed`]. Also done on drop.
    pub fn close(&mut self) {
        let ring = self.link.ring(self.ring);
        self.prod.close(&ring);
        if self.peer_sleeps {
            wait::wake(ring.consumer_sleep());
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.close();
    }
}

/// Waiting for a record.
struct Data<'r> {
    rx: &'r mut Receiver,
}

impl Waitable for Data<'_> {
    type Out = Record;
    fn poll(&mut self) -> Result<Option<Record>, IpcError> {
        self.rx.poll_record()
    }
    fn announce_sleep(&mut self) -> Result<bool, IpcError> {
        let ring = self.rx.link.ring(self.rx.ring);
        Ok(self.rx.cons.announce_sleep(&ring))
    }
    fn sleep_word(&self) -> &AtomicU32 {
        let link: &Link = &self.rx.link;
        ShmRing::new(&link.region, self.rx.ring, link.cap).consumer_sleep_word()
    }
    fn check_peer(&self) -> Result<(), IpcError> {
        self.rx.link.peer.check()
    }
}

impl Receiver {
    pub(crate) fn new(link: Arc<Link>, ring: usize, key: u64, wait: WaitConfig, peer: WaitStrategy) -> Self {
        let cap = link.cap;
        Self {
            link,
            ring,
            cons: Consumer::new(cap, key),
            wait,
            peer_sleeps: peer == WaitStrategy::SpinFutex,
            poisoned: None,
            partial: None,
        }
    }

    fn poll_record(&mut self) -> Result<Option<Record>, IpcError> {
        if let Some(e) = &self.poisoned {
            return Err(IpcError::Protocol(e.clone()));
        }
        let ring = self.link.ring(self.ring);
        let published = self.cons.published();
        let peeked = self.cons.peek(&ring);
        if self.cons.published() != published {
            // peek found the ring empty and published our tail: a producer
            // asleep waiting for space must know.
            self.wake_producer(&ring);
        }
        match peeked {
            Ok(Some(rec)) => Ok(Some(rec)),
            Ok(None) if self.cons.is_closed(&ring) => match self.cons.peek(&ring) {
                Ok(Some(rec)) => Ok(Some(rec)),
                Ok(None) => Err(IpcError::Closed),
                Err(e) => Err(self.poison(e)),
            },
            Ok(None) => Ok(None),
            Err(e) => Err(self.poison(e)),
        }
    }

    fn poison(&mut self, e: RingError) -> IpcError {
        self.poisoned = Some(e.clone());
        IpcError::Protocol(e)
    }

    fn release(&mut self, rec: Record) {
        let ring = self.link.ring(self.ring);
        if self.cons.release(&ring, rec) {
            self.wake_producer(&ring);
        }
    }

    fn wake_producer(&self, ring: &ShmRing<'_>) {
        if self.peer_sleeps && self.cons.producer_needs_wake(ring) {
            wait::wake(ring.producer_sleep());
        }
    }

    fn next_record(&mut self, block: bool, timeout: Option<Duration>) -> Result<Option<Record>, IpcError> {
        if let Some(rec) = self.poll_record()? {
            return Ok(Some(rec));
        }
        if !block {
            return Ok(None);
        }
        let opts = self.wait;
        wait::wait_for(&mut Data { rx: self }, &opts, timeout).map(Some)
    }

    fn view(&mut self, rec: Record) -> Result<Msg<'_>, IpcError> {
        let kind = if rec.kind == KIND_REF {
            let raw = self.link.ring(self.ring).payload(rec.payload_off, 16);
            let offset = u64::from_le_bytes(raw[..8].try_into().unwrap_or_default());
            let len = u64::from_le_bytes(raw[8..].try_into().unwrap_or_default());
            let blob_len = self.link.blob_len();
            if offset.checked_add(len).is_none_or(|end| end > blob_len) {
                // The peer corrupted its own message: skip it, stay usable.
                self.release(rec);
                return Err(IpcError::BadReference {
                    offset,
                    len,
                    blob_len,
                });
            }
            MsgKind::Ref { offset, len }
        } else {
            MsgKind::Inline
        };
        Ok(Msg { rx: self, rec, kind })
    }

    /// Discards a partly read stream record (message API after stream reads).
    fn drop_partial(&mut self) {
        if let Some((rec, _)) = self.partial.take() {
            self.release(rec);
        }
    }

    /// The next message, waiting for it per the wait strategy.
    /// [`IpcError::Closed`] once the peer closed and everything was read.
    pub fn recv(&mut self) -> Result<Msg<'_>, IpcError> {
        self.drop_partial();
        let rec = self.next_record(true, None)?.ok_or(IpcError::WouldBlock)?;
        self.view(rec)
    }

    /// The next message if one is there, else `Ok(None)`.
    pub fn try_recv(&mut self) -> Result<Option<Msg<'_>>, IpcError> {
        self.drop_partial();
        match self.next_record(false, None)? {
            Some(rec) => self.view(rec).map(Some),
            None => Ok(None),
        }
    }

    /// The next message, waiting at most `timeout`.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Msg<'_>, IpcError> {
        self.drop_partial();
        let rec = self
            .next_record(true, Some(timeout))?
            .ok_or(IpcError::WouldBlock)?;
        self.view(rec)
    }

    /// Byte-stream read across inline records (for transports that carry a
    /// byte stream, such as frames): copies up to `buf.len()` bytes, waiting
    /// up to `timeout` for the first. `Ok(0)` at end of stream.
    pub fn read_stream(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize, IpcError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let (rec, done) = match self.partial.take() {
            Some(p) => p,
            None => match self.next_record(true, timeout) {
                Ok(Some(rec)) => (rec, 0),
                Ok(None) => return Err(IpcError::WouldBlock),
                Err(IpcError::Closed) => return Ok(0),
                Err(e) => return Err(e),
            },
        };
        self.copy_stream(buf, rec, done)
    }

    /// [`Self::read_stream`] without waiting: `Ok(None)` when no byte has
    /// arrived, `Ok(Some(0))` at end of stream.
    pub fn read_stream_ready(&mut self, buf: &mut [u8]) -> Result<Option<usize>, IpcError> {
        if buf.is_empty() {
            return Ok(None);
        }
        let (rec, done) = match self.partial.take() {
            Some(p) => p,
            None => match self.next_record(false, None) {
                Ok(Some(rec)) => (rec, 0),
                Ok(None) => return Ok(None),
                Err(IpcError::Closed) => return Ok(Some(0)),
                Err(e) => return Err(e),
            },
        };
        self.copy_stream(buf, rec, done).map(Some)
    }

    /// Copies the next bytes of stream record `rec` (`done` of them read
    /// before) into `buf`; keeps the record while bytes of it remain.
    fn copy_stream(&mut self, buf: &mut [u8], rec: Record, done: usize) -> Result<usize, IpcError> {
        if rec.kind != KIND_DATA {
            self.release(rec);
            return Err(IpcError::RefInByteStream);
        }
        let n = (rec.len - done).min(buf.len());
        buf[..n].copy_from_slice(self.link.ring(self.ring).payload(rec.payload_off + done, n));
        if done + n == rec.len {
            self.release(rec);
        } else {
            self.partial = Some((rec, done + n));
        }
        Ok(n)
    }
}

impl Endpoint {
    pub(crate) fn from_parts(tx: Sender, rx: Receiver) -> Self {
        Self { tx, rx }
    }

    /// Both halves, to receive a request and answer it while its view is
    /// still held, or to move them to different threads' code paths.
    pub fn split(&mut self) -> (&mut Sender, &mut Receiver) {
        (&mut self.tx, &mut self.rx)
    }

    /// Pid of the peer process.
    pub fn peer_pid(&self) -> i32 {
        self.tx.link.peer.pid
    }

    /// Our wait strategy.
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.tx.wait.strategy
    }

    /// Largest message one record carries.
    pub fn max_message(&self) -> usize {
        self.tx.max_message()
    }

    /// The shared blob (empty if the server offers none). Bytes may change
    /// under the view when the peer writes them.
    pub fn blob(&self) -> &[u8] {
        match &self.tx.link.blob {
            Some(b) => b.bytes(0, b.len()),
            None => &[],
        }
    }

    /// Copies `data` into the shared blob at `offset`.
    pub fn write_blob(&mut self, offset: u64, data: &[u8]) -> Result<(), IpcError> {
        let blob_len = self.tx.link.blob_len();
        let len = data.len() as u64;
        match &self.tx.link.blob {
            Some(b) if offset.checked_add(len).is_some_and(|end| end <= blob_len) => {
                b.write(offset as usize, data);
                Ok(())
            }
            _ => Err(IpcError::OutOfBlob {
                offset,
                len,
                blob_len,
            }),
        }
    }

    /// See [`Sender::send`].
    pub fn send(&mut self, data: &[u8]) -> Result<(), IpcError> {
        self.tx.send(data)
    }

    /// See [`Sender::try_send`].
    pub fn try_send(&mut self, data: &[u8]) -> Result<(), IpcError> {
        self.tx.try_send(data)
    }

    /// See [`Sender::send_timeout`].
    pub fn send_timeout(&mut self, data: &[u8], timeout: Duration) -> Result<(), IpcError> {
        self.tx.send_timeout(data, timeout)
    }

    /// See [`Sender::loan`].
    pub fn loan(&mut self, len: usize) -> Result<Loan<'_>, IpcError> {
        self.tx.loan(len)
    }

    /// See [`Sender::try_loan`].
    pub fn try_loan(&mut self, len: usize) -> Result<Loan<'_>, IpcError> {
        self.tx.try_loan(len)
    }

    /// See [`Sender::loan_timeout`].
    pub fn loan_timeout(&mut self, len: usize, timeout: Option<Duration>) -> Result<Loan<'_>, IpcError> {
        self.tx.loan_timeout(len, timeout)
    }

    /// See [`Sender::send_ref`].
    pub fn send_ref(&mut self, offset: u64, len: u64) -> Result<(), IpcError> {
        self.tx.send_ref(offset, len)
    }

    /// See [`Sender::try_send_ref`].
    pub fn try_send_ref(&mut self, offset: u64, len: u64) -> Result<(), IpcError> {
        self.tx.try_send_ref(offset, len)
    }

    /// See [`Receiver::recv`].
    pub fn recv(&mut self) -> Result<Msg<'_>, IpcError> {
        self.rx.recv()
    }

    /// See [`Receiver::try_recv`].
    pub fn try_recv(&mut self) -> Result<Option<Msg<'_>>, IpcError> {
        self.rx.try_recv()
    }

    /// See [`Receiver::recv_timeout`].
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Msg<'_>, IpcError> {
        self.rx.recv_timeout(timeout)
    }

    /// Synchronous request/response ("doors" style): sends `request` and
    /// waits for the peer's next message, the response.
    pub fn call(&mut self, request: &[u8]) -> Result<Msg<'_>, IpcError> {
        self.tx.send(request)?;
        self.rx.recv()
    }

    /// [`Endpoint::call`] waiting at most `timeout` for the response.
    pub fn call_timeout(&mut self, request: &[u8], timeout: Duration) -> Result<Msg<'_>, IpcError> {
        self.tx.send_timeout(request, timeout)?;
        self.rx.recv_timeout(timeout)
    }

    /// Serves one request: receives it and calls `answer` with its bytes
    /// and the sending half, which replies (`send`, `loan`, `send_ref`)
    /// while the request view is still held.
    pub fn serve_one<F>(&mut self, answer: F) -> Result<(), IpcError>
    where
        F: FnOnce(&[u8], &mut Sender) -> Result<(), IpcError>,
    {
        let (tx, rx) = self.split();
        let req = rx.recv()?;
        answer(req.bytes(), tx)
    }

    /// See [`Receiver::read_stream`].
    pub fn read_stream(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize, IpcError> {
        self.rx.read_stream(buf, timeout)
    }

    /// See [`Receiver::read_stream_ready`].
    pub fn read_stream_ready(&mut self, buf: &mut [u8]) -> Result<Option<usize>, IpcError> {
        self.rx.read_stream_ready(buf)
    }

    /// Closes our sending ring (the peer reads end-of-stream).
    pub fn close(&mut self) {
        self.tx.close();
    }

    /// True if the peer is still alive and connected (one `poll`).
    pub fn peer_alive(&self) -> bool {
        self.tx.link.peer.check().is_ok()
    }

    #[doc(hidden)]
    /// Test support: the shared region, to corrupt it on purpose.
    pub fn debug_region(&self) -> (&[u8], usize) {
        (
            self.tx.link.region.bytes(0, self.tx.link.region.len()),
            self.tx.link.cap,
        )
    }

    #[doc(hidden)]
    /// Test support: writes raw bytes into the shared region.
    pub fn debug_write_region(&self, offset: usize, data: &[u8]) {
        self.tx.link.region.write(offset, data);
    }
}
