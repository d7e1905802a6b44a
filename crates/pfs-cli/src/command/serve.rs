//! `pfs serve`: the receiver. Listens (loopback unless told otherwise),
//! serves sessions over its own blob, prints each receiver report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pfs_session::metrics::{Endpoint, EndpointConfig, Metrics};
use pfs_session::{
    serve, GramReceiverConfig, GramReceiverOutcome, Limits, ServerConfig, ServerEvent, SessionStats,
};
use pfs_transport::AnyListener;

use crate::args::{ServeArgs, TransportArg};
use crate::exit;

use packetfs::gram::progress_line;
use packetfs::labels;

use super::{interval, log, open_blob, shutdown};

/// Writes a result line to stdout; a closed stdout (reader gone) must not
/// take a session thread down with it.
pub(super) fn emit(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Label of a transport in reports.
fn transport_label(t: TransportArg) -> &'static str {
    match t {
        TransportArg::Tcp => "TCP",
        TransportArg::Unix => "UNIX",
        TransportArg::Shm => "SHM",
        TransportArg::Udp => "UDP",
    }
}

/// The address `--listen` names, or the default: loopback TCP port 7878,
/// or a per-user socket path for unix and shm.
fn listen_addr(args: &ServeArgs) -> String {
    match &args.listen {
        Some(a) => a.clone(),
        None if args.transport.transport.is_network() => "127.0.0.1:7878".into(),
        None => default_socket_path().display().to_string(),
    }
}

/// The server settings every kind of server shares: limits, and who it
/// admits (which may refuse to start: a non-loopback address without keys).
pub fn server_config(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let listen = listen_addr(args);
    let (admission, notes) = super::auth::server_admission(&args.auth, &listen, args.transport.transport)?;
    tracing::info!("{}", notes.join("; "));
    Ok(ServerConfig {
        max_clients: args.max_clients.max(1),
        max_per_key: args.max_per_key.map(|n| n.max(1)),
        max_admitting: args.auth.max_admitting.max(1),
        first_bytes_timeout: pfs_session::server::DEFAULT_FIRST_BYTES_TIMEOUT
            .max(std::time::Duration::from_secs_f64(args.auth.handshake_timeout)),
        max_sessions: if args.once { Some(1) } else { args.max_sessions },
        pin_cpu: args.run.pin,
        metrics: args
            .metrics_listen
            .as_ref()
            .map(|_| Arc::new(Metrics::new(env!("CARGO_PKG_VERSION")))),
        admission,
        shutdown: Arc::default(),
    })
}

/// Binds the listener (and the metrics endpoint, kept until dropped),
/// prints its address, and from then on stops the server on SIGTERM or
/// SIGINT and reloads its `authorized_keys` on SIGHUP.
pub fn listen(args: &ServeArgs, cfg: &ServerConfig) -> anyhow::Result<(AnyListener, Option<Endpoint>)> {
    let listener = bind_listener(args)?;
    let endpoint = match (&args.metrics_listen, &cfg.metrics) {
        (Some(addr), Some(m)) => Some(Endpoint::bind(
            &addr.to_string(),
            m.clone(),
            EndpointConfig::default(),
        )?),
        _ => None,
    };
    if let Some(e) = &endpoint {
        let at = e.local_addr();
        tracing::info!(
            "metrics at http://{at}/metrics (unauthenticated: keep it on loopback or a private address)"
        );
    }
    shutdown::watch(
        &listener,
        cfg.shutdown.clone(),
        shutdown::grace(args.shutdown_grace)?,
    )?;
    super::reload::watch(args, cfg.admission.authorized.clone())?;
    announce(&listener, args.run.json);
    Ok((listener, endpoint))
}

/// The server's last log line; a stop by signal is a graceful end.
pub fn finished(cfg: &ServerConfig, ok: u64, failed: u64) {
    let how = if cfg.shutdown.is_stopping() {
        "stopped"
    } else {
        "done"
    };
    tracing::info!("pfs serve: {how}: {ok} session(s) completed, {failed} failed");
}

/// Binds the listener `--transport` and `--listen` name.
pub fn bind_listener(args: &ServeArgs) -> anyhow::Result<AnyListener> {
    let listen = listen_addr(args);
    let local = super::auth::local_users_only(&args.auth, &listen);
    Ok(packetfs::endpoint::bind(
        &listen,
        &args.transport,
        args.run.sock_buf,
        local,
    )?)
}

/// Prints the listening line (the address a sender needs) on stdout.
pub fn announce(listener: &AnyListener, json: bool) {
    emit(&listening_line(listener, json, "pfs serve"));
}

/// The listening line `who` prints ([`packetfs::report::listening_line`]).
pub fn listening_line(listener: &AnyListener, json: bool, who: &str) -> String {
    packetfs::report::listening_line(listener, json, who)
}

/// Where a same-host server listens unless told: the user's runtime
/// directory (private to the user), else a per-uid name in /tmp.
fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Path::new(&dir).join("pfs.sock"),
        _ => PathBuf::from(format!("/tmp/pfs-{}.sock", rustix::process::getuid().as_raw())),
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<i32> {
    let args = match &args.config {
        // The file's settings, then the command line's (those after `serve`).
        Some(file) => {
            let cli: Vec<OsString> = std::env::args_os().skip_while(|a| a != "serve").skip(1).collect();
            crate::config::serve_args(file, &cli)?
        }
        None => args,
    };
    log::init(&args.log);
    // The first line: which build is running (what to quote in a bug report).
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = env!("PFS_GIT_REV"),
        "{} starting",
        crate::args::VERSION_LINE
    );
    shutdown::grace(args.shutdown_grace)?;
    args.transport.check()?;
    if args.dest.is_some() {
        return super::serve_files::run(&args);
    }
    let log = interval(args.run.log_interval, args.run.json)?;
    let exec = match &args.exec {
        None => None,
        Some(name) => {
            let id = pfs_exec::kernel::KernelId::parse(name)?;
            if id.in_place() {
                anyhow::bail!(
                    "--exec {}: in-place kernels would modify the blob every sender relies on; use `pfs exec` instead",
                    id.name()
                );
            }
            Some(pfs_exec::kernel::Kernel::new(id))
        }
    };
    if let Some(dir) = &args.record {
        std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("--record {}: {e}", dir.display()))?;
    }
    let opened = open_blob(&args.blob, false)?;
    if args.verify_blob {
        let actual = opened.blob.recompute_fingerprint(args.blob.setup_threads);
        let recorded = opened.blob.fingerprint();
        if actual.root != recorded.root {
            let ranges = actual.diff(&recorded).unwrap_or_default();
            anyhow::bail!(
                "--verify-blob: the blob's bytes differ from its recorded fingerprint in {} range(s), first {:?}; \
                 refusing to serve (recreate it, or serve without --verify-blob to let per-gram integrity report it)",
                ranges.len(),
                ranges.first()
            );
        }
        tracing::info!("blob verified: fingerprint {}", actual.short());
    }
    let kind = transport_label(args.transport.transport);
    let receiver = GramReceiverConfig {
        limits: Limits {
            max_desc_count: args.max_desc_per_gram,
            max_payload_len: args.max_payload,
            ..Limits::default()
        },
        log_interval: log,
        exec,
        record_dir: args.record.clone(),
        repair: !args.no_repair,
        integrity_sample: args.integrity_sample,
        max_repair_bytes: args.max_repair_bytes,
        catch_up: args.allow_catch_up,
        ..GramReceiverConfig::default()
    };
    let cfg = server_config(&args)?;
    let json = args.run.json;
    // Exit status of the last session, for --once.
    let last_status = Mutex::new(exit::OK);
    let on_event = |ev: ServerEvent<'_, GramReceiverOutcome>| match ev {
        ServerEvent::Progress { peer, progress: p } => tracing::info!(
            "{}",
            progress_line(
                &format!("recv {peer}"),
                p.grams,
                p.effective_bytes,
                p.wire_bytes,
                p.elapsed,
                p.planned_bytes
            )
        ),
        ServerEvent::Finished {
            peer,
            client,
            traffic,
            outcome,
        } => {
            let stats =
                SessionStats::from_report(&outcome.report, kind, labels::session(outcome.report.mode, kind))
                    .with_corrections(outcome.corrections);
            let did = log::Did {
                service: "blob",
                mode: Some(&stats.mode),
                effective_bytes: stats.effective_bytes,
                wire_bytes: stats.wire_bytes,
                failure: (!stats.ok()).then(|| stats.mismatch_line()),
                ..log::Did::default()
            };
            log::session_end(client, &traffic, &did);
            if let Some(c) = &outcome.catch_up {
                tracing::info!("{peer}:{}", packetfs::report::catch_up_line(c));
            }
            if let Ok(mut st) = last_status.lock() {
                *st = if stats.ok() { exit::OK } else { exit::INTEGRITY };
            }
            let exec_line = outcome.exec_output.as_ref().map(|o| {
                (
                    args.exec.clone().unwrap_or_default(),
                    packetfs::report::exec_output_text(o),
                    serde_json::to_value(o).ok(),
                )
            });
            if json {
                let exec = exec_line
                    .as_ref()
                    .map(|(k, _, v)| serde_json::json!({"kernel": k, "output": v}));
                emit(
                    &serde_json::json!({"event": "report", "peer": peer, "stats": stats, "exec": exec})
                        .to_string(),
                );
            } else {
                emit(&format!("session from {peer} complete:\n{}", stats.human()));
                if let Some((k, text, _)) = &exec_line {
                    emit(&format!("  exec {k:<9} {text}"));
                }
            }
        }
        ServerEvent::Failed { .. }
        | ServerEvent::Accepted { .. }
        | ServerEvent::Busy { .. }
        | ServerEvent::AcceptFailed { .. }
        | ServerEvent::Admitted { .. }
        | ServerEvent::Denied { .. } => {
            if let (Some(code), Ok(mut st)) = (report_common(&ev, json, &cfg, "blob"), last_status.lock()) {
                *st = code;
            }
        }
    };
    let (listener, _metrics) = listen(&args, &cfg)?;
    let (ok, failed) = serve(&listener, &opened.view(), &cfg, &receiver, &on_event);
    finished(&cfg, ok, failed);
    // With --once the exit status is that session's result.
    let last = last_status.lock().map(|g| *g).unwrap_or(exit::FAILURE);
    Ok(if args.once { last } else { exit::OK })
}

/// Reports the events every kind of server reports alike (a failed
/// session, a refusal, an admission, a failed accept) for a server of
/// `service`; for a session that failed or was denied, returns the exit
/// status it implies, seen from the receiver.
pub(super) fn report_common<O>(
    ev: &ServerEvent<'_, O>,
    json: bool,
    cfg: &ServerConfig,
    service: &str,
) -> Option<i32> {
    match ev {
        ServerEvent::Accepted { peer } => {
            tracing::debug!(peer = %peer, "connection accepted");
            None
        }
        ServerEvent::Failed {
            peer,
            client,
            traffic,
            error,
        } => {
            if json {
                emit(
                    &serde_json::json!({"event": "session_failed", "peer": peer, "error": error.to_string()})
                        .to_string(),
                );
            }
            let did = log::Did {
                service,
                failure: Some(error.to_string()),
                ..log::Did::default()
            };
            log::session_end(client, traffic, &did);
            Some(exit::of_session(error))
        }
        ServerEvent::Busy { peer, reason } => {
            if cfg.shutdown.is_stopping() {
                tracing::info!(peer = %peer, "refused: shutting down");
            } else {
                tracing::warn!(peer = %peer, "refused: {reason}");
            }
            None
        }
        ServerEvent::Admitted { client } => {
            let cipher = client.cipher.map_or("-", |c| c.name());
            if json && client.key.is_some() {
                emit(
                    &serde_json::json!({"event": "admitted", "peer": client.addr, "key": client.fingerprint(),
                                        "cipher": cipher, "rights": client.rights.describe()})
                    .to_string(),
                );
            }
            tracing::info!(peer = %client.addr, key = %client.fingerprint(), cipher, rights = %client.rights.describe(),
                           "session admitted");
            None
        }
        ServerEvent::Denied { peer, key, reason } => {
            let fp = key.map_or_else(|| "-".to_string(), |k| k.fingerprint());
            if json {
                emit(
                    &serde_json::json!({"event": "denied", "peer": peer, "key": fp, "reason": reason})
                        .to_string(),
                );
            }
            tracing::warn!(peer = %peer, key = %fp, reason = %reason, "denied");
            Some(exit::AUTH)
        }
        // A peer the listener refused (another user's): that peer's doing, not the server's.
        ServerEvent::AcceptFailed { error } if error.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!("{error}");
            None
        }
        ServerEvent::AcceptFailed { error } => {
            tracing::error!("accept failed: {error}");
            None
        }
        ServerEvent::Progress { .. } | ServerEvent::Finished { .. } => None,
    }
}
