//! The client against scripted servers (no FUSE, no root): what a broken or
//! hostile server can and cannot make a mount do. Every answer that breaks
//! docs/wire.md §12 ends the session; no wrong byte is ever returned or
//! kept; a server that vanishes or goes silent costs `EIO`, never a hang.

use std::thread;
use std::time::Duration;

use pfs_mount::{open, MountConfig, MountError, ProtoError, ReadError, Session};
use pfs_transport::{Transport, UnixTransport};
use pfs_wire::frame::{Frame, FrameType, FRAME_HEADER_LEN};
use pfs_wire::mount::{
    emit_recipe_entry, parse_fetch, DataEntry, ListEntry, ListKind, MountAccept, RecipeAsk, RecipeHead,
    ReqHead, ServeStatus, FLAG_LAST,
};
use pfs_wire::put_frame;

const AVG: u32 = 256;

fn accept(entries: u64) -> MountAccept {
    MountAccept {
        entries,
        chunk_avg: AVG,
        max_fetch_chunks: 64,
        max_data_body: 1 << 20,
        root_mode: 0o755,
        root_mtime_sec: 0,
        root_mtime_nsec: 0,
    }
}

fn send(t: &mut UnixTransport, ty: FrameType, flags: u16, body: &[u8]) {
    let mut out = Vec::new();
    put_frame(&mut out, ty, flags, body);
    let _ = t.write_all(&out);
}

fn recv(t: &mut UnixTransport) -> Option<(FrameType, Vec<u8>)> {
    let mut head = [0u8; FRAME_HEADER_LEN];
    t.read_exact(&mut head).ok()?;
    let h = pfs_wire::frame::FrameHeader::parse(&head).ok()?;
    let mut body = vec![0; h.length as usize];
    t.read_exact(&mut body).ok()?;
    let mut whole = head.to_vec();
    whole.extend_from_slice(&body);
    let (f, _) = Frame::parse(&whole).ok()?;
    Some((f.header.frame_type, f.body.to_vec()))
}

/// Answers MOUNT_HELLO with one file `f` of `content`, then runs `rest`.
fn one_file_server(
    content: &'static [u8],
    rest: impl FnOnce(&mut UnixTransport) + Send + 'static,
) -> (Box<dyn Transport>, thread::JoinHandle<()>) {
    let (client, mut server) = UnixTransport::pair().unwrap();
    let h = thread::spawn(move || {
        let (t, _) = recv(&mut server).expect("MOUNT_HELLO");
        assert_eq!(t, FrameType::MountHello);
        send(&mut server, FrameType::MountAccept, 0, &accept(1).emit());
        let mut list = Vec::new();
        ListEntry {
            kind: ListKind::File,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            size: content.len() as u64,
            path: b"f",
            link: b"",
        }
        .emit_into(&mut list);
        send(&mut server, FrameType::List, FLAG_LAST, &list);
        rest(&mut server);
    });
    (Box::new(client), h)
}

fn cfg(cache: &std::path::Path) -> MountConfig {
    MountConfig {
        dir: Vec::new(),
        cache_dir: cache.to_path_buf(),
        cache_capacity: 64 << 20,
        timeout: Duration::from_secs(5),
        max_entries: 1000,
        threads: 1,
        allow_other: false,
        fsname: "test".into(),
        prefetch: false,
        passthrough: false,
    }
}

/// Answers one RECIPE_ASK with `chunks` (lengths of `content`'s pieces).
fn answer_recipe(t: &mut UnixTransport, content: &[u8], lens: &[u32]) -> bool {
    let Some((FrameType::RecipeAsk, body)) = recv(t) else {
        return false;
    };
    let ask = RecipeAsk::parse(&body).unwrap();
    let mut b = RecipeHead {
        req: ask.req,
        status: ServeStatus::Ok,
        first: 0,
        count: lens.len() as u32,
    }
    .emit()
    .to_vec();
    let mut at = 0usize;
    for &l in lens {
        let end = (at + l as usize).min(content.len());
        emit_recipe_entry(&mut b, l, blake3::hash(&content[at..end]).as_bytes());
        at = end;
    }
    send(t, FrameType::Recipe, FLAG_LAST, &b);
    true
}

/// Answers FETCHes with `pieces(index)` until the client closes.
fn answer_fetches(t: &mut UnixTransport, piece: impl Fn(u32) -> Vec<u8>) {
    while let Some((ty, body)) = recv(t) {
        assert_eq!(ty, FrameType::Fetch);
        let (head, runs) = parse_fetch(&body).unwrap();
        let n: u32 = runs.iter().map(|r| r.count).sum();
        let mut d = ReqHead {
            req: head.req,
            count: n,
        }
        .emit()
        .to_vec();
        for r in runs {
            for i in r.first..r.first + r.count {
                let b = piece(i);
                DataEntry::emit_bytes_head(&mut d, b.len() as u32);
                d.extend_from_slice(&b);
            }
        }
        send(t, FrameType::Data, FLAG_LAST, &d);
    }
}

/// About 300 bytes: room for two chunks at AVG (the minimum is AVG / 4).
const CONTENT: &[u8] = b"hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. \
hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. \
hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. hello, lazy world. 300 bytes!!!!!!!!!!!";
const SPLIT: usize = 100;

/// Answers one RECIPE_ASK with CONTENT in two chunks, then every FETCH.
fn serve_in_two_chunks(t: &mut UnixTransport) {
    assert!(answer_recipe(
        t,
        CONTENT,
        &[SPLIT as u32, (CONTENT.len() - SPLIT) as u32]
    ));
    answer_fetches(t, |i| {
        if i == 0 {
            CONTENT[..SPLIT].to_vec()
        } else {
            CONTENT[SPLIT..].to_vec()
        }
    });
}

fn counters(s: &Session) -> serde_json::Value {
    s.report()
}

#[test]
fn reads_fetch_once_then_come_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        serve_in_two_chunks(t);
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert_eq!(s.read("f", 0, 1000).unwrap(), CONTENT);
    assert_eq!(s.read("f", 3, 4).unwrap(), &CONTENT[3..7]);
    let c = counters(&s);
    assert_eq!(c["chunks_fetched"], 2, "{c}");
    assert_eq!(c["recipes"], 1, "{c}");
    drop(s.close());
    h.join().unwrap();

    // A new session over the same cache fetches nothing.
    let (conn, h) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(
            t,
            CONTENT,
            &[SPLIT as u32, (CONTENT.len() - SPLIT) as u32]
        ));
        answer_fetches(t, |_| panic!("nothing should be fetched"));
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert_eq!(s.read("f", 0, 1000).unwrap(), CONTENT);
    assert_eq!(counters(&s)["chunks_fetched"], 0);
    drop(s.close());
    h.join().unwrap();
}

#[test]
fn a_damaged_cached_chunk_is_fetched_again_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(t, CONTENT, &[CONTENT.len() as u32]));
        answer_fetches(t, |_| CONTENT.to_vec());
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert_eq!(s.read("f", 0, 1000).unwrap(), CONTENT);
    drop(s.close());
    h.join().unwrap();
    // Flip the chunk's bytes in the store's blob file.
    let blob = dir.path().join("blob");
    let mut bytes = std::fs::read(&blob).unwrap();
    let at = bytes
        .windows(CONTENT.len())
        .position(|w| w == CONTENT)
        .expect("the chunk is in the blob");
    bytes[at] ^= 0xff;
    std::fs::write(&blob, &bytes).unwrap();

    let (conn, h) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(t, CONTENT, &[CONTENT.len() as u32]));
        answer_fetches(t, |_| CONTENT.to_vec());
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert_eq!(s.read("f", 0, 1000).unwrap(), CONTENT);
    let c = counters(&s);
    assert_eq!(
        (c["cache_damaged"].as_u64(), c["chunks_fetched"].as_u64()),
        (Some(1), Some(1)),
        "{c}"
    );
    drop(s.close());
    h.join().unwrap();
    // Repaired in place.
    let bytes = std::fs::read(&blob).unwrap();
    assert!(bytes.windows(CONTENT.len()).any(|w| w == CONTENT));
}

#[test]
fn wrong_bytes_fail_the_read_and_are_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(t, CONTENT, &[CONTENT.len() as u32]));
        answer_fetches(t, |_| CONTENT.to_ascii_uppercase());
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert!(matches!(s.read("f", 0, 1000), Err(ReadError::Io(_))));
    // The link is down: later uncached reads fail at once.
    assert!(matches!(s.read("f", 0, 1), Err(ReadError::Io(_))));
    assert_eq!(counters(&s)["cache_chunks"], 0);
    drop(s.close());
    h.join().unwrap();
}

#[test]
fn a_recipe_that_does_not_fit_the_file_ends_the_session() {
    for lens in [
        &[100u32, 300][..],
        &[100, 100][..],
        &[AVG * 4 + 1][..],
        &[30; 10][..],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let lens = lens.to_vec();
        let (conn, h) = one_file_server(CONTENT, move |t| {
            answer_recipe(t, CONTENT, &lens);
            while recv(t).is_some() {}
        });
        let s = open(conn, &cfg(dir.path())).unwrap();
        assert!(matches!(s.read("f", 0, 1000), Err(ReadError::Io(_))));
        drop(s.close());
        h.join().unwrap();
    }
}

#[test]
fn more_chunks_than_asked_end_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(t, CONTENT, &[CONTENT.len() as u32]));
        let Some((FrameType::Fetch, body)) = recv(t) else {
            return;
        };
        let (head, _) = parse_fetch(&body).unwrap();
        let mut d = ReqHead {
            req: head.req,
            count: 2,
        }
        .emit()
        .to_vec();
        for _ in 0..2 {
            DataEntry::emit_bytes_head(&mut d, CONTENT.len() as u32);
            d.extend_from_slice(CONTENT);
        }
        send(t, FrameType::Data, FLAG_LAST, &d);
        while recv(t).is_some() {}
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    // The chunk asked for may reach the reader (it matched its hash)
    // before the extra one ends the session; a wrong byte never does.
    if let Ok(b) = s.read("f", 0, 1000) {
        assert_eq!(b, CONTENT);
    }
    for _ in 0..500 {
        if s.shared().down().is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(s.shared().down().is_some(), "the session must end");
    drop(s.close());
    h.join().unwrap();
}

#[test]
fn a_listing_larger_than_asked_or_out_of_order_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (client, mut server) = UnixTransport::pair().unwrap();
    let h = thread::spawn(move || {
        recv(&mut server);
        send(&mut server, FrameType::MountAccept, 0, &accept(1_000_000).emit());
        while recv(&mut server).is_some() {}
    });
    let e = open(Box::new(client), &cfg(dir.path())).unwrap_err();
    assert!(matches!(e, MountError::Proto(ProtoError::Protocol(_))), "{e}");
    h.join().unwrap();

    let (client, mut server) = UnixTransport::pair().unwrap();
    let h = thread::spawn(move || {
        recv(&mut server);
        send(&mut server, FrameType::MountAccept, 0, &accept(1).emit());
        let mut list = Vec::new();
        ListEntry {
            kind: ListKind::File,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            size: 1,
            path: b"no/parent",
            link: b"",
        }
        .emit_into(&mut list);
        send(&mut server, FrameType::List, FLAG_LAST, &list);
        while recv(&mut server).is_some() {}
    });
    let e = open(Box::new(client), &cfg(dir.path())).unwrap_err();
    assert!(matches!(e, MountError::Proto(ProtoError::Tree(_))), "{e}");
    h.join().unwrap();
}

#[test]
fn a_vanished_or_silent_server_costs_eio_not_a_hang() {
    // Closes right after the listing.
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |_| {});
    let s = open(conn, &cfg(dir.path())).unwrap();
    h.join().unwrap();
    assert!(matches!(s.read("f", 0, 10), Err(ReadError::Io(_))));
    drop(s.close());

    // Reads the ask and never answers: the timeout ends it.
    let dir = tempfile::tempdir().unwrap();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (conn, h) = one_file_server(CONTENT, move |t| {
        let _ = recv(t);
        let _ = stop_rx.recv();
    });
    let mut c = cfg(dir.path());
    c.timeout = Duration::from_millis(300);
    let s = open(conn, &c).unwrap();
    assert!(matches!(s.read("f", 0, 10), Err(ReadError::Io(_))));
    drop(s.close());
    stop_tx.send(()).unwrap();
    h.join().unwrap();
}

#[test]
fn a_gone_file_is_an_error_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        let Some((FrameType::RecipeAsk, body)) = recv(t) else {
            return;
        };
        let ask = RecipeAsk::parse(&body).unwrap();
        let gone = RecipeHead {
            req: ask.req,
            status: ServeStatus::Gone,
            first: 0,
            count: 0,
        };
        send(t, FrameType::Recipe, FLAG_LAST, &gone.emit());
        while recv(t).is_some() {}
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    assert!(matches!(s.read("f", 0, 10), Err(ReadError::Io(_))));
    assert!(s.shared().down().is_none(), "GONE is not a broken session");
    drop(s.close());
    h.join().unwrap();
}

#[test]
fn the_direct_client_reads_the_file_from_shared_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, h) = one_file_server(CONTENT, |t| {
        serve_in_two_chunks(t);
    });
    let s = open(conn, &cfg(dir.path())).unwrap();
    let sock = dir.path().join("direct.sock");
    let server = pfs_mount::direct::serve(s.shared().clone(), &sock, 1 << 20).unwrap();
    let mut client = pfs_mount::direct::DirectClient::connect(&sock).unwrap();
    let f = client.open("f").unwrap();
    assert_eq!(f.len(), CONTENT.len() as u64);
    assert_eq!(client.bytes(&f), CONTENT);
    let mut buf = [0u8; 4];
    assert_eq!(client.read_at(&f, 6, &mut buf), 4);
    assert_eq!(&buf, &CONTENT[6..10]);
    assert_eq!(client.read_at(&f, CONTENT.len() as u64 - 2, &mut buf), 2);
    // Opening again is the same range, nothing fetched again.
    assert_eq!(client.open("f").unwrap(), f);
    assert_eq!(counters(&s)["chunks_fetched"], 2);
    assert!(matches!(
        client.open("nope"),
        Err(pfs_mount::direct::DirectError::Refused { .. })
    ));
    drop(client);
    drop(server);
    drop(s.close());
    h.join().unwrap();
}

#[test]
fn a_lost_link_comes_back_when_the_server_lists_the_same_tree() {
    let dir = tempfile::tempdir().unwrap();
    // The first server lists the tree and hangs up.
    let (conn, first) = one_file_server(CONTENT, |_| {});
    // The second lists the same tree and serves it; the third lists another.
    let (again, second) = one_file_server(CONTENT, |t| {
        assert!(answer_recipe(t, CONTENT, &[CONTENT.len() as u32]));
        answer_fetches(t, |_| CONTENT.to_vec());
    });
    let mut spare = vec![again];
    let reconnect: pfs_mount::Connector =
        Box::new(move || spare.pop().ok_or_else(|| "no more servers".into()));
    let s = pfs_mount::open_with(conn, &cfg(dir.path()), Some(reconnect)).unwrap();
    first.join().unwrap();
    // Bounded wait for the link to go down, then to come back.
    let mut read = Err(ReadError::NotAFile);
    for _ in 0..200 {
        read = s.read("f", 0, 1000);
        if read.is_ok() {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read.unwrap(), CONTENT);
    assert_eq!(counters(&s)["reconnects"], 1);
    drop(s.close());
    second.join().unwrap();
}

#[test]
fn a_changed_tree_on_reconnection_keeps_the_mount_down() {
    let dir = tempfile::tempdir().unwrap();
    let (conn, first) = one_file_server(CONTENT, |_| {});
    let (again, second) = one_file_server(b"another content", |t| while recv(t).is_some() {});
    let mut spare = vec![again];
    let reconnect: pfs_mount::Connector =
        Box::new(move || spare.pop().ok_or_else(|| "no more servers".into()));
    let s = pfs_mount::open_with(conn, &cfg(dir.path()), Some(reconnect)).unwrap();
    first.join().unwrap();
    let mut why = None;
    for _ in 0..200 {
        // A read is what asks for a new connection.
        let _ = s.read("f", 0, 10);
        why = s.shared().down().filter(|w| w.contains("changed"));
        if why.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    assert!(why.is_some(), "{:?}", s.shared().down());
    assert!(matches!(s.read("f", 0, 10), Err(ReadError::Io(_))));
    drop(s.close());
    second.join().unwrap();
}
