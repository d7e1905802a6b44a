//! One conformance suite, run against every transport.

use std::io::{ErrorKind, IoSlice};
use std::thread;
use std::time::Duration;

use pfs_transport::{
    Listener, ShmConfig, ShmListener, ShmTransport, TcpConfig, TcpListener, TcpTransport, Transport,
    UdpConfig, UdpListener, UdpTransport, UnixListener, UnixTransport,
};

/// Connects a client to a fresh listener of one kind.
trait Harness: Sync {
    type L: Listener + Sync;
    fn listen(&self) -> Self::L;
    fn connect(&self, l: &Self::L) -> Box<dyn Transport>;
}

struct Tcp;
impl Harness for Tcp {
    type L = TcpListener;
    fn listen(&self) -> TcpListener {
        TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap()
    }
    fn connect(&self, l: &TcpListener) -> Box<dyn Transport> {
        Box::new(TcpTransport::connect(&l.local_addr(), &TcpConfig::default()).unwrap())
    }
}

struct Unix(tempfile::TempDir);
impl Harness for Unix {
    type L = UnixListener;
    fn listen(&self) -> UnixListener {
        UnixListener::bind(&self.0.path().join("s")).unwrap()
    }
    fn connect(&self, l: &UnixListener) -> Box<dyn Transport> {
        Box::new(UnixTransport::connect(std::path::Path::new(&l.local_addr())).unwrap())
    }
}

/// Shared-memory rings with a small ring, so the suite's transfers wrap it
/// many times and writes larger than one record are split.
struct Shm(tempfile::TempDir, ShmConfig);
impl Harness for Shm {
    type L = ShmListener;
    fn listen(&self) -> ShmListener {
        ShmListener::bind(&self.0.path().join("s"), &self.1).unwrap()
    }
    fn connect(&self, l: &ShmListener) -> Box<dyn Transport> {
        Box::new(ShmTransport::connect(std::path::Path::new(&l.local_addr()), &self.1).unwrap())
    }
}

/// UDP with small buffers, so the suite fills the windows and wraps the rings.
struct Udp(UdpConfig);
impl Harness for Udp {
    type L = UdpListener;
    fn listen(&self) -> UdpListener {
        UdpListener::bind("127.0.0.1:0", self.0).unwrap()
    }
    fn connect(&self, l: &UdpListener) -> Box<dyn Transport> {
        Box::new(UdpTransport::connect(&l.local_addr(), &self.0).unwrap())
    }
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

/// Many-slice vectored writes (more than IOV_MAX) arrive whole and in order.
fn vectored_roundtrip<H: Harness>(h: &H) {
    let l = h.listen();
    let parts: Vec<Vec<u8>> = (0..3000).map(|i| pattern(1 + i % 700, i as u8)).collect();
    let expected: Vec<u8> = parts.concat();
    let total = expected.len();
    let server = thread::scope(|s| {
        let srv = s.spawn(|| {
            let mut c = l.accept().unwrap();
            let mut got = vec![0u8; total];
            c.read_exact(&mut got).unwrap();
            let mut one = [0u8; 1];
            assert_eq!(c.read(&mut one).unwrap(), 0, "end of stream after shutdown");
            got
        });
        let mut c = h.connect(&l);
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        assert_eq!(c.write_all_vectored(&mut slices).unwrap(), total as u64);
        c.shutdown_write().unwrap();
        srv.join().unwrap()
    });
    assert_eq!(server, expected);
}

/// A peer that closes early gives UnexpectedEof to read_exact, not a hang.
fn early_close<H: Harness>(h: &H) {
    let l = h.listen();
    thread::scope(|s| {
        s.spawn(|| {
            let mut c = h.connect(&l);
            c.write_all(b"abc").unwrap();
        });
        let mut c = l.accept().unwrap();
        let mut buf = [0u8; 10];
        let err = c.read_exact(&mut buf).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedEof);
    });
}

/// A read timeout fires instead of blocking forever.
fn read_timeout<H: Harness>(h: &H) {
    let l = h.listen();
    // Connect on another thread: a transport may complete its rendezvous
    // only inside `accept` (SHM does).
    let (_client, mut c) = thread::scope(|s| {
        let client = s.spawn(|| h.connect(&l));
        let c = l.accept().unwrap();
        (client.join().unwrap(), c)
    });
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 1];
    let err = c.read(&mut buf).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
}

/// A write timeout fires when the peer never reads, instead of blocking
/// forever once the buffers between them are full.
fn write_timeout<H: Harness>(h: &H) {
    let l = h.listen();
    let (_client, mut c) = thread::scope(|s| {
        let client = s.spawn(|| h.connect(&l));
        let c = l.accept().unwrap();
        (client.join().unwrap(), c)
    });
    c.set_write_timeout(Some(Duration::from_millis(50))).unwrap();
    let block = vec![7u8; 1 << 20];
    // Far more than any socket buffer or ring holds: some write must fail.
    let err = (0..1024)
        .find_map(|_| c.write_all(&block).err())
        .expect("a write to a peer that never reads timed out");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
}

/// A large transfer in both directions at once does not deadlock.
fn bidirectional<H: Harness>(h: &H) {
    let l = h.listen();
    let data = pattern(8 << 20, 5);
    thread::scope(|s| {
        let d = &data;
        let l = &l;
        let srv = s.spawn(move || {
            let mut c = l.accept().unwrap();
            let mut got = vec![0u8; d.len()];
            c.read_exact(&mut got).unwrap();
            c.write_all(&got).unwrap();
            got == *d
        });
        let mut c = h.connect(l);
        c.write_all(d).unwrap();
        let mut back = vec![0u8; d.len()];
        c.read_exact(&mut back).unwrap();
        assert!(srv.join().unwrap());
        assert_eq!(&back, d);
    });
}

/// `read_ready` takes what has arrived without waiting: nothing yet is
/// `None`, bytes are returned
/// whole and in order, and the peer's close is `Some(0)`.
fn read_ready<H: Harness>(h: &H) {
    let l = h.listen();
    thread::scope(|s| {
        let l = &l;
        let (go, ready) = std::sync::mpsc::channel::<()>();
        let srv = s.spawn(move || {
            let mut c = l.accept().unwrap();
            ready.recv().unwrap();
            c.write_all(&pattern(3000, 9)).unwrap();
            ready.recv().unwrap();
            c.shutdown_write().unwrap();
            ready.recv().unwrap();
        });
        let mut c = h.connect(l);
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = vec![0u8; 4096];
        // Were it to wait, the 30 s timeout would end it with an error.
        assert_eq!(c.read_ready(&mut buf).unwrap(), None);
        go.send(()).unwrap();
        let mut got = Vec::new();
        while got.len() < 3000 {
            if let Some(n) = c.read_ready(&mut buf).unwrap() {
                assert!(n > 0, "end of stream before the bytes");
                got.extend_from_slice(&buf[..n]);
            } else {
                thread::yield_now();
            }
        }
        assert_eq!(got, pattern(3000, 9));
        go.send(()).unwrap();
        let end = loop {
            if let Some(n) = c.read_ready(&mut buf).unwrap() {
                break n;
            }
            thread::yield_now();
        };
        assert_eq!(end, 0);
        go.send(()).unwrap();
        srv.join().unwrap();
    });
}

fn suite<H: Harness>(h: H) {
    read_ready(&h);
    vectored_roundtrip(&h);
    early_close(&h);
    read_timeout(&h);
    write_timeout(&h);
    bidirectional(&h);
}

#[test]
fn tcp_conformance() {
    suite(Tcp);
}

#[test]
fn unix_conformance() {
    suite(Unix(tempfile::tempdir().unwrap()));
}

#[test]
fn shm_conformance() {
    for wait in [pfs_ipc::WaitStrategy::SpinFutex, pfs_ipc::WaitStrategy::SpinYield] {
        let cfg = ShmConfig {
            ring_bytes: 64 << 10,
            wait,
        };
        suite(Shm(tempfile::tempdir().unwrap(), cfg));
    }
}

#[test]
fn udp_conformance() {
    suite(Udp(UdpConfig::default()));
    suite(Udp(UdpConfig {
        send_buffer: 256 << 10,
        recv_window: 256 << 10,
        max_datagram: 1200,
        ..UdpConfig::default()
    }));
}
