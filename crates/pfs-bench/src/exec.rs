//! `pfs bench exec`: every built-in pCPU kernel, on 1 and 2 pThreads, beside
//! a plain 64-bit read loop over exactly the same bytes, in the same process
//! and run, plus a user kernel (shared object or LLVM IR) when one is given.

use std::path::PathBuf;
use std::time::Instant;

use crate::args::{parse_size, parse_size_u32, EncodingArg};
use crate::peer::{open_blob, parse_user_kernel, study_blob};
use crate::report::{Cell, Column, Report, Section, Table};
use crate::{sysinfo, Outcome};
use anyhow::Context;
use clap::Args;
use pfs_exec::kernel::{Kernel, KernelId};
use pfs_exec::shard::{self, Prepared, ShardConfig};
use pfs_exec::{Pattern, Schedule, ScheduleSpec, Total};

/// Options of the kernel study.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pfs bench exec                           # 1 GiB blob, 8 GiB per row, descriptors up to 128 KiB
  pfs bench exec --encoding arith --json
  pfs bench exec --desc-len 4K --bytes 2G  # small descriptors")]
pub struct BenchExecArgs {
    /// Blob size.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Effective bytes per row.
    #[arg(long, default_value = "8G", value_parser = parse_size)]
    pub bytes: u64,
    /// Longest descriptor: lengths uniform in [64 B, this], back to back (sequential schedule).
    #[arg(long, default_value = "128K", value_parser = parse_size_u32)]
    pub desc_len: u32,
    /// Schedule encoding the kernels decode in their loop.
    #[arg(long, value_enum, default_value_t = EncodingArg::Absolute)]
    pub encoding: EncodingArg,
    /// hugetlbfs mount for the blob.
    #[arg(long)]
    pub huge_dir: Option<PathBuf>,
    /// Also run this user kernel (a shared object, see examples/kernels/) on one pThread.
    #[arg(long, value_name = "FILE.so[:PREFIX]")]
    pub user_kernel: Option<String>,
    /// Write bench-exec.csv and bench-exec.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone)]
struct KernelRow {
    kernel: String,
    pthreads: usize,
    effective_mb_s: f64,
    vs_read_loop: f64,
    elapsed_s: f64,
    notes: String,
}

/// The baseline: wrapping sum of little-endian u64 words, four accumulators.
fn read_loop(bytes: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    for block in bytes.chunks_exact(32) {
        for (a, w) in acc.iter_mut().zip(block.chunks_exact(8)) {
            *a = a.wrapping_add(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
    }
    acc.iter().fold(0, |s, &a| s.wrapping_add(a))
}

/// Runs the study.
pub fn run(args: BenchExecArgs) -> anyhow::Result<Outcome> {
    let mut opened = open_blob(&study_blob(args.size, 0x5eed, args.huge_dir.clone()), args.json)?;
    let blob_len = opened.blob.len();
    let spec = ScheduleSpec {
        seed: 1,
        desc_per_gram: 1024,
        max_len: args.desc_len,
        // 64-byte alignment, or the largest power of two a tiny length allows.
        align: if args.desc_len >= 64 {
            64
        } else {
            1 << (31 - args.desc_len.max(1).leading_zeros())
        },
        pattern: Pattern::Sequential,
        total: Total::Bytes(args.bytes),
        blob_len,
    };
    let encoding = args.encoding.encoding();
    let prepared = Prepared::from_schedule(Schedule::new(spec)?, encoding, blob_len).context("preparing")?;
    let eff = prepared.effective_bytes();
    let cpus: Vec<usize> = (0..sysinfo::cores()).collect();

    // Baseline over the same descriptors, one core.
    let mut sched = Schedule::new(spec)?;
    let mut descs = Vec::new();
    let mut all = Vec::new();
    while sched.next_gram(&mut descs) {
        all.extend_from_slice(&descs);
    }
    let data = opened.blob.as_slice();
    let t0 = Instant::now();
    let mut acc = 0u64;
    for d in &all {
        acc = acc.wrapping_add(read_loop(
            &data[d.offset as usize..(d.offset + u64::from(d.len)) as usize],
        ));
    }
    std::hint::black_box(acc);
    let base_s = t0.elapsed().as_secs_f64();
    let base_rate = eff as f64 / 1e6 / base_s;
    let mut rows = vec![KernelRow {
        kernel: "plain read loop".into(),
        pthreads: 1,
        effective_mb_s: base_rate,
        vs_read_loop: 1.0,
        elapsed_s: base_s,
        notes: "wrapping sum of u64 words, 4 accumulators; the baseline".into(),
    }];
    for id in KernelId::all_builtin() {
        for threads in [1usize, 2] {
            if threads > 1 && (!id.shardable() || id.in_place()) {
                continue;
            }
            let cfg = ShardConfig {
                threads,
                cpus: cpus.clone(),
            };
            let kernel = Kernel::new(id);
            let report = if id.in_place() {
                shard::run_mut(opened.blob.as_mut_slice(), &prepared, kernel, &cfg)?
            } else {
                shard::run(opened.blob.as_slice(), &prepared, kernel, &cfg)?
            };
            let s = report.elapsed.as_secs_f64();
            let rate = eff as f64 / 1e6 / s;
            rows.push(KernelRow {
                kernel: id.name(),
                pthreads: threads,
                effective_mb_s: rate,
                vs_read_loop: rate / base_rate,
                elapsed_s: s,
                notes: if id.in_place() {
                    "in place (modifies the blob)".into()
                } else {
                    String::new()
                },
            });
        }
    }
    let user_note = match &args.user_kernel {
        Some(spec) => {
            let (path, prefix) = parse_user_kernel(&format!("user:{spec}")).context("--user-kernel")?;
            let user = pfs_exec::user::load_any(&path, &prefix)?;
            let (_, elapsed) = user.run(opened.blob.as_slice(), &prepared, cpus.clone())?;
            let s = elapsed.as_secs_f64();
            let rate = eff as f64 / 1e6 / s;
            rows.push(KernelRow {
                kernel: format!("user:{}", path.display()),
                pthreads: 1,
                effective_mb_s: rate,
                vs_read_loop: rate / base_rate,
                elapsed_s: s,
                notes: match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
                    Some("ll" | "bc") => "LLVM IR, JIT-compiled in process".into(),
                    _ => "shared object".into(),
                },
            });
            "user kernel: row above"
        }
        None => {
            "user kernels: pass --user-kernel FILE.so or FILE.ll (examples/kernels/; .ll/.bc need the llvm feature)"
        }
    };
    let report = Report::plain(format!(
        "pfs bench exec — {} bytes of descriptors up to {} bytes ({} encoding) over a {} MB blob, {} cores",
        eff,
        args.desc_len,
        encoding.name(),
        blob_len / 1_000_000,
        sysinfo::cores()
    ))
    .section(Section::new("rows", view(&rows), data_table(&rows)).noted(user_note))
    .field("encoding", encoding.name())
    .field("desc_len", args.desc_len)
    .field("effective_bytes", eff)
    .field("user_kernels", user_note);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir)?;
        let rows = report.get("rows").map(|s| &s.data);
        std::fs::write(
            dir.join("bench-exec.csv"),
            rows.map(Table::csv).unwrap_or_default(),
        )?;
        std::fs::write(
            dir.join("bench-exec.json"),
            serde_json::to_string_pretty(&rows.map(Table::json).unwrap_or_default())?,
        )?;
    }
    Ok(Outcome::Passed)
}

/// Every field of a row: CSV columns and JSON keys.
fn data_table(rows: &[KernelRow]) -> Table {
    let mut t = Table::new(&[
        Column::text("kernel", 0),
        Column::num("pthreads", 0),
        Column::num("effective_mb_s", 0),
        Column::num("vs_read_loop", 0),
        Column::num("elapsed_s", 0),
        Column::text("notes", 0),
    ]);
    for r in rows {
        t.push(vec![
            Cell::text(&r.kernel),
            Cell::Int(r.pthreads as u64),
            Cell::Num(r.effective_mb_s, 1),
            Cell::Num(r.vs_read_loop, 3),
            Cell::Num(r.elapsed_s, 4),
            Cell::text(&r.notes),
        ]);
    }
    t
}

/// The terminal table. Every row ran (a kernel that fails stops the study).
fn view(rows: &[KernelRow]) -> Table {
    let mut t = Table::new(&[
        Column::text("kernel", 16),
        Column::num("pthreads", 8),
        Column::num("MB/s", 12),
        Column::num("×read loop", 10),
        Column::text("notes", 0).gap(2),
    ]);
    for r in rows {
        t.push(vec![
            Cell::text(&r.kernel),
            Cell::Int(r.pthreads as u64),
            Cell::Num(r.effective_mb_s, 1),
            Cell::Num(r.vs_read_loop, 2),
            Cell::text(&r.notes),
        ]);
    }
    t
}
