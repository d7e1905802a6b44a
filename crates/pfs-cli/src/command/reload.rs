//! SIGHUP on `pfs serve`: reload `authorized_keys` without a restart.
//!
//! The file is read again (with `--config`, the config file is read again
//! first, and its `authorized_keys` path is the one read); a set that
//! parses replaces the one new admissions use ([`KeyRing::replace`]).
//! Sessions in flight keep the rights they were admitted with; a key
//! removed is refused from its next connection on. A file that does not
//! parse, or lists nobody, keeps the old set and logs an error.
//!
//! Only `authorized_keys` is reloadable. Any other setting that changed in
//! the config file is named in a warning and applies at the next start
//! (the listener, the blob, the store and the limits are built once).

use std::ffi::OsString;
use std::path::PathBuf;

use pfs_session::KeyRing;
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

use crate::args::ServeArgs;

/// Why a reload kept the old set.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The config file no longer parses.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The config file no longer names an `authorized_keys` file.
    #[error("--config {0}: authorized_keys is gone; a server started with keys keeps requiring them (restart to serve without)")]
    KeysGone(PathBuf),
    /// The keys file cannot be read or does not parse.
    #[error(transparent)]
    Keys(#[from] pfs_auth::AuthError),
    /// The keys file lists nobody.
    #[error("{}: no keys listed, nobody could connect", .0.display())]
    Empty(PathBuf),
    /// The signal handler could not be installed.
    #[error("installing the SIGHUP handler")]
    Signals(#[source] std::io::Error),
    /// The thread that waits for SIGHUP could not be started.
    #[error("starting the SIGHUP thread")]
    Thread(#[source] std::io::Error),
}

/// What a SIGHUP re-reads, and the set it replaces.
struct Reload {
    /// The set admissions use; `None`: the server runs without keys.
    ring: Option<KeyRing>,
    /// The keys file in use.
    keys: Option<PathBuf>,
    /// `--config FILE` and the arguments after `serve`, to parse again.
    config: Option<(PathBuf, Vec<OsString>)>,
    /// The config file's settings as last read, to name what a changed
    /// file would change only at the next start.
    started: toml::Table,
    json: bool,
}

/// The keys whose values differ between two readings of a config file,
/// `authorized_keys` (reloadable) left out.
fn changed(before: &toml::Table, after: &toml::Table) -> Vec<String> {
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| *k != "authorized_keys" && before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

impl Reload {
    /// Reads the keys (and config) again; on success the new set is in use.
    fn reload(&mut self) -> Result<Option<usize>, ReloadError> {
        let mut keys_path = self.keys.clone();
        if let Some((file, cli)) = &self.config {
            let args = crate::config::serve_args(file, cli)?;
            let now = crate::config::file_settings(file)?;
            let changed = changed(&self.started, &now);
            if !changed.is_empty() {
                tracing::warn!(
                    "--config {}: {} changed; only authorized_keys is reloaded, the rest applies at the next start",
                    file.display(),
                    changed.join(", ")
                );
            }
            self.started = now;
            match (&args.auth.authorized_keys, &self.ring) {
                (Some(p), _) => keys_path = Some(p.clone()),
                (None, Some(_)) => return Err(ReloadError::KeysGone(file.clone())),
                (None, None) => {}
            }
        }
        let Some(ring) = &self.ring else {
            if keys_path.is_some() {
                tracing::warn!(
                    "started without authorized_keys: keys given now apply at the next start, not on SIGHUP"
                );
            }
            return Ok(None);
        };
        // A ring exists only for a server started with a keys file.
        let Some(path) = keys_path else {
            return Ok(None);
        };
        let keys = pfs_auth::AuthorizedKeys::load(&path)?;
        if keys.is_empty() {
            return Err(ReloadError::Empty(path));
        }
        let n = keys.len();
        ring.replace(keys);
        self.keys = Some(path);
        Ok(Some(n))
    }

    fn report(&mut self) {
        match self.reload() {
            Ok(Some(n)) => {
                let path = self.keys.as_ref().map(|p| p.display().to_string());
                tracing::info!(keys = n, file = path.as_deref(), "reloaded: {n} keys");
                if self.json {
                    super::serve::emit(&serde_json::json!({"event": "reloaded", "keys": n}).to_string());
                }
            }
            Ok(None) => {
                tracing::info!("SIGHUP: no authorized_keys to reload");
                if self.json {
                    super::serve::emit(&serde_json::json!({"event": "reloaded", "keys": null}).to_string());
                }
            }
            Err(e) => {
                let kept = self.ring.as_ref().map_or(0, |r| r.current().len());
                let why = packetfs::report::error_line(&e);
                tracing::error!("reload failed, keeping the {kept} keys in use: {why}");
                if self.json {
                    super::serve::emit(
                        &serde_json::json!({"event": "reload_failed", "error": why, "keys": kept})
                            .to_string(),
                    );
                }
            }
        }
    }
}

/// From now on, SIGHUP reloads `authorized_keys` into `ring` (module
/// docs) on a thread of its own, rather than ending the process.
pub fn watch(args: &ServeArgs, ring: Option<KeyRing>) -> Result<(), ReloadError> {
    let config = args.config.clone().map(|file| {
        let cli: Vec<OsString> = std::env::args_os().skip_while(|a| a != "serve").skip(1).collect();
        (file, cli)
    });
    let started = match &config {
        Some((file, _)) => crate::config::file_settings(file)?,
        None => toml::Table::new(),
    };
    let mut reload = Reload {
        ring,
        keys: args.auth.authorized_keys.clone(),
        config,
        started,
        json: args.run.json,
    };
    let mut signals = Signals::new([SIGHUP]).map_err(ReloadError::Signals)?;
    std::thread::Builder::new()
        .name("pfs-reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                reload.report();
            }
        })
        .map_err(ReloadError::Thread)?;
    Ok(())
}
