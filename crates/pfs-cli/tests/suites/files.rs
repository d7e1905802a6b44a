// The body of `files.rs` and `files_protected.rs` (included by both).

use common::{collect, run, ChildGuard, Out, Server};

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;

/// Longest wait for one server event or one file-system condition.
const EVENT_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest content-defined chunk with the default `--chunk-avg 32K`.
const MAX_CHUNK: u64 = 128 << 10;
/// The receiver's own directory at the root of a destination.
const STATE_DIR: &str = ".pfs";

// ---------------------------------------------------------------------------
// helpers

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// Key files of a protected run: the server's identity, the client's,
/// and an `authorized_keys` holding the client's key.
struct Keys {
    _dir: tempfile::TempDir,
    server: PathBuf,
    client: PathBuf,
    authorized: PathBuf,
}

/// The process's key files, made on first use (protected runs only).
fn keys() -> &'static Keys {
    static KEYS: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("server");
        let client = dir.path().join("client");
        for p in [&server, &client] {
            pfs_auth::Identity::generate().unwrap().save(p, "test", false).unwrap();
        }
        let authorized = dir.path().join("authorized_keys");
        fs::copy(pfs_auth::public_path(&client), &authorized).unwrap();
        Keys {
            _dir: dir,
            server,
            client,
            authorized,
        }
    })
}

/// Where the client's chunks live under `--store STORE`: the root for
/// plain sessions, its key's group store for protected ones.
fn chunk_store(store: &Path) -> PathBuf {
    match PROTECTED {
        None => store.to_path_buf(),
        Some(_) => {
            let key = pfs_auth::Identity::load(&keys().client).unwrap().public();
            store.join("groups").join(pfs_auth::policy::default_group(&key))
        }
    }
}

/// `pfs serve --json [--store STORE] --dest DEST [--listen 127.0.0.1:0] EXTRA…`
/// (`--store` when the run keeps a store), requiring keys when the run is
/// protected.
fn serve(store: &Path, dest: &Path, extra: &[&str]) -> Server {
    let mut cmd = pfs();
    cmd.args(["serve", "--json", "--dest"]).arg(dest);
    if STORE {
        cmd.arg("--store").arg(store);
    }
    if PROTECTED.is_some() {
        let k = keys();
        cmd.arg("--identity").arg(&k.server).arg("--authorized-keys").arg(&k.authorized);
    }
    if !extra.contains(&"--listen") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    cmd.args(extra);
    Server::spawn(cmd)
}

/// `pfs send PATHS… --to TO --cache-dir CACHE --json --progress never EXTRA…`
/// (`--progress never` unless EXTRA says how to show progress; with keys
/// and the cipher when the run is protected).
fn send_cmd(paths: &[&Path], to: &str, cache: &Path, extra: &[&str]) -> Command {
    let mut cmd = pfs();
    cmd.arg("send")
        .args(paths)
        .args(["--to", to, "--json", "--cache-dir"])
        .arg(cache)
        .args(extra);
    if !extra.contains(&"--progress") && !extra.contains(&"--log-interval") {
        cmd.args(["--progress", "never"]);
    }
    if let Some(cipher) = PROTECTED {
        let k = keys();
        cmd.arg("--identity")
            .arg(&k.client)
            .arg("--server-key")
            .arg(pfs_auth::public_path(&k.server))
            .args(["--cipher", cipher]);
    }
    cmd
}

fn send(paths: &[&Path], to: &str, cache: &Path, extra: &[&str]) -> Out {
    run(send_cmd(paths, to, cache, extra))
}

/// Asserts a send that wrote everything (exit 0, nothing failed); its JSON.
fn good(out: &Out, what: &str) -> Value {
    out.expect_code(0, what);
    let v = out.json(what);
    assert_eq!(num(&v, "/receiver/files_failed"), 0, "{what}: {v:#}");
    assert_eq!(v["messages"], "", "{what}: {v:#}");
    v
}

/// The unsigned number at JSON pointer `ptr`.
fn num(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{ptr} is not a number in {v:#}"))
}

/// Sender wire bytes, both directions.
fn wire(v: &Value) -> u64 {
    num(v, "/sender/wire_bytes_sent") + num(v, "/sender/wire_bytes_received")
}

/// `len` pseudo-random bytes determined by `seed` (BLAKE3 in XOF mode).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(b"pfs sync test data");
    h.update(&seed.to_le_bytes());
    let mut v = vec![0u8; len];
    h.finalize_xof().fill(&mut v);
    v
}

/// Writes `data` to `path`, creating parent directories.
fn write(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).expect("create parent directory");
    }
    fs::write(path, data).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Sets the modification time of a file to `secs.nanos` since the epoch.
fn set_mtime(path: &Path, secs: u64, nanos: u32) {
    File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(UNIX_EPOCH + Duration::new(secs, nanos)))
        .unwrap_or_else(|e| panic!("set mtime of {}: {e}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// BLAKE3 of a file, read in 1 MiB pieces.
fn hash_file(path: &Path) -> [u8; 32] {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            return *h.finalize().as_bytes();
        }
        h.update(&buf[..n]);
    }
}

/// What a tree entry is, for comparing trees.
#[derive(Debug, PartialEq, Eq)]
enum Node {
    File {
        len: u64,
        hash: [u8; 32],
        mode: u32,
        mtime: (i64, i64),
    },
    /// Directory mode (directory mtimes are not compared: see `round_trip_of_a_varied_tree`).
    Dir {
        mode: u32,
    },
    Link {
        target: OsString,
    },
}

/// Every entry beneath `root` (not following symlinks), by relative path bytes.
fn snapshot(root: &Path) -> BTreeMap<Vec<u8>, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for ent in fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display())) {
            let ent = ent.expect("directory entry");
            // The receiver's own state is not part of the tree.
            if rel.as_os_str().is_empty() && ent.file_name() == STATE_DIR {
                continue;
            }
            let rel = rel.join(ent.file_name());
            let abs = root.join(&rel);
            let m = fs::symlink_metadata(&abs).expect("lstat");
            let node = if m.file_type().is_symlink() {
                Node::Link {
                    target: fs::read_link(&abs).expect("readlink").into_os_string(),
                }
            } else if m.is_dir() {
                stack.push(rel.clone());
                Node::Dir {
                    mode: m.mode() & 0o7777,
                }
            } else {
                Node::File {
                    len: m.len(),
                    hash: hash_file(&abs),
                    mode: m.mode() & 0o7777,
                    mtime: (m.mtime(), m.mtime_nsec()),
                }
            };
            out.insert(rel.as_os_str().as_bytes().to_vec(), node);
        }
    }
    out
}

/// Asserts `b` holds exactly what `a` holds (names, kinds, contents, file
/// modes and mtimes, directory modes, link targets).
fn assert_same_tree(a: &Path, b: &Path) {
    let (sa, sb) = (snapshot(a), snapshot(b));
    if sa != sb {
        let only_a: Vec<_> = sa
            .keys()
            .filter(|k| !sb.contains_key(*k))
            .map(|k| lossy(k))
            .collect();
        let only_b: Vec<_> = sb
            .keys()
            .filter(|k| !sa.contains_key(*k))
            .map(|k| lossy(k))
            .collect();
        let differ: Vec<_> = sa
            .iter()
            .filter_map(|(k, v)| sb.get(k).filter(|w| *w != v).map(|w| (lossy(k), v, w)))
            .collect();
        panic!(
            "{} and {} differ\nonly in the first: {only_a:?}\nonly in the second: {only_b:?}\ndifferent: {differ:#?}",
            a.display(),
            b.display()
        );
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Regular files directly in `dir` under their final names (no temporaries).
fn final_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// The receiver's temporary files in the destination `root` (`.pfs/tmp`).
fn temp_files(root: &Path) -> Vec<PathBuf> {
    fs::read_dir(root.join(STATE_DIR).join("tmp"))
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Opens a store the server has released and checks every chunk's bytes.
fn assert_store_verifies(store: &Path) -> pfs_store::StoreStats {
    let s = pfs_store::Store::open(store, &pfs_store::StoreConfig::default()).expect("open the store");
    let bad = s.verify_all(0);
    assert!(bad.is_empty(), "store chunks whose bytes do not match: {bad:?}");
    s.stats()
}

/// A private working directory: `src`, `store`, `dest`, `cache` beneath it.
struct Dirs {
    _tmp: tempfile::TempDir,
    src: PathBuf,
    store: PathBuf,
    dest: PathBuf,
    cache: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let p = tmp.path().to_path_buf();
    let d = Dirs {
        src: p.join("src"),
        store: p.join("store"),
        dest: p.join("dest"),
        cache: p.join("cache"),
        _tmp: tmp,
    };
    fs::create_dir(&d.src).expect("mkdir src");
    d
}

// ---------------------------------------------------------------------------
// 1. byte-exact round trips

#[test]
fn round_trip_of_a_varied_tree() {
    let d = dirs();
    let tree = d.src.join("tree");
    let mut files: Vec<(PathBuf, usize)> = Vec::new();
    // Sizes around the chunker's bounds (min 8 KiB, max 128 KiB) and beyond.
    let sizes: [(&str, usize); 13] = [
        ("empty", 0),
        ("one", 1),
        ("s8191", 8191),
        ("s8192", 8192),
        ("s8193", 8193),
        ("s131071", 131_071),
        ("s131072", 131_072),
        ("s131073", 131_073),
        ("r777777", 777_777),
        ("r1999999", 1_999_999),
        ("r3145721", 3_145_721),
        ("ünïcødé/日本語.txt", 4321),
        ("emoji-🦀🚀.bin", 65_537),
    ];
    files.extend(sizes.iter().map(|(name, len)| (tree.join(name), *len)));
    // Depth ≥ 40.
    let mut deep = tree.join("deep");
    for i in 0..40 {
        deep.push(format!("d{i:02}"));
    }
    files.push((deep.join("leaf.bin"), 10_000));
    // A name that is not UTF-8.
    files.push((tree.join(OsStr::from_bytes(b"raw-\xff\xfe-name.bin")), 2048));
    files.push((tree.join("modes/exec.sh"), 300));
    files.push((tree.join("modes/secret"), 301));
    files.push((tree.join("modes/dir750/inner"), 302));
    let mut total = 0u64;
    for (i, (path, len)) in files.iter().enumerate() {
        write(path, &random_bytes(1000 + i as u64, *len));
        total += *len as u64;
    }
    set_mode(&tree.join("modes/exec.sh"), 0o750);
    set_mode(&tree.join("modes/secret"), 0o600);
    set_mode(&tree.join("modes/dir750"), 0o750);
    for (i, (path, _)) in files.iter().enumerate() {
        set_mtime(path, 1_600_000_000 + i as u64 * 1000, 123_456_789 - i as u32);
    }
    // Symlinks inside the tree (relative, staying beneath it): recreated.
    fs::create_dir(tree.join("links")).expect("mkdir links");
    symlink("../one", tree.join("links/to-one")).expect("symlink");
    symlink("to-one", tree.join("links/chained")).expect("symlink");
    symlink("not-there", tree.join("links/dangling")).expect("symlink");

    let mut server = serve(&d.store, &d.dest, &[]);
    let v = good(&send(&[&tree], &server.addr, &d.cache, &[]), "send the tree");
    assert_eq!(num(&v, "/receiver/files_written"), files.len() as u64, "{v:#}");
    assert_eq!(num(&v, "/receiver/symlinks"), 3, "{v:#}");
    assert_eq!(num(&v, "/receiver/effective_bytes"), total, "{v:#}");
    assert_eq!(num(&v, "/plan/total_bytes"), total, "{v:#}");
    let report = server.wait_event("files_report");
    assert_eq!(num(&report, "/files_written"), files.len() as u64);
    // Names, contents, file modes and mtimes (to the nanosecond), directory
    // modes, link targets. Directory mtimes are not compared: the receiver
    // does not set them (it never calls DestRoot::set_dir_times_and_mode).
    assert_same_tree(&tree, &d.dest.join("tree"));
    let m = fs::metadata(d.dest.join("tree/modes/exec.sh")).expect("stat");
    assert_eq!(m.mode() & 0o7777, 0o750);
    assert_eq!(m.mtime_nsec(), 123_456_789 - (sizes.len() as i64 + 2));
}

// ---------------------------------------------------------------------------
// 2. a sparse multi-GiB file

/// Asserts two files have equal length and bytes, reading both in 1 MiB pieces.
fn assert_same_content(a: &Path, b: &Path) {
    let (mut fa, mut fb) = (File::open(a).expect("open"), File::open(b).expect("open"));
    let (la, lb) = (
        fa.metadata().expect("stat").len(),
        fb.metadata().expect("stat").len(),
    );
    assert_eq!(la, lb, "{} and {} differ in length", a.display(), b.display());
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut at = 0u64;
    while at < la {
        let n = (la - at).min(ba.len() as u64) as usize;
        fa.read_exact(&mut ba[..n]).expect("read");
        fb.read_exact(&mut bb[..n]).expect("read");
        if ba[..n] != bb[..n] {
            let i = ba[..n]
                .iter()
                .zip(&bb[..n])
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            panic!(
                "{} and {} differ at byte {}",
                a.display(),
                b.display(),
                at + i as u64
            );
        }
        at += n as u64;
    }
}

/// The data extents of `path` (`SEEK_DATA`/`SEEK_HOLE`): the byte ranges
/// that may hold something other than zeros.
fn data_extents(path: &Path) -> Vec<(u64, u64)> {
    use rustix::fs::{seek, SeekFrom};
    let f = File::open(path).expect("open");
    let len = f.metadata().expect("stat").len();
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < len {
        let Ok(data) = seek(&f, SeekFrom::Data(pos)) else {
            break; // ENXIO: holes to the end
        };
        let hole = seek(&f, SeekFrom::Hole(data)).expect("SEEK_HOLE").min(len);
        out.push((data, hole));
        pos = hole;
    }
    out
}

/// [`assert_same_content`] for sparse files, reading only the ranges that
/// either file holds data in (elsewhere both read as zeros).
fn assert_same_sparse_content(a: &Path, b: &Path) {
    let (la, lb) = (
        fs::metadata(a).expect("stat").len(),
        fs::metadata(b).expect("stat").len(),
    );
    assert_eq!(la, lb, "{} and {} differ in length", a.display(), b.display());
    let mut ranges = data_extents(a);
    ranges.extend(data_extents(b));
    ranges.sort_unstable();
    let (fa, fb) = (File::open(a).expect("open"), File::open(b).expect("open"));
    let mut done = 0u64;
    for (from, to) in ranges {
        let mut at = from.max(done);
        while at < to {
            let n = (to - at).min(1 << 20) as usize;
            let (mut ba, mut bb) = (vec![0u8; n], vec![0u8; n]);
            std::os::unix::fs::FileExt::read_exact_at(&fa, &mut ba, at).expect("read");
            std::os::unix::fs::FileExt::read_exact_at(&fb, &mut bb, at).expect("read");
            assert!(ba == bb, "{} and {} differ in {at}..{}", a.display(), b.display(), at + n as u64);
            at += n as u64;
        }
        done = done.max(to);
    }
}

#[test]
fn sparse_three_gib_file_round_trips() {
    let d = dirs();
    let path = d.src.join("sparse.img");
    let len: u64 = 3 << 30;
    {
        let mut f = File::create(&path).expect("create");
        f.set_len(len).expect("set_len");
        for (at, bytes) in [
            (0, &b"start"[..]),
            ((1 << 31) - 2, &b"across 2 GiB"[..]),
            (len / 2 + 12_345, &b"middle"[..]),
            (len - 3, &b"end"[..]),
        ] {
            f.seek(SeekFrom::Start(at)).expect("seek");
            f.write_all(bytes).expect("write");
        }
    }
    set_mtime(&path, 1_650_000_000, 987_654_321);
    let server = serve(&d.store, &d.dest, &[]);
    let v = good(
        &send(&[&path], &server.addr, &d.cache, &[]),
        "send the sparse file",
    );
    assert_eq!(num(&v, "/receiver/effective_bytes"), len, "{v:#}");
    // The zero chunks repeat: each travels once, then as a known hash.
    assert!(num(&v, "/receiver/literal_bytes") < 1 << 20, "{v:#}");
    assert!(wire(&v) < 2 << 20, "{v:#}");
    let got = d.dest.join("sparse.img");
    // Kept sparse (the default): the zero chunks were neither read nor
    // written at the destination.
    assert!(allocated_file(&got) <= 1 << 20, "{} bytes allocated", allocated_file(&got));
    assert_same_sparse_content(&path, &got);
    let m = fs::metadata(&got).expect("stat");
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_650_000_000, 987_654_321));
}

/// Bytes the file at `path` takes on disk (`st_blocks * 512`).
fn allocated_file(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").blocks() * 512
}

/// A 64 MiB file with three data extents (4 KiB at the start, 20 KiB
/// unaligned in the middle, 8 KiB at the end) and holes between them.
fn sparse_64_mib(path: &Path) -> u64 {
    let len: u64 = 64 << 20;
    let mut f = File::create(path).expect("create");
    f.set_len(len).expect("set_len");
    for (i, (at, n)) in [(0, 4096), ((20 << 20) + 1_234, 20 << 10), (len - 8192, 8192)]
        .into_iter()
        .enumerate()
    {
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&random_bytes(700 + i as u64, n)).expect("write");
    }
    len
}

#[test]
fn sparse_file_lands_sparse_and_no_sparse_writes_zeros() {
    let d = dirs();
    let path = d.src.join("disk.img");
    let len = sparse_64_mib(&path);
    let server = serve(&d.store, &d.dest, &[]);
    let v = good(
        &send(&[&path], &server.addr, &d.cache, &[]),
        "send a sparse file",
    );
    let got = d.dest.join("disk.img");
    assert_same_sparse_content(&path, &got);
    assert_eq!(num(&v, "/receiver/effective_bytes"), len, "{v:#}");
    assert!(wire(&v) <= 1 << 20, "wire {} bytes: {v:#}", wire(&v));
    assert!(allocated_file(&got) <= 1 << 20, "{} bytes allocated", allocated_file(&got));
    if STORE {
        // The store reserves (and allocates) room for the data, not the holes.
        let blob = allocated_file(&chunk_store(&d.store).join("blob"));
        assert!(blob < 16 << 20, "store blob: {blob} bytes allocated");
    }

    // --no-sparse: every zero written (a new place, nothing to compare with).
    let to = format!("{}:dense", server.addr);
    let v = good(
        &send(&[&path], &to, &d.cache, &["--no-sparse"]),
        "send it --no-sparse",
    );
    let dense = d.dest.join("dense/disk.img");
    assert_same_sparse_content(&path, &dense);
    assert_eq!(num(&v, "/receiver/files_written"), 1, "{v:#}");
    assert!(allocated_file(&dense) >= len, "{} bytes allocated", allocated_file(&dense));
}

// ---------------------------------------------------------------------------
// a permission change alone

#[test]
#[ignore = "needs root (gives the file another owner)"]
fn owner_only_change_is_applied_without_bytes() {
    assert!(rustix::process::geteuid().is_root(), "needs root");
    let d = dirs();
    let path = d.src.join("owned.txt");
    write(&path, &random_bytes(43, 100_000));
    set_mtime(&path, 1_700_000_000, 0);
    let server = serve(&d.store, &d.dest, &[]);
    good(&send(&[&path], &server.addr, &d.cache, &["-a"]), "first send");
    let got = d.dest.join("owned.txt");
    assert_eq!(fs::metadata(&got).expect("stat").uid(), 0);

    std::os::unix::fs::chown(&path, Some(4321), Some(4322)).expect("chown");
    let v = good(&send(&[&path], &server.addr, &d.cache, &["-a"]), "chown-only send");
    let m = fs::metadata(&got).expect("stat");
    assert_eq!((m.uid(), m.gid()), (4321, 4322), "{v:#}");
    assert_eq!(num(&v, "/receiver/files_written"), 0, "{v:#}");
    assert_eq!(num(&v, "/receiver/literal_bytes"), 0, "{v:#}");
}

#[test]
fn chmod_only_change_is_applied_without_bytes() {
    for extra in [&[][..], &["-a"][..], &["-c"][..], &["--no-cache"][..]] {
        let d = dirs();
        let path = d.src.join("secret.txt");
        write(&path, &random_bytes(41, 300_000));
        set_mode(&path, 0o644);
        set_mtime(&path, 1_700_000_000, 5);
        let server = serve(&d.store, &d.dest, &[]);
        good(&send(&[&path], &server.addr, &d.cache, extra), "first send");
        let got = d.dest.join("secret.txt");
        assert_eq!(fs::metadata(&got).expect("stat").mode() & 0o7777, 0o644);

        // chmod leaves size and mtime as they were: only the mode differs.
        set_mode(&path, 0o600);
        let v = good(&send(&[&path], &server.addr, &d.cache, extra), "chmod-only send");
        let m = fs::metadata(&got).expect("stat");
        assert_eq!(m.mode() & 0o7777, 0o600, "{extra:?}: {v:#}");
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_000, 5));
        assert_eq!(num(&v, "/receiver/files_metadata_only"), 1, "{extra:?}: {v:#}");
        assert_eq!(num(&v, "/receiver/files_written"), 0, "{extra:?}: {v:#}");
        assert_eq!(num(&v, "/receiver/literal_bytes"), 0, "{extra:?}: {v:#}");
        assert_same_content(&path, &got);

        // Nothing left to change: the third send leaves it alone.
        let v = good(&send(&[&path], &server.addr, &d.cache, extra), "no-op send");
        assert_eq!(num(&v, "/receiver/files_unchanged"), 1, "{extra:?}: {v:#}");
        assert_eq!(num(&v, "/receiver/files_metadata_only"), 0, "{extra:?}: {v:#}");

        // An mtime-only change (`touch`) is metadata too: no literal byte.
        set_mtime(&path, 1_700_000_100, 0);
        let v = good(&send(&[&path], &server.addr, &d.cache, extra), "touch-only send");
        let m = fs::metadata(&got).expect("stat");
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_100, 0), "{extra:?}");
        assert_eq!(m.mode() & 0o7777, 0o600, "{extra:?}");
        assert_eq!(num(&v, "/receiver/literal_bytes"), 0, "{extra:?}: {v:#}");
        assert_same_content(&path, &got);
    }
}

// ---------------------------------------------------------------------------
// 3, 4. what a repeated or slightly changed send costs

/// Twelve files, 16 MiB in all.
fn make_data_tree(root: &Path, seed: u64) -> u64 {
    let mut total = 0;
    for i in 0..12u64 {
        let len = if i < 8 {
            (1 << 20) + i as usize * 77_777
        } else {
            100_000 * (i as usize - 7)
        };
        write(&root.join(format!("f{i:02}.bin")), &random_bytes(seed + i, len));
        total += len as u64;
    }
    write(&root.join("sub/nested.bin"), &random_bytes(seed + 99, 3 << 20));
    total + (3 << 20)
}

#[test]
fn second_send_moves_almost_nothing() {
    let d = dirs();
    let tree = d.src.join("data");
    let total = make_data_tree(&tree, 10);
    let files = 13;
    let server = serve(&d.store, &d.dest, &[]);
    let first = good(&send(&[&tree], &server.addr, &d.cache, &[]), "first send");
    assert_eq!(num(&first, "/receiver/files_written"), files);
    assert!(num(&first, "/receiver/literal_bytes") >= total, "{first:#}");

    let again = good(&send(&[&tree], &server.addr, &d.cache, &[]), "second send");
    assert_eq!(num(&again, "/receiver/files_unchanged"), files, "{again:#}");
    assert_eq!(num(&again, "/receiver/literal_bytes"), 0, "{again:#}");
    assert!(
        wire(&again) * 100 <= total,
        "second send: {} wire bytes for {total}",
        wire(&again)
    );

    // No quick-check or index cache: the whole index travels, chunks are
    // matched by the store, files are still found unchanged.
    let fresh = d.cache.with_extension("fresh");
    let third = good(
        &send(&[&tree], &server.addr, &fresh, &[]),
        "send with a fresh cache",
    );
    assert_eq!(num(&third, "/receiver/literal_bytes"), 0, "{third:#}");
    assert_eq!(num(&third, "/plan/literal_bytes"), 0, "{third:#}");
    assert!(num(&third, "/index_entries_fetched") > 0, "{third:#}");
    assert_eq!(
        num(&third, "/receiver/files_unchanged") + num(&third, "/receiver/files_written"),
        files,
        "{third:#}"
    );
    assert!(
        wire(&third) * 100 <= total,
        "fresh-cache send: {} wire bytes for {total}",
        wire(&third)
    );
    assert_same_tree(&tree, &d.dest.join("data"));
}

/// A new release of a tree (every mtime new, a few files changed) over the
/// old one: the unchanged files are hashed whole and found held (PROBE), so
/// only the changed ones are chunked; with `--no-probe` every file is.
#[test]
fn new_version_of_a_tree_chunks_only_the_changed_files() {
    let d = dirs();
    let total = make_data_tree(&d.src.join("v1/data"), 10);
    let files = 13;
    let server = serve(&d.store, &d.dest, &[]);
    good(
        &send(&[&d.src.join("v1/data")], &server.addr, &d.cache, &[]),
        "version 1",
    );

    // Version 2: a copy (new mtimes, so no quick check), one file changed.
    for (no_probe, name, flip) in [(false, "v2", 0x5a), (true, "v3", 0x33)] {
        let v = d.src.join(name).join("data");
        make_data_tree(&v, 10);
        let changed = v.join("f03.bin");
        let mut bytes = fs::read(&changed).expect("read");
        let mid = bytes.len() / 2;
        bytes[mid] ^= flip;
        write(&changed, &bytes);
        // An unchanged file whose permission bits change: still held, new mode.
        let mode = if no_probe { 0o644 } else { 0o600 };
        fs::set_permissions(v.join("f05.bin"), fs::Permissions::from_mode(mode)).expect("chmod");
        let extra: &[&str] = if no_probe { &["--no-probe"] } else { &[] };
        let out = good(&send(&[&v], &server.addr, &d.cache, extra), name);
        assert_eq!(num(&out, "/receiver/files_written"), 1, "{out:#}");
        assert_eq!(num(&out, "/receiver/files_metadata_only"), files - 1, "{out:#}");
        assert_eq!(num(&out, "/receiver/files_failed"), 0, "{out:#}");
        if no_probe {
            assert_eq!(num(&out, "/sender/files_probed"), 0, "{out:#}");
            assert_eq!(num(&out, "/sender/files_chunked"), files, "{out:#}");
            assert_eq!(num(&out, "/plan/held_files"), 0, "{out:#}");
        } else {
            assert_eq!(num(&out, "/sender/files_probed"), files, "{out:#}");
            assert_eq!(num(&out, "/sender/files_hashed_whole"), files, "{out:#}");
            assert_eq!(num(&out, "/sender/files_chunked"), 1, "{out:#}");
            assert_eq!(num(&out, "/plan/held_files"), files - 1, "{out:#}");
        }
        assert!(
            wire(&out) * 20 <= total,
            "{name}: {} wire bytes for {total}",
            wire(&out)
        );
        assert_same_tree(&v, &d.dest.join("data"));
    }
}

/// The whole-file digests of a held tree are cached by the sender: sending
/// the same tree again reads nothing and chunks nothing.
#[test]
fn a_held_tree_sent_again_is_not_read_again() {
    let d = dirs();
    make_data_tree(&d.src.join("v1/data"), 20);
    let server = serve(&d.store, &d.dest, &[]);
    good(
        &send(&[&d.src.join("v1/data")], &server.addr, &d.cache, &[]),
        "version 1",
    );
    // The same content elsewhere, with old mtimes (the cache skips files
    // modified in the last 2 s).
    let v2 = d.src.join("v2/data");
    make_data_tree(&v2, 20);
    let names: Vec<String> = (0..12)
        .map(|i| format!("f{i:02}.bin"))
        .chain(["sub/nested.bin".into()])
        .collect();
    for (i, n) in names.iter().enumerate() {
        set_mtime(&v2.join(n), 1_500_000_000 + i as u64, 0);
    }
    let files = names.len() as u64;
    let first = good(&send(&[&v2], &server.addr, &d.cache, &[]), "copy, first send");
    assert_eq!(num(&first, "/receiver/files_metadata_only"), files, "{first:#}");
    assert_eq!(num(&first, "/sender/files_hashed_whole"), files, "{first:#}");
    assert_eq!(num(&first, "/sender/files_chunked"), 0, "{first:#}");
    let again = good(&send(&[&v2], &server.addr, &d.cache, &[]), "copy, again");
    assert_eq!(num(&again, "/receiver/files_unchanged"), files, "{again:#}");
    assert_eq!(num(&again, "/sender/files_probed"), files, "{again:#}");
    assert_eq!(num(&again, "/sender/files_hashed_whole"), 0, "{again:#}");
    assert_eq!(num(&again, "/sender/files_chunked"), 0, "{again:#}");
    assert_same_tree(&v2, &d.dest.join("data"));
}

#[test]
fn one_changed_byte_moves_at_most_two_chunks() {
    let d = dirs();
    let path = d.src.join("big.bin");
    let size: u64 = 16 << 20;
    let mut data = random_bytes(4, size as usize);
    write(&path, &data);
    set_mtime(&path, 1_700_000_000, 1);
    let server = serve(&d.store, &d.dest, &[]);
    good(&send(&[&path], &server.addr, &d.cache, &[]), "first send");

    data[(size / 2) as usize + 17] ^= 0x5a;
    write(&path, &data);
    set_mtime(&path, 1_700_000_005, 2);
    let v = good(
        &send(&[&path], &server.addr, &d.cache, &[]),
        "send after one byte changed",
    );
    assert_eq!(num(&v, "/receiver/files_written"), 1, "{v:#}");
    let literal = num(&v, "/receiver/literal_bytes");
    assert!(
        literal > 0 && literal <= 2 * MAX_CHUNK,
        "literal {literal}: {v:#}"
    );
    assert!(
        num(&v, "/receiver/matched_bytes") >= size - 2 * MAX_CHUNK,
        "{v:#}"
    );
    assert_eq!(num(&v, "/receiver/effective_bytes"), size, "{v:#}");
    assert_eq!(
        hash_file(&d.dest.join("big.bin")),
        *blake3::hash(&data).as_bytes()
    );
    let m = fs::metadata(d.dest.join("big.bin")).expect("stat");
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_005, 2));
}

// ---------------------------------------------------------------------------
// 5b. symlinks named on the command line and inside a tree

#[test]
fn symlinks_follow_the_documented_policy() {
    let d = dirs();
    let outside = d.src.join("outside");
    write(&outside.join("secret.txt"), b"outside the tree");
    let tree = d.src.join("tree");
    write(&tree.join("data.txt"), b"in the tree");
    fs::create_dir(tree.join("sub")).expect("mkdir");
    symlink("data.txt", tree.join("ok")).expect("symlink");
    symlink("../data.txt", tree.join("sub/up")).expect("symlink");
    // Links out of the tree: stored as they are, as rsync does (never
    // followed by the receiver).
    symlink("../../outside", tree.join("esc")).expect("symlink");
    symlink(&outside, tree.join("abs")).expect("symlink");
    // A root argument that is a symlink is followed (pfs-files walk docs:
    // "the user named it"): its target's contents arrive under its name.
    let rootlink = d.src.join("rootlink");
    symlink(&outside, &rootlink).expect("symlink");

    let server = serve(&d.store, &d.dest, &[]);
    let out = send(&[&tree, &rootlink], &server.addr, &d.cache, &[]);
    let v = good(&out, "send with links out of the tree");
    assert_eq!(num(&v, "/receiver/symlinks"), 4, "{v:#}");
    let got = d.dest.join("tree");
    assert_eq!(
        fs::read_link(got.join("ok")).expect("ok link"),
        Path::new("data.txt")
    );
    assert_eq!(
        fs::read_link(got.join("sub/up")).expect("up link"),
        Path::new("../data.txt")
    );
    assert_eq!(
        fs::read(got.join("sub/up")).expect("read through up"),
        b"in the tree"
    );
    assert_eq!(
        fs::read_link(got.join("esc")).expect("esc link"),
        Path::new("../../outside")
    );
    assert_eq!(fs::read_link(got.join("abs")).expect("abs link"), outside);
    let root = fs::symlink_metadata(d.dest.join("rootlink")).expect("rootlink arrived");
    assert!(
        root.is_dir(),
        "a symlink named on the command line arrives as what it points to"
    );
    assert_eq!(
        fs::read(d.dest.join("rootlink/secret.txt")).expect("read"),
        b"outside the tree"
    );
    // Nothing was written next to the destination.
    let beside: Vec<_> = fs::read_dir(d.dest.parent().expect("parent"))
        .expect("read_dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    let mut beside: Vec<_> = beside.iter().map(|n| n.to_string_lossy().into_owned()).collect();
    beside.sort();
    let expected: &[&str] = if STORE {
        &["cache", "dest", "src", "store"]
    } else {
        &["cache", "dest", "src"]
    };
    assert_eq!(beside, expected);
}

// ---------------------------------------------------------------------------
// 6. a sender killed mid-transfer

#[test]
fn killed_sender_leaves_no_partial_file_and_a_resend_completes() {
    let d = dirs();
    let tree = d.src.join("big");
    let n = 24;
    let each = 8 << 20;
    for i in 0..n {
        write(&tree.join(format!("f{i:02}.bin")), &random_bytes(600 + i, each));
    }
    let total = n * each as u64;
    let mut server = serve(&d.store, &d.dest, &[]);
    let mut cmd = send_cmd(&[&tree], &server.addr, &d.cache, &[]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut sender = ChildGuard(Some(cmd.spawn().expect("spawn pfs send")));
    // Kill once files are clearly landing, well before the end.
    let got = d.dest.join("big");
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let child = sender.0.as_mut().expect("sender");
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the sender finished ({status}) before it could be killed");
        }
        if final_files(&got).len() >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no file arrived within {EVENT_TIMEOUT:?}"
        );
        thread::sleep(Duration::from_millis(2));
    }
    let mut child = sender.0.take().expect("sender");
    child.kill().expect("SIGKILL the sender");
    let _ = child.wait();
    let failed = server.wait_event("session_failed");
    assert!(failed["error"].as_str().is_some(), "{failed}");

    // Whatever is under a final name is complete and exact; the receiver
    // removed its temporary file when the session failed.
    let landed = final_files(&got);
    eprintln!("{} of {n} files landed before the kill", landed.len());
    assert!(
        !landed.is_empty() && landed.len() < n as usize,
        "{} files landed",
        landed.len()
    );
    for f in &landed {
        let name = f.file_name().expect("name");
        assert_eq!(
            hash_file(f),
            hash_file(&tree.join(name)),
            "{} is not exact",
            f.display()
        );
    }
    // Without a store, a file checkpointed half-way is kept for the resend.
    let left = temp_files(&d.dest);
    assert!(
        left.len() <= usize::from(!STORE),
        "temporary files left behind: {left:?}"
    );

    // The same send again: completes; only what was missing travels.
    let v = good(
        &send(&[&tree], &server.addr, &d.cache, &[]),
        "resend after the kill",
    );
    assert_same_tree(&tree, &got);
    let literal = num(&v, "/receiver/literal_bytes");
    assert!(literal < total, "literal {literal} of {total}: {v:#}");
    assert!(
        num(&v, "/receiver/files_unchanged") >= landed.len() as u64,
        "files that landed before the kill are unchanged: {v:#}"
    );
    // Chunks of the interrupted session were kept: at least the landed files'.
    assert!(literal + landed.len() as u64 * each as u64 <= total, "{v:#}");
    assert!(temp_files(&d.dest).is_empty(), "{:?}", temp_files(&d.dest));
}

// ---------------------------------------------------------------------------
// 7. a damaged receiver store is repaired through NAK/REPAIR

#[test]
fn damaged_store_chunks_are_naked_and_repaired() {
    if !STORE {
        return damaged_destination_file_is_never_copied_and_is_repaired();
    }
    let d = dirs();
    let size = 4 << 20;
    let data = random_bytes(7, size);
    write(&d.src.join("one/a.bin"), &data);
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    good(
        &send(&[&d.src.join("one/a.bin")], &server.addr, &d.cache, &[]),
        "first send",
    );
    server.finish().expect_code(0, "server after one session");

    // Flip bytes in the middle of the store region of a chunk in the middle of the file.
    let recipe = pfs_files::chunk_bytes(&data, &pfs_files::ChunkParams::new(32 << 10).expect("params"));
    let mid = &recipe.chunks[recipe.chunks.len() / 2];
    let loc = {
        let s = pfs_store::Store::open(&chunk_store(&d.store), &pfs_store::StoreConfig::default()).expect("open store");
        s.lookup(&mid.hash).expect("the middle chunk is in the store")
    };
    {
        let mut blob = File::options()
            .read(true)
            .write(true)
            .open(chunk_store(&d.store).join("blob"))
            .expect("open STORE/blob");
        let at = loc.offset + u64::from(loc.len) / 2;
        let mut b = [0u8; 16];
        blob.seek(SeekFrom::Start(at)).expect("seek");
        blob.read_exact(&mut b).expect("read");
        b.iter_mut().for_each(|x| *x ^= 0xff);
        blob.seek(SeekFrom::Start(at)).expect("seek");
        blob.write_all(&b).expect("write");
        blob.sync_all().expect("fsync");
    }
    {
        let s = pfs_store::Store::open(&chunk_store(&d.store), &pfs_store::StoreConfig::default()).expect("open store");
        let bad = s.verify_all(0);
        assert_eq!(bad.len(), 1, "exactly the damaged chunk fails: {bad:?}");
        assert_eq!(bad[0].hash, mid.hash);
    }

    // A modified copy under another name: its middle chunks go as
    // descriptors into the damaged region.
    let server = serve(&d.store, &d.dest, &["--max-sessions", "2"]);
    let mut b = data.clone();
    b[..64].fill(0xb0);
    write(&d.src.join("two/b.bin"), &b);
    let v = good(
        &send(&[&d.src.join("two/b.bin")], &server.addr, &d.cache, &[]),
        "send the copy",
    );
    assert!(num(&v, "/receiver/nak_chunks") >= 1, "{v:#}");
    assert!(num(&v, "/receiver/repaired_bytes") > 0, "{v:#}");
    assert!(num(&v, "/sender/repaired_chunks") >= 1, "{v:#}");
    assert_eq!(hash_file(&d.dest.join("b.bin")), *blake3::hash(&b).as_bytes());

    // The store was repaired: a third copy needs no repair.
    let mut c = data.clone();
    let end = c.len();
    c[end - 64..].fill(0xc0);
    write(&d.src.join("three/c.bin"), &c);
    let v = good(
        &send(&[&d.src.join("three/c.bin")], &server.addr, &d.cache, &[]),
        "send a third copy",
    );
    assert_eq!(num(&v, "/receiver/nak_chunks"), 0, "{v:#}");
    assert_eq!(num(&v, "/sender/repaired_chunks"), 0, "{v:#}");
    assert!(num(&v, "/receiver/matched_bytes") >= u64::from(mid.len), "{v:#}");
    assert_eq!(hash_file(&d.dest.join("c.bin")), *blake3::hash(&c).as_bytes());
    server.finish().expect_code(0, "server after two sessions");
    assert_store_verifies(&chunk_store(&d.store));
    assert_eq!(hash_file(&d.dest.join("a.bin")), *blake3::hash(&data).as_bytes());
}

/// Without a store: a held file changed behind the receiver's back (same
/// inode, size and mtime) is detected when a new file references it; the
/// new file gets the chunk through NAK/REPAIR, the changed file is left as
/// its owner made it, and later sends no longer reference it.
fn damaged_destination_file_is_never_copied_and_is_repaired() {
    let d = dirs();
    let size = 4 << 20;
    let data = random_bytes(7, size);
    write(&d.src.join("one/a.bin"), &data);
    let server = serve(&d.store, &d.dest, &["--max-sessions", "3"]);
    good(
        &send(&[&d.src.join("one/a.bin")], &server.addr, &d.cache, &[]),
        "first send",
    );
    // Flip bytes in the middle of the held file, keeping its mtime.
    let held = d.dest.join("a.bin");
    let before = fs::metadata(&held).expect("stat");
    {
        let mut f = File::options().read(true).write(true).open(&held).expect("open a.bin");
        let at = size as u64 / 2;
        let mut b = [0u8; 16];
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.read_exact(&mut b).expect("read");
        b.iter_mut().for_each(|x| *x ^= 0xff);
        f.seek(SeekFrom::Start(at)).expect("seek");
        f.write_all(&b).expect("write");
    }
    set_mtime(&held, before.mtime() as u64, before.mtime_nsec() as u32);
    let damaged = hash_file(&held);

    // A modified copy under another name: its middle chunks go as
    // descriptors into the damaged file.
    let mut b = data.clone();
    b[..64].fill(0xb0);
    write(&d.src.join("two/b.bin"), &b);
    let v = good(
        &send(&[&d.src.join("two/b.bin")], &server.addr, &d.cache, &[]),
        "send the copy",
    );
    assert!(num(&v, "/receiver/nak_chunks") >= 1, "{v:#}");
    assert!(num(&v, "/receiver/repaired_bytes") > 0, "{v:#}");
    assert!(num(&v, "/sender/repaired_chunks") >= 1, "{v:#}");
    assert_eq!(hash_file(&d.dest.join("b.bin")), *blake3::hash(&b).as_bytes());
    assert_eq!(hash_file(&held), damaged, "the changed file is not ours to touch");

    // The good bytes are held in b.bin now: a third copy needs no repair.
    let mut c = data.clone();
    let end = c.len();
    c[end - 64..].fill(0xc0);
    write(&d.src.join("three/c.bin"), &c);
    let v = good(
        &send(&[&d.src.join("three/c.bin")], &server.addr, &d.cache, &[]),
        "send a third copy",
    );
    assert_eq!(num(&v, "/receiver/nak_chunks"), 0, "{v:#}");
    assert!(num(&v, "/receiver/matched_bytes") >= size as u64 - 2 * MAX_CHUNK, "{v:#}");
    assert_eq!(hash_file(&d.dest.join("c.bin")), *blake3::hash(&c).as_bytes());
    server.finish().expect_code(0, "server after three sessions");
}

// ---------------------------------------------------------------------------
// 8. two senders at once

#[test]
fn two_concurrent_senders_share_one_store() {
    let d = dirs();
    let shared = random_bytes(800, 3 << 20);
    for (name, seed) in [("A", 810u64), ("B", 820)] {
        let root = d.src.join(name);
        for i in 0..5 {
            write(
                &root.join(format!("f{i}.bin")),
                &random_bytes(seed + i, (1 << 20) + 4096 * i as usize),
            );
        }
        // The same content in both trees: both sessions append its chunks.
        write(&root.join("shared.bin"), &shared);
    }
    let server = serve(&d.store, &d.dest, &["--max-clients", "2", "--max-sessions", "2"]);
    let spawn = |name: &str| {
        let mut cmd = send_cmd(&[&d.src.join(name)], &server.addr, &d.cache.join(name), &[]);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("spawn pfs send")
    };
    let (a, b) = (spawn("A"), spawn("B"));
    let (a, b) = (collect(a, "sender A"), collect(b, "sender B"));
    good(&a, "sender A");
    good(&b, "sender B");
    assert_same_tree(&d.src.join("A"), &d.dest.join("A"));
    assert_same_tree(&d.src.join("B"), &d.dest.join("B"));
    let done = server.finish();
    done.expect_code(0, "server after two sessions");
    assert_eq!(
        done.stdout.matches("\"files_report\"").count(),
        2,
        "{}",
        done.stdout
    );
    if STORE {
        let stats = assert_store_verifies(&chunk_store(&d.store));
        assert!(stats.chunks > 0);
    }
}

// ---------------------------------------------------------------------------
// 9. a full store refuses before touching the destination

#[test]
fn full_store_refuses_before_writing_anything() {
    if !STORE {
        return full_destination_refuses_before_writing_anything();
    }
    let d = dirs();
    let big = d.src.join("big");
    write(&big.join("x.bin"), &random_bytes(900, 8 << 20));
    write(&big.join("y.bin"), &random_bytes(901, 8 << 20));
    let mut server = serve(
        &d.store,
        &d.dest,
        &["--store-capacity", "4M", "--max-sessions", "2"],
    );
    let out = send(&[&big], &server.addr, &d.cache, &[]);
    out.expect_code(4, "send into a full store");
    assert!(out.stderr.contains("receiver full"), "stderr: {}", out.stderr);
    let failed = server.wait_event("session_failed");
    assert!(
        failed["error"].as_str().unwrap_or("").contains("receiver full"),
        "{failed}"
    );
    let left: Vec<_> = fs::read_dir(&d.dest)
        .expect("read dest")
        .filter_map(Result::ok)
        .filter(|e| e.file_name() != STATE_DIR)
        .collect();
    assert!(left.is_empty(), "the destination was touched: {left:?}");

    // The server keeps serving.
    let small = d.src.join("small");
    write(&small.join("s.txt"), b"small enough");
    good(
        &send(&[&small], &server.addr, &d.cache, &[]),
        "small send after the refusal",
    );
    assert_same_tree(&small, &d.dest.join("small"));
    server.finish().expect_code(0, "server after two sessions");
    assert_store_verifies(&chunk_store(&d.store));
}

/// Without a store: a destination filesystem without room for the plan's
/// new bytes refuses before any file is written (a 6 MiB tmpfs; root only).
fn full_destination_refuses_before_writing_anything() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a small tmpfs as the destination needs root");
        return;
    }
    let d = dirs();
    fs::create_dir_all(&d.dest).expect("mkdir dest");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=6m", "pfs-test"])
        .arg(&d.dest)
        .status()
        .expect("run mount");
    assert!(mounted.success(), "mount a tmpfs on {}", d.dest.display());
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(d.dest.clone());
    let big = d.src.join("big");
    write(&big.join("x.bin"), &random_bytes(900, 8 << 20));
    write(&big.join("y.bin"), &random_bytes(901, 8 << 20));
    let mut server = serve(&d.store, &d.dest, &["--max-sessions", "2"]);
    let out = send(&[&big], &server.addr, &d.cache, &[]);
    out.expect_code(4, "send into a full destination");
    assert!(out.stderr.contains("receiver full"), "stderr: {}", out.stderr);
    let failed = server.wait_event("session_failed");
    assert!(failed["error"].as_str().unwrap_or("").contains("receiver full"), "{failed}");
    assert!(!d.dest.join("big").exists(), "the destination was touched");
    // The server keeps serving.
    let small = d.src.join("small");
    write(&small.join("s.txt"), b"small enough");
    good(&send(&[&small], &server.addr, &d.cache, &[]), "small send after the refusal");
    assert_same_tree(&small, &d.dest.join("small"));
    server.finish().expect_code(0, "server after two sessions");
}

// ---------------------------------------------------------------------------
// 10. a server restarted on the same store

#[test]
fn restarted_server_uses_the_persisted_store_and_index() {
    let d = dirs();
    let t1 = d.src.join("t1");
    for i in 0..4u64 {
        write(&t1.join(format!("f{i}.bin")), &random_bytes(1000 + i, 1 << 20));
    }
    let server = serve(&d.store, &d.dest, &["--max-sessions", "2"]);
    let first = good(&send(&[&t1], &server.addr, &d.cache, &[]), "first send");
    let generation = num(&first, "/receiver/store_generation");
    // The index a sender caches is the one it fetched before sending; a dry
    // run brings the cache up to date with the first send's chunks.
    let dry = send(&[&t1], &server.addr, &d.cache, &["--dry-run"]);
    dry.expect_code(0, "dry run");
    let dry = dry.json("dry run");
    assert_eq!(num(&dry, "/index_entries_fetched"), generation, "{dry:#}");
    let port1 = server.addr.clone();
    server.finish().expect_code(0, "first server");

    // A modified copy: one file changed, one added.
    let t2 = d.src.join("t2");
    for i in 0..4u64 {
        let mut data = random_bytes(1000 + i, 1 << 20);
        if i == 2 {
            data[500_000] ^= 1;
        }
        write(&t2.join(format!("f{i}.bin")), &data);
    }
    write(&t2.join("new.bin"), &random_bytes(1100, 300_000));
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    assert_ne!(server.addr, port1, "a new port");
    let to = format!("{}:other", server.addr);
    let v = good(&send(&[&t2], &to, &d.cache, &[]), "send after the restart");
    assert_eq!(v["remote_dir"], "other");
    assert_eq!(v["store_id"], first["store_id"], "the same store");
    assert!(num(&v, "/receiver/matched_bytes") >= 3 << 20, "{v:#}");
    assert!(
        num(&v, "/receiver/literal_bytes") <= 300_000 + 2 * MAX_CHUNK,
        "{v:#}"
    );
    // Same store id and generation after the restart: nothing to fetch.
    assert_eq!(num(&v, "/store_generation"), generation, "{v:#}");
    assert_eq!(num(&v, "/index_entries_cached"), generation, "{v:#}");
    assert_eq!(
        num(&v, "/index_entries_fetched"),
        0,
        "the cache had the whole index: {v:#}"
    );
    server.finish().expect_code(0, "second server");
    assert_same_tree(&t2, &d.dest.join("other/t2"));
    assert_same_tree(&t1, &d.dest.join("t1"));
}

// ---------------------------------------------------------------------------
// 11. --dry-run, --exclude, --transport shm, --compress

#[test]
fn dry_run_sends_no_file_data() {
    let d = dirs();
    let tree = d.src.join("t");
    write(&tree.join("a.bin"), &random_bytes(1, 2 << 20));
    write(&tree.join("b.bin"), &random_bytes(2, 1 << 20));
    let mut server = serve(&d.store, &d.dest, &[]);
    good(&send(&[&tree], &server.addr, &d.cache, &[]), "first send");
    server.wait_event("files_report");
    let before = snapshot(&d.dest);

    write(&tree.join("b.bin"), &random_bytes(3, 1 << 20));
    write(&tree.join("c.bin"), &random_bytes(4, 500_000));
    let out = send(&[&tree], &server.addr, &d.cache, &["--dry-run"]);
    out.expect_code(0, "dry run");
    let v = out.json("dry run");
    assert_eq!(v["dry_run"], true, "{v:#}");
    assert!(v["receiver"].is_null(), "{v:#}");
    // a.bin is unchanged: held by the receiver (PROBE), so neither
    // descriptors nor literals would travel for it.
    assert_eq!(num(&v, "/plan/held_files"), 1, "{v:#}");
    assert_eq!(num(&v, "/plan/held_bytes"), 2 << 20, "{v:#}");
    assert_eq!(num(&v, "/plan/matched_bytes"), 0, "{v:#}");
    assert!(num(&v, "/plan/literal_bytes") >= 1_500_000, "{v:#}");
    assert_eq!(num(&v, "/plan/total_bytes"), (3 << 20) + 500_000, "{v:#}");
    // Only the handshake and the index crossed: far less than the new data.
    assert!(wire(&v) < 100_000, "{v:#}");
    let report = server.wait_event("files_report");
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(snapshot(&d.dest), before, "the destination changed");
}

#[test]
fn exclude_skips_matching_names() {
    let d = dirs();
    let tree = d.src.join("t");
    write(&tree.join("keep.txt"), b"keep");
    write(&tree.join("skip.log"), b"skip");
    write(&tree.join("sub/deeper.log"), b"skip");
    write(&tree.join("sub/keep.bin"), b"keep");
    write(&tree.join("build/out.o"), b"skip");
    let server = serve(&d.store, &d.dest, &[]);
    let v = good(
        &send(
            &[&tree],
            &server.addr,
            &d.cache,
            &["--exclude", "*.log", "--exclude", "build/"],
        ),
        "send with excludes",
    );
    assert_eq!(num(&v, "/receiver/files_written"), 2, "{v:#}");
    let got = snapshot(&d.dest.join("t"));
    let names: Vec<String> = got.keys().map(|k| lossy(k)).collect();
    assert_eq!(names, ["keep.txt", "sub", "sub/keep.bin"]);
}

#[test]
fn shm_transport_round_trip() {
    let d = dirs();
    let tree = d.src.join("t");
    write(&tree.join("a.bin"), &random_bytes(21, 700_000));
    write(&tree.join("b/c.txt"), b"over shared memory");
    let sock = d.store.with_extension("sock");
    let sock = sock.to_str().expect("utf-8 temporary path");
    let server = serve(
        &d.store,
        &d.dest,
        &["--transport", "shm", "--listen", sock, "--max-sessions", "1"],
    );
    assert_eq!(server.addr, sock);
    let v = good(
        &send(&[&tree], &format!("{sock}:in"), &d.cache, &["--transport", "shm"]),
        "send over shm",
    );
    assert_eq!(v["transport"], "SHM", "{v:#}");
    server.finish().expect_code(0, "shm server");
    assert_same_tree(&tree, &d.dest.join("in/t"));
}

#[test]
fn compressed_literals_round_trip_with_fewer_wire_bytes() {
    let d = dirs();
    let path = d.src.join("log.txt");
    // Compressible, but no two chunks alike (no dedup within the file).
    let mut text = String::new();
    let mut i = 0u64;
    while text.len() < 4 << 20 {
        text.push_str(&format!(
            "{i:08} GET /objects/{:x} 200 {} bytes\n",
            i * 2_654_435_761,
            i % 9973
        ));
        i += 1;
    }
    write(&path, text.as_bytes());
    let server = serve(&d.store, &d.dest, &[]);
    let v = good(
        &send(&[&path], &server.addr, &d.cache, &["--compress"]),
        "compressed send",
    );
    let literal = num(&v, "/receiver/literal_bytes");
    let on_wire = num(&v, "/receiver/literal_wire_bytes");
    assert_eq!(literal, text.len() as u64, "{v:#}");
    assert!(on_wire * 2 < literal, "literal {literal}, on the wire {on_wire}");
    assert!(wire(&v) < literal, "{v:#}");
    assert_eq!(fs::read(d.dest.join("log.txt")).expect("read"), text.as_bytes());
}

// ---------------------------------------------------------------------------
// 12. progress on stderr, files that change under the sender

#[test]
fn progress_is_plain_lines_when_stderr_is_not_a_terminal() {
    let d = dirs();
    let tree = d.src.join("t");
    write(&tree.join("big.bin"), &random_bytes(41, 24 << 20));
    write(&tree.join("a.txt"), b"a");
    write(&tree.join("b.txt"), b"b");
    let server = serve(&d.store, &d.dest, &[]);
    // (options, whether lines appear): stderr is a pipe here.
    let cases: [(&[&str], bool); 4] = [
        (&["--progress", "always", "--log-interval", "0.05"], true),
        (&["--progress", "always"], true),
        (&["--log-interval", "0.05"], true),
        (&["--progress", "auto"], false),
    ];
    for (k, (extra, shown)) in cases.into_iter().enumerate() {
        let remote = format!("{}:r{k}", server.addr);
        let out = send(&[&tree], &remote, &d.cache, extra);
        good(&out, &format!("send {extra:?}"));
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter_map(|l| l.strip_prefix("pfs send: "))
            .collect();
        if !shown {
            assert!(lines.is_empty(), "{extra:?}: {}", out.stderr);
            continue;
        }
        // How many depends on the machine's speed; the last one is the end.
        let verbs = ["starting ", "hashing ", "chunking ", "sending ", "sent "];
        for l in &lines {
            assert!(verbs.iter().any(|v| l.starts_with(v)), "{extra:?}: {l}");
        }
        let last = lines.last().unwrap_or_else(|| panic!("{extra:?}: no line: {}", out.stderr));
        assert!(
            last.starts_with("sent 25.2 MB of 25.2 MB (100 %), 4 of 4 entries, "),
            "{extra:?}: {last}"
        );
    }
    let out = send(&[&tree], &format!("{}:r9", server.addr), &d.cache, &["--progress", "never"]);
    good(&out, "send --progress never");
    assert!(!out.stderr.contains("pfs send: "), "{}", out.stderr);
}

#[test]
fn a_file_rewritten_with_its_size_and_mtime_kept_is_sent_as_it_is_now() {
    let d = dirs();
    let tree = d.src.join("t");
    let a = tree.join("a.bin");
    write(&a, &random_bytes(51, 600_000));
    write(&tree.join("b.bin"), &random_bytes(52, 300_000));
    write(&tree.join("c.txt"), b"small");
    for name in ["a.bin", "b.bin", "c.txt"] {
        set_mtime(&tree.join(name), 1_600_000_000, 0);
    }
    let server = serve(&d.store, &d.dest, &[]);
    good(&send(&[&tree], &server.addr, &d.cache, &[]), "first send");
    // Rewritten in place with its size and mtime kept: the quick-check
    // cache keys on ctime too, so the old recipe is not trusted.
    let mut data = fs::read(&a).expect("read");
    data[400_000] ^= 0xff;
    fs::write(&a, &data).expect("rewrite");
    set_mtime(&a, 1_600_000_000, 0);
    // A receiver holding nothing: every chunk travels as literal bytes.
    let fresh = dirs();
    let server2 = serve(&fresh.store, &fresh.dest, &[]);
    let v = good(&send(&[&tree], &server2.addr, &d.cache, &[]), "a rewritten file");
    assert_eq!(num(&v, "/receiver/files_written"), 3, "{v:#}");
    assert_eq!(fs::read(fresh.dest.join("t/a.bin")).expect("a.bin"), data);
    assert_eq!(fs::read(fresh.dest.join("t/c.txt")).expect("c.txt"), b"small");
    assert!(temp_files(&fresh.dest).is_empty());
}

// ---------------------------------------------------------------------------
// A full store's filesystem (root: a small tmpfs mounted here)

/// A tmpfs of `mib` MiB mounted in a temporary directory, unmounted on
/// drop; fails, saying why, when not root or mounting fails.
struct SmallFs {
    mnt: tempfile::TempDir,
}

impl SmallFs {
    fn mount(mib: u64) -> Self {
        assert!(
            rustix::process::geteuid().is_root(),
            "needs root: mounting a small tmpfs needs root"
        );
        let mnt = tempfile::tempdir().expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "pfs-test"])
            .arg(mnt.path())
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "needs mounting a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Self { mnt }
    }

    fn path(&self) -> &Path {
        self.mnt.path()
    }

    /// Bytes free for an unprivileged writer.
    fn free(&self) -> u64 {
        let st = rustix::fs::statvfs(self.path()).expect("statvfs");
        st.f_bavail * st.f_frsize
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.mnt.path()).status();
    }
}

/// Re-sending a 20 MB file the store already holds, with less than 20 MB
/// free on the store's filesystem: nothing new is needed, so nothing may
/// fail (docs/wire.md §10.5: space for the bytes the PLAN has not chunked
/// yet is taken as their chunks arrive). Issue 26 item 11.
#[test]
#[ignore = "needs root (mounts a small tmpfs)"]
fn a_held_file_is_sent_again_onto_a_nearly_full_store() {
    const SIZE: usize = 20_000_000;
    let fs_ = SmallFs::mount(48);
    let d = dirs();
    let store = fs_.path().join("store");
    let data = random_bytes(91, SIZE);
    write(&d.src.join("big.bin"), &data);
    let mut extra = vec!["--max-sessions", "3"];
    if !STORE {
        extra.extend(["--store", store.to_str().expect("utf-8 path")]);
    }
    let server = serve(&store, &d.dest, &extra);
    good(
        &send(&[&d.src.join("big.bin")], &format!("{}:first", server.addr), &d.cache, &[]),
        "first send",
    );
    // Leave 19 MB free: less than the file, more than the store needs.
    let free = fs_.free();
    assert!(free > 19_000_000, "the tmpfs has {free} bytes free after the first send");
    let filler = fs_.path().join("filler");
    write(&filler, &vec![0u8; (free - 19_000_000) as usize]);
    let free = fs_.free();
    assert!(free < SIZE as u64, "{free} bytes free");
    // A sender that has not chunked the file yet (a fresh cache): it
    // counts it in `pending_bytes`.
    let fresh_cache = d.cache.with_file_name("cache2");
    let v = good(
        &send(&[&d.src.join("big.bin")], &format!("{}:second", server.addr), &fresh_cache, &[]),
        "a held file sent again",
    );
    assert_eq!(num(&v, "/receiver/files_written"), 1, "{v:#}");
    assert_eq!(fs::read(d.dest.join("second/big.bin")).expect("second copy"), data);
    // And a legitimate new file that fits still lands.
    let small = random_bytes(92, 1_000_000);
    write(&d.src.join("new.bin"), &small);
    good(
        &send(&[&d.src.join("new.bin")], &format!("{}:third", server.addr), &fresh_cache, &[]),
        "a new file that fits",
    );
    assert_eq!(fs::read(d.dest.join("third/new.bin")).expect("third"), small);
    server.finish();
}
