//! The UDP transport: a reliable, ordered byte stream each way over
//! datagrams, behind the same [`Transport`](crate::Transport) trait as TCP,
//! so the gram and files protocols run over it unchanged
//! (`--transport udp`). Datagram format: `docs/wire.md` §14.
//!
//! - [`admit`]: the listener's stateless address validation (RETRY
//!   tokens) and its connection limits;
//! - [`conn`]: the sans-I/O connection core, driven by datagrams and
//!   `now`; it delegates to its parts:
//!   - [`rtt`]: the RTT estimator (smoothed RTT, variation, probe timeout);
//!   - [`timer`]: the timer table, one deadline per [`timer::Timer`] kind;
//!   - `send`: the send side (packet numbers with skipped ones, the send
//!     ring, packets in flight and loss detection, pacing);
//!   - `recv`: the receive side (reassembly ring, window, ACKs owed);
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
mod recv;
pub mod rtt;
mod send;
pub mod sim;
pub mod timer;

pub use auth::{DatagramCipher, DatagramKeys};
pub use conn::{ConnError, Connection, ReadOutcome, RecvBudget, UdpConfig, UdpStats, INITIAL_RECV_BUFFER};
pub use driver::{UdpListener, UdpReport, UdpTransport, UdpWaker, BATCH};
pub use rtt::RttEstimator;
pub use timer::{Timer, TimerTable};
