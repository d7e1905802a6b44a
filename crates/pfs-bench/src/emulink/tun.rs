//! The one `unsafe` of the emulated link: creating a TUN device with the
//! `TUNSETIFF` ioctl. Everything else on the device (reads, writes, poll)
//! goes through rustix on the owned descriptor.
//!
//! The device is `IFF_TUN | IFF_NO_PI`: raw IP packets, no packet-info
//! prefix, and no `IFF_VNET_HDR`, so the kernel never hands it a GSO
//! super-packet — it segments (and a reader sees) packets of at most the
//! device's MTU. The device lives in the network namespace of the thread
//! that creates it and disappears when the descriptor is closed.
#![allow(unsafe_code)]

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

/// An open TUN device (non-blocking descriptor).
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
}

impl Tun {
    /// Creates the TUN device `name` (at most 15 bytes) in the calling
    /// thread's network namespace. Needs `CAP_NET_ADMIN`.
    pub fn create(name: &str) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad interface name {name:?}"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        // SAFETY: `ifreq` is plain data (bytes and a union of plain data);
        // all zeroes is a valid value of it.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: the descriptor is open for the call; TUNSETIFF reads and
        // writes one `struct ifreq`, and `req` is a live, initialised one
        // whose name is NUL-terminated (zeroed, shorter than IFNAMSIZ).
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun {
            fd: file.into(),
            name: name.to_string(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
