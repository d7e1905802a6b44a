//! `pfs exec`: run a kernel over a seeded descriptor schedule on this host's
//! blob, sharded across pThreads (pCPU). Preparation (schedule generation,
//! encoding, bounds checks) is timed apart from execution.

use std::time::Instant;

use pfs_exec::kernel::{Kernel, KernelId, Output};
use pfs_exec::shard::{self, Prepared, ShardConfig};

use crate::args::ExecArgs;
use packetfs::exec::parse_user_kernel;
use packetfs::report::exec_output_text;
use packetfs::{labels, sysinfo};

use crate::exit;

use super::open_blob;
use super::send::schedule_spec;

fn run_user(args: &ExecArgs, path: &std::path::Path, prefix: &str) -> anyhow::Result<i32> {
    if args.pthreads > 1 {
        anyhow::bail!(
            "user kernels run on one pThread in this version (got --pthreads {})",
            args.pthreads
        );
    }
    let user = pfs_exec::user::load_any(path, prefix)?;
    let opened = open_blob(&args.blob, args.json)?;
    let encoding = args.encoding.encoding();
    let (prepared, _) = prepare(args, opened.blob.len())?;
    let cpus: Vec<usize> = if args.no_pin {
        Vec::new()
    } else {
        (0..sysinfo::cores()).collect()
    };
    let (value, elapsed) = user.run(opened.blob.as_slice(), &prepared, cpus)?;
    let secs = elapsed.as_secs_f64();
    let rate = prepared.effective_bytes() as f64 / 1e6 / secs.max(1e-9);
    if args.json {
        let v = serde_json::json!({
            "label": labels::pcpu(encoding),
            "kernel": args.kernel,
            "pthreads": 1,
            "encoding": encoding.name(),
            "output": Output::U64(value),
            "effective_bytes": prepared.effective_bytes(),
            "elapsed_s": secs,
            "effective_mb_s": rate,
            "chunked": user.has_combine(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} — user kernel {} on 1 pThread",
            labels::pcpu(encoding),
            path.display()
        );
        println!("  result         {}", exec_output_text(&Output::U64(value)));
        println!("  elapsed        {secs:.3} s → {rate:.1} MB/s");
    }
    Ok(exit::OK)
}

/// The schedule to run: recorded grams (`--gram-file`) or the seeded generator.
fn prepare(args: &ExecArgs, blob_len: u64) -> anyhow::Result<(Prepared, String)> {
    let spec = schedule_spec(&args.schedule, blob_len);
    Ok(packetfs::exec::prepare(
        args.gram_file.as_deref(),
        spec,
        args.encoding.encoding(),
    )?)
}

pub fn run(args: ExecArgs) -> anyhow::Result<i32> {
    if let Some((path, prefix)) = parse_user_kernel(&args.kernel) {
        return run_user(&args, &path, &prefix);
    }
    let id = KernelId::parse(&args.kernel)?;
    let mut opened = open_blob(&args.blob, args.json)?;
    let encoding = args.encoding.encoding();
    let t0 = Instant::now();
    let (prepared, source) = prepare(&args, opened.blob.len())?;
    let prepare_s = t0.elapsed().as_secs_f64();
    let threads = args.pthreads.max(1);
    let cpus: Vec<usize> = if args.no_pin {
        Vec::new()
    } else {
        (0..sysinfo::cores()).collect()
    };
    let cfg = ShardConfig { threads, cpus };
    let kernel = Kernel::new(id);
    let report = if id.in_place() {
        if let Some(name) = opened.blob.name() {
            eprintln!(
                "pfs: warning: {} modifies named blob {name} in place; its recorded fingerprint no longer matches \
                 (`pfs blob verify` will list the changed regions)",
                id.name()
            );
        }
        shard::run_mut(opened.blob.as_mut_slice(), &prepared, kernel, &cfg)?
    } else {
        shard::run(opened.blob.as_slice(), &prepared, kernel, &cfg)?
    };
    let secs = report.elapsed.as_secs_f64();
    let eff = prepared.effective_bytes();
    let rate = if secs > 0.0 { eff as f64 / 1e6 / secs } else { 0.0 };
    let per_desc = prepared.table_bytes() as f64 / prepared.descriptors().max(1) as f64;
    if args.json {
        let v = serde_json::json!({
            "label": labels::pcpu(encoding),
            "kernel": id.name(),
            "pthreads": threads,
            "encoding": encoding.name(),
            "source": source,
            "output": report.output,
            "effective_bytes": eff,
            "descriptors": prepared.descriptors(),
            "table_bytes_per_descriptor": per_desc,
            "prepare_s": prepare_s,
            "elapsed_s": secs,
            "effective_mb_s": rate,
            "per_thread_bytes": report.per_thread_bytes,
            "chunks": report.chunks,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} — kernel {} on {threads} pThread(s), {} encoding, {source}",
            labels::pcpu(encoding),
            id.name(),
            encoding.name()
        );
        println!("  result         {}", exec_output_text(&report.output));
        println!(
            "  effective      {:.1} MB in {} descriptors ({:.2} table bytes/descriptor, {} chunks)",
            eff as f64 / 1e6,
            prepared.descriptors(),
            per_desc,
            report.chunks
        );
        println!(
            "  elapsed        {secs:.3} s → {rate:.1} MB/s (preparation {prepare_s:.3} s, not included)"
        );
        if threads > 1 {
            let shares: Vec<String> = report
                .per_thread_bytes
                .iter()
                .map(|b| format!("{:.0}%", *b as f64 * 100.0 / eff.max(1) as f64))
                .collect();
            println!("  per pThread    {}", shares.join(" / "));
        }
    }
    Ok(exit::OK)
}
