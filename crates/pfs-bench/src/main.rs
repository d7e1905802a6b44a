//! `pfs-bench`: the PacketFS benchmark harness as its own program. It
//! takes the grammar of [`pfs_bench::args::BenchArgs`] (also reached as
//! `pfs bench …`, which runs this program) plus `--pfs PATH`, the `pfs`
//! binary its studies start as receivers and senders.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use pfs_bench::args::{BenchArgs, BenchStudy};

const ABOUT: &str =
    "Run the benchmark suite on loopback: conventional baselines and every PFS mode, one table";

const AFTER_HELP: &str = "\
Examples:
  pfs-bench                       # quick suite (~1 minute), table on stdout
  pfs-bench --out bench-out       # also CSV, JSON and Markdown in bench-out/
  pfs-bench --json                # machine-readable
  pfs-bench files --pfs target/release/pfs   # one study, driving the pfs binary named
`pfs bench …` runs this program with the same arguments.";

/// The `pfs-bench` command.
#[derive(Debug, Parser)]
#[command(name = "pfs-bench", version, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    /// The suite's flags, or a study.
    #[command(flatten)]
    bench: BenchArgs,
    /// The `pfs` binary the studies drive (default: `pfs` next to this program, else on PATH).
    #[arg(long, value_name = "PATH", global = true)]
    pfs: Option<PathBuf>,
}

/// Exit code of a study with a failed row (as `pfs`'s 1).
const FAILURE: i32 = 1;

fn main() {
    let cli = Cli::parse_from(pfs_option_last(std::env::args_os()));
    let code = match run(cli) {
        Ok(pfs_bench::Outcome::Passed) => 0,
        Ok(pfs_bench::Outcome::Failed) => FAILURE,
        Err(e) => {
            eprintln!("pfs: error: {}", packetfs::report::error_line(e.as_ref()));
            FAILURE
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> anyhow::Result<pfs_bench::Outcome> {
    // The peer sides of a row are started by a study and never start `pfs`.
    let is_peer = matches!(
        cli.bench.study,
        Some(BenchStudy::IpcPeer(_) | BenchStudy::QuicPeer(_))
    );
    let pfs = if is_peer {
        pfs_bench::Binary {
            path: cli.pfs.unwrap_or_else(|| PathBuf::from("pfs")),
            version: env!("CARGO_PKG_VERSION").into(),
            git_revision: String::new(),
        }
    } else {
        binary(find_pfs(cli.pfs)?)?
    };
    pfs_bench::run(cli.bench, &pfs)
}

/// `--pfs` may be given anywhere; the suite's flags conflict with a study
/// subcommand, so the option is moved to the end, where clap reads it as a
/// global option of whichever command is being parsed.
fn pfs_option_last(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut rest = Vec::new();
    let mut pfs = Vec::new();
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        if a == "--" {
            rest.push(a);
            rest.extend(args.by_ref());
            break;
        }
        if a == "--pfs" {
            pfs.push(a);
            pfs.extend(args.next());
        } else if a.to_str().is_some_and(|s| s.starts_with("--pfs=")) {
            pfs.push(a);
        } else {
            rest.push(a);
        }
    }
    let at = rest.iter().position(|a| a == "--").unwrap_or(rest.len());
    rest.splice(at..at, pfs);
    rest
}

/// The `pfs` binary: `--pfs`, else the one beside this program, else on PATH.
fn find_pfs(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        anyhow::ensure!(p.is_file(), "--pfs {}: no such file", p.display());
        return Ok(p);
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join("pfs")))
        .filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("pfs"))
                .find(|p| p.is_file())
        })
    };
    beside.or_else(on_path).context(
        "cannot find the pfs binary the studies drive (looked beside pfs-bench and on PATH): \
         build it with `cargo build --release -p pfs-cli`, or name it with --pfs PATH",
    )
}

/// Names `path` for the studies, with the version it reports (`pfs 0.1.0 (rev)`).
fn binary(path: PathBuf) -> anyhow::Result<pfs_bench::Binary> {
    let out = std::process::Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (version, git_revision) = parse_version(&text).with_context(|| {
        format!(
            "{} --version printed {text:?}, not `pfs VERSION (REV)`",
            path.display()
        )
    })?;
    Ok(pfs_bench::Binary {
        path: absolute(&path),
        version,
        git_revision,
    })
}

/// `pfs 0.1.0 (1936f08abcde)` → (`0.1.0`, `1936f08abcde`).
fn parse_version(text: &str) -> Option<(String, String)> {
    let rest = text.trim().strip_prefix("pfs ")?;
    let (version, rev) = rest.split_once(' ')?;
    let rev = rev.strip_prefix('(')?.strip_suffix(')')?;
    Some((version.to_string(), rev.to_string()))
}

/// Studies start the binary from scratch directories: a relative path would not resolve there.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_pfs_option_moves_to_the_end() {
        let moved =
            pfs_option_last(os(&["pfs-bench", "--pfs", "/x/pfs", "files", "--size", "1M"]).into_iter());
        assert_eq!(
            moved,
            os(&["pfs-bench", "files", "--size", "1M", "--pfs", "/x/pfs"])
        );
        let eq = pfs_option_last(os(&["pfs-bench", "--pfs=/x/pfs", "--json"]).into_iter());
        assert_eq!(eq, os(&["pfs-bench", "--json", "--pfs=/x/pfs"]));
        let cli = Cli::try_parse_from(pfs_option_last(
            os(&["pfs-bench", "--pfs", "/x/pfs", "exec"]).into_iter(),
        ))
        .expect("parses");
        assert_eq!(cli.pfs, Some(PathBuf::from("/x/pfs")));
        assert!(matches!(cli.bench.study, Some(BenchStudy::Exec(_))));
    }

    #[test]
    fn versions_read_from_pfs() {
        assert_eq!(
            parse_version("pfs 0.1.0 (1936f08abcde-dirty)\n"),
            Some(("0.1.0".into(), "1936f08abcde-dirty".into()))
        );
        assert_eq!(parse_version("cat (GNU coreutils) 9.1"), None);
    }
}
