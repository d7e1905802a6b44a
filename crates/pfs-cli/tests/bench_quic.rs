//! The QUIC baseline (`Conventional (QUIC, quinn)`): the hidden peer pair
//! `pfs bench quic-peer server|client` on loopback — every byte delivered
//! and counted by the receiver, quinn's statistics reported, a bounded
//! transfer that runs out of time, a client that does not trust the server —
//! and the two rows in a quick `pfs bench` run. No timing is asserted.

mod common;
use common::{run, Out, Server};

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn pfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pfs"))
}

fn server(bytes: &str, cert: &Path, timeout: &str) -> Server {
    let mut cmd = pfs();
    cmd.args(["bench", "quic-peer", "server", "--listen", "127.0.0.1:0"])
        .args(["--bytes", bytes, "--timeout", timeout, "--cert-out"])
        .arg(cert);
    Server::spawn(cmd)
}

fn client(addr: &str, cert: &Path, bytes: &str, cc: &str, timeout: &str) -> Out {
    let mut cmd = pfs();
    cmd.args(["bench", "quic-peer", "client", "--connect", addr, "--cert"])
        .arg(cert)
        .args(["--bytes", bytes, "--cc", cc, "--timeout", timeout]);
    run(cmd)
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v:#}"))
}

#[test]
fn peer_pair_delivers_every_byte_with_either_congestion_controller() {
    let tmp = tempfile::tempdir().unwrap();
    const N: u64 = 64 << 20;
    for cc in ["cubic", "bbr"] {
        let cert = tmp.path().join(format!("{cc}.der"));
        let mut srv = server("64M", &cert, "120");
        let out = client(&srv.addr, &cert, "64M", cc, "120");
        out.expect_code(0, "quic-peer client");
        let report = out.json("quic-peer client");
        assert_eq!(report["cc"], cc);
        assert_eq!(report["timed_out"], false);
        assert_eq!(u(&report, "sent"), N);
        // The receiver's count, answered on the stream.
        let receipt = &report["receipt"];
        assert_eq!(u(receipt, "bytes"), N, "{report:#}");
        assert!(receipt["elapsed_s"].as_f64().unwrap() > 0.0, "{report:#}");
        let stats = &report["stats"];
        for key in [
            "udp_tx_datagrams",
            "udp_tx_ios",
            "udp_rx_datagrams",
            "udp_rx_bytes",
            "sent_packets",
            "cwnd",
        ] {
            assert!(u(stats, key) > 0, "{key} is 0: {report:#}");
        }
        // Every stream byte crossed as UDP payload, with QUIC's overhead on top.
        assert!(u(stats, "udp_tx_bytes") > N, "{report:#}");
        assert!(u(stats, "mtu") >= 1200, "{report:#}");
        assert!(report["socket_buffers"][0].as_u64().unwrap() > 0, "{report:#}");

        let done = srv.wait_event("done");
        assert_eq!(done["complete"], true, "{done:#}");
        assert_eq!(u(&done["receipt"], "bytes"), N);
        assert!(done["error"].is_null(), "{done:#}");
        srv.finish().expect_code(0, "quic-peer server");
    }
}

#[test]
fn a_transfer_that_runs_out_of_time_reports_what_arrived() {
    let tmp = tempfile::tempdir().unwrap();
    let cert = tmp.path().join("cert.der");
    // Far more than one second can move.
    let mut srv = server("1T", &cert, "60");
    let out = client(&srv.addr, &cert, "1T", "cubic", "1");
    out.expect_code(1, "quic-peer client past its timeout");
    let report = out.json("quic-peer client");
    assert_eq!(report["timed_out"], true, "{report:#}");
    assert!(report["receipt"].is_null(), "{report:#}");
    assert!(u(&report, "sent") < 1 << 40, "{report:#}");
    let done = srv.wait_event("done");
    assert_eq!(done["complete"], false, "{done:#}");
    assert!(u(&done["receipt"], "bytes") < 1 << 40, "{done:#}");
    assert!(done["error"].as_str().is_some(), "{done:#}");
    srv.finish()
        .expect_code(1, "quic-peer server of an incomplete transfer");
}

#[test]
fn a_client_that_does_not_trust_the_certificate_is_refused_and_the_next_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let cert = tmp.path().join("cert.der");
    let other = tmp.path().join("other.der");
    let mut srv = server("1M", &cert, "60");
    // Another server's certificate: valid, but not this server's.
    drop(server("1M", &other, "60"));
    let refused = client(&srv.addr, &other, "1M", "cubic", "30");
    assert_ne!(refused.code(), Some(0), "{refused:?}");
    assert!(refused.stderr.contains("QUIC handshake"), "{}", refused.stderr);
    // Not a certificate at all: a clear error before any packet.
    let junk = tmp.path().join("junk.der");
    std::fs::write(&junk, b"not a certificate").unwrap();
    let bad = client(&srv.addr, &junk, "1M", "cubic", "30");
    assert_ne!(bad.code(), Some(0), "{bad:?}");
    assert!(bad.stderr.contains("not a usable certificate"), "{}", bad.stderr);
    // The server is still there for a client that trusts it.
    let ok = client(&srv.addr, &cert, "1M", "cubic", "30");
    ok.expect_code(0, "quic-peer client after a refused one");
    assert_eq!(u(&ok.json("client")["receipt"], "bytes"), 1 << 20);
    assert_eq!(srv.wait_event("done")["complete"], true);
    let out = srv.finish();
    out.expect_code(0, "quic-peer server");
    assert!(out.stderr.contains("handshake with"), "{}", out.stderr);
}

#[test]
fn quick_suite_shows_both_quinn_rows() {
    let mut cmd = pfs();
    cmd.args([
        "bench", "--size", "16M", "--scale", "0.002", "--json", "--only", "quinn", "--only", "iperf3",
    ]);
    let out = run(cmd);
    out.expect_code(0, "pfs bench --only quinn");
    let v = out.json("pfs bench");
    let rows: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["label"] == "Conventional (QUIC, quinn)")
        .collect();
    assert_eq!(rows.len(), 2, "{v:#}");
    for (r, cc) in rows.iter().zip(["cc=cubic", "cc=bbr"]) {
        let notes = r["notes"].as_str().unwrap();
        assert!(notes.starts_with(cc), "{r:#}");
        assert!(notes.contains("windows 64 MiB"), "{r:#}");
        assert_eq!(r["transport"], "UDP", "{r:#}");
        assert!(r["effective_mb"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["wire_mb"].as_f64().unwrap() > 0.0, "{r:#}");
        // Compared with one TCP stream of the same run, when iperf3 ran.
        let iperf_ran = v["rows"].as_array().unwrap().iter().any(|o| {
            o["label"] == "Conventional (iperf3)" && !o["notes"].as_str().unwrap().starts_with("skipped")
        });
        assert_eq!(notes.contains("× iperf3"), iperf_ran, "{r:#}");
    }
}
