//! Catch-up before a stream (docs/wire.md §15.10): a subscriber whose blob
//! differs from the publisher's — zeroed, older, or filled from another
//! seed — is brought to the publisher's bytes on the same connection, then
//! executes grams byte-exact; one that does not allow it refuses naming the
//! flag; a catch-up cut midway leaves what it wrote, and the next one moves
//! only what still differs.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use packetfs::blob::{open_blob, study_blob, BlobConfig, Fill, OpenedBlob};
use packetfs::gram::Target;
use packetfs::stream::{
    serve, Entry, GramEntries, Offer, PublicationConfig, PublisherReport, StreamError, SubscriberBlob,
    SubscriberReport, Subscription, SubscriptionConfig,
};
use packetfs::transport::{Listener, TcpConfig, TcpListener, TcpTransport, Transport};

const LEN: u64 = 4 << 20;
const SEED: u64 = 0x5eed;
/// The catch-up's block size (`CatchUpConfig::default`).
const BLOCK: u64 = 16 * 1024;

fn seeded(seed: u64) -> OpenedBlob {
    open_blob(&study_blob(LEN, seed, None), true).expect("blob")
}

fn zeroed() -> OpenedBlob {
    let cfg = BlobConfig {
        fill: Fill::None,
        ..study_blob(LEN, 0, None)
    };
    open_blob(&cfg, true).expect("blob")
}

/// The publisher's blob with `blocks` blocks changed, its fingerprint
/// recomputed (an older copy of it).
fn older(blocks: &[u64]) -> OpenedBlob {
    let mut b = seeded(SEED);
    for &i in blocks {
        let at = (i * BLOCK) as usize;
        for x in &mut b.blob.as_mut_slice()[at..at + 100] {
            *x ^= 0xa5;
        }
    }
    let regions: Vec<usize> = (0..b.blob.fingerprint().regions.len()).collect();
    b.blob.rehash_regions(&regions).expect("rehash");
    b
}

fn tcp_pair() -> (Box<dyn Transport>, Box<dyn Transport>) {
    let tcp = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let client = TcpTransport::connect(&tcp.local_addr(), &TcpConfig::default()).unwrap();
    (Box::new(client), Box::new(tcp.accept().unwrap()))
}

fn publication(catch_up: bool) -> PublicationConfig {
    PublicationConfig {
        keepalive: Duration::from_millis(50),
        reply_timeout: Duration::from_secs(20),
        catch_up,
        ..PublicationConfig::default()
    }
}

fn subscription(allow_catch_up: bool) -> SubscriptionConfig {
    SubscriptionConfig {
        keepalive: Duration::from_millis(50),
        allow_catch_up,
        ..SubscriptionConfig::default()
    }
}

/// The grams every test publishes: a reference the catch-up made true, a
/// write and a message.
const WRITE_AT: u64 = 3 * BLOCK + 7;

/// What the subscriber's handler saw.
type Seen = Vec<Vec<u8>>;

fn take(seen: &mut Seen, g: &mut GramEntries<'_>) {
    while let Some(e) = g.next_entry() {
        match e {
            Entry::Reference { bytes, .. } | Entry::Write { bytes, .. } => seen.push(bytes.to_vec()),
            Entry::Message(m) => seen.push(m.to_vec()),
        }
    }
}

/// One publication of two grams over `replica`; both sides' outcomes.
fn stream(
    primary: &OpenedBlob,
    replica: &mut OpenedBlob,
    pcfg: PublicationConfig,
    scfg: SubscriptionConfig,
) -> (
    Result<PublisherReport, String>,
    Result<(SubscriberReport, Seen), StreamError>,
) {
    let view = primary.view();
    let (pub_conn, sub_conn) = tcp_pair();
    std::thread::scope(|s| {
        let sub = s.spawn(|| {
            let mut sub = Subscription::accept(sub_conn, SubscriberBlob::of(&mut replica.blob), scfg)
                .map_err(|e| match e {
                    packetfs::Error::Stream(e) => e,
                    other => panic!("{other}"),
                })?;
            let mut seen = Seen::new();
            let report = sub.run(&mut |g: &mut GramEntries<'_>| take(&mut seen, g))?;
            Ok((report, seen))
        });
        let published = (|| {
            let mut p =
                packetfs::stream::Publication::on(pub_conn, &view, pcfg).map_err(|e| e.to_string())?;
            let timeout = Duration::from_secs(10);
            let sent = p
                .offer_blocking(timeout, |g| {
                    g.reference(0, 4096).write(WRITE_AT, b"caught up").message(b"hi");
                })
                .map_err(|e| e.to_string())?;
            assert_eq!(sent, Offer::Sent { seq: 0 });
            let sent = p
                .offer_blocking(timeout, |g| {
                    // (REFERENCE digests read the publisher's blob, which
                    // the write did not change: not WRITE_AT's bytes.)
                    g.reference(LEN - 4096, 4096);
                })
                .map_err(|e| e.to_string())?;
            assert_eq!(sent, Offer::Sent { seq: 1 });
            p.close().map_err(|e| e.to_string())
        })();
        (published, sub.join().unwrap())
    })
}

/// The primary's bytes with the grams' write applied.
fn expected(primary: &OpenedBlob) -> Vec<u8> {
    let mut want = primary.blob.as_slice().to_vec();
    let at = WRITE_AT as usize;
    want[at..at + 9].copy_from_slice(b"caught up");
    want
}

#[test]
fn zeroed_older_and_other_seed_subscribers_are_caught_up_then_take_grams_byte_exact() {
    let primary = seeded(SEED);
    let changed = [0, 5, 6, 100, 255];
    for (name, mut replica, differing) in [
        ("zeroed", zeroed(), None),
        ("older", older(&changed), Some(changed.len() as u64 * BLOCK)),
        ("other seed", seeded(0xbad), None),
    ] {
        let (published, subscribed) = stream(&primary, &mut replica, publication(true), subscription(true));
        let report = published.unwrap_or_else(|e| panic!("{name}: publisher: {e}"));
        let (sub_report, seen) = subscribed.unwrap_or_else(|e| panic!("{name}: subscriber: {e}"));
        let source = report
            .catch_up
            .unwrap_or_else(|| panic!("{name}: no catch-up ran"));
        let replica_stats = sub_report.catch_up.expect("the subscriber's catch-up figures");
        assert_eq!(source.bytes_moved, replica_stats.bytes_moved, "{name}");
        if let Some(bytes) = differing {
            assert_eq!(
                source.bytes_moved, bytes,
                "{name}: only the differing blocks move"
            );
            assert_eq!(
                source.regions_differing, 3,
                "{name}: blocks 0, 5 and 6 share the first 1 MiB region"
            );
        } else {
            assert_eq!(source.bytes_moved, LEN, "{name}: every block differs");
        }
        assert!(
            report.digests_matched && sub_report.digests_matched,
            "{name}: {report:?} {sub_report:?}"
        );
        assert_eq!(report.applied, 2, "{name}");
        let want = expected(&primary);
        assert_eq!(
            seen,
            vec![
                want[..4096].to_vec(),
                b"caught up".to_vec(),
                b"hi".to_vec(),
                want[LEN as usize - 4096..].to_vec(),
            ],
            "{name}: the grams' entries, byte-exact"
        );
        assert!(
            replica.blob.as_slice() == &want[..],
            "{name}: the blob is the publisher's"
        );
    }
}

#[test]
fn equal_blobs_run_no_catch_up() {
    let primary = seeded(SEED);
    let mut replica = seeded(SEED);
    let (published, subscribed) = stream(&primary, &mut replica, publication(true), subscription(true));
    let report = published.expect("publisher");
    assert_eq!(report.catch_up, None);
    assert_eq!(subscribed.expect("subscriber").0.catch_up, None);
}

#[test]
fn without_allow_the_refusal_names_the_flag() {
    let primary = seeded(SEED);
    let mut replica = seeded(0xbad);
    let (published, subscribed) = stream(&primary, &mut replica, publication(true), subscription(false));
    let err = published.expect_err("refused");
    assert!(err.contains("--allow-catch-up"), "{err}");
    assert!(err.contains("BLOB_MISMATCH"), "{err}");
    let sub_err = subscribed.expect_err("refused").to_string();
    assert!(sub_err.contains("allow_catch_up"), "{sub_err}");
    // Not offered: the refusal of before, and nothing written.
    let (published, _) = stream(&primary, &mut replica, publication(false), subscription(true));
    assert!(published.expect_err("refused").contains("fingerprint"));
    assert!(replica.blob.as_slice() == seeded(0xbad).blob.as_slice());
}

/// Forwards one connection from `from` to `to`, cutting the
/// publisher-to-subscriber direction after `cut` bytes.
fn cutting_proxy(from: std::net::TcpListener, to: String, cut: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (mut publisher, _) = from.accept().unwrap();
        let mut subscriber = TcpStream::connect(to).unwrap();
        let (mut p2, mut s2) = (publisher.try_clone().unwrap(), subscriber.try_clone().unwrap());
        let back = std::thread::spawn(move || {
            // Once the publisher is gone, drain the subscriber until it
            // closes: closing with its bytes unread would reset the
            // connection, and the subscriber would lose what it was sent.
            let _ = std::io::copy(&mut s2, &mut p2);
            let _ = std::io::copy(&mut s2, &mut std::io::sink());
        });
        let mut left = cut;
        let mut buf = vec![0u8; 64 * 1024];
        while left > 0 {
            let n = match publisher.read(&mut buf[..left.min(64 * 1024)]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if subscriber.write_all(&buf[..n]).is_err() {
                break;
            }
            left -= n;
        }
        // The publisher is gone, midway through the catch-up.
        let _ = subscriber.shutdown(Shutdown::Write);
        let _ = publisher.shutdown(Shutdown::Both);
        let _ = back.join();
    })
}

#[test]
fn a_catch_up_cut_midway_resumes_moving_only_what_still_differs() {
    let primary = seeded(SEED);
    let view = primary.view();
    let mut replica = seeded(0xbad);
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.local_addr().to_string();
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = proxy.local_addr().unwrap().to_string();
    let mut served = Vec::new();
    let (first, second) = std::thread::scope(|s| {
        let blob = SubscriberBlob::of(&mut replica.blob);
        let served = &mut served;
        let sub = s.spawn(move || {
            serve(
                &listener,
                blob,
                subscription(true),
                Some(2),
                &mut |_: &mut GramEntries<'_>| {},
                &mut |e| served.push(e.outcome.map(|r| r.catch_up)),
            )
        });
        let cut = cutting_proxy(proxy, addr.clone(), (LEN / 3) as usize);
        let via_proxy = Target::Tcp {
            addr: proxy_addr,
            sock_buf: 0,
        };
        let first = packetfs::stream::Publication::connect(&via_proxy, &view, publication(true)).map(drop);
        cut.join().unwrap();
        let direct = Target::Tcp { addr, sock_buf: 0 };
        let mut p =
            packetfs::stream::Publication::connect(&direct, &view, publication(true)).expect("second");
        let sent = p
            .offer_blocking(Duration::from_secs(10), |g| {
                g.reference(0, 64);
            })
            .expect("a gram");
        assert_eq!(sent, Offer::Sent { seq: 0 });
        let second = p.close().expect("close");
        sub.join().unwrap().expect("serve");
        (first, second)
    });
    assert!(first.is_err(), "the first publication was cut");
    assert!(served[0].is_err(), "the first session failed: {:?}", served[0]);
    let stats = second.catch_up.expect("the second publication caught up");
    assert!(stats.bytes_moved > 0, "{stats:?}");
    assert!(
        stats.bytes_moved < LEN,
        "the second catch-up moved {} bytes: the first one's blocks were not sent again",
        stats.bytes_moved
    );
    let replica_stats = served[1]
        .as_ref()
        .expect("the second session")
        .expect("its catch-up figures");
    assert_eq!(replica_stats.bytes_moved, stats.bytes_moved);
    assert!(second.digests_matched);
    assert!(
        replica.blob.as_slice() == primary.blob.as_slice(),
        "the blob is the publisher's"
    );
}
