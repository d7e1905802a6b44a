//! The emulated link on this machine (root only): packets cross both ways,
//! never faster than the delay, all of them when nothing is lost and none
//! when everything is; the kernel's drop counters agree with what arrived;
//! the rate cap drops what its queue cannot hold, and counts it;
//! no packet longer than the MTU crosses (no segmentation offloads); and
//! nothing is left behind. Only lower bounds on time are asserted.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use pfs_bench::emulink::{self, udp_probe, EmuLink, LinkSpec, Loss};

fn skip_reason() -> Option<String> {
    emulink::unavailable()
}

/// Runs `f` on a thread of its own: the link moves its creating thread into
/// a namespace, and the test harness's threads must not stay there.
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

#[test]
fn delay_loss_counters_and_cleanup() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: the emulated link {why}");
        return;
    }
    on_own_thread(|| {
        let before = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let spec = LinkSpec::parse("rtt=20ms,loss=10%,rate=100mbit").unwrap();
        let mut link = EmuLink::new(spec, 1500).unwrap();
        let one_way = spec.one_way();
        assert_eq!(one_way, Duration::from_millis(10));
        assert_ne!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), before);
        let (ns_a, ns_b) = {
            let (a, b) = link.namespaces();
            (a.to_string(), b.to_string())
        };

        // No loss: every datagram crosses both ways, none faster than the delay.
        link.set_loss(Loss::NONE).unwrap();
        let c0 = link.counters().unwrap();
        let p = udp_probe(&link, 100, Duration::from_millis(1)).unwrap();
        assert_eq!(p.forward.len(), 100, "{}", p.summary());
        assert_eq!(p.back.len(), 100, "{}", p.summary());
        assert!(p.forward.iter().all(|d| *d >= one_way), "{}", p.summary());
        assert!(p.back.iter().all(|d| *d >= one_way), "{}", p.summary());
        assert!(p.rtt.iter().all(|d| *d >= one_way * 2), "{}", p.summary());
        let d = link.counters().unwrap().since(&c0);
        assert_eq!(d.forward.loss.seen, 100);
        assert_eq!(d.back.loss.seen, 100);
        assert_eq!(d.forward.loss.lost + d.back.loss.lost, 0);
        assert_eq!(d.forward.line.out_packets, 100);

        // 10 %: whatever the dice say, the counters and the arrivals agree.
        link.set_loss(spec.loss()).unwrap();
        let c0 = link.counters().unwrap();
        let p = udp_probe(&link, 300, Duration::from_micros(500)).unwrap();
        let d = link.counters().unwrap().since(&c0);
        assert_eq!(d.forward.loss.seen, 300, "every datagram reached B's ingress");
        assert_eq!(p.forward.len() as u64, d.forward.loss.seen - d.forward.loss.lost);
        assert_eq!(d.back.loss.seen, p.forward.len() as u64, "one echo per arrival");
        assert_eq!(p.back.len() as u64, d.back.loss.seen - d.back.loss.lost);
        assert!(p.forward.iter().all(|d| *d >= one_way), "{}", p.summary());

        // 100 %: nothing arrives, and the table says it dropped each one.
        link.set_loss(Loss::ALL).unwrap();
        let c0 = link.counters().unwrap();
        let p = udp_probe(&link, 50, Duration::from_micros(200)).unwrap();
        let d = link.counters().unwrap().since(&c0);
        assert!(p.forward.is_empty() && p.back.is_empty(), "{}", p.summary());
        assert_eq!((d.forward.loss.seen, d.forward.loss.lost), (50, 50));
        assert_eq!(d.back.loss.seen, 0);

        // A TCP bulk transfer A → B: the sender's stack would build 64 KB
        // super-packets for an offloading device; here none is longer than the MTU.
        link.set_loss(Loss::NONE).unwrap();
        link.take_peaks();
        let c0 = link.counters().unwrap();
        let listener = in_ns(&ns_b, || TcpListener::bind((emulink::RECEIVER_IP, 0)).unwrap());
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got.len()
        });
        // This thread is in namespace A since the link was made.
        let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..4 {
            c.write_all(&chunk).unwrap();
        }
        drop(c);
        assert_eq!(reader.join().unwrap(), 4 << 20);
        let d = link.counters().unwrap().since(&c0);
        assert_eq!(d.forward.loss.oversize, 0);
        assert!(d.forward.line.max_len <= 1500, "{}", d.forward.line.max_len);
        assert!(d.forward.line.in_packets >= (4 << 20) / 1500, "{d:?}");
        assert!(d.forward.line.in_bytes >= 4 << 20, "{d:?}");
        assert_eq!(d.forward.emulator_drops() + d.back.emulator_drops(), 0, "{d:?}");

        // The rate cap: a burst of 7 MB into 100 Mbit/s with a 250 KB
        // queue. What the queue cannot hold is dropped and counted, the
        // rest leaves; every packet read is one or the other.
        let limit = spec.bottleneck().unwrap().limit;
        assert_eq!(limit, 250_000);
        let c0 = link.counters().unwrap();
        let rx = in_ns(&ns_b, || {
            std::net::UdpSocket::bind((emulink::RECEIVER_IP, 0)).unwrap()
        });
        let tx = std::net::UdpSocket::bind((emulink::SENDER_IP, 0)).unwrap();
        let burst = 5000u64;
        for _ in 0..burst {
            tx.send_to(&[1u8; 1400], rx.local_addr().unwrap()).unwrap();
        }
        let settled = |d: &emulink::LinkCounters| {
            d.forward.line.out_packets + d.forward.line.queue_drops + d.forward.emulator_drops()
                >= d.forward.line.in_packets
        };
        let mut d = link.counters().unwrap().since(&c0);
        for _ in 0..100 {
            if d.forward.line.in_packets >= burst && settled(&d) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            d = link.counters().unwrap().since(&c0);
        }
        assert_eq!(d.forward.line.in_packets, burst, "{d:?}");
        assert_eq!(d.forward.emulator_drops(), 0, "{d:?}");
        assert!(d.forward.line.queue_drops > 0, "{d:?}");
        assert_eq!(
            d.forward.line.out_packets + d.forward.line.queue_drops,
            burst,
            "{d:?}"
        );

        drop(link);
        assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), before);
        for ns in [ns_a, ns_b] {
            assert!(!Path::new("/run/netns").join(&ns).exists(), "{ns} left behind");
        }
    });
}

/// Makes a value on a thread inside namespace `ns` (sockets keep the
/// namespace they were created in).
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let target = std::fs::File::open(path).unwrap();
        rustix::thread::move_into_link_name_space(
            target.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn a_bad_mtu_is_refused_before_anything_is_made() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: the emulated link {why}");
        return;
    }
    on_own_thread(|| {
        let before: Vec<String> = netns_list();
        let err = EmuLink::new(LinkSpec::parse("rtt=1ms").unwrap(), 100).unwrap_err();
        assert!(err.to_string().contains("MTU"), "{err:#}");
        assert_eq!(netns_list(), before);
    });
}

fn netns_list() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.retain(|n| n.starts_with(&format!("pfse-{}-", std::process::id())));
    v.sort();
    v
}
