//! PNG plots drawn by the tool itself (being built in this session).

use std::path::Path;

/// One bar group of the main suite chart.
#[derive(Debug, Clone)]
pub struct SuiteBar {
    /// Row label (plus integrity/pattern qualifiers).
    pub label: String,
    /// Effective MB/s.
    pub effective_mb_s: f64,
    /// Effective MB per CPU-second.
    pub mb_per_cpu_s: f64,
    /// Effective MB.
    pub effective_mb: f64,
    /// Wire MB.
    pub wire_mb: f64,
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Bar chart of effective MB/s and MB/CPU-s per label, wire bytes annotated.
pub fn suite_bars(_bars: &[SuiteBar], _title: &str, _path: &Path) -> anyhow::Result<()> {
    anyhow::bail!("plotting is not built yet")
}

/// Line chart, optionally with a log2 x axis.
pub fn lines(
    _series: &[Series],
    _title: &str,
    _x_label: &str,
    _y_label: &str,
    _log_x: bool,
    _path: &Path,
) -> anyhow::Result<()> {
    anyhow::bail!("plotting is not built yet")
}
