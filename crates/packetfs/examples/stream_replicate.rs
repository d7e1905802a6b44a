//! Region replication over a streaming session: a primary changes its
//! region at random places and publishes each change as a WRITE; a replica
//! subscribed over loopback TCP follows. At the end both fingerprints are
//! equal, and the wire bytes are close to the bytes changed.
//!
//! `cargo run -p packetfs --example stream_replicate [-- SIZE_MIB CHANGES]`
//! (defaults: a 64 MiB region, 4096 changes of up to 4 KiB).

use std::time::{Duration, Instant};

use packetfs::blob::{open_blob, study_blob, Fingerprint};
use packetfs::gram::Target;
use packetfs::stream::{
    Offer, Publication, PublicationConfig, SubscriberBlob, Subscription, SubscriptionConfig,
};
use packetfs::transport::{TcpConfig, TcpListener};

/// What a replication run did.
#[derive(Debug)]
pub struct Outcome {
    /// Grams published (one per change).
    pub grams: u64,
    /// Bytes the primary changed (and wrote into the replica).
    pub bytes_changed: u64,
    /// Bytes the publisher wrote to the connection, headers included.
    pub wire_bytes: u64,
    /// Whether the replica's fingerprint equals the primary's at the end.
    pub fingerprints_equal: bool,
    /// Whether every gram's digest matched.
    pub digests_matched: bool,
    /// Steady-state time.
    pub elapsed: Duration,
}

/// Replicates `changes` random changes to a `size`-byte region.
pub fn run(size: u64, changes: u64) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    // Both sides start from the same bytes: same size, same seed.
    let primary = open_blob(&study_blob(size, 0x5eed, None), true)?;
    let mut replica = open_blob(&study_blob(size, 0x5eed, None), true)?;
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())?;
    let target = Target::Tcp {
        addr: listener.socket_addr()?.to_string(),
        sock_buf: 0,
    };
    std::thread::scope(|s| {
        let replica = &mut replica;
        let follower = s.spawn(
            move || -> Result<Fingerprint, Box<dyn std::error::Error + Send + Sync>> {
                use packetfs::transport::Listener;
                let conn = listener.accept()?;
                let mut sub = Subscription::accept(
                    Box::new(conn),
                    SubscriberBlob::of(&mut replica.blob),
                    SubscriptionConfig::default(),
                )?;
                // Replication needs no handler: the writes are applied as each
                // gram executes.
                sub.run(&mut |_: &mut packetfs::stream::GramEntries<'_>| {})?;
                drop(sub);
                Ok(replica.blob.recompute_fingerprint(1))
            },
        );

        let view = primary.view();
        let writer = primary.blob.writer();
        let mut publication = Publication::connect(&target, &view, PublicationConfig::default())?;
        let start = Instant::now();
        let mut x = 0x243f_6a88_85a3_08d3u64;
        let mut changed = vec![0u8; 4096];
        let mut bytes_changed = 0;
        for i in 0..changes {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let len = 1 + (x >> 52) as usize % changed.len();
            let off = (x >> 8) % (size - len as u64);
            let old = &view.data[off as usize..off as usize + len];
            for (j, (dst, src)) in changed.iter_mut().zip(old).enumerate() {
                *dst = src ^ (j as u8).wrapping_add(i as u8) | 1;
            }
            // The primary changes its own region, then publishes the change.
            writer.write(off, &changed[..len])?;
            bytes_changed += len as u64;
            let offer = publication.offer_blocking(Duration::from_secs(30), |g| {
                g.write(off, &changed[..len]);
            })?;
            if offer == Offer::BackPressure {
                return Err("the replica applied nothing for 30 s".into());
            }
        }
        let report = publication.close()?;
        let elapsed = start.elapsed();
        let replica_fp = follower.join().map_err(|_| "replica thread panicked")??;
        let primary_fp = primary.blob.recompute_fingerprint(1);
        Ok(Outcome {
            grams: report.grams,
            bytes_changed,
            wire_bytes: report.wire_bytes_sent,
            fingerprints_equal: replica_fp.root == primary_fp.root,
            digests_matched: report.digests_matched,
            elapsed,
        })
    })
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let size_mib: u64 = args.next().map_or(Ok(64), |a| a.parse())?;
    let changes: u64 = args.next().map_or(Ok(4096), |a| a.parse())?;
    let o = run(size_mib << 20, changes)?;
    println!(
        "replicated {} changes ({} bytes) of a {size_mib} MiB region in {:.3} s: wire {} bytes ({:.3}x the bytes changed); fingerprints {}; digests {}",
        o.grams,
        o.bytes_changed,
        o.elapsed.as_secs_f64(),
        o.wire_bytes,
        o.wire_bytes as f64 / o.bytes_changed.max(1) as f64,
        if o.fingerprints_equal { "equal" } else { "DIFFER" },
        if o.digests_matched { "matched" } else { "MISMATCHED" },
    );
    assert!(o.fingerprints_equal && o.digests_matched);
    Ok(())
}
