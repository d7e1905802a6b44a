//! The files receiver core without sockets: frames written by hand and
//! delivered in 1-byte pieces to a [`FilesReceiver`] over a [`LocalHost`]
//! (a store and a destination in a temporary directory). Well-formed
//! sessions land their files; hostile input ends the session with the
//! exact violation, or fails just the entry. Deterministic: time is passed
//! in, nothing sleeps.

mod common;
use common::{batch_of, literals_body as literals};

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pfs_files::{DestRoot, Landing};
use pfs_session::files::{
    ChunkIndex, FilesReceiver, FilesReceiverConfig, FilesReceiverEvent, FilesViolation, LocalHost,
};
use pfs_session::{LimitExceeded, SessionError, Timeout, Violation};
use pfs_store::{Durability, Store, StoreConfig};
use pfs_sys::Usage;
use pfs_wire::files::{
    batch_head, emit_entry_head, parse_chunks, tag, ChunksHeader, EntryKind, FileDone, FileDrop, FileEntry,
    FilesHello, FilesReport, Plan, FLAG_FILES_REPORT, FLAG_LAST,
};
use pfs_wire::{put_frame, ErrorCode, Frame, FrameHeader, FrameType, WireError, FRAME_HEADER_LEN};

struct Fixture {
    _tmp: tempfile::TempDir,
    store: Store,
    dest_dir: PathBuf,
    dest: DestRoot,
}

impl Fixture {
    fn new(capacity: u64) -> Self {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let dest_dir = tmp.path().join("dest");
        fs::create_dir(&dest_dir).expect("mkdir");
        let opts = StoreConfig {
            capacity,
            huge_dir: None,
            durability: Durability::None,
        };
        let store = Store::open(&tmp.path().join("store"), &opts).expect("open store");
        let dest = DestRoot::open(&dest_dir).expect("open destination");
        Self {
            _tmp: tmp,
            store,
            dest_dir,
            dest,
        }
    }

    fn receiver(&self) -> Rx<'_> {
        let cfg = FilesReceiverConfig {
            max_chunks_body: 1 << 20,
            ..FilesReceiverConfig::default()
        };
        let now = Instant::now();
        Rx {
            core: FilesReceiver::new(&cfg, now).expect("core"),
            host: LocalHost::new(
                ChunkIndex::Store(&self.store),
                Landing::new(&self.dest, None, false),
            ),
            buf: Vec::new(),
            sent: Vec::new(),
            now,
            cfg,
        }
    }
}

/// A receiver core, its host, and what it sent.
struct Rx<'s> {
    core: FilesReceiver,
    host: LocalHost<'s>,
    /// Bytes delivered and not yet consumed (the host's receive buffer).
    buf: Vec<u8>,
    sent: Vec<u8>,
    now: Instant,
    cfg: FilesReceiverConfig,
}

impl Rx<'_> {
    /// Delivers `bytes` one at a time, handing the buffer to the core after each.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        for &b in bytes {
            self.buf.push(b);
            let used = self.core.handle_input(self.now, &self.buf, &mut self.host)?;
            self.buf.drain(..used);
            while let Some(e) = self.core.poll_event() {
                if e == FilesReceiverEvent::Finished {
                    self.core.report(self.now, Usage::default());
                }
            }
            if let Some(out) = self.core.poll_transmit() {
                self.sent.extend_from_slice(out);
                self.core.transmitted();
            }
        }
        Ok(())
    }

    fn send(&mut self, ty: FrameType, flags: u16, body: &[u8]) -> Result<(), SessionError> {
        let mut f = Vec::new();
        put_frame(&mut f, ty, flags, body);
        self.feed(&f)
    }

    /// Frames the core sent since the last call.
    fn frames(&mut self) -> Vec<(FrameType, u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = &self.sent[..];
        while !rest.is_empty() {
            let (f, used) = Frame::parse(rest).expect("the core sends whole frames");
            out.push((f.header.frame_type, f.header.flags, f.body.to_vec()));
            rest = &rest[used..];
        }
        self.sent.clear();
        out
    }

    fn hello(&mut self, flags: u8, remote_dir: &[u8]) -> Result<(), SessionError> {
        let mut body = Vec::new();
        FilesHello {
            flags,
            auth_method: 0,
            chunk_avg: 32 << 10,
            session_nonce: 7,
            remote_dir,
            auth: &[],
        }
        .emit(&mut body);
        self.send(FrameType::FilesHello, 0, &body)
    }

    /// FILES_HELLO, INDEX_REQUEST, PLAN: the core answers each.
    fn handshake(&mut self, literal: u64) {
        self.hello(0, b"").expect("FILES_HELLO");
        self.send(FrameType::IndexRequest, 0, &0u64.to_le_bytes())
            .expect("INDEX_REQUEST");
        let plan = Plan {
            entries: 1,
            files: 1,
            total_bytes: literal,
            literal_bytes: literal,
            chunks: 1,
            pending_bytes: 0,
        };
        self.send(FrameType::Plan, 0, &plan.emit()).expect("PLAN");
        let types: Vec<FrameType> = self.frames().into_iter().map(|f| f.0).collect();
        assert_eq!(types.first(), Some(&FrameType::FilesAccept));
        assert_eq!(types.last(), Some(&FrameType::Ack));
        assert!(
            types[1..types.len() - 1].iter().all(|t| *t == FrameType::Batch),
            "{types:?}"
        );
    }

    /// FILES_END; the core's report.
    fn end(&mut self) -> (FilesReport<'static>, String) {
        self.send(FrameType::FilesEnd, 0, &[]).expect("FILES_END");
        report(self.frames())
    }
}

fn report(frames: Vec<(FrameType, u16, Vec<u8>)>) -> (FilesReport<'static>, String) {
    let (ty, flags, body) = frames.last().expect("a report").clone();
    assert_eq!((ty, flags), (FrameType::FilesEnd, FLAG_FILES_REPORT));
    let r = FilesReport::parse(&body).expect("report");
    (FilesReport { messages: "", ..r }, r.messages.to_string())
}

fn file_body(no: u64, kind: EntryKind, path: &[u8], size: u64, chunks: u32, hash: [u8; 32]) -> Vec<u8> {
    let mut body = Vec::new();
    FileEntry {
        file_no: no,
        kind,
        mode: 0o640,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        size,
        chunk_count: chunks,
        file_hash: hash,
        path,
        link_target: &[],
        held: false,
        extra: pfs_wire::files::FileExtra::default(),
    }
    .emit(&mut body);
    body
}

/// FILE of one chunk holding `data`.
fn file_of(no: u64, path: &[u8], data: &[u8]) -> Vec<u8> {
    let chunks = u32::from(!data.is_empty());
    file_body(
        no,
        EntryKind::File,
        path,
        data.len() as u64,
        chunks,
        *blake3::hash(data).as_bytes(),
    )
}

fn chunks_head(no: u64, count: u32) -> Vec<u8> {
    ChunksHeader { file_no: no, count }.emit().to_vec()
}

/// CHUNKS of one descriptor into the store.
fn reference(no: u64, hash: &[u8; 32], offset: u64, len: u32) -> Vec<u8> {
    let mut body = chunks_head(no, 1);
    emit_entry_head(&mut body, tag::REF, hash, len);
    body.extend_from_slice(&offset.to_le_bytes());
    body
}

/// A FILE_DROP body.
fn drop_body(no: u64, reason: &str) -> Vec<u8> {
    let mut body = Vec::new();
    FileDrop { file_no: no, reason }.emit(&mut body);
    body
}

/// FILE of a STREAMED file of `size` bytes (count and hash come later).
fn streamed_of(no: u64, path: &[u8], size: u64) -> Vec<u8> {
    let mut body = Vec::new();
    FileEntry {
        file_no: no,
        kind: EntryKind::File,
        mode: 0o640,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        size,
        chunk_count: 0,
        file_hash: [0; 32],
        path,
        link_target: &[],
        held: false,
        extra: pfs_wire::files::FileExtra {
            streamed: true,
            ..Default::default()
        },
    }
    .emit(&mut body);
    body
}

/// The file hash of a file made of the chunks `parts`.
fn list_hash(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = pfs_files::FileHasher::new();
    for p in parts {
        h.add(p.len() as u32, blake3::hash(p).as_bytes());
    }
    h.finish()
}

/// A FILE_DONE body.
fn done_body(no: u64, chunks: u32, file_hash: [u8; 32]) -> Vec<u8> {
    FileDone {
        file_no: no,
        chunk_count: chunks,
        file_hash,
    }
    .emit()
    .to_vec()
}

/// A frame header alone, announcing `length` body bytes.
fn header(frame_type: FrameType, length: u32) -> Vec<u8> {
    FrameHeader {
        frame_type,
        flags: 0,
        length,
    }
    .emit()
    .to_vec()
}

fn violation(r: Result<(), SessionError>) -> FilesViolation {
    match r {
        Err(SessionError::Violation(Violation::Files(v))) => v,
        other => panic!("expected a files violation, got {other:?}"),
    }
}

#[test]
fn a_session_in_one_byte_pieces_lands_its_files() {
    let fx = Fixture::new(64 << 20);
    let a = vec![7u8; 5000];
    let (b1, b2) = (b"first half, ".as_slice(), b"second half".as_slice());
    let b = [b1, b2].concat();
    let mut rx = fx.receiver();
    rx.handshake((a.len() + b.len()) as u64);
    rx.send(
        FrameType::File,
        0,
        &file_body(0, EntryKind::Dir, b"d", 0, 0, [0; 32]),
    )
    .expect("dir");
    rx.send(FrameType::File, 0, &file_of(1, b"d/a", &a))
        .expect("FILE a");
    rx.send(FrameType::Chunks, 0, &literals(1, &[(&a, &a)]))
        .expect("CHUNKS a");
    // Two chunks of one file inside a BATCH, with a file that needs no chunks.
    let mut inner = Vec::new();
    let two = file_body(2, EntryKind::File, b"b", b.len() as u64, 2, list_hash(&[b1, b2]));
    put_frame(&mut inner, FrameType::File, 0, &two);
    put_frame(
        &mut inner,
        FrameType::Chunks,
        0,
        &literals(2, &[(b1, b1), (b2, b2)]),
    );
    put_frame(&mut inner, FrameType::File, 0, &file_of(3, b"empty", b""));
    rx.send(FrameType::Batch, 0, &batch_of(&inner)).expect("BATCH");
    let (r, messages) = rx.end();
    assert_eq!(messages, "");
    assert_eq!((r.files_written, r.dirs, r.files_failed), (3, 1, 0));
    assert_eq!(r.literal_bytes, (a.len() + b.len()) as u64);
    assert!(rx.core.is_done());
    assert_eq!(fs::read(fx.dest_dir.join("d/a")).expect("a"), a);
    assert_eq!(fs::read(fx.dest_dir.join("b")).expect("b"), b);
    assert_eq!(fs::read(fx.dest_dir.join("empty")).expect("empty"), b"");
    let outcome = rx.core.outcome();
    assert!(!outcome.dry_run);
    drop(rx);

    // The next session refers to the stored chunk instead of sending it.
    let hash = *blake3::hash(&a).as_bytes();
    let loc = fx.store.lookup(&hash).expect("the chunk was committed");
    let mut rx = fx.receiver();
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_of(0, b"copy", &a))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &reference(0, &hash, loc.offset, loc.len))
        .expect("REF");
    let (r, _) = rx.end();
    assert_eq!(
        (r.files_written, r.matched_bytes, r.literal_bytes),
        (1, a.len() as u64, 0)
    );
    assert_eq!(fs::read(fx.dest_dir.join("copy")).expect("copy"), a);
}

#[test]
fn a_damaged_chunk_is_naked_and_repaired() {
    let fx = Fixture::new(64 << 20);
    let good = vec![1u8; 4096];
    let other = vec![2u8; 4096];
    let mut rx = fx.receiver();
    rx.handshake(other.len() as u64);
    rx.send(FrameType::File, 0, &file_of(0, b"other", &other))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(0, &[(&other, &other)]))
        .expect("CHUNKS");
    rx.end();
    let loc = fx.store.lookup(blake3::hash(&other).as_bytes()).expect("stored");
    // A descriptor whose bytes do not hash to the entry's hash: a hole, NAKed.
    let hash = *blake3::hash(&good).as_bytes();
    let mut rx = fx.receiver();
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_of(0, b"good", &good))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &reference(0, &hash, loc.offset, loc.len))
        .expect("REF");
    rx.send(FrameType::FilesEnd, 0, &[]).expect("FILES_END");
    let frames = rx.frames();
    assert_eq!(frames.len(), 1);
    assert_eq!((frames[0].0, frames[0].1), (FrameType::Nak, FLAG_LAST));
    assert_eq!(frames[0].2, hash);
    let mut repair = chunks_head(ChunksHeader::REPAIR, 1);
    emit_entry_head(&mut repair, tag::LITERAL, &hash, good.len() as u32);
    repair.extend_from_slice(&good);
    assert!(parse_chunks(&repair).is_ok());
    rx.send(FrameType::Repair, FLAG_LAST, &repair).expect("REPAIR");
    let (r, messages) = report(rx.frames());
    assert_eq!(
        (r.files_written, r.nak_chunks, r.repaired_bytes),
        (1, 1, good.len() as u64),
        "{messages}"
    );
    assert_eq!(fs::read(fx.dest_dir.join("good")).expect("good"), good);

    // A REPAIR of a chunk nobody NAKed ends the session.
    let mut rx = fx.receiver();
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_of(0, b"again", &good))
        .expect("FILE");
    let wrong = *blake3::hash(b"not the chunk").as_bytes();
    rx.send(FrameType::Chunks, 0, &reference(0, &wrong, loc.offset, loc.len))
        .expect("REF");
    rx.send(FrameType::FilesEnd, 0, &[]).expect("FILES_END");
    assert_eq!(rx.frames()[0].0, FrameType::Nak);
    let mut repair = chunks_head(ChunksHeader::REPAIR, 1);
    emit_entry_head(&mut repair, tag::LITERAL, &hash, good.len() as u32);
    repair.extend_from_slice(&good);
    let v = violation(rx.send(FrameType::Repair, FLAG_LAST, &repair));
    assert_eq!(v, FilesViolation::RepairNotNaked);
    assert_eq!(v.code(), ErrorCode::Protocol);
    assert!(!fx.dest_dir.join("again").exists());
}

#[test]
fn entries_that_cannot_be_placed_fail_alone() {
    let fx = Fixture::new(64 << 20);
    let data = b"some bytes".as_slice();
    let mut rx = fx.receiver();
    rx.handshake(3 * data.len() as u64);
    // Paths out of the destination.
    rx.send(FrameType::File, 0, &file_of(0, b"../evil", data))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(0, &[(data, data)]))
        .expect("CHUNKS");
    rx.send(FrameType::File, 0, &file_of(1, b"/etc/evil", data))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(1, &[(data, data)]))
        .expect("CHUNKS");
    // A chunk whose bytes do not match its hash.
    rx.send(FrameType::File, 0, &file_of(2, b"lying", data))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(2, &[(b"other bytes", data)]))
        .expect("CHUNKS");
    rx.send(FrameType::File, 0, &file_of(3, b"fine", data))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(3, &[(data, data)]))
        .expect("CHUNKS");
    let (r, messages) = rx.end();
    assert_eq!((r.files_written, r.files_failed), (1, 3), "{messages}");
    assert!(messages.contains("../evil: refused"), "{messages}");
    assert!(
        messages.contains("/etc/evil: refused: absolute path"),
        "{messages}"
    );
    assert!(
        messages.contains("lying: a literal chunk does not match its hash"),
        "{messages}"
    );
    assert!(!fx.dest_dir.join("lying").exists());
    assert_eq!(fs::read(fx.dest_dir.join("fine")).expect("fine"), data);
    let mut names: Vec<_> = fs::read_dir(&fx.dest_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(names, [".pfs", "fine"]);
    let temps = fs::read_dir(fx.dest_dir.join(pfs_files::dest::TEMP_DIR))
        .expect("list temps")
        .count();
    assert_eq!(temps, 0, "no temporary file is left");
}

#[test]
fn a_file_the_sender_drops_fails_alone() {
    let fx = Fixture::new(64 << 20);
    let (a, b) = (vec![1u8; 3000], vec![2u8; 2000]);
    let two = [a.clone(), b.clone()].concat();
    let mut rx = fx.receiver();
    rx.handshake(3 * two.len() as u64);
    // Dropped after one of its two chunks arrived (the temporary file holds it).
    let mut f = file_of(0, b"half", &two);
    f[20..24].copy_from_slice(&2u32.to_le_bytes());
    rx.send(FrameType::File, 0, &f).expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(0, &[(&a, &a)]))
        .expect("CHUNKS");
    rx.send(FrameType::FileDrop, 0, &drop_body(0, "it shrank"))
        .expect("FILE_DROP");
    // Dropped inside a BATCH, right after its FILE.
    let mut frames = Vec::new();
    put_frame(&mut frames, FrameType::File, 0, &file_of(1, b"none", &b));
    put_frame(&mut frames, FrameType::FileDrop, 0, &drop_body(1, "unreadable"));
    put_frame(&mut frames, FrameType::File, 0, &file_of(2, b"fine", &b));
    put_frame(&mut frames, FrameType::Chunks, 0, &literals(2, &[(&b, &b)]));
    rx.send(FrameType::Batch, 0, &batch_of(&frames)).expect("BATCH");
    // A file that failed here already is counted once when dropped.
    rx.send(FrameType::File, 0, &file_of(3, b"../evil", &b))
        .expect("FILE");
    rx.send(FrameType::FileDrop, 0, &drop_body(3, "changed"))
        .expect("FILE_DROP");
    let (r, messages) = rx.end();
    assert_eq!((r.files_written, r.files_failed), (1, 3), "{messages}");
    assert!(
        messages.contains("half: the sender dropped it: it shrank"),
        "{messages}"
    );
    assert!(
        messages.contains("none: the sender dropped it: unreadable"),
        "{messages}"
    );
    assert!(messages.contains("../evil: refused"), "{messages}");
    assert_eq!(fs::read(fx.dest_dir.join("fine")).expect("fine"), b);
    let mut names: Vec<_> = fs::read_dir(&fx.dest_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(names, [".pfs", "fine"]);
    let temps = fs::read_dir(fx.dest_dir.join(pfs_files::dest::TEMP_DIR))
        .expect("list temps")
        .count();
    assert_eq!(temps, 0, "no temporary file is left");
}

#[test]
fn streamed_files_land_when_their_file_done_matches() {
    let fx = Fixture::new(64 << 20);
    let (a, b) = (vec![1u8; 3000], vec![2u8; 2000]);
    let two = [a.clone(), b.clone()].concat();
    let mut rx = fx.receiver();
    rx.handshake(4 * two.len() as u64);
    // Two frames of chunks, then FILE_DONE.
    rx.send(FrameType::File, 0, &streamed_of(0, b"two", two.len() as u64))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(0, &[(&a, &a)]))
        .expect("CHUNKS a");
    rx.send(FrameType::Chunks, 0, &literals(0, &[(&b, &b)]))
        .expect("CHUNKS b");
    rx.send(FrameType::FileDone, 0, &done_body(0, 2, list_hash(&[&a, &b])))
        .expect("FILE_DONE");
    // Inside a BATCH, with a FILE_DONE whose hash is not the content's.
    let mut frames = Vec::new();
    put_frame(
        &mut frames,
        FrameType::File,
        0,
        &streamed_of(1, b"lying", b.len() as u64),
    );
    put_frame(&mut frames, FrameType::Chunks, 0, &literals(1, &[(&b, &b)]));
    put_frame(
        &mut frames,
        FrameType::FileDone,
        0,
        &done_body(1, 1, list_hash(&[&a])),
    );
    put_frame(
        &mut frames,
        FrameType::File,
        0,
        &streamed_of(2, b"batched", b.len() as u64),
    );
    put_frame(&mut frames, FrameType::Chunks, 0, &literals(2, &[(&b, &b)]));
    put_frame(
        &mut frames,
        FrameType::FileDone,
        0,
        &done_body(2, 1, list_hash(&[&b])),
    );
    rx.send(FrameType::Batch, 0, &batch_of(&frames)).expect("BATCH");
    // Dropped by the sender before FILE_DONE.
    rx.send(FrameType::File, 0, &streamed_of(3, b"dropped", two.len() as u64))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals(3, &[(&a, &a)]))
        .expect("CHUNKS");
    rx.send(FrameType::FileDrop, 0, &drop_body(3, "it changed while read"))
        .expect("FILE_DROP");
    let (r, messages) = rx.end();
    assert_eq!((r.files_written, r.files_failed), (2, 2), "{messages}");
    assert_eq!(fs::read(fx.dest_dir.join("two")).expect("two"), two);
    assert_eq!(fs::read(fx.dest_dir.join("batched")).expect("batched"), b);
    assert!(messages.contains("lying: "), "{messages}");
    assert!(
        messages.contains("dropped: the sender dropped it: it changed while read"),
        "{messages}"
    );
    assert!(!fx.dest_dir.join("lying").exists() && !fx.dest_dir.join("dropped").exists());
    let temps = fs::read_dir(fx.dest_dir.join(pfs_files::dest::TEMP_DIR))
        .expect("list temps")
        .count();
    assert_eq!(temps, 0, "no temporary file is left");
}

#[test]
fn streamed_files_that_break_the_rules_end_the_session() {
    let fx = Fixture::new(64 << 20);
    let data = vec![9u8; 300];
    type Script = fn(&mut Rx<'_>, &[u8]) -> Result<(), SessionError>;
    let cases: [(&str, Script, FilesViolation); 5] = [
        (
            "FILE_DONE of a file not streamed",
            |rx, d| {
                rx.handshake(0);
                let mut f = file_of(0, b"f", d);
                // Two announced chunks: the file stays open after one.
                f[20..24].copy_from_slice(&2u32.to_le_bytes());
                rx.send(FrameType::File, 0, &f)?;
                rx.send(FrameType::FileDone, 0, &done_body(0, 1, list_hash(&[d])))
            },
            FilesViolation::DoneNotStreaming {
                got: 0,
                open: Some(0),
            },
        ),
        (
            "FILE_DONE before the file's size",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &streamed_of(0, b"f", 600))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))?;
                rx.send(FrameType::FileDone, 0, &done_body(0, 1, list_hash(&[d])))
            },
            FilesViolation::DoneMismatch {
                file: 0,
                said: 1,
                got: 1,
                seen: 300,
                size: 600,
            },
        ),
        (
            "FILE_DONE with another count",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &streamed_of(0, b"f", 300))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))?;
                rx.send(FrameType::FileDone, 0, &done_body(0, 2, list_hash(&[d])))
            },
            FilesViolation::DoneMismatch {
                file: 0,
                said: 2,
                got: 1,
                seen: 300,
                size: 300,
            },
        ),
        (
            "streamed file ended by FILES_END",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &streamed_of(0, b"f", 300))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))?;
                rx.send(FrameType::FilesEnd, 0, &[])
            },
            FilesViolation::DoneMissing { file: 0 },
        ),
        (
            "streamed file ended by the next FILE",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &streamed_of(0, b"f", 300))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))?;
                rx.send(FrameType::File, 0, &file_of(1, b"g", d))
            },
            FilesViolation::DoneMissing { file: 0 },
        ),
    ];
    for (what, script, want) in cases {
        let mut rx = fx.receiver();
        let v = violation(script(&mut rx, &data));
        assert_eq!(v, want, "{what}");
        assert_eq!(v.code(), ErrorCode::Protocol, "{what}: {v}");
        assert!(!fx.dest_dir.join("f").exists(), "{what}");
    }
}

#[test]
fn hostile_frames_end_the_session_with_their_violation() {
    let fx = Fixture::new(64 << 20);
    let data = vec![9u8; 300];
    type Script = fn(&mut Rx<'_>, &[u8]) -> Result<(), SessionError>;
    let cases: [(&str, Script, FilesViolation, ErrorCode); 14] = [
        (
            "blob HELLO",
            |rx, _| rx.send(FrameType::Hello, 0, &[0; 16]),
            FilesViolation::Unexpected {
                expected: "FILES_HELLO",
                got: FrameType::Hello,
            },
            ErrorCode::Protocol,
        ),
        (
            "remote dir escaping",
            |rx, _| rx.hello(0, b"../up"),
            FilesViolation::RemoteDir {
                dir: "../up".into(),
                error: pfs_files::PathError::DotComponent,
            },
            ErrorCode::Protocol,
        ),
        (
            "PLAN in a dry run",
            |rx, _| {
                rx.hello(pfs_wire::files::HELLO_DRY_RUN, b"")?;
                rx.send(FrameType::IndexRequest, 0, &0u64.to_le_bytes())?;
                let plan = Plan {
                    entries: 0,
                    files: 0,
                    total_bytes: 0,
                    literal_bytes: 0,
                    chunks: 0,
                    pending_bytes: 0,
                };
                rx.send(FrameType::Plan, 0, &plan.emit())
            },
            FilesViolation::PlanInDryRun,
            ErrorCode::Protocol,
        ),
        (
            "CHUNKS without FILE",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))
            },
            FilesViolation::ChunksWithoutFile,
            ErrorCode::Protocol,
        ),
        (
            "CHUNKS for another file",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                rx.send(FrameType::Chunks, 0, &literals(5, &[(d, d)]))
            },
            FilesViolation::ChunksForOtherFile { got: 5, open: 0 },
            ErrorCode::Protocol,
        ),
        (
            "FILE out of order",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(3, b"f", d))
            },
            FilesViolation::FileOrder { got: 3, expected: 0 },
            ErrorCode::Protocol,
        ),
        (
            "more bytes than announced",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", &d[..10]))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, d)]))
            },
            FilesViolation::FileOverflow { file: 0 },
            ErrorCode::Protocol,
        ),
        (
            "FILE_DROP with no file streaming",
            |rx, _| {
                rx.handshake(0);
                rx.send(FrameType::FileDrop, 0, &drop_body(0, "gone"))
            },
            FilesViolation::DropNotStreaming { got: 0, open: None },
            ErrorCode::Protocol,
        ),
        (
            "FILE_DROP of another file",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                rx.send(FrameType::FileDrop, 0, &drop_body(1, "gone"))
            },
            FilesViolation::DropNotStreaming {
                got: 1,
                open: Some(0),
            },
            ErrorCode::Protocol,
        ),
        (
            "file cut short by FILES_END",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                rx.send(FrameType::FilesEnd, 0, &[])
            },
            FilesViolation::FileShort {
                file: 0,
                seen: 0,
                size: 300,
                missing: 1,
            },
            ErrorCode::Protocol,
        ),
        (
            "empty chunk",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                rx.send(FrameType::Chunks, 0, &literals(0, &[(d, b"")]))
            },
            FilesViolation::ChunkLength { len: 0 },
            ErrorCode::Limit,
        ),
        (
            "descriptor beyond the store",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                rx.send(
                    FrameType::Chunks,
                    0,
                    &reference(0, blake3::hash(d).as_bytes(), 1 << 40, 300),
                )
            },
            FilesViolation::OutsideStore {
                offset: 1 << 40,
                len: 300,
            },
            ErrorCode::OutOfBounds,
        ),
        (
            "zstd chunk that does not decompress",
            |rx, d| {
                rx.handshake(0);
                rx.send(FrameType::File, 0, &file_of(0, b"f", d))?;
                let mut body = chunks_head(0, 1);
                emit_entry_head(&mut body, tag::ZSTD, blake3::hash(d).as_bytes(), 300);
                body.extend_from_slice(&4u32.to_le_bytes());
                body.extend_from_slice(b"junk");
                rx.send(FrameType::Chunks, 0, &body)
            },
            FilesViolation::ChunkZstd,
            ErrorCode::BadFrame,
        ),
        (
            "BATCH that lies about its length",
            |rx, d| {
                rx.handshake(0);
                let mut inner = Vec::new();
                put_frame(&mut inner, FrameType::File, 0, &file_of(0, b"f", d));
                let mut body = batch_head(inner.len() as u32 + 10).to_vec();
                body.extend(zstd::bulk::compress(&inner, 1).expect("zstd"));
                rx.send(FrameType::Batch, 0, &body)
            },
            FilesViolation::BatchLength,
            ErrorCode::BadFrame,
        ),
    ];
    for (what, script, want, code) in cases {
        let mut rx = fx.receiver();
        let v = violation(script(&mut rx, &data));
        assert_eq!(v, want, "{what}");
        assert_eq!(v.code(), code, "{what}: {v}");
        assert!(!fx.dest_dir.join("f").exists(), "{what}");
    }
    // The HELLO hint names the right command.
    let v = FilesViolation::Unexpected {
        expected: "FILES_HELLO",
        got: FrameType::Hello,
    };
    assert!(v.to_string().contains("pfs send"), "{v}");
}

#[test]
fn garbage_and_oversize_frames_are_refused_from_their_header() {
    let fx = Fixture::new(64 << 20);
    let mut rx = fx.receiver();
    match rx.feed(b"GET / HTTP/1.1\r\n") {
        Err(
            e @ SessionError::Malformed {
                context: "frame header",
                ..
            },
        ) => assert_eq!(e.code(), ErrorCode::BadFrame),
        other => panic!("garbage: {other:?}"),
    }
    // A CHUNKS frame over the limit is refused after its 8-byte header,
    // before any of its body is awaited.
    let mut rx = fx.receiver();
    rx.handshake(0);
    let limit = rx.cfg.max_chunks_body;
    let frame = header(FrameType::Chunks, limit + 1);
    assert_eq!(frame.len(), FRAME_HEADER_LEN);
    let v = violation(rx.feed(&frame));
    assert_eq!(
        v,
        FilesViolation::FrameTooLarge {
            frame: FrameType::Chunks,
            len: limit + 1,
            limit,
        }
    );
    assert_eq!(v.code(), ErrorCode::Limit);
    // A control frame over the control limit (the wire's header check).
    let mut rx = fx.receiver();
    let over = pfs_wire::frame::MAX_CONTROL_BODY + 1;
    match rx.feed(&header(FrameType::FilesHello, over)) {
        Err(e @ SessionError::Malformed { .. }) => assert_eq!(e.code(), ErrorCode::Limit),
        other => panic!("huge frame: {other:?}"),
    }
    // A FILE body that lies about its path length.
    let mut rx = fx.receiver();
    rx.handshake(0);
    let mut body = file_of(0, b"f", b"x");
    body[2] = 200;
    match rx.send(FrameType::File, 0, &body) {
        Err(SessionError::Malformed {
            context: "FILE",
            error,
        }) => assert_ne!(error, WireError::TooLarge),
        other => panic!("lying FILE: {other:?}"),
    }
}

#[test]
fn a_full_store_refuses_the_plan() {
    let fx = Fixture::new(1 << 20);
    let mut rx = fx.receiver();
    rx.hello(0, b"").expect("FILES_HELLO");
    rx.send(FrameType::IndexRequest, 0, &0u64.to_le_bytes())
        .expect("INDEX_REQUEST");
    let plan = Plan {
        entries: 1,
        files: 1,
        total_bytes: 1 << 30,
        literal_bytes: 1 << 30,
        chunks: 1,
        pending_bytes: 0,
    };
    match rx.send(FrameType::Plan, 0, &plan.emit()) {
        Err(e @ SessionError::Limit(LimitExceeded::StoreFull { need, .. })) => {
            assert_eq!(need, 1 << 30);
            assert_eq!(e.code(), ErrorCode::Limit);
            assert!(e.to_string().contains("receiver full"), "{e}");
        }
        other => panic!("expected store full, got {other:?}"),
    }
    // Bytes of files not chunked yet refuse nothing (they may be held
    // already): they get what room there is reserved.
    let mut rx = fx.receiver();
    rx.hello(0, b"").expect("FILES_HELLO");
    rx.send(FrameType::IndexRequest, 0, &0u64.to_le_bytes())
        .expect("INDEX_REQUEST");
    let plan = Plan {
        literal_bytes: 1000,
        pending_bytes: 1 << 30,
        ..plan
    };
    rx.send(FrameType::Plan, 0, &plan.emit()).expect("PLAN accepted");
    let (ty, _, body) = rx.frames().pop().expect("an answer");
    assert_eq!(ty, FrameType::Ack);
    let ack = pfs_wire::files::PlanAck::parse(&body).expect("ACK");
    assert!(ack.reserved >= 1000 && ack.reserved < 1 << 20, "{ack:?}");
}

#[test]
fn deadlines_and_closes() {
    let fx = Fixture::new(64 << 20);
    // Silence before FILES_HELLO: the handshake deadline, from `now` passed in.
    let mut rx = fx.receiver();
    let deadline = rx.core.poll_timeout().expect("a deadline");
    assert_eq!(deadline, rx.now + rx.cfg.handshake_timeout);
    rx.core
        .handle_timeout(deadline - Duration::from_millis(1))
        .expect("not yet");
    match rx.core.handle_timeout(deadline) {
        Err(SessionError::TimedOut {
            what: Timeout::Idle { during, after },
        }) => assert_eq!((during, after), ("FILES_HELLO", rx.cfg.handshake_timeout)),
        other => panic!("expected the handshake deadline, got {other:?}"),
    }
    // While files stream, the idle deadline counts from the last whole
    // frame: a byte of the next one does not move it (a peer trickling
    // bytes cannot hold the session).
    let mut rx = fx.receiver();
    rx.handshake(0);
    let before = rx.core.poll_timeout().expect("a deadline");
    rx.now += Duration::from_secs(1000);
    rx.feed(&[0]).expect("one byte of a header");
    assert_eq!(rx.core.poll_timeout(), Some(before));
    assert!(matches!(
        rx.core.handle_timeout(rx.now),
        Err(SessionError::TimedOut { .. })
    ));
    // A sender may stop after the index (a dry run) …
    let mut rx = fx.receiver();
    rx.hello(pfs_wire::files::HELLO_DRY_RUN, b"")
        .expect("FILES_HELLO");
    rx.send(FrameType::IndexRequest, 0, &0u64.to_le_bytes())
        .expect("INDEX_REQUEST");
    rx.core.handle_close(rx.now, false).expect("a dry run ends");
    assert!(rx.core.is_done() && rx.core.outcome().dry_run);
    // … but not in the middle of a frame, nor of the file stream.
    let mut rx = fx.receiver();
    rx.handshake(0);
    match rx.core.handle_close(rx.now, false) {
        Err(SessionError::PeerClosed {
            during: "file stream",
        }) => {}
        other => panic!("expected peer closed, got {other:?}"),
    }
    let mut rx = fx.receiver();
    rx.hello(0, b"").expect("FILES_HELLO");
    assert!(matches!(
        rx.core.handle_close(rx.now, true),
        Err(SessionError::PeerClosed { .. })
    ));
}

// ---------------------------------------------------------------------------
// The sender core and the receiver core wired to each other in one thread.

mod pair {
    use std::collections::HashMap;
    use std::fs;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    use pfs_files::{Entry, IndexCache, RelPath, WalkKind};
    use pfs_session::files::{
        FilesItem, FilesProgress, FilesReceiver, FilesReceiverConfig, FilesReceiverEvent,
        FilesReceiverOutcome, FilesSender, FilesSenderConfig, FilesSenderEvent, FilesSource, LocalHost,
        Unreadable,
    };
    use pfs_session::LocalError;

    use pfs_sys::Usage;

    use super::common::MemSource;
    use super::Fixture;

    /// Bytes that repeat in places (chunks seen twice) and vary elsewhere.
    fn content(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let block: Vec<u8> = (0..len / 4)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) as u8
            })
            .collect();
        let mut out = block.clone();
        out.extend(vec![0x55; len / 4]);
        out.extend(&block);
        out.resize(len, 0xaa);
        out
    }

    fn entry(rel: &str, kind: WalkKind, mtime_ns: i128) -> Entry {
        Entry {
            rel: RelPath::parse(rel.as_bytes()).expect("path"),
            kind,
            mode: 0o644,
            mtime_ns,
            dev: 0,
            ino: 0,
            abs: PathBuf::from("/mem").join(rel),
            meta: Default::default(),
        }
    }

    fn tree(mtime_ns: i128) -> (Vec<FilesItem>, HashMap<PathBuf, Vec<u8>>) {
        let files = [
            ("t/big", content(1, 200_000)),
            ("t/sub/small", b"small file".to_vec()),
            ("t/empty", Vec::new()),
        ];
        let mut items = vec![
            FilesItem::new(entry("t", WalkKind::Dir, mtime_ns), None),
            FilesItem::new(entry("t/sub", WalkKind::Dir, mtime_ns), None),
        ];
        let mut data = HashMap::new();
        for (rel, bytes) in files {
            let e = entry(
                rel,
                WalkKind::File {
                    size: bytes.len() as u64,
                },
                mtime_ns,
            );
            data.insert(e.abs.clone(), bytes);
            items.push(FilesItem::new(e, None));
        }
        items.push(FilesItem::new(
            entry(
                "t/link",
                WalkKind::Symlink {
                    target: b"sub/small".to_vec(),
                },
                mtime_ns,
            ),
            None,
        ));
        (items, data)
    }

    fn config(dry_run: bool, compress: Option<i32>, probe: bool) -> FilesSenderConfig {
        FilesSenderConfig {
            remote_dir: Vec::new(),
            dry_run,
            compress,
            chunk_avg: 1024,
            index_cache_dir: None,
            reply_timeout: Duration::from_secs(30),
            session_nonce: 9,
            probe,
            probe_all: false,
            delete: None,
            checksum: false,
            bwlimit: None,
            preserve: Default::default(),
            sparse: true,
            stream_min: None,
            top_mtime_ns: None,
        }
    }

    /// Runs both cores against each other, every byte delivered alone;
    /// returns the receiver's outcome.
    fn run(
        fx: &Fixture,
        items: &mut Vec<FilesItem>,
        src: &mut MemSource,
        cfg: &FilesSenderConfig,
    ) -> FilesReceiverOutcome {
        drive(fx, items, src, cfg, Drive::default()).outcome
    }

    /// How [`drive`] moves bytes and time.
    #[derive(Default)]
    struct Drive {
        /// Bytes delivered at once to the receiver (0: one at a time).
        piece: usize,
        /// Time added before each transmission of the sender.
        tick: Duration,
    }

    /// What [`drive`] saw.
    struct Driven {
        outcome: FilesReceiverOutcome,
        progress: Vec<FilesProgress>,
        warnings: Vec<String>,
        dropped: u64,
    }

    /// Runs both cores against each other as `how` says.
    fn drive<S: FilesSource>(
        fx: &Fixture,
        items: &mut Vec<FilesItem>,
        src: &mut S,
        cfg: &FilesSenderConfig,
        how: Drive,
    ) -> Driven {
        let mut now = Instant::now();
        let mut progress = Vec::new();
        let mut warnings = Vec::new();
        let mut tx = FilesSender::new(items, cfg, now).expect("sender");
        let mut rx = FilesReceiver::new(&FilesReceiverConfig::default(), now).expect("receiver");
        let mut host = LocalHost::new(
            pfs_session::files::ChunkIndex::Store(&fx.store),
            pfs_files::Landing::new(&fx.dest, None, false),
        );
        let (mut to_rx, mut to_tx) = (Vec::new(), Vec::new());
        for _round in 0..100_000 {
            let mut moved = false;
            while let Some(t) = tx.poll_transmit(now, src).expect("sender transmit") {
                let mut bytes = Vec::new();
                t.append_to(&mut bytes);
                tx.transmitted();
                now += how.tick;
                while let Some(FilesSenderEvent::Progress(p)) = tx.poll_event() {
                    progress.push(p);
                }
                warnings.extend(tx.take_warnings());
                moved = true;
                for b in bytes.chunks(how.piece.max(1)) {
                    to_rx.extend_from_slice(b);
                    let used = rx.handle_input(now, &to_rx, &mut host).expect("receiver input");
                    to_rx.drain(..used);
                    while let Some(e) = rx.poll_event() {
                        if e == FilesReceiverEvent::Finished {
                            rx.report(now, Usage::default());
                        }
                    }
                }
            }
            if let Some(out) = rx.poll_transmit() {
                let bytes = out.to_vec();
                rx.transmitted();
                moved = true;
                for b in bytes {
                    to_tx.push(b);
                    let used = tx.handle_input(now, &to_tx, src).expect("sender input");
                    to_tx.drain(..used);
                }
            }
            if tx.is_done() {
                if cfg.dry_run {
                    rx.handle_close(now, false).expect("dry run ends after the index");
                }
                assert!(rx.is_done(), "the receiver finished with the sender");
                let report = tx.take_report();
                let outcome = rx.outcome();
                if let Some((r, m)) = report {
                    assert_eq!(r, outcome.report, "both sides hold one report");
                    assert_eq!(m, outcome.messages);
                }
                while let Some(FilesSenderEvent::Progress(p)) = tx.poll_event() {
                    progress.push(p);
                }
                warnings.extend(tx.take_warnings());
                return Driven {
                    outcome,
                    progress,
                    warnings,
                    dropped: tx.dropped(),
                };
            }
            assert!(moved, "the cores wait for each other");
        }
        panic!("no end after 100000 rounds");
    }

    #[test]
    fn sender_and_receiver_cores_move_a_tree_in_one_byte_pieces() {
        let fx = Fixture::new(64 << 20);
        let mtime = 1_700_000_000_123_456_789i128;
        let (mut items, data) = tree(mtime);
        let mut src = MemSource::new(data.clone());
        // A dry run: the index and the plan, nothing written.
        let out = run(&fx, &mut items.clone(), &mut src, &config(true, None, true));
        assert!(out.dry_run);
        assert!(!fx.dest_dir.join("t").exists());
        // The first send: literals, compressed.
        let out = run(&fx, &mut items, &mut src, &config(false, Some(3), true));
        let r = out.report;
        assert_eq!(
            (r.files_written, r.dirs, r.symlinks, r.files_failed),
            (3, 2, 1, 0),
            "{}",
            out.messages
        );
        assert!(r.literal_wire_bytes < r.literal_bytes, "zstd entries");
        for (rel, bytes) in [
            ("t/big", &data[&PathBuf::from("/mem/t/big")]),
            ("t/sub/small", &b"small file".to_vec()),
        ] {
            assert_eq!(&fs::read(fx.dest_dir.join(rel)).expect("read"), bytes, "{rel}");
        }
        assert_eq!(
            fs::read_link(fx.dest_dir.join("t/link")).expect("link"),
            PathBuf::from("sub/small")
        );
        assert!(src.reads > 0);

        // Again, unchanged: the receiver holds every file (PROBE), no chunk moves.
        let (mut again, _) = tree(mtime);
        src.reads = 0;
        let out = run(&fx, &mut again, &mut src, &config(false, None, true));
        assert_eq!(out.report.files_unchanged, 3, "{}", out.messages);
        assert_eq!((out.report.literal_bytes, src.reads), (0, 0));

        // Same content, new mtimes, no probe: every chunk by reference into the store.
        let (mut moved, _) = tree(mtime + 1_000_000_000);
        let out = run(&fx, &mut moved, &mut src, &config(false, None, false));
        let r = out.report;
        assert_eq!((r.files_written, r.literal_bytes), (3, 0), "{}", out.messages);
        assert_eq!(r.matched_bytes, 200_000 + 10);
        assert_eq!(src.reads, 0, "nothing read for descriptors");
    }

    /// Files that change after they were chunked, between the plan and the
    /// read: what a file being written or truncated by another process
    /// looks like to the sender.
    struct Changing {
        inner: MemSource,
        /// New content, set once the files are chunked.
        later: HashMap<PathBuf, Vec<u8>>,
        /// What the source says when it opens the file (as `LocalSource`
        /// does when size or mtime moved); none: the change went unseen.
        notes: HashMap<PathBuf, String>,
    }

    impl FilesSource for Changing {
        fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
            self.inner.digest(items, which)
        }

        fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
            let failed = self.inner.chunk(items, which);
            self.inner.data.extend(self.later.drain());
            failed
        }

        fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>) {
            self.inner.open_index(store_id)
        }

        fn save_index(&mut self, cache: &IndexCache) -> Option<String> {
            self.inner.save_index(cache)
        }

        fn read(
            &mut self,
            item: &FilesItem,
            offset: u64,
            buf: &mut [u8],
        ) -> Result<Option<String>, LocalError> {
            let path = &item.entry.abs;
            let d = &self.inner.data[path];
            let Some(bytes) = d.get(offset as usize..offset as usize + buf.len()) else {
                return Err(LocalError::Io {
                    what: "read",
                    path: path.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "it shrank"),
                });
            };
            buf.copy_from_slice(bytes);
            Ok(self.notes.get(path).cloned())
        }
    }

    fn file(rel: &str, len: usize) -> FilesItem {
        FilesItem::new(entry(rel, WalkKind::File { size: len as u64 }, 1), None)
    }

    /// A config that streams every file with content (`stream_min` 1).
    fn streaming(probe: bool) -> FilesSenderConfig {
        FilesSenderConfig {
            stream_min: Some(1),
            ..config(false, None, probe)
        }
    }

    #[test]
    fn streamed_files_arrive_whole_and_reference_what_the_receiver_holds() {
        // Chunks handed out a few at a time, and by a source that cannot
        // stream (the core chunks such a file whole after its FILE).
        for runs in [Some(3), None] {
            let fx = Fixture::new(64 << 20);
            let mtime = 1_700_000_000_000_000_000i128;
            let (mut items, data) = tree(mtime);
            let mut src = MemSource::new(data.clone());
            src.stream_runs = runs;
            let out = run(&fx, &mut items, &mut src, &streaming(true));
            let r = out.report;
            assert_eq!(
                (r.files_written, r.files_failed),
                (3, 0),
                "{runs:?}: {}",
                out.messages
            );
            // content() repeats a block: its second copy went as KNOWN.
            assert!(r.literal_bytes < 200_000, "{runs:?}: {}", r.literal_bytes);
            for (rel, bytes) in [
                ("t/big", &data[&PathBuf::from("/mem/t/big")]),
                ("t/sub/small", &b"small file".to_vec()),
            ] {
                assert_eq!(
                    &fs::read(fx.dest_dir.join(rel)).expect("read"),
                    bytes,
                    "{runs:?} {rel}"
                );
            }
            assert!(items.iter().filter(|i| i.streamed).count() == 2, "{runs:?}");
            assert!(
                items.iter().filter(|i| i.streamed).all(|i| i.recipe.is_some()),
                "{runs:?}: the recipe is kept for the cache and for REPAIR"
            );
            // New mtimes, no probe: streamed again, every chunk by reference.
            let (mut moved, _) = tree(mtime + 1_000_000_000);
            src.reads = 0;
            let out = run(&fx, &mut moved, &mut src, &streaming(false));
            let r = out.report;
            assert_eq!(
                (r.files_written, r.literal_bytes),
                (3, 0),
                "{runs:?}: {}",
                out.messages
            );
            assert_eq!(r.matched_bytes, 200_000 + 10, "{runs:?}");
            assert_eq!(src.reads, 0, "{runs:?}: nothing read for descriptors");
        }
    }

    /// Files chunked in the background are collected in stream order: the
    /// tree lands as with chunking first, a repeated chunk still travels
    /// once (KNOWN after its literal), and a file that cannot be read when
    /// its turn comes is announced and dropped, the rest landing.
    #[test]
    fn files_chunked_ahead_land_and_an_unreadable_one_fails_alone() {
        let fx = Fixture::new(64 << 20);
        let mtime = 1_700_000_000_000_000_000i128;
        let (mut items, mut data) = tree(mtime);
        let twin = entry("t/twin", WalkKind::File { size: 200_000 }, mtime);
        data.insert(twin.abs.clone(), data[&PathBuf::from("/mem/t/big")].clone());
        items.push(FilesItem::new(twin, None));
        let locked = entry("t/locked", WalkKind::File { size: 5 }, mtime);
        data.insert(locked.abs.clone(), b"12345".to_vec());
        items.push(FilesItem::new(locked.clone(), None));
        // A hard link to it (as `-H` makes): dropped with it, never linked
        // to whatever the receiver has at its path.
        let mut link = FilesItem::new(entry("t/locked-link", WalkKind::File { size: 5 }, mtime), None);
        link.hard_link = Some(locked.rel.clone());
        items.push(link);
        let mut src = MemSource::new(data.clone());
        src.ahead = true;
        src.unreadable.push(locked.abs.clone());
        let cfg = FilesSenderConfig {
            // Nothing large enough to stream: every file goes ahead.
            stream_min: Some(1 << 30),
            ..config(false, None, false)
        };
        let out = drive(&fx, &mut items, &mut src, &cfg, Drive::default());
        let (r, messages) = (out.outcome.report, &out.outcome.messages);
        assert_eq!(out.dropped, 2, "{messages}");
        assert_eq!((r.files_written, r.files_failed), (4, 2), "{messages}");
        assert!(
            messages.contains("t/locked: the sender dropped it: open /mem/t/locked"),
            "{messages}"
        );
        assert!(
            messages.contains(
                "t/locked-link: the sender dropped it: its hard-link target t/locked could not be sent"
            ),
            "{messages}"
        );
        assert!(!fx.dest_dir.join("t/locked").exists() && !fx.dest_dir.join("t/locked-link").exists());
        for rel in ["t/big", "t/twin"] {
            assert_eq!(
                fs::read(fx.dest_dir.join(rel)).expect("landed"),
                data[&PathBuf::from("/mem/t/big")],
                "{rel}"
            );
        }
        // The twin's chunks all repeat the big file's: none travels twice,
        // so the literal bytes are those of the tree without it.
        let alone = Fixture::new(64 << 20);
        let (mut plain, plain_data) = tree(mtime);
        let mut plain_src = MemSource::new(plain_data);
        plain_src.ahead = true;
        let without = run(&alone, &mut plain, &mut plain_src, &cfg).report;
        assert_eq!(r.literal_bytes, without.literal_bytes);
        assert_eq!(r.effective_bytes, without.effective_bytes + 200_000);
        assert!(
            items.iter().all(|i| i.hard_link.is_none()),
            "the link went out as a dropped file"
        );
        assert!(items.iter().all(|i| !i.pending), "every recipe was collected");
    }

    /// A file chunked ahead comes before a file whose recipe was cached,
    /// with the same content: the first sends it literally, the second
    /// names it KNOWN — never the other way round (a KNOWN before its
    /// literal would cost a NAK and a REPAIR).
    #[test]
    fn known_chunks_follow_their_literal_whatever_was_chunked_first() {
        let fx = Fixture::new(64 << 20);
        let bytes = content(7, 50_000);
        let first = entry("t/first", WalkKind::File { size: 50_000 }, 1);
        let second = entry("t/second", WalkKind::File { size: 50_000 }, 1);
        let mut data = HashMap::new();
        data.insert(first.abs.clone(), bytes.clone());
        data.insert(second.abs.clone(), bytes.clone());
        let params = pfs_files::ChunkParams::new(1024).expect("params");
        let cached = pfs_files::chunk_bytes(&bytes, &params);
        let mut items = vec![
            FilesItem::new(entry("t", WalkKind::Dir, 1), None),
            FilesItem::new(first, None),
            FilesItem::new(second, Some(cached)),
        ];
        let mut src = MemSource::new(data);
        src.ahead = true;
        let cfg = FilesSenderConfig {
            stream_min: Some(1 << 30),
            ..config(false, None, false)
        };
        let out = drive(&fx, &mut items, &mut src, &cfg, Drive::default());
        let r = out.outcome.report;
        assert_eq!(
            (r.files_written, r.nak_chunks),
            (2, 0),
            "{}",
            out.outcome.messages
        );
        // content() repeats a block inside the file too: at most one copy
        // of the file's distinct chunks travels.
        let alone = Fixture::new(64 << 20);
        let one = entry("t/first", WalkKind::File { size: 50_000 }, 1);
        let mut one_data = HashMap::new();
        one_data.insert(one.abs.clone(), bytes.clone());
        let mut one_items = vec![
            FilesItem::new(entry("t", WalkKind::Dir, 1), None),
            FilesItem::new(one, None),
        ];
        let single = run(&alone, &mut one_items, &mut MemSource::new(one_data), &cfg).report;
        assert_eq!(r.literal_bytes, single.literal_bytes);
        for name in ["first", "second"] {
            assert_eq!(fs::read(fx.dest_dir.join("t").join(name)).expect("landed"), bytes);
        }
    }

    #[test]
    fn a_streamed_file_that_grew_or_shrank_since_the_scan_fails_alone() {
        let fx = Fixture::new(64 << 20);
        let mut items = vec![FilesItem::new(entry("t", WalkKind::Dir, 1), None)];
        let mut data: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        // Scanned at 20,000 bytes each; read at 25,000, 15,000 and 20,000.
        for (name, now) in [("grew", 25_000), ("shrank", 15_000), ("fine", 20_000)] {
            let it = file(&format!("t/{name}"), 20_000);
            data.insert(it.entry.abs.clone(), content(name.len() as u64, now));
            items.push(it);
        }
        let mut src = MemSource::new(data.clone());
        src.stream_runs = Some(4);
        let out = drive(&fx, &mut items, &mut src, &streaming(false), Drive::default());
        let (r, messages) = (out.outcome.report, &out.outcome.messages);
        assert_eq!(out.dropped, 2, "{messages}");
        assert_eq!((r.files_written, r.files_failed), (1, 2), "{messages}");
        assert!(
            messages
                .contains("t/grew: the sender dropped it: it grew past the 20000 bytes it had when scanned"),
            "{messages}"
        );
        assert!(
            messages.contains("t/shrank: the sender dropped it: it has 15000 bytes, not the 20000"),
            "{messages}"
        );
        assert_eq!(
            fs::read(fx.dest_dir.join("t/fine")).expect("fine"),
            data[&PathBuf::from("/mem/t/fine")]
        );
        assert!(!fx.dest_dir.join("t/grew").exists() && !fx.dest_dir.join("t/shrank").exists());
    }

    #[test]
    fn a_file_that_changes_under_the_sender_fails_alone() {
        let fx = Fixture::new(256 << 20);
        let big = super::common::blob_bytes(3, 9 << 20);
        let names = ["shrinks", "modified", "touched", "unseen", "fine"];
        let mut data: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        let mut items = vec![FilesItem::new(entry("t", WalkKind::Dir, 1), None)];
        for (k, name) in names.iter().enumerate() {
            // "shrinks" is larger than one CHUNKS frame: its first frame is
            // sent before the read fails.
            let bytes = if k == 0 {
                big.clone()
            } else {
                content(10 + k as u64, 20_000)
            };
            let it = file(&format!("t/{name}"), bytes.len());
            data.insert(it.entry.abs.clone(), bytes);
            items.push(it);
        }
        let abs = |name: &str| PathBuf::from("/mem/t").join(name);
        let mut later = HashMap::new();
        later.insert(abs("shrinks"), big[..6 << 20].to_vec());
        let mut modified = data[&abs("modified")].clone();
        modified[15_000] ^= 0xff;
        later.insert(abs("modified"), modified);
        let mut unseen = data[&abs("unseen")].clone();
        unseen[100] ^= 0xff;
        later.insert(abs("unseen"), unseen);
        let notes: HashMap<PathBuf, String> = ["modified", "touched"]
            .iter()
            .map(|n| (abs(n), "it was modified since it was scanned".to_string()))
            .collect();
        let mut src = Changing {
            inner: MemSource::new(data.clone()),
            later,
            notes,
        };
        let how = Drive {
            piece: 64 << 10,
            tick: Duration::ZERO,
        };
        let out = drive(&fx, &mut items, &mut src, &config(false, None, false), how);
        let (r, messages) = (out.outcome.report, &out.outcome.messages);
        // Two dropped by the sender (one mid-file), one refused by the
        // receiver's hash check (the change was not seen at the sender).
        assert_eq!(out.dropped, 2, "{messages}");
        assert_eq!((r.files_written, r.files_failed, r.dirs), (2, 3, 1), "{messages}");
        assert!(
            messages.contains("t/shrinks: the sender dropped it: read /mem/t/shrinks: it shrank"),
            "{messages}"
        );
        assert!(
            messages
                .contains("t/modified: the sender dropped it: it was modified since it was scanned: bytes"),
            "{messages}"
        );
        assert!(
            messages.contains("t/unseen: a literal chunk does not match its hash"),
            "{messages}"
        );
        for name in ["touched", "fine"] {
            assert_eq!(
                fs::read(fx.dest_dir.join("t").join(name)).expect("landed"),
                data[&abs(name)],
                "{name}"
            );
        }
        let mut left: Vec<_> = fs::read_dir(fx.dest_dir.join("t"))
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        left.sort();
        assert_eq!(left, ["fine", "touched"], "nothing else, no temporary file");
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(
            out.warnings[0].starts_with("/mem/t/touched: it was modified since it was scanned; every chunk"),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn progress_moves_inside_a_large_file() {
        let fx = Fixture::new(256 << 20);
        // Bytes that do not repeat: every chunk is a literal.
        let big = super::common::blob_bytes(5, 9 << 20);
        let it = file("big", big.len());
        let mut data = HashMap::new();
        data.insert(it.entry.abs.clone(), big.clone());
        let mut items = vec![it];
        let mut src = MemSource::new(data);
        let how = Drive {
            piece: 64 << 10,
            tick: Duration::from_secs(1),
        };
        let out = drive(&fx, &mut items, &mut src, &config(false, None, false), how);
        assert_eq!(out.outcome.report.files_written, 1);
        let total = big.len() as u64;
        let p = &out.progress;
        assert!(p.iter().all(|e| e.total_bytes == total && e.total_entries == 1));
        assert!(p.windows(2).all(|w| w[0].bytes <= w[1].bytes), "{p:?}");
        assert_eq!(
            p.first().map(|e| e.bytes),
            Some(0),
            "the stream's start is an event"
        );
        assert_eq!(p.last().map(|e| (e.bytes, e.entries)), Some((total, 1)));
        let inside: Vec<u64> = p
            .iter()
            .map(|e| e.bytes)
            .filter(|&b| 0 < b && b < total)
            .collect();
        // Events follow CHUNKS frames (4 MiB each here), at most one per
        // 200 ms of the core's clock: the bytes move before the file ends.
        assert!(!inside.is_empty(), "{p:?}");
    }
}
