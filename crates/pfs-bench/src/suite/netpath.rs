//! Where the suite's receivers run: loopback in this namespace, loopback in a
//! private network namespace (so its counters see the study's traffic
//! alone), a network namespace reached over a veth pair, or one reached
//! over an emulated link ([`crate::emulink`]: delay, loss, rate). The
//! harness creates each namespace itself and always removes it (on
//! success, on failure, and on Ctrl-C). Rows know only the path's
//! receiver address, how to start a receiver and its byte counter, so
//! every row runs over every path unchanged.

use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::cleanup::{self, Undo};
use crate::emulink::EmuLink;

/// The network path every row of one suite runs over.
#[derive(Debug)]
pub enum NetPath {
    /// 127.0.0.1 in this namespace.
    Loopback,
    /// A namespace of our own behind a veth pair.
    Veth(Veth),
    /// 127.0.0.1 in a namespace of our own that this thread has entered.
    Private(Private),
    /// Namespace B of an emulated link; this thread has entered namespace A.
    Emulated(EmuLink),
}

/// A network namespace with only its loopback, entered by the thread that
/// made it: the processes it starts inherit it, and its `lo` counters count
/// nothing but theirs. Dropping it goes back to the namespace it came from.
#[derive(Debug)]
pub struct Private {
    ns: String,
    back: std::fs::File,
    ticket: u64,
}

impl Drop for Private {
    fn drop(&mut self) {
        use std::os::fd::AsFd;
        // Back first: a namespace cannot be deleted while we are in it.
        let _ = rustix::thread::move_into_link_name_space(
            self.back.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        );
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
        cleanup::done(self.ticket);
    }
}

/// A namespace + veth pair owned by this process.
#[derive(Debug)]
pub struct Veth {
    ns: String,
    host_if: String,
    host_ip: String,
    peer_ip: String,
    mtu: u32,
    ticket: u64,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip(8)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl NetPath {
    /// Creates the namespace `pfsb-<pid>` and the veth pair `pfsb<pid>a` (here)
    /// – `pfsb<pid>b` (inside) on a /30 of 10.0.0.0/8 derived from the pid, so
    /// concurrent runs never share addresses. Needs root.
    pub fn veth(mtu: u32) -> anyhow::Result<Self> {
        if !rustix::process::geteuid().is_root() {
            bail!("--path veth needs root (network namespaces and veth pairs)");
        }
        let pid = std::process::id();
        let ns = format!("pfsb-{pid}");
        let host_if = format!("pfsb{pid}a");
        let peer_if = format!("pfsb{pid}b");
        // Registered before creation so an interruption mid-setup still cleans up.
        let ticket = cleanup::on_interrupt(Undo::Netns {
            ns: ns.clone(),
            host_if: host_if.clone(),
        });
        let (host_ip, peer_ip) = subnet(pid);
        let veth = Veth {
            ns: ns.clone(),
            host_if: host_if.clone(),
            host_ip: host_ip.clone(),
            peer_ip: peer_ip.clone(),
            mtu,
            ticket,
        };
        let mtu_s = mtu.to_string();
        // `veth` is dropped (and everything removed) if any step fails.
        ip(&["netns", "add", &ns])?;
        ip(&[
            "link", "add", &host_if, "mtu", &mtu_s, "type", "veth", "peer", "name", &peer_if, "mtu", &mtu_s,
        ])?;
        ip(&["link", "set", &peer_if, "netns", &ns])?;
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if])?;
        ip(&["link", "set", &host_if, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{peer_ip}/30"),
            "dev",
            &peer_if,
        ])?;
        ip(&["-n", &ns, "link", "set", &peer_if, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(NetPath::Veth(veth))
    }

    /// Creates the namespace `pfsl-<pid>` with its loopback up, and moves
    /// the calling thread into it (so the children it starts run there too).
    /// Needs root.
    pub fn private_loopback() -> anyhow::Result<Self> {
        use std::os::fd::AsFd;
        if !rustix::process::geteuid().is_root() {
            bail!("a private network namespace needs root");
        }
        let ns = format!("pfsl-{}", std::process::id());
        let back = std::fs::File::open("/proc/thread-self/ns/net")
            .context("opening this thread's network namespace")?;
        // Registered before creation so an interruption mid-setup still cleans up.
        let ticket = cleanup::on_interrupt(Undo::Netns {
            ns: ns.clone(),
            host_if: String::new(),
        });
        let private = Private { ns, back, ticket };
        ip(&["netns", "add", &private.ns])?;
        ip(&["-n", &private.ns, "link", "set", "lo", "up"])?;
        let target =
            std::fs::File::open(format!("/run/netns/{}", private.ns)).context("opening the new namespace")?;
        rustix::thread::move_into_link_name_space(
            target.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .context("entering the new network namespace (setns)")?;
        Ok(NetPath::Private(private))
    }

    /// `loopback`, `veth` or `private loopback`.
    pub fn name(&self) -> String {
        match self {
            NetPath::Loopback => "loopback".into(),
            NetPath::Private(p) => format!("loopback in a private network namespace ({})", p.ns),
            NetPath::Veth(v) => format!(
                "veth (netns {}, {} → {}, mtu {})",
                v.ns, v.host_ip, v.peer_ip, v.mtu
            ),
            NetPath::Emulated(l) => {
                let (a, b) = l.namespaces();
                format!("emulated link ({}; netns {a} → {b})", l.spec())
            }
        }
    }

    /// The emulated link, if the path is one.
    pub fn link(&self) -> Option<&EmuLink> {
        match self {
            NetPath::Emulated(l) => Some(l),
            _ => None,
        }
    }

    /// The emulated link to change (loss, rate), if the path is one.
    pub fn link_mut(&mut self) -> Option<&mut EmuLink> {
        match self {
            NetPath::Emulated(l) => Some(l),
            _ => None,
        }
    }

    /// A TCP port free where receivers listen.
    pub fn free_port(&self) -> anyhow::Result<u16> {
        match self {
            NetPath::Emulated(l) => l.free_port(),
            _ => crate::child::free_port(),
        }
    }

    /// The UDP rows' datagram size: the veth's MTU less the IPv4 and UDP
    /// headers; on loopback the size a 1500-byte Ethernet path allows (the
    /// loopback's 64 KiB MTU is no path anyone sends over).
    pub fn udp_datagram(&self) -> u16 {
        let mtu = match self {
            NetPath::Loopback | NetPath::Private(_) => 1500,
            _ => self.mtu(),
        };
        mtu.saturating_sub(28).clamp(1200, 65507) as u16
    }

    /// Address receivers listen on and senders connect to.
    pub fn server_ip(&self) -> &str {
        match self {
            NetPath::Loopback | NetPath::Private(_) => "127.0.0.1",
            NetPath::Veth(v) => &v.peer_ip,
            NetPath::Emulated(l) => l.receiver_ip(),
        }
    }

    /// A command that runs `program` on the receiving side of the path.
    pub fn receiver_command(&self, program: &str) -> Command {
        match self {
            // In a private namespace both sides run where this thread runs.
            NetPath::Loopback | NetPath::Private(_) => Command::new(program),
            NetPath::Veth(v) => {
                // `ip netns exec` execs the program, so the child's pid is the program's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &v.ns, program]);
                c
            }
            NetPath::Emulated(l) => l.receiver_command(program),
        }
    }

    /// The MTU of the path's interface: `lo`'s (65536 unless changed), the
    /// veth pair's `--mtu`, or the emulated link's. Datagram rows size their
    /// largest datagram by it (PFS UDP rows keep to 1500 on loopback).
    pub fn mtu(&self) -> u32 {
        match self {
            // `lo` has the same MTU in every namespace unless someone changed it.
            NetPath::Loopback | NetPath::Private(_) => std::fs::read_to_string("/sys/class/net/lo/mtu")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(65536),
            NetPath::Veth(v) => v.mtu,
            NetPath::Emulated(l) => l.mtu(),
        }
    }

    /// Bytes that crossed the path so far, both directions, TCP/IP headers
    /// included (interface counters).
    pub fn wire_counter(&self) -> u64 {
        let read = |iface: &str, which: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{which}"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        match self {
            // On lo every byte is counted once as tx and once as rx.
            NetPath::Loopback => read("lo", "tx_bytes"),
            NetPath::Veth(v) => read(&v.host_if, "tx_bytes") + read(&v.host_if, "rx_bytes"),
            // What both ends put on the link (IP headers included), as the
            // delay lines count it: lost packets crossed the wire too.
            NetPath::Emulated(l) => l.wire_bytes(),
            // /sys shows the namespace it was mounted in; /proc/thread-self
            // shows this thread's.
            NetPath::Private(_) => std::fs::read_to_string("/proc/thread-self/net/dev")
                .ok()
                .and_then(|t| lo_tx_bytes(&t))
                .unwrap_or(0),
        }
    }
}

/// The transmitted bytes of `lo` in a `/proc/net/dev` table (after the
/// interface name: 8 receive fields, then transmitted bytes).
fn lo_tx_bytes(table: &str) -> Option<u64> {
    let line = table.lines().find(|l| l.trim_start().starts_with("lo:"))?;
    let (_, fields) = line.split_once(':')?;
    fields.split_whitespace().nth(8)?.parse().ok()
}

/// Host and peer addresses of the /30 for `pid`: 10.b.c.d with b, c and the
/// high bits of d taken from the pid (unique for pids below 2^22).
pub fn subnet(pid: u32) -> (String, String) {
    let (b, c, d) = ((pid >> 14) & 0xff, (pid >> 6) & 0xff, (pid & 0x3f) << 2);
    (format!("10.{b}.{c}.{}", d + 1), format!("10.{b}.{c}.{}", d + 2))
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .stderr(Stdio::null())
            .status();
        // Deleting the namespace destroys the peer and with it the pair; this
        // covers a failure before the peer was moved.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        cleanup::done(self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lo_counters_from_proc_net_dev() {
        let t = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 1234567      10    0    0    0     0          0         0  7654321      12    0    0    0     0       0          0
  eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
";
        assert_eq!(lo_tx_bytes(t), Some(7_654_321));
        assert_eq!(lo_tx_bytes("no table"), None);
    }

    #[test]
    fn private_loopback_counts_only_its_own_traffic() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: a private network namespace needs root");
            return;
        }
        // On a thread of its own: entering the namespace changes the calling thread only.
        std::thread::spawn(|| {
            let before = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
            let net = NetPath::private_loopback().unwrap();
            assert_ne!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), before);
            let w0 = net.wire_counter();
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            std::io::Write::write_all(&mut c, &[0u8; 100_000]).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 100_000];
            std::io::Read::read_exact(&mut s, &mut buf).unwrap();
            let w = net.wire_counter() - w0;
            // The payload and its headers, and nothing of the host's traffic.
            assert!((100_000..200_000).contains(&w), "{w}");
            let NetPath::Private(p) = &net else { unreachable!() };
            let ns = p.ns.clone();
            drop(net);
            assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), before);
            assert!(!std::path::Path::new("/run/netns").join(ns).exists());
        })
        .join()
        .unwrap();
    }
}
