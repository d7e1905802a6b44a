//! The files cores against a hostile peer, without sockets. A hostile
//! receiver: the [`FilesSender`] core is driven to each point where it
//! awaits a reply and fed crafted replies, delivered one byte at a time;
//! each must end the session with its exact error and ERROR code. Then
//! proptests: arbitrary bytes, in arbitrary pieces, after a valid
//! FILES_HELLO (receiver core) or once the sender core awaits a reply, never
//! panic a core and never make it report consuming more than it was given.
//! Deterministic: time is a value, nothing sleeps.

mod common;
use common::MemSource;

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pfs_files::{DestRoot, Entry, Landing, RelPath, WalkKind};
use pfs_session::files::sender::MAX_INDEX_BATCH;
use pfs_session::files::{
    FilesItem, FilesReceiver, FilesReceiverConfig, FilesReceiverEvent, FilesSender, FilesSenderConfig,
    FilesViolation, IndexFault, LocalHost,
};
use pfs_session::{SessionError, Violation};
use pfs_store::{Durability, Store, StoreConfig};
use pfs_sys::Usage;
use pfs_wire::files::{
    batch_head, FilesAccept, FilesHello, FilesReport, IndexEntry, Plan, PlanAck, ProbeHead,
    FLAG_FILES_REPORT, FLAG_LAST, INDEX_ENTRY_LEN,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{
    put_frame, ErrorCode, ErrorFrame, Frame, FrameHeader, FrameType, WireError, FRAME_HEADER_LEN,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------
// The sender's host: files in memory.

fn entry(rel: &str, kind: WalkKind) -> Entry {
    Entry {
        rel: RelPath::parse(rel.as_bytes()).expect("path"),
        kind,
        mode: 0o644,
        mtime_ns: 1_700_000_000_000_000_000,
        dev: 0,
        ino: 0,
        abs: PathBuf::from("/mem").join(rel),
        meta: Default::default(),
    }
}

/// A directory and two files (two PROBE entries when the store is not empty).
fn tree() -> (Vec<FilesItem>, MemSource) {
    let mut items = vec![FilesItem::new(entry("t", WalkKind::Dir), None)];
    let mut data = HashMap::new();
    for (rel, bytes) in [("t/a", vec![1u8; 3000]), ("t/b", b"small file".to_vec())] {
        let e = entry(
            rel,
            WalkKind::File {
                size: bytes.len() as u64,
            },
        );
        data.insert(e.abs.clone(), bytes);
        items.push(FilesItem::new(e, None));
    }
    let src = MemSource::new(data);
    (items, src)
}

fn config() -> FilesSenderConfig {
    FilesSenderConfig {
        remote_dir: Vec::new(),
        dry_run: false,
        compress: None,
        chunk_avg: 1024,
        index_cache_dir: None,
        reply_timeout: Duration::from_secs(30),
        session_nonce: 9,
        probe: true,
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

// ---------------------------------------------------------------------------
// Driving the sender core.

/// Where the sender core awaits a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Await {
    /// FILES_ACCEPT.
    Accept,
    /// PROBE_REPLY for two entries.
    ProbeReply,
    /// INDEX.
    Index,
    /// The PLAN's ACK.
    Ack,
    /// NAK or the FILES_END report.
    Report,
}

const AWAITS: [Await; 5] = [
    Await::Accept,
    Await::ProbeReply,
    Await::Index,
    Await::Ack,
    Await::Report,
];

/// A sender core, the time, and a receive buffer.
struct Tx<'a> {
    core: FilesSender<'a>,
    now: Instant,
    buf: Vec<u8>,
}

impl Tx<'_> {
    /// Writes out whatever the core has to send; returns its frames
    /// (BATCH frames as they are).
    fn flush(&mut self, src: &mut MemSource) -> Vec<(FrameType, u16)> {
        let mut bytes = Vec::new();
        for _ in 0..10_000 {
            match self.core.poll_transmit(self.now, src).expect("transmit") {
                Some(t) => t.append_to(&mut bytes),
                None => break,
            }
            self.core.transmitted();
        }
        let mut frames = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let (f, used) = Frame::parse(rest).expect("the core sends whole frames");
            frames.push((f.header.frame_type, f.header.flags));
            rest = &rest[used..];
        }
        frames
    }

    /// Delivers `bytes` one at a time, as a receive buffer would, and
    /// writes out what the core sends in between.
    fn feed(&mut self, src: &mut MemSource, bytes: &[u8]) -> Result<(), SessionError> {
        for &b in bytes {
            self.buf.push(b);
            let used = self.core.handle_input(self.now, &self.buf, src)?;
            assert!(used <= self.buf.len());
            self.buf.drain(..used);
            self.flush(src);
        }
        Ok(())
    }

    fn reply(
        &mut self,
        src: &mut MemSource,
        ty: FrameType,
        flags: u16,
        body: &[u8],
    ) -> Result<(), SessionError> {
        self.feed(src, &frame(ty, flags, body))
    }

    /// Drives a fresh core to `at`: FILES_HELLO out, and the receiver's
    /// good replies up to the point where `at` is awaited.
    fn to(&mut self, src: &mut MemSource, at: Await) {
        assert_eq!(self.flush(src), [(FrameType::FilesHello, 0)]);
        assert!(self.core.wants_input());
        assert_eq!(self.core.awaiting(), "FILES_ACCEPT");
        if at == Await::Accept {
            return;
        }
        // A store that holds something asks for a PROBE; an empty one not.
        let generation = u64::from(at == Await::ProbeReply);
        self.reply(src, FrameType::FilesAccept, 0, &accept(generation))
            .expect("FILES_ACCEPT");
        if at == Await::ProbeReply {
            assert_eq!(self.core.awaiting(), "PROBE_REPLY");
            return;
        }
        assert_eq!(self.core.awaiting(), "INDEX");
        if at == Await::Index {
            return;
        }
        self.reply(src, FrameType::Index, FLAG_LAST, &[]).expect("INDEX");
        assert_eq!(self.core.awaiting(), "PLAN acknowledgement");
        if at == Await::Ack {
            return;
        }
        let ack = PlanAck {
            reserved: 1 << 20,
            free: 1 << 30,
        };
        self.reply(src, FrameType::Ack, 0, &ack.emit()).expect("ACK");
        assert_eq!(self.core.awaiting(), "the report");
        assert!(self.core.wants_input());
    }
}

fn frame(ty: FrameType, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    put_frame(&mut f, ty, flags, body);
    f
}

fn accept(generation: u64) -> [u8; pfs_wire::files::FILES_ACCEPT_LEN] {
    FilesAccept {
        store_id: [5; 16],
        generation,
        capacity: 1 << 30,
        free: 1 << 30,
        max_chunks_body: 8 << 20,
        auth_method: 0,
        flags: 0,
    }
    .emit()
}

/// A PROBE_REPLY body: head and bitmap of `held`.
fn probe_reply(first_no: u64, held: &[bool]) -> Vec<u8> {
    let mut body = ProbeHead {
        first_no,
        count: held.len() as u32,
    }
    .emit()
    .to_vec();
    let mut bits = vec![0u8; held.len().div_ceil(8)];
    for (j, &h) in held.iter().enumerate() {
        if h {
            bits[j / 8] |= 1 << (j % 8);
        }
    }
    body.extend(bits);
    body
}

/// A BATCH body of `frames`, compressed, stating `raw_len`.
fn batch(raw_len: u32, frames: &[u8]) -> Vec<u8> {
    common::batch_body(raw_len, &zstd::bulk::compress(frames, 1).expect("zstd"))
}

fn index_body(n: u8) -> Vec<u8> {
    let mut body = Vec::new();
    for i in 0..n {
        IndexEntry {
            key: [i; 8],
            offset: u64::from(i) * 4096,
            len: 4096,
        }
        .emit(&mut body);
    }
    body
}

/// A script of replies, run on a core awaiting its point.
type Script = fn(&mut Tx<'_>, &mut MemSource) -> Result<(), SessionError>;

/// Runs `script` on a fresh sender core driven to `at`; the error it ends in.
fn hostile(at: Await, script: Script) -> SessionError {
    let (mut items, mut src) = tree();
    let cfg = config();
    let now = Instant::now();
    let mut tx = Tx {
        core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
        now,
        buf: Vec::new(),
    };
    tx.to(&mut src, at);
    match script(&mut tx, &mut src) {
        Err(e) => e,
        Ok(()) => panic!("{at:?}: the hostile replies were accepted"),
    }
}

fn files_violation(e: SessionError) -> FilesViolation {
    match e {
        SessionError::Violation(Violation::Files(v)) => v,
        other => panic!("expected a files violation, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// A hostile receiver against the sender core.

#[test]
fn good_replies_reach_every_awaited_point() {
    for at in AWAITS {
        let (mut items, mut src) = tree();
        let cfg = config();
        let now = Instant::now();
        let mut tx = Tx {
            core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
            now,
            buf: Vec::new(),
        };
        tx.to(&mut src, at);
        assert!(tx.core.wants_input(), "{at:?}");
        assert!(!tx.core.is_done(), "{at:?}");
    }
    // PROBE answered in two frames, the second LAST: the INDEX_REQUEST follows.
    let (mut items, mut src) = tree();
    let cfg = config();
    let now = Instant::now();
    let mut tx = Tx {
        core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
        now,
        buf: Vec::new(),
    };
    tx.to(&mut src, Await::ProbeReply);
    tx.reply(&mut src, FrameType::ProbeReply, 0, &probe_reply(0, &[true]))
        .expect("first half");
    assert_eq!(tx.core.awaiting(), "PROBE_REPLY");
    tx.reply(
        &mut src,
        FrameType::ProbeReply,
        FLAG_LAST,
        &probe_reply(1, &[false]),
    )
    .expect("second half");
    assert_eq!((tx.core.awaiting(), tx.core.probed()), ("INDEX", 2));
    // A report after the stream ends the session.
    let (mut items, mut src) = tree();
    let mut tx = Tx {
        core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
        now,
        buf: Vec::new(),
    };
    tx.to(&mut src, Await::Report);
    let mut body = Vec::new();
    FilesReport::default().emit(&mut body);
    tx.reply(&mut src, FrameType::FilesEnd, FLAG_FILES_REPORT, &body)
        .expect("report");
    assert!(tx.core.is_done());
    assert!(tx.core.take_report().is_some());
}

#[test]
fn probe_replies_that_do_not_answer_the_probe_end_the_session() {
    let cases: [(&str, Script, FilesViolation); 4] = [
        (
            "starts past the first entry",
            |tx, src| tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &probe_reply(1, &[true])),
            FilesViolation::ProbeReplyOrder {
                first: 1,
                count: 1,
                expected: 0,
                asked: 2,
            },
        ),
        (
            "answers more entries than asked",
            |tx, src| {
                tx.reply(
                    src,
                    FrameType::ProbeReply,
                    FLAG_LAST,
                    &probe_reply(0, &[true, true, true]),
                )
            },
            FilesViolation::ProbeReplyOrder {
                first: 0,
                count: 3,
                expected: 0,
                asked: 2,
            },
        ),
        (
            "answers the first entry twice",
            |tx, src| {
                tx.reply(src, FrameType::ProbeReply, 0, &probe_reply(0, &[true]))?;
                tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &probe_reply(0, &[true]))
            },
            FilesViolation::ProbeReplyOrder {
                first: 0,
                count: 1,
                expected: 1,
                asked: 2,
            },
        ),
        (
            "LAST after one of two answers",
            |tx, src| tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &probe_reply(0, &[true])),
            FilesViolation::ProbeReplyShort {
                answered: 1,
                asked: 2,
            },
        ),
    ];
    for (what, script, want) in cases {
        let v = files_violation(hostile(Await::ProbeReply, script));
        assert_eq!(v, want, "{what}");
        assert_eq!(v.code(), ErrorCode::Protocol, "{what}: {v}");
        assert!(v.to_string().contains("PROBE"), "{what}: {v}");
    }
    // A PROBE_REPLY whose bitmap does not fit its count does not decode.
    let e = hostile(Await::ProbeReply, |tx, src| {
        let mut body = probe_reply(0, &[true, true]);
        body.pop();
        tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &body)
    });
    assert!(
        matches!(
            e,
            SessionError::Malformed {
                context: "PROBE_REPLY",
                error: WireError::LengthMismatch
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::BadFrame);
    // Bits set past the count.
    let e = hostile(Await::ProbeReply, |tx, src| {
        let mut body = probe_reply(0, &[true, true]);
        *body.last_mut().expect("bitmap") |= 0x80;
        tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &body)
    });
    assert!(
        matches!(
            e,
            SessionError::Malformed {
                context: "PROBE_REPLY",
                error: WireError::ReservedNonZero
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::BadFrame);
}

#[test]
fn an_index_that_does_not_decode_or_is_out_of_order_ends_the_session() {
    let cases: [(&str, Script, FilesViolation); 5] = [
        (
            "a BATCH over the sender's limit",
            |tx, src| tx.reply(src, FrameType::Batch, 0, &batch(MAX_INDEX_BATCH + 1, b"")),
            FilesViolation::BadIndex {
                what: IndexFault::TooLarge {
                    len: MAX_INDEX_BATCH + 1,
                },
            },
        ),
        (
            "a BATCH that is not zstd",
            |tx, src| {
                let mut body = batch_head(64).to_vec();
                body.extend_from_slice(b"certainly not a zstd frame");
                tx.reply(src, FrameType::Batch, 0, &body)
            },
            FilesViolation::BadIndex {
                what: IndexFault::Corrupt,
            },
        ),
        (
            "a BATCH that lies about its length",
            |tx, src| {
                let inner = frame(FrameType::Index, FLAG_LAST, &index_body(2));
                tx.reply(src, FrameType::Batch, 0, &batch(inner.len() as u32 + 1, &inner))
            },
            FilesViolation::BadIndex {
                what: IndexFault::Corrupt,
            },
        ),
        (
            "a BATCH with a PLAN in it",
            |tx, src| {
                let mut inner = frame(FrameType::Index, 0, &index_body(1));
                let plan = Plan {
                    entries: 0,
                    files: 0,
                    total_bytes: 0,
                    literal_bytes: 0,
                    chunks: 0,
                    pending_bytes: 0,
                };
                inner.extend(frame(FrameType::Plan, 0, &plan.emit()));
                tx.reply(src, FrameType::Batch, 0, &batch(inner.len() as u32, &inner))
            },
            FilesViolation::BadIndex {
                what: IndexFault::Malformed,
            },
        ),
        (
            "an INDEX after the LAST one in a BATCH",
            |tx, src| {
                let mut inner = frame(FrameType::Index, FLAG_LAST, &index_body(1));
                inner.extend(frame(FrameType::Index, 0, &index_body(1)));
                tx.reply(src, FrameType::Batch, 0, &batch(inner.len() as u32, &inner))
            },
            FilesViolation::BadIndex {
                what: IndexFault::Malformed,
            },
        ),
    ];
    for (what, script, want) in cases {
        let v = files_violation(hostile(Await::Index, script));
        assert_eq!(v, want, "{what}");
        assert_eq!(v.code(), ErrorCode::BadFrame, "{what}: {v}");
        assert!(v.to_string().starts_with("receiver sent"), "{what}: {v}");
    }

    // An INDEX frame after the LAST one (bare frames): the PLAN is out, the
    // ACK awaited.
    let v = files_violation(hostile(Await::Index, |tx, src| {
        tx.reply(src, FrameType::Index, FLAG_LAST, &index_body(1))?;
        tx.reply(src, FrameType::Index, 0, &index_body(1))
    }));
    assert_eq!(
        v,
        FilesViolation::UnexpectedReply {
            expected: "ACK",
            got: FrameType::Index,
        }
    );
    assert_eq!(v.code(), ErrorCode::Protocol);

    // A frame over the index limit is refused from its header alone.
    let v = files_violation(hostile(Await::Index, |tx, src| {
        let h = FrameHeader {
            frame_type: FrameType::Batch,
            flags: 0,
            length: MAX_INDEX_BATCH + 1,
        };
        tx.feed(src, &h.emit())
    }));
    assert_eq!(
        v,
        FilesViolation::BadReply {
            frame: FrameType::Batch,
            len: MAX_INDEX_BATCH + 1,
            during: "INDEX",
        }
    );
    assert_eq!(v.code(), ErrorCode::Protocol);

    // Bodies that do not decode.
    type Decode = (&'static str, Script, &'static str, WireError);
    let decode: [Decode; 3] = [
        (
            "INDEX of 19 bytes",
            |tx, src| {
                tx.reply(
                    src,
                    FrameType::Index,
                    FLAG_LAST,
                    &index_body(1)[..INDEX_ENTRY_LEN - 1],
                )
            },
            "INDEX",
            WireError::LengthMismatch,
        ),
        (
            "BATCH shorter than its head",
            |tx, src| tx.reply(src, FrameType::Batch, 0, &[0; 3]),
            "BATCH",
            WireError::Truncated,
        ),
        (
            "a frame cut short in a BATCH",
            |tx, src| {
                let inner = frame(FrameType::Index, FLAG_LAST, &index_body(2));
                let cut = &inner[..inner.len() - 5];
                tx.reply(src, FrameType::Batch, 0, &batch(cut.len() as u32, cut))
            },
            "frame in an index BATCH",
            WireError::Truncated,
        ),
    ];
    for (what, script, context, error) in decode {
        match hostile(Await::Index, script) {
            e @ SessionError::Malformed { .. } => {
                assert!(
                    matches!(e, SessionError::Malformed { context: c, error: w } if c == context && w == error),
                    "{what}: {e:?}"
                );
                assert_eq!(e.code(), ErrorCode::BadFrame, "{what}");
            }
            other => panic!("{what}: expected malformed, got {other:?}"),
        }
    }
}

#[test]
fn replies_of_the_wrong_type_name_what_was_awaited() {
    let cases: [(Await, &str, Script, FilesViolation); 7] = [
        (
            Await::Accept,
            "ACK for FILES_ACCEPT",
            |tx, src| tx.reply(src, FrameType::Ack, 0, &[0; 16]),
            FilesViolation::UnexpectedReply {
                expected: "FILES_ACCEPT",
                got: FrameType::Ack,
            },
        ),
        (
            Await::Accept,
            "a blob receiver's HELLO_ACK",
            |tx, src| tx.reply(src, FrameType::HelloAck, 0, &[0; 32]),
            FilesViolation::UnexpectedReply {
                expected: "FILES_ACCEPT",
                got: FrameType::HelloAck,
            },
        ),
        (
            Await::ProbeReply,
            "INDEX before the PROBE is answered",
            |tx, src| tx.reply(src, FrameType::Index, FLAG_LAST, &[]),
            FilesViolation::UnexpectedReply {
                expected: "PROBE_REPLY",
                got: FrameType::Index,
            },
        ),
        (
            Await::Index,
            "a GRAM (bulk, allowed in size while the index streams)",
            |tx, src| tx.reply(src, FrameType::Gram, 0, &[0; 40]),
            FilesViolation::UnexpectedReply {
                expected: "INDEX",
                got: FrameType::Gram,
            },
        ),
        (
            Await::Ack,
            "PROBE_REPLY for the PLAN",
            |tx, src| tx.reply(src, FrameType::ProbeReply, FLAG_LAST, &probe_reply(0, &[])),
            FilesViolation::UnexpectedReply {
                expected: "ACK",
                got: FrameType::ProbeReply,
            },
        ),
        (
            Await::Report,
            "FILES_END without its report",
            |tx, src| tx.reply(src, FrameType::FilesEnd, 0, &[]),
            FilesViolation::UnexpectedReply {
                expected: "NAK or FILES_END",
                got: FrameType::FilesEnd,
            },
        ),
        (
            Await::Report,
            "the report while NAKs are still open",
            |tx, src| {
                tx.reply(src, FrameType::Nak, 0, &[7; 32])?;
                let mut body = Vec::new();
                FilesReport::default().emit(&mut body);
                tx.reply(src, FrameType::FilesEnd, FLAG_FILES_REPORT, &body)
            },
            FilesViolation::UnexpectedReply {
                expected: "NAK or FILES_END",
                got: FrameType::FilesEnd,
            },
        ),
    ];
    for (at, what, script, want) in cases {
        let v = files_violation(hostile(at, script));
        assert_eq!(v, want, "{what}");
        assert_eq!(v.code(), ErrorCode::Protocol, "{what}: {v}");
    }
    // A bulk frame where only control replies come: refused from its header.
    for at in [Await::Accept, Await::ProbeReply, Await::Ack, Await::Report] {
        let v = files_violation(hostile(at, |tx, src| {
            let h = FrameHeader {
                frame_type: FrameType::Chunks,
                flags: 0,
                length: 100,
            };
            tx.feed(src, &h.emit())
        }));
        match v {
            FilesViolation::BadReply {
                frame: FrameType::Chunks,
                len: 100,
                ..
            } => assert_eq!(v.code(), ErrorCode::Protocol),
            other => panic!("{at:?}: {other:?}"),
        }
    }
    // A FILES_ACCEPT of the wrong length does not decode.
    let e = hostile(Await::Accept, |tx, src| {
        tx.reply(src, FrameType::FilesAccept, 0, &accept(0)[1..])
    });
    assert!(
        matches!(
            e,
            SessionError::Malformed {
                context: "FILES_ACCEPT",
                error: WireError::LengthMismatch
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::BadFrame);
}

#[test]
fn an_error_frame_is_the_receivers_refusal_wherever_it_comes() {
    for at in AWAITS {
        let e = hostile(at, |tx, src| {
            let mut body = Vec::new();
            ErrorFrame {
                code: ErrorCode::Limit as u16,
                message: "store full: go away",
            }
            .emit(&mut body);
            tx.reply(src, FrameType::Error, 0, &body)
        });
        match &e {
            SessionError::Refused { code, message } => {
                assert_eq!(*code, ErrorCode::Limit as u16, "{at:?}");
                assert_eq!(message, "store full: go away", "{at:?}");
            }
            other => panic!("{at:?}: expected a refusal, got {other:?}"),
        }
        // Not ours to tell the peer about: its own ERROR is not echoed.
        assert!(!e.tell_peer(), "{at:?}");
        assert_eq!(e.code(), ErrorCode::Internal, "{at:?}");
        assert!(e.to_string().contains("peer refused (LIMIT)"), "{at:?}: {e}");
    }
    // An ERROR body that does not decode is still a refusal.
    let e = hostile(Await::Index, |tx, src| tx.reply(src, FrameType::Error, 0, b"xx"));
    match e {
        SessionError::Refused { code: 0, message } => {
            assert!(message.starts_with("undecodable ERROR frame"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn garbage_is_malformed_from_its_header() {
    type Case = (&'static str, fn() -> Vec<u8>, WireError, ErrorCode);
    let cases: [Case; 4] = [
        (
            "text",
            || b"GET / HTTP/1.1\r\n".to_vec(),
            WireError::BadMagic,
            ErrorCode::BadFrame,
        ),
        (
            "a header with a broken CRC",
            || {
                let mut h = frame(FrameType::FilesAccept, 0, &accept(0));
                h[FRAME_HEADER_LEN - 1] ^= 1;
                h
            },
            WireError::BadHeaderCrc,
            ErrorCode::BadFrame,
        ),
        (
            "a control frame over the control limit",
            || {
                FrameHeader {
                    frame_type: FrameType::FilesAccept,
                    flags: 0,
                    length: MAX_CONTROL_BODY + 1,
                }
                .emit()
                .to_vec()
            },
            WireError::TooLarge,
            ErrorCode::Limit,
        ),
        (
            "flags the type does not have",
            || {
                FrameHeader {
                    frame_type: FrameType::Ack,
                    flags: 0x8000,
                    length: 16,
                }
                .emit()
                .to_vec()
            },
            WireError::BadFlags,
            ErrorCode::BadFrame,
        ),
    ];
    for at in AWAITS {
        for (what, bytes, error, code) in cases {
            let (mut items, mut src) = tree();
            let cfg = config();
            let now = Instant::now();
            let mut tx = Tx {
                core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
                now,
                buf: Vec::new(),
            };
            tx.to(&mut src, at);
            let bytes = bytes();
            // Nothing is decided before a whole header is there.
            for &b in &bytes[..FRAME_HEADER_LEN - 1] {
                tx.buf.push(b);
                assert_eq!(tx.core.handle_input(now, &tx.buf, &mut src).expect("waits"), 0);
            }
            tx.buf.clear();
            match tx.feed(&mut src, &bytes) {
                Err(
                    e @ SessionError::Malformed {
                        context: "frame header",
                        ..
                    },
                ) => {
                    assert!(
                        matches!(e, SessionError::Malformed { error: w, .. } if w == error),
                        "{at:?} {what}: {e:?}"
                    );
                    assert_eq!(e.code(), code, "{at:?} {what}");
                }
                other => panic!("{at:?} {what}: expected malformed, got {other:?}"),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Proptests.

/// Arbitrary input, most of it framed: raw bytes fail at the header CRC, so
/// frames with valid headers (any type, any flags, any body, BATCH frames
/// of such frames) reach the cores' state machines.
#[derive(Debug, Clone)]
enum Piece {
    Raw(Vec<u8>),
    Frame(u8, u16, Vec<u8>),
    Batch(Vec<(u8, u16, Vec<u8>)>, i8),
}

fn frame_type() -> impl Strategy<Value = u8> {
    // Every type the wire knows (1 …= 17), and now and then one it does not.
    prop_oneof![10 => 1u8..=17, 1 => any::<u8>()]
}

fn flags() -> impl Strategy<Value = u16> {
    prop_oneof![4 => Just(0u16), 2 => Just(FLAG_LAST), 1 => any::<u16>()]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..96)
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Piece::Raw),
        4 => (frame_type(), flags(), body()).prop_map(|(t, f, b)| Piece::Frame(t, f, b)),
        2 => (prop::collection::vec((frame_type(), flags(), body()), 0..4), -2i8..3)
            .prop_map(|(frames, skew)| Piece::Batch(frames, skew)),
    ]
}

/// A header for type byte `t` (a valid CRC; the type may be unknown).
fn put_raw_frame(out: &mut Vec<u8>, t: u8, flags: u16, body: &[u8]) {
    match FrameType::from_u8(t) {
        Ok(ty) => put_frame(out, ty, flags, body),
        // An unknown type cannot be emitted with a valid CRC here: bytes.
        Err(_) => {
            out.push(t);
            out.extend_from_slice(body);
        }
    }
}

fn encode(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        match p {
            Piece::Raw(b) => out.extend_from_slice(b),
            Piece::Frame(t, f, b) => put_raw_frame(&mut out, *t, *f, b),
            Piece::Batch(frames, skew) => {
                let mut inner = Vec::new();
                for (t, f, b) in frames {
                    put_raw_frame(&mut inner, *t, *f, b);
                }
                // The stated raw length, sometimes off by a little.
                let raw_len = (inner.len() as i64 + i64::from(*skew)).max(0) as u32;
                put_frame(&mut out, FrameType::Batch, 0, &batch(raw_len, &inner));
            }
        }
    }
    out
}

/// Delivery: piece sizes used in turn.
fn sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..97, 1..8)
}

/// A store and a destination in a temporary directory.
struct Fixture {
    _tmp: tempfile::TempDir,
    store: Store,
    dest: DestRoot,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let dest_dir = tmp.path().join("dest");
        fs::create_dir(&dest_dir).expect("mkdir");
        let opts = StoreConfig {
            capacity: 4 << 20,
            huge_dir: None,
            durability: Durability::None,
        };
        let store = Store::open(&tmp.path().join("store"), &opts).expect("open store");
        let dest = DestRoot::open(&dest_dir).expect("open destination");
        Self {
            _tmp: tmp,
            store,
            dest,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    /// Whatever follows a valid FILES_HELLO (and, half the time, a valid
    /// INDEX_REQUEST and PLAN), in whatever pieces, the receiver core
    /// returns an error or waits for more: it never panics, and it never
    /// consumes more than it was given.
    #[test]
    fn arbitrary_bytes_after_files_hello_never_panic_the_receiver(
        pieces in prop::collection::vec(piece(), 0..12),
        sizes in sizes(),
        streaming in any::<bool>(),
    ) {
        let fx = Fixture::new();
        let now = Instant::now();
        let cfg = FilesReceiverConfig {
            max_chunks_body: 1 << 16,
            ..FilesReceiverConfig::default()
        };
        let mut rx = FilesReceiver::new(&cfg, now).expect("core");
        let mut host = LocalHost::new(pfs_session::files::ChunkIndex::Store(&fx.store), Landing::new(&fx.dest, None, false));
        let mut hello = Vec::new();
        FilesHello {
            flags: 0,
            auth_method: 0,
            chunk_avg: 1024,
            session_nonce: 7,
            remote_dir: b"",
            auth: &[],
        }
        .emit(&mut hello);
        let mut bytes = frame(FrameType::FilesHello, 0, &hello);
        if streaming {
            bytes.extend(frame(FrameType::IndexRequest, 0, &0u64.to_le_bytes()));
            let plan = Plan { entries: 4, files: 4, total_bytes: 1 << 16, literal_bytes: 1 << 16, chunks: 4 , pending_bytes: 0,};
            bytes.extend(frame(FrameType::Plan, 0, &plan.emit()));
        }
        let prefix = bytes.len();
        bytes.extend(encode(&pieces));
        let mut pending = Vec::new();
        let mut given = 0usize;
        let mut consumed = 0usize;
        let mut at = 0usize;
        let mut turn = 0usize;
        while at < bytes.len() {
            let n = sizes[turn % sizes.len()].min(bytes.len() - at);
            turn += 1;
            pending.extend_from_slice(&bytes[at..at + n]);
            at += n;
            given += n;
            match rx.handle_input(now, &pending, &mut host) {
                Ok(used) => {
                    prop_assert!(used <= pending.len(), "consumed {used} of {}", pending.len());
                    consumed += used;
                    pending.drain(..used);
                }
                Err(e) => {
                    // The prefix is well formed: it is never what fails.
                    prop_assert!(at > prefix, "the valid prefix failed: {e:?}");
                    break;
                }
            }
            while let Some(e) = rx.poll_event() {
                if e == FilesReceiverEvent::Finished {
                    rx.report(now, Usage::default());
                }
            }
            if rx.poll_transmit().is_some() {
                rx.transmitted();
            }
        }
        prop_assert!(consumed <= given);
    }

    /// Whatever the receiver answers once the sender core awaits a reply
    /// (any of its awaited points), in whatever pieces, the sender core
    /// returns an error or waits for more: it never panics, and it never
    /// consumes more than it was given.
    #[test]
    fn arbitrary_reply_bytes_never_panic_the_sender(
        pieces in prop::collection::vec(piece(), 0..12),
        sizes in sizes(),
        at in 0usize..AWAITS.len(),
    ) {
        let (mut items, mut src) = tree();
        let cfg = config();
        let now = Instant::now();
        let mut tx = Tx {
            core: FilesSender::new(&mut items, &cfg, now).expect("sender"),
            now,
            buf: Vec::new(),
        };
        tx.to(&mut src, AWAITS[at]);
        let bytes = encode(&pieces);
        let (mut at, mut turn, mut given, mut consumed) = (0usize, 0usize, 0usize, 0usize);
        while at < bytes.len() {
            let n = sizes[turn % sizes.len()].min(bytes.len() - at);
            turn += 1;
            tx.buf.extend_from_slice(&bytes[at..at + n]);
            at += n;
            given += n;
            match tx.core.handle_input(now, &tx.buf, &mut src) {
                Ok(used) => {
                    prop_assert!(used <= tx.buf.len(), "consumed {used} of {}", tx.buf.len());
                    consumed += used;
                    tx.buf.drain(..used);
                }
                Err(_) => break,
            }
            // What the core sends in between (a PLAN, the stream, REPAIRs).
            loop {
                match tx.core.poll_transmit(now, &mut src) {
                    Ok(Some(_)) => tx.core.transmitted(),
                    Ok(None) => break,
                    Err(e) => {
                        prop_assert!(false, "the sender's own transmit failed: {e:?}");
                    }
                }
            }
            if tx.core.is_done() {
                break;
            }
        }
        prop_assert!(consumed <= given);
    }
}
