//! `pfs exec` and `pfs serve --exec`: one answer whatever the pThread count,
//! the encoding, or whether the schedule arrived over the network.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn pfs(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pfs"));
    c.args(args).stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{c:?} did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

const BLOB: [&str; 2] = ["--size", "16M"];
const SCHED: [&str; 4] = ["--bytes", "48M", "--max-len", "64K"];

fn exec(kernel: &str, extra: &[&str]) -> Value {
    let mut args = vec!["exec", "--kernel", kernel, "--json", "--no-pin"];
    args.extend(BLOB);
    args.extend(SCHED);
    args.extend(extra);
    let out = run(pfs(&args));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json(&out)
}

#[test]
fn same_result_for_any_pthreads_and_encoding() {
    for kernel in ["xxh3", "crc32c", "sum", "count:0x00", "histogram", "gather"] {
        let base = exec(kernel, &[]);
        assert_eq!(base["label"], "pCPU Offset-mode");
        assert_eq!(base["effective_bytes"], 48u64 << 20);
        for extra in [
            &["--pthreads", "2"][..],
            &["--pthreads", "3"],
            &["--encoding", "arith"],
            &["--encoding", "arith", "--pthreads", "2"],
        ] {
            let other = exec(kernel, extra);
            assert_eq!(other["output"], base["output"], "{kernel} {extra:?}");
        }
    }
    let arith = exec("xxh3", &["--encoding", "arith", "--pattern", "sequential"]);
    assert_eq!(arith["label"], "pCPU Arithmetic-mode");
    assert!(
        arith["table_bytes_per_descriptor"].as_f64().unwrap() < 4.5,
        "{arith:#}"
    );
}

#[test]
fn order_dependent_and_unknown_kernels_are_clear_errors() {
    let mut args = vec!["exec", "--kernel", "fnv1a64", "--pthreads", "2"];
    args.extend(BLOB);
    args.extend(SCHED);
    let out = run(pfs(&args));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run on 2 pThreads"), "{err}");

    let out = run(pfs(&["exec", "--kernel", "md5", "--size", "16M"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("md5") && err.contains("xxh3"), "{err}");
}

#[test]
fn serve_exec_matches_local_exec() {
    let local = exec("crc32c", &[]);
    let report = serve_exec_send("arith", &[]);
    assert_eq!(report["exec"]["output"], local["output"], "{report:#}");
}

/// Builds `examples/kernels/<name>.c` into `dir`, or None when no C compiler is here.
fn build_kernel(dir: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/kernels/{name}.c"));
    let out = dir.join(format!("{name}.so"));
    let ok = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    ok.then_some(out)
}

#[test]
#[ignore = "needs a C compiler (cc)"]
fn user_kernels_match_their_builtin_twins_and_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let sum = build_kernel(dir.path(), "sum").expect("needs a C compiler (cc) to build examples/kernels");
    let fnv = build_kernel(dir.path(), "fnv1a").unwrap();
    let zeros = build_kernel(dir.path(), "count_zero").unwrap();
    for (builtin, user) in [("sum", &sum), ("fnv1a64", &fnv), ("count:0x00", &zeros)] {
        let spec = format!("user:{}", user.display());
        assert_eq!(
            exec(&spec, &[])["output"],
            exec(builtin, &[])["output"],
            "{builtin}"
        );
        assert_eq!(
            exec(&spec, &["--encoding", "arith"])["output"],
            exec(builtin, &[])["output"],
            "{builtin}"
        );
    }

    let missing = format!("user:{}:nope_", sum.display());
    let out = run(pfs(&["exec", "--kernel", &missing, "--size", "16M"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no symbol `nope_init`"));

    let not_so = dir.path().join("not-a-library.so");
    std::fs::write(&not_so, b"this is text, not ELF").unwrap();
    let out = run(pfs(&[
        "exec",
        "--kernel",
        &format!("user:{}", not_so.display()),
        "--size",
        "16M",
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot load"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = run(pfs(&[
        "exec",
        "--kernel",
        &format!("user:{}", sum.display()),
        "--pthreads",
        "2",
        "--size",
        "16M",
    ]));
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn recorded_grams_replay_to_the_same_result() {
    let rec = tempfile::tempdir().unwrap();
    let report = serve_exec_send("offset", &["--record", rec.path().to_str().unwrap()]);
    let files: Vec<_> = std::fs::read_dir(rec.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = files[0].to_str().unwrap();
    for extra in [&[][..], &["--pthreads", "2"], &["--encoding", "arith"]] {
        let mut a = vec!["--gram-file", file];
        a.extend_from_slice(extra);
        let replay = exec("crc32c", &a);
        assert_eq!(replay["output"], report["exec"]["output"], "{extra:?}");
        assert_eq!(replay["effective_bytes"], 48u64 << 20);
    }
    assert_eq!(exec("crc32c", &[])["output"], report["exec"]["output"]);

    // A damaged file is refused before anything runs.
    let mut bytes = std::fs::read(file).unwrap();
    let n = bytes.len();
    bytes.truncate(n - 3);
    let bad = rec.path().join("bad.grams");
    std::fs::write(&bad, bytes).unwrap();
    let out = run(pfs(&[
        "exec",
        "--kernel",
        "crc32c",
        "--size",
        "16M",
        "--gram-file",
        bad.to_str().unwrap(),
    ]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gram file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `pfs serve --once --json --exec crc32c` (plus `extra`), runs one
/// `pfs send --mode MODE` against it, and returns the server's report event.
fn serve_exec_send(mode: &str, extra: &[&str]) -> Value {
    let mut server = pfs(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--once",
        "--json",
        "--exec",
        "crc32c",
        "--size",
        "16M",
    ])
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let addr = first["addr"].as_str().unwrap().to_string();
    let mut args = vec!["send", "--to", &addr, "--mode", mode, "--json"];
    args.extend(BLOB);
    args.extend(SCHED);
    let out = run(pfs(&args));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = lines
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .find(|v| v["event"] == "report")
        .expect("a report event");
    let _ = server.kill();
    let _ = server.wait();
    report
}
