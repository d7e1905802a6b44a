//! Measures how many handshakes a distant authorized client completes
//! while a flood of unauthenticated connections hits the server's
//! admission (issue 26: "Flood of 2,000 unauthenticated connects/s: an
//! authorized client 50 ms away completes >= 95 % of handshakes").
//!
//! Everything runs on loopback in this process: a protected blob server,
//! a delay line (a TCP proxy that holds every chunk `--one-way-ms` in each
//! direction; it connects to the server from 127.0.0.3), the authorized
//! client (through the proxy, `--handshakes` handshakes one after the
//! other), and the flood (`--rate` connections per second straight to the
//! server, from `--sources` addresses 127.0.1.x, each held open
//! `--hold-ms` and then closed; `--hs1`: each sends a valid HS1 and then
//! nothing, else nothing at all). `--hog N`: before the client starts,
//! another authorized key opens N sessions and holds them idle (every
//! deadline kept), as a key holding slots with legal traffic would; the
//! client then runs a small blob session after each handshake, and the
//! slowest handshake-plus-session is printed (`--max-per-key N` sets the
//! server's per-key cap; 4 shows the server without one).
//!
//! ```sh
//! cargo run --release -p pfs-session --example admission_flood -- \
//!     --rate 2000 --sources 1 --handshakes 40 --one-way-ms 25
//! ```
//!
//! Prints one line: the settings, handshakes completed of attempted, and
//! flood connections made.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pfs_auth::handshake::{ClientHandshake, Proposal};
use pfs_auth::{AuthorizedKeys, Cipher, ClientSecurity, Identity, Pin, ServerSecurity, Service};
use pfs_session::{serve, Admission, BlobView, ServerConfig};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport};

struct Args {
    rate: u64,
    sources: u8,
    handshakes: usize,
    one_way: Duration,
    hold: Duration,
    hs1: bool,
    hog: usize,
    max_per_key: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        rate: 2000,
        sources: 1,
        handshakes: 40,
        one_way: Duration::from_millis(25),
        hold: Duration::from_millis(1000),
        hs1: false,
        hog: 0,
        max_per_key: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().expect("a value").parse::<u64>().expect("a number");
        match flag.as_str() {
            "--rate" => a.rate = val(),
            "--sources" => a.sources = val().clamp(1, 250) as u8,
            "--handshakes" => a.handshakes = val() as usize,
            "--one-way-ms" => a.one_way = Duration::from_millis(val()),
            "--hold-ms" => a.hold = Duration::from_millis(val()),
            "--hs1" => a.hs1 = true,
            "--hog" => a.hog = val() as usize,
            "--max-per-key" => a.max_per_key = Some(val() as usize),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    sock.bind(&SocketAddr::from((from, 0)).into())?;
    sock.connect(&to.into())?;
    Ok(sock.into())
}

/// Copies `from` to `to`, each chunk released `delay` after it was read.
fn delay_line(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (at, bytes) in rx {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

fn main() {
    let a = args();
    let (server_id, client_id) = (Identity::generate().unwrap(), Identity::generate().unwrap());
    let hog_id = Identity::generate().unwrap();
    let keys = format!(
        "{}\n{}\n",
        client_id.public().line("distant"),
        hog_id.public().line("hog")
    );
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let server_addr = listener.socket_addr().unwrap();
    let cfg = ServerConfig {
        admission: Admission {
            security: Some(ServerSecurity {
                identity: server_id.clone(),
                psk: None,
                timeout: pfs_auth::DEFAULT_HANDSHAKE_TIMEOUT,
                record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
            }),
            authorized: Some(AuthorizedKeys::parse(&keys).unwrap().into()),
            allow_plain: false,
        },
        max_per_key: a.max_per_key,
        ..ServerConfig::default()
    };
    let blob: Vec<u8> = (0..4u32 << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
    let view = BlobView {
        data: &blob,
        fingerprint: [7; 32],
        region_size: 1 << 20,
        backing: pfs_blob::BackingKind::SmallPages,
        page_size: 4096,
        setup: Default::default(),
        writer: None,
        live: None,
    };
    let stop = AtomicBool::new(false);
    let flooded = AtomicU64::new(0);
    let hs1 = {
        let proposal = Proposal {
            cipher: Cipher::Aes256Gcm,
            rotate_log2: 32,
            service: Service::Blob,
        };
        ClientHandshake::start(client_id.private_bytes(), None, proposal)
            .unwrap()
            .1
    };
    // The delay line: the client connects here, the proxy to the server.
    let proxy = StdListener::bind("127.0.0.2:0").unwrap();
    let proxy_addr = proxy.local_addr().unwrap();
    let (ok, tried) = std::thread::scope(|s| {
        s.spawn(|| serve(&listener, &view, &cfg, &Default::default(), &|_| {}));
        s.spawn(|| {
            for c in proxy.incoming() {
                let Ok(c) = c else { continue };
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let Ok(up) = connect_from([127, 0, 0, 3], server_addr) else {
                    continue;
                };
                delay_line(c.try_clone().unwrap(), up.try_clone().unwrap(), a.one_way);
                delay_line(up, c, a.one_way);
            }
        });
        // The flood, paced per millisecond.
        s.spawn(|| {
            let mut held: VecDeque<(Instant, TcpStream)> = VecDeque::new();
            let start = Instant::now();
            let mut made = 0u64;
            let mut src = 0u8;
            while !stop.load(Ordering::Acquire) {
                let due = start.elapsed().as_secs_f64() * a.rate as f64;
                while (made as f64) < due {
                    src = src % a.sources + 1;
                    if let Ok(mut c) = connect_from([127, 0, 1, src], server_addr) {
                        if a.hs1 {
                            let _ = c.write_all(&hs1);
                        }
                        held.push_back((Instant::now() + a.hold, c));
                    }
                    made += 1;
                }
                while held.front().is_some_and(|(t, _)| *t <= Instant::now()) {
                    held.pop_front();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            flooded.store(made, Ordering::Release);
        });
        // Let the flood reach its pace, then the distant client.
        std::thread::sleep(Duration::from_secs(1));
        let sec = ClientSecurity {
            identity: client_id.clone(),
            pin: Pin::Key(server_id.public()),
            psk: None,
            cipher: Cipher::Aes256Gcm,
            rotate_log2: 32,
            timeout: pfs_auth::DEFAULT_HANDSHAKE_TIMEOUT,
        };
        // Another key holds sessions open, idle.
        let hog_sec = ClientSecurity {
            identity: hog_id.clone(),
            ..sec.clone()
        };
        let addr = server_addr.to_string();
        let held: Vec<_> = (0..a.hog)
            .filter_map(|_| {
                let t = TcpTransport::connect(&addr, &TcpConfig::default()).ok()?;
                pfs_auth::connect(t, &addr, Service::Blob, &hog_sec).ok()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut ok = 0;
        let mut slowest = Duration::ZERO;
        for _ in 0..a.handshakes {
            let t0 = Instant::now();
            let done = TcpTransport::connect(&proxy_addr.to_string(), &TcpConfig::default())
                .map_err(|e| e.to_string())
                .and_then(|t| {
                    pfs_auth::connect(t, &proxy_addr.to_string(), Service::Blob, &sec)
                        .map_err(|e| e.to_string())
                })
                .and_then(|mut st| {
                    if a.hog == 0 {
                        return Ok(());
                    }
                    pfs_session::send_session(&mut st, &view, &sender_cfg(), &mut |_| {})
                        .map(drop)
                        .map_err(|e| e.to_string())
                });
            match done {
                Ok(()) => {
                    ok += 1;
                    slowest = slowest.max(t0.elapsed());
                }
                Err(e) => eprintln!("failed: {e}"),
            }
        }
        if a.hog > 0 {
            println!(
                "{} idle sessions of another key held ({} admitted); slowest handshake + 20-gram session: {slowest:?}",
                a.hog,
                held.len()
            );
        }
        drop(held);
        stop.store(true, Ordering::Release);
        cfg.shutdown.cut();
        // Wake the accept loops.
        let _ = TcpStream::connect(server_addr);
        let _ = TcpStream::connect(proxy_addr);
        (ok, a.handshakes)
    });
    println!(
        "rate {}/s sources {} {} one-way {:?}: {ok}/{tried} handshakes completed ({:.0} %), {} flood connections",
        a.rate,
        a.sources,
        if a.hs1 { "HS1-then-silence" } else { "bare connects" },
        a.one_way,
        100.0 * ok as f64 / tried as f64,
        flooded.load(Ordering::Acquire)
    );
}

fn sender_cfg() -> pfs_session::GramSenderConfig {
    use pfs_exec::{Pattern, ScheduleSpec, Total};
    pfs_session::GramSenderConfig {
        mode: pfs_wire::Mode::Offset,
        integrity: pfs_wire::IntegrityAlg::Xxh3,
        spec: ScheduleSpec {
            seed: 3,
            desc_per_gram: 64,
            max_len: 64 * 1024,
            align: 64,
            pattern: Pattern::Random,
            total: Total::Grams(20),
            blob_len: 4 << 20,
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
