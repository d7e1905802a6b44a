//! One module per subcommand, plus the blob setup they share. `pfs bench`
//! runs the `pfs-bench` program.

mod auth;
mod bench;
mod blob;
mod exec;
mod keygen;
mod log;
mod mount;
mod progress;
mod pubsub;
mod reload;
mod send;
mod send_files;
mod serve;
mod serve_files;
mod shutdown;

use std::time::Duration;

use packetfs::blob::OpenedBlob;

use crate::args::{BlobArgs, Cli, Command};

pub use mount::classify as mount_exit_code;

/// Runs the parsed command; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    let Some(command) = cli.command else {
        return version(cli.json);
    };
    match command {
        Command::Blob(cmd) => blob::run(cmd),
        Command::Keygen(args) => keygen::run(&args),
        Command::Send(args) => send::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Pub { args, transport } => pubsub::publish(&args, &transport),
        Command::Sub { args, transport } => pubsub::subscribe(&args, &transport),
        Command::Serve(args) => serve::run(args),
        Command::Mount(args) => mount::run(&args),
        Command::Umount(args) => mount::umount(&args),
        Command::Bench(args) => bench::run(&args),
    }
}

/// `pfs --version [--json]`: clap leaves no subcommand only then (no
/// argument at all prints help, `--json` requires `--version`).
fn version(json: bool) -> anyhow::Result<i32> {
    let commit = Some(env!("PFS_GIT_REV")).filter(|c| *c != "unknown");
    match json {
        true => println!(
            "{}",
            packetfs::report::version_json("pfs", env!("CARGO_PKG_VERSION"), commit)
        ),
        false => println!("{}", crate::args::VERSION_LINE),
    }
    Ok(crate::exit::OK)
}

/// Maps, prefaults, fills and fingerprints the blob; prints warnings and the setup line on stderr.
pub fn open_blob(args: &BlobArgs, quiet: bool) -> Result<OpenedBlob, packetfs::Error> {
    packetfs::blob::open_blob(&args.config(), quiet)
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
