//! Same-host rings: an echo server and a client exchanging messages over
//! shared memory (no system call on the fast path), rendezvous on a Unix
//! socket in a scratch directory. Both ends run here on two threads; they
//! are meant for two processes.
//!
//! `cargo run -p packetfs --example same_host_ring`

use std::path::Path;

use packetfs::ring::{Endpoint, IpcError, IpcListener, RendezvousConfig, WaitConfig, WaitStrategy};

/// Sends `n` requests through an echo server; returns the replies.
pub fn run(socket: &Path, n: usize) -> Result<Vec<Vec<u8>>, IpcError> {
    let listener = IpcListener::bind(socket, RendezvousConfig::default())?;
    std::thread::scope(|s| {
        s.spawn(move || {
            // One client, then done: its endpoint ends when the client leaves.
            if let Ok(mut ep) = listener.accept() {
                while ep.serve_one(|req, tx| tx.send(req)).is_ok() {}
            }
        });
        let mut ep = Endpoint::connect(socket, WaitConfig::with(WaitStrategy::SpinYield))?;
        (0..n)
            .map(|i| Ok(ep.call(format!("message {i}").as_bytes())?.bytes().to_vec()))
            .collect()
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let replies = run(&dir.path().join("echo.sock"), 3)?;
    for r in &replies {
        println!("{}", String::from_utf8_lossy(r));
    }
    assert_eq!(replies[2], b"message 2");
    Ok(())
}
