//! What spoofed OPENs cost a UDP listener (issue 26), on loopback: the
//! listener's CPU and the process's RSS over a burst of OPENs from
//! addresses across 127.0.0.0/8 that never answer their RETRY, the time a
//! real client then takes to be admitted, and a transfer's goodput alone
//! and beside a steady rate of spoofed OPENs. Wall-clock figures are this
//! machine's, for a ratio within one run.
//!
//! `cargo run --release -p pfs-transport --example udp_spoof -- [OPENS] [RATE_PER_S] [MiB]`
//! (defaults 10000, 1000, 64).

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use pfs_transport::{Listener, Transport, UdpConfig, UdpListener, UdpTransport};

/// An OPEN as a spoofer sends it (docs/wire.md §14.2): no token.
fn spoofed_open(id: u32) -> Vec<u8> {
    let mut p = b"PU\x01\x01".to_vec();
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&1472u16.to_le_bytes());
    p.extend_from_slice(&[0; 2]);
    p.extend_from_slice(&(32u64 << 20).to_le_bytes());
    p.extend_from_slice(&[0; 40]);
    p
}

fn sources() -> Vec<UdpSocket> {
    (0..250u32)
        .map(|i| UdpSocket::bind((Ipv4Addr::new(127, 0, 3, 2 + i as u8), 0)).expect("bind 127.0.3.x"))
        .collect()
}

fn vm_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Sends `total` bytes from a new client and reads them at the server:
/// goodput in decimal MB/s and how long the client's connect took.
fn transfer(addr: SocketAddr, conns: &mpsc::Receiver<UdpTransport>, total: usize) -> (f64, Duration) {
    let start = Instant::now();
    let client = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut c = UdpTransport::connect(&addr.to_string(), &UdpConfig::default()).expect("connect");
        let admitted = t0.elapsed();
        let block = vec![0x6bu8; 1 << 20];
        let mut sent = 0;
        while sent < total {
            let n = (total - sent).min(block.len());
            c.write_all(&block[..n]).expect("write");
            sent += n;
        }
        c.shutdown_write().expect("shutdown");
        admitted
    });
    let mut t = conns
        .recv_timeout(Duration::from_secs(30))
        .expect("the client admitted");
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    loop {
        match t.read(&mut buf).expect("read") {
            0 => break,
            n => got += n,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(got, total);
    (got as f64 / secs / 1e6, client.join().expect("client"))
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let opens = args.first().copied().unwrap_or(10_000) as u32;
    let rate = args.get(1).copied().unwrap_or(1000).max(1);
    let total = (args.get(2).copied().unwrap_or(256) as usize) << 20;

    let listener = UdpListener::bind("127.0.0.1:0", UdpConfig::default()).expect("bind");
    let addr = listener.socket_addr();
    let (tx, conns) = mpsc::channel();
    let tid = Arc::new(AtomicI32::new(0));
    let tid2 = Arc::clone(&tid);
    std::thread::spawn(move || {
        tid2.store(rustix::thread::gettid().as_raw_nonzero().get(), Ordering::Release);
        while let Ok(t) = listener.accept() {
            if tx.send(t).is_err() {
                return;
            }
        }
    });
    while tid.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let listener_cpu = || {
        pfs_sys::task_usage(tid.load(Ordering::Acquire))
            .unwrap_or_default()
            .cpu_seconds()
    };
    let src = sources();

    // One OPEN, then the burst.
    let (cpu0, rss0) = (listener_cpu(), vm_rss_kb());
    let _ = src[0].send_to(&spoofed_open(1), addr);
    std::thread::sleep(Duration::from_millis(50));
    let one = listener_cpu() - cpu0;
    let cpu1 = listener_cpu();
    for i in 0..opens {
        let _ =
            src[(i % 250) as usize].send_to(&spoofed_open(0x4000_0000 ^ i.wrapping_mul(0x9e37_79b9)), addr);
        if i % 50 == 49 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let burst = listener_cpu() - cpu1;
    let rss1 = vm_rss_kb();
    let made = conns.try_iter().count();
    println!(
        "one spoofed OPEN: {:.1} ms listener CPU (clock-tick resolution); {opens} spoofed OPENs: {:.3} s listener CPU ({:.1} us each), \
         VmRSS {rss0} -> {rss1} kB (+{} kB), connections made {made}",
        one * 1e3,
        burst,
        burst * 1e6 / f64::from(opens.max(1)),
        rss1.saturating_sub(rss0)
    );

    // Alternate runs alone and beside the spoofer; ratios of medians.
    let stop = Arc::new(AtomicBool::new(false));
    let spoofing = Arc::new(AtomicBool::new(false));
    let spoofer = {
        let (stop, spoofing) = (Arc::clone(&stop), Arc::clone(&spoofing));
        std::thread::spawn(move || {
            let gap = Duration::from_secs_f64(1.0 / rate as f64);
            let mut i = 0u32;
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if spoofing.load(Ordering::Relaxed) {
                    let _ = src[(i % 250) as usize].send_to(&spoofed_open(0x6000_0000 ^ i), addr);
                    i += 1;
                }
                next += gap;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            i
        })
    };
    let (mut alone, mut beside, mut admit_alone, mut admit_beside) = (vec![], vec![], vec![], vec![]);
    let cpu2 = listener_cpu();
    for _ in 0..5 {
        let (gp, adm) = transfer(addr, &conns, total);
        alone.push(gp);
        admit_alone.push(adm.as_secs_f64() * 1e3);
        spoofing.store(true, Ordering::Relaxed);
        let (gp, adm) = transfer(addr, &conns, total);
        spoofing.store(false, Ordering::Relaxed);
        beside.push(gp);
        admit_beside.push(adm.as_secs_f64() * 1e3);
    }
    stop.store(true, Ordering::Relaxed);
    let sent = spoofer.join().expect("spoofer");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut alone), median(&mut beside));
    println!(
        "transfers of {} MiB, 5 alone and 5 beside {rate} spoofed OPENs/s ({sent} sent): median {a:.1} MB/s alone, \
         {b:.1} MB/s beside = {:.3} x; client admitted in median {:.1} ms alone, {:.1} ms beside; \
         listener CPU over all ten {:.3} s",
        total >> 20,
        b / a,
        median(&mut admit_alone),
        median(&mut admit_beside),
        listener_cpu() - cpu2
    );
}
