//! The check behind the `udp_conn` fuzz target: datagrams from a hostile
//! peer into the UDP connection core of `crates/pfs-transport`. The core
//! never panics, never sends more than a datagram's room, and keeps its
//! stream consistent (reads return bytes in order, at most what arrived).
//! Included by path by the target and by
//! `crates/pfs-transport/tests/corpus.rs` (the seed corpus on stable).

use std::time::{Duration, Instant};

use pfs_transport::udp::{Connection, ReadOutcome, UdpConfig};
use pfs_wire::datagram::Open;

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// The UDP fuzz targets: name (also the corpus directory) and check.
pub const UDP_TARGETS: &[(&str, Check)] = &[("udp_conn", connection)];

/// Input: a sequence of `[len_lo, len_hi, advance_ms, bytes…]` records,
/// each one datagram to a server connection (whose id is 7) after the
/// clock moves on by `advance_ms`; the server writes some data of its own
/// so ACKs and losses have something to act on.
pub fn connection(data: &[u8]) {
    let cfg = UdpConfig {
        send_buffer: 1 << 16,
        recv_window: 1 << 16,
        max_datagram: 1200,
        ..UdpConfig::default()
    };
    let start = Instant::now();
    let mut now = start;
    let open = Open {
        conn: 1,
        max_datagram: 1200,
        window: 1 << 16,
    };
    let mut c = Connection::server(cfg, now, 7, &open);
    // Bytes of its own to send, so ACKs, losses and timeouts act on something.
    let _ = c.write(&[0x42; 5000]);
    c.finish();
    let mut out = vec![0u8; 1200];
    let mut read = vec![0u8; 4096];
    let mut rest = data;
    while let [lo, hi, adv, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (datagram, next) = tail.split_at(len);
        rest = next;
        now += Duration::from_millis(u64::from(*adv));
        c.handle_datagram(now, datagram);
        c.handle_timeout(now);
        for _ in 0..64 {
            match c.poll_transmit(now, &mut out) {
                Some(n) => assert!(n <= 1200, "datagram of {n} bytes"),
                None => break,
            }
        }
        match c.read(&mut read) {
            ReadOutcome::Data(n) => assert!(n <= read.len()),
            ReadOutcome::End | ReadOutcome::Blocked | ReadOutcome::Failed(_) => {}
        }
        if let Some(t) = c.poll_timeout() {
            assert!(t >= start);
        }
    }
}
