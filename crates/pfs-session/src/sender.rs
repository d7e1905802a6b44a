//! The sending side of a session: HELLO, then grams built from a schedule,
//! each emitted with one vectored write (frame header, gram header,
//! descriptor table and — in payload mode — the referenced blob ranges
//! straight from the mapping, no copy), then the summary; returns the
//! receiver's report.

use std::io::IoSlice;
use std::time::{Duration, Instant};

use pfs_exec::execute::resolve;
use pfs_exec::{e2e_chain, Digest, Schedule, ScheduleSpec};
use pfs_transport::{Transport, IOV_MAX};
use pfs_wire::frame::FLAG_COMPLETE_REPORT;
use pfs_wire::{
    put_frame, Descriptor, ErrorFrame, FrameHeader, FrameType, GramHeader, Hello, HelloAck, IntegrityAlg,
    Mode, Report, SenderSummary, TableWriter, FRAME_HEADER_LEN, GRAM_FLAG_PAYLOAD, GRAM_HEADER_LEN,
};

use crate::reader::FrameReader;
use crate::receiver::code_name;
use crate::sys::{thread_usage, Usage};
use crate::{BlobView, SessionError};

/// Sender settings.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Transfer mode.
    pub mode: Mode,
    /// Integrity algorithm.
    pub integrity: IntegrityAlg,
    /// The schedule to send.
    pub spec: ScheduleSpec,
    /// Longest wait for HELLO_ACK and for the final report.
    pub reply_timeout: Duration,
    /// Progress callback interval (`None` = never).
    pub log_interval: Option<Duration>,
    /// Session nonce (any value; identifies the session in logs).
    pub session_nonce: u64,
    /// Payload mode: most payload bytes per gram (a schedule batch is split
    /// into several grams). Cache-sized by default; see [`DEFAULT_PAYLOAD_BUDGET`].
    pub payload_budget: u64,
}

/// Default payload bytes per gram: half of a typical 2 MiB L2, so the
/// digest pass leaves the bytes cached for the kernel's copy.
pub const DEFAULT_PAYLOAD_BUDGET: u64 = 1 << 20;

/// Sender-side progress.
#[derive(Debug, Clone, Copy)]
pub struct SendProgress {
    /// Grams sent.
    pub grams: u64,
    /// Effective bytes sent.
    pub effective_bytes: u64,
    /// Wire bytes written.
    pub wire_bytes: u64,
    /// Since HELLO_ACK.
    pub elapsed: Duration,
    /// Planned effective bytes (0 = unknown).
    pub planned_bytes: u64,
}

/// A finished session, from the sender's side.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    /// The receiver's authoritative report.
    pub report: Report,
    /// What this side sent.
    pub summary: SenderSummary,
    /// Descriptor-table bytes sent (for bytes per descriptor).
    pub table_bytes: u64,
    /// Sender thread CPU and context switches over the steady state.
    pub sender_usage: Usage,
    /// Sender steady-state wall time.
    pub sender_elapsed: Duration,
    /// Receiver page size and backing from HELLO_ACK.
    pub receiver_backing: u8,
}

fn read_reply<T: Transport + ?Sized>(
    t: &mut T,
    reader: &mut FrameReader,
    what: &'static str,
) -> Result<(FrameHeader, Vec<u8>), SessionError> {
    let hdr = reader
        .next_header(t)?
        .ok_or(SessionError::PeerClosed { during: what })?;
    let body = reader.take(t, hdr.length as usize, what)?.to_vec();
    if hdr.frame_type == FrameType::Error {
        let (code, message) = match ErrorFrame::parse(&body) {
            Ok(f) => (f.code, f.message.to_string()),
            Err(e) => (0, format!("undecodable ERROR frame: {e}")),
        };
        return Err(SessionError::Refused {
            code,
            code_name: code_name(code),
            message,
        });
    }
    Ok((hdr, body))
}

/// After a failed write the receiver has usually said why in an ERROR
/// frame before closing; prefer that message to a bare EPIPE.
fn explain_write_failure<T: Transport + ?Sized>(
    t: &mut T,
    reader: &mut FrameReader,
    err: std::io::Error,
    during: &'static str,
) -> SessionError {
    let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
    match read_reply(t, reader, during) {
        Err(refused @ SessionError::Refused { .. }) => refused,
        _ => SessionError::io(during, err),
    }
}

/// Runs one session: handshake, grams, summary, report.
pub fn send_session<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &SenderConfig,
    on_progress: &mut dyn FnMut(&SendProgress),
) -> Result<SendOutcome, SessionError> {
    let mut schedule = Schedule::new(cfg.spec).map_err(|e| SessionError::Local(e.to_string()))?;
    if cfg.spec.blob_len != blob.data.len() as u64 {
        return Err(SessionError::Local(
            "schedule blob length differs from the blob".into(),
        ));
    }
    let mut reader = FrameReader::new(64 * 1024);
    t.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| SessionError::io("setup", e))?;

    let planned_bytes = cfg.spec.planned_bytes().unwrap_or(0);
    let mut out = Vec::with_capacity(256);
    let mut body = Vec::with_capacity(128);
    Hello {
        mode: cfg.mode,
        encoding: cfg.mode.encoding(),
        integrity: cfg.integrity,
        auth_method: 0,
        max_desc_per_gram: cfg.spec.desc_per_gram,
        max_desc_len: cfg.spec.max_len,
        blob_len: blob.data.len() as u64,
        region_size: blob.region_size,
        fingerprint: blob.fingerprint,
        session_nonce: cfg.session_nonce,
        planned_bytes,
        planned_grams: cfg.spec.planned_grams().unwrap_or(0),
        auth: &[],
    }
    .emit(&mut body);
    put_frame(&mut out, FrameType::Hello, 0, &body);
    let mut wire_bytes = t.write_all(&out).map_err(|e| SessionError::io("HELLO", e))?;
    let (hdr, ack_body) = read_reply(t, &mut reader, "HELLO_ACK")?;
    if hdr.frame_type != FrameType::HelloAck {
        return Err(SessionError::Local(format!(
            "expected HELLO_ACK, got {}",
            hdr.frame_type.name()
        )));
    }
    let ack = HelloAck::parse(&ack_body).map_err(|e| SessionError::Wire {
        context: "HELLO_ACK",
        error: e,
    })?;
    let max_payload = (u64::from(cfg.spec.desc_per_gram) * u64::from(cfg.spec.max_len))
        .min(cfg.payload_budget.max(u64::from(cfg.spec.max_len)));
    if cfg.mode.carries_payload() && max_payload > u64::from(ack.max_payload_len) {
        return Err(SessionError::Local(format!(
            "a gram may carry up to {max_payload} payload bytes but the receiver accepts {}; \
             lower --gram-payload-max or --max-len",
            ack.max_payload_len
        )));
    }
    if cfg.spec.desc_per_gram > ack.max_desc_count {
        return Err(SessionError::Local(format!(
            "--desc-per-gram {} exceeds the receiver's limit of {}",
            cfg.spec.desc_per_gram, ack.max_desc_count
        )));
    }

    let started = Instant::now();
    let usage0 = thread_usage();
    let mut digest = Digest::new(cfg.integrity);
    let mut descs: Vec<Descriptor> = Vec::with_capacity(cfg.spec.desc_per_gram as usize);
    let mut table = TableWriter::new(cfg.mode.encoding(), cfg.spec.desc_per_gram as usize);
    // Payload ranges, adjacent ones merged: (start, end) into the blob.
    let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(cfg.spec.desc_per_gram as usize);
    let mut summary = SenderSummary::default();
    let mut table_bytes = 0u64;
    let mut seq = 0u64;
    let mut next_log = cfg.log_interval.map(|i| started + i);

    let budget = if cfg.mode.carries_payload() {
        cfg.payload_budget.max(1)
    } else {
        u64::MAX
    };
    while schedule.next_gram(&mut descs) {
        // In payload mode a schedule batch is cut into cache-sized grams:
        // the digest pass leaves each range in L2 just before the kernel
        // copies it, which roughly halves the copy's cost.
        let mut first = 0;
        while first < descs.len() {
            let mut last = first + 1;
            let mut bytes = u64::from(descs[first].len);
            while last < descs.len() && bytes + u64::from(descs[last].len) <= budget {
                bytes += u64::from(descs[last].len);
                last += 1;
            }
            let part = &descs[first..last];
            first = last;
            table.clear();
            ranges.clear();
            digest.reset();
            for (i, &d) in part.iter().enumerate() {
                let bytes = resolve(blob.data, d, i as u32)?;
                digest.update(bytes);
                table
                    .push(d)
                    .map_err(|e| SessionError::Local(format!("descriptor {d:?}: {e}")))?;
                if cfg.mode.carries_payload() {
                    let (s, e) = (d.offset as usize, d.offset as usize + d.len as usize);
                    match ranges.last_mut() {
                        Some(last) if last.1 == s => last.1 = e,
                        _ => ranges.push((s, e)),
                    }
                }
            }
            let payload_len = if cfg.mode.carries_payload() {
                table.total_len()
            } else {
                0
            };
            let payload_len = u32::try_from(payload_len)
                .map_err(|_| SessionError::Local("gram payload exceeds 4 GiB".into()))?;
            let value = digest.value();
            let gh = GramHeader {
                seq,
                desc_count: table.count(),
                table_len: table.as_bytes().len() as u32,
                payload_len,
                encoding: table.encoding(),
                integrity: cfg.integrity,
                flags: if payload_len > 0 { GRAM_FLAG_PAYLOAD } else { 0 },
                integrity_value: value,
            };
            if gh.table_len > ack.max_table_len {
                return Err(SessionError::Local(format!(
                    "a {}-byte descriptor table exceeds the receiver's limit of {} bytes; lower --desc-per-gram",
                    gh.table_len, ack.max_table_len
                )));
            }
            let length =
                u32::try_from(gh.body_len()).map_err(|_| SessionError::Local("gram exceeds 4 GiB".into()))?;
            let fh = FrameHeader {
                frame_type: FrameType::Gram,
                flags: 0,
                length,
            }
            .emit();
            let gh_bytes = gh.emit();
            let written = write_gram(t, &fh, &gh_bytes, table.as_bytes(), blob.data, &ranges)
                .map_err(|e| explain_write_failure(t, &mut reader, e, "GRAM"))?;
            wire_bytes += written;
            table_bytes += table.as_bytes().len() as u64;
            summary.grams += 1;
            summary.descriptors += u64::from(table.count());
            summary.effective_bytes += table.total_len();
            summary.payload_bytes += u64::from(payload_len);
            summary.e2e_digest = e2e_chain(summary.e2e_digest, seq, value);
            seq += 1;
        }
        if let (Some(at), Some(interval)) = (next_log, cfg.log_interval) {
            let now = Instant::now();
            if now >= at {
                on_progress(&SendProgress {
                    grams: summary.grams,
                    effective_bytes: summary.effective_bytes,
                    wire_bytes,
                    elapsed: now - started,
                    planned_bytes,
                });
                next_log = Some(now + interval);
            }
        }
    }

    summary.wire_bytes_sent = wire_bytes;
    out.clear();
    put_frame(&mut out, FrameType::Complete, 0, &summary.emit());
    t.write_all(&out)
        .map_err(|e| explain_write_failure(t, &mut reader, e, "COMPLETE"))?;
    let sender_elapsed = started.elapsed();
    let sender_usage = thread_usage().since(&usage0);
    let (hdr, body) = read_reply(t, &mut reader, "COMPLETE report").map_err(|e| match e {
        SessionError::Io { source, .. }
            if matches!(source.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
        {
            SessionError::Local(format!(
                "no report from the receiver within {:?} after the last gram (it may still be executing a backlog)",
                cfg.reply_timeout
            ))
        }
        other => other,
    })?;
    if hdr.frame_type != FrameType::Complete || hdr.flags & FLAG_COMPLETE_REPORT == 0 {
        return Err(SessionError::Local(format!(
            "expected the receiver's report, got {}",
            hdr.frame_type.name()
        )));
    }
    let report = Report::parse(&body).map_err(|e| SessionError::Wire {
        context: "COMPLETE report",
        error: e,
    })?;
    Ok(SendOutcome {
        report,
        summary,
        table_bytes,
        sender_usage,
        sender_elapsed,
        receiver_backing: ack.backing,
    })
}

/// Emits one gram: headers, table and payload ranges as one iovec list
/// (split only where it exceeds `IOV_MAX`).
fn write_gram<T: Transport + ?Sized>(
    t: &mut T,
    frame_header: &[u8; FRAME_HEADER_LEN],
    gram_header: &[u8; GRAM_HEADER_LEN],
    table: &[u8],
    blob: &[u8],
    ranges: &[(usize, usize)],
) -> std::io::Result<u64> {
    let mut iov = [IoSlice::new(&[]); IOV_MAX];
    iov[0] = IoSlice::new(frame_header);
    iov[1] = IoSlice::new(gram_header);
    iov[2] = IoSlice::new(table);
    let mut n = 3;
    let mut written = 0u64;
    for &(s, e) in ranges {
        if n == IOV_MAX {
            written += t.write_all_vectored(&mut iov[..n])?;
            n = 0;
        }
        iov[n] = IoSlice::new(&blob[s..e]);
        n += 1;
    }
    written += t.write_all_vectored(&mut iov[..n])?;
    Ok(written)
}
