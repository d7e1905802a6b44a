//! The sending peer in this process: the blob opened, described and
//! registered for cleanup, a connection to a receiver, one send session, and
//! the progress line. The suite's PFS rows and `pfs send`/`serve`/`exec` all
//! go through these functions, so a bench row measures exactly the code path
//! the CLI runs; `pfs-cli` uses them from here.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use pfs_blob::{Blob, BlobConfig, SetupReport};
use pfs_exec::ScheduleSpec;
use pfs_session::{send_session, BlobView, GramSenderConfig, GramSenderOutcome, SetupTimes};
use pfs_transport::{ShmConfig, ShmTransport, TcpConfig, TcpTransport, Transport, UnixTransport};
use pfs_wire::{IntegrityAlg, Mode};

/// A blob opened for a transfer command, with its setup report.
#[derive(Debug)]
pub struct OpenedBlob {
    /// The mapping.
    pub blob: Blob,
    /// Setup phase timings.
    pub setup: SetupReport,
}

impl OpenedBlob {
    /// The session layer's view of it.
    pub fn view(&self) -> BlobView<'_> {
        let fp = self.blob.fingerprint();
        BlobView {
            data: self.blob.as_slice(),
            fingerprint: fp.root,
            region_size: fp.region_size,
            backing: self.blob.backing().kind,
            page_size: self.blob.backing().page_size,
            setup: SetupTimes {
                map_s: self.setup.map_s,
                prefault_s: self.setup.prefault_s,
                fill_s: self.setup.fill_s,
                fingerprint_s: self.setup.fingerprint_s,
            },
            writer: Some(self.blob.writer()),
        }
    }

    /// One line describing backing and setup, for stderr.
    pub fn describe(&self) -> String {
        let b = self.blob.backing();
        let s = &self.setup;
        let len = self.blob.len();
        let fill_prefault = s.fill_s + s.prefault_s;
        let rate = if fill_prefault > 0.0 && !s.reused_existing && s.fill_s > 0.0 {
            format!(" ({:.2} GB/s fill+prefault)", len as f64 / fill_prefault / 1e9)
        } else {
            String::new()
        };
        format!(
            "blob {name}: {mb:.1} MB, {kind} backing, page {page} B, {huge:.0}% in huge pages, fingerprint {fp}; \
             setup: map {m:.3} s, prefault {p:.3} s, fill {f:.3} s, fingerprint {h:.3} s{rate}{reused}",
            name = self.blob.name().unwrap_or("(anonymous)"),
            mb = len as f64 / 1e6,
            kind = b.kind.as_str(),
            page = b.page_size,
            huge = if len > 0 { b.huge_bytes as f64 * 100.0 / len as f64 } else { 0.0 },
            fp = self.blob.fingerprint().short(),
            m = s.map_s,
            p = s.prefault_s,
            f = s.fill_s,
            h = s.fingerprint_s,
            reused = if s.reused_existing { " (reused existing blob)" } else { "" },
        )
    }
}

/// The anonymous blob a study maps: `size` bytes from `seed`, prefaulted.
pub fn study_blob(size: u64, seed: u64, huge_dir: Option<PathBuf>) -> BlobConfig {
    BlobConfig {
        name: None,
        size,
        fill: pfs_blob::Fill::Seed(seed),
        huge_dir,
        prefault: true,
        keep: false,
        threads: 0,
        ..BlobConfig::default()
    }
}

/// Maps, prefaults, fills and fingerprints the blob; prints warnings and the setup line on stderr.
pub fn open_blob(cfg: &BlobConfig, quiet: bool) -> anyhow::Result<OpenedBlob> {
    let (blob, setup) = Blob::open_or_create(cfg).context("blob setup failed")?;
    if let (Some(name), false, false) = (blob.name(), cfg.keep, setup.reused_existing) {
        // Drop removes a blob this process created; Ctrl-C must too.
        crate::cleanup::remove_on_signal(name, cfg.huge_dir.as_deref());
    }
    for w in &blob.backing().warnings {
        eprintln!("pfs: warning: {w}");
    }
    let opened = OpenedBlob { blob, setup };
    if !quiet {
        eprintln!("{}", opened.describe());
    }
    Ok(opened)
}

/// Progress line: effective and wire bytes with rates and, when known, percent done.
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

/// Sender settings with the defaults the CLI uses.
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
    pub fn connect(&self) -> anyhow::Result<Box<dyn Transport>> {
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
}

impl Target {
    /// The address as the user gave it (what `known_hosts` pins).
    pub fn addr_text(&self) -> String {
        match self {
            Self::Tcp { addr, .. } | Self::Udp { addr, .. } => addr.clone(),
            Self::Unix(p) | Self::Shm(p, _) => p.display().to_string(),
        }
    }

    /// Opens the connection and, given security settings, runs the
    /// handshake for `service` over it (docs/wire.md §11).
    pub fn connect_as(
        &self,
        security: Option<&pfs_auth::ClientSecurity>,
        service: pfs_auth::Service,
    ) -> anyhow::Result<Box<dyn Transport>> {
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
pub fn send_once(target: &Target, view: &BlobView<'_>, cfg: &GramSenderConfig) -> anyhow::Result<Sent> {
    send_on(target.connect()?, view, cfg)
}

/// Runs one session on an open connection (`pfs send` connects before it
/// sets up its blob, so an unreachable peer fails at once).
pub fn send_on(
    mut t: Box<dyn Transport>,
    view: &BlobView<'_>,
    cfg: &GramSenderConfig,
) -> anyhow::Result<Sent> {
    let kind = t.kind();
    let mut progress = |p: &pfs_session::gram::GramProgress| {
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
    let out = send_session(&mut *t, view, cfg, &mut progress)?;
    Ok((out, kind, t.udp_report()))
}

/// A `user:PATH[:PREFIX]` kernel argument (`pfs exec --kernel`, `pfs bench exec --user-kernel`).
pub fn parse_user_kernel(spec: &str) -> Option<(PathBuf, String)> {
    let rest = spec.strip_prefix("user:")?;
    match rest.rsplit_once(':') {
        Some((path, prefix)) if !prefix.contains('/') && !prefix.is_empty() => {
            Some((path.into(), prefix.into()))
        }
        _ => Some((rest.into(), "pfs_".into())),
    }
}
