//! `--bwlimit`: the sender paces its writes to a rate, as rsync does.
//!
//! [`BwLimit`] is a token bucket kept as one instant (the generic cell rate
//! algorithm): sending `n` bytes costs `n / rate` seconds of "theoretical
//! arrival time", and a piece may go once that time, its cost included, is
//! no more than the burst's worth of seconds ahead of now. It takes `now` as an argument and
//! answers with an instant to wait for, so it is tested with a simulated
//! clock; the driver ([`write_paced`]) sleeps. The core is never slowed:
//! it builds frames as before, and only their writing waits. Over any
//! interval of `t` seconds at most `burst + rate·t` bytes go out.
//!
//! Rates follow rsync's `--bwlimit`: a bare number is KiB per second;
//! suffixes `K`/`KiB`, `M`/`MiB`, `G`/`GiB` are powers of 1024, `KB`, `MB`,
//! `GB` powers of 1000, `B` bytes; fractions are allowed (`1.5M`); `0` means
//! no limit ([`parse_rate`]).

use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use pfs_transport::Transport;

use crate::framing::Transmit;

/// Smallest burst, so slow rates still write in sensible pieces.
const MIN_BURST: u64 = 4 << 10;
/// The burst is this fraction of a second's worth of bytes (1/8 s).
const BURST_PER_SECOND: u64 = 8;
/// Seconds of writing one frame may take at the limit: well inside a
/// receiver's idle timeout (120 s by default), which a frame must beat.
pub const FRAME_SECONDS: u64 = 20;
/// The longest a frame of one largest chunk may take at the lowest rate
/// allowed: half of a receiver's default idle timeout.
const MAX_FRAME_SECONDS: u64 = 60;
/// Smallest frame a paced sender builds (a frame holds one chunk at least).
const MIN_FRAME: u64 = 64 << 10;

/// A token bucket over a byte rate (see the module docs).
#[derive(Debug, Clone)]
pub struct BwLimit {
    /// Bytes per second.
    rate: u64,
    /// Bytes that may go at once after a pause.
    burst: u64,
    /// When every byte released so far would have gone at exactly `rate`.
    tat: Instant,
}

impl BwLimit {
    /// A bucket of `rate` bytes per second (at least 1), full at `now`.
    pub fn new(rate: u64, now: Instant) -> Self {
        let rate = rate.max(1);
        Self {
            rate,
            burst: (rate / BURST_PER_SECOND).max(MIN_BURST),
            tat: now,
        }
    }

    /// The rate, bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The most bytes to write at once.
    pub fn piece(&self) -> usize {
        usize::try_from(self.burst).unwrap_or(usize::MAX)
    }

    /// Whether `bytes` (at most [`Self::piece`]) may go at `now`: `None`
    /// if so, and they are counted as sent; else the instant from which
    /// they may (nothing is counted: ask again then).
    pub fn poll(&mut self, now: Instant, bytes: u64) -> Option<Instant> {
        let tat = self.tat.max(now) + self.seconds(bytes);
        // The bytes may go once they keep the bucket within its burst.
        let earliest = tat.checked_sub(self.seconds(self.burst)).unwrap_or(now);
        if now < earliest {
            return Some(earliest);
        }
        self.tat = tat;
        None
    }

    /// How long `bytes` take at the rate, rounded up to the nanosecond (so
    /// rounding never lets more out than the rate).
    fn seconds(&self, bytes: u64) -> Duration {
        let ns = (u128::from(bytes) * 1_000_000_000).div_ceil(u128::from(self.rate));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// The largest frame a sender paced at `rate` should build: one whose
/// writing takes at most [`FRAME_SECONDS`] (and no less than 64 KiB).
pub fn frame_target(rate: u64, max: usize) -> usize {
    let bound = rate.saturating_mul(FRAME_SECONDS).max(MIN_FRAME);
    usize::try_from(bound).map_or(max, |b| b.min(max))
}

/// The lowest rate at which a frame holding one chunk of `max_chunk` bytes
/// (or the smallest frame) is written within a minute, half of a
/// receiver's default idle timeout.
pub fn min_rate(max_chunk: u32) -> u64 {
    u64::from(max_chunk).max(MIN_FRAME).div_ceil(MAX_FRAME_SECONDS)
}

/// Writes `tx` whole in pieces of at most [`BwLimit::piece`], waiting with
/// `sleep` before each piece the bucket does not allow yet; `now` is the
/// clock. Returns the bytes written.
pub fn write_paced<T: Transport + ?Sized>(
    t: &mut T,
    tx: &Transmit<'_>,
    limit: &mut BwLimit,
    mut now: impl FnMut() -> Instant,
    mut sleep: impl FnMut(Duration),
) -> io::Result<u64> {
    // The files sender only builds `Parts`; anything else goes unpaced.
    let Transmit::Parts { parts, .. } = tx else {
        return tx.write_to(t);
    };
    let mut written = 0u64;
    for part in parts {
        for piece in part.chunks(limit.piece()) {
            loop {
                let at = now();
                match limit.poll(at, piece.len() as u64) {
                    None => break,
                    Some(when) => sleep(when.saturating_duration_since(at)),
                }
            }
            written += t.write_all_vectored(&mut [IoSlice::new(piece)])?;
        }
    }
    Ok(written)
}

/// A `--bwlimit` value that is not a rate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad rate {given:?}: a number of KiB per second, optionally with a fraction and a suffix K, M, G (1024s), KB, MB, GB (1000s) or B (bytes), e.g. 500, 1.5M, 10MB")]
pub struct RateError {
    /// The value as given.
    pub given: String,
}

/// Bytes per second for a `--bwlimit` value in rsync's units (see the
/// module docs); 0 means no limit.
pub fn parse_rate(s: &str) -> Result<u64, RateError> {
    let bad = || RateError { given: s.to_string() };
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let unit: f64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "k" | "kib" => 1024.0,
        "b" => 1.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => return Err(bad()),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let bytes = (n * unit).round();
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_in_rsyncs_units() {
        assert_eq!(parse_rate("500"), Ok(500 * 1024));
        assert_eq!(parse_rate("10M"), Ok(10 << 20));
        assert_eq!(parse_rate("1.5m"), Ok(3 << 19));
        assert_eq!(parse_rate("10MB"), Ok(10_000_000));
        assert_eq!(parse_rate("64KiB"), Ok(64 << 10));
        assert_eq!(parse_rate("100B"), Ok(100));
        assert_eq!(parse_rate("1G"), Ok(1 << 30));
        assert_eq!(parse_rate("0"), Ok(0));
        for bad in ["", "M", "fast", "-1", "1.2.3", "10Q", "1e9"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }

    /// Released bytes follow the rate on a simulated clock: whatever the
    /// sizes asked for, by any instant at most `burst + rate·t` have gone,
    /// and a sender that always has more to send is never more than one
    /// piece behind the rate.
    #[test]
    fn released_bytes_follow_the_rate_on_a_simulated_clock() {
        for rate in [4_000u64, 100_000, 10 << 20] {
            let t0 = Instant::now();
            let mut limit = BwLimit::new(rate, t0);
            let piece = limit.piece() as u64;
            let burst = piece;
            let mut now = t0;
            let mut released = 0u64;
            let mut sizes = [1u64, piece, piece / 2 + 3, 17, piece].into_iter().cycle();
            let horizon = Duration::from_secs(30);
            while now - t0 < horizon {
                let n = sizes.next().unwrap().min(piece);
                match limit.poll(now, n) {
                    None => released += n,
                    Some(at) => {
                        assert!(at > now, "a wait must move the clock");
                        now = at;
                    }
                }
                let t = (now - t0).as_secs_f64();
                let allowed = burst as f64 + rate as f64 * t;
                assert!(
                    released as f64 <= allowed + 1.0,
                    "rate {rate}: {released} > {allowed} at {t}s"
                );
            }
            let t = (now - t0).as_secs_f64();
            let expected = rate as f64 * t;
            assert!(
                released as f64 >= expected - 2.0 * piece as f64,
                "rate {rate}: only {released} of {expected} by {t}s"
            );
        }
    }

    #[test]
    fn a_pause_earns_one_burst_only() {
        let t0 = Instant::now();
        let mut limit = BwLimit::new(80_000, t0);
        let piece = limit.piece() as u64;
        assert_eq!(piece, 10_000);
        // After ten idle seconds, one burst goes at once, then the rate.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(limit.poll(later, piece), None);
        let wait = limit.poll(later, piece).expect("the second piece waits");
        assert_eq!(wait, later + Duration::from_millis(125));
        assert_eq!(limit.poll(wait, piece), None);
    }

    /// A transport that keeps what is written, with the time it was written.
    struct Recorder<'c> {
        clock: &'c std::sync::Mutex<Instant>,
        writes: Vec<(Instant, usize)>,
    }

    impl Transport for Recorder<'_> {
        fn kind(&self) -> &'static str {
            "recorder"
        }
        fn peer(&self) -> String {
            String::new()
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let n = bufs.iter().map(|b| b.len()).sum();
            self.writes.push((*self.clock.lock().unwrap(), n));
            Ok(n)
        }
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Ok(0)
        }
        fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
        fn set_write_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
            Ok(())
        }
        fn shutdown_write(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The driver's side: a frame goes in pieces, each when the bucket
    /// allows it; "sleeping" moves the simulated clock.
    #[test]
    fn write_paced_sleeps_between_pieces() {
        let t0 = Instant::now();
        let clock = std::sync::Mutex::new(t0);
        let get = || *clock.lock().unwrap();
        let mut t = Recorder {
            clock: &clock,
            writes: Vec::new(),
        };
        let mut limit = BwLimit::new(64 << 10, t0);
        assert_eq!(limit.piece(), 8 << 10);
        let (head, body) = ([1u8; 16], vec![2u8; 40_000]);
        let tx = Transmit::Parts {
            parts: [&head, &body, &[]],
            what: "test",
        };
        let n = write_paced(&mut t, &tx, &mut limit, get, |d| *clock.lock().unwrap() += d).unwrap();
        assert_eq!(n, 40_016);
        let sizes: Vec<usize> = t.writes.iter().map(|w| w.1).collect();
        assert_eq!(sizes, [16, 8192, 8192, 8192, 8192, 7232]);
        // Each piece goes when everything sent so far, itself included, is
        // within one burst (8 KiB) of the rate: the first burst at once.
        let mut sent = 0u64;
        for &(at, n) in &t.writes {
            sent += n as u64;
            let due_ns = ((sent.saturating_sub(8 << 10)) as u128 * 1_000_000_000).div_ceil(64 << 10);
            assert_eq!((at - t0).as_nanos(), due_ns, "after {sent} bytes");
        }
    }

    #[test]
    fn frames_shrink_with_the_rate() {
        assert_eq!(frame_target(1 << 30, 4 << 20), 4 << 20);
        assert_eq!(frame_target(10_000, 4 << 20), 200_000);
        assert_eq!(frame_target(10, 4 << 20), 64 << 10);
        // The default chunker's largest chunk (128 KiB) in under a minute.
        assert_eq!(min_rate(128 << 10), 2185);
    }
}
