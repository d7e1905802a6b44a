//! [`publish`]: records from a reader thread, batched into grams.
//!
//! A reader thread splits the input into records (lines, or fixed-size
//! binary records) and hands them over a bounded channel; the calling
//! thread batches them into grams, sends a partial batch after
//! `--linger-ms` without input, and keeps the stream alive (keepalives,
//! APPLIED) while it waits.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use pfs_blob::BlobWriter;

use super::{rate, regions_touched, PubArgs, PubSubError};
use crate::blob::open_blob;
use crate::gram::Target;
use crate::keys::ClientSecurity;
use crate::parse::{parse_size, parse_size_u32};
use crate::stream::{GramWriter, Offer, Publication, PublicationConfig, PublisherReport};

/// What a publisher sent and the subscriber applied.
#[derive(Debug, Clone)]
pub struct Published {
    /// The stream's figures (the subscriber's APPLIED, digests).
    pub report: PublisherReport,
    /// Records read and sent.
    pub records: u64,
    /// What they travelled as: `message`, `write` or `reference`.
    pub entries_as: &'static str,
    /// The transport's label.
    pub transport: &'static str,
    /// From connecting to the last APPLIED.
    pub elapsed: Duration,
}

/// Publishes the records of `args.input` (stdin without it) to the
/// subscriber at `target` (protected with `security`), and waits until it
/// applied them all.
pub fn publish(
    args: &PubArgs,
    target: &Target,
    security: Option<&ClientSecurity>,
) -> Result<Published, PubSubError> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(PubSubError::Seconds {
            option: "--timeout",
            got: args.timeout,
        });
    }
    if args.record_size == Some(0) {
        return Err(PubSubError::EmptyRecords);
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let split = match args.record_size {
        Some(n) => Split::Fixed(n as usize),
        None => Split::Lines {
            keep_newline: args.write_at.is_some(),
        },
    };
    let input: Box<dyn Read + Send> = match &args.input {
        Some(p) => Box::new(File::open(p).map_err(|source| PubSubError::Input {
            path: p.clone(),
            source,
        })?),
        None => Box::new(std::io::stdin()),
    };
    // The blob first: the subscriber gives a connection only its handshake
    // timeout for STREAM_HELLO.
    let opened = open_blob(&args.blob.config(), false)?;
    let view = opened.view();
    let cfg = PublicationConfig {
        reply_timeout: timeout,
        ..PublicationConfig::default()
    };
    let start = Instant::now();
    let mut publication = Publication::connect_as(target, &view, cfg, security)?;
    // Set once STREAM_ACCEPT is in, which `connect_as` waited for.
    let (max_body, max_entries) = publication.accepted().map_or((u64::MAX, args.batch), |a| {
        (u64::from(a.max_gram_body), a.max_entries)
    });

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
        max_entries: max_entries.min(args.batch) as usize,
        linger: Duration::from_millis(args.linger_ms),
        timeout,
    };
    let outcome = pump(&mut publication, &own, &rx, &mut sent, &pace);
    // What was written into this blob stays, sent or not: its record follows.
    if let Some((from, to)) = sent.written {
        let regions: Vec<usize> = regions_touched(from, to - from, view.region_size).collect();
        opened.blob.rehash_regions(&regions)?;
    }
    outcome?;
    let transport = publication.transport();
    let report = publication.close()?;
    Ok(Published {
        report,
        records: sent.records,
        entries_as: match (args.refs, args.write_at) {
            (true, _) => "reference",
            (false, Some(_)) => "write",
            (false, None) => "message",
        },
        transport,
        elapsed: start.elapsed(),
    })
}

impl Published {
    /// Records a second.
    fn records_per_s(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.records as f64 / secs
        } else {
            0.0
        }
    }

    /// Bytes the connection carried both ways.
    fn wire_bytes(&self) -> u64 {
        self.report.wire_bytes_sent + self.report.wire_bytes_received
    }

    /// `OK`, or `MISMATCH` when a digest differed at the subscriber.
    pub fn integrity(&self) -> &'static str {
        if self.report.digests_matched {
            "OK"
        } else {
            "MISMATCH"
        }
    }

    /// `pfs pub --json`: effective bytes beside wire bytes, as `pfs send --json`.
    pub fn json(&self) -> serde_json::Value {
        let (r, secs, wire) = (&self.report, self.elapsed.as_secs_f64(), self.wire_bytes());
        serde_json::json!({
            "transport": self.transport,
            "entries_as": self.entries_as,
            "integrity_alg": crate::stream::IntegrityAlg::Xxh3.name(),
            "integrity": self.integrity(),
            "publisher": {
                "records": self.records,
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
                "records_per_s": self.records_per_s(),
            },
        })
    }

    /// `pfs pub`'s summary, two lines.
    pub fn text(&self) -> String {
        let (r, secs, wire) = (&self.report, self.elapsed.as_secs_f64(), self.wire_bytes());
        format!(
            "pfs pub: {} record(s) as {} entries in {} gram(s) over {}, applied {}; integrity {}\n  \
             effective      {} bytes, {:.3} MB/s; wire {wire} bytes ({} sent, {} received), {:.3} MB/s; \
             {secs:.3} s, {:.0} records/s",
            self.records,
            self.entries_as,
            r.grams,
            self.transport,
            r.applied,
            self.integrity(),
            r.effective_bytes,
            rate(r.effective_bytes, secs),
            r.wire_bytes_sent,
            r.wire_bytes_received,
            rate(wire, secs),
            self.records_per_s(),
        )
    }
}

/// Bytes a gram's body takes beside its table and payload (header and
/// rounding), at most.
const GRAM_OVERHEAD: u64 = 256;
/// Bytes a table entry takes at most (absolute encoding, docs/wire.md §15).
const ENTRY_BYTES: u64 = pfs_wire::stream::ABSOLUTE_ENTRY_LEN as u64;

/// Longest the publishing thread waits for input before it polls the stream
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
fn parse_ref(line: &[u8], n: u64) -> Result<Rec, PubSubError> {
    let text = std::str::from_utf8(line).unwrap_or("");
    let mut words = text.split_whitespace();
    let parsed = match (words.next(), words.next(), words.next()) {
        (Some(o), Some(l), None) => parse_size(o).ok().zip(parse_size_u32(l).ok()),
        _ => None,
    };
    parsed
        .map(|(offset, len)| Rec::Ref { offset, len })
        .ok_or_else(|| PubSubError::BadRef {
            line: n,
            text: text.to_string(),
        })
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
) -> Result<(), PubSubError> {
    if batch.records.is_empty() {
        return Ok(());
    }
    let at = sent.write_at;
    match publication.offer_blocking(timeout, |g| batch.write(g, at))? {
        Offer::Sent { .. } => {}
        Offer::BackPressure => return Err(PubSubError::Stalled(timeout)),
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
fn pump(
    publication: &mut Publication<'_>,
    own: &BlobWriter<'_>,
    rx: &Receiver<std::io::Result<Vec<u8>>>,
    sent: &mut Sent,
    pace: &Pace,
) -> Result<(), PubSubError> {
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
                let rec = rec.map_err(PubSubError::Read)?;
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
                publication.poll()?;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return flush(publication, own, &mut batch, sent, timeout);
            }
        }
    }
}
