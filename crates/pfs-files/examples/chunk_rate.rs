//! Chunk + hash throughput.
//!
//! Method: fills N MiB with pseudo-random bytes (xorshift, incompressible
//! and without repeats, so cut points are typical), then times, best of
//! `--reps` runs each:
//! - `cut-only`: finding cut points alone (`chunk_lengths`), one thread: the
//!   sequential part, which bounds single-file throughput;
//! - `blake3-1t`: `blake3::hash` of the buffer, one thread;
//! - `chunk_bytes`: cut points + chunk hashes + file hash of the list, in memory;
//! - `chunk_file`: the same from a file (written first, so it is in the page
//!   cache: this measures CPU, not the disk), or from `--file PATH` as is.
//!
//! Rates are decimal GB/s (10^9 bytes per second) of input, wall clock, plus
//! GB per CPU-second (user + system time of all threads), which says what
//! the work costs and is less disturbed by other load on the machine.
//!
//! ```text
//! cargo run -p pfs-files --release --example chunk_rate -- --mib 1024
//! cargo run -p pfs-files --release --example chunk_rate -- --file /path/to/big.iso
//! ```

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use pfs_files::{chunk_bytes, chunk_file, chunk_lengths, ChunkParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut mib = 1024usize;
    let mut file: Option<PathBuf> = None;
    let mut threads = 0usize;
    let mut reps = 3usize;
    let mut avg = pfs_files::chunk::DEFAULT_AVG;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--mib" => mib = val()?.parse()?,
            "--file" => file = Some(val()?.into()),
            "--threads" => threads = val()?.parse()?,
            "--reps" => reps = val()?.parse()?,
            "--avg" => avg = val()?.parse()?,
            "-h" | "--help" => {
                println!("chunk_rate [--mib N] [--file PATH] [--threads T] [--reps R] [--avg BYTES]");
                return Ok(());
            }
            _ => return Err(format!("unknown argument {a}").into()),
        }
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()?;
    let params = ChunkParams::new(avg)?;
    println!(
        "threads {}  chunk avg {} min {} max {}",
        rayon::current_num_threads(),
        params.avg(),
        params.min(),
        params.max()
    );

    let len = mib << 20;
    let mut data = vec![0u8; len];
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for w in data.chunks_mut(8) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        w.copy_from_slice(&s.to_le_bytes()[..w.len()]);
    }

    // (best wall-clock GB/s, GB per CPU-second over all reps)
    let rate = |bytes: usize, f: &mut dyn FnMut()| {
        let mut best = f64::MAX;
        let cpu0 = cpu_seconds();
        for _ in 0..reps {
            let t = Instant::now();
            f();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let cpu = (cpu_seconds() - cpu0) / reps as f64;
        Rate(bytes as f64 / best / 1e9, bytes as f64 / cpu / 1e9)
    };

    let g = rate(len, &mut || {
        std::hint::black_box(chunk_lengths(&data, &params));
    });
    println!("cut-only      {mib} MiB  {g} (1 thread)");
    let b = rate(len, &mut || {
        std::hint::black_box(blake3::hash(&data));
    });
    println!("blake3-1t     {mib} MiB  {b} (1 thread)");
    let mut chunks = 0;
    let c = rate(len, &mut || {
        chunks = std::hint::black_box(chunk_bytes(&data, &params)).chunks.len();
    });
    println!("chunk_bytes   {mib} MiB  {c} ({chunks} chunks)");

    let (path, size, _tmp) = match file {
        Some(p) => {
            let size = std::fs::metadata(&p)?.len() as usize;
            (p, size, None)
        }
        None => {
            let tmp = tempfile::NamedTempFile::new()?;
            tmp.as_file().write_all(&data)?;
            (tmp.path().to_path_buf(), len, Some(tmp))
        }
    };
    drop(data);
    let mut err = None;
    let f = rate(size, &mut || {
        if let Err(e) = chunk_file(&path, &params) {
            err = Some(e);
        }
    });
    if let Some(e) = err {
        return Err(e.into());
    }
    println!("chunk_file    {} MiB  {f} ({})", size >> 20, path.display());
    Ok(())
}

/// Wall-clock GB/s and GB per CPU-second.
struct Rate(f64, f64);

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:5.2} GB/s  {:5.2} GB/CPU-s", self.0, self.1)
    }
}

/// User + system CPU time of this process so far (all threads), seconds.
fn cpu_seconds() -> f64 {
    pfs_sys::process_usage().cpu_seconds()
}
