//! User kernels loaded from a shared object (`.so`) or, with the `llvm`
//! feature, compiled in process from LLVM IR (`.ll`/`.bc`), through a small C ABI:
//!
//! ```c
//! uint64_t <prefix>init(void);                                         // initial state
//! uint64_t <prefix>update(uint64_t state, const uint8_t *p, size_t n); // one descriptor's bytes
//! uint64_t <prefix>combine(uint64_t acc, uint64_t next);               // optional: fold the next chunk
//! ```
//!
//! The default prefix is `pfs_`. With `combine` the kernel runs like the
//! built-in ones (fresh `init()` per 64-descriptor chunk, chunks folded in
//! order); without it, one state runs over the whole stream.
//!
//! Shared objects ([`UserKernel::load`]): C symbols carry no signature, so a
//! wrong signature cannot be detected: only missing symbols and files that
//! are not loadable shared objects are.
//!
//! LLVM IR (`UserKernel::load_ir`, feature `llvm`; e.g. `clang -O2
//! -emit-llvm -S -o sum.ll sum.c`): the module is parsed and verified, the
//! functions' LLVM types are checked against the ABI
//! ([`UserKernelError::WrongSignature`]), then it is optimised and
//! JIT-compiled in process. [`load_any`] picks by extension.
//!
//! The only modules of this crate with `unsafe`: loading a library runs its
//! initialisers, and calling its functions trusts their declared types.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

#[cfg(feature = "llvm")]
mod ir;

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
    #[error("cannot load {path} as a shared object: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// The dynamic loader's error.
        #[source]
        source: libloading::Error,
    },
    /// An IR file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
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
    /// An IR file LLVM cannot parse, or whose module does not verify.
    #[error("{path} is not valid LLVM IR: {diagnostic}")]
    BadIr {
        /// The file.
        path: PathBuf,
        /// LLVM's diagnostic, verbatim (LLVM reports parse and verifier
        /// errors only as text).
        diagnostic: String,
    },
    /// A kernel function is declared in the module but has no body.
    #[error("{path} is not valid LLVM IR: `{symbol}` is declared but not defined in the module")]
    Undefined {
        /// The file.
        path: PathBuf,
        /// The symbol.
        symbol: String,
    },
    /// An IR function whose type is not the ABI's.
    #[error("{path}: `{symbol}` has type `{found}`, the user kernel ABI wants `{expected}`")]
    WrongSignature {
        /// The file.
        path: PathBuf,
        /// The symbol.
        symbol: String,
        /// The ABI's LLVM type.
        expected: &'static str,
        /// The module's LLVM type.
        found: String,
    },
    /// LLVM could not set up code generation for this machine.
    #[error("cannot JIT-compile {path}: cannot initialise the native target: {diagnostic}")]
    NativeTarget {
        /// The file.
        path: PathBuf,
        /// LLVM's diagnostic, verbatim.
        diagnostic: String,
    },
    /// LLVM could not JIT-compile a valid module, or one of its kernel functions.
    #[error(
        "cannot JIT-compile {path}: {}{diagnostic}",
        symbol.as_ref().map(|s| format!("`{s}`: ")).unwrap_or_default()
    )]
    Jit {
        /// The file.
        path: PathBuf,
        /// The function that failed, if it was one function.
        symbol: Option<String>,
        /// LLVM's diagnostic, verbatim.
        diagnostic: String,
    },
    /// An IR file given to a build without the `llvm` feature.
    #[error("{path} is LLVM IR, but this pfs was built without the `llvm` feature: cargo build --release -p pfs-cli --features llvm")]
    NoLlvm {
        /// The file.
        path: PathBuf,
    },
}

/// Whether `path` names LLVM IR (`.ll` text or `.bc` bitcode) by its extension.
pub fn is_ir(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("ll") || e.eq_ignore_ascii_case("bc"))
}

/// Loads a user kernel, picking the backend by extension: `.ll`/`.bc` are
/// LLVM IR (JIT-compiled; [`UserKernelError::NoLlvm`] without the `llvm`
/// feature), anything else a shared object ([`UserKernel::load`]).
pub fn load_any(path: &Path, prefix: &str) -> Result<UserKernel, UserKernelError> {
    if !is_ir(path) {
        return UserKernel::load(path, prefix);
    }
    #[cfg(feature = "llvm")]
    {
        UserKernel::load_ir(path, prefix)
    }
    #[cfg(not(feature = "llvm"))]
    {
        Err(UserKernelError::NoLlvm {
            path: path.to_path_buf(),
        })
    }
}

/// What keeps a kernel's code alive.
#[derive(Debug)]
enum Backing {
    /// A loaded shared object.
    Lib(#[allow(dead_code)] libloading::Library),
    /// A JIT-compiled IR module.
    #[cfg(feature = "llvm")]
    Ir(#[allow(dead_code)] ir::Jit),
}

/// A loaded user kernel.
#[derive(Debug)]
pub struct UserKernel {
    init: InitFn,
    update: UpdateFn,
    combine: Option<CombineFn>,
    path: PathBuf,
    // Declared last: the function pointers above must not outlive it.
    _backing: Backing,
}

impl UserKernel {
    /// Loads `path` and resolves `<prefix>init`, `<prefix>update` and, if present, `<prefix>combine`.
    pub fn load(path: &Path, prefix: &str) -> Result<Self, UserKernelError> {
        // SAFETY: loading a library runs its initialisers; the user asked for
        // this file to be run as a kernel, which is the trust this feature is for.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| UserKernelError::Load {
            path: path.to_path_buf(),
            source,
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
            _backing: Backing::Lib(lib),
        })
    }

    /// Parses the LLVM IR (`.ll` text or `.bc` bitcode) at `path`, checks
    /// `<prefix>init`, `<prefix>update` and, if present, `<prefix>combine`
    /// against the ABI's LLVM types, optimises and JIT-compiles it.
    #[cfg(feature = "llvm")]
    pub fn load_ir(path: &Path, prefix: &str) -> Result<Self, UserKernelError> {
        let (init, update, combine, jit) = ir::load(path, prefix)?;
        Ok(Self {
            init,
            update,
            combine,
            path: path.to_path_buf(),
            _backing: Backing::Ir(jit),
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

    /// Runs the kernel over `prepared` on one pThread, with the built-in
    /// kernels' chunking when it exports `combine`. Returns the final state
    /// and the execution time.
    pub fn run(
        &self,
        blob: &[u8],
        prepared: &crate::shard::Prepared,
        cpus: Vec<usize>,
    ) -> Result<(u64, std::time::Duration), crate::shard::ShardError> {
        let init = || self.init();
        let update = |s: u64, b: &[u8]| self.update(s, b);
        let combine = |a: u64, b: u64| self.combine(a, b).unwrap_or(b);
        crate::shard::run_fn(
            blob,
            prepared,
            &init,
            &update,
            self.has_combine()
                .then_some(&combine as &(dyn Fn(u64, u64) -> u64 + Sync)),
            &crate::shard::ShardConfig { threads: 1, cpus },
        )
    }

    /// `init()`.
    pub fn init(&self) -> u64 {
        // SAFETY: `init` takes nothing and returns a u64 by the ABI; the
        // library (or JIT engine) is still alive (it lives in `self`).
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
