//! `pfs serve --store DIR --dest DIR`: receive files into the destination
//! root, deduplicated against a persistent store; one report per session.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use pfs_files::{DestRoot, Manifest};
use pfs_session::files::{FilesReceiverConfig, FilesReceiverOutcome};
use pfs_session::{serve_files, Client, FilesPlace, ServerEvent};
use pfs_store::{Durability, Store, StoreConfig};

use crate::args::ServeArgs;
use crate::exit;

use super::log;
use super::serve::{emit, finished, listen, report_common, server_config};

/// Stores and destinations per client, opened on first use and shared by
/// every session of the same group (stores) or `dir=` (destinations).
struct Places {
    store_dir: PathBuf,
    opts: StoreConfig,
    dest: Arc<DestRoot>,
    shared: FilesPlace,
    stores: Mutex<HashMap<String, Arc<Store>>>,
    dests: Mutex<HashMap<PathBuf, DestPlace>>,
}

/// A `dir=` destination and the record of what it holds.
type DestPlace = (Arc<DestRoot>, Arc<Manifest>);

impl Places {
    /// The place of `client`: plain clients and keys of the unnamed group
    /// share the store at the root of --store; every other group has its
    /// own under `groups/`, so a key can only reference (and only sees
    /// the index of) chunks its group stored.
    fn of(&self, client: &Client) -> Result<FilesPlace, String> {
        let r = &client.rights;
        if r.group.is_empty() && r.dir.as_os_str().is_empty() {
            return Ok(self.shared.clone());
        }
        let store = if r.group.is_empty() {
            self.shared.store.clone()
        } else {
            let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
            match stores.get(&r.group) {
                Some(s) => s.clone(),
                None => {
                    let dir = self.store_dir.join("groups").join(&r.group);
                    std::fs::create_dir_all(&dir).map_err(|e| format!("store for group {}: {e}", r.group))?;
                    let s = Arc::new(
                        Store::open(&dir, &self.opts)
                            .map_err(|e| format!("store for group {}: {e}", r.group))?,
                    );
                    stores.insert(r.group.clone(), s.clone());
                    s
                }
            }
        };
        let (dest, manifest) = if r.dir.as_os_str().is_empty() {
            (self.shared.dest.clone(), self.shared.manifest.clone())
        } else {
            let mut dests = self.dests.lock().unwrap_or_else(|p| p.into_inner());
            match dests.get(&r.dir) {
                Some((d, m)) => (d.clone(), Some(m.clone())),
                None => {
                    let rel = pfs_files::RelPath::parse(r.dir.as_os_str().as_encoded_bytes())
                        .map_err(|e| format!("dir={}: {e}", r.dir.display()))?;
                    let d = Arc::new(
                        self.dest
                            .subroot(&rel)
                            .map_err(|e| format!("dir={}: {e}", r.dir.display()))?,
                    );
                    // One manifest per destination directory, named by its path.
                    let tag = blake3::hash(r.dir.as_os_str().as_encoded_bytes()).to_hex();
                    let (m, warning) =
                        Manifest::open(self.store_dir.join(format!("dest-manifest-{}", &tag[..16])));
                    if let Some(w) = warning {
                        tracing::warn!("{w}");
                    }
                    let m = Arc::new(m);
                    dests.insert(r.dir.clone(), (d.clone(), m.clone()));
                    (d, Some(m))
                }
            }
        };
        Ok(FilesPlace {
            store,
            dest,
            manifest,
        })
    }

    fn save_manifests(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut all: Vec<Arc<Manifest>> = self.shared.manifest.iter().cloned().collect();
        all.extend(
            self.dests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .map(|(_, m)| m.clone()),
        );
        for m in all {
            if let Err(e) = m.save() {
                errors.push(e.to_string());
            }
        }
        errors
    }
}

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
    let cfg = server_config(args)?;
    for note in &store.recovery().notes {
        tracing::warn!("store recovery: {note}");
    }
    let dest = DestRoot::open(dest_dir)?;
    let stale = dest.remove_stale_temps()?;
    if stale > 0 {
        tracing::info!("removed {stale} temporary file(s) left by an interrupted transfer");
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
        tracing::info!(
            "store {} (id {}, generation {}, {} chunks, {:.1} of {:.1} MB used, {}); destination {}",
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
    let listener = listen(args, &cfg)?;
    // What this server wrote into --dest, kept beside the store.
    let (manifest, warning) = Manifest::open(store_dir.join("dest-manifest"));
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    let manifest = Arc::new(manifest);
    let dest = Arc::new(dest);
    let places = Places {
        store_dir: store_dir.to_path_buf(),
        opts: opts.clone(),
        dest: dest.clone(),
        shared: FilesPlace {
            store: Arc::new(store),
            dest,
            manifest: Some(manifest),
        },
        stores: Mutex::new(HashMap::new()),
        dests: Mutex::new(HashMap::new()),
    };
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
    let place = |client: &Client| places.of(client);
    let (ok, failed) = serve_files(&listener, &place, &cfg, &files_cfg, &on_event);
    finished(&cfg, ok, failed);
    let last = last_status.lock().map(|g| *g).unwrap_or(exit::FAILURE);
    Ok(if args.once { last } else { exit::OK })
}
