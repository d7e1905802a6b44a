//! The sender core's host traits: what [`super::FilesSender`] asks of the
//! machine it runs on. [`FilesSource`] is the core's host (file bytes,
//! hashing and chunking, the index cache on disk); [`FilesPrepare`] is the
//! hashing and chunking [`super::local::LocalSource`] delegates to. Their
//! implementations on this machine's files are in [`super::local`].

use std::sync::Arc;
use std::time::Duration;

use pfs_files::{ChunkRef, Entry, IndexCache};

use super::local::{ChunkAhead, ChunkStream};
use super::FilesItem;
use crate::error::LocalError;

/// Host work the sender core needs done: the files themselves and the
/// index cache on disk.
pub trait FilesSource {
    /// Sets `digest` of `items[i]` for each `i` in `which`; returns the
    /// items that cannot be read, with the reason.
    fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// Sets `recipe` of `items[i]` for each `i` in `which`; as [`Self::digest`].
    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// The index cache of the store `store_id` (empty when none is kept),
    /// and a warning if it could not be read.
    fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>);
    /// Saves the index cache; a warning if it could not be saved.
    fn save_index(&mut self, cache: &IndexCache) -> Option<String>;
    /// Reads `buf.len()` bytes at `offset` of `item`'s file, straight into
    /// `buf` (a frame being built). `Some(how)` when the file changed since
    /// it was scanned (how, without its path): the core then checks every
    /// chunk it reads of that file against the planned hash. An error
    /// (unreadable, shorter than planned) fails this file only: the core
    /// sends FILE_DROP and goes on with the next entry.
    fn read(&mut self, item: &FilesItem, offset: u64, buf: &mut [u8]) -> Result<Option<String>, LocalError>;
    /// Starts chunking `which` of `items`, in that order, in the background
    /// while the session goes on; [`Self::chunk_one`] collects each file's
    /// recipe when its turn comes. False if this host cannot (the core then
    /// chunks them all before PLAN, with [`Self::chunk`]).
    fn chunk_ahead(&mut self, _items: &[FilesItem], _which: &[usize]) -> bool {
        false
    }
    /// Sets the recipe of `items[no]`, chunked in the background (waiting
    /// for it), or says why the file cannot be read.
    fn chunk_one(&mut self, items: &mut [FilesItem], no: usize) -> Result<(), String> {
        first_failure(&self.chunk(items, &[no]))
    }
    /// Starts cutting and hashing `item`'s file for a STREAMED send; false
    /// if this host cannot (the core then chunks the file whole first).
    fn stream_start(&mut self, _item: &FilesItem) -> bool {
        false
    }
    /// Appends to `out` the next chunks of the file [`Self::stream_start`]
    /// began, in file order, waiting until some are cut; or says that all
    /// were (with the recipe), or why the file cannot be finished.
    fn stream_next(&mut self, _out: &mut Vec<ChunkRef>) -> Streamed {
        Streamed::Failed("no file is being streamed".into())
    }
    /// The file [`Self::stream_start`] began is given up: stop cutting it.
    fn stream_stop(&mut self) {}
}

/// The reason the first of `failed` could not be read, if any.
pub(super) fn first_failure(failed: &Unreadable) -> Result<(), String> {
    match failed.first() {
        Some((_, e)) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// What [`FilesSource::stream_next`] got.
#[derive(Debug)]
pub enum Streamed {
    /// More chunks were appended.
    More,
    /// Every chunk was handed out: the file's recipe.
    Done(pfs_files::Recipe),
    /// The file cannot be finished (unreadable, or it changed while read).
    Failed(String),
}

/// Items that could not be read: their index and why. The error is shared
/// when one failure (a thread pool that would not start) fails a batch.
pub type Unreadable = Vec<(usize, Arc<pfs_files::FilesError>)>;

/// The reading a sender defers until it knows what the receiver holds:
/// whole-file hashes for the probe, then chunking of the files the receiver
/// lacks. Items that cannot be read are returned with the reason; the
/// session leaves them out.
pub trait FilesPrepare {
    /// Sets `digest` (size and XXH3-128) of `items[i]` for each `i` in `which`.
    fn hash(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// Sets `recipe` of `items[i]` for each `i` in `which`.
    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable;
    /// Starts cutting and hashing `entry`'s file on threads of its own for
    /// a STREAMED send (`None`: this preparer cannot).
    fn stream(&mut self, _entry: &Entry) -> Option<ChunkStream> {
        None
    }
    /// Starts chunking `entries` in order on threads of its own (`None`:
    /// this preparer cannot).
    fn chunk_ahead(&mut self, _entries: Vec<Entry>) -> Option<ChunkAhead> {
        None
    }
    /// A file chunked ahead was collected: `bytes` of it, after waiting
    /// `waited` for it (time the send was held up by chunking).
    fn note_chunked(&mut self, _bytes: u64, _waited: Duration) {}
}
