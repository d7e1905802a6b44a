//! End-to-end sessions over TCP loopback: every mode × integrity algorithm,
//! a damaged receiver blob, and hostile clients that must not stop the
//! server from serving the next well-behaved one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use pfs_exec::{Pattern, Schedule, ScheduleSpec, Total};
use pfs_session::{
    send_session, serve, GramSenderConfig, ServerConfig, ServerEvent, SessionError, SessionStats,
};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport};
use pfs_wire::{
    put_frame, Descriptor, Encoding, ErrorFrame, Frame, FrameType, GramHeader, IntegrityAlg, Mode,
};

const BLOB_LEN: usize = 8 << 20;

mod common;
use common::{gram_frame, gram_frame_raw, hello_frame, view};

fn blob_bytes(seed: u64) -> Vec<u8> {
    common::blob_bytes(seed, BLOB_LEN)
}

fn spec(pattern: Pattern, grams: u64) -> ScheduleSpec {
    ScheduleSpec {
        seed: 11,
        desc_per_gram: 64,
        max_len: 64 * 1024,
        align: 64,
        pattern,
        total: Total::Grams(grams),
        blob_len: BLOB_LEN as u64,
    }
}

fn sender_cfg(mode: Mode, integrity: IntegrityAlg, spec: ScheduleSpec) -> GramSenderConfig {
    GramSenderConfig {
        mode,
        integrity,
        spec,
        reply_timeout: Duration::from_secs(20),
        log_interval: None,
        session_nonce: 1,
        payload_budget: pfs_session::DEFAULT_PAYLOAD_BUDGET,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
    }
}

/// Runs a server for `sessions` sessions on its own thread, `clients` on this one.
/// Returns the server's (ok, failed) counts and the failure messages it logged.
fn with_server<F: FnOnce(&str)>(
    receiver_blob: &[u8],
    sessions: u64,
    clients: F,
) -> ((u64, u64), Vec<String>) {
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let failures = Mutex::new(Vec::new());
    let cfg = ServerConfig {
        max_sessions: Some(sessions),
        ..ServerConfig::default()
    };
    let counts = std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve(
                &listener,
                &view(receiver_blob),
                &cfg,
                &Default::default(),
                &|ev| {
                    if let ServerEvent::Failed { error, .. } = ev {
                        failures.lock().unwrap().push(error.to_string());
                    }
                },
            )
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clients(&addr)));
        if let Err(panic) = result {
            // Let the server reach its session count so the scope can end.
            for _ in 0..sessions {
                let _ = TcpStream::connect(&addr);
            }
            let _ = server.join();
            std::panic::resume_unwind(panic);
        }
        server.join().unwrap()
    });
    (counts, failures.into_inner().unwrap())
}

fn send(
    addr: &str,
    blob: &[u8],
    cfg: &GramSenderConfig,
) -> Result<pfs_session::GramSenderOutcome, SessionError> {
    let mut t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
    send_session(&mut t, &view(blob), cfg, &mut |_| {})
}

#[test]
fn every_mode_and_integrity_is_ok() {
    let blob = blob_bytes(1);
    let modes = [Mode::Payload, Mode::Offset, Mode::Arith];
    let algs = [IntegrityAlg::Xxh3, IntegrityAlg::Fnv1a, IntegrityAlg::None];
    let ((ok, failed), _) = with_server(&blob, 9, |addr| {
        for mode in modes {
            for alg in algs {
                let pattern = if mode == Mode::Arith {
                    Pattern::Sequential
                } else {
                    Pattern::Random
                };
                let sent = send(addr, &blob, &sender_cfg(mode, alg, spec(pattern, 12)));
                if alg == IntegrityAlg::None && mode != Mode::Payload {
                    // Nothing would touch the bytes: refused rather than reported as work.
                    let msg = sent.unwrap_err().to_string();
                    assert!(msg.contains("execute nothing"), "{msg}");
                    continue;
                }
                let out = sent.unwrap();
                let st = SessionStats::from_report(&out.report, "TCP", "test session".into());
                assert_eq!(st.integrity, "OK", "{mode:?} {alg:?}");
                if mode == Mode::Payload {
                    // Batches of ~2 MiB are cut into grams of at most 1 MiB of payload.
                    assert!(out.report.grams > 12, "{}", out.report.grams);
                } else {
                    assert_eq!(out.report.grams, 12);
                }
                assert_eq!(out.report.grams, out.summary.grams);
                assert_eq!(out.report.descriptors, 12 * 64);
                assert_eq!(out.report.effective_bytes, out.summary.effective_bytes);
                if mode == Mode::Payload {
                    assert_eq!(out.report.payload_bytes, out.report.effective_bytes);
                    assert!(st.wire_ratio > 1.0);
                } else {
                    assert_eq!(out.report.payload_bytes, 0);
                    assert!(st.wire_ratio < 0.01, "{mode:?}: {}", st.wire_ratio);
                }
                if mode == Mode::Arith {
                    // sequential pattern: ≤ 4 table bytes per descriptor
                    assert!(
                        out.table_bytes <= 4 * out.report.descriptors,
                        "{}",
                        out.table_bytes
                    );
                }
            }
        }
    });
    assert_eq!((ok, failed), (7, 2));
}

/// The first gram (in sequence order) whose descriptors cover `byte`.
fn first_gram_covering(spec: ScheduleSpec, byte: u64) -> Option<u64> {
    let mut s = Schedule::new(spec).unwrap();
    let mut g = Vec::new();
    let mut seq = 0;
    while s.next_gram(&mut g) {
        if g.iter().any(|d| d.offset <= byte && byte < d.end().unwrap()) {
            return Some(seq);
        }
        seq += 1;
    }
    None
}

#[test]
fn flipped_byte_is_a_mismatch_naming_the_gram() {
    let blob = blob_bytes(2);
    for mode in [Mode::Offset, Mode::Payload, Mode::Arith] {
        let pattern = if mode == Mode::Arith {
            Pattern::Sequential
        } else {
            Pattern::Random
        };
        let sp = spec(pattern, 20);
        // A byte inside the first descriptor of gram 5.
        let mut s = Schedule::new(sp).unwrap();
        let mut g = Vec::new();
        for _ in 0..=5 {
            s.next_gram(&mut g);
        }
        let target = g[0].offset + u64::from(g[0].len) / 2;
        let expect = first_gram_covering(sp, target).unwrap();
        let mut damaged = blob.clone();
        damaged[target as usize] ^= 0x01;
        let ((ok, _), _) = with_server(&damaged, 2, |addr| {
            for alg in [IntegrityAlg::Xxh3, IntegrityAlg::Fnv1a] {
                // One gram per schedule batch, so gram numbers match the schedule's.
                let cfg = GramSenderConfig {
                    payload_budget: u64::MAX,
                    ..sender_cfg(mode, alg, sp)
                };
                let out = send(addr, &blob, &cfg).unwrap();
                let st = SessionStats::from_report(&out.report, "TCP", "test session".into());
                assert_eq!(st.integrity, "MISMATCH", "{mode:?}");
                assert_eq!(st.first_mismatch_seq, Some(expect), "{mode:?}");
                assert!(st.mismatched_grams >= 1);
                assert!(!st.ok());
            }
        });
        assert_eq!(ok, 2);
    }
}

/// Writes `bytes` raw and returns the ERROR frame the server answers with
/// (skipping a HELLO_ACK), if any.
fn raw_exchange(addr: &str, bytes: &[u8], close_write: bool) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(bytes);
    if close_write {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let mut at = 0;
    while let Ok((f, used)) = Frame::parse(&got[at..]) {
        if f.header.frame_type == FrameType::Error {
            let e = ErrorFrame::parse(f.body).unwrap();
            return Some((e.code, e.message.to_string()));
        }
        at += used;
    }
    None
}

#[test]
fn hostile_clients_get_errors_and_the_server_keeps_serving() {
    let blob = blob_bytes(3);
    let fp = [7u8; 32];
    let hello = hello_frame(Mode::Offset, BLOB_LEN as u64, fp);
    let mut cases: Vec<(&str, Vec<u8>, Option<u16>)> = Vec::new();

    let mut oob = hello.clone();
    oob.extend(gram_frame(
        &[Descriptor {
            offset: BLOB_LEN as u64 - 10,
            len: 11,
        }],
        &[],
        0,
    ));
    cases.push(("out-of-bounds descriptor", oob, Some(4)));

    let mut huge = hello.clone();
    let mut table = (u64::MAX - 5).to_le_bytes().to_vec();
    table.extend_from_slice(&u32::MAX.to_le_bytes());
    huge.extend(gram_frame_raw(&table, 1, &[], 0));
    cases.push(("absurd offset", huge, Some(3)));

    // desc_count and table_len far over the limits
    let mut absurd = hello.clone();
    let gh = GramHeader {
        seq: 0,
        desc_count: u32::MAX,
        table_len: 0x7fff_0000,
        payload_len: 0,
        encoding: Encoding::Absolute,
        integrity: IntegrityAlg::Xxh3,
        flags: 0,
        integrity_value: 0,
    };
    put_frame(&mut absurd, FrameType::Gram, 0, &gh.emit());
    // frame length claims only the header: inconsistent lengths → BAD_FRAME
    cases.push(("absurd counts", absurd, Some(3)));

    let mut over_limit = hello.clone();
    let gh = GramHeader {
        desc_count: 1_000_000,
        table_len: 12_000_000,
        ..gh
    };
    let mut fh = pfs_wire::FrameHeader {
        frame_type: FrameType::Gram,
        flags: 0,
        length: 0,
    };
    fh.length = gh.body_len() as u32;
    over_limit.extend_from_slice(&fh.emit());
    over_limit.extend_from_slice(&gh.emit());
    cases.push(("over the limits", over_limit, Some(5)));

    cases.push((
        "garbage bytes",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        Some(3),
    ));

    let mut wrong_version = hello.clone();
    wrong_version[4] = 2;
    let crc = crc32c_of(&wrong_version[0..12]);
    wrong_version[12..16].copy_from_slice(&crc.to_le_bytes());
    cases.push(("wrong version", wrong_version, Some(1)));

    cases.push((
        "wrong fingerprint",
        hello_frame(Mode::Offset, BLOB_LEN as u64, [8; 32]),
        Some(2),
    ));
    cases.push(("wrong blob size", hello_frame(Mode::Offset, 4096, fp), Some(2)));

    let mut mid_gram = hello.clone();
    let g = gram_frame(&[Descriptor { offset: 0, len: 100 }; 8], &[], 0);
    mid_gram.extend_from_slice(&g[..g.len() / 2]);
    cases.push(("disconnect mid-gram", mid_gram, None));

    // HELLO declared 64 KiB descriptors; one of 1 MiB is refused.
    let mut too_long = hello.clone();
    too_long.extend(gram_frame(
        &[Descriptor {
            offset: 0,
            len: 1 << 20,
        }],
        &[],
        0,
    ));
    cases.push(("descriptor longer than declared", too_long, Some(5)));

    let mut auth_data = hello_frame(Mode::Offset, BLOB_LEN as u64, fp);
    // auth_len = 3 with three bytes appended: method 0 must carry nothing.
    auth_data.truncate(16 + 96);
    auth_data[16 + 6] = 3;
    auth_data.extend_from_slice(&[1, 2, 3]);
    let len = (96u32 + 3).to_le_bytes();
    auth_data[8..12].copy_from_slice(&len);
    let crc = crc32c_of(&auth_data[0..12]);
    auth_data[12..16].copy_from_slice(&crc.to_le_bytes());
    cases.push(("auth data with method none", auth_data, Some(8)));

    // A client that sends ERROR gets no ERROR back.
    let mut client_error = hello.clone();
    let mut body = Vec::new();
    ErrorFrame {
        code: 9,
        message: "client gives up",
    }
    .emit(&mut body);
    put_frame(&mut client_error, FrameType::Error, 0, &body);
    cases.push(("client ERROR is not answered", client_error, None));

    let mut payload_in_offset = hello.clone();
    payload_in_offset.extend(gram_frame(&[Descriptor { offset: 0, len: 4 }], &[1, 2, 3, 4], 0));
    cases.push(("payload in offset mode", payload_in_offset, Some(7)));

    let n = cases.len() as u64;
    let ((ok, failed), failures) = with_server(&blob, n + 1, |addr| {
        for (name, bytes, code) in &cases {
            let got = raw_exchange(addr, bytes, true);
            assert_eq!(got.as_ref().map(|g| g.0), *code, "{name}: {got:?}");
        }
        // A well-behaved client after all of that.
        let out = send(
            addr,
            &blob,
            &sender_cfg(Mode::Offset, IntegrityAlg::Xxh3, spec(Pattern::Random, 4)),
        )
        .unwrap();
        assert_eq!(
            SessionStats::from_report(&out.report, "TCP", "test session".into()).integrity,
            "OK"
        );
    });
    assert_eq!((ok, failed), (1, n), "{failures:#?}");
}

#[test]
fn sender_reports_a_refusal_clearly() {
    let blob = blob_bytes(4);
    let other = blob_bytes(5);
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let cfg = ServerConfig {
        max_sessions: Some(1),
        ..ServerConfig::default()
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut v = view(&other);
            v.fingerprint = [9; 32];
            serve(&listener, &v, &cfg, &Default::default(), &|_| {})
        });
        let err = send(
            &addr,
            &blob,
            &sender_cfg(Mode::Offset, IntegrityAlg::Xxh3, spec(Pattern::Random, 2)),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("BLOB_MISMATCH") && msg.contains("fingerprint differs"),
            "{msg}"
        );
    });
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    // Castagnoli CRC, bitwise; only for crafting a test frame.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_trickling_client_loses_its_slot_at_the_handshake_deadline() {
    let blob = blob_bytes(6);
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let cfg = ServerConfig {
        max_sessions: Some(1),
        ..ServerConfig::default()
    };
    let receiver = pfs_session::GramReceiverConfig {
        handshake_timeout: Duration::from_millis(600),
        ..Default::default()
    };
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve(&listener, &view(&blob), &cfg, &receiver, &|ev| {
                if let ServerEvent::Failed { error, .. } = ev {
                    failures.lock().unwrap().push(error.to_string());
                }
            })
        });
        // One byte every 100 ms: each read is well inside the read timeout,
        // the whole HELLO never arrives before the deadline.
        let hello = hello_frame(Mode::Offset, BLOB_LEN as u64, [7; 32]);
        let mut c = TcpStream::connect(&addr).unwrap();
        for b in hello.iter().take(40) {
            if c.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(c);
        assert_eq!(server.join().unwrap(), (0, 1));
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.iter().any(|f| f.contains("deadline")), "{failures:?}");
}

/// A shutdown stops the accept loop (woken by a connection of its own),
/// then a cut ends the session still waiting for the rest of its HELLO:
/// the server returns, the session reported failed because it was cut,
/// and the client is told so: ERROR `SHUTTING_DOWN`, then the close.
#[test]
fn shutdown_stops_accepting_then_cuts_running_sessions() {
    let blob = blob_bytes(3);
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let cfg = ServerConfig::default();
    let shutdown = cfg.shutdown.clone();
    let admitted = std::sync::atomic::AtomicBool::new(false);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve(
                &listener,
                &view(&blob),
                &cfg,
                &Default::default(),
                &|ev| match ev {
                    ServerEvent::Admitted { .. } => {
                        admitted.store(true, std::sync::atomic::Ordering::Release)
                    }
                    ServerEvent::Failed { error, .. } => failures.lock().unwrap().push(error.to_string()),
                    _ => {}
                },
            )
        });
        // Half a HELLO, then silence: a running session.
        let hello = hello_frame(Mode::Offset, BLOB_LEN as u64, [7; 32]);
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(&hello[..40]).unwrap();
        let guard = std::time::Instant::now() + Duration::from_secs(60);
        while !admitted.load(std::sync::atomic::Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < guard,
                "the session was never admitted"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        shutdown.stop();
        drop(TcpStream::connect(&addr));
        shutdown.cut();
        assert_eq!(server.join().unwrap(), (0, 1));
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut said = Vec::new();
        c.read_to_end(&mut said).unwrap();
        let (frame, used) = pfs_wire::Frame::parse(&said).expect("one whole frame");
        assert_eq!(used, said.len(), "nothing after the ERROR");
        assert_eq!(frame.header.frame_type, pfs_wire::FrameType::Error);
        let e = pfs_wire::ErrorFrame::parse(frame.body).unwrap();
        assert_eq!(e.code, pfs_wire::ErrorCode::ShuttingDown as u16);
        assert_eq!(e.message, pfs_session::server::SHUTTING_DOWN_MESSAGE);
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.iter().any(|f| f.contains("session cut")), "{failures:?}");
}
