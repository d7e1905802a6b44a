//! Progress of `pfs send PATH…` on stderr while the session runs, from its
//! `FilesMeter`: a bar on a terminal, else a plain line every
//! `--log-interval` seconds and one at the end.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pfs_session::files::sender::meter::{watch, FilesMeter, MeterReading};

use crate::args::ProgressArg;

/// How progress is shown: a bar (true) or lines, this often; or not at all.
pub type Show = Option<(bool, Duration)>;

/// From `--progress`, `--json` and `--log-interval` (with `auto`, lines only
/// when an interval is given).
pub fn choose(arg: ProgressArg, json: bool, every: Option<f64>) -> anyhow::Result<Show> {
    let interval = super::interval(every, true)?;
    Ok(match arg {
        ProgressArg::Never => None,
        _ if std::io::stderr().is_terminal() => {
            (arg == ProgressArg::Always || !json).then_some((true, Duration::from_millis(200)))
        }
        ProgressArg::Auto if interval.is_none() => None,
        _ => Some((false, interval.unwrap_or(Duration::from_secs(1)))),
    })
}

/// Runs `work` while `meter` is shown as `show` says.
pub fn during<R>(show: Show, meter: &FilesMeter, work: impl FnOnce() -> R) -> R {
    let Some((bar, tick)) = show else {
        return work();
    };
    let style = ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_spinner());
    let pb = bar.then(|| ProgressBar::new_spinner().with_style(style));
    let draw = |r: &MeterReading, rate, over| match &pb {
        Some(pb) => pb.set_message(format!("{} {}", r.bar(25), r.line(rate, over))),
        None => eprintln!("pfs send: {}", r.line(rate, over)),
    };
    let out = watch(meter, tick, draw, work);
    pb.inspect(ProgressBar::finish_and_clear);
    out
}
