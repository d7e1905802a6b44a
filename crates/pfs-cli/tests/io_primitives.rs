//! End-to-end test of `pfs bench io-primitives` on a tiny grid: every cell of
//! every method runs and reports, the CSV is written. Never asserts on
//! timing or on ratios between methods. The child is killed after
//! [`CMD_TIMEOUT`].

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest the study may run before the test kills it and fails.
const CMD_TIMEOUT: Duration = Duration::from_secs(240);

#[test]
fn tiny_grid_reports_every_cell() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pfs"))
        .args(["bench", "io-primitives", "--sizes", "64,4K", "--threads", "1,2"])
        .args(["--duration", "0.1", "--json", "--out"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pfs");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for pfs") {
            break s;
        }
        if t0.elapsed() > CMD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pfs bench io-primitives ran longer than {CMD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("collect output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        status.success(),
        "exit {status:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("JSON: {e}\n{stdout}"));
    let cells = v["cells"].as_array().expect("cells array");
    assert_eq!(cells.len(), 4 * 2 * 2, "{stdout}");
    for method in ["a1", "a2", "a3", "a4"] {
        for size in [64u64, 4096] {
            for threads in [1u64, 2] {
                let c = cells
                    .iter()
                    .find(|c| c["method"] == method && c["msg_size"] == size && c["threads"] == threads)
                    .unwrap_or_else(|| panic!("no cell {method} {size} B × {threads}"));
                assert_eq!(c["status"], "ok", "{c}");
                assert!(c["gbit_s"].as_f64().unwrap() > 0.0, "{c}");
                assert!(c["messages"].as_u64().unwrap() > 0, "{c}");
                assert!(
                    c["logical_bytes"].as_u64().unwrap() >= c["messages"].as_u64().unwrap() * size,
                    "{c}"
                );
                for k in ["cycles_per_byte", "llc_misses"] {
                    assert!(c[k].is_null() || c[k].is_number(), "{k} in {c}");
                }
                if method == "a3" {
                    assert!(c["zc_completions"].is_u64() && c["zc_copied"].is_u64(), "{c}");
                }
                if method == "a4" {
                    assert!(c["grams"].as_u64().unwrap() > 0, "{c}");
                }
            }
        }
    }
    assert!(v["header"]["hardware_counters"].is_string());

    let csv = std::fs::read_to_string(dir.path().join("io-primitives.csv")).expect("io-primitives.csv");
    let header = csv.lines().next().expect("CSV header");
    assert!(header.starts_with("method,msg_size,threads,gbit_s"), "{header}");
    assert_eq!(csv.lines().count(), 1 + cells.len());
    let columns = header.split(',').count();
    for line in csv.lines().skip(1).filter(|l| !l.contains('"')) {
        assert_eq!(line.split(',').count(), columns, "{line}");
    }
}

#[test]
fn rejects_bad_options() {
    for args in [
        &["--sizes", "4"][..],
        &["--duration", "0"][..],
        &["--methods", "a9"][..],
        &["--zc-inflight", "100", "--pool", "10"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pfs"))
            .args(["bench", "io-primitives"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run pfs");
        assert!(!out.status.success(), "{args:?} was accepted");
    }
}
