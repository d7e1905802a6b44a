//! The QUIC baseline, `Conventional (QUIC, quinn)`: one bulk transfer over
//! quinn between two `pfs` processes, run by the suite like its iperf3 rows
//! (the server in the receiver's network namespace, the client here).
//!
//! This module owns the peer pair, the hidden `pfs bench quic-peer server`
//! and `pfs bench quic-peer client`, and [`run_quic`], the suite row that
//! starts them over the suite's network path.
//!
//! The transfer: the client opens one bidirectional stream, writes N bytes
//! from one reused buffer and finishes the stream; the server counts what it
//! reads, then answers on the same stream with its count, its elapsed time
//! (first stream bytes to the stream's end) and its CPU — the receiver's
//! numbers are the row's, as in every other row. The client adds quinn's
//! connection statistics (datagrams, UDP bytes, loss, congestion events,
//! RTT). Both sides are bounded by `--timeout`: a transfer that runs out of
//! time reports what was delivered instead of hanging.
//!
//! The configuration is meant to be a fair one for a long fat pipe, not a
//! strawman: stream, connection and send windows of 64 MiB (bandwidth ×
//! RTT of 10 Gbit/s × 50 ms), Cubic or BBR, MTU discovery up to the path's
//! MTU (64 KiB datagrams on loopback, as TCP's 64 KiB segments there), large
//! socket buffers, UDP GSO while a batch fits the kernel's 64 KiB per send
//! ([`gso_for_payload`]). quinn and tokio live in this crate only: no
//! library crate of the workspace depends on them.
//!
//! Trust: the server makes a self-signed certificate at start (rcgen) and
//! writes it to `--cert-out`; the client trusts exactly that certificate
//! (a root store holding it alone) and verifies the server as usual.

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use quinn::congestion::{BbrConfig, CubicConfig};
use quinn::rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use quinn::{Connection, Endpoint, EndpointConfig, IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};
use serde::{Deserialize, Serialize};

use super::netpath::NetPath;
use super::row::Row;
use crate::args::parse_size;
use crate::child::{run_client, ChildGuard};
use crate::Outcome;

/// Default stream, connection and send window: above bandwidth × RTT of
/// the links the suite emulates (1–10 Gbit/s at 50 ms is 6–63 MB).
pub const DEFAULT_WINDOW: u64 = 64 << 20;
/// Socket receive and send buffers asked for (root may exceed
/// `net.core.rmem_max`; the granted sizes are reported).
const SOCKET_BUFFER: usize = 16 << 20;
/// Size of the one buffer the client writes again and again.
const WRITE_SIZE: usize = 1 << 20;
/// Longest receipt the client accepts from the server.
const RECEIPT_LIMIT: usize = 4096;
/// The name in the server's certificate and the client's connect.
const SERVER_NAME: &str = "localhost";
/// IPv4 + UDP headers: the UDP payload of a datagram filling an MTU.
const IPV4_UDP_HEADERS: u32 = 28;
/// Largest UDP payload quinn will use (its MTU discovery bound).
const MAX_UDP_PAYLOAD: u16 = 65527;
/// QUIC's smallest allowed UDP payload.
const MIN_UDP_PAYLOAD: u16 = 1200;
/// Datagrams quinn 0.11 puts in one GSO send (its `MAX_TRANSMIT_SEGMENTS`).
const QUINN_GSO_SEGMENTS: u32 = 10;
/// Linux caps one UDP GSO send at 64 KiB in all.
const GSO_SEND_LIMIT: u32 = 65535;
/// Application close codes.
const CLOSE_DONE: u32 = 0;
const CLOSE_TIMED_OUT: u32 = 1;

/// Congestion controller of the sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Cc {
    /// quinn's Cubic (RFC 8312), its default.
    Cubic,
    /// quinn's BBR (v1, marked experimental by quinn).
    Bbr,
}

impl Cc {
    /// `cubic` or `bbr`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cubic => "cubic",
            Self::Bbr => "bbr",
        }
    }
}

/// `pfs bench quic-peer`: one side of the QUIC baseline (started by the suite).
#[derive(Debug, Args)]
pub struct QuicPeerArgs {
    /// Which side.
    #[command(subcommand)]
    pub side: QuicSide,
}

/// The two sides of a QUIC baseline transfer.
#[derive(Debug, Subcommand)]
pub enum QuicSide {
    /// Serve one transfer: print `{"event":"listening",…}`, receive, answer, print `{"event":"done",…}`.
    Server(QuicServerArgs),
    /// Send N bytes to a server and print a JSON report.
    Client(QuicClientArgs),
}

/// Settings both sides share.
#[derive(Debug, Clone, Args)]
pub struct QuicTuning {
    /// Stream, connection and send window, bytes.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub window: u64,
    /// Upper bound of MTU discovery and largest UDP payload accepted (1200–65527).
    #[arg(long, default_value_t = 1452, value_parser = clap::value_parser!(u16).range(1200..=65527))]
    pub max_udp_payload: u16,
    /// Give up after this many seconds (waiting for the peer included).
    #[arg(long, default_value_t = 120.0, value_parser = parse_secs)]
    pub timeout: f64,
    /// Pin the process to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Send one datagram per system call (no UDP GSO).
    #[arg(long)]
    pub no_gso: bool,
}

/// `pfs bench quic-peer server`
#[derive(Debug, Args)]
pub struct QuicServerArgs {
    /// UDP address to listen on (port 0: any free port; the listening line names it).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Bytes the client is expected to send (the done line says whether all arrived).
    #[arg(long, value_parser = parse_size)]
    pub bytes: u64,
    /// Write the server's self-signed certificate (DER) here for the client to trust.
    #[arg(long, value_name = "FILE")]
    pub cert_out: PathBuf,
    #[command(flatten)]
    pub tuning: QuicTuning,
}

/// `pfs bench quic-peer client`
#[derive(Debug, Args)]
pub struct QuicClientArgs {
    /// The server's address.
    #[arg(long)]
    pub connect: SocketAddr,
    /// The server's certificate (DER), the only one trusted.
    #[arg(long, value_name = "FILE")]
    pub cert: PathBuf,
    /// Bytes to send.
    #[arg(long, value_parser = parse_size)]
    pub bytes: u64,
    /// Congestion controller.
    #[arg(long, value_enum, default_value_t = Cc::Cubic)]
    pub cc: Cc,
    #[command(flatten)]
    pub tuning: QuicTuning,
}

fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 86400]")),
    }
}

/// What the server measured: the receiver's authoritative numbers.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Receipt {
    /// Stream bytes read.
    pub bytes: u64,
    /// From the stream's first bytes to its end (or to the loss of the connection).
    pub elapsed_s: f64,
    /// Server process user CPU over that time.
    pub user_s: f64,
    /// Server process system CPU over that time.
    pub sys_s: f64,
}

/// The server's readiness line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Listening {
    /// Always `listening`.
    pub event: String,
    /// The bound UDP address.
    pub addr: SocketAddr,
    /// Where the certificate (DER) was written.
    pub cert: PathBuf,
}

/// The server's last line, printed however the transfer ended.
#[derive(Debug, Serialize, Deserialize)]
pub struct Done {
    /// Always `done`.
    pub event: String,
    /// Bytes the client was expected to send.
    pub expected: u64,
    /// Whether the stream ended with exactly `expected` bytes.
    pub complete: bool,
    /// The receiver's numbers.
    pub receipt: Receipt,
    /// Why the transfer did not complete.
    pub error: Option<String>,
}

/// quinn's view of the connection at the end, from the client (sender) side.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct WireStats {
    /// UDP datagrams sent.
    pub udp_tx_datagrams: u64,
    /// UDP payload bytes sent (IP and UDP headers excluded).
    pub udp_tx_bytes: u64,
    /// Send system calls (with GSO, one carries several datagrams).
    pub udp_tx_ios: u64,
    /// UDP datagrams received (ACKs, mostly).
    pub udp_rx_datagrams: u64,
    /// UDP payload bytes received.
    pub udp_rx_bytes: u64,
    /// QUIC packets sent.
    pub sent_packets: u64,
    /// QUIC packets declared lost.
    pub lost_packets: u64,
    /// Bytes in packets declared lost.
    pub lost_bytes: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// Smoothed RTT at the end, ms.
    pub rtt_ms: f64,
    /// Congestion window at the end, bytes.
    pub cwnd: u64,
    /// UDP payload size in use at the end (after MTU discovery).
    pub mtu: u16,
}

impl WireStats {
    fn of(conn: &Connection) -> Self {
        let s = conn.stats();
        WireStats {
            udp_tx_datagrams: s.udp_tx.datagrams,
            udp_tx_bytes: s.udp_tx.bytes,
            udp_tx_ios: s.udp_tx.ios,
            udp_rx_datagrams: s.udp_rx.datagrams,
            udp_rx_bytes: s.udp_rx.bytes,
            sent_packets: s.path.sent_packets,
            lost_packets: s.path.lost_packets,
            lost_bytes: s.path.lost_bytes,
            congestion_events: s.path.congestion_events,
            rtt_ms: s.path.rtt.as_secs_f64() * 1e3,
            cwnd: s.path.cwnd,
            mtu: s.path.current_mtu,
        }
    }
}

/// The client's report (one JSON object on stdout).
#[derive(Debug, Serialize, Deserialize)]
pub struct ClientReport {
    /// Congestion controller used.
    pub cc: String,
    /// Bytes asked for.
    pub bytes: u64,
    /// Bytes written to the stream before it finished or time ran out.
    pub sent: u64,
    /// Whether `--timeout` ran out.
    pub timed_out: bool,
    /// Client wall time, connect included.
    pub elapsed_s: f64,
    /// The server's answer; `None` when none arrived.
    pub receipt: Option<Receipt>,
    /// Stream, connection and send window.
    pub window: u64,
    /// MTU discovery bound.
    pub max_udp_payload: u16,
    /// Socket receive and send buffers as granted (the kernel's doubled figure).
    pub socket_buffers: [usize; 2],
    /// Whether UDP GSO was allowed.
    pub gso: bool,
    /// Client (sender) process CPU, user + system, seconds.
    pub cpu_s: f64,
    /// quinn's statistics; zero when no connection was made.
    pub stats: WireStats,
}

/// Runs one side of the pair (`pfs bench quic-peer …`).
pub fn run_peer(args: QuicPeerArgs) -> anyhow::Result<Outcome> {
    let cpu = match &args.side {
        QuicSide::Server(a) => a.tuning.cpu,
        QuicSide::Client(a) => a.tuning.cpu,
    };
    if let Some(cpu) = cpu {
        // Before the runtime exists: its threads inherit the affinity.
        pfs_sys::pin_current_thread(cpu).with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    match args.side {
        QuicSide::Server(a) => rt.block_on(server(a)),
        QuicSide::Client(a) => rt.block_on(client(a)),
    }
}

/// quinn's transport settings for a long fat pipe.
fn transport(t: &QuicTuning, cc: Cc) -> anyhow::Result<TransportConfig> {
    let window = VarInt::from_u64(t.window).context("--window is larger than QUIC allows")?;
    let mut mtu = MtuDiscoveryConfig::default();
    mtu.upper_bound(t.max_udp_payload);
    let mut c = TransportConfig::default();
    c.stream_receive_window(window)
        .receive_window(window)
        .send_window(t.window)
        .mtu_discovery_config(Some(mtu))
        // Idle only while a lossy link stalls; the transfer's own bound is --timeout.
        .max_idle_timeout(Some(IdleTimeout::try_from(Duration::from_secs(30))?))
        .enable_segmentation_offload(!t.no_gso);
    match cc {
        Cc::Cubic => c.congestion_controller_factory(Arc::new(CubicConfig::default())),
        Cc::Bbr => c.congestion_controller_factory(Arc::new(BbrConfig::default())),
    };
    Ok(c)
}

fn endpoint_config(t: &QuicTuning) -> anyhow::Result<EndpointConfig> {
    let mut e = EndpointConfig::default();
    e.max_udp_payload_size(t.max_udp_payload)
        .context("--max-udp-payload")?;
    Ok(e)
}

/// A UDP socket on `addr` with large buffers; the sizes granted.
fn udp_socket(addr: SocketAddr) -> anyhow::Result<(UdpSocket, [usize; 2])> {
    use rustix::net::sockopt;
    let s = UdpSocket::bind(addr).with_context(|| format!("binding UDP {addr}"))?;
    // The forced sizes need CAP_NET_ADMIN; without it, what rmem_max/wmem_max allow.
    if sockopt::set_socket_recv_buffer_size_force(&s, SOCKET_BUFFER).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(&s, SOCKET_BUFFER);
    }
    if sockopt::set_socket_send_buffer_size_force(&s, SOCKET_BUFFER).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(&s, SOCKET_BUFFER);
    }
    let got = [
        sockopt::socket_recv_buffer_size(&s).unwrap_or(0),
        sockopt::socket_send_buffer_size(&s).unwrap_or(0),
    ];
    Ok((s, got))
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, v)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// What the server has seen so far (kept outside the timed future, so a
/// timeout still reports it).
#[derive(Debug, Default)]
struct Received {
    bytes: u64,
    start: Option<(Instant, pfs_sys::Usage)>,
    end: Option<(Instant, pfs_sys::Usage)>,
    finished: bool,
}

impl Received {
    fn receipt(&self) -> Receipt {
        let Some((t0, u0)) = self.start else {
            return Receipt::default();
        };
        let (t1, u1) = self
            .end
            .unwrap_or_else(|| (Instant::now(), pfs_sys::process_usage()));
        let u = u1.since(&u0);
        Receipt {
            bytes: self.bytes,
            elapsed_s: t1.duration_since(t0).as_secs_f64(),
            user_s: u.user_us as f64 / 1e6,
            sys_s: u.sys_us as f64 / 1e6,
        }
    }
}

async fn server(args: QuicServerArgs) -> anyhow::Result<Outcome> {
    let certified =
        rcgen::generate_simple_self_signed(vec![SERVER_NAME.to_string()]).context("making a certificate")?;
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der());
    std::fs::write(&args.cert_out, cert.as_ref())
        .with_context(|| format!("writing {}", args.cert_out.display()))?;
    let mut config =
        quinn::ServerConfig::with_single_cert(vec![cert], key.into()).context("server TLS configuration")?;
    // The server sends only ACKs and the receipt: its controller is quinn's default.
    config.transport_config(Arc::new(transport(&args.tuning, Cc::Cubic)?));
    let (socket, _) = udp_socket(args.listen)?;
    let endpoint = Endpoint::new(
        endpoint_config(&args.tuning)?,
        Some(config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .context("starting the QUIC endpoint")?;
    print_json(&Listening {
        event: "listening".into(),
        addr: endpoint.local_addr()?,
        cert: args.cert_out.clone(),
    })?;

    let mut got = Received::default();
    let limit = Duration::from_secs_f64(args.tuning.timeout);
    let error = match tokio::time::timeout(limit, receive(&endpoint, &mut got)).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("{e:#}")),
        Err(_) => Some(format!("timed out after {:.1} s", args.tuning.timeout)),
    };
    let complete = got.finished && got.bytes == args.bytes;
    let error = error.or_else(|| {
        (!complete).then(|| format!("the stream ended after {} of {} bytes", got.bytes, args.bytes))
    });
    print_json(&Done {
        event: "done".into(),
        expected: args.bytes,
        complete,
        receipt: got.receipt(),
        error,
    })?;
    endpoint.close(VarInt::from_u32(CLOSE_DONE), b"done");
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    Ok(if complete {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Accepts connections until one completes its handshake (a client that
/// fails it, e.g. one that does not trust this certificate, is logged and
/// skipped), then reads its first stream to the end and answers.
async fn receive(endpoint: &Endpoint, got: &mut Received) -> anyhow::Result<()> {
    let conn = loop {
        let incoming = endpoint.accept().await.context("the endpoint closed")?;
        let from = incoming.remote_address();
        match incoming.await {
            Ok(conn) => break conn,
            Err(e) => eprintln!("pfs bench quic-peer: handshake with {from} failed: {e}"),
        }
    };
    let (mut send, mut recv) = conn
        .accept_bi()
        .await
        .context("waiting for the client's stream")?;
    got.start = Some((Instant::now(), pfs_sys::process_usage()));
    loop {
        let chunk = recv.read_chunk(usize::MAX, true).await;
        match chunk.context("reading the stream")? {
            Some(c) => got.bytes += c.bytes.len() as u64,
            None => break,
        }
    }
    got.end = Some((Instant::now(), pfs_sys::process_usage()));
    got.finished = true;
    let receipt = serde_json::to_vec(&got.receipt())?;
    send.write_all(&receipt).await.context("sending the receipt")?;
    send.finish().context("finishing the receipt")?;
    // The client closes once it has the receipt; until then it may need resends.
    conn.closed().await;
    Ok(())
}

/// What the client has done so far (outside the timed future).
#[derive(Debug, Default)]
struct Sent {
    conn: Option<Connection>,
    sent: u64,
    receipt: Option<Receipt>,
}

async fn client(args: QuicClientArgs) -> anyhow::Result<Outcome> {
    let der = std::fs::read(&args.cert).with_context(|| format!("reading {}", args.cert.display()))?;
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(der))
        .with_context(|| format!("{} is not a usable certificate", args.cert.display()))?;
    let mut config =
        quinn::ClientConfig::with_root_certificates(Arc::new(roots)).context("client TLS configuration")?;
    config.transport_config(Arc::new(transport(&args.tuning, args.cc)?));
    let local: SocketAddr = match args.connect {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let (socket, socket_buffers) = udp_socket(local)?;
    let mut endpoint = Endpoint::new(
        endpoint_config(&args.tuning)?,
        None,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .context("starting the QUIC endpoint")?;
    endpoint.set_default_client_config(config);

    let t0 = Instant::now();
    let u0 = pfs_sys::process_usage();
    let mut done = Sent::default();
    let limit = Duration::from_secs_f64(args.tuning.timeout);
    let result = tokio::time::timeout(limit, send(&endpoint, &args, &mut done)).await;
    let elapsed_s = t0.elapsed().as_secs_f64();
    let cpu = pfs_sys::process_usage().since(&u0);
    let stats = done.conn.as_ref().map(WireStats::of).unwrap_or_default();
    let timed_out = result.is_err();
    if let Some(conn) = &done.conn {
        let (code, why): (u32, &[u8]) = if timed_out {
            (CLOSE_TIMED_OUT, b"timed out")
        } else {
            (CLOSE_DONE, b"done")
        };
        conn.close(VarInt::from_u32(code), why);
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    if let Ok(Err(e)) = result {
        return Err(e);
    }
    print_json(&ClientReport {
        cc: args.cc.name().into(),
        bytes: args.bytes,
        sent: done.sent,
        timed_out,
        elapsed_s,
        receipt: done.receipt,
        window: args.tuning.window,
        max_udp_payload: args.tuning.max_udp_payload,
        socket_buffers,
        gso: !args.tuning.no_gso,
        cpu_s: (cpu.user_us + cpu.sys_us) as f64 / 1e6,
        stats,
    })?;
    Ok(if timed_out {
        Outcome::Failed
    } else {
        Outcome::Passed
    })
}

async fn send(endpoint: &Endpoint, args: &QuicClientArgs, done: &mut Sent) -> anyhow::Result<()> {
    let conn = endpoint
        .connect(args.connect, SERVER_NAME)?
        .await
        .with_context(|| format!("QUIC handshake with {}", args.connect))?;
    done.conn = Some(conn.clone());
    let (mut tx, mut rx) = conn.open_bi().await.context("opening a stream")?;
    // One buffer, written again and again: `Bytes` slices share it.
    let buf = Bytes::from(vec![0x5a_u8; WRITE_SIZE]);
    while done.sent < args.bytes {
        let n = (args.bytes - done.sent).min(WRITE_SIZE as u64) as usize;
        tx.write_chunk(buf.slice(..n))
            .await
            .context("writing the stream")?;
        done.sent += n as u64;
    }
    tx.finish().context("finishing the stream")?;
    let answer = rx
        .read_to_end(RECEIPT_LIMIT)
        .await
        .context("reading the server's receipt")?;
    done.receipt = Some(serde_json::from_slice(&answer).context("the server's receipt is not JSON")?);
    Ok(())
}

/// One QUIC row of the suite.
#[derive(Debug, Clone, Copy)]
pub struct QuicJob {
    /// Bytes to move.
    pub bytes: u64,
    /// Congestion controller of the sender.
    pub cc: Cc,
    /// Stream, connection and send window.
    pub window: u64,
}

impl QuicJob {
    /// Seconds the transfer may take before it reports what it delivered:
    /// generous (10 MB/s and half a minute), bounded.
    fn timeout_s(&self) -> f64 {
        30.0 + self.bytes as f64 / 10e6
    }
}

/// The largest UDP payload of a datagram that fills `mtu`, within what QUIC allows.
pub fn udp_payload_for_mtu(mtu: u32) -> u16 {
    let p = mtu
        .saturating_sub(IPV4_UDP_HEADERS)
        .min(u32::from(MAX_UDP_PAYLOAD));
    (p as u16).max(MIN_UDP_PAYLOAD)
}

/// Whether quinn should batch datagrams of `payload` bytes with UDP GSO:
/// only while a full batch fits the kernel's 64 KiB per send. Past that
/// (loopback's 64 KiB MTU, jumbo frames) quinn 0.11's batches fail and its
/// MTU discovery falls back to 1200 B; one large datagram per send is then
/// both what works and what is fast.
pub fn gso_for_payload(payload: u16) -> bool {
    u32::from(payload) * QUINN_GSO_SEGMENTS <= GSO_SEND_LIMIT
}

/// The `Conventional (QUIC, quinn)` row: starts the server on the receiving
/// side of `net` (pinned to CPU 1 when `pin`), the client here (CPU 0),
/// and builds the row from the server's numbers and the client's statistics.
/// Never panics and never stops the suite: a problem is a `failed:` row.
pub fn run_quic(label: &str, pfs: &Path, net: &NetPath, scratch: &Path, job: QuicJob, pin: bool) -> Row {
    let attempt = || -> anyhow::Result<Row> {
        let payload = udp_payload_for_mtu(net.mtu());
        let gso = gso_for_payload(payload);
        let timeout = job.timeout_s();
        let tuning = |cmd: &mut Command, cpu: usize, secs: f64| {
            cmd.args(["--window", &job.window.to_string()])
                .args(["--max-udp-payload", &payload.to_string()])
                .args(["--timeout", &format!("{secs:.1}")]);
            if !gso {
                cmd.arg("--no-gso");
            }
            if pin {
                cmd.args(["--cpu", &cpu.to_string()]);
            }
        };
        let cert = scratch.join(format!("quic-{}.der", job.cc.name()));
        let mut srv = net.receiver_command(&pfs.to_string_lossy());
        srv.args(["bench", "quic-peer", "server", "--listen"])
            .arg(format!("{}:0", net.server_ip()))
            .args(["--bytes", &job.bytes.to_string(), "--cert-out"])
            .arg(&cert);
        // The server outlives the client's bound, to report what arrived.
        tuning(&mut srv, 1, timeout + 30.0);
        srv.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = srv.spawn().context("starting pfs bench quic-peer server")?;
        let stdout = child.stdout.take().context("server stdout")?;
        let mut stderr = child.stderr.take().context("server stderr")?;
        let server = ChildGuard::new(child);
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (etx, errs) = mpsc::channel();
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            let _ = etx.send(s);
        });
        let server_err = |errs: &mpsc::Receiver<String>| {
            errs.recv_timeout(Duration::from_secs(2))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let Some(ready) = next_event::<Listening>(&lines, "listening", Duration::from_secs(30)) else {
            drop(server);
            bail!("the QUIC server did not start: {}", server_err(&errs));
        };

        let mut client = Command::new(pfs);
        client
            .args(["bench", "quic-peer", "client", "--connect"])
            .arg(ready.addr.to_string())
            .arg("--cert")
            .arg(&ready.cert)
            .args(["--bytes", &job.bytes.to_string(), "--cc", job.cc.name()]);
        tuning(&mut client, 0, timeout);
        let wire0 = net.wire_counter();
        let out = run_client(client, Duration::from_secs_f64(timeout + 30.0))?;
        let wire = net.wire_counter().saturating_sub(wire0);
        let report: ClientReport = match serde_json::from_slice(&out.stdout) {
            Ok(r) => r,
            Err(_) => bail!(
                "the QUIC client failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        };
        let Some(done) = next_event::<Done>(&lines, "done", Duration::from_secs(10)) else {
            drop(server);
            bail!("the QUIC server did not report: {}", server_err(&errs));
        };
        drop(server);
        Ok(quic_row(label, &job, payload, &report, &done, wire))
    };
    attempt().unwrap_or_else(|e| Row::failed(label, "Transfer", &e))
}

/// The row from the server's `done` line and the client's report.
fn quic_row(label: &str, job: &QuicJob, payload: u16, client: &ClientReport, done: &Done, wire: u64) -> Row {
    let r = done.receipt;
    let mut row = Row::measured(label, "Transfer", r.bytes, wire, r.elapsed_s, r.user_s, r.sys_s);
    row.transport = "UDP".into();
    let s = &client.stats;
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let mut notes = Vec::new();
    if client.timed_out {
        notes.push(format!(
            "timed out after {:.1} s, {} of {} bytes delivered",
            client.elapsed_s, r.bytes, job.bytes
        ));
    } else if !done.complete {
        notes.push(format!(
            "incomplete: {}",
            done.error.as_deref().unwrap_or("the stream ended early")
        ));
    }
    notes.push(format!(
        "cc={}, 1 bidirectional stream, {} MiB writes of one buffer; windows {} MiB (stream, connection, send); \
         MTU discovery up to {payload} B (in use {} B), {}; TLS 1.3 (rustls, ring); \
         UDP socket buffers {:.0}/{:.0} MiB (rcv/snd, as granted)",
        job.cc.name(),
        WRITE_SIZE >> 20,
        mib(job.window),
        s.mtu,
        if client.gso {
            "GSO where the kernel has it"
        } else {
            "no GSO (a batch would pass 64 KiB)"
        },
        mib(client.socket_buffers[0] as u64),
        mib(client.socket_buffers[1] as u64),
    ));
    notes.push(format!(
        "quinn: {} datagrams in {} sends, {:.3} MB UDP payload sent, {} of {} packets lost, {} congestion events, RTT {:.2} ms; sender CPU {:.2} s",
        s.udp_tx_datagrams,
        s.udp_tx_ios,
        s.udp_tx_bytes as f64 / 1e6,
        s.lost_packets,
        s.sent_packets,
        s.congestion_events,
        s.rtt_ms,
        client.cpu_s
    ));
    notes.push(
        "wire from interface counters (incl. UDP/IP headers); receiver CPU = server process, first stream bytes to end"
            .into(),
    );
    row.notes = notes.join("; ");
    row
}

/// The next JSON line on `lines` whose `event` is `event`, parsed; `None`
/// when the lines stop or `timeout` passes.
fn next_event<T: for<'de> Deserialize<'de>>(
    lines: &mpsc::Receiver<String>,
    event: &str,
    timeout: Duration,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["event"] == event {
            if let Ok(t) = serde_json::from_value(v) {
                return Some(t);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_payload_fits_the_mtu_within_quic_bounds() {
        assert_eq!(udp_payload_for_mtu(1500), 1472);
        assert_eq!(udp_payload_for_mtu(9000), 8972);
        assert_eq!(udp_payload_for_mtu(65536), 65508);
        assert_eq!(udp_payload_for_mtu(70000), 65527);
        assert_eq!(udp_payload_for_mtu(576), 1200);
        assert!(gso_for_payload(1472));
        assert!(!gso_for_payload(8972));
        assert!(!gso_for_payload(65527));
    }

    #[test]
    fn timed_out_rows_say_what_was_delivered() {
        let job = QuicJob {
            bytes: 1000,
            cc: Cc::Bbr,
            window: DEFAULT_WINDOW,
        };
        let client = ClientReport {
            cc: "bbr".into(),
            bytes: 1000,
            sent: 800,
            timed_out: true,
            elapsed_s: 31.0,
            receipt: None,
            window: DEFAULT_WINDOW,
            max_udp_payload: 1472,
            socket_buffers: [1 << 21, 1 << 21],
            gso: true,
            cpu_s: 0.5,
            stats: WireStats::default(),
        };
        let done = Done {
            event: "done".into(),
            expected: 1000,
            complete: false,
            receipt: Receipt {
                bytes: 600,
                elapsed_s: 30.0,
                user_s: 0.1,
                sys_s: 0.2,
            },
            error: Some("timed out".into()),
        };
        let row = quic_row("Conventional (QUIC, quinn)", &job, 1472, &client, &done, 900);
        assert!(
            row.notes
                .starts_with("timed out after 31.0 s, 600 of 1000 bytes delivered; cc=bbr"),
            "{}",
            row.notes
        );
        assert!(row.ran());
        assert_eq!(row.transport, "UDP");
        assert_eq!(row.effective_mb, 600.0 / 1e6);
        assert!(row.notes.contains("windows 64 MiB"), "{}", row.notes);
    }
}
