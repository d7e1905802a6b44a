//! Where each client of a files server lands: its `dir=` destination
//! beneath `--dest` (opened without following symlinks) and its group's
//! chunk index, each opened on first use and shared by later sessions.
//!
//! A key can only reference, and only sees the index of, chunks its group
//! holds: plain clients and open servers share the unnamed group; every
//! `group=` (by default one per key) has its own index.
//!
//! - **Without a store** (`pfs serve --dest DIR`): the chunks are the
//!   destination's own files. The unnamed group's index is
//!   `DEST/.pfs/index`, a named group's `DEST/.pfs/groups/NAME/index`, each
//!   covering the files its group's sessions wrote anywhere beneath `DEST`
//!   (its `dir=` destinations included). Each `dir=` destination has its
//!   own `.pfs` at its root for its temporary files and manifest.
//!
//! Every destination's `.pfs` is checked when its place is first opened,
//! and what stands in the way of the receiver's state (a symlink, a file)
//! is moved aside and logged ([`DestRoot::repair_state_dir`]): a damaged
//! state directory costs a warning, never the key's service.
//! - **With a store** (`--store DIR`): the unnamed group's store is at the
//!   root of `--store`, a named group's under `groups/`; manifests are kept
//!   beside the store (`dest-manifest`, `dest-manifest-<tag>` per `dir=`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pfs_files::{DestIndex, DestRoot, Manifest};
use pfs_store::{Store, StoreConfig};

use crate::files::receiver::SharedChunkIndex;
use crate::server::{Client, FilesPlace};

/// Why a client's place (or the server's shared place) could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A destination's state directory could not be repaired or opened
    /// (`dir`: the `dir=` destination it is, if one).
    #[error("{}{source}", dir_prefix(.dir))]
    State {
        /// The `dir=` destination, if one.
        dir: Option<PathBuf>,
        /// Why.
        source: pfs_files::FilesError,
    },
    /// The shared destination index could not be opened.
    #[error("destination index: {0}")]
    DestIndex(pfs_files::FilesError),
    /// A group's destination index could not be opened.
    #[error("destination index for group {group}: {source}")]
    GroupIndex {
        /// The group.
        group: String,
        /// Why.
        source: pfs_files::FilesError,
    },
    /// The `--store` directory could not be created.
    #[error("--store {}: {source}", pfs_files::escape_path(.dir))]
    StoreDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The shared store could not be opened.
    #[error(transparent)]
    Store(pfs_store::StoreError),
    /// A group's store directory could not be created.
    #[error("store for group {group}: {source}")]
    GroupStoreDir {
        /// The group.
        group: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A group's store could not be opened.
    #[error("store for group {group}: {source}")]
    GroupStore {
        /// The group.
        group: String,
        /// Why.
        source: pfs_store::StoreError,
    },
    /// A key's `dir=` is not a path beneath `--dest`.
    #[error("dir={}: {source}", pfs_files::escape_path(.dir))]
    DirPath {
        /// The `dir=`.
        dir: PathBuf,
        /// Why.
        source: pfs_files::PathError,
    },
    /// A key's `dir=` destination could not be opened.
    #[error("dir={}: {source}", pfs_files::escape_path(.dir))]
    Dir {
        /// The `dir=`.
        dir: PathBuf,
        /// Why.
        source: pfs_files::FilesError,
    },
}

/// `dir=D: ` before a `dir=` destination's state error, nothing for `--dest`'s.
fn dir_prefix(dir: &Option<PathBuf>) -> String {
    dir.as_ref()
        .map_or(String::new(), |d| format!("dir={}: ", pfs_files::escape_path(d)))
}

/// Where a files server keeps the chunks it holds.
#[derive(Debug, Clone)]
pub enum Keeping {
    /// In the destinations' own files; `durable` commits indexes with `fdatasync`.
    Dest {
        /// `fdatasync` each index commit.
        durable: bool,
    },
    /// In content stores under `dir`.
    Store {
        /// The `--store` directory.
        dir: PathBuf,
        /// How group stores are opened.
        config: StoreConfig,
    },
}

/// Indexes and destinations per client of a files server, opened on first
/// use and shared by every session of the same group (indexes) or `dir=`
/// (destinations).
#[derive(Debug)]
pub struct FilesPlaces {
    keeping: Keeping,
    shared: FilesPlace,
    /// Chunk indexes (stores, or dest indexes over all of `--dest`) by group.
    indexes: Mutex<HashMap<String, SharedChunkIndex>>,
    dests: Mutex<HashMap<PathBuf, DestPlace>>,
    warnings: Mutex<Vec<String>>,
}

/// A `dir=` destination and the record of what it holds.
type DestPlace = (Arc<DestRoot>, Arc<Manifest>);

impl FilesPlaces {
    /// Places kept as `keeping`; `shared` is the place of plain clients and
    /// of keys in the unnamed group without a `dir=`.
    pub fn new(keeping: Keeping, shared: FilesPlace) -> Self {
        Self {
            keeping,
            shared,
            indexes: Mutex::new(HashMap::new()),
            dests: Mutex::new(HashMap::new()),
            warnings: Mutex::new(Vec::new()),
        }
    }

    /// The shared place of a server keeping chunks in `dest` itself: its
    /// index and manifest under `dest`'s `.pfs`. Returns notes on what
    /// opening them recovered from, for the log.
    pub fn open_dest(dest: Arc<DestRoot>, durable: bool) -> Result<(FilesPlace, Vec<String>), PlaceError> {
        let mut notes = repair(&dest, None)?;
        let (index, index_notes) = DestIndex::open(dest.clone(), durable).map_err(PlaceError::DestIndex)?;
        notes.extend(index_notes);
        let (manifest, warning) = dest_manifest(&dest)?;
        notes.extend(warning);
        Ok((
            FilesPlace {
                chunks: SharedChunkIndex::Dest(Arc::new(index), None),
                dest,
                manifest: Some(Arc::new(manifest)),
            },
            notes,
        ))
    }

    /// The shared place of a server keeping a content store in `dir`
    /// besides `dest` (manifest beside the store). Returns notes on what
    /// opening the store recovered from.
    pub fn open_store(
        dest: Arc<DestRoot>,
        dir: &Path,
        config: &StoreConfig,
    ) -> Result<(FilesPlace, Vec<String>), PlaceError> {
        let mut notes = repair(&dest, None)?;
        std::fs::create_dir_all(dir).map_err(|source| PlaceError::StoreDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let store = Store::open(dir, config).map_err(PlaceError::Store)?;
        notes.extend(
            store
                .recovery()
                .notes
                .iter()
                .map(|n| format!("store recovery: {n}")),
        );
        let (manifest, warning) = Manifest::open(dir.join("dest-manifest"));
        notes.extend(warning.map(|w| w.to_string()));
        Ok((
            FilesPlace {
                chunks: SharedChunkIndex::Store(Arc::new(store)),
                dest,
                manifest: Some(Arc::new(manifest)),
            },
            notes,
        ))
    }

    /// Warnings from opening places (a damaged manifest started afresh,
    /// an index recovered), each returned once.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn warn(&self, w: impl IntoIterator<Item = String>) {
        self.warnings.lock().unwrap_or_else(|p| p.into_inner()).extend(w);
    }

    /// The place of `client` (see the module docs).
    pub fn of(&self, client: &Client) -> Result<FilesPlace, PlaceError> {
        let r = &client.rights;
        if r.group.is_empty() && r.dir.as_os_str().is_empty() {
            return Ok(self.shared.clone());
        }
        let chunks = self.index(&r.dir, &r.group)?;
        let (dest, manifest) = if r.dir.as_os_str().is_empty() {
            (self.shared.dest.clone(), self.shared.manifest.clone())
        } else {
            let (d, m) = self.dir_place(&r.dir, &chunks)?;
            (d, Some(m))
        };
        Ok(FilesPlace {
            chunks,
            dest,
            manifest,
        })
    }

    /// The `dir=` destination `dir` and its manifest; opened the first
    /// time, its `.pfs/tmp` is cleaned (but for partial files `chunks` names).
    fn dir_place(&self, dir: &Path, chunks: &SharedChunkIndex) -> Result<DestPlace, PlaceError> {
        let mut dests = self.dests.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = dests.get(dir) {
            return Ok(p.clone());
        }
        let rel = pfs_files::RelPath::parse(dir.as_os_str().as_encoded_bytes()).map_err(|source| {
            PlaceError::DirPath {
                dir: dir.to_path_buf(),
                source,
            }
        })?;
        let d = Arc::new(self.shared.dest.subroot(&rel).map_err(|source| PlaceError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?);
        // Before anything uses its state: a key whose `dir=` held this one
        // could once plant things there (issue 26).
        let repaired = repair(&d, Some(dir))?;
        self.warn(repaired);
        let (m, warning) = match &self.keeping {
            Keeping::Dest { .. } => dest_manifest(&d)?,
            Keeping::Store { dir: store_dir, .. } => {
                // One manifest per destination directory, named by its path.
                let tag = blake3::hash(dir.as_os_str().as_encoded_bytes()).to_hex();
                let (m, w) = Manifest::open(store_dir.join(format!("dest-manifest-{}", &tag[..16])));
                (m, w.map(|w| w.to_string()))
            }
        };
        self.warn(warning);
        match clean_temps(&d, chunks) {
            Ok(0) => {}
            Ok(n) => self.warn([format!(
                "dir={}: removed {n} temporary file(s) left by an interrupted transfer",
                dir.display()
            )]),
            Err(e) => self.warn([format!("dir={}: {e}", dir.display())]),
        }
        let place = (d, Arc::new(m));
        dests.insert(dir.to_path_buf(), place.clone());
        Ok(place)
    }

    /// The chunk index of `group`, for a session writing beneath `dir`
    /// (empty: the root of `--dest`). Without a store, a group's index
    /// covers the whole `--dest` and lives in its `.pfs`, so keys of one
    /// group share chunks across their `dir=` destinations.
    fn index(&self, dir: &Path, group: &str) -> Result<SharedChunkIndex, PlaceError> {
        let within = if dir.as_os_str().is_empty() {
            None
        } else {
            Some(
                pfs_files::RelPath::parse(dir.as_os_str().as_encoded_bytes()).map_err(|source| {
                    PlaceError::DirPath {
                        dir: dir.to_path_buf(),
                        source,
                    }
                })?,
            )
        };
        let mut indexes = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        let index = match indexes.get(group) {
            Some(i) => i.clone(),
            None => {
                let index = match &self.keeping {
                    _ if group.is_empty() => self.shared.chunks.clone(),
                    Keeping::Store { dir, config } => {
                        let dir = dir.join("groups").join(group);
                        std::fs::create_dir_all(&dir).map_err(|source| PlaceError::GroupStoreDir {
                            group: group.to_string(),
                            source,
                        })?;
                        let s = Store::open(&dir, config).map_err(|source| PlaceError::GroupStore {
                            group: group.to_string(),
                            source,
                        })?;
                        SharedChunkIndex::Store(Arc::new(s))
                    }
                    Keeping::Dest { durable } => {
                        let (ix, notes) = DestIndex::open_group(self.shared.dest.clone(), group, *durable)
                            .map_err(|source| PlaceError::GroupIndex {
                                group: group.to_string(),
                                source,
                            })?;
                        self.warn(notes);
                        SharedChunkIndex::Dest(Arc::new(ix), None)
                    }
                };
                indexes.insert(group.to_string(), index.clone());
                index
            }
        };
        Ok(match index {
            SharedChunkIndex::Dest(ix, _) => SharedChunkIndex::Dest(ix, within),
            store => store,
        })
    }

    /// Saves every manifest; returns the errors.
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

/// Repairs `dest`'s state directory ([`DestRoot::repair_state_dir`]);
/// what was repaired, for the log (`dir`: the `dir=` it is, if one).
fn repair(dest: &DestRoot, dir: Option<&Path>) -> Result<Vec<String>, PlaceError> {
    let shown = || dir.map_or(String::new(), |d| format!("dir={}: ", pfs_files::escape_path(d)));
    Ok(dest
        .repair_state_dir()
        .map_err(|source| PlaceError::State {
            dir: dir.map(Path::to_path_buf),
            source,
        })?
        .into_iter()
        .map(|r| format!("{}{r}", shown()))
        .collect())
}

/// The manifest of a destination kept in its `.pfs`.
fn dest_manifest(dest: &DestRoot) -> Result<(Manifest, Option<String>), PlaceError> {
    dest.state_dir()
        .map_err(|source| PlaceError::State { dir: None, source })?;
    let (m, w) = Manifest::open(dest.path().join(pfs_files::dest::STATE_DIR).join("manifest"));
    Ok((m, w.map(|w| w.to_string())))
}

/// Removes what interrupted transfers left in `dest`'s `.pfs/tmp`, but for
/// the partial files `chunks` (a dest index) still names; returns how many
/// files were removed. Call before any session writes into `dest`.
pub fn clean_temps(dest: &DestRoot, chunks: &SharedChunkIndex) -> Result<usize, pfs_files::FilesError> {
    let SharedChunkIndex::Dest(index, _) = chunks else {
        return dest.remove_stale_temps();
    };
    // Partial files are named from the index's root: keep those in `dest`'s own `.pfs/tmp`.
    let mine = match dest.path().strip_prefix(index.root().path()) {
        Ok(p) if p.as_os_str().is_empty() => pfs_files::dest::TEMP_DIR.to_string(),
        Ok(p) => format!("{}/{}", p.display(), pfs_files::dest::TEMP_DIR),
        Err(_) => return dest.remove_stale_temps(),
    };
    let temps = index.part_temps();
    let keep: Vec<&[u8]> = temps
        .iter()
        .filter(|t| t.parent().is_some_and(|p| p.as_bytes() == mine.as_bytes()))
        .map(|t| t.file_name())
        .collect();
    dest.remove_stale_temps_except(&keep)
}
