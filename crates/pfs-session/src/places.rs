//! Where each client of a files server lands: its group's store (plain
//! clients and open servers share the store at the root of `--store`;
//! every `group=` has its own under `groups/`, so a key can only reference,
//! and only sees the index of, chunks its group stored) and its `dir=`
//! destination beneath `--dest` (opened without following symlinks), each
//! opened on first use and shared by later sessions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pfs_files::{DestRoot, Manifest};
use pfs_store::{Store, StoreConfig};

use crate::server::{Client, FilesPlace};

/// Stores and destinations per client of a files server, opened on first use and shared by
/// every session of the same group (stores) or `dir=` (destinations).
#[derive(Debug)]
pub struct FilesPlaces {
    store_dir: PathBuf,
    opts: StoreConfig,
    dest: Arc<DestRoot>,
    shared: FilesPlace,
    stores: Mutex<HashMap<String, Arc<Store>>>,
    dests: Mutex<HashMap<PathBuf, DestPlace>>,
    warnings: Mutex<Vec<String>>,
}

/// A `dir=` destination and the record of what it holds.
type DestPlace = (Arc<DestRoot>, Arc<Manifest>);

impl FilesPlaces {
    /// Places under `store_dir` (group stores in `groups/`, manifests of
    /// `dir=` destinations beside the store), `shared` the place of plain
    /// clients and of keys in the unnamed group without a `dir=`.
    pub fn new(store_dir: &Path, opts: StoreConfig, shared: FilesPlace) -> Self {
        Self {
            store_dir: store_dir.to_path_buf(),
            opts,
            dest: shared.dest.clone(),
            shared,
            stores: Mutex::new(HashMap::new()),
            dests: Mutex::new(HashMap::new()),
            warnings: Mutex::new(Vec::new()),
        }
    }

    /// Warnings from opening places (a damaged manifest started afresh),
    /// each returned once.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }
    /// The place of `client`: plain clients and keys of the unnamed group
    /// share the store at the root of --store; every other group has its
    /// own under `groups/`, so a key can only reference (and only sees
    /// the index of) chunks its group stored.
    pub fn of(&self, client: &Client) -> Result<FilesPlace, String> {
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
                        self.warnings
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(w.to_string());
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

    pub fn save_manifests(&self) -> Vec<String> {
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
