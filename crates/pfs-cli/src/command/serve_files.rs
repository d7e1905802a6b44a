//! `pfs serve --dest DIR [--store DIR]`: receive files into the destination
//! root, deduplicated against the files it holds (or a content store); one
//! report per session.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use pfs_files::{DestRoot, Manifest};
use pfs_session::files::{FilesReceiverConfig, FilesReceiverOutcome, SharedChunkIndex};
use pfs_session::{serve_files, Client, FilesPlace, FilesPlaces, Keeping, ServerEvent};
use pfs_store::{Durability, Store, StoreConfig};

use crate::args::ServeArgs;
use crate::exit;

use super::log;
use super::serve::{emit, finished, listen, report_common, server_config};

pub fn run(args: &ServeArgs) -> anyhow::Result<i32> {
    let dest_dir = args.dest.as_deref().context("files need --dest")?;
    std::fs::create_dir_all(dest_dir).with_context(|| format!("--dest {}", dest_dir.display()))?;
    let cfg = server_config(args)?;
    let dest = Arc::new(DestRoot::open(dest_dir)?);
    let stale = dest.remove_stale_temps()?;
    if stale > 0 {
        tracing::info!("removed {stale} temporary file(s) left by an interrupted transfer");
    }
    let json = args.run.json;
    let (keeping, shared, mut info) = match &args.store {
        None => {
            let (place, notes) = FilesPlaces::open_dest(dest.clone(), true).map_err(anyhow::Error::msg)?;
            notes.iter().for_each(|n| tracing::warn!("{n}"));
            let SharedChunkIndex::Dest(ix, _) = &place.chunks else {
                unreachable!("open_dest")
            };
            let (id, st) = (ix.identity(), ix.stats());
            let info = serde_json::json!({ "event": "index", "dir": dest_dir.display().to_string(),
                "id": hex(&id.0), "generation": id.1, "files": st.files, "chunks": st.chunks, "bytes": st.bytes });
            (Keeping::Dest { durable: true }, place, info)
        }
        Some(store_dir) => {
            std::fs::create_dir_all(store_dir).with_context(|| format!("--store {}", store_dir.display()))?;
            let config = StoreConfig {
                capacity: args.store_capacity,
                huge_dir: args.blob.huge_dir.clone(),
                // Chunk bytes reach the disk before the index names them, always:
                // the index must never point at bytes that are not there.
                durability: Durability::Fsync,
            };
            let store = Store::open(store_dir, &config)?;
            for note in &store.recovery().notes {
                tracing::warn!("store recovery: {note}");
            }
            let st = store.stats();
            let info = serde_json::json!({ "event": "store", "dir": store_dir.display().to_string(),
                "id": store.identity().id_hex(), "generation": st.generation, "chunks": st.chunks,
                "used": st.used, "capacity": st.capacity, "backing": st.backing.description });
            // What this server wrote into --dest, kept beside the store.
            let (manifest, warning) = Manifest::open(store_dir.join("dest-manifest"));
            if let Some(w) = warning {
                tracing::warn!("{w}");
            }
            let shared = FilesPlace {
                chunks: SharedChunkIndex::Store(Arc::new(store)),
                dest: dest.clone(),
                manifest: Some(Arc::new(manifest)),
            };
            (
                Keeping::Store {
                    dir: store_dir.clone(),
                    config,
                },
                shared,
                info,
            )
        }
    };
    if json {
        emit(&info.to_string());
    } else {
        info["dest"] = dest_dir.display().to_string().into();
        tracing::info!("{}", start_line(&info));
    }
    let listener = listen(args, &cfg)?;
    let places = FilesPlaces::new(keeping, shared);
    let files_cfg = FilesReceiverConfig {
        fsync_files: args.fsync,
        ..FilesReceiverConfig::default()
    };
    let last_status = Mutex::new(exit::OK);
    let set = |code: i32| {
        if let Ok(mut s) = last_status.lock() {
            *s = code;
        }
    };
    let on_event = |ev: ServerEvent<'_, FilesReceiverOutcome>| match ev {
        ServerEvent::Finished {
            peer,
            client,
            traffic,
            outcome,
        } => {
            for e in places.save_manifests() {
                tracing::warn!("destination manifest not saved: {e}");
            }
            let r = &outcome.report;
            let did = log::Did {
                service: "files",
                files: Some((r.files_written, r.files_unchanged, r.files_failed)),
                effective_bytes: r.effective_bytes,
                wire_bytes: r.wire_bytes,
                ..log::Did::default()
            };
            log::session_end(client, &traffic, &did);
            set(if r.files_failed > 0 {
                exit::PARTIAL
            } else {
                exit::OK
            });
            if json {
                let mut v = super::send_files::report_json(r);
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
                    "session from {peer} complete: {} written, {} unchanged, {} same content (metadata only), {} failed; \
                     {:.1} MB effective, {:.3} MB wire, {:.1} MB matched (held), {:.1} MB literal, {} chunks repaired; {:.2} s",
                    r.files_written,
                    r.files_unchanged,
                    r.files_metadata_only,
                    r.files_failed,
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
    let (ok, failed) = serve_files(&listener, &place, &cfg, &files_cfg, &on_event);
    finished(&cfg, ok, failed);
    let last = last_status.lock().map(|g| *g).unwrap_or(exit::FAILURE);
    Ok(if args.once { last } else { exit::OK })
}

/// The start line: where chunks are kept and how many.
fn start_line(v: &serde_json::Value) -> String {
    let mb = |k: &str| v[k].as_u64().unwrap_or(0) as f64 / 1e6;
    if v["event"] == "index" {
        format!(
            "destination {} (one copy: chunk index {}/.pfs/index, id {}, generation {}, {} files, {} chunks, {:.1} MB)",
            v["dest"].as_str().unwrap_or(""), v["dir"].as_str().unwrap_or(""), v["id"].as_str().unwrap_or(""),
            v["generation"], v["files"], v["chunks"], mb("bytes"))
    } else {
        format!(
            "store {} (id {}, generation {}, {} chunks, {:.1} of {:.1} MB used, {}); destination {}",
            v["dir"].as_str().unwrap_or(""),
            v["id"].as_str().unwrap_or(""),
            v["generation"],
            v["chunks"],
            mb("used"),
            mb("capacity"),
            v["backing"].as_str().unwrap_or(""),
            v["dest"].as_str().unwrap_or("")
        )
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
