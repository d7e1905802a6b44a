//! End-to-end tests of file transfer: `pfs send PATH… --to ADDR[:DIR]` into a
//! `pfs serve --dest DIR` (docs/wire.md §10), run as a user would: here with
//! one copy on disk (no store); `files_protected.rs` runs them with `--store`.
//!
//! Every child is bounded (see `common`): senders run to completion within
//! `common::CMD_TIMEOUT`, servers exit by `--max-sessions` or are killed on
//! drop, and every wait on a server event or on the file system has a
//! deadline. Servers listen on `127.0.0.1:0` (or a socket in a temporary
//! directory) and print JSON events; senders always get a private
//! `--cache-dir`. Test data is generated from fixed seeds.
//!
//! The same tests run again in `files_protected.rs` with every session
//! protected (keys, ChaCha20-Poly1305 records); the body is
//! `suites/files.rs`.

mod common;

/// Plain sessions.
const PROTECTED: Option<&str> = None;

/// Whether the server keeps a content store (`--store`) besides the destination.
const STORE: bool = false;

include!("suites/files.rs");

// ---------------------------------------------------------------------------
// One copy on disk (no --store): the destination's files are what the
// receiver deduplicates against.

/// Bytes allocated on disk beneath `root` (st_blocks, hard links once).
fn allocated(root: &Path) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).expect("read_dir").filter_map(Result::ok) {
            let m = fs::symlink_metadata(e.path()).expect("lstat");
            if m.is_dir() {
                stack.push(e.path());
            }
            if seen.insert((m.dev(), m.ino())) {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

#[test]
fn a_tree_sent_twice_under_two_names_is_held_once_per_name_and_nowhere_else() {
    let d = dirs();
    let tree = d.src.join("tree");
    let mut bytes = 0;
    for i in 0..12u64 {
        let data = random_bytes(3000 + i, (1 << 20) + (i as usize) * 150_000);
        bytes += data.len() as u64;
        write(&tree.join(format!("d{}/f{i}.bin", i % 3)), &data);
    }
    let server = serve(&d.store, &d.dest, &["--max-sessions", "2"]);
    good(
        &send(&[&tree], &format!("{}:a", server.addr), &d.cache, &[]),
        "first name",
    );
    let v = good(
        &send(&[&tree], &format!("{}:b", server.addr), &d.cache, &[]),
        "second name",
    );
    server.finish().expect_code(0, "server after two sessions");
    assert_same_tree(&tree, &d.dest.join("a/tree"));
    assert_same_tree(&tree, &d.dest.join("b/tree"));
    // The second copy came from the first, not over the wire.
    assert!(
        num(&v, "/receiver/matched_bytes") >= bytes - 2 * MAX_CHUNK,
        "{v:#}"
    );
    assert!(wire(&v) < bytes / 20, "{v:#}");
    // No hidden second copy: the two trees, and an index far smaller than them.
    assert!(!d.store.exists(), "no store was made");
    let state = allocated(&d.dest.join(STATE_DIR));
    let all = allocated(&d.dest);
    assert!(
        state < bytes / 50,
        "receiver state {state} B for {bytes} B of files"
    );
    assert!(
        (all - state) as f64 <= 1.05 * 2.0 * bytes as f64,
        "{all} B allocated under the destination for 2 × {bytes} B"
    );
}

/// A destination filled by other means (here a plain copy, as an earlier
/// rsync would have left it): the receiver indexes the older version of
/// each file a sender probes, so a new version moves only what changed,
/// and a file with the same bytes under an older mtime only gets its mtime.
#[test]
fn files_already_at_the_destination_serve_the_new_versions() {
    let d = dirs();
    let old = random_bytes(7, 4 << 20);
    let mut new = old.clone();
    new[1 << 20..(1 << 20) + 100].fill(0xee);
    let same = random_bytes(8, 1 << 20);
    write(&d.src.join("tree/big.bin"), &new);
    write(&d.src.join("tree/same.bin"), &same);
    // The older versions, where the send lands them, never seen by pfs (a
    // day older: the quick check must not pass).
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    for (name, bytes) in [("big.bin", &old), ("same.bin", &same)] {
        let p = d.dest.join("tree").join(name);
        write(&p, bytes);
        fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(day_ago))
            .expect("set mtime");
    }
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    let v = good(
        &send(&[&d.src.join("tree")], &server.addr, &d.cache, &[]),
        "new versions over copied old ones",
    );
    server.finish().expect_code(0, "server");
    assert!(
        fs::read(d.dest.join("tree/big.bin")).unwrap() == new,
        "new version landed"
    );
    assert!(fs::read(d.dest.join("tree/same.bin")).unwrap() == same);
    let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
    assert_eq!(
        mtime(&d.dest.join("tree/same.bin")),
        mtime(&d.src.join("tree/same.bin"))
    );
    assert_eq!(num(&v, "/receiver/files_written"), 1, "{v:#}");
    // Same bytes, older mtime: recognised when probed, only the mtime set.
    assert_eq!(num(&v, "/receiver/files_metadata_only"), 1, "{v:#}");
    assert!(
        num(&v, "/receiver/matched_bytes") >= new.len() as u64 - 4 * MAX_CHUNK,
        "{v:#}"
    );
    assert!(wire(&v) < new.len() as u64 / 8, "{v:#}");
}

#[test]
fn the_receivers_state_directory_is_reserved() {
    let d = dirs();
    write(&d.src.join("x.txt"), b"not for .pfs");
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    let out = send(
        &[&d.src.join("x.txt")],
        &format!("{}:.pfs", server.addr),
        &d.cache,
        &[],
    );
    // Refused before anything is written: the remote directory itself.
    out.expect_code(4, "send into .pfs");
    assert!(out.stderr.contains("`.pfs`"), "{}", out.stderr);
    server.finish();
    assert!(!d.dest.join(".pfs/x.txt").exists());
}

/// A receiver killed with SIGKILL while a new version of a tree replaces
/// the old: every file under its final name is one version or the other,
/// never a mix; a restarted receiver completes the send without moving
/// what had already landed.
#[test]
fn killed_receiver_leaves_each_file_old_or_new_and_a_resend_completes() {
    let d = dirs();
    let (v1, v2) = (d.src.join("v1/t"), d.src.join("v2/t"));
    let n = 24;
    let each = 4 << 20;
    for i in 0..n {
        let old = random_bytes(4000 + i, each);
        let mut new = old.clone();
        new[each / 2..each / 2 + 4096].fill(0x5a);
        new.extend_from_slice(&random_bytes(5000 + i, 300_000));
        write(&v1.join(format!("f{i:02}.bin")), &old);
        write(&v2.join(format!("f{i:02}.bin")), &new);
    }
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    good(&send(&[&v1], &server.addr, &d.cache, &[]), "version 1");
    server.finish().expect_code(0, "first server");

    let mut server = serve(&d.store, &d.dest, &[]);
    let mut cmd = send_cmd(&[&v2], &server.addr, &d.cache, &[]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut sender = ChildGuard(Some(cmd.spawn().expect("spawn pfs send")));
    let got = d.dest.join("t");
    let new_hash = |i: u64| hash_file(&v2.join(format!("f{i:02}.bin")));
    let old_hash = |i: u64| hash_file(&v1.join(format!("f{i:02}.bin")));
    let landed_new = |got: &Path| {
        (0..n)
            .filter(|&i| hash_file(&got.join(format!("f{i:02}.bin"))) == new_hash(i))
            .count()
    };
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while landed_new(&got) < 2 {
        assert!(
            Instant::now() < deadline,
            "no new file landed within {EVENT_TIMEOUT:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let mut child = server.guard.0.take().expect("server");
    child.kill().expect("SIGKILL the receiver");
    let _ = child.wait();
    let _ = common::wait_bounded(sender.0.as_mut().expect("sender"), Duration::from_secs(60));
    drop(sender);
    let mut new_count = 0;
    for i in 0..n {
        let h = hash_file(&got.join(format!("f{i:02}.bin")));
        assert!(
            h == old_hash(i) || h == new_hash(i),
            "f{i:02}.bin is neither version"
        );
        new_count += usize::from(h == new_hash(i));
    }
    eprintln!("{new_count} of {n} files were new when the receiver died");
    assert!(new_count < n as usize, "the kill came too late to test anything");

    // Restarted: the send completes; the files that had landed stay.
    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    let v = good(
        &send(&[&v2], &server.addr, &d.cache, &[]),
        "resend after the kill",
    );
    server.finish().expect_code(0, "restarted server");
    assert_same_tree(&v2, &got);
    assert!(num(&v, "/receiver/files_unchanged") >= new_count as u64, "{v:#}");
    assert!(
        temp_files(&d.dest).is_empty(),
        "temporary files left: {:?}",
        temp_files(&d.dest)
    );
}

/// A receiver killed half-way through one large file keeps what it had
/// checkpointed (every 64 MiB): the next send of the file moves only the
/// rest, and the partial file is gone once the file lands.
#[test]
fn a_large_file_interrupted_by_a_killed_receiver_resumes_from_its_checkpoint() {
    let d = dirs();
    let size = 200 << 20;
    let data = random_bytes(6000, size);
    let path = d.src.join("large.bin");
    write(&path, &data);
    let mut server = serve(&d.store, &d.dest, &[]);
    let mut cmd = send_cmd(&[&path], &server.addr, &d.cache, &[]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _sender = ChildGuard(Some(cmd.spawn().expect("spawn pfs send")));
    // The first checkpoint is in the index once it grows past its header.
    let index = d.dest.join(".pfs/index");
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while fs::metadata(&index).map_or(0, |m| m.len()) <= 64 {
        assert!(
            Instant::now() < deadline,
            "no checkpoint within {EVENT_TIMEOUT:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let mut child = server.guard.0.take().expect("server");
    child.kill().expect("SIGKILL the receiver");
    let _ = child.wait();
    assert!(
        !d.dest.join("large.bin").exists(),
        "landed before the kill: nothing to test"
    );
    assert_eq!(temp_files(&d.dest).len(), 1, "the partial file is kept");

    let server = serve(&d.store, &d.dest, &["--max-sessions", "1"]);
    assert_eq!(temp_files(&d.dest).len(), 1, "kept across the restart");
    let v = good(
        &send(&[&path], &server.addr, &d.cache, &[]),
        "resend after the kill",
    );
    server.finish().expect_code(0, "restarted server");
    assert_eq!(
        hash_file(&d.dest.join("large.bin")),
        *blake3::hash(&data).as_bytes()
    );
    let matched = num(&v, "/receiver/matched_bytes");
    assert!(
        matched >= (64 << 20) - MAX_CHUNK,
        "checkpointed bytes were not reused: {v:#}"
    );
    assert!(wire(&v) < size as u64 - matched + (1 << 20), "{v:#}");
    assert!(temp_files(&d.dest).is_empty(), "{:?}", temp_files(&d.dest));
}
