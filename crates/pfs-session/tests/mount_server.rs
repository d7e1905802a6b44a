//! The server side of mount sessions (docs/wire.md §12), driven by a
//! client written by hand from the spec: over a Unix socket pair against
//! `serve_mount`, and over TCP loopback against a real `serve_files` loop
//! (dispatch, rights, hostile clients beside a well-behaved one).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime};

use pfs_auth::{AuthorizedKeys, Cipher, ClientSecurity, Identity, Pin, SecureError, ServerSecurity, Service};
use pfs_files::{chunk_file, ChunkParams, DestRoot};
use pfs_session::mount::{serve_mount, MountRecipes, MountServerConfig, MountServerOutcome};
use pfs_session::{
    serve_files, Admission, FilesPlaces, FilesSessionOutcome, Keeping, ServerConfig, ServerEvent,
    SessionError,
};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport, Transport, UnixTransport};
use pfs_wire::mount::{
    parse_data, parse_fetch, parse_list, parse_recipe, DataEntry, FetchRun, Hash, ListKind, MountAccept,
    MountHello, RecipeAsk, ReqHead, ServeStatus, FLAG_LAST,
};
use pfs_wire::{put_frame, ErrorCode, ErrorFrame, FrameHeader, FrameType, FRAME_HEADER_LEN};

/// Longest any read in these tests may block.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A LIST entry, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: ListKind,
    path: String,
    link: String,
    size: u64,
    mode: u32,
}

/// A RECIPE answer.
#[derive(Debug, Default)]
struct Answer {
    chunks: Vec<(u32, Hash)>,
    frames: usize,
    /// Entries of each frame.
    counts: Vec<usize>,
    gone: bool,
}

/// A mount client speaking §12 by hand.
struct Client {
    t: Box<dyn Transport>,
}

impl Client {
    fn new(t: impl Transport + 'static) -> Self {
        let mut t: Box<dyn Transport> = Box::new(t);
        t.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
        Self { t }
    }

    fn send(&mut self, ty: FrameType, body: &[u8]) {
        let mut f = Vec::new();
        put_frame(&mut f, ty, 0, body);
        self.raw(&f);
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.t.write_all(bytes).expect("client write");
    }

    /// The next frame; `None` at end of stream.
    fn frame(&mut self) -> Option<(FrameHeader, Vec<u8>)> {
        let mut head = [0u8; FRAME_HEADER_LEN];
        match self.t.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) => panic!("client read: {e}"),
        }
        let h = FrameHeader::parse(&head).expect("server frame header");
        let mut body = vec![0u8; h.length as usize];
        self.t.read_exact(&mut body).expect("server frame body");
        Some((h, body))
    }

    fn expect(&mut self, ty: FrameType) -> (FrameHeader, Vec<u8>) {
        let (h, body) = self.frame().expect("a frame");
        if h.frame_type == FrameType::Error && ty != FrameType::Error {
            let e = ErrorFrame::parse(&body).expect("error frame");
            panic!("expected {}, got ERROR {}: {}", ty.name(), e.code, e.message);
        }
        assert_eq!(h.frame_type, ty, "frame type");
        (h, body)
    }

    /// The ERROR that ends the session, then end of stream.
    fn error(&mut self) -> (u16, String) {
        let (_, body) = self.expect(FrameType::Error);
        let e = ErrorFrame::parse(&body).expect("error frame");
        (e.code, e.message.to_string())
    }

    fn hello_with(&mut self, dir: &str, max_entries: u32, max_data_body: u32) {
        let body = MountHello {
            max_entries,
            max_data_body,
            session_nonce: 0x5eed,
            dir: dir.as_bytes(),
        }
        .emit();
        self.send(FrameType::MountHello, &body);
    }

    /// MOUNT_HELLO for `dir`, then MOUNT_ACCEPT and the listing.
    fn mount(&mut self, dir: &str, max_data_body: u32) -> (MountAccept, Vec<Entry>) {
        self.hello_with(dir, 1 << 20, max_data_body);
        let (_, body) = self.expect(FrameType::MountAccept);
        let accept = MountAccept::parse(&body).expect("MOUNT_ACCEPT");
        let mut entries = Vec::new();
        loop {
            let (h, body) = self.expect(FrameType::List);
            assert!(body.len() <= 65536);
            for e in parse_list(&body) {
                let e = e.expect("LIST entry");
                entries.push(Entry {
                    kind: e.kind,
                    path: String::from_utf8(e.path.to_vec()).expect("utf-8"),
                    link: String::from_utf8(e.link.to_vec()).expect("utf-8"),
                    size: e.size,
                    mode: e.mode,
                });
            }
            if h.flags & FLAG_LAST != 0 {
                break;
            }
        }
        assert_eq!(entries.len() as u64, accept.entries);
        (accept, entries)
    }

    fn recipe(&mut self, req: u32, entry: u64) -> Answer {
        self.send(FrameType::RecipeAsk, &RecipeAsk { req, entry }.emit());
        let mut a = Answer::default();
        loop {
            let (h, body) = self.expect(FrameType::Recipe);
            let (head, entries) = parse_recipe(&body).expect("RECIPE");
            assert_eq!(head.req, req);
            a.frames += 1;
            a.counts.push(entries.len());
            assert!(entries.len() <= 1819);
            if head.status == ServeStatus::Gone {
                assert_ne!(h.flags & FLAG_LAST, 0, "GONE is the last frame");
                a.gone = true;
                return a;
            }
            assert_eq!(head.first, a.chunks.len() as u64, "first continues the recipe");
            a.chunks.extend(entries.map(|(l, h)| (l, *h)));
            if h.flags & FLAG_LAST != 0 {
                return a;
            }
        }
    }

    fn send_fetch(&mut self, req: u32, runs: &[FetchRun]) {
        let mut body = ReqHead {
            req,
            count: runs.len() as u32,
        }
        .emit()
        .to_vec();
        for r in runs {
            r.emit_into(&mut body);
        }
        assert!(parse_fetch(&body).is_ok());
        self.send(FrameType::Fetch, &body);
    }

    /// FETCH `runs`; the chunks in order (`None`: GONE) and the DATA frames' body sizes.
    fn fetch(&mut self, req: u32, runs: &[FetchRun]) -> (Vec<Option<Vec<u8>>>, Vec<usize>) {
        self.send_fetch(req, runs);
        let mut chunks = Vec::new();
        let mut sizes = Vec::new();
        loop {
            let (h, body) = self.expect(FrameType::Data);
            sizes.push(body.len());
            let (head, it) = parse_data(&body).expect("DATA");
            assert_eq!(head.req, req);
            for e in it {
                chunks.push(match e.expect("DATA entry") {
                    DataEntry::Bytes(b) => Some(b.to_vec()),
                    DataEntry::Gone => None,
                });
            }
            if h.flags & FLAG_LAST != 0 {
                let asked: u32 = runs.iter().map(|r| r.count).sum();
                assert_eq!(chunks.len(), asked as usize, "one entry per chunk asked");
                return (chunks, sizes);
            }
        }
    }

    /// Closes the sending side and waits for the server to close.
    fn close(mut self) {
        self.t.shutdown_write().expect("shutdown");
        assert!(self.frame().is_none(), "nothing after the client closed");
    }
}

/// A destination with a small tree:
///
/// ```text
/// .pfs/state          the server's own (hidden)
/// a.txt               "hello"
/// b/                  0750
/// b/.pfs/x            a dir= destination's state (hidden)
/// b/c.bin             300,000 bytes
/// b/empty             0 bytes
/// b/link -> ../a.txt
/// lnk -> b            a symlink to a directory
/// sock                a socket (skipped)
/// ```
struct Tree {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    dest: DestRoot,
}

fn data(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Sets `path`'s mtime an hour back: out of the recipe cache's racy window.
fn age(path: &Path) {
    let f = fs::File::options().write(true).open(path).expect("open");
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .expect("set mtime");
}

fn tree() -> (Tree, std::os::unix::net::UnixListener) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("dest");
    fs::create_dir_all(dir.join(".pfs")).expect("mkdir");
    fs::write(dir.join(".pfs/state"), b"server state").expect("write");
    fs::write(dir.join("a.txt"), b"hello").expect("write");
    fs::create_dir_all(dir.join("b/.pfs")).expect("mkdir");
    fs::write(dir.join("b/.pfs/x"), b"x").expect("write");
    fs::write(dir.join("b/c.bin"), data(1, 300_000)).expect("write");
    fs::write(dir.join("b/empty"), b"").expect("write");
    symlink("../a.txt", dir.join("b/link")).expect("symlink");
    symlink("b", dir.join("lnk")).expect("symlink");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir.join("b"), fs::Permissions::from_mode(0o750)).expect("chmod");
    let sock = std::os::unix::net::UnixListener::bind(dir.join("sock")).expect("socket");
    let dest = DestRoot::open(&dir).expect("dest");
    (Tree { _tmp: tmp, dir, dest }, sock)
}

/// Runs `serve_mount` beneath `dest` on one end of a socket pair while
/// `client` drives the other.
fn session<R>(
    dest: &DestRoot,
    cfg: &MountServerConfig,
    client: impl FnOnce(&mut Client) -> R,
) -> (Result<MountServerOutcome, SessionError>, R) {
    let (ours, theirs) = UnixTransport::pair().expect("pair");
    thread::scope(|s| {
        let server = s.spawn(move || {
            let mut t = theirs;
            serve_mount(&mut t, dest, cfg)
        });
        let mut c = Client::new(ours);
        let r = client(&mut c);
        drop(c);
        (server.join().expect("the server panicked"), r)
    })
}

fn file_entry(entries: &[Entry], path: &str) -> u64 {
    entries.iter().position(|e| e.path == path).expect("listed") as u64
}

#[test]
fn lists_directories_first_symlinks_unfollowed_and_pfs_hidden() {
    let (t, _sock) = tree();
    let cfg = MountServerConfig::default();
    let (out, (accept, entries)) = session(&t.dest, &cfg, |c| {
        let r = c.mount("", 4 << 20);
        c.t.shutdown_write().expect("shutdown");
        r
    });
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "b", "b/c.bin", "b/empty", "b/link", "lnk"]);
    let kinds: Vec<ListKind> = entries.iter().map(|e| e.kind).collect();
    use ListKind::{Dir, File, Symlink};
    assert_eq!(kinds, [File, Dir, File, File, Symlink, Symlink]);
    assert_eq!(entries[0].size, 5);
    assert_eq!(entries[1].mode, 0o750);
    assert_eq!(entries[2].size, 300_000);
    assert_eq!(entries[4].link, "../a.txt");
    assert_eq!(entries[5].link, "b");
    assert_eq!(accept.chunk_avg, 32 << 10);
    assert_eq!(accept.max_fetch_chunks, 1024);
    assert_eq!(
        accept.max_data_body,
        1 << 20,
        "the server's cap, not the client's 4 MiB"
    );
    let out = out.expect("session");
    assert_eq!((out.entries, out.skipped), (6, 1), "the socket is skipped");

    // A subdirectory, and a client that takes smaller DATA bodies.
    let (out, (accept, entries)) = session(&t.dest, &cfg, |c| c.mount("b", 256 << 10));
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["c.bin", "empty", "link"]);
    assert_eq!(accept.max_data_body, 256 << 10);
    assert_eq!(accept.root_mode, 0o750);
    assert_eq!(out.expect("session").dir, "b");
}

#[test]
fn recipes_are_chunk_file_and_fetched_bytes_match_their_hashes() {
    let (t, _sock) = tree();
    let cfg = MountServerConfig::default();
    let want = chunk_file(t.dir.join("b/c.bin"), &ChunkParams::default()).expect("chunk");
    let content = fs::read(t.dir.join("b/c.bin")).expect("read");
    let (out, ()) = session(&t.dest, &cfg, |c| {
        // Small DATA bodies: the answer spans several frames.
        let (accept, entries) = c.mount("", 256 << 10);
        let no = file_entry(&entries, "b/c.bin");
        let a = c.recipe(1, no);
        assert!(!a.gone);
        let got: Vec<(u32, Hash)> = want.chunks.iter().map(|c| (c.len, c.hash)).collect();
        assert_eq!(a.chunks, got);
        assert_eq!(a.chunks.iter().map(|c| u64::from(c.0)).sum::<u64>(), 300_000);
        let n = a.chunks.len() as u32;
        assert!(n >= 4, "{n} chunks");
        let runs = [
            FetchRun {
                entry: no,
                first: 2,
                count: n - 2,
            },
            FetchRun {
                entry: no,
                first: 0,
                count: 2,
            },
        ];
        let (chunks, sizes) = c.fetch(2, &runs);
        assert!(sizes.len() >= 2, "{sizes:?}");
        assert!(
            sizes.iter().all(|&s| s <= accept.max_data_body as usize),
            "{sizes:?}"
        );
        let order: Vec<usize> = (2..n as usize).chain(0..2).collect();
        let mut whole = vec![Vec::new(); n as usize];
        for (i, bytes) in order.into_iter().zip(chunks) {
            let bytes = bytes.expect("served");
            assert_eq!(blake3::hash(&bytes).as_bytes(), &a.chunks[i].1);
            whole[i] = bytes;
        }
        assert_eq!(whole.concat(), content);
        // An empty file: one frame, no entries, LAST.
        let e = c.recipe(3, file_entry(&entries, "b/empty"));
        assert_eq!((e.frames, e.chunks.len(), e.gone), (1, 0, false));
        // A fetch from a file whose recipe was never asked: cut first.
        let small = file_entry(&entries, "a.txt");
        let (chunks, _) = c.fetch(
            4,
            &[FetchRun {
                entry: small,
                first: 0,
                count: 1,
            }],
        );
        assert_eq!(chunks, [Some(b"hello".to_vec())]);
        c.t.shutdown_write().expect("shutdown");
    });
    let out = out.expect("session");
    assert_eq!(out.recipes, 2);
    assert_eq!(out.chunks, want.chunks.len() as u64 + 1);
    assert_eq!(out.bytes, 300_005);
    assert_eq!(out.gone, 0);
}

#[test]
fn a_large_file_is_streamed_over_several_recipe_frames() {
    let tmp = tempfile::tempdir().expect("tmp");
    // Past one 8 MiB window: cut as its frames go out.
    let content = data(7, 9 << 20);
    fs::write(tmp.path().join("big"), &content).expect("write");
    let dest = DestRoot::open(tmp.path()).expect("dest");
    let params = ChunkParams::new(1024).expect("params");
    let cfg = MountServerConfig {
        params,
        ..MountServerConfig::default()
    };
    let want = chunk_file(tmp.path().join("big"), &params).expect("chunk");
    let (out, a) = session(&dest, &cfg, |c| {
        let (accept, _) = c.mount("", 64 << 10);
        assert_eq!(accept.chunk_avg, 1024);
        let a = c.recipe(9, 0);
        let (chunks, _) = c.fetch(
            10,
            &[FetchRun {
                entry: 0,
                first: a.chunks.len() as u32 - 3,
                count: 3,
            }],
        );
        let tail: Vec<u8> = chunks
            .into_iter()
            .map(|c| c.expect("served"))
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(tail, content[content.len() - tail.len()..]);
        a
    });
    let got: Vec<(u32, Hash)> = want.chunks.iter().map(|c| (c.len, c.hash)).collect();
    assert_eq!(a.chunks, got);
    assert!(
        a.frames >= want.chunks.len().div_ceil(1819),
        "{} frames",
        a.frames
    );
    // A frame short of 1,819 entries before the last: sent when a window
    // was cut, before the rest of the file was read.
    let early = &a.counts[..a.counts.len() - 1];
    assert!(early.iter().any(|&n| n < 1819), "{:?}", a.counts);
    let out = out.expect("session");
    assert_eq!(out.bytes_cut, 9 << 20);
}

#[test]
fn a_file_changed_since_listed_is_gone_and_changed_bytes_are_never_sent() {
    let (t, _sock) = tree();
    let cfg = MountServerConfig::default();
    let (out, ()) = session(&t.dest, &cfg, |c| {
        let (_, entries) = c.mount("", 1 << 20);
        // Grown after the listing: that version cannot be served.
        fs::write(t.dir.join("a.txt"), b"hello, world").expect("write");
        let a = c.recipe(1, file_entry(&entries, "a.txt"));
        assert!(a.gone && a.chunks.is_empty());
        // Rewritten in place with its size and mtime kept: the recipe
        // given before no longer matches the bytes.
        let path = t.dir.join("b/c.bin");
        let no = file_entry(&entries, "b/c.bin");
        let before = fs::metadata(&path).expect("stat").modified().expect("mtime");
        let r = c.recipe(2, no);
        fs::write(&path, data(99, 300_000)).expect("write");
        fs::File::options()
            .write(true)
            .open(&path)
            .expect("open")
            .set_modified(before)
            .expect("mtime");
        let (chunks, _) = c.fetch(
            3,
            &[FetchRun {
                entry: no,
                first: 0,
                count: r.chunks.len() as u32,
            }],
        );
        assert!(chunks.iter().all(Option::is_none), "a changed chunk was sent");
        c.t.shutdown_write().expect("shutdown");
    });
    let out = out.expect("session");
    assert_eq!(out.recipes_gone, 1);
    assert_eq!(out.chunks, 0);
    assert!(out.gone >= 1);
}

#[test]
fn dirs_that_leave_the_root_or_cross_a_symlink_are_refused() {
    let (t, _sock) = tree();
    let cfg = MountServerConfig::default();
    for dir in [
        "../dest",
        "b/../b",
        "/b",
        "lnk",
        "lnk/c.bin",
        "a.txt",
        ".pfs",
        "b/.pfs",
        "missing",
        "b//c",
    ] {
        let (out, (code, msg)) = session(&t.dest, &cfg, |c| {
            c.hello_with(dir, 1000, 1 << 20);
            c.error()
        });
        assert_eq!(code, ErrorCode::Protocol as u16, "{dir}: {msg}");
        assert!(msg.contains("cannot mount"), "{dir}: {msg}");
        assert!(out.is_err(), "{dir}");
    }
}

#[test]
fn limits_are_refused_before_any_listing() {
    let (t, _sock) = tree();
    let cfg = MountServerConfig::default();
    // Six entries, the client takes five.
    let (out, (code, msg)) = session(&t.dest, &cfg, |c| {
        c.hello_with("", 5, 1 << 20);
        c.error()
    });
    assert_eq!(code, ErrorCode::Limit as u16, "{msg}");
    assert!(msg.contains("client's"), "{msg}");
    assert!(out.is_err());
    let small = MountServerConfig {
        max_entries: 2,
        ..MountServerConfig::default()
    };
    let (_, (code, msg)) = session(&t.dest, &small, |c| {
        c.hello_with("", 1000, 1 << 20);
        c.error()
    });
    assert_eq!(code, ErrorCode::Limit as u16, "{msg}");
    assert!(msg.contains("server's"), "{msg}");
    // 64 KiB DATA bodies cannot hold a 128 KiB chunk.
    let (_, (code, msg)) = session(&t.dest, &cfg, |c| {
        c.hello_with("", 1000, 64 << 10);
        c.error()
    });
    assert_eq!(code, ErrorCode::Limit as u16, "{msg}");
    // Exactly as many entries as the client takes is fine.
    let (out, _) = session(&t.dest, &cfg, |c| {
        c.hello_with("", 6, 1 << 20);
        c.expect(FrameType::MountAccept);
        while c.expect(FrameType::List).0.flags & FLAG_LAST == 0 {}
    });
    assert_eq!(out.expect("six entries").entries, 6);
}

#[test]
fn a_second_session_finds_the_recipe_in_the_cache() {
    let (t, _sock) = tree();
    age(&t.dir.join("b/c.bin"));
    let ask = |recipes: Arc<MountRecipes>| {
        let cfg = MountServerConfig {
            recipes: Some(recipes),
            ..MountServerConfig::default()
        };
        let (out, a) = session(&t.dest, &cfg, |c| {
            let (_, entries) = c.mount("b", 1 << 20);
            let a = c.recipe(1, file_entry(&entries, "c.bin"));
            c.t.shutdown_write().expect("shutdown");
            a.chunks
        });
        (out.expect("session"), a)
    };
    let (recipes, warning) = MountRecipes::open(&t.dest);
    assert_eq!(warning, None);
    let recipes = Arc::new(recipes);
    let (first, a) = ask(recipes.clone());
    assert_eq!((first.recipes_cached, first.bytes_cut), (0, 300_000));
    assert!(
        t.dir.join(".pfs/mount-recipes").is_file(),
        "saved at the session's end"
    );
    let (second, b) = ask(recipes);
    assert_eq!((second.recipes_cached, second.bytes_cut), (1, 0), "read again");
    assert_eq!(a, b);
    // A server started afresh finds it on disk.
    let (reopened, _) = MountRecipes::open(&t.dest);
    assert_eq!(reopened.len(), 1);
    let (third, _) = ask(Arc::new(reopened));
    assert_eq!(third.recipes_cached, 1);
}

/// A `serve_files` loop on TCP loopback; returns its events as text.
struct Server {
    addr: String,
    events: Arc<Mutex<Vec<String>>>,
}

fn with_server(
    dest: &DestRoot,
    admission: Admission,
    sessions: u64,
    clients: impl FnOnce(&Server),
) -> ((u64, u64), Vec<String>) {
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).expect("bind");
    let server = Server {
        addr: listener.socket_addr().expect("addr").to_string(),
        events: Arc::default(),
    };
    let dest = Arc::new(DestRoot::open(dest.path()).expect("dest"));
    let (shared, _) = FilesPlaces::open_dest(dest, false).expect("place");
    let places = FilesPlaces::new(Keeping::Dest { durable: false }, shared);
    let cfg = ServerConfig {
        max_sessions: Some(sessions),
        max_clients: 8,
        admission,
        ..ServerConfig::default()
    };
    let mount_cfg = MountServerConfig::default();
    let counts = thread::scope(|s| {
        let events = server.events.clone();
        let run = s.spawn(|| {
            serve_files(
                &listener,
                &|c| places.of(c),
                &cfg,
                &Default::default(),
                &mount_cfg,
                &move |ev| {
                    let line = match ev {
                        ServerEvent::Finished {
                            outcome: FilesSessionOutcome::Served(m),
                            ..
                        } => format!("served {} entries {} chunks", m.entries, m.chunks),
                        ServerEvent::Finished { .. } => "received".to_string(),
                        ServerEvent::Failed { error, .. } => format!("failed: {error}"),
                        ServerEvent::Denied { reason, .. } => format!("denied: {reason}"),
                        _ => return,
                    };
                    events.lock().expect("events").push(line);
                },
            )
        });
        clients(&server);
        run.join().expect("server panicked")
    });
    let events = server.events.lock().expect("events").clone();
    (counts, events)
}

impl Server {
    fn plain(&self) -> Client {
        Client::new(TcpTransport::connect(&self.addr, &TcpConfig::default()).expect("connect"))
    }
}

/// What a hostile client does after mounting.
type Attack = Box<dyn Fn(&mut Client)>;

#[test]
fn hostile_clients_are_refused_while_another_is_served() {
    let (t, _sock) = tree();
    let hostile = 7;
    let ((ok, failed), events) = with_server(&t.dest, Admission::default(), hostile + 2, |srv| {
        let mut good = srv.plain();
        let (_, entries) = good.mount("", 1 << 20);
        let no = file_entry(&entries, "b/c.bin");
        let n = good.recipe(1, no).chunks.len() as u32;
        let run = |entry, first, count| FetchRun { entry, first, count };
        let cases: Vec<(&str, Attack, ErrorCode)> = vec![
            (
                "unknown entry",
                Box::new(|c: &mut Client| {
                    c.send(FrameType::RecipeAsk, &RecipeAsk { req: 1, entry: 999 }.emit())
                }),
                ErrorCode::Protocol,
            ),
            (
                "a directory's recipe",
                Box::new(|c: &mut Client| {
                    c.send(FrameType::RecipeAsk, &RecipeAsk { req: 1, entry: 1 }.emit())
                }),
                ErrorCode::Protocol,
            ),
            (
                "run past the recipe",
                Box::new(move |c: &mut Client| c.send_fetch(2, &[run(no, n - 1, 2)])),
                ErrorCode::Protocol,
            ),
            (
                "too many chunks",
                Box::new(move |c: &mut Client| c.send_fetch(2, &[run(no, 0, 1000), run(no, 0, 25)])),
                ErrorCode::Limit,
            ),
            (
                "a frame type no one knows",
                Box::new(|c: &mut Client| {
                    c.raw(&[
                        0x50, 0x46, 0x53, 0x47, 1, 0xff, 0, 0, 0x60, 0, 0, 0, 0xc1, 0x40, 0xf0, 0xee,
                    ])
                }),
                ErrorCode::BadFrame,
            ),
            (
                "a frame the session does not allow",
                Box::new(|c: &mut Client| c.send(FrameType::List, &[])),
                ErrorCode::Protocol,
            ),
            (
                "garbage",
                Box::new(|c: &mut Client| c.raw(&[0xa5; 64])),
                ErrorCode::BadFrame,
            ),
        ];
        assert_eq!(cases.len() as u64, hostile);
        for (what, attack, code) in &cases {
            let mut bad = srv.plain();
            bad.mount("", 1 << 20);
            attack(&mut bad);
            let (got, msg) = bad.error();
            assert_eq!(got, *code as u16, "{what}: {msg}");
            assert!(bad.frame().is_none(), "{what}: the server closes after ERROR");
            // The other client is still served.
            let (chunks, _) = good.fetch(10, &[run(no, 0, 1)]);
            assert!(chunks[0].is_some(), "{what}");
        }
        // A first frame that is neither FILES_HELLO nor MOUNT_HELLO.
        let mut odd = srv.plain();
        odd.send(FrameType::RecipeAsk, &RecipeAsk { req: 1, entry: 0 }.emit());
        let (got, msg) = odd.error();
        assert_eq!(got, ErrorCode::Protocol as u16, "{msg}");
        good.close();
    });
    assert_eq!((ok, failed), (1, hostile + 1), "{events:#?}");
    assert!(
        events.iter().any(|e| e.starts_with("served 6 entries")),
        "{events:#?}"
    );
}

#[test]
fn a_key_without_read_is_refused_at_the_verdict_and_a_read_only_key_mounts() {
    let (t, _sock) = tree();
    let server = Identity::generate().expect("key");
    let (writer, reader) = (
        Identity::generate().expect("key"),
        Identity::generate().expect("key"),
    );
    let keys = format!(
        "{} no-read # writer\n{} dir=b no-files no-blob # reader\n",
        writer.public(),
        reader.public()
    );
    let admission = Admission {
        security: Some(ServerSecurity {
            identity: server.clone(),
            psk: None,
            timeout: TIMEOUT,
            record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
        }),
        authorized: Some(AuthorizedKeys::parse(&keys).expect("keys").into()),
        allow_plain: false,
    };
    let protected = |addr: &str, id: &Identity| {
        let t = TcpTransport::connect(addr, &TcpConfig::default()).expect("connect");
        let sec = ClientSecurity {
            identity: id.clone(),
            pin: Pin::Key(server.public()),
            psk: None,
            cipher: Cipher::ChaCha20Poly1305,
            rotate_log2: 20,
            timeout: TIMEOUT,
        };
        pfs_auth::connect(t, addr, Service::Mount, &sec)
    };
    let ((ok, failed), events) = with_server(&t.dest, admission, 2, |srv| {
        // Refused at the verdict: a key that may not read never holds a
        // slot.
        let refused = protected(&srv.addr, &writer).expect_err("refused");
        assert!(
            matches!(&refused, SecureError::Refused { reason, .. } if reason.contains("no-read")),
            "{refused}"
        );
        // A key that may only read mounts its dir= and nothing above it.
        let mut r = Client::new(protected(&srv.addr, &reader).expect("handshake"));
        let (_, entries) = r.mount("", 1 << 20);
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["c.bin", "empty", "link"]);
        r.close();
    });
    assert_eq!((ok, failed), (1, 1), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e.contains("denied: this key may not read (no-read)")),
        "{events:#?}"
    );
}

/// The core alone, over a host that cuts a file and finds it changed
/// half-way: the frames already sent are followed by `GONE`.
mod core {
    use super::*;
    use pfs_files::{ChunkRef, ChunkSink, RelPath};
    use pfs_session::mount::{Cut, FrameOut, ListError, Listed, Listing, MountHost, MountServer};

    struct Changing;

    impl MountHost for Changing {
        fn list(&mut self, _: Option<&RelPath>, _: u64) -> Result<Listing, ListError> {
            Ok(Listing {
                entries: vec![Listed {
                    path: RelPath::parse(b"f").expect("path"),
                    kind: ListKind::File,
                    mode: 0o644,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    size: 300,
                    link: Box::default(),
                }],
                ..Listing::default()
            })
        }

        fn recipe(&mut self, _: &Listed, sink: ChunkSink<'_>) -> Cut {
            let chunks: Vec<ChunkRef> = (0..3)
                .map(|i| ChunkRef {
                    hash: [i as u8; 32],
                    offset: i * 100,
                    len: 100,
                })
                .collect();
            assert!(sink(&chunks));
            Cut::Gone
        }

        fn read_chunk(&mut self, _: u64, _: &Listed, _: u64, _: &mut [u8]) -> bool {
            false
        }
    }

    struct Frames(Vec<(FrameHeader, Vec<u8>)>);

    impl FrameOut for Frames {
        fn send(&mut self, header: &[u8; FRAME_HEADER_LEN], parts: &[&[u8]]) -> std::io::Result<()> {
            let h = FrameHeader::parse(header).expect("header");
            let body = parts.concat();
            assert_eq!(body.len(), h.length as usize);
            self.0.push((h, body));
            Ok(())
        }
    }

    #[test]
    fn a_file_changed_while_cut_ends_its_answer_with_gone() {
        let mut core = MountServer::new(&MountServerConfig::default());
        let mut out = Frames(Vec::new());
        let hello = MountHello {
            max_entries: 10,
            max_data_body: 1 << 20,
            session_nonce: 1,
            dir: b"",
        }
        .emit();
        let header = |ty, body: &[u8]| FrameHeader {
            frame_type: ty,
            flags: 0,
            length: body.len() as u32,
        };
        core.handle_frame(
            header(FrameType::MountHello, &hello),
            &hello,
            &mut Changing,
            &mut out,
        )
        .expect("hello");
        let types: Vec<FrameType> = out.0.iter().map(|(h, _)| h.frame_type).collect();
        assert_eq!(types, [FrameType::MountAccept, FrameType::List]);
        out.0.clear();
        let ask = RecipeAsk { req: 4, entry: 0 }.emit();
        core.handle_frame(header(FrameType::RecipeAsk, &ask), &ask, &mut Changing, &mut out)
            .expect("ask");
        let got: Vec<(ServeStatus, u64, u32, bool)> = out
            .0
            .iter()
            .map(|(h, body)| {
                let (head, _) = parse_recipe(body).expect("RECIPE");
                (head.status, head.first, head.count, h.flags & FLAG_LAST != 0)
            })
            .collect();
        // Two of the three chunks went out as they came (the last is held
        // for the final frame), then the cut found the file changed.
        assert_eq!(
            got,
            [(ServeStatus::Ok, 0, 2, false), (ServeStatus::Gone, 2, 0, true)]
        );
        assert_eq!(core.outcome().recipes_gone, 1);
        // A second ask in the session answers from what it knows.
        out.0.clear();
        core.handle_frame(header(FrameType::RecipeAsk, &ask), &ask, &mut Changing, &mut out)
            .expect("ask again");
        assert_eq!(out.0.len(), 1);
    }
}
