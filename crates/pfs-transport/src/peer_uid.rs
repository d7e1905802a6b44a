//! Who owns the other end of a TCP connection on this host: the kernel's
//! socket diagnostics (`NETLINK_SOCK_DIAG`, the interface `ss` uses) looked
//! up by the connection's four-tuple.
//!
//! A Unix socket tells its peer's uid through `SO_PEERCRED`; TCP has no such
//! option, but on loopback both ends live in this kernel, so the client's
//! socket can be found by its addresses and its owner read. A plain server
//! on a loopback port uses this to serve only its own user (or root), as
//! Unix sockets and shared memory already do.

use std::io;
use std::net::{IpAddr, SocketAddr};

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR` (linux/netlink.h).
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `struct nlmsghdr`.
const NLMSG_HEADER: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the
/// 48-byte `inet_diag_sockid`.
const REQUEST: usize = 56;
/// Offset of `idiag_uid` in `struct inet_diag_msg`: four bytes, the
/// 48-byte socket id, then expires, rqueue and wqueue.
const MSG_UID: usize = 4 + 48 + 12;

/// The uid owning the TCP socket on this host whose own address is `local`
/// and whose peer is `remote`, or `None` when no such socket exists (it
/// closed already, or it is not on this host).
///
/// For the client of an accepted loopback connection, `local` is the
/// accepted socket's peer address and `remote` its local address.
pub fn tcp_socket_uid(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<u32>> {
    let (local, remote) = (unmap(local), unmap(remote));
    if local.is_ipv4() != remote.is_ipv4() {
        return Ok(None);
    }
    let request = request(local, remote);
    let sock = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )?;
    rustix::net::sendto(&sock, &request, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    // One answer: the socket's message, or an error (ENOENT: no such socket).
    let mut answer = [0u8; 1024];
    let (n, _) = rustix::net::recv(&sock, &mut answer, RecvFlags::empty())?;
    parse_answer(&answer[..n.min(answer.len())])
}

/// A v4-mapped IPv6 address (a dual-stack listener's view of an IPv4
/// client) as the IPv4 address the client's socket has.
fn unmap(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// The netlink request: one exact lookup (no dump) of the TCP socket
/// bound to `local` and connected to `remote`.
fn request(local: SocketAddr, remote: SocketAddr) -> [u8; NLMSG_HEADER + REQUEST] {
    let mut b = [0u8; NLMSG_HEADER + REQUEST];
    b[0..4].copy_from_slice(&((NLMSG_HEADER + REQUEST) as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // seq and pid stay 0: one request, answered by the kernel.
    let r = &mut b[NLMSG_HEADER..];
    r[0] = if local.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    } as u8;
    r[1] = libc::IPPROTO_TCP as u8;
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every TCP state
    let id = &mut r[8..];
    id[0..2].copy_from_slice(&local.port().to_be_bytes());
    id[2..4].copy_from_slice(&remote.port().to_be_bytes());
    put_ip(&mut id[4..20], local.ip());
    put_ip(&mut id[20..36], remote.ip());
    // idiag_if 0 (any interface); cookie INET_DIAG_NOCOOKIE (all ones).
    id[40..48].copy_from_slice(&[0xff; 8]);
    b
}

fn put_ip(to: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => to[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => to.copy_from_slice(&v6.octets()),
    }
}

/// Reads the kernel's answer: the uid of a found socket, `None` for
/// "no such socket", an error for anything else.
fn parse_answer(b: &[u8]) -> io::Result<Option<u32>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag answer");
    let kind = b.get(4..6).ok_or_else(bad)?;
    let kind = u16::from_ne_bytes([kind[0], kind[1]]);
    let body = b.get(NLMSG_HEADER..).ok_or_else(bad)?;
    match kind {
        NLMSG_ERROR => {
            let errno = body.get(0..4).ok_or_else(bad)?;
            let errno = -i32::from_ne_bytes([errno[0], errno[1], errno[2], errno[3]]);
            if errno == libc::ENOENT {
                Ok(None)
            } else {
                Err(io::Error::from_raw_os_error(errno))
            }
        }
        SOCK_DIAG_BY_FAMILY => {
            let uid = body.get(MSG_UID..MSG_UID + 4).ok_or_else(bad)?;
            Ok(Some(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]])))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_owner_of_a_loopback_client() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let me = rustix::process::getuid().as_raw();
        let uid = tcp_socket_uid(peer, accepted.local_addr().unwrap()).unwrap();
        assert_eq!(uid, Some(me));
        drop(client);
    }

    #[test]
    #[ignore = "needs an IPv6 loopback"]
    fn finds_the_owner_over_ipv6_loopback() {
        let listener = std::net::TcpListener::bind("[::1]:0")
            .unwrap_or_else(|e| panic!("needs an IPv6 loopback: binding [::1] failed ({e})"));
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let me = rustix::process::getuid().as_raw();
        assert_eq!(
            tcp_socket_uid(peer, accepted.local_addr().unwrap()).unwrap(),
            Some(me)
        );
    }

    #[test]
    fn a_socket_that_does_not_exist_is_none() {
        let a: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:7".parse().unwrap();
        assert_eq!(tcp_socket_uid(a, b).unwrap(), None);
    }

    #[test]
    fn a_mapped_address_is_looked_up_as_ipv4() {
        let m: SocketAddr = "[::ffff:127.0.0.1]:80".parse().unwrap();
        assert_eq!(unmap(m), "127.0.0.1:80".parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn answers_that_are_cut_are_errors_not_panics() {
        for n in 0..NLMSG_HEADER + MSG_UID + 4 {
            let mut b = vec![0u8; n];
            if n >= 6 {
                b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
            }
            let r = parse_answer(&b);
            assert!(r.is_err(), "{n} bytes: {r:?}");
        }
    }
}
