//! LLVM IR user kernels (`.ll` text or `.bc` bitcode), compiled in process
//! by LLVM's MCJIT (feature `llvm`).
//!
//! Unlike a shared object, IR carries the functions' types, so the ABI is
//! checked before anything runs: `i64 ()`, `i64 (i64, ptr, i64)` and
//! `i64 (i64, i64)` (any pointer type in address space 0 is accepted for
//! `update`'s second parameter: `i8*`, `i64*` or an opaque `ptr`). The
//! module is verified, optimised at `-O3` and JIT-compiled at
//! [`OptimizationLevel::Aggressive`]; the execution engine and its context
//! live in [`Jit`], which the [`UserKernel`](super::UserKernel) holding the
//! function pointers owns.
#![allow(unsafe_code)]

use std::path::Path;
use std::ptr::NonNull;

use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::{PassManager, PassManagerBuilder};
use inkwell::targets::{InitializationConfig, Target};
use inkwell::types::{BasicTypeEnum, FunctionType};
use inkwell::{AddressSpace, OptimizationLevel};

use super::{CombineFn, InitFn, UpdateFn, UserKernelError};

/// What keeps JIT-compiled code alive: the execution engine (which owns the
/// module and the machine code) and the LLVM context they were made in.
pub(super) struct Jit {
    // Declared before `_context`, so dropped first: the engine borrows it.
    _engine: ExecutionEngine<'static>,
    _context: OwnedContext,
}

/// An LLVM context on the heap, freed on drop; what borrows it (as
/// `'static`, see `load`) must be dropped before.
struct OwnedContext(NonNull<Context>);

impl OwnedContext {
    fn new() -> Self {
        Self(NonNull::from(Box::leak(Box::new(Context::create()))))
    }
}

impl Drop for OwnedContext {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` in `new` and is freed
        // only here, once; everything borrowing the context (module, engine)
        // was dropped before, by field order in `Jit` and by declaration
        // order of the locals in `load`.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jit").finish_non_exhaustive()
    }
}

// SAFETY: after `load` returns, neither the engine nor the context is used
// again except to be dropped, together, by whoever owns the `Jit` (all the
// reference counts inside them are held inside this value, so moving the
// whole value to another thread moves every holder). The only thing used
// concurrently is the compiled machine code, through plain function
// pointers, which is as shareable as a shared object's code.
unsafe impl Send for Jit {}
// SAFETY: `&Jit` gives access to nothing (no methods read the engine or the
// context); see the `Send` impl above.
unsafe impl Sync for Jit {}

/// The three entry points and what keeps them alive.
pub(super) type Loaded = (InitFn, UpdateFn, Option<CombineFn>, Jit);

/// `i64`, the ABI's `uint64_t`.
fn is_i64(t: BasicTypeEnum<'_>) -> bool {
    matches!(t, BasicTypeEnum::IntType(i) if i.get_bit_width() == 64)
}

/// The ABI's `size_t`: `usize` on this host.
fn is_size(t: BasicTypeEnum<'_>) -> bool {
    matches!(t, BasicTypeEnum::IntType(i) if i.get_bit_width() == usize::BITS)
}

/// A pointer in the default address space (`i8*`, any other typed pointer, or `ptr`).
fn is_ptr(t: BasicTypeEnum<'_>) -> bool {
    matches!(t, BasicTypeEnum::PointerType(p) if p.get_address_space() == AddressSpace::default())
}

/// A check of one parameter type.
type ParamCheck = fn(BasicTypeEnum<'_>) -> bool;

/// One entry point: name after the prefix, ABI type as LLVM prints it,
/// parameter checks, whether required.
type Wanted<'a> = (&'static str, &'static str, &'a [ParamCheck], bool);

/// Whether `ty` is `i64 (params…)` where `params` are the given checks.
fn matches_abi(ty: FunctionType<'_>, params: &[ParamCheck]) -> bool {
    let got = ty.get_param_types();
    !ty.is_var_arg()
        && ty.get_return_type().is_some_and(is_i64)
        && got.len() == params.len()
        && got.iter().zip(params).all(|(t, ok)| ok(*t))
}

/// Parses, checks, optimises and JIT-compiles the IR kernel at `path`.
pub(super) fn load(path: &Path, prefix: &str) -> Result<Loaded, UserKernelError> {
    let bad = |diagnostic: String| UserKernelError::BadIr {
        path: path.to_path_buf(),
        diagnostic,
    };
    let missing = |symbol: &str| UserKernelError::MissingSymbol {
        path: path.to_path_buf(),
        symbol: symbol.to_string(),
        prefix: prefix.to_string(),
    };
    Target::initialize_native(&InitializationConfig::default()).map_err(|diagnostic| {
        UserKernelError::NativeTarget {
            path: path.to_path_buf(),
            diagnostic,
        }
    })?;
    let bytes = std::fs::read(path).map_err(|source| UserKernelError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let buffer = MemoryBuffer::create_from_memory_range_copy(&bytes, &path.to_string_lossy());
    drop(bytes);

    // Declared before the module and engine, so on an early return they are
    // dropped before it.
    let context = OwnedContext::new();
    // SAFETY: the context is on the heap (its address never changes) and is
    // freed only when `context` drops, which happens after everything
    // borrowing it: on early returns by local declaration order, on success
    // because it goes into the returned `Jit` after the engine (the module's
    // handle is dropped here, the engine owns the module). Nothing else
    // borrowing it escapes: the function pointers point into the engine's
    // code, and `UserKernel` keeps the `Jit` as long as them.
    let ctx: &'static Context = unsafe { context.0.as_ref() };
    // Text (`.ll`) and bitcode (`.bc`) alike: LLVM tells them apart.
    let module: Module<'static> = ctx
        .create_module_from_ir(buffer)
        .map_err(|e| bad(e.to_string()))?;
    module.verify().map_err(|e| bad(e.to_string()))?;

    let i64_ = is_i64 as ParamCheck;
    let ptr_ = is_ptr as ParamCheck;
    let size_ = is_size as ParamCheck;
    let wanted: [Wanted<'_>; 3] = [
        ("init", "i64 ()", &[], true),
        ("update", "i64 (i64, i8*, i64)", &[i64_, ptr_, size_], true),
        ("combine", "i64 (i64, i64)", &[i64_, i64_], false),
    ];
    let mut present = [false; 3];
    for (slot, (name, expected, params, required)) in wanted.iter().enumerate() {
        let symbol = format!("{prefix}{name}");
        let Some(f) = module.get_function(&symbol) else {
            if *required {
                return Err(missing(&symbol));
            }
            continue;
        };
        if f.count_basic_blocks() == 0 {
            return Err(UserKernelError::Undefined {
                path: path.to_path_buf(),
                symbol,
            });
        }
        let ty = f.get_type();
        if !matches_abi(ty, params) {
            return Err(UserKernelError::WrongSignature {
                path: path.to_path_buf(),
                symbol,
                expected,
                found: ty.print_to_string().to_string(),
            });
        }
        present[slot] = true;
    }

    // IR from `clang -O0` (without `optnone`) or hand-written IR gets the
    // same treatment as `clang -O3`; already optimised IR barely changes.
    let builder = PassManagerBuilder::create();
    builder.set_optimization_level(OptimizationLevel::Aggressive);
    let passes = PassManager::create(());
    builder.populate_module_pass_manager(&passes);
    passes.run_on(&module);

    let engine = module
        .create_jit_execution_engine(OptimizationLevel::Aggressive)
        .map_err(|e| UserKernelError::Jit {
            path: path.to_path_buf(),
            symbol: None,
            diagnostic: e.to_string(),
        })?;
    let jit_err = |symbol: &str, e: String| UserKernelError::Jit {
        path: path.to_path_buf(),
        symbol: Some(symbol.to_owned()),
        diagnostic: e,
    };
    let init_name = format!("{prefix}init");
    let update_name = format!("{prefix}update");
    let combine_name = format!("{prefix}combine");
    // SAFETY: `pfs_init` was checked above to have the LLVM type `i64 ()`,
    // which is `InitFn` under the C calling convention MCJIT compiles with;
    // the pointer stays valid while `engine` lives, and the caller keeps the
    // returned `Jit` (holding `engine`) alongside it.
    let init: InitFn = unsafe {
        engine
            .get_function::<InitFn>(&init_name)
            .map_err(|e| jit_err(&init_name, e.to_string()))?
            .into_raw()
    };
    // SAFETY: as above, with `update` checked to be `i64 (i64, ptr, iN)`
    // where N is `usize::BITS`, which is `UpdateFn`.
    let update: UpdateFn = unsafe {
        engine
            .get_function::<UpdateFn>(&update_name)
            .map_err(|e| jit_err(&update_name, e.to_string()))?
            .into_raw()
    };
    let combine: Option<CombineFn> = if present[2] {
        // SAFETY: as above, with `combine` checked to be `i64 (i64, i64)`.
        Some(unsafe {
            engine
                .get_function::<CombineFn>(&combine_name)
                .map_err(|e| jit_err(&combine_name, e.to_string()))?
                .into_raw()
        })
    } else {
        None
    };
    // The engine owns the module now; dropping this handle does not free it.
    drop(module);
    Ok((
        init,
        update,
        combine,
        Jit {
            _engine: engine,
            _context: context,
        },
    ))
}
