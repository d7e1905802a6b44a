//! A stream's subscriber 1 % behind its publisher (one 16 KiB block in a
//! hundred differs) is caught up before the first gram
//! (`docs/wire.md` §15.10) over loopback TCP: the catch-up's wire bytes
//! beside the bytes that differ, and its time beside sending the whole
//! blob as 1 MiB WRITE grams.
//!
//! `cargo run --release -p packetfs --example stream_catchup [-- MIB]`
//! (default 16 MiB; the figures in the README are for 256).

use std::time::{Duration, Instant};

use packetfs::blob::{open_blob, study_blob, OpenedBlob};
use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    GramEntries, Offer, Publication, PublicationConfig, SubscriberBlob, SubscriberReport, Subscription,
    SubscriptionConfig,
};
use packetfs::transport::Listener;

type Error = Box<dyn std::error::Error + Send + Sync>;

const BLOCK: usize = 16 << 10;

/// Runs one subscription over `replica` while `publish` runs on a
/// publication of `primary`; returns what `publish` returned.
fn session<T>(
    primary: &OpenedBlob,
    replica: &mut OpenedBlob,
    catch_up: bool,
    publish: impl FnOnce(&mut Publication<'_>) -> Result<T, Error>,
) -> Result<(T, SubscriberReport), Error> {
    let listener = "tcp:127.0.0.1:0".parse::<Endpoint>()?.listen()?;
    let target = Endpoint::bound(&listener).target();
    std::thread::scope(|s| {
        let sub = s.spawn(move || -> Result<SubscriberReport, Error> {
            let conn = listener.accept()?;
            let cfg = SubscriptionConfig {
                allow_catch_up: catch_up,
                ..SubscriptionConfig::default()
            };
            let mut sub = Subscription::accept(conn, SubscriberBlob::of(&mut replica.blob), cfg)?;
            Ok(sub.run(&mut |_: &mut GramEntries<'_>| {})?)
        });
        let cfg = PublicationConfig {
            catch_up,
            ..PublicationConfig::default()
        };
        let mut publication = Publication::connect(&target, &primary.view(), cfg)?;
        let out = publish(&mut publication)?;
        publication.close()?;
        Ok((out, sub.join().map_err(|_| "the subscriber panicked")??))
    })
}

fn main() -> Result<(), Error> {
    let mib: u64 = std::env::args().nth(1).map_or(Ok(16), |a| a.parse())?;
    let size = mib << 20;
    let primary = open_blob(&study_blob(size, 42, None), true)?;
    let mut replica = open_blob(&study_blob(size, 42, None), true)?;
    let blocks = size as usize / BLOCK;
    let mut differing = 0u64;
    for b in (0..blocks).step_by(100) {
        replica.blob.as_mut_slice()[b * BLOCK + 123] ^= 0x5a;
        differing += BLOCK as u64;
    }
    let regions: Vec<usize> = (0..replica.blob.fingerprint().regions.len()).collect();
    replica.blob.rehash_regions(&regions)?;

    let start = Instant::now();
    let (_, report) = session(&primary, &mut replica, true, |_| Ok(()))?;
    let catch_up_s = start.elapsed().as_secs_f64();
    let c = report.catch_up.ok_or("no catch-up ran")?;
    assert!(replica.blob.as_slice() == primary.blob.as_slice(), "caught up");
    let budget = differing as f64 * 1.1 + size as f64 * 0.001;
    println!(
        "catch-up: {mib} MiB blob, {differing} bytes differ ({:.2} %): {} moved in {} wire bytes \
         ({:.3}× the differing bytes; budget 1.1× + 0.1 % of the blob = {budget:.0} bytes: {}), \
         {} of {} regions differed, {:.3} s",
        differing as f64 * 100.0 / size as f64,
        c.bytes_moved,
        c.wire_bytes,
        c.wire_bytes as f64 / differing as f64,
        if (c.wire_bytes as f64) <= budget {
            "within"
        } else {
            "OVER"
        },
        c.regions_differing,
        c.regions,
        catch_up_s,
    );

    // The other way to bring a subscriber up to date: every byte as WRITE
    // grams. A stream needs equal fingerprints to start, so this one
    // already holds the bytes; the cost is the same.
    let mut behind = open_blob(&study_blob(size, 42, None), true)?;
    let gram = 1usize << 20;
    let data = primary.blob.as_slice();
    let start = Instant::now();
    let (_, report) = session(&primary, &mut behind, false, |p| {
        for at in (0..data.len()).step_by(gram) {
            let bytes = &data[at..(at + gram).min(data.len())];
            let sent = p.offer_blocking(Duration::from_secs(30), |g| {
                g.write(at as u64, bytes);
            })?;
            if sent == Offer::BackPressure {
                return Err("the subscriber stalled".into());
            }
        }
        Ok(())
    })?;
    let writes_s = start.elapsed().as_secs_f64();
    println!(
        "whole blob as 1 MiB WRITE grams: {} bytes written, {} wire bytes, {writes_s:.3} s \
         (catch-up {:.1}× faster)",
        report.written_bytes,
        report.wire_bytes,
        writes_s / catch_up_s
    );
    Ok(())
}
