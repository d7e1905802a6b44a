//! `pfs send --catch-up` against `pfs serve --allow-catch-up` (docs/wire.md
//! §16): a receiver whose named blob holds other bytes is brought to the
//! sender's before the grams, its blob verifies and keeps them for the next
//! server; without `--allow-catch-up` the receiver refuses and says how.

mod common;
use common::{run, Out, Server};

use std::path::Path;
use std::process::Command;

const SIZE: &str = "8M";

fn pfs(args: &[&str], store: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(args)
        .env("PFS_BLOB_DIR", store)
        .env("PFS_META_DIR", store);
    cmd
}

fn serve(args: &[&str], store: &Path) -> Server {
    let mut all = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--once",
        "--blob-name",
        "replica",
        "--size",
        SIZE,
    ];
    all.extend_from_slice(args);
    Server::spawn(pfs(&all, store))
}

fn send(addr: &str, extra: &[&str], store: &Path) -> Out {
    let mut args = vec![
        "send", "--to", addr, "--size", SIZE, "--seed", "7", "--bytes", "16M", "--json",
    ];
    args.extend_from_slice(extra);
    run(pfs(&args, store))
}

#[test]
fn a_receiver_with_other_bytes_is_caught_up_and_keeps_them() {
    let store = tempfile::tempdir().expect("temp dir");
    let dir = store.path();
    // The receiver's blob is seed 9's; the sender's seed 7's.
    let server = serve(&["--allow-catch-up", "--seed", "9", "--blob-keep"], dir);
    let out = send(&server.addr, &["--catch-up"], dir);
    out.expect_code(0, "send --catch-up");
    let v = out.json("send --catch-up");
    assert_eq!(v["receiver"]["integrity"], "OK", "{v:#}");
    let c = &v["catch_up"];
    let blocks = (8u64 << 20) / (16 << 10);
    assert_eq!(c["blocks_compared"].as_u64(), Some(blocks), "{v:#}");
    assert_eq!(
        c["blocks_sent"].as_u64(),
        Some(blocks),
        "other seeds differ everywhere: {v:#}"
    );
    assert_eq!(c["bytes_sent"].as_u64(), Some(8 << 20), "{v:#}");
    assert!(c["wire_bytes"].as_u64().unwrap() > 8 << 20, "{v:#}");
    assert!(c["elapsed_s"].as_f64().is_some(), "{v:#}");
    server.finish().expect_code(0, "pfs serve --once");

    // The stored fingerprint is the content's: the blob verifies.
    run(pfs(&["blob", "verify", "--blob-name", "replica"], dir)).expect_code(0, "blob verify");
    // A new server on the same blob (its bytes kept: --no-fill) takes the
    // sender without a catch-up.
    let server = serve(&["--no-fill"], dir);
    let out = send(&server.addr, &[], dir);
    out.expect_code(0, "send to the caught-up blob");
    assert!(out.json("send")["catch_up"].is_null());
    server.finish().expect_code(0, "pfs serve --once");
    run(pfs(&["blob", "rm", "--blob-name", "replica"], dir)).expect_code(0, "blob rm");
}

#[test]
fn without_allow_catch_up_the_receiver_refuses_and_says_how() {
    let store = tempfile::tempdir().expect("temp dir");
    let dir = store.path();
    let server = serve(&["--seed", "9"], dir);
    let out = send(&server.addr, &["--catch-up"], dir);
    assert_ne!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("BLOB_MISMATCH"), "{}", out.stderr);
    assert!(out.stderr.contains("--allow-catch-up"), "{}", out.stderr);
    let _ = server.finish();
}
