//! The UDP connection core over the simulated network (virtual time, seeded):
//! goodput against a rate-capped link at several loss rates, with what was
//! lost and resent; then the same link shared with a loss-based flow that
//! backs off like TCP (β 0.7), with both shares. A property of the
//! algorithm, not of this machine.
//!
//! `cargo run --release -p pfs-transport --example sim_sweep -- [RATE_MBIT] [RTT_MS] [MiB]`

use std::time::Duration;

use pfs_transport::udp::sim::{transfer, transfer_beside, Competitor, SimLink};
use pfs_transport::udp::UdpConfig;

fn main() {
    let args: Vec<f64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let mbit = args.first().copied().unwrap_or(500.0);
    let rtt_ms = args.get(1).copied().unwrap_or(50.0);
    let mib = args.get(2).copied().unwrap_or(256.0) as u64;
    let rate = (mbit * 1e6 / 8.0) as u64;
    let one_way = Duration::from_secs_f64(rtt_ms / 2000.0);
    // A bottleneck queue of one BDP, as a well-sized router buffer.
    let queue = ((rate as f64) * rtt_ms / 1000.0) as u64;
    // Client → server through the rate cap; ACKs back with loss only.
    let links = |loss: f64| {
        let down = SimLink {
            loss,
            delay: one_way,
            ..SimLink::default()
        };
        (SimLink { rate, queue, ..down }, down)
    };
    println!("link {mbit} Mbit/s (UDP payload bytes), RTT {rtt_ms} ms, queue {queue} B, {mib} MiB per run, loss both ways");
    println!("loss   goodput_Mbit/s  of_link  lost_stream_MB  resent_MB  resent/lost  spurious  probe_timeouts  congested  exact");
    for loss in [0.0, 0.01, 0.05, 0.2] {
        let (up, down) = links(loss);
        let r = transfer(
            UdpConfig::default(),
            up,
            down,
            mib << 20,
            42,
            Duration::from_secs(3600),
        );
        let gp = r.delivered as f64 * 8.0 / r.elapsed.as_secs_f64() / 1e6;
        let lost = r.dropped_stream_bytes as f64 / 1e6;
        let resent = r.client.stream_bytes_resent as f64 / 1e6;
        println!(
            "{:>4.0}%  {:>14.1}  {:>7.3}  {:>14.3}  {:>9.3}  {:>11.3}  {:>8}  {:>14}  {:>9}  {}",
            loss * 100.0,
            gp,
            gp / mbit,
            lost,
            resent,
            if lost > 0.0 { resent / lost } else { 0.0 },
            r.client.packets_spurious,
            r.client.probe_timeouts,
            r.congested_rounds,
            r.exact
        );
    }
    println!();
    println!("beside a loss-based flow (window +1 packet per RTT, ×0.7 on loss), same link and queue");
    println!("loss   pfs_Mbit/s  competitor_Mbit/s  competitor_share  congested  exact");
    for loss in [0.0, 0.01] {
        let (up, down) = links(loss);
        let r = transfer_beside(
            UdpConfig::default(),
            up,
            down,
            Some(Competitor::default()),
            mib << 20,
            42,
            Duration::from_secs(3600),
        );
        let secs = r.elapsed.as_secs_f64();
        let ours = r.delivered as f64 * 8.0 / secs / 1e6;
        let theirs = r.competitor_delivered as f64 * 8.0 / secs / 1e6;
        println!(
            "{:>4.0}%  {:>10.1}  {:>17.1}  {:>16.3}  {:>9}  {}",
            loss * 100.0,
            ours,
            theirs,
            theirs / (ours + theirs),
            r.congested_rounds,
            r.exact
        );
    }
}
