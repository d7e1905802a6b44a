//! End-to-end test of `pfs bench stream` on tiny sizes: the report's shape
//! (throughput rows for every size, transport and baseline; the latency
//! rows; the targets), every row ran or says why not, the JSON parses and
//! the files of `--out` are written. Never asserts on timing or on ratios
//! between methods. The run is killed after [`CMD_TIMEOUT`].

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest the study run may take before the test kills it and fails.
const CMD_TIMEOUT: Duration = Duration::from_secs(240);

/// Bytes per throughput row, and timed round trips per latency row.
const BYTES: u64 = 128 << 10;
const ROUND_TRIPS: u64 = 100;

fn study(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pfs"))
        .args(["bench", "stream", "--bytes", &BYTES.to_string()])
        .args(["--round-trips", &ROUND_TRIPS.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pfs");
    let t0 = Instant::now();
    while child.try_wait().expect("wait for pfs").is_none() {
        if t0.elapsed() > CMD_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pfs bench stream {args:?} ran longer than {CMD_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("collect output")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A row that ran has its figures and no error; one that did not says why.
fn ran_or_says_why(r: &Value, figures: &[&str]) -> bool {
    match r["status"].as_str() {
        Some("ok") => {
            assert!(r["error"].is_null(), "{r}");
            for k in figures {
                assert!(r[*k].is_number(), "{k} missing in {r}");
            }
            true
        }
        Some("skipped" | "failed") => {
            assert!(
                r["error"].as_str().is_some_and(|e| !e.is_empty()),
                "no reason in {r}"
            );
            for k in figures {
                assert!(r[*k].is_null(), "{k} has a value in a row that did not run: {r}");
            }
            false
        }
        _ => panic!("no status in {r}"),
    }
}

#[test]
fn every_row_ran_or_says_why_and_the_json_parses() {
    let dir = tempfile::tempdir().expect("scratch");
    let out_dir = dir.path().join("out");
    let out = study(&["--json", "--out", out_dir.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success(),
        "pfs bench stream failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let j = json(&out);
    assert_eq!(j["header"]["round_trips"], ROUND_TRIPS, "{}", j["header"]);
    assert_eq!(j["header"]["bytes_per_row"], BYTES, "{}", j["header"]);
    assert!(j["header"]["load_average"].is_string(), "{}", j["header"]);

    let rows = j["throughput"].as_array().expect("throughput rows");
    for size in [64u64, 1024, 65536] {
        let at: Vec<&Value> = rows.iter().filter(|r| r["size_bytes"] == size).collect();
        let labels: Vec<(&str, &str)> = at
            .iter()
            .map(|r| {
                (
                    r["method"].as_str().unwrap_or(""),
                    r["transport"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            labels,
            [
                ("PFS stream", "TCP"),
                ("PFS stream", "Unix"),
                ("PFS stream", "SHM"),
                ("PFS stream", "UDP"),
                ("send() per message", "TCP"),
                ("writev batched", "TCP"),
                ("ZeroMQ PUSH/PULL", "TCP"),
            ],
            "rows at {size} B"
        );
        for r in &at {
            let figures = ["messages", "bytes", "secs", "messages_per_s", "mb_s"];
            if ran_or_says_why(r, &figures) {
                assert_eq!(r["messages"].as_u64(), Some(BYTES / size), "{r}");
                assert_eq!(r["bytes"].as_u64(), Some(BYTES), "{r}");
            }
        }
        // On loopback no row fails (the exit code says so too).
        assert!(at.iter().all(|r| r["status"] != "failed"), "{at:?}");
    }
    let zmq = rows
        .iter()
        .find(|r| r["method"] == "ZeroMQ PUSH/PULL")
        .expect("ZeroMQ row");
    assert_eq!(zmq["status"], "skipped", "{zmq}");
    assert_eq!(zmq["error"], "ZeroMQ baseline not built", "{zmq}");

    let latency = j["latency"].as_array().expect("latency rows");
    let methods: Vec<&str> = latency
        .iter()
        .map(|r| r["method"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(methods, ["PFS stream", "socket ping-pong", "ZeroMQ REQ/REP"]);
    for r in latency {
        let figures = ["p50_us", "p99_us", "p999_us", "max_us", "mean_us"];
        if ran_or_says_why(r, &figures) {
            assert_eq!(r["round_trips"].as_u64(), Some(ROUND_TRIPS), "{r}");
            assert!(r["p50_us"].as_f64() <= r["p999_us"].as_f64(), "{r}");
            assert!(r["p999_us"].as_f64() <= r["max_us"].as_f64(), "{r}");
        }
    }
    assert_eq!(latency[0]["status"], "ok", "{}", latency[0]);
    assert_eq!(latency[1]["status"], "ok", "{}", latency[1]);

    let targets = j["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 2, "{targets:?}");
    for t in targets {
        assert!(t["value"].is_number(), "{t}");
        assert!(
            ["met", "missed"].contains(&t["verdict"].as_str().unwrap_or("")),
            "{t}"
        );
    }

    for f in ["stream-throughput.csv", "stream-latency.csv", "stream.md"] {
        let text = std::fs::read_to_string(out_dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(text.lines().count() > 3, "{f}:\n{text}");
    }
    let written: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("stream.json")).expect("stream.json"))
            .expect("JSON");
    assert_eq!(written["throughput"].as_array().map(Vec::len), Some(rows.len()));
}

#[test]
fn the_terminal_report_has_every_table() {
    let out = study(&["--transports", "tcp", "--sizes", "64"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "pfs bench stream",
        "Throughput:",
        "Round trip, 64 B, TCP loopback:",
        "Targets",
        "skipped: ZeroMQ baseline not built",
        "load average",
    ] {
        assert!(text.contains(needle), "no {needle:?} in:\n{text}");
    }
    // One size and one transport: PFS, two baselines and ZeroMQ.
    assert_eq!(
        text.lines().filter(|l| l.trim_start().starts_with("64 ")).count(),
        4,
        "{text}"
    );
}
