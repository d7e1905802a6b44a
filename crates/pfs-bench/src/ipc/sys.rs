//! The study's clock: the time stamp ([`ticks`]: the TSC on x86-64,
//! CLOCK_MONOTONIC elsewhere). CPU placement comes from `pfs-sys`. The only
//! module of the study with `unsafe`; every function here is safe to call.
#![allow(unsafe_code)]

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
}
