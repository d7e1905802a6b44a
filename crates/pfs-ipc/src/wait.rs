//! How an endpoint waits when the ring is empty (receiver) or full
//! (sender), and how it notices that the peer is gone.
//!
//! Every strategy first polls the ring for a short spin budget (a message
//! that is already on its way arrives within a cache-line transfer). Then:
//! busy-spin keeps polling; spin-then-yield gives the CPU away between
//! polls; spin-then-futex announces that it sleeps in a word of shared
//! memory and sleeps on it with FUTEX_WAIT, and the peer issues FUTEX_WAKE
//! only when it sees that announcement — so the fast path, where nobody
//! sleeps, makes no system call. While waiting, the peer's liveness (its
//! pidfd and the rendezvous socket) is checked every `liveness` interval,
//! so a dead peer is an error within a bounded time, never a hang.

use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::thread::futex;

use crate::error::IpcError;

/// How a blocked endpoint waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitStrategy {
    /// Poll the ring without pause: lowest latency, one core at 100 %.
    Spin,
    /// Poll for the spin budget, then `sched_yield` between polls.
    SpinYield,
    /// Poll for the spin budget, then sleep on a futex in shared memory;
    /// idle CPU near zero, no system call while messages keep coming.
    SpinFutex,
}

impl WaitStrategy {
    /// Every strategy.
    pub const ALL: [WaitStrategy; 3] = [Self::Spin, Self::SpinYield, Self::SpinFutex];

    /// Name used on command lines: `spin`, `yield`, `futex`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spin => "spin",
            Self::SpinYield => "yield",
            Self::SpinFutex => "futex",
        }
    }

    /// Long name for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Spin => "busy-spin",
            Self::SpinYield => "spin-then-yield",
            Self::SpinFutex => "spin-then-futex",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Self::Spin => 1,
            Self::SpinYield => 2,
            Self::SpinFutex => 3,
        }
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }
}

impl fmt::Display for WaitStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A wait strategy name [`WaitStrategy::from_str`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown wait strategy {given:?} (spin, yield, futex)")]
pub struct UnknownWaitStrategy {
    /// The name as given.
    pub given: String,
}

impl FromStr for WaitStrategy {
    type Err = UnknownWaitStrategy;
    fn from_str(s: &str) -> Result<Self, UnknownWaitStrategy> {
        match s {
            "spin" | "busy-spin" => Ok(Self::Spin),
            "yield" | "spin-yield" | "spin-then-yield" => Ok(Self::SpinYield),
            "futex" | "spin-futex" | "spin-then-futex" => Ok(Self::SpinFutex),
            other => Err(UnknownWaitStrategy {
                given: other.to_owned(),
            }),
        }
    }
}

/// Wait strategy and its timings, for one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitConfig {
    /// The strategy.
    pub strategy: WaitStrategy,
    /// How long yield and futex strategies poll before giving the CPU away.
    pub spin: Duration,
    /// How often a waiting endpoint checks that the peer is alive: the
    /// bound on how long a dead peer goes unnoticed.
    pub liveness: Duration,
}

impl Default for WaitConfig {
    fn default() -> Self {
        Self {
            strategy: WaitStrategy::SpinFutex,
            spin: Duration::from_micros(50),
            liveness: Duration::from_millis(100),
        }
    }
}

impl WaitConfig {
    /// Defaults with `strategy`.
    pub fn with(strategy: WaitStrategy) -> Self {
        Self {
            strategy,
            ..Self::default()
        }
    }
}

/// Watches the peer: its pidfd (exit) and the rendezvous socket (close).
#[derive(Debug)]
pub(crate) struct PeerWatch {
    pub pid: i32,
    pidfd: Option<OwnedFd>,
    sock: UnixStream,
}

impl PeerWatch {
    pub fn new(pid: i32, sock: UnixStream) -> Self {
        // pidfd_open can fail (old kernel, pid in another namespace): the
        // socket alone still detects death, as the kernel closes it.
        let pidfd = rustix::process::Pid::from_raw(pid)
            .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
        Self { pid, pidfd, sock }
    }

    /// `Ok` while the peer lives and keeps the connection open.
    pub fn check(&self) -> Result<(), IpcError> {
        let sock_flags = PollFlags::IN | PollFlags::RDHUP;
        let mut fds = [
            PollFd::new(&self.sock, sock_flags),
            PollFd::new(&self.sock, PollFlags::empty()),
        ];
        if let Some(pidfd) = &self.pidfd {
            fds[1] = PollFd::new(pidfd, PollFlags::IN);
        }
        let zero = futex::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&zero)) {
            Ok(0) => Ok(()),
            Ok(_) => {
                if self.pidfd.is_some() && !fds[1].revents().is_empty() {
                    return Err(IpcError::PeerDied { pid: self.pid });
                }
                // Nothing is sent on the socket after the rendezvous, so
                // readable means end-of-file: the peer closed it.
                Err(IpcError::PeerClosed)
            }
            Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(IpcError::io("poll peer", e)),
        }
    }
}

/// One side's view of what it waits for.
pub(crate) trait Waitable {
    type Out;
    /// The thing, if available now.
    fn poll(&mut self) -> Result<Option<Self::Out>, IpcError>;
    /// Sets the sleep word and re-checks; true = available, do not sleep.
    fn announce_sleep(&mut self) -> Result<bool, IpcError>;
    /// The futex word `announce_sleep` set.
    fn sleep_word(&self) -> &AtomicU32;
    /// `Ok` while the peer is alive and connected.
    fn check_peer(&self) -> Result<(), IpcError>;
}

/// Waits for `w` per `opts`, up to `timeout`, watching `peer`.
pub(crate) fn wait_for<W: Waitable>(
    w: &mut W,
    opts: &WaitConfig,
    timeout: Option<Duration>,
) -> Result<W::Out, IpcError> {
    let start = Instant::now();
    let deadline = timeout.map(|t| start + t);
    let mut last_check = start;
    let mut polls: u32 = 0;
    let mut sleeping = false;
    loop {
        if let Some(out) = w.poll()? {
            return Ok(out);
        }
        polls = polls.wrapping_add(1);
        // Reading the clock costs ~20 ns (vDSO): every 256 polls while
        // spinning, every round once yielding or sleeping.
        // No PAUSE between polls: on recent cores it lasts ~140 cycles,
        // which would be added to the latency of every message that
        // arrives mid-pause.
        if !sleeping && !polls.is_multiple_of(256) {
            continue;
        }
        let now = Instant::now();
        if let Some(d) = deadline {
            if now >= d {
                return Err(IpcError::Timeout(timeout.unwrap_or_default()));
            }
        }
        if now.duration_since(last_check) >= opts.liveness {
            w.check_peer()?;
            last_check = now;
        }
        if opts.strategy == WaitStrategy::Spin || now.duration_since(start) < opts.spin {
            continue;
        }
        sleeping = true;
        match opts.strategy {
            WaitStrategy::Spin => {}
            WaitStrategy::SpinYield => std::thread::yield_now(),
            WaitStrategy::SpinFutex => {
                if !w.announce_sleep()? {
                    let mut nap = opts.liveness;
                    if let Some(d) = deadline {
                        nap = nap.min(d.saturating_duration_since(now));
                    }
                    let ts = futex::Timespec {
                        tv_sec: nap.as_secs() as i64,
                        tv_nsec: i64::from(nap.subsec_nanos()),
                    };
                    // EAGAIN (already woken), EINTR, ETIMEDOUT: all mean
                    // "look again".
                    let _ = futex::wait(w.sleep_word(), futex::Flags::empty(), 1, Some(&ts));
                }
                w.sleep_word().store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Wakes a peer sleeping on `word` (after it announced so).
pub(crate) fn wake(word: &AtomicU32) {
    word.store(0, Ordering::Relaxed);
    let _ = futex::wake(word, futex::Flags::empty(), 1);
}
