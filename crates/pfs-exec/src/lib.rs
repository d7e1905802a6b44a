//! PacketFS execution layer: what a receiver (or a local pCPU run) does with
//! a descriptor schedule.
//!
//! Owns the integrity kernels ([`integrity`]), the execution of one gram's
//! descriptors over a blob with bounds checks ([`execute`]), and the seeded
//! schedule generators shared by senders, `pfs exec` and the benchmarks
//! ([`schedule`]), the built-in pCPU kernels ([`kernel`]) and the sharded
//! executor that runs them on pinned pThreads ([`shard`]).

pub mod execute;
pub mod integrity;
pub mod kernel;
pub mod schedule;
pub mod shard;
pub mod user;

pub use execute::{execute_gram, ExecError, GramLimits, GramOutcome};
pub use integrity::{e2e_chain, fnv1a64, Digest};
pub use schedule::{Pattern, Schedule, ScheduleSpec, Total};
