//! `pfs send PATH… --to ADDR[:REMOTE_DIR]`: scan, chunk (in parallel, with
//! the quick-check recipe cache), then one files session; prints the
//! receiver's report, rsync-style statistics with `--stats`, JSON with
//! `--json`.

use pfs_files::{default_cache_dir, ChunkParams, RecipeCache};
use pfs_session::files::{
    save_recipes, scan_items, send_files, DeleteConfig, DeleteStatus, FilesMeter, FilesSenderConfig,
    LocalPrepare, ScanConfig, Scanned,
};

use packetfs::report::{deleted_name, files_human, files_json, files_listing, items_json, FilesPrep};

use crate::args::{SendArgs, TransportArg};
use crate::exit;

use super::send::target;

/// Splits `ADDR[:REMOTE_DIR]` ([`packetfs::files::parse_target`]); a
/// mistake is a usage error naming `what` (`--to`, `SOURCE`).
pub fn split_target(what: &str, to: &str, transport: TransportArg) -> anyhow::Result<(String, String)> {
    packetfs::files::parse_target(to, transport.is_network())
        .map_err(|e| anyhow::Error::new(e).context(what.to_string()))
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

pub fn run(args: &SendArgs) -> anyhow::Result<i32> {
    let f = &args.files;
    let json = args.run.json;
    let params = ChunkParams::new(f.chunk_avg).map_err(|e| anyhow::anyhow!("--chunk-avg: {e}"))?;
    let (addr, remote_dir) = split_target("--to", &args.to, args.transport.transport)?;
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
    let xattrs = pfs_files::XattrScope {
        user: f.xattrs,
        acls: f.acls,
    };
    let Scanned {
        mut items,
        warnings,
        unreadable: failed_at_scan,
        mut cache,
        contents,
        top_mtime_ns,
        unsafe_links,
        elapsed: scan_time,
    } = scan_items(&ScanConfig {
        paths: &args.paths,
        exclude: &f.exclude,
        cache: recipes,
        params,
        reread: f.checksum,
        walk: pfs_files::WalkConfig { xattrs },
        safe_links: f.safe_links,
    })?;
    for w in &warnings {
        eprintln!("pfs: warning: {w}");
    }
    // rsync's wording; skipped by choice, so neither a warning nor a failure.
    for (path, target) in &unsafe_links {
        eprintln!(
            "pfs: ignoring unsafe symlink {} -> {} (--safe-links)",
            pfs_files::escape_path(path),
            pfs_files::escape(target)
        );
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
        index_cache_dir: cache_dir,
        probe: !f.no_probe,
        probe_all: f.itemize_changes || f.dry_run,
        delete: (f.delete && failed_at_scan == 0).then(|| DeleteConfig {
            root: contents,
            protect: f.exclude.clone(),
        }),
        checksum: f.checksum,
        sparse: !f.no_sparse,
        bwlimit,
        preserve: pfs_session::files::PreserveConfig {
            owner: f.owner || f.archive,
            group: f.group || f.archive,
            hard_links: f.hard_links,
        },
        top_mtime_ns,
        ..packetfs::files::sender_config(&params)
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
    let prep = FilesPrep {
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
    let icfg = pfs_session::files::ItemizeConfig {
        preserve: cfg.preserve,
        xattrs,
    };
    let list = pfs_session::files::itemize(&items, &out, &icfg);
    if json {
        let mut v = files_json(&out, kind, &prep, &remote_dir);
        v["bwlimit_bytes_per_s"] = serde_json::json!(bwlimit);
        v["sender"]["symlinks_unsafe_skipped"] = serde_json::json!(unsafe_links.len());
        v["sender"]["symlinks_unsafe"] = serde_json::json!(unsafe_links
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>());
        v["items"] = serde_json::json!((f.itemize_changes || f.dry_run).then(|| items_json(&list)));
        v["deleted"] = serde_json::json!(out.deletion.as_ref().map(|d| serde_json::json!({
            "status": d.status.reason(), "count": d.count,
            "entries": d.entries.iter().map(deleted_name).collect::<Vec<_>>() })));
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        // rsync's items (-i), names (-n) or `deleting PATH` lines.
        print!("{}", files_listing(&list, f.itemize_changes, f.dry_run));
        print!("{}", files_human(&out, kind, &prep, f.stats));
        if f.safe_links {
            println!("unsafe symlinks skipped (--safe-links): {}", unsafe_links.len());
        }
    }
    if !out.messages.is_empty() {
        for line in out.messages.lines() {
            eprintln!("pfs: not written: {line}");
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_entry_not_delivered_makes_the_send_partial() {
        assert_eq!(exit_code(Some(0), 0), exit::OK);
        assert_eq!(exit_code(Some(2), 0), exit::PARTIAL);
        assert_eq!(exit_code(Some(0), 1), exit::PARTIAL);
        // A dry run has no report; what it could not read, a send could not send.
        assert_eq!(exit_code(None, 0), exit::OK);
        assert_eq!(exit_code(None, 1), exit::PARTIAL);
    }
}
