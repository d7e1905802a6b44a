//! Every example's main logic, run as a test: the examples under
//! `examples/` stay compiling and working (each takes a second or two).

#[path = "../examples/gram_loopback.rs"]
#[allow(dead_code)]
mod gram_loopback;

#[path = "../examples/files_tree.rs"]
#[allow(dead_code)]
mod files_tree;

#[path = "../examples/same_host_ring.rs"]
#[allow(dead_code)]
mod same_host_ring;

#[path = "../examples/keys.rs"]
#[allow(dead_code)]
mod keys;

#[path = "../examples/stream_replicate.rs"]
#[allow(dead_code)]
mod stream_replicate;

#[path = "../examples/stream_latency.rs"]
#[allow(dead_code)]
mod stream_latency;

#[test]
fn gram_send_and_serve_over_loopback() {
    let stats = gram_loopback::run().expect("session");
    assert!(stats.ok(), "{}", stats.human());
}

#[test]
fn a_tree_sent_twice_moves_its_data_once() {
    let scratch = tempfile::tempdir().expect("scratch");
    let (first, second) = files_tree::run(scratch.path()).expect("sends");
    assert_eq!(first.written, 2, "{first:?}");
    assert!(first.wire_bytes > 1_000_000, "{first:?}");
    // The second send finds every file unchanged: almost nothing travels.
    assert_eq!(second.written, 0, "{second:?}");
    assert!(second.wire_bytes < 100_000, "{second:?}");
    let copy = std::fs::read(scratch.path().join("dest/tree/sub/b.txt")).expect("copy");
    assert_eq!(copy, b"hello, packetfs\n");
}

#[test]
fn ring_echo() {
    let dir = tempfile::tempdir().expect("scratch");
    let replies = same_host_ring::run(&dir.path().join("echo.sock"), 3).expect("echo");
    assert_eq!(replies, [&b"message 0"[..], b"message 1", b"message 2"]);
}

#[test]
fn keys_generated_authorized_and_pinned() {
    let dir = tempfile::tempdir().expect("scratch");
    let trust = keys::run(dir.path()).expect("keys");
    assert!(trust.server_known);
    let rights = trust.client_rights.expect("the client's key is authorized");
    assert!(rights.starts_with("dir=backups group=key-"), "{rights}");
}

#[test]
fn a_replica_follows_its_primary() {
    let o = stream_replicate::run(4 << 20, 200).expect("replication");
    assert!(o.fingerprints_equal && o.digests_matched, "{o:?}");
    assert_eq!(o.grams, 200);
    // Each change costs its bytes plus about 70 bytes of frame, gram
    // header and entry, and the handshake.
    assert!(o.wire_bytes < o.bytes_changed + 200 * 80 + 200, "{o:?}");
}

#[test]
fn every_record_makes_a_round_trip() {
    let l = stream_latency::run(200).expect("latency run");
    assert_eq!(l.received, 200, "{l:?}");
    assert_eq!(l.sorted_ns.len(), 200);
    // The histogram holds every sample, one line per log2 bucket.
    let buckets = l.buckets();
    assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 200);
    assert_eq!(l.histogram().lines().count(), buckets.len());
    assert!(l.percentile(50.0) <= l.percentile(99.9) && l.percentile(99.9) <= l.percentile(100.0));
}

/// The README's Library section runs exactly these examples.
#[test]
fn the_readme_names_every_example() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("examples/")
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".rs")
                .map(str::to_string)
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "files_tree",
            "gram_loopback",
            "keys",
            "same_host_ring",
            "stream_catchup",
            "stream_latency",
            "stream_replicate",
            "stream_throughput"
        ]
    );
    for name in &names {
        let cmd = format!("cargo run -p packetfs --example {name}");
        assert!(readme.contains(&cmd), "README.md lacks `{cmd}`");
    }
}
