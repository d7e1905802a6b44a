//! One module per subcommand, plus the blob setup they share.

pub mod bench;
pub mod bench_exec;
pub mod bench_ipc;
mod blob;
mod exec;
pub mod io_primitives;
mod send;
mod send_files;
mod serve;
mod serve_files;

use std::time::Duration;

use anyhow::Context;
use pfs_blob::{Blob, BlobConfig, Fill, SetupReport};
use pfs_session::{BlobView, SetupTimes};

use crate::args::{BlobArgs, Cli, Command};

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Blob(cmd) => blob::run(cmd),
        Command::Send(args) => send::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => match args.study {
            Some(crate::args::BenchStudy::IoPrimitives(study)) => io_primitives::run(study),
            Some(crate::args::BenchStudy::Exec(study)) => bench_exec::run(study),
            Some(crate::args::BenchStudy::Ipc(study)) => bench_ipc::run(study),
            Some(crate::args::BenchStudy::IpcPeer(peer)) => bench_ipc::run_peer(peer),
            Some(crate::args::BenchStudy::Files(study)) => bench::files::run(study),
            None => bench::run(args),
        },
    }
}

/// A blob opened for a transfer command, with its setup report.
#[derive(Debug)]
pub struct OpenedBlob {
    /// The mapping.
    pub blob: Blob,
    /// Setup phase timings.
    pub setup: SetupReport,
}

impl OpenedBlob {
    /// The session layer's view of it.
    pub fn view(&self) -> BlobView<'_> {
        let fp = self.blob.fingerprint();
        BlobView {
            data: self.blob.as_slice(),
            fingerprint: fp.root,
            region_size: fp.region_size,
            backing: self.blob.backing().kind,
            page_size: self.blob.backing().page_size,
            setup: SetupTimes {
                map_s: self.setup.map_s,
                prefault_s: self.setup.prefault_s,
                fill_s: self.setup.fill_s,
                fingerprint_s: self.setup.fingerprint_s,
            },
        }
    }

    /// One line describing backing and setup, for stderr.
    pub fn describe(&self) -> String {
        let b = self.blob.backing();
        let s = &self.setup;
        let len = self.blob.len();
        let fill_prefault = s.fill_s + s.prefault_s;
        let rate = if fill_prefault > 0.0 && !s.reused_existing && s.fill_s > 0.0 {
            format!(" ({:.2} GB/s fill+prefault)", len as f64 / fill_prefault / 1e9)
        } else {
            String::new()
        };
        format!(
            "blob {name}: {mb:.1} MB, {kind} backing, page {page} B, {huge:.0}% in huge pages, fingerprint {fp}; \
             setup: map {m:.3} s, prefault {p:.3} s, fill {f:.3} s, fingerprint {h:.3} s{rate}{reused}",
            name = self.blob.name().unwrap_or("(anonymous)"),
            mb = len as f64 / 1e6,
            kind = b.kind.as_str(),
            page = b.page_size,
            huge = if len > 0 { b.huge_bytes as f64 * 100.0 / len as f64 } else { 0.0 },
            fp = self.blob.fingerprint().short(),
            m = s.map_s,
            p = s.prefault_s,
            f = s.fill_s,
            h = s.fingerprint_s,
            reused = if s.reused_existing { " (reused existing blob)" } else { "" },
        )
    }
}

/// Blob options from the command line.
pub fn blob_options(args: &BlobArgs) -> BlobConfig {
    let fill = if args.no_fill {
        Fill::None
    } else if let Some(path) = &args.fill_file {
        Fill::File(path.clone())
    } else {
        Fill::Seed(args.seed)
    };
    BlobConfig {
        name: args.blob_name.clone(),
        size: args.size,
        fill,
        huge_dir: args.huge_dir.clone(),
        prefault: !args.no_prefault,
        keep: args.blob_keep,
        threads: args.setup_threads,
        ..BlobConfig::default()
    }
}

/// Maps, prefaults, fills and fingerprints the blob; prints warnings and the setup line on stderr.
pub fn open_blob(args: &BlobArgs, quiet: bool) -> anyhow::Result<OpenedBlob> {
    let (blob, setup) = Blob::open_or_create(&blob_options(args)).context("blob setup failed")?;
    if let (Some(name), false, false) = (blob.name(), args.blob_keep, setup.reused_existing) {
        // Drop removes a blob this process created; Ctrl-C must too.
        crate::cleanup::remove_on_signal(name, args.huge_dir.as_deref());
    }
    for w in &blob.backing().warnings {
        eprintln!("pfs: warning: {w}");
    }
    let opened = OpenedBlob { blob, setup };
    if !quiet {
        eprintln!("{}", opened.describe());
    }
    Ok(opened)
}

/// `--log-interval` seconds as a duration. Without the option, progress is
/// printed every second when stderr is a terminal and stdout is not JSON.
pub fn interval(secs: Option<f64>, json: bool) -> anyhow::Result<Option<Duration>> {
    use std::io::IsTerminal;
    match secs {
        None if !json && std::io::stderr().is_terminal() => Ok(Some(Duration::from_secs(1))),
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => anyhow::bail!("--log-interval must be a positive number of seconds (got {s})"),
    }
}

/// Progress line: effective and wire bytes with rates and, when known, percent done.
pub fn progress_line(who: &str, grams: u64, eff: u64, wire: u64, elapsed: Duration, planned: u64) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let pct = if planned > 0 {
        format!(" {:5.1}%", eff as f64 * 100.0 / planned as f64)
    } else {
        String::new()
    };
    format!(
        "{who}:{pct} {grams} grams, {eff:.1} MB effective ({er:.1} MB/s), {wire:.3} MB wire ({wr:.1} MB/s), {secs:.1} s",
        eff = eff as f64 / 1e6,
        er = eff as f64 / 1e6 / secs,
        wire = wire as f64 / 1e6,
        wr = wire as f64 / 1e6 / secs,
    )
}
