//! Resource usage (`getrusage(2)`): CPU time, context switches, peak RSS.

/// CPU time, context switches and peak resident set size of a thread, the
/// process, or its reaped children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User CPU time, microseconds.
    pub user_us: u64,
    /// System CPU time, microseconds.
    pub sys_us: u64,
    /// Voluntary context switches (the thread blocked or yielded).
    pub nvcsw: u64,
    /// Involuntary context switches (the thread was preempted).
    pub nivcsw: u64,
    /// Peak resident set size, bytes. A high-water mark, not a counter: for
    /// a thread Linux reports the whole process's peak, for children the
    /// largest peak of any one child.
    pub max_rss_bytes: u64,
}

impl Usage {
    /// The usage between `earlier` and `self`: counters subtracted
    /// (saturating), [`Usage::max_rss_bytes`] kept from `self` (a peak has
    /// no meaningful difference).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
            nvcsw: self.nvcsw.saturating_sub(earlier.nvcsw),
            nivcsw: self.nivcsw.saturating_sub(earlier.nivcsw),
            max_rss_bytes: self.max_rss_bytes,
        }
    }

    /// Both usages' counters added (peak RSS: the larger).
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            user_us: self.user_us + other.user_us,
            sys_us: self.sys_us + other.sys_us,
            nvcsw: self.nvcsw + other.nvcsw,
            nivcsw: self.nivcsw + other.nivcsw,
            max_rss_bytes: self.max_rss_bytes.max(other.max_rss_bytes),
        }
    }

    /// User plus system CPU time, seconds.
    pub fn cpu_seconds(&self) -> f64 {
        (self.user_us + self.sys_us) as f64 / 1e6
    }
}

/// Resource usage of the calling thread (`RUSAGE_THREAD`).
pub fn thread_usage() -> Usage {
    ffi::getrusage(ffi::Who::Thread)
}

/// CPU time and context switches of another thread of this process, from
/// `/proc/self/task/TID/` (getrusage only reports the calling thread):
/// times in clock ticks (10 ms on most kernels), so coarse. `None` if the
/// thread is gone or the files cannot be read.
pub fn task_usage(tid: i32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = rustix::param::clock_ticks_per_second().max(1);
    let us = |i: usize| -> Option<u64> { Some(fields.get(i)?.parse::<u64>().ok()? * 1_000_000 / ticks) };
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let count = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    Some(Usage {
        user_us: us(11)?,
        sys_us: us(12)?,
        nvcsw: count("voluntary_ctxt_switches:"),
        nivcsw: count("nonvoluntary_ctxt_switches:"),
        max_rss_bytes: 0,
    })
}

/// Resource usage of the whole process, all threads (`RUSAGE_SELF`).
pub fn process_usage() -> Usage {
    ffi::getrusage(ffi::Who::Process)
}

/// Resource usage of the reaped children of this process (`RUSAGE_CHILDREN`).
pub fn children_usage() -> Usage {
    ffi::getrusage(ffi::Who::Children)
}

/// Peak resident set size of the process, bytes.
pub fn max_rss_bytes() -> u64 {
    process_usage().max_rss_bytes
}

/// The one `unsafe` of this crate: `getrusage(2)`, which rustix does not wrap.
/// CPU seconds (user, sys) of another process and of all its reaped
/// descendants, from `/proc/PID/stat` (getrusage cannot ask about a process
/// that is not a child of this one). `None` when it cannot be read.
pub fn tree_cpu_seconds(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name (which may hold spaces):
    // state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let tick = rustix::param::clock_ticks_per_second() as f64;
    let (utime, stime, cutime, cstime) = (num(11)?, num(12)?, num(13)?, num(14)?);
    Some(((utime + cutime) / tick, (stime + cstime) / tick))
}

mod ffi {
    #![allow(unsafe_code)]

    use super::Usage;

    /// Whose usage to read.
    #[derive(Debug, Clone, Copy)]
    pub(super) enum Who {
        Thread,
        Process,
        Children,
    }

    pub(super) fn getrusage(who: Who) -> Usage {
        let who = match who {
            Who::Thread => libc::RUSAGE_THREAD,
            Who::Process => libc::RUSAGE_SELF,
            Who::Children => libc::RUSAGE_CHILDREN,
        };
        // SAFETY: `rusage` is plain old data (integers and timevals); the
        // all-zero bit pattern is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable `rusage` that outlives the call;
        // `who` is one of the RUSAGE_* constants, so getrusage cannot fail
        // (EFAULT and EINVAL are its only errors) and fills `ru` completely.
        unsafe { libc::getrusage(who, &mut ru) };
        Usage {
            user_us: micros(ru.ru_utime),
            sys_us: micros(ru.ru_stime),
            nvcsw: ru.ru_nvcsw.max(0) as u64,
            nivcsw: ru.ru_nivcsw.max(0) as u64,
            // Linux reports ru_maxrss in KiB.
            max_rss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
        }
    }

    fn micros(tv: libc::timeval) -> u64 {
        (tv.tv_sec.max(0) as u64) * 1_000_000 + tv.tv_usec.max(0) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_tree_cpu_is_readable() {
        let (user, sys) = tree_cpu_seconds(std::process::id()).expect("/proc/self/stat");
        assert!(user >= 0.0 && sys >= 0.0);
        assert_eq!(tree_cpu_seconds(u32::MAX), None);
    }

    #[test]
    fn usage_moves_forward() {
        let a = thread_usage();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = thread_usage();
        assert!(b.user_us + b.sys_us >= a.user_us + a.sys_us);
        assert!(max_rss_bytes() > 0);
        let p = process_usage();
        assert!(p.user_us + p.sys_us >= b.user_us + b.sys_us);
        let _ = children_usage();
    }

    #[test]
    fn since_subtracts_counters_and_keeps_the_peak() {
        let early = Usage {
            user_us: 10,
            sys_us: 5,
            nvcsw: 3,
            nivcsw: 1,
            max_rss_bytes: 100,
        };
        let late = Usage {
            user_us: 25,
            sys_us: 7,
            nvcsw: 4,
            nivcsw: 1,
            max_rss_bytes: 300,
        };
        let d = late.since(&early);
        assert_eq!((d.user_us, d.sys_us, d.nvcsw, d.nivcsw), (15, 2, 1, 0));
        assert_eq!(d.max_rss_bytes, 300);
        assert_eq!(early.since(&late).user_us, 0, "saturates");
        assert!((d.cpu_seconds() - 17e-6).abs() < 1e-12);
    }
}
