//! A file tree sent to a receiver directory over loopback TCP, both peers
//! in one process. The second send of the same tree moves no file data:
//! the receiver already holds every chunk.
//!
//! `cargo run -p packetfs --example files_tree`

use std::path::Path;

use packetfs::files::{
    receive_files, scan_items, send_files, sender_config, ChunkIndex, ChunkParams, DestRoot, Durability,
    FilesReceiverConfig, FilesSenderOutcome, LocalPrepare, ScanConfig, Store, StoreConfig, WalkConfig,
};
use packetfs::transport::{Listener, TcpConfig, TcpListener, TcpTransport};

/// What the receiver wrote and what crossed the wire, per send.
#[derive(Debug)]
pub struct Sent {
    /// Files the receiver wrote.
    pub written: u64,
    /// File bytes the receiver reconstructed.
    pub effective_bytes: u64,
    /// Bytes that crossed the connection, both ways.
    pub wire_bytes: u64,
}

/// Sends the tree `src` into `dest` (its chunks kept in the store at `store`).
pub fn send_tree(src: &Path, dest: &Path, store: &Path) -> Result<Sent, Box<dyn std::error::Error>> {
    let params = ChunkParams::default();
    let mut scanned = scan_items(&ScanConfig {
        paths: &[src.to_path_buf()],
        exclude: &[],
        cache: None,
        params,
        reread: false,
        walk: WalkConfig::default(),
        safe_links: false,
    })?;
    let store = Store::open(
        store,
        &StoreConfig {
            capacity: 64 << 20,
            huge_dir: None,
            durability: Durability::None,
        },
    )?;
    let dest = DestRoot::open(dest)?;
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())?;
    let addr = listener.socket_addr()?.to_string();
    let (received, sent) = std::thread::scope(|s| {
        let receiver = s.spawn(|| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
            let mut conn = listener.accept()?;
            Ok(receive_files(
                &mut conn,
                ChunkIndex::Store(&store),
                &dest,
                &FilesReceiverConfig::default(),
            )?)
        });
        let sent = (|| -> Result<FilesSenderOutcome, Box<dyn std::error::Error>> {
            let mut conn = TcpTransport::connect(&addr, &TcpConfig::default())?;
            let mut prepare = LocalPrepare::new(params, 1);
            Ok(send_files(
                &mut conn,
                &mut scanned.items,
                &sender_config(&params),
                &mut prepare,
                &mut |_| {},
            )?)
        })();
        (receiver.join(), sent)
    });
    received
        .map_err(|_| "the receiver thread panicked")?
        .map_err(|e| e.to_string())?;
    let sent = sent?;
    let report = sent.report.ok_or("no report (a dry run?)")?;
    Ok(Sent {
        written: report.files_written,
        effective_bytes: report.effective_bytes,
        wire_bytes: sent.wire_bytes_sent + sent.wire_bytes_received,
    })
}

/// Writes a small tree, sends it twice; returns both sends.
pub fn run(scratch: &Path) -> Result<(Sent, Sent), Box<dyn std::error::Error>> {
    let src = scratch.join("tree");
    std::fs::create_dir_all(src.join("sub"))?;
    let mut x = 1u64;
    let bytes: Vec<u8> = (0..1_000_000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect();
    std::fs::write(src.join("a.bin"), &bytes)?;
    std::fs::write(src.join("sub/b.txt"), b"hello, packetfs\n")?;
    let dest = scratch.join("dest");
    std::fs::create_dir_all(&dest)?;
    let first = send_tree(&src, &dest, &scratch.join("store"))?;
    let second = send_tree(&src, &dest, &scratch.join("store"))?;
    Ok((first, second))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let (first, second) = run(scratch.path())?;
    println!("first send:  {first:?}");
    println!("second send: {second:?}");
    let copy = std::fs::read(scratch.path().join("dest/tree/sub/b.txt"))?;
    assert_eq!(copy, b"hello, packetfs\n");
    Ok(())
}
