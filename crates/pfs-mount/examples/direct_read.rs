//! Reads a file of a `pfs mount --direct SOCKET` from shared memory.
//!
//! ```text
//! pfs mount 127.0.0.1:7878 /mnt/pfs --direct /tmp/pfs-direct.sock
//! cargo run --release -p pfs-mount --example direct_read -- /tmp/pfs-direct.sock path/in/tree [reads]
//! ```
//!
//! Opens the file (one request: the mount fetches what its cache lacks and
//! places the file in shared memory), then does `reads` random 4 KiB reads
//! (default 1,000,000) with no system call, and prints the rate and the
//! file's BLAKE3.

use std::time::Instant;

use pfs_mount::direct::DirectClient;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: direct_read SOCKET PATH [READS]");
        std::process::exit(2);
    }
    let reads: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let mut client = DirectClient::connect(args[1].as_ref()).unwrap_or_else(|e| {
        eprintln!("connect {}: {e}", args[1]);
        std::process::exit(1);
    });
    let t0 = Instant::now();
    let file = client.open(&args[2]).unwrap_or_else(|e| {
        eprintln!("open {}: {e}", args[2]);
        std::process::exit(1);
    });
    let opened = t0.elapsed();
    let mut buf = [0u8; 4096];
    let blocks = (file.len() / 4096).max(1);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut sum = 0u64;
    let t1 = Instant::now();
    for _ in 0..reads {
        // xorshift: a cheap, fixed sequence of offsets.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = client.read_at(&file, (x % blocks) * 4096, &mut buf);
        sum = sum.wrapping_add(u64::from(buf[n.saturating_sub(1)]));
    }
    let secs = t1.elapsed().as_secs_f64();
    println!(
        "{}: {} bytes, opened in {:.1} ms; {reads} random 4 KiB reads: {:.0} op/s (checksum {sum}); blake3 {}",
        args[2],
        file.len(),
        opened.as_secs_f64() * 1e3,
        reads as f64 / secs,
        blake3::hash(client.bytes(&file)).to_hex()
    );
}
