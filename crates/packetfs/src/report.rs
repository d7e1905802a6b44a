//! How a session's outcome reads: the text and JSON reports `pfs send`,
//! `pfs send PATH…`, `pfs serve` and `pfs exec` print, built from the
//! outcomes the sessions return. Kept beside the API so another program
//! reports a session exactly as `pfs` does.

use std::time::Duration;

use pfs_exec::kernel::Output;
use pfs_session::catchup::CatchUpStats;
use pfs_session::files::{DeletedKind, FilesSenderOutcome, ItemKind, Itemized, LocalPrepare};
use pfs_session::{GramSenderOutcome, SessionStats};

/// The UDP connection's line in `pfs send`'s text output.
pub fn udp_line(u: &pfs_transport::udp::UdpReport) -> String {
    let s = &u.stats;
    format!(
        "  udp            {} datagrams of ≤ {} B sent ({:.3} MB), {} received; stream resent {:.3} MB \
         ({} packets lost, {} of them spurious, {} probe timeouts, {} congested round trips); srtt {}, bandwidth estimate {:.1} Mbit/s; \
         GSO {}, GRO {}; datagrams {}, {} unauthenticated dropped, {} ICMP unreachable hints",
        s.packets_sent,
        u.datagram,
        s.bytes_sent as f64 / 1e6,
        s.packets_received,
        s.stream_bytes_resent as f64 / 1e6,
        s.packets_lost,
        s.packets_spurious,
        s.probe_timeouts,
        s.congested_rounds,
        u.srtt.map_or("-".into(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3)),
        u.bandwidth as f64 * 8.0 / 1e6,
        if u.gso { "on" } else { "off" },
        if u.gro { "on" } else { "off" },
        if u.tagged { "tagged" } else { "untagged" },
        s.unauthenticated,
        s.unreachable_hints,
    )
}

/// The UDP connection's counters as JSON.
pub fn udp_json(u: &pfs_transport::udp::UdpReport) -> serde_json::Value {
    let s = &u.stats;
    serde_json::json!({
        "datagram_bytes": u.datagram,
        "packets_sent": s.packets_sent,
        "packets_received": s.packets_received,
        "bytes_sent": s.bytes_sent,
        "bytes_received": s.bytes_received,
        "stream_bytes_sent": s.stream_bytes_sent,
        "stream_bytes_resent": s.stream_bytes_resent,
        "packets_lost": s.packets_lost,
        "packets_spurious": s.packets_spurious,
        "probe_timeouts": s.probe_timeouts,
        "congested_rounds": s.congested_rounds,
        "acks_sent": s.acks_sent,
        "stream_bytes_duplicate": s.stream_bytes_duplicate,
        "packets_ignored": s.packets_ignored,
        "srtt_s": u.srtt.map(|d| d.as_secs_f64()),
        "bandwidth_bytes_per_s": u.bandwidth,
        "gso": u.gso,
        "gro": u.gro,
        "tagged": u.tagged,
        "unauthenticated": s.unauthenticated,
        "unreachable_hints": s.unreachable_hints,
    })
}

/// JSON document printed by `pfs send --json`.
pub fn outcome_json(
    stats: &SessionStats,
    out: &GramSenderOutcome,
    pattern: &str,
    udp: Option<&pfs_transport::udp::UdpReport>,
) -> serde_json::Value {
    let descs = out.summary.descriptors.max(1);
    serde_json::json!({
        "udp": udp.map(udp_json),
        "receiver": stats,
        "sender": {
            "grams": out.summary.grams,
            "descriptors": out.summary.descriptors,
            "effective_bytes": out.summary.effective_bytes,
            "wire_bytes_sent": out.summary.wire_bytes_sent,
            "table_bytes": out.table_bytes,
            "table_bytes_per_descriptor": out.table_bytes as f64 / descs as f64,
            "elapsed_s": out.sender_elapsed.as_secs_f64(),
            "user_s": out.sender_usage.user_us as f64 / 1e6,
            "sys_s": out.sender_usage.sys_us as f64 / 1e6,
            "pattern": pattern,
            "repairs_sent": out.repairs_sent,
            "repair_bytes_sent": out.repair_bytes_sent,
        },
        "catch_up": out.catch_up.as_ref().map(catch_up_json),
    })
}

/// The `catch_up` object of `pfs send --json` (null without a catch-up).
pub fn catch_up_json(c: &CatchUpStats) -> serde_json::Value {
    serde_json::json!({
        "regions": c.regions,
        "regions_differing": c.regions_differing,
        "blocks_compared": c.blocks_compared,
        "blocks_sent": c.blocks_moved,
        "bytes_sent": c.bytes_moved,
        "wire_bytes": c.wire_bytes,
        "elapsed_s": c.elapsed_ns as f64 / 1e9,
    })
}

/// One line about a catch-up, for `pfs send`'s report.
///
/// ```
/// let c = packetfs::gram::CatchUpStats { regions: 4, regions_differing: 1, blocks_compared: 4,
///     blocks_moved: 2, bytes_moved: 32768, wire_bytes: 33000, elapsed_ns: 1_000_000, ..Default::default() };
/// assert!(packetfs::report::catch_up_line(&c).starts_with("  catch-up       1 of 4 regions differed"));
/// ```
pub fn catch_up_line(c: &CatchUpStats) -> String {
    format!(
        "  catch-up       {} of {} regions differed: {} of {} blocks compared were sent, {:.3} MB in {:.3} MB wire, {:.3} s",
        c.regions_differing,
        c.regions,
        c.blocks_moved,
        c.blocks_compared,
        mb(c.bytes_moved),
        mb(c.wire_bytes),
        c.elapsed_ns as f64 / 1e9
    )
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// How the wire compares with the data, in words that read right when
/// nothing was saved (or the wire carried more than the data).
pub fn saving(effective: u64, wire: u64) -> String {
    let ratio = effective as f64 / wire as f64;
    if effective == 0 {
        "no file data delivered".into()
    } else if wire == 0 {
        "nothing on the wire".into()
    } else if ratio >= 1.05 {
        format!("{ratio:.1}× less than the data")
    } else if ratio > 0.95 {
        "about the size of the data: nothing saved".into()
    } else {
        format!("{:.2}× the data", 1.0 / ratio)
    }
}

/// A removed entry as rsync names it: a directory with a trailing `/`
/// (the real name, for JSON; human output escapes it: [`files_listing`]).
pub fn deleted_name((kind, path): &(DeletedKind, String)) -> String {
    format!("{path}{}", if *kind == DeletedKind::Dir { "/" } else { "" })
}

/// The lines `pfs send PATH…` prints before its summary: with `itemize`
/// (`-i`) every item of `list` as `YXcstpoguax NAME`; in a dry run without
/// it the names alone (rsync's `-n -v`); otherwise only the `deleting NAME`
/// lines. Names are escaped ([`pfs_files::escape()`]).
///
/// ```
/// use packetfs::report::files_listing;
/// use packetfs::files::{DeletedKind, ItemKind, Itemized};
/// let list = [
///     Itemized { change: ">f+++++++++".into(), kind: ItemKind::File, path: b"a\nb".to_vec(), target: None },
///     Itemized { change: "*deleting".into(), kind: ItemKind::Deleted(DeletedKind::Dir), path: b"old".to_vec(), target: None },
/// ];
/// assert_eq!(files_listing(&list, true, false), ">f+++++++++ a\\#012b\n*deleting   old/\n");
/// assert_eq!(files_listing(&list, false, true), "a\\#012b\ndeleting old/\n");
/// assert_eq!(files_listing(&list, false, false), "deleting old/\n");
/// ```
pub fn files_listing(list: &[Itemized], itemize: bool, dry_run: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for it in list {
        if itemize || dry_run || matches!(it.kind, ItemKind::Deleted(_)) {
            let _ = writeln!(s, "{}", it.text(itemize));
        }
    }
    s
}

/// The items as JSON (`items` in `pfs send --json` with `-i` or
/// `--dry-run`): `{"change", "kind", "path", "target"}` each, the real
/// names (invalid UTF-8 replaced by U+FFFD, JSON holds only text).
pub fn items_json(list: &[Itemized]) -> serde_json::Value {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let kind = |k: ItemKind| match k {
        ItemKind::File => "file",
        ItemKind::HardLink => "hard link",
        ItemKind::Dir | ItemKind::Deleted(DeletedKind::Dir) => "dir",
        ItemKind::Symlink | ItemKind::Deleted(DeletedKind::Symlink) => "symlink",
        ItemKind::Deleted(DeletedKind::File) => "file",
        ItemKind::Deleted(_) => "other",
    };
    list.iter()
        .map(|it| {
            serde_json::json!({
                "change": it.change,
                "kind": kind(it.kind),
                "path": text(&it.path),
                "target": it.target.as_deref().map(text),
            })
        })
        .collect()
}

/// Where the sender's time went before and during the session.
#[derive(Debug)]
pub struct FilesPrep<'a> {
    /// Scan and quick-check cache lookups, before connecting.
    pub scan: Duration,
    /// Hashing and chunking, inside the session.
    pub local: &'a LocalPrepare,
}

/// A files receiver's report as JSON (under `receiver` in
/// [`files_json`], and in `pfs serve`'s `files_report` events).
pub fn files_report_json(r: &pfs_wire::files::FilesReport<'_>) -> serde_json::Value {
    serde_json::json!({
        "files_written": r.files_written,
        "files_unchanged": r.files_unchanged,
        "files_metadata_only": r.files_metadata_only,
        "files_failed": r.files_failed,
        "dirs": r.dirs,
        "symlinks": r.symlinks,
        "files_deleted": r.files_deleted,
        "effective_bytes": r.effective_bytes,
        "matched_bytes": r.matched_bytes,
        "literal_bytes": r.literal_bytes,
        "literal_wire_bytes": r.literal_wire_bytes,
        "wire_bytes": r.wire_bytes,
        "nak_chunks": r.nak_chunks,
        "repaired_bytes": r.repaired_bytes,
        "store_appended": r.store_appended,
        "store_generation": r.store_generation,
        "elapsed_s": r.elapsed_ns as f64 / 1e9,
        "user_s": r.user_us as f64 / 1e6,
        "sys_s": r.sys_us as f64 / 1e6,
    })
}

/// The session as JSON: sender's plan and counters beside the receiver's report.
pub fn files_json(
    out: &FilesSenderOutcome,
    kind: &str,
    prep: &FilesPrep<'_>,
    remote_dir: &str,
) -> serde_json::Value {
    let report = out.report.as_ref().map(files_report_json);
    let elapsed = out.elapsed.as_secs_f64().max(1e-9);
    let effective = out.report.map_or(0, |r| r.effective_bytes);
    let wire = out.wire_bytes_sent + out.wire_bytes_received;
    serde_json::json!({
        "transport": kind,
        "remote_dir": remote_dir,
        "dry_run": out.report.is_none(),
        "plan": out.plan,
        "store_id": out.store_id,
        "store_generation": out.store_generation,
        "index_entries_fetched": out.index_entries_fetched,
        "index_entries_cached": out.index_entries_cached,
        "receiver": report,
        "messages": out.messages,
        "sender": {
            "wire_bytes_sent": out.wire_bytes_sent,
            "wire_bytes_received": out.wire_bytes_received,
            "repaired_chunks": out.repaired_chunks,
            "repaired_bytes": out.repaired_bytes,
            "scan_s": prep.scan.as_secs_f64(),
            "hash_and_chunk_s": prep.local.spent.as_secs_f64(),
            "files_hashed_whole": prep.local.hashed.0,
            "bytes_hashed_whole": prep.local.hashed.1,
            "files_chunked": prep.local.chunked.0,
            "bytes_chunked": prep.local.chunked.1,
            "files_probed": out.probed,
            "entries_unreadable": out.unreadable,
            "entries_dropped": out.dropped,
            "session_s": out.elapsed.as_secs_f64(),
            "user_s": out.usage.user_us as f64 / 1e6,
            "sys_s": out.usage.sys_us as f64 / 1e6,
        },
        "effective_mb_s": mb(effective) / (elapsed + prep.scan.as_secs_f64()),
        "wire_bytes": wire,
        "speedup_effective_over_wire": if wire > 0 { effective as f64 / wire as f64 } else { 0.0 },
        "warnings": out.warnings,
    })
}

/// One summary line, or rsync-style statistics with `--stats`.
pub fn files_human(out: &FilesSenderOutcome, kind: &str, prep: &FilesPrep<'_>, stats: bool) -> String {
    let p = &out.plan;
    let wall = out.elapsed + prep.scan;
    let secs = wall.as_secs_f64().max(1e-9);
    let wire = out.wire_bytes_sent + out.wire_bytes_received;
    let Some(r) = out.report else {
        return format!(
            "dry run over {kind}: {} entries, {} files, {:.1} MB; {} files ({:.1} MB) already at the receiver; \
             would send {:.1} MB as descriptors into the receiver's store, {:.1} MB as repeats of chunks sent \
             earlier in the run, {:.1} MB literal ({} of {} chunks); index: {} entries cached, {} fetched\n",
            p.entries,
            p.files,
            mb(p.total_bytes),
            p.held_files,
            mb(p.held_bytes),
            mb(p.matched_bytes),
            mb(p.known_bytes),
            mb(p.literal_bytes),
            p.literal_chunks,
            p.chunks,
            out.index_entries_cached,
            out.index_entries_fetched,
        );
    };
    let mut s = format!(
        "sent {} entries over {kind}: {} written, {} unchanged, {} same content, {} failed; {:.1} MB effective, \
         {:.3} MB wire ({}), {:.1} MB/s effective in {:.2} s\n",
        p.entries,
        r.files_written,
        r.files_unchanged,
        r.files_metadata_only,
        r.files_failed,
        mb(r.effective_bytes),
        mb(wire),
        saving(r.effective_bytes, wire),
        mb(r.effective_bytes) / secs,
        secs,
    );
    if stats {
        let files_in = p.files;
        s.push_str(&format!(
            "\nNumber of entries: {} (files: {files_in}, dirs: {}, symlinks: {})\n\
             Files written: {}, unchanged (quick check): {}, same content (metadata only): {}, failed: {}\n\
             Total file size: {} bytes\n\
             Matched data (descriptors into the receiver's store): {} bytes\n\
             Literal data: {} bytes ({} bytes on the wire)\n\
             Repaired (NAK/REPAIR): {} chunks, {} bytes\n\
             Index: {} entries from cache, {} fetched (store {}, generation {})\n\
             Probe: {} files asked about, {} held by the receiver ({} bytes): not chunked, no chunk entries sent\n\
             Total bytes sent: {}, received: {}\n\
             Scan: {:.3} s; waited on hash + chunk: {:.3} s ({} files / {} bytes hashed whole, {} files / {} bytes chunked); \
             session: {:.3} s; sender CPU {:.2} s; receiver CPU {:.2} s\n\
             Effective: {:.1} MB/s; wire: {:.1} MB/s; speed-up (effective/wire): {:.1}×\n",
            p.entries,
            r.dirs,
            r.symlinks,
            r.files_written,
            r.files_unchanged,
            r.files_metadata_only,
            r.files_failed,
            p.total_bytes,
            r.matched_bytes,
            r.literal_bytes,
            r.literal_wire_bytes,
            out.repaired_chunks,
            out.repaired_bytes,
            out.index_entries_cached,
            out.index_entries_fetched,
            out.store_id,
            out.store_generation,
            out.probed,
            p.held_files,
            p.held_bytes,
            out.wire_bytes_sent,
            out.wire_bytes_received,
            prep.scan.as_secs_f64(),
            prep.local.spent.as_secs_f64(),
            prep.local.hashed.0,
            prep.local.hashed.1,
            prep.local.chunked.0,
            prep.local.chunked.1,
            out.elapsed.as_secs_f64(),
            (out.usage.user_us + out.usage.sys_us) as f64 / 1e6,
            (r.user_us + r.sys_us) as f64 / 1e6,
            mb(r.effective_bytes) / secs,
            mb(wire) / secs,
            if wire > 0 {
                r.effective_bytes as f64 / wire as f64
            } else {
                0.0
            },
        ));
    }
    s
}

/// Human form of a kernel result.
pub fn exec_output_text(o: &Output) -> String {
    match o {
        Output::U64(v) => format!("{v:#018x} ({v})"),
        Output::Histogram(h) => {
            let total: u64 = h.iter().sum();
            let (top, n) = h
                .iter()
                .enumerate()
                .max_by_key(|(_, n)| **n)
                .map(|(b, n)| (b, *n))
                .unwrap_or((0, 0));
            format!("{total} bytes; most frequent byte {top:#04x} ({n} times)")
        }
        Output::Bytes { bytes, xxh3 } => format!("{bytes} bytes, xxh3 chain {xxh3:#018x}"),
    }
}

/// A server's listening line (the address a sender needs), as `who`
/// prints it: `WHO: listening on ADDR (TRANSPORT)`, or with `json` the
/// `listening` event.
pub fn listening_line(listener: &pfs_transport::AnyListener, json: bool, who: &str) -> String {
    use pfs_transport::{AnyListener, Listener};
    let addr = match listener {
        AnyListener::Tcp(l) => l
            .socket_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| l.local_addr()),
        AnyListener::Udp(l) => l.socket_addr().to_string(),
        other => other.local_addr(),
    };
    let kind = listener.kind();
    if json {
        serde_json::json!({"event": "listening", "addr": addr, "transport": kind}).to_string()
    } else {
        format!("{who}: listening on {addr} ({kind})")
    }
}

/// `--version --json`: `{"name":…,"version":…}`, and `"commit"` when the
/// build knew it.
pub fn version_json(name: &str, version: &str, commit: Option<&str>) -> serde_json::Value {
    let mut v = serde_json::json!({"name": name, "version": version});
    if let Some(c) = commit {
        v["commit"] = c.into();
    }
    v
}

/// An error and its causes on one line, each cause once: many error types
/// already print their source in their own message, so a cause whose text
/// ends the line so far is not repeated (`pfs: error: …`).
///
/// ```
/// let io = std::io::Error::other("disk full");
/// assert_eq!(packetfs::report::error_line(&io), "disk full");
/// ```
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.ends_with(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_reads_right_whatever_was_saved() {
        assert_eq!(saving(100_000, 1_000), "100.0× less than the data");
        assert_eq!(
            saving(1_000_000, 1_003_000),
            "about the size of the data: nothing saved"
        );
        assert_eq!(saving(1_000, 2_000), "2.00× the data");
        assert_eq!(saving(0, 0), "no file data delivered");
        assert_eq!(saving(0, 5_000), "no file data delivered");
        assert_eq!(saving(5_000, 0), "nothing on the wire");
    }
}
