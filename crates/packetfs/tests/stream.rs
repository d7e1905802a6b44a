//! Publications and subscriptions over every transport: every entry kind
//! byte-exact, back-pressure without loss, and a dead or stuck peer ending
//! the other side with a clear error.

use std::sync::mpsc;
use std::time::Duration;

use packetfs::blob::{open_blob, study_blob, OpenedBlob};
use packetfs::stream::{
    Entry, GramEntries, Offer, Publication, PublicationConfig, StreamError, SubscriberBlob, Subscription,
    SubscriptionConfig,
};
use packetfs::transport::{
    Listener, ShmConfig, ShmListener, ShmTransport, TcpConfig, TcpListener, TcpTransport, Transport,
    UdpConfig, UdpListener, UdpTransport, UnixTransport,
};

const LEN: u64 = 1 << 20;

fn blob() -> OpenedBlob {
    open_blob(&study_blob(LEN, 0x5eed, None), true).expect("blob")
}

type Pair = (&'static str, Box<dyn Transport>, Box<dyn Transport>);

/// Connected transports of each kind, same process.
fn transport_pairs(dir: &std::path::Path) -> Vec<Pair> {
    let tcp = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let client = TcpTransport::connect(&tcp.local_addr(), &TcpConfig::default()).unwrap();
    let server = tcp.accept().unwrap();
    let (ua, ub) = UnixTransport::pair().unwrap();
    let shm_cfg = ShmConfig::default();
    let path = dir.join("shm.sock");
    let shm = ShmListener::bind(&path, &shm_cfg).unwrap();
    let (c, s) = std::thread::scope(|sc| {
        let accept = sc.spawn(|| shm.accept().unwrap());
        let c = ShmTransport::connect(&path, &shm_cfg).unwrap();
        (c, accept.join().unwrap())
    });
    let udp = UdpListener::bind("127.0.0.1:0", UdpConfig::default()).unwrap();
    let (uc, us) = std::thread::scope(|sc| {
        let accept = sc.spawn(|| udp.accept().unwrap());
        let c = UdpTransport::connect(&udp.local_addr(), &UdpConfig::default()).unwrap();
        (c, accept.join().unwrap())
    });
    vec![
        ("TCP", Box::new(client), Box::new(server)),
        ("UNIX", Box::new(ua), Box::new(ub)),
        ("SHM", Box::new(c), Box::new(s)),
        ("UDP", Box::new(uc), Box::new(us)),
    ]
}

fn tcp_pair() -> (Box<dyn Transport>, Box<dyn Transport>) {
    let tcp = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let client = TcpTransport::connect(&tcp.local_addr(), &TcpConfig::default()).unwrap();
    (Box::new(client), Box::new(tcp.accept().unwrap()))
}

/// What a subscriber's handler keeps of the grams it executed.
#[derive(Default, Debug, PartialEq)]
struct Got {
    references: Vec<Vec<u8>>,
    writes: Vec<(u64, Vec<u8>)>,
    messages: Vec<Vec<u8>>,
}

impl Got {
    fn take(&mut self, g: &mut GramEntries<'_>) {
        while let Some(e) = g.next_entry() {
            match e {
                Entry::Reference { bytes, .. } => self.references.push(bytes.to_vec()),
                Entry::Write { offset, bytes } => self.writes.push((offset, bytes.to_vec())),
                Entry::Message(m) => self.messages.push(m.to_vec()),
            }
        }
    }
}

/// Subscribes on `conn` over `replica` until the stream ends.
fn subscribe(
    conn: Box<dyn Transport>,
    replica: &mut OpenedBlob,
    cfg: SubscriptionConfig,
) -> Result<(Got, packetfs::stream::SubscriberReport), StreamError> {
    let mut sub =
        Subscription::accept(conn, SubscriberBlob::of(&mut replica.blob), cfg).map_err(|e| match e {
            packetfs::Error::Stream(s) => s,
            other => panic!("{other}"),
        })?;
    let mut got = Got::default();
    let report = sub.run(&mut |g: &mut GramEntries<'_>| got.take(g))?;
    Ok((got, report))
}

#[test]
fn every_transport_carries_every_kind_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    for (kind, pub_conn, sub_conn) in transport_pairs(dir.path()) {
        let primary = blob();
        let mut replica = blob();
        let writer = primary.blob.writer();
        let view = primary.view();
        let mut want = Got::default();
        let (got, sub_report) = std::thread::scope(|s| {
            let replica = &mut replica;
            let sub = s.spawn(move || subscribe(sub_conn, replica, SubscriptionConfig::default()));
            let mut p = Publication::on(pub_conn, &view, PublicationConfig::default()).expect("connect");
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..40u64 {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let off = (x >> 20) % (LEN - 5000);
                let len = 1 + (x >> 50) as usize % 4000;
                // The primary changes its region, then publishes the change,
                // a reference to other bytes and a message.
                let changed: Vec<u8> = view.data[off as usize..off as usize + len]
                    .iter()
                    .enumerate()
                    .map(|(j, b)| b.wrapping_add((j as u8 ^ i as u8) | 1))
                    .collect();
                writer.write(off, &changed).unwrap();
                let r = (x >> 8) % (LEN - 300);
                want.writes.push((off, changed.clone()));
                want.references
                    .push(view.data[r as usize..r as usize + 300].to_vec());
                want.messages.push(format!("gram {i}").into_bytes());
                let o = p
                    .offer_blocking(Duration::from_secs(20), |g| {
                        g.write(off, &changed)
                            .reference(r, 300)
                            .message(format!("gram {i}").as_bytes());
                    })
                    .expect("offer");
                assert_eq!(o, Offer::Sent { seq: i }, "{kind}");
            }
            let report = p.close().expect("close");
            assert!(report.digests_matched, "{kind}: {report:?}");
            assert_eq!(
                (report.grams, report.applied, report.entries),
                (40, 40, 120),
                "{kind}"
            );
            sub.join().unwrap().expect("subscription")
        });
        assert_eq!(got, want, "{kind}: entries resolved byte-exact");
        assert!(sub_report.digests_matched, "{kind}");
        assert_eq!(
            replica.blob.as_slice(),
            primary.blob.as_slice(),
            "{kind}: replica equals primary"
        );
    }
}

#[test]
fn a_slow_subscriber_loses_nothing_and_the_publisher_sees_back_pressure() {
    let (pub_conn, sub_conn) = tcp_pair();
    let primary = blob();
    let mut replica = blob();
    let view = primary.view();
    let (go, wait) = mpsc::channel::<()>();
    let cfg = SubscriptionConfig {
        window_grams: 2,
        ..SubscriptionConfig::default()
    };
    let got = std::thread::scope(|s| {
        let replica = &mut replica;
        let sub = s.spawn(move || {
            let mut sub =
                Subscription::accept(sub_conn, SubscriberBlob::of(&mut replica.blob), cfg).expect("accept");
            let mut got = Vec::new();
            sub.run(&mut |g: &mut GramEntries<'_>| {
                if g.seq() == 0 {
                    // Held until the publisher has met the full window.
                    wait.recv().unwrap();
                }
                while let Some(Entry::Message(m)) = g.next_entry() {
                    got.push(m.to_vec());
                }
            })
            .expect("run");
            got
        });
        let mut p = Publication::on(pub_conn, &view, PublicationConfig::default()).expect("connect");
        assert_eq!(
            p.offer(|g| {
                g.message(b"0");
            })
            .unwrap(),
            Offer::Sent { seq: 0 }
        );
        assert_eq!(
            p.offer(|g| {
                g.message(b"1");
            })
            .unwrap(),
            Offer::Sent { seq: 1 }
        );
        assert_eq!(
            p.offer(|g| {
                g.message(b"2");
            })
            .unwrap(),
            Offer::BackPressure
        );
        go.send(()).unwrap();
        let mut seq = 2;
        while seq < 100 {
            match p
                .offer(|g| {
                    g.message(seq.to_string().as_bytes());
                })
                .unwrap()
            {
                Offer::Sent { seq: s } => {
                    assert_eq!(s, seq);
                    seq += 1;
                }
                Offer::BackPressure => assert!(p.wait_applied(p.applied(), Duration::from_secs(20)).unwrap()),
            }
        }
        let report = p.close().unwrap();
        assert!(report.back_pressure >= 1);
        assert_eq!(report.applied, 100);
        sub.join().unwrap()
    });
    let want: Vec<Vec<u8>> = (0..100).map(|i: u32| i.to_string().into_bytes()).collect();
    assert_eq!(got, want, "every gram, in order");
}

fn fast() -> PublicationConfig {
    PublicationConfig {
        keepalive: Duration::from_millis(50),
        ..PublicationConfig::default()
    }
}

fn fast_sub() -> SubscriptionConfig {
    SubscriptionConfig {
        keepalive: Duration::from_millis(50),
        ..SubscriptionConfig::default()
    }
}

#[test]
fn a_subscriber_that_dies_or_hangs_ends_the_publication() {
    let primary = blob();
    let view = primary.view();
    // Closed: the next call fails at once.
    let (pub_conn, sub_conn) = tcp_pair();
    let mut replica = blob();
    std::thread::scope(|s| {
        let replica = &mut replica;
        let sub = s.spawn(move || {
            Subscription::accept(sub_conn, SubscriberBlob::of(&mut replica.blob), fast_sub()).map(drop)
        });
        let mut p = Publication::on(pub_conn, &view, fast()).expect("connect");
        sub.join().unwrap().expect("accept");
        // The subscription (and its connection) is gone.
        let err = p.wait_applied(0, Duration::from_secs(20)).unwrap_err();
        assert!(
            matches!(
                err,
                StreamError::Session(packetfs::session::SessionError::PeerClosed { .. })
            ),
            "{err}"
        );
    });
    // Stuck: it holds the connection and never answers again.
    let (pub_conn, sub_conn) = tcp_pair();
    let mut replica = blob();
    let (done, hold) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let replica = &mut replica;
        s.spawn(move || {
            let sub = Subscription::accept(sub_conn, SubscriberBlob::of(&mut replica.blob), fast_sub());
            hold.recv().unwrap();
            drop(sub);
        });
        let mut p = Publication::on(pub_conn, &view, fast()).expect("connect");
        let _ = p
            .offer(|g| {
                g.message(b"x");
            })
            .unwrap();
        let err = p.wait_applied(0, Duration::from_secs(20)).unwrap_err();
        assert!(
            matches!(
                err,
                StreamError::Silent {
                    peer: "subscriber",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("gone or stuck"), "{err}");
        done.send(()).unwrap();
    });
}

#[test]
fn a_publisher_that_dies_or_hangs_ends_the_subscription() {
    let primary = blob();
    let view = primary.view();
    for hang in [false, true] {
        let (pub_conn, sub_conn) = tcp_pair();
        let mut replica = blob();
        let (done, hold) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            let view = &view;
            s.spawn(move || {
                let p = Publication::on(pub_conn, view, fast()).expect("connect");
                if hang {
                    hold.recv().unwrap();
                }
                drop(p);
            });
            let err = subscribe(sub_conn, &mut replica, fast_sub()).unwrap_err();
            if hang {
                assert!(
                    matches!(
                        err,
                        StreamError::Silent {
                            peer: "publisher",
                            ..
                        }
                    ),
                    "{err}"
                );
                done.send(()).unwrap();
            } else {
                assert!(
                    matches!(
                        err,
                        StreamError::Session(packetfs::session::SessionError::PeerClosed { .. })
                    ),
                    "{err}"
                );
            }
        });
    }
}

#[test]
fn a_different_blob_is_refused_on_both_sides() {
    let primary = blob();
    let view = primary.view();
    let (pub_conn, sub_conn) = tcp_pair();
    let mut other = open_blob(&study_blob(LEN, 0xbad, None), true).expect("blob");
    std::thread::scope(|s| {
        let other = &mut other;
        let sub = s.spawn(move || subscribe(sub_conn, other, SubscriptionConfig::default()).map(drop));
        let err = Publication::on(pub_conn, &view, PublicationConfig::default()).unwrap_err();
        assert!(err.to_string().contains("BLOB_MISMATCH"), "{err}");
        let err = sub.join().unwrap().unwrap_err();
        assert!(matches!(err, StreamError::Violation(_)), "{err}");
    });
}

#[test]
fn a_protected_stream_carries_every_kind() {
    use packetfs::gram::Target;
    use packetfs::keys::{Cipher, ClientSecurity, Identity, Pin, ServerSecurity};
    let server_key = Identity::generate().unwrap();
    let client_key = Identity::generate().unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let target = Target::Tcp {
        addr: tcp.local_addr(),
        sock_buf: 0,
    };
    let primary = blob();
    let mut replica = blob();
    let writer = primary.blob.writer();
    let view = primary.view();
    let server_sec = ServerSecurity {
        identity: server_key.clone(),
        psk: None,
        timeout: Duration::from_secs(10),
        record_timeout: Duration::from_secs(30),
    };
    let (got, _) = std::thread::scope(|s| {
        let replica = &mut replica;
        let server_sec = &server_sec;
        let tcp = &tcp;
        let sub = s.spawn(move || {
            let mut conn = tcp.accept().unwrap();
            let mut head = [0u8; 8];
            let mut have = 0;
            while have < head.len() {
                have += conn.read(&mut head[have..]).unwrap();
            }
            let pending =
                packetfs::keys::accept(conn, head, server_sec, &Default::default()).expect("handshake");
            let secure = pending.admit().expect("admit");
            subscribe(Box::new(secure), replica, SubscriptionConfig::default())
        });
        let sec = ClientSecurity {
            identity: client_key,
            pin: Pin::Key(server_key.public()),
            psk: None,
            cipher: Cipher::ChaCha20Poly1305,
            rotate_log2: 20,
            timeout: Duration::from_secs(10),
        };
        let mut p = Publication::connect_as(&target, &view, PublicationConfig::default(), Some(&sec))
            .expect("connect");
        writer.write(10, b"written").unwrap();
        let o = p
            .offer(|g| {
                g.write(10, b"written").reference(10, 7).message(b"sealed");
            })
            .unwrap();
        assert_eq!(o, Offer::Sent { seq: 0 });
        let report = p.close().unwrap();
        assert!(report.digests_matched, "{report:?}");
        sub.join().unwrap().expect("subscription")
    });
    assert_eq!(got.messages, [b"sealed".to_vec()]);
    assert_eq!(got.references, [b"written".to_vec()]);
    assert_eq!(replica.blob.as_slice(), primary.blob.as_slice());
}

/// A hostile publisher on a raw connection: each bad frame is refused
/// with its ERROR code, the subscription ends with the violation, and the
/// replica's bytes are as they were.
#[test]
fn hostile_publishers_are_refused_and_the_blob_is_unchanged() {
    use packetfs::wire::stream::{EntryKind, EntryTables, StreamAccept, StreamHello};
    use packetfs::wire::{put_frame, ErrorCode, ErrorFrame, Frame, FrameType, IntegrityAlg};
    let sgram = |entries: &[(EntryKind, u64, u32)], slab: &[u8]| {
        let mut t = EntryTables::default();
        for &(k, o, l) in entries {
            t.push(k, o, l).unwrap();
        }
        let enc = t.smaller().0;
        let mut body = t.header(0, enc, IntegrityAlg::Xxh3, 0).emit().to_vec();
        body.extend_from_slice(t.table(enc));
        body.extend_from_slice(slab);
        let mut f = Vec::new();
        put_frame(&mut f, FrameType::Sgram, 0, &body);
        f
    };
    let cases: Vec<(&str, Vec<u8>, ErrorCode)> = vec![
        (
            "write then out of bounds",
            sgram(
                &[(EntryKind::Write, 0, 4), (EntryKind::Reference, LEN - 1, 2)],
                b"EVIL",
            ),
            ErrorCode::OutOfBounds,
        ),
        (
            "oversized",
            sgram(&[(EntryKind::Message, 0, 5 << 20)], &vec![0; 5 << 20]),
            ErrorCode::Limit,
        ),
        ("garbage", vec![0x5a; 64], ErrorCode::BadFrame),
        (
            "a subscriber's frame from the publisher",
            {
                let mut f = Vec::new();
                put_frame(&mut f, FrameType::StreamAccept, 0, &[0; 48]);
                f
            },
            ErrorCode::Protocol,
        ),
    ];
    let truth = blob();
    for (name, frame, code) in cases {
        let (mut raw, sub_conn) = UnixTransport::pair().unwrap();
        let mut replica = blob();
        let err = std::thread::scope(|s| {
            let replica = &mut replica;
            let sub = s.spawn(move || subscribe(Box::new(sub_conn), replica, SubscriptionConfig::default()));
            let fp = truth.blob.fingerprint();
            let hello = StreamHello {
                blob_len: LEN,
                region_size: fp.region_size,
                integrity: IntegrityAlg::Xxh3,
                stream_index: 0,
                stream_count: 1,
                keepalive_ms: 1000,
                session_nonce: 9,
                catch_up: false,
                fingerprint: fp.root,
            };
            let mut out = Vec::new();
            put_frame(&mut out, FrameType::StreamHello, 0, &hello.emit());
            raw.write_all(&out).unwrap();
            // The frame may be refused before all of it is written.
            let _ = raw.write_all(&frame);
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match raw.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let (accept, used) = Frame::parse(&got).expect("STREAM_ACCEPT");
            assert_eq!(accept.header.frame_type, FrameType::StreamAccept, "{name}");
            StreamAccept::parse(accept.body).expect("accept body");
            let (error, _) = Frame::parse(&got[used..])
                .unwrap_or_else(|e| panic!("{name}: ERROR {e} after {} bytes", got.len()));
            assert_eq!(error.header.frame_type, FrameType::Error, "{name}");
            assert_eq!(ErrorFrame::parse(error.body).unwrap().code, code as u16, "{name}");
            sub.join().unwrap().unwrap_err()
        });
        assert!(matches!(err, StreamError::Violation(_)), "{name}: {err}");
        assert_eq!(
            replica.blob.as_slice(),
            truth.blob.as_slice(),
            "{name}: blob changed"
        );
    }
}

/// A publisher that trickles a frame one byte at a time is silent: only
/// whole frames count, so the subscription ends within its bound.
#[test]
fn a_trickling_publisher_is_silent() {
    use packetfs::wire::stream::StreamHello;
    use packetfs::wire::{put_frame, FrameType, IntegrityAlg};
    let (mut raw, sub_conn) = UnixTransport::pair().unwrap();
    let mut replica = blob();
    let fp = replica.blob.fingerprint().clone();
    let hello = StreamHello {
        blob_len: LEN,
        region_size: fp.region_size,
        integrity: IntegrityAlg::Xxh3,
        stream_index: 0,
        stream_count: 1,
        keepalive_ms: 50,
        session_nonce: 1,
        catch_up: false,
        fingerprint: fp.root,
    };
    let mut out = Vec::new();
    put_frame(&mut out, FrameType::StreamHello, 0, &hello.emit());
    raw.write_all(&out).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let err = std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            let mut frame = Vec::new();
            put_frame(&mut frame, FrameType::StreamEnd, 0, &[0; 48]);
            for b in frame.iter().cycle() {
                if stop.load(std::sync::atomic::Ordering::Relaxed) || raw.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let r = subscribe(Box::new(sub_conn), &mut replica, fast_sub());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        r.unwrap_err()
    });
    assert!(
        matches!(
            err,
            StreamError::Silent {
                peer: "publisher",
                ..
            }
        ),
        "{err}"
    );
}

/// A served blob: a hostile publisher is refused and ends only its own
/// session; the next publisher is served over the same, unchanged blob.
#[test]
fn a_refused_publisher_leaves_the_server_serving_others() {
    use packetfs::stream::{serve, Served};
    use packetfs::wire::stream::{EntryKind, EntryTables, StreamHello};
    use packetfs::wire::{put_frame, FrameType, IntegrityAlg};
    let tcp = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = tcp.local_addr();
    let primary = blob();
    let view = primary.view();
    let mut replica = blob();
    let fp = replica.blob.fingerprint().clone();
    let mut ends: Vec<Served> = Vec::new();
    let mut messages = Vec::new();
    std::thread::scope(|s| {
        let replica = &mut replica;
        let (ends, messages, tcp, fp) = (&mut ends, &mut messages, &tcp, &fp);
        let server = s.spawn(move || {
            let mut handler = |g: &mut GramEntries<'_>| {
                while let Some(e) = g.next_entry() {
                    if let Entry::Message(m) = e {
                        messages.push(m.to_vec());
                    }
                }
            };
            serve(
                tcp,
                SubscriberBlob::of(&mut replica.blob),
                SubscriptionConfig::default(),
                Some(2),
                &mut handler,
                &mut |e| ends.push(e),
            )
        });
        // A hostile publisher: a write, then a reference past the end.
        let mut raw = TcpTransport::connect(&addr, &TcpConfig::default()).unwrap();
        let hello = StreamHello {
            blob_len: LEN,
            region_size: fp.region_size,
            integrity: IntegrityAlg::Xxh3,
            stream_index: 0,
            stream_count: 1,
            keepalive_ms: 1000,
            session_nonce: 2,
            catch_up: false,
            fingerprint: fp.root,
        };
        let mut t = EntryTables::default();
        t.push(EntryKind::Write, 0, 4).unwrap();
        t.push(EntryKind::Reference, LEN, 1).unwrap();
        let mut body = t.header(0, t.smaller().0, IntegrityAlg::Xxh3, 0).emit().to_vec();
        body.extend_from_slice(t.smaller().1);
        body.extend_from_slice(b"EVIL");
        let mut out = Vec::new();
        put_frame(&mut out, FrameType::StreamHello, 0, &hello.emit());
        put_frame(&mut out, FrameType::Sgram, 0, &body);
        raw.write_all(&out).unwrap();
        let mut buf = [0u8; 4096];
        while matches!(raw.read(&mut buf), Ok(n) if n > 0) {}
        // A good publisher after it.
        let target = packetfs::gram::Target::Tcp { addr, sock_buf: 0 };
        let mut p = Publication::connect(&target, &view, PublicationConfig::default()).expect("connect");
        let _ = p.offer(|g| {
            g.message(b"next");
        });
        assert!(p.close().unwrap().digests_matched);
        server.join().unwrap().unwrap();
    });
    assert_eq!(ends.len(), 2);
    let refused = ends[0].outcome.as_ref().unwrap_err();
    assert!(refused.to_string().contains("OUT_OF_BOUNDS"), "{refused}");
    assert_eq!(ends[1].outcome.as_ref().unwrap().grams, 1);
    assert_eq!(messages, [b"next".to_vec()]);
    assert_eq!(
        replica.blob.as_slice(),
        primary.blob.as_slice(),
        "the refused write left no trace"
    );
}
