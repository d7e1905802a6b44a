//! The receiving side of a session: negotiate, then execute every gram over
//! the receiver's own blob and compare digests; answer the sender's summary
//! with the authoritative report.
//!
//! Everything the peer sends is checked before use: frame headers and gram
//! headers by the wire crate, counts and sizes against [`Limits`], every
//! descriptor against this blob's length. A violation sends an ERROR frame
//! and ends the session; it never panics and never touches memory outside
//! the blob.

use std::time::{Duration, Instant};

use pfs_exec::execute::resolve;
use pfs_exec::kernel::{Acc, Kernel, Output, CHUNK_DESCS};
use pfs_exec::{e2e_chain, execute_gram, Digest, GramLimits};
use pfs_transport::Transport;
use pfs_wire::control::{NO_MISMATCH, SENDER_SUMMARY_LEN};
use pfs_wire::frame::FLAG_COMPLETE_REPORT;
use pfs_wire::{
    put_frame, DescIter, ErrorCode, ErrorFrame, FrameHeader, FrameType, GramHeader, Hello, HelloAck,
    IntegrityAlg, Mode, Report, SenderSummary, GRAM_HEADER_LEN,
};

use crate::reader::FrameReader;
use crate::sys::{max_rss_bytes, thread_usage};
use crate::{short_hex, BlobView, Limits, SessionError};

/// Receiver settings.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Limits enforced and advertised.
    pub limits: Limits,
    /// Longest wait for HELLO after accept.
    pub handshake_timeout: Duration,
    /// Longest silence tolerated mid-session.
    pub idle_timeout: Duration,
    /// Progress callback interval (`None` = never).
    pub log_interval: Option<Duration>,
    /// A read-only pCPU kernel to run over every received gram's
    /// descriptors (on this blob), besides the integrity check.
    pub exec: Option<Kernel>,
    /// Record every received gram's header and descriptor table (no
    /// payload) to `<dir>/session-<nonce>.grams`, for `pfs exec --gram-file`.
    pub record_dir: Option<std::path::PathBuf>,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            log_interval: None,
            exec: None,
            record_dir: None,
        }
    }
}

/// Progress while receiving.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Grams executed so far.
    pub grams: u64,
    /// Effective bytes so far.
    pub effective_bytes: u64,
    /// Wire bytes so far.
    pub wire_bytes: u64,
    /// Time since HELLO_ACK.
    pub elapsed: Duration,
    /// Effective bytes the sender announced (0 = unknown).
    pub planned_bytes: u64,
}

/// A finished session, from the receiver's side.
#[derive(Debug, Clone)]
pub struct ReceiverOutcome {
    /// The report sent to the sender.
    pub report: Report,
    /// Mode negotiated.
    pub mode: Mode,
    /// Integrity negotiated.
    pub integrity: IntegrityAlg,
    /// What the sender said it sent.
    pub summary: SenderSummary,
    /// Result of the `exec` kernel over the whole session, when one was set.
    pub exec_output: Option<Output>,
}

/// A pCPU kernel run across a session's grams with the executor's chunking
/// (fixed runs of `CHUNK_DESCS` descriptors, crossing gram boundaries), so the
/// result equals `pfs exec` over the same schedule.
struct SessionExec {
    kernel: Kernel,
    total: Acc,
    chunk: Acc,
    in_chunk: usize,
}

impl SessionExec {
    fn new(kernel: Kernel) -> Self {
        Self {
            kernel,
            total: kernel.acc(),
            chunk: kernel.acc(),
            in_chunk: 0,
        }
    }

    #[inline]
    fn update(&mut self, bytes: &[u8]) {
        if !self.kernel.id.shardable() {
            // Stream kernels (FNV-1a) run one state over everything.
            self.kernel.update(&mut self.total, bytes);
            return;
        }
        self.kernel.update(&mut self.chunk, bytes);
        self.in_chunk += 1;
        if self.in_chunk == CHUNK_DESCS {
            let done = std::mem::replace(&mut self.chunk, self.kernel.acc());
            self.kernel.combine(&mut self.total, done);
            self.in_chunk = 0;
        }
    }

    fn finish(mut self) -> Output {
        if self.in_chunk > 0 {
            self.kernel.combine(&mut self.total, self.chunk);
        }
        self.kernel.finish(self.total)
    }
}

/// Per-session state of the receiving loop.
struct Rx<'b> {
    blob: &'b [u8],
    mode: Mode,
    integrity: IntegrityAlg,
    limits: Limits,
    digest: Digest,
    table: Vec<u8>,
    report: Report,
    next_seq: u64,
    exec: Option<SessionExec>,
    gram_limits: GramLimits,
    record: Option<std::io::BufWriter<std::fs::File>>,
}

pub(crate) fn reject(code: ErrorCode, message: String) -> SessionError {
    SessionError::Rejected { code, message }
}

/// Sends an ERROR frame, best effort (the peer may already be gone).
pub(crate) fn send_error<T: Transport + ?Sized>(t: &mut T, err: &SessionError) {
    let msg = match err {
        SessionError::Rejected { message, .. } => message.clone(),
        other => other.to_string(),
    };
    let mut body = Vec::with_capacity(msg.len() + 8);
    ErrorFrame {
        code: err.code() as u16,
        message: &msg,
    }
    .emit(&mut body);
    let mut frame = Vec::with_capacity(body.len() + 16);
    put_frame(&mut frame, FrameType::Error, 0, &body);
    let _ = t.write_all(&frame);
}

/// Runs one session on an accepted connection. On a protocol violation the
/// peer gets an ERROR frame and the error is returned.
pub fn receive_session<T: Transport + ?Sized>(
    t: &mut T,
    blob: &BlobView<'_>,
    cfg: &ReceiverConfig,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<ReceiverOutcome, SessionError> {
    let mut reader = FrameReader::new(cfg.limits.max_table_len as usize + 64 * 1024);
    match run(t, &mut reader, blob, cfg, on_progress) {
        Ok(o) => Ok(o),
        Err(e) => {
            match &e {
                // Nobody to tell, or the peer's own ERROR: never answered.
                SessionError::PeerClosed { .. } | SessionError::Refused { .. } => {}
                SessionError::Io { source, .. }
                    if matches!(
                        source.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    send_error(
                        t,
                        &reject(
                            ErrorCode::Protocol,
                            format!("closing an idle or too slow session ({e})"),
                        ),
                    );
                }
                SessionError::Io { .. } => {}
                _ => send_error(t, &e),
            }
            Err(e)
        }
    }
}

fn check_hello(
    hello: &Hello<'_>,
    blob: &BlobView<'_>,
    limits: &Limits,
    has_exec: bool,
) -> Result<(), SessionError> {
    if hello.integrity == IntegrityAlg::None && !hello.mode.carries_payload() && !has_exec {
        return Err(reject(
            ErrorCode::Unsupported,
            format!(
                "{} mode with integrity none would execute nothing on this receiver; \
                 use --integrity xxh3 or fnv1a (or start the receiver with --exec KERNEL)",
                hello.mode.name()
            ),
        ));
    }
    if hello.auth_method == 0 && !hello.auth.is_empty() {
        return Err(reject(
            ErrorCode::Auth,
            format!(
                "authentication method 0 (none) must carry no data, got {} bytes",
                hello.auth.len()
            ),
        ));
    }
    if hello.encoding != hello.mode.encoding() {
        return Err(reject(
            ErrorCode::Unsupported,
            format!(
                "mode {} uses the {} encoding, HELLO asked for {}",
                hello.mode.name(),
                hello.mode.encoding().name(),
                hello.encoding.name()
            ),
        ));
    }
    if hello.auth_method != 0 {
        return Err(reject(
            ErrorCode::Auth,
            format!(
                "authentication method {} is not supported by this receiver (it accepts: none)",
                hello.auth_method
            ),
        ));
    }
    if hello.blob_len != blob.data.len() as u64 {
        return Err(reject(
            ErrorCode::BlobMismatch,
            format!(
                "blob size differs: sender {} bytes, receiver {} bytes (use the same --size and --seed on both sides)",
                hello.blob_len,
                blob.data.len()
            ),
        ));
    }
    if hello.region_size != blob.region_size || hello.fingerprint != blob.fingerprint {
        return Err(reject(
            ErrorCode::BlobMismatch,
            format!(
                "blob fingerprint differs: sender {} (region {} B), receiver {} (region {} B); \
                 the peers do not hold the same bytes (check --seed / --blob-name, or `pfs blob verify`)",
                short_hex(&hello.fingerprint),
                hello.region_size,
                short_hex(&blob.fingerprint),
                blob.region_size
            ),
        ));
    }
    if hello.max_desc_per_gram > limits.max_desc_count {
        return Err(reject(
            ErrorCode::Limit,
            format!(
                "{} descriptors per gram exceeds this receiver's limit of {}",
                hello.max_desc_per_gram, limits.max_desc_count
            ),
        ));
    }
    if hello.max_desc_len > limits.max_desc_len {
        return Err(reject(
            ErrorCode::Limit,
            format!(
                "descriptor length {} exceeds this receiver's limit of {}",
                hello.max_desc_len, limits.max_desc_len
            ),
        ));
    }
    Ok(())
}

fn run<T: Transport + ?Sized>(
    t: &mut T,
    reader: &mut FrameReader,
    blob: &BlobView<'_>,
    cfg: &ReceiverConfig,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<ReceiverOutcome, SessionError> {
    t.set_read_timeout(Some(cfg.handshake_timeout))
        .map_err(|e| SessionError::io("setup", e))?;
    reader.set_deadline(Some(Instant::now() + cfg.handshake_timeout));
    let hdr = reader
        .next_header(t)?
        .ok_or(SessionError::PeerClosed { during: "HELLO" })?;
    if hdr.frame_type != FrameType::Hello {
        return Err(reject(
            ErrorCode::Protocol,
            format!("expected HELLO, got {}", hdr.frame_type.name()),
        ));
    }
    let body = reader.take(t, hdr.length as usize, "HELLO")?;
    let hello = Hello::parse(body).map_err(|e| SessionError::Wire {
        context: "HELLO",
        error: e,
    })?;
    check_hello(&hello, blob, &cfg.limits, cfg.exec.is_some())?;
    let max_desc_len = hello.max_desc_len;
    let (mode, integrity, nonce, planned_bytes) = (
        hello.mode,
        hello.integrity,
        hello.session_nonce,
        hello.planned_bytes,
    );

    let limits = cfg.limits;
    let mut out = Vec::with_capacity(128);
    let mut ack_body = Vec::with_capacity(64);
    HelloAck {
        max_gram_body: limits.max_gram_body(),
        max_desc_count: limits.max_desc_count,
        max_table_len: limits.max_table_len,
        max_payload_len: limits.max_payload_len,
        blob_len: blob.data.len() as u64,
        page_size: blob.page_size,
        backing: blob.backing,
        auth_method: 0,
        session_nonce: nonce,
        auth: &[],
    }
    .emit(&mut ack_body);
    put_frame(&mut out, FrameType::HelloAck, 0, &ack_body);
    t.write_all(&out).map_err(|e| SessionError::io("HELLO_ACK", e))?;
    t.set_read_timeout(Some(cfg.idle_timeout))
        .map_err(|e| SessionError::io("setup", e))?;

    // Steady state starts when the first frame after the handshake arrives:
    // setup (map, prefault, fill, fingerprint), the handshake and the
    // sender's time to build its first gram are outside the window.
    let mut started = Instant::now();
    let mut usage0 = thread_usage();
    let mut clock_running = false;
    // Wire bytes count both directions of the whole session: everything
    // read (HELLO included) plus what this side writes (HELLO_ACK, report).
    let written = out.len() as u64 + REPORT_FRAME_LEN;
    let mut rx = Rx {
        blob: blob.data,
        mode,
        integrity,
        limits,
        digest: Digest::new(integrity),
        table: Vec::with_capacity(limits.max_table_len.min(1 << 20) as usize),
        exec: cfg.exec.map(SessionExec::new),
        record: match &cfg.record_dir {
            None => None,
            Some(dir) => {
                let path = dir.join(format!("session-{nonce:016x}.grams"));
                let file = std::fs::File::create(&path).map_err(|e| {
                    reject(
                        ErrorCode::Internal,
                        format!("cannot record grams to {}: {e}", path.display()),
                    )
                })?;
                Some(std::io::BufWriter::new(file))
            }
        },
        gram_limits: GramLimits {
            max_desc_len: max_desc_len.min(limits.max_desc_len),
            max_effective: limits.max_gram_effective,
        },
        report: Report {
            first_mismatch_seq: NO_MISMATCH,
            mode: mode as u8,
            encoding: mode.encoding() as u8,
            integrity: integrity as u8,
            backing: blob.backing,
            page_size: blob.page_size,
            setup_map_ns: secs_ns(blob.setup.map_s),
            setup_prefault_ns: secs_ns(blob.setup.prefault_s),
            setup_fill_ns: secs_ns(blob.setup.fill_s),
            setup_fingerprint_ns: secs_ns(blob.setup.fingerprint_s),
            ..Report::default()
        },
        next_seq: 0,
    };
    let mut next_log = cfg.log_interval.map(|i| started + i);

    let summary = loop {
        reader.set_deadline(Some(Instant::now() + cfg.idle_timeout));
        let hdr = reader.next_header(t)?.ok_or(SessionError::PeerClosed {
            during: "session (before COMPLETE)",
        })?;
        if !clock_running {
            started = Instant::now();
            usage0 = thread_usage();
            next_log = cfg.log_interval.map(|i| started + i);
            clock_running = true;
        }
        match hdr.frame_type {
            FrameType::Gram => {
                // A big gram may take a while at a modest rate: idle timeout
                // plus 1 s per MB of frame.
                let allowance = Duration::from_secs(u64::from(hdr.length) / 1_000_000);
                reader.set_deadline(Some(Instant::now() + cfg.idle_timeout + allowance));
                rx.gram(t, reader, hdr)?
            }
            FrameType::Complete if hdr.flags & FLAG_COMPLETE_REPORT == 0 => {
                if hdr.length as usize != SENDER_SUMMARY_LEN {
                    return Err(reject(
                        ErrorCode::BadFrame,
                        format!("COMPLETE body of {} bytes", hdr.length),
                    ));
                }
                let body = reader.take(t, hdr.length as usize, "COMPLETE")?;
                break SenderSummary::parse(body).map_err(|e| SessionError::Wire {
                    context: "COMPLETE",
                    error: e,
                })?;
            }
            FrameType::Error => {
                let body = reader.take(t, hdr.length as usize, "ERROR")?;
                let (code, message) = match ErrorFrame::parse(body) {
                    Ok(f) => (f.code, f.message.to_string()),
                    Err(e) => (0, format!("undecodable ERROR frame: {e}")),
                };
                return Err(SessionError::Refused {
                    code,
                    code_name: code_name(code),
                    message,
                });
            }
            other => {
                return Err(reject(
                    ErrorCode::Protocol,
                    format!("unexpected {} frame during a session", other.name()),
                ))
            }
        }
        if let (Some(at), Some(interval)) = (next_log, cfg.log_interval) {
            let now = Instant::now();
            if now >= at {
                on_progress(&Progress {
                    grams: rx.report.grams,
                    effective_bytes: rx.report.effective_bytes,
                    wire_bytes: reader.wire_bytes() + written,
                    elapsed: now - started,
                    planned_bytes,
                });
                next_log = Some(now + interval);
            }
        }
    };

    let elapsed = started.elapsed();
    let usage = thread_usage().since(&usage0);
    let mut report = rx.report;
    report.elapsed_ns = elapsed.as_nanos() as u64;
    report.wire_bytes = reader.wire_bytes() + written;
    report.user_us = usage.user_us;
    report.sys_us = usage.sys_us;
    report.nvcsw = usage.nvcsw;
    report.nivcsw = usage.nivcsw;
    report.max_rss_bytes = max_rss_bytes();
    let counts_match = summary.grams == report.grams
        && summary.descriptors == report.descriptors
        && summary.effective_bytes == report.effective_bytes
        && summary.e2e_digest == report.e2e_digest;
    report.integrity_ok = u8::from(report.mismatched_grams == 0 && counts_match);

    let mut out = Vec::with_capacity(256);
    put_frame(
        &mut out,
        FrameType::Complete,
        FLAG_COMPLETE_REPORT,
        &report.emit(),
    );
    t.write_all(&out)
        .map_err(|e| SessionError::io("COMPLETE report", e))?;
    let _ = t.shutdown_write();
    if let Some(mut rec) = rx.record.take() {
        use std::io::Write;
        rec.flush().map_err(|e| SessionError::io("recording grams", e))?;
    }
    Ok(ReceiverOutcome {
        report,
        mode,
        integrity,
        summary,
        exec_output: rx.exec.map(SessionExec::finish),
    })
}

/// Appends a gram as a payload-free GRAM frame: what `pfs exec --gram-file` reads.
fn record_gram(out: &mut impl std::io::Write, gh: &GramHeader, table: &[u8]) -> std::io::Result<()> {
    let header = GramHeader {
        payload_len: 0,
        flags: 0,
        ..*gh
    };
    let length = (pfs_wire::GRAM_HEADER_LEN + table.len()) as u32;
    out.write_all(
        &FrameHeader {
            frame_type: FrameType::Gram,
            flags: 0,
            length,
        }
        .emit(),
    )?;
    out.write_all(&header.emit())?;
    out.write_all(table)
}

/// Size of the COMPLETE(REPORT) frame this side sends last.
const REPORT_FRAME_LEN: u64 = (pfs_wire::FRAME_HEADER_LEN + pfs_wire::control::REPORT_LEN) as u64;

fn secs_ns(s: f64) -> u64 {
    (s * 1e9) as u64
}

pub(crate) fn code_name(code: u16) -> String {
    ErrorCode::from_u16(code)
        .map(|c| c.name().to_string())
        .unwrap_or_else(|| format!("code {code}"))
}

impl Rx<'_> {
    fn gram<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        reader: &mut FrameReader,
        fh: FrameHeader,
    ) -> Result<(), SessionError> {
        if (fh.length as usize) < GRAM_HEADER_LEN {
            return Err(reject(
                ErrorCode::BadFrame,
                format!("GRAM body of {} bytes is shorter than its header", fh.length),
            ));
        }
        let gh = GramHeader::parse(reader.take(t, GRAM_HEADER_LEN, "gram header")?).map_err(|e| {
            SessionError::Wire {
                context: "gram header",
                error: e,
            }
        })?;
        let seq = gh.seq;
        gh.check_body_len(fh.length).map_err(|e| SessionError::Wire {
            context: "gram header",
            error: e,
        })?;
        if seq != self.next_seq {
            return Err(reject(
                ErrorCode::Protocol,
                format!("gram #{seq} arrived, expected #{}", self.next_seq),
            ));
        }
        if gh.encoding != self.mode.encoding() || gh.integrity != self.integrity {
            return Err(reject(
                ErrorCode::Unsupported,
                format!(
                    "gram #{seq} uses {}/{}, the session negotiated {}/{}",
                    gh.encoding.name(),
                    gh.integrity.name(),
                    self.mode.encoding().name(),
                    self.integrity.name()
                ),
            ));
        }
        if gh.desc_count > self.limits.max_desc_count || gh.table_len > self.limits.max_table_len {
            return Err(reject(
                ErrorCode::Limit,
                format!(
                    "gram #{seq}: {} descriptors / {}-byte table exceeds the limits ({} / {})",
                    gh.desc_count, gh.table_len, self.limits.max_desc_count, self.limits.max_table_len
                ),
            ));
        }
        if gh.payload_len > self.limits.max_payload_len {
            return Err(reject(
                ErrorCode::Limit,
                format!(
                    "gram #{seq}: {}-byte payload exceeds the limit of {}",
                    gh.payload_len, self.limits.max_payload_len
                ),
            ));
        }
        if self.mode.carries_payload() != (gh.payload_len > 0) && gh.desc_count > 0 {
            return Err(reject(
                ErrorCode::Protocol,
                format!(
                    "gram #{seq}: payload of {} bytes in {} mode",
                    gh.payload_len,
                    self.mode.name()
                ),
            ));
        }
        let table = reader.take(t, gh.table_len as usize, "descriptor table")?;
        if let Some(rec) = self.record.as_mut() {
            record_gram(rec, &gh, table).map_err(|e| SessionError::io("recording grams", e))?;
        }
        let descs = DescIter::new(table, gh.encoding, gh.desc_count);
        let (digest, effective, count, payload_differs) = if gh.payload_len == 0 {
            let out = execute_gram(self.blob, descs, &mut self.digest, self.gram_limits)
                .map_err(|e| self.exec_err(seq, e))?;
            if let Some(exec) = self.exec.as_mut() {
                // Already bounds-checked by execute_gram above.
                for d in DescIter::new(table, gh.encoding, gh.desc_count).flatten() {
                    exec.update(&self.blob[d.offset as usize..d.offset as usize + d.len as usize]);
                }
            }
            (out.digest, out.effective_bytes, out.descriptors, false)
        } else {
            // The table must outlive the payload stream, which reuses the reader's buffer.
            self.table.clear();
            self.table.extend_from_slice(table);
            let out = self.payload(t, reader, &gh)?;
            if let Some(exec) = self.exec.as_mut() {
                for d in DescIter::new(&self.table, gh.encoding, gh.desc_count).flatten() {
                    exec.update(&self.blob[d.offset as usize..d.offset as usize + d.len as usize]);
                }
            }
            out
        };
        let r = &mut self.report;
        if digest != gh.integrity_value || payload_differs {
            r.mismatched_grams += 1;
            if r.first_mismatch_seq == NO_MISMATCH {
                r.first_mismatch_seq = seq;
            }
        }
        r.e2e_digest = e2e_chain(r.e2e_digest, seq, digest);
        r.grams += 1;
        r.descriptors += u64::from(count);
        r.effective_bytes += effective;
        r.payload_bytes += u64::from(gh.payload_len);
        self.next_seq += 1;
        Ok(())
    }

    fn exec_err(&self, seq: u64, e: pfs_exec::ExecError) -> SessionError {
        match e {
            pfs_exec::ExecError::OutOfBounds { .. } => {
                reject(ErrorCode::OutOfBounds, format!("gram #{seq}: {e}"))
            }
            pfs_exec::ExecError::Wire(w) => {
                reject(ErrorCode::BadFrame, format!("gram #{seq}: descriptor table: {w}"))
            }
            pfs_exec::ExecError::TooLong { .. } | pfs_exec::ExecError::TooMuchWork { .. } => {
                reject(ErrorCode::Limit, format!("gram #{seq}: {e}"))
            }
        }
    }

    /// Payload mode: stream the slab, compare each range with this blob and
    /// digest what arrived. Returns (digest, effective bytes, descriptors,
    /// whether the payload differs from this blob).
    fn payload<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
        reader: &mut FrameReader,
        gh: &GramHeader,
    ) -> Result<(u64, u64, u32, bool), SessionError> {
        let seq = gh.seq;
        self.digest.reset();
        let mut remaining = u64::from(gh.payload_len);
        let mut effective = 0u64;
        let mut count = 0u32;
        let mut differs = false;
        let table = std::mem::take(&mut self.table);
        let result = (|| {
            for d in DescIter::new(&table, gh.encoding, gh.desc_count) {
                let d = d.map_err(|e| self.exec_err(seq, e.into()))?;
                self.gram_limits
                    .check(count, d.len, effective)
                    .map_err(|e| self.exec_err(seq, e))?;
                let expect = resolve(self.blob, d, count).map_err(|e| self.exec_err(seq, e))?;
                if u64::from(d.len) > remaining {
                    return Err(reject(
                        ErrorCode::BadFrame,
                        format!(
                            "gram #{seq}: descriptors reference more bytes than the {}-byte payload",
                            gh.payload_len
                        ),
                    ));
                }
                let mut at = 0usize;
                let digest = &mut self.digest;
                let streamed = reader.stream(t, u64::from(d.len), "payload", |chunk: &[u8]| {
                    differs |= chunk != &expect[at..at + chunk.len()];
                    digest.update(chunk);
                    at += chunk.len();
                    Ok::<(), ()>(())
                })?;
                debug_assert!(streamed.is_ok());
                remaining -= u64::from(d.len);
                effective += u64::from(d.len);
                count += 1;
            }
            if remaining != 0 {
                return Err(reject(
                    ErrorCode::BadFrame,
                    format!("gram #{seq}: {remaining} payload bytes not referenced by any descriptor"),
                ));
            }
            Ok(())
        })();
        self.table = table;
        result?;
        // A payload that differs from this blob is a mismatch even when the
        // sender's digest agrees with the bytes that arrived.
        Ok((self.digest.value(), effective, count, differs))
    }
}
