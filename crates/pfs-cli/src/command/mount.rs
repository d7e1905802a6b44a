//! `pfs mount SOURCE MOUNTPOINT` and `pfs umount MOUNTPOINT`.
//!
//! Without `--foreground` the command starts itself again in the
//! foreground, in a new session, and returns once that process says the
//! mount is up (or prints why it is not): the way `sshfs` and `mount`
//! behave, with no fork of a threaded process. The child knows it is
//! waited for by `PFS_MOUNT_DAEMON` in its environment and answers with
//! one line on its standard output, a pipe the parent reads.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use packetfs::mount::{Readiness, Stopper};
use pfs_mount::{MountConfig, MountError, ProtoError};

use crate::args::{MountArgs, UmountArgs};
use crate::exit;

use super::send::target;
use super::send_files::split_target;

pub fn run(args: &MountArgs) -> anyhow::Result<i32> {
    args.transport.check()?;
    // An address mistake is a usage error here, before any process starts.
    split_target("SOURCE", &args.source, args.transport.transport)?;
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 3600.0) {
        bail!(
            "--timeout must be between 0 and 3600 seconds, not {}",
            args.timeout
        );
    }
    let meta = std::fs::metadata(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    if !meta.is_dir() {
        bail!("mount point {} is not a directory", args.mountpoint.display());
    }
    if !Path::new("/dev/fuse").exists() {
        bail!("/dev/fuse is missing: this host cannot mount FUSE file systems (modprobe fuse?)");
    }
    if args.foreground {
        return foreground(args);
    }
    background(args)
}

/// Starts `pfs mount … --foreground` detached and waits for its word.
fn background(args: &MountArgs) -> anyhow::Result<i32> {
    let exe = std::env::current_exe().context("cannot locate the pfs binary")?;
    let mut argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    argv.push("--foreground".into());
    let log: std::process::Stdio = match &args.log_file {
        Some(p) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .with_context(|| format!("--log-file {}", p.display()))?
            .into(),
        None => std::process::Stdio::null(),
    };
    let mut child = std::process::Command::new(exe)
        .args(&argv)
        .env(packetfs::mount::READY_ENV, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting the mount process")?;
    let mut word = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = std::io::BufReader::new(out).read_line(&mut word);
    }
    if let Some(line) = word.strip_prefix("ready ") {
        if args.json {
            println!("{}", line.trim_end());
        } else {
            eprintln!("{}", line.trim_end());
        }
        return Ok(exit::OK);
    }
    // Not ready: the child says why (or died without a word).
    let status = child.wait().context("waiting for the mount process")?;
    let code = status.code().unwrap_or(exit::FAILURE);
    match word.strip_prefix("error ") {
        Some(why) => eprintln!("pfs: error: {}", why.trim_end()),
        None => eprintln!("pfs: error: the mount process ended before the mount was up ({status})"),
    }
    Ok(if code == 0 { exit::FAILURE } else { code })
}

fn foreground(args: &MountArgs) -> anyhow::Result<i32> {
    super::log::init(&args.log);
    let mut ready = Readiness::from_env();
    if ready.0 {
        // Detached from the terminal that started `pfs mount`.
        let _ = rustix::process::setsid();
    }
    match mount_and_serve(args, &mut ready) {
        Ok(code) => Ok(code),
        Err(e) => {
            ready.say(&format!("error {}\n", exit::describe(&e)));
            Err(e)
        }
    }
}

fn mount_and_serve(args: &MountArgs, ready: &mut Readiness) -> anyhow::Result<i32> {
    // Started by `pfs mount` without -f: its standard output is gone after
    // the ready line.
    let daemon = ready.0;
    let (addr, dir) = split_target("SOURCE", &args.source, args.transport.transport)?;
    let cache_dir = match &args.cache {
        Some(d) => d.clone(),
        // One cache per server by default: a cache serves one mount at a
        // time, and mounts of one server are what share most chunks.
        None => pfs_files::default_cache_dir()?
            .join("mount")
            .join(packetfs::mount::cache_name(&addr)),
    };
    let cfg = MountConfig {
        dir: dir.clone().into_bytes(),
        cache_dir,
        cache_capacity: args.cache_size,
        timeout: Duration::from_secs_f64(args.timeout),
        max_entries: args.max_entries,
        threads: usize::from(args.threads),
        allow_other: args.allow_other,
        fsname: format!("pfs:{}", args.source),
        prefetch: args.prefetch,
        passthrough: args.passthrough,
    };
    let security = super::auth::client_security(&args.auth, &addr, args.transport.transport)?;
    let to = target(&addr, &args.transport, 0);
    let t = to.connect_as(security.as_ref(), pfs_auth::Service::Mount)?;
    // The same server, the same keys: a restarted server is found again.
    let reconnect: pfs_mount::Connector = Box::new(move || {
        to.connect_as(security.as_ref(), pfs_auth::Service::Mount)
            .map_err(|e| exit::describe(&e.into()).into())
    });
    let session = pfs_mount::open_with(t, &cfg, Some(reconnect)).map_err(anyhow::Error::new)?;
    let mountpoint = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    let _direct = match &args.direct {
        Some(sock) => {
            let size = usize::try_from(args.direct_size).context("--direct-size")?;
            Some(
                pfs_mount::direct::serve(session.shared().clone(), sock, size)
                    .with_context(|| format!("--direct {}", sock.display()))?,
            )
        }
        None => None,
    };
    // A signal unmounts; an unmount from outside ends the session too; the
    // process then ends within a bound (packetfs::mount::Stopper).
    let stopper = Stopper::install(mountpoint.clone()).context("installing the signal handlers")?;
    let bg = match session.mount(&mountpoint, &cfg) {
        Ok(bg) => bg,
        Err(e) => {
            stopper.unmounted();
            return Err(anyhow::Error::new(e));
        }
    };
    stopper.mounted();
    let tree = &session.shared().tree;
    let line = if args.json {
        serde_json::json!({ "event": "mounted", "source": args.source, "mountpoint": mountpoint.display().to_string(),
            "entries": tree.entries(), "files": tree.files(), "bytes": tree.bytes(),
            "opened_ms": session.opened_in.as_secs_f64() * 1e3, "prefetch": args.prefetch })
        .to_string()
    } else {
        format!(
            "pfs: mounted {} at {}: {} entries, {} files, {:.1} MB (listing in {:.0} ms){}",
            args.source,
            mountpoint.display(),
            tree.entries(),
            tree.files(),
            tree.bytes() as f64 / 1e6,
            session.opened_in.as_secs_f64() * 1e3,
            if args.prefetch { "; prefetching" } else { "" }
        )
    };
    if ready.0 {
        ready.say(&format!("ready {line}\n"));
    } else if args.json {
        println!("{line}");
    } else {
        eprintln!("{line}");
    }
    let ended = bg.join();
    stopper.unmounted();
    let report = session.close();
    if daemon {
        eprintln!("pfs: unmounted {}: {report}", mountpoint.display());
    } else if args.json {
        println!(
            "{}",
            serde_json::json!({ "event": "unmounted", "report": report })
        );
    } else {
        eprintln!("pfs: unmounted {}: {report}", mountpoint.display());
    }
    ended.context("the FUSE session ended with an error")?;
    Ok(exit::OK)
}

pub fn umount(args: &UmountArgs) -> anyhow::Result<i32> {
    packetfs::mount::unmount(&args.mountpoint, args.lazy)?;
    Ok(exit::OK)
}

/// Exit code of a mount that did not start.
pub fn classify(e: &MountError) -> i32 {
    match e {
        MountError::Link(_) => exit::TRANSPORT,
        MountError::Proto(ProtoError::Server { code, .. }) if *code == pfs_wire::ErrorCode::Auth as u16 => {
            exit::AUTH
        }
        MountError::Proto(ProtoError::Server { .. }) => exit::REFUSED,
        MountError::Proto(_) => exit::PROTOCOL,
        MountError::Cache { .. } | MountError::Mount { .. } => exit::FAILURE,
    }
}
