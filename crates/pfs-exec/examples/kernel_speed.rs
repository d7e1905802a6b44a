//! Single-core speed of every built-in kernel against a plain 64-bit read
//! loop over the same bytes, in the same process.
//!
//! Method: a 1 GiB buffer of pseudo-random bytes is filled once (untimed).
//! The baseline is a wrapping sum of its little-endian u64 words with four
//! independent accumulators, over the whole buffer. Each kernel runs over
//! 128 KiB descriptors covering the buffer, driven like the executor does
//! (chunks of `CHUNK_DESCS` descriptors, combined in order); `gather`
//! copies each chunk into a reused buffer. Best of at least 3 runs (more
//! for small buffers); rates in decimal GB/s (10^9 bytes/s). No assertions
//! on time. The default 1 GiB measures from DRAM; a buffer that fits L2
//! (e.g. `1`) shows the in-cache figures.
//!
//! Run: `cargo run --release -p pfs-exec --example kernel_speed [MiB]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use pfs_exec::kernel::{Kernel, KernelId, Output, CHUNK_DESCS};

const DESC_LEN: usize = 128 * 1024;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let len = mib.max(1) << 20;
    let runs = (3 * 1024 / mib.max(1)).clamp(3, 3000);
    let mut blob = vec![0u8; len];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for w in blob.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }

    let base = best(runs, || {
        black_box(read_loop(black_box(&blob)));
    });
    let gbps = |t: Duration| len as f64 / t.as_secs_f64() / 1e9;
    println!(
        "buffer {mib} MiB, descriptors {} KiB, best of {runs}",
        DESC_LEN / 1024
    );
    println!("{:<12} {:>8} {:>8}", "kernel", "GB/s", "ratio");
    println!("{:<12} {:>8.2} {:>8.2}", "read loop", gbps(base), 1.0);
    for id in KernelId::all_builtin() {
        let mut gathered = Vec::with_capacity(CHUNK_DESCS * DESC_LEN);
        let t = best(runs, || {
            black_box(run(id, &mut blob, &mut gathered));
        });
        println!(
            "{:<12} {:>8.2} {:>8.2}",
            id.name(),
            gbps(t),
            base.as_secs_f64() / t.as_secs_f64()
        );
    }
}

/// The baseline: wrapping sum of u64 words, four accumulators.
fn read_loop(bytes: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    for block in bytes.chunks_exact(32) {
        for (a, w) in acc.iter_mut().zip(block.chunks_exact(8)) {
            *a = a.wrapping_add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}

/// One pass of `id` over the buffer in `DESC_LEN` descriptors.
fn run(id: KernelId, blob: &mut [u8], gathered: &mut Vec<u8>) -> Output {
    let k = Kernel::new(id);
    let mut total = k.acc();
    let mut stream = k.acc();
    for chunk in blob.chunks_mut(CHUNK_DESCS * DESC_LEN) {
        let mut acc = k.acc();
        let acc = if id.shardable() { &mut acc } else { &mut stream };
        gathered.clear();
        for d in chunk.chunks_mut(DESC_LEN) {
            if id.in_place() {
                k.update_mut(acc, d);
            } else {
                k.gather_into(acc, d, gathered);
            }
        }
        black_box(&gathered);
        if id.shardable() {
            let acc = std::mem::replace(acc, k.acc());
            k.combine(&mut total, acc);
        }
    }
    k.finish(if id.shardable() { total } else { stream })
}

fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .expect("runs > 0")
}
