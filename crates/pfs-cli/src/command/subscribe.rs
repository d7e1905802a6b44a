//! `pfs sub`: the subscriber. Listens, admits each publisher as `pfs
//! serve` admits a sender (its key and rights), and serves them one at a
//! time over this host's blob (docs/wire.md §15): messages printed or
//! counted, a pCPU kernel over the references, writes applied to the blob.
//! One at a time keeps the blob's writers in order; a publisher that is
//! refused ends only its own session.

use std::io::Write;
use std::time::{Duration, Instant};

use packetfs::keys::StreamRights;
use packetfs::stream::{
    Entry, GramEntries, StreamHost, SubscriberBlob, SubscriberReport, Subscription, SubscriptionConfig,
    RIGHT_MESSAGE, RIGHT_WRITE,
};
use pfs_exec::kernel::{Acc, Kernel, KernelId, Output};
use pfs_session::{admit_one, Client, ServerConfig};
use pfs_transport::{Listener, Transport};

use crate::args::SubArgs;
use crate::exit;

use super::open_blob;
use super::serve::{bind, listening_line};

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

/// Entries of each kind executed, and their bytes (`--count`).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct Counts {
    references: u64,
    reference_bytes: u64,
    writes: u64,
    write_bytes: u64,
    messages: u64,
    message_bytes: u64,
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
                self.written.extend(super::regions_touched(
                    offset,
                    bytes.len() as u64,
                    self.region_size,
                ));
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

pub fn run(args: &SubArgs) -> anyhow::Result<i32> {
    args.transport.check()?;
    let action = match (&args.kernel, args.print, args.count) {
        (Some(name), _, _) => {
            let id = KernelId::parse(name)?;
            if id.in_place() {
                anyhow::bail!(
                    "--kernel {}: in-place kernels would modify the blob the publishers reference",
                    id.name()
                );
            }
            Action::Kernel(Kernel::new(id))
        }
        (None, true, _) => Action::Print { raw: args.raw },
        (None, false, true) => Action::Count,
        (None, false, false) => Action::Apply,
    };
    let runs_kernel = matches!(action, Action::Kernel(_));
    let (admission, _notes) =
        super::auth::server_admission(&args.auth, &args.listen, args.transport.transport)?;
    let handshake = Duration::from_secs_f64(args.auth.handshake_timeout);
    let cfg = ServerConfig {
        admission,
        first_bytes_timeout: handshake,
        ..ServerConfig::default()
    };
    let mut opened = open_blob(&args.blob, false)?;
    let listener = bind(&args.listen, &args.transport, 0, &args.auth)?;
    let report = Report {
        json: args.json,
        to_stderr: args.print,
        kernel: args.kernel.clone(),
    };
    report.line(&listening_line(&listener, args.json, "pfs sub"));
    let max = if args.once { Some(1) } else { args.max_sessions };
    let mut host = Host::new(action, opened.blob.fingerprint().region_size);
    let mut last = exit::OK;
    let mut served = 0u64;
    while max.is_none_or(|m| served < m) && !host.stdout_closed {
        let mut conn = listener.accept()?;
        served += 1;
        let accepted_at = Instant::now();
        let peer = conn.peer();
        let (transport, client) = match admit_one(&mut conn, &peer, accepted_at, &cfg, runs_kernel) {
            Ok(a) => a,
            Err(denied) => {
                report.denied(&peer, &denied);
                last = exit::AUTH;
                continue;
            }
        };
        let sub_cfg = SubscriptionConfig {
            max_gram_body: args.max_gram,
            rights: wire_rights(client.rights.stream),
            handshake_timeout: handshake,
            ..SubscriptionConfig::default()
        };
        host.reset();
        let t0 = Instant::now();
        let outcome = session(
            transport,
            SubscriberBlob::of(&mut opened.blob),
            sub_cfg,
            &mut host,
        );
        let elapsed = t0.elapsed();
        // Grams applied before a refusal stay applied: their regions too.
        let written = host.take_written();
        if !written.is_empty() {
            opened.blob.rehash_regions(&written)?;
        }
        last = match &outcome {
            Ok((r, kind)) => {
                let exec = match (&host.action, host.acc.take()) {
                    (Action::Kernel(k), Some(acc)) => Some(k.finish(acc)),
                    _ => None,
                };
                report.finished(&client, r, kind, elapsed, &host, exec.as_ref());
                if r.digests_matched {
                    exit::OK
                } else {
                    exit::INTEGRITY
                }
            }
            Err(e) => {
                report.failed(&client, e);
                exit::of_packetfs(e)
            }
        };
    }
    Ok(if max.is_some() { last } else { exit::OK })
}

/// One publisher's session on its admitted connection.
fn session<'a>(
    conn: Box<dyn Transport + 'a>,
    blob: SubscriberBlob<'a>,
    cfg: SubscriptionConfig,
    host: &mut Host,
) -> Result<(SubscriberReport, &'static str), packetfs::Error> {
    let mut sub = Subscription::accept(conn, blob, cfg)?;
    let kind = sub.transport();
    let r = sub.run(host)?;
    Ok((r, kind))
}

/// Where and how results are printed: JSON events on stdout, or text on
/// stdout (stderr with --print: stdout carries the messages).
struct Report {
    json: bool,
    to_stderr: bool,
    kernel: Option<String>,
}

impl Report {
    fn line(&self, s: &str) {
        if self.to_stderr {
            let _ = writeln!(std::io::stderr().lock(), "{s}");
        } else {
            let _ = writeln!(std::io::stdout().lock(), "{s}");
        }
    }

    fn denied(&self, peer: &str, d: &pfs_session::Denied) {
        let key = d.key.map_or_else(|| "-".to_string(), |k| k.fingerprint());
        if self.json {
            self.line(
                &serde_json::json!({"event": "denied", "peer": peer, "key": key, "reason": d.reason})
                    .to_string(),
            );
        } else {
            self.line(&format!("pfs sub: {peer} (key {key}) denied: {}", d.reason));
        }
    }

    fn failed(&self, client: &Client, e: &packetfs::Error) {
        let error = packetfs::report::error_line(e);
        if self.json {
            self.line(
                &serde_json::json!({"event": "session_failed", "peer": client.addr, "key": client.fingerprint(),
                                    "error": error})
                .to_string(),
            );
        } else {
            self.line(&format!("pfs sub: publisher {} failed: {error}", client.addr));
        }
    }

    fn finished(
        &self,
        client: &Client,
        r: &SubscriberReport,
        kind: &str,
        elapsed: Duration,
        host: &Host,
        exec: Option<&Output>,
    ) {
        let secs = elapsed.as_secs_f64();
        let mb_s = |b: u64| if secs > 0.0 { b as f64 / secs / 1e6 } else { 0.0 };
        let integrity = if r.digests_matched { "OK" } else { "MISMATCH" };
        let exec = exec.zip(self.kernel.as_deref());
        let counts = matches!(host.action, Action::Count).then_some(host.counts);
        if self.json {
            let v = serde_json::json!({
                "event": "report",
                "peer": client.addr,
                "key": client.fingerprint(),
                "stream_rights": client.rights.stream.name(),
                "stats": {
                    "transport": kind,
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
                    "effective_mb_s": mb_s(r.effective_bytes),
                    "wire_mb_s": mb_s(r.wire_bytes),
                },
                "count": counts,
                "exec": exec.map(|(o, k)| serde_json::json!({"kernel": k, "output": o})),
            });
            self.line(&v.to_string());
        } else {
            self.line(&format!(
                "pfs sub: publisher {} done over {kind}: {} gram(s), {} entries, {} effective bytes ({} written, {} message), \
                 wire {} bytes, {secs:.3} s, {:.3} MB/s; integrity {integrity}",
                client.addr,
                r.grams,
                r.entries,
                r.effective_bytes,
                r.written_bytes,
                r.message_bytes,
                r.wire_bytes,
                mb_s(r.effective_bytes),
            ));
            if let Some(c) = counts {
                self.line(&format!(
                    "  count          {} reference(s) {} bytes, {} write(s) {} bytes, {} message(s) {} bytes",
                    c.references, c.reference_bytes, c.writes, c.write_bytes, c.messages, c.message_bytes
                ));
            }
            if let Some((o, k)) = exec {
                self.line(&format!(
                    "  exec {k:<9} {}",
                    packetfs::report::exec_output_text(o)
                ));
            }
        }
    }
}
