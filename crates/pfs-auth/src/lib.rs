//! PacketFS authentication and encryption: who a peer is, what it may do,
//! and the protected sessions between peers (docs/wire.md §11,
//! docs/security.md).
//!
//! - [`identity`]: static x25519 key pairs (the Noise static keys), their
//!   files (`pfs keygen`: private key 0600, `FILE.pub` one line) and text.
//! - [`policy`]: the server's `authorized_keys` (keys and their rights) and
//!   the client's `known_hosts` (pinned server keys).
//! - [`handshake`]: the sans-I/O Noise XX handshake (`snow`), with the
//!   session's parameters bound into it.
//! - [`record`]: sealed records (AES-256-GCM or ChaCha20-Poly1305 from
//!   `ring`), nonce counters, key rotation.
//! - [`channel`]: blocking drivers for both sides and [`SecureTransport`],
//!   a transport whose bytes travel in records.
//!
//! Nothing here implements cryptography: Noise is `snow`'s, the AEADs and
//! HKDF are `ring`'s.

pub mod channel;
pub mod handshake;
pub mod identity;
pub mod policy;
pub mod record;

pub use channel::{
    accept, accept_by, connect, is_handshake, read_head, read_head_by, ClientSecurity, PendingClient, Pin,
    Prefixed, SecureError, SecureTransport, ServerSecurity, SessionInfo, DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_RECORD_TIMEOUT, MAX_EMPTY_RECORDS,
};
pub use handshake::{HandshakeError, NoiseFailure, Proposal, Psk, Service, DEFAULT_ROTATE_LOG2};
pub(crate) use identity::decode_key;
pub use identity::{
    default_identity_path, public_path, AuthError, Identity, KeyProblem, PublicKey, KEY_LEN, NOISE_PARAMS,
    PRIVATE_LABEL, PUBLIC_LABEL,
};
pub use policy::{
    default_known_hosts_path, known_hosts_line, parse_server_key, AuthorizedKeys, HostCheck, KnownHosts,
    LineProblem, Rights, StreamRights,
};
pub use record::{Cipher, RecordError};
