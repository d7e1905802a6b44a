//! The server's logs: `tracing` events on stderr, as text or one JSON
//! object a line, and the one line every session ends with
//! ([`packetfs::session_log`]). Results stay on stdout, unchanged.

use std::io::IsTerminal;

use tracing::level_filters::LevelFilter;

use crate::args::{LogArgs, LogFormatArg, LogLevelArg};

pub use packetfs::session_log::{session_end, Did, FilesDid};

/// Sends this process's `tracing` events to stderr as `args` say. Called
/// once; a second call (tests running two servers) keeps the first.
pub fn init(args: &LogArgs) {
    let level = match args.log_level {
        LogLevelArg::Error => LevelFilter::ERROR,
        LogLevelArg::Warn => LevelFilter::WARN,
        LogLevelArg::Info => LevelFilter::INFO,
        LogLevelArg::Debug => LevelFilter::DEBUG,
    };
    let fmt = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false);
    let _ = match args.log_format {
        LogFormatArg::Text => fmt.with_ansi(std::io::stderr().is_terminal()).try_init(),
        // Flattened: `jq .peer` rather than `.fields.peer`.
        LogFormatArg::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}
