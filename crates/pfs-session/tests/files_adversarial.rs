//! A hostile files sender against `receive_files` (docs/wire.md §10): frames
//! written by hand over a Unix socket pair, as a malicious or broken peer
//! would. Whatever arrives, the receiver must not panic, must not create
//! anything outside its destination root, must answer protocol violations
//! with an ERROR frame (or list refused entries in its report), and the
//! same store must serve a well-behaved session afterwards.

mod common;
use common::{batch_body, batch_of, literals_body};

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use pfs_files::{chunk_file, scan, ChunkParams, DestRoot, Excludes, WalkKind};
use pfs_session::files::{
    receive_files, send_files, ChunkIndex, FilesItem, FilesReceiverConfig, FilesReceiverOutcome,
    FilesSenderConfig, LocalPrepare,
};
use pfs_session::SessionError;
use pfs_store::{Durability, Store, StoreConfig};
use pfs_transport::{Transport, UnixTransport};
use pfs_wire::files::{
    emit_entry_head, parse_probe_reply, tag, ChunksHeader, EntryKind, FileEntry, FilesAccept, FilesHello,
    FilesReport, Plan, ProbeEntry, ProbeHead, FLAG_FILES_REPORT, FLAG_LAST, INDEX_REQUEST_LEN,
};
use pfs_wire::{put_frame, ErrorCode, ErrorFrame, FrameHeader, FrameType, FRAME_HEADER_LEN};

/// Longest any read in these tests may block.
const TIMEOUT: Duration = Duration::from_secs(20);

/// A store, a destination root, and an (empty) directory beside the
/// destination that nothing may ever write into.
struct Fixture {
    tmp: tempfile::TempDir,
    store: Store,
    dest_dir: PathBuf,
    dest: DestRoot,
    outside: PathBuf,
    src: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let dest_dir = tmp.path().join("dest");
        let outside = tmp.path().join("outside");
        let src = tmp.path().join("src");
        for d in [&dest_dir, &outside, &src] {
            fs::create_dir(d).expect("mkdir");
        }
        let opts = StoreConfig {
            capacity: 256 << 20,
            huge_dir: None,
            durability: Durability::None,
        };
        let store = Store::open(&tmp.path().join("store"), &opts).expect("open store");
        let dest = DestRoot::open(&dest_dir).expect("open destination");
        Fixture {
            tmp,
            store,
            dest_dir,
            dest,
            outside,
            src,
        }
    }

    /// Runs `receive_files` on one end of a socket pair while `peer` drives
    /// the other; returns both results. Fails the test if the receiver panics.
    fn session<R>(
        &self,
        peer: impl FnOnce(&mut Peer) -> R,
    ) -> (Result<FilesReceiverOutcome, SessionError>, R) {
        let (ours, theirs) = UnixTransport::pair().expect("socket pair");
        let cfg = FilesReceiverConfig {
            handshake_timeout: TIMEOUT,
            idle_timeout: TIMEOUT,
            ..FilesReceiverConfig::default()
        };
        thread::scope(|s| {
            let receiver = s.spawn(|| {
                // Owned here: the socket closes as soon as the receiver returns.
                let mut t = theirs;
                receive_files(&mut t, ChunkIndex::Store(&self.store), &self.dest, &cfg)
            });
            let mut p = Peer { t: ours };
            p.t.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
            let r = peer(&mut p);
            drop(p);
            let result = receiver
                .join()
                .unwrap_or_else(|_| panic!("the receiver panicked"));
            (result, r)
        })
    }

    /// Nothing was created outside the destination: the directory beside
    /// it is still empty, the temporary directory holds only what the
    /// fixture made, and no temporary file is left in the destination.
    fn assert_contained(&self) {
        let outside: Vec<_> = fs::read_dir(&self.outside).expect("read outside").collect();
        assert!(outside.is_empty(), "written outside the destination: {outside:?}");
        let mut beside: Vec<String> = fs::read_dir(self.tmp.path())
            .expect("read tmp")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        beside.sort();
        assert_eq!(beside, ["dest", "outside", "src", "store"]);
        let temps: Vec<_> = fs::read_dir(self.dest_dir.join(pfs_files::dest::TEMP_DIR))
            .map(|d| d.map(|e| e.expect("entry").path()).collect())
            .unwrap_or_default();
        assert!(temps.is_empty(), "temporary files left: {temps:?}");
        assert_eq!(self.store.verify_all(1), Vec::new(), "store damaged");
    }

    /// A well-behaved session (the real sender) on the same store works, and
    /// a second one finds the chunks in the store.
    fn assert_store_still_serves(&self, name: &str) {
        let root = self.src.join(name);
        fs::create_dir_all(root.join("sub")).expect("mkdir");
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        fs::write(root.join("sub/data.bin"), &data).expect("write");
        fs::write(root.join("small.txt"), b"well behaved").expect("write");
        let params = ChunkParams::default();
        let items: Vec<FilesItem> = scan(std::slice::from_ref(&root), &Excludes::none())
            .expect("scan")
            .entries
            .into_iter()
            .map(|e| {
                let recipe = matches!(e.kind, WalkKind::File { .. })
                    .then(|| chunk_file(&e.abs, &params).expect("chunk"));
                FilesItem::new(e, recipe)
            })
            .collect();
        for (round, remote) in ["", "again"].into_iter().enumerate() {
            let cfg = FilesSenderConfig {
                remote_dir: remote.as_bytes().to_vec(),
                dry_run: false,
                compress: None,
                chunk_avg: params.avg(),
                index_cache_dir: None,
                reply_timeout: TIMEOUT,
                session_nonce: 7,
                probe: true,
                probe_all: false,
                delete: None,
                checksum: false,
                bwlimit: None,
                preserve: Default::default(),
                sparse: true,
                stream_min: None,
                top_mtime_ns: None,
            };
            let mut items = items.clone();
            let (received, sent) = self.session(|p| {
                send_files(
                    &mut p.t,
                    &mut items,
                    &cfg,
                    &mut LocalPrepare::new(params, 1),
                    &mut |_| {},
                )
            });
            let received = received.expect("well-behaved session (receiver)");
            let sent = sent.expect("well-behaved session (sender)");
            let r = sent.report.expect("a report");
            assert_eq!(received.report.files_failed, 0, "{}", received.messages);
            assert_eq!(r.files_written, 2);
            if round == 1 {
                assert_eq!(r.matched_bytes, data.len() as u64 + 12, "found in the store");
            }
            let got = self.dest_dir.join(remote).join(name);
            assert_eq!(fs::read(got.join("sub/data.bin")).expect("read"), data);
            assert_eq!(fs::read(got.join("small.txt")).expect("read"), b"well behaved");
        }
        self.assert_contained();
    }
}

/// The hostile sender's end.
struct Peer {
    t: UnixTransport,
}

/// The report and its messages, owned.
struct Report {
    report: FilesReport<'static>,
    messages: String,
}

impl Peer {
    /// Sends one frame. Errors are returned, not fatal: the receiver may
    /// already have hung up on an earlier frame.
    fn send(&mut self, ty: FrameType, flags: u16, body: &[u8]) -> std::io::Result<()> {
        let mut f = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
        put_frame(&mut f, ty, flags, body);
        self.raw(&f)
    }

    fn raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.t.write_all(bytes).map(drop)
    }

    /// The next frame, or `None` once the receiver closed.
    fn frame(&mut self) -> Option<(FrameHeader, Vec<u8>)> {
        let mut h = [0u8; FRAME_HEADER_LEN];
        self.t.read_exact(&mut h).ok()?;
        let hdr = FrameHeader::parse(&h).expect("the receiver sends valid frame headers");
        let mut body = vec![0u8; hdr.length as usize];
        self.t.read_exact(&mut body).expect("frame body");
        Some((hdr, body))
    }

    fn expect(&mut self, ty: FrameType) -> (FrameHeader, Vec<u8>) {
        let (h, body) = self
            .frame()
            .unwrap_or_else(|| panic!("receiver closed; wanted {}", ty.name()));
        if h.frame_type == FrameType::Error {
            let e = ErrorFrame::parse(&body).expect("ERROR body");
            panic!("receiver sent ERROR {}: {}", e.code, e.message);
        }
        assert_eq!(h.frame_type, ty, "unexpected frame from the receiver");
        (h, body)
    }

    /// Reads until the receiver's ERROR frame; returns its code and message.
    fn error(&mut self) -> (u16, String) {
        while let Some((h, body)) = self.frame() {
            if h.frame_type == FrameType::Error {
                let e = ErrorFrame::parse(&body).expect("ERROR body");
                return (e.code, e.message.to_string());
            }
        }
        panic!("the receiver closed without an ERROR frame");
    }

    /// FILES_HELLO … ACK, with `remote_dir` and a plan of `literal` new bytes.
    fn handshake(&mut self, remote_dir: &[u8], literal: u64) -> FilesAccept {
        self.hello(remote_dir).expect("send FILES_HELLO");
        let (_, body) = self.expect(FrameType::FilesAccept);
        let accept = FilesAccept::parse(&body).expect("FILES_ACCEPT");
        self.send(
            FrameType::IndexRequest,
            0,
            &0u64.to_le_bytes()[..INDEX_REQUEST_LEN],
        )
        .expect("send INDEX_REQUEST");
        // INDEX frames, alone or inside zstd BATCH frames, up to the LAST one.
        'index: loop {
            let (h, body) = self.frame().expect("receiver closed during INDEX");
            match h.frame_type {
                FrameType::Index if h.flags & FLAG_LAST != 0 => break,
                FrameType::Index => {}
                FrameType::Batch => {
                    let (raw_len, z) = pfs_wire::files::parse_batch(&body).expect("BATCH body");
                    let raw = zstd::bulk::decompress(z, raw_len as usize).expect("BATCH decompresses");
                    let mut rest = &raw[..];
                    while !rest.is_empty() {
                        let (f, used) = pfs_wire::Frame::parse(rest).expect("frame in BATCH");
                        assert_eq!(f.header.frame_type, FrameType::Index);
                        if f.header.flags & FLAG_LAST != 0 {
                            break 'index;
                        }
                        rest = &rest[used..];
                    }
                }
                other => panic!("unexpected {} during INDEX", other.name()),
            }
        }
        let plan = Plan {
            entries: 1,
            files: 1,
            total_bytes: literal,
            literal_bytes: literal,
            chunks: 1,
            pending_bytes: 0,
        };
        self.send(FrameType::Plan, 0, &plan.emit()).expect("send PLAN");
        self.expect(FrameType::Ack);
        accept
    }

    fn hello(&mut self, remote_dir: &[u8]) -> std::io::Result<()> {
        let mut body = Vec::new();
        FilesHello {
            flags: 0,
            auth_method: 0,
            chunk_avg: 32 << 10,
            session_nonce: 1,
            remote_dir,
            auth: &[],
        }
        .emit(&mut body);
        self.send(FrameType::FilesHello, 0, &body)
    }

    /// FILE for a regular file of `data` in one chunk (none if empty).
    fn file(&mut self, no: u64, path: &[u8], data: &[u8], mode: u32) -> std::io::Result<()> {
        self.file_with_hash(
            no,
            path,
            data.len() as u64,
            u32::from(!data.is_empty()),
            *blake3::hash(data).as_bytes(),
            mode,
        )
    }

    fn file_with_hash(
        &mut self,
        no: u64,
        path: &[u8],
        size: u64,
        chunk_count: u32,
        file_hash: [u8; 32],
        mode: u32,
    ) -> std::io::Result<()> {
        let body = file_body(
            no,
            EntryKind::File,
            path,
            &[],
            (size, chunk_count, file_hash),
            mode,
        );
        self.send(FrameType::File, 0, &body)
    }

    fn entry(&mut self, no: u64, kind: EntryKind, path: &[u8], target: &[u8]) -> std::io::Result<()> {
        let body = file_body(no, kind, path, target, (0, 0, [0; 32]), 0o755);
        self.send(FrameType::File, 0, &body)
    }

    /// CHUNKS for file `no`: one LITERAL entry per piece (hash of `hash_of`, bytes of the piece).
    fn literals(&mut self, no: u64, pieces: &[(&[u8], &[u8])]) -> std::io::Result<()> {
        self.send(FrameType::Chunks, 0, &literals_body(no, pieces))
    }

    /// FILE and one LITERAL chunk holding all of `data`.
    fn whole_file(&mut self, no: u64, path: &[u8], data: &[u8]) -> std::io::Result<()> {
        self.file(no, path, data, 0o644)?;
        self.literals(no, &[(data, data)])
    }

    /// FILES_END, answering no NAK; the receiver's report.
    fn end(&mut self) -> Report {
        self.send(FrameType::FilesEnd, 0, &[]).expect("send FILES_END");
        let (h, body) = self.expect(FrameType::FilesEnd);
        assert_eq!(h.flags, FLAG_FILES_REPORT);
        let r = FilesReport::parse(&body).expect("report");
        Report {
            messages: r.messages.to_string(),
            report: FilesReport { messages: "", ..r },
        }
    }
}

/// A FILE body; `content` is (size, chunk_count, file_hash).
fn file_body(
    no: u64,
    kind: EntryKind,
    path: &[u8],
    link_target: &[u8],
    (size, chunk_count, file_hash): (u64, u32, [u8; 32]),
    mode: u32,
) -> Vec<u8> {
    let mut body = Vec::new();
    FileEntry {
        file_no: no,
        kind,
        mode,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        size,
        chunk_count,
        file_hash,
        path,
        link_target,
        held: false,
        extra: pfs_wire::files::FileExtra::default(),
    }
    .emit(&mut body);
    body
}

/// FILE and CHUNKS frames of a one-chunk file, as they travel.
fn file_frames(no: u64, path: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let content = (data.len() as u64, 1, *blake3::hash(data).as_bytes());
    put_frame(
        &mut out,
        FrameType::File,
        0,
        &file_body(no, EntryKind::File, path, &[], content, 0o644),
    );
    put_frame(
        &mut out,
        FrameType::Chunks,
        0,
        &literals_body(no, &[(data, data)]),
    );
    out
}

/// The error a rejected session ended with.
fn rejected(result: Result<FilesReceiverOutcome, SessionError>) -> (ErrorCode, String) {
    match result {
        Err(SessionError::Violation(v)) => (v.code(), v.to_string()),
        Err(SessionError::Rejected(r)) => (r.code(), r.to_string()),
        Err(SessionError::Malformed { error, .. }) => (ErrorCode::BadFrame, error.to_string()),
        Err(other) => panic!("expected a rejection, got {other}"),
        Ok(o) => panic!("expected a rejection, the session succeeded: {:?}", o.report),
    }
}

// ---------------------------------------------------------------------------

#[test]
fn hostile_paths_are_refused_and_symlinks_stored_but_never_written_through() {
    let fx = Fixture::new();
    // Planted in the destination by someone else: a link out of it.
    symlink(&fx.outside, fx.dest_dir.join("link")).expect("plant symlink");
    let abs_evil = [fx.outside.as_os_str().as_bytes(), b"/evil"].concat();
    let payload = b"evil payload".as_slice();
    let good = b"a good file".as_slice();
    let (result, report) = fx.session(|p| {
        p.handshake(b"", 4096);
        let mut no = 0;
        let mut next = || {
            no += 1;
            no - 1
        };
        let bad_files: [&[u8]; 7] = [
            b"../evil",
            &abs_evil,
            b"a/../../evil",
            b"a//b",
            b".",
            b"a\0b",
            b"link/x",
        ];
        for path in bad_files {
            p.whole_file(next(), path, payload).expect("send");
        }
        // Symlinks whose targets leave the root, absolute or relative:
        // stored as they are (rsync does), never followed...
        for (path, target) in [
            (&b"esc"[..], &b"../../etc"[..]),
            (b"abs", fx.outside.as_os_str().as_bytes()),
            (b"deep/x/up", b"../../../x"),
            (b"deep/y", b"z/../../.."),
            (b"link/l2", b"x"),
        ] {
            p.entry(next(), EntryKind::Symlink, path, target).expect("send");
        }
        // ...so entries beneath one of them fail and nothing lands outside.
        p.whole_file(next(), b"abs/evil2", payload).expect("send");
        p.entry(next(), EntryKind::Dir, b"abs/sub", &[]).expect("send");
        p.entry(next(), EntryKind::Symlink, b"abs/l3", b"x")
            .expect("send");
        // A directory through the planted link.
        p.entry(next(), EntryKind::Dir, b"link/sub", &[]).expect("send");
        // A literal whose bytes do not match its hash fails that file.
        let n = next();
        p.file(n, b"lying-chunk", good, 0o644).expect("send");
        p.literals(n, &[(b"something else", good)]).expect("send");
        // Chunks that match but do not make the announced file.
        let n = next();
        p.file_with_hash(n, b"lying-file", good.len() as u64, 1, [9; 32], 0o644)
            .expect("send");
        p.literals(n, &[(good, good)]).expect("send");
        // Setuid is not granted; the file lands with 0755.
        let n = next();
        p.file(n, b"good/ok.bin", good, 0o4755).expect("send");
        p.literals(n, &[(good, good)]).expect("send");
        // A file over the planted link replaces the link itself.
        p.whole_file(next(), b"link", good).expect("send");
        p.end()
    });
    let outcome = result.expect("refused entries do not end the session");
    let r = report.report;
    assert_eq!(r.files_written, 2, "{}", report.messages);
    assert_eq!(r.symlinks, 4, "{}", report.messages);
    assert_eq!(r.files_failed, 14, "{}", report.messages);
    assert_eq!(outcome.report.files_failed, 14);
    assert_eq!(outcome.messages, report.messages);
    for needle in [
        "../evil: refused",
        "/evil: refused",
        "a/../../evil: refused",
        "a//b: refused",
        "abs/evil2: ",
        "abs/sub: ",
        "abs/l3: ",
        "link/x: ",
        "link/l2: ",
        "link/sub: ",
        "lying-chunk: a literal chunk does not match its hash",
        "lying-file: the chunks received do not make up the file hash",
    ] {
        assert!(
            report.messages.lines().any(|l| l.contains(needle)),
            "{needle:?} not in the report:\n{}",
            report.messages
        );
    }
    assert!(!fx.dest_dir.join("lying-chunk").exists());
    assert!(!fx.dest_dir.join("lying-file").exists());
    let ok = fs::metadata(fx.dest_dir.join("good/ok.bin")).expect("good/ok.bin");
    assert_eq!(ok.mode() & 0o7777, 0o755);
    assert_eq!(fs::read(fx.dest_dir.join("good/ok.bin")).expect("read"), good);
    let link = fs::symlink_metadata(fx.dest_dir.join("link")).expect("link");
    assert!(
        link.is_file(),
        "the planted link was replaced by the file, not written through"
    );
    for (name, target) in [
        ("esc", &b"../../etc"[..]),
        ("abs", fx.outside.as_os_str().as_bytes()),
        ("deep/x/up", b"../../../x"),
        ("deep/y", b"z/../../.."),
    ] {
        let got = fs::read_link(fx.dest_dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.as_os_str().as_bytes(), target, "{name}");
    }
    fx.assert_contained();
    fx.assert_store_still_serves("after-paths");
}

/// A PROBE body asking about `paths` (size 12, mtime 0, key zero), from entry `first`.
fn probe_body(first: u64, paths: &[&[u8]]) -> Vec<u8> {
    let mut body = ProbeHead {
        first_no: first,
        count: paths.len() as u32,
    }
    .emit()
    .to_vec();
    for path in paths {
        ProbeEntry {
            size: 12,
            mtime_sec: 0,
            mtime_nsec: 0,
            key: [0; 8],
            path,
        }
        .emit(&mut body);
    }
    body
}

#[test]
fn hostile_probes_and_held_files_are_refused_or_fail_alone() {
    let fx = Fixture::new();
    // Hostile paths are simply not held; the answer comes in order.
    let (result, bits) = fx.session(|p| {
        p.hello(b"").expect("send FILES_HELLO");
        p.expect(FrameType::FilesAccept);
        let abs = fx.outside.join("x");
        let paths: [&[u8]; 4] = [b"../escape", abs.as_os_str().as_bytes(), b"a//b", b"fine/missing"];
        p.send(FrameType::Probe, FLAG_LAST, &probe_body(0, &paths))
            .expect("send PROBE");
        let (h, body) = p.expect(FrameType::ProbeReply);
        assert_eq!(h.flags, FLAG_LAST);
        let (head, bits) = parse_probe_reply(&body).expect("PROBE_REPLY");
        assert_eq!((head.first_no, head.count), (0, 4));
        bits.to_vec()
    });
    assert_eq!(bits, [0]);
    // The sender closed after the probe: a session without files.
    assert!(result.is_ok(), "{result:?}");
    // PROBE entries out of order, and a FILE smuggled into a BATCH of probes.
    let out_of_order = probe_body(5, &[b"a"]);
    let mut mixed = Vec::new();
    put_frame(&mut mixed, FrameType::Probe, 0, &probe_body(0, &[b"a"]));
    put_frame(
        &mut mixed,
        FrameType::File,
        0,
        &file_body(0, EntryKind::Dir, b"d", &[], (0, 0, [0; 32]), 0o755),
    );
    for (ty, body) in [
        (FrameType::Probe, out_of_order),
        (FrameType::Batch, batch_of(&mixed)),
    ] {
        let (result, (code, _)) = fx.session(|p| {
            p.hello(b"").expect("send FILES_HELLO");
            p.expect(FrameType::FilesAccept);
            let _ = p.send(ty, 0, &body);
            p.error()
        });
        let (rcode, message) = rejected(result);
        assert_eq!(rcode, ErrorCode::Protocol, "{message}");
        assert_eq!(code, ErrorCode::Protocol as u16);
    }
    // FILE marked HELD for content the destination does not have: that
    // entry fails with a reason, the session goes on, nothing is written.
    let (result, report) = fx.session(|p| {
        p.handshake(b"", 0);
        let mut body = Vec::new();
        FileEntry {
            file_no: 0,
            kind: EntryKind::File,
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            size: 12,
            chunk_count: 0,
            file_hash: *blake3::hash(b"well behaved").as_bytes(),
            path: b"claimed.txt",
            link_target: &[],
            held: true,
            extra: pfs_wire::files::FileExtra::default(),
        }
        .emit(&mut body);
        p.send(FrameType::File, 0, &body).expect("send FILE");
        p.whole_file(1, b"real.txt", b"real").expect("send FILE");
        p.end()
    });
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(report.report.files_failed, 1);
    assert_eq!(report.report.files_written, 1);
    assert!(report.messages.contains("claimed.txt"), "{}", report.messages);
    assert!(!fx.dest_dir.join("claimed.txt").exists());
    assert_eq!(fs::read(fx.dest_dir.join("real.txt")).expect("read"), b"real");
    fx.assert_contained();
    fx.assert_store_still_serves("after-probes");
}

#[test]
fn remote_dir_that_escapes_is_refused() {
    let fx = Fixture::new();
    let abs = fx.outside.as_os_str().as_bytes().to_vec();
    for dir in [&b"../up"[..], &abs, b"a/../..", b"a//b", b"x\0y"] {
        let (result, (code, _)) = fx.session(|p| {
            p.hello(dir).expect("send FILES_HELLO");
            p.error()
        });
        let (rcode, message) = rejected(result);
        assert_eq!(rcode, ErrorCode::Protocol, "{message}");
        assert_eq!(code, ErrorCode::Protocol as u16);
    }
    fx.assert_contained();
    fx.assert_store_still_serves("after-remote-dir");
}

#[test]
fn descriptor_beyond_the_store_ends_the_session_out_of_bounds() {
    let fx = Fixture::new();
    let data = vec![7u8; 1000];
    let hash = *blake3::hash(&data).as_bytes();
    for offset in [1u64 << 40, 255 << 20, u64::MAX - 100] {
        let (result, (code, message)) = fx.session(|p| {
            p.handshake(b"", 0);
            p.file(0, b"f", &data, 0o644).expect("send FILE");
            let mut body = ChunksHeader { file_no: 0, count: 1 }.emit().to_vec();
            emit_entry_head(&mut body, tag::REF, &hash, data.len() as u32);
            body.extend_from_slice(&offset.to_le_bytes());
            let _ = p.send(FrameType::Chunks, 0, &body);
            p.error()
        });
        let (rcode, _) = rejected(result);
        // An offset whose end overflows u64 does not even decode.
        let want = if offset.checked_add(1000).is_none() {
            ErrorCode::BadFrame
        } else {
            ErrorCode::OutOfBounds
        };
        assert_eq!(rcode, want, "offset {offset}: {message}");
        assert_eq!(code, want as u16, "offset {offset}: {message}");
        assert!(!fx.dest_dir.join("f").exists());
    }
    // A KNOWN chunk the store does not hold, never repaired: the file waits,
    // the sender vanishes, nothing lands.
    let (result, ()) = fx.session(|p| {
        p.handshake(b"", 0);
        p.file(0, b"k", &data, 0o644).expect("send FILE");
        let mut body = ChunksHeader { file_no: 0, count: 1 }.emit().to_vec();
        emit_entry_head(&mut body, tag::KNOWN, &hash, data.len() as u32);
        p.send(FrameType::Chunks, 0, &body).expect("send CHUNKS");
        p.send(FrameType::FilesEnd, 0, &[]).expect("send FILES_END");
        let (_, nak) = p.expect(FrameType::Nak);
        assert_eq!(nak, hash, "the missing chunk is NAKed");
    });
    assert!(result.is_err(), "a sender that never repairs cannot finish");
    assert!(!fx.dest_dir.join("k").exists());
    fx.assert_contained();
    fx.assert_store_still_serves("after-bounds");
}

#[test]
fn chunks_that_do_not_fit_their_file_are_protocol_errors() {
    let fx = Fixture::new();
    let data = b"0123456789".as_slice();
    type Attack = fn(&mut Peer, &[u8]);
    let attacks: [(&str, Attack); 6] = [
        ("CHUNKS for another file", |p, d| {
            let _ = p.file(0, b"f", d, 0o644);
            let _ = p.literals(1, &[(d, d)]);
        }),
        ("more bytes than the FILE size", |p, d| {
            let _ = p.file_with_hash(0, b"f", 5, 1, *blake3::hash(d).as_bytes(), 0o644);
            let _ = p.literals(0, &[(d, d)]);
        }),
        ("more chunks than announced", |p, d| {
            let _ = p.file_with_hash(0, b"f", 20, 1, [0; 32], 0o644);
            let _ = p.literals(0, &[(d, d), (d, d)]);
        }),
        ("the next FILE before this one is complete", |p, d| {
            let _ = p.file_with_hash(0, b"f", 20, 2, [0; 32], 0o644);
            let _ = p.literals(0, &[(d, d)]);
            let _ = p.whole_file(1, b"g", d);
        }),
        ("FILE numbers out of order", |p, d| {
            let _ = p.whole_file(5, b"f", d);
        }),
        ("CHUNKS before any FILE", |p, d| {
            let _ = p.literals(0, &[(d, d)]);
        }),
    ];
    for (what, attack) in attacks {
        let (result, (code, message)) = fx.session(|p| {
            p.handshake(b"", 64);
            attack(p, data);
            p.error()
        });
        let (rcode, _) = rejected(result);
        assert_eq!(rcode, ErrorCode::Protocol, "{what}: {message}");
        assert_eq!(code, ErrorCode::Protocol as u16, "{what}: {message}");
        assert!(!fx.dest_dir.join("f").exists(), "{what}");
        assert!(!fx.dest_dir.join("g").exists(), "{what}");
    }
    fx.assert_contained();
    fx.assert_store_still_serves("after-chunks");
}

#[test]
fn garbage_and_truncated_frames_end_the_session_cleanly() {
    let fx = Fixture::new();
    let data = vec![3u8; 5000];
    // Garbage instead of FILES_HELLO, and garbage in the middle of the stream.
    let (result, (code, _)) = fx.session(|p| {
        let _ = p.raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        p.error()
    });
    rejected(result);
    assert_eq!(code, ErrorCode::BadFrame as u16);
    let (result, (code, _)) = fx.session(|p| {
        p.handshake(b"", 5000);
        let _ = p.file(0, b"f", &data, 0o644);
        let _ = p.raw(&[0xa5; 64]);
        p.error()
    });
    rejected(result);
    assert_eq!(code, ErrorCode::BadFrame as u16);
    // A CHUNKS body whose table is cut short.
    let (result, (code, _)) = fx.session(|p| {
        p.handshake(b"", 5000);
        let _ = p.file(0, b"f", &data, 0o644);
        let mut body = ChunksHeader { file_no: 0, count: 2 }.emit().to_vec();
        emit_entry_head(
            &mut body,
            tag::LITERAL,
            blake3::hash(&data).as_bytes(),
            data.len() as u32,
        );
        body.extend_from_slice(&data[..100]);
        let _ = p.send(FrameType::Chunks, 0, &body);
        p.error()
    });
    rejected(result);
    assert_eq!(code, ErrorCode::BadFrame as u16);
    // A FILE body that lies about its path length.
    let (result, (code, _)) = fx.session(|p| {
        p.handshake(b"", 5000);
        let mut body = Vec::new();
        FileEntry {
            file_no: 0,
            kind: EntryKind::File,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            size: 1,
            chunk_count: 1,
            file_hash: [0; 32],
            path: b"f",
            link_target: &[],
            held: false,
            extra: pfs_wire::files::FileExtra::default(),
        }
        .emit(&mut body);
        body[2] = 200;
        let _ = p.send(FrameType::File, 0, &body);
        p.error()
    });
    rejected(result);
    assert_eq!(code, ErrorCode::BadFrame as u16);
    // Frames cut off by the sender vanishing: in the header, in a body,
    // between the chunks of a file.
    type Cut = fn(&mut Peer, &[u8]);
    let cuts: [(&str, Cut); 4] = [
        ("half a header", |p, _| {
            let mut f = Vec::new();
            put_frame(&mut f, FrameType::File, 0, &[0; 100]);
            let _ = p.raw(&f[..7]);
        }),
        ("half a FILE body", |p, _| {
            let mut f = Vec::new();
            put_frame(&mut f, FrameType::File, 0, &[0; 100]);
            let _ = p.raw(&f[..FRAME_HEADER_LEN + 40]);
        }),
        ("half a CHUNKS body", |p, d| {
            let _ = p.file(0, b"f", d, 0o644);
            let mut body = ChunksHeader { file_no: 0, count: 1 }.emit().to_vec();
            emit_entry_head(
                &mut body,
                tag::LITERAL,
                blake3::hash(d).as_bytes(),
                d.len() as u32,
            );
            body.extend_from_slice(d);
            let mut f = Vec::new();
            put_frame(&mut f, FrameType::Chunks, 0, &body);
            let _ = p.raw(&f[..f.len() / 2]);
        }),
        ("between chunks of a file", |p, d| {
            let _ = p.file_with_hash(0, b"f", 2 * d.len() as u64, 2, [0; 32], 0o644);
            let _ = p.literals(0, &[(d, d)]);
        }),
    ];
    for (what, cut) in cuts {
        let (result, ()) = fx.session(|p| {
            p.handshake(b"", 10_000);
            cut(p, &data);
            // Then the sender is gone.
        });
        match result {
            Err(SessionError::PeerClosed { .. } | SessionError::Transport { .. }) => {}
            other => panic!("{what}: expected the peer-closed error, got {other:?}"),
        }
        assert!(!fx.dest_dir.join("f").exists(), "{what}");
    }
    fx.assert_contained();
    fx.assert_store_still_serves("after-garbage");
}

#[test]
fn hostile_batches_are_bounded_and_checked() {
    let fx = Fixture::new();
    let good = b"batched and fine".as_slice();
    // Entries inside a BATCH get the same checks as loose ones.
    let (result, report) = fx.session(|p| {
        p.handshake(b"", 4096);
        let mut inner = file_frames(0, b"../evil", good);
        inner.extend(file_frames(
            1,
            &[fx.outside.as_os_str().as_bytes(), b"/evil"].concat(),
            good,
        ));
        inner.extend(file_frames(2, b"in/batch.txt", good));
        p.send(FrameType::Batch, 0, &batch_of(&inner))
            .expect("send BATCH");
        p.end()
    });
    result.expect("refused entries do not end the session");
    assert_eq!(report.report.files_failed, 2, "{}", report.messages);
    assert_eq!(report.report.files_written, 1, "{}", report.messages);
    assert_eq!(fs::read(fx.dest_dir.join("in/batch.txt")).expect("read"), good);

    let one_file = file_frames(0, b"f", good);
    let mut nested = Vec::new();
    put_frame(&mut nested, FrameType::Batch, 0, &batch_of(&one_file));
    let mut end_inside = Vec::new();
    put_frame(&mut end_inside, FrameType::FilesEnd, 0, &[]);
    end_inside.extend_from_slice(&one_file);
    let bomb = zstd::bulk::compress(&vec![0u8; 4 << 20], 3).expect("zstd");
    let cases: [(&str, Vec<u8>, ErrorCode); 7] = [
        (
            "raw length over the receiver's limit",
            batch_body(64 << 20, &zstd::bulk::compress(&one_file, 3).expect("zstd")),
            ErrorCode::Limit,
        ),
        (
            "decompresses to more than stated",
            batch_body(100, &bomb),
            ErrorCode::BadFrame,
        ),
        (
            "decompresses to less than stated",
            batch_body(1 << 20, &bomb[..bomb.len() / 2]),
            ErrorCode::BadFrame,
        ),
        ("not zstd", batch_body(100, &[0xa5; 60]), ErrorCode::BadFrame),
        ("a BATCH inside a BATCH", batch_of(&nested), ErrorCode::Protocol),
        (
            "FILES_END inside a BATCH",
            batch_of(&end_inside),
            ErrorCode::Protocol,
        ),
        (
            "an inner frame cut short",
            batch_of(&one_file[..one_file.len() - 5]),
            ErrorCode::BadFrame,
        ),
    ];
    for (what, body, want) in cases {
        let (result, (code, message)) = fx.session(|p| {
            p.handshake(b"", 4096);
            let _ = p.send(FrameType::Batch, 0, &body);
            p.error()
        });
        let (rcode, _) = rejected(result);
        assert_eq!(rcode, want, "{what}: {message}");
        assert_eq!(code, want as u16, "{what}: {message}");
        assert!(!fx.dest_dir.join("f").exists(), "{what}");
    }
    fx.assert_contained();
    fx.assert_store_still_serves("after-batches");
}
