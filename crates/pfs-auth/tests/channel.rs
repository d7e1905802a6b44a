//! Protected sessions over a real socket pair: the handshake drivers, the
//! verdict, and what happens to records that are tampered with, replayed,
//! reordered, dropped or cut short on the way.

use std::io::{self, IoSlice};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use pfs_auth::{
    accept, connect, read_head, Cipher, ClientSecurity, Identity, Pin, SecureError, SecureTransport,
    ServerSecurity, Service,
};
use pfs_transport::{Transport, UnixTransport};

/// A transport whose writes can be captured (one entry per write call,
/// which is one record) instead of sent, and bytes injected raw.
struct Capture {
    inner: UnixTransport,
    captured: Option<Vec<Vec<u8>>>,
}

impl Transport for Capture {
    fn kind(&self) -> &'static str {
        "TEST"
    }
    fn peer(&self) -> String {
        "test".into()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.captured {
            Some(c) => {
                let bytes: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
                let n = bytes.len();
                c.push(bytes);
                Ok(n)
            }
            None => self.inner.write_vectored(bufs),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
    fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(t)
    }
    fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(t)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
}

struct Keys {
    client: Identity,
    server: Identity,
}

fn keys() -> Keys {
    Keys {
        client: Identity::generate().unwrap(),
        server: Identity::generate().unwrap(),
    }
}

fn client_sec(k: &Keys, cipher: Cipher, rotate_log2: u8) -> ClientSecurity {
    ClientSecurity {
        identity: k.client.clone(),
        pin: Pin::Key(k.server.public()),
        psk: None,
        cipher,
        rotate_log2,
        timeout: Duration::from_secs(10),
    }
}

fn server_sec(k: &Keys) -> ServerSecurity {
    ServerSecurity {
        identity: k.server.clone(),
        psk: None,
        timeout: Duration::from_secs(10),
        record_timeout: pfs_auth::DEFAULT_RECORD_TIMEOUT,
    }
}

type Pair = (SecureTransport<Capture>, SecureTransport<UnixTransport>);

/// A finished handshake over a socket pair.
fn session(k: &Keys, cipher: Cipher, rotate_log2: u8) -> Pair {
    let (a, mut b) = UnixTransport::pair().unwrap();
    let ssec = server_sec(k);
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let head = read_head(&mut b, Duration::from_secs(10), &AtomicBool::new(false)).unwrap();
            let pending = accept(b, head, &ssec, &AtomicBool::new(false)).unwrap();
            assert_eq!(pending.proposal().service, Service::Files);
            pending.admit().unwrap()
        });
        let c = Capture {
            inner: a,
            captured: None,
        };
        let client = connect(c, "pair", Service::Files, &client_sec(k, cipher, rotate_log2)).unwrap();
        (client, server.join().unwrap())
    })
}

#[test]
fn bytes_cross_both_ways_with_key_rotation_and_a_clean_close() {
    let k = keys();
    for cipher in Cipher::ALL {
        let (mut c, mut s) = session(&k, cipher, 16);
        assert_eq!(c.info().peer, k.server.public());
        assert_eq!(s.info().peer, k.client.public());
        assert_eq!(c.info().handshake_hash, s.info().handshake_hash);
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::thread::scope(|sc| {
            let d = &data;
            sc.spawn(move || {
                // Odd-sized vectored writes, small and several records
                // long: records do not follow frames.
                let (small, large) = d.split_at(1_000_000);
                for part in small.chunks(70_001).chain(large.chunks(700_001)) {
                    let (x, y) = part.split_at(part.len() / 3);
                    c.write_all_vectored(&mut [IoSlice::new(x), IoSlice::new(y)])
                        .unwrap();
                }
                c.shutdown_write().unwrap();
                let mut back = [0u8; 5];
                c.read_exact(&mut back).unwrap();
                assert_eq!(&back, b"thank");
                assert!(c.rotations().0 >= 10, "{:?}", c.rotations());
            });
            let mut got = Vec::new();
            let mut buf = vec![0u8; 100_000];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == *d, "stream differs ({} of {} bytes)", got.len(), d.len());
            s.write_all(b"thank").unwrap();
            assert!(s.rotations().1 >= 10);
        });
    }
}

/// `read_ready` over a protected session: nothing yet is `None`; the
/// plaintext of whole records comes back, in order; a record still
/// arriving is not waited for; the peer's close is `Some(0)`.
#[test]
fn read_ready_takes_whole_records_without_waiting() {
    let k = keys();
    let (mut c, mut s) = session(&k, Cipher::ChaCha20Poly1305, 32);
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    // Were it to wait, the 30 s timeout would end it with an error.
    assert_eq!(s.read_ready(&mut buf).unwrap(), None);
    // Less than a socket buffer: written whole before anything is read.
    let data: Vec<u8> = (0..60_000u32).map(|i| (i % 253) as u8).collect();
    c.write_all(&data).unwrap();
    let mut got = Vec::new();
    while got.len() < data.len() {
        match s.read_ready(&mut buf).unwrap() {
            Some(n) => {
                assert!(n > 0, "end of stream before the bytes");
                got.extend_from_slice(&buf[..n]);
            }
            None => std::thread::yield_now(),
        }
    }
    assert!(got == data);
    c.shutdown_write().unwrap();
    let end = loop {
        if let Some(n) = s.read_ready(&mut buf).unwrap() {
            break n;
        }
        std::thread::yield_now();
    };
    assert_eq!(end, 0);
}

/// Captures the client's next `n` records (one per `write_all`).
fn capture(c: &mut SecureTransport<Capture>, msgs: &[&[u8]]) -> Vec<Vec<u8>> {
    c.get_mut().captured = Some(Vec::new());
    for m in msgs {
        c.write_all(m).unwrap();
    }
    c.get_mut().captured.take().unwrap()
}

/// Sends `records` raw and reads what the server makes of them.
fn deliver(
    c: &mut SecureTransport<Capture>,
    s: &mut SecureTransport<UnixTransport>,
    records: &[Vec<u8>],
) -> (Vec<u8>, io::Error) {
    for r in records {
        c.get_mut().inner.write_all(r).unwrap();
    }
    c.get_mut().inner.shutdown_write().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => panic!("a manipulated stream read as a clean end"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return (got, e),
        }
    }
}

#[test]
fn tampered_replayed_reordered_dropped_and_cut_streams_end_with_an_error() {
    let k = keys();
    type Edit = fn(Vec<Vec<u8>>) -> Vec<Vec<u8>>;
    let cases: [(&str, Edit, &[u8], io::ErrorKind, &str); 6] = [
        (
            "tampered",
            |mut r| {
                r[1][6] ^= 0x20;
                r
            },
            b"one",
            io::ErrorKind::InvalidData,
            "failed authentication",
        ),
        (
            "replayed",
            |r| vec![r[0].clone(), r[0].clone()],
            b"one",
            io::ErrorKind::InvalidData,
            "failed authentication",
        ),
        (
            "reordered",
            |r| vec![r[1].clone(), r[0].clone()],
            b"",
            io::ErrorKind::InvalidData,
            "failed authentication",
        ),
        (
            "dropped",
            |r| vec![r[0].clone(), r[2].clone()],
            b"one",
            io::ErrorKind::InvalidData,
            "failed authentication",
        ),
        (
            "cut between records",
            |r| vec![r[0].clone()],
            b"one",
            io::ErrorKind::ConnectionAborted,
            "cut short",
        ),
        (
            "cut inside a record",
            |r| vec![r[0].clone(), r[1][..10].to_vec()],
            b"one",
            io::ErrorKind::ConnectionAborted,
            "inside a record",
        ),
    ];
    for (name, edit, before, kind, says) in cases {
        let (mut c, mut s) = session(&k, Cipher::Aes256Gcm, 32);
        let records = capture(&mut c, &[b"one", b"two", b"three"]);
        assert_eq!(records.len(), 3);
        let (got, err) = deliver(&mut c, &mut s, &edit(records));
        assert_eq!(got, before, "{name}: bytes before the failure");
        assert_eq!(err.kind(), kind, "{name}: {err}");
        assert!(err.to_string().contains(says), "{name}: {err}");
        // The stream stays failed.
        assert!(s.read(&mut [0u8; 8]).is_err(), "{name}");
    }
}

#[test]
fn the_client_refuses_an_unpinned_server_before_revealing_itself() {
    let k = keys();
    let stranger = Identity::generate().unwrap();
    let (a, mut b) = UnixTransport::pair().unwrap();
    let ssec = server_sec(&k);
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let head = read_head(&mut b, Duration::from_secs(10), &AtomicBool::new(false)).unwrap();
            accept(b, head, &ssec, &AtomicBool::new(false)).map(|_| ())
        });
        let mut sec = client_sec(&k, Cipher::ChaCha20Poly1305, 32);
        sec.pin = Pin::Key(stranger.public());
        let err = connect(a, "pair", Service::Blob, &sec).unwrap_err();
        assert!(
            matches!(&err, SecureError::WrongServer { got, .. } if *got == k.server.public()),
            "{err}"
        );
        assert!(
            err.to_string().contains(&k.server.public().fingerprint()),
            "{err}"
        );
        // The server never saw HS3: the client's key stayed hidden.
        assert!(server.join().unwrap().is_err());
    });
}

#[test]
fn a_refusal_reaches_the_client_with_the_reason() {
    let k = keys();
    let (a, mut b) = UnixTransport::pair().unwrap();
    let ssec = server_sec(&k);
    std::thread::scope(|s| {
        s.spawn(move || {
            let head = read_head(&mut b, Duration::from_secs(10), &AtomicBool::new(false)).unwrap();
            let pending = accept(b, head, &ssec, &AtomicBool::new(false)).unwrap();
            pending.refuse("not authorized").unwrap();
        });
        let err = connect(a, "pair", Service::Files, &client_sec(&k, Cipher::Aes256Gcm, 32)).unwrap_err();
        match err {
            SecureError::Refused { reason, fingerprint } => {
                assert_eq!(reason, "not authorized");
                assert_eq!(fingerprint, k.client.public().fingerprint());
            }
            other => panic!("{other}"),
        }
    });
}

#[test]
fn a_silent_or_cancelled_handshake_ends_at_its_deadline() {
    let k = keys();
    let (_a, mut b) = UnixTransport::pair().unwrap();
    let err = read_head(&mut b, Duration::from_millis(200), &AtomicBool::new(false)).unwrap_err();
    assert!(matches!(err, SecureError::TimedOut(..)), "{err}");
    let err = read_head(&mut b, Duration::from_secs(60), &AtomicBool::new(true)).unwrap_err();
    assert!(matches!(err, SecureError::Dropped), "{err}");
    let _ = k;
}

/// A transport that records the datagram keys a protected session installs
/// (UDP would tag with them, docs/wire.md §14.7).
struct Keyed {
    inner: UnixTransport,
    got: std::sync::Arc<std::sync::Mutex<Vec<pfs_transport::DatagramKeys>>>,
}

impl Transport for Keyed {
    fn kind(&self) -> &'static str {
        "TEST"
    }
    fn peer(&self) -> String {
        "test".into()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.inner.write_vectored(bufs)
    }
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
    fn set_read_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.inner.set_read_timeout(t)
    }
    fn set_write_timeout(&mut self, t: Option<Duration>) -> io::Result<()> {
        self.inner.set_write_timeout(t)
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }
    fn protect_datagrams(&mut self, keys: &pfs_transport::DatagramKeys) {
        self.got.lock().unwrap().push(keys.clone());
    }
}

#[test]
fn both_sides_install_matching_datagram_keys_through_the_wrappers() {
    use pfs_transport::udp::DatagramCipher;
    let k = keys();
    for (cipher, want) in [
        (Cipher::Aes256Gcm, DatagramCipher::Aes256Gcm),
        (Cipher::ChaCha20Poly1305, DatagramCipher::ChaCha20Poly1305),
    ] {
        let (a, b) = UnixTransport::pair().unwrap();
        let (client_got, server_got) = (Default::default(), Default::default());
        let mut server_t = Keyed {
            inner: b,
            got: std::sync::Arc::clone(&server_got),
        };
        let client_t = Keyed {
            inner: a,
            got: std::sync::Arc::clone(&client_got),
        };
        let ssec = server_sec(&k);
        std::thread::scope(|s| {
            let server = s.spawn(move || {
                // As a server does: the first bytes are read, then put back
                // in front (Prefixed) and the whole is boxed.
                let head =
                    read_head(&mut server_t, Duration::from_secs(10), &AtomicBool::new(false)).unwrap();
                let t: Box<dyn Transport> = Box::new(server_t);
                let t = pfs_auth::Prefixed::new(t, &[]);
                accept(t, head, &ssec, &AtomicBool::new(false))
                    .unwrap()
                    .admit()
                    .unwrap()
            });
            let client = connect(client_t, "pair", Service::Files, &client_sec(&k, cipher, 16)).unwrap();
            drop((client, server.join().unwrap()));
        });
        let (c, s) = (client_got.lock().unwrap(), server_got.lock().unwrap());
        assert_eq!((c.len(), s.len()), (1, 1), "each side installs its keys once");
        assert_eq!(c[0].send, s[0].recv);
        assert_eq!(c[0].recv, s[0].send);
        assert_ne!(c[0].send, c[0].recv, "each direction has its own key");
        assert_eq!((c[0].cipher, s[0].cipher), (want, want));
    }
}

/// A handshake the server cannot finish gets a plain ERROR `AUTH` in place
/// of the message the client awaits (HS2, or the verdict), never a silent
/// close: a proposal it does not take is named, a pre-shared key on one
/// side only is named, a wrong pre-shared key gets the generic refusal.
#[test]
fn a_failed_handshake_is_answered_with_an_error_frame() {
    let k = keys();
    let psk = |b: u8| Some(pfs_auth::Psk([b; 32]));
    // (client psk, server psk, client rotate_log2, what the client is told)
    let cases = [
        (None, None, 10, "bad proposal"),
        (psk(1), None, 20, "pre-shared key mismatch"),
        (psk(1), psk(2), 20, "not authorized"),
    ];
    for (cpsk, spsk, rotate_log2, told) in cases {
        let (a, mut b) = UnixTransport::pair().unwrap();
        let ssec = ServerSecurity {
            psk: spsk,
            ..server_sec(&k)
        };
        std::thread::scope(|s| {
            let server = s.spawn(move || {
                let head = read_head(&mut b, Duration::from_secs(10), &AtomicBool::new(false)).unwrap();
                accept(b, head, &ssec, &AtomicBool::new(false)).map(drop)
            });
            let csec = ClientSecurity {
                psk: cpsk,
                ..client_sec(&k, Cipher::Aes256Gcm, rotate_log2)
            };
            let err = connect(a, "pair", Service::Files, &csec).unwrap_err();
            match &err {
                SecureError::PlainRefusal { code, message } => {
                    assert_eq!(*code, pfs_wire::ErrorCode::Auth as u16, "{told}: {message}");
                    assert!(message.contains(told), "{told}: {message}");
                }
                other => panic!("{told}: {other}"),
            }
            let e = server.join().unwrap().unwrap_err();
            assert!(matches!(e, SecureError::Handshake(_)), "{told}: {e}");
        });
    }
    // A good handshake still works.
    let (mut c, mut s) = session(&k, Cipher::Aes256Gcm, 20);
    c.write_all(b"ok").unwrap();
    let mut got = [0u8; 2];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"ok");
}

/// A record that has begun must be whole within the record deadline of
/// waiting: one trickled a byte at a time ends the session with
/// `RecordError::Late`.
#[test]
fn a_trickled_record_ends_at_its_deadline() {
    let k = keys();
    let (mut c, mut s) = session(&k, Cipher::ChaCha20Poly1305, 20);
    s.set_record_timeout(Duration::from_millis(300));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    std::thread::scope(|sc| {
        let reader = sc.spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return Err::<(), _>(io::Error::other("end of stream")),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                    Err(e) => return Err(e),
                }
            }
        });
        // A DATA record header declaring 1000 bytes, then a byte every
        // 50 ms (at most 20 s of it) until the reader gives up.
        let raw = &mut c.get_mut().inner;
        raw.write_all(&[1, 0, 0x03, 0xe8]).unwrap();
        for _ in 0..400 {
            if reader.is_finished() || raw.write_all(&[0]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let e = reader.join().unwrap().unwrap_err();
        let late = e
            .get_ref()
            .and_then(|e| e.downcast_ref::<pfs_auth::RecordError>())
            .is_some_and(|e| matches!(e, pfs_auth::RecordError::Late(_)));
        assert!(late, "{e}");
    });
    // A fresh session carries bytes as before.
    let (mut c, mut s) = session(&k, Cipher::ChaCha20Poly1305, 20);
    s.set_record_timeout(Duration::from_millis(300));
    std::thread::scope(|sc| {
        sc.spawn(move || c.write_all(&[7u8; 300_000]).unwrap());
        let mut got = vec![0u8; 300_000];
        s.read_exact(&mut got).unwrap();
        assert!(got.iter().all(|&b| b == 7));
    });
}
