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
use pfs_transport::udp::{Connection, ReadOutcome, UdpConfig};
use pfs_wire::datagram::{Open, OpenRequest, PacketHeader, PacketType, Retry, PACKET_HEADER_LEN};

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// The UDP fuzz targets: name (also the corpus directory) and check.
pub const UDP_TARGETS: &[(&str, Check)] = &[("udp_conn", connection), ("udp_open", open)];

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
