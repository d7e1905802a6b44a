//! Batched UDP I/O on a connected socket: many datagrams per system call.
//!
//! - [`send_batch`]: one `sendmmsg(2)` of several messages; a message may
//!   carry a `UDP_SEGMENT` control message (generic segmentation offload:
//!   the kernel cuts one buffer into equal datagrams), so one call can put
//!   hundreds of datagrams on the wire.
//! - [`recv_batch`]: one `recvmmsg(2)` into several buffers; with
//!   [`enable_gro`] the kernel may coalesce consecutive datagrams of one
//!   flow into one buffer and says the segment size (`UDP_GRO`).
//!
//! rustix wraps neither control message, so the `unsafe` lives in the
//! private `ffi` module below. Buffers for the message headers are kept in
//! [`SendScratch`] / [`RecvScratch`] and reused: no allocation per call
//! once they have grown.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Largest number of datagrams one GSO message may hold (`UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Largest GSO message (what fits in one IPv4 UDP datagram's length field).
pub const MAX_GSO_BYTES: usize = 65507;

/// One message to send: `data`, cut by the kernel into datagrams of
/// `segment` bytes when `segment` is non-zero (GSO).
#[derive(Debug, Clone, Copy)]
pub struct SendMsg<'a> {
    /// The bytes: one datagram, or `segment`-sized datagrams back to back
    /// (the last may be shorter).
    pub data: &'a [u8],
    /// Segment size for GSO; 0 sends `data` as one datagram.
    pub segment: u16,
}

/// One received buffer's metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes in the buffer.
    pub len: usize,
    /// Size of each datagram in it (GRO); equals `len` without GRO.
    pub segment: usize,
}

/// Reusable header storage for [`send_batch`].
#[derive(Debug, Default)]
pub struct SendScratch {
    inner: ffi::SendScratch,
}

/// Reusable header storage for [`recv_batch`].
#[derive(Debug, Default)]
pub struct RecvScratch {
    inner: ffi::RecvScratch,
}

/// Sends `msgs` with one `sendmmsg(2)` (non-blocking). Returns how many
/// messages the kernel took; `WouldBlock` when it took none because the
/// socket buffer is full. An error of the first message is returned as
/// is (`EIO` from a path that refuses GSO, `ECONNREFUSED` after an ICMP
/// port unreachable).
pub fn send_batch(fd: BorrowedFd<'_>, msgs: &[SendMsg<'_>], scratch: &mut SendScratch) -> io::Result<usize> {
    if msgs.is_empty() {
        return Ok(0);
    }
    scratch.inner.send(fd.as_raw_fd(), msgs)
}

/// Receives up to `bufs.len()` buffers with one `recvmmsg(2)`
/// (non-blocking); fills `meta` and returns how many. `WouldBlock` when
/// nothing is queued.
pub fn recv_batch(
    fd: BorrowedFd<'_>,
    bufs: &mut [Vec<u8>],
    meta: &mut [RecvMeta],
    scratch: &mut RecvScratch,
) -> io::Result<usize> {
    let n = bufs.len().min(meta.len());
    if n == 0 {
        return Ok(0);
    }
    scratch.inner.recv(fd.as_raw_fd(), &mut bufs[..n], &mut meta[..n])
}

/// Asks the kernel to coalesce received datagrams (`UDP_GRO`). Returns
/// whether it agreed.
pub fn enable_gro(fd: BorrowedFd<'_>) -> bool {
    ffi::set_int(fd.as_raw_fd(), libc::SOL_UDP, ffi::UDP_GRO, 1).is_ok()
}

/// Whether the kernel accepts `UDP_SEGMENT` on this socket (it may still
/// refuse a send on a path without checksum offload: see [`send_batch`]).
pub fn gso_supported(fd: BorrowedFd<'_>) -> bool {
    ffi::get_int(fd.as_raw_fd(), libc::SOL_UDP, ffi::UDP_SEGMENT).is_ok()
}

/// Asks for a socket buffer of `bytes` (`recv`: receive, else send):
/// `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE` first (allowed to root, above the
/// `rmem_max`/`wmem_max` caps), then the capped option. Returns the size
/// the kernel granted (it doubles the request for its bookkeeping).
pub fn set_buffer(fd: BorrowedFd<'_>, recv: bool, bytes: usize) -> usize {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let (force, plain) = if recv {
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF)
    } else {
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)
    };
    let raw = fd.as_raw_fd();
    if ffi::set_int(raw, libc::SOL_SOCKET, force, v).is_err() {
        let _ = ffi::set_int(raw, libc::SOL_SOCKET, plain, v);
    }
    ffi::get_int(raw, libc::SOL_SOCKET, plain).map_or(0, |g| g.max(0) as usize)
}

/// Turns on `IP_MTU_DISCOVER = IP_PMTUDISC_PROBE` (IPv4) or its IPv6 twin:
/// the kernel never fragments our datagrams and never lowers their size
/// behind our back; a datagram too large for the path fails with
/// `EMSGSIZE` instead.
pub fn set_dont_fragment(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        ffi::set_int(
            fd.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_PROBE,
        )
    } else {
        ffi::set_int(
            fd.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_PROBE,
        )
    }
}

#[allow(unsafe_code)]
mod ffi {
    use std::io;
    use std::mem;
    use std::os::fd::RawFd;
    use std::ptr;

    use super::{RecvMeta, SendMsg};

    pub const UDP_SEGMENT: libc::c_int = 103;
    pub const UDP_GRO: libc::c_int = 104;

    /// Room for one control message holding an `int` (GRO) or a `u16` (GSO).
    const CMSG_ROOM: usize = 32;

    #[derive(Debug, Default)]
    pub struct SendScratch {
        hdrs: Vec<libc::mmsghdr>,
        iovs: Vec<libc::iovec>,
        cmsgs: Vec<[u64; CMSG_ROOM / 8]>,
    }

    // SAFETY: the raw pointers inside are rebuilt before every use and
    // never dereferenced between calls; the buffers they pointed to are
    // not kept.
    unsafe impl Send for SendScratch {}

    #[derive(Debug, Default)]
    pub struct RecvScratch {
        hdrs: Vec<libc::mmsghdr>,
        iovs: Vec<libc::iovec>,
        cmsgs: Vec<[u64; CMSG_ROOM / 8]>,
    }

    // SAFETY: as for `SendScratch`.
    unsafe impl Send for RecvScratch {}

    fn zeroed_hdr() -> libc::mmsghdr {
        // SAFETY: `mmsghdr` is a plain C struct for which all-zero bytes
        // are a valid value (null pointers, zero lengths).
        unsafe { mem::zeroed() }
    }

    impl SendScratch {
        pub fn send(&mut self, fd: RawFd, msgs: &[SendMsg<'_>]) -> io::Result<usize> {
            let n = msgs.len().min(1024);
            self.hdrs.clear();
            self.iovs.clear();
            self.cmsgs.clear();
            self.hdrs.resize_with(n, zeroed_hdr);
            self.iovs.resize(
                n,
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                },
            );
            self.cmsgs.resize(n, [0; CMSG_ROOM / 8]);
            for (i, m) in msgs[..n].iter().enumerate() {
                self.iovs[i] = libc::iovec {
                    iov_base: m.data.as_ptr() as *mut libc::c_void,
                    iov_len: m.data.len(),
                };
            }
            // Pointers into `iovs` are taken once it is filled, from one
            // borrow of the whole vector.
            let iov_base = self.iovs.as_mut_ptr();
            for (i, m) in msgs[..n].iter().enumerate() {
                let hdr = &mut self.hdrs[i].msg_hdr;
                hdr.msg_iov = iov_base.wrapping_add(i);
                hdr.msg_iovlen = 1;
                if m.segment > 0 && m.data.len() > usize::from(m.segment) {
                    let control = self.cmsgs[i].as_mut_ptr().cast::<libc::c_void>();
                    // SAFETY: CMSG_SPACE is a pure computation.
                    let space = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as usize;
                    debug_assert!(space <= CMSG_ROOM);
                    hdr.msg_control = control;
                    hdr.msg_controllen = space as _;
                    // SAFETY: `hdr` points at a control buffer of `space`
                    // bytes (8-byte aligned, zeroed), enough for one cmsg
                    // holding a u16, so CMSG_FIRSTHDR is non-null and
                    // CMSG_DATA stays inside the buffer.
                    unsafe {
                        let cmsg = libc::CMSG_FIRSTHDR(hdr);
                        (*cmsg).cmsg_level = libc::SOL_UDP;
                        (*cmsg).cmsg_type = UDP_SEGMENT;
                        (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
                        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), m.segment);
                    }
                }
            }
            // SAFETY: `hdrs` holds `n` initialised headers whose iovecs
            // point into `msgs` (alive for this call) and whose control
            // buffers live in `cmsgs`; the kernel only reads them.
            let sent =
                unsafe { libc::sendmmsg(fd, self.hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
            if sent < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(sent as usize)
        }
    }

    impl RecvScratch {
        pub fn recv(&mut self, fd: RawFd, bufs: &mut [Vec<u8>], meta: &mut [RecvMeta]) -> io::Result<usize> {
            let n = bufs.len();
            self.hdrs.clear();
            self.iovs.clear();
            self.cmsgs.clear();
            self.hdrs.resize_with(n, zeroed_hdr);
            self.iovs.resize(
                n,
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0,
                },
            );
            self.cmsgs.resize(n, [0; CMSG_ROOM / 8]);
            for (i, b) in bufs.iter_mut().enumerate() {
                self.iovs[i] = libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                };
            }
            let iov_base = self.iovs.as_mut_ptr();
            for i in 0..n {
                let hdr = &mut self.hdrs[i].msg_hdr;
                hdr.msg_iov = iov_base.wrapping_add(i);
                hdr.msg_iovlen = 1;
                hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
                hdr.msg_controllen = CMSG_ROOM as _;
            }
            // SAFETY: every header points at one live, writable buffer of
            // the stated length and a control buffer of CMSG_ROOM bytes;
            // the kernel writes at most that much into each.
            let got = unsafe {
                libc::recvmmsg(
                    fd,
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                )
            };
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            let got = got as usize;
            for (m, h) in meta.iter_mut().zip(&self.hdrs).take(got) {
                let len = h.msg_len as usize;
                let mut segment = len;
                let hdr = &h.msg_hdr;
                // SAFETY: the kernel filled `msg_controllen` bytes of our
                // control buffer; the CMSG_* walk stays inside them.
                unsafe {
                    let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
                    while !cmsg.is_null() {
                        if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == UDP_GRO {
                            let v = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                            if v > 0 {
                                segment = v as usize;
                            }
                        }
                        cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
                    }
                }
                *m = RecvMeta { len, segment };
            }
            Ok(got)
        }
    }

    pub fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
        // SAFETY: passes a pointer to a live c_int and its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&v as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: passes a pointer to a live c_int and its size, which the
        // kernel may overwrite with a shorter length.
        let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut libc::c_int).cast(), &mut len) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn gso_send_and_gro_receive_over_loopback() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        let gro = enable_gro(b.as_fd());
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let gso = gso_supported(a.as_fd());
        let msgs = [
            SendMsg {
                data: &data[..4500],
                segment: if gso { 1000 } else { 0 },
            },
            SendMsg {
                data: &data[4500..4600],
                segment: 0,
            },
        ];
        let mut scratch = SendScratch::default();
        let first = if gso { &msgs[..] } else { &msgs[1..] };
        assert_eq!(send_batch(a.as_fd(), first, &mut scratch).unwrap(), first.len());
        let mut bufs = vec![vec![0u8; 65536]; 8];
        let mut meta = [RecvMeta::default(); 8];
        let mut rs = RecvScratch::default();
        let mut got = Vec::new();
        let mut datagrams = 0;
        for _ in 0..1000 {
            match recv_batch(b.as_fd(), &mut bufs, &mut meta, &mut rs) {
                Ok(n) => {
                    for i in 0..n {
                        got.extend_from_slice(&bufs[i][..meta[i].len]);
                        datagrams += meta[i].len.div_ceil(meta[i].segment.max(1));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if got.len() == first.iter().map(|m| m.data.len()).sum::<usize>() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        let want: Vec<u8> = first.iter().flat_map(|m| m.data.iter().copied()).collect();
        assert!(got == want, "received {} bytes, want {}", got.len(), want.len());
        if gso {
            // 4500 bytes in 1000-byte segments is five datagrams, plus one.
            assert_eq!(datagrams, 6, "gro {gro}");
        }
    }
}
