//! `pfs bench io-primitives`: the socket study (being built in this session).

use clap::Args;

/// Options of the I/O-primitives study.
#[derive(Debug, Args)]
pub struct IoPrimitivesArgs {}

pub fn run(_args: IoPrimitivesArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`pfs bench io-primitives` is not built yet")
}
