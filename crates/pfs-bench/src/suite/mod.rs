//! `pfs bench`: the labelled benchmark suite on loopback. Starts its own
//! receiver (`pfs serve` as a child process, its own blob) and its own
//! conventional baselines, runs every row in one session on one machine, and
//! prints one table; ratios are taken against baselines from the same run.
//!
//! Rows are declared in one place (`plan`); a baseline whose tool is
//! missing is printed as skipped with the install hint, never dropped.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use pfs_auth::Cipher;
use pfs_exec::execute::resolve;
use pfs_exec::{Digest, Pattern, Schedule, ScheduleSpec, Total};
use pfs_session::SessionStats;
use pfs_sys::{pin_current_thread, thread_usage};
use pfs_wire::{IntegrityAlg, Mode};

use crate::args::{BenchArgs, PathArg};
use crate::child::{serve_listening, ChildGuard};
use crate::peer::{open_blob, send_on, send_once, sender_config, study_blob, OpenedBlob, Target};
use crate::scratch::{memory_dir, Scratch};
use crate::{labels, sysinfo, Binary, Outcome};

mod conventional;
pub mod files;
mod link;
mod netpath;
pub mod quic;
mod row;
mod table;

use conventional::{run_iperf3, run_rsync, run_scp, FileJob, Iperf3Job};
use netpath::NetPath;
use quic::{run_quic, Cc, QuicJob};
use row::{Row, SuiteHeader, SuiteSettings};

use crate::plot::{suite_bars, SuiteBar};

/// Sizes of one suite.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    blob: u64,
    payload_bytes: u64,
    offset_bytes: u64,
    fnv_bytes: u64,
    file_bytes: u64,
    /// Bytes of each QUIC (quinn) row.
    quic_bytes: u64,
    iperf_secs: u32,
}

const QUICK: Sizes = Sizes {
    blob: 1 << 30,
    payload_bytes: 4_000_000_000,
    offset_bytes: 16_000_000_000,
    fnv_bytes: 2_000_000_000,
    file_bytes: 1_000_000_000,
    quic_bytes: 1_000_000_000,
    iperf_secs: 3,
};
const FULL: Sizes = Sizes {
    blob: 4 << 30,
    payload_bytes: 16_000_000_000,
    offset_bytes: 64_000_000_000,
    fnv_bytes: 8_000_000_000,
    file_bytes: 4_000_000_000,
    quic_bytes: 4_000_000_000,
    iperf_secs: 10,
};

/// What a row runs.
#[derive(Debug, Clone)]
enum Job {
    /// iperf3, one stream.
    Iperf3(Iperf3Job),
    /// Two iperf3 TCP flows at once over the same path, with these
    /// congestion controls (emulated link only).
    Compete(&'static str, &'static str),
    /// A PFS UDP payload flow beside an iperf3 TCP flow with this
    /// congestion control (emulated link only).
    CompeteUdp(&'static str),
    /// scp of a tmpfs file to a private sshd.
    Scp,
    /// rsync of the same file to a private rsync daemon.
    Rsync,
    /// A bulk transfer over quinn (`pfs bench quic-peer` on both sides).
    Quic(QuicJob),
    Pfs {
        transport: Via,
        mode: Mode,
        integrity: IntegrityAlg,
        pattern: Pattern,
        bytes: u64,
        /// A protected session with this record cipher; `None`: plain.
        cipher: Option<Cipher>,
    },
    /// `count` connections, each a Noise handshake and the server's verdict.
    Handshake { count: usize },
    Loop {
        integrity: IntegrityAlg,
        pattern: Pattern,
        bytes: u64,
    },
    /// The xxh3 pCPU kernel over the same schedule, sharded across pThreads.
    Pcpu {
        encoding: pfs_wire::Encoding,
        threads: usize,
        pattern: Pattern,
        bytes: u64,
    },
}

/// The transport of a PFS row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// TCP over the bench's network path (loopback or veth).
    Tcp,
    /// Shared-memory rings to a same-host receiver process.
    Shm,
    /// UDP (the reliable datagram transport) over the bench's network path.
    Udp,
}

impl Via {
    fn label(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Shm => "SHM",
            Self::Udp => "UDP",
        }
    }
}

/// One planned row.
#[derive(Debug, Clone)]
struct Planned {
    label: String,
    purpose: &'static str,
    job: Job,
}

impl Planned {
    /// Text `--only` matches against: label, integrity and pattern, lower case.
    fn key(&self) -> String {
        let extra = match &self.job {
            Job::Iperf3(_)
            | Job::Compete(..)
            | Job::CompeteUdp(_)
            | Job::Scp
            | Job::Rsync
            | Job::Handshake { .. } => String::new(),
            Job::Quic(q) => format!(" cc={}", q.cc.name()),
            Job::Pcpu { threads, pattern, .. } => format!(" xxh3 {} pthreads={threads}", pattern.name()),
            Job::Pfs {
                integrity, pattern, ..
            }
            | Job::Loop {
                integrity, pattern, ..
            } => {
                format!(" {} {}", integrity.name(), pattern.name())
            }
        };
        format!("{}{extra}", self.label).to_lowercase()
    }
}

fn loop_label(alg: IntegrityAlg) -> String {
    labels::conventional(&format!("{} loop", alg.name()))
}

/// The rows of the suite, in order. The one place a row is added.
fn plan(sizes: Sizes, pattern: Pattern) -> Vec<Planned> {
    let mut rows = vec![
        Planned {
            label: labels::conventional("iperf3"),
            purpose: "Transfer",
            job: Job::Iperf3(Iperf3Job::default()),
        },
        // The same write size as a payload gram: the fairer transport baseline.
        Planned {
            label: labels::conventional("iperf3 -l 1M"),
            purpose: "Transfer",
            job: Job::Iperf3(Iperf3Job {
                len: Some("1M"),
                ..Iperf3Job::default()
            }),
        },
    ];
    // QUIC over the same path: quinn with each of its congestion controllers.
    for cc in [Cc::Cubic, Cc::Bbr] {
        rows.push(Planned {
            label: labels::quic(),
            purpose: "Transfer",
            job: Job::Quic(QuicJob {
                bytes: sizes.quic_bytes,
                cc,
                window: quic::DEFAULT_WINDOW,
            }),
        });
    }
    rows.extend([
        Planned {
            label: labels::conventional("scp"),
            purpose: "Transfer",
            job: Job::Scp,
        },
        Planned {
            label: labels::conventional("rsync"),
            purpose: "Transfer",
            job: Job::Rsync,
        },
    ]);
    for integrity in [IntegrityAlg::Xxh3, IntegrityAlg::Fnv1a] {
        let fnv = integrity == IntegrityAlg::Fnv1a;
        let exec_bytes = if fnv { sizes.fnv_bytes } else { sizes.offset_bytes };
        rows.push(Planned {
            label: loop_label(integrity),
            purpose: "pCPU",
            job: Job::Loop {
                integrity,
                pattern,
                bytes: exec_bytes,
            },
        });
        let payload_bytes = if fnv { sizes.fnv_bytes } else { sizes.payload_bytes };
        // The three plain PFS rows over one transport.
        let plain_rows = |via: Via| {
            [Mode::Payload, Mode::Offset, Mode::Arith].map(|mode| Planned {
                label: labels::mode(mode, via.label()),
                purpose: if mode == Mode::Payload { "Transfer" } else { "both" },
                job: Job::Pfs {
                    transport: via,
                    mode,
                    integrity,
                    pattern,
                    bytes: if mode == Mode::Payload {
                        payload_bytes
                    } else {
                        exec_bytes
                    },
                    cipher: None,
                },
            })
        };
        rows.push(Planned {
            label: labels::mode(Mode::Payload, "TCP"),
            purpose: "Transfer",
            job: Job::Pfs {
                transport: Via::Tcp,
                mode: Mode::Payload,
                integrity,
                pattern,
                bytes: payload_bytes,
                cipher: None,
            },
        });
        for mode in [Mode::Offset, Mode::Arith] {
            rows.push(Planned {
                label: labels::mode(mode, "TCP"),
                purpose: "both",
                job: Job::Pfs {
                    transport: Via::Tcp,
                    mode,
                    integrity,
                    pattern,
                    bytes: exec_bytes,
                    cipher: None,
                },
            });
        }
        // The same three over the UDP transport, beside their TCP twins.
        if !fnv {
            rows.extend(plain_rows(Via::Udp));
        }
        // Protected sessions (Noise handshake, sealed records): payload with
        // each cipher, the descriptor modes with the preferred one.
        if !fnv {
            for cipher in Cipher::ALL {
                rows.push(Planned {
                    label: labels::protected(&labels::mode(Mode::Payload, "TCP"), cipher.name()),
                    purpose: "Transfer",
                    job: Job::Pfs {
                        transport: Via::Tcp,
                        mode: Mode::Payload,
                        integrity,
                        pattern,
                        bytes: payload_bytes,
                        cipher: Some(cipher),
                    },
                });
            }
            for mode in [Mode::Offset, Mode::Arith] {
                let cipher = Cipher::preferred();
                rows.push(Planned {
                    label: labels::protected(&labels::mode(mode, "TCP"), cipher.name()),
                    purpose: "both",
                    job: Job::Pfs {
                        transport: Via::Tcp,
                        mode,
                        integrity,
                        pattern,
                        bytes: exec_bytes,
                        cipher: Some(cipher),
                    },
                });
            }
            rows.push(Planned {
                label: labels::HANDSHAKE.into(),
                purpose: "Latency",
                job: Job::Handshake { count: 100 },
            });
        }
        // The same rows to a same-host receiver over shared-memory rings.
        if !fnv {
            rows.extend(plain_rows(Via::Shm));
        }
        if pattern != Pattern::Sequential && !fnv {
            rows.push(Planned {
                label: loop_label(integrity),
                purpose: "pCPU",
                job: Job::Loop {
                    integrity,
                    pattern: Pattern::Sequential,
                    bytes: exec_bytes,
                },
            });
            for mode in [Mode::Offset, Mode::Arith] {
                rows.push(Planned {
                    label: labels::mode(mode, "TCP"),
                    purpose: "both",
                    job: Job::Pfs {
                        transport: Via::Tcp,
                        mode,
                        integrity,
                        pattern: Pattern::Sequential,
                        bytes: exec_bytes,
                        cipher: None,
                    },
                });
            }
        }
    }
    // Execution where the data lives: the xxh3 kernel on 1 and 2 pThreads.
    for encoding in [pfs_wire::Encoding::Absolute, pfs_wire::Encoding::Arithmetic] {
        for threads in [1, 2] {
            rows.push(Planned {
                label: labels::pcpu(encoding).into(),
                purpose: "pCPU",
                job: Job::Pcpu {
                    encoding,
                    threads,
                    pattern,
                    bytes: sizes.offset_bytes,
                },
            });
        }
    }
    // Payload without a digest: what the transport path alone costs.
    rows.push(Planned {
        label: labels::mode(Mode::Payload, "TCP"),
        purpose: "Transfer",
        job: Job::Pfs {
            transport: Via::Tcp,
            mode: Mode::Payload,
            integrity: IntegrityAlg::None,
            pattern,
            bytes: sizes.payload_bytes,
            cipher: None,
        },
    });
    rows
}

/// Starts `pfs serve` on an ephemeral loopback port; returns its address.
/// `via` SHM listens on a socket under `scratch`, on this host whatever the
/// network path.
#[allow(clippy::too_many_arguments)]
fn start_receiver(
    exe: &Path,
    net: &NetPath,
    via: Via,
    scratch: &Path,
    sizes: Sizes,
    seed: u64,
    huge_dir: Option<&Path>,
    pin: bool,
    sessions: usize,
    identity: &Path,
) -> anyhow::Result<(ChildGuard, String, mpsc::Receiver<String>)> {
    let mut cmd = match via {
        Via::Tcp => {
            let mut cmd = net.receiver_command(&exe.to_string_lossy());
            // The namespaced path listens on a veth address: not loopback,
            // so plain rows need the explicit opt-out (the path is private
            // to this run).
            cmd.args([
                "serve",
                "--listen",
                &format!("{}:0", net.server_ip()),
                "--insecure-no-auth",
            ]);
            cmd
        }
        Via::Shm => {
            let mut cmd = Command::new(exe);
            cmd.args(["serve", "--transport", "shm", "--listen"])
                .arg(scratch.join("shm.sock"));
            cmd
        }
        Via::Udp => {
            let mut cmd = net.receiver_command(&exe.to_string_lossy());
            cmd.args([
                "serve",
                "--transport",
                "udp",
                "--listen",
                &format!("{}:0", net.server_ip()),
                "--insecure-no-auth",
            ]);
            cmd
        }
    };
    // An identity makes protected rows possible; without --authorized-keys
    // the server still takes the plain rows.
    if via == Via::Tcp {
        cmd.arg("--identity").arg(identity);
    }
    // On an emulated link a session cut at its time bound may end on the
    // receiver's side seconds later (its FIN lost and resent): a second
    // slot keeps that from refusing the next row. Elsewhere one session at a time.
    let clients = if net.link().is_some() { "2" } else { "1" };
    cmd.args(["--json", "--max-clients", clients])
        .args(["--max-sessions", &sessions.to_string()])
        .args(["--size", &sizes.blob.to_string(), "--seed", &seed.to_string()]);
    if let Some(d) = huge_dir {
        cmd.arg("--huge-dir").arg(d);
    }
    if pin {
        cmd.args(["--pin", "1"]);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    let mut child = cmd.spawn().context("cannot start the receiver (pfs serve)")?;
    let stdout = child.stdout.take().context("receiver stdout")?;
    let mut stderr = child.stderr.take().context("receiver stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Keep draining after the caller stops listening: a receiver
        // blocked on a full stdout pipe would stall its sessions.
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        let _ = etx.send(s);
    });
    let guard = ChildGuard::new(child);
    match serve_listening(&rx, Duration::from_secs(300)) {
        Some(addr) => Ok((guard, addr, erx)),
        None => {
            drop(guard);
            let err = erx.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
            bail!("the receiver did not start listening:\n{err}");
        }
    }
}

/// `count` protected connections to the receiver, each timed from TCP
/// connect to the server's verdict (HS1, HS2, HS3 and the first record):
/// what opening a protected session costs before any data moves.
fn run_handshakes(
    label: &str,
    target: &Target,
    sec: &pfs_auth::ClientSecurity,
    count: usize,
    lossy: bool,
) -> anyhow::Result<Row> {
    let mut times = Vec::with_capacity(count);
    let mut unfinished = Vec::new();
    for _ in 0..count {
        let t0 = Instant::now();
        match target
            .connect_as(Some(sec), pfs_auth::Service::Blob)
            .map_err(crate::peer::lift)
        {
            Ok(conn) => {
                times.push(t0.elapsed().as_secs_f64());
                drop(conn);
            }
            // On a lossy link a handshake that misses its deadline is an
            // outcome to count, not the end of the row.
            Err(e) if lossy => unfinished.push(format!("{e:#}")),
            Err(e) => return Err(e),
        }
    }
    let Some(first_error) = unfinished.first() else {
        return Ok(handshake_row(label, sec, count, &mut times, ""));
    };
    if times.is_empty() {
        return Ok(Row::cut(
            label,
            "Latency",
            format!("none of {count} handshakes finished ({first_error})"),
        ));
    }
    let why = format!("; {} of {count} did not finish ({first_error})", unfinished.len());
    Ok(handshake_row(label, sec, count, &mut times, &why))
}

/// The handshake row from the times of the handshakes that finished.
fn handshake_row(
    label: &str,
    sec: &pfs_auth::ClientSecurity,
    count: usize,
    times: &mut [f64],
    unfinished: &str,
) -> Row {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let mut row = Row::measured(label, "Latency", 0, 0, at(0.5), 0.0, 0.0);
    row.transport = "TCP".into();
    row.notes = format!(
        "median {:.3} ms, p90 {:.3} ms, min {:.3} ms of {} (connect, HS1-HS3, verdict; {}){unfinished}",
        at(0.5) * 1e3,
        at(0.9) * 1e3,
        times[0] * 1e3,
        times.len().min(count),
        sec.cipher.name()
    );
    row
}

/// A plain single-thread loop over the same schedule: what executing the
/// bytes costs with no transport at all.
fn run_loop(label: &str, blob: &[u8], spec: ScheduleSpec, alg: IntegrityAlg) -> anyhow::Result<Row> {
    let mut sched = Schedule::new(spec)?;
    let mut descs = Vec::with_capacity(spec.desc_per_gram as usize);
    let mut digest = Digest::new(alg);
    let mut acc = 0u64;
    let mut eff = 0u64;
    let t0 = Instant::now();
    let u0 = thread_usage();
    while sched.next_gram(&mut descs) {
        digest.reset();
        for (i, &d) in descs.iter().enumerate() {
            digest.update(resolve(blob, d, i as u32)?);
            eff += u64::from(d.len);
        }
        acc ^= digest.value();
    }
    std::hint::black_box(acc);
    let el = t0.elapsed().as_secs_f64();
    let u = thread_usage().since(&u0);
    let mut row = Row::measured(
        label,
        "pCPU",
        eff,
        0,
        el,
        u.user_us as f64 / 1e6,
        u.sys_us as f64 / 1e6,
    );
    row.integrity = alg.name().into();
    row.notes = format!("pattern={}, same schedule, no transport", spec.pattern.name());
    Ok(row)
}

fn spec_for(blob_len: u64, args: &BenchArgs, pattern: Pattern, bytes: u64) -> ScheduleSpec {
    ScheduleSpec {
        seed: 1,
        desc_per_gram: args.desc_per_gram,
        max_len: args.max_len,
        align: 64,
        pattern,
        total: Total::Bytes(bytes),
        blob_len,
    }
}

/// Appends `x.xx× <baseline>` to the notes of rows that have a named baseline in this run.
fn add_ratios(rows: &mut [Row]) {
    let rate = |rows: &[Row], pred: &dyn Fn(&Row) -> bool| {
        rows.iter().find(|r| r.ran() && pred(r)).map(|r| r.effective_mb_s)
    };
    let iperf = rate(rows, &|r| r.label == "Conventional (iperf3)");
    let iperf_1m = rate(rows, &|r| r.label == "Conventional (iperf3 -l 1M)");
    let loop_rate = |rows: &[Row], alg: &str, pattern: &str| {
        rate(rows, &|r| {
            r.label.starts_with("Conventional (") && r.integrity == alg && r.notes.contains(pattern)
        })
    };
    let mode_rate = |rows: &[Row], label: &str, alg: &str, pattern: &str| {
        rate(rows, &|r| {
            r.label == label && r.integrity_alg() == alg && r.notes.contains(pattern)
        })
    };
    let snapshot = rows.to_vec();
    for r in rows.iter_mut().filter(|r| r.ran()) {
        let mut ratios = Vec::new();
        let is_pfs = r.label.starts_with("PFS-") || r.label.starts_with("Native");
        let pattern = ["pattern=random", "pattern=sequential", "pattern=strided"]
            .into_iter()
            .find(|p| r.notes.contains(p))
            .unwrap_or("pattern=random");
        // quinn against one TCP stream over the same path, same run.
        if r.label == labels::quic() {
            if let Some(b) = iperf {
                ratios.push(format!("{:.2}× iperf3", r.effective_mb_s / b));
            }
        }
        if r.label == labels::mode(Mode::Payload, "TCP") {
            if let Some(b) = iperf {
                ratios.push(format!("{:.2}× iperf3", r.effective_mb_s / b));
            }
            if let Some(b) = iperf_1m {
                ratios.push(format!("{:.2}× iperf3 -l 1M", r.effective_mb_s / b));
            }
        }
        let is_payload = r.label.starts_with(&labels::mode(Mode::Payload, "TCP"))
            || r.label == labels::mode(Mode::Payload, "SHM")
            || r.label == labels::mode(Mode::Payload, "UDP");
        if r.label == labels::mode(Mode::Payload, "UDP") {
            if let Some(b) = iperf {
                ratios.push(format!("{:.2}× iperf3", r.effective_mb_s / b));
            }
        }
        if is_pfs && !is_payload {
            let alg = r.integrity_alg();
            if let Some(b) = loop_rate(&snapshot, alg, pattern) {
                ratios.push(format!("{:.2}× {alg} loop", r.effective_mb_s / b));
            }
        }
        for via in [Via::Tcp, Via::Shm, Via::Udp] {
            if r.label == labels::mode(Mode::Arith, via.label()) {
                let offset = labels::mode(Mode::Offset, via.label());
                if let Some(b) = mode_rate(&snapshot, &offset, r.integrity_alg(), pattern) {
                    ratios.push(format!("{:.2}× offset-only", r.effective_mb_s / b));
                }
            }
        }
        // Each SHM and UDP row against the same mode over TCP in this run.
        let shm_mode = [Mode::Payload, Mode::Offset, Mode::Arith].into_iter().find(|&m| {
            r.label == labels::mode(m, Via::Shm.label()) || r.label == labels::mode(m, Via::Udp.label())
        });
        if let Some(m) = shm_mode {
            if let Some(b) = mode_rate(
                &snapshot,
                &labels::mode(m, Via::Tcp.label()),
                r.integrity_alg(),
                pattern,
            ) {
                ratios.push(format!("{:.2}× TCP", r.effective_mb_s / b));
            }
        }
        // A protected row against its plain twin, and payload against scp
        // (the encrypted copy people compare with).
        let protected = Cipher::ALL.into_iter().find_map(|c| {
            r.label
                .strip_suffix(&format!(" ({})", c.name()))
                .map(str::to_string)
        });
        if let Some(plain) = protected {
            if let Some(b) = mode_rate(&snapshot, &plain, r.integrity_alg(), pattern) {
                ratios.push(format!("{:.2}× plain", r.effective_mb_s / b));
            }
            if plain == labels::mode(Mode::Payload, "TCP") {
                if let Some(b) = rate(&snapshot, &|o: &Row| o.label == "Conventional (scp)") {
                    ratios.push(format!("{:.2}× scp", r.effective_mb_s / b));
                }
            }
        }
        if r.label.starts_with("pCPU ") {
            if let Some(b) = loop_rate(&snapshot, "xxh3", pattern) {
                ratios.push(format!("{:.2}× xxh3 loop", r.effective_mb_s / b));
            }
            let same = |label: &str, threads: u32| {
                rate(&snapshot, &|o: &Row| {
                    o.label == label && o.pthreads == threads && o.notes.contains(pattern)
                })
            };
            if r.pthreads > 1 {
                if let Some(b) = same(&r.label, 1) {
                    ratios.push(format!("{:.2}× 1 pThread", r.effective_mb_s / b));
                }
            }
            if r.label == "pCPU Arithmetic-mode" {
                if let Some(b) = same("pCPU Offset-mode", r.pthreads) {
                    ratios.push(format!("{:.2}× offset-mode", r.effective_mb_s / b));
                }
            }
        }
        if !ratios.is_empty() {
            r.add_note(&ratios.join(", "));
        }
    }
}

/// The sizes of one run: `--full`, `--size` and `--scale` applied.
fn sizes_for(args: &BenchArgs) -> anyhow::Result<Sizes> {
    let mut sizes = if args.full { FULL } else { QUICK };
    if let Some(s) = args.size {
        sizes.blob = s;
    }
    if !(args.scale.is_finite() && args.scale > 0.0) {
        bail!("--scale must be a positive number (got {})", args.scale);
    }
    let scaled = |b: u64| ((b as f64 * args.scale) as u64).max(1 << 20);
    sizes.payload_bytes = scaled(sizes.payload_bytes);
    sizes.offset_bytes = scaled(sizes.offset_bytes);
    sizes.fnv_bytes = scaled(sizes.fnv_bytes);
    sizes.file_bytes = scaled(sizes.file_bytes).min(sizes.blob);
    sizes.quic_bytes = scaled(sizes.quic_bytes);
    sizes.iperf_secs = ((f64::from(sizes.iperf_secs) * args.scale).ceil() as u32).max(1);
    Ok(sizes)
}

/// The rows of `plan` that `--only` keeps.
fn only(plan: Vec<Planned>, args: &BenchArgs) -> anyhow::Result<Vec<Planned>> {
    let only: Vec<String> = args.only.iter().map(|s| s.to_lowercase()).collect();
    let planned: Vec<Planned> = plan
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| p.key().contains(o)))
        .collect();
    if planned.is_empty() {
        bail!("--only matched no row");
    }
    Ok(planned)
}

/// What every row of one run shares: the network path, the receivers,
/// the sender's blob, the scratch directory and the keys. Fields drop in
/// order: receivers first, the network path (namespaces) last.
struct Bench {
    receiver: Option<(ChildGuard, String, mpsc::Receiver<String>)>,
    shm_receiver: Option<(ChildGuard, String, mpsc::Receiver<String>)>,
    udp_receiver: Option<(ChildGuard, String, mpsc::Receiver<String>)>,
    /// The `pfs` binary (the QUIC rows run its hidden peer mode).
    pfs_path: PathBuf,
    opened: OpenedBlob,
    server_key: pfs_auth::Identity,
    /// The source file of the copy rows (tmpfs).
    src: PathBuf,
    scratch: Scratch,
    sizes: Sizes,
    pin: bool,
    receiver_blob: String,
    receiver_setup: String,
    net: NetPath,
}

impl Bench {
    /// Sets up the scratch directory, keys, receivers (each allowed
    /// `sessions_factor` × the sessions `planned` opens) and the blob, over `net`.
    fn start(
        args: &BenchArgs,
        pfs: &Binary,
        sizes: Sizes,
        planned: &[Planned],
        net: NetPath,
        sessions_factor: usize,
    ) -> anyhow::Result<Bench> {
        let pin = !args.no_pin && sysinfo::cores() >= 2;
        let sessions = |via: Via| {
            planned
                .iter()
                .map(|p| match p.job {
                    Job::Pfs { transport, .. } if transport == via => 1,
                    Job::Handshake { count } if via == Via::Tcp => count,
                    _ => 0,
                })
                .sum::<usize>()
                * sessions_factor
        };
        let seed = 0x5eed;
        eprintln!(
            "pfs bench: setting up a {} MB blob for each peer (outside the timed path)…",
            sizes.blob / 1_000_000
        );
        // Memory-backed: the copy rows' source file must not wait on a disk.
        let base = memory_dir(0).unwrap_or(Path::new("/tmp"));
        let scratch = Scratch::new(base, "pfs-bench")?;
        // Keys for the protected rows: the receiver's on disk (as `pfs serve
        // --identity` reads it), ours in memory, its key pinned.
        let server_identity = scratch.path().join("server-identity");
        let server_key = pfs_auth::Identity::generate()?;
        server_key.save(&server_identity, "pfs bench receiver", true)?;
        let start = |via: Via| -> anyhow::Result<Option<(ChildGuard, String, mpsc::Receiver<String>)>> {
            match sessions(via) {
                0 => Ok(None),
                n => start_receiver(
                    &pfs.path,
                    &net,
                    via,
                    scratch.path(),
                    sizes,
                    seed,
                    args.huge_dir.as_deref(),
                    pin,
                    n,
                    &server_identity,
                )
                .map(Some),
            }
        };
        let receiver = start(Via::Tcp)?;
        let shm_receiver = start(Via::Shm)?;
        let udp_receiver = start(Via::Udp)?;
        let opened: OpenedBlob = open_blob(&study_blob(sizes.blob, seed, args.huge_dir.clone()), true)?;
        eprintln!("sender {}", opened.describe());
        if pin {
            pin_current_thread(0).context("pinning the sender to CPU 0")?;
        }
        // The file the conventional copy rows move: the first bytes of the blob, on tmpfs.
        let src = scratch.path().join("src.bin");
        if planned.iter().any(|p| matches!(p.job, Job::Scp | Job::Rsync)) {
            std::fs::write(&src, &opened.blob.as_slice()[..sizes.file_bytes as usize])
                .with_context(|| format!("writing {}", src.display()))?;
        }
        Ok(Bench {
            receiver,
            shm_receiver,
            udp_receiver,
            pfs_path: pfs.path.clone(),
            opened,
            server_key,
            src,
            scratch,
            sizes,
            pin,
            receiver_blob: "-".into(),
            receiver_setup: "-".into(),
            net,
        })
    }

    fn security(&self, cipher: Cipher) -> anyhow::Result<pfs_auth::ClientSecurity> {
        Ok(pfs_auth::ClientSecurity {
            identity: pfs_auth::Identity::generate()?,
            pin: pfs_auth::Pin::Key(self.server_key.public()),
            psk: None,
            cipher,
            rotate_log2: pfs_auth::DEFAULT_ROTATE_LOG2,
            timeout: pfs_auth::DEFAULT_HANDSHAKE_TIMEOUT,
        })
    }

    /// Runs one planned row (two for a competing pair). On an emulated
    /// link, `budget` sizes the transfers for the link and bounds their time.
    fn run_row(
        &mut self,
        p: &Planned,
        args: &BenchArgs,
        budget: Option<&link::LinkBudget>,
    ) -> anyhow::Result<Vec<Row>> {
        let pin = self.pin;
        let row = match &p.job {
            Job::Iperf3(job) => {
                let secs = budget.map_or(self.sizes.iperf_secs, |b| b.iperf_secs);
                let job = Iperf3Job {
                    udp_bits: if job.udp_bits == Some(0) {
                        budget.map(|b| b.udp_bits)
                    } else {
                        job.udp_bits
                    },
                    ..*job
                };
                run_iperf3(&p.label, &self.net, secs, pin, job)
            }
            Job::Compete(first, second) => {
                let secs = budget.map_or(self.sizes.iperf_secs, |b| b.iperf_secs);
                return Ok(link::compete_iperf3(&self.net, first, second, secs));
            }
            Job::CompeteUdp(cc) => {
                let secs = budget.map_or(self.sizes.iperf_secs, |b| b.iperf_secs);
                return Ok(link::compete_pfs_udp(&self.net, &self.pfs_path, cc, budget, secs));
            }
            Job::Quic(job) => {
                // On a link: as many bytes as its rate moves in the budget's time.
                let job = match budget {
                    Some(b) => QuicJob {
                        bytes: b.link_bytes(job.bytes),
                        ..*job
                    },
                    None => *job,
                };
                run_quic(&p.label, &self.pfs_path, &self.net, self.scratch.path(), job, pin)
            }
            Job::Scp | Job::Rsync => {
                let mut bound = None;
                if let Some(b) = budget {
                    // A file the link moves in about the budget's time.
                    let n = b.payload_bytes(self.sizes.file_bytes) as usize;
                    std::fs::write(&self.src, &self.opened.blob.as_slice()[..n])
                        .with_context(|| format!("writing {}", self.src.display()))?;
                    bound = Some(b.limit());
                }
                let job = FileJob {
                    net: &self.net,
                    scratch: self.scratch.path(),
                    src: &self.src,
                    pin,
                    bound,
                };
                if matches!(p.job, Job::Scp) {
                    run_scp(&p.label, &job)
                } else {
                    run_rsync(&p.label, &job)
                }
            }
            Job::Pcpu {
                encoding,
                threads,
                pattern,
                bytes,
            } => {
                let spec = spec_for(self.opened.blob.len(), args, *pattern, *bytes);
                run_pcpu(
                    &p.label,
                    self.opened.blob.as_slice(),
                    spec,
                    *encoding,
                    *threads,
                    pin,
                )
                .unwrap_or_else(|e| Row::failed(&p.label, p.purpose, &e))
            }
            Job::Loop {
                integrity,
                pattern,
                bytes,
            } => {
                // The loop runs where the receiver runs: on CPU 1.
                let spec = spec_for(self.opened.blob.len(), args, *pattern, *bytes);
                let data = self.opened.blob.as_slice();
                let label = p.label.clone();
                let alg = *integrity;
                let r = std::thread::scope(|s| {
                    s.spawn(move || {
                        if pin {
                            let _ = pin_current_thread(1);
                        }
                        run_loop(&label, data, spec, alg)
                    })
                    .join()
                    .map_err(|_| anyhow::anyhow!("loop thread panicked"))?
                });
                r?
            }
            Job::Handshake { count } => {
                let addr = self.receiver.as_ref().context("receiver")?.1.clone();
                let target = Target::Tcp { addr, sock_buf: 0 };
                self.security(Cipher::preferred())
                    .and_then(|sec| run_handshakes(&p.label, &target, &sec, *count, budget.is_some()))
                    .unwrap_or_else(|e| Row::failed(&p.label, p.purpose, &e))
            }
            Job::Pfs {
                transport,
                mode,
                integrity,
                pattern,
                bytes,
                cipher,
            } => self.run_pfs(
                p, args, budget, *transport, *mode, *integrity, *pattern, *bytes, *cipher,
            )?,
        };
        Ok(vec![row])
    }

    /// One PFS session to the receiver, measured by the receiver's report.
    #[allow(clippy::too_many_arguments)]
    fn run_pfs(
        &mut self,
        p: &Planned,
        args: &BenchArgs,
        budget: Option<&link::LinkBudget>,
        transport: Via,
        mode: Mode,
        integrity: IntegrityAlg,
        pattern: Pattern,
        bytes: u64,
        cipher: Option<Cipher>,
    ) -> anyhow::Result<Row> {
        let target = match transport {
            Via::Tcp => Target::Tcp {
                addr: self.receiver.as_ref().context("receiver")?.1.clone(),
                sock_buf: 0,
            },
            Via::Shm => Target::Shm(
                PathBuf::from(&self.shm_receiver.as_ref().context("SHM receiver")?.1),
                pfs_transport::ShmConfig::default(),
            ),
            Via::Udp => Target::Udp {
                addr: self.udp_receiver.as_ref().context("UDP receiver")?.1.clone(),
                cfg: pfs_transport::UdpConfig {
                    max_datagram: self.net.udp_datagram(),
                    ..pfs_transport::UdpConfig::default()
                },
            },
        };
        // On an emulated link: as many bytes as the link moves in the budget's time.
        let bytes = match budget {
            Some(b) if mode == Mode::Payload && transport == Via::Udp => b.link_bytes(bytes),
            Some(b) if mode == Mode::Payload => b.payload_bytes(bytes),
            Some(b) => b.exec_bytes(bytes),
            None => bytes,
        };
        let view = self.opened.view();
        let spec = spec_for(self.opened.blob.len(), args, pattern, bytes);
        let cfg = sender_config(mode, integrity, spec, pfs_session::DEFAULT_PAYLOAD_BUDGET);
        let wire0 = self.net.wire_counter();
        let sec = cipher.map(|c| self.security(c)).transpose()?;
        let sent = match (budget, &target) {
            (Some(b), Target::Tcp { addr, .. }) => {
                link::send_bounded(addr, sec.as_ref(), &view, cfg, b.limit()).map(|(o, k)| (o, k, None))
            }
            _ => match &sec {
                None => send_once(&target, &view, &cfg).map_err(link::SendError::Failed),
                Some(sec) => target
                    .connect_as(Some(sec), pfs_auth::Service::Blob)
                    .map_err(crate::peer::lift)
                    .and_then(|t| send_on(t, &view, &cfg))
                    .map_err(link::SendError::Failed),
            },
        };
        let net_wire = self.net.wire_counter().saturating_sub(wire0);
        let (out, kind, udp) = match sent {
            Ok(done) => done,
            Err(link::SendError::Failed(e)) => {
                let e = match self.receiver_exit(transport) {
                    Some(why) => e.context(why),
                    None => e,
                };
                return Ok(Row::failed(&p.label, p.purpose, &e));
            }
            Err(link::SendError::Cut(what)) => return Ok(Row::cut(&p.label, p.purpose, what)),
        };
        let st = SessionStats::from_report(&out.report, kind, labels::session(out.report.mode, kind));
        // SHM bytes cross no network interface: its wire is the ring,
        // i.e. the frame bytes the receiver read.
        let wire = match transport {
            Via::Tcp | Via::Udp => net_wire,
            Via::Shm => st.wire_bytes,
        };
        self.receiver_blob = format!("{} (page {} B)", st.blob_backing, st.blob_page_size);
        let fp = st.setup_fill_s + st.setup_prefault_s;
        self.receiver_setup = format!(
            "map {:.3} s, prefault {:.3} s, fill {:.3} s, fingerprint {:.3} s ({:.2} GB/s fill+prefault)",
            st.setup_map_s,
            st.setup_prefault_s,
            st.setup_fill_s,
            st.setup_fingerprint_s,
            if fp > 0.0 {
                self.opened.blob.len() as f64 / fp / 1e9
            } else {
                0.0
            }
        );
        let mut row = Row::measured(
            &p.label,
            p.purpose,
            st.effective_bytes,
            wire,
            st.elapsed_s,
            st.user_s,
            st.sys_s,
        );
        row.integrity = st.integrity.clone();
        row.transport = kind.into();
        row.notes = format!(
            "integrity={}, pattern={}, {:.2} B/desc, frames {:.3} MB, sender CPU {:.2} s",
            integrity.name(),
            pattern.name(),
            out.table_bytes as f64 / out.summary.descriptors.max(1) as f64,
            st.wire_bytes as f64 / 1e6,
            (out.sender_usage.user_us + out.sender_usage.sys_us) as f64 / 1e6
        );
        if let Some(u) = udp {
            row.notes.push_str(&format!(
                ", UDP: {} datagrams ≤ {} B, resent {:.3} MB ({} lost, {} spurious), GSO {}, GRO {}",
                u.stats.packets_sent,
                u.datagram,
                u.stats.stream_bytes_resent as f64 / 1e6,
                u.stats.packets_lost,
                u.stats.packets_spurious,
                if u.gso { "on" } else { "off" },
                if u.gro { "on" } else { "off" },
            ));
        }
        Ok(row)
    }

    /// Why the receiver of `via` is gone, if it is: its exit and stderr.
    fn receiver_exit(&mut self, via: Via) -> Option<String> {
        let r = match via {
            Via::Tcp => self.receiver.as_mut()?,
            Via::Shm => self.shm_receiver.as_mut()?,
            Via::Udp => self.udp_receiver.as_mut()?,
        };
        if r.0.running() {
            return None;
        }
        let stderr = r.2.recv_timeout(Duration::from_secs(2)).unwrap_or_default();
        Some(format!("the receiver (pfs serve) had exited: {}", stderr.trim()))
    }

    /// Stops the receivers; the facts the header needs.
    fn finish(&mut self) -> Settled {
        self.receiver = None;
        self.shm_receiver = None;
        self.udp_receiver = None;
        let b = self.opened.blob.backing();
        Settled {
            sender_blob: format!("{} (page {} B)", b.kind.as_str(), b.page_size),
            blob_bytes: self.opened.blob.len(),
            sender_setup: self.opened.describe(),
            receiver_blob: self.receiver_blob.clone(),
            receiver_setup: self.receiver_setup.clone(),
            pinning: if self.pin {
                "sender CPU 0, receiver CPU 1".into()
            } else {
                "unpinned".into()
            },
            path: self.net.name(),
        }
    }
}

/// What a finished run tells its header.
#[derive(Debug)]
struct Settled {
    sender_blob: String,
    blob_bytes: u64,
    sender_setup: String,
    receiver_blob: String,
    receiver_setup: String,
    pinning: String,
    path: String,
}

impl Settled {
    fn settings(self, link: Option<link::LinkHeader>) -> SuiteSettings {
        SuiteSettings {
            thp_mode: sysinfo::thp_mode(),
            sender_blob: self.sender_blob,
            receiver_blob: self.receiver_blob,
            blob_bytes: self.blob_bytes,
            sender_setup: self.sender_setup,
            receiver_setup: self.receiver_setup,
            units: "MB = 10^6 bytes; rates MB/s; CPU from getrusage (receiver thread)".into(),
            path: self.path,
            pinning: self.pinning,
            link,
        }
    }
}

/// Runs the suite; [`Outcome::Failed`] when a row failed or an integrity check did not hold.
pub fn run(args: BenchArgs, pfs: &Binary) -> anyhow::Result<Outcome> {
    let sizes = sizes_for(&args)?;
    if let Some(spec) = args.link {
        return link::run(&args, spec, sizes, pfs);
    }
    let planned = only(plan(sizes, args.pattern.pattern()), &args)?;
    let net = match args.path {
        PathArg::Loopback => NetPath::Loopback,
        PathArg::Veth => NetPath::veth(args.mtu)?,
    };
    let mut bench = Bench::start(&args, pfs, sizes, &planned, net, 1)?;
    let mut rows = Vec::new();
    for p in &planned {
        eprintln!("pfs bench: {} …", p.label);
        rows.extend(bench.run_row(p, &args, None)?);
    }
    let settled = bench.finish();
    if args.full {
        // The file-transfer row group (`pfs bench files`), with the memory of
        // this suite's blobs and scratch file given back first.
        drop(bench);
        let files_args = files::BenchFilesArgs::all_on_tmpfs(args.only.clone());
        match files::collect(&files_args, pfs) {
            Ok((_, files_rows)) => rows.extend(files_rows.into_iter().map(|r| r.row)),
            Err(e) => rows.push(Row::failed("PFS files (pfs bench files rows)", "Transfer", &e)),
        }
    }
    add_ratios(&mut rows);

    let header = SuiteHeader::new(pfs, settled.settings(None));
    let report = table::rows_report(&header, &rows);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("bench.csv"), report.csv("rows").unwrap_or_default())?;
        std::fs::write(
            dir.join("bench.json"),
            serde_json::to_string_pretty(&report.json())?,
        )?;
        std::fs::write(dir.join("bench.md"), report.markdown())?;
        let bars: Vec<SuiteBar> = rows
            .iter()
            .filter(|r| r.ran())
            .map(|r| SuiteBar {
                label: r.plot_label(),
                effective_mb_s: r.effective_mb_s,
                mb_per_cpu_s: r.mb_per_cpu_s,
                effective_mb: r.effective_mb,
                wire_mb: r.wire_mb,
            })
            .collect();
        let title = format!(
            "pfs bench ({}, {} cores, {})",
            header.machine.git_revision, header.machine.cores, header.study.path
        );
        match suite_bars(&bars, &title, &dir.join("bench.png")) {
            Ok(()) => eprintln!("pfs bench: wrote bench.png"),
            Err(e) => eprintln!("pfs: warning: no plot: {e:#}"),
        }
        eprintln!(
            "pfs bench: wrote bench.csv, bench.json, bench.md to {}",
            dir.display()
        );
    }
    Ok(outcome(&rows))
}

/// [`Outcome::Failed`] when a row failed or an integrity check did not hold
/// (a row cut at its time bound on an emulated link is a measurement, not a failure).
fn outcome(rows: &[Row]) -> Outcome {
    let failed = rows
        .iter()
        .any(|r| r.status.is_failed() || r.integrity == "MISMATCH");
    if failed {
        Outcome::Failed
    } else {
        Outcome::Passed
    }
}

/// The xxh3 pCPU kernel over `spec` on `threads` pThreads (pinned to CPUs
/// 1, 0 when `pin`), preparation excluded; CPU is the process's over the run.
fn run_pcpu(
    label: &str,
    blob: &[u8],
    spec: ScheduleSpec,
    encoding: pfs_wire::Encoding,
    threads: usize,
    pin: bool,
) -> anyhow::Result<Row> {
    use pfs_exec::kernel::{Kernel, KernelId};
    use pfs_exec::shard::{run, Prepared, ShardConfig};
    let prepared = Prepared::from_schedule(Schedule::new(spec)?, encoding, blob.len() as u64)?;
    let cpus = if pin { vec![1, 0] } else { Vec::new() };
    let u0 = pfs_sys::process_usage();
    let report = run(
        blob,
        &prepared,
        Kernel::new(KernelId::Xxh3),
        &ShardConfig { threads, cpus },
    )?;
    let u = pfs_sys::process_usage().since(&u0);
    let eff = prepared.effective_bytes();
    let mut row = Row::measured(
        label,
        "pCPU",
        eff,
        0,
        report.elapsed.as_secs_f64(),
        u.user_us as f64 / 1e6,
        u.sys_us as f64 / 1e6,
    );
    row.pthreads = threads as u32;
    row.integrity = "xxh3".into();
    row.notes = format!(
        "kernel=xxh3, pattern={}, {} encoding decoded in the kernel loop ({:.2} B/desc), {threads} pThread(s)",
        spec.pattern.name(),
        encoding.name(),
        prepared.table_bytes() as f64 / prepared.descriptors().max(1) as f64
    );
    Ok(row)
}
