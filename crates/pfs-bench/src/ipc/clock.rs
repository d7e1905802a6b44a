//! The study's time base: which TSC properties the CPU reports in
//! /proc/cpuinfo, and the TSC frequency calibrated against CLOCK_MONOTONIC.
//! Both processes read the same TSC; the client converts every cycle count to
//! nanoseconds with this one calibration.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::sys;

/// The /proc/cpuinfo flags that say something about the TSC, in report order.
const TSC_FLAGS: [&str; 6] = [
    "tsc",
    "rdtscp",
    "constant_tsc",
    "nonstop_tsc",
    "tsc_reliable",
    "tsc_known_freq",
];

/// How long the calibration counts TSC cycles against CLOCK_MONOTONIC.
const CALIBRATION: Duration = Duration::from_millis(100);

/// The clock latencies are measured with.
#[derive(Debug, Clone, Serialize)]
pub struct Clock {
    /// `TSC (lfence; rdtsc)` or `CLOCK_MONOTONIC`.
    pub source: String,
    /// Whether time stamps are TSC cycles (else nanoseconds).
    pub tsc: bool,
    /// Ticks per second: the calibrated TSC frequency, or 1e9.
    pub hz: f64,
    /// TSC-related /proc/cpuinfo flags present.
    pub flags: Vec<String>,
    /// `constant_tsc` and `nonstop_tsc` both present: the TSC ticks at one
    /// rate in every P- and C-state.
    pub invariant: bool,
}

impl Clock {
    /// Reads the CPU flags and, on x86-64, calibrates the TSC (~100 ms).
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = tsc_flags(&cpuinfo);
        let invariant = flags.iter().any(|f| f == "constant_tsc") && flags.iter().any(|f| f == "nonstop_tsc");
        if sys::TSC {
            Self {
                source: "TSC (lfence; rdtsc)".into(),
                tsc: true,
                hz: calibrate(CALIBRATION),
                flags,
                invariant,
            }
        } else {
            Self {
                source: "CLOCK_MONOTONIC".into(),
                tsc: false,
                hz: 1e9,
                flags,
                invariant,
            }
        }
    }

    /// Nanoseconds in `ticks` time stamps.
    pub fn ns(&self, ticks: f64) -> f64 {
        ticks * 1e9 / self.hz
    }

    /// One line for the report header.
    pub fn describe(&self) -> String {
        if !self.tsc {
            return "TSC not available on this architecture: CLOCK_MONOTONIC ns, cycle columns n/a".into();
        }
        let flags = if self.flags.is_empty() {
            "no TSC flags in /proc/cpuinfo".to_string()
        } else {
            self.flags.join(" ")
        };
        format!(
            "{} at {:.3} GHz (calibrated against CLOCK_MONOTONIC over {} ms), {} [{flags}]",
            self.source,
            self.hz / 1e9,
            CALIBRATION.as_millis(),
            if self.invariant {
                "invariant"
            } else {
                "NOT invariant"
            },
        )
    }

    /// What a reader should doubt about this clock.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.tsc {
            w.push("TSC not available: latencies are CLOCK_MONOTONIC nanoseconds (coarser, and each read costs more)".into());
        } else if !self.invariant {
            w.push(format!(
                "the TSC is not invariant (constant_tsc and nonstop_tsc not both in /proc/cpuinfo; have: {}): \
                 cycle counts may not convert to time at one rate",
                if self.flags.is_empty() { "none".to_string() } else { self.flags.join(" ") }
            ));
        }
        w
    }
}

/// The TSC-related flags on the first `flags` line of /proc/cpuinfo text.
fn tsc_flags(cpuinfo: &str) -> Vec<String> {
    let present: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.split_whitespace().collect())
        .unwrap_or_default();
    TSC_FLAGS
        .iter()
        .filter(|f| present.contains(f))
        .map(|f| f.to_string())
        .collect()
}

/// A (monotonic time, ticks) pair read as close together as we can: the
/// ticks read bracketed by two clock reads, the tightest of a few tries,
/// paired with the midpoint of its bracket.
fn paired_read() -> (Instant, u64) {
    let mut best: Option<(Duration, Instant, u64)> = None;
    for _ in 0..9 {
        let a = Instant::now();
        let t = sys::ticks();
        let b = Instant::now();
        let width = b - a;
        match best {
            Some((w, _, _)) if w <= width => {}
            _ => best = Some((width, a + width / 2, t)),
        }
    }
    let (_, at, t) = best.unwrap_or((Duration::ZERO, Instant::now(), sys::ticks()));
    (at, t)
}

/// Ticks per second, counted over `window` of CLOCK_MONOTONIC.
fn calibrate(window: Duration) -> f64 {
    let (i0, t0) = paired_read();
    std::thread::sleep(window);
    let (i1, t1) = paired_read();
    let secs = (i1 - i0).as_secs_f64();
    if secs > 0.0 && t1 > t0 {
        (t1 - t0) as f64 / secs
    } else {
        1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_picked_from_the_first_flags_line() {
        let text =
            "processor\t: 0\nflags\t\t: fpu tsc msr constant_tsc rep_good nonstop_tsc tsc_known_freq\n\
                    processor\t: 1\nflags\t\t: fpu\n";
        assert_eq!(
            tsc_flags(text),
            ["tsc", "constant_tsc", "nonstop_tsc", "tsc_known_freq"]
        );
        assert!(tsc_flags("").is_empty());
    }

    #[test]
    fn calibration_is_plausible() {
        let hz = calibrate(Duration::from_millis(20));
        // Any real clock: between 100 MHz and 10 GHz (CLOCK_MONOTONIC: 1 GHz).
        assert!((1e8..1e10).contains(&hz), "{hz}");
    }
}
