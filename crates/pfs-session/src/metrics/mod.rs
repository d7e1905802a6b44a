//! Server metrics: what a server has done, kept as counters an operator
//! scrapes in the Prometheus text format (version 0.0.4), and the small
//! HTTP endpoint that serves them ([`endpoint`]).
//!
//! The server updates [`Metrics`] only at the edges of a connection or a
//! session (accepted, refused, started, ended); a connection adds its
//! bytes once per read or write call, never per byte, into counters only
//! its own thread writes. A scrape during a transfer sees the session as
//! active and the bytes its connection carried so far.
//!
//! Families (every counter only grows; `service` is `blob`, `files` or
//! `mount`):
//! - `pfs_build_info{version}`, `pfs_start_time_seconds`;
//! - `pfs_connections_accepted_total`, `pfs_accept_errors_total`;
//! - `pfs_refusals_total{kind}`: connections not admitted ([`Refusal`]);
//! - `pfs_limits_hit_total{limit}`: a configured limit refused or cut
//!   something ([`Limit`]);
//! - `pfs_sessions_active{service}`, `pfs_sessions_total{service,outcome}`
//!   (`ok`, `failed`, or `refused`: a key lacking the right its first
//!   frame needs);
//! - `pfs_session_errors_total{service,kind}`: why sessions failed
//!   ([`Failure`]);
//! - `pfs_effective_bytes_total{service}`: bytes received sessions
//!   reconstructed or executed over, and mount sessions served, counted as
//!   a session completes (its report);
//! - `pfs_wire_bytes_total{service,direction}`: bytes sessions'
//!   connections carried (`in`, `out`; handshake and record overhead
//!   included), running sessions included;
//! - `pfs_session_duration_seconds{service}`: a histogram of the
//!   durations of ended sessions.
//!
//! A session's service is known at its start, but for a plain connection
//! to a files server: it counts from its first frame (FILES_HELLO or
//! MOUNT_HELLO) on.

pub mod endpoint;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pfs_auth::Service;

use crate::error::{LimitExceeded, SessionError, Violation};

pub use endpoint::{Endpoint, EndpointConfig, EndpointError};

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A failed handshake, an unknown key, a right the key lacks, a plain
    /// connection where keys are required.
    Auth,
    /// No session slot free (`max_clients`, or the key's `max_per_key`).
    Busy,
    /// The server is stopping.
    Shutdown,
    /// Silent or too slow before its first bytes or through the handshake.
    Timeout,
    /// Dropped from a full admission set (`max_admitting`).
    Dropped,
    /// The peer closed, or the connection failed, during admission.
    Closed,
}

impl Refusal {
    const ALL: [Self; 6] = [
        Self::Auth,
        Self::Busy,
        Self::Shutdown,
        Self::Timeout,
        Self::Dropped,
        Self::Closed,
    ];

    /// Its `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::Busy => "busy",
            Self::Shutdown => "shutdown",
            Self::Timeout => "timeout",
            Self::Dropped => "dropped",
            Self::Closed => "closed",
        }
    }

    /// The refusal an admission step's error means.
    pub(crate) fn of_secure(e: &pfs_auth::SecureError) -> Self {
        match e {
            pfs_auth::SecureError::TimedOut(..) => Self::Timeout,
            pfs_auth::SecureError::Dropped => Self::Dropped,
            pfs_auth::SecureError::Io { .. } => Self::Closed,
            _ => Self::Auth,
        }
    }
}

/// A configured limit that refused or ended something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `max_clients` sessions were running.
    MaxClients,
    /// The key ran `max_per_key` sessions.
    MaxPerKey,
    /// The admission set was full (`max_admitting`): a connection dropped.
    MaxAdmitting,
    /// A peer asked for more than the receiver's limits allow (gram sizes,
    /// counts, entries).
    Request,
    /// The store or the destination's disk could not take the bytes.
    Capacity,
}

impl Limit {
    const ALL: [Self; 5] = [
        Self::MaxClients,
        Self::MaxPerKey,
        Self::MaxAdmitting,
        Self::Request,
        Self::Capacity,
    ];

    /// Its `limit` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::MaxClients => "max_clients",
            Self::MaxPerKey => "max_per_key",
            Self::MaxAdmitting => "max_admitting",
            Self::Request => "request",
            Self::Capacity => "capacity",
        }
    }
}

/// Why an admitted session failed, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A transport read or write failed.
    Transport,
    /// The peer closed the connection early.
    Closed,
    /// The peer was silent or too slow past a deadline.
    Timeout,
    /// The peer sent bytes that do not decode, or broke the protocol.
    Protocol,
    /// The peer asked for what this server does not do (another blob, a
    /// mode).
    Rejected,
    /// A request over a limit (see [`Limit::Request`], [`Limit::Capacity`]).
    Limit,
    /// The peer sent ERROR.
    PeerError,
    /// This side failed: its files, store or disk.
    Local,
    /// A kernel run over the received grams failed.
    Exec,
    /// Cut by a server shutdown.
    Cut,
}

impl Failure {
    const ALL: [Self; 10] = [
        Self::Transport,
        Self::Closed,
        Self::Timeout,
        Self::Protocol,
        Self::Rejected,
        Self::Limit,
        Self::PeerError,
        Self::Local,
        Self::Exec,
        Self::Cut,
    ];

    /// Its `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Self::Transport => "transport",
            Self::Closed => "closed",
            Self::Timeout => "timeout",
            Self::Protocol => "protocol",
            Self::Rejected => "rejected",
            Self::Limit => "limit",
            Self::PeerError => "peer_error",
            Self::Local => "local",
            Self::Exec => "exec",
            Self::Cut => "cut",
        }
    }

    /// The kind of `e`; `cut`: the server was cutting its sessions.
    pub fn of(e: &SessionError, cut: bool) -> Self {
        match e {
            SessionError::Transport { .. } if cut => Self::Cut,
            SessionError::Transport { .. } => Self::Transport,
            SessionError::PeerClosed { .. } => Self::Closed,
            SessionError::TimedOut { .. } => Self::Timeout,
            SessionError::Malformed { .. } | SessionError::Violation(_) => Self::Protocol,
            SessionError::Rejected(_) => Self::Rejected,
            SessionError::Limit(_) => Self::Limit,
            SessionError::Refused { .. } => Self::PeerError,
            SessionError::Local(_) => Self::Local,
            SessionError::Exec(_) => Self::Exec,
        }
    }
}

/// Session outcomes, in label order.
const OUTCOMES: [&str; 3] = ["ok", "failed", "refused"];

/// Upper bounds of the duration histogram's buckets, seconds (`+Inf`
/// follows): from a quick blob session to a mount kept for hours.
const DURATION_BOUNDS: [f64; 11] = [
    0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
];

/// The bytes one connection carried, written by its own thread only
/// (single writer: a load and a store, no read-modify-write), read by
/// scrapes.
#[derive(Debug, Default)]
pub(crate) struct Flow {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

impl Flow {
    /// `n` more bytes read. Only the connection's thread calls it.
    pub(crate) fn add_in(&self, n: usize) {
        // Relaxed: a scrape needs no order with anything else; the single
        // writer keeps load + store exact.
        let v = self.bytes_in.load(Ordering::Relaxed);
        self.bytes_in.store(v + n as u64, Ordering::Relaxed);
    }

    /// `n` more bytes written. Only the connection's thread calls it.
    pub(crate) fn add_out(&self, n: usize) {
        let v = self.bytes_out.load(Ordering::Relaxed);
        self.bytes_out.store(v + n as u64, Ordering::Relaxed);
    }

    pub(crate) fn bytes_in(&self) -> u64 {
        self.bytes_in.load(Ordering::Relaxed)
    }

    pub(crate) fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
}

/// A running session as scrapes see it.
#[derive(Debug)]
struct Running {
    /// 0 while not known, else `service_index + 1`.
    service: AtomicU8,
    flow: Arc<Flow>,
}

/// A running session's handle: set its service once known, end it with
/// [`Metrics::end`]. Without metrics it does nothing.
#[derive(Debug, Default)]
pub(crate) struct LiveSession(Option<Arc<Running>>);

impl LiveSession {
    /// The session turned out to be of `service` (a files server's plain
    /// connection, from its first frame).
    pub(crate) fn set_service(&self, service: Service) {
        if let Some(r) = &self.0 {
            // Paired with the Relaxed loads of scrapes, under the registry's
            // lock; only the label changes.
            r.service.store(index(service) as u8 + 1, Ordering::Relaxed);
        }
    }
}

fn index(service: Service) -> usize {
    match service {
        Service::Blob => 0,
        Service::Files => 1,
        Service::Mount => 2,
    }
}

/// The `service` labels, in [`index`] order.
const SERVICES: [&str; 3] = ["blob", "files", "mount"];

/// A histogram of durations: counts per bucket (not cumulative; summed
/// when rendered), their total in microseconds.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; DURATION_BOUNDS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = DURATION_BOUNDS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(DURATION_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// What ended sessions of one service did.
#[derive(Debug, Default)]
struct Ended {
    outcomes: [AtomicU64; OUTCOMES.len()],
    errors: [AtomicU64; Failure::ALL.len()],
    effective: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    durations: Histogram,
}

/// A server's metrics: share one (`Arc`) between the server
/// ([`crate::ServerConfig::metrics`]) and an [`Endpoint`], or render them
/// with [`Metrics::render`].
#[derive(Debug)]
pub struct Metrics {
    version: String,
    started_at: f64,
    accepted: AtomicU64,
    accept_errors: AtomicU64,
    refusals: [AtomicU64; Refusal::ALL.len()],
    limits: [AtomicU64; Limit::ALL.len()],
    ended: [Ended; SERVICES.len()],
    /// Running sessions. Held while a session ends (its bytes move to
    /// `ended`) and while a scrape reads, so no scrape counts a session
    /// twice or not at all: every counter only grows.
    running: Mutex<Vec<Arc<Running>>>,
}

impl Metrics {
    /// Metrics of a server of `version` (shown as `pfs_build_info`),
    /// started now.
    pub fn new(version: &str) -> Self {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Self {
            version: version.to_string(),
            started_at,
            accepted: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            refusals: Default::default(),
            limits: Default::default(),
            ended: Default::default(),
            running: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Running>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn accept_failed(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was not admitted; a limit that refused it is counted too.
    pub(crate) fn refused(&self, kind: Refusal, limit: Option<Limit>) {
        self.refusals[kind as usize].fetch_add(1, Ordering::Relaxed);
        if kind == Refusal::Dropped {
            self.limit_hit(Limit::MaxAdmitting);
        }
        if let Some(l) = limit {
            self.limit_hit(l);
        }
    }

    pub(crate) fn limit_hit(&self, limit: Limit) {
        self.limits[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A session starts on a connection whose bytes `flow` counts, of
    /// `service` if known.
    pub(crate) fn start(&self, service: Option<Service>, flow: Arc<Flow>) -> LiveSession {
        let running = Arc::new(Running {
            service: AtomicU8::new(service.map_or(0, |s| index(s) as u8 + 1)),
            flow,
        });
        self.lock().push(running.clone());
        LiveSession(Some(running))
    }

    /// The session `live` ended after `elapsed` with `result` (its
    /// effective bytes when it completed); `unknown` is the service of a
    /// session that never said. `cut`: the server was cutting sessions.
    pub(crate) fn end<O>(
        &self,
        live: LiveSession,
        unknown: Service,
        result: &Result<O, SessionError>,
        effective: impl Fn(&O) -> u64,
        (elapsed, cut): (Duration, bool),
    ) {
        let Some(running) = live.0 else { return };
        let mut list = self.lock();
        list.retain(|r| !Arc::ptr_eq(r, &running));
        let service = match running.service.load(Ordering::Relaxed) {
            0 => index(unknown),
            s => usize::from(s) - 1,
        };
        let e = &self.ended[service];
        e.bytes_in.fetch_add(running.flow.bytes_in(), Ordering::Relaxed);
        e.bytes_out.fetch_add(running.flow.bytes_out(), Ordering::Relaxed);
        e.durations.observe(elapsed);
        let outcome = match result {
            Ok(o) => {
                e.effective.fetch_add(effective(o), Ordering::Relaxed);
                0
            }
            Err(SessionError::Violation(Violation::Unauthorized(_))) => {
                self.refusals[Refusal::Auth as usize].fetch_add(1, Ordering::Relaxed);
                2
            }
            Err(err) => {
                e.errors[Failure::of(err, cut) as usize].fetch_add(1, Ordering::Relaxed);
                match err {
                    SessionError::Limit(LimitExceeded::Peer { .. }) => self.limit_hit(Limit::Request),
                    SessionError::Limit(
                        LimitExceeded::StoreFull { .. }
                        | LimitExceeded::StoreFilled { .. }
                        | LimitExceeded::DiskFull { .. },
                    ) => self.limit_hit(Limit::Capacity),
                    _ => {}
                }
                1
            }
        };
        e.outcomes[outcome].fetch_add(1, Ordering::Relaxed);
    }

    /// The metrics in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 << 10);
        let w = &mut out;
        family(w, "pfs_build_info", "gauge", "This server's build; always 1.");
        let _ = writeln!(w, "pfs_build_info{{version=\"{}\"}} 1", escape(&self.version));
        family(
            w,
            "pfs_start_time_seconds",
            "gauge",
            "When the server started, seconds since the Unix epoch.",
        );
        let _ = writeln!(w, "pfs_start_time_seconds {}", self.started_at);
        let one = |w: &mut String, name: &str, help: &str, v: &AtomicU64| {
            family(w, name, "counter", help);
            let _ = writeln!(w, "{name} {}", v.load(Ordering::Relaxed));
        };
        one(
            w,
            "pfs_connections_accepted_total",
            "Connections accepted.",
            &self.accepted,
        );
        one(
            w,
            "pfs_accept_errors_total",
            "Failed accepts (e.g. out of file descriptors).",
            &self.accept_errors,
        );
        family(
            w,
            "pfs_refusals_total",
            "counter",
            "Connections not admitted, by why.",
        );
        for k in Refusal::ALL {
            let v = self.refusals[k as usize].load(Ordering::Relaxed);
            let _ = writeln!(w, "pfs_refusals_total{{kind=\"{}\"}} {v}", k.name());
        }
        family(
            w,
            "pfs_limits_hit_total",
            "counter",
            "Times a configured limit refused or ended something.",
        );
        for l in Limit::ALL {
            let v = self.limits[l as usize].load(Ordering::Relaxed);
            let _ = writeln!(w, "pfs_limits_hit_total{{limit=\"{}\"}} {v}", l.name());
        }
        // Ended sessions' counts plus running ones', read under the lock
        // `end` moves them under: one consistent view.
        let mut active = [0u64; SERVICES.len()];
        let mut wire = [[0u64; 2]; SERVICES.len()];
        let list = self.lock();
        for r in list.iter() {
            let s = r.service.load(Ordering::Relaxed);
            if s == 0 {
                continue;
            }
            let i = usize::from(s) - 1;
            active[i] += 1;
            wire[i][0] += r.flow.bytes_in();
            wire[i][1] += r.flow.bytes_out();
        }
        for (i, e) in self.ended.iter().enumerate() {
            wire[i][0] += e.bytes_in.load(Ordering::Relaxed);
            wire[i][1] += e.bytes_out.load(Ordering::Relaxed);
        }
        family(w, "pfs_sessions_active", "gauge", "Sessions running now.");
        for (i, s) in SERVICES.into_iter().enumerate() {
            let _ = writeln!(w, "pfs_sessions_active{{service=\"{}\"}} {}", s, active[i]);
        }
        family(w, "pfs_sessions_total", "counter", "Sessions ended, by outcome.");
        for (i, s) in SERVICES.into_iter().enumerate() {
            for (j, o) in OUTCOMES.iter().enumerate() {
                let v = self.ended[i].outcomes[j].load(Ordering::Relaxed);
                let _ = writeln!(w, "pfs_sessions_total{{service=\"{}\",outcome=\"{o}\"}} {v}", s);
            }
        }
        family(
            w,
            "pfs_session_errors_total",
            "counter",
            "Sessions that failed, by why.",
        );
        for (i, s) in SERVICES.into_iter().enumerate() {
            for f in Failure::ALL {
                let v = self.ended[i].errors[f as usize].load(Ordering::Relaxed);
                let _ = writeln!(
                    w,
                    "pfs_session_errors_total{{service=\"{}\",kind=\"{}\"}} {v}",
                    s,
                    f.name()
                );
            }
        }
        family(
            w,
            "pfs_effective_bytes_total",
            "counter",
            "Bytes completed sessions reconstructed, executed over or served (decimal bytes).",
        );
        for (i, s) in SERVICES.into_iter().enumerate() {
            let v = self.ended[i].effective.load(Ordering::Relaxed);
            let _ = writeln!(w, "pfs_effective_bytes_total{{service=\"{}\"}} {v}", s);
        }
        family(
            w,
            "pfs_wire_bytes_total",
            "counter",
            "Bytes sessions' connections carried, running sessions included.",
        );
        for (i, s) in SERVICES.into_iter().enumerate() {
            for (j, d) in ["in", "out"].iter().enumerate() {
                let _ = writeln!(
                    w,
                    "pfs_wire_bytes_total{{service=\"{}\",direction=\"{d}\"}} {}",
                    s, wire[i][j]
                );
            }
        }
        family(
            w,
            "pfs_session_duration_seconds",
            "histogram",
            "Durations of ended sessions.",
        );
        for (i, s) in SERVICES.into_iter().enumerate() {
            let h = &self.ended[i].durations;
            let mut cumulative = 0;
            for (j, b) in h.buckets.iter().enumerate() {
                cumulative += b.load(Ordering::Relaxed);
                let le = DURATION_BOUNDS
                    .get(j)
                    .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
                let _ = writeln!(
                    w,
                    "pfs_session_duration_seconds_bucket{{service=\"{}\",le=\"{le}\"}} {cumulative}",
                    s
                );
            }
            let sum = h.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(w, "pfs_session_duration_seconds_sum{{service=\"{}\"}} {sum}", s);
            let _ = writeln!(
                w,
                "pfs_session_duration_seconds_count{{service=\"{}\"}} {cumulative}",
                s
            );
        }
        out
    }
}

/// A family's HELP and TYPE lines.
fn family(w: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(w, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the text format wants it: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
