//! The connections a server is still admitting (first bytes, handshake):
//! a bounded set, and which one leaves when a new one arrives and the set
//! is full.
//!
//! Dropping the oldest (the first policy) drops the client with the
//! longest round trip: under a flood, a distant client never finished its
//! handshake. Instead the victim is chosen by, in order:
//! 1. never a connection from a *proven* source (one that completed
//!    admission recently) while another is left;
//! 2. the source whose connections failed admission (evicted, timed out,
//!    refused) most often: a flood from many addresses marks each of them,
//!    and a client never seen before outranks it;
//! 3. the source (IPv4 address, IPv6 /64) with the most connections being
//!    admitted, the newcomer counted: a flood from a few addresses evicts
//!    only itself;
//! 4. a connection that has sent nothing before one that has;
//! 5. the oldest.
//!
//! What is remembered of sources is bounded ([`REMEMBERED`] each for proven
//! and failing sources, the oldest forgotten first).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Where a connection comes from, as far as fairness goes: an IPv4
/// address, an IPv6 /64 (what one host or customer usually holds), or one
/// shared class for connections without an IP address (Unix sockets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    V4([u8; 4]),
    V6([u8; 8]),
    Local,
}

impl Source {
    /// The source of a peer address as `Transport::peer` gives it.
    pub(crate) fn of(peer: &str) -> Self {
        match peer.parse::<SocketAddr>().map(|a| a.ip()) {
            Ok(IpAddr::V4(v4)) => Self::V4(v4.octets()),
            Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    Self::V6(o[..8].try_into().expect("eight bytes"))
                }
            },
            Err(_) => Self::Local,
        }
    }
}

/// A connection's place in the set: its cancel flag (set when it is
/// evicted or the server stops) and its "sent something" flag.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    pub(crate) id: u64,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) started: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Entry {
    ticket: Ticket,
    source: Source,
}

/// Sources remembered as proven, and as failing; the oldest is forgotten
/// past it.
pub(crate) const REMEMBERED: usize = 4096;

/// A bounded map of sources, the least recently touched forgotten first.
#[derive(Debug, Default)]
struct Remembered {
    value: HashMap<Source, (u32, u64)>,
    order: VecDeque<(Source, u64)>,
    seq: u64,
}

impl Remembered {
    fn get(&self, s: &Source) -> u32 {
        self.value.get(s).map_or(0, |v| v.0)
    }

    /// Adds one to `s`'s count.
    fn bump(&mut self, s: Source) {
        self.seq += 1;
        let seq = self.seq;
        let v = self.value.entry(s).or_insert((0, seq));
        *v = (v.0.saturating_add(1), seq);
        self.order.push_back((s, seq));
        while self.value.len() > REMEMBERED {
            let Some((old, at)) = self.order.pop_front() else {
                break;
            };
            // Only if it was not touched since.
            if self.value.get(&old).is_some_and(|v| v.1 == at) {
                self.value.remove(&old);
            }
        }
        // Drop the stale records of sources touched again.
        if self.order.len() > 2 * self.value.len() + 64 {
            let value = &self.value;
            self.order
                .retain(|(s, at)| value.get(s).is_some_and(|v| v.1 == *at));
        }
    }
}

/// The set of connections being admitted, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Admitting {
    next_id: u64,
    entries: Vec<Entry>,
    proven: Remembered,
    failing: Remembered,
}

impl Admitting {
    /// Enters a connection from `source`, evicting others (their cancel
    /// flags set) until at most `max` remain with it.
    pub(crate) fn enter(&mut self, source: Source, max: usize) -> Ticket {
        while self.entries.len() >= max.max(1) {
            let Some(victim) = self.victim(source) else { break };
            let gone = self.entries.remove(victim);
            // Paired with the Acquire loads of the admission reads.
            // Its admission thread sees the flag and reports the failure
            // (`fail`).
            gone.ticket.cancel.store(true, Ordering::Release);
        }
        let ticket = Ticket {
            id: self.next_id,
            cancel: Arc::new(AtomicBool::new(false)),
            started: Arc::new(AtomicBool::new(false)),
        };
        self.next_id += 1;
        self.entries.push(Entry {
            ticket: ticket.clone(),
            source,
        });
        ticket
    }

    /// The index of the entry to evict for a newcomer from `newcomer`.
    fn victim(&self, newcomer: Source) -> Option<usize> {
        let mut count: HashMap<Source, usize> = HashMap::new();
        *count.entry(newcomer).or_default() += 1;
        for e in &self.entries {
            *count.entry(e.source).or_default() += 1;
        }
        // Larger ranks go first; among equals, the oldest (max_by keeps
        // the last maximum, so the entries are walked newest first).
        self.entries
            .iter()
            .enumerate()
            .rev()
            .max_by_key(|(_, e)| {
                (
                    self.proven.get(&e.source) == 0,
                    self.failing.get(&e.source),
                    count[&e.source],
                    !e.ticket.started.load(Ordering::Acquire),
                )
            })
            .map(|(i, _)| i)
    }

    /// The connection `id` is admitted or gone.
    pub(crate) fn leave(&mut self, id: u64) {
        self.entries.retain(|e| e.ticket.id != id);
    }

    /// `source` completed an admission: its later connections are evicted
    /// only after everyone else's.
    pub(crate) fn prove(&mut self, source: Source) {
        self.proven.bump(source);
    }

    /// A connection from `source` failed admission (timed out, refused,
    /// closed): its later connections are evicted before those of sources
    /// that did not fail as often.
    pub(crate) fn fail(&mut self, source: Source) {
        self.failing.bump(source);
    }

    /// Cancels every connection still being admitted.
    pub(crate) fn cancel_all(&self) {
        for e in &self.entries {
            e.ticket.cancel.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(last: u8) -> Source {
        Source::V4([10, 0, 0, last])
    }

    fn cancelled(t: &Ticket) -> bool {
        t.cancel.load(Ordering::Acquire)
    }

    #[test]
    fn sources_group_v6_by_64_and_unmap_v4() {
        assert_eq!(Source::of("127.0.0.1:5"), Source::V4([127, 0, 0, 1]));
        assert_eq!(Source::of("[::ffff:10.0.0.1]:5"), Source::V4([10, 0, 0, 1]));
        assert_eq!(Source::of("[2001:db8::1]:5"), Source::of("[2001:db8::2]:6"));
        assert_ne!(Source::of("[2001:db8::1]:5"), Source::of("[2001:db8:0:1::1]:5"));
        assert_eq!(Source::of("/run/pfs.sock"), Source::Local);
    }

    #[test]
    fn a_flood_from_one_source_evicts_only_itself() {
        let mut a = Admitting::default();
        let distant = a.enter(src(2), 4);
        let flood: Vec<Ticket> = (0..100).map(|_| a.enter(src(1), 4)).collect();
        assert!(!cancelled(&distant));
        // The newest three of the flood remain; the older ones went first.
        assert_eq!(flood.iter().filter(|t| !cancelled(t)).count(), 3);
        assert!(flood[97..].iter().all(|t| !cancelled(t)));
    }

    #[test]
    fn a_silent_connection_goes_before_one_that_has_sent() {
        let mut a = Admitting::default();
        let distant = a.enter(src(2), 3);
        distant.started.store(true, Ordering::Release);
        // One connection from each of many addresses, all silent.
        let flood: Vec<Ticket> = (10..60).map(|i| a.enter(src(i), 3)).collect();
        assert!(!cancelled(&distant));
        assert_eq!(flood.iter().filter(|t| !cancelled(t)).count(), 2);
    }

    #[test]
    fn proven_sources_are_evicted_last() {
        let mut a = Admitting::default();
        a.prove(src(2));
        let known = a.enter(src(2), 2);
        known.started.store(true, Ordering::Release);
        let other = a.enter(src(2), 2);
        other.started.store(true, Ordering::Release);
        // Each flood connection from its own address and already started:
        // only the flood's own entries are evicted.
        for i in 10..60 {
            let t = a.enter(src(i), 3);
            t.started.store(true, Ordering::Release);
        }
        assert!(!cancelled(&known) && !cancelled(&other));
    }

    #[test]
    fn a_source_that_keeps_failing_goes_before_a_new_one() {
        let mut a = Admitting::default();
        // Many addresses, each of which already failed, each sending HS1.
        for i in 10..60 {
            a.fail(src(i));
        }
        let mut flood = Vec::new();
        for i in 10..13 {
            let t = a.enter(src(i), 4);
            t.started.store(true, Ordering::Release);
            flood.push(t);
        }
        let first_time = a.enter(src(2), 4);
        first_time.started.store(true, Ordering::Release);
        for i in 13..60 {
            let t = a.enter(src(i), 4);
            t.started.store(true, Ordering::Release);
        }
        assert!(!cancelled(&first_time));
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut a = Admitting::default();
        for i in 0..(REMEMBERED as u32 + 100) {
            let s = Source::V6([
                0,
                0,
                0,
                0,
                (i >> 24) as u8,
                (i >> 16) as u8,
                (i >> 8) as u8,
                i as u8,
            ]);
            a.prove(s);
            a.fail(s);
        }
        assert!(a.proven.value.len() <= REMEMBERED && a.failing.value.len() <= REMEMBERED);
        assert!(a.proven.order.len() <= 2 * REMEMBERED + 64);
    }

    #[test]
    fn without_other_rules_the_oldest_goes() {
        let mut a = Admitting::default();
        let t: Vec<Ticket> = (0..3).map(|_| a.enter(src(1), 2)).collect();
        assert!(cancelled(&t[0]) && !cancelled(&t[1]) && !cancelled(&t[2]));
        a.leave(t[1].id);
        a.cancel_all();
        assert!(cancelled(&t[2]));
    }
}
