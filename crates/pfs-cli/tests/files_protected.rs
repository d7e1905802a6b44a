//! The end-to-end file-transfer tests of `files.rs`, every session
//! protected: the server requires keys (`--identity`, `--authorized-keys`),
//! the sender pins the server's key (`--server-key`) and seals its records
//! with ChaCha20-Poly1305 (AES-256-GCM, the default on this hardware, runs
//! in the other protected tests and in `pfs bench`).

mod common;

/// Every session protected, with this cipher.
const PROTECTED: Option<&str> = Some("chacha20-poly1305");

/// Whether the server keeps a content store (`--store`) besides the destination.
const STORE: bool = true;

include!("suites/files.rs");
