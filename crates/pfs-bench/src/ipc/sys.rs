//! The study's clock read and CPU placement: the time stamp ([`ticks`]: the
//! TSC on x86-64, CLOCK_MONOTONIC elsewhere) and thread pinning. The only
//! module of the study with `unsafe`; every function here is safe to call.
#![allow(unsafe_code)]

use std::io;

/// Whether [`ticks`] reads the TSC (x86-64) rather than CLOCK_MONOTONIC.
pub const TSC: bool = cfg!(target_arch = "x86_64");

/// The current time stamp: TSC cycles on x86-64.
///
/// Ordering: `lfence; rdtsc`. RDTSC on its own is not ordered: it may
/// execute before earlier instructions have completed — e.g. before the
/// load that saw the message arrive — which would shorten a measured
/// one-way time. LFENCE starts no later instruction until every earlier one
/// has completed locally, so the read happens after the receive. `rdtscp`
/// orders the same way (earlier instructions only) but some virtual CPUs do
/// not offer it; LFENCE is SSE2, which every x86-64 has. No fence after: the
/// sender stores the value into the message, and that store depends on it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn ticks() -> u64 {
    // SAFETY: LFENCE (SSE2) and RDTSC exist on every x86-64 CPU and only
    // read processor state. RDTSC would fault only if this process had
    // disabled it with prctl(PR_SET_TSC), which pfs never does.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}

/// The current time stamp: CLOCK_MONOTONIC nanoseconds (no TSC on this
/// architecture). System-wide, so comparable across the two processes.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub fn ticks() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// The CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..crate::sysinfo::cores()).collect(),
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> io::Result<()> {
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is out of range"),
        ));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_advance() {
        let a = ticks();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = ticks();
        assert!(b > a, "{a} then {b}");
    }

    #[test]
    fn pinning_to_an_allowed_cpu_sticks() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        let last = *cpus.last().unwrap_or(&0);
        std::thread::spawn(move || {
            pin(last).unwrap();
            assert_eq!(current_cpu(), last);
        })
        .join()
        .unwrap();
        assert!(pin(usize::MAX).is_err());
    }
}
