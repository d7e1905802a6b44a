//! One module per subcommand, plus the blob setup they share. `pfs bench`
//! is dispatched to the pfs-bench crate.

mod auth;
mod blob;
mod exec;
mod keygen;
mod log;
mod mount;
mod progress;
mod send;
mod send_files;
mod serve;
mod serve_files;
mod shutdown;

use std::time::Duration;

use anyhow::Context;
use pfs_bench::peer::OpenedBlob;
use pfs_blob::{BlobConfig, Fill};

use crate::args::{BlobArgs, Cli, Command};
use crate::exit;

pub use mount::classify as mount_exit_code;

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Blob(cmd) => blob::run(cmd),
        Command::Keygen(args) => keygen::run(&args),
        Command::Send(args) => send::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Mount(args) => mount::run(&args),
        Command::Umount(args) => mount::umount(&args),
        Command::Bench(args) => {
            // The studies start this binary again (`pfs serve`, `pfs send`,
            // `pfs bench ipc-peer`): they are told once where it is.
            let pfs = pfs_bench::Binary {
                path: std::env::current_exe().context("cannot locate the pfs binary")?,
                version: env!("CARGO_PKG_VERSION").into(),
                git_revision: env!("PFS_GIT_REV").into(),
            };
            Ok(match pfs_bench::run(args, &pfs)? {
                pfs_bench::Outcome::Passed => exit::OK,
                pfs_bench::Outcome::Failed => exit::FAILURE,
            })
        }
    }
}

/// Blob options from the command line.
pub fn blob_config(args: &BlobArgs) -> BlobConfig {
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
    pfs_bench::peer::open_blob(&blob_config(args), quiet)
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
