//! The server's admission over TCP loopback: protected blob sessions in
//! every mode and cipher, and the attacks on slots and deadlines, each
//! followed by a legitimate session that must succeed: a flood of silent
//! connections (the accept loop never waits on a client; connections still
//! being admitted are capped), a flood from one address beside a client
//! from another, a trickled record, a trickled handshake, a trickled HELLO,
//! one key holding its sessions open, a key that cannot serve what it
//! proposes. No test asserts on elapsed time: each checks that the server
//! ended the attack with the deadline's (or the cap's) error.

use std::io::Write;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use pfs_auth::{AuthorizedKeys, Cipher, ClientSecurity, Identity, Pin, ServerSecurity, Service};
use pfs_exec::{Pattern, ScheduleSpec, Total};
use pfs_session::{
    send_session, serve, Admission, GramReceiverConfig, GramSenderConfig, ServerConfig, ServerEvent,
    SessionStats,
};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport, Transport};
use pfs_wire::{IntegrityAlg, Mode};

mod common;
use common::view;

const BLOB_LEN: usize = 4 << 20;

fn sender_cfg(mode: Mode) -> GramSenderConfig {
    GramSenderConfig {
        mode,
        integrity: IntegrityAlg::Xxh3,
        spec: ScheduleSpec {
            seed: 3,
            desc_per_gram: 64,
            max_len: 64 * 1024,
            align: 64,
            pattern: Pattern::Random,
            total: Total::Grams(20),
            blob_len: BLOB_LEN as u64,
        },
        reply_timeout: Duration::from_secs(20),
        log_interval: None,
        session_nonce: 7,
        payload_budget: pfs_session::DEFAULT_PAYLOAD_BUDGET,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
    }
}

struct Keys {
    server: Identity,
    client: Identity,
    /// A second authorized key.
    other: Identity,
}

fn client_security(k: &Keys, cipher: Cipher) -> ClientSecurity {
    ClientSecurity {
        identity: k.client.clone(),
        pin: Pin::Key(k.server.public()),
        psk: None,
        cipher,
        rotate_log2: 16,
        timeout: Duration::from_secs(20),
    }
}

/// Sends one protected blob session; returns its receiver-side integrity.
fn protected_send(addr: &str, blob: &[u8], k: &Keys, cipher: Cipher, mode: Mode) -> String {
    let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
    send_over(t, addr, blob, &client_security(k, cipher), mode)
}

/// Runs the handshake and one blob session over `t`.
fn send_over(t: TcpTransport, addr: &str, blob: &[u8], sec: &ClientSecurity, mode: Mode) -> String {
    let mut st = pfs_auth::connect(t, addr, Service::Blob, sec).unwrap();
    let out = send_session(&mut st, &view(blob), &sender_cfg(mode), &mut |_| {}).unwrap();
    SessionStats::from_report(&out.report, "TCP", "protected".into()).integrity
}

/// A plain blob session; returns its receiver-side integrity.
fn plain_send(addr: &str, blob: &[u8]) -> String {
    let mut t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
    let out = send_session(&mut t, &view(blob), &sender_cfg(Mode::Offset), &mut |_| {}).unwrap();
    SessionStats::from_report(&out.report, "TCP", "plain".into()).integrity
}

/// Runs a server with `admission` for `sessions` sessions on its own
/// thread while `clients` runs; returns (ok, failed) and failure texts.
fn with_server(blob: &[u8], cfg: ServerConfig, clients: impl FnOnce(&str)) -> ((u64, u64), Vec<String>) {
    watch_server(blob, cfg, &Default::default(), |addr, _| clients(addr))
}

/// What the server reported so far: `accepted`, `admitted`, `busy`,
/// `denied: REASON`, `failed: ERROR`, `ok`.
type Events = Mutex<Vec<String>>;

/// [`with_server`] with a receiver config, whose clients see the server's
/// events as they happen.
fn watch_server(
    blob: &[u8],
    cfg: ServerConfig,
    receiver: &GramReceiverConfig,
    clients: impl FnOnce(&str, &Events),
) -> ((u64, u64), Vec<String>) {
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let events = Events::default();
    let counts = std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve(&listener, &view(blob), &cfg, receiver, &|ev| {
                let e = match ev {
                    ServerEvent::Accepted { .. } => "accepted".to_string(),
                    ServerEvent::Admitted { .. } => "admitted".to_string(),
                    ServerEvent::Busy { reason, .. } => format!("busy: {reason}"),
                    ServerEvent::Failed { error, .. } => format!("failed: {error}"),
                    ServerEvent::Denied { reason, .. } => format!("denied: {reason}"),
                    ServerEvent::Finished { .. } => "ok".to_string(),
                    _ => return,
                };
                events.lock().unwrap().push(e);
            })
        });
        clients(&addr, &events);
        server.join().unwrap()
    });
    let failures = events
        .into_inner()
        .unwrap()
        .into_iter()
        .filter(|e| e.starts_with("failed") || e.starts_with("denied"))
        .collect();
    (counts, failures)
}

/// Events that start with `prefix` so far.
fn count(events: &Events, prefix: &str) -> usize {
    events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.starts_with(prefix))
        .count()
}

/// Waits (bounded: 30 s) until `done` holds of the events; panics if it
/// never does.
fn wait_for(events: &Events, what: &str, done: impl Fn(&[String]) -> bool) {
    for _ in 0..3000 {
        if done(&events.lock().unwrap()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("never saw {what}: {:#?}", events.lock().unwrap());
}

/// Sends `bytes` one at a time, `gap` apart, until `send` fails (the
/// server closed), `stop` holds, or the bytes run out.
fn trickle(bytes: &[u8], gap: Duration, mut send: impl FnMut(u8) -> bool, stop: impl Fn() -> bool) {
    for &b in bytes {
        if stop() || !send(b) {
            return;
        }
        std::thread::sleep(gap);
    }
}

fn keys() -> Keys {
    Keys {
        server: Identity::generate().unwrap(),
        client: Identity::generate().unwrap(),
        other: Identity::generate().unwrap(),
    }
}

fn keyed(k: &Keys, authorized: bool) -> Admission {
    Admission {
        security: Some(ServerSecurity {
            identity: k.server.clone(),
            psk: None,
            timeout: Duration::from_secs(30),
            record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
        }),
        authorized: authorized.then(|| {
            let lines = format!(
                "{}\n{}\n",
                k.client.public().line("client"),
                k.other.public().line("other")
            );
            AuthorizedKeys::parse(&lines).unwrap().into()
        }),
        allow_plain: !authorized,
    }
}

#[test]
fn every_mode_runs_protected_with_every_cipher() {
    let blob = common::blob_bytes(21, BLOB_LEN);
    let k = keys();
    let modes = [Mode::Payload, Mode::Offset, Mode::Arith];
    let cfg = ServerConfig {
        max_sessions: Some((modes.len() * Cipher::ALL.len()) as u64),
        admission: keyed(&k, true),
        ..ServerConfig::default()
    };
    let ((ok, failed), failures) = with_server(&blob, cfg, |addr| {
        for cipher in Cipher::ALL {
            for mode in modes {
                assert_eq!(
                    protected_send(addr, &blob, &k, cipher, mode),
                    "OK",
                    "{cipher} {mode:?}"
                );
            }
        }
    });
    assert_eq!((ok, failed), (6, 0), "{failures:?}");
}

#[test]
fn a_flood_of_silent_connections_never_keeps_an_authorized_client_out() {
    let blob = common::blob_bytes(22, BLOB_LEN);
    let k = keys();
    let silent = 30;
    let cfg = ServerConfig {
        max_sessions: Some(silent + 1),
        max_admitting: 8,
        // Far longer than the test: only eviction can free the queue.
        first_bytes_timeout: Duration::from_secs(600),
        admission: keyed(&k, true),
        ..ServerConfig::default()
    };
    let ((ok, failed), failures) = with_server(&blob, cfg, |addr| {
        let flood: Vec<TcpStream> = (0..silent).map(|_| TcpStream::connect(addr).unwrap()).collect();
        // The authorized client arrives last, behind all of them.
        assert_eq!(
            protected_send(addr, &blob, &k, Cipher::Aes256Gcm, Mode::Offset),
            "OK"
        );
        drop(flood);
    });
    assert_eq!((ok, failed), (1, silent), "{failures:?}");
    let dropped = failures.iter().filter(|f| f.contains("dropped")).count();
    assert!(dropped >= (silent as usize) - 8, "{failures:#?}");
}

#[test]
fn an_open_server_takes_plain_and_protected_clients_alike() {
    let blob = common::blob_bytes(23, BLOB_LEN);
    let k = keys();
    let cfg = ServerConfig {
        max_sessions: Some(2),
        admission: keyed(&k, false),
        ..ServerConfig::default()
    };
    let ((ok, failed), failures) = with_server(&blob, cfg, |addr| {
        assert_eq!(
            protected_send(addr, &blob, &k, Cipher::ChaCha20Poly1305, Mode::Payload),
            "OK"
        );
        let mut t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        let out = send_session(&mut t, &view(&blob), &sender_cfg(Mode::Offset), &mut |_| {}).unwrap();
        assert_eq!(
            SessionStats::from_report(&out.report, "TCP", "plain".into()).integrity,
            "OK"
        );
    });
    assert_eq!((ok, failed), (2, 0), "{failures:?}");
}

fn keyed_with(k: &Keys, timeout: Duration, record_timeout: Duration) -> Admission {
    let mut a = keyed(k, true);
    let sec = a.security.as_mut().unwrap();
    sec.timeout = timeout;
    sec.record_timeout = record_timeout;
    a
}

/// After the handshake, a record header declaring the largest record, then
/// a byte now and then: the session ends at the record's deadline (from its
/// first byte), whatever the frame deadlines above it would allow.
#[test]
fn a_trickled_record_ends_at_the_record_deadline() {
    let blob = common::blob_bytes(24, BLOB_LEN);
    let k = keys();
    let cfg = ServerConfig {
        max_sessions: Some(2),
        admission: keyed_with(&k, Duration::from_secs(30), Duration::from_millis(300)),
        ..ServerConfig::default()
    };
    let receiver = GramReceiverConfig::default();
    let ((ok, failed), failures) = watch_server(&blob, cfg, &receiver, |addr, events| {
        let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        let sec = client_security(&k, Cipher::Aes256Gcm);
        let mut st = pfs_auth::connect(t, addr, Service::Blob, &sec).unwrap();
        // Kind DATA, 262,160 bytes (the most a record may declare).
        let mut raw = vec![1u8, 0x04, 0x00, 0x10];
        raw.resize(4 + 262_160, 0);
        let inner = st.get_mut();
        trickle(
            &raw[..400],
            Duration::from_millis(20),
            |b| Transport::write_all(inner, &[b]).is_ok(),
            || count(events, "failed") > 0,
        );
        wait_for(events, "the trickled session's end", |e| {
            e.iter().any(|e| e.starts_with("failed"))
        });
        assert_eq!(
            protected_send(addr, &blob, &k, Cipher::Aes256Gcm, Mode::Offset),
            "OK"
        );
    });
    assert_eq!((ok, failed), (1, 1), "{failures:?}");
    assert!(failures[0].contains("record deadline"), "{failures:?}");
}

/// A handshake trickled from the first byte ends at the handshake's
/// deadline, counted from the accept.
#[test]
fn a_trickled_handshake_ends_at_its_deadline() {
    let blob = common::blob_bytes(25, BLOB_LEN);
    let k = keys();
    let cfg = ServerConfig {
        max_sessions: Some(2),
        admission: keyed_with(&k, Duration::from_secs(1), pfs_auth::DEFAULT_RECORD_TIMEOUT),
        ..ServerConfig::default()
    };
    let receiver = GramReceiverConfig::default();
    let ((ok, failed), failures) = watch_server(&blob, cfg, &receiver, |addr, events| {
        // HS1's header (PFSN, version 1, step 1, 37 bytes), then its body.
        let mut hs1 = b"PFSN\x01\x01\x00\x25".to_vec();
        hs1.resize(8 + 37, 0);
        let mut conn = TcpStream::connect(addr).unwrap();
        trickle(
            &hs1,
            Duration::from_millis(50),
            |b| conn.write_all(&[b]).is_ok(),
            || count(events, "denied") > 0,
        );
        wait_for(events, "the trickled handshake's end", |e| {
            e.iter().any(|e| e.starts_with("denied"))
        });
        assert_eq!(
            protected_send(addr, &blob, &k, Cipher::ChaCha20Poly1305, Mode::Offset),
            "OK"
        );
    });
    assert_eq!((ok, failed), (1, 1), "{failures:?}");
    assert!(
        failures[0].contains("handshake not finished within 1s"),
        "{failures:?}"
    );
}

/// A plain HELLO trickled from its first byte ends at the HELLO deadline:
/// the bytes read during admission count toward it.
#[test]
fn a_trickled_hello_ends_at_its_deadline_from_its_first_byte() {
    let blob = common::blob_bytes(26, BLOB_LEN);
    let cfg = ServerConfig {
        max_sessions: Some(2),
        ..ServerConfig::default()
    };
    let receiver = GramReceiverConfig {
        handshake_timeout: Duration::from_secs(1),
        ..GramReceiverConfig::default()
    };
    let ((ok, failed), failures) = watch_server(&blob, cfg, &receiver, |addr, events| {
        let mut hello = Vec::new();
        pfs_wire::put_frame(&mut hello, pfs_wire::FrameType::Hello, 0, &[0u8; 200]);
        let mut conn = TcpStream::connect(addr).unwrap();
        trickle(
            &hello,
            Duration::from_millis(50),
            |b| conn.write_all(&[b]).is_ok(),
            || count(events, "failed") > 0,
        );
        wait_for(events, "the trickled HELLO's end", |e| {
            e.iter().any(|e| e.starts_with("failed"))
        });
        assert_eq!(plain_send(addr, &blob), "OK");
    });
    assert_eq!((ok, failed), (1, 1), "{failures:?}");
    assert!(failures[0].contains("HELLO not complete"), "{failures:?}");
}

/// One key holds as many sessions as it may (idle, within every deadline):
/// its next is refused BUSY by the per-key cap, and another key is served.
#[test]
fn a_key_holding_its_sessions_leaves_slots_for_another_key() {
    let blob = common::blob_bytes(27, BLOB_LEN);
    let k = keys();
    let cfg = ServerConfig {
        max_clients: 4,
        max_sessions: Some(3),
        admission: keyed(&k, true),
        ..ServerConfig::default()
    };
    let cap = pfs_session::server::default_max_per_key(cfg.max_clients);
    assert_eq!(cap, 2);
    let receiver = GramReceiverConfig::default();
    let ((ok, failed), failures) = watch_server(&blob, cfg, &receiver, |addr, events| {
        let sec = client_security(&k, Cipher::Aes256Gcm);
        let connect = || {
            let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
            pfs_auth::connect(t, addr, Service::Blob, &sec).unwrap()
        };
        let held: Vec<_> = (0..cap).map(|_| connect()).collect();
        wait_for(events, "the held sessions", |e| {
            e.iter().filter(|e| *e == "admitted").count() == cap
        });
        let mut one_more = connect();
        let refused = send_session(
            &mut one_more,
            &view(&blob),
            &sender_cfg(Mode::Offset),
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(refused.contains("--max-per-key"), "{refused}");
        // Another key gets a slot while the first holds its cap.
        let other = ClientSecurity {
            identity: k.other.clone(),
            ..client_security(&k, Cipher::Aes256Gcm)
        };
        let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        assert_eq!(send_over(t, addr, &blob, &other, Mode::Offset), "OK");
        drop(held);
    });
    assert_eq!((ok, failed), (1, 2), "{failures:?}");
}

/// A connection from `from` (a loopback address) to `addr`.
fn connect_from(from: &str, addr: &str) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    sock.bind(
        &format!("{from}:0")
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.connect(&to.into()).unwrap();
    sock.into()
}

/// A client that has not sent a byte yet (a distant one, still on its
/// way) is in admission when a flood from another address fills it: the
/// flood evicts only its own connections, and the client is served.
#[test]
fn a_flood_from_one_address_never_evicts_a_client_from_another() {
    let blob = common::blob_bytes(28, BLOB_LEN);
    let flood = 20;
    let cfg = ServerConfig {
        max_sessions: Some(flood + 1),
        max_admitting: 4,
        // Far longer than the test: only eviction can free the room.
        first_bytes_timeout: Duration::from_secs(600),
        ..ServerConfig::default()
    };
    let receiver = GramReceiverConfig::default();
    let ((ok, failed), failures) = watch_server(&blob, cfg, &receiver, |addr, events| {
        let distant = connect_from("127.0.0.2", addr);
        wait_for(events, "the distant client accepted", |e| {
            e.iter().any(|e| e == "accepted")
        });
        let silent: Vec<TcpStream> = (0..flood).map(|_| connect_from("127.0.0.1", addr)).collect();
        // Every flood connection past the room (3 beside the client) is
        // evicted, and none other.
        let evicted = flood as usize - 3;
        wait_for(events, "the evictions", |e| {
            e.iter().filter(|e| e.starts_with("denied")).count() >= evicted
        });
        let mut t = TcpTransport::from_stream(distant, &TcpConfig::default()).unwrap();
        let out = send_session(&mut t, &view(&blob), &sender_cfg(Mode::Offset), &mut |_| {}).unwrap();
        assert_eq!(
            SessionStats::from_report(&out.report, "TCP", "plain".into()).integrity,
            "OK"
        );
        assert_eq!(count(events, "denied"), evicted, "{:#?}", events.lock().unwrap());
        drop(silent);
    });
    assert_eq!((ok, failed), (1, flood), "{failures:?}");
    let dropped = failures.iter().filter(|f| f.contains("dropped")).count();
    assert_eq!(dropped, flood as usize - 3, "{failures:#?}");
}

/// A key whose rights cannot serve the service it proposes is refused at
/// the verdict: it never holds a slot.
#[test]
fn a_key_that_cannot_serve_its_proposal_is_refused_at_the_verdict() {
    let blob = common::blob_bytes(29, BLOB_LEN);
    let k = keys();
    let mut admission = keyed(&k, true);
    let lines = format!(
        "{}\n{} no-blob # other\n",
        k.client.public().line("client"),
        k.other.public()
    );
    admission.authorized = Some(AuthorizedKeys::parse(&lines).unwrap().into());
    let cfg = ServerConfig {
        max_sessions: Some(3),
        admission,
        ..ServerConfig::default()
    };
    let ((ok, failed), failures) = with_server(&blob, cfg, |addr| {
        let other = ClientSecurity {
            identity: k.other.clone(),
            ..client_security(&k, Cipher::Aes256Gcm)
        };
        let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        let e = pfs_auth::connect(t, addr, Service::Blob, &other).unwrap_err();
        assert!(e.to_string().contains("no-blob"), "{e}");
        // A service this server does not offer.
        let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        let sec = client_security(&k, Cipher::Aes256Gcm);
        let e = pfs_auth::connect(t, addr, Service::Files, &sec).unwrap_err();
        assert!(e.to_string().contains("offers blob sessions"), "{e}");
        assert_eq!(
            protected_send(addr, &blob, &k, Cipher::Aes256Gcm, Mode::Offset),
            "OK"
        );
    });
    assert_eq!((ok, failed), (1, 2), "{failures:?}");
}

/// A reload ([`pfs_session::KeyRing::replace`]) that removes a key while
/// that key's session runs: the session keeps the rights it was admitted
/// with and completes; the key's next connection is refused.
#[test]
fn a_session_in_flight_keeps_its_rights_across_a_reload() {
    let blob = common::blob_bytes(31, BLOB_LEN);
    let k = keys();
    let cfg = ServerConfig {
        max_sessions: Some(2),
        admission: keyed(&k, true),
        ..ServerConfig::default()
    };
    let ring = cfg.admission.authorized.clone().expect("a keyed server");
    let ((ok, failed), failures) = watch_server(&blob, cfg, &Default::default(), |addr, events| {
        let sec = client_security(&k, Cipher::Aes256Gcm);
        let t = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        // Admitted: the verdict is in, the session not begun.
        let mut st = pfs_auth::connect(t, addr, Service::Blob, &sec).unwrap();
        wait_for(events, "the admission", |e| e.iter().any(|x| x == "admitted"));
        let only_other = format!("{}\n", k.other.public().line("other"));
        let old = ring.replace(AuthorizedKeys::parse(&only_other).unwrap());
        assert_eq!((old.len(), ring.current().len()), (2, 1));
        let out = send_session(&mut st, &view(&blob), &sender_cfg(Mode::Offset), &mut |_| {}).unwrap();
        assert_eq!(
            SessionStats::from_report(&out.report, "TCP", "protected".into()).integrity,
            "OK"
        );
        let again = TcpTransport::connect(addr, &TcpConfig::default()).unwrap();
        assert!(
            pfs_auth::connect(again, addr, Service::Blob, &sec).is_err(),
            "a removed key was admitted after the reload"
        );
    });
    assert_eq!((ok, failed), (1, 1), "{failures:?}");
    assert!(
        failures.iter().any(|f| f.contains("key not in authorized_keys")),
        "{failures:?}"
    );
}
