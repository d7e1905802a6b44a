//! `pfs send PATH… --to ADDR[:REMOTE_DIR]`: scan, chunk (in parallel, with
//! the quick-check recipe cache), then one files session; prints the
//! receiver's report, rsync-style statistics with `--stats`, JSON with
//! `--json`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pfs_files::{default_cache_dir, ChunkParams, RecipeCache};
use pfs_session::files::{
    save_recipes, scan_items, send_files, DeleteConfig, DeleteStatus, DeletedKind, FilesMeter,
    FilesSenderConfig, FilesSenderOutcome, LocalPrepare, ScanConfig, Scanned,
};

use crate::args::{SendArgs, TransportArg};
use crate::exit;

use super::send::target;

/// Splits `ADDR[:REMOTE_DIR]`: for TCP the part after `host:port` (or
/// `[v6]:port`), for socket paths the part after the first `:`.
pub fn split_target(to: &str, transport: TransportArg) -> (String, String) {
    let split_at = match transport {
        TransportArg::Tcp | TransportArg::Udp => {
            let port_colon = if to.starts_with('[') {
                to.find("]:").map(|i| i + 1)
            } else {
                to.find(':')
            };
            port_colon.and_then(|p| to[p + 1..].find(':').map(|q| p + 1 + q))
        }
        TransportArg::Unix | TransportArg::Shm => to.find(':'),
    };
    match split_at {
        Some(i) => (to[..i].to_string(), to[i + 1..].trim_matches('/').to_string()),
        None => (to.to_string(), String::new()),
    }
}

fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// The exit status of a send that ran: partial if any entry was not
/// delivered (failed at the receiver, or not readable here: a dry run
/// says so too, as the real run would).
fn exit_code(failed_at_receiver: Option<u64>, failed_here: u64) -> i32 {
    match failed_at_receiver.unwrap_or(0) + failed_here {
        0 => exit::OK,
        _ => exit::PARTIAL,
    }
}

/// How the wire compares with the data, in words that read right when
/// nothing was saved (or the wire carried more than the data).
fn saving(effective: u64, wire: u64) -> String {
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

pub fn run(args: &SendArgs) -> anyhow::Result<i32> {
    let f = &args.files;
    let json = args.run.json;
    let params = ChunkParams::new(f.chunk_avg).map_err(|e| anyhow::anyhow!("--chunk-avg: {e}"))?;
    let (addr, remote_dir) = split_target(&args.to, args.transport.transport);
    let bwlimit = f.bwlimit.filter(|&r| r > 0);
    let floor = pfs_session::files::bwlimit::min_rate(params.max());
    if let Some(r) = bwlimit.filter(|&r| r < floor) {
        anyhow::bail!(
            "--bwlimit: {r} B/s is below {floor} B/s, at which one chunk (--chunk-avg) takes a minute"
        );
    }
    let recipes = match (&f.cache_dir, f.no_cache) {
        (_, true) => None,
        (Some(d), false) => Some(d.join("recipes")),
        (None, false) => Some(RecipeCache::default_path()?),
    };
    let Scanned {
        mut items,
        warnings,
        unreadable: failed_at_scan,
        mut cache,
        contents,
        elapsed: scan_time,
    } = scan_items(&ScanConfig {
        paths: &args.paths,
        exclude: &f.exclude,
        cache: recipes,
        params,
        reread: f.checksum,
        walk: pfs_files::WalkConfig {
            xattrs: pfs_files::XattrScope {
                user: f.xattrs,
                acls: f.acls,
            },
        },
    })?;
    for w in &warnings {
        eprintln!("pfs: warning: {w}");
    }
    // An empty DIR/ with --delete empties the destination, as rsync does.
    if items.is_empty() && !(contents && f.delete) {
        anyhow::bail!("nothing to send (every path was excluded or skipped)");
    }
    if f.delete && failed_at_scan > 0 {
        eprintln!(
            "pfs: warning: not deleting anything at the receiver: {failed_at_scan} entries could not be read"
        );
    }
    let cache_dir = match (&f.cache_dir, f.no_cache) {
        (_, true) => None,
        (Some(d), false) => Some(d.join("index")),
        (None, false) => Some(default_cache_dir()?.join("index")),
    };
    let cfg = FilesSenderConfig {
        remote_dir: remote_dir.clone().into_bytes(),
        dry_run: f.dry_run,
        compress: f.compress.then_some(f.compress_level),
        chunk_avg: params.avg(),
        index_cache_dir: cache_dir,
        reply_timeout: Duration::from_secs(300),
        session_nonce: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        probe: !f.no_probe,
        delete: (f.delete && failed_at_scan == 0).then(|| DeleteConfig {
            root: contents,
            protect: f.exclude.clone(),
        }),
        checksum: f.checksum,
        bwlimit,
        preserve: pfs_session::files::PreserveConfig {
            owner: f.owner || f.archive,
            group: f.group || f.archive,
            hard_links: f.hard_links,
        },
        stream_min: Some(pfs_session::files::DEFAULT_STREAM_MIN),
    };
    let show = super::progress::choose(f.progress, json, args.run.log_interval)?;
    let security = super::auth::client_security(&args.auth, &addr, args.transport.transport)?;
    let target = target(&addr, &args.transport, args.run.sock_buf);
    let mut t = target.connect_as(security.as_ref(), pfs_auth::Service::Files)?;
    let kind = t.kind();
    // Hashing, chunking and the stream count into the meter a thread shows.
    let meter = std::sync::Arc::new(FilesMeter::new());
    let mut local = LocalPrepare::new(params, f.threads).metered(meter.clone());
    let mut out = super::progress::during(show, &meter, || {
        send_files(&mut *t, &mut items, &cfg, &mut local, &mut |p| meter.stream(p))
    })?;
    if let Some(c) = &mut cache {
        if let Some(w) = save_recipes(c, &items, &params) {
            eprintln!("pfs: warning: {w}");
        }
    }
    let prep = Prep {
        scan: scan_time,
        local: &local,
    };
    for w in &out.warnings {
        eprintln!("pfs: warning: {w}");
    }
    // Any entry not delivered makes the transfer partial: failed or dropped
    // (FILE_DROP) at the receiver, unreadable at the scan or when chunked.
    out.unreadable += failed_at_scan as u64;
    let code = exit_code(out.report.as_ref().map(|r| r.files_failed), out.unreadable);
    if let Some(d) = out.deletion.as_ref().filter(|d| d.status != DeleteStatus::Done) {
        eprintln!(
            "pfs: warning: nothing deleted at the receiver: {}",
            d.status.reason()
        );
    }
    if json {
        let mut v = to_json(&out, kind, &prep, &remote_dir);
        v["bwlimit_bytes_per_s"] = serde_json::json!(bwlimit);
        v["deleted"] = serde_json::json!(out.deletion.as_ref().map(|d| serde_json::json!({
            "status": d.status.reason(), "count": d.count,
            "entries": d.entries.iter().map(deleted_name).collect::<Vec<_>>() })));
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        // rsync's `deleting PATH` lines (in a dry run, what would go).
        out.deletion
            .iter()
            .flat_map(|d| &d.entries)
            .for_each(|e| println!("deleting {}", deleted_name(e)));
        print!("{}", human(&out, kind, &prep, f.stats));
    }
    if !out.messages.is_empty() {
        for line in out.messages.lines() {
            eprintln!("pfs: not written: {line}");
        }
    }
    Ok(code)
}

/// A removed entry as rsync names it: a directory with a trailing `/`.
fn deleted_name((kind, path): &(DeletedKind, String)) -> String {
    format!("{path}{}", if *kind == DeletedKind::Dir { "/" } else { "" })
}

/// Where the sender's time went before and during the session.
struct Prep<'a> {
    /// Scan and quick-check cache lookups, before connecting.
    scan: Duration,
    /// Hashing and chunking, inside the session.
    local: &'a LocalPrepare,
}

/// A receiver's report as JSON (here under `receiver`, and in the server's
/// `files_report` events).
pub(crate) fn report_json(r: &pfs_wire::files::FilesReport<'_>) -> serde_json::Value {
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
fn to_json(out: &FilesSenderOutcome, kind: &str, prep: &Prep<'_>, remote_dir: &str) -> serde_json::Value {
    let report = out.report.as_ref().map(report_json);
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
fn human(out: &FilesSenderOutcome, kind: &str, prep: &Prep<'_>, stats: bool) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_split() {
        let t = TransportArg::Tcp;
        assert_eq!(
            split_target("127.0.0.1:7878", t),
            ("127.0.0.1:7878".into(), String::new())
        );
        assert_eq!(split_target("h:7878:a/b/", t), ("h:7878".into(), "a/b".into()));
        assert_eq!(split_target("[::1]:7878:x", t), ("[::1]:7878".into(), "x".into()));
        assert_eq!(
            split_target("[::1]:7878", t),
            ("[::1]:7878".into(), String::new())
        );
        let s = TransportArg::Shm;
        assert_eq!(
            split_target("/tmp/p.sock:in", s),
            ("/tmp/p.sock".into(), "in".into())
        );
        assert_eq!(
            split_target("/tmp/p.sock", s),
            ("/tmp/p.sock".into(), String::new())
        );
    }

    #[test]
    fn any_entry_not_delivered_makes_the_send_partial() {
        assert_eq!(exit_code(Some(0), 0), exit::OK);
        assert_eq!(exit_code(Some(2), 0), exit::PARTIAL);
        assert_eq!(exit_code(Some(0), 1), exit::PARTIAL);
        // A dry run has no report; what it could not read, a send could not send.
        assert_eq!(exit_code(None, 0), exit::OK);
        assert_eq!(exit_code(None, 1), exit::PARTIAL);
    }

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
