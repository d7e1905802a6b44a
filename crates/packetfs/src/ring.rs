//! Same-host rings: two processes that map the same shared memory — a pair
//! of single-producer/single-consumer rings and a blob — exchange messages
//! and blob references with no system call on the fast path. A listener
//! rendezvous on a Unix socket path; [`Endpoint`] sends, loans, receives
//! and calls. Everything here is `pfs-ipc`'s; `examples/same_host_ring.rs`
//! runs both ends.
//!
//! ```no_run
//! use packetfs::ring::{Endpoint, WaitConfig, WaitStrategy};
//! let mut ep = Endpoint::connect("/run/user/1000/echo.sock".as_ref(), WaitConfig::with(WaitStrategy::SpinFutex))?;
//! let reply = ep.call(b"ping")?;
//! assert_eq!(reply.bytes(), b"ping");
//! # Ok::<(), packetfs::ring::IpcError>(())
//! ```

pub use pfs_ipc::{
    Allow, Endpoint, HandshakeError, IpcError, IpcListener, Loan, Msg, MsgKind, Receiver, Refusal,
    RendezvousConfig, Sender, WaitConfig, WaitStrategy,
};
