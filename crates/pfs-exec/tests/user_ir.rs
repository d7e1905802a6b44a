//! LLVM IR user kernels (feature `llvm`): the example kernels compiled to IR
//! by clang give exactly the built-ins' values; malformed IR, wrong
//! signatures and missing symbols are refused with their own errors. Needs
//! `clang-14` or `clang` to make the IR: the test that compiles the
//! examples is ignored unless asked for (`--ignored`), and fails saying so
//! without one.
#![cfg(feature = "llvm")]

use std::path::{Path, PathBuf};
use std::process::Command;

use pfs_exec::kernel::{Kernel, KernelId, Output};
use pfs_exec::shard::{self, Prepared, ShardConfig};
use pfs_exec::user::{load_any, UserKernel, UserKernelError};
use pfs_wire::{Descriptor, Encoding};

fn clang() -> Option<&'static str> {
    ["clang-14", "clang"].into_iter().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/kernels")
}

/// `clang -O2 -emit-llvm` of `examples/kernels/<name>.c` into `dir`, as
/// text (`.ll`) or bitcode (`.bc`).
fn compile(clang: &str, name: &str, dir: &Path, ext: &str) -> PathBuf {
    let out = dir.join(format!("{name}.{ext}"));
    let mut cmd = Command::new(clang);
    cmd.args(["-O2", "-emit-llvm"]);
    if ext == "ll" {
        cmd.arg("-S");
    } else {
        cmd.arg("-c");
    }
    let status = cmd
        .arg("-o")
        .arg(&out)
        .arg(examples().join(format!("{name}.c")))
        .status()
        .expect("running clang");
    assert!(status.success(), "clang failed on {name}.c");
    out
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// A random blob and random descriptors in it (zero-length, unaligned,
/// short-tail and overlapping ones included), many chunks' worth.
fn blob_and_descs(seed: u64) -> (Vec<u8>, Vec<Descriptor>) {
    let mut x = seed | 1;
    let len = 200_000 + (xorshift(&mut x) % 100_000) as usize;
    let blob: Vec<u8> = (0..len).map(|_| (xorshift(&mut x) >> 56) as u8).collect();
    let descs = (0..1000)
        .map(|_| {
            let offset = xorshift(&mut x) % len as u64;
            let room = len as u64 - offset;
            let want = match xorshift(&mut x) % 4 {
                0 => xorshift(&mut x) % 9,
                1 => 0,
                _ => xorshift(&mut x) % 5000,
            };
            Descriptor {
                offset,
                len: want.min(room) as u32,
            }
        })
        .collect();
    (blob, descs)
}

fn run_user(user: &UserKernel, blob: &[u8], prepared: &Prepared) -> u64 {
    let init = || user.init();
    let update = |s: u64, b: &[u8]| user.update(s, b);
    let combine = |a: u64, b: u64| user.combine(a, b).unwrap_or(b);
    shard::run_fn(
        blob,
        prepared,
        &init,
        &update,
        user.has_combine()
            .then_some(&combine as &(dyn Fn(u64, u64) -> u64 + Sync)),
        &ShardConfig {
            threads: 1,
            cpus: Vec::new(),
        },
    )
    .expect("user kernel run")
    .0
}

fn run_builtin(id: KernelId, blob: &[u8], prepared: &Prepared) -> u64 {
    let report = shard::run(
        blob,
        prepared,
        Kernel::new(id),
        &ShardConfig {
            threads: 1,
            cpus: Vec::new(),
        },
    )
    .expect("built-in run");
    match report.output {
        Output::U64(v) => v,
        other => panic!("{id:?} gave {other:?}"),
    }
}

#[test]
#[ignore = "needs clang-14 or clang"]
fn example_kernels_match_builtins() {
    let clang = clang().expect("needs clang-14 or clang: neither is installed");
    let dir = tempfile::tempdir().expect("tempdir");
    for ext in ["ll", "bc"] {
        let sum = load_any(&compile(clang, "sum", dir.path(), ext), "pfs_").expect("sum IR loads");
        let fnv = load_any(&compile(clang, "fnv1a", dir.path(), ext), "pfs_").expect("fnv1a IR loads");
        assert!(sum.has_combine());
        assert!(!fnv.has_combine());
        for seed in [1u64, 7, 0xdead_beef, 42_4242] {
            let (blob, descs) = blob_and_descs(seed);
            for encoding in [Encoding::Absolute, Encoding::Arithmetic] {
                let prepared =
                    Prepared::from_descriptors(&descs, encoding, blob.len() as u64).expect("prepared");
                assert_eq!(
                    run_user(&sum, &blob, &prepared),
                    run_builtin(KernelId::SumU64, &blob, &prepared),
                    "sum.{ext}, seed {seed}"
                );
                assert_eq!(
                    run_user(&fnv, &blob, &prepared),
                    run_builtin(KernelId::Fnv1a64, &blob, &prepared),
                    "fnv1a.{ext}, seed {seed}"
                );
            }
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write IR");
    p
}

const INIT: &str = "define i64 @pfs_init() {\n  ret i64 0\n}\n";
const UPDATE: &str =
    "define i64 @pfs_update(i64 %s, i8* %p, i64 %n) {\n  %r = add i64 %s, %n\n  ret i64 %r\n}\n";

#[test]
fn hand_written_ir_loads_and_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "len.ll", &format!("{INIT}{UPDATE}"));
    let k = load_any(&p, "pfs_").expect("loads");
    assert!(!k.has_combine());
    assert_eq!(k.update(k.init(), &[1, 2, 3]), 3);
    // The same module under another prefix.
    let q = write(
        dir.path(),
        "len2.ll",
        &format!("{INIT}{UPDATE}").replace("@pfs_", "@my_"),
    );
    let k = load_any(&q, "my_").expect("loads with prefix");
    assert_eq!(k.update(5, &[0; 10]), 15);
}

#[test]
fn malformed_ir_is_bad_ir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(
        dir.path(),
        "bad.ll",
        "define i64 @pfs_init( {\n  this is not IR\n",
    );
    match load_any(&p, "pfs_") {
        Err(UserKernelError::BadIr { path, diagnostic }) => {
            assert_eq!(path, p);
            assert!(!diagnostic.is_empty());
        }
        other => panic!("expected BadIr, got {other:?}"),
    }
    let b = write(dir.path(), "bad.bc", "not bitcode at all");
    assert!(matches!(load_any(&b, "pfs_"), Err(UserKernelError::BadIr { .. })));
}

#[test]
fn wrong_signature_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `update` without its length parameter.
    let p = write(
        dir.path(),
        "wrong.ll",
        &format!("{INIT}define i64 @pfs_update(i64 %s, i8* %p) {{\n  ret i64 %s\n}}\n"),
    );
    match load_any(&p, "pfs_") {
        Err(UserKernelError::WrongSignature {
            symbol,
            expected,
            found,
            ..
        }) => {
            assert_eq!(symbol, "pfs_update");
            assert_eq!(expected, "i64 (i64, i8*, i64)");
            assert_eq!(found, "i64 (i64, i8*)");
        }
        other => panic!("expected WrongSignature, got {other:?}"),
    }
    // `init` returning i32; `combine` taking a pointer.
    let p = write(
        dir.path(),
        "wrong_init.ll",
        &format!("define i32 @pfs_init() {{\n  ret i32 0\n}}\n{UPDATE}"),
    );
    assert!(matches!(
        load_any(&p, "pfs_"),
        Err(UserKernelError::WrongSignature { symbol, .. }) if symbol == "pfs_init"
    ));
    let p = write(
        dir.path(),
        "wrong_combine.ll",
        &format!("{INIT}{UPDATE}define i64 @pfs_combine(i64 %a, i8* %b) {{\n  ret i64 %a\n}}\n"),
    );
    assert!(matches!(
        load_any(&p, "pfs_"),
        Err(UserKernelError::WrongSignature { symbol, .. }) if symbol == "pfs_combine"
    ));
}

#[test]
fn missing_symbol_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "noupdate.ll", INIT);
    match load_any(&p, "pfs_") {
        Err(UserKernelError::MissingSymbol { symbol, .. }) => assert_eq!(symbol, "pfs_update"),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    // Right module, wrong prefix.
    let p = write(dir.path(), "ok.ll", &format!("{INIT}{UPDATE}"));
    assert!(matches!(
        load_any(&p, "other_"),
        Err(UserKernelError::MissingSymbol { symbol, .. }) if symbol == "other_init"
    ));
}
