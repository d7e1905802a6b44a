//! The two cores against each other in memory, and against hostile frames.

use std::time::{Duration, Instant};

use pfs_wire::stream::{
    Applied, EntryKind, EntryTables, StreamHello, FLAG_FINAL, RIGHT_MESSAGE, RIGHT_WRITE,
};
use pfs_wire::{put_frame, Encoding, ErrorCode, ErrorFrame, Frame, FrameType, IntegrityAlg};

use super::*;

const BLOB: usize = 64 << 10;

fn blob() -> Vec<u8> {
    (0..BLOB).map(|i| (i % 251) as u8).collect()
}

fn id() -> StreamBlob {
    StreamBlob {
        len: BLOB as u64,
        region_size: 4096,
        fingerprint: [7; 32],
    }
}

/// Every frame in `bytes`, as (type, flags, body).
fn frames(bytes: &[u8]) -> Vec<(FrameType, u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (f, used) = Frame::parse(rest).expect("whole frames");
        out.push((f.header.frame_type, f.header.flags, f.body.to_vec()));
        rest = &rest[used..];
    }
    out
}

fn error_code(control: &[u8]) -> u16 {
    let fs = frames(control);
    let (t, _, body) = fs.last().expect("a frame");
    assert_eq!(*t, FrameType::Error);
    ErrorFrame::parse(body).unwrap().code
}

/// What the test host saw: per gram, its seq and resolved entries.
#[derive(Default)]
struct Seen(Vec<(u64, Vec<SeenEntry>)>);

/// An entry as the host saw it: `r`, `w` or `m`, offset, bytes.
type SeenEntry = (char, u64, Vec<u8>);

impl StreamHost for Seen {
    fn gram(&mut self, g: &mut GramEntries<'_>) {
        let mut es = Vec::new();
        while let Some(e) = g.next_entry() {
            es.push(match e {
                ResolvedEntry::Reference { offset, bytes } => ('r', offset, bytes.to_vec()),
                ResolvedEntry::Write { offset, bytes } => ('w', offset, bytes.to_vec()),
                ResolvedEntry::Message(m) => ('m', 0, m.to_vec()),
            });
        }
        self.0.push((g.seq(), es));
    }
}

/// A publisher and a subscriber joined in memory.
struct Pair {
    p: Publisher,
    s: Subscriber,
    pub_blob: Vec<u8>,
    sub_blob: Vec<u8>,
    seen: Seen,
    /// Bytes the publisher wrote that the subscriber has not read yet.
    wire: Vec<u8>,
    now: Instant,
}

impl Pair {
    fn new(cfg: SubscriberConfig) -> Self {
        let now = Instant::now();
        let mut pair = Self {
            p: Publisher::new(&PublisherConfig::default(), id(), now),
            s: Subscriber::new(cfg, id(), now),
            pub_blob: blob(),
            sub_blob: blob(),
            seen: Seen::default(),
            wire: Vec::new(),
            now,
        };
        pair.deliver().unwrap();
        pair.answer().unwrap();
        assert!(pair.p.accepted().is_some());
        pair
    }

    /// Publisher's pending bytes into the subscriber.
    fn deliver(&mut self) -> Result<(), StreamError> {
        self.drain();
        let wire = std::mem::take(&mut self.wire);
        for (t, flags, body) in frames(&wire) {
            let h = pfs_wire::FrameHeader {
                frame_type: t,
                flags,
                length: body.len() as u32,
            };
            self.s.check_header(&h)?;
            let _ = self
                .s
                .handle_frame(h, &body, &mut self.sub_blob, &mut self.seen, self.now)?;
        }
        self.s.flush_applied(self.now);
        Ok(())
    }

    /// Subscriber's pending bytes into the publisher.
    fn answer(&mut self) -> Result<(), StreamError> {
        let wire = self.s.control().to_vec();
        self.s.transmitted(self.now);
        for (t, flags, body) in frames(&wire) {
            let h = pfs_wire::FrameHeader {
                frame_type: t,
                flags,
                length: body.len() as u32,
            };
            self.p.handle_frame(h, &body, self.now)?;
        }
        Ok(())
    }

    /// The publisher's pending bytes onto the wire.
    fn drain(&mut self) {
        while let Some(tx) = self.p.poll_transmit() {
            tx.append_to(&mut self.wire);
            self.p.transmitted(self.now);
        }
    }

    fn offer(&mut self, build: impl FnOnce(&mut GramWriter<'_>)) -> Result<Offer, StreamError> {
        let room = self.p.has_room();
        let mut g = self.p.gram(&self.pub_blob);
        if room {
            build(&mut g);
        }
        let o = self.p.seal();
        self.drain();
        o
    }
}

#[test]
fn every_kind_executes_in_table_order() {
    let mut pair = Pair::new(SubscriberConfig::default());
    let new = [0xee; 8];
    pair.pub_blob[100..108].copy_from_slice(&new);
    let sent = pair
        .offer(|g| {
            g.reference(100, 8)
                .write(100, &new)
                .message(b"hi")
                .reference(96, 16);
        })
        .unwrap();
    assert_eq!(sent, Offer::Sent { seq: 0 });
    let before = pair.sub_blob[96..112].to_vec();
    pair.deliver().unwrap();
    let (seq, es) = &pair.seen.0[0];
    assert_eq!(*seq, 0);
    // The first reference saw the old bytes, the last one the written ones.
    assert_eq!(es[0], ('r', 100, before[4..12].to_vec()));
    assert_eq!(es[1], ('w', 100, new.to_vec()));
    assert_eq!(es[2], ('m', 0, b"hi".to_vec()));
    assert_eq!(es[3].2, pair.pub_blob[96..112]);
    assert_eq!(pair.sub_blob, pair.pub_blob);
    // The publisher's digest over its blob (already written) counts the
    // first reference's bytes as new: that one gram mismatches, and says so.
    assert_eq!(pair.s.report().mismatched, 1);
    pair.answer().unwrap();
    assert_eq!(pair.p.applied(), 1);
}

#[test]
fn matching_digests_and_the_end() {
    let mut pair = Pair::new(SubscriberConfig::default());
    for i in 0..5u64 {
        let bytes = [i as u8; 32];
        pair.pub_blob[(i * 64) as usize..(i * 64 + 32) as usize].copy_from_slice(&bytes);
        let o = pair
            .offer(|g| {
                g.write(i * 64, &bytes).reference(i * 64, 32).message(&bytes[..3]);
            })
            .unwrap();
        assert_eq!(o, Offer::Sent { seq: i });
        pair.deliver().unwrap();
    }
    pair.p.finish();
    pair.deliver().unwrap();
    assert!(pair.s.is_ended());
    let last = frames(pair.s.control()).pop().unwrap();
    assert_eq!((last.0, last.1), (FrameType::Applied, FLAG_FINAL));
    pair.answer().unwrap();
    assert!(pair.p.is_done());
    let r = pair.p.report();
    assert!(r.digests_matched, "{r:?}");
    assert_eq!((r.grams, r.entries, r.applied), (5, 15, 5));
    assert_eq!(r.effective_bytes, 5 * (32 + 32 + 3));
    assert!(pair.s.report().digests_matched);
    assert_eq!(pair.sub_blob, pair.pub_blob);
}

#[test]
fn a_full_window_is_back_pressure_and_keeps_nothing() {
    let cfg = SubscriberConfig {
        window_grams: 2,
        ..SubscriberConfig::default()
    };
    let mut pair = Pair::new(cfg);
    assert_eq!(
        pair.offer(|g| {
            g.message(b"a");
        })
        .unwrap(),
        Offer::Sent { seq: 0 }
    );
    assert_eq!(
        pair.offer(|g| {
            g.message(b"b");
        })
        .unwrap(),
        Offer::Sent { seq: 1 }
    );
    let mut called = false;
    assert_eq!(pair.offer(|_| called = true).unwrap(), Offer::BackPressure);
    assert!(!called, "a full window does not build");
    pair.deliver().unwrap();
    pair.answer().unwrap();
    assert_eq!(pair.p.applied(), 2);
    assert_eq!(
        pair.offer(|g| {
            g.message(b"c");
        })
        .unwrap(),
        Offer::Sent { seq: 2 }
    );
    pair.deliver().unwrap();
    let msgs: Vec<_> = pair.seen.0.iter().map(|(_, es)| es[0].2.clone()).collect();
    assert_eq!(
        msgs,
        [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
        "nothing lost, in order"
    );
    assert_eq!(pair.p.report().back_pressure, 1);
}

#[test]
fn the_byte_window_holds_too() {
    let cfg = SubscriberConfig {
        max_gram_body: 4096,
        window_bytes: 5000,
        ..SubscriberConfig::default()
    };
    let mut pair = Pair::new(cfg);
    let big = [1u8; 3000];
    assert_eq!(
        pair.offer(|g| {
            g.message(&big);
        })
        .unwrap(),
        Offer::Sent { seq: 0 }
    );
    assert_eq!(
        pair.offer(|g| {
            g.message(&big);
        })
        .unwrap(),
        Offer::BackPressure
    );
    assert_eq!(
        pair.offer(|g| {
            g.message(&big[..100]);
        })
        .unwrap(),
        Offer::Sent { seq: 1 }
    );
    // Too large for the subscriber at all: an error, not back-pressure.
    let huge = [0u8; 5000];
    assert!(matches!(
        pair.offer(|g| {
            g.message(&huge);
        }),
        Err(StreamError::Publish(PublishError::GramTooLarge { .. }))
    ));
}

#[test]
fn the_publisher_refuses_what_the_subscriber_would() {
    let cfg = SubscriberConfig {
        rights: RIGHT_MESSAGE,
        ..SubscriberConfig::default()
    };
    let mut pair = Pair::new(cfg);
    let e = pair
        .offer(|g| {
            g.write(0, b"x");
        })
        .unwrap_err();
    assert!(
        matches!(e, StreamError::Publish(PublishError::NoRight { kind: "write" })),
        "{e}"
    );
    let e = pair
        .offer(|g| {
            g.reference(BLOB as u64 - 1, 2);
        })
        .unwrap_err();
    assert!(
        matches!(e, StreamError::Publish(PublishError::OutOfBounds { .. })),
        "{e}"
    );
    // The session goes on.
    assert_eq!(
        pair.offer(|g| {
            g.message(b"ok");
        })
        .unwrap(),
        Offer::Sent { seq: 0 }
    );
}

#[test]
fn claims_write_in_place() {
    let mut pair = Pair::new(SubscriberConfig::default());
    pair.pub_blob[10..14].copy_from_slice(b"PFS!");
    let o = pair
        .offer(|g| {
            let mut c = g.claim(4);
            c.bytes().copy_from_slice(b"PFS!");
            c.commit_write(10);
            let mut c = g.claim(3);
            c.bytes().copy_from_slice(b"msg");
            c.commit_message();
            let mut dropped = g.claim(5);
            dropped.bytes().fill(9);
        })
        .unwrap();
    assert_eq!(o, Offer::Sent { seq: 0 });
    pair.deliver().unwrap();
    assert_eq!(&pair.sub_blob[10..14], b"PFS!");
    assert_eq!(pair.seen.0[0].1.len(), 2);
    assert_eq!(pair.s.report().mismatched, 0);
}

/// A subscriber that took a HELLO, and an SGRAM body builder.
fn subscriber(rights: u8) -> (Subscriber, Vec<u8>, Instant) {
    let now = Instant::now();
    let cfg = SubscriberConfig {
        rights,
        max_entries: 8,
        window_grams: 4,
        max_gram_body: 4096,
        ..SubscriberConfig::default()
    };
    let mut s = Subscriber::new(cfg, id(), now);
    let hello = StreamHello {
        blob_len: BLOB as u64,
        region_size: 4096,
        integrity: IntegrityAlg::Fnv1a,
        stream_index: 0,
        stream_count: 1,
        keepalive_ms: 1000,
        session_nonce: 5,
        catch_up: false,
        fingerprint: [7; 32],
    };
    let h = pfs_wire::FrameHeader {
        frame_type: FrameType::StreamHello,
        flags: 0,
        length: 80,
    };
    let mut b = blob();
    let _ = s
        .handle_frame(h, &hello.emit(), &mut b, &mut Seen::default(), now)
        .unwrap();
    s.transmitted(now);
    (s, b, now)
}

fn sgram(seq: u64, enc: Encoding, integrity: IntegrityAlg, entries: &[(EntryKind, u64, &[u8])]) -> Vec<u8> {
    let mut t = EntryTables::default();
    let mut slab = Vec::new();
    for &(k, off, bytes) in entries {
        t.push(k, off, bytes.len() as u32).unwrap();
        if k.has_slab() {
            slab.extend_from_slice(bytes);
        }
    }
    let mut body = t.header(seq, enc, integrity, 0).emit().to_vec();
    body.extend_from_slice(t.table(enc));
    body.extend_from_slice(&slab);
    body
}

fn feed(
    s: &mut Subscriber,
    blob: &mut [u8],
    t: FrameType,
    body: &[u8],
    now: Instant,
) -> Result<Polled, StreamError> {
    let h = pfs_wire::FrameHeader {
        frame_type: t,
        flags: 0,
        length: body.len() as u32,
    };
    s.check_header(&h)?;
    s.handle_frame(h, body, blob, &mut Seen::default(), now)
}

#[test]
fn both_encodings_execute() {
    for enc in [Encoding::Absolute, Encoding::Arithmetic] {
        let (mut s, mut b, now) = subscriber(RIGHT_WRITE | RIGHT_MESSAGE);
        let body = sgram(
            0,
            enc,
            IntegrityAlg::Fnv1a,
            &[
                (EntryKind::Write, 5, b"abc"),
                (EntryKind::Reference, 4, b"....."),
                (EntryKind::Message, 0, b"m"),
            ],
        );
        assert_eq!(
            feed(&mut s, &mut b, FrameType::Sgram, &body, now).unwrap(),
            Polled::Grams(1)
        );
        assert_eq!(&b[5..8], b"abc");
        assert_eq!(s.report().grams, 1);
    }
}

/// Each hostile gram is refused with its ERROR code, and the blob is
/// unchanged even when a valid WRITE comes before the bad entry.
#[test]
fn hostile_grams_are_refused_and_leave_the_blob_unchanged() {
    let w: (EntryKind, u64, &[u8]) = (EntryKind::Write, 0, b"XXXX");
    let cases: Vec<(&str, u8, Vec<u8>, ErrorCode)> = vec![
        (
            "out of bounds",
            RIGHT_WRITE,
            sgram(
                0,
                Encoding::Arithmetic,
                IntegrityAlg::Fnv1a,
                &[w, (EntryKind::Reference, BLOB as u64 - 2, b"...")],
            ),
            ErrorCode::OutOfBounds,
        ),
        (
            "write past the end",
            RIGHT_WRITE,
            sgram(
                0,
                Encoding::Absolute,
                IntegrityAlg::Fnv1a,
                &[w, (EntryKind::Write, BLOB as u64, b"y")],
            ),
            ErrorCode::OutOfBounds,
        ),
        (
            "write without the right",
            RIGHT_MESSAGE,
            sgram(
                0,
                Encoding::Absolute,
                IntegrityAlg::Fnv1a,
                &[(EntryKind::Message, 0, b"m"), w],
            ),
            ErrorCode::Auth,
        ),
        (
            "message without the right",
            RIGHT_WRITE,
            sgram(
                0,
                Encoding::Absolute,
                IntegrityAlg::Fnv1a,
                &[w, (EntryKind::Message, 0, b"m")],
            ),
            ErrorCode::Auth,
        ),
        (
            "out of order",
            RIGHT_WRITE,
            sgram(1, Encoding::Absolute, IntegrityAlg::Fnv1a, &[w]),
            ErrorCode::Protocol,
        ),
        (
            "other integrity",
            RIGHT_WRITE,
            sgram(0, Encoding::Absolute, IntegrityAlg::Xxh3, &[w]),
            ErrorCode::Unsupported,
        ),
        (
            "too many entries",
            RIGHT_WRITE,
            sgram(0, Encoding::Absolute, IntegrityAlg::Fnv1a, &[w; 9]),
            ErrorCode::Limit,
        ),
        ("oversized", RIGHT_WRITE, vec![0; 5000], ErrorCode::Limit),
        ("garbage", RIGHT_WRITE, vec![0xa5; 100], ErrorCode::BadFrame),
    ];
    for (name, rights, body, code) in cases {
        let (mut s, mut b, now) = subscriber(rights);
        let r = feed(&mut s, &mut b, FrameType::Sgram, &body, now);
        assert!(matches!(r, Err(StreamError::Violation(_))), "{name}: {r:?}");
        assert_eq!(error_code(s.control()), code as u16, "{name}");
        assert_eq!(b, blob(), "{name}: blob changed");
        assert_eq!(s.report().grams, 0, "{name}");
    }
    // A bad entry kind inside a valid header.
    let (mut s, mut b, now) = subscriber(RIGHT_WRITE);
    let mut body = sgram(
        0,
        Encoding::Absolute,
        IntegrityAlg::Fnv1a,
        &[(EntryKind::Reference, 0, b"..")],
    );
    body[32 + 11] |= 0xc0;
    assert!(feed(&mut s, &mut b, FrameType::Sgram, &body, now).is_err());
    assert_eq!(error_code(s.control()), ErrorCode::BadFrame as u16);
}

#[test]
fn frames_out_of_place_and_the_window_are_refused() {
    let (mut s, mut b, now) = subscriber(RIGHT_WRITE);
    let r = feed(
        &mut s,
        &mut b,
        FrameType::Applied,
        &Applied::default().emit(),
        now,
    );
    assert!(r.is_err());
    assert_eq!(error_code(s.control()), ErrorCode::Protocol as u16);
    // Five grams with no APPLIED between them: the fifth is past a window of 4.
    let (mut s, mut b, now) = subscriber(RIGHT_WRITE);
    for seq in 0..4 {
        let body = sgram(seq, Encoding::Absolute, IntegrityAlg::Fnv1a, &[]);
        let h = pfs_wire::FrameHeader {
            frame_type: FrameType::Sgram,
            flags: 0,
            length: body.len() as u32,
        };
        s.check_header(&h).unwrap();
        let _ = s
            .handle_frame(h, &body, &mut b, &mut Seen::default(), now)
            .unwrap();
    }
    let body = sgram(4, Encoding::Absolute, IntegrityAlg::Fnv1a, &[]);
    assert!(feed(&mut s, &mut b, FrameType::Sgram, &body, now).is_err());
    assert_eq!(error_code(s.control()), ErrorCode::Limit as u16);
}

#[test]
fn a_different_blob_is_refused() {
    let now = Instant::now();
    let mut s = Subscriber::new(
        SubscriberConfig::default(),
        StreamBlob {
            fingerprint: [8; 32],
            ..id()
        },
        now,
    );
    let p = Publisher::new(&PublisherConfig::default(), id(), now);
    let hello = frames(&{
        let mut v = Vec::new();
        p.poll_transmit().unwrap().append_to(&mut v);
        v
    });
    let mut b = blob();
    let (t, flags, body) = &hello[0];
    let h = pfs_wire::FrameHeader {
        frame_type: *t,
        flags: *flags,
        length: body.len() as u32,
    };
    assert!(s
        .handle_frame(h, body, &mut b, &mut Seen::default(), now)
        .is_err());
    assert_eq!(error_code(s.control()), ErrorCode::BlobMismatch as u16);
}

#[test]
fn applied_going_back_or_beyond_is_refused() {
    let mut pair = Pair::new(SubscriberConfig::default());
    let _ = pair
        .offer(|g| {
            g.message(b"a");
        })
        .unwrap();
    let beyond = Applied {
        applied: 2,
        window_grams: 1,
        window_bytes: 1 << 30,
        ..Applied::default()
    };
    let mut wire = Vec::new();
    put_frame(&mut wire, FrameType::Applied, 0, &beyond.emit());
    let (t, f, body) = frames(&wire).remove(0);
    let h = pfs_wire::FrameHeader {
        frame_type: t,
        flags: f,
        length: body.len() as u32,
    };
    assert!(matches!(
        pair.p.handle_frame(h, &body, pair.now),
        Err(StreamError::Violation(_))
    ));
}

#[test]
fn silence_ends_both_sides_and_keepalives_keep_them() {
    let mut pair = Pair::new(SubscriberConfig::default());
    let t0 = pair.now;
    // After one interval each side sends a keepalive.
    let t1 = t0 + Duration::from_millis(1100);
    pair.p.handle_timeout(t1).unwrap();
    pair.s.handle_timeout(t1).unwrap();
    let ka = frames(&{
        let mut v = Vec::new();
        pair.p.poll_transmit().unwrap().append_to(&mut v);
        v
    });
    assert_eq!(ka[0].0, FrameType::StreamEnd);
    assert_eq!(frames(pair.s.control())[0].0, FrameType::Applied);
    pair.now = t1;
    pair.p.transmitted(t1);
    pair.deliver().unwrap();
    pair.answer().unwrap();
    assert!(!pair.s.is_ended());
    // Nothing heard for 3 intervals after that: both give up.
    let t2 = t1 + Duration::from_millis(3000);
    assert!(matches!(
        pair.p.handle_timeout(t2),
        Err(StreamError::Silent {
            peer: "subscriber",
            ..
        })
    ));
    assert!(matches!(
        pair.s.handle_timeout(t2),
        Err(StreamError::Silent {
            peer: "publisher",
            ..
        })
    ));
}

/// docs/wire.md §15.9: `applied` and `stream-end` carry the chain of the
/// two SGRAM vectors' digests; pfs-wire has no XXH3, so it is checked here.
#[test]
fn the_spec_vectors_e2e_chain() {
    let v = 0xc594_5d9f_8e51_5a86;
    let first = pfs_exec::integrity::e2e_chain(0, 0, v);
    assert_eq!(first, 0x41aa_c0a8_5e4e_cf8c, "{first:#018x}");
    let e = pfs_exec::integrity::e2e_chain(first, 1, v);
    assert_eq!(e, 0xc4ec_4d94_3dd0_4ed8, "{e:#018x}");
}

/// A STREAM_HELLO for [`id`]'s shape with another root, offering catch-up
/// or not, fed to a subscriber that allows it or not.
fn hello_of_another_blob(offer: bool, allow: bool) -> (Subscriber, Result<Polled, StreamError>) {
    let now = Instant::now();
    let cfg = SubscriberConfig {
        allow_catch_up: allow,
        ..SubscriberConfig::default()
    };
    let mut s = Subscriber::new(cfg, id(), now);
    let hello = StreamHello {
        blob_len: BLOB as u64,
        region_size: 4096,
        integrity: IntegrityAlg::Fnv1a,
        stream_index: 0,
        stream_count: 1,
        keepalive_ms: 1000,
        session_nonce: 5,
        catch_up: offer,
        fingerprint: [8; 32],
    };
    let h = pfs_wire::FrameHeader {
        frame_type: FrameType::StreamHello,
        flags: 0,
        length: 80,
    };
    let r = s.handle_frame(h, &hello.emit(), &mut blob(), &mut Seen::default(), now);
    (s, r)
}

#[test]
fn a_differing_subscriber_takes_an_offered_catch_up_only_when_it_allows_it() {
    let (s, r) = hello_of_another_blob(true, true);
    assert_eq!(r.expect("accepted"), Polled::Grams(0));
    assert!(s.catching_up());
    let fs = frames(s.control());
    assert_eq!(fs[0].0, FrameType::StreamAccept);
    assert!(pfs_wire::stream::StreamAccept::parse(&fs[0].2).unwrap().catch_up);

    let (s, r) = hello_of_another_blob(true, false);
    let err = r.expect_err("refused").to_string();
    assert!(err.contains("--allow-catch-up"), "{err}");
    assert_eq!(error_code(s.control()), ErrorCode::BlobMismatch as u16);

    let (s, r) = hello_of_another_blob(false, true);
    assert!(matches!(
        r,
        Err(StreamError::Violation(StreamViolation::BlobMismatch { .. }))
    ));
    assert!(!s.catching_up());
}

#[test]
fn a_publisher_refuses_a_catch_up_it_did_not_offer() {
    let now = Instant::now();
    let mut p = Publisher::new(&PublisherConfig::default(), id(), now);
    let accept = pfs_wire::stream::StreamAccept {
        max_gram_body: 4096,
        max_entries: 8,
        window_grams: 4,
        rights: RIGHT_WRITE,
        window_bytes: 1 << 20,
        blob_len: BLOB as u64,
        session_nonce: PublisherConfig::default().session_nonce,
        keepalive_ms: 1000,
        catch_up: true,
    };
    let h = pfs_wire::FrameHeader {
        frame_type: FrameType::StreamAccept,
        flags: 0,
        length: 48,
    };
    let r = p.handle_frame(h, &accept.emit(), now);
    assert!(
        matches!(r, Err(StreamError::Violation(StreamViolation::CatchUpUnasked))),
        "{r:?}"
    );

    // Offered: the publisher waits for the catch-up, then streams.
    let cfg = PublisherConfig {
        catch_up: true,
        ..PublisherConfig::default()
    };
    let mut p = Publisher::new(&cfg, id(), now);
    p.handle_frame(h, &accept.emit(), now).expect("taken");
    assert!(p.catching_up());
    p.caught_up(now, crate::catchup::CatchUpStats::default());
    assert!(!p.catching_up());
    assert_eq!(p.report().catch_up, Some(crate::catchup::CatchUpStats::default()));
}
