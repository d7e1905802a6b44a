//! User kernels loaded from a shared object (`.so`), through a small C ABI:
//!
//! ```c
//! uint64_t <prefix>init(void);                                         // initial state
//! uint64_t <prefix>update(uint64_t state, const uint8_t *p, size_t n); // one descriptor's bytes
//! uint64_t <prefix>combine(uint64_t acc, uint64_t next);               // optional: fold the next chunk
//! ```
//!
//! The default prefix is `pfs_`. With `combine` the kernel runs like the
//! built-in ones (fresh `init()` per 64-descriptor chunk, chunks folded in
//! order); without it, one state runs over the whole stream. C symbols carry
//! no signature, so a wrong signature cannot be detected: only missing
//! symbols and files that are not loadable shared objects are. Compiling
//! LLVM IR in process is not built yet.
//!
//! The only module of this crate with `unsafe`: loading a library runs its
//! initialisers, and calling its functions trusts their declared types.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

/// `init` of the ABI.
type InitFn = unsafe extern "C" fn() -> u64;
/// `update` of the ABI.
type UpdateFn = unsafe extern "C" fn(u64, *const u8, usize) -> u64;
/// `combine` of the ABI.
type CombineFn = unsafe extern "C" fn(u64, u64) -> u64;

/// Why a user kernel cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UserKernelError {
    /// The file is missing or not a loadable shared object.
    #[error("cannot load {path} as a shared object: {reason}")]
    Load {
        /// The file.
        path: PathBuf,
        /// The loader's message.
        reason: String,
    },
    /// A required symbol is missing.
    #[error("{path} has no symbol `{symbol}` (a user kernel exports `{prefix}init` and `{prefix}update`, optionally `{prefix}combine`)")]
    MissingSymbol {
        /// The file.
        path: PathBuf,
        /// The symbol.
        symbol: String,
        /// The prefix in use.
        prefix: String,
    },
}

/// A loaded user kernel.
#[derive(Debug)]
pub struct UserKernel {
    init: InitFn,
    update: UpdateFn,
    combine: Option<CombineFn>,
    path: PathBuf,
    // Declared last: the function pointers above must not outlive it.
    _lib: libloading::Library,
}

impl UserKernel {
    /// Loads `path` and resolves `<prefix>init`, `<prefix>update` and, if present, `<prefix>combine`.
    pub fn load(path: &Path, prefix: &str) -> Result<Self, UserKernelError> {
        // SAFETY: loading a library runs its initialisers; the user asked for
        // this file to be run as a kernel, which is the trust this feature is for.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| UserKernelError::Load {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let missing = |symbol: &str| UserKernelError::MissingSymbol {
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
            prefix: prefix.to_string(),
        };
        let name = |s: &str| format!("{prefix}{s}\0");
        // SAFETY: the symbols are declared with the ABI documented above; a
        // library exporting them with other types breaks that contract,
        // which C symbols cannot be checked for.
        let init: InitFn = unsafe { lib.get::<InitFn>(name("init").as_bytes()) }
            .map(|s| *s)
            .map_err(|_| missing(&format!("{prefix}init")))?;
        // SAFETY: as above.
        let update: UpdateFn = unsafe { lib.get::<UpdateFn>(name("update").as_bytes()) }
            .map(|s| *s)
            .map_err(|_| missing(&format!("{prefix}update")))?;
        // SAFETY: as above.
        let combine: Option<CombineFn> = unsafe { lib.get::<CombineFn>(name("combine").as_bytes()) }
            .ok()
            .map(|s| *s);
        Ok(Self {
            init,
            update,
            combine,
            path: path.to_path_buf(),
            _lib: lib,
        })
    }

    /// The file it came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it exports `combine` (chunked, like the built-ins) or runs as one stream.
    pub fn has_combine(&self) -> bool {
        self.combine.is_some()
    }

    /// `init()`.
    pub fn init(&self) -> u64 {
        // SAFETY: `init` takes nothing and returns a u64 by the ABI; the
        // library is still loaded (it lives in `self`).
        unsafe { (self.init)() }
    }

    /// `update(state, bytes)`.
    pub fn update(&self, state: u64, bytes: &[u8]) -> u64 {
        // SAFETY: the pointer and length describe a live, readable slice for
        // the duration of the call; the ABI promises the kernel only reads
        // `len` bytes from it and keeps no reference.
        unsafe { (self.update)(state, bytes.as_ptr(), bytes.len()) }
    }

    /// `combine(acc, next)`, when exported.
    pub fn combine(&self, acc: u64, next: u64) -> Option<u64> {
        // SAFETY: plain values in and out by the ABI; the library is loaded.
        self.combine.map(|c| unsafe { c(acc, next) })
    }
}
