//! Which filesystem holds the blob file, and what that means for its pages
//! and its lifetime.

use std::path::{Path, PathBuf};

use pfs_sys::FsType;

use crate::error::StoreError;

/// Where the blob file lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreBacking {
    /// A regular file `DIR/blob` in the store directory (base pages, page
    /// cache). Persists on disk filesystems; on tmpfs until reboot.
    File,
    /// A file on a hugetlbfs mount (huge pages). Persists until reboot or
    /// unmount; the index in the store directory outlives it, and a store
    /// whose blob vanished reopens empty.
    HugeTlbFs,
}

impl StoreBacking {
    /// Short name: `file` or `hugetlbfs`.
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreBacking::File => "file",
            StoreBacking::HugeTlbFs => "hugetlbfs",
        }
    }
}

impl std::fmt::Display for StoreBacking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backing a store obtained, as reported by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backing {
    /// Where the blob file lives.
    pub kind: StoreBacking,
    /// Absolute path of the blob file.
    pub blob_path: PathBuf,
    /// Page size of the blob's pages (and the unit its file grows by on hugetlbfs).
    pub page_size: u64,
    /// Human description, e.g. `file on ext4 (4 KiB pages, persists)` or
    /// `hugetlbfs file (2 MiB pages, persists until reboot/unmount)`.
    pub description: String,
}

/// The filesystem type of the filesystem holding `path`.
pub(crate) fn fs_type(path: &Path) -> Result<FsType, StoreError> {
    Ok(pfs_sys::statfs(path)
        .map_err(|e| StoreError::io("statfs", path, e))?
        .fs_type)
}

/// `Some(huge page size)` iff `dir` is on a hugetlbfs mount.
pub(crate) fn hugetlbfs_page_size(dir: &Path) -> Result<Option<u64>, StoreError> {
    pfs_sys::hugetlbfs_page_size(dir).map_err(|e| StoreError::io("statfs", dir, e))
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

/// Describe a regular blob file on a filesystem of type `fs`.
pub(crate) fn describe_file(fs: FsType, page_size: u64) -> String {
    let lifetime = if fs.is_memory_backed() {
        "persists until reboot"
    } else {
        "persists"
    };
    format!("file on {fs} ({} pages, {lifetime})", size_name(page_size))
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
            describe_file(FsType::Ext4, 4096),
            "file on ext4 (4 KiB pages, persists)"
        );
        assert_eq!(
            describe_file(FsType::Tmpfs, 4096),
            "file on tmpfs (4 KiB pages, persists until reboot)"
        );
        assert_eq!(
            describe_huge(2 << 20),
            "hugetlbfs file (2 MiB pages, persists until reboot/unmount)"
        );
        assert_eq!(size_name(1 << 30), "1 GiB");
        assert_eq!(size_name(1000), "1000 B");
        assert_eq!(
            describe_file(FsType::Other(0x1234), 4096),
            "file on filesystem 0x00001234 (4 KiB pages, persists)"
        );
        assert_eq!(
            describe_file(FsType::Ramfs, 4096),
            "file on ramfs (4 KiB pages, persists until reboot)"
        );
    }

    #[test]
    fn temp_dir_is_not_hugetlbfs() {
        assert_eq!(hugetlbfs_page_size(&std::env::temp_dir()).unwrap(), None);
    }
}
