//! The check behind the `udp_conn` fuzz target: datagrams from a hostile
//! peer into the UDP connection core of `crates/pfs-transport`. The core
//! never panics, never sends more than a datagram's room, and keeps its
//! stream consistent (reads return bytes in order, at most what arrived).
//! Included by path by the target and by
//! `crates/pfs-transport/tests/corpus.rs` (the seed corpus on stable).

use std::time::{Duration, Instant};

use pfs_transport::udp::auth::tag;
use pfs_transport::udp::{Connection, DatagramCipher, DatagramKeys, ReadOutcome, UdpConfig};
use pfs_wire::datagram::{Open, Packet, DATAGRAM_VERSION_TAGGED, PACKET_HEADER_LEN};

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// The UDP fuzz targets: name (also the corpus directory) and check.
pub const UDP_TARGETS: &[(&str, Check)] = &[("udp_conn", connection), ("udp_tagged", tagged)];

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

/// The key the `udp_tagged` peer tags with (the connection's receive key).
const PEER_KEY: [u8; 32] = [0x5a; 32];

/// Input: records `[len_lo, len_hi, advance_ms, mode, bytes…]`, each one
/// datagram to a server connection with datagram keys installed (§14.7).
/// Mode bit 0: the harness makes the datagram a tagged one with the
/// peer's real key (version byte 2, the right tag appended), so the
/// fuzzer reaches what follows a valid tag; otherwise the bytes go as
/// they are (untagged, or tagged with whatever tag they hold). Checks,
/// besides the `udp_conn` ones: once a validly tagged datagram arrived,
/// no untagged one is taken (each is counted as unauthenticated), and
/// no datagram with a wrong tag ever is.
pub fn tagged(data: &[u8]) {
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
    c.protect(&DatagramKeys {
        cipher: DatagramCipher::Aes256Gcm,
        send: [0xa5; 32],
        recv: PEER_KEY,
    });
    let _ = c.write(&[0x42; 5000]);
    c.finish();
    let mut out = vec![0u8; 1200];
    let mut read = vec![0u8; 4096];
    let mut peer_tagged = false;
    let mut rest = data;
    while let [lo, hi, adv, mode, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
        let (raw, next) = tail.split_at(len);
        rest = next;
        now += Duration::from_millis(u64::from(*adv));
        let mut datagram = raw.to_vec();
        let mut valid_tag = false;
        if mode & 1 == 1 && datagram.len() >= PACKET_HEADER_LEN {
            datagram[2] = DATAGRAM_VERSION_TAGGED;
            if let Ok(p) = Packet::parse(&[&datagram[..], &[0; 16]].concat()) {
                let t = tag(DatagramCipher::Aes256Gcm, &PEER_KEY, p.header.number, &datagram);
                datagram.extend_from_slice(&t);
                valid_tag = true;
            }
        }
        let before = c.stats();
        // A failed connection takes nothing more (its state is closed).
        let closed = c.error().is_some();
        c.handle_datagram(now, &datagram);
        let after = c.stats();
        // Only datagrams to this connection (id 7) have their tag checked.
        let mut ours = false;
        if let Ok(p) = Packet::parse(&datagram) {
            ours = p.header.conn == 7 && p.header.number < u64::MAX;
            let taken = after.packets_received > before.packets_received;
            match p.tag {
                None if peer_tagged && !closed && ours => {
                    assert!(!taken, "an untagged datagram taken after a tagged one");
                    assert_eq!(after.unauthenticated, before.unauthenticated + 1);
                }
                Some(_) if !valid_tag => assert!(!taken, "a datagram with a forged tag taken"),
                _ => {}
            }
        }
        peer_tagged |= valid_tag && !closed && ours;
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
