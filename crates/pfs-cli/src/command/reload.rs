//! SIGHUP on `pfs serve` reloads `authorized_keys` ([`packetfs::reload`]);
//! here, how the `--config` file is read again and compared.

use std::ffi::OsString;

use packetfs::reload::{ConfigNow, ConfigReader, KeysReload};
use pfs_session::KeyRing;

use crate::args::ServeArgs;

/// The keys whose values differ between two readings of a config file,
/// `authorized_keys` (reloadable) left out.
fn changed(before: &toml::Table, after: &toml::Table) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let differs = |k: &&String| *k != "authorized_keys" && before.get(*k) != after.get(*k);
    keys.into_iter().filter(differs).cloned().collect()
}

/// From now on SIGHUP reloads `authorized_keys` into `ring`.
pub fn watch(args: &ServeArgs, ring: Option<KeyRing>) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(file) => {
            let cli: Vec<OsString> = std::env::args_os().skip_while(|a| a != "serve").skip(1).collect();
            let mut before = crate::config::file_settings(file)?;
            let f = file.clone();
            let read: ConfigReader = Box::new(move || {
                let args = crate::config::serve_args(&f, &cli)?;
                let now = crate::config::file_settings(&f)?;
                let changed = changed(&before, &now);
                before = now;
                Ok(ConfigNow {
                    authorized_keys: args.auth.authorized_keys,
                    changed,
                })
            });
            Some((file.clone(), read))
        }
        None => None,
    };
    let reload = KeysReload {
        ring,
        keys: args.auth.authorized_keys.clone(),
        config,
    };
    let json = args.run.json;
    packetfs::reload::watch(reload, move |event| {
        if json {
            super::serve::emit(&event.to_string());
        }
    })?;
    Ok(())
}
