//! Host facts for benchmark headers, read from /proc and /sys.

use std::fs;

/// Kernel release.
pub fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// CPU model name.
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// Online CPUs of the machine (not the calling thread's affinity mask).
pub fn cores() -> usize {
    fs::read_to_string("/proc/cpuinfo")
        .map(|s| s.lines().filter(|l| l.starts_with("processor")).count())
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// The bracketed THP mode, e.g. `madvise`.
pub fn thp_mode() -> String {
    fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|s| {
            let start = s.find('[')?;
            let end = s[start..].find(']')?;
            Some(s[start + 1..start + end].to_string())
        })
        .unwrap_or_else(|| "?".into())
}
