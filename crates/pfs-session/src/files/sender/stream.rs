//! The streaming side of the sender core: where the stream of FILE and
//! CHUNKS frames is (the next entry, the next chunk of the entry being
//! sent, the file bytes described so far), the STREAMED file being cut
//! while it is sent, the entries given up on (FILE_DROP) and the progress
//! events the host reads.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use pfs_files::{ChunkRef, Recipe, RelPath};

use super::core::FilesSenderEvent;
use super::host::{FilesSource, Streamed, Unsendable};
use super::plan::Partial;
use super::{FilesItem, FilesProgress};

/// Progress events at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// Where the stream is: see the module doc.
#[derive(Debug)]
pub(super) struct Stream {
    /// Next entry to send.
    next_item: usize,
    /// The next chunk of the entry being sent (`None`: its FILE is not
    /// sent yet).
    next_chunk: Option<usize>,
    /// File bytes described so far, and where the current entry began.
    done_bytes: u64,
    item_base: u64,
    /// How the entry being sent changed since it was scanned: its chunks
    /// are checked against their hashes as they are read.
    pub(super) changed: Option<String>,
    /// Entries given up on (FILE_DROP).
    dropped: u64,
    /// Paths of the entries dropped: hard links to them are dropped too.
    dropped_paths: HashSet<RelPath>,
    /// The STREAMED file being sent, if any.
    pub(super) file: Option<StreamedFile>,
    /// When the stream began, and the last progress event.
    started: Instant,
    last_progress: Instant,
    events: VecDeque<FilesSenderEvent>,
}

/// The STREAMED file being sent: its chunks so far, how each travels, and
/// its recipe once it is cut to the end (or why it cannot be finished).
#[derive(Debug, Default)]
pub(super) struct StreamedFile {
    pub(super) chunks: Vec<ChunkRef>,
    pub(super) part: Partial,
    pub(super) done: Option<Recipe>,
    pub(super) failed: Option<Unsendable>,
}

impl StreamedFile {
    /// Asks `src` for more chunks once every chunk cut so far went out
    /// (`first` is the next to send): whether there is more to send now
    /// (chunks, or the end), or why the file cannot be finished.
    pub(super) fn cut_more<S: FilesSource + ?Sized>(
        &mut self,
        first: usize,
        src: &mut S,
    ) -> Result<bool, Unsendable> {
        if let Some(why) = self.failed.take() {
            return Err(why);
        }
        if first < self.chunks.len() || self.done.is_some() {
            return Ok(true);
        }
        match src.stream_next(&mut self.chunks) {
            Streamed::More => {}
            Streamed::Done(r) => self.done = Some(r),
            Streamed::Failed(why) => return Err(why),
        }
        Ok(first < self.chunks.len() || self.done.is_some())
    }

    /// Whether its chunks run past the `size` its FILE announced (more
    /// would be a protocol error).
    pub(super) fn ends_past(&self, size: u64) -> bool {
        self.chunks
            .last()
            .is_some_and(|c| c.offset + u64::from(c.len) > size)
    }

    /// A file that is sent STREAMED only to be dropped, for `why`
    /// (entries are numbered: it still needs its FILE).
    pub(super) fn failed(why: Unsendable) -> Self {
        Self {
            failed: Some(why),
            ..Self::default()
        }
    }
}

impl Stream {
    /// Nothing sent yet.
    pub(super) fn new(now: Instant) -> Self {
        Self {
            next_item: 0,
            next_chunk: None,
            done_bytes: 0,
            item_base: 0,
            changed: None,
            dropped: 0,
            dropped_paths: HashSet::new(),
            file: None,
            started: now,
            last_progress: now,
            events: VecDeque::new(),
        }
    }

    /// The stream begins at `now` (bytes are counted from here).
    pub(super) fn begin(&mut self, now: Instant) {
        self.started = now;
        self.last_progress = now;
    }

    /// The entry being sent, and its next chunk (`None`: its FILE next).
    pub(super) fn at(&self) -> (usize, Option<usize>) {
        (self.next_item, self.next_chunk)
    }

    /// The next frame of the entry being sent starts at chunk `next`.
    pub(super) fn next_chunk(&mut self, next: usize) {
        self.next_chunk = Some(next);
    }

    /// A CHUNKS frame described `work` more bytes of the entry.
    pub(super) fn described(&mut self, work: u64) {
        self.done_bytes += work;
    }

    /// Entries given up on (FILE_DROP).
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Whether `item` is a hard link to an entry that was dropped: it
    /// must not land on whatever is at its target's path.
    pub(super) fn is_orphan(&self, item: &FilesItem) -> bool {
        item.announced_size() > 0
            && item
                .hard_link
                .as_ref()
                .is_some_and(|t| self.dropped_paths.contains(t))
    }

    /// The entry being sent is done: its bytes all count as described.
    /// Returns a warning if it changed while sent but every chunk read
    /// still matched its plan.
    pub(super) fn end_item(&mut self, item: &FilesItem) -> Option<String> {
        let size = item.size_and_hash().map_or(0, |(n, _)| n);
        let warning = self.changed.take().map(|how| {
            format!(
                "{}: {how}; every chunk read still matched its plan: sent as scanned",
                pfs_files::escape_path(&item.entry.abs)
            )
        });
        self.done_bytes = self.item_base + size;
        self.item_base = self.done_bytes;
        self.next_item += 1;
        self.next_chunk = None;
        warning
    }

    /// The entry being sent, `item`, is given up on (FILE_DROP went out);
    /// returns its STREAMED state, if it was STREAMED.
    pub(super) fn drop_item(&mut self, item: &FilesItem) -> Option<StreamedFile> {
        self.dropped += 1;
        self.changed = None;
        self.dropped_paths.insert(item.entry.rel.clone());
        self.file.take()
    }

    /// A progress event, unless one went out less than [`PROGRESS_EVERY`]
    /// ago (`last`: always). `total` is entries and file bytes of the plan;
    /// `wire` the bytes written.
    pub(super) fn progress(&mut self, now: Instant, last: bool, total: (u64, u64), wire: u64) {
        if !last && now.saturating_duration_since(self.last_progress) < PROGRESS_EVERY {
            return;
        }
        self.last_progress = now;
        self.events.push_back(FilesSenderEvent::Progress(FilesProgress {
            entries: self.next_item as u64,
            total_entries: total.0,
            bytes: self.done_bytes,
            total_bytes: total.1,
            wire_bytes: wire,
            elapsed: now.saturating_duration_since(self.started),
        }));
    }

    /// The next event for the host.
    pub(super) fn poll_event(&mut self) -> Option<FilesSenderEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{file_item, recipe, MemFiles};
    use super::*;

    fn bytes_of(e: Option<FilesSenderEvent>) -> (u64, u64) {
        match e {
            Some(FilesSenderEvent::Progress(p)) => (p.entries, p.bytes),
            None => panic!("no event"),
        }
    }

    #[test]
    fn progress_counts_whole_entries_and_bytes_within_one_and_is_throttled() {
        let t0 = Instant::now();
        let mut s = Stream::new(t0);
        s.begin(t0);
        let mut item = file_item("a", 200);
        item.recipe = Some(recipe(&[[1; 32], [2; 32]]));
        s.progress(t0, true, (1, 200), 0);
        assert_eq!(bytes_of(s.poll_event()), (0, 0));
        s.described(100);
        s.progress(t0 + Duration::from_millis(10), false, (1, 200), 0);
        assert!(
            s.poll_event().is_none(),
            "at most one event per {PROGRESS_EVERY:?}"
        );
        s.progress(t0 + PROGRESS_EVERY, false, (1, 200), 0);
        assert_eq!(bytes_of(s.poll_event()), (0, 100));
        assert_eq!(s.end_item(&item), None);
        assert_eq!(s.at(), (1, None));
        s.progress(t0 + PROGRESS_EVERY, true, (1, 200), 0);
        assert_eq!(bytes_of(s.poll_event()), (1, 200));
    }

    #[test]
    fn a_dropped_entry_orphans_its_hard_links_and_settles_its_state() {
        let mut s = Stream::new(Instant::now());
        let target = file_item("t", 10);
        let mut link = file_item("l", 10);
        link.hard_link = Some(target.entry.rel.clone());
        assert!(!s.is_orphan(&link));
        s.changed = Some("modified".into());
        s.file = Some(StreamedFile::failed(Unsendable::Host("gone")));
        let st = s.drop_item(&target).expect("its STREAMED state");
        assert_eq!(st.failed.map(|w| w.to_string()).as_deref(), Some("gone"));
        assert!(s.changed.is_none() && s.file.is_none());
        assert_eq!(s.dropped(), 1);
        assert!(s.is_orphan(&link));
    }

    #[test]
    fn a_streamed_file_asks_for_more_only_when_all_was_sent() {
        let mut src = MemFiles::new(Vec::new());
        let mut st = StreamedFile {
            chunks: recipe(&[[1; 32], [2; 32]]).chunks,
            ..StreamedFile::default()
        };
        assert_eq!(
            st.cut_more(1, &mut src).ok(),
            Some(true),
            "chunk 1 is still to send"
        );
        assert!(!st.ends_past(200) && st.ends_past(199));
        // A source that cannot stream says why when asked.
        let why = st.cut_more(2, &mut src).expect_err("nothing streams");
        assert!(why.to_string().contains("no file is being streamed"), "{why}");
        st.failed = Some(Unsendable::Host("gone"));
        assert_eq!(
            st.cut_more(0, &mut src).map_err(|e| e.to_string()),
            Err("gone".to_string())
        );
        st.done = Some(recipe(&[[1; 32], [2; 32]]));
        assert_eq!(
            st.cut_more(2, &mut src).ok(),
            Some(true),
            "the end is there to send"
        );
    }

    #[test]
    fn a_change_that_still_matched_is_a_warning_at_the_end_of_the_entry() {
        let mut s = Stream::new(Instant::now());
        let mut item = file_item("a", 100);
        item.recipe = Some(recipe(&[[1; 32]]));
        s.changed = Some("it was modified since it was scanned".into());
        let w = s.end_item(&item).expect("a warning");
        assert!(w.contains("sent as scanned"), "{w}");
        assert!(s.changed.is_none());
    }
}
