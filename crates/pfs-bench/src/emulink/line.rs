//! The delay line: one thread per direction reads packets from one TUN
//! device and writes each into the other once its one-way delay has
//! passed. Packets wait in a FIFO of preallocated slots (no allocation per
//! packet; a packet is read straight into its slot and written from it);
//! the thread sleeps in `ppoll` until the input is readable or the oldest
//! packet is due, then reads every packet waiting (up to a batch, at most
//! one batch per [`READ_INTERVAL`]), stamps the batch with the time its
//! last packet was read, and writes every packet due. The FIFO is bounded: a packet that finds it
//! full is read and dropped, and counted (`overflow`).
//!
//! With a rate cap ([`Shaper`]), each packet goes through a [`Serializer`]
//! as it is read: it leaves the cap once the packets before it have, at
//! the rate, and is due its delay after that; a packet that would find
//! more than the cap's queue limit ahead of it is dropped and counted
//! (`queue_drops`), as a router's drop-tail output queue does.
//!
//! A TUN device has no batched read or write: each packet is one `read(2)`
//! and one `write(2)`. The write injects the packet into the receiving
//! namespace's stack on this thread (`netif_receive_skb`), so the line's
//! CPU time includes the receiver's IP and TCP input processing.

use std::io;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::tun::Tun;

/// Bytes per slot for a link of `mtu`: one more than the MTU, rounded up
/// to 64, so a packet longer than the MTU (a leaked offload) shows as a
/// length above it instead of fitting silently.
pub fn slot_len(mtu: u32) -> usize {
    (mtu as usize + 1).div_ceil(64) * 64
}

/// Packets read per wake-up before the due ones are written again.
const READ_BATCH: usize = 256;

/// The shortest time between two read batches. Reading as soon as the
/// device is readable wakes the thread once per packet (measured here:
/// 20 µs of CPU per packet at 500 Mbit/s); gathering 100 µs of packets per
/// wake-up halves that. A packet waits at most this long in the device
/// before its delay starts: it is never early, at most this much late.
pub const READ_INTERVAL: Duration = Duration::from_micros(100);

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    }
}

/// The rate cap both directions apply, changed while the lines run (the
/// ceiling is measured with it lifted). Read once per batch.
#[derive(Debug, Default)]
pub struct Shaper {
    bytes_per_s: AtomicU64,
    limit: AtomicU64,
}

impl Shaper {
    /// Sets the rate (bytes per second, 0 = no cap) and the queue limit.
    pub fn set(&self, bytes_per_s: u64, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        self.bytes_per_s.store(bytes_per_s, Ordering::Relaxed);
    }

    fn get(&self) -> (u64, u64) {
        (
            self.bytes_per_s.load(Ordering::Relaxed),
            self.limit.load(Ordering::Relaxed),
        )
    }
}

/// A link's output port: packets leave one after another at a rate, and
/// wait in a drop-tail queue of bounded bytes. Pure arithmetic on instants.
#[derive(Debug, Clone, Copy)]
pub struct Serializer {
    busy_until: Instant,
}

impl Serializer {
    /// An idle port.
    pub fn new(now: Instant) -> Self {
        Serializer { busy_until: now }
    }

    /// A packet of `len` bytes arrives at `now`: when its last byte leaves
    /// at `bytes_per_s`, or `None` if more than `limit` bytes (it included)
    /// would be waiting, and it is dropped.
    pub fn admit(&mut self, now: Instant, len: u64, bytes_per_s: u64, limit: u64) -> Option<Instant> {
        let rate = u128::from(bytes_per_s.max(1));
        let backlog = self.busy_until.saturating_duration_since(now).as_nanos();
        let queued = (backlog * rate / 1_000_000_000) as u64;
        if queued + len > limit {
            return None;
        }
        let tx = Duration::from_nanos((u128::from(len) * 1_000_000_000 / rate) as u64);
        self.busy_until = self.busy_until.max(now) + tx;
        Some(self.busy_until)
    }
}

/// The shortest sleep before the next release: a packet is written at
/// most this much after it is due (counted as late), together with every
/// other packet due by then.
pub const RELEASE_INTERVAL: Duration = Duration::from_micros(100);

/// The longest sleep: how soon a stop request is seen.
const IDLE: Duration = Duration::from_millis(20);

/// The packets one direction holds: a ring of `slots` preallocated slots of
/// `slot_len` bytes, each with its length and release time. Pure data
/// structure, no I/O.
#[derive(Debug)]
pub struct Fifo {
    bytes: Vec<u8>,
    slot_len: usize,
    lens: Vec<u16>,
    due: Vec<Instant>,
    head: usize,
    len: usize,
}

impl Fifo {
    /// A ring of `slots` slots of `slot_len` bytes (at most 65 535), all allocated now.
    pub fn new(slots: usize, slot_len: usize) -> Fifo {
        let slots = slots.max(1);
        let slot_len = slot_len.clamp(1, usize::from(u16::MAX));
        Fifo {
            bytes: vec![0; slots * slot_len],
            slot_len,
            lens: vec![0; slots],
            due: vec![Instant::now(); slots],
            head: 0,
            len: 0,
        }
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no packet is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every slot holds a packet.
    pub fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    /// The free slot the next packet is read into; `None` when full.
    pub fn tail_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let i = (self.head + self.len) % self.capacity();
        Some(&mut self.bytes[i * self.slot_len..(i + 1) * self.slot_len])
    }

    /// Keeps the first `len` bytes of the tail slot as a packet due at `due`.
    /// Ignored when full.
    pub fn push(&mut self, len: usize, due: Instant) {
        if self.is_full() {
            return;
        }
        let i = (self.head + self.len) % self.capacity();
        self.lens[i] = len.min(self.slot_len) as u16;
        self.due[i] = due;
        self.len += 1;
    }

    /// Sets the release time of the `n` newest packets (at most all held).
    pub fn restamp_last(&mut self, n: usize, due: Instant) {
        for k in self.len - n.min(self.len)..self.len {
            let i = (self.head + k) % self.capacity();
            self.due[i] = due;
        }
    }

    /// The oldest packet and its release time.
    pub fn front(&self) -> Option<(&[u8], Instant)> {
        if self.is_empty() {
            return None;
        }
        let i = self.head;
        let start = i * self.slot_len;
        Some((&self.bytes[start..start + usize::from(self.lens[i])], self.due[i]))
    }

    /// Forgets the oldest packet.
    pub fn pop(&mut self) {
        if self.is_empty() {
            return;
        }
        self.head = (self.head + 1) % self.capacity();
        self.len -= 1;
    }
}

/// What one direction's thread counts. Written by that thread only
/// (`Relaxed`: each is a counter read for a report, never to order
/// anything); peaks are reset by [`LineStats::take_peaks`].
#[derive(Debug, Default)]
pub struct LineStats {
    in_packets: AtomicU64,
    in_bytes: AtomicU64,
    out_packets: AtomicU64,
    out_bytes: AtomicU64,
    overflow: AtomicU64,
    queue_drops: AtomicU64,
    errors: AtomicU64,
    late_sum_ns: AtomicU64,
    late_over_1ms: AtomicU64,
    cpu_us: AtomicU64,
    max_len: AtomicU64,
    late_max_ns: AtomicU64,
    queue_max: AtomicU64,
    realtime: AtomicBool,
}

/// A snapshot of [`LineStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LineCounters {
    /// Packets read from the sending side's device.
    pub in_packets: u64,
    /// Their bytes (IP headers included).
    pub in_bytes: u64,
    /// Packets written into the receiving side's device.
    pub out_packets: u64,
    /// Their bytes.
    pub out_bytes: u64,
    /// Packets dropped because every slot was taken.
    pub overflow: u64,
    /// Packets the rate cap dropped: its queue was full (congestion).
    pub queue_drops: u64,
    /// Reads or writes that failed (packet lost).
    pub errors: u64,
    /// Sum over written packets of how late they were written, ns.
    pub late_sum_ns: u64,
    /// Packets written more than 1 ms after their release time.
    pub late_over_1ms: u64,
    /// The thread's CPU time (user + system), µs, sampled every 250 ms.
    pub cpu_us: u64,
    /// Largest packet read (bytes): at most the MTU, or offloads leaked through.
    pub max_len: u64,
    /// Latest write after a packet's release time, ns (since the last peak reset).
    pub late_max_ns: u64,
    /// Most packets held at once (since the last peak reset).
    pub queue_max: u64,
}

impl LineCounters {
    /// The counts since `earlier` (peaks are taken as they are).
    pub fn since(&self, earlier: &LineCounters) -> LineCounters {
        LineCounters {
            in_packets: self.in_packets - earlier.in_packets,
            in_bytes: self.in_bytes - earlier.in_bytes,
            out_packets: self.out_packets - earlier.out_packets,
            out_bytes: self.out_bytes - earlier.out_bytes,
            overflow: self.overflow - earlier.overflow,
            queue_drops: self.queue_drops - earlier.queue_drops,
            errors: self.errors - earlier.errors,
            late_sum_ns: self.late_sum_ns - earlier.late_sum_ns,
            late_over_1ms: self.late_over_1ms - earlier.late_over_1ms,
            cpu_us: self.cpu_us.saturating_sub(earlier.cpu_us),
            ..*self
        }
    }

    /// Mean lateness of a written packet, µs.
    pub fn late_mean_us(&self) -> f64 {
        if self.out_packets == 0 {
            0.0
        } else {
            self.late_sum_ns as f64 / self.out_packets as f64 / 1e3
        }
    }
}

impl LineStats {
    /// The current counts.
    pub fn snapshot(&self) -> LineCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LineCounters {
            in_packets: g(&self.in_packets),
            in_bytes: g(&self.in_bytes),
            out_packets: g(&self.out_packets),
            out_bytes: g(&self.out_bytes),
            overflow: g(&self.overflow),
            queue_drops: g(&self.queue_drops),
            errors: g(&self.errors),
            late_sum_ns: g(&self.late_sum_ns),
            late_over_1ms: g(&self.late_over_1ms),
            cpu_us: g(&self.cpu_us),
            max_len: g(&self.max_len),
            late_max_ns: g(&self.late_max_ns),
            queue_max: g(&self.queue_max),
        }
    }

    /// Whether the thread runs at real-time priority.
    pub fn realtime(&self) -> bool {
        self.realtime.load(Ordering::Relaxed)
    }

    /// Resets the peaks (largest packet, latest write, deepest queue).
    pub fn take_peaks(&self) {
        self.max_len.store(0, Ordering::Relaxed);
        self.late_max_ns.store(0, Ordering::Relaxed);
        self.queue_max.store(0, Ordering::Relaxed);
    }

    fn add(a: &AtomicU64, v: u64) {
        a.fetch_add(v, Ordering::Relaxed);
    }

    fn peak(a: &AtomicU64, v: u64) {
        a.fetch_max(v, Ordering::Relaxed);
    }
}

/// One direction: from `input` to `output` after `delay`.
#[derive(Debug)]
pub struct Line {
    /// Read side.
    pub input: Arc<Tun>,
    /// Write side.
    pub output: Arc<Tun>,
    /// One-way delay.
    pub delay: Duration,
    /// Packet slots.
    pub slots: usize,
    /// The rate cap, if one is set.
    pub shaper: Arc<Shaper>,
    /// Bytes per slot ([`slot_len`]).
    pub slot_len: usize,
    /// What it counts.
    pub stats: Arc<LineStats>,
    /// Set to end the thread.
    pub stop: Arc<AtomicBool>,
    /// Real-time (`SCHED_FIFO`) priority for the thread, if any: a link's
    /// delay must not depend on how busy the hosts' CPUs are.
    pub realtime: Option<u32>,
}

impl Line {
    /// Moves packets until `stop` is set; returns the first error of the
    /// input device (a vanished device), if any.
    pub fn run(self) -> io::Result<()> {
        // The default 50 µs of timer slack would be added to every wake-up.
        let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1_000));
        if let Some(prio) = self.realtime {
            // chrt(1) on this thread's id: no unsafe sched_setscheduler here.
            let tid = rustix::thread::gettid().as_raw_nonzero().to_string();
            let ok = std::process::Command::new("chrt")
                .args(["-f", "-p", &prio.to_string(), &tid])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            self.stats.realtime.store(ok, Ordering::Relaxed);
        }
        let mut fifo = Fifo::new(self.slots, self.slot_len);
        let mut scratch = vec![0u8; self.slot_len];
        let stats = &*self.stats;
        let mut next_cpu = Instant::now();
        let mut next_read = Instant::now();
        let mut port = Serializer::new(Instant::now());
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next_cpu {
                let u = pfs_sys::thread_usage();
                stats.cpu_us.store(u.user_us + u.sys_us, Ordering::Relaxed);
                next_cpu = now + Duration::from_millis(250);
            }
            // Release every packet that is due, oldest first.
            while let Some((pkt, due)) = fifo.front() {
                if due > now {
                    break;
                }
                match rustix::io::write(&self.output, pkt) {
                    Ok(_) => {
                        LineStats::add(&stats.out_packets, 1);
                        LineStats::add(&stats.out_bytes, pkt.len() as u64);
                    }
                    Err(_) => LineStats::add(&stats.errors, 1),
                }
                let late = now.duration_since(due).as_nanos() as u64;
                LineStats::add(&stats.late_sum_ns, late);
                if late > 1_000_000 {
                    LineStats::add(&stats.late_over_1ms, 1);
                }
                LineStats::peak(&stats.late_max_ns, late);
                fifo.pop();
            }
            // Sleep at least the release interval: packets leaving the rate
            // cap are due one per packet time (24 µs at 500 Mbit/s), and a
            // wake-up for each cost this real-time thread most of a core,
            // taken from the hosts it carries.
            let due_in = fifo
                .front()
                .map(|(_, due)| due.saturating_duration_since(now).max(RELEASE_INTERVAL));
            if now < next_read {
                // Reading again at once would wake this thread once per
                // packet: sleep to the read interval (or the next release).
                let wait = (next_read - now).min(due_in.unwrap_or(IDLE));
                let _ = poll(&mut [], Some(&timespec(wait)));
                continue;
            }
            let wait = due_in.unwrap_or(IDLE).min(IDLE);
            let mut fds = [PollFd::new(&self.input, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec(wait))) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if fds[0]
                .revents()
                .intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL)
            {
                return Err(io::Error::other("the input TUN device went away"));
            }
            let (rate, limit) = self.shaper.get();
            let mut kept = 0;
            for _ in 0..READ_BATCH {
                let (buf, keep) = match fifo.tail_slot() {
                    Some(slot) => (slot, true),
                    None => (&mut scratch[..], false),
                };
                match rustix::io::read(&self.input, buf) {
                    Ok(n) => {
                        LineStats::add(&stats.in_packets, 1);
                        LineStats::add(&stats.in_bytes, n as u64);
                        LineStats::peak(&stats.max_len, n as u64);
                        if !keep {
                            LineStats::add(&stats.overflow, 1);
                        } else if rate > 0 {
                            // It arrived before this instant: never early.
                            let read_at = Instant::now();
                            match port.admit(read_at, n as u64, rate, limit) {
                                Some(leaves) => fifo.push(n, leaves + self.delay),
                                None => LineStats::add(&stats.queue_drops, 1),
                            }
                        } else {
                            // Stamped below, once the batch is read.
                            fifo.push(n, now);
                            kept += 1;
                        }
                    }
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => {
                        LineStats::add(&stats.errors, 1);
                        break;
                    }
                }
            }
            // Every packet of the batch was in the device before this
            // instant: none leaves before its full delay.
            let read_at = Instant::now();
            fifo.restamp_last(kept, read_at + self.delay);
            LineStats::peak(&stats.queue_max, fifo.len() as u64);
            next_read = read_at + READ_INTERVAL;
        }
        let u = pfs_sys::thread_usage();
        stats.cpu_us.store(u.user_us + u.sys_us, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_keeps_order_and_bounds() {
        let t0 = Instant::now();
        let mut f = Fifo::new(3, 8);
        assert!(f.is_empty() && f.front().is_none());
        for i in 0..3u8 {
            let slot = f.tail_slot().unwrap();
            assert_eq!(slot.len(), 8);
            slot[..2].copy_from_slice(&[i, i]);
            f.push(2, t0 + Duration::from_millis(u64::from(i)));
        }
        assert!(f.is_full() && f.tail_slot().is_none());
        // Full: a push is ignored.
        f.push(1, t0);
        assert_eq!(f.len(), 3);
        assert_eq!(f.front().unwrap(), (&[0u8, 0][..], t0));
        f.pop();
        // Wraps around into the freed slot.
        f.tail_slot().unwrap()[..3].copy_from_slice(&[9, 9, 9]);
        f.push(3, t0 + Duration::from_millis(9));
        let mut seen = Vec::new();
        while let Some((p, _)) = f.front() {
            seen.push(p.to_vec());
            f.pop();
        }
        assert_eq!(seen, vec![vec![1, 1], vec![2, 2], vec![9, 9, 9]]);
        f.pop();
        assert!(f.is_empty());
    }

    #[test]
    fn serializer_paces_and_drops_at_the_limit() {
        let t0 = Instant::now();
        let mut port = Serializer::new(t0);
        // 1000 bytes/s: a 100-byte packet takes 100 ms; the queue holds 250 bytes.
        assert_eq!(
            port.admit(t0, 100, 1000, 250),
            Some(t0 + Duration::from_millis(100))
        );
        assert_eq!(
            port.admit(t0, 100, 1000, 250),
            Some(t0 + Duration::from_millis(200))
        );
        // 200 bytes wait: a third 100 would make 300 > 250.
        assert_eq!(port.admit(t0, 100, 1000, 250), None);
        // 150 ms later 50 bytes wait: it fits, behind them.
        let t1 = t0 + Duration::from_millis(150);
        assert_eq!(
            port.admit(t1, 100, 1000, 250),
            Some(t0 + Duration::from_millis(300))
        );
        // An idle port starts at the arrival.
        let t2 = t0 + Duration::from_secs(5);
        assert_eq!(
            port.admit(t2, 10, 1000, 250),
            Some(t2 + Duration::from_millis(10))
        );
    }

    #[test]
    fn counters_since() {
        let a = LineCounters {
            in_packets: 10,
            in_bytes: 1000,
            cpu_us: 5,
            max_len: 1500,
            ..LineCounters::default()
        };
        let b = LineCounters {
            in_packets: 15,
            in_bytes: 1600,
            out_packets: 4,
            late_sum_ns: 8_000,
            cpu_us: 9,
            max_len: 1400,
            ..LineCounters::default()
        };
        let d = b.since(&a);
        assert_eq!((d.in_packets, d.in_bytes, d.cpu_us, d.max_len), (5, 600, 4, 1400));
        assert_eq!(d.late_mean_us(), 2.0);
    }
}
