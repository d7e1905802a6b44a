//! The files receiver's resource bounds against a hostile peer (issue 13,
//! docs/security.md): whatever a peer declares, the memory, hashing
//! work, open descriptors and store reservation of its session stay under
//! the limits the receiver states, and a well-behaved session is served
//! afterwards. The sans-I/O core over a [`LocalHost`]; time is a value, and
//! nothing here measures it.

mod common;
use common::{batch_of, literals_body};

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pfs_files::{DestRoot, Landing};
use pfs_session::files::{
    ChunkIndex, FilesReceiver, FilesReceiverConfig, FilesReceiverEvent, FilesViolation, LocalHost,
};
use pfs_session::{LimitExceeded, SessionError, Violation};
use pfs_store::{ChunkLoc, Durability, Store, StoreConfig};
use pfs_sys::Usage;
use pfs_wire::files::{
    emit_entry_head, tag, ChunksHeader, EntryKind, FileEntry, FilesHello, FilesReport, Plan, PlanAck,
    FLAG_FILES_REPORT, FLAG_LAST,
};
use pfs_wire::{put_frame, Frame, FrameType};

const MTIME: i128 = 1_700_000_000_000_000_005;

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
            durability: Durability::None,
            ..StoreConfig::with_capacity(capacity)
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

    fn rx(&self, cfg: FilesReceiverConfig) -> Rx<'_> {
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
        }
    }

    /// A chunk committed to the store, as an earlier session would leave it.
    fn stored(&self, bytes: &[u8]) -> ChunkLoc {
        let mut r = self.store.reserve(bytes.len() as u64).expect("reserve");
        r.append(blake3::hash(bytes).as_bytes(), bytes).expect("append");
        r.commit().expect("commit")[0]
    }

    /// A well-behaved session on the same store and destination lands a file.
    fn legit_transfer_works(&self, name: &str) {
        let mut rx = self.rx(FilesReceiverConfig::default());
        let data = format!("legitimate content of {name}").into_bytes();
        rx.handshake(data.len() as u64);
        rx.send(
            FrameType::File,
            0,
            &file_body(0, name.as_bytes(), data.len() as u64, 1, &data),
        )
        .expect("FILE");
        rx.send(FrameType::Chunks, 0, &literals_body(0, &[(&data, &data)]))
            .expect("CHUNKS");
        let (report, messages) = rx.end();
        assert_eq!((report.files_written, report.files_failed), (1, 0), "{messages}");
        assert_eq!(fs::read(self.dest_dir.join(name)).expect("landed"), data);
    }
}

/// A receiver core, its host, and what it sent.
struct Rx<'s> {
    core: FilesReceiver,
    host: LocalHost<'s>,
    buf: Vec<u8>,
    sent: Vec<u8>,
    now: Instant,
}

impl Rx<'_> {
    /// Delivers `bytes` as one read would.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), SessionError> {
        self.buf.extend_from_slice(bytes);
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
        Ok(())
    }

    fn send(&mut self, ty: FrameType, flags: u16, body: &[u8]) -> Result<(), SessionError> {
        let mut f = Vec::new();
        put_frame(&mut f, ty, flags, body);
        self.feed(&f)
    }

    fn frames(&mut self) -> Vec<(FrameType, u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = &self.sent[..];
        while !rest.is_empty() {
            let (f, used) = Frame::parse(rest).expect("whole frames");
            out.push((f.header.frame_type, f.header.flags, f.body.to_vec()));
            rest = &rest[used..];
        }
        self.sent.clear();
        out
    }

    /// FILES_HELLO, INDEX_REQUEST, PLAN; returns the PLAN's ACK.
    fn handshake(&mut self, literal: u64) -> PlanAck {
        let mut body = Vec::new();
        FilesHello {
            flags: 0,
            auth_method: 0,
            chunk_avg: 32 << 10,
            session_nonce: 7,
            remote_dir: b"",
            auth: &[],
        }
        .emit(&mut body);
        self.send(FrameType::FilesHello, 0, &body).expect("FILES_HELLO");
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
        let (ty, _, body) = self.frames().pop().expect("ACK");
        assert_eq!(ty, FrameType::Ack);
        PlanAck::parse(&body).expect("ACK body")
    }

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

/// A FILE body for a regular file whose content hashes like `content`.
fn file_body(no: u64, path: &[u8], size: u64, chunks: u32, content: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    FileEntry {
        file_no: no,
        kind: EntryKind::File,
        mode: 0o640,
        mtime_sec: (MTIME / 1_000_000_000) as i64,
        mtime_nsec: 5,
        size,
        chunk_count: chunks,
        file_hash: *blake3::hash(content).as_bytes(),
        path,
        link_target: &[],
        held: false,
        extra: pfs_wire::files::FileExtra::default(),
    }
    .emit(&mut body);
    body
}

fn dir_body(no: u64, path: &[u8], mode: u32) -> Vec<u8> {
    let mut body = Vec::new();
    FileEntry {
        file_no: no,
        kind: EntryKind::Dir,
        mode,
        mtime_sec: (MTIME / 1_000_000_000) as i64,
        mtime_nsec: 5,
        size: 0,
        chunk_count: 0,
        file_hash: [0; 32],
        path,
        link_target: &[],
        held: false,
        extra: pfs_wire::files::FileExtra::default(),
    }
    .emit(&mut body);
    body
}

/// A CHUNKS body of `count` copies of one entry (`tag`, `hash`, `len`,
/// then `tail`): compresses to almost nothing inside a BATCH.
fn repeated(no: u64, count: u32, tag: u8, hash: &[u8; 32], len: u32, tail: &[u8]) -> Vec<u8> {
    let mut body = ChunksHeader { file_no: no, count }.emit().to_vec();
    for _ in 0..count {
        emit_entry_head(&mut body, tag, hash, len);
        body.extend_from_slice(tail);
    }
    body
}

/// `frame` (type, body) wrapped in a BATCH, as its bytes on the wire.
fn batched(ty: FrameType, body: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    put_frame(&mut raw, ty, 0, body);
    let mut f = Vec::new();
    put_frame(&mut f, FrameType::Batch, 0, &batch_of(&raw));
    f
}

fn limit_what(e: &SessionError) -> &'static str {
    match e {
        SessionError::Limit(LimitExceeded::Peer { what, .. }) => what,
        other => panic!("expected a peer limit, got {other}"),
    }
}

// ---------------------------------------------------------------------------
// Memory.

/// A FILE may not announce more chunks than bytes; and chunks that arrive
/// and must wait for REPAIR cost accounted memory, capped per session,
/// however many the FILE announced and however well they compress.
#[test]
fn declared_huge_files_cannot_grow_the_receivers_memory() {
    let fx = Fixture::new(64 << 20);
    let mut rx = fx.rx(FilesReceiverConfig::default());
    rx.handshake(0);
    let e = rx
        .send(FrameType::File, 0, &file_body(0, b"f", 100, u32::MAX, b""))
        .unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Files(FilesViolation::ChunkCount {
                chunks: u32::MAX,
                size: 100,
                ..
            }))
        ),
        "{e}"
    );

    // 2^32 - 1 one-byte chunks announced (a size that allows them), then
    // BATCH frames of KNOWN chunks the store does not hold: each is a hole
    // awaiting REPAIR. The session ends at its memory limit, long before
    // the frames stop coming.
    let cap = 1 << 20;
    let cfg = FilesReceiverConfig {
        max_session_memory: cap,
        ..FilesReceiverConfig::default()
    };
    let mut rx = fx.rx(cfg);
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_body(0, b"huge", 1 << 40, u32::MAX, b""))
        .expect("FILE");
    let unseen = *blake3::hash(b"never stored").as_bytes();
    let per_frame = 100_000u32;
    let frame = batched(
        FrameType::Chunks,
        &repeated(0, per_frame, tag::KNOWN, &unseen, 1, &[]),
    );
    assert!(
        frame.len() < 16 << 10,
        "a small frame on the wire: {}",
        frame.len()
    );
    let mut sent = 0u64;
    let err = loop {
        sent += u64::from(per_frame);
        assert!(sent < 10_000_000, "the memory limit never hit");
        if let Err(e) = rx.feed(&frame) {
            break e;
        }
    };
    assert!(limit_what(&err).starts_with("session memory"), "{err}");
    // The bound held: far fewer holes were kept than chunks arrived
    // (each costs at least 48 bytes, so `cap` bytes hold at most this many).
    assert!(
        sent * 48 > cap,
        "the limit was hit by the bound, not by the input running out"
    );
    assert_eq!(fx.store.stats().chunks, 0);
    drop(rx);
    fx.legit_transfer_works("after-memory");
}

// ---------------------------------------------------------------------------
// CPU.

/// REF entries with wrong hashes, each naming a large stored chunk, make
/// bounded work: one frame at most `max_frame_work` bytes hashed, one
/// session at most `max_unverified_bytes` of chunks that did not verify.
#[test]
fn wrong_hash_refs_cost_bounded_verification_work() {
    let fx = Fixture::new(64 << 20);
    let chunk = vec![9u8; 1 << 20];
    let loc = fx.stored(&chunk);
    let wrong = [0xee; 32];

    // One tiny BATCH naming 2,000 MiB of REFs: refused at 64 MiB of work.
    let cfg = FilesReceiverConfig {
        max_frame_work: 64 << 20,
        ..FilesReceiverConfig::default()
    };
    let mut rx = fx.rx(cfg);
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_body(0, b"f", 1 << 40, u32::MAX, b""))
        .expect("FILE");
    let frame = batched(
        FrameType::Chunks,
        &repeated(0, 2000, tag::REF, &wrong, loc.len, &loc.offset.to_le_bytes()),
    );
    assert!(frame.len() < 4 << 10, "{}", frame.len());
    let e = rx.feed(&frame).unwrap_err();
    assert!(limit_what(&e).contains("one frame"), "{e}");
    match e {
        SessionError::Limit(LimitExceeded::Peer { asked, limit, .. }) => {
            assert_eq!(limit, 64 << 20);
            // Refused at the first chunk past the limit (the BATCH's
            // decompression counts too): the work done was the limit, not
            // the 2,000 MiB asked for.
            assert!(asked > limit && asked <= limit + u64::from(loc.len), "{asked}");
        }
        other => panic!("{other}"),
    }
    drop(rx);

    // Frames under the frame limit: the session's chunks that fail their
    // hash are capped. 8 MiB allowed, 4 MiB per frame: the third ends it.
    let cfg = FilesReceiverConfig {
        max_unverified_bytes: 8 << 20,
        ..FilesReceiverConfig::default()
    };
    let mut rx = fx.rx(cfg);
    rx.handshake(0);
    rx.send(FrameType::File, 0, &file_body(0, b"g", 1 << 40, u32::MAX, b""))
        .expect("FILE");
    let four = repeated(0, 4, tag::REF, &wrong, loc.len, &loc.offset.to_le_bytes());
    rx.send(FrameType::Chunks, 0, &four).expect("4 MiB unverified");
    rx.send(FrameType::Chunks, 0, &four).expect("8 MiB unverified");
    let e = rx.send(FrameType::Chunks, 0, &four).unwrap_err();
    assert!(limit_what(&e).contains("did not match their hash"), "{e}");
    drop(rx);
    fx.legit_transfer_works("after-cpu");
}

// ---------------------------------------------------------------------------
// File descriptors.

/// Files waiting for REPAIR hold no descriptor: however many wait, the
/// session has at most the current file open; after REPAIR they all land.
#[test]
fn files_awaiting_repair_hold_no_descriptors() {
    let fx = Fixture::new(64 << 20);
    let mut rx = fx.rx(FilesReceiverConfig::default());
    rx.handshake(0);
    let files = 300u64;
    let content = |i: u64| format!("content of file {i}, sent by reference").into_bytes();
    for i in 0..files {
        let data = content(i);
        let name = format!("w{i}");
        rx.send(
            FrameType::File,
            0,
            &file_body(i, name.as_bytes(), data.len() as u64, 1, &data),
        )
        .expect("FILE");
        // KNOWN, but the store never had it: the file waits for REPAIR.
        let hash = *blake3::hash(&data).as_bytes();
        rx.send(
            FrameType::Chunks,
            0,
            &repeated(i, 1, tag::KNOWN, &hash, data.len() as u32, &[]),
        )
        .expect("CHUNKS");
        assert!(
            rx.host.open_files() <= 1,
            "file {i}: {} open",
            rx.host.open_files()
        );
    }
    rx.send(FrameType::FilesEnd, 0, &[]).expect("FILES_END");
    assert_eq!(rx.host.open_files(), 0, "every waiting file is parked");
    let naks: usize = rx
        .frames()
        .iter()
        .filter(|f| f.0 == FrameType::Nak)
        .map(|f| f.2.len() / 32)
        .sum();
    assert_eq!(naks as u64, files);
    let mut body = ChunksHeader {
        file_no: u64::MAX,
        count: files as u32,
    }
    .emit()
    .to_vec();
    for i in 0..files {
        let data = content(i);
        emit_entry_head(
            &mut body,
            tag::LITERAL,
            blake3::hash(&data).as_bytes(),
            data.len() as u32,
        );
        body.extend_from_slice(&data);
    }
    rx.send(FrameType::Repair, FLAG_LAST, &body).expect("REPAIR");
    let (r, messages) = report(rx.frames());
    assert_eq!(
        (r.files_written, r.files_failed, r.nak_chunks),
        (files, 0, files),
        "{messages}"
    );
    for i in 0..files {
        assert_eq!(
            fs::read(fx.dest_dir.join(format!("w{i}"))).expect("landed"),
            content(i)
        );
    }
    assert_eq!(rx.host.open_files(), 0);
    drop(rx);
    fx.legit_transfer_works("after-fds");
}

// ---------------------------------------------------------------------------
// Disk.

/// A PLAN reserves at most the session's share of the store, others can
/// still plan, and the reservation is released when the session ends
/// however it ends (here: the peer vanished, the core and host dropped).
#[test]
fn plan_reservations_are_capped_and_released_when_the_session_ends() {
    let capacity = 64 << 20;
    let fx = Fixture::new(capacity);
    let mut greedy = fx.rx(FilesReceiverConfig::default());
    let ack = greedy.handshake(60 << 20);
    assert_eq!(ack.reserved, capacity / 4, "25% of the store, not all it asked");
    assert!(fx.store.stats().used >= capacity / 4);
    // Another session plans while the greedy one holds its share.
    let mut other = fx.rx(FilesReceiverConfig::default());
    let ack = other.handshake(40 << 20);
    assert_eq!(ack.reserved, capacity / 4);
    drop(other);
    // The greedy peer disconnects: its reservation goes with its session.
    drop(greedy);
    assert_eq!(fx.store.stats().used, 0, "{:?}", fx.store.stats());
    fx.legit_transfer_works("after-disk");
    assert!(fx.store.stats().used < 4096);
}

// ---------------------------------------------------------------------------
// Destination modes.

/// A directory that was there before keeps its mode whatever the sender
/// asks (it is never widened); new directories are at most 0755.
#[test]
fn existing_directory_modes_are_not_widened() {
    let fx = Fixture::new(64 << 20);
    let private = fx.dest_dir.join("private");
    fs::create_dir(&private).expect("mkdir");
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).expect("chmod");
    let mut rx = fx.rx(FilesReceiverConfig::default());
    rx.handshake(4);
    rx.send(FrameType::File, 0, &dir_body(0, b"private", 0o777))
        .expect("dir");
    rx.send(FrameType::File, 0, &dir_body(1, b"fresh", 0o777))
        .expect("dir");
    rx.send(FrameType::File, 0, &file_body(2, b"private/x", 4, 1, b"data"))
        .expect("FILE");
    rx.send(FrameType::Chunks, 0, &literals_body(2, &[(b"data", b"data")]))
        .expect("CHUNKS");
    let (r, messages) = rx.end();
    assert_eq!((r.files_written, r.dirs, r.files_failed), (1, 2, 0), "{messages}");
    let mode = |p: &std::path::Path| fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode(&private), 0o700, "an existing directory is never widened");
    assert_eq!(mode(&fx.dest_dir.join("fresh")), 0o755, "new: 0777 & !0022");
    assert_eq!(fs::read(private.join("x")).expect("landed"), b"data");
}

// ---------------------------------------------------------------------------
// Deadlines.

/// A frame's declared length buys no time; its arrived bytes do, at the
/// minimum rate: a peer trickling a large frame loses the session when
/// the idle timeout is spent.
#[test]
fn a_large_declared_frame_earns_no_time_only_its_bytes_do() {
    let fx = Fixture::new(64 << 20);
    let cfg = FilesReceiverConfig {
        idle_timeout: Duration::from_secs(120),
        ..FilesReceiverConfig::default()
    };
    let mut rx = fx.rx(cfg);
    rx.handshake(0);
    let t0 = rx.now;
    assert_eq!(rx.core.poll_timeout(), Some(t0 + Duration::from_secs(120)));
    // The header of an 8 MB CHUNKS frame, then one byte: no allowance.
    let body = vec![0u8; 8_000_000];
    let mut frame = Vec::new();
    put_frame(&mut frame, FrameType::Chunks, 0, &body);
    rx.feed(&frame[..17]).expect("a partial frame");
    assert_eq!(rx.core.poll_timeout(), Some(t0 + Duration::from_secs(120)));
    // 3 MB of it arrived: 3 s earned (1 MB/s, the default minimum rate).
    rx.feed(&frame[17..3_000_000]).expect("more of it");
    assert_eq!(rx.core.poll_timeout(), Some(t0 + Duration::from_secs(123)));
    assert!(rx.core.handle_timeout(t0 + Duration::from_secs(123)).is_err());
}

/// A peer that sends FILES_END and never reads its NAKs does not hold the
/// session: the receiver's reply times out and the session ends.
#[test]
fn a_peer_that_never_reads_its_naks_loses_the_session() {
    never_reading_peer(false);
}

/// The same over a protected session: records have the same absolute write
/// deadline as plain writes (each write of records ends by the caller's
/// deadline, however many partial writes it takes).
#[test]
fn a_peer_that_never_reads_its_naks_loses_the_protected_session() {
    never_reading_peer(true);
}

fn never_reading_peer(protected: bool) {
    use pfs_session::files::receive_files;
    use pfs_transport::{Transport, UnixTransport};
    let fx = Fixture::new(64 << 20);
    let cfg = FilesReceiverConfig {
        write_timeout: Duration::from_millis(200),
        ..FilesReceiverConfig::default()
    };
    let (ours, theirs) = UnixTransport::pair().expect("socket pair");
    let (mut ours, theirs): (Box<dyn Transport>, Box<dyn Transport>) = if protected {
        let (a, b) = secure_pair(ours, theirs);
        (Box::new(a), Box::new(b))
    } else {
        (Box::new(ours), Box::new(theirs))
    };
    // Far more NAK bytes (32 each) than a socket buffer holds.
    let holes = 200_000u32;
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut t = theirs;
            receive_files(&mut t, ChunkIndex::Store(&fx.store), &fx.dest, &cfg)
        });
        let mut out = Vec::new();
        let mut hello = Vec::new();
        FilesHello {
            flags: 0,
            auth_method: 0,
            chunk_avg: 32 << 10,
            session_nonce: 7,
            remote_dir: b"",
            auth: &[],
        }
        .emit(&mut hello);
        put_frame(&mut out, FrameType::FilesHello, 0, &hello);
        put_frame(&mut out, FrameType::IndexRequest, 0, &0u64.to_le_bytes());
        let plan = Plan {
            entries: 1,
            files: 1,
            total_bytes: 0,
            literal_bytes: 0,
            chunks: 1,
            pending_bytes: 0,
        };
        put_frame(&mut out, FrameType::Plan, 0, &plan.emit());
        put_frame(
            &mut out,
            FrameType::File,
            0,
            &file_body(0, b"f", u64::from(holes), holes, b""),
        );
        // Distinct unseen hashes, one NAK each.
        let mut body = ChunksHeader {
            file_no: 0,
            count: holes,
        }
        .emit()
        .to_vec();
        for i in 0..holes {
            emit_entry_head(
                &mut body,
                tag::KNOWN,
                blake3::hash(&i.to_le_bytes()).as_bytes(),
                1,
            );
        }
        let mut raw = Vec::new();
        put_frame(&mut raw, FrameType::Chunks, 0, &body);
        put_frame(&mut out, FrameType::Batch, 0, &batch_of(&raw));
        put_frame(&mut out, FrameType::FilesEnd, 0, &[]);
        ours.write_all(&out).expect("the peer's frames");
        // ... and it never reads a byte.
        let e = receiver.join().expect("receiver thread").unwrap_err();
        assert!(
            matches!(&e, SessionError::Transport { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
            "{e}"
        );
    });
    drop(ours);
    fx.legit_transfer_works(if protected {
        "after-no-reader-protected"
    } else {
        "after-no-reader"
    });
}

/// A finished protected handshake over `(client, server)`.
fn secure_pair(
    client: pfs_transport::UnixTransport,
    mut server: pfs_transport::UnixTransport,
) -> (
    pfs_auth::SecureTransport<pfs_transport::UnixTransport>,
    pfs_auth::SecureTransport<pfs_transport::UnixTransport>,
) {
    use pfs_auth::{Cipher, ClientSecurity, Identity, Pin, ServerSecurity, Service};
    use std::sync::atomic::AtomicBool;
    let (cid, sid) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let ssec = ServerSecurity {
        identity: sid.clone(),
        psk: None,
        timeout: Duration::from_secs(10),
        record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
    };
    let csec = ClientSecurity {
        identity: cid,
        pin: Pin::Key(sid.public()),
        psk: None,
        cipher: Cipher::Aes256Gcm,
        rotate_log2: 32,
        timeout: Duration::from_secs(10),
    };
    std::thread::scope(|s| {
        let srv = s.spawn(move || {
            let no = AtomicBool::new(false);
            let head = pfs_auth::read_head(&mut server, Duration::from_secs(10), &no).unwrap();
            pfs_auth::accept(server, head, &ssec, &no)
                .unwrap()
                .admit()
                .unwrap()
        });
        let c = pfs_auth::connect(client, "pair", Service::Files, &csec).unwrap();
        (c, srv.join().unwrap())
    })
}
