//! `pfs serve --config FILE`: the same settings as the flags, in TOML.
//!
//! A key is a flag's long name with `_` for `-` (`max_clients = 8` is
//! `--max-clients 8`). The file becomes flags placed before the command
//! line's own and the whole is parsed again by clap, so every value is
//! checked exactly as its flag is, and a flag given on the command line
//! overrides the file (the later occurrence wins). A key the file must not
//! hold, or a value of the wrong type, is refused with its line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, FromArgMatches};
use serde::{Deserialize, Serialize};

use crate::args::{Cli, Command, ServeArgs};

/// A number as TOML writes it, or as a flag does (`"1G"`, `"0x5eed"`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
enum Number {
    Int(i64),
    Float(f64),
    Text(String),
}

/// The keys of a `pfs serve` config file: one per flag of `pfs serve`
/// (but `--config`). Kept in step with the flags by a test.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ServeFile {
    listen: Option<String>,
    transport: Option<String>,
    shm_wait: Option<String>,
    shm_ring: Option<Number>,
    mtu: Option<u64>,
    identity: Option<PathBuf>,
    authorized_keys: Option<PathBuf>,
    insecure_no_auth: Option<bool>,
    psk_file: Option<PathBuf>,
    max_admitting: Option<u64>,
    handshake_timeout: Option<Number>,
    once: Option<bool>,
    max_sessions: Option<u64>,
    max_clients: Option<u64>,
    max_per_key: Option<u64>,
    max_desc_per_gram: Option<u64>,
    max_payload: Option<Number>,
    exec: Option<String>,
    record: Option<PathBuf>,
    verify_blob: Option<bool>,
    no_repair: Option<bool>,
    allow_catch_up: Option<bool>,
    integrity_sample: Option<u64>,
    max_repair_bytes: Option<Number>,
    store: Option<PathBuf>,
    dest: Option<PathBuf>,
    store_capacity: Option<Number>,
    fsync: Option<bool>,
    shutdown_grace: Option<Number>,
    mount_idle_timeout: Option<Number>,
    metrics_listen: Option<String>,
    log_level: Option<String>,
    log_format: Option<String>,
    huge_dir: Option<PathBuf>,
    blob_name: Option<String>,
    size: Option<Number>,
    seed: Option<Number>,
    fill_file: Option<PathBuf>,
    no_prefault: Option<bool>,
    no_fill: Option<bool>,
    blob_keep: Option<bool>,
    setup_threads: Option<u64>,
    log_interval: Option<Number>,
    pin: Option<u64>,
    sock_buf: Option<Number>,
    json: Option<bool>,
}

impl ServeFile {
    /// Relative paths in the file are relative to the file's directory, so
    /// a unit's working directory does not change their meaning.
    fn resolve_paths(&mut self, base: &Path) {
        for p in [
            &mut self.identity,
            &mut self.authorized_keys,
            &mut self.psk_file,
            &mut self.record,
            &mut self.store,
            &mut self.dest,
            &mut self.huge_dir,
            &mut self.fill_file,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// The flags the file stands for: `--key value`, or `--key` for a true
    /// boolean (a false one adds nothing).
    fn to_flags(&self) -> Vec<OsString> {
        let table = toml::Table::try_from(self).unwrap_or_default();
        let mut flags = Vec::new();
        for (key, value) in table {
            let flag = OsString::from(format!("--{}", key.replace('_', "-")));
            match value {
                toml::Value::Boolean(true) => flags.push(flag),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => flags.extend([flag, s.into()]),
                other => flags.extend([flag, other.to_string().into()]),
            }
        }
        flags
    }
}

/// A config file that cannot be used; exits with the usage code.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// Reads and parses `file`, paths resolved; also its text.
fn read_file(file: &Path) -> Result<(ServeFile, String), ConfigError> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError(format!("--config {shown}: {e}")))?;
    let mut parsed: ServeFile = toml::from_str(&text)
        .map_err(|e| ConfigError(format!("--config {shown}: {}", e.to_string().trim_end())))?;
    let base = file.parent().unwrap_or(Path::new("."));
    parsed.resolve_paths(base);
    Ok((parsed, text))
}

/// The settings `file` holds, by key (what a reload compares).
pub fn file_settings(file: &Path) -> Result<toml::Table, ConfigError> {
    let (parsed, _) = read_file(file)?;
    Ok(toml::Table::try_from(&parsed).unwrap_or_default())
}

/// Reads `file` and parses `pfs serve` again with its settings placed
/// before the command line's flags (`cli`: the arguments after `serve`).
pub fn serve_args(file: &Path, cli: &[OsString]) -> Result<ServeArgs, ConfigError> {
    let shown = file.display();
    let (parsed, text) = read_file(file)?;
    let flags = parsed.to_flags();
    // The file alone first: its own mistakes are named by key.
    parse(&flags, &[]).map_err(|e| {
        let key = e
            .get(clap::error::ContextKind::InvalidArg)
            .map(|a| a.to_string())
            .and_then(|a| {
                a.strip_prefix("--")
                    .map(|k| k.split([' ', '=']).next().unwrap_or(k).replace('-', "_"))
            });
        let what = key.map_or_else(String::new, |k| format!(" key `{k}`{}:", line_of(&text, &k)));
        ConfigError(format!("--config {shown}:{what} {}", first_line(&e)))
    })?;
    parse(&flags, cli).map_err(|e| {
        ConfigError(format!(
            "{} (with the settings of --config {shown})",
            first_line(&e)
        ))
    })
}

/// Parses `pfs serve FILE_FLAGS… CLI_FLAGS…`, a later flag overriding an
/// earlier one.
fn parse(file_flags: &[OsString], cli: &[OsString]) -> Result<ServeArgs, clap::Error> {
    let argv = ["pfs".into(), "serve".into()]
        .into_iter()
        .chain(file_flags.iter().cloned())
        .chain(cli.iter().cloned());
    let cmd = Cli::command().mut_subcommand("serve", |c| c.args_override_self(true));
    let matches = cmd.try_get_matches_from(argv)?;
    match Cli::from_arg_matches(&matches)?.command {
        Some(Command::Serve(args)) => Ok(args),
        _ => unreachable!("parsed as pfs serve"),
    }
}

/// ` (line N)` of the line that sets `key` in `text`, if one does.
fn line_of(text: &str, key: &str) -> String {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or_else(String::new, |i| format!(" (line {})", i + 1))
}

/// clap's message without its `error: ` prefix and usage lines.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag of `pfs serve` but `--config` is a key of the file.
    #[test]
    fn every_serve_flag_is_a_key() {
        let cmd = Cli::command();
        let serve = cmd.find_subcommand("serve").expect("serve");
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "config" | "help") {
                continue;
            }
            let key = long.replace('-', "_");
            let err = toml::from_str::<ServeFile>(&format!("{key} = []"))
                .expect_err("an array is no value of any key");
            assert!(
                !err.to_string().contains("unknown field"),
                "--{long} has no key `{key}` in the config file: {err}"
            );
        }
    }

    /// Writes `text` as a config file in a new directory; (dir, file).
    fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("serve.toml");
        std::fs::write(&file, text).expect("write config");
        (dir, file)
    }

    /// A file and the flags it stands for give the same settings, field
    /// for field (relative paths resolved beside the file; a false boolean
    /// adds nothing).
    #[test]
    fn a_file_is_its_flags() {
        let (dir, file) = config_file(
            "listen = \"0.0.0.0:7878\"\nstore = \"store\"\ndest = \"/srv/dest\"\nauthorized_keys = \"keys\"\n\
             max_clients = 8\nstore_capacity = \"100G\"\nhandshake_timeout = 2.5\nfsync = true\nonce = false\n\
             shutdown_grace = 5\nlog_level = \"debug\"\nlog_format = \"json\"\nsock_buf = 1048576\n",
        );
        let by_file = serve_args(&file, &[]).expect("config parses");
        let base = dir.path().display();
        let flags = format!(
            "--listen 0.0.0.0:7878 --store {base}/store --dest /srv/dest --authorized-keys {base}/keys \
             --max-clients 8 --store-capacity 100G --handshake-timeout 2.5 --fsync --shutdown-grace 5 \
             --log-level debug --log-format json --sock-buf 1048576"
        );
        let flags: Vec<OsString> = flags.split_whitespace().map(OsString::from).collect();
        let by_flags = parse(&flags, &[]).expect("flags parse");
        assert_eq!(format!("{by_file:?}"), format!("{by_flags:?}"));
    }

    /// The shipped example is a valid config.
    #[test]
    fn the_dist_example_parses() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/pfs-serve.toml");
        let args = serve_args(&file, &[]).expect("dist/pfs-serve.toml parses");
        assert_eq!(args.dest.as_deref(), Some(Path::new("/srv/pfs/files")));
        assert_eq!(args.store, None);
        assert_eq!(args.shutdown_grace, 30.0);
    }

    #[test]
    fn a_flag_overrides_the_file() {
        let (_dir, file) = config_file("max_clients = 8\nsize = \"64M\"\n");
        let cli: Vec<OsString> = ["--max-clients", "2"].iter().map(OsString::from).collect();
        let args = serve_args(&file, &cli).expect("config parses");
        assert_eq!(args.max_clients, 2);
        assert_eq!(args.blob.size, 64 << 20);
    }

    #[test]
    fn a_bad_value_names_key_and_line() {
        let (_dir, file) = config_file("listen = \"127.0.0.1:0\"\n\nsize = \"12Q\"\n");
        let e = serve_args(&file, &[]).expect_err("bad size").to_string();
        assert!(e.contains("key `size` (line 3)") && e.contains("12Q"), "{e}");
    }
}
