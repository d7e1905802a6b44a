//! Keys: static x25519 identities, the server's `authorized_keys` and the
//! client's `known_hosts`, and the protected sessions built on them (a
//! Noise XX handshake, then AEAD records; docs/wire.md §11). Everything
//! here is `pfs-auth`'s; no cryptography is implemented in PacketFS.
//!
//! A client pins a server key and connects with
//! [`crate::gram::Target::connect_as`]; a server lists the keys it admits
//! in [`AuthorizedKeys`]. [`ClientAuthArgs`] and [`ServerAuthArgs`] are the key
//! options of `pfs` (clap arguments with the `clap` feature);
//! [`client_security`] and [`server_admission`] turn them into a client's
//! security settings and a server's admission policy, applying the rules
//! of docs/security.md: a non-loopback server needs `--authorized-keys`
//! (or an explicit `--insecure-no-auth`), a client sends in clear only to
//! loopback or same-host transports unless told otherwise, and a server key
//! is pinned or refused.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use pfs_auth::Psk;
use pfs_session::Admission;

pub use pfs_auth::{
    accept, connect, default_identity_path, default_known_hosts_path, known_hosts_line, parse_server_key,
    public_path, AuthError, AuthorizedKeys, Cipher, ClientSecurity, HostCheck, Identity, KnownHosts, Pin,
    PublicKey, Rights, SecureError, SecureTransport, ServerSecurity, Service, SessionInfo, StreamRights,
};

/// What a server listens on, as the admission rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// A TCP port: plain loopback clients only of this user unless opened.
    Tcp,
    /// A UDP port.
    Udp,
    /// A Unix socket or a shared-memory rendezvous: peers are on this host.
    SameHost,
}

/// Why key options could not become security settings.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    /// No `--identity` and no home directory to find the default one in.
    #[error("no home directory: pass --identity FILE")]
    NoHome,
    /// The identity file does not exist.
    #[error("no identity at {p}: create one with `pfs keygen -f {p}` (or pass --identity FILE)", p = .0.display())]
    NoIdentity(PathBuf),
    /// A key file or policy file could not be read or parsed.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The pre-shared key file could not be read.
    #[error("--psk-file {}", .0.display())]
    PskRead(PathBuf, #[source] std::io::Error),
    /// The pre-shared key file is not base64.
    #[error("--psk-file {}: not base64", .0.display())]
    PskNotBase64(PathBuf),
    /// The pre-shared key is not 32 bytes.
    #[error("--psk-file {}: {} bytes, need 32 (make one: head -c 32 /dev/urandom | base64)", .0.display(), .1)]
    PskLength(PathBuf, usize),
    /// A cipher this build does not have.
    #[error("--cipher {name}")]
    UnknownCipher {
        /// The name given.
        name: String,
    },
    /// A non-loopback server without client keys (and without `--insecure-no-auth`).
    #[error("refusing to serve {listen} (not loopback) without --authorized-keys FILE: anyone who can \
             reach it could write here. Give the client keys it admits (see `pfs keygen` and docs/security.md), \
             or --insecure-no-auth to serve unauthenticated anyway")]
    RemoteWithoutKeys {
        /// The address it would listen on.
        listen: String,
    },
    /// `--handshake-timeout` is not a positive number.
    #[error("--handshake-timeout must be a positive number of seconds")]
    HandshakeTimeout,
    /// An `authorized_keys` file that lists nobody.
    #[error("--authorized-keys {}: no keys listed, nobody could connect", .0.display())]
    NoKeysListed(PathBuf),
}

/// A sender's keys: who it is, which server key it accepts, the cipher.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ClientAuthArgs {
    /// Our private key (default: $XDG_CONFIG_HOME/pfs/identity or ~/.config/pfs/identity;
    /// `pfs keygen` makes one). Giving it asks for a protected session.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub identity: Option<PathBuf>,
    /// The server's public key: `pfs-x25519 BASE64`, the bare base64, or a file holding the line
    /// (its identity.pub). Asks for a protected session; any other server key is refused.
    #[cfg_attr(feature = "clap", arg(long, value_name = "KEY"))]
    pub server_key: Option<String>,
    /// Pinned server keys, one `ADDRESS pfs-x25519 BASE64` a line (default: known_hosts beside
    /// the default identity). An address listed here gets a protected session.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub known_hosts: Option<PathBuf>,
    /// Record cipher [default: aes-256-gcm where the CPU has AES-NI, else chacha20-poly1305].
    /// Giving it asks for a protected session.
    #[cfg_attr(feature = "clap", arg(long, value_name = "CIPHER", value_parser = ["aes-256-gcm", "chacha20-poly1305"]))]
    pub cipher: Option<String>,
    /// Pre-shared key file (base64 of 32 bytes), if the server requires one.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub psk_file: Option<PathBuf>,
    /// Session keys rotate after 2^N bytes in each direction (16–40) [default: 32]. Giving it
    /// asks for a protected session.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(16..=40)))]
    pub rotate_log2: Option<u8>,
    /// Send in clear, unauthenticated, to a non-loopback address (never the default).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with_all = ["server_key", "identity", "psk_file", "cipher", "rotate_log2"]))]
    pub insecure_no_auth: bool,
}

/// Connections a server admits at once by default (`--max-admitting`).
pub const DEFAULT_MAX_ADMITTING: usize = 64;
/// Seconds a connection has for its handshake by default (`--handshake-timeout`).
pub const DEFAULT_HANDSHAKE_TIMEOUT_S: f64 = 10.0;

/// A server's keys and who it admits.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ServerAuthArgs {
    /// This server's private key (default: $XDG_CONFIG_HOME/pfs/identity or
    /// ~/.config/pfs/identity, used if present). Needed for protected sessions.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub identity: Option<PathBuf>,
    /// Client keys admitted, one a line with their rights:
    /// `pfs-x25519 BASE64 [dir=PATH] [no-blob] [no-files] [no-exec] [stream=ref|message] [group=NAME] [# comment]`.
    /// With it every connection must authenticate.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub authorized_keys: Option<PathBuf>,
    /// Serve plain (unauthenticated, unencrypted) sessions on a non-loopback address, or on a
    /// loopback TCP port to every local user (without it a plain loopback TCP server admits only
    /// its own user and root, as Unix sockets and shared memory do).
    #[cfg_attr(feature = "clap", arg(long, conflicts_with = "authorized_keys"))]
    pub insecure_no_auth: bool,
    /// Pre-shared key file (base64 of 32 bytes) every client must also hold.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub psk_file: Option<PathBuf>,
    /// Connections being admitted (handshake not finished) at once, counted apart from
    /// --max-clients. Past it one is dropped: from the address whose connections failed
    /// admission most often, then the one with the most connections being admitted, a silent one
    /// first, then the oldest; addresses that completed a handshake before go last.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = DEFAULT_MAX_ADMITTING))]
    pub max_admitting: usize,
    /// Seconds a connection has for its handshake, counted from the accept (for its first
    /// bytes: at least 60, since a plain sender connects and then sets up its blob).
    #[cfg_attr(feature = "clap", arg(long, value_name = "SECS", default_value_t = DEFAULT_HANDSHAKE_TIMEOUT_S))]
    pub handshake_timeout: f64,
}

impl Default for ServerAuthArgs {
    /// No keys, nothing opened: what `pfs serve` runs with when given no key flag.
    fn default() -> Self {
        Self {
            identity: None,
            authorized_keys: None,
            insecure_no_auth: false,
            psk_file: None,
            max_admitting: DEFAULT_MAX_ADMITTING,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT_S,
        }
    }
}

/// Whether every address `addr` resolves to is a loopback address.
pub fn is_loopback(addr: &str) -> bool {
    addr.to_socket_addrs()
        .map(|mut it| it.all(|sa: SocketAddr| sa.ip().is_loopback()))
        .unwrap_or(false)
}

fn load_identity(path: Option<&Path>) -> Result<(Identity, PathBuf), KeysError> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => default_identity_path().ok_or(KeysError::NoHome)?,
    };
    if !path.exists() {
        return Err(KeysError::NoIdentity(path));
    }
    Ok((Identity::load(&path)?, path))
}

/// Reads a pre-shared key: base64 of 32 bytes on the first line.
fn load_psk(path: &Path) -> Result<Psk, KeysError> {
    let text = std::fs::read_to_string(path).map_err(|e| KeysError::PskRead(path.to_path_buf(), e))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| KeysError::PskNotBase64(path.to_path_buf()))?;
    let key: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| KeysError::PskLength(path.to_path_buf(), bytes.len()))?;
    Ok(Psk(key))
}

/// A sender's security: `None` for a plain session (loopback, Unix, SHM
/// without a pinned key, or `--insecure-no-auth`). `network`: TCP or UDP.
///
/// ```
/// use packetfs::keys::{client_security, ClientAuthArgs};
/// // Over a Unix socket, nothing asked for: a plain session.
/// assert!(client_security(&ClientAuthArgs::default(), "/tmp/pfs.sock", false)?.is_none());
/// # Ok::<(), packetfs::keys::KeysError>(())
/// ```
pub fn client_security(
    args: &ClientAuthArgs,
    addr: &str,
    network: bool,
) -> Result<Option<ClientSecurity>, KeysError> {
    let hosts_path = match &args.known_hosts {
        Some(p) => Some(p.clone()),
        None => default_known_hosts_path(),
    };
    let hosts = match &hosts_path {
        Some(p) => KnownHosts::load(p)?,
        None => KnownHosts::default(),
    };
    let remote = network && !is_loopback(addr);
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
        Some(name) => {
            Cipher::from_name(name).ok_or_else(|| KeysError::UnknownCipher { name: name.clone() })?
        }
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

/// A server's admission policy for `listen` (its address as bound), and
/// notes on it for the server's log.
///
/// ```
/// use packetfs::keys::{server_admission, KeysError, Listening, ServerAuthArgs};
/// // Every address, no client keys, not opened explicitly: refused.
/// let refused = server_admission(&ServerAuthArgs::default(), "0.0.0.0:7878", Listening::Tcp);
/// assert!(matches!(refused, Err(KeysError::RemoteWithoutKeys { .. })));
/// ```
pub fn server_admission(
    args: &ServerAuthArgs,
    listen: &str,
    on: Listening,
) -> Result<(Admission, Vec<String>), KeysError> {
    let (network, tcp) = (on != Listening::SameHost, on == Listening::Tcp);
    let mut notes = Vec::new();
    let remote = network && !is_loopback(listen);
    if remote && args.authorized_keys.is_none() && !args.insecure_no_auth {
        return Err(KeysError::RemoteWithoutKeys {
            listen: listen.to_string(),
        });
    }
    if !(args.handshake_timeout > 0.0 && args.handshake_timeout.is_finite()) {
        return Err(KeysError::HandshakeTimeout);
    }
    let timeout = Duration::from_secs_f64(args.handshake_timeout);
    let authorized = match &args.authorized_keys {
        Some(p) => {
            let keys = AuthorizedKeys::load(p)?;
            if keys.is_empty() {
                return Err(KeysError::NoKeysListed(p.clone()));
            }
            notes.push(format!("{} client key(s) from {}", keys.len(), p.display()));
            Some(keys.into())
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
    if tcp && local_users_only(args, listen) {
        notes.push(format!(
            "plain clients on {listen} only of this user or root (--insecure-no-auth: any local user)"
        ));
    } else if !remote && args.insecure_no_auth && tcp && args.authorized_keys.is_none() {
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
