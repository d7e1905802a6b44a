//! The checks behind the UDP fuzz targets of `crates/pfs-transport`:
//! `udp_conn`, datagrams from a hostile peer into the connection core (it
//! never panics, never sends more than a datagram's room, and keeps its
//! stream consistent: reads return bytes in order, at most what arrived);
//! `udp_open`, datagrams at the listener's admission (OPEN and its address
//! token: never panics, never answers with more than it got, and admits
//! only a token it issued for that address, port and id).
//! Included by path by the target and by
//! `crates/pfs-transport/tests/corpus.rs` (the seed corpus on stable).

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use pfs_transport::udp::admit::{Admission, TokenError};
use pfs_transport::udp::auth::tag;
use pfs_transport::udp::{Connection, DatagramCipher, DatagramKeys, ReadOutcome, UdpConfig};
use pfs_wire::datagram::{
    Open, OpenRequest, Packet, PacketHeader, PacketType, Retry, DATAGRAM_VERSION_TAGGED, PACKET_HEADER_LEN,
};

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// The UDP fuzz targets: name (also the corpus directory) and check.
pub const UDP_TARGETS: &[(&str, Check)] = &[
    ("udp_conn", connection),
    ("udp_open", open),
    ("udp_tagged", tagged),
];

/// Input: `[addr, seconds, datagram…]`: one datagram at a listener from
/// 192.0.2.`addr`:4000, `seconds` after the listener started. An OPEN is
/// checked as the listener checks it: a token passes only if this
/// listener issued it for that address, port and id within its life; the
/// RETRY answer is never larger than the OPEN; the token it carries
/// passes for the same client and fails for another address or id.
pub fn open(data: &[u8]) {
    let [addr, seconds, datagram @ ..] = data else {
        return;
    };
    let start = Instant::now();
    let now = start + Duration::from_secs(u64::from(*seconds));
    let admission = Admission::with_secret(b"fuzz", start);
    let from = SocketAddr::from(([192, 0, 2, *addr], 4000));
    let Ok((header, body)) = PacketHeader::parse(datagram) else {
        return;
    };
    if header.kind != PacketType::Open {
        return;
    }
    let Ok(req) = OpenRequest::parse(body) else {
        return;
    };
    assert_eq!(OpenRequest::parse(&req.emit()), Ok(req), "OPEN re-encode");
    let client = req.open.conn;
    if let Some(token) = req.token {
        // The input's own token: it can pass only if it is exactly the one
        // this listener would have issued for this client.
        if admission.check(now, from, client, &token).is_ok() {
            let issued = u64::from_le_bytes(token[..8].try_into().unwrap_or_default());
            let at = start + Duration::from_secs(issued.saturating_sub(1));
            assert_eq!(
                admission.issue(at, from, client),
                token,
                "a token passed that was never issued"
            );
        }
    }
    let token = admission.issue(now, from, client);
    let retry = Retry { token };
    assert!(
        PACKET_HEADER_LEN + retry.emit().len() <= datagram.len(),
        "RETRY larger than the OPEN"
    );
    assert_eq!(Retry::parse(&retry.emit()), Ok(retry));
    assert_eq!(admission.check(now, from, client, &token), Ok(()));
    assert_eq!(
        admission.check(now, from, client ^ 1, &token),
        Err(TokenError::Forged)
    );
    let elsewhere = SocketAddr::from(([192, 0, 2, addr.wrapping_add(1)], 4000));
    assert_eq!(
        admission.check(now, elsewhere, client, &token),
        Err(TokenError::Forged)
    );
    let late = now + pfs_transport::udp::admit::TOKEN_LIFETIME + Duration::from_secs(1);
    assert_eq!(
        admission.check(late, from, client, &token),
        Err(TokenError::Expired)
    );
}

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
