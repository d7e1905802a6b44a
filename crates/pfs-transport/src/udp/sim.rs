//! A simulated network for the UDP connection core: two [`Connection`]s,
//! a client and the server its OPEN creates, joined by a link with loss
//! (independent or in bursts), duplication, reordering, a one-way delay,
//! and a rate cap with a tail-drop queue — all in one thread, on a virtual
//! clock, from a seeded RNG. The same seed gives the same run, so tests
//! that use it are deterministic, and no test waits for real time.
//!
//! A [`Competitor`] can share the client → server queue: a window-based
//! flow that grows its window like TCP Reno and cuts it on loss (once per
//! window), to measure whether the connection leaves it a share.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use pfs_wire::datagram::{OpenRequest, PacketHeader, PacketType};

use super::conn::{Connection, ReadOutcome, UdpConfig, UdpStats};

/// One direction of the simulated link.
#[derive(Debug, Clone, Copy)]
pub struct SimLink {
    /// Probability that a datagram is lost, independently (0.0–1.0).
    pub loss: f64,
    /// Probability that the datagram after a lost one is lost too (bursts).
    pub burst: f64,
    /// Probability that a datagram is duplicated.
    pub duplicate: f64,
    /// Probability that a datagram is held back by up to `reorder_by`.
    pub reorder: f64,
    /// How far a reordered datagram may fall behind.
    pub reorder_by: Duration,
    /// One-way delay.
    pub delay: Duration,
    /// Bytes per second the link carries; 0 = no cap.
    pub rate: u64,
    /// Bytes the queue in front of the rate cap holds before it drops.
    pub queue: u64,
    /// Datagrams longer than this are dropped (a black hole for an MTU
    /// smaller than the datagrams); 0 = no limit.
    pub max_datagram: usize,
}

impl Default for SimLink {
    fn default() -> Self {
        Self {
            loss: 0.0,
            burst: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_by: Duration::ZERO,
            delay: Duration::from_millis(1),
            rate: 0,
            queue: 1 << 20,
            max_datagram: 0,
        }
    }
}

/// A loss-based flow beside the connection, in the client → server
/// direction: it shares the rate cap's queue and the random loss, grows
/// its window by one packet per round trip (per ACK in slow start) and
/// multiplies it by `beta` when it learns of a loss (one cut per window;
/// it learns one round trip after the drop, as duplicate ACKs would tell).
#[derive(Debug, Clone, Copy)]
pub struct Competitor {
    /// Bytes per packet.
    pub packet: usize,
    /// The window's multiplier on loss (0.5 for Reno, 0.7 for CUBIC).
    pub beta: f64,
}

impl Default for Competitor {
    fn default() -> Self {
        Self {
            packet: 1500,
            beta: 0.7,
        }
    }
}

/// What one simulated transfer did.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// Stream bytes the server read, in order.
    pub delivered: u64,
    /// Whether they equal the bytes the client wrote.
    pub exact: bool,
    /// Virtual time from the first datagram to the last byte read.
    pub elapsed: Duration,
    /// Datagrams the link dropped (loss and queue overflow), client → server.
    pub dropped: u64,
    /// Stream bytes inside those dropped datagrams.
    pub dropped_stream_bytes: u64,
    /// Datagrams dropped by the queue alone.
    pub queue_drops: u64,
    /// The client's counters.
    pub client: UdpStats,
    /// The server's counters.
    pub server: UdpStats,
    /// The error a side ended with, if any.
    pub error: Option<String>,
    /// The client's bottleneck bandwidth estimate at the end, bytes/s.
    pub bandwidth: u64,
    /// The client's minimum RTT at the end.
    pub min_rtt: Option<Duration>,
    /// Datagrams the queue dropped in each tenth of the transfer's time.
    pub queue_drops_by_tenth: [u64; 10],
    /// Bytes the competitor, if any, delivered while the transfer ran.
    pub competitor_delivered: u64,
    /// The client's round trips found congested.
    pub congested_rounds: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Reverse<(Instant, u64)>,
    what: Event,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A datagram arrives at its side.
    Datagram { to_server: bool, bytes: Vec<u8> },
    /// The competitor learns a packet arrived.
    CompetitorAck,
    /// The competitor learns a packet sent at `sent` was lost.
    CompetitorLoss { sent: Instant },
}

/// The competitor's state.
#[derive(Debug)]
struct CompetitorFlow {
    cfg: Competitor,
    window: f64,
    threshold: f64,
    in_flight: u64,
    /// Losses of packets sent before this were answered by the last cut.
    recovered: Instant,
    delivered: u64,
}

/// Deterministic xorshift64* generator.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

#[derive(Debug)]
struct Direction {
    link: SimLink,
    busy_until: Instant,
    last_lost: bool,
    dropped: u64,
    dropped_stream_bytes: u64,
    queue_drops: u64,
}

/// The byte at stream offset `i` of a simulated transfer.
pub fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9) >> 11) as u8
}

impl Direction {
    /// Puts `n` bytes through random loss and the rate cap at `now`: when
    /// the datagram leaves the cap, or why it was dropped.
    fn admit(&mut self, rng: &mut Rng, now: Instant, n: usize) -> Result<Instant, Dropped> {
        let lost = if self.last_lost {
            rng.chance(self.link.burst) || rng.chance(self.link.loss)
        } else {
            rng.chance(self.link.loss)
        };
        self.last_lost = lost;
        if lost || (self.link.max_datagram > 0 && n > self.link.max_datagram) {
            return Err(Dropped::Link);
        }
        if self.link.rate == 0 {
            return Ok(now);
        }
        // A serializer with a tail-drop queue in front.
        let backlog = self.busy_until.saturating_duration_since(now);
        let queued = (backlog.as_secs_f64() * self.link.rate as f64) as u64;
        if queued + n as u64 > self.link.queue {
            return Err(Dropped::Queue);
        }
        let tx = Duration::from_nanos(n as u64 * 1_000_000_000 / self.link.rate);
        self.busy_until = self.busy_until.max(now) + tx;
        Ok(self.busy_until)
    }
}

/// Why [`Direction::admit`] dropped a datagram.
#[derive(Debug, PartialEq, Eq)]
enum Dropped {
    /// Random loss or a datagram over the path's size.
    Link,
    /// The rate cap's queue was full.
    Queue,
}

/// Runs one transfer of `total` bytes from a client to a server over
/// `up` (client → server) and `down` (server → client), from `seed`.
/// Stops when the server read every byte and the client's stream is
/// acknowledged, when a side fails, or after `limit` of virtual time.
pub fn transfer(
    cfg: UdpConfig,
    up: SimLink,
    down: SimLink,
    total: u64,
    seed: u64,
    limit: Duration,
) -> SimReport {
    transfer_beside(cfg, up, down, None, total, seed, limit)
}

/// [`transfer`] with a [`Competitor`] in the client → server direction
/// from the start (its ACKs return after `down`'s delay, never lost).
pub fn transfer_beside(
    cfg: UdpConfig,
    up: SimLink,
    down: SimLink,
    competitor: Option<Competitor>,
    total: u64,
    seed: u64,
    limit: Duration,
) -> SimReport {
    let start = Instant::now();
    let mut now = start;
    let mut rng = Rng(seed | 1);
    let mut client = Connection::client(cfg, now, 0x00c1_1e47);
    // Skipped packet numbers from the seed too: the same seed, the same run.
    client.set_skip_seed(rng.next());
    let mut server: Option<Connection> = None;
    let mut queue: BinaryHeap<InFlight> = BinaryHeap::new();
    let mut dirs = [
        Direction {
            link: up,
            busy_until: now,
            last_lost: false,
            dropped: 0,
            dropped_stream_bytes: 0,
            queue_drops: 0,
        },
        Direction {
            link: down,
            busy_until: now,
            last_lost: false,
            dropped: 0,
            dropped_stream_bytes: 0,
            queue_drops: 0,
        },
    ];
    let mut seq = 0u64;
    let mut written = 0u64;
    let mut delivered = 0u64;
    let mut exact = true;
    let mut chunk = vec![0u8; 256 << 10];
    let mut buf = vec![0u8; 65536];
    let mut finished_at = None;
    let mut idle_turns = 0u32;
    let mut drop_times: Vec<Instant> = Vec::new();
    let mut rival = competitor.map(|cfg| CompetitorFlow {
        cfg,
        window: 10.0,
        threshold: f64::INFINITY,
        in_flight: 0,
        recovered: start,
        delivered: 0,
    });
    let round_trip = up.delay + down.delay;

    let error = loop {
        // The applications: the client writes the pattern, the server reads.
        while written < total && client.writable() > 0 {
            let n = (total - written).min(chunk.len() as u64) as usize;
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(written + i as u64);
            }
            let took = client.write(&chunk[..n]);
            written += took as u64;
            if took < n {
                break;
            }
        }
        if written == total {
            client.finish();
        }
        if let Some(s) = server.as_mut() {
            loop {
                match s.read(&mut chunk) {
                    ReadOutcome::Data(n) => {
                        exact &= chunk[..n]
                            .iter()
                            .enumerate()
                            .all(|(i, &b)| b == pattern(delivered + i as u64));
                        delivered += n as u64;
                    }
                    ReadOutcome::End => {
                        finished_at.get_or_insert(now);
                        break;
                    }
                    ReadOutcome::Blocked | ReadOutcome::Failed(_) => break,
                }
            }
        }
        if finished_at.is_some() && client.send_done() {
            break None;
        }
        if let Some(e) = client.error().or(server.as_ref().and_then(|s| s.error())) {
            break Some(e.to_string());
        }
        if now.saturating_duration_since(start) > limit {
            break Some(format!("virtual time limit {limit:?} reached"));
        }

        // Both sides transmit everything due now into the link.
        let mut sent_any = false;
        for to_server in [true, false] {
            let conn = if to_server {
                Some(&mut client)
            } else {
                server.as_mut()
            };
            let Some(conn) = conn else { continue };
            while let Some(n) = conn.poll_transmit(now, &mut buf) {
                sent_any = true;
                let d = &mut dirs[usize::from(!to_server)];
                let depart = match d.admit(&mut rng, now, n) {
                    Ok(depart) => depart,
                    Err(why) => {
                        d.dropped += 1;
                        d.dropped_stream_bytes += stream_bytes(&buf[..n]);
                        if why == Dropped::Queue {
                            d.queue_drops += 1;
                            if to_server {
                                drop_times.push(now);
                            }
                        }
                        continue;
                    }
                };
                let mut at = depart + d.link.delay;
                if rng.chance(d.link.reorder) {
                    let by = d.link.reorder_by.as_nanos() as u64;
                    at += Duration::from_nanos(if by > 0 { rng.next() % by } else { 0 });
                }
                let copies = if rng.chance(d.link.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    seq += 1;
                    queue.push(InFlight {
                        at: Reverse((at, seq)),
                        what: Event::Datagram {
                            to_server,
                            bytes: buf[..n].to_vec(),
                        },
                    });
                }
            }
        }
        if let Some(r) = rival.as_mut() {
            sent_any |= r.send(&mut dirs[0], &mut rng, now, round_trip, &mut queue, &mut seq);
        }

        // Deliver what is due; create the server on the first OPEN.
        let mut delivered_any = false;
        while queue.peek().is_some_and(|p| p.at.0 .0 <= now) {
            let Some(p) = queue.pop() else { break };
            delivered_any = true;
            let (to_server, bytes) = match p.what {
                Event::Datagram { to_server, bytes } => (to_server, bytes),
                Event::CompetitorAck => {
                    if let Some(r) = rival.as_mut() {
                        r.on_ack(finished_at.is_none());
                    }
                    continue;
                }
                Event::CompetitorLoss { sent } => {
                    if let Some(r) = rival.as_mut() {
                        r.on_loss(now, sent);
                    }
                    continue;
                }
            };
            if to_server {
                if server.is_none() {
                    if let Ok((h, body)) = PacketHeader::parse(&bytes) {
                        if h.kind == PacketType::Open {
                            // The listener's RETRY round is not simulated:
                            // it is the listener's, not the core's, and adds
                            // one round trip before the transfer.
                            if let Ok(req) = OpenRequest::parse(body) {
                                let mut s = Connection::server(cfg, now, 0x5e7e, &req.open);
                                s.set_skip_seed(rng.next());
                                server = Some(s);
                            }
                        }
                    }
                    continue;
                }
                if let Some(s) = server.as_mut() {
                    s.handle_datagram(now, &bytes);
                }
            } else {
                client.handle_datagram(now, &bytes);
            }
        }

        // Advance the clock to the next event.
        let mut next = queue.peek().map(|p| p.at.0 .0);
        for t in [
            client.poll_timeout(),
            server.as_mut().and_then(|s| s.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        {
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        }
        let Some(next) = next else {
            break Some("nothing left to happen and the transfer is not done".into());
        };
        if next <= now {
            if !sent_any && !delivered_any {
                idle_turns += 1;
                assert!(
                    idle_turns < 10_000,
                    "the core asks for a deadline in the past and does nothing"
                );
            }
        } else {
            idle_turns = 0;
            now = next;
        }
        client.handle_timeout(now);
        if let Some(s) = server.as_mut() {
            s.handle_timeout(now);
        }
    };
    SimReport {
        delivered,
        exact: exact && delivered == total && error.is_none(),
        elapsed: finished_at.unwrap_or(now).saturating_duration_since(start),
        dropped: dirs[0].dropped,
        dropped_stream_bytes: dirs[0].dropped_stream_bytes,
        queue_drops: dirs[0].queue_drops,
        bandwidth: client.controller().bandwidth(),
        min_rtt: client.controller().min_rtt(),
        queue_drops_by_tenth: {
            let span = finished_at
                .unwrap_or(now)
                .saturating_duration_since(start)
                .as_nanos()
                .max(1);
            let mut t = [0u64; 10];
            for at in &drop_times {
                let i = (at.saturating_duration_since(start).as_nanos() * 10 / span).min(9) as usize;
                t[i] += 1;
            }
            t
        },
        client: client.stats(),
        server: server.map(|s| s.stats()).unwrap_or_default(),
        error,
        competitor_delivered: rival.map_or(0, |r| r.delivered),
        congested_rounds: client.controller().congested_rounds(),
    }
}

impl CompetitorFlow {
    /// Sends what the window allows at `now`; true if it sent anything.
    fn send(
        &mut self,
        d: &mut Direction,
        rng: &mut Rng,
        now: Instant,
        round_trip: Duration,
        queue: &mut BinaryHeap<InFlight>,
        seq: &mut u64,
    ) -> bool {
        let mut sent = false;
        while (self.in_flight as f64) < self.window.floor() {
            sent = true;
            self.in_flight += 1;
            *seq += 1;
            let (at, what) = match d.admit(rng, now, self.cfg.packet) {
                Ok(depart) => (depart + round_trip, Event::CompetitorAck),
                // Duplicate ACKs tell the sender a round trip later.
                Err(_) => (
                    d.busy_until.max(now) + round_trip,
                    Event::CompetitorLoss { sent: now },
                ),
            };
            queue.push(InFlight {
                at: Reverse((at, *seq)),
                what,
            });
        }
        sent
    }

    fn on_ack(&mut self, counting: bool) {
        self.in_flight -= 1;
        if counting {
            self.delivered += self.cfg.packet as u64;
        }
        if self.window < self.threshold {
            self.window += 1.0;
        } else {
            self.window += 1.0 / self.window;
        }
    }

    fn on_loss(&mut self, now: Instant, sent: Instant) {
        self.in_flight -= 1;
        if sent >= self.recovered {
            self.window = (self.window * self.cfg.beta).max(2.0);
            self.threshold = self.window;
            self.recovered = now;
        }
    }
}

/// Stream bytes carried by a datagram (0 for anything but DATA).
fn stream_bytes(datagram: &[u8]) -> u64 {
    match PacketHeader::parse(datagram) {
        Ok((h, body)) if h.kind == PacketType::Data => {
            pfs_wire::datagram::DataHead::parse(body).map_or(0, |(d, _)| u64::from(d.len))
        }
        _ => 0,
    }
}
