//! The emulated link (`pfs bench --link rtt=50ms,loss=1%,rate=500mbit`):
//! a network path with a round-trip time, random loss and a rate cap, built
//! without netem (this kernel has none) from parts it does have.
//!
//! ```text
//!  namespace A (sender side;                      namespace B (receiver side)
//!  the calling thread enters it)
//!  stack ─▶ TUN a ──read──▶ rate cap + delay line A→B ──write──▶ TUN b ─▶ nft loss ─▶ stack
//!  stack ◀─ nft loss ◀─ TUN a ◀──write── rate cap + delay line B→A ◀──read── TUN b ◀─ stack
//! ```
//!
//! - **TUN devices** (`IFF_TUN | IFF_NO_PI`, no `IFF_VNET_HDR`, `tun.rs`):
//!   the kernel segments before a TUN device, so every packet that crosses
//!   is a wire packet of at most the MTU (the loss table counts any longer
//!   one as `oversize`; the delay line records the largest it read).
//! - **delay** ([`mod@line`]): one thread per direction holds each packet for
//!   `rtt / 2` in a bounded FIFO of preallocated slots and counts what it
//!   carries, drops (full FIFO) and how late it released packets.
//! - **loss** ([`loss`]): nftables `numgen random` on the ingress of each
//!   receiving TUN device, both directions, after the delay line.
//! - **rate** ([`spec::Bottleneck`]): in each delay line, a serializer at
//!   the rate with a drop-tail queue of one BDP in front
//!   ([`line::Serializer`]): a router's output port. Not a qdisc on the
//!   sending TUN: a queue on the sending host makes TCP Small Queues hold a
//!   TCP sender to two packets per queue wait whenever another flow fills
//!   it, so no TCP flow could share such a link.
//!
//! Nothing is installed in the namespace the process started in: both
//! ends are namespaces of their own, removed on drop, on failure and on
//! Ctrl-C ([`crate::cleanup`]). An [`EmuLink`] must be dropped on the
//! thread that created it (that thread entered namespace A and goes back).

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{bail, Context};

use crate::cleanup::{self, Undo};

pub mod line;
pub mod loss;
pub mod probe;
pub mod spec;
mod tun;

pub use line::LineCounters;
pub use loss::LossCounters;
pub use probe::{udp_probe, ProbeReport};
pub use spec::{parse_link_spec, parse_loss_list, Bottleneck, LinkSpec, Loss, Rate};

/// The sender side's address (namespace A).
pub const SENDER_IP: &str = "192.168.77.1";
/// The receiver side's address (namespace B).
pub const RECEIVER_IP: &str = "192.168.77.2";

/// TUN devices queue this many packets before the delay line reads them
/// (the default 500 is 6 ms at 1 Gbit/s: less than a scheduling hiccup on
/// a busy 2-core machine).
const TUN_QUEUE: u32 = 4096;

/// `SCHED_FIFO` priority of the delay line threads: above every normal
/// thread (so a busy sender or receiver cannot make packets late), below
/// the kernel's own real-time threads. The kernel's real-time throttling
/// (95 % of each second by default) bounds what they can take.
const LINE_PRIORITY: u32 = 10;

/// Socket buffer limit (`tcp_rmem`/`tcp_wmem` max) in both namespaces: a
/// new namespace's 4 MB send buffer caps one TCP flow at ≈ 3 MB in
/// flight (480 Mbit/s at 50 ms), below the links this emulates.
pub const TCP_BUFFER_MAX: u64 = 64 << 20;

/// Links made by this process, for unique names.
static SERIAL: AtomicU32 = AtomicU32::new(0);

/// One end of the link.
#[derive(Debug, Clone)]
struct End {
    ns: String,
    dev: String,
    ip: &'static str,
    ticket: u64,
}

/// The counters of one direction: what the delay line carried, what the
/// loss table saw and dropped, and the sending device's drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DirCounters {
    /// The delay line of this direction.
    pub line: LineCounters,
    /// The loss table on the receiving device.
    pub loss: LossCounters,
    /// Packets the sending TUN device dropped because the delay line did
    /// not read them in time (its queue of 4096 packets was full).
    pub tun_dropped: u64,
}

impl DirCounters {
    /// The counts since `earlier` (peaks as they are).
    pub fn since(&self, earlier: &DirCounters) -> DirCounters {
        DirCounters {
            line: self.line.since(&earlier.line),
            loss: self.loss.since(&earlier.loss),
            tun_dropped: self.tun_dropped.saturating_sub(earlier.tun_dropped),
        }
    }

    /// Packets the emulator itself lost (not asked for): FIFO overflow,
    /// TUN queue overflow, failed reads or writes.
    pub fn emulator_drops(&self) -> u64 {
        self.line.overflow + self.line.errors + self.tun_dropped
    }
}

/// Both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkCounters {
    /// A → B: the data direction of every row.
    pub forward: DirCounters,
    /// B → A: acknowledgements and replies.
    pub back: DirCounters,
    /// UDP datagrams the hosts (both namespaces) dropped on a full socket
    /// receive buffer: lost after the link, not by it.
    pub udp_rcvbuf_errors: u64,
}

impl LinkCounters {
    /// The counts since `earlier`.
    pub fn since(&self, earlier: &LinkCounters) -> LinkCounters {
        LinkCounters {
            forward: self.forward.since(&earlier.forward),
            back: self.back.since(&earlier.back),
            udp_rcvbuf_errors: self.udp_rcvbuf_errors.saturating_sub(earlier.udp_rcvbuf_errors),
        }
    }
}

/// An emulated link between namespace A (where the creating thread now
/// runs) and namespace B (where receivers run, [`EmuLink::receiver_command`]).
#[derive(Debug)]
pub struct EmuLink {
    spec: LinkSpec,
    mtu: u32,
    a: End,
    b: End,
    loss: Loss,
    bottleneck: Option<Bottleneck>,
    shaper: Arc<line::Shaper>,
    stats: [Arc<line::LineStats>; 2],
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    slots: usize,
    /// The namespace the creating thread came from, once it entered A.
    back: Option<File>,
}

/// Runs a command; its stderr in the error.
fn run(program: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {program} (is it installed?)"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .with_context(|| format!("writing to {program}"))?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f` on a thread inside namespace `ns` (a name under /run/netns).
fn in_netns<T: Send>(ns: &str, f: impl FnOnce() -> std::io::Result<T> + Send) -> anyhow::Result<T> {
    let target = File::open(format!("/run/netns/{ns}")).with_context(|| format!("opening namespace {ns}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            rustix::thread::move_into_link_name_space(
                target.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            f()
        })
        .join()
    })
    .map_err(|_| anyhow::anyhow!("thread in namespace {ns} panicked"))?
    .with_context(|| format!("in namespace {ns}"))
}

/// Why this host cannot build an emulated link, if it cannot.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (network namespaces, TUN devices, nftables, tc)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun (kernel without TUN, or a container without the device)".into());
    }
    for (tool, package) in [("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables")] {
        if !crate::child::have(tool) && !std::path::Path::new("/usr/sbin").join(tool).exists() {
            return Some(format!("{tool} not installed (apt-get install {package})"));
        }
    }
    None
}

impl EmuLink {
    /// Builds the link `spec` with packets of at most `mtu` bytes (576 to
    /// 9000), and moves the calling thread into namespace A: the processes
    /// it starts from then on send from there. Needs root.
    pub fn new(spec: LinkSpec, mtu: u32) -> anyhow::Result<EmuLink> {
        if let Some(why) = unavailable() {
            bail!("--link {why}");
        }
        if !(576..=9000).contains(&mtu) {
            bail!("an emulated link's MTU must be between 576 and 9000 (got {mtu})");
        }
        let pid = std::process::id();
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let end = |side: char, ip: &'static str| {
            let ns = format!("pfse-{pid}-{n}{side}");
            // Registered before creation so an interruption mid-setup still cleans up.
            let ticket = cleanup::on_interrupt(Undo::Netns {
                ns: ns.clone(),
                host_if: String::new(),
            });
            End {
                ns,
                dev: format!("pfe{pid}-{n}{side}"),
                ip,
                ticket,
            }
        };
        let mut link = EmuLink {
            spec,
            mtu,
            a: end('a', SENDER_IP),
            b: end('b', RECEIVER_IP),
            loss: Loss::NONE,
            bottleneck: None,
            shaper: Arc::default(),
            stats: Default::default(),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            slots: spec.line_slots(mtu),
            back: None,
        };
        // `link` is dropped (and everything removed) if any step fails.
        let mut tuns = Vec::new();
        for (end, peer) in [(&link.a, &link.b), (&link.b, &link.a)] {
            let ns = end.ns.as_str();
            run("ip", &["netns", "add", ns], None)?;
            run("ip", &["-n", ns, "link", "set", "lo", "up"], None)?;
            // IPv4 only: no router solicitations or MLD reports in the counters.
            // Socket buffers large enough for the link's bandwidth-delay product.
            let sysctls = [
                "net.ipv6.conf.all.disable_ipv6=1".to_string(),
                "net.ipv6.conf.default.disable_ipv6=1".to_string(),
                format!("net.ipv4.tcp_rmem=4096 131072 {TCP_BUFFER_MAX}"),
                format!("net.ipv4.tcp_wmem=4096 16384 {TCP_BUFFER_MAX}"),
            ];
            for kv in &sysctls {
                run("ip", &["netns", "exec", ns, "sysctl", "-q", "-w", kv], None)?;
            }
            let dev = end.dev.clone();
            let tun = in_netns(ns, move || tun::Tun::create(&dev))
                .with_context(|| format!("creating TUN device {}", end.dev))?;
            tuns.push(Arc::new(tun));
            let (mtu_s, queue_s) = (mtu.to_string(), TUN_QUEUE.to_string());
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "link",
                    "set",
                    "dev",
                    &end.dev,
                    "mtu",
                    &mtu_s,
                    "txqueuelen",
                    &queue_s,
                    "up",
                ],
                None,
            )?;
            run(
                "ip",
                &[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    end.ip,
                    "peer",
                    &format!("{}/32", peer.ip),
                    "dev",
                    &end.dev,
                ],
                None,
            )?;
            run(
                "ip",
                &["netns", "exec", ns, "nft", "-f", "-"],
                Some(&loss::create_script(&end.dev, mtu, Loss::NONE)),
            )
            .context("installing the loss table (nftables)")?;
        }
        for (i, (from, to)) in [(0, 1), (1, 0)].into_iter().enumerate() {
            let line = line::Line {
                input: tuns[from].clone(),
                output: tuns[to].clone(),
                delay: spec.one_way(),
                slots: link.slots,
                shaper: link.shaper.clone(),
                slot_len: line::slot_len(mtu),
                stats: link.stats[i].clone(),
                stop: link.stop.clone(),
                realtime: Some(LINE_PRIORITY),
            };
            let name = if i == 0 { "link A→B" } else { "link B→A" };
            link.threads.push(
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || line.run())
                    .context("starting a delay line thread")?,
            );
        }
        drop(tuns);
        link.set_loss(spec.loss())?;
        link.set_rate(spec.rate)?;
        let back =
            File::open("/proc/thread-self/ns/net").context("opening this thread's network namespace")?;
        let target = File::open(format!("/run/netns/{}", link.a.ns)).context("opening namespace A")?;
        rustix::thread::move_into_link_name_space(
            target.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .context("entering namespace A (setns)")?;
        link.back = Some(back);
        Ok(link)
    }

    /// What was asked for.
    pub fn spec(&self) -> LinkSpec {
        self.spec
    }

    /// The MTU of both devices.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The loss now applied in each direction.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// The rate cap now applied in each direction.
    pub fn bottleneck(&self) -> Option<Bottleneck> {
        self.bottleneck
    }

    /// Packet slots of each direction's delay line.
    pub fn line_slots(&self) -> usize {
        self.slots
    }

    /// Namespace A (senders) and B (receivers).
    pub fn namespaces(&self) -> (&str, &str) {
        (&self.a.ns, &self.b.ns)
    }

    /// The address receivers listen on (namespace B).
    pub fn receiver_ip(&self) -> &str {
        self.b.ip
    }

    /// The address senders send from (namespace A).
    pub fn sender_ip(&self) -> &str {
        self.a.ip
    }

    /// A command that runs `program` in namespace B.
    pub fn receiver_command(&self, program: &str) -> Command {
        // `ip netns exec` execs the program, so the child's pid is the program's.
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.b.ns, program]);
        c
    }

    /// A TCP port free on the receiver's address in namespace B (bound and
    /// released there: a port picked in another namespace may be one a
    /// receiver in B already holds).
    pub fn free_port(&self) -> anyhow::Result<u16> {
        let ip = self.b.ip;
        in_netns(&self.b.ns, move || {
            Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
        })
    }

    /// A command that runs `program` in namespace A (whatever namespace the
    /// calling thread is in).
    pub fn sender_command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.a.ns, program]);
        c
    }

    /// Replaces the drop rule of both directions.
    pub fn set_loss(&mut self, loss: Loss) -> anyhow::Result<()> {
        for end in [&self.a, &self.b] {
            run(
                "ip",
                &["netns", "exec", &end.ns, "nft", "-f", "-"],
                Some(&loss::rules_script(self.mtu, loss)),
            )
            .context("changing the loss rule (nftables)")?;
        }
        self.loss = loss;
        Ok(())
    }

    /// Sets (or with `None` removes) the rate cap of both directions.
    pub fn set_rate(&mut self, rate: Option<Rate>) -> anyhow::Result<()> {
        let b = LinkSpec { rate, ..self.spec }.bottleneck();
        match &b {
            Some(b) => self.shaper.set(b.rate.bytes_per_s() as u64, b.limit),
            None => self.shaper.set(0, 0),
        }
        self.bottleneck = b;
        Ok(())
    }

    /// Bytes put on the link so far by both ends (what the delay lines
    /// read: IP headers included, packets the loss rule drops later too).
    pub fn wire_bytes(&self) -> u64 {
        self.stats.iter().map(|s| s.snapshot().in_bytes).sum()
    }

    /// Every counter of both directions (runs `nft` and `ip` in each namespace).
    pub fn counters(&self) -> anyhow::Result<LinkCounters> {
        let dir = |i: usize, from: &End, to: &End| -> anyhow::Result<DirCounters> {
            let json = run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &to.ns,
                    "nft",
                    "-j",
                    "list",
                    "counters",
                    "table",
                    "netdev",
                    loss::TABLE,
                ],
                None,
            )?;
            let loss = loss::parse_counters(&json).context("reading the loss counters (nft -j)")?;
            let link = run(
                "ip",
                &["-n", &from.ns, "-s", "-j", "link", "show", "dev", &from.dev],
                None,
            )?;
            let link: serde_json::Value = serde_json::from_str(&link).unwrap_or_default();
            let tun_dropped = link[0]["stats64"]["tx"]["dropped"].as_u64().unwrap_or(0);
            Ok(DirCounters {
                line: self.stats[i].snapshot(),
                loss,
                tun_dropped,
            })
        };
        Ok(LinkCounters {
            forward: dir(0, &self.a, &self.b)?,
            back: dir(1, &self.b, &self.a)?,
            udp_rcvbuf_errors: self.udp_rcvbuf_errors(),
        })
    }

    /// Whether both delay line threads run at real-time priority.
    pub fn realtime(&self) -> bool {
        self.stats.iter().all(|s| s.realtime())
    }

    /// Resets the delay lines' peaks (largest packet, latest release, deepest queue).
    pub fn take_peaks(&self) {
        for s in &self.stats {
            s.take_peaks();
        }
    }

    /// The default TCP congestion control of namespace A (what a sender
    /// that does not choose gets).
    pub fn default_congestion_control(&self) -> String {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.a.ns,
                "sysctl",
                "-n",
                "net.ipv4.tcp_congestion_control",
            ],
            None,
        )
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
    }

    /// One line naming the link's parts, for report headers (the loss
    /// rate is the caller's to print: it may change between steps).
    pub fn describe(&self) -> String {
        format!(
            "namespaces {} ({}) → {} ({}), MTU {}; delay {} each way (a delay line per direction: {} slots, \
             reads at most every {} µs, {}); loss per packet each way (nftables numgen on each receiving TUN's ingress, \
             after the delay line); {}; TUN: no segmentation offloads, loss per ≤{}-byte packet",
            self.a.ns,
            self.a.ip,
            self.b.ns,
            self.b.ip,
            self.mtu,
            spec::fmt_duration(self.spec.one_way()),
            self.slots,
            line::READ_INTERVAL.as_micros(),
            if self.realtime() {
                format!("SCHED_FIFO {LINE_PRIORITY}")
            } else {
                "normal priority: chrt failed".into()
            },
            match &self.bottleneck {
                Some(b) => format!("rate cap in each delay line, both directions: {b}"),
                None => "no rate cap".into(),
            },
            self.mtu
        )
    }

    /// UDP datagrams both namespaces dropped because a socket's receive
    /// buffer was full (`RcvbufErrors`): loss of the hosts, not of the link.
    pub fn udp_rcvbuf_errors(&self) -> u64 {
        [&self.a, &self.b]
            .iter()
            .filter_map(|end| run("ip", &["netns", "exec", &end.ns, "cat", "/proc/net/snmp"], None).ok())
            .filter_map(|snmp| rcvbuf_errors(&snmp))
            .sum()
    }
}

/// `RcvbufErrors` of the `Udp:` lines of `/proc/net/snmp` (a header line, then values).
fn rcvbuf_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}

impl Drop for EmuLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The lines held the last references to the devices: they are gone now.
        if let Some(back) = self.back.take() {
            // Back first: a namespace cannot go while this thread is in it.
            let _ = rustix::thread::move_into_link_name_space(
                back.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            );
        }
        for end in [&self.a, &self.b] {
            let _ = Command::new("ip")
                .args(["netns", "del", &end.ns])
                .stderr(Stdio::null())
                .status();
            cleanup::done(end.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rcvbuf_errors_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 136684 0 17461 1 17460 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    UdpLite: 0 0 0 0 0 0\n";
        assert_eq!(super::rcvbuf_errors(snmp), Some(17460));
        assert_eq!(super::rcvbuf_errors("Ip: 1"), None);
    }
}
