//! Time blob setup (map, prefault, fill, fingerprint) and show the backing.
//!
//! `cargo run --release -p pfs-blob --example setup_speed [SIZE_MIB] [THREADS] [NAME]`
//! Defaults: 1024 MiB, all cores, anonymous. Rates are decimal MB/s.

use pfs_blob::{Blob, BlobConfig};

fn main() -> Result<(), pfs_blob::BlobError> {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1024);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let name = args.next();
    let opts = BlobConfig {
        size: mib << 20,
        threads,
        name,
        ..BlobConfig::default()
    };
    let (blob, setup) = Blob::open_or_create(&opts)?;
    let mb = blob.len() as f64 / 1e6;
    let rate = |s: f64| if s > 0.0 { mb / s } else { f64::INFINITY };
    let b = blob.backing();
    println!(
        "blob: {} bytes, backing {} (page {} B, huge {} B), root {}",
        blob.len(),
        b.kind,
        b.page_size,
        b.huge_bytes,
        blob.fingerprint().short()
    );
    for w in &b.warnings {
        println!("warning: {w}");
    }
    println!("map         {:8.4} s", setup.map_s);
    println!(
        "prefault    {:8.4} s  {:9.0} MB/s",
        setup.prefault_s,
        rate(setup.prefault_s)
    );
    println!(
        "fill        {:8.4} s  {:9.0} MB/s",
        setup.fill_s,
        rate(setup.fill_s)
    );
    let pf = setup.prefault_s + setup.fill_s;
    println!("prefault+fill {:6.4} s  {:9.0} MB/s", pf, rate(pf));
    println!(
        "fingerprint {:8.4} s  {:9.0} MB/s",
        setup.fingerprint_s,
        rate(setup.fingerprint_s)
    );
    println!("reused_existing {}", setup.reused_existing);
    println!("json: {}", serde_json::to_string(&setup).unwrap_or_default());
    println!("backing json: {}", serde_json::to_string(b).unwrap_or_default());
    Ok(())
}
