//! End-to-end tests of file transfer: `pfs send PATH… --to ADDR[:DIR]` into a
//! `pfs serve --store DIR --dest DIR` (docs/wire.md §10), run as a user would.
//!
//! Every child is bounded (see `common`): senders run to completion within
//! `common::CMD_TIMEOUT`, servers exit by `--max-sessions` or are killed on
//! drop, and every wait on a server event or on the file system has a
//! deadline. Servers listen on `127.0.0.1:0` (or a socket in a temporary
//! directory) and print JSON events; senders always get a private
//! `--cache-dir`. Test data is generated from fixed seeds.
//!
//! The same tests run again in `files_protected.rs` with every session
//! protected (keys, ChaCha20-Poly1305 records); the body is
//! `suites/files.rs`.

mod common;

/// Plain sessions.
const PROTECTED: Option<&str> = None;

include!("suites/files.rs");
