//! pCPU: kernels executed over descriptor schedules on this host's blob,
//! sharded on pThreads. The kernels and schedules are `pfs-exec`'s.

pub use pfs_exec::{
    execute_gram, shard, ExecError, GramLimits, GramOutcome, Pattern, Schedule, ScheduleSpec, Total,
};
pub use pfs_exec::{kernel, user};

use std::path::{Path, PathBuf};

use pfs_exec::schedule::SpecError;
use pfs_exec::shard::{Prepared, ShardError};
use pfs_wire::Encoding;

/// Why a schedule could not be prepared for execution.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The gram file could not be read.
    #[error("reading {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The gram file's grams do not make a schedule for this blob.
    #[error("preparing {}", .0.display())]
    GramFile(PathBuf, #[source] ShardError),
    /// The generator's settings do not hold together.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// The generated schedule does not fit this blob.
    #[error("preparing the schedule")]
    Schedule(#[source] ShardError),
}

/// The schedule a kernel runs over, encoded in `encoding` and checked
/// against a blob of `spec.blob_len` bytes: the grams recorded in
/// `gram_file` (`pfs serve --record`), or else the seeded generator's
/// `spec`. With it, a phrase naming where it came from.
///
/// ```
/// use packetfs::exec::{prepare, Pattern, ScheduleSpec, Total};
/// let spec = ScheduleSpec {
///     seed: 1, desc_per_gram: 64, max_len: 4096, align: 64,
///     pattern: Pattern::Sequential, total: Total::Grams(4), blob_len: 1 << 20,
/// };
/// let (prepared, source) = prepare(None, spec, packetfs::wire::Encoding::Arithmetic)?;
/// assert_eq!(source, "sequential pattern");
/// assert!(prepared.effective_bytes() > 0);
/// # Ok::<(), packetfs::exec::PrepareError>(())
/// ```
pub fn prepare(
    gram_file: Option<&Path>,
    spec: ScheduleSpec,
    encoding: Encoding,
) -> Result<(Prepared, String), PrepareError> {
    match gram_file {
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|e| PrepareError::Read(path.to_path_buf(), e))?;
            let (prepared, grams) = Prepared::from_gram_file(&bytes, encoding, spec.blob_len)
                .map_err(|e| PrepareError::GramFile(path.to_path_buf(), e))?;
            Ok((
                prepared,
                format!("{grams} recorded grams from {}", path.display()),
            ))
        }
        None => {
            let prepared = Prepared::from_schedule(Schedule::new(spec)?, encoding, spec.blob_len)
                .map_err(PrepareError::Schedule)?;
            Ok((prepared, format!("{} pattern", spec.pattern.name())))
        }
    }
}

/// A `user:PATH[:PREFIX]` kernel argument (`pfs exec --kernel`,
/// `pfs-bench exec --user-kernel`): the shared object and its symbol prefix
/// (`pfs_` when none is given). `None` when `spec` is not a user kernel.
///
/// ```
/// use packetfs::exec::parse_user_kernel;
/// assert_eq!(parse_user_kernel("user:/tmp/k.so"), Some(("/tmp/k.so".into(), "pfs_".into())));
/// assert_eq!(parse_user_kernel("user:/tmp/k.so:my_"), Some(("/tmp/k.so".into(), "my_".into())));
/// assert_eq!(parse_user_kernel("xxh3"), None);
/// ```
pub fn parse_user_kernel(spec: &str) -> Option<(PathBuf, String)> {
    let rest = spec.strip_prefix("user:")?;
    match rest.rsplit_once(':') {
        Some((path, prefix)) if !prefix.contains('/') && !prefix.is_empty() => {
            Some((path.into(), prefix.into()))
        }
        _ => Some((rest.into(), "pfs_".into())),
    }
}
