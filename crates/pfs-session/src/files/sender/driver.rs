//! The blocking driver of the sender core over a byte-stream
//! [`Transport`], and [`LocalSource`], the core's host on this machine
//! (files read with `pread`, preparation through a [`FilesPrepare`], the
//! index cache in a directory).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use pfs_files::IndexCache;
use pfs_transport::Transport;

use super::core::{FilesSender, FilesSenderEvent, FilesSource};
use super::store_hex;
use super::{FilesItem, FilesPrepare, FilesSendConfig, FilesSendOutcome, FilesSendProgress};
use crate::error::LocalError;
use crate::framing::{now, RecvBuf};
use crate::SessionError;
use pfs_sys::thread_usage;

/// The sender core's host on this machine.
pub struct LocalSource<'p> {
    prep: &'p mut dyn FilesPrepare,
    cache_dir: Option<PathBuf>,
    /// The file read last, kept open for its next chunk.
    open: Option<(PathBuf, File)>,
}

impl std::fmt::Debug for LocalSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSource")
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl<'p> LocalSource<'p> {
    /// A source preparing files with `prep`, caching indexes in `cache_dir`.
    pub fn new(prep: &'p mut dyn FilesPrepare, cache_dir: Option<PathBuf>) -> Self {
        Self {
            prep,
            cache_dir,
            open: None,
        }
    }
}

impl FilesSource for LocalSource<'_> {
    fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)> {
        self.prep.hash(items, which)
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Vec<(usize, String)> {
        self.prep.chunk(items, which)
    }

    fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>) {
        let (mut cache, warning) = match &self.cache_dir {
            Some(dir) => IndexCache::open(dir, store_id),
            None => IndexCache::open(std::env::temp_dir().join("pfs-no-cache"), store_id),
        };
        if self.cache_dir.is_none() {
            // No cache wanted: fetch the whole index.
            cache.reset();
        }
        (cache, warning.map(|w| w.to_string()))
    }

    fn save_index(&mut self, cache: &IndexCache) -> Option<String> {
        self.cache_dir.as_ref()?;
        cache.save().err().map(|e| format!("index cache not saved: {e}"))
    }

    fn read(&mut self, item: &FilesItem, offset: u64, buf: &mut [u8]) -> Result<Option<String>, LocalError> {
        let e = &item.entry;
        let mut warning = None;
        if self.open.as_ref().is_none_or(|(p, _)| p != &e.abs) {
            let f = File::open(&e.abs).map_err(|source| LocalError::Io {
                what: "open",
                path: e.abs.clone(),
                source,
            })?;
            if let (Ok(meta), Some(r)) = (f.metadata(), item.recipe.as_ref()) {
                use std::os::unix::fs::MetadataExt;
                let now_ns = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
                if meta.size() != r.size || now_ns != e.mtime_ns {
                    warning = Some(format!(
                        "{} changed since it was scanned; the receiver will refuse it",
                        e.abs.display()
                    ));
                }
            }
            self.open = Some((e.abs.clone(), f));
        }
        let Some((_, f)) = self.open.as_ref() else {
            return Ok(warning);
        };
        f.read_exact_at(buf, offset).map_err(|source| LocalError::Io {
            what: "read",
            path: e.abs.clone(),
            source,
        })?;
        Ok(warning)
    }
}

/// Runs one files session over `t`: handshake, probe, index, plan, stream,
/// corrections, report. Regular files in `items` without a recipe are
/// hashed and asked about (PROBE) when the receiver's store is not empty,
/// then those the receiver lacks are chunked, all through `prep`; items
/// that cannot be read are left out with a warning.
pub fn send_files<T: Transport + ?Sized>(
    t: &mut T,
    items: &mut Vec<FilesItem>,
    cfg: &FilesSendConfig,
    prep: &mut dyn FilesPrepare,
    progress: &mut dyn FnMut(&FilesSendProgress),
) -> Result<FilesSendOutcome, SessionError> {
    let usage0 = thread_usage();
    let mut src = LocalSource::new(prep, cfg.index_cache_dir.clone());
    let mut core = FilesSender::new(items, cfg, now())?;
    let mut buf = RecvBuf::new(core.buffer_capacity());
    t.set_read_timeout(Some(cfg.reply_timeout))
        .map_err(|e| SessionError::transport("setup", e))?;
    let mut warnings = Vec::new();
    loop {
        if let Some(tx) = core.poll_transmit(now(), &mut src)? {
            let what = tx.what();
            if let Err(e) = tx.write_to(t) {
                return Err(explain_write_failure(t, &mut buf, e, what));
            }
            core.transmitted();
        }
        while let Some(FilesSenderEvent::Progress(p)) = core.poll_event() {
            progress(&p);
        }
        warnings.extend(core.take_warnings());
        if core.is_done() {
            break;
        }
        if core.wants_input() {
            let used = core.handle_input(now(), buf.filled(), &mut src)?;
            buf.consume(used);
            if !core.wants_input() {
                continue;
            }
            let want = core.want(buf.filled());
            buf.read_for(t, want, core.awaiting(), || core.timed_out())?;
            core.handle_timeout(now())?;
        }
    }
    if core.is_dry_run() {
        let _ = t.shutdown_write();
    }
    let accept = core.accept().copied();
    let (fetched, cached) = core.index_counts();
    let (sent, received) = core.wire_bytes();
    let report = core.take_report();
    let (repaired_chunks, repaired_bytes) = core.repaired;
    let elapsed = now() - core.started();
    let (report, messages) = match report {
        Some((r, m)) => (Some(r), m),
        None => (None, String::new()),
    };
    Ok(FilesSendOutcome {
        plan: core.summary(),
        store_id: accept.map(|a| store_hex(&a.store_id)).unwrap_or_default(),
        store_generation: accept.map_or(0, |a| a.generation),
        index_entries_fetched: fetched,
        index_entries_cached: cached,
        probed: core.probed(),
        report,
        messages,
        wire_bytes_sent: sent,
        wire_bytes_received: received,
        repaired_chunks,
        repaired_bytes,
        elapsed,
        usage: thread_usage().since(&usage0),
        warnings,
    })
}

/// After a failed write the receiver has usually said why in an ERROR
/// frame before closing; prefer that message to a bare EPIPE.
fn explain_write_failure<T: Transport + ?Sized>(
    t: &mut T,
    buf: &mut RecvBuf,
    err: std::io::Error,
    during: &'static str,
) -> SessionError {
    let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
    for _ in 0..64 {
        match buf.read_from(t, crate::framing::frame_want(buf.filled()).min(buf.capacity())) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if let Ok(Some(f)) = crate::framing::split_frame(buf.filled(), buf.capacity()) {
            if f.header.frame_type == pfs_wire::FrameType::Error {
                return crate::framing::refusal(f.body);
            }
            break;
        }
    }
    SessionError::transport(during, err)
}
