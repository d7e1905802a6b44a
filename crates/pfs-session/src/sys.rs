//! The few system calls the session layer makes directly: per-thread
//! resource usage and CPU pinning. The only module of this crate with
//! `unsafe`.
#![allow(unsafe_code)]

use std::io;

/// CPU time and context switches of one thread (or the process, for RSS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User CPU time, microseconds.
    pub user_us: u64,
    /// System CPU time, microseconds.
    pub sys_us: u64,
    /// Voluntary context switches.
    pub nvcsw: u64,
    /// Involuntary context switches.
    pub nivcsw: u64,
}

impl Usage {
    /// `self - earlier`, saturating.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
            nvcsw: self.nvcsw.saturating_sub(earlier.nvcsw),
            nivcsw: self.nivcsw.saturating_sub(earlier.nivcsw),
        }
    }
}

fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`; `who` is one of the
    // RUSAGE_* constants. getrusage cannot fail with those arguments.
    unsafe { libc::getrusage(who, &mut ru) };
    ru
}

fn usage_of(who: libc::c_int) -> Usage {
    let ru = rusage(who);
    Usage {
        user_us: tv_us(ru.ru_utime),
        sys_us: tv_us(ru.ru_stime),
        nvcsw: ru.ru_nvcsw as u64,
        nivcsw: ru.ru_nivcsw as u64,
    }
}

fn tv_us(tv: libc::timeval) -> u64 {
    (tv.tv_sec as u64) * 1_000_000 + tv.tv_usec as u64
}

/// Resource usage of the calling thread (`RUSAGE_THREAD`).
pub fn thread_usage() -> Usage {
    usage_of(libc::RUSAGE_THREAD)
}

/// Resource usage of the whole process (`RUSAGE_SELF`).
pub fn process_usage() -> Usage {
    usage_of(libc::RUSAGE_SELF)
}

/// Resource usage of the reaped children of this process (`RUSAGE_CHILDREN`).
pub fn children_usage() -> Usage {
    usage_of(libc::RUSAGE_CHILDREN)
}

/// Peak resident set size of the process, bytes.
pub fn max_rss_bytes() -> u64 {
    (rusage(libc::RUSAGE_SELF).ru_maxrss as u64) * 1024
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cpu index beyond CPU_SETSIZE",
        ));
    }
    // SAFETY: `cpu_set_t` is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE was checked above, so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; `set` is a valid cpu_set_t of
    // the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn pin_rejects_absurd_cpu() {
        assert!(pin_current_thread(1 << 20).is_err());
        assert!(pin_current_thread(0).is_ok());
    }
}
