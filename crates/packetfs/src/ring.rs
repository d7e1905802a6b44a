//! Same-host rings: two processes that map the same shared memory — a pair
//! of single-producer/single-consumer rings and a blob — exchange messages
//! and blob references with no system call on the fast path. A listener
//! rendezvous on a Unix socket path; [`Endpoint`] sends, loans, receives
//! and calls. Everything here is `pfs-ipc`'s.

pub use pfs_ipc::{
    Allow, Endpoint, HandshakeError, IpcError, IpcListener, Loan, Msg, MsgKind, Receiver, Refusal,
    RendezvousConfig, Sender, WaitConfig, WaitStrategy,
};
