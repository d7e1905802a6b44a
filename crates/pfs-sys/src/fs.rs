//! Which filesystem holds a path, and the page sizes that follow from it.

use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// A filesystem type, from the `f_type` magic number `statfs(2)` reports.
///
/// The kinds PacketFS treats differently have their own variant; every
/// other filesystem is [`FsType::Other`] with its magic (its
/// [`Display`](fmt::Display) still names the common ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsType {
    /// hugetlbfs: every page of a file is a huge page of the mount's size.
    HugeTlbFs,
    /// tmpfs (and `/dev/shm`): memory-backed, gone at reboot.
    Tmpfs,
    /// ramfs: memory-backed, unswappable, gone at reboot.
    Ramfs,
    /// ext2/ext3/ext4 (they share one magic).
    Ext4,
    /// XFS.
    Xfs,
    /// Btrfs.
    Btrfs,
    /// Any other filesystem, by its magic number.
    Other(u32),
}

impl FsType {
    const HUGETLBFS_MAGIC: u32 = 0x9584_58f6;
    const TMPFS_MAGIC: u32 = 0x0102_1994;
    const RAMFS_MAGIC: u32 = 0x8584_58f6;
    const EXT4_MAGIC: u32 = 0xef53;
    const XFS_MAGIC: u32 = 0x5846_5342;
    const BTRFS_MAGIC: u32 = 0x9123_683e;

    /// The type with `statfs` magic `magic`.
    pub fn from_magic(magic: u32) -> Self {
        match magic {
            Self::HUGETLBFS_MAGIC => FsType::HugeTlbFs,
            Self::TMPFS_MAGIC => FsType::Tmpfs,
            Self::RAMFS_MAGIC => FsType::Ramfs,
            Self::EXT4_MAGIC => FsType::Ext4,
            Self::XFS_MAGIC => FsType::Xfs,
            Self::BTRFS_MAGIC => FsType::Btrfs,
            m => FsType::Other(m),
        }
    }

    /// The `statfs` magic number of this type.
    pub fn magic(&self) -> u32 {
        match *self {
            FsType::HugeTlbFs => Self::HUGETLBFS_MAGIC,
            FsType::Tmpfs => Self::TMPFS_MAGIC,
            FsType::Ramfs => Self::RAMFS_MAGIC,
            FsType::Ext4 => Self::EXT4_MAGIC,
            FsType::Xfs => Self::XFS_MAGIC,
            FsType::Btrfs => Self::BTRFS_MAGIC,
            FsType::Other(m) => m,
        }
    }

    /// The filesystem's usual name (`ext4`, `tmpfs`, `overlayfs`, …), or
    /// `None` for a magic this crate does not know.
    pub fn name(&self) -> Option<&'static str> {
        Some(match *self {
            FsType::HugeTlbFs => "hugetlbfs",
            FsType::Tmpfs => "tmpfs",
            FsType::Ramfs => "ramfs",
            FsType::Ext4 => "ext4",
            FsType::Xfs => "xfs",
            FsType::Btrfs => "btrfs",
            FsType::Other(0x794c_7630) => "overlayfs",
            FsType::Other(0x2fc1_2fc1) => "zfs",
            FsType::Other(0xf2f5_2010) => "f2fs",
            FsType::Other(0x6969) => "nfs",
            FsType::Other(0x0102_1997) => "9p",
            FsType::Other(0x6573_5546) => "fuse",
            FsType::Other(_) => return None,
        })
    }

    /// Whether files on it live in memory and vanish at reboot (tmpfs, ramfs).
    pub fn is_memory_backed(&self) -> bool {
        matches!(self, FsType::Tmpfs | FsType::Ramfs)
    }
}

/// The name, or `filesystem 0x<magic>` for an unknown one.
impl fmt::Display for FsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "filesystem 0x{:08x}", self.magic()),
        }
    }
}

/// What `statfs(2)` says about the filesystem holding a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    /// The filesystem type.
    pub fs_type: FsType,
    /// `f_bsize`: the optimal transfer block size; on hugetlbfs, the huge
    /// page size of the mount.
    pub block_size: u64,
}

impl FsInfo {
    fn from_statfs(st: &rustix::fs::StatFs) -> Self {
        // f_type is a signed word on some ABIs; the magic numbers are 32-bit.
        #[allow(clippy::unnecessary_cast)]
        let magic = (st.f_type as u64 & 0xffff_ffff) as u32;
        #[allow(clippy::unnecessary_cast)]
        let block_size = st.f_bsize as u64;
        FsInfo {
            fs_type: FsType::from_magic(magic),
            block_size,
        }
    }

    /// The huge page size if this is a hugetlbfs mount.
    pub fn hugetlbfs_page_size(&self) -> Option<u64> {
        (self.fs_type == FsType::HugeTlbFs).then_some(self.block_size)
    }
}

/// The filesystem holding `path` (`statfs(2)`).
pub fn statfs(path: &Path) -> io::Result<FsInfo> {
    Ok(FsInfo::from_statfs(&rustix::fs::statfs(path)?))
}

/// The filesystem holding an open file (`fstatfs(2)`).
pub fn fstatfs(fd: impl AsFd) -> io::Result<FsInfo> {
    Ok(FsInfo::from_statfs(&rustix::fs::fstatfs(fd)?))
}

/// `Some(huge page size)` iff `dir` is on a hugetlbfs mount.
pub fn hugetlbfs_page_size(dir: &Path) -> io::Result<Option<u64>> {
    Ok(statfs(dir)?.hugetlbfs_page_size())
}

/// The base page size of this machine (4 KiB on x86-64).
pub fn base_page_size() -> u64 {
    rustix::param::page_size() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_round_trip() {
        for t in [
            FsType::HugeTlbFs,
            FsType::Tmpfs,
            FsType::Ramfs,
            FsType::Ext4,
            FsType::Xfs,
            FsType::Btrfs,
            FsType::Other(0x794c_7630),
            FsType::Other(0x1234),
        ] {
            assert_eq!(FsType::from_magic(t.magic()), t);
        }
        assert_eq!(FsType::from_magic(0x9584_58f6), FsType::HugeTlbFs);
        assert_eq!(FsType::from_magic(0x0102_1994), FsType::Tmpfs);
    }

    #[test]
    fn names() {
        assert_eq!(FsType::Ext4.to_string(), "ext4");
        assert_eq!(FsType::Other(0x794c_7630).to_string(), "overlayfs");
        assert_eq!(FsType::Other(0x1234).to_string(), "filesystem 0x00001234");
        assert!(FsType::Tmpfs.is_memory_backed());
        assert!(!FsType::Ext4.is_memory_backed());
    }

    #[test]
    fn temp_dir_is_not_hugetlbfs() {
        let dir = std::env::temp_dir();
        let info = statfs(&dir).unwrap();
        assert_ne!(info.fs_type, FsType::HugeTlbFs);
        assert!(info.block_size > 0);
        assert_eq!(hugetlbfs_page_size(&dir).unwrap(), None);
        let f = std::fs::File::open(&dir).unwrap();
        assert_eq!(fstatfs(&f).unwrap(), info);
    }

    #[test]
    fn missing_path_is_an_error() {
        let e = statfs(Path::new("/nonexistent/pfs-sys-test")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn base_page_is_a_power_of_two() {
        let p = base_page_size();
        assert!(p >= 4096 && p.is_power_of_two());
    }

    #[test]
    fn hugetlbfs_mount_reports_its_page_size() {
        let Some(dir) = ["/dev/hugepages", "/mnt/huge", "/mnt/hugetlbfs"]
            .iter()
            .map(Path::new)
            .find(|d| statfs(d).is_ok_and(|i| i.fs_type == FsType::HugeTlbFs))
        else {
            eprintln!("skipped: no hugetlbfs mount at /dev/hugepages, /mnt/huge or /mnt/hugetlbfs");
            return;
        };
        let page = hugetlbfs_page_size(dir).unwrap().unwrap();
        assert!(page > base_page_size() && page.is_power_of_two());
    }
}
