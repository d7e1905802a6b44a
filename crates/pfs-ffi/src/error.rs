//! Status codes and the per-thread last error message of the C interface.
//!
//! A C caller gets a small integer it can switch on and, when it wants the
//! details, the message of the last failure on its own thread — the errno
//! and `strerror` pattern, without a global lock.

// `#[no_mangle]` is unsafe code to the compiler: the symbol is global.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// What a function returned. `PFS_STATUS_OK` (0) is success; every other
/// value comes with a message from [`pfs_last_error`].
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PfsStatus {
    /// Success.
    Ok = 0,
    /// A null pointer, a string that is not UTF-8, or a value out of range.
    InvalidArgument = 1,
    /// The blob could not be mapped, filled or opened.
    Blob = 2,
    /// An I/O or network error.
    Io = 3,
    /// The subscriber's window is full: nothing was sent; offer again
    /// after it applied more.
    BackPressure = 4,
    /// What was waited for did not happen in time.
    TimedOut = 5,
    /// The publisher ended the stream (a normal end, not a failure).
    Ended = 6,
    /// The streaming session failed: refused, silent, disconnected; the
    /// handle can only be closed.
    Stream = 7,
    /// A bug inside the library (a caught panic); the message says where.
    Internal = 99,
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error and returns `status`.
pub(crate) fn fail(status: PfsStatus, message: impl std::fmt::Display) -> PfsStatus {
    // A message with a NUL inside is cut there: C reads up to the first NUL anyway.
    let mut bytes = message.to_string().into_bytes();
    if let Some(nul) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(nul);
    }
    let text = CString::new(bytes).unwrap_or_default();
    LAST.with(|last| *last.borrow_mut() = text);
    status
}

/// Runs `f`, turning a panic into `PFS_STATUS_INTERNAL` with its message:
/// unwinding into C is undefined behaviour.
pub(crate) fn guard(f: impl FnOnce() -> PfsStatus) -> PfsStatus {
    // After a panic the handle may be half-updated; the caller is told the
    // library failed and should close it.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(status) => status,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(PfsStatus::Internal, format!("internal error: {what}"))
        }
    }
}

/// The message of the last failure on the calling thread ("" if none):
/// valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn pfs_last_error() -> *const c_char {
    LAST.with(|last| last.borrow().as_ptr())
}

/// The library's version, e.g. `"0.1.0"` (static storage).
#[no_mangle]
pub extern "C" fn pfs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
