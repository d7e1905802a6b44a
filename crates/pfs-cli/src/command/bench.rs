//! `pfs bench`: the harness is its own program, `pfs-bench`, so this binary
//! links none of it. It runs that program in its place with the same
//! arguments, naming this binary as the `pfs` the studies drive.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::Context;

use crate::args::BenchArgs;

/// Replaces this process with `pfs-bench` (beside this binary, else on PATH).
pub fn run(args: &BenchArgs) -> anyhow::Result<i32> {
    let me = std::env::current_exe().context("cannot locate the pfs binary")?;
    let beside = me.parent().map(|d| d.join("pfs-bench")).filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("pfs-bench"))
                .find(|p| p.is_file())
        })
    };
    let harness: PathBuf = beside.or_else(on_path).with_context(|| {
        format!(
            "pfs bench runs the pfs-bench program, which is neither beside {} nor on PATH: \
             build it with `cargo build --release -p pfs-bench`",
            me.display()
        )
    })?;
    let mut cmd = std::process::Command::new(&harness);
    // Its usage and errors then read `pfs bench …`, as typed.
    cmd.arg0("pfs bench").args(&args.args);
    let named = args
        .args
        .iter()
        .any(|a| a == "--pfs" || a.to_str().is_some_and(|s| s.starts_with("--pfs=")));
    if !named {
        cmd.arg("--pfs").arg(&me);
    }
    let err = cmd.exec();
    Err(err).with_context(|| format!("cannot run {}", harness.display()))
}
