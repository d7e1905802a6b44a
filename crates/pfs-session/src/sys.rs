//! The system calls the session layer uses directly: per-thread resource
//! usage and CPU pinning. They live in `pfs-sys`; this module keeps the
//! names the session code (and its users) import.

pub use pfs_sys::{children_usage, max_rss_bytes, pin_current_thread, process_usage, thread_usage, Usage};
