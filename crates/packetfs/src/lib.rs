//! PacketFS for applications: ship **references, not bytes**.
//!
//! Two peers hold the same bytes — the **blob**, a large mapping (or, for
//! file transfer, the files a receiver already has). Instead of copying
//! payload they exchange **grams**: a header, a table of **descriptors**
//! (`(offset, len)` into the blob) and, only for what the peer lacks, a
//! payload slab. The receiver *executes* each gram over its own mapping
//! (checks, reconstructs, runs a kernel) and answers with its report. A
//! **session** is one such exchange on one connection: HELLO, grams,
//! corrections (NAK / REPAIR when the receiver's bytes differ), COMPLETE
//! with the receiver's authoritative figures.
//!
//! This crate is the public API the `pfs` binary is built on, and the one
//! to build other programs on. Modules:
//!
//! | module | what it gives |
//! |---|---|
//! | [`blob`] | open, fill, fingerprint a blob; the view a session uses |
//! | [`endpoint`] | transport options (`TransportArgs`), the [`gram::Target`] they name, the listener they bind |
//! | [`gram`] | gram sessions: [`gram::Target`], [`gram::send_on`], [`gram::receive_session`], [`gram::serve`] |
//! | [`files`] | file and tree sends and receives, deduplicated by chunk |
//! | [`mount`] | the mount client: a remote tree read lazily |
//! | [`keys`] | identities, `authorized_keys`, `known_hosts`, protected sessions |
//! | [`ring`] | same-host shared-memory rings between processes |
//! | [`exec`] | pCPU kernels over descriptor schedules |
//! | [`endpoint`] | `tcp:…`, `unix:…`, `shm:…`, `udp:…` strings: connect or listen |
//! | [`stream`] | streaming mode: [`stream::Publication`] and [`stream::Subscription`] of an application's own grams |
//! | [`pubsub`] | `pfs pub` / `pfs sub`: records from a reader published as stream grams; publishers served one at a time |
//! | [`report`] | a session's outcome as text and JSON, as `pfs` prints it |
//! | [`labels`], [`sysinfo`], [`parse`], [`interrupt`] | row labels, host facts, size parsing, Ctrl-C cleanup |
//!
//! The layers underneath are re-exported for what this API does not name:
//! [`wire`] (frames and codecs), [`transport`] (TCP, Unix, UDP, shared
//! memory), [`session`] (the sans-I/O protocol cores and their drivers).
//!
//! Runnable examples (`cargo run -p packetfs --example <name>`):
//! `gram_loopback` (send and serve in one process), `files_tree` (a tree
//! into a receiver directory), `same_host_ring` (an echo over the rings),
//! `keys` (generate a key pair, authorize it), `stream_replicate` (a replica
//! follows a primary's region over a streaming session).
//!
//! A gram session over loopback TCP, both peers in one process:
//!
//! ```
//! use packetfs::blob::{open_blob, study_blob};
//! use packetfs::gram::{self, IntegrityAlg, Mode, Pattern, ScheduleSpec, ServerConfig, Target, Total};
//! use packetfs::transport::{Listener, TcpConfig, TcpListener};
//!
//! // Both peers map the same 4 MiB from the same seed.
//! let ours = open_blob(&study_blob(4 << 20, 42, None), true)?;
//! let theirs = open_blob(&study_blob(4 << 20, 42, None), true)?;
//! let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())?;
//! let addr = listener.socket_addr()?.to_string();
//! std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
//!     let server = ServerConfig { max_sessions: Some(1), ..ServerConfig::default() };
//!     let view = theirs.view();
//!     s.spawn(move || gram::serve(&listener, &view, &server, &Default::default(), &|_| {}));
//!     let spec = ScheduleSpec {
//!         seed: 1, desc_per_gram: 64, max_len: 64 << 10, align: 64,
//!         pattern: Pattern::Random, total: Total::Grams(16), blob_len: 4 << 20,
//!     };
//!     let cfg = gram::sender_config(Mode::Offset, IntegrityAlg::Xxh3, spec, 0);
//!     let conn = Target::Tcp { addr, sock_buf: 0 }.connect()?;
//!     let (out, _, _) = gram::send_on(conn, &ours.view(), &cfg)?;
//!     assert_eq!(out.report.grams, 16);
//!     Ok(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod blob;
pub mod endpoint;
mod error;
pub mod exec;
pub mod exit;
pub mod files;
pub mod gram;
pub mod interrupt;
pub mod keys;
pub mod labels;
pub mod mount;
pub mod parse;
pub mod pubsub;
pub mod reload;
pub mod report;
pub mod ring;
pub mod session_log;
pub mod shutdown;
pub mod stream;
pub mod sysinfo;

pub use error::Error;

pub use pfs_session as session;
pub use pfs_transport as transport;
pub use pfs_wire as wire;
