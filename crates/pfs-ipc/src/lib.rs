//! PacketFS same-host fast path: processes that map the same shared memory
//! — a pair of single-producer/single-consumer rings and a blob — exchange
//! messages and blob references with no system call on the fast path, and
//! stay isolated processes.
//!
//! - [`IpcListener`] / [`Endpoint::connect`]: rendezvous on a Unix socket
//!   path, shared regions passed as sealed memfds with `SCM_RIGHTS`, peer
//!   credentials checked with `SO_PEERCRED` ([`Allow`]).
//! - [`Endpoint`]: `send` (one copy), `loan` → write → `commit` (zero copy),
//!   `send_ref` (a blob range), `recv` (a view valid until released),
//!   `try_*` variants, `call` for request/response. A full ring is waited
//!   on or reported ([`IpcError::WouldBlock`]), never overwritten.
//! - [`WaitStrategy`]: busy-spin, spin-then-yield, spin-then-futex.
//! - A peer that dies is noticed (pidfd, socket) within
//!   [`WaitConfig::liveness`]; a peer that writes garbage into the rings
//!   gets [`IpcError::Protocol`] on our side, never a crash or a hang.
//!
//! ```no_run
//! use pfs_ipc::{Endpoint, IpcListener, RendezvousConfig, WaitConfig, WaitStrategy};
//!
//! // Server: echo every request.
//! let listener = IpcListener::bind("/tmp/echo.sock".as_ref(), RendezvousConfig::default())?;
//! std::thread::spawn(move || {
//!     while let Ok(mut ep) = listener.accept() {
//!         while ep.serve_one(|req, tx| tx.send(req)).is_ok() {}
//!     }
//! });
//! // Client.
//! let mut ep = Endpoint::connect("/tmp/echo.sock".as_ref(), WaitConfig::with(WaitStrategy::Spin))?;
//! assert_eq!(ep.call(b"hi")?.bytes(), b"hi");
//! # Ok::<(), pfs_ipc::IpcError>(())
//! ```
//!
//! Layout: [`ring`] is the protocol (generic, model-checked with loom),
//! `mem` the only `unsafe` (typed access to mappings), `wait` the wait
//! strategies and liveness, `endpoint` the message API, `rendezvous` the
//! socket exchange.

mod atomics;
pub mod ring;

#[cfg(not(loom))]
mod endpoint;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
pub mod layout;
#[cfg(not(loom))]
mod mem;
#[cfg(not(loom))]
mod rendezvous;
#[cfg(not(loom))]
mod wait;

#[cfg(all(test, loom))]
mod model;
#[cfg(test)]
mod test_ring;

#[cfg(not(loom))]
pub use endpoint::{Endpoint, Loan, Msg, MsgKind, Receiver, Sender};
#[cfg(not(loom))]
pub use error::{HandshakeError, IpcError, Refusal};
#[cfg(not(loom))]
pub use rendezvous::{Allow, IpcListener, RendezvousConfig};
#[cfg(not(loom))]
pub use wait::{UnknownWaitStrategy, WaitConfig, WaitStrategy};
