//! `pfs-bench`: the labelled PacketFS studies, their reports and plots, and
//! the child-process machinery they run on — the library behind the
//! `pfs-bench` program (`src/main.rs`; `pfs bench …` runs that program).
//!
//! Every study runs on one machine in one run and reports ratios against a
//! named baseline measured by the same harness (see the design brief's
//! measurement rules). The program parses the command line (the grammar is
//! [`args`]) and calls [`run`] with a [`Binary`] naming the `pfs` binary the
//! studies drive: most of them start it as child processes (`pfs serve`,
//! `pfs send`, `pfs bench ipc-peer`, `pfs bench quic-peer`).
//!
//! Map:
//! - studies: [`suite`] (the main table, with its files row group in
//!   `suite::files`), [`exec`], [`ipc`], [`io_primitives`], [`mount`],
//!   [`stream`];
//! - output: [`report`] (the one header, table and CSV/Markdown/JSON
//!   rendering every study uses), [`plot`] (PNG charts), [`labels`] (row
//!   labels), [`sysinfo`] (host facts for headers) — the last two are
//!   `packetfs`'s;
//! - processes: [`child`] (child guards, free ports, readiness waits,
//!   process CPU), [`scratch`] (scratch directories), [`cleanup`] (undo on
//!   Ctrl-C);
//! - [`emulink`]: the emulated link (delay, loss, rate without netem) that
//!   `pfs-bench --link` runs the suite's network rows over;
//! - [`peer`]: the in-process sender (blob, target, one session) of the
//!   suite's PFS rows: `packetfs`'s, the code `pfs send` runs.

use std::path::PathBuf;

pub mod args;
pub mod child;
pub mod cleanup;
pub mod emulink;
pub mod exec;
pub mod io_primitives;
pub mod ipc;
pub mod mount;
pub mod peer;
pub mod plot;
pub mod report;
pub mod scratch;
pub mod stream;
pub mod suite;

pub use packetfs::{labels, sysinfo};

/// The `pfs` binary a study drives, and how it names itself in report headers.
#[derive(Debug, Clone)]
pub struct Binary {
    /// Path of the executable started as `pfs serve`, `pfs send`, `pfs bench ipc-peer`, `pfs bench quic-peer`.
    pub path: PathBuf,
    /// Its version (`0.1.0`).
    pub version: String,
    /// The git revision it was built from.
    pub git_revision: String,
}

/// How a study ended, for the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every row ran (or was skipped for a stated reason).
    Passed,
    /// A row failed or an integrity check did not hold.
    Failed,
}

/// Runs `pfs bench` with `args`: the suite, or the study its subcommand names.
pub fn run(args: args::BenchArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    use args::BenchStudy;
    match args.study {
        Some(BenchStudy::IoPrimitives(study)) => io_primitives::run(study, pfs),
        Some(BenchStudy::Exec(study)) => exec::run(study),
        Some(BenchStudy::Ipc(study)) => ipc::run(study, pfs),
        Some(BenchStudy::IpcPeer(peer)) => ipc::run_peer(peer),
        Some(BenchStudy::QuicPeer(peer)) => suite::quic::run_peer(peer),
        Some(BenchStudy::Files(study)) => suite::files::run(study, pfs),
        Some(BenchStudy::Mount(study)) => mount::run(study, pfs),
        Some(BenchStudy::Stream(study)) => stream::run(study, pfs),
        None => suite::run(args, pfs),
    }
}
