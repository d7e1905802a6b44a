//! Chunking a file read through recycled window buffers (see the module docs
//! of [`crate::chunk`] for why `pread(2)` rather than `mmap`).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::{
    assemble, chunk_bytes_windowed, hash_chunks, lock, ChunkParams, ChunkRef, Cutter, Recipe, ZERO_FLAG,
};
use crate::error::FilesError;

/// Windows read but not yet hashed, per file. Bounds memory at
/// `MAX_IN_FLIGHT * (window + max)` bytes per file being chunked.
const MAX_IN_FLIGHT: usize = 4;

/// Chunk and hash one regular file.
///
/// The file is read once, sequentially. Files larger than one window (8 MiB)
/// are hashed in parallel on the current rayon pool. If the file's size,
/// mtime or ctime changes while it is read, or it ends early or grows, the
/// result is [`FilesError::Changed`]: the recipe would describe no single
/// version of the file.
///
/// Holes of sparse files are not read (they are zeros); see the module docs.
pub fn chunk_file(path: impl AsRef<Path>, params: &ChunkParams) -> Result<Recipe, FilesError> {
    chunk_file_windowed(path.as_ref(), params, params.window(), &AtomicU64::new(0))
}

thread_local! {
    /// Read buffer for files that fit in one window.
    static SMALL: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`chunk_file`] with its window size, adding the bytes it reads to `read`.
pub(super) fn chunk_file_windowed(
    path: &Path,
    params: &ChunkParams,
    window: usize,
    read: &AtomicU64,
) -> Result<Recipe, FilesError> {
    read_file(
        path,
        window,
        read,
        |data| chunk_bytes_windowed(data, params, window),
        |file, size| pipeline(file, path, size, params, window, read, None),
    )
}

/// [`chunk_file`] and [`digest_file`] of a file already open (`path`
/// names it in errors): what a receiver learns of a file it holds. A file
/// that fits in one window is read once for both; a larger one twice.
pub fn chunk_and_digest_open_file(
    file: &File,
    path: &Path,
    params: &ChunkParams,
) -> Result<(Recipe, QuickDigest), FilesError> {
    let (window, read) = (params.window(), &AtomicU64::new(0));
    read_open_file(
        file,
        path,
        window,
        read,
        |data| (chunk_bytes_windowed(data, params, window), quick_digest(data)),
        |file, size| {
            let recipe = pipeline(file, path, size, params, window, read, None)?;
            Ok((recipe, digest_large(file, path, size, window, read)?))
        },
    )
}

/// [`digest_file`] of a file already open (`path` names it in errors).
pub fn digest_open_file(file: &File, path: &Path, params: &ChunkParams) -> Result<QuickDigest, FilesError> {
    let (window, read) = (params.window(), &AtomicU64::new(0));
    read_open_file(file, path, window, read, quick_digest, |file, size| {
        digest_large(file, path, size, window, read)
    })
}

/// Where [`chunk_file_streaming`] hands each run of chunks, in file order;
/// it returns false to stop the chunking (nobody wants the rest).
pub type ChunkSink<'s> = &'s mut (dyn FnMut(&[ChunkRef]) -> bool + Send);

/// [`chunk_file`] on a pool of `threads` threads (0 = one per core),
/// handing the chunks to `sink` in file order as their windows are hashed,
/// so a caller can send the first chunks of a large file while the rest is
/// still being read; bytes read are added to `read`. The recipe is
/// returned at the end; if the file changed while read
/// ([`FilesError::Changed`]) the chunks already handed out describe no
/// single version of it and must be discarded. A sink that returns false
/// ends it early with [`FilesError::Stopped`].
pub fn chunk_file_streaming(
    path: impl AsRef<Path>,
    params: &ChunkParams,
    threads: usize,
    read: &AtomicU64,
    sink: ChunkSink<'_>,
) -> Result<Recipe, FilesError> {
    let path = path.as_ref();
    let window = params.window();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("pfs-stream-{i}"))
        .build()
        .map_err(|source| FilesError::ThreadPool { threads, source })?;
    pool.install(move || {
        // One of the two closures runs; a Cell lets both hold the sink.
        let sink = std::cell::Cell::new(Some(sink));
        read_file(
            path,
            window,
            read,
            |data| {
                let r = chunk_bytes_windowed(data, params, window);
                if let Some(s) = sink.take() {
                    let _ = s(&r.chunks);
                }
                r
            },
            |file, size| pipeline(file, path, size, params, window, read, sink.take()),
        )
    })
}

/// [`chunk_file_streaming`] of a file already open (`path` names it in
/// errors): a server that opened the file beneath its root without
/// following symlinks cuts it here. A file of at most one window (8 MiB)
/// is cut on the calling thread and handed to `sink` in one run; only a
/// larger one gets a pool of `threads` threads (0 = one per core), on
/// whose thread `sink` is then called.
pub fn chunk_open_file_streaming(
    file: &File,
    path: &Path,
    params: &ChunkParams,
    threads: usize,
    read: &AtomicU64,
    sink: ChunkSink<'_>,
) -> Result<Recipe, FilesError> {
    let window = params.window();
    let sink = std::cell::Cell::new(Some(sink));
    read_open_file(
        file,
        path,
        window,
        read,
        |data| {
            let r = chunk_bytes_windowed(data, params, window);
            if let Some(s) = sink.take() {
                let _ = s(&r.chunks);
            }
            r
        },
        |file, size| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("pfs-cut-{i}"))
                .build()
                .map_err(|source| FilesError::ThreadPool { threads, source })?;
            let sink = sink.take();
            pool.install(move || pipeline(file, path, size, params, window, read, sink))
        },
    )
}

/// Opens the regular file `path`; a file of at most `window` bytes is read
/// whole into this thread's reused buffer and given to `small`, a larger one
/// goes to `large` (with its size). Either way the file must still have the
/// size and timestamps it had when opened ([`FilesError::Changed`]). A
/// small file's bytes are added to `read` here, a large one's by `large`.
fn read_file<R>(
    path: &Path,
    window: usize,
    read: &AtomicU64,
    small: impl FnOnce(&[u8]) -> R,
    large: impl FnOnce(&File, u64) -> Result<R, FilesError>,
) -> Result<R, FilesError> {
    let file = File::open(path).map_err(|e| FilesError::io("open", path, e))?;
    read_open_file(&file, path, window, read, small, large)
}

/// [`read_file`] of a file already open (`path` names it in errors).
fn read_open_file<R>(
    file: &File,
    path: &Path,
    window: usize,
    read: &AtomicU64,
    small: impl FnOnce(&[u8]) -> R,
    large: impl FnOnce(&File, u64) -> Result<R, FilesError>,
) -> Result<R, FilesError> {
    let before = file.metadata().map_err(|e| FilesError::io("stat", path, e))?;
    if !before.is_file() {
        return Err(FilesError::NotAFile { path: path.into() });
    }
    let size = before.len();
    let result = if size <= window as u64 {
        // Trees are mostly small files: one reused buffer per thread, not a
        // fresh zeroed allocation per file.
        SMALL.with(|cell| {
            let mut buf = cell.borrow_mut();
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            let data = &mut buf[..size as usize];
            read_full_at(file, data, 0, path)?;
            read.fetch_add(size, Ordering::Relaxed);
            Ok::<_, FilesError>(small(data))
        })?
    } else {
        // Advice only; a filesystem that does not take it changes nothing.
        let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Sequential);
        large(file, size)?
    };
    unchanged_since(file, &before, path)?;
    Ok(result)
}

/// The file must still have the size and timestamps it had when it was
/// opened (any write changes ctime; growth changes the size).
fn unchanged_since(file: &File, before: &std::fs::Metadata, path: &Path) -> Result<(), FilesError> {
    let after = file.metadata().map_err(|e| FilesError::io("stat", path, e))?;
    let same = after.len() == before.len()
        && after.mtime() == before.mtime()
        && after.mtime_nsec() == before.mtime_nsec()
        && after.ctime() == before.ctime()
        && after.ctime_nsec() == before.ctime_nsec();
    if !same {
        return Err(FilesError::Changed { path: path.into() });
    }
    Ok(())
}

/// XXH3-128 of a file's content, little-endian: the quick whole-file digest
/// a sender asks the receiver about (PROBE) before it chunks anything.
pub type QuickDigest = [u8; 16];

/// XXH3-128 of `data`.
pub fn quick_digest(data: &[u8]) -> QuickDigest {
    twox_hash::XxHash3_128::oneshot(data).to_le_bytes()
}

/// Size and [`QuickDigest`] of one regular file, without cutting it into
/// chunks: what a sender needs to ask the receiver whether it already holds
/// the file. XXH3-128 rather than BLAKE3 because it costs a fraction of the
/// CPU and only decides whether a file the receiver itself wrote (and
/// checked with BLAKE3 then) may be left as it is. Read as [`chunk_file`]
/// reads (holes skipped), the next window while the current one is hashed.
/// A file that changes while read is [`FilesError::Changed`].
pub fn digest_file(path: impl AsRef<Path>, params: &ChunkParams) -> Result<(u64, QuickDigest), FilesError> {
    digest_file_metered(path.as_ref(), params, &AtomicU64::new(0))
}

/// [`digest_file`], adding the bytes it reads to `read`.
pub(super) fn digest_file_metered(
    path: &Path,
    params: &ChunkParams,
    read: &AtomicU64,
) -> Result<(u64, QuickDigest), FilesError> {
    let window = params.window();
    read_file(
        path,
        window,
        read,
        |data| (data.len() as u64, quick_digest(data)),
        |file, size| Ok((size, digest_large(file, path, size, window, read)?)),
    )
}

/// XXH3-128 of a file of `size` bytes larger than one window, reading the
/// next window while the current one is hashed; bytes read go to `read`.
fn digest_large(
    file: &File,
    path: &Path,
    size: u64,
    window: usize,
    read: &AtomicU64,
) -> Result<QuickDigest, FilesError> {
    let n = size.div_ceil(window as u64) as usize;
    let window_len = |k: usize| (size - k as u64 * window as u64).min(window as u64) as usize;
    let mut h = twox_hash::XxHash3_128::new();
    let (mut cur, mut next) = (vec![0u8; window], vec![0u8; window]);
    read_sparse_at(file, &mut cur[..window_len(0)], 0, path)?;
    for k in 0..n {
        let ((), read_next) = rayon::join(
            || h.write(&cur[..window_len(k)]),
            || match k + 1 < n {
                true => read_sparse_at(
                    file,
                    &mut next[..window_len(k + 1)],
                    (k as u64 + 1) * window as u64,
                    path,
                ),
                false => Ok(()),
            },
        );
        read_next?;
        read.fetch_add(window_len(k) as u64, Ordering::Relaxed);
        std::mem::swap(&mut cur, &mut next);
    }
    Ok(h.finish_128().to_le_bytes())
}

/// Fill `buf` from `offset`; a file that ends early has changed.
fn read_full_at(file: &File, mut buf: &mut [u8], mut offset: u64, path: &Path) -> Result<(), FilesError> {
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) => return Err(FilesError::Changed { path: path.into() }),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FilesError::io("read", path, e)),
        }
    }
    Ok(())
}

/// Fill `buf` from `offset`, reading only the data regions the filesystem
/// reports (`SEEK_DATA`/`SEEK_HOLE`) and zero-filling holes, so the holes of
/// a sparse file cost neither disk reads nor page cache. Where the
/// filesystem cannot tell, everything is read.
fn read_sparse_at(file: &File, buf: &mut [u8], offset: u64, path: &Path) -> Result<(), FilesError> {
    use rustix::fs::{seek, SeekFrom};
    // A file with every block allocated has no hole to skip, and asking
    // costs: on tmpfs SEEK_HOLE walks the page cache to the end of the
    // file, for every window (a quarter of the sender's CPU on 1 GiB).
    if rustix::fs::fstat(file).is_ok_and(|st| st.st_blocks.saturating_mul(512) >= st.st_size) {
        return read_full_at(file, buf, offset, path);
    }
    let end = offset + buf.len() as u64;
    let mut pos = offset;
    while pos < end {
        let data = match seek(file, SeekFrom::Data(pos)) {
            Ok(d) => d.clamp(pos, end),
            // No data after `pos`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => end,
            Err(_) => pos,
        };
        buf[(pos - offset) as usize..(data - offset) as usize].fill(0);
        if data == end {
            break;
        }
        let hole = match seek(file, SeekFrom::Hole(data)) {
            Ok(h) if h > data => h.min(end),
            _ => end,
        };
        read_full_at(
            file,
            &mut buf[(data - offset) as usize..(hole - offset) as usize],
            data,
            path,
        )?;
        pos = hole;
    }
    Ok(())
}

/// Multi-window chunking. This thread finds cut points, window after
/// window; meanwhile the next window is read by a rayon task (`join`), and
/// each finished window goes to a rayon task that hashes its chunks. Only
/// cut finding is sequential.
///
/// Buffer layout: the window's `wlen` bytes are read to `buf[max..]`; before
/// cutting, the carry (the bytes after the previous window's last cut, fewer
/// than `max`) is copied just in front, to `buf[max - carry..max]`. Cuts are
/// taken only while at least `max` bytes remain (or at end of file), so each
/// cut sees exactly what it would see in the whole file.
fn pipeline(
    file: &File,
    path: &Path,
    size: u64,
    params: &ChunkParams,
    window: usize,
    read: &AtomicU64,
    mut sink: Option<ChunkSink<'_>>,
) -> Result<Recipe, FilesError> {
    let cutter = Cutter::new(params);
    let max = cutter.max();
    let n = size.div_ceil(window as u64) as usize;
    let buf_len = max + window;
    let spare: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    let take_buf = || lock(&spare).pop().unwrap_or_else(|| vec![0u8; buf_len]);
    let window_len = |k: usize| (size - k as u64 * window as u64).min(window as u64) as usize;
    let read_window = |k: usize, mut buf: Vec<u8>| -> Result<Vec<u8>, FilesError> {
        let off = k as u64 * window as u64;
        read_sparse_at(file, &mut buf[max..max + window_len(k)], off, path)?;
        read.fetch_add(window_len(k) as u64, Ordering::Relaxed);
        Ok(buf)
    };
    let results = Mutex::new(Vec::with_capacity(n));
    // Incremented here before each spawn, decremented by the task after it
    // returned its buffer to `spare`; read by `wait_for_slot`.
    let in_flight = AtomicUsize::new(0);
    let mut carry: Vec<u8> = Vec::with_capacity(max);
    let mut carry_off = 0u64;
    // Windows hashed but not handed to `sink` yet, by number: hashing
    // finishes in any order, the sink sees file order.
    let unsent: Mutex<std::collections::BTreeMap<usize, Vec<ChunkRef>>> = Mutex::new(Default::default());
    let mut emitted = 0usize;
    let mut stopped = false;
    let mut emit_ready = |sink: &mut Option<ChunkSink<'_>>, stopped: &mut bool| {
        let Some(sink) = sink.as_mut() else { return };
        while !*stopped {
            let Some(chunks) = lock(&unsent).remove(&emitted) else {
                return;
            };
            *stopped = !sink(&chunks);
            emitted += 1;
        }
    };
    let streaming = sink.is_some();
    rayon::scope(|s| -> Result<(), FilesError> {
        let mut next = Some(read_window(0, take_buf())?);
        for k in 0..n {
            let Some(mut buf) = next.take() else {
                unreachable!("window {k} was read ahead");
            };
            let c = carry.len();
            buf[max - c..max].copy_from_slice(&carry);
            let (start, end) = (max - c, max + window_len(k));
            let last = k + 1 == n;
            let ahead = if last {
                None
            } else {
                wait_for_slot(&in_flight);
                Some(take_buf())
            };
            let (lens, read) = rayon::join(
                || cut_window(&cutter, &buf[start..end], last, window / params.avg() as usize),
                || ahead.map(|b| read_window(k + 1, b)),
            );
            next = read.transpose()?;
            let pos: usize = lens.iter().map(|&l| (l & !ZERO_FLAG) as usize).sum();
            carry.clear();
            carry.extend_from_slice(&buf[start + pos..end]);
            let base = carry_off;
            carry_off += pos as u64;
            in_flight.fetch_add(1, Ordering::AcqRel);
            let (spare, results, in_flight, unsent) = (&spare, &results, &in_flight, &unsent);
            let cutter = &cutter;
            s.spawn(move |_| {
                let chunks = hash_chunks(&buf[start..start + pos], base, &lens, cutter);
                if streaming {
                    lock(unsent).insert(k, chunks.clone());
                }
                lock(results).push(super::WindowResult { k, chunks });
                lock(spare).push(buf);
                in_flight.fetch_sub(1, Ordering::AcqRel);
            });
            emit_ready(&mut sink, &mut stopped);
            if stopped {
                return Err(FilesError::Stopped { path: path.into() });
            }
        }
        Ok(())
    })?;
    emit_ready(&mut sink, &mut stopped);
    debug_assert!(carry.is_empty() && carry_off == size);
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(assemble(size, results))
}

/// Chunk lengths (from [`Cutter::next`]) in `data`, stopping when fewer
/// than `max` bytes remain unless `last`.
fn cut_window(cutter: &Cutter, data: &[u8], last: bool, expect: usize) -> Vec<u32> {
    let mut lens = Vec::with_capacity(expect + 8);
    let mut pos = 0usize;
    loop {
        let rem = data.len() - pos;
        if rem == 0 || (!last && rem < cutter.max()) {
            return lens;
        }
        let l = cutter.next(&data[pos..]);
        lens.push(l);
        pos += (l & !ZERO_FLAG) as usize;
    }
}

/// Wait until fewer than `MAX_IN_FLIGHT` windows are pending, running pending
/// rayon work on this thread meanwhile (which also keeps a one-thread pool
/// from deadlocking).
fn wait_for_slot(in_flight: &AtomicUsize) {
    while in_flight.load(Ordering::Acquire) >= MAX_IN_FLIGHT {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {}
            _ => std::thread::sleep(Duration::from_micros(50)),
        }
    }
}
