//! The four ways of sending a message (A1–A4) and the receivers that count
//! them. Each sender runs until `stop` is raised, between messages (A4:
//! between grams); each receiver reads until end of stream.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pfs_wire::{
    Descriptor, Encoding, FrameHeader, FrameType, Gram, GramHeader, IntegrityAlg, TableWriter,
    FRAME_HEADER_LEN, GRAM_FLAG_PAYLOAD,
};

use super::sys;
use super::SendMethod;

/// Fields per message.
pub const FIELDS: usize = 8;

/// One logical message: eight separately heap-allocated strings.
#[derive(Debug)]
pub struct Message {
    /// The fields, in order.
    pub fields: [String; FIELDS],
}

/// Lengths of the eight fields of a `size`-byte message (the remainder goes
/// to the first fields).
pub fn field_lens(size: usize) -> [usize; FIELDS] {
    std::array::from_fn(|j| size / FIELDS + usize::from(j < size % FIELDS))
}

/// A sender's own messages, reused round-robin.
pub fn message_pool(thread: usize, size: usize, pool: usize) -> Vec<Message> {
    let lens = field_lens(size);
    (0..pool)
        .map(|m| Message {
            fields: std::array::from_fn(|j| {
                let mut s = String::with_capacity(lens[j]);
                for k in 0..lens[j] {
                    s.push(char::from(b'a' + ((thread * 31 + m * 7 + j * 3 + k) % 26) as u8));
                }
                s
            }),
        })
        .collect()
}

/// What a sender did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sent {
    /// Logical messages handed to the kernel.
    pub messages: u64,
    /// Bytes handed to the kernel (framing included).
    pub wire_bytes: u64,
    /// send/sendmsg calls that moved bytes.
    pub calls: u64,
    /// A3: send ids the kernel reported complete.
    pub zc_completed: u64,
    /// A3: of those, how many the kernel reported as copied.
    pub zc_copied: u64,
    /// A4: grams emitted.
    pub grams: u64,
}

/// What a receiver counted.
#[derive(Debug, Default, Clone, Copy)]
pub struct Received {
    /// Bytes read from the socket.
    pub wire_bytes: u64,
    /// Logical message bytes (A4: the sum of descriptor lengths).
    pub logical_bytes: u64,
    /// Logical messages.
    pub messages: u64,
    /// A4: grams walked.
    pub grams: u64,
}

/// Sender-side settings.
#[derive(Debug, Clone, Copy)]
pub struct SendConfig {
    /// Message size.
    pub size: usize,
    /// A3: most messages awaiting their completion.
    pub zc_inflight: usize,
    /// A4: messages per gram.
    pub gram_msgs: usize,
    /// A4: descriptor table encoding.
    pub gram_encoding: Encoding,
    /// A4: descriptors per message (1: the message's consolidated bytes; 8: one per field).
    pub descs_per_msg: usize,
    /// Longest wait for anything (completions).
    pub timeout: Duration,
}

/// Runs `method`'s sender until `stop`.
pub fn send(
    method: SendMethod,
    sock: &mut TcpStream,
    pool: &[Message],
    opts: SendConfig,
    stop: &AtomicBool,
) -> io::Result<Sent> {
    match method {
        SendMethod::A1 => send_a1(sock, pool, opts, stop),
        SendMethod::A2 => send_a2(sock, pool, stop),
        SendMethod::A3 => send_a3(sock, pool, opts, stop),
        SendMethod::A4 => send_a4(sock, pool, opts, stop),
    }
}

/// Round-robin index over the pool.
#[inline]
fn next(k: &mut usize, len: usize) -> usize {
    let i = *k;
    *k = if i + 1 == len { 0 } else { i + 1 };
    i
}

/// A1: copy the fields into one reusable buffer, then `send(2)` it.
fn send_a1(sock: &mut TcpStream, pool: &[Message], opts: SendConfig, stop: &AtomicBool) -> io::Result<Sent> {
    let mut buf = Vec::with_capacity(opts.size);
    let mut out = Sent::default();
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let m = &pool[next(&mut k, pool.len())];
        buf.clear();
        for f in &m.fields {
            buf.extend_from_slice(f.as_bytes());
        }
        let mut at = 0;
        while at < buf.len() {
            // std's TcpStream::write is send(2) with MSG_NOSIGNAL on Linux.
            match sock.write(&buf[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    at += n;
                    out.calls += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        out.messages += 1;
        out.wire_bytes += buf.len() as u64;
    }
    Ok(out)
}

/// Sends every byte of `parts` with `sendmsg`, resuming after short sends.
/// Returns the number of calls that moved bytes (for MSG_ZEROCOPY: the send
/// ids consumed). `on_nobufs` runs when a zerocopy send hits the socket's
/// option-memory limit (ENOBUFS); it should reap completions.
fn sendmsg_all<const N: usize>(
    sock: &TcpStream,
    mut parts: [&[u8]; N],
    zerocopy: bool,
    mut on_nobufs: impl FnMut() -> io::Result<()>,
) -> io::Result<u32> {
    let fd = sock.as_fd();
    let mut first = 0;
    while first < N && parts[first].is_empty() {
        first += 1;
    }
    let mut calls = 0;
    while first < N {
        let iov: [IoSlice<'_>; N] = std::array::from_fn(|i| IoSlice::new(parts[i]));
        let mut n = match sys::sendmsg(fd, &iov[first..], zerocopy) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if zerocopy && e.raw_os_error() == Some(libc::ENOBUFS) => {
                on_nobufs()?;
                continue;
            }
            Err(e) => return Err(e),
        };
        calls += 1;
        while first < N && n >= parts[first].len() {
            n -= parts[first].len();
            first += 1;
        }
        if first < N {
            parts[first] = &parts[first][n..];
        }
    }
    Ok(calls)
}

fn field_parts(m: &Message) -> [&[u8]; FIELDS] {
    std::array::from_fn(|j| m.fields[j].as_bytes())
}

/// A2: one `sendmsg(2)` per message with an iovec over its eight fields.
fn send_a2(sock: &mut TcpStream, pool: &[Message], stop: &AtomicBool) -> io::Result<Sent> {
    let mut out = Sent::default();
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        let m = &pool[next(&mut k, pool.len())];
        out.calls += u64::from(sendmsg_all(sock, field_parts(m), false, || Ok(()))?);
        out.messages += 1;
        out.wire_bytes += m.fields.iter().map(|f| f.len() as u64).sum::<u64>();
    }
    Ok(out)
}

/// Zerocopy bookkeeping of one socket: which send ids the kernel has
/// released, and which messages are still pinned.
#[derive(Debug, Default)]
pub struct ZcTracker {
    /// Id the next successful MSG_ZEROCOPY call will get.
    next_id: u32,
    /// Every id below this one is complete.
    done_below: u32,
    /// Completed ranges above `done_below`, sorted.
    pending: Vec<(u32, u32)>,
    /// Last send id of each message still in flight, oldest first.
    inflight: VecDeque<u32>,
    scratch: Vec<sys::ZcRange>,
    /// Ids reported complete.
    pub completed: u64,
    /// Ids reported complete but copied by the kernel.
    pub copied: u64,
}

impl ZcTracker {
    /// A message went out in `calls` MSG_ZEROCOPY calls.
    pub fn sent(&mut self, calls: u32) {
        self.next_id = self.next_id.wrapping_add(calls);
        if calls > 0 {
            self.inflight.push_back(self.next_id.wrapping_sub(1));
        }
    }

    /// Messages whose buffers the kernel may still read.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Applies one completion range.
    pub fn complete(&mut self, r: sys::ZcRange) {
        let n = u64::from(r.hi.wrapping_sub(r.lo)) + 1;
        self.completed += n;
        if r.copied {
            self.copied += n;
        }
        if r.lo == self.done_below {
            self.done_below = r.hi.wrapping_add(1);
        } else {
            let at = self.pending.partition_point(|p| p.0 < r.lo);
            self.pending.insert(at, (r.lo, r.hi));
        }
        while let Some(&(lo, hi)) = self.pending.first() {
            if lo != self.done_below {
                break;
            }
            self.done_below = hi.wrapping_add(1);
            self.pending.remove(0);
        }
        while let Some(&last) = self.inflight.front() {
            if last >= self.done_below {
                break;
            }
            self.inflight.pop_front();
        }
    }

    /// Reaps whatever completions are queued, without blocking.
    pub fn reap(&mut self, sock: &TcpStream) -> io::Result<()> {
        let mut got = std::mem::take(&mut self.scratch);
        got.clear();
        let r = sys::read_zc_completions(sock.as_fd(), &mut got);
        for &c in &got {
            self.complete(c);
        }
        self.scratch = got;
        r
    }

    /// Waits for at least one new completion (the answer to ENOBUFS: the
    /// socket's option memory is full of unreaped notifications); fails after
    /// `timeout`.
    pub fn wait_any(&mut self, sock: &TcpStream, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let before = self.completed;
        loop {
            self.reap(sock)?;
            if self.completed > before {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "sendmsg(MSG_ZEROCOPY) kept failing with ENOBUFS for {:.1} s",
                        timeout.as_secs_f64()
                    ),
                ));
            }
            sys::wait_error_queue(sock.as_fd(), left.min(Duration::from_millis(50)))?;
        }
    }

    /// Reaps completions until at most `max` messages are in flight, waiting
    /// on the error queue; fails after `timeout`.
    pub fn wait_until(&mut self, sock: &TcpStream, max: usize, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap(sock)?;
            if self.in_flight() <= max {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} zerocopy completions still outstanding after {:.1} s",
                        self.in_flight(),
                        timeout.as_secs_f64()
                    ),
                ));
            }
            sys::wait_error_queue(sock.as_fd(), left.min(Duration::from_millis(50)))?;
        }
    }
}

/// A3: `sendmsg(MSG_ZEROCOPY)` per message; at most `zc_inflight` messages
/// await their completion, and a message's fields are not reused before it.
fn send_a3(sock: &mut TcpStream, pool: &[Message], opts: SendConfig, stop: &AtomicBool) -> io::Result<Sent> {
    let mut out = Sent::default();
    let mut zc = ZcTracker::default();
    let max = opts.zc_inflight.max(1);
    let mut k = 0;
    let result = (|| {
        while !stop.load(Ordering::Relaxed) {
            if zc.in_flight() >= max {
                // Reap down to half the bound: one wait per max/2 messages.
                zc.wait_until(sock, max / 2, opts.timeout)?;
            }
            let m = &pool[next(&mut k, pool.len())];
            let calls = {
                let zc = &mut zc;
                let sock_ref: &TcpStream = sock;
                sendmsg_all(sock_ref, field_parts(m), true, || {
                    zc.wait_any(sock_ref, opts.timeout)
                })?
            };
            zc.sent(calls);
            out.calls += u64::from(calls);
            out.messages += 1;
            out.wire_bytes += m.fields.iter().map(|f| f.len() as u64).sum::<u64>();
        }
        Ok::<(), io::Error>(())
    })();
    // Whatever happened, do not let the pool go while the kernel holds it.
    let drained = zc.wait_until(sock, 0, opts.timeout);
    out.zc_completed = zc.completed;
    out.zc_copied = zc.copied;
    result?;
    drained?;
    Ok(out)
}

/// A4: the same messages batched into PFS-With-Payload grams: fields are
/// appended to a payload slab, one descriptor per field (absolute encoding by
/// default) points into it, and each gram leaves in one vectored write.
fn send_a4(sock: &mut TcpStream, pool: &[Message], opts: SendConfig, stop: &AtomicBool) -> io::Result<Sent> {
    let batch = opts.gram_msgs.max(1);
    let mut slab: Vec<u8> = Vec::with_capacity(batch * opts.size);
    let mut table = TableWriter::new(opts.gram_encoding, batch * FIELDS);
    let mut out = Sent::default();
    let mut k = 0;
    while !stop.load(Ordering::Relaxed) {
        slab.clear();
        table.clear();
        for _ in 0..batch {
            let m = &pool[next(&mut k, pool.len())];
            let start = slab.len();
            for f in &m.fields {
                if opts.descs_per_msg == FIELDS {
                    let d = Descriptor {
                        offset: slab.len() as u64,
                        len: f.len() as u32,
                    };
                    table
                        .push(d)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                }
                slab.extend_from_slice(f.as_bytes());
            }
            if opts.descs_per_msg != FIELDS {
                // One descriptor for the message's consolidated fields, as A1 sends them.
                let d = Descriptor {
                    offset: start as u64,
                    len: (slab.len() - start) as u32,
                };
                table
                    .push(d)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            }
        }
        let gram = GramHeader {
            seq: out.grams,
            desc_count: table.count(),
            table_len: table.as_bytes().len() as u32,
            payload_len: slab.len() as u32,
            encoding: opts.gram_encoding,
            integrity: IntegrityAlg::None,
            flags: GRAM_FLAG_PAYLOAD,
            integrity_value: 0,
        };
        let body_len = gram.body_len();
        let frame = FrameHeader {
            frame_type: FrameType::Gram,
            flags: 0,
            length: u32::try_from(body_len)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "gram too large"))?,
        };
        let (fh, gh) = (frame.emit(), gram.emit());
        out.calls += u64::from(sendmsg_all(
            sock,
            [&fh[..], &gh[..], table.as_bytes(), &slab],
            false,
            || Ok(()),
        )?);
        out.messages += batch as u64;
        out.wire_bytes += FRAME_HEADER_LEN as u64 + body_len;
        out.grams += 1;
    }
    Ok(out)
}

/// Reads until end of stream, counting bytes (A1–A3).
pub fn receive_bytes(sock: &mut TcpStream, buf: &mut [u8], size: usize) -> io::Result<Received> {
    let mut out = Received::default();
    loop {
        match sock.read(buf) {
            Ok(0) => break,
            Ok(n) => out.wire_bytes += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out.logical_bytes = out.wire_bytes;
    out.messages = out.wire_bytes / size as u64;
    if out.wire_bytes % size as u64 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("stream ended mid-message ({} bytes)", out.wire_bytes),
        ));
    }
    Ok(out)
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Reads grams until end of stream (A4): checks each frame and gram header,
/// walks the descriptor table, bounds-checks every descriptor against the
/// gram's own slab and counts messages (eight descriptors each).
pub fn receive_grams(sock: &mut TcpStream, buf: &mut [u8], descs_per_msg: usize) -> io::Result<Received> {
    let descs_per_msg = descs_per_msg.max(1) as u64;
    let mut out = Received::default();
    let (mut start, mut have) = (0usize, 0usize);
    loop {
        // Bytes from `start` the next frame needs before it can be parsed.
        let mut need = FRAME_HEADER_LEN;
        loop {
            let avail = &buf[start..have];
            if avail.len() < FRAME_HEADER_LEN {
                break;
            }
            let fh = FrameHeader::parse(avail).map_err(|e| bad(format!("frame header: {e}")))?;
            if fh.frame_type != FrameType::Gram {
                return Err(bad(format!("unexpected {} frame", fh.frame_type.name())));
            }
            let total = FRAME_HEADER_LEN + fh.length as usize;
            if total > buf.len() {
                return Err(bad(format!("gram of {total} bytes exceeds the receive buffer")));
            }
            if avail.len() < total {
                need = total;
                break;
            }
            let gram = Gram::parse(&avail[FRAME_HEADER_LEN..total]).map_err(|e| bad(format!("gram: {e}")))?;
            if gram.header.seq != out.grams {
                return Err(bad(format!(
                    "gram seq {} where {} was due",
                    gram.header.seq, out.grams
                )));
            }
            let slab = gram.payload;
            let mut descs = 0u64;
            for d in gram.descriptors() {
                let d = d.map_err(|e| bad(format!("descriptor table: {e}")))?;
                let field = d
                    .end()
                    .and_then(|end| slab.get(d.offset as usize..usize::try_from(end).ok()?))
                    .ok_or_else(|| {
                        bad(format!(
                            "descriptor {}+{} outside the {}-byte slab",
                            d.offset,
                            d.len,
                            slab.len()
                        ))
                    })?;
                std::hint::black_box(field);
                out.logical_bytes += u64::from(d.len);
                descs += 1;
            }
            if descs.checked_rem(descs_per_msg) != Some(0) {
                return Err(bad(format!(
                    "{descs} descriptors is not a whole number of messages"
                )));
            }
            out.messages += descs / descs_per_msg;
            out.grams += 1;
            start += total;
        }
        // Move the partial frame to the front only when it would not fit
        // where it is: at most one partial gram is copied per buffer's worth.
        if start == have {
            (start, have) = (0, 0);
        } else if start + need > buf.len() {
            buf.copy_within(start..have, 0);
            have -= start;
            start = 0;
        }
        match sock.read(&mut buf[have..]) {
            Ok(0) if have == start => break,
            Ok(0) => {
                return Err(bad(format!(
                    "stream ended inside a gram ({} bytes left)",
                    have - start
                )))
            }
            Ok(n) => {
                have += n;
                out.wire_bytes += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lengths_sum_to_size() {
        for size in [8, 9, 15, 64, 1000, 65536] {
            let l = field_lens(size);
            assert_eq!(l.iter().sum::<usize>(), size);
            assert!(l.iter().max().unwrap() - l.iter().min().unwrap() <= 1);
        }
        let pool = message_pool(3, 100, 4);
        assert_eq!(pool.len(), 4);
        assert!(pool
            .iter()
            .all(|m| m.fields.iter().map(String::len).sum::<usize>() == 100));
    }

    #[test]
    fn tracker_handles_out_of_order_ranges() {
        let mut t = ZcTracker::default();
        for _ in 0..4 {
            t.sent(1);
        }
        t.sent(2); // one message, ids 4 and 5
        assert_eq!(t.in_flight(), 5);
        t.complete(sys::ZcRange {
            lo: 2,
            hi: 3,
            copied: true,
        });
        assert_eq!(t.in_flight(), 5);
        t.complete(sys::ZcRange {
            lo: 0,
            hi: 1,
            copied: false,
        });
        assert_eq!(t.in_flight(), 1);
        t.complete(sys::ZcRange {
            lo: 4,
            hi: 4,
            copied: true,
        });
        assert_eq!(t.in_flight(), 1);
        t.complete(sys::ZcRange {
            lo: 5,
            hi: 5,
            copied: true,
        });
        assert_eq!(t.in_flight(), 0);
        assert_eq!((t.completed, t.copied), (6, 4));
    }
}
