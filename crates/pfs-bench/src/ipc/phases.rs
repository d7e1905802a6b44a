//! The measurement protocol the two processes run over one [`Channel`]:
//! warm-up, latency (ping-pong), throughput (back to back) and idle, in that
//! order, over one connection. Generic over the channel type, so the timed
//! loops are monomorphic; they neither allocate nor fault in pages (sample
//! buffers are prefaulted) and run only the method's own calls, a time stamp
//! and an in-order check per message.
//!
//! Message layout (little endian): bytes 0..8 the sender's time stamp at
//! send, 8..16 a sequence number, byte 16 the phase tag; the rest is zero.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::methods::{Channel, MSG};
use super::stats::{prefaulted, summarize, LatencyStats};
use super::sys;

/// Ping-pongs before anything is recorded.
pub const WARMUP: u64 = 10_000;

/// Phase tags (byte 16).
const WARM: u8 = 1;
const LATENCY: u8 = 2;
const STREAM: u8 = 3;
const STREAM_DONE: u8 = 4;
const IDLE_END: u8 = 5;

#[inline(always)]
fn put(msg: &mut [u8; MSG], stamp: u64, seq: u64, tag: u8) {
    msg[0..8].copy_from_slice(&stamp.to_le_bytes());
    msg[8..16].copy_from_slice(&seq.to_le_bytes());
    msg[16] = tag;
}

#[inline(always)]
fn stamp(msg: &[u8; MSG]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&msg[0..8]);
    u64::from_le_bytes(b)
}

#[inline(always)]
fn seq(msg: &[u8; MSG]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&msg[8..16]);
    u64::from_le_bytes(b)
}

/// Fails unless `msg` is message `want_seq` of phase `want_tag`: catches a
/// channel that loses, splits or reorders messages.
#[inline(always)]
fn check(msg: &[u8; MSG], want_seq: u64, want_tag: u8) -> anyhow::Result<()> {
    if seq(msg) != want_seq || msg[16] != want_tag {
        return Err(out_of_order(msg, want_seq, want_tag));
    }
    Ok(())
}

#[cold]
fn out_of_order(msg: &[u8; MSG], want_seq: u64, want_tag: u8) -> anyhow::Error {
    anyhow::anyhow!(
        "message out of order: got sequence {} of phase {}, expected {want_seq} of phase {want_tag}",
        seq(msg),
        msg[16]
    )
}

/// What the server measured; the child prints it as one JSON line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerReport {
    /// The method's key.
    pub method: String,
    /// One way, client → server: server receive stamp − client send stamp, ticks.
    pub one_way: LatencyStats,
    /// Messages the server counted in the throughput phase.
    pub stream_messages: u64,
    /// Ticks from the first to the last throughput message's arrival.
    pub stream_first_to_last_ticks: u64,
    /// Wall time of the idle wait, seconds.
    pub idle_wall_s: f64,
    /// CPU time (user + system, getrusage RUSAGE_SELF) over the idle wait, seconds.
    pub idle_cpu_s: f64,
    /// The CPU the server ran on at the end.
    pub cpu: usize,
}

/// What the client measured.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// One way, server → client: client receive stamp − server send stamp, ticks.
    pub return_one_way: LatencyStats,
    /// Client receive stamp − client send stamp, ticks.
    pub round_trip: LatencyStats,
    /// Ticks from before the first throughput send to after the last.
    pub stream_send_ticks: u64,
    /// Wall time of the latency phase, seconds.
    pub latency_wall_s: f64,
    /// Wall time of the throughput phase (to the server's final reply), seconds.
    pub stream_wall_s: f64,
    /// The CPU the client ran on at the end.
    pub cpu: usize,
}

fn cpu_s() -> f64 {
    let u = pfs_sys::process_usage();
    (u.user_us + u.sys_us) as f64 / 1e6
}

/// The server side: answers every phase the client drives, then reports.
pub fn serve<C: Channel>(ch: &mut C, method: &str, n: u64) -> anyhow::Result<ServerReport> {
    let mut msg = [0u8; MSG];
    for i in 0..WARMUP {
        ch.recv(&mut msg)?;
        check(&msg, i, WARM)?;
        put(&mut msg, sys::ticks(), i, WARM);
        ch.send(&msg)?;
    }

    let mut one_way = prefaulted(n as usize);
    for (i, slot) in (0u64..).zip(one_way.iter_mut()) {
        ch.recv(&mut msg)?;
        *slot = sys::ticks().wrapping_sub(stamp(&msg)) as i64;
        check(&msg, i, LATENCY)?;
        put(&mut msg, sys::ticks(), i, LATENCY);
        ch.send(&msg)?;
    }

    ch.recv(&mut msg)?;
    let first = sys::ticks();
    check(&msg, 0, STREAM)?;
    // No time stamp per message: its LFENCE would serialise the receive
    // loop and measure the clock as much as the channel.
    for i in 1..n {
        ch.recv(&mut msg)?;
        check(&msg, i, STREAM)?;
    }
    let last = sys::ticks();
    put(&mut msg, sys::ticks(), n, STREAM_DONE);
    // Idle: the client sends nothing for a while; wait the method's way.
    // The window opens before STREAM_DONE leaves, so it holds the client's
    // whole pause even when this thread is descheduled right after the send.
    let cpu0 = cpu_s();
    let w0 = Instant::now();
    ch.send(&msg)?;
    ch.recv(&mut msg)?;
    let idle_wall_s = w0.elapsed().as_secs_f64();
    let idle_cpu_s = cpu_s() - cpu0;
    check(&msg, 0, IDLE_END)?;

    let Some(one_way) = summarize(&mut one_way) else {
        bail!("no latency samples");
    };
    Ok(ServerReport {
        method: method.to_string(),
        one_way,
        stream_messages: n,
        stream_first_to_last_ticks: last.wrapping_sub(first),
        idle_wall_s,
        idle_cpu_s,
        cpu: pfs_sys::current_cpu(),
    })
}

/// The client side: drives every phase; stays silent for `idle` in the last.
pub fn drive<C: Channel>(ch: &mut C, n: u64, idle: Duration) -> anyhow::Result<ClientReport> {
    let mut msg = [0u8; MSG];
    for i in 0..WARMUP {
        put(&mut msg, sys::ticks(), i, WARM);
        ch.send(&msg)?;
        ch.recv(&mut msg)?;
        check(&msg, i, WARM)?;
    }

    let mut ret = prefaulted(n as usize);
    let mut rt = prefaulted(n as usize);
    let t0 = Instant::now();
    for (i, (r, t)) in (0u64..).zip(ret.iter_mut().zip(rt.iter_mut())) {
        let sent = sys::ticks();
        put(&mut msg, sent, i, LATENCY);
        ch.send(&msg)?;
        ch.recv(&mut msg)?;
        let now = sys::ticks();
        *r = now.wrapping_sub(stamp(&msg)) as i64;
        *t = now.wrapping_sub(sent) as i64;
        check(&msg, i, LATENCY)?;
    }
    let latency_wall_s = t0.elapsed().as_secs_f64();

    let t0 = Instant::now();
    msg = [0u8; MSG];
    let s0 = sys::ticks();
    for i in 0..n {
        put(&mut msg, 0, i, STREAM);
        ch.send(&msg)?;
    }
    let s1 = sys::ticks();
    ch.recv(&mut msg)?;
    check(&msg, n, STREAM_DONE)?;
    let stream_wall_s = t0.elapsed().as_secs_f64();

    std::thread::sleep(idle);
    put(&mut msg, sys::ticks(), 0, IDLE_END);
    ch.send(&msg)?;

    let (Some(return_one_way), Some(round_trip)) = (summarize(&mut ret), summarize(&mut rt)) else {
        bail!("no latency samples");
    };
    Ok(ClientReport {
        return_one_way,
        round_trip,
        stream_send_ticks: s1.wrapping_sub(s0),
        latency_wall_s,
        stream_wall_s,
        cpu: pfs_sys::current_cpu(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Condvar, Mutex};

    /// An in-process channel pair (a queue each way), for checking the protocol.
    struct Mem {
        rx: Arc<(Mutex<VecDeque<[u8; MSG]>>, Condvar)>,
        tx: Arc<(Mutex<VecDeque<[u8; MSG]>>, Condvar)>,
    }

    impl Channel for Mem {
        fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()> {
            let (q, cv) = &*self.tx;
            q.lock().unwrap().push_back(*msg);
            cv.notify_one();
            Ok(())
        }

        fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
            let (q, cv) = &*self.rx;
            let mut q = q.lock().unwrap();
            loop {
                if let Some(m) = q.pop_front() {
                    *msg = m;
                    return Ok(());
                }
                q = cv.wait(q).unwrap();
            }
        }
    }

    #[test]
    fn both_sides_agree_on_the_protocol() {
        let a = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
        let b = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
        let mut client = Mem {
            rx: a.clone(),
            tx: b.clone(),
        };
        let mut server = Mem { rx: b, tx: a };
        let s = std::thread::spawn(move || serve(&mut server, "mem", 500).unwrap());
        let c = drive(&mut client, 500, Duration::from_millis(5)).unwrap();
        let s = s.join().unwrap();
        assert_eq!(s.one_way.count, 500);
        assert_eq!(s.stream_messages, 500);
        assert_eq!(c.return_one_way.count, 500);
        assert_eq!(c.round_trip.count, 500);
        assert!(c.round_trip.p50 > 0 && c.round_trip.p50 <= c.round_trip.p99);
        assert!(s.idle_wall_s >= 0.004, "{}", s.idle_wall_s);
        assert!(s.idle_cpu_s >= 0.0);
    }

    #[test]
    fn a_lost_message_is_an_error() {
        let mut m = [0u8; MSG];
        put(&mut m, 5, 7, LATENCY);
        assert_eq!(stamp(&m), 5);
        assert!(check(&m, 7, LATENCY).is_ok());
        let e = check(&m, 6, LATENCY).unwrap_err();
        assert!(e.to_string().contains("out of order"), "{e}");
        assert!(check(&m, 7, STREAM).is_err());
    }
}
