//! The operating-system helpers every PacketFS crate shares, in one place:
//!
//! - [`cpu`]: pin the calling thread to a CPU, read the allowed CPU set;
//! - [`usage`]: CPU time, context switches and peak RSS of the calling
//!   thread, the process or its reaped children (`getrusage(2)`), with
//!   [`Usage::since`] for the difference over an interval;
//! - [`fs`]: which filesystem holds a path ([`FsType`]) and its block size,
//!   the base page size, and the huge page size of a hugetlbfs mount;
//! - [`clone`]: share a range of one file's blocks with another (a reflink);
//! - [`udp`]: batched UDP sends and receives (`sendmmsg` with GSO,
//!   `recvmmsg` with GRO).
//!
//! Everything goes through `rustix` where it has the call. The exceptions
//! are `getrusage` and the `FICLONERANGE` ioctl, which rustix does not
//! wrap, and the UDP control messages: their `unsafe` lives in a private
//! `ffi` module of [`usage`], [`clone`] and [`udp`], the only `unsafe` of
//! this crate.
//! Every function returns plain [`std::io::Error`]s; callers add the
//! context (which path, which operation) in their own typed errors.

pub mod clone;
pub mod cpu;
pub mod fs;
pub mod udp;
pub mod usage;

pub use clone::clone_range;
pub use cpu::{allowed_cpus, current_cpu, pin_current_thread, MAX_CPU};
pub use fs::{base_page_size, fstatfs, hugetlbfs_page_size, statfs, FsInfo, FsType};
pub use usage::{
    children_usage, max_rss_bytes, process_usage, task_usage, thread_usage, tree_cpu_seconds, Usage,
};
