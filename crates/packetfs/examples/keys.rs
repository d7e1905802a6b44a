//! Keys: a client and a server generate their key pairs (what `pfs keygen`
//! writes), the server authorizes the client's public key in its
//! `authorized_keys`, and the client pins the server's key in its
//! `known_hosts` — the two files a protected session checks.
//!
//! `cargo run -p packetfs --example keys`

use std::path::Path;

use packetfs::keys::{known_hosts_line, AuthError, AuthorizedKeys, HostCheck, Identity, KnownHosts};

/// What each side now knows about the other.
#[derive(Debug)]
pub struct Trust {
    /// The rights the server grants the client's key, as an `authorized_keys` line says them.
    pub client_rights: Option<String>,
    /// Whether the client's `known_hosts` pins the server's key for its address.
    pub server_known: bool,
}

/// Generates both identities under `dir` and writes both policy files.
pub fn run(dir: &Path) -> Result<Trust, AuthError> {
    let client = Identity::generate()?;
    let server = Identity::generate()?;
    let client_pub = client.save(&dir.join("client/identity"), "client@example", false)?;
    server.save(&dir.join("server/identity"), "server@example", false)?;

    // Server side: the client's public key, as its `identity.pub` gives it.
    let line = std::fs::read_to_string(&client_pub).map_err(|source| AuthError::Io {
        what: "reading",
        path: client_pub.clone(),
        source,
    })?;
    let keys_path = dir.join("server/authorized_keys");
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|source| AuthError::Io {
            what: "writing",
            path: path.to_path_buf(),
            source,
        })
    };
    // `pfs-x25519 BASE64` from the client's line, then the rights: confined to `backups/`.
    let key: Vec<&str> = line.split_whitespace().take(2).collect();
    write(
        &keys_path,
        format!("{} dir=backups # client@example\n", key.join(" ")),
    )?;
    let authorized = AuthorizedKeys::load(&keys_path)?;

    // Client side: pin the server's key for the address it is reached at.
    let hosts_path = dir.join("client/known_hosts");
    write(
        &hosts_path,
        known_hosts_line("backup.example:7878", &server.public()) + "\n",
    )?;
    let hosts = KnownHosts::load(&hosts_path)?;

    Ok(Trust {
        client_rights: authorized.rights(&client.public()).map(|r| r.describe()),
        server_known: matches!(
            hosts.check("backup.example:7878", &server.public()),
            HostCheck::Known
        ),
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let trust = run(dir.path())?;
    println!("server grants the client: {:?}", trust.client_rights);
    println!("client pins the server:   {}", trust.server_known);
    assert!(trust.server_known);
    Ok(())
}
