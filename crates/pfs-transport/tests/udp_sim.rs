//! The UDP connection core over a simulated network: loss 0–30 %, bursts,
//! reordering, duplication, delay and a rate cap, from fixed seeds. Every
//! run must deliver the stream byte-exact; resent bytes are accounted.
//! Nothing here waits for real time (the clock is virtual).

use std::time::Duration;

use pfs_transport::udp::sim::{transfer, transfer_beside, Competitor, SimLink, SimReport};
use pfs_transport::udp::UdpConfig;

const MB: u64 = 1 << 20;

fn link(loss: f64, delay_ms: u64) -> SimLink {
    SimLink {
        loss,
        delay: Duration::from_millis(delay_ms),
        ..SimLink::default()
    }
}

fn check(r: &SimReport, total: u64) {
    assert!(r.error.is_none(), "failed: {:?}", r.error);
    assert!(
        r.exact,
        "delivered {} of {total} bytes, exact {}",
        r.delivered, r.exact
    );
    // Every lost stream byte was sent again, and resends are counted.
    assert!(r.client.stream_bytes_resent >= r.dropped_stream_bytes);
    assert_eq!(
        r.client.stream_bytes_sent,
        total + r.client.stream_bytes_resent,
        "every stream byte is a first send or a counted resend"
    );
}

#[test]
fn clean_link_is_exact_without_resends() {
    let total = 8 * MB;
    let r = transfer(
        UdpConfig::default(),
        link(0.0, 5),
        link(0.0, 5),
        total,
        1,
        Duration::from_secs(60),
    );
    check(&r, total);
    assert_eq!(r.client.stream_bytes_resent, 0);
    assert_eq!(r.client.packets_lost, 0);
}

#[test]
fn random_loss_up_to_thirty_percent_is_exact() {
    for (i, loss) in [0.01, 0.05, 0.1, 0.2, 0.3].into_iter().enumerate() {
        let total = 4 * MB;
        let r = transfer(
            UdpConfig::default(),
            link(loss, 25),
            link(loss, 25),
            total,
            100 + i as u64,
            Duration::from_secs(600),
        );
        check(&r, total);
        assert!(r.dropped > 0, "loss {loss} dropped nothing");
    }
}

#[test]
fn bursts_reordering_duplication_and_a_rate_cap() {
    let total = 6 * MB;
    let up = SimLink {
        loss: 0.02,
        burst: 0.5,
        duplicate: 0.02,
        reorder: 0.05,
        reorder_by: Duration::from_millis(3),
        delay: Duration::from_millis(20),
        rate: 12_500_000,
        queue: 256 << 10,
        max_datagram: 0,
    };
    let down = SimLink {
        duplicate: 0.02,
        reorder: 0.05,
        reorder_by: Duration::from_millis(3),
        ..link(0.01, 20)
    };
    for seed in [7, 8, 9] {
        let r = transfer(
            UdpConfig::default(),
            up,
            down,
            total,
            seed,
            Duration::from_secs(600),
        );
        check(&r, total);
        assert!(
            r.server.stream_bytes_duplicate > 0,
            "duplicates reached the receiver"
        );
    }
}

#[test]
fn rate_cap_at_one_percent_loss_keeps_the_link_busy() {
    // 100 Mbit/s, 50 ms RTT, 1 % loss: the transfer must take well under
    // twice the time the link needs (virtual time: a property of the
    // algorithm, not of this machine).
    let total = 32 * MB;
    let rate = 12_500_000u64;
    let up = SimLink {
        rate,
        queue: 1 << 20,
        ..link(0.01, 25)
    };
    let r = transfer(
        UdpConfig::default(),
        up,
        link(0.0, 25),
        total,
        42,
        Duration::from_secs(600),
    );
    check(&r, total);
    let ideal = total as f64 / rate as f64;
    let goodput = r.delivered as f64 / r.elapsed.as_secs_f64();
    assert!(
        r.elapsed.as_secs_f64() < ideal * 1.6,
        "took {:?} for an ideal {ideal:.2} s: {:.1} Mbit/s",
        r.elapsed,
        goodput * 8.0 / 1e6
    );
    // Resends stay close to what was lost.
    assert!(r.client.stream_bytes_resent as f64 <= 1.5 * r.dropped_stream_bytes as f64 + 65536.0);
}

#[test]
fn leaves_a_loss_based_flow_its_share() {
    // 50 Mbit/s, 40 ms RTT, a one-BDP tail-drop queue, and a flow beside
    // it that backs off on loss like TCP (β 0.7). Before the congestion
    // answer it was left about 2 % of the link.
    let rate = 6_250_000u64;
    let bdp = rate * 40 / 1000;
    let up = SimLink {
        rate,
        queue: bdp,
        ..link(0.0, 20)
    };
    // The sender's skipped packet numbers (§14.4) make each run depend on
    // its seed (without them this lossless run is the same for every
    // seed: 31.9 %); over seeds 1–13 the share was 20.7–33.0 %, so the bar
    // is on the mean of four seeds, run side by side.
    let total = 64 * MB;
    let runs: Vec<SimReport> = std::thread::scope(|s| {
        let handles: Vec<_> = [1u64, 3, 5, 7]
            .into_iter()
            .map(|seed| {
                s.spawn(move || {
                    transfer_beside(
                        UdpConfig::default(),
                        up,
                        link(0.0, 20),
                        Some(Competitor::default()),
                        total,
                        seed,
                        Duration::from_secs(600),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut shares = Vec::new();
    for r in &runs {
        check(r, total);
        assert!(r.congested_rounds > 0);
        shares.push(r.competitor_delivered as f64 / (r.competitor_delivered + r.delivered) as f64);
    }
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    assert!(
        mean >= 0.25 && shares.iter().all(|&s| s >= 0.15),
        "the competitor got {:.1} % on average ({shares:?})",
        mean * 100.0
    );
    // And the connection did not give the link away either.
    assert!(shares.iter().all(|&s| s <= 0.75), "the competitor got {shares:?}");
}

#[test]
fn random_loss_without_a_queue_is_not_congestion() {
    // 5 % random loss on a link whose queue never fills (no rate cap):
    // no round trip may count as congested, or random loss would throttle.
    let total = 16 * MB;
    let r = transfer(
        UdpConfig::default(),
        link(0.05, 20),
        link(0.05, 20),
        total,
        11,
        Duration::from_secs(600),
    );
    check(&r, total);
    assert_eq!(r.congested_rounds, 0);
}

#[test]
fn same_seed_same_run() {
    let a = transfer(
        UdpConfig::default(),
        link(0.05, 10),
        link(0.05, 10),
        2 * MB,
        5,
        Duration::from_secs(600),
    );
    let b = transfer(
        UdpConfig::default(),
        link(0.05, 10),
        link(0.05, 10),
        2 * MB,
        5,
        Duration::from_secs(600),
    );
    assert_eq!(a.client, b.client);
    assert_eq!(a.elapsed, b.elapsed);
}

#[test]
fn dead_peer_fails_within_the_idle_timeout() {
    let cfg = UdpConfig {
        idle_timeout: Duration::from_secs(3),
        ..UdpConfig::default()
    };
    // Everything to the server is lost after the opening: the client gives up.
    let r = transfer(cfg, link(1.0, 5), link(0.0, 5), MB, 3, Duration::from_secs(60));
    let e = r.error.expect("a dead path must fail");
    assert!(e.contains("did not answer") || e.contains("no packet"), "{e}");
}

#[test]
fn a_path_that_drops_full_datagrams_fails_instead_of_hanging() {
    let cfg = UdpConfig {
        idle_timeout: Duration::from_secs(3),
        ..UdpConfig::default()
    };
    // ACKs and the opening pass, full-size DATA never does.
    let up = SimLink {
        max_datagram: 1400,
        ..link(0.0, 5)
    };
    let r = transfer(cfg, up, link(0.0, 5), MB, 11, Duration::from_secs(60));
    let e = r.error.expect("a black-holed path must fail");
    assert!(e.contains("acknowledged nothing") && e.contains("--mtu"), "{e}");
    assert_eq!(r.delivered, 0);
}
