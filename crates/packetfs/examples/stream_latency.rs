//! Round-trip latency of 64-byte MESSAGE records over a streaming session
//! on loopback TCP, with a text histogram.
//!
//! Streams are one-way: the subscriber cannot send a record back. The
//! round trip measured here is the publisher's `offer` of one record (one
//! gram) → the subscriber's handler runs on it → the subscriber's APPLIED
//! for that gram is back at the publisher (`wait_applied(seq)`). The next
//! record is offered only then, so exactly one record is in flight.
//!
//! `cargo run -p packetfs --example stream_latency [-- RECORDS]`
//! (default 100 000 records; `--release` for figures).

use std::time::{Duration, Instant};

use packetfs::blob::{study_blob, Blob, OpenedBlob};
use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    Entry, GramEntries, Offer, Publication, PublicationConfig, SubscriberBlob, Subscription,
    SubscriptionConfig,
};
use packetfs::transport::Listener;

/// Bytes of one record.
pub const RECORD: usize = 64;

/// What a latency run measured.
#[derive(Debug)]
pub struct Latency {
    /// Every round trip, nanoseconds, sorted.
    pub sorted_ns: Vec<u64>,
    /// Records the subscriber's handler saw, each 64 bytes and in order.
    pub received: u64,
}

impl Latency {
    /// The `p`-th percentile (0 ≤ p ≤ 100), nanoseconds; 0 without samples.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.sorted_ns.is_empty() {
            return 0;
        }
        let at = ((p / 100.0) * (self.sorted_ns.len() - 1) as f64).round() as usize;
        self.sorted_ns[at.min(self.sorted_ns.len() - 1)]
    }

    /// Samples per log2 bucket: `(lower bound ns, count)` for every bucket
    /// from the smallest sample's to the largest's.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        let bucket = |ns: u64| 63 - ns.max(1).leading_zeros() as usize;
        let (Some(&lo), Some(&hi)) = (self.sorted_ns.first(), self.sorted_ns.last()) else {
            return Vec::new();
        };
        let mut counts = vec![0u64; bucket(hi) - bucket(lo) + 1];
        for &ns in &self.sorted_ns {
            counts[bucket(ns) - bucket(lo)] += 1;
        }
        counts
            .into_iter()
            .enumerate()
            .map(|(i, c)| (1u64 << (bucket(lo) + i), c))
            .collect()
    }

    /// The histogram as text, one line per log2 bucket, bars scaled to
    /// the largest bucket.
    pub fn histogram(&self) -> String {
        let buckets = self.buckets();
        let most = buckets.iter().map(|b| b.1).max().unwrap_or(1).max(1);
        let mut s = String::new();
        for (lo, count) in buckets {
            let bar = "#".repeat((count * 50).div_ceil(most) as usize);
            s.push_str(&format!("{:>9} ns … {:>9} ns {count:>9} {bar}\n", lo, lo * 2 - 1));
        }
        s
    }
}

/// Sends `records` 64-byte records, one per gram, each after the last was
/// applied, and times each round trip.
pub fn run(records: u64) -> Result<Latency, Box<dyn std::error::Error + Send + Sync>> {
    // Messages do not touch the blob; both sides still need the same one
    // (what its backing warns — no huge pages for 1 MiB — is not printed).
    let blob = || -> Result<OpenedBlob, packetfs::blob::BlobError> {
        let (blob, setup) = Blob::open_or_create(&study_blob(1 << 20, 64, None))?;
        Ok(OpenedBlob { blob, setup })
    };
    let (primary, mut replica) = (blob()?, blob()?);
    let listener = "tcp:127.0.0.1:0".parse::<Endpoint>()?.listen()?;
    let target = Endpoint::bound(&listener).target();
    std::thread::scope(|s| {
        let sub = s.spawn(move || -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
            let conn = listener.accept()?;
            let blob = SubscriberBlob::of(&mut replica.blob);
            let mut sub = Subscription::accept(conn, blob, SubscriptionConfig::default())?;
            // Each record carries its number: the handler checks the order.
            let mut received = 0u64;
            let mut in_order = true;
            sub.run(&mut |g: &mut GramEntries<'_>| {
                while let Some(e) = g.next_entry() {
                    if let Entry::Message(m) = e {
                        in_order &= m.len() == RECORD && m[..8] == received.to_le_bytes();
                        received += 1;
                    }
                }
            })?;
            if !in_order {
                return Err("a record arrived out of order or cut".into());
            }
            Ok(received)
        });
        let mut publication = Publication::connect(&target, &primary.view(), PublicationConfig::default())?;
        let mut record = [0u8; RECORD];
        let mut sorted_ns = Vec::with_capacity(records as usize);
        for i in 0..records {
            record[..8].copy_from_slice(&i.to_le_bytes());
            let start = Instant::now();
            let seq = match publication.offer(|g| {
                g.message(&record);
            })? {
                Offer::Sent { seq } => seq,
                Offer::BackPressure => return Err("back-pressure with no record in flight".into()),
            };
            if !publication.wait_applied(seq, Duration::from_secs(10))? {
                return Err(format!("record {i} not applied within 10 s").into());
            }
            sorted_ns.push(start.elapsed().as_nanos() as u64);
        }
        publication.close()?;
        let received = sub.join().map_err(|_| "the subscriber panicked")??;
        sorted_ns.sort_unstable();
        Ok(Latency { sorted_ns, received })
    })
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let records: u64 = std::env::args().nth(1).map_or(Ok(100_000), |a| a.parse())?;
    let l = run(records)?;
    println!(
        "{} records of {RECORD} B over loopback TCP, round trip offer → subscriber handler → APPLIED back:",
        l.received
    );
    println!(
        "p50 {} ns  p90 {} ns  p99 {} ns  p99.9 {} ns  max {} ns",
        l.percentile(50.0),
        l.percentile(90.0),
        l.percentile(99.0),
        l.percentile(99.9),
        l.percentile(100.0)
    );
    print!("{}", l.histogram());
    Ok(())
}
