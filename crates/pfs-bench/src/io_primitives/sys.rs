//! The raw system calls of the I/O-primitives study: `sendmsg` (with and
//! without `MSG_ZEROCOPY`), `SO_ZEROCOPY`, the socket error queue
//! (`MSG_ERRQUEUE`) that carries zerocopy completions, and per-thread
//! hardware counters (`perf_event_open`). The only module of the study with
//! `unsafe`; every function here is safe to call.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{self, IoSlice, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

// linux/socket.h (asm-generic value; x86-64 and aarch64 use it), linux/errqueue.h.
const SO_ZEROCOPY: libc::c_int = 60;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Turns on `SO_ZEROCOPY` so that `MSG_ZEROCOPY` sends are honoured.
pub fn set_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `fd` is an open socket for the borrow's lifetime; `optval`
    // points at a live `c_int` and `optlen` is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One `sendmsg(2)` over `bufs` with `MSG_NOSIGNAL` (and `MSG_ZEROCOPY` when
/// asked). Returns the bytes the kernel took, which may be fewer than asked.
pub fn sendmsg(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>], zerocopy: bool) -> io::Result<usize> {
    // SAFETY: `msghdr` is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is documented to be ABI-compatible with `iovec` on Unix; the
    // kernel only reads through this pointer.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    let flags = libc::MSG_NOSIGNAL | if zerocopy { libc::MSG_ZEROCOPY } else { 0 };
    // SAFETY: `msg` points at `bufs.len()` valid iovecs borrowed for the
    // duration of the call; no name or control buffer is passed. With
    // MSG_ZEROCOPY the kernel pins the pages; the caller keeps the buffers
    // unmodified until their completion arrives (see `ZcTracker`).
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One zerocopy completion notification: sends `lo..=hi` (the per-socket
/// counter of `MSG_ZEROCOPY` calls) are done with the caller's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcRange {
    /// First completed send id.
    pub lo: u32,
    /// Last completed send id (inclusive).
    pub hi: u32,
    /// The kernel copied the data instead (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied: bool,
}

/// Reads every zerocopy notification queued on the socket's error queue
/// without blocking and appends them to `out`. Any other queued error is
/// returned as an error.
pub fn read_zc_completions(fd: BorrowedFd<'_>, out: &mut Vec<ZcRange>) -> io::Result<()> {
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = [0u64; 16];
    loop {
        // SAFETY: `msghdr` is plain old data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` describes no data iovecs and a writable, aligned
        // control buffer of the stated size that outlives the call.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(()),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
        let need = std::mem::size_of::<libc::sock_extended_err>() as libc::c_uint;
        // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR only reads its
        // control pointer and length.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: a non-null pointer from CMSG_FIRSTHDR/CMSG_NXTHDR points
            // at a complete `cmsghdr` inside `control`.
            let hdr = unsafe { &*cmsg };
            let is_recverr = (hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
                || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
            // SAFETY: CMSG_LEN is pure arithmetic.
            let min_len = unsafe { libc::CMSG_LEN(need) } as usize;
            if is_recverr && hdr.cmsg_len as usize >= min_len {
                // SAFETY: the length check above guarantees a whole
                // `sock_extended_err` follows the header inside `control`;
                // read_unaligned makes no alignment assumption.
                let ee: libc::sock_extended_err =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                    out.push(ZcRange {
                        lo: ee.ee_info,
                        hi: ee.ee_data,
                        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    });
                } else if ee.ee_errno != 0 {
                    return Err(io::Error::from_raw_os_error(ee.ee_errno as i32));
                }
            }
            // SAFETY: `cmsg` is a valid header inside `msg`'s control buffer.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
    }
}

/// Waits up to `timeout` for the socket's error queue to become non-empty
/// (`POLLERR`). Returns whether it did.
pub fn wait_error_queue(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    // SAFETY: `p` is one valid pollfd and nfds is 1.
    let rc = unsafe { libc::poll(&mut p, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    Ok(rc > 0 && p.revents & libc::POLLERR != 0)
}

/// A hardware event counted by [`HwCounter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwEvent {
    /// `PERF_COUNT_HW_CPU_CYCLES`.
    Cycles,
    /// `PERF_COUNT_HW_CACHE_MISSES` (last-level cache misses on most CPUs).
    CacheMisses,
}

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER0` (64 bytes), which
/// every kernel accepts; the bit-field word is `flags`.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;

/// A running per-thread hardware counter (calling thread, any CPU).
#[derive(Debug)]
pub struct HwCounter {
    file: File,
    /// Whether kernel-mode events are counted too (false when the
    /// perf_event_paranoid setting only allowed user mode).
    pub includes_kernel: bool,
}

fn perf_event_open(attr: &PerfEventAttr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid perf_event_attr whose `size` field matches
    // the bytes provided; pid 0 / cpu -1 count the calling thread on any CPU;
    // group -1 means no group. On success the return is a new fd we own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

impl HwCounter {
    /// Opens and starts a counter for the calling thread. Counts kernel mode
    /// too when allowed, else user mode only. Fails (ENOENT, EOPNOTSUPP, …)
    /// where the (virtual) CPU exposes no hardware counters.
    pub fn open(event: HwEvent) -> io::Result<Self> {
        let config = match event {
            HwEvent::Cycles => PERF_COUNT_HW_CPU_CYCLES,
            HwEvent::CacheMisses => PERF_COUNT_HW_CACHE_MISSES,
        };
        let mut attr = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            sample_period: 0,
            sample_type: 0,
            read_format: 0,
            flags: ATTR_EXCLUDE_HV,
            wakeup_events: 0,
            bp_type: 0,
            config1: 0,
        };
        match perf_event_open(&attr) {
            Ok(fd) => Ok(Self {
                file: File::from(fd),
                includes_kernel: true,
            }),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                attr.flags |= ATTR_EXCLUDE_KERNEL;
                let fd = perf_event_open(&attr)?;
                Ok(Self {
                    file: File::from(fd),
                    includes_kernel: false,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The current count.
    pub fn read(&mut self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.file.read_exact(&mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn sendmsg_moves_all_parts() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        let parts = [IoSlice::new(b"ab"), IoSlice::new(b""), IoSlice::new(b"cde")];
        assert_eq!(sendmsg(tx.as_fd(), &parts, false).unwrap(), 5);
        drop(tx);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"abcde");
    }

    #[test]
    fn zerocopy_completions_arrive() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        if set_zerocopy(tx.as_fd()).is_err() {
            return; // kernel without SO_ZEROCOPY: nothing to check here
        }
        let data = vec![7u8; 4096];
        for _ in 0..4 {
            assert_eq!(sendmsg(tx.as_fd(), &[IoSlice::new(&data)], true).unwrap(), 4096);
        }
        let mut buf = vec![0u8; 4 * 4096];
        rx.read_exact(&mut buf).unwrap();
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        while got.iter().map(|r: &ZcRange| r.hi - r.lo + 1).sum::<u32>() < 4 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no completions");
            wait_error_queue(tx.as_fd(), Duration::from_millis(100)).unwrap();
            read_zc_completions(tx.as_fd(), &mut got).unwrap();
        }
        assert_eq!(got[0].lo, 0);
    }

    #[test]
    fn hw_counter_opens_or_says_why() {
        match HwCounter::open(HwEvent::Cycles) {
            Ok(mut c) => {
                let a = c.read().unwrap();
                let b = c.read().unwrap();
                assert!(b >= a);
            }
            Err(e) => assert!(e.raw_os_error().is_some()),
        }
    }
}
