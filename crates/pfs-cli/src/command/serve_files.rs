//! `pfs serve --dest DIR [--store DIR]`: receive files into the destination
//! root, deduplicated against the files it holds (or a content store), and
//! serve the trees it holds to `pfs mount` clients; one report per session.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use pfs_files::DestRoot;
use pfs_session::files::{FilesReceiverConfig, FilesReceiverOutcome};
use pfs_session::server::Traffic;
use pfs_session::{
    clean_temps, serve_files, Client, FilesPlaces, FilesSessionOutcome, Keeping, MountRecipes,
    MountServerConfig, MountServerOutcome, ServerEvent,
};
use pfs_store::{Durability, StoreConfig};

use crate::args::ServeArgs;
use crate::exit;

use super::log;
use super::serve::{emit, finished, listen, report_common, server_config};

pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let dest_dir = args.dest.as_deref().context("files need --dest")?;
    std::fs::create_dir_all(dest_dir).with_context(|| format!("--dest {}", dest_dir.display()))?;
    let cfg = server_config(args)?;
    let dest = Arc::new(DestRoot::open(dest_dir)?);
    let json = args.run.json;
    let (keeping, opened) = match &args.store {
        None => (
            Keeping::Dest { durable: true },
            FilesPlaces::open_dest(dest.clone(), true),
        ),
        Some(dir) => {
            // Chunk bytes reach the disk before the index names them, always.
            let config = StoreConfig {
                capacity: args.store_capacity,
                huge_dir: args.blob.huge_dir.clone(),
                durability: Durability::Fsync,
            };
            let opened = FilesPlaces::open_store(dest.clone(), dir, &config);
            (
                Keeping::Store {
                    dir: dir.clone(),
                    config,
                },
                opened,
            )
        }
    };
    let (shared, notes) = opened.map_err(anyhow::Error::msg)?;
    notes.iter().for_each(|n| tracing::warn!("{n}"));
    let h = shared.chunks.holding();
    let stale = clean_temps(&dest, &shared.chunks)?;
    if stale > 0 {
        tracing::info!("removed {stale} temporary file(s) left by an interrupted transfer");
    }
    if json {
        emit(
            &serde_json::json!({ "event": h.kind, "dir": h.path.display().to_string(), "id": h.id,
            "generation": h.generation, "chunks": h.chunks, "bytes": h.bytes, "files": h.files,
            "capacity": h.capacity.as_ref().map(|c| c.0), "backing": h.capacity.as_ref().map(|c| &c.1),
            "dest": dest_dir.display().to_string() })
            .to_string(),
        );
    } else {
        tracing::info!("{h}; destination {}", dest_dir.display());
    }
    let (listener, _metrics) = listen(args, &cfg)?;
    let places = FilesPlaces::new(keeping, shared);
    let files_cfg = FilesReceiverConfig {
        fsync_files: args.fsync,
        ..FilesReceiverConfig::default()
    };
    let (recipes, warning) = MountRecipes::open(&dest);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    let idle = args.mount_idle_timeout;
    if !(idle.is_finite() && idle >= 0.0) {
        anyhow::bail!("--mount-idle-timeout must be 0 (never) or a number of seconds, not {idle}");
    }
    let mount_cfg = MountServerConfig {
        recipes: Some(Arc::new(recipes)),
        idle_timeout: (idle > 0.0).then(|| std::time::Duration::from_secs_f64(idle)),
        ..MountServerConfig::default()
    };
    let last_status = Mutex::new(exit::OK);
    let set = |code: i32| {
        if let Ok(mut s) = last_status.lock() {
            *s = code;
        }
    };
    let on_event = |ev: ServerEvent<'_, FilesSessionOutcome>| match ev {
        ServerEvent::Finished {
            peer,
            client,
            traffic,
            outcome: FilesSessionOutcome::Served(m),
        } => {
            served(peer, client, &traffic, m, json);
            set(exit::OK);
        }
        ServerEvent::Finished {
            peer,
            client,
            traffic,
            outcome: FilesSessionOutcome::Received(outcome),
        } => {
            for e in places.save_manifests() {
                tracing::warn!("destination manifest not saved: {e}");
            }
            set(received(peer, client, &traffic, outcome, json));
        }
        ref other => {
            if let Some(code) = report_common(other, json, &cfg, "files") {
                set(code);
            }
        }
    };
    let place = |client: &Client| {
        let found = places.of(client);
        for w in places.take_warnings() {
            tracing::warn!("{w}");
        }
        found
    };
    let (ok, failed) = serve_files(&listener, &place, &cfg, &files_cfg, &mount_cfg, &on_event);
    finished(&cfg, ok, failed);
    let last = last_status.lock().map(|g| *g).unwrap_or(exit::FAILURE);
    Ok(if args.once { last } else { exit::OK })
}

/// Reports a files session that received files; returns its exit status.
fn received(
    peer: &str,
    client: &Client,
    traffic: &Traffic,
    outcome: &FilesReceiverOutcome,
    json: bool,
) -> i32 {
    let r = &outcome.report;
    let did = log::Did {
        service: "files",
        files: Some(log::FilesDid {
            written: r.files_written,
            unchanged: r.files_unchanged,
            failed: r.files_failed,
            deleted: r.files_deleted,
        }),
        effective_bytes: r.effective_bytes,
        wire_bytes: r.wire_bytes,
        ..log::Did::default()
    };
    log::session_end(client, traffic, &did);
    if json {
        let mut v = packetfs::report::files_report_json(r);
        v["event"] = "files_report".into();
        v["peer"] = peer.to_string().into();
        v["dry_run"] = outcome.dry_run.into();
        v["remote_dir"] = outcome.remote_dir.clone().into();
        v["messages"] = outcome.messages.clone().into();
        emit(&v.to_string());
    } else if outcome.dry_run {
        emit(&format!(
            "session from {peer}: dry run (index sent, nothing written)"
        ));
    } else {
        emit(&format!(
            "session from {peer} complete: {} written, {} unchanged, {} same content (metadata only), {} failed, {} deleted; \
             {:.1} MB effective, {:.3} MB wire, {:.1} MB matched (held), {:.1} MB literal, {} chunks repaired; {:.2} s",
            r.files_written,
            r.files_unchanged,
            r.files_metadata_only,
            r.files_failed,
            r.files_deleted,
            r.effective_bytes as f64 / 1e6,
            r.wire_bytes as f64 / 1e6,
            r.matched_bytes as f64 / 1e6,
            r.literal_bytes as f64 / 1e6,
            r.nak_chunks,
            r.elapsed_ns as f64 / 1e9,
        ));
        for line in outcome.messages.lines() {
            tracing::warn!(peer = %peer, "not written: {line}");
        }
    }
    if r.files_failed > 0 {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

/// Reports a mount session: what its client was listed, asked and sent.
fn served(peer: &str, client: &Client, traffic: &Traffic, m: &MountServerOutcome, json: bool) {
    for w in &m.warnings {
        tracing::warn!(peer = %peer, "{w}");
    }
    // Wire bytes are what the connection carried: a mount has no report.
    let did = log::Did {
        service: "mount",
        effective_bytes: m.bytes,
        wire_bytes: traffic.bytes_in + traffic.bytes_out,
        ..log::Did::default()
    };
    log::session_end(client, traffic, &did);
    let dir = if m.dir.is_empty() { "." } else { m.dir.as_str() };
    if json {
        emit(
            &serde_json::json!({ "event": "mount_report", "peer": peer, "key": client.fingerprint(),
            "dir": m.dir, "session_nonce": m.session_nonce, "entries": m.entries, "skipped": m.skipped,
            "recipes": m.recipes, "recipes_cached": m.recipes_cached, "recipes_gone": m.recipes_gone,
            "fetches": m.fetches, "chunks": m.chunks, "bytes": m.bytes, "gone": m.gone,
            "bytes_cut": m.bytes_cut, "bytes_in": traffic.bytes_in, "bytes_out": traffic.bytes_out,
            "elapsed_s": traffic.elapsed.as_secs_f64() })
            .to_string(),
        );
    } else {
        emit(&format!(
            "mount from {peer} (key {}) of {dir} ended: {} entries listed ({} skipped), {} recipes ({} cached, {} gone), \
             {} chunks / {:.1} MB served in {} fetches, {} gone; {:.1} MB read to cut; {:.2} s",
            client.fingerprint(),
            m.entries,
            m.skipped,
            m.recipes,
            m.recipes_cached,
            m.recipes_gone,
            m.chunks,
            m.bytes as f64 / 1e6,
            m.fetches,
            m.gone,
            m.bytes_cut as f64 / 1e6,
            traffic.elapsed.as_secs_f64(),
        ));
    }
}
