//! Moves N bytes over one transport on loopback and prints the rate and,
//! for UDP, the connection's counters: a quick look at a transport alone,
//! without the gram protocol above it.
//!
//! `cargo run --release -p pfs-transport --example stream_pair -- udp 1024`
//! (transport `tcp`, `udp`, or `udp-tagged` / `udp-tagged-chacha`: UDP
//! with datagram keys installed on both sides, as a protected session
//! does, so every datagram carries an AES-256-GCM / ChaCha20-Poly1305 tag
//! (`docs/wire.md` §14.7); MiB to move).

use std::time::Instant;

use pfs_transport::udp::{DatagramCipher, DatagramKeys};
use pfs_transport::{
    Listener, TcpConfig, TcpListener, TcpTransport, Transport, UdpConfig, UdpListener, UdpTransport,
};

/// Datagram keys for one side (both sides' keys are fixed: only the cost
/// of tagging is measured here).
fn keys(client: bool, kind: &str) -> DatagramKeys {
    let (c2s, s2c) = ([1; 32], [2; 32]);
    DatagramKeys {
        cipher: if kind.ends_with("chacha") {
            DatagramCipher::ChaCha20Poly1305
        } else {
            DatagramCipher::Aes256Gcm
        },
        send: if client { c2s } else { s2c },
        recv: if client { s2c } else { c2s },
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kind = args.get(1).map_or("udp", |s| s.as_str()).to_string();
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let total = mib << 20;
    let block = vec![0x5au8; 1 << 20];
    let (tx, rx) = std::sync::mpsc::channel();
    let k = kind.clone();
    let server = std::thread::spawn(move || {
        let mut conn: Box<dyn Transport> = if k == "tcp" {
            let l = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
            tx.send(l.local_addr()).unwrap();
            Box::new(l.accept().unwrap())
        } else {
            let l = UdpListener::bind("127.0.0.1:0", UdpConfig::default()).unwrap();
            tx.send(l.local_addr()).unwrap();
            let mut t = l.accept().unwrap();
            if k.starts_with("udp-tagged") {
                t.protect_datagrams(&keys(false, &k));
            }
            Box::new(t)
        };
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0usize;
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        conn.write_all(&(got as u64).to_le_bytes()).unwrap();
        (got, conn.helper_usage())
    });
    let addr = rx.recv().unwrap();
    let start = Instant::now();
    let mut tcp;
    let mut udp = None;
    let conn: &mut dyn Transport = if kind == "tcp" {
        tcp = TcpTransport::connect(&addr, &TcpConfig::default()).unwrap();
        &mut tcp
    } else {
        let t = udp.insert(UdpTransport::connect(&addr, &UdpConfig::default()).unwrap());
        if kind.starts_with("udp-tagged") {
            t.protect_datagrams(&keys(true, &kind));
        }
        t
    };
    let mut sent = 0;
    while sent < total {
        conn.write_all(&block).unwrap();
        sent += block.len();
    }
    conn.shutdown_write().unwrap();
    let mut ack = [0u8; 8];
    conn.read_exact(&mut ack).unwrap();
    let secs = start.elapsed().as_secs_f64();
    let (got, server_io) = server.join().unwrap();
    assert_eq!(got, total);
    // The I/O threads' CPU per GB moved: steadier than the rate on a busy host.
    let cpu = |u: pfs_transport::Usage| (u.user_us + u.sys_us) as f64 / 1e6 / (total as f64 / 1e9);
    println!(
        "{kind}: {mib} MiB in {secs:.3} s = {:.2} Gbit/s; I/O thread CPU-s per GB: sender {:.3}, receiver {:.3}",
        total as f64 * 8.0 / secs / 1e9,
        cpu(conn.helper_usage()),
        cpu(server_io),
    );
    if let Some(u) = &udp {
        println!("{:?}", u.report());
    }
}
