//! The line every server session ends with, as a `tracing` event: who,
//! from where, what, how much, how long, and how it ended (its fields are
//! listed in docs/deploy.md, "Logs").

use pfs_session::server::Traffic;
use pfs_session::Client;

/// What a session did, for its end-of-session line.
#[derive(Debug, Default)]
pub struct Did<'a> {
    /// `files`, `mount` or `blob`.
    pub service: &'a str,
    /// Files sessions: what the report counts.
    pub files: Option<FilesDid>,
    /// Blob sessions: `payload`, `offset` or `arith`.
    pub mode: Option<&'a str>,
    /// Bytes reconstructed or executed over.
    pub effective_bytes: u64,
    /// The report's wire bytes.
    pub wire_bytes: u64,
    /// `None` if it ended well, else why not.
    pub failure: Option<String>,
}

/// What a files session did to the destination's entries.
#[derive(Debug, Default, Clone, Copy)]
pub struct FilesDid {
    /// Files written (new or changed content).
    pub written: u64,
    /// Files left as they were.
    pub unchanged: u64,
    /// Entries that failed.
    pub failed: u64,
    /// Entries deleted (`pfs send --delete`).
    pub deleted: u64,
}

/// The line a session ends with: who (key fingerprint, `-` for a plain
/// connection), from where, what, how much, how long, and how it ended.
/// A failed session has no report: its wire bytes are what its connection
/// carried before it ended.
pub fn session_end(client: &Client, traffic: &Traffic, did: &Did<'_>) {
    let f = did.files;
    let (written, unchanged, failed, deleted) = (
        f.map(|f| f.written),
        f.map(|f| f.unchanged),
        f.map(|f| f.failed),
        f.map(|f| f.deleted),
    );
    let wire = match did.failure {
        None => did.wire_bytes,
        Some(_) => traffic.bytes_in + traffic.bytes_out,
    };
    let outcome = did
        .failure
        .as_ref()
        .map_or_else(|| "ok".to_string(), |why| format!("failed: {why}"));
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                $level,
                event = "session",
                key = %client.fingerprint(),
                peer = %client.addr,
                service = did.service,
                mode = did.mode,
                files_written = written,
                files_unchanged = unchanged,
                files_failed = failed,
                files_deleted = deleted,
                effective_bytes = did.effective_bytes,
                wire_bytes = wire,
                bytes_in = traffic.bytes_in,
                bytes_out = traffic.bytes_out,
                duration_s = (traffic.elapsed.as_secs_f64() * 1e3).round() / 1e3,
                outcome = %outcome,
                "session ended"
            )
        };
    }
    if did.failure.is_none() {
        line!(tracing::Level::INFO);
    } else {
        line!(tracing::Level::WARN);
    }
}
