//! Which filesystem holds the blob file, and what that means for its pages
//! and its lifetime.

use std::path::{Path, PathBuf};

use crate::error::StoreError;

/// `statfs(2)` magic of hugetlbfs.
pub(crate) const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;
/// `statfs(2)` magic of tmpfs (and /dev/shm).
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// `statfs(2)` magic of ramfs.
const RAMFS_MAGIC: u64 = 0x8584_58f6;

/// Where the blob file lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackingKind {
    /// A regular file `DIR/blob` in the store directory (base pages, page
    /// cache). Persists on disk filesystems; on tmpfs until reboot.
    File,
    /// A file on a hugetlbfs mount (huge pages). Persists until reboot or
    /// unmount; the index in the store directory outlives it, and a store
    /// whose blob vanished reopens empty.
    HugeTlbFs,
}

impl BackingKind {
    /// Short name: `file` or `hugetlbfs`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BackingKind::File => "file",
            BackingKind::HugeTlbFs => "hugetlbfs",
        }
    }
}

impl std::fmt::Display for BackingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backing a store obtained, as reported by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backing {
    /// Where the blob file lives.
    pub kind: BackingKind,
    /// Absolute path of the blob file.
    pub blob_path: PathBuf,
    /// Page size of the blob's pages (and the unit its file grows by on hugetlbfs).
    pub page_size: u64,
    /// Human description, e.g. `file on ext4 (4 KiB pages, persists)` or
    /// `hugetlbfs file (2 MiB pages, persists until reboot/unmount)`.
    pub description: String,
}

/// `(f_type, f_bsize)` of the filesystem holding `path`.
pub(crate) fn statfs(path: &Path) -> Result<(u64, u64), StoreError> {
    let st = rustix::fs::statfs(path).map_err(|e| StoreError::io("statfs", path, e.into()))?;
    // f_type is a signed word on some ABIs; the magic numbers are 32-bit.
    Ok(((st.f_type as u64) & 0xffff_ffff, st.f_bsize as u64))
}

/// `Some(huge page size)` iff `dir` is on a hugetlbfs mount.
pub(crate) fn hugetlbfs_page_size(dir: &Path) -> Result<Option<u64>, StoreError> {
    let (magic, bsize) = statfs(dir)?;
    Ok((magic == HUGETLBFS_MAGIC).then_some(bsize))
}

/// The base page size of this machine.
pub(crate) fn base_page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Name of a filesystem from its `statfs` magic.
fn fs_name(magic: u64) -> String {
    let name = match magic {
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        TMPFS_MAGIC => "tmpfs",
        RAMFS_MAGIC => "ramfs",
        0x794c_7630 => "overlayfs",
        0x2fc1_2fc1 => "zfs",
        0xf2f5_2010 => "f2fs",
        0x6969 => "nfs",
        0x0102_1997 => "9p",
        0x6573_5546 => "fuse",
        _ => return format!("filesystem 0x{magic:08x}"),
    };
    name.to_owned()
}

/// `4 KiB`, `2 MiB`, `1 GiB`.
pub(crate) fn size_name(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b.trailing_zeros() >= 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b.trailing_zeros() >= 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b.trailing_zeros() >= 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Describe a regular blob file on the filesystem with magic `magic`.
pub(crate) fn describe_file(magic: u64, page_size: u64) -> String {
    let lifetime = match magic {
        TMPFS_MAGIC | RAMFS_MAGIC => "persists until reboot",
        _ => "persists",
    };
    format!(
        "file on {} ({} pages, {lifetime})",
        fs_name(magic),
        size_name(page_size)
    )
}

/// Describe a blob file on hugetlbfs.
pub(crate) fn describe_huge(page_size: u64) -> String {
    format!(
        "hugetlbfs file ({} pages, persists until reboot/unmount)",
        size_name(page_size)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions() {
        assert_eq!(
            describe_file(0xef53, 4096),
            "file on ext4 (4 KiB pages, persists)"
        );
        assert_eq!(
            describe_file(TMPFS_MAGIC, 4096),
            "file on tmpfs (4 KiB pages, persists until reboot)"
        );
        assert_eq!(
            describe_huge(2 << 20),
            "hugetlbfs file (2 MiB pages, persists until reboot/unmount)"
        );
        assert_eq!(size_name(1 << 30), "1 GiB");
        assert_eq!(size_name(1000), "1000 B");
        assert!(fs_name(0x1234).starts_with("filesystem 0x"));
    }

    #[test]
    fn temp_dir_is_not_hugetlbfs() {
        assert_eq!(hugetlbfs_page_size(&std::env::temp_dir()).unwrap(), None);
    }
}
