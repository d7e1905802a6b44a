//! `pfs bench` as a whole: report completeness, failed rows, and the veth
//! path leaving nothing behind after success, failure or Ctrl-C. Root-only
//! tests are `#[ignore = "needs root …"]` and fail, saying why, when run
//! (`--ignored`) where they cannot.

mod common;
use common::csv_fields;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const COLUMNS: [&str; 15] = [
    "label",
    "purpose",
    "effective_mb",
    "wire_mb",
    "wire_ratio",
    "elapsed_s",
    "effective_mb_s",
    "user_s",
    "sys_s",
    "cpu_total_s",
    "mb_per_cpu_s",
    "integrity",
    "pthreads",
    "transport",
    "notes",
];

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

/// Runs to completion, killing it after `limit`.
fn run(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn pfs");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
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

fn rows(v: &Value) -> &Vec<Value> {
    v["rows"].as_array().expect("rows array")
}

fn row<'a>(v: &'a Value, label: &str) -> &'a Value {
    rows(v)
        .iter()
        .find(|r| r["label"] == label)
        .unwrap_or_else(|| panic!("no row {label}: {v:#}"))
}

fn is_root() -> bool {
    rustix_euid_is_root()
}

fn rustix_euid_is_root() -> bool {
    // `id -u` keeps this test free of extra dependencies.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

fn netns_usable() -> Result<(), String> {
    if !is_root() {
        return Err("not root".into());
    }
    // One name per probe: tests of this binary probe at the same time.
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("pfst-probe-{}-{n}", std::process::id());
    let ok = Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let _ = Command::new("ip").args(["netns", "del", &name]).status();
    if ok {
        Ok(())
    } else {
        Err("cannot create network namespaces here".into())
    }
}

/// Network namespaces, links and processes that a bench with this pid would leave.
fn leftovers(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let ns = format!("pfsb-{pid}");
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    if String::from_utf8_lossy(&list)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(ns.as_str()))
    {
        found.push(format!("netns {ns}"));
    }
    let links = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    let host_if = format!("pfsb{pid}a");
    if String::from_utf8_lossy(&links).contains(&host_if) {
        found.push(format!("link {host_if}"));
    }
    let scratch = format!("pfs-bench-{pid}");
    // The peer address of this pid's veth pair (same formula as the bench's netpath::subnet).
    let peer_ip = format!(
        "10.{}.{}.{}",
        (pid >> 14) & 0xff,
        (pid >> 6) & 0xff,
        ((pid & 0x3f) << 2) + 2
    );
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let mentions_peer = cmdline.split([' ', ':']).any(|w| w == peer_ip);
        if cmdline.contains(&ns) || cmdline.contains(&scratch) || mentions_peer {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    if Path::new("/dev/shm").join(&scratch).exists() || Path::new("/tmp").join(&scratch).exists() {
        found.push(format!("scratch dir {scratch}"));
    }
    found
}

#[test]
fn quick_suite_reports_every_column_and_row() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let mut cmd = pfs();
    cmd.args(["bench", "--size", "16M", "--scale", "0.002", "--json", "--out"])
        .arg(&out_dir);
    let out = run(cmd, Duration::from_secs(300));
    let v = json(&out);
    let failed: Vec<&Value> = rows(&v)
        .iter()
        .filter(|r| r["notes"].as_str().unwrap_or("").starts_with("failed"))
        .collect();
    assert_eq!(
        out.status.code(),
        Some(if failed.is_empty() { 0 } else { 1 }),
        "{failed:#?}"
    );
    for r in rows(&v) {
        let notes = r["notes"].as_str().unwrap();
        // A row that did not run has every figure null (never 0); one that ran has all.
        let ran = !["skipped", "failed", "cut"].iter().any(|s| notes.starts_with(s));
        for c in COLUMNS {
            assert!(r.get(c).is_some(), "row {} has no {c} key: {r:#}", r["label"]);
            assert!(
                !ran || !r[c].is_null(),
                "row {} ran but has no {c}: {r:#}",
                r["label"]
            );
        }
        // A latency row (the handshake) measures time, not bytes.
        let measured = r["effective_mb"].as_f64().is_some_and(|x| x > 0.0)
            || (r["purpose"] == "Latency" && r["elapsed_s"].as_f64().is_some_and(|x| x > 0.0));
        assert!(
            measured || notes.starts_with("skipped: ") || notes.starts_with("failed: "),
            "row {} is neither measured nor skipped/failed: {r:#}",
            r["label"]
        );
    }
    for label in [
        "Conventional (iperf3)",
        "Conventional (scp)",
        "Conventional (rsync)",
        "Conventional (xxh3 loop)",
        "Conventional (QUIC, quinn)",
    ] {
        row(&v, label);
    }
    // Protected sessions: each cipher, and the handshake's latency.
    let offset_protected = rows(&v)
        .iter()
        .find(|r| {
            r["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("Native PFS Offset-only Mode - TCP ("))
        })
        .and_then(|r| r["label"].as_str())
        .expect("a protected offset-only row");
    for label in [
        "PFS-With-Payload-TCP (aes-256-gcm)",
        "PFS-With-Payload-TCP (chacha20-poly1305)",
        offset_protected,
    ] {
        let r = row(&v, label);
        assert_eq!(r["integrity"], "OK", "{r:#}");
        assert!(r["notes"].as_str().unwrap().contains("× plain"), "{r:#}");
    }
    let hs = row(&v, "Noise XX handshake - TCP");
    assert!(hs["notes"].as_str().unwrap().contains("median"), "{hs:#}");
    // Same-host rows over shared-memory rings run whatever the network path.
    for label in [
        "PFS-With-Payload-SHM",
        "Native PFS Offset-only Mode - SHM",
        "Native PFS Arithmetic Mode - SHM",
    ] {
        let r = row(&v, label);
        assert_eq!(r["integrity"], "OK", "{r:#}");
        assert_eq!(r["transport"], "SHM", "{r:#}");
    }
    for h in [
        "git_revision",
        "kernel",
        "cpu_model",
        "cores",
        "thp_mode",
        "sender_blob",
        "receiver_blob",
        "path",
    ] {
        assert!(!v["header"][h].is_null(), "header has no {h}");
    }

    let csv = std::fs::read_to_string(out_dir.join("bench.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(csv_fields(lines.next().unwrap()), COLUMNS);
    let mut n = 0;
    for line in lines {
        let f = csv_fields(line);
        assert_eq!(f.len(), COLUMNS.len(), "{line}");
        // A row that did not run has empty figures (never 0).
        let positive = |x: &str| x.parse::<f64>().is_ok_and(|x| x > 0.0);
        let measured = positive(&f[2]) || (f[1] == "Latency" && positive(&f[5]));
        assert!(
            measured || f[14].starts_with("skipped: ") || f[14].starts_with("failed: "),
            "{line}"
        );
        n += 1;
    }
    assert_eq!(n, rows(&v).len());
    let file_json: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("bench.json")).unwrap()).unwrap();
    assert_eq!(rows(&file_json).len(), n);
    assert!(std::fs::read_to_string(out_dir.join("bench.md"))
        .unwrap()
        .contains("| label |"));
}

#[test]
fn a_failed_baseline_does_not_stop_the_others() {
    let mut cmd = pfs();
    cmd.args([
        "bench",
        "--size",
        "16M",
        "--scale",
        "0.002",
        "--json",
        "--only",
        "rsync",
        "--only",
        "offset-only",
    ])
    .env("PFS_BENCH_RSYNC", "/bin/false");
    let out = run(cmd, Duration::from_secs(300));
    let v = json(&out);
    let rsync = row(&v, "Conventional (rsync)");
    let notes = rsync["notes"].as_str().unwrap();
    assert!(notes.starts_with("failed: "), "{notes}");
    assert!(notes.contains("rsync daemon will not start"), "{notes}");
    let offset = row(&v, "Native PFS Offset-only Mode - TCP");
    assert_eq!(offset["integrity"], "OK", "{offset:#}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the exit status must say something failed"
    );
}

#[test]
#[ignore = "needs root and ip netns"]
fn veth_path_runs_and_cleans_up() {
    if let Err(why) = netns_usable() {
        panic!("needs root and ip netns: {why}");
    }
    let mut cmd = pfs();
    cmd.args([
        "bench", "--path", "veth", "--size", "16M", "--scale", "0.002", "--json",
    ])
    .args([
        "--only",
        "iperf3",
        "--only",
        "offset-only",
        "--only",
        "scp",
        "--only",
        "quinn",
    ]);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    assert!(
        v["header"]["path"].as_str().unwrap().starts_with("veth"),
        "{:#}",
        v["header"]
    );
    assert_eq!(row(&v, "Native PFS Offset-only Mode - TCP")["integrity"], "OK");
    // The QUIC server ran in the namespace, its datagrams sized by the veth MTU.
    let quic = row(&v, "Conventional (QUIC, quinn)");
    assert!(quic["effective_mb"].as_f64().unwrap() > 0.0, "{quic:#}");
    assert!(
        quic["notes"]
            .as_str()
            .unwrap()
            .contains("MTU discovery up to 1472 B"),
        "{quic:#}"
    );
    for r in rows(&v) {
        assert!(!r["notes"].as_str().unwrap().starts_with("failed"), "{r:#}");
    }
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

#[test]
#[ignore = "needs root and ip netns"]
fn veth_path_cleans_up_after_a_failure() {
    if let Err(why) = netns_usable() {
        panic!("needs root and ip netns: {why}");
    }
    let mut cmd = pfs();
    cmd.args([
        "bench", "--path", "veth", "--size", "16M", "--scale", "0.002", "--json",
    ])
    .args(["--only", "iperf3 -l", "--only", "arithmetic"])
    .env("PFS_BENCH_IPERF3", "/bin/false");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    assert!(row(&v, "Conventional (iperf3 -l 1M)")["notes"]
        .as_str()
        .unwrap()
        .starts_with("failed"));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(leftovers(pid), Vec::<String>::new());
}

#[test]
#[ignore = "needs root and ip netns"]
fn veth_path_cleans_up_after_ctrl_c() {
    if let Err(why) = netns_usable() {
        panic!("needs root and ip netns: {why}");
    }
    let mut cmd = pfs();
    // Long enough to be interrupted mid-run.
    cmd.args([
        "bench", "--path", "veth", "--size", "64M", "--scale", "2", "--only", "iperf3",
    ]);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait until the namespace and a server inside it exist.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = leftovers(pid);
        if found.iter().any(|f| f.starts_with("netns")) && found.iter().any(|f| f.starts_with("process")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bench never set up its namespace: {found:?}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the bench ended before it could be interrupted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the bench did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    // Killed children are reaped asynchronously by init; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut found = leftovers(pid);
    while !found.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        found = leftovers(pid);
    }
    assert_eq!(found, Vec::<String>::new());
}

/// Namespaces and servers an emulated-link bench with this pid would leave
/// (its servers listen on the link's fixed receiver address).
fn link_leftovers(pid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let prefix = format!("pfse-{pid}-");
    for entry in std::fs::read_dir("/run/netns").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) {
            found.push(format!("netns {name}"));
        }
    }
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&prefix) || cmdline.split([' ', ':']).any(|w| w == "192.168.77.2") {
            found.push(format!(
                "process {}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

fn wait_gone(pid: u32) -> Vec<String> {
    // Killed children are reaped asynchronously by init; give them a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut found = link_leftovers(pid);
    while !found.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        found = link_leftovers(pid);
    }
    found
}

/// One test for both runs: they share the link's fixed addresses, so they
/// must not overlap.
#[test]
#[ignore = "needs root, ip netns, /dev/net/tun and nft"]
fn emulated_link_runs_reports_and_cleans_up_even_after_ctrl_c() {
    if let Err(why) = netns_usable() {
        panic!("needs root and ip netns: {why}");
    }
    if !Path::new("/dev/net/tun").exists() || Command::new("nft").arg("--version").output().is_err() {
        panic!("needs /dev/net/tun and nft (apt-get install nftables)");
    }
    let mut cmd = pfs();
    cmd.args(["bench", "--size", "16M", "--scale", "0.002", "--json"])
        .args(["--link", "rtt=10ms,rate=200mbit", "--link-loss-sweep", "0,5"])
        .args(["--only", "(iperf3 bbr)", "--only", "mode - tcp xxh3 random"]);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    let link = &v["header"]["link"];
    assert_eq!(link["spec"], "rtt 10 ms, rate 200 Mbit/s", "{link:#}");
    assert_eq!(link["losses_pct"], serde_json::json!([0.0, 5.0]));
    assert!(link["ceiling_mbit_s"].as_f64().unwrap() > 0.0, "{link:#}");
    assert!(
        link["delay"].as_str().unwrap().contains("rtt min/avg/max"),
        "{link:#}"
    );
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    for step in steps {
        let labels: Vec<&str> = step["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["label"].as_str().unwrap())
            .collect();
        assert_eq!(
            labels,
            [
                "Conventional (iperf3 bbr)",
                "Native PFS Offset-only Mode - TCP",
                "Native PFS Arithmetic Mode - TCP"
            ],
            "{step:#}"
        );
        for r in step["rows"].as_array().unwrap() {
            let notes = r["notes"].as_str().unwrap();
            assert!(!notes.starts_with("failed"), "{r:#}");
            if r["label"].as_str().unwrap().starts_with("Native") && !notes.starts_with("cut") {
                assert_eq!(r["integrity"], "OK", "{r:#}");
            }
        }
        // The emulator's own account: nothing longer than the MTU crossed,
        // and the loss rule dropped no more than it saw.
        let fwd = &step["emulator"]["counters"]["forward"];
        assert_eq!(fwd["loss"]["oversize"], 0, "{fwd:#}");
        assert!(fwd["line"]["max_len"].as_u64().unwrap() <= 1500, "{fwd:#}");
        assert!(
            fwd["loss"]["lost"].as_u64() <= fwd["loss"]["seen"].as_u64(),
            "{fwd:#}"
        );
    }
    assert_eq!(steps[0]["emulator"]["counters"]["forward"]["loss"]["lost"], 0);
    let fig = v["figure"].as_array().unwrap();
    assert_eq!(fig.len(), 6, "three rows at two loss rates: {fig:#?}");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(wait_gone(pid), Vec::<String>::new());

    // Interrupted while its rows run: namespaces and servers go too.
    let mut cmd = pfs();
    cmd.args(["bench", "--size", "16M", "--scale", "4", "--only", "iperf3 cubic"])
        .args(["--link", "rtt=20ms,loss=1%"]);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = link_leftovers(pid);
        if found.iter().any(|f| f.starts_with("netns")) && found.iter().any(|f| f.starts_with("process")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bench never set up its link: {found:?}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the bench ended before it could be interrupted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill").args(["-INT", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the bench did not exit after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(wait_gone(pid), Vec::<String>::new());
}
