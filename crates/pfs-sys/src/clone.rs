//! Sharing a file's blocks with another file (`FICLONERANGE`): a reflink,
//! where the filesystem supports one (Btrfs, XFS with reflink, …), so a
//! range copied from a file already on disk costs neither a write nor disk
//! space until one of the two is changed.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Shares `len` bytes of `src` from `src_offset` into `dst` at
/// `dst_offset` (`ioctl(FICLONERANGE)`). The offsets must be multiples of
/// the filesystem's block size and so must `len`, unless the range ends at
/// the end of `src`; both files on the same filesystem. Filesystems without
/// reflinks answer `EOPNOTSUPP` (or `EINVAL`, `EXDEV`, `ENOTTY`): the caller
/// copies instead. `len` 0 does nothing (the ioctl would mean "to the end").
pub fn clone_range(
    dst: impl AsFd,
    dst_offset: u64,
    src: impl AsFd,
    src_offset: u64,
    len: u64,
) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    ffi::ficlonerange(
        dst.as_fd().as_raw_fd(),
        &libc::file_clone_range {
            src_fd: i64::from(src.as_fd().as_raw_fd()),
            src_offset,
            src_length: len,
            dest_offset: dst_offset,
        },
    )
}

mod ffi {
    #![allow(unsafe_code)]

    use std::io;
    use std::os::fd::RawFd;

    pub(super) fn ficlonerange(dst: RawFd, range: &libc::file_clone_range) -> io::Result<()> {
        // SAFETY: FICLONERANGE reads one `file_clone_range` through the
        // pointer, which is valid and outlives the call; `dst` and the
        // struct's `src_fd` are descriptors the caller borrows for the call.
        // The kernel checks both descriptors and every range itself.
        let r = unsafe { libc::ioctl(dst, libc::FICLONERANGE, range as *const libc::file_clone_range) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn zero_length_does_nothing_and_tmpfs_says_unsupported() {
        let mut a = tempfile::tempfile().unwrap();
        a.write_all(&[7u8; 8192]).unwrap();
        let b = tempfile::tempfile().unwrap();
        clone_range(&b, 0, &a, 0, 0).expect("nothing to do");
        // Wherever the temp dir is, the result is either a clone (the
        // bytes then match) or an error that says "not here".
        match clone_range(&b, 0, &a, 0, 4096) {
            Ok(()) => {
                use std::os::unix::fs::FileExt;
                let mut got = vec![0u8; 4096];
                b.read_exact_at(&mut got, 0).unwrap();
                assert_eq!(got, vec![7u8; 4096]);
            }
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EINVAL | libc::EXDEV | libc::ENOTTY)
                ),
                "{e}"
            ),
        }
    }
}
