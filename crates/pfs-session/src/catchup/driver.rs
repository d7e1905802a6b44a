//! Blocking drivers of the catch-up cores over a byte-stream
//! [`Transport`]: they own the socket, the clock and the replica's nonce;
//! the cores own the protocol. Both take the session's receive buffer, so
//! bytes that arrived with the handshake are not lost, and leave in it what
//! follows the catch-up (the first grams).

use std::time::{Duration, Instant};

use pfs_blob::Fingerprint;
use pfs_transport::Transport;

use super::host::ReplicaHost;
use super::replica::CatchUpReplica;
use super::source::CatchUpSource;
use super::{CatchUpConfig, CatchUpProgress, CatchUpStats};
use crate::framing::{now, write_reply, ReadTimeout, RecvBuf, DEFAULT_MIN_FRAME_RATE};
use crate::SessionError;

/// Runs the source side of a catch-up on `t`, right after the handshake
/// that negotiated it (HELLO_ACK with `CATCH_UP` in a gram session):
/// `data` is this side's blob, `fp` its fingerprint, `sender_nonce` the
/// nonce of the session's HELLO. Returns what moved once the replica's
/// root equals `fp.root`.
///
/// `buf` is the session's receive buffer (at least 64 KiB); what the
/// replica sends after its CATCHUP_END stays in it.
pub fn catch_up_source<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    data: &[u8],
    fp: &Fingerprint,
    sender_nonce: u64,
    cfg: &CatchUpConfig,
    on_progress: &mut dyn FnMut(&CatchUpProgress),
) -> Result<CatchUpStats, SessionError> {
    let start = now();
    let mut core = CatchUpSource::new(data, fp, sender_nonce, cfg, start);
    let mut read_timeout = ReadTimeout::default();
    let mut progress = Progress::new(cfg.log_interval, start, fp.regions.len() as u64);
    loop {
        while let Some(tx) = core.poll_transmit(now()) {
            let what = tx.what();
            tx.write_to(t).map_err(|e| SessionError::transport(what, e))?;
        }
        progress.tick(core.stats(), on_progress);
        if core.is_done() {
            break;
        }
        let used = core.handle_input(now(), buf.filled())?;
        if used > 0 {
            buf.consume(used);
            continue;
        }
        read_timeout
            .update(t, core.poll_timeout(), now())
            .map_err(|e| SessionError::transport("setup", e))?;
        let want = core.want(buf.filled());
        buf.read_for(t, want, "catch-up", || core.timed_out())?;
        core.handle_timeout(now())?;
    }
    Ok(CatchUpStats {
        elapsed_ns: elapsed_ns(start),
        ..core.stats()
    })
}

/// Runs the replica side of a catch-up on `t`, right after the handshake
/// that negotiated it: `host` is this side's blob, `sender_nonce` and
/// `target` the nonce and fingerprint root of the session's HELLO. Returns
/// what moved once this blob's root equals `target`.
///
/// `buf` is the session's receive buffer; the replica accepts
/// CATCHUP_BLOCKS bodies up to `cfg.max_blocks_body` or what the buffer
/// holds, whichever is less. Whatever ends the catch-up, the regions it
/// rewrote are hashed again, so a later attempt moves only what still
/// differs.
pub fn catch_up_replica<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    host: &mut dyn ReplicaHost,
    sender_nonce: u64,
    target: [u8; 32],
    cfg: &CatchUpConfig,
    on_progress: &mut dyn FnMut(&CatchUpProgress),
) -> Result<CatchUpStats, SessionError> {
    let start = now();
    let room = buf.capacity().saturating_sub(pfs_wire::FRAME_HEADER_LEN);
    let cfg = CatchUpConfig {
        max_blocks_body: cfg.max_blocks_body.min(u32::try_from(room).unwrap_or(u32::MAX)),
        ..*cfg
    };
    let mut core = CatchUpReplica::new(sender_nonce, replica_nonce(), target, &cfg, start);
    let result = replicate(t, buf, host, &mut core, cfg.write_timeout, start, on_progress);
    if result.is_err() && !core.rewritten().is_empty() {
        // Hash again what this attempt touched: the next one resumes.
        let _ = host.rehash(core.rewritten());
    }
    result.map(|()| CatchUpStats {
        elapsed_ns: elapsed_ns(start),
        ..core.stats()
    })
}

fn replicate<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    host: &mut dyn ReplicaHost,
    core: &mut CatchUpReplica,
    write_timeout: Duration,
    start: Instant,
    on_progress: &mut dyn FnMut(&CatchUpProgress),
) -> Result<(), SessionError> {
    let regions = (host.data().len() as u64).div_ceil(u64::from(host.region_size().max(1)));
    let mut progress = Progress::new(core.log_interval(), start, regions);
    let mut read_timeout = ReadTimeout::default();
    loop {
        while let Some(frame) = core.poll_transmit(&*host) {
            write_reply(t, frame, write_timeout, DEFAULT_MIN_FRAME_RATE)
                .map_err(|e| SessionError::transport("catch-up", e))?;
        }
        progress.tick(core.stats(), on_progress);
        if core.is_done() {
            break;
        }
        let used = core.handle_input(now(), buf.filled(), host)?;
        if used > 0 {
            buf.consume(used);
            continue;
        }
        read_timeout
            .update(t, core.poll_timeout(), now())
            .map_err(|e| SessionError::transport("setup", e))?;
        let want = core.want(buf.filled()).min(buf.capacity());
        buf.read_for(t, want, "catch-up", || core.timed_out())?;
        core.handle_timeout(now())?;
    }
    if let Some(end) = core.end_frame() {
        write_reply(t, end, write_timeout, DEFAULT_MIN_FRAME_RATE)
            .map_err(|e| SessionError::transport("CATCHUP_END", e))?;
    }
    Ok(())
}

/// Calls the progress callback every interval.
struct Progress {
    every: Option<Duration>,
    next: Instant,
    regions_total: u64,
}

impl Progress {
    fn new(every: Option<Duration>, start: Instant, regions_total: u64) -> Self {
        Self {
            every,
            next: start + every.unwrap_or_default(),
            regions_total,
        }
    }

    fn tick(&mut self, stats: CatchUpStats, on_progress: &mut dyn FnMut(&CatchUpProgress)) {
        let Some(every) = self.every else { return };
        let t = now();
        if t >= self.next {
            self.next = t + every;
            on_progress(&CatchUpProgress {
                stats,
                regions_total: self.regions_total,
            });
        }
    }
}

fn elapsed_ns(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A random nonce for CATCHUP_BEGIN: with the sender's, it keys the block
/// hashes, so neither side alone chooses the key.
fn replica_nonce() -> u64 {
    let mut b = [0u8; 8];
    // getrandom without flags blocks only before the pool is initialised.
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return u64::try_from(t.as_nanos()).unwrap_or(0) ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(b)
}
