//! The key flags of `pfs send`, `pfs mount` and `pfs serve`
//! ([`packetfs::keys`] applies docs/security.md's rules to them).

use packetfs::keys::KeysError;
use pfs_auth::ClientSecurity;
use pfs_session::Admission;

use crate::args::{ClientAuthArgs, ServerAuthArgs, TransportArg};

pub use packetfs::keys::local_users_only;

/// A sender's security: `None` for a plain session (loopback, Unix, SHM
/// without a pinned key, or `--insecure-no-auth`).
pub fn client_security(
    args: &ClientAuthArgs,
    addr: &str,
    transport: TransportArg,
) -> Result<Option<ClientSecurity>, KeysError> {
    packetfs::keys::client_security(args, addr, transport.is_network())
}

/// A server's admission policy for `listen` (its address as bound).
pub fn server_admission(
    args: &ServerAuthArgs,
    listen: &str,
    transport: TransportArg,
) -> Result<(Admission, Vec<String>), KeysError> {
    use packetfs::keys::Listening;
    let on = match transport {
        TransportArg::Tcp => Listening::Tcp,
        TransportArg::Udp => Listening::Udp,
        TransportArg::Unix | TransportArg::Shm => Listening::SameHost,
    };
    packetfs::keys::server_admission(args, listen, on)
}
