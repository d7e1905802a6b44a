//! `pfs serve --dest` serving a mount session (docs/wire.md §12) to a
//! client written by hand: the session's report on stdout (`--json`) and
//! the recipe cache it leaves in `DEST/.pfs`.

mod common;
use common::Server;

use std::fs;
use std::process::Command;
use std::time::Duration;

use pfs_transport::{TcpConfig, TcpTransport, Transport};
use pfs_wire::mount::{
    parse_list, parse_recipe, FetchRun, MountAccept, MountHello, RecipeAsk, ReqHead, FLAG_LAST,
};
use pfs_wire::{put_frame, FrameHeader, FrameType, FRAME_HEADER_LEN};

fn frame(t: &mut TcpTransport) -> (FrameHeader, Vec<u8>) {
    let mut head = [0u8; FRAME_HEADER_LEN];
    t.read_exact(&mut head).expect("header");
    let h = FrameHeader::parse(&head).expect("frame header");
    let mut body = vec![0u8; h.length as usize];
    t.read_exact(&mut body).expect("body");
    (h, body)
}

fn send(t: &mut TcpTransport, ty: FrameType, body: &[u8]) {
    let mut f = Vec::new();
    put_frame(&mut f, ty, 0, body);
    t.write_all(&f).expect("write");
}

#[test]
fn a_mount_session_is_reported_with_what_it_served() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dest = tmp.path().join("dest");
    fs::create_dir_all(dest.join("docs")).expect("mkdir");
    fs::write(dest.join("docs/a.txt"), b"mounted bytes").expect("write");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(["serve", "--json", "--once", "--listen", "127.0.0.1:0", "--dest"])
        .arg(&dest)
        .env("XDG_CONFIG_HOME", tmp.path());
    let mut server = Server::spawn(cmd);

    let mut t = TcpTransport::connect(&server.addr, &TcpConfig::default()).expect("connect");
    t.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let hello = MountHello {
        max_entries: 100,
        max_data_body: 1 << 20,
        session_nonce: 42,
        dir: b"docs",
    };
    send(&mut t, FrameType::MountHello, &hello.emit());
    let (_, body) = frame(&mut t);
    assert_eq!(MountAccept::parse(&body).expect("accept").entries, 1);
    let (h, body) = frame(&mut t);
    assert_eq!((h.frame_type, h.flags), (FrameType::List, FLAG_LAST));
    let e = parse_list(&body).next().expect("entry").expect("decodes");
    assert_eq!(e.path, b"a.txt");
    send(
        &mut t,
        FrameType::RecipeAsk,
        &RecipeAsk { req: 1, entry: 0 }.emit(),
    );
    let (_, body) = frame(&mut t);
    assert_eq!(parse_recipe(&body).expect("recipe").0.count, 1);
    let mut fetch = ReqHead { req: 2, count: 1 }.emit().to_vec();
    FetchRun {
        entry: 0,
        first: 0,
        count: 1,
    }
    .emit_into(&mut fetch);
    send(&mut t, FrameType::Fetch, &fetch);
    let (h, body) = frame(&mut t);
    assert_eq!(h.frame_type, FrameType::Data);
    assert!(body.ends_with(b"mounted bytes"));
    t.shutdown_write().expect("close");

    let v = server.wait_event("mount_report");
    assert_eq!(v["dir"], "docs");
    assert_eq!(v["session_nonce"], 42);
    assert_eq!(v["entries"], 1);
    assert_eq!(v["recipes"], 1);
    assert_eq!(v["chunks"], 1);
    assert_eq!(v["bytes"], 13);
    assert_eq!(v["gone"], 0);
    let out = server.finish();
    out.expect_code(0, "serve --once");
    // The session's log line names its service.
    assert!(out.stderr.contains("mount"), "{}", out.stderr);
    assert!(
        dest.join(".pfs/mount-recipes").is_file(),
        "the recipe cache is saved"
    );
}
