//! The sender's progress as another thread sees it: [`FilesMeter`] holds
//! the phase of a send (hashing, chunking, sending), its bytes done and to
//! do, and its entries, in atomics. The host that hashes and chunks
//! ([`super::LocalPrepare`]) and the stream's progress events write it; a
//! display thread reads it when it likes, so a phase that keeps the session
//! thread busy (chunking one large file) still shows movement. Also here:
//! [`MeterRate`], the rate and time-left estimate; the plain one-line text
//! of a reading (what `pfs send --progress always` prints when stderr is
//! not a terminal); and [`watch`], the display thread's loop. Nothing here
//! prints; only [`watch`] reads the clock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::FilesProgress;

/// What a send is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum SendPhase {
    /// Connecting, asking the receiver, fetching its index: nothing counted.
    Setup = 0,
    /// Whole-file digests for the probe (PROBE).
    Hash = 1,
    /// Cutting files into chunks and hashing them.
    Chunk = 2,
    /// FILE and CHUNKS frames going out.
    Send = 3,
}

impl SendPhase {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Hash,
            2 => Self::Chunk,
            3 => Self::Send,
            _ => Self::Setup,
        }
    }

    /// The verb a display shows for it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Setup => "starting",
            Self::Hash => "hashing",
            Self::Chunk => "chunking",
            Self::Send => "sending",
        }
    }
}

/// Progress of one send, shared between the session thread and a display.
/// Fields are read one by one (`Relaxed`): a reading taken while a phase
/// begins may mix the two phases for one display tick, never more.
#[derive(Debug, Default)]
pub struct FilesMeter {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64,
    entries: AtomicU64,
    total_entries: AtomicU64,
    wire: AtomicU64,
}

/// One look at a [`FilesMeter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeterReading {
    /// What the send is doing.
    pub phase: SendPhase,
    /// Bytes of this phase done (read, or described to the receiver).
    pub done: u64,
    /// Bytes this phase will do.
    pub total: u64,
    /// Entries sent (phase `Send`; 0 before).
    pub entries: u64,
    /// Entries of this phase: files to hash or chunk, entries to send.
    pub total_entries: u64,
    /// Bytes written to the transport (phase `Send`).
    pub wire: u64,
}

impl FilesMeter {
    /// A meter in phase `Setup`.
    pub fn new() -> Self {
        Self::default()
    }

    /// A phase begins with `total` bytes over `entries` entries to do.
    pub fn begin(&self, phase: SendPhase, total: u64, entries: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.entries.store(0, Ordering::Relaxed);
        self.total_entries.store(entries, Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Where hashing and chunking add the bytes they read.
    pub fn read_counter(&self) -> &AtomicU64 {
        &self.done
    }

    /// A progress event of the stream.
    pub fn stream(&self, p: &FilesProgress) {
        self.done.store(p.bytes, Ordering::Relaxed);
        self.total.store(p.total_bytes, Ordering::Relaxed);
        self.entries.store(p.entries, Ordering::Relaxed);
        self.total_entries.store(p.total_entries, Ordering::Relaxed);
        self.wire.store(p.wire_bytes, Ordering::Relaxed);
        self.phase.store(SendPhase::Send as u8, Ordering::Relaxed);
    }

    /// The meter now.
    pub fn reading(&self) -> MeterReading {
        MeterReading {
            phase: SendPhase::from_u8(self.phase.load(Ordering::Relaxed)),
            done: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            entries: self.entries.load(Ordering::Relaxed),
            total_entries: self.total_entries.load(Ordering::Relaxed),
            wire: self.wire.load(Ordering::Relaxed),
        }
    }
}

impl MeterReading {
    /// A bar `width` characters wide between brackets: `[=====>    ]`.
    pub fn bar(&self, width: usize) -> String {
        let filled = match self.total {
            0 => width,
            t => (self.done.min(t) as f64 / t as f64 * width as f64) as usize,
        };
        let head = if filled < width { ">" } else { "" };
        let rest = width - filled - head.len();
        format!("[{}{head}{}]", "=".repeat(filled), " ".repeat(rest))
    }

    /// Whether every entry went out (the receiver is finishing).
    pub fn is_sent(&self) -> bool {
        self.phase == SendPhase::Send && self.entries == self.total_entries
    }

    /// The entries part of a display: `3 of 16 entries, 12.3 MB on the
    /// wire`, or the number of files a hashing or chunking phase reads.
    pub fn entries_text(&self) -> String {
        match self.phase {
            SendPhase::Send => format!(
                "{} of {} entries, {:.1} MB on the wire",
                self.entries,
                self.total_entries,
                self.wire as f64 / 1e6
            ),
            SendPhase::Hash | SendPhase::Chunk => match self.total_entries {
                1 => "1 file".into(),
                n => format!("{n} files"),
            },
            SendPhase::Setup => String::new(),
        }
    }

    /// One line: `sending 412.0 MB of 1073.7 MB (38 %), 95.2 MB/s, ETA 7 s,
    /// 3 of 16 entries, 12.3 MB on the wire` (decimal MB; rate and ETA when
    /// `rate` knows them).
    /// Unless the session is `over`, a send whose entries all went out
    /// says it waits for the receiver.
    pub fn line(&self, rate: Option<f64>, over: bool) -> String {
        if self.phase == SendPhase::Setup {
            return "starting (connecting, asking the receiver)".into();
        }
        let pct = if self.total > 0 {
            (self.done.min(self.total) as f64 * 100.0 / self.total as f64).floor()
        } else {
            100.0
        };
        let verb = if self.is_sent() { "sent" } else { self.phase.word() };
        let mut s = format!(
            "{verb} {:.1} MB of {:.1} MB ({pct:.0} %)",
            self.done as f64 / 1e6,
            self.total as f64 / 1e6
        );
        if let Some(r) = rate.filter(|r| *r > 0.0 && !self.is_sent()) {
            let left = self.total.saturating_sub(self.done) as f64 / r;
            s.push_str(&format!(", {:.1} MB/s, ETA {}", r / 1e6, eta(left)));
        }
        s.push_str(", ");
        s.push_str(&self.entries_text());
        if self.is_sent() && !over {
            s.push_str("; waiting for the receiver's report");
        }
        s
    }
}

/// Seconds left in words: `7 s`, `3 min 20 s`, `2 h 05 min`.
fn eta(secs: f64) -> String {
    let s = secs.ceil().min(1e9) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// Rate of a phase over its last few seconds (so a stall shows at once and
/// a slow start is forgotten), reset when the phase changes.
#[derive(Debug, Default)]
pub struct MeterRate {
    phase: Option<SendPhase>,
    samples: VecDeque<(Instant, u64)>,
}

/// How far back [`MeterRate`] looks.
const RATE_WINDOW: Duration = Duration::from_secs(5);

impl MeterRate {
    /// Takes `r` at `now`; bytes per second, once two samples are apart.
    pub fn update(&mut self, now: Instant, r: &MeterReading) -> Option<f64> {
        if self.phase != Some(r.phase) {
            self.phase = Some(r.phase);
            self.samples.clear();
        }
        self.samples.push_back((now, r.done));
        // Keep one sample older than the window, so the window stays full.
        while self.samples.len() > 2 && now.saturating_duration_since(self.samples[1].0) >= RATE_WINDOW {
            self.samples.pop_front();
        }
        let (t0, b0) = *self.samples.front()?;
        let secs = now.saturating_duration_since(t0).as_secs_f64();
        (secs > 0.0).then(|| r.done.saturating_sub(b0) as f64 / secs)
    }
}

/// Runs `work` while a thread of its own calls `show` every `tick` with a
/// reading of `meter` and its rate, and once more when `work` is `over`
/// (so a display always ends on the final state); returns what `work`
/// returned.
pub fn watch<R>(
    meter: &FilesMeter,
    tick: Duration,
    show: impl FnMut(&MeterReading, Option<f64>, bool) + Send,
    work: impl FnOnce() -> R,
) -> R {
    let mut show = show;
    std::thread::scope(|s| {
        let (stop, stopped) = mpsc::channel::<()>();
        s.spawn(move || {
            let mut rate = MeterRate::default();
            loop {
                // Woken early only when the work is over (the sender is dropped).
                let over = !matches!(stopped.recv_timeout(tick), Err(RecvTimeoutError::Timeout));
                let r = meter.reading();
                show(&r, rate.update(Instant::now(), &r), over);
                if over {
                    return;
                }
            }
        });
        let out = work();
        drop(stop);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(phase: SendPhase, done: u64, total: u64, entries: u64, of: u64) -> MeterReading {
        MeterReading {
            phase,
            done,
            total,
            entries,
            total_entries: of,
            wire: if phase == SendPhase::Send { 12_345_678 } else { 0 },
        }
    }

    #[test]
    fn lines_read_as_the_send_goes() {
        let r = reading(SendPhase::Send, 412_000_000, 1_073_700_000, 3, 16);
        assert_eq!(
            r.line(Some(95_200_000.0), false),
            "sending 412.0 MB of 1073.7 MB (38 %), 95.2 MB/s, ETA 7 s, 3 of 16 entries, 12.3 MB on the wire"
        );
        assert_eq!(
            r.line(None, false),
            "sending 412.0 MB of 1073.7 MB (38 %), 3 of 16 entries, 12.3 MB on the wire"
        );
        let r = reading(SendPhase::Chunk, 10_000_000, 2_000_000_000, 0, 1);
        assert_eq!(
            r.line(Some(1e7), false),
            "chunking 10.0 MB of 2000.0 MB (0 %), 10.0 MB/s, ETA 3 min 19 s, 1 file"
        );
        let r = reading(SendPhase::Send, 5, 5, 2, 2);
        assert_eq!(
            r.line(Some(1.0), false),
            "sent 0.0 MB of 0.0 MB (100 %), 2 of 2 entries, 12.3 MB on the wire; waiting for the receiver's report"
        );
        assert_eq!(
            r.line(None, true),
            "sent 0.0 MB of 0.0 MB (100 %), 2 of 2 entries, 12.3 MB on the wire"
        );
        // Nothing to count yet; nothing planned (directories only).
        assert!(reading(SendPhase::Setup, 0, 0, 0, 0)
            .line(None, false)
            .starts_with("starting"));
        assert!(reading(SendPhase::Send, 0, 0, 1, 3)
            .line(None, false)
            .contains("(100 %)"));
        assert_eq!(eta(7200.0 + 300.0), "2 h 05 min");
        assert_eq!(reading(SendPhase::Send, 40, 100, 0, 1).bar(10), "[====>     ]");
        assert_eq!(reading(SendPhase::Send, 0, 100, 0, 1).bar(4), "[>   ]");
        assert_eq!(reading(SendPhase::Send, 100, 100, 1, 1).bar(4), "[====]");
        assert_eq!(reading(SendPhase::Send, 0, 0, 1, 1).bar(4), "[====]");
    }

    #[test]
    fn the_meter_follows_phases_and_the_stream() {
        let m = FilesMeter::new();
        assert_eq!(m.reading().phase, SendPhase::Setup);
        m.begin(SendPhase::Chunk, 1000, 2);
        m.read_counter().fetch_add(600, Ordering::Relaxed);
        assert_eq!(m.reading(), reading(SendPhase::Chunk, 600, 1000, 0, 2));
        m.stream(&FilesProgress {
            entries: 1,
            total_entries: 4,
            bytes: 300,
            total_bytes: 1000,
            wire_bytes: 12_345_678,
            elapsed: Duration::ZERO,
        });
        assert_eq!(m.reading(), reading(SendPhase::Send, 300, 1000, 1, 4));
    }

    #[test]
    fn watch_ends_on_the_final_state() {
        let m = FilesMeter::new();
        let mut seen = Vec::new();
        let out = watch(
            &m,
            Duration::from_secs(3600),
            |r, _, over| seen.push((r.done, over)),
            || {
                m.begin(SendPhase::Chunk, 10, 1);
                m.read_counter().fetch_add(10, Ordering::Relaxed);
                7
            },
        );
        assert_eq!((out, seen), (7, vec![(10, true)]));
    }

    #[test]
    fn the_rate_looks_at_the_last_seconds_of_one_phase() {
        let t = Instant::now();
        let s = |secs: u64| t + Duration::from_secs(secs);
        let mut rate = MeterRate::default();
        let r = |done| reading(SendPhase::Send, done, 1 << 40, 0, 1);
        assert_eq!(rate.update(s(0), &r(0)), None);
        assert_eq!(rate.update(s(1), &r(100)), Some(100.0));
        assert_eq!(rate.update(s(2), &r(300)), Some(150.0));
        // Old samples leave the window: the rate is that of the last seconds.
        for k in 3..=20 {
            rate.update(s(k), &r(300 + (k - 2) * 1000));
        }
        assert_eq!(rate.update(s(21), &r(300 + 19 * 1000)), Some(1000.0));
        // A new phase starts over.
        let c = reading(SendPhase::Chunk, 5, 10, 0, 1);
        assert_eq!(rate.update(s(22), &c), None);
    }
}
