//! CPU placement: pin the calling thread, read the CPUs this process may use.

use std::io;

use rustix::thread::CpuSet;

/// One past the highest CPU index an affinity mask can name (`CPU_SETSIZE`).
pub const MAX_CPU: usize = CpuSet::MAX_CPU;

/// Pins the calling thread to `cpu`.
///
/// Fails with [`io::ErrorKind::InvalidInput`] for an index at or beyond
/// [`MAX_CPU`], and with the OS error (`EINVAL`) for a CPU this process is
/// not allowed to run on.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= MAX_CPU {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is out of range (the affinity mask holds {MAX_CPU} CPUs)"),
        ));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The CPUs the calling thread may run on (its affinity mask), in
/// ascending order. If the mask cannot be read, every CPU from 0 to
/// `available_parallelism() - 1`.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n).collect()
        }
    }
}

/// The CPU the calling thread is running on at this instant.
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_rejects_absurd_cpu() {
        assert_eq!(
            pin_current_thread(1 << 20).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert!(pin_current_thread(usize::MAX).is_err());
    }

    #[test]
    fn pinning_to_an_allowed_cpu_sticks() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
        let last = *cpus.last().unwrap_or(&0);
        // A thread of its own, so the test harness thread is never moved.
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(current_cpu(), last);
        })
        .join()
        .unwrap();
    }
}
