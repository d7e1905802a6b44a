//! Where the suite's receivers run: loopback in this namespace, or a network
//! namespace reached over a veth pair that the harness creates itself and
//! always removes (on success, on failure, and on Ctrl-C).

use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::cleanup::{self, Undo};

/// The network path every row of one suite runs over.
#[derive(Debug)]
pub enum NetPath {
    /// 127.0.0.1 in this namespace.
    Loopback,
    /// A namespace of our own behind a veth pair.
    Veth(Veth),
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

    /// `loopback` or `veth`.
    pub fn name(&self) -> String {
        match self {
            NetPath::Loopback => "loopback".into(),
            NetPath::Veth(v) => format!(
                "veth (netns {}, {} → {}, mtu {})",
                v.ns, v.host_ip, v.peer_ip, v.mtu
            ),
        }
    }

    /// Address receivers listen on and senders connect to.
    pub fn server_ip(&self) -> &str {
        match self {
            NetPath::Loopback => "127.0.0.1",
            NetPath::Veth(v) => &v.peer_ip,
        }
    }

    /// A command that runs `program` on the receiving side of the path.
    pub fn receiver_command(&self, program: &str) -> Command {
        match self {
            NetPath::Loopback => Command::new(program),
            NetPath::Veth(v) => {
                // `ip netns exec` execs the program, so the child's pid is the program's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &v.ns, program]);
                c
            }
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
        }
    }
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
