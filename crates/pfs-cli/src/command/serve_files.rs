//! `pfs serve --store DIR --dest DIR`: receive files into the destination
//! root, deduplicated against a persistent store; one report per session.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use pfs_files::{DestRoot, Manifest};
use pfs_session::files::{FilesReceiverConfig, FilesReceiverOutcome};
use pfs_session::{serve_files, ServerConfig, ServerEvent};
use pfs_store::{Durability, Store, StoreConfig};

use crate::args::ServeArgs;
use crate::exit;

use super::serve::{announce, bind_listener, emit, report_common};

pub fn run(args: &ServeArgs, store_dir: &Path) -> anyhow::Result<i32> {
    let dest_dir = args.dest.as_deref().context("--store needs --dest")?;
    std::fs::create_dir_all(store_dir).with_context(|| format!("--store {}", store_dir.display()))?;
    std::fs::create_dir_all(dest_dir).with_context(|| format!("--dest {}", dest_dir.display()))?;
    let opts = StoreConfig {
        capacity: args.store_capacity,
        huge_dir: args.blob.huge_dir.clone(),
        // Chunk bytes reach the disk before the index names them, always:
        // the index must never point at bytes that are not there.
        durability: Durability::Fsync,
    };
    let store = Store::open(store_dir, &opts)?;
    for note in &store.recovery().notes {
        eprintln!("pfs: store recovery: {note}");
    }
    let dest = DestRoot::open(dest_dir)?;
    let stale = dest.remove_stale_temps()?;
    if stale > 0 {
        eprintln!("pfs: removed {stale} temporary file(s) left by an interrupted transfer");
    }
    let st = store.stats();
    let json = args.run.json;
    if json {
        emit(
            &serde_json::json!({
                "event": "store",
                "dir": store_dir.display().to_string(),
                "id": store.identity().id_hex(),
                "generation": st.generation,
                "chunks": st.chunks,
                "used": st.used,
                "capacity": st.capacity,
                "backing": st.backing.description,
            })
            .to_string(),
        );
    } else {
        eprintln!(
            "pfs serve: store {} (id {}, generation {}, {} chunks, {:.1} of {:.1} MB used, {}); destination {}",
            store_dir.display(),
            store.identity().id_hex(),
            st.generation,
            st.chunks,
            st.used as f64 / 1e6,
            st.capacity as f64 / 1e6,
            st.backing.description,
            dest_dir.display()
        );
    }
    let listener = bind_listener(args)?;
    announce(&listener, json);
    let cfg = ServerConfig {
        max_clients: args.max_clients.max(1),
        max_sessions: if args.once { Some(1) } else { args.max_sessions },
        pin_cpu: args.run.pin,
    };
    // What this server wrote into --dest, kept beside the store.
    let (manifest, warning) = Manifest::open(store_dir.join("dest-manifest"));
    if let Some(w) = warning {
        eprintln!("pfs: warning: {w}");
    }
    let manifest = Arc::new(manifest);
    let files_cfg = FilesReceiverConfig {
        fsync_files: args.fsync,
        manifest: Some(manifest.clone()),
        ..FilesReceiverConfig::default()
    };
    let last_status = Mutex::new(exit::OK);
    let set = |code: i32| {
        if let Ok(mut s) = last_status.lock() {
            *s = code;
        }
    };
    let on_event = |ev: ServerEvent<'_, FilesReceiverOutcome>| match ev {
        ServerEvent::Accepted { peer } if !json => eprintln!("session from {peer}"),
        ServerEvent::Finished { peer, outcome } => {
            if let Err(e) = manifest.save() {
                eprintln!("pfs: warning: destination manifest not saved: {e}");
            }
            let r = &outcome.report;
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
                     {:.1} MB effective, {:.3} MB wire, {:.1} MB matched in the store, {:.1} MB literal, {} chunks repaired; {:.2} s",
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
                    eprintln!("pfs: from {peer}: not written: {line}");
                }
            }
        }
        ref other => {
            if let Some(code) = report_common(other, json, args.max_clients) {
                set(code);
            }
        }
    };
    let (ok, failed) = serve_files(&listener, &store, &dest, &cfg, &files_cfg, &on_event);
    if !json {
        eprintln!("pfs serve: {ok} session(s) completed, {failed} failed");
    }
    let last = last_status.lock().map(|g| *g).unwrap_or(exit::FAILURE);
    Ok(if args.once { last } else { exit::OK })
}
