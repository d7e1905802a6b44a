//! Throughput of 64 KiB WRITE grams over a streaming session on loopback
//! TCP: the Rust figure the C and Python bindings are compared against
//! (`scripts/stream-throughput` runs all three; `examples/c/stream_count.c
//! bench` and `examples/python/stream_sum.py --bench` do the same work).
//!
//! `cargo run --release -p packetfs --example stream_throughput [-- MIB]`
//! (default 1024 MiB; a 64 MiB blob written round and round).

use std::time::Instant;

use packetfs::blob::{open_blob, study_blob};
use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    Offer, Publication, PublicationConfig, SubscriberBlob, Subscription, SubscriptionConfig,
};
use packetfs::transport::Listener;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mib: u64 = std::env::args().nth(1).map_or(Ok(1024), |a| a.parse())?;
    let (size, gram) = (64u64 << 20, 64u64 << 10);
    let primary = open_blob(&study_blob(size, 42, None), true)?;
    let mut replica = open_blob(&study_blob(size, 42, None), true)?;
    let listener = "tcp:127.0.0.1:0".parse::<Endpoint>()?.listen()?;
    let target = Endpoint::bound(&listener).target();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let sub = s.spawn(move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            let conn = listener.accept()?;
            let blob = SubscriberBlob::of(&mut replica.blob);
            let mut sub = Subscription::accept(conn, blob, SubscriptionConfig::default())?;
            sub.run(&mut |_: &mut packetfs::stream::GramEntries<'_>| {})?;
            Ok(())
        });
        let mut publication = Publication::connect(&target, &primary.view(), PublicationConfig::default())?;
        let data = primary.blob.as_slice();
        let start = Instant::now();
        for i in 0..mib * (1 << 20) / gram {
            let at = (i * gram) % size;
            let bytes = &data[at as usize..(at + gram) as usize];
            let sent = publication.offer_blocking(std::time::Duration::from_secs(10), |g| {
                g.write(at, bytes);
            })?;
            if sent == Offer::BackPressure {
                return Err("the subscriber applied nothing for 10 s".into());
            }
        }
        let report = publication.close()?;
        let secs = start.elapsed().as_secs_f64();
        sub.join().map_err(|_| "the subscriber panicked")??;
        println!(
            "rust: {} grams of 64 KiB writes, {:.1} MB/s",
            report.grams,
            report.effective_bytes as f64 / secs / 1e6
        );
        Ok(())
    })
}
