//! `pfs serve --metrics-listen ADDR`: the Prometheus endpoint shows a
//! file transfer's session and bytes; without the flag nothing more
//! listens than the server's own address.
//!
//! Every child is bounded (see `common`). HOME is a temporary directory.

mod common;
use common::{run, Server};

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn pfs(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pfs"));
    c.env("HOME", home).env_remove("XDG_CONFIG_HOME");
    c
}

/// A loopback port free a moment ago (the endpoint's address must be
/// known before the server starts).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    body.to_string()
}

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// TCP sockets process `pid` listens on (its descriptors matched against
/// /proc/net/tcp{,6} rows in state LISTEN).
fn listening_sockets(pid: u32) -> usize {
    let mut inodes = HashSet::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fd")).expect("the server's descriptors") {
        let Ok(link) = fs::read_link(fd.unwrap().path()) else {
            continue;
        };
        let link = link.to_string_lossy().to_string();
        if let Some(inode) = link.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
            inodes.insert(inode.to_string());
        }
    }
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = fs::read_to_string(table).unwrap_or_default();
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" && inodes.contains(cols[9]) {
                n += 1;
            }
        }
    }
    n
}

fn serve(home: &Path, metrics: Option<&str>) -> Server {
    let mut cmd = pfs(home);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-sessions",
        "2",
        "--dest",
    ])
    .arg(home.join("dest"));
    if let Some(addr) = metrics {
        cmd.args(["--metrics-listen", addr]);
    }
    Server::spawn(cmd)
}

#[test]
fn metrics_show_a_file_transfer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path();
    let data = common::noise(200_000, 7);
    let src = home.join("a.bin");
    fs::write(&src, &data).unwrap();
    let at = format!("127.0.0.1:{}", free_port());
    let server = serve(home, Some(&at));
    let pid = server.guard.0.as_ref().expect("server child").id();
    // The server's own listener and the endpoint.
    assert_eq!(listening_sockets(pid), 2);
    let before = scrape(&at);
    let version = format!("pfs_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(value(&before, &version), 1.0);
    assert_eq!(
        value(&before, "pfs_sessions_total{service=\"files\",outcome=\"ok\"}"),
        0.0
    );
    let mut send = pfs(home);
    send.arg("send")
        .arg(&src)
        .args(["--to", &server.addr, "--progress", "never", "--cache-dir"])
        .arg(home.join("cache"));
    run(send).expect_code(0, "pfs send");
    let after = scrape(&at);
    assert_eq!(
        value(&after, "pfs_sessions_total{service=\"files\",outcome=\"ok\"}"),
        1.0
    );
    assert_eq!(value(&after, "pfs_sessions_active{service=\"files\"}"), 0.0);
    assert_eq!(
        value(&after, "pfs_effective_bytes_total{service=\"files\"}"),
        data.len() as f64
    );
    assert!(value(&after, "pfs_wire_bytes_total{service=\"files\",direction=\"in\"}") >= data.len() as f64);
    assert_eq!(
        value(&after, "pfs_session_duration_seconds_count{service=\"files\"}"),
        1.0
    );
    drop(server);
}

#[test]
fn no_metrics_listener_without_the_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = serve(tmp.path(), None);
    let pid = server.guard.0.as_ref().expect("server child").id();
    assert_eq!(listening_sockets(pid), 1, "only the server's own address listens");
    drop(server);
}

/// An address that is not IP:PORT is a usage error, before anything starts.
#[test]
fn a_metrics_address_without_a_port_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cmd = pfs(tmp.path());
    cmd.args(["serve", "--metrics-listen", "localhost", "--dest"])
        .arg(tmp.path().join("dest"));
    let out = run(cmd);
    out.expect_code(2, "pfs serve --metrics-listen localhost");
    assert!(out.stderr.contains("--metrics-listen"), "{}", out.stderr);
}

#[test]
fn a_metrics_address_in_use_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut cmd = pfs(tmp.path());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        &addr,
        "--dest",
    ])
    .arg(tmp.path().join("dest"));
    let out = run(cmd);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("metrics endpoint: cannot listen on") && out.stderr.contains(&addr),
        "{}",
        out.stderr
    );
}
