//! `pfs bench mount` with tiny sizes and short jobs: the report's shape
//! (sections, rows, columns, the rows that are not built, the issue's
//! figures), the files `--out` writes, and no mount or scratch directory
//! left behind. Needs root, /dev/fuse and fio: ignored unless asked for
//! (`--ignored`; CI runs it as root), failing, saying why, elsewhere. No
//! assertion is about time.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn why_not() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false);
    if !root {
        return Some("not root (the mount rows mount FUSE and drop the page cache)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    let fio = Command::new("fio").arg("--version").output();
    if !fio.is_ok_and(|o| o.status.success()) {
        return Some("fio is not installed (apt-get install fio)".into());
    }
    None
}

/// Runs to completion, killing it after `limit`; returns its pid too.
fn run(mut cmd: Command, limit: Duration) -> (Output, u32) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn pfs");
    let pid = child.id();
    // Drain stdout while waiting: the JSON report can outgrow a pipe.
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut v);
        v
    });
    let mut stderr = child.stderr.take().expect("stderr");
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = Output {
        status,
        stdout: reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    (out, pid)
}

fn labels(rows: &Value) -> Vec<String> {
    rows.as_array()
        .expect("an array of rows")
        .iter()
        .map(|r| r["label"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
#[ignore = "needs root, FUSE and fio"]
fn bench_mount_tiny_run_has_every_section_and_row() {
    if let Some(why) = why_not() {
        panic!("needs root, FUSE and fio: {why}");
    }
    let out_dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args([
        "bench",
        "mount",
        "--file-size",
        "4M",
        "--runtime",
        "0.5",
        "--ramp",
        "0.2",
        "--first-byte-size",
        "1M",
        "--rounds",
        "1",
        "--tree",
        "synthetic",
        "--tree-files",
        "300",
        "--json",
        "--out",
    ])
    .arg(out_dir.path());
    let (out, pid) = run(cmd, Duration::from_secs(300));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\n--- stderr ---\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(out.status.success(), "exit {}: {v:#}\n{stderr}", out.status);

    // Header.
    let h = &v["header"];
    for key in [
        "kernel", "cores", "fio", "fuse", "mounts", "tree", "method", "units",
    ] {
        assert!(!h[key].is_null(), "header has no {key}: {h:#}");
    }
    assert!(h["fuse"].as_str().unwrap().contains("enable_uring"));
    assert!(h["tree"].as_str().unwrap().starts_with("synthetic: 300 files"));

    // fio: every path × both workloads, tmpfs first, each measured.
    let fio = &v["fio"];
    let paths = [
        "tmpfs (in-kernel)",
        "pfs mount, page cache warm",
        "pfs mount, direct=1 (daemon path)",
        "pfs mount, passthrough, direct=1",
        "pfs mount, cold (remote fetch)",
        "tmpfs pread loop (the direct client's harness)",
        "direct client (zero-copy)",
    ];
    let want: Vec<String> = paths
        .iter()
        .flat_map(|p| [p.to_string(), p.to_string()])
        .collect();
    assert_eq!(labels(fio), want);
    for r in fio.as_array().unwrap() {
        let label = r["label"].as_str().unwrap();
        for col in [
            "iops_1j",
            "iops_2j",
            "MB/s_1j",
            "MB/s_2j",
            "vs_tmpfs_1j",
            "vs_tmpfs_2j",
            "2j/1j",
        ] {
            assert!(r.get(col).is_some(), "{label}: no column {col}");
        }
        assert!(
            r["iops_1j"].as_f64().is_some_and(|x| x > 0.0),
            "{label} did not measure: {r:#}"
        );
        assert!(
            r["iops_2j"].as_f64().is_some_and(|x| x > 0.0),
            "{label} did not measure: {r:#}"
        );
        assert!(r["vs_tmpfs_1j"].as_f64().is_some(), "{r:#}");
        if label == "tmpfs (in-kernel)" {
            assert_eq!(r["vs_tmpfs_1j"], 1.0);
        }
    }

    // The other sections.
    assert_eq!(
        labels(&v["metadata"]),
        [
            "tmpfs (the tree's source copy)",
            "pfs mount, first walk (fresh mount)",
            "pfs mount, again (kernel caches warm)"
        ]
    );
    let dirs = 8 + 64 + 512 + 4096;
    for r in v["metadata"].as_array().unwrap() {
        assert_eq!(r["entries"], 300 + dirs, "{r:#}");
        assert!(r["ls_R_s"].as_f64().is_some(), "{r:#}");
    }
    let fb = &v["first_byte"];
    assert_eq!(
        labels(fb),
        [
            "tmpfs (a file of the same size)",
            "tmpfs (a file of the same size)",
            "pfs mount, cold, file new to the server",
            "pfs mount, cold, server has its recipe",
            "pfs mount, cold, file new to the server",
            "pfs mount, cold, server has its recipe"
        ]
    );
    for r in fb.as_array().unwrap() {
        assert!(r["total_ms"].as_f64().is_some(), "{r:#}");
        assert_eq!(r["rounds"], 1);
    }
    assert_eq!(
        labels(&v["tree_read"]),
        [
            "tmpfs: read every file (the source copy)",
            "pfs send TREE --to (empty destination)",
            "pfs mount, cold: read every file",
            "pfs mount, cold: tar cf - (readdir order)"
        ]
    );
    for r in v["tree_read"].as_array().unwrap() {
        assert_eq!(r["files"], 300, "{r:#}");
    }
    let mounted = &v["tree_read"][2];
    assert!(
        mounted["fetched_MB"].as_f64().is_some_and(|x| x > 0.0),
        "{mounted:#}"
    );

    // The figures, each with a value (every row ran).
    let t = v["targets"].as_array().expect("targets");
    assert_eq!(t.len(), 9, "{t:#?}");
    for x in t {
        assert!(x["value"].as_f64().is_some(), "{x:#}");
        assert!(
            ["met", "missed"].contains(&x["verdict"].as_str().unwrap()),
            "{x:#}"
        );
    }

    // Files.
    for f in [
        "mount-fio.csv",
        "mount-metadata.csv",
        "mount-first-byte.csv",
        "mount-tree-read.csv",
        "mount.json",
        "mount.md",
    ] {
        assert!(out_dir.path().join(f).is_file(), "{f} was not written");
    }
    let csv = std::fs::read_to_string(out_dir.path().join("mount-fio.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 7);
    assert!(csv.starts_with("label,workload,iops_1j,iops_2j,"));

    // Nothing left: no mount, no scratch directory of that run.
    let scratch = format!("pfs-bench-mount-{pid}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&scratch), "a mount was left behind:\n{mounts}");
    assert!(!Path::new("/dev/shm").join(&scratch).exists());
    assert!(!Path::new("/var/tmp").join(&scratch).exists());
}
