//! The UDP transport: a reliable, ordered byte stream each way over
//! datagrams, behind the same [`Transport`](crate::Transport) trait as TCP,
//! so the gram and files protocols run over it unchanged
//! (`--transport udp`). Datagram format: `docs/wire.md` §14.
//!
//! - [`admit`]: the listener's stateless address validation (RETRY
//!   tokens) and its connection limits;
//! - [`conn`]: the sans-I/O connection core (reliability, flow control,
//!   pacing), driven by datagrams and `now`;
//! - [`auth`]: datagram tags once a protected session has keys;
//! - [`cc`]: congestion control, rate and delay based (after BBR);
//! - [`ranges`]: the range sets both sides keep;
//! - [`sim`]: a simulated network (loss, bursts, reordering,
//!   duplication, delay, a rate cap) that drives two cores in one thread;
//! - `driver`: sockets, batching (`sendmmsg` + GSO, `recvmmsg` + GRO), the
//!   I/O thread, [`UdpTransport`] and [`UdpListener`].

pub mod admit;
pub mod auth;
pub mod cc;
pub mod conn;
mod driver;
pub mod ranges;
pub mod sim;

pub use auth::{DatagramCipher, DatagramKeys};
pub use conn::{ConnError, Connection, ReadOutcome, RecvBudget, UdpConfig, UdpStats, INITIAL_RECV_BUFFER};
pub use driver::{UdpListener, UdpReport, UdpTransport, UdpWaker, BATCH};
