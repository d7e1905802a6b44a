//! The server's admission over TCP loopback: protected blob sessions in
//! every mode and cipher, and a flood of silent connections that must not
//! keep an authorized client out (the accept loop never waits on a client;
//! connections still being admitted are capped, the oldest dropped).

use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use pfs_auth::{AuthorizedKeys, Cipher, ClientSecurity, Identity, Pin, ServerSecurity, Service};
use pfs_exec::{Pattern, ScheduleSpec, Total};
use pfs_session::{
    send_session, serve, Admission, GramSenderConfig, ServerConfig, ServerEvent, SessionStats,
};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport};
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
    }
}

struct Keys {
    server: Identity,
    client: Identity,
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
    let mut st = pfs_auth::connect(t, addr, Service::Blob, &client_security(k, cipher)).unwrap();
    let out = send_session(&mut st, &view(blob), &sender_cfg(mode), &mut |_| {}).unwrap();
    SessionStats::from_report(&out.report, "TCP", "protected".into()).integrity
}

/// Runs a server with `admission` for `sessions` sessions on its own
/// thread while `clients` runs; returns (ok, failed) and failure texts.
fn with_server(blob: &[u8], cfg: ServerConfig, clients: impl FnOnce(&str)) -> ((u64, u64), Vec<String>) {
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let failures = Mutex::new(Vec::new());
    let counts = std::thread::scope(|s| {
        let server = s.spawn(|| {
            serve(
                &listener,
                &view(blob),
                &cfg,
                &Default::default(),
                &|ev| match ev {
                    ServerEvent::Failed { error, .. } => failures.lock().unwrap().push(error.to_string()),
                    ServerEvent::Denied { reason, .. } => failures.lock().unwrap().push(reason.to_string()),
                    _ => {}
                },
            )
        });
        clients(&addr);
        server.join().unwrap()
    });
    (counts, failures.into_inner().unwrap())
}

fn keys() -> Keys {
    Keys {
        server: Identity::generate().unwrap(),
        client: Identity::generate().unwrap(),
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
        authorized: authorized.then(|| AuthorizedKeys::parse(&k.client.public().line("client")).unwrap()),
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
