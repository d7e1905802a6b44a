//! Turns the key flags of `pfs send` and `pfs serve` into a client's
//! security settings and a server's admission policy, applying the rules of
//! docs/security.md: a non-loopback server needs `--authorized-keys` (or an
//! explicit `--insecure-no-auth`), a client sends in clear only to loopback
//! or same-host transports unless told otherwise, and a server key is
//! pinned or refused.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use pfs_auth::{
    default_identity_path, default_known_hosts_path, parse_server_key, AuthorizedKeys, Cipher,
    ClientSecurity, Identity, KnownHosts, Pin, Psk, ServerSecurity,
};
use pfs_session::Admission;

use crate::args::{ClientAuthArgs, ServerAuthArgs, TransportArg};

/// Whether every address `addr` resolves to is a loopback address.
pub fn is_loopback(addr: &str) -> bool {
    addr.to_socket_addrs()
        .map(|mut it| it.all(|sa: SocketAddr| sa.ip().is_loopback()))
        .unwrap_or(false)
}

fn load_identity(path: Option<&Path>) -> anyhow::Result<(Identity, PathBuf)> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => default_identity_path().context("no home directory: pass --identity FILE")?,
    };
    if !path.exists() {
        anyhow::bail!(
            "no identity at {}: create one with `pfs keygen -f {}` (or pass --identity FILE)",
            path.display(),
            path.display()
        );
    }
    Ok((Identity::load(&path)?, path))
}

/// Reads a pre-shared key: base64 of 32 bytes on the first line.
fn load_psk(path: &Path) -> anyhow::Result<Psk> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--psk-file {}", path.display()))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| anyhow::anyhow!("--psk-file {}: not base64", path.display()))?;
    let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        anyhow::anyhow!(
            "--psk-file {}: {} bytes, need 32 (make one: head -c 32 /dev/urandom | base64)",
            path.display(),
            bytes.len()
        )
    })?;
    Ok(Psk(key))
}

/// A sender's security: `None` for a plain session (loopback, Unix, SHM
/// without a pinned key, or `--insecure-no-auth`).
pub fn client_security(
    args: &ClientAuthArgs,
    addr: &str,
    transport: TransportArg,
) -> anyhow::Result<Option<ClientSecurity>> {
    let hosts_path = match &args.known_hosts {
        Some(p) => Some(p.clone()),
        None => default_known_hosts_path(),
    };
    let hosts = match &hosts_path {
        Some(p) => KnownHosts::load(p)?,
        None => KnownHosts::default(),
    };
    let remote = transport.is_network() && !is_loopback(addr);
    let wanted = args.server_key.is_some()
        || args.identity.is_some()
        || args.psk_file.is_some()
        || args.cipher.is_some()
        || args.rotate_log2.is_some()
        || hosts.knows(addr)
        || (remote && !args.insecure_no_auth);
    if !wanted {
        if remote {
            eprintln!("pfs: warning: sending to {addr} in clear and unauthenticated (--insecure-no-auth)");
        } else if args.insecure_no_auth {
            eprintln!("pfs: note: --insecure-no-auth changes nothing here: {addr} is on this host");
        }
        return Ok(None);
    }
    let (identity, _) = load_identity(args.identity.as_deref())?;
    let pin = match &args.server_key {
        Some(k) => Pin::Key(parse_server_key(k)?),
        None => Pin::KnownHosts {
            hosts,
            path: hosts_path.unwrap_or_else(|| PathBuf::from("known_hosts")),
        },
    };
    let cipher = match &args.cipher {
        Some(name) => Cipher::from_name(name).with_context(|| format!("--cipher {name}"))?,
        None => Cipher::preferred(),
    };
    Ok(Some(ClientSecurity {
        identity,
        pin,
        psk: args.psk_file.as_deref().map(load_psk).transpose()?,
        cipher,
        rotate_log2: args.rotate_log2.unwrap_or(pfs_auth::DEFAULT_ROTATE_LOG2),
        timeout: pfs_auth::DEFAULT_HANDSHAKE_TIMEOUT,
    }))
}

/// Whether a TCP server on `listen` takes plain clients only from its own
/// user (and root): on a loopback port without `--authorized-keys`, unless
/// `--insecure-no-auth` opens it to every local user. Unix sockets and
/// shared memory check their peer's uid always.
pub fn local_users_only(args: &ServerAuthArgs, listen: &str) -> bool {
    is_loopback(listen) && args.authorized_keys.is_none() && !args.insecure_no_auth
}

/// A server's admission policy for `listen` (its address as bound).
pub fn server_admission(
    args: &ServerAuthArgs,
    listen: &str,
    transport: TransportArg,
) -> anyhow::Result<(Admission, Vec<String>)> {
    let mut notes = Vec::new();
    let remote = transport.is_network() && !is_loopback(listen);
    if remote && args.authorized_keys.is_none() && !args.insecure_no_auth {
        anyhow::bail!(
            "refusing to serve {listen} (not loopback) without --authorized-keys FILE: anyone who can \
             reach it could write here. Give the client keys it admits (see `pfs keygen` and docs/security.md), \
             or --insecure-no-auth to serve unauthenticated anyway"
        );
    }
    if !(args.handshake_timeout > 0.0 && args.handshake_timeout.is_finite()) {
        anyhow::bail!("--handshake-timeout must be a positive number of seconds");
    }
    let timeout = Duration::from_secs_f64(args.handshake_timeout);
    let authorized = match &args.authorized_keys {
        Some(p) => {
            let keys = AuthorizedKeys::load(p)?;
            if keys.is_empty() {
                anyhow::bail!(
                    "--authorized-keys {}: no keys listed, nobody could connect",
                    p.display()
                );
            }
            notes.push(format!("{} client key(s) from {}", keys.len(), p.display()));
            Some(keys)
        }
        None => None,
    };
    // The identity is required with keys; otherwise used when present.
    let default_present = default_identity_path().is_some_and(|p| p.exists());
    let identity =
        if authorized.is_some() || args.identity.is_some() || args.psk_file.is_some() || default_present {
            let (id, path) = load_identity(args.identity.as_deref())?;
            notes.push(format!(
                "identity {} ({})",
                id.public().fingerprint(),
                path.display()
            ));
            Some(id)
        } else {
            None
        };
    if transport == TransportArg::Tcp && local_users_only(args, listen) {
        notes.push(format!(
            "plain clients on {listen} only of this user or root (--insecure-no-auth: any local user)"
        ));
    } else if !remote
        && args.insecure_no_auth
        && transport == TransportArg::Tcp
        && args.authorized_keys.is_none()
    {
        tracing::warn!("serving {listen} in clear to any local user (--insecure-no-auth)");
    } else if !remote && args.insecure_no_auth {
        notes.push(format!(
            "--insecure-no-auth changes nothing on {listen}: it is on this host"
        ));
    }
    if remote && authorized.is_none() {
        tracing::warn!(
            "serving {listen} (not loopback) without authentication (--insecure-no-auth): \
             anyone who can reach it can write into this server"
        );
    }
    let security = match identity {
        Some(identity) => Some(ServerSecurity {
            identity,
            psk: args.psk_file.as_deref().map(load_psk).transpose()?,
            timeout,
            record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
        }),
        None => None,
    };
    let allow_plain = authorized.is_none();
    notes.push(if allow_plain {
        "plain sessions allowed".to_string()
    } else {
        "every session authenticated and encrypted".to_string()
    });
    Ok((
        Admission {
            security,
            authorized,
            allow_plain,
        },
        notes,
    ))
}
