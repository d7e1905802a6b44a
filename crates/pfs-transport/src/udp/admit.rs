//! Stateless address validation for the UDP listener, after QUIC's Retry
//! (RFC 9000 §8.1), and the limits on connections from proven addresses.
//!
//! An OPEN without a valid token is answered with a RETRY carrying a
//! token and forgotten: the listener keeps no state, socket, buffer or
//! thread for it. A token is an issue time and an HMAC-SHA256 (ring),
//! keyed by a per-listener random secret, over that time, the client's IP
//! address and port and its connection id. Only a client that receives
//! datagrams at its address can echo it, so a spoofed source never gets a
//! connection; tokens cost nothing, so a flood of spoofed OPENs cannot use
//! up anything a client with a real address needs. Sans-I/O: the caller
//! passes `now`.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use pfs_wire::datagram::{Token, TOKEN_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// How long a token stays valid. Long enough for a client far away to
/// echo it (one round trip, plus OPEN's 200 ms resend), short enough that
/// a token seen on the path is soon worthless.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(20);
/// Live connections one proven IP address may hold at a listener.
pub const MAX_PER_SOURCE: usize = 64;
/// Live connections a listener holds in all.
pub const MAX_CONNECTIONS: usize = 1024;
/// Receive-buffer bytes a listener's connections hold together: a buffer
/// grows only within it (each connection's first
/// [`INITIAL_RECV_BUFFER`](super::conn::INITIAL_RECV_BUFFER) is granted
/// regardless). 32 connections at the full 32 MiB window.
pub const RECV_BUDGET: usize = 1 << 30;

/// Why a token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The MAC does not match: not issued by this listener, or for another
    /// address, port or connection id.
    #[error("the address token was not issued for this address and connection id")]
    Forged,
    /// Issued longer ago than [`TOKEN_LIFETIME`].
    #[error("the address token expired")]
    Expired,
    /// Issued after `now` (a token from a clock this listener never had).
    #[error("the address token is from the future")]
    Future,
}

/// Could not draw the listener's secret from the system's random source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no randomness for the UDP listener's token secret")]
pub struct NoRandomness;

/// Issues and checks address tokens for one listener.
pub struct Admission {
    key: hmac::Key,
    /// Token times count seconds from here.
    epoch: Instant,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

const MAC_LEN: usize = 32;
const _: () = assert!(8 + MAC_LEN == TOKEN_LEN);

impl Admission {
    /// A fresh random secret; token times count from `epoch`.
    pub fn new(epoch: Instant) -> Result<Self, NoRandomness> {
        let mut secret = [0u8; 32];
        SystemRandom::new().fill(&mut secret).map_err(|_| NoRandomness)?;
        Ok(Self::with_secret(&secret, epoch))
    }

    /// A given secret (tests, fuzzing).
    pub fn with_secret(secret: &[u8], epoch: Instant) -> Self {
        Self {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            epoch,
        }
    }

    fn seconds(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs()
    }

    /// What the MAC covers: issue time, IP address, port, client id.
    fn mac_input(issued: u64, peer: SocketAddr, client_conn: u32) -> [u8; 30] {
        let mut m = [0u8; 30];
        m[..8].copy_from_slice(&issued.to_le_bytes());
        m[8..24].copy_from_slice(&address_bytes(peer.ip()));
        m[24..26].copy_from_slice(&peer.port().to_le_bytes());
        m[26..].copy_from_slice(&client_conn.to_le_bytes());
        m
    }

    /// The token for `peer` and the client's connection id, issued at `now`.
    pub fn issue(&self, now: Instant, peer: SocketAddr, client_conn: u32) -> Token {
        // The issue time counts from 1: a token is never all zeros
        // (OPEN's "no token").
        let issued = self.seconds(now) + 1;
        let mut token = [0u8; TOKEN_LEN];
        token[..8].copy_from_slice(&issued.to_le_bytes());
        let tag = hmac::sign(&self.key, &Self::mac_input(issued, peer, client_conn));
        token[8..].copy_from_slice(tag.as_ref());
        token
    }

    /// Checks that `token` was issued by this listener for `peer` and
    /// `client_conn` within [`TOKEN_LIFETIME`] before `now`.
    pub fn check(
        &self,
        now: Instant,
        peer: SocketAddr,
        client_conn: u32,
        token: &Token,
    ) -> Result<(), TokenError> {
        let (time, mac) = token.split_at(8);
        let mut raw = [0u8; 8];
        raw.copy_from_slice(time);
        let issued = u64::from_le_bytes(raw);
        // Constant time: ring compares the whole tag.
        hmac::verify(&self.key, &Self::mac_input(issued, peer, client_conn), mac)
            .map_err(|_| TokenError::Forged)?;
        let now_s = self.seconds(now) + 1;
        if issued > now_s {
            return Err(TokenError::Future);
        }
        if now_s - issued > TOKEN_LIFETIME.as_secs() {
            return Err(TokenError::Expired);
        }
        Ok(())
    }
}

/// An IP address as 16 bytes (IPv4 mapped), so both families MAC alike.
fn address_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_token_is_good_only_for_its_address_port_id_and_time() {
        let t0 = Instant::now();
        let a = Admission::with_secret(b"k", t0);
        let peer = addr("192.0.2.7:4000");
        let tok = a.issue(t0, peer, 9);
        assert!(tok.iter().any(|&b| b != 0));
        assert_eq!(a.check(t0, peer, 9, &tok), Ok(()));
        assert_eq!(a.check(t0 + TOKEN_LIFETIME, peer, 9, &tok), Ok(()));
        assert_eq!(
            a.check(t0 + TOKEN_LIFETIME + Duration::from_secs(1), peer, 9, &tok),
            Err(TokenError::Expired)
        );
        assert_eq!(
            a.check(t0, addr("192.0.2.8:4000"), 9, &tok),
            Err(TokenError::Forged)
        );
        assert_eq!(
            a.check(t0, addr("192.0.2.7:4001"), 9, &tok),
            Err(TokenError::Forged)
        );
        assert_eq!(a.check(t0, peer, 10, &tok), Err(TokenError::Forged));
        let other = Admission::with_secret(b"other", t0);
        assert_eq!(other.check(t0, peer, 9, &tok), Err(TokenError::Forged));
        for i in 0..TOKEN_LEN {
            let mut bad = tok;
            bad[i] ^= 1;
            assert_eq!(a.check(t0, peer, 9, &bad), Err(TokenError::Forged), "byte {i}");
        }
        // Issued later than the listener's clock: refused.
        let later = a.issue(t0 + Duration::from_secs(5), peer, 9);
        assert_eq!(a.check(t0, peer, 9, &later), Err(TokenError::Future));
    }

    /// The `udp-retry` vector of docs/wire.md §14.8: its token is what
    /// this code issues for the key, time and client the vector names.
    #[test]
    fn the_wire_vector_token() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/wire.md")).unwrap();
        let at = doc
            .find("#### vector: udp-retry\n")
            .expect("the udp-retry vector");
        let block = &doc[at..];
        let start = block.find("```hex\n").unwrap() + 7;
        let end = start + block[start..].find("```").unwrap();
        let hex: String = block[start..end]
            .chars()
            .filter(|c| c.is_ascii_hexdigit())
            .collect();
        let packet: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let token: Token = packet[16..].try_into().unwrap();
        let secret: Vec<u8> = (0u8..32).collect();
        let t0 = Instant::now();
        let a = Admission::with_secret(&secret, t0);
        let peer = addr("192.0.2.1:4000");
        let now = t0 + Duration::from_secs(4);
        assert_eq!(a.issue(now, peer, 0x1122_3344), token);
        assert_eq!(a.check(now, peer, 0x1122_3344, &token), Ok(()));
        // The invalid case: the same token for another port.
        assert_eq!(
            a.check(now, addr("192.0.2.1:4001"), 0x1122_3344, &token),
            Err(TokenError::Forged)
        );
    }

    #[test]
    fn random_secrets_differ() {
        let t0 = Instant::now();
        let (a, b) = (Admission::new(t0).unwrap(), Admission::new(t0).unwrap());
        let peer = addr("[2001:db8::1]:5");
        assert_eq!(
            b.check(t0, peer, 1, &a.issue(t0, peer, 1)),
            Err(TokenError::Forged)
        );
    }
}
