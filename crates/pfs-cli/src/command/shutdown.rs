//! SIGTERM and SIGINT on `pfs serve` ([`packetfs::shutdown`]): stop
//! accepting at once, give running sessions a grace period (a second signal
//! ends it), then cut them. The server returns once every session has
//! ended, and `pfs serve` exits 0.

use std::time::Duration;

pub use packetfs::shutdown::watch;

/// `--shutdown-grace` as a duration.
pub fn grace(secs: f64) -> anyhow::Result<Duration> {
    if !(secs.is_finite() && secs >= 0.0) {
        anyhow::bail!("--shutdown-grace must be a number of seconds, 0 or more (got {secs})");
    }
    Ok(Duration::from_secs_f64(secs))
}
