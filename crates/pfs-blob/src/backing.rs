//! What pages back the blob, as the kernel reports it.
//!
//! Selection is attempted elsewhere ([`crate::blob`]); this module answers
//! "what did we actually get": statfs for hugetlbfs mounts, sysfs for the THP
//! policy and the hugepage pool, and `/proc/self/smaps` for how much of a
//! mapping is really backed by huge pages. Reports say what was obtained,
//! never what was asked for.

use std::io;
use std::path::Path;

use pfs_sys::FsInfo;

use crate::error::BlobError;

const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
const THP_SHMEM_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
const THP_PMD_SIZE: &str = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size";

/// Kind of pages backing a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackingKind {
    /// A file on a hugetlbfs mount: every page is a huge page, reserved up front.
    HugeTlbFs,
    /// Transparent huge pages: at least part of the mapping is PMD-mapped.
    Thp,
    /// Base pages (4 KiB on x86-64).
    #[serde(rename = "4k")]
    SmallPages,
}

impl BackingKind {
    /// Short name for reports: `hugetlbfs`, `thp` or `4k`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BackingKind::HugeTlbFs => "hugetlbfs",
            BackingKind::Thp => "thp",
            BackingKind::SmallPages => "4k",
        }
    }

    /// One-byte code for the wire (HELLO).
    pub fn code(&self) -> u8 {
        match self {
            BackingKind::HugeTlbFs => 0,
            BackingKind::Thp => 1,
            BackingKind::SmallPages => 2,
        }
    }

    /// Inverse of [`BackingKind::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(BackingKind::HugeTlbFs),
            1 => Some(BackingKind::Thp),
            2 => Some(BackingKind::SmallPages),
            _ => None,
        }
    }

    /// Inverse of [`BackingKind::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hugetlbfs" => Some(BackingKind::HugeTlbFs),
            "thp" => Some(BackingKind::Thp),
            "4k" => Some(BackingKind::SmallPages),
            _ => None,
        }
    }
}

impl std::fmt::Display for BackingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backing actually obtained for a blob, with every fallback explained.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackingReport {
    /// Kind of pages obtained.
    pub kind: BackingKind,
    /// Page size in bytes of the pages obtained (hugetlbfs: the mount's
    /// page size; THP: the PMD size; else the base page size).
    pub page_size: u64,
    /// Bytes of the mapping backed by huge pages (hugetlbfs: all of it).
    pub huge_bytes: u64,
    /// One line per fallback or adjustment, e.g. a size rounding.
    pub warnings: Vec<String>,
}

/// `Some(page size)` iff `dir` is on a hugetlbfs mount.
pub fn hugetlbfs_page_size(dir: &Path) -> Result<Option<u64>, BlobError> {
    Ok(statfs(dir)?.hugetlbfs_page_size())
}

/// The filesystem holding `path`.
pub(crate) fn statfs(path: &Path) -> Result<FsInfo, BlobError> {
    pfs_sys::statfs(path).map_err(|e| BlobError::io("statfs", path, e))
}

/// Same as [`statfs`] for an open file at `path`.
pub(crate) fn fstatfs(file: &std::fs::File, path: &Path) -> Result<FsInfo, BlobError> {
    pfs_sys::fstatfs(file).map_err(|e| BlobError::io("fstatfs", path, e))
}

/// Which THP policy file applies to a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThpScope {
    /// Anonymous private memory: `transparent_hugepage/enabled`.
    Anon,
    /// tmpfs / shared memory files: `transparent_hugepage/shmem_enabled`.
    Shmem,
}

/// The selected THP mode, bracketed as the kernel prints it (e.g. `[madvise]`),
/// or `None` if THP is not available on this kernel.
pub(crate) fn thp_mode(scope: ThpScope) -> Option<String> {
    let path = match scope {
        ThpScope::Anon => THP_ENABLED,
        ThpScope::Shmem => THP_SHMEM_ENABLED,
    };
    let text = std::fs::read_to_string(path).ok()?;
    selected_mode(&text).map(|m| format!("[{m}]"))
}

/// The bracketed word of a sysfs mode line like `always [madvise] never`.
fn selected_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(&text[start..start + len])
}

/// Size of a PMD-mapped transparent huge page.
pub(crate) fn thp_pmd_size() -> u64 {
    std::fs::read_to_string(THP_PMD_SIZE)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2 << 20)
}

/// Huge pages of `page_size` bytes that can still be handed out: free minus
/// reserved-but-not-yet-faulted. `None` if the pool is not visible.
pub(crate) fn hugepages_available(page_size: u64) -> Option<u64> {
    let dir = format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page_size / 1024);
    let read = |f: &str| -> Option<u64> {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let free = read("free_hugepages")?;
    let resv = read("resv_hugepages").unwrap_or(0);
    Some(free.saturating_sub(resv))
}

/// Huge-page accounting for one address range, summed over its VMAs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SmapsHuge {
    /// `AnonHugePages` (anonymous THP), bytes.
    pub anon_huge: u64,
    /// `ShmemPmdMapped` (tmpfs THP), bytes.
    pub shmem_pmd: u64,
    /// `FilePmdMapped` (page-cache THP), bytes.
    pub file_pmd: u64,
    /// `Shared_Hugetlb + Private_Hugetlb`, bytes.
    pub hugetlb: u64,
    /// `Rss`, bytes.
    pub rss: u64,
}

impl SmapsHuge {
    /// Bytes mapped by transparent huge pages of any flavour.
    pub fn thp_bytes(&self) -> u64 {
        self.anon_huge + self.shmem_pmd + self.file_pmd
    }
}

/// Read `/proc/self/smaps` and sum huge-page counters over the VMAs that
/// overlap `[addr, addr + len)`. smaps counts per VMA: if the kernel merged
/// the blob's mapping with an adjacent one of the same flags (two blobs in
/// one process), the counters cover both.
pub(crate) fn smaps_huge(addr: usize, len: usize) -> io::Result<SmapsHuge> {
    let text = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(parse_smaps(&text, addr as u64, (addr + len) as u64))
}

fn parse_smaps(text: &str, lo: u64, hi: u64) -> SmapsHuge {
    let mut out = SmapsHuge::default();
    let mut inside = false;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some(key) = first.strip_suffix(':') {
            if !inside {
                continue;
            }
            let kb: u64 = match fields.next().and_then(|v| v.parse().ok()) {
                Some(v) => v,
                None => continue, // VmFlags and other non-numeric lines
            };
            let bytes = kb * 1024;
            match key {
                "AnonHugePages" => out.anon_huge += bytes,
                "ShmemPmdMapped" => out.shmem_pmd += bytes,
                "FilePmdMapped" => out.file_pmd += bytes,
                "Shared_Hugetlb" | "Private_Hugetlb" => out.hugetlb += bytes,
                "Rss" => out.rss += bytes,
                _ => {}
            }
        } else if let Some((a, b)) = first.split_once('-') {
            // A VMA header: "start-end perms offset dev inode [path]".
            inside = match (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                (Ok(start), Ok(end)) => start < hi && end > lo,
                _ => false,
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for k in [BackingKind::HugeTlbFs, BackingKind::Thp, BackingKind::SmallPages] {
            assert_eq!(BackingKind::from_code(k.code()), Some(k));
            assert_eq!(BackingKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(BackingKind::from_code(3), None);
    }

    #[test]
    fn mode_parsing() {
        assert_eq!(selected_mode("always [madvise] never\n"), Some("madvise"));
        assert_eq!(
            selected_mode("always within_size advise [never] deny force"),
            Some("never")
        );
        assert_eq!(selected_mode("garbage"), None);
    }

    #[test]
    fn smaps_parsing_sums_overlapping_vmas() {
        let text = "\
00400000-00600000 r-xp 00000000 08:01 1 /bin/x
Rss:                 100 kB
AnonHugePages:      2048 kB
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
Rss:                4096 kB
AnonHugePages:      4096 kB
ShmemPmdMapped:        0 kB
VmFlags: rd wr mr mw me ac hg
7f0000400000-7f0000600000 rw-s 00000000 00:10 5 /dev/shm/x
Rss:                2048 kB
FilePmdMapped:      2048 kB
Private_Hugetlb:       0 kB
";
        let s = parse_smaps(text, 0x7f00_0000_0000, 0x7f00_0060_0000);
        assert_eq!(s.anon_huge, 4096 * 1024);
        assert_eq!(s.file_pmd, 2048 * 1024);
        assert_eq!(s.rss, 6144 * 1024);
        assert_eq!(s.thp_bytes(), 6144 * 1024);
    }

    #[test]
    fn dev_shm_or_tmp_is_not_hugetlbfs() {
        let dir = std::env::temp_dir();
        assert_eq!(hugetlbfs_page_size(&dir).unwrap(), None);
    }
}
