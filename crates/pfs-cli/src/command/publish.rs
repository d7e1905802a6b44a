//! `pfs pub`: publish records read from stdin or a file to a subscriber
//! (`pfs sub`, docs/wire.md §15), batched into stream grams, and report
//! what the subscriber applied.
//!
//! A reader thread splits the input into records (lines, or fixed-size
//! binary records) and hands them over a bounded channel; the main thread
//! batches them into grams, sends a partial batch after `--linger-ms`
//! without input, and keeps the stream alive (keepalives, APPLIED) while
//! it waits.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use packetfs::stream::{GramWriter, Offer, Publication, PublicationConfig, PublisherReport};
use pfs_blob::BlobWriter;

use crate::args::PubArgs;
use crate::exit;

use super::open_blob;
use super::send::target;

/// Bytes a gram's body takes beside its table and payload (header and
/// rounding), and a table entry at most (absolute encoding).
const GRAM_OVERHEAD: u64 = 256;
const ENTRY_BYTES: u64 = 12;

/// Longest the main thread waits for input before it polls the stream
/// (keepalives, the subscriber's APPLIED): well under the keepalive.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// How the input is split into records.
#[derive(Debug, Clone, Copy)]
enum Split {
    /// One record a line; the newline is kept when `keep_newline`.
    Lines { keep_newline: bool },
    /// Records of this many bytes (the last may be shorter).
    Fixed(usize),
}

/// Reads records from `input` and sends them on; an I/O error ends the
/// stream of records with that error.
fn read_records(
    mut input: Box<dyn Read + Send>,
    split: Split,
    tx: mpsc::SyncSender<std::io::Result<Vec<u8>>>,
) {
    match split {
        Split::Lines { keep_newline } => {
            let mut r = BufReader::with_capacity(1 << 16, input);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) => return,
                    Ok(_) => {
                        if !keep_newline && line.last() == Some(&b'\n') {
                            line.pop();
                        }
                        if tx.send(Ok(line)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        }
        Split::Fixed(n) => loop {
            let mut rec = vec![0u8; n];
            let mut filled = 0;
            while filled < n {
                match input.read(&mut rec[filled..]) {
                    Ok(0) => break,
                    Ok(k) => filled += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
            if filled == 0 {
                return;
            }
            rec.truncate(filled);
            let last = filled < n;
            if tx.send(Ok(rec)).is_err() || last {
                return;
            }
        },
    }
}

/// One record, as it will travel.
#[derive(Debug)]
enum Rec {
    /// Bytes: a MESSAGE, or a WRITE with --write-at.
    Bytes(Vec<u8>),
    /// A REFERENCE (`--refs`): `len` bytes at `offset` of the blob.
    Ref { offset: u64, len: u32 },
}

/// Parses `--refs` line `n`: `OFFSET LEN`, sizes as the options take them.
fn parse_ref(line: &[u8], n: u64) -> anyhow::Result<Rec> {
    let text = std::str::from_utf8(line).unwrap_or("");
    let mut words = text.split_whitespace();
    let parsed = match (words.next(), words.next(), words.next()) {
        (Some(o), Some(l), None) => crate::args::parse_size(o)
            .ok()
            .zip(crate::args::parse_size_u32(l).ok()),
        _ => None,
    };
    match parsed {
        Some((offset, len)) => Ok(Rec::Ref { offset, len }),
        None => anyhow::bail!("--refs: input line {n} is not `OFFSET LEN`: {text:?}"),
    }
}

/// Records waiting to be sent as one gram.
#[derive(Debug, Default)]
struct Batch {
    records: Vec<Rec>,
    bytes: u64,
    /// When the first record came: the batch goes out `linger` after it
    /// at the latest.
    since: Option<Instant>,
}

impl Batch {
    fn push(&mut self, r: Rec) {
        if let Rec::Bytes(b) = &r {
            self.bytes += b.len() as u64;
        }
        self.since.get_or_insert_with(Instant::now);
        self.records.push(r);
    }

    /// The body a gram of these records and one more of `len` bytes
    /// would take at most.
    fn body_with(&self, len: u64) -> u64 {
        GRAM_OVERHEAD + (self.records.len() as u64 + 1) * ENTRY_BYTES + self.bytes + len
    }

    fn write(&self, g: &mut GramWriter<'_>, write_at: Option<u64>) {
        let mut at = write_at;
        for r in &self.records {
            match (r, at) {
                (Rec::Ref { offset, len }, _) => {
                    g.reference(*offset, *len);
                }
                (Rec::Bytes(b), Some(off)) => {
                    g.write(off, b);
                    at = Some(off + b.len() as u64);
                }
                (Rec::Bytes(b), None) => {
                    g.message(b);
                }
            }
        }
    }
}

/// What the publisher sent, beside the stream's own figures.
#[derive(Debug, Default)]
struct Sent {
    records: u64,
    /// The next WRITE's offset, with --write-at.
    write_at: Option<u64>,
    /// The span this blob's own copy of the WRITEs covers: its regions are
    /// hashed again at the end.
    written: Option<(u64, u64)>,
}

/// Sends `batch` as one gram (waiting up to `timeout` for room) and
/// empties it. Sent WRITEs go into this side's blob too (`own`): the two
/// blobs stay equal, so later references and streams still match.
fn flush(
    publication: &mut Publication<'_>,
    own: &BlobWriter<'_>,
    batch: &mut Batch,
    sent: &mut Sent,
    timeout: Duration,
) -> anyhow::Result<()> {
    if batch.records.is_empty() {
        return Ok(());
    }
    let at = sent.write_at;
    match publication.offer_blocking(timeout, |g| batch.write(g, at))? {
        Offer::Sent { .. } => {}
        Offer::BackPressure => anyhow::bail!(
            "the subscriber applied nothing for {timeout:?}: its window stayed full (see --timeout)"
        ),
    }
    if let Some(mut off) = at {
        for r in &batch.records {
            if let Rec::Bytes(b) = r {
                own.write(off, b)?;
                off += b.len() as u64;
            }
        }
    }
    sent.records += batch.records.len() as u64;
    sent.write_at = at.map(|off| off + batch.bytes);
    if let Some(off) = at {
        let (from, _) = sent.written.unwrap_or((off, off));
        sent.written = Some((from, off + batch.bytes));
    }
    *batch = Batch::default();
    Ok(())
}

pub fn run(args: &PubArgs) -> anyhow::Result<i32> {
    args.transport.check()?;
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        anyhow::bail!(
            "--timeout must be a positive number of seconds (got {})",
            args.timeout
        );
    }
    if args.record_size == Some(0) {
        anyhow::bail!("--record-size must be at least 1 byte");
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let linger = Duration::from_millis(args.linger_ms);
    let split = match args.record_size {
        Some(n) => Split::Fixed(n as usize),
        None => Split::Lines {
            keep_newline: args.write_at.is_some(),
        },
    };
    let input: Box<dyn Read + Send> = match &args.input {
        Some(p) => Box::new(File::open(p).map_err(|e| anyhow::anyhow!("--input {}: {e}", p.display()))?),
        None => Box::new(std::io::stdin()),
    };
    let security = super::auth::client_security(&args.auth, &args.to, args.transport.transport)?;
    // The blob first: the subscriber gives a connection only its handshake
    // timeout for STREAM_HELLO.
    let opened = open_blob(&args.blob, false)?;
    let view = opened.view();
    let cfg = PublicationConfig {
        integrity: args.integrity.alg(),
        reply_timeout: timeout,
        ..PublicationConfig::default()
    };
    let to = target(&args.to, &args.transport, 0);
    let start = Instant::now();
    let mut publication = Publication::connect_as(&to, &view, cfg, security.as_ref())?;
    let accepted = publication
        .accepted()
        .ok_or_else(|| anyhow::anyhow!("the subscriber accepted the stream but sent no limits"))?;
    let max_body = u64::from(accepted.max_gram_body);
    let max_entries = accepted.max_entries.min(args.batch) as usize;

    let (tx, rx) = mpsc::sync_channel(args.batch.clamp(64, 1 << 16) as usize);
    std::thread::spawn(move || read_records(input, split, tx));
    let mut sent = Sent {
        write_at: args.write_at,
        ..Sent::default()
    };
    let own = opened.blob.writer();
    let pace = Pace {
        refs: args.refs,
        max_body,
        max_entries,
        linger,
        timeout,
    };
    let outcome = publish(&mut publication, &own, &rx, &mut sent, &pace);
    // What was written into this blob stays, sent or not: its record follows.
    if let Some((from, to)) = sent.written {
        let regions: Vec<usize> = super::regions_touched(from, to - from, view.region_size).collect();
        opened.blob.rehash_regions(&regions)?;
    }
    outcome?;
    let transport = publication.transport();
    let report = publication.close()?;
    let elapsed = start.elapsed();
    print_report(args, &report, &sent, transport, elapsed)?;
    Ok(if report.digests_matched {
        exit::OK
    } else {
        eprintln!(
            "pfs: integrity MISMATCH: the subscriber's digests differ in {} gram(s)",
            report.mismatched
        );
        exit::INTEGRITY
    })
}

/// How records become grams.
#[derive(Debug)]
struct Pace {
    /// Lines are `OFFSET LEN` references.
    refs: bool,
    /// The subscriber's largest gram body, and most entries a gram (its
    /// limit, or --batch if smaller).
    max_body: u64,
    max_entries: usize,
    /// A partial batch goes out after this without input.
    linger: Duration,
    /// Longest wait for room in the subscriber's window.
    timeout: Duration,
}

/// Takes records from `rx` until the input ends, sending a gram when the
/// batch is full (records, the subscriber's `max_body` and entry limit) or
/// has waited `linger`; polls the stream meanwhile.
fn publish(
    publication: &mut Publication<'_>,
    own: &BlobWriter<'_>,
    rx: &Receiver<std::io::Result<Vec<u8>>>,
    sent: &mut Sent,
    pace: &Pace,
) -> anyhow::Result<()> {
    let Pace {
        refs,
        max_body,
        max_entries,
        linger,
        timeout,
    } = *pace;
    let mut batch = Batch::default();
    let mut line = 0;
    loop {
        let wait = match batch.since {
            Some(t) => linger.saturating_sub(t.elapsed()).min(POLL_EVERY),
            None => POLL_EVERY,
        };
        match rx.recv_timeout(wait) {
            Ok(rec) => {
                let rec = rec.map_err(|e| anyhow::anyhow!("reading the input: {e}"))?;
                line += 1;
                let rec = if refs {
                    parse_ref(&rec, line)?
                } else {
                    Rec::Bytes(rec)
                };
                let slab = match &rec {
                    Rec::Bytes(b) => b.len() as u64,
                    Rec::Ref { .. } => 0,
                };
                if !batch.records.is_empty()
                    && (batch.records.len() >= max_entries || batch.body_with(slab) > max_body)
                {
                    flush(publication, own, &mut batch, sent, timeout)?;
                }
                batch.push(rec);
                if batch.records.len() >= max_entries {
                    flush(publication, own, &mut batch, sent, timeout)?;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if batch.since.is_some_and(|t| t.elapsed() >= linger) {
                    flush(publication, own, &mut batch, sent, timeout)?;
                }
                // Keepalives and APPLIED while the input is quiet.
                publication.poll().map_err(anyhow::Error::from)?;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return flush(publication, own, &mut batch, sent, timeout);
            }
        }
    }
}

/// MB/s, decimal.
fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

fn print_report(
    args: &PubArgs,
    r: &PublisherReport,
    sent: &Sent,
    transport: &str,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let secs = elapsed.as_secs_f64();
    let wire = r.wire_bytes_sent + r.wire_bytes_received;
    let kind = match (args.refs, args.write_at) {
        (true, _) => "reference",
        (false, Some(_)) => "write",
        (false, None) => "message",
    };
    let integrity = if r.digests_matched { "OK" } else { "MISMATCH" };
    if args.json {
        let v = serde_json::json!({
            "transport": transport,
            "entries_as": kind,
            "integrity_alg": args.integrity.alg().name(),
            "integrity": integrity,
            "publisher": {
                "records": sent.records,
                "grams": r.grams,
                "entries": r.entries,
                "effective_bytes": r.effective_bytes,
                "payload_bytes": r.payload_bytes,
                "wire_bytes": wire,
                "wire_bytes_sent": r.wire_bytes_sent,
                "wire_bytes_received": r.wire_bytes_received,
                "wire_ratio": if r.effective_bytes > 0 { wire as f64 / r.effective_bytes as f64 } else { 0.0 },
                "applied": r.applied,
                "mismatched_grams": r.mismatched,
                "back_pressure": r.back_pressure,
                "elapsed_s": secs,
                "effective_mb_s": rate(r.effective_bytes, secs),
                "wire_mb_s": rate(wire, secs),
                "records_per_s": if secs > 0.0 { sent.records as f64 / secs } else { 0.0 },
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "pfs pub: {} record(s) as {kind} entries in {} gram(s) over {transport}, applied {}; integrity {integrity}",
            sent.records, r.grams, r.applied
        );
        println!(
            "  effective      {} bytes, {:.3} MB/s; wire {} bytes ({} sent, {} received), {:.3} MB/s; {:.3} s, {:.0} records/s",
            r.effective_bytes,
            rate(r.effective_bytes, secs),
            wire,
            r.wire_bytes_sent,
            r.wire_bytes_received,
            rate(wire, secs),
            secs,
            if secs > 0.0 { sent.records as f64 / secs } else { 0.0 },
        );
    }
    Ok(())
}
