//! Conventional baselines run by the harness itself over the same path as
//! the PFS rows: iperf3 (one stream), scp to an sshd it starts, rsync to an
//! rsync daemon it starts. Receiver-side CPU comes from the server process
//! tree; a missing tool is a `skipped:` row with the install hint, a tool that
//! fails is a `failed:` row with the reason — neither stops the suite.
//!
//! Tool paths can be overridden with `PFS_BENCH_IPERF3`, `PFS_BENCH_SSHD`,
//! `PFS_BENCH_SCP`, `PFS_BENCH_RSYNC` (e.g. to compare custom builds).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::netpath::NetPath;
use super::row::Row;
use crate::child::{have, run_client_until, taskset, tool, wait_children_reaped, wait_listening, ChildGuard};

/// What one iperf3 row runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Iperf3Job {
    /// Write size (`-l`); iperf3's own (128 KiB) when `None`. Ignored for UDP.
    pub len: Option<&'static str>,
    /// TCP congestion control (`-C`); the kernel's default when `None`.
    pub cc: Option<&'static str>,
    /// UDP (`-u`) at this offered rate in bit/s, datagrams that fill the
    /// path's MTU; `Some(0)` in a plan: the emulated link's rate, filled in
    /// when the row runs.
    pub udp_bits: Option<u64>,
}

/// Whether the kernel offers congestion control `cc`, loading its module if
/// needed; why not otherwise.
pub fn congestion_control(cc: &str) -> Result<(), String> {
    let path = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let available = || {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .any(|c| c == cc)
    };
    if available() {
        return Ok(());
    }
    let _ = Command::new("modprobe")
        .arg(format!("tcp_{cc}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if available() {
        Ok(())
    } else {
        Err(format!(
            "congestion control {cc} not in {path} (modprobe tcp_{cc} failed)"
        ))
    }
}

/// iperf3, one stream, receiver-side numbers.
pub fn run_iperf3(label: &str, net: &NetPath, secs: u32, pin: bool, job: Iperf3Job) -> Row {
    let program = tool("iperf3", "iperf3");
    if !have(&program) {
        return Row::skipped(
            label,
            "Transfer",
            "iperf3 not installed (apt-get install iperf3)".into(),
        );
    }
    if let Some(cc) = job.cc {
        if let Err(why) = congestion_control(cc) {
            return Row::skipped(label, "Transfer", why);
        }
    }
    // UDP datagrams that fill one packet of the path: no IP fragments
    // (on loopback, Ethernet-sized, as the PFS UDP rows send).
    let datagram = u32::from(net.udp_datagram());
    let attempt = || -> anyhow::Result<Row> {
        let port = net.free_port()?;
        let ip = net.server_ip();
        let mut srv = net.receiver_command(&program);
        srv.args(["-s", "-1", "-B", ip, "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut server = ChildGuard::new(srv.spawn().context("starting iperf3 -s")?);
        // iperf3 -s -1 serves one client: probing the port would use it up, so retry the client instead.
        let mut last_err = String::new();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            let mut c = Command::new(&program);
            c.args(["-c", ip, "-p", &port.to_string(), "-t", &secs.to_string(), "-J"]);
            if pin {
                c.args(["-A", "0,1"]);
            }
            if let Some(len) = job.len.filter(|_| job.udp_bits.is_none()) {
                c.args(["-l", len]);
            }
            if let Some(cc) = job.cc {
                c.args(["-C", cc]);
            }
            if let Some(bits) = job.udp_bits {
                // 4 MB socket buffers (both ends): the row measures the
                // path, not a receiver briefly off its CPU with 200 KB queued.
                c.args([
                    "-u",
                    "-b",
                    &bits.to_string(),
                    "-l",
                    &datagram.to_string(),
                    "-w",
                    "4M",
                ]);
            }
            let rcvbuf0 = net.link().map(|l| l.udp_rcvbuf_errors());
            let wire0 = net.wire_counter();
            let limit = Duration::from_secs(u64::from(secs) + 60);
            let Some(out) = run_client_until(c, limit)? else {
                if net.link().is_some() {
                    // Under heavy loss iperf3's control connection can stall
                    // past any sensible bound: a measurement, not a failure.
                    return Ok(Row::cut(
                        label,
                        "Transfer",
                        format!(
                            "iperf3 did not finish within {} s (its run was {secs} s)",
                            limit.as_secs()
                        ),
                    ));
                }
                bail!("iperf3 did not finish within {limit:?}");
            };
            let wire = net.wire_counter().saturating_sub(wire0);
            let rcvbuf = rcvbuf0.and_then(|r0| net.link().map(|l| l.udp_rcvbuf_errors().saturating_sub(r0)));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            if let Some(e) = v["error"].as_str() {
                last_err = e.to_string();
                if e.contains("connect") {
                    continue;
                }
                bail!("iperf3: {e}");
            }
            let end = &v["end"];
            let sum = &end["sum_received"];
            let seconds = sum["seconds"]
                .as_f64()
                .context("iperf3 JSON: end.sum_received.seconds")?;
            let bytes = match job.udp_bits {
                // The receiver's datagrams: those sent less those it found missing.
                Some(_) => {
                    let s = &end["sum"];
                    let packets = s["packets"].as_u64().context("iperf3 JSON: end.sum.packets")?;
                    let lost = s["lost_packets"]
                        .as_u64()
                        .context("iperf3 JSON: end.sum.lost_packets")?;
                    packets.saturating_sub(lost) * u64::from(datagram)
                }
                None => sum["bytes"]
                    .as_u64()
                    .context("iperf3 JSON: end.sum_received.bytes")?,
            };
            let cpu = &end["cpu_utilization_percent"];
            let user = cpu["remote_user"].as_f64().unwrap_or(0.0) / 100.0 * seconds;
            let sys = cpu["remote_system"].as_f64().unwrap_or(0.0) / 100.0 * seconds;
            let mut row = Row::measured(label, "Transfer", bytes, wire, seconds, user, sys);
            row.transport = if job.udp_bits.is_some() { "UDP" } else { "TCP" }.into();
            let cc = job
                .cc
                .map(|c| format!(", congestion control {c}"))
                .unwrap_or_default();
            row.notes = match job.udp_bits {
                Some(bits) => format!(
                    "1 stream of {datagram}-byte datagrams offered {}, sent at {:.1} Mbit/s, 4 MB socket buffers, {:.2} % lost (iperf3's count{}), jitter {:.3} ms; wire from the path's counters; receiver CPU from iperf3 remote_user/remote_system",
                    if bits == 0 {
                        "as fast as iperf3 sends (-b 0)".to_string()
                    } else {
                        format!("at {:.1} Mbit/s", bits as f64 / 1e6)
                    },
                    end["sum_sent"]["bits_per_second"].as_f64().unwrap_or(0.0) / 1e6,
                    end["sum"]["lost_percent"].as_f64().unwrap_or(0.0),
                    match rcvbuf {
                        Some(n) => format!("; {n} of them dropped by a full socket buffer on a host, not by the link"),
                        None => String::new(),
                    },
                    end["sum"]["jitter_ms"].as_f64().unwrap_or(0.0),
                ),
                None => format!(
                    "1 stream, {} writes of one hot buffer{cc}; wire from the path's counters (incl. TCP/IP headers); receiver CPU from iperf3 remote_user/remote_system",
                    job.len.unwrap_or("128K")
                ),
            };
            let _ = server.wait_timeout(Duration::from_secs(5));
            return Ok(row);
        }
        bail!("iperf3 server never accepted: {last_err}")
    };
    // A UDP test opens with one datagram each way: on a lossy link either
    // may be lost, and iperf3 gives up on the test. Try again, a few times.
    let mut lost_openings = 0;
    loop {
        match attempt() {
            Err(e)
                if job.udp_bits.is_some()
                    && lost_openings < 4
                    && format!("{e:#}").contains("read from stream socket") =>
            {
                lost_openings += 1;
            }
            Ok(mut row) => {
                if lost_openings > 0 {
                    row.add_note(&format!(
                        "{lost_openings} earlier attempt(s) lost the test's opening datagrams to the link"
                    ));
                }
                return row;
            }
            Err(e) => return Row::failed(label, "Transfer", &e),
        }
    }
}

/// Files and keys of one conventional file-transfer row.
#[derive(Debug)]
pub struct FileJob<'a> {
    /// The network path.
    pub net: &'a NetPath,
    /// Scratch directory (tmpfs) for configs, keys and the destination.
    pub scratch: &'a Path,
    /// Source file (tmpfs).
    pub src: &'a Path,
    /// Pin the client to CPU 0 and the server to CPU 1.
    pub pin: bool,
    /// The longest the copy may take (an emulated link): past it the client
    /// is stopped and the row says how much had arrived. `None`: 600 s, then a failure.
    pub bound: Option<Duration>,
}

impl FileJob<'_> {
    fn dst_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let d = self.scratch.join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// Starts the server, runs the client, checks the copy and builds the row.
    fn copy(&self, run: CopyRun<'_>) -> anyhow::Result<Row> {
        let CopyRun {
            label,
            what,
            server,
            port,
            client,
            dst,
            notes,
        } = run;
        let ip = self.net.server_ip();
        let mut server = taskset(server, self.pin.then_some(1));
        server
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut server = ChildGuard::new(server.spawn().with_context(|| format!("starting the {what}"))?);
        if let Err(e) = wait_listening(&mut server, ip, port, Duration::from_secs(10)) {
            // Kill first: reading the stderr of a live server would wait forever.
            let stderr = server.take_stderr();
            drop(server);
            let mut err = String::new();
            if let Some(mut stderr) = stderr {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
            }
            bail!("{what} will not start: {e:#} {}", err.trim());
        }
        let pid = server.id();
        // The readiness probe made the server fork a child: keep its CPU out of the row.
        wait_children_reaped(pid, Duration::from_secs(5));
        let (u0, s0) =
            pfs_sys::tree_cpu_seconds(pid).with_context(|| format!("reading the {what}'s CPU time"))?;
        let client = taskset(client, self.pin.then_some(0));
        let program = client.get_program().to_string_lossy().into_owned();
        let wire0 = self.net.wire_counter();
        let t0 = Instant::now();
        let bytes = std::fs::metadata(self.src)?.len();
        let Some(out) = run_client_until(client, self.bound.unwrap_or(Duration::from_secs(600)))? else {
            let elapsed = t0.elapsed().as_secs_f64();
            let got = std::fs::metadata(&dst).map(|m| m.len()).unwrap_or(0);
            let _ = std::fs::remove_file(&dst);
            if self.bound.is_none() {
                bail!("{program} did not finish within 600 s");
            }
            return Ok(Row::cut(
                label,
                "Transfer",
                format!(
                    "the copy stopped at its {elapsed:.0} s bound: {:.1} of {:.1} MB had arrived ({:.2} MB/s over the partial copy)",
                    got as f64 / 1e6,
                    bytes as f64 / 1e6,
                    got as f64 / 1e6 / elapsed.max(1e-9)
                ),
            ));
        };
        let elapsed = t0.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!(
                "{program} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let wire = self.net.wire_counter().saturating_sub(wire0);
        wait_children_reaped(pid, Duration::from_secs(5));
        let (u1, s1) =
            pfs_sys::tree_cpu_seconds(pid).with_context(|| format!("reading the {what}'s CPU time"))?;
        let got = std::fs::metadata(&dst)
            .with_context(|| format!("{} was not written", dst.display()))?
            .len();
        let same = got == bytes && file_digest(self.src)? == file_digest(&dst)?;
        let _ = std::fs::remove_file(&dst);
        let mut row = Row::measured(label, "Transfer", bytes, wire, elapsed, u1 - u0, s1 - s0);
        row.transport = "TCP".into();
        row.integrity = if same { "OK" } else { "MISMATCH" }.into();
        row.notes = notes.into();
        Ok(row)
    }
}

/// One conventional copy: a server to start, a client to run, where the copy lands.
struct CopyRun<'a> {
    label: &'a str,
    /// Name of the server for messages.
    what: &'static str,
    server: Command,
    port: u16,
    client: Command,
    dst: PathBuf,
    notes: &'static str,
}

fn file_digest(path: &Path) -> anyhow::Result<u64> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut d = pfs_exec::Digest::new(pfs_wire::IntegrityAlg::Xxh3);
    d.update(&data);
    Ok(d.value())
}

pub(crate) fn user_name() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into())
}

/// scp of a tmpfs file to an sshd the harness starts (compression off).
pub fn run_scp(label: &str, job: &FileJob<'_>) -> Row {
    let (sshd, scp) = match sshd_tools() {
        Ok(t) => t,
        Err(why) => return Row::skipped(label, "Transfer", why),
    };
    let attempt = || -> anyhow::Result<Row> {
        let dir = job.dst_dir("ssh")?;
        let dst = dir.join("dst.bin");
        let port = job.net.free_port()?;
        let ip = job.net.server_ip();
        prepare_sshd(&dir, ip, port)?;
        let mut server = job.net.receiver_command(&sshd);
        server.arg("-D").arg("-e").arg("-f").arg(dir.join("sshd_config"));
        let mut client = scp_command(&scp, &dir, port);
        client
            .arg(job.src)
            .arg(format!("{}@{ip}:{}", user_name(), dst.display()));
        job.copy(CopyRun {
            label,
            what: "sshd",
            server,
            port,
            client,
            dst,
            notes: "default cipher, Compression=no, wall time includes the SSH handshake; wire from interface counters (incl. TCP/IP headers); receiver CPU = sshd tree",
        })
    };
    attempt().unwrap_or_else(|e| Row::failed(label, "Transfer", &e))
}

/// The sshd and scp programs, or why a private sshd cannot run here.
pub(crate) fn sshd_tools() -> Result<(String, String), String> {
    let sshd = tool("sshd", "/usr/sbin/sshd");
    let scp = tool("scp", "scp");
    if !have(&sshd) || !have(&scp) || !have("ssh-keygen") {
        return Err("sshd/scp not installed (apt-get install openssh-server openssh-client)".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Err("needs root to start a private sshd".into());
    }
    Ok((sshd, scp))
}

/// Host and client keys, `authorized_keys` and an `sshd_config` in `dir`
/// for a private sshd on `ip:port` (start it with `-D -e -f dir/sshd_config`).
pub(crate) fn prepare_sshd(dir: &Path, ip: &str, port: u16) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for key in ["host", "client"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            bail!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
    }
    std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys"))?;
    // Privilege separation directory sshd insists on.
    std::fs::create_dir_all("/run/sshd")?;
    let config = format!(
        "Port {port}\nListenAddress {ip}\nHostKey {host}\nPidFile none\nAuthorizedKeysFile {auth}\n\
         PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
         UsePAM no\nStrictModes no\nCompression no\nSubsystem sftp internal-sftp\nLogLevel ERROR\n",
        host = dir.join("host").display(),
        auth = dir.join("authorized_keys").display(),
    );
    std::fs::write(dir.join("sshd_config"), config)?;
    Ok(())
}

/// scp with the client key of [`prepare_sshd`], no compression, no prompts;
/// the caller adds options, sources and the destination.
pub(crate) fn scp_command(scp: &str, dir: &Path, port: u16) -> Command {
    let mut client = Command::new(scp);
    client
        .args(["-q", "-o", "Compression=no", "-o", "StrictHostKeyChecking=no"])
        .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"])
        .args(["-P", &port.to_string(), "-i"])
        .arg(dir.join("client"));
    client
}

/// rsync (whole file) of a tmpfs file to an rsync daemon the harness starts.
pub fn run_rsync(label: &str, job: &FileJob<'_>) -> Row {
    let rsync = tool("rsync", "rsync");
    if !have(&rsync) {
        return Row::skipped(
            label,
            "Transfer",
            "rsync not installed (apt-get install rsync)".into(),
        );
    }
    let attempt = || -> anyhow::Result<Row> {
        let dir = job.dst_dir("rsync")?;
        let module = dir.join("module");
        std::fs::create_dir_all(&module)?;
        let port = job.net.free_port()?;
        let ip = job.net.server_ip();
        let root = rustix::process::geteuid().is_root();
        let config = format!(
            "port = {port}\naddress = {ip}\nuse chroot = no\nlog file = {log}\n{ids}[pfs]\n    path = {path}\n    read only = no\n",
            log = dir.join("rsyncd.log").display(),
            ids = if root { "uid = root\ngid = root\n" } else { "" },
            path = module.display(),
        );
        std::fs::write(dir.join("rsyncd.conf"), config)?;
        let mut server = job.net.receiver_command(&rsync);
        server
            .args(["--daemon", "--no-detach", "--config"])
            .arg(dir.join("rsyncd.conf"));
        let mut client = Command::new(&rsync);
        client
            .args(["--whole-file", "--no-compress", "--inplace"])
            .arg(job.src)
            .arg(format!("rsync://{ip}:{port}/pfs/dst.bin"));
        job.copy(CopyRun {
            label,
            what: "rsync daemon",
            server,
            port,
            client,
            dst: module.join("dst.bin"),
            notes: "daemon (no ssh), --whole-file; wire from interface counters (incl. TCP/IP headers); receiver CPU = rsync daemon tree",
        })
    };
    attempt().unwrap_or_else(|e| Row::failed(label, "Transfer", &e))
}
