//! The IPC methods the study compares, behind one small interface: a
//! [`Channel`] carries fixed 32-byte messages between two processes, and its
//! [`Connect`] impl sets one up (server: create an endpoint and name its
//! address; client: connect to that address).
//!
//! Adding a method — e.g. a PacketFS shared-memory ring — is one more
//! [`IpcMethod`] variant, one arm in [`IpcMethod::with`] and one `Connect` impl;
//! the phases, the child process, the report and the ratios against
//! `unix-epoll` need no change.
//!
//! The kernel baselines here: a Unix stream socket whose reader waits in
//! `epoll_wait` before each `read` (RPAL's baseline), a pair of FIFOs with
//! blocking `read`/`write`, and TCP over loopback with `TCP_NODELAY`. Every
//! receive loops until all 32 bytes are in (stream reads may be partial).

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::ValueEnum;

use crate::report::Method;
use rustix::event::epoll;
use rustix::fs::{Mode, OFlags};

/// Bytes in every message.
pub const MSG: usize = 32;

/// One side of a connected pair that carries fixed 32-byte messages.
pub trait Channel {
    /// Sends one message (blocks while the channel is full).
    fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()>;
    /// Receives one whole message, waiting the method's way for it.
    fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()>;
}

/// How a method's two processes find each other.
pub trait Connect: Channel + Sized {
    /// The server's endpoint between announcing its address and the client's arrival.
    type Listener;
    /// Server: creates an endpoint (files go under `dir`, a private directory
    /// of this row); returns it and the address the client is to connect to.
    fn listen(dir: &Path) -> anyhow::Result<(Self::Listener, String)>;
    /// Server: waits for the client (no bound: the client side kills a server that hangs).
    fn accept(listener: Self::Listener) -> anyhow::Result<Self>;
    /// Client: connects to `address`, giving up at `deadline`.
    fn connect(address: &str, deadline: Instant) -> anyhow::Result<Self>;
}

/// Something to run with a method's channel type: [`IpcMethod::with`] picks the
/// type once, outside the timed loops, so they are monomorphic.
pub trait WithChannel {
    /// What the run returns.
    type Output;
    /// Runs with channel type `C`.
    fn run<C: Connect>(self) -> Self::Output;
}

/// An IPC method: one row of the study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum IpcMethod {
    /// Unix stream socket; the reader waits in epoll_wait, then reads.
    UnixEpoll,
    /// Two FIFOs (request, reply); blocking read and write.
    Pipe,
    /// TCP over 127.0.0.1 with TCP_NODELAY; blocking read and write.
    Tcp,
    /// PacketFS shared-memory rings (pfs-ipc), both sides busy-spinning.
    RingSpin,
    /// PacketFS rings, spin 50 µs then sched_yield between polls.
    RingYield,
    /// PacketFS rings, spin 50 µs then sleep on a futex in shared memory.
    RingFutex,
}

impl IpcMethod {
    /// Every method, in report order. `unix-epoll` first: it is the baseline
    /// every other row is compared with.
    pub const ALL: [IpcMethod; 6] = [
        IpcMethod::UnixEpoll,
        IpcMethod::Pipe,
        IpcMethod::Tcp,
        IpcMethod::RingSpin,
        IpcMethod::RingYield,
        IpcMethod::RingFutex,
    ];

    /// The baseline of the ratios.
    pub const BASELINE: IpcMethod = IpcMethod::UnixEpoll;
}

impl Method for IpcMethod {
    /// Short name, as given to `--only` and the peer's `--method`.
    fn key(self) -> &'static str {
        match self {
            Self::UnixEpoll => "unix-epoll",
            Self::Pipe => "pipe",
            Self::Tcp => "tcp",
            Self::RingSpin => "ring-spin",
            Self::RingYield => "ring-yield",
            Self::RingFutex => "ring-futex",
        }
    }

    /// Row label (the design's `Conventional (<tool>)` for kernel baselines).
    fn label(self) -> &'static str {
        match self {
            Self::UnixEpoll => "Conventional (Unix socket + epoll)",
            Self::Pipe => "Conventional (FIFO pair)",
            Self::Tcp => "Conventional (TCP loopback, TCP_NODELAY)",
            Self::RingSpin => "PacketFS SHM ring (busy-spin)",
            Self::RingYield => "PacketFS SHM ring (spin-then-yield)",
            Self::RingFutex => "PacketFS SHM ring (spin-then-futex)",
        }
    }
}

impl IpcMethod {
    /// How a receiver waits for the next message.
    pub fn wait(self) -> &'static str {
        match self {
            Self::UnixEpoll => "epoll_wait then read",
            Self::Pipe | Self::Tcp => "blocking read",
            Self::RingSpin => "polls the next record's tag, no system call",
            Self::RingYield => "polls 50 µs, then sched_yield between polls",
            Self::RingFutex => {
                "polls 50 µs, then FUTEX_WAIT on a shared word (woken only if it announced sleep)"
            }
        }
    }

    /// Runs `f` with this method's channel type.
    pub fn with<F: WithChannel>(self, f: F) -> F::Output {
        match self {
            Self::UnixEpoll => f.run::<UnixEpoll>(),
            Self::Pipe => f.run::<Fifo>(),
            Self::Tcp => f.run::<Tcp>(),
            Self::RingSpin => f.run::<Ring<SpinWait>>(),
            Self::RingYield => f.run::<Ring<YieldWait>>(),
            Self::RingFutex => f.run::<Ring<FutexWait>>(),
        }
    }
}

/// Reads exactly one message from a blocking reader: loops over partial
/// reads and EINTR; end of stream is an error.
fn read_msg(r: &mut impl Read, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
    let mut got = 0;
    while got < MSG {
        match r.read(&mut msg[got..]) {
            Ok(0) => bail!("the peer closed the channel ({got} of {MSG} bytes of a message read)"),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("read"),
        }
    }
    Ok(())
}

/// Writes one whole message (`write_all` loops over partial writes and EINTR).
fn write_msg(w: &mut impl Write, msg: &[u8; MSG]) -> anyhow::Result<()> {
    w.write_all(msg).context("write")
}

// ---------------------------------------------------------------------------
// Unix stream socket + epoll.

/// A Unix stream socket whose receives wait in `epoll_wait` first.
#[derive(Debug)]
pub struct UnixEpoll {
    stream: UnixStream,
    epoll: OwnedFd,
}

impl UnixEpoll {
    fn new(stream: UnixStream) -> anyhow::Result<Self> {
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC).context("epoll_create1")?;
        epoll::add(&ep, &stream, epoll::EventData::new_u64(0), epoll::EventFlags::IN).context("epoll_ctl")?;
        Ok(Self { stream, epoll: ep })
    }

    /// Blocks in `epoll_wait` until the socket is readable (or at end of stream).
    fn wait_readable(&self) -> anyhow::Result<()> {
        // One event slot on the stack: there is one fd to watch.
        let mut events = [epoll::Event {
            flags: epoll::EventFlags::empty(),
            data: epoll::EventData::new_u64(0),
        }];
        loop {
            match epoll::wait(&self.epoll, &mut events, None) {
                Ok(n) if n > 0 => return Ok(()),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e).context("epoll_wait"),
            }
        }
    }
}

impl Channel for UnixEpoll {
    fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()> {
        write_msg(&mut self.stream, msg)
    }

    fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
        let mut got = 0;
        while got < MSG {
            self.wait_readable()?;
            match self.stream.read(&mut msg[got..]) {
                Ok(0) => bail!("the peer closed the socket ({got} of {MSG} bytes of a message read)"),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("read"),
            }
        }
        Ok(())
    }
}

impl Connect for UnixEpoll {
    type Listener = UnixListener;

    fn listen(dir: &Path) -> anyhow::Result<(UnixListener, String)> {
        let path = dir.join("unix-epoll.sock");
        let l = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        Ok((l, path.to_string_lossy().into_owned()))
    }

    fn accept(listener: UnixListener) -> anyhow::Result<Self> {
        let (stream, _) = listener.accept().context("accept")?;
        Self::new(stream)
    }

    fn connect(address: &str, _deadline: Instant) -> anyhow::Result<Self> {
        // The server listens before it prints the address: connect completes at once.
        let stream = UnixStream::connect(address).with_context(|| format!("connecting to {address}"))?;
        Self::new(stream)
    }
}

// ---------------------------------------------------------------------------
// FIFO pair.

/// Request and reply FIFOs with blocking reads and writes.
#[derive(Debug)]
pub struct Fifo {
    rx: File,
    tx: File,
}

/// File names of the FIFOs inside the row's directory.
const REQUEST: &str = "request.fifo";
const REPLY: &str = "reply.fifo";
/// The server's first message on the reply FIFO: proves it holds the write end.
const HELLO: [u8; MSG] = *b"pfs bench ipc fifo hello........";

fn open(path: &Path, flags: OFlags) -> io::Result<File> {
    Ok(File::from(rustix::fs::open(
        path,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
    )?))
}

fn set_blocking(f: &File) -> anyhow::Result<()> {
    let flags = rustix::fs::fcntl_getfl(f).context("fcntl(F_GETFL)")?;
    rustix::fs::fcntl_setfl(f, flags - OFlags::NONBLOCK).context("fcntl(F_SETFL)")?;
    Ok(())
}

impl Channel for Fifo {
    fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()> {
        // 32 bytes ≤ PIPE_BUF: each message is written atomically.
        write_msg(&mut self.tx, msg)
    }

    fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
        read_msg(&mut self.rx, msg)
    }
}

impl Connect for Fifo {
    type Listener = PathBuf;

    fn listen(dir: &Path) -> anyhow::Result<(PathBuf, String)> {
        for name in [REQUEST, REPLY] {
            rustix::fs::mkfifoat(rustix::fs::CWD, dir.join(name), Mode::RUSR | Mode::WUSR)
                .with_context(|| format!("mkfifo {}", dir.join(name).display()))?;
        }
        Ok((dir.to_path_buf(), dir.to_string_lossy().into_owned()))
    }

    fn accept(dir: PathBuf) -> anyhow::Result<Self> {
        // Blocking opens, request first: each returns once the client has
        // opened the other end, in the same order.
        let rx = open(&dir.join(REQUEST), OFlags::RDONLY).context("opening the request FIFO")?;
        let mut tx = open(&dir.join(REPLY), OFlags::WRONLY).context("opening the reply FIFO")?;
        write_msg(&mut tx, &HELLO)?;
        Ok(Self { rx, tx })
    }

    fn connect(address: &str, deadline: Instant) -> anyhow::Result<Self> {
        let dir = Path::new(address);
        // Non-blocking opens, so that a server that never opens its ends
        // cannot hang the client: the write end fails (ENXIO) until the
        // server is opening the read end.
        let tx = loop {
            match open(&dir.join(REQUEST), OFlags::WRONLY | OFlags::NONBLOCK) {
                Ok(f) => break f,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e).context("opening the request FIFO"),
            }
        };
        let mut rx =
            open(&dir.join(REPLY), OFlags::RDONLY | OFlags::NONBLOCK).context("opening the reply FIFO")?;
        // Until the server holds the reply FIFO's write end, a read would
        // see end of file; its hello says it does. Poll for it, bounded.
        let mut hello = [0u8; MSG];
        let mut got = 0;
        while got < MSG {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("the server did not open the reply FIFO in time");
            }
            let mut fds = [rustix::event::PollFd::new(&rx, rustix::event::PollFlags::IN)];
            let wait = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: left.min(Duration::from_millis(100)).as_nanos() as _,
            };
            match rustix::event::poll(&mut fds, Some(&wait)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e).context("poll"),
            }
            let hup = fds[0].revents().contains(rustix::event::PollFlags::HUP);
            match rx.read(&mut hello[got..]) {
                Ok(0) if hup => {
                    bail!("the server closed the reply FIFO before its hello")
                }
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                Err(e) => return Err(e).context("reading the server's hello"),
            }
        }
        if hello != HELLO {
            bail!("unexpected first message on the reply FIFO");
        }
        set_blocking(&tx)?;
        set_blocking(&rx)?;
        Ok(Self { rx, tx })
    }
}

// ---------------------------------------------------------------------------
// TCP loopback.

/// A loopback TCP connection with Nagle off; blocking reads and writes.
#[derive(Debug)]
pub struct Tcp {
    stream: TcpStream,
}

impl Channel for Tcp {
    fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()> {
        write_msg(&mut self.stream, msg)
    }

    fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
        read_msg(&mut self.stream, msg)
    }
}

impl Connect for Tcp {
    type Listener = TcpListener;

    fn listen(_dir: &Path) -> anyhow::Result<(TcpListener, String)> {
        let l = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
        let addr = l.local_addr().context("local address")?;
        Ok((l, addr.to_string()))
    }

    fn accept(listener: TcpListener) -> anyhow::Result<Self> {
        let (stream, _) = listener.accept().context("accept")?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        Ok(Self { stream })
    }

    fn connect(address: &str, deadline: Instant) -> anyhow::Result<Self> {
        let addr: SocketAddr = address
            .parse()
            .with_context(|| format!("bad TCP address {address:?}"))?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let stream =
            TcpStream::connect_timeout(&addr, left).with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        Ok(Self { stream })
    }
}

// ---------------------------------------------------------------------------
// PacketFS shared-memory rings.

/// A wait strategy chosen at compile time, so each ring row is monomorphic.
pub trait RingWait {
    /// The strategy.
    const STRATEGY: pfs_ipc::WaitStrategy;
}

/// Busy-spin.
#[derive(Debug)]
pub struct SpinWait;
impl RingWait for SpinWait {
    const STRATEGY: pfs_ipc::WaitStrategy = pfs_ipc::WaitStrategy::Spin;
}

/// Spin, then yield.
#[derive(Debug)]
pub struct YieldWait;
impl RingWait for YieldWait {
    const STRATEGY: pfs_ipc::WaitStrategy = pfs_ipc::WaitStrategy::SpinYield;
}

/// Spin, then futex.
#[derive(Debug)]
pub struct FutexWait;
impl RingWait for FutexWait {
    const STRATEGY: pfs_ipc::WaitStrategy = pfs_ipc::WaitStrategy::SpinFutex;
}

/// A pfs-ipc endpoint: each message is one 32-byte inline record.
#[derive(Debug)]
pub struct Ring<W> {
    ep: pfs_ipc::Endpoint,
    _wait: std::marker::PhantomData<W>,
}

impl<W: RingWait> Channel for Ring<W> {
    fn send(&mut self, msg: &[u8; MSG]) -> anyhow::Result<()> {
        self.ep.send(msg).context("ring send")
    }

    fn recv(&mut self, msg: &mut [u8; MSG]) -> anyhow::Result<()> {
        let m = self.ep.recv().context("ring recv")?;
        let bytes = m.bytes();
        if bytes.len() != MSG {
            bail!("ring message of {} bytes, expected {MSG}", bytes.len());
        }
        msg.copy_from_slice(bytes);
        Ok(())
    }
}

impl<W: RingWait> Connect for Ring<W> {
    type Listener = pfs_ipc::IpcListener;

    fn listen(dir: &Path) -> anyhow::Result<(pfs_ipc::IpcListener, String)> {
        let path = dir.join("ring.sock");
        let opts = pfs_ipc::RendezvousConfig {
            wait: pfs_ipc::WaitConfig::with(W::STRATEGY),
            ..pfs_ipc::RendezvousConfig::default()
        };
        let l =
            pfs_ipc::IpcListener::bind(&path, opts).with_context(|| format!("binding {}", path.display()))?;
        Ok((l, path.to_string_lossy().into_owned()))
    }

    fn accept(listener: pfs_ipc::IpcListener) -> anyhow::Result<Self> {
        let ep = listener.accept().context("ring rendezvous")?;
        Ok(Self {
            ep,
            _wait: std::marker::PhantomData,
        })
    }

    fn connect(address: &str, deadline: Instant) -> anyhow::Result<Self> {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let ep = pfs_ipc::Endpoint::connect_timeout(
            Path::new(address),
            pfs_ipc::WaitConfig::with(W::STRATEGY),
            left,
        )
        .with_context(|| format!("connecting to {address}"))?;
        Ok(Self {
            ep,
            _wait: std::marker::PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends of `C` in one process: the server on a thread.
    fn round_trip<C: Connect + 'static>() {
        let dir = std::env::temp_dir().join(format!(
            "pfs-ipc-methods-{}-{}",
            std::process::id(),
            std::any::type_name::<C>().rsplit("::").next().unwrap_or("c")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let server_dir = dir.clone();
        let server = std::thread::spawn(move || {
            let (listener, addr) = C::listen(&server_dir).unwrap();
            tx.send(addr).unwrap();
            let mut ch = C::accept(listener).unwrap();
            let mut m = [0u8; MSG];
            for _ in 0..100 {
                ch.recv(&mut m).unwrap();
                m[31] = m[31].wrapping_add(1);
                ch.send(&m).unwrap();
            }
        });
        let addr = rx.recv().unwrap();
        let mut ch = C::connect(&addr, Instant::now() + Duration::from_secs(10)).unwrap();
        for i in 0..100u8 {
            let mut m = [i; MSG];
            ch.send(&m).unwrap();
            ch.recv(&mut m).unwrap();
            assert_eq!(m[0], i);
            assert_eq!(m[31], i.wrapping_add(1));
        }
        server.join().unwrap();
        // The server is gone: the next receive reports it instead of hanging.
        let mut m = [0u8; MSG];
        assert!(ch.recv(&mut m).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unix_epoll_round_trips() {
        round_trip::<UnixEpoll>();
    }

    #[test]
    fn fifo_round_trips() {
        round_trip::<Fifo>();
    }

    #[test]
    fn tcp_round_trips() {
        round_trip::<Tcp>();
    }

    #[test]
    fn rings_round_trip() {
        round_trip::<Ring<SpinWait>>();
        round_trip::<Ring<YieldWait>>();
        round_trip::<Ring<FutexWait>>();
    }

    #[test]
    fn partial_reads_are_completed() {
        // A reader that hands out 3 bytes at a time.
        struct Trickle(Vec<u8>);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(3).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0.drain(..n);
                Ok(n)
            }
        }
        let mut r = Trickle((0..40).collect());
        let mut m = [0u8; MSG];
        read_msg(&mut r, &mut m).unwrap();
        assert_eq!(m[31], 31);
        assert!(
            read_msg(&mut r, &mut m).is_err(),
            "8 bytes left then end of stream"
        );
    }

    #[test]
    fn fifo_connect_gives_up_without_a_server() {
        let dir = std::env::temp_dir().join(format!("pfs-ipc-nofifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let _ = Fifo::listen(&dir).unwrap();
        // The deadline is already past: connecting must fail rather than wait
        // for a server that never opens its end.
        let past = Instant::now() - Duration::from_millis(1);
        assert!(Fifo::connect(&dir.to_string_lossy(), past).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
