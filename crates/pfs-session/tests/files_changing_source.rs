//! Files that change on disk between the sender's plan and its read, over
//! the real stack: `send_files` with its `LocalSource` against
//! `receive_files` on a Unix socket pair. The preparer chunks the files,
//! then changes them as another process would (truncate, rewrite, touch,
//! delete) before a byte is sent; each such file fails alone (FILE_DROP)
//! or, if its chunks still match, is sent as scanned. Deterministic: the
//! changes happen at a fixed point of the session, nothing races.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, SystemTime};

use pfs_files::{scan, ChunkParams, DestRoot, Excludes};
use pfs_session::files::{
    receive_files, send_files, FilesItem, FilesPrepare, FilesReceiverConfig, FilesSenderConfig, LocalPrepare,
    Unreadable,
};
use pfs_store::{Durability, Store, StoreConfig};
use pfs_transport::{Transport, UnixTransport};

/// Longest any read in this test may block.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What happens to a file once it is chunked.
#[derive(Clone, Copy)]
enum Change {
    /// Cut to this many bytes.
    Truncate(u64),
    /// One byte flipped at this offset (same size), mtime moved.
    Rewrite(usize),
    /// mtime moved, content as it was.
    Touch,
    /// Deleted.
    Delete,
}

/// [`LocalPrepare`], then the changes.
struct ChangeAfterChunking {
    inner: LocalPrepare,
    changes: HashMap<PathBuf, Change>,
}

impl FilesPrepare for ChangeAfterChunking {
    fn hash(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        self.inner.hash(items, which)
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        let failed = self.inner.chunk(items, which);
        let later = SystemTime::now() + Duration::from_secs(3600);
        for (path, change) in self.changes.drain() {
            let touch = || {
                let f = fs::File::options().write(true).open(&path).expect("open");
                f.set_modified(later).expect("mtime");
            };
            match change {
                Change::Truncate(len) => {
                    let f = fs::File::options().write(true).open(&path).expect("open");
                    f.set_len(len).expect("truncate");
                }
                Change::Rewrite(at) => {
                    let mut data = fs::read(&path).expect("read");
                    data[at] ^= 0xff;
                    fs::write(&path, data).expect("write");
                    touch();
                }
                Change::Touch => touch(),
                Change::Delete => fs::remove_file(&path).expect("delete"),
            }
        }
        failed
    }
}

/// `len` bytes from a seeded LCG (no two chunks alike).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

#[test]
fn files_changed_after_the_plan_fail_alone_over_the_real_stack() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let (src, dest_dir) = (tmp.path().join("src"), tmp.path().join("dest"));
    fs::create_dir_all(&src).expect("mkdir");
    fs::create_dir_all(&dest_dir).expect("mkdir");
    let files: [(&str, usize, Option<Change>); 5] = [
        ("shrinks", 3 << 20, Some(Change::Truncate(1 << 20))),
        ("rewritten", 200_000, Some(Change::Rewrite(150_000))),
        ("touched", 200_000, Some(Change::Touch)),
        ("deleted", 50_000, Some(Change::Delete)),
        ("fine", 100_000, None),
    ];
    let mut changes = HashMap::new();
    for (k, (name, len, change)) in files.iter().enumerate() {
        let path = src.join(name);
        fs::write(&path, bytes(k as u64 + 1, *len)).expect("write");
        if let Some(c) = change {
            changes.insert(path, *c);
        }
    }
    let expect_touched = fs::read(src.join("touched")).expect("read");
    let expect_fine = fs::read(src.join("fine")).expect("read");

    let params = ChunkParams::default();
    let mut items: Vec<FilesItem> = scan(std::slice::from_ref(&src), &Excludes::none())
        .expect("scan")
        .entries
        .into_iter()
        .map(|e| FilesItem::new(e, None))
        .collect();
    let mut prep = ChangeAfterChunking {
        inner: LocalPrepare::new(params, 1),
        changes,
    };
    let cfg = FilesSenderConfig {
        remote_dir: Vec::new(),
        dry_run: false,
        compress: None,
        chunk_avg: params.avg(),
        index_cache_dir: None,
        reply_timeout: TIMEOUT,
        session_nonce: 11,
        probe: false,
        probe_all: false,
        delete: None,
        checksum: false,
        bwlimit: None,
        preserve: Default::default(),
        sparse: true,
        stream_min: None,
        top_mtime_ns: None,
    };
    let store_cfg = StoreConfig {
        capacity: 64 << 20,
        huge_dir: None,
        durability: Durability::None,
    };
    let store = Store::open(&tmp.path().join("store"), &store_cfg).expect("store");
    let dest = DestRoot::open(&dest_dir).expect("destination");
    let rx_cfg = FilesReceiverConfig {
        handshake_timeout: TIMEOUT,
        idle_timeout: TIMEOUT,
        ..FilesReceiverConfig::default()
    };
    let (mut ours, theirs) = UnixTransport::pair().expect("socket pair");
    ours.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let (received, sent) = thread::scope(|s| {
        let receiver = s.spawn(|| {
            let mut t = theirs;
            receive_files(
                &mut t,
                pfs_session::files::ChunkIndex::Store(&store),
                &dest,
                &rx_cfg,
            )
        });
        let sent = send_files(&mut ours, &mut items, &cfg, &mut prep, &mut |_| {});
        (receiver.join().expect("receiver thread"), sent)
    });
    let received = received.expect("the session goes on (receiver)");
    let sent = sent.expect("the session goes on (sender)");
    let r = sent.report.expect("a report");
    let m = &sent.messages;
    assert_eq!(sent.dropped, 3, "{m}");
    assert_eq!((r.files_written, r.files_failed), (2, 3), "{m}");
    assert_eq!(received.report.files_failed, 3);
    assert!(m.contains("shrinks: the sender dropped it: read "), "{m}");
    assert!(
        m.contains("it shrank to 1048576 bytes since it was scanned"),
        "{m}"
    );
    assert!(
        m.contains("rewritten: the sender dropped it: it was modified since it was scanned: bytes"),
        "{m}"
    );
    assert!(m.contains("deleted: the sender dropped it: open "), "{m}");
    let w = sent.warnings.join("\n");
    assert!(
        w.contains("touched: it was modified since it was scanned; every chunk read still matched"),
        "{w}"
    );
    let got = dest_dir.join("src");
    assert_eq!(fs::read(got.join("touched")).expect("touched"), expect_touched);
    assert_eq!(fs::read(got.join("fine")).expect("fine"), expect_fine);
    let mut left: Vec<String> = fs::read_dir(&got)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["fine", "touched"], "nothing else, no temporary file");
    assert_eq!(store.verify_all(1), Vec::new(), "store intact");
}
