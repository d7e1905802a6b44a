//! Gram sessions: a sender ships grams — descriptor tables into the blob,
//! with a payload slab in payload mode — and the receiver executes each one
//! over its own copy of the blob and answers with its authoritative report.
//!
//! A sender: [`Target::connect`] (or [`Target::connect_as`] for a protected
//! session), then [`send_on`] with a [`GramSenderConfig`] from
//! [`sender_config`]. A receiver: [`receive_session`] on one accepted
//! connection, or [`serve`] for a listener's every connection.
//!
//! **Catch-up** (docs/wire.md §16): with [`GramSenderConfig::catch_up`]
//! set and a receiver that allows it (`GramReceiverConfig::catch_up`), a
//! receiver whose blob differs is first brought to the sender's bytes. The
//! two halves are also callable on their own, after any handshake that
//! agreed on a catch-up (a streaming publication's, say):
//! [`catch_up_source`] (this side holds the bytes: its blob and
//! fingerprint) and [`catch_up_replica`] (this side is brought up to date:
//! a [`ReplicaHost`], e.g. [`BlobReplica`] over a mapped blob, and the
//! source's fingerprint root), each over a blocking transport and the
//! session's receive buffer.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use pfs_exec::{Pattern, ScheduleSpec, Total};
pub use pfs_session::catchup::{
    catch_up_replica, catch_up_source, BlobReplica, CatchUpConfig, CatchUpProgress, CatchUpStats, ReplicaHost,
};
pub use pfs_session::gram::GramProgress;
pub use pfs_session::{
    receive_session, send_session, serve, GramReceiverConfig, GramReceiverOutcome, GramSenderConfig,
    GramSenderOutcome, ServerConfig, ServerEvent, SessionError, SessionStats, DEFAULT_PAYLOAD_BUDGET,
};
pub use pfs_wire::{Encoding, IntegrityAlg, Mode};

use pfs_session::BlobView;
use pfs_transport::{ShmConfig, ShmTransport, TcpConfig, TcpTransport, Transport, UnixTransport};

use crate::Error;

/// Progress line: effective and wire bytes with rates and, when known, percent done.
///
/// ```
/// use std::time::Duration;
/// let line = packetfs::gram::progress_line("send", 4, 2_000_000, 1_000, Duration::from_secs(1), 4_000_000);
/// assert!(line.starts_with("send:  50.0% 4 grams, 2.0 MB effective"));
/// ```
pub fn progress_line(who: &str, grams: u64, eff: u64, wire: u64, elapsed: Duration, planned: u64) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let pct = if planned > 0 {
        format!(" {:5.1}%", eff as f64 * 100.0 / planned as f64)
    } else {
        String::new()
    };
    format!(
        "{who}:{pct} {grams} grams, {eff:.1} MB effective ({er:.1} MB/s), {wire:.3} MB wire ({wr:.1} MB/s), {secs:.1} s",
        eff = eff as f64 / 1e6,
        er = eff as f64 / 1e6 / secs,
        wire = wire as f64 / 1e6,
        wr = wire as f64 / 1e6 / secs,
    )
}

/// Progress line of a catch-up (`pfs send --catch-up`), on stderr.
///
/// ```
/// use packetfs::gram::{catch_up_progress_line, CatchUpProgress, CatchUpStats};
/// let p = CatchUpProgress { stats: CatchUpStats { regions: 512, blocks_moved: 3, bytes_moved: 49152, ..Default::default() }, regions_total: 1024 };
/// assert!(catch_up_progress_line(&p).starts_with("catch-up:  50.0% of region hashes compared"));
/// ```
pub fn catch_up_progress_line(p: &CatchUpProgress) -> String {
    let s = &p.stats;
    format!(
        "catch-up: {:5.1}% of region hashes compared, {} differ; {} of {} blocks compared sent ({:.1} MB), {:.3} MB wire",
        s.regions as f64 * 100.0 / p.regions_total.max(1) as f64,
        s.regions_differing,
        s.blocks_moved,
        s.blocks_compared,
        s.bytes_moved as f64 / 1e6,
        s.wire_bytes as f64 / 1e6,
    )
}

/// Sender settings with the defaults the CLI uses: corrections on, every
/// gram checked, a two-minute reply timeout, a fresh session nonce.
///
/// ```
/// use packetfs::gram::{sender_config, IntegrityAlg, Mode, Pattern, ScheduleSpec, Total};
/// let spec = ScheduleSpec {
///     seed: 1, desc_per_gram: 64, max_len: 64 << 10, align: 64,
///     pattern: Pattern::Random, total: Total::Grams(8), blob_len: 1 << 20,
/// };
/// let cfg = sender_config(Mode::Offset, IntegrityAlg::Xxh3, spec, 0);
/// assert!(cfg.corrections);
/// ```
pub fn sender_config(
    mode: Mode,
    integrity: IntegrityAlg,
    spec: ScheduleSpec,
    payload_budget: u64,
) -> GramSenderConfig {
    GramSenderConfig {
        mode,
        integrity,
        spec,
        reply_timeout: Duration::from_secs(120),
        log_interval: None,
        payload_budget,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
        session_nonce: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

/// Where a sender connects, and over which transport.
#[derive(Debug, Clone)]
pub enum Target {
    /// TCP to `host:port`.
    Tcp {
        /// Address.
        addr: String,
        /// Socket buffer bytes (0 = autotuning).
        sock_buf: usize,
    },
    /// A Unix stream socket path.
    Unix(PathBuf),
    /// A shared-memory rendezvous socket path.
    Shm(PathBuf, ShmConfig),
    /// UDP to `host:port`.
    Udp {
        /// Address.
        addr: String,
        /// Datagram size, buffers, timeouts.
        cfg: pfs_transport::UdpConfig,
    },
}

impl Target {
    /// Opens the connection.
    ///
    /// ```no_run
    /// let t = packetfs::gram::Target::Tcp { addr: "127.0.0.1:7878".into(), sock_buf: 0 };
    /// let conn = t.connect()?;
    /// # Ok::<(), packetfs::Error>(())
    /// ```
    pub fn connect(&self) -> Result<Box<dyn Transport>, Error> {
        Ok(match self {
            Self::Tcp { addr, sock_buf } => {
                let tcp = TcpConfig {
                    socket_buffer: *sock_buf,
                    ..TcpConfig::default()
                };
                Box::new(TcpTransport::connect(addr, &tcp)?)
            }
            Self::Unix(path) => Box::new(UnixTransport::connect(path)?),
            Self::Shm(path, cfg) => Box::new(ShmTransport::connect(path, cfg)?),
            Self::Udp { addr, cfg } => Box::new(pfs_transport::UdpTransport::connect(addr, cfg)?),
        })
    }

    /// The address as the user gave it (what `known_hosts` pins).
    pub fn addr_text(&self) -> String {
        match self {
            Self::Tcp { addr, .. } | Self::Udp { addr, .. } => addr.clone(),
            Self::Unix(p) | Self::Shm(p, _) => p.display().to_string(),
        }
    }

    /// Opens the connection and, given security settings, runs the
    /// handshake for `service` over it (docs/wire.md §11).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use packetfs::keys::{Cipher, ClientSecurity, Identity, Pin, Service};
    /// // In practice the server's key comes from its `pfs-x25519 …` line
    /// // (`keys::parse_server_key`) or from `known_hosts` (`Pin::KnownHosts`).
    /// let server_key = Identity::generate()?.public();
    /// let security = ClientSecurity {
    ///     identity: Identity::generate()?,
    ///     pin: Pin::Key(server_key),
    ///     psk: None,
    ///     cipher: Cipher::preferred(),
    ///     rotate_log2: 32,
    ///     timeout: Duration::from_secs(10),
    /// };
    /// let t = packetfs::gram::Target::Tcp { addr: "10.0.0.2:7878".into(), sock_buf: 0 };
    /// let conn = t.connect_as(Some(&security), Service::Blob)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn connect_as(
        &self,
        security: Option<&pfs_auth::ClientSecurity>,
        service: pfs_auth::Service,
    ) -> Result<Box<dyn Transport>, Error> {
        let t = self.connect()?;
        Ok(match security {
            None => t,
            Some(sec) => Box::new(pfs_auth::connect(t, &self.addr_text(), service, sec)?),
        })
    }
}

/// What one blob session gave the sender: its outcome, the transport's
/// label (`TCP`, `SHM` …) and, over UDP, the connection's counters.
pub type Sent = (
    GramSenderOutcome,
    &'static str,
    Option<pfs_transport::udp::UdpReport>,
);

/// Connects and runs one session.
pub fn send_once(target: &Target, view: &BlobView<'_>, cfg: &GramSenderConfig) -> Result<Sent, Error> {
    send_on(target.connect()?, view, cfg)
}

/// Runs one session on an open connection, printing progress lines on
/// stderr (`pfs send` connects before it sets up its blob, so an
/// unreachable peer fails at once).
///
/// ```no_run
/// use packetfs::blob::{open_blob, study_blob};
/// use packetfs::gram::{send_on, sender_config, IntegrityAlg, Mode, Pattern, ScheduleSpec, Target, Total};
/// let opened = open_blob(&study_blob(64 << 20, 0x5eed, None), true)?;
/// let spec = ScheduleSpec {
///     seed: 1, desc_per_gram: 1024, max_len: 256 << 10, align: 64,
///     pattern: Pattern::Random, total: Total::Bytes(1 << 30), blob_len: 64 << 20,
/// };
/// let conn = Target::Tcp { addr: "127.0.0.1:7878".into(), sock_buf: 0 }.connect()?;
/// let (outcome, _transport, _udp) = send_on(conn, &opened.view(), &sender_config(Mode::Offset, IntegrityAlg::Xxh3, spec, 0))?;
/// println!("{} bytes executed by the receiver", outcome.report.effective_bytes);
/// # Ok::<(), packetfs::Error>(())
/// ```
pub fn send_on(
    mut t: Box<dyn Transport>,
    view: &BlobView<'_>,
    cfg: &GramSenderConfig,
) -> Result<Sent, Error> {
    let kind = t.kind();
    let mut progress = |p: &GramProgress| {
        eprintln!(
            "{}",
            progress_line(
                "send",
                p.grams,
                p.effective_bytes,
                p.wire_bytes,
                p.elapsed,
                p.planned_bytes
            )
        );
    };
    let mut catching_up = |p: &CatchUpProgress| eprintln!("{}", catch_up_progress_line(p));
    let out = pfs_session::gram::send_session_with(&mut *t, view, cfg, &mut progress, &mut catching_up)?;
    Ok((out, kind, t.udp_report()))
}
