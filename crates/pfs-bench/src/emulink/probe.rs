//! A UDP probe across an emulated link: numbered, time-stamped datagrams
//! from namespace A to an echo in namespace B and back. Both ends are
//! threads of this process reading one monotonic clock, so each datagram
//! gives both one-way delays and the round trip — what the header prints
//! as the link's delay accuracy, and what the link's tests check (every
//! datagram arrives when nothing is lost; none is faster than the delay).

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{EmuLink, RECEIVER_IP, SENDER_IP};

/// Bytes of a probe datagram: sequence, send time, echo time, padding.
const PROBE_LEN: usize = 100;

/// What a probe measured.
#[derive(Debug, Clone, Default)]
pub struct ProbeReport {
    /// Datagrams sent from A.
    pub sent: u32,
    /// The one-way delay (A → B) of each datagram the echo received.
    pub forward: Vec<Duration>,
    /// The one-way delay (B → A) of each echo A received.
    pub back: Vec<Duration>,
    /// The round trip of each echo A received.
    pub rtt: Vec<Duration>,
}

/// Min, mean and max of `v`.
pub fn min_mean_max(v: &[Duration]) -> Option<(Duration, Duration, Duration)> {
    let min = *v.iter().min()?;
    let max = *v.iter().max()?;
    let mean = v.iter().sum::<Duration>() / v.len() as u32;
    Some((min, mean, max))
}

impl ProbeReport {
    /// `rtt min/avg/max 50.1/50.2/50.9 ms (200 of 200 back); A→B … ; B→A …`.
    pub fn summary(&self) -> String {
        let mma = |v: &[Duration]| match min_mean_max(v) {
            Some((a, b, c)) => format!(
                "{:.3}/{:.3}/{:.3} ms",
                a.as_secs_f64() * 1e3,
                b.as_secs_f64() * 1e3,
                c.as_secs_f64() * 1e3
            ),
            None => "—".into(),
        };
        format!(
            "rtt min/avg/max {} ({} of {} echoes back); one way A→B {}, B→A {}",
            mma(&self.rtt),
            self.rtt.len(),
            self.sent,
            mma(&self.forward),
            mma(&self.back)
        )
    }
}

fn enter(ns: &str) -> io::Result<()> {
    let target = std::fs::File::open(format!("/run/netns/{ns}"))?;
    rustix::thread::move_into_link_name_space(
        target.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )?;
    Ok(())
}

fn nanos(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

fn field(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Sends `count` datagrams `gap` apart from A to an echo in B, then waits
/// for the echoes for twice the link's round trip plus half a second.
/// Bounded: at most `count × gap` + that wait.
pub fn udp_probe(link: &EmuLink, count: u32, gap: Duration) -> anyhow::Result<ProbeReport> {
    let (a_ns, b_ns) = link.namespaces();
    let grace = link.spec().rtt.unwrap_or_default() * 2 + Duration::from_millis(500);
    let base = Instant::now();
    let stop = AtomicBool::new(false);
    let (port_tx, port_rx) = mpsc::channel();
    std::thread::scope(|s| -> anyhow::Result<ProbeReport> {
        let stop = &stop;
        let echo = s.spawn(move || -> io::Result<Vec<Duration>> {
            let setup = || -> io::Result<UdpSocket> {
                enter(b_ns)?;
                let sock = UdpSocket::bind((RECEIVER_IP, 0))?;
                sock.set_read_timeout(Some(Duration::from_millis(10)))?;
                Ok(sock)
            };
            let sock = match setup() {
                Ok(sock) => {
                    let _ = port_tx.send(sock.local_addr().map(|a| a.port()));
                    sock
                }
                Err(e) => {
                    let _ = port_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            let mut forward = Vec::new();
            let mut buf = [0u8; PROBE_LEN];
            while !stop.load(Ordering::Relaxed) {
                match sock.recv_from(&mut buf) {
                    Ok((PROBE_LEN, from)) => {
                        let now = nanos(base);
                        forward.push(Duration::from_nanos(now.saturating_sub(field(&buf, 8))));
                        buf[16..24].copy_from_slice(&now.to_le_bytes());
                        sock.send_to(&buf, from)?;
                    }
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(forward)
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the probe's echo did not start")?
            .context("starting the probe's echo in namespace B")?;
        let client = s.spawn(move || -> io::Result<(Vec<Duration>, Vec<Duration>)> {
            enter(a_ns)?;
            let sock = UdpSocket::bind((SENDER_IP, 0))?;
            sock.connect((RECEIVER_IP, port))?;
            let (mut back, mut rtt) = (Vec::new(), Vec::new());
            let mut buf = [0u8; PROBE_LEN];
            let mut receive_until = |deadline: Instant,
                                     back: &mut Vec<Duration>,
                                     rtt: &mut Vec<Duration>|
             -> io::Result<()> {
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    sock.set_read_timeout(Some(left.max(Duration::from_micros(1))))?;
                    match sock.recv(&mut buf) {
                        Ok(PROBE_LEN) => {
                            let now = nanos(base);
                            back.push(Duration::from_nanos(now.saturating_sub(field(&buf, 16))));
                            rtt.push(Duration::from_nanos(now.saturating_sub(field(&buf, 8))));
                        }
                        Ok(_) => {}
                        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        }
                        // An ICMP error from an earlier datagram: keep going.
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                        Err(e) => return Err(e),
                    }
                }
            };
            let start = Instant::now();
            let mut out = [0u8; PROBE_LEN];
            for seq in 0..count {
                out[..4].copy_from_slice(&seq.to_le_bytes());
                out[8..16].copy_from_slice(&nanos(base).to_le_bytes());
                sock.send(&out)?;
                receive_until(start + gap * (seq + 1), &mut back, &mut rtt)?;
            }
            let deadline = Instant::now() + grace;
            while rtt.len() < count as usize && Instant::now() < deadline {
                receive_until(
                    deadline.min(Instant::now() + Duration::from_millis(10)),
                    &mut back,
                    &mut rtt,
                )?;
            }
            Ok((back, rtt))
        });
        let sent = client.join();
        // The echo may still be answering the last datagrams: they were
        // counted as they arrived, and the client has stopped listening.
        stop.store(true, Ordering::Relaxed);
        let forward = echo
            .join()
            .map_err(|_| anyhow::anyhow!("the probe's echo panicked"))?
            .context("the probe's echo in namespace B")?;
        let (back, rtt) = sent
            .map_err(|_| anyhow::anyhow!("the probe's sender panicked"))?
            .context("the probe's sender in namespace A")?;
        Ok(ProbeReport {
            sent: count,
            forward,
            back,
            rtt,
        })
    })
}
