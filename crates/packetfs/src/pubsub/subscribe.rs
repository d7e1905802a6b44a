//! [`Subscriber`]: publishers admitted and served one at a time.
//!
//! One at a time keeps the blob's writers in order; a publisher that is
//! refused ends only its own session, the blob as its last good gram left
//! it. A connection that says nothing holds the loop for the handshake
//! timeout at most (its first bytes, then its STREAM_HELLO).

use std::io::Write;
use std::time::{Duration, Instant};

use pfs_exec::kernel::{Acc, Kernel, KernelId, Output};
use pfs_session::{admit_one, Admission, Client, Denied, ServerConfig};
use pfs_transport::{Listener, Transport};

use super::{rate, regions_touched, PubSubError, SubArgs};
use crate::blob::{open_blob, OpenedBlob};
use crate::keys::StreamRights;
use crate::stream::{
    Entry, GramEntries, StreamHost, SubscriberBlob, SubscriberReport, Subscription, SubscriptionConfig,
    RIGHT_MESSAGE, RIGHT_WRITE,
};

/// The wire rights a key's `stream=` level grants.
fn wire_rights(r: StreamRights) -> u8 {
    let mut bits = 0;
    if r.writes() {
        bits |= RIGHT_WRITE;
    }
    if r.messages() {
        bits |= RIGHT_MESSAGE;
    }
    bits
}

/// Entries of each kind a session executed, and their bytes (`--count`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// REFERENCE entries.
    pub references: u64,
    /// Bytes they referenced.
    pub reference_bytes: u64,
    /// WRITE entries.
    pub writes: u64,
    /// Bytes they wrote.
    pub write_bytes: u64,
    /// MESSAGE entries.
    pub messages: u64,
    /// Their bytes.
    pub message_bytes: u64,
}

impl Counts {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "references": self.references, "reference_bytes": self.reference_bytes,
            "writes": self.writes, "write_bytes": self.write_bytes,
            "messages": self.messages, "message_bytes": self.message_bytes,
        })
    }
}

/// What `pfs sub` does with each gram, beside executing it.
#[derive(Debug)]
enum Action {
    /// Nothing more (writes are applied anyway).
    Apply,
    /// Write each message to stdout; a newline after each unless `raw`.
    Print { raw: bool },
    /// Count entries and bytes.
    Count,
    /// Run a kernel over every REFERENCE.
    Kernel(Kernel),
}

/// The handler one session runs with.
struct Host {
    action: Action,
    counts: Counts,
    acc: Option<Acc>,
    /// The blob's fingerprint region size, and the regions WRITEs touched:
    /// hashed again after the session, so the blob's record (a named blob's
    /// stored one too) follows its bytes.
    region_size: u32,
    written: std::collections::BTreeSet<usize>,
    /// Stdout is gone (the reader of `--print` went away).
    stdout_closed: bool,
}

impl Host {
    fn new(action: Action, region_size: u32) -> Self {
        let acc = match &action {
            Action::Kernel(k) => Some(k.acc()),
            _ => None,
        };
        Self {
            action,
            counts: Counts::default(),
            acc,
            region_size,
            written: Default::default(),
            stdout_closed: false,
        }
    }

    /// Starts a new session's figures.
    fn reset(&mut self) {
        self.counts = Counts::default();
        if let Action::Kernel(k) = &self.action {
            self.acc = Some(k.acc());
        }
    }

    /// The regions WRITEs touched since the last call.
    fn take_written(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.written).into_iter().collect()
    }
}

impl StreamHost for Host {
    fn gram(&mut self, gram: &mut GramEntries<'_>) {
        let mut out = matches!(self.action, Action::Print { .. }).then(|| std::io::stdout().lock());
        let mut out_ok = true;
        while let Some(e) = gram.next_entry() {
            if let Entry::Write { offset, bytes } = e {
                self.written
                    .extend(regions_touched(offset, bytes.len() as u64, self.region_size));
            }
            match (&self.action, e) {
                (Action::Print { raw }, Entry::Message(m)) => {
                    if let (Some(o), true) = (out.as_mut(), out_ok) {
                        out_ok = o.write_all(m).is_ok() && (*raw || o.write_all(b"\n").is_ok());
                    }
                }
                (Action::Count, e) => {
                    let c = &mut self.counts;
                    match e {
                        Entry::Reference { bytes, .. } => {
                            c.references += 1;
                            c.reference_bytes += bytes.len() as u64;
                        }
                        Entry::Write { bytes, .. } => {
                            c.writes += 1;
                            c.write_bytes += bytes.len() as u64;
                        }
                        Entry::Message(m) => {
                            c.messages += 1;
                            c.message_bytes += m.len() as u64;
                        }
                    }
                }
                (Action::Kernel(k), Entry::Reference { bytes, .. }) => {
                    if let Some(acc) = self.acc.as_mut() {
                        k.update(acc, bytes);
                    }
                }
                _ => {}
            }
        }
        if let Some(mut o) = out {
            if !(out_ok && o.flush().is_ok()) {
                self.stdout_closed = true;
            }
        }
    }
}

/// What happened to one connection.
#[derive(Debug)]
pub enum SubEvent<'a> {
    /// It was not admitted (its key, a right it lacks, a failed handshake).
    Denied {
        /// Its address.
        peer: &'a str,
        /// Why.
        denied: &'a Denied,
    },
    /// Its stream was refused or broke; the blob keeps the grams applied before.
    Failed {
        /// Who.
        client: &'a Client,
        /// Why.
        error: &'a crate::Error,
    },
    /// Its stream ended.
    Finished {
        /// Who.
        client: &'a Client,
        /// What it executed.
        report: &'a SubscriberReport,
        /// The transport's label.
        transport: &'static str,
        /// How long it ran.
        elapsed: Duration,
        /// With `--count`.
        counts: Option<Counts>,
        /// With `--kernel`: its name and result.
        exec: Option<(&'a str, &'a Output)>,
    },
}

impl SubEvent<'_> {
    /// The line `pfs sub` prints: a JSON event (`denied`, `session_failed`,
    /// `report`), or text.
    pub fn line(&self, json: bool) -> String {
        match self {
            Self::Denied { peer, denied } => {
                let key = denied.key.map_or_else(|| "-".to_string(), |k| k.fingerprint());
                if json {
                    serde_json::json!({"event": "denied", "peer": peer, "key": key, "reason": denied.reason})
                        .to_string()
                } else {
                    format!("pfs sub: {peer} (key {key}) denied: {}", denied.reason)
                }
            }
            Self::Failed { client, error } => {
                let error = crate::report::error_line(*error);
                if json {
                    serde_json::json!({"event": "session_failed", "peer": client.addr,
                                       "key": client.fingerprint(), "error": error})
                    .to_string()
                } else {
                    format!("pfs sub: publisher {} failed: {error}", client.addr)
                }
            }
            Self::Finished {
                client,
                report: r,
                transport,
                elapsed,
                counts,
                exec,
            } => finished_line(client, r, transport, *elapsed, counts.as_ref(), *exec, json),
        }
    }
}

fn finished_line(
    client: &Client,
    r: &SubscriberReport,
    transport: &str,
    elapsed: Duration,
    counts: Option<&Counts>,
    exec: Option<(&str, &Output)>,
    json: bool,
) -> String {
    let secs = elapsed.as_secs_f64();
    let integrity = if r.digests_matched { "OK" } else { "MISMATCH" };
    if json {
        return serde_json::json!({
            "event": "report",
            "peer": client.addr,
            "key": client.fingerprint(),
            "stream_rights": client.rights.stream.name(),
            "stats": {
                "transport": transport,
                "integrity": integrity,
                "mismatched_grams": r.mismatched,
                "grams": r.grams,
                "entries": r.entries,
                "effective_bytes": r.effective_bytes,
                "written_bytes": r.written_bytes,
                "message_bytes": r.message_bytes,
                "wire_bytes": r.wire_bytes,
                "wire_ratio": if r.effective_bytes > 0 { r.wire_bytes as f64 / r.effective_bytes as f64 } else { 0.0 },
                "elapsed_s": secs,
                "effective_mb_s": rate(r.effective_bytes, secs),
                "wire_mb_s": rate(r.wire_bytes, secs),
            },
            "count": counts.map(Counts::json),
            "exec": exec.map(|(k, o)| serde_json::json!({"kernel": k, "output": o})),
        })
        .to_string();
    }
    let mut text = format!(
        "pfs sub: publisher {} done over {transport}: {} gram(s), {} entries, {} effective bytes \
         ({} written, {} message), wire {} bytes, {secs:.3} s, {:.3} MB/s; integrity {integrity}",
        client.addr,
        r.grams,
        r.entries,
        r.effective_bytes,
        r.written_bytes,
        r.message_bytes,
        r.wire_bytes,
        rate(r.effective_bytes, secs),
    );
    if let Some(c) = counts {
        text += &format!(
            "\n  count          {} reference(s) {} bytes, {} write(s) {} bytes, {} message(s) {} bytes",
            c.references, c.reference_bytes, c.writes, c.write_bytes, c.messages, c.message_bytes
        );
    }
    if let Some((k, o)) = exec {
        text += &format!("\n  exec {k:<9} {}", crate::report::exec_output_text(o));
    }
    text
}

/// A subscriber: its blob, what it does with each gram, who it admits.
pub struct Subscriber {
    opened: OpenedBlob,
    host: Host,
    kernel: Option<String>,
    server: ServerConfig,
    runs_kernel: bool,
    handshake: Duration,
    max_gram: u32,
    max_sessions: Option<u64>,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("kernel", &self.kernel)
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

impl Subscriber {
    /// Opens the blob and checks the options; `admission` is who it admits
    /// (`crate::keys::server_admission` of `args.auth`). Bind the listener
    /// after: once it listens, the blob is ready.
    pub fn open(args: &SubArgs, admission: Admission) -> Result<Self, PubSubError> {
        let action = match (&args.kernel, args.print, args.count) {
            (Some(name), _, _) => {
                let id = KernelId::parse(name)?;
                if id.in_place() {
                    return Err(PubSubError::InPlaceKernel(id));
                }
                Action::Kernel(Kernel::new(id))
            }
            (None, true, _) => Action::Print { raw: args.raw },
            (None, false, true) => Action::Count,
            (None, false, false) => Action::Apply,
        };
        if !(args.auth.handshake_timeout.is_finite() && args.auth.handshake_timeout > 0.0) {
            return Err(PubSubError::Seconds {
                option: "--handshake-timeout",
                got: args.auth.handshake_timeout,
            });
        }
        let handshake = Duration::from_secs_f64(args.auth.handshake_timeout);
        let opened = open_blob(&args.blob.config(), false)?;
        let runs_kernel = matches!(action, Action::Kernel(_));
        let host = Host::new(action, opened.blob.fingerprint().region_size);
        Ok(Self {
            opened,
            host,
            kernel: args.kernel.clone(),
            server: ServerConfig {
                admission,
                first_bytes_timeout: handshake,
                ..ServerConfig::default()
            },
            runs_kernel,
            handshake,
            max_gram: args.max_gram,
            max_sessions: if args.once { Some(1) } else { args.max_sessions },
        })
    }

    /// Serves the publishers that connect to `listener`, one at a time,
    /// until `--once` / `--max-sessions` connections have come (forever
    /// without) or stdout went away under `--print`; `on_event` hears how
    /// each connection ended.
    pub fn serve<L: Listener>(
        &mut self,
        listener: &L,
        on_event: &mut dyn FnMut(SubEvent<'_>),
    ) -> Result<(), PubSubError> {
        let mut served = 0u64;
        while self.max_sessions.is_none_or(|m| served < m) && !self.host.stdout_closed {
            let mut conn = listener.accept().map_err(PubSubError::Accept)?;
            served += 1;
            let peer = conn.peer();
            let admitted = admit_one(&mut conn, &peer, Instant::now(), &self.server, self.runs_kernel);
            let (transport, client) = match admitted {
                Ok(a) => a,
                Err(denied) => {
                    on_event(SubEvent::Denied {
                        peer: &peer,
                        denied: &denied,
                    });
                    continue;
                }
            };
            let cfg = SubscriptionConfig {
                max_gram_body: self.max_gram,
                rights: wire_rights(client.rights.stream),
                handshake_timeout: self.handshake,
                ..SubscriptionConfig::default()
            };
            self.host.reset();
            let t0 = Instant::now();
            let blob = SubscriberBlob::of(&mut self.opened.blob);
            let outcome = session(transport, blob, cfg, &mut self.host);
            let elapsed = t0.elapsed();
            // Grams applied before a refusal stay applied: their regions too.
            let written = self.host.take_written();
            if !written.is_empty() {
                self.opened.blob.rehash_regions(&written)?;
            }
            match &outcome {
                Ok((report, transport)) => {
                    let exec = match (&self.host.action, self.host.acc.take()) {
                        (Action::Kernel(k), Some(acc)) => Some(k.finish(acc)),
                        _ => None,
                    };
                    on_event(SubEvent::Finished {
                        client: &client,
                        report,
                        transport,
                        elapsed,
                        counts: matches!(self.host.action, Action::Count).then_some(self.host.counts),
                        exec: exec.as_ref().zip(self.kernel.as_deref()).map(|(o, k)| (k, o)),
                    });
                }
                Err(error) => on_event(SubEvent::Failed {
                    client: &client,
                    error,
                }),
            }
        }
        Ok(())
    }
}

/// One publisher's session on its admitted connection.
fn session<'a>(
    conn: Box<dyn Transport + 'a>,
    blob: SubscriberBlob<'a>,
    cfg: SubscriptionConfig,
    host: &mut Host,
) -> Result<(SubscriberReport, &'static str), crate::Error> {
    let mut sub = Subscription::accept(conn, blob, cfg)?;
    let kind = sub.transport();
    let r = sub.run(host)?;
    Ok((r, kind))
}
