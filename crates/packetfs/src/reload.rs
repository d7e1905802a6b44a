//! SIGHUP on a server: reload `authorized_keys` without a restart.
//!
//! The keys file is read again (with a config file, the config file is
//! read again first, by the caller's [`ConfigReader`], and its
//! `authorized_keys` path is the one read); a set that parses replaces the
//! one new admissions use ([`KeyRing::replace`]). Sessions in flight keep
//! the rights they were admitted with; a key removed is refused from its
//! next connection on. A file that cannot be read, does not parse or lists
//! nobody keeps the old set and logs an error.
//!
//! Only `authorized_keys` is reloadable: any other setting the config
//! file changed is named in a warning and applies at the next start.

use std::path::PathBuf;

use pfs_session::KeyRing;
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

/// Why a reload kept the old set, or SIGHUP could not be watched.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The config file no longer parses.
    #[error(transparent)]
    Config(Box<dyn std::error::Error + Send + Sync>),
    /// The config file no longer names an `authorized_keys` file.
    #[error("--config {}: authorized_keys is gone; a server started with keys keeps requiring them (restart to serve without)", .0.display())]
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

/// What a config file says at a reload.
#[derive(Debug, Clone, Default)]
pub struct ConfigNow {
    /// Its keys file (command-line flags applied), if any.
    pub authorized_keys: Option<PathBuf>,
    /// The settings other than `authorized_keys` that changed since the
    /// last reading.
    pub changed: Vec<String>,
}

/// Reads the config file again.
pub type ConfigReader =
    Box<dyn FnMut() -> Result<ConfigNow, Box<dyn std::error::Error + Send + Sync>> + Send>;

/// What a SIGHUP re-reads, and the set it replaces.
pub struct KeysReload {
    /// The set admissions use; `None`: the server runs without keys.
    pub ring: Option<KeyRing>,
    /// The keys file in use.
    pub keys: Option<PathBuf>,
    /// The config file, and how to read it again.
    pub config: Option<(PathBuf, ConfigReader)>,
}

impl std::fmt::Debug for KeysReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeysReload")
            .field("ring", &self.ring)
            .field("keys", &self.keys)
            .field("config", &self.config.as_ref().map(|(p, _)| p))
            .finish()
    }
}

impl KeysReload {
    /// Reads the keys (and config) again; on success the new set is in
    /// use and its size returned (`None`: a server without keys).
    pub fn reload(&mut self) -> Result<Option<usize>, ReloadError> {
        let mut keys_path = self.keys.clone();
        if let Some((file, read)) = &mut self.config {
            let now = read().map_err(ReloadError::Config)?;
            if !now.changed.is_empty() {
                tracing::warn!(
                    "--config {}: {} changed; only authorized_keys is reloaded, the rest applies at the next start",
                    file.display(),
                    now.changed.join(", ")
                );
            }
            match (now.authorized_keys, &self.ring) {
                (Some(p), _) => keys_path = Some(p),
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

    /// [`Self::reload`], logged (`reloaded: N keys`, or `reload failed,
    /// keeping the N keys in use: …`); returns the event a `--json` server
    /// prints: `reloaded` (`keys`: N, or null without keys) or
    /// `reload_failed` (`error`, `keys` kept).
    pub fn reload_and_log(&mut self) -> serde_json::Value {
        match self.reload() {
            Ok(Some(n)) => {
                let file = self.keys.as_ref().map(|p| p.display().to_string());
                tracing::info!(keys = n, file = file.as_deref(), "reloaded: {n} keys");
                serde_json::json!({"event": "reloaded", "keys": n})
            }
            Ok(None) => {
                tracing::info!("SIGHUP: no authorized_keys to reload");
                serde_json::json!({"event": "reloaded", "keys": null})
            }
            Err(e) => {
                let kept = self.ring.as_ref().map_or(0, |r| r.current().len());
                let why = crate::report::error_line(&e);
                tracing::error!("reload failed, keeping the {kept} keys in use: {why}");
                serde_json::json!({"event": "reload_failed", "error": why, "keys": kept})
            }
        }
    }
}

/// From now on, SIGHUP runs [`KeysReload::reload_and_log`] on a thread of
/// its own (rather than ending the process) and hands its event to
/// `on_event`.
pub fn watch(
    mut reload: KeysReload,
    on_event: impl Fn(&serde_json::Value) + Send + 'static,
) -> Result<(), ReloadError> {
    let mut signals = Signals::new([SIGHUP]).map_err(ReloadError::Signals)?;
    std::thread::Builder::new()
        .name("pfs-reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                on_event(&reload.reload_and_log());
            }
        })
        .map_err(ReloadError::Thread)?;
    Ok(())
}
