//! The corrections plane of blob sessions (docs/wire.md §13) between the
//! sans-I/O cores, in one thread: a receiver whose blob differs from the
//! sender's NAKs the grams that do not match, the sender answers REPAIR,
//! and the receiver's blob ends up equal to the sender's where the session
//! touched it. Also: sampling, `--no-repair`, older peers, and hostile
//! NAK and REPAIR frames.

use std::time::{Duration, Instant};

use pfs_blob::{Blob, BlobConfig, Fill};
use pfs_exec::{Pattern, Schedule, ScheduleSpec, Total};
use pfs_session::framing::Transmit;
use pfs_session::gram::receiver::Discard;
use pfs_session::gram::{
    GramReceiver, GramReceiverConfig, GramReceiverEvent, GramReceiverOutcome, GramSender, GramSenderConfig,
    GramSenderOutcome, GramViolation,
};
use pfs_session::{BlobView, SessionError, Violation};
use pfs_sys::Usage;
use pfs_wire::corrections::{put_range, CorrectionHead, GramNak};
use pfs_wire::hello::{ACK_CORRECTIONS, ACK_REPAIR, HELLO_CORRECTIONS};
use pfs_wire::{
    put_frame, Descriptor, ErrorCode, FrameHeader, FrameType, Hello, HelloAck, IntegrityAlg, Mode,
    FRAME_HEADER_LEN,
};

const BLOB_LEN: usize = 1 << 20;

mod common;
use common::view;

fn blob_bytes(seed: u64) -> Vec<u8> {
    common::blob_bytes(seed, BLOB_LEN)
}

/// A receiver blob it can repair: an anonymous mapping holding `bytes`.
fn writable(bytes: &[u8]) -> Blob {
    let (mut blob, _) = Blob::open_or_create(&BlobConfig {
        size: bytes.len() as u64,
        fill: Fill::None,
        prefault: false,
        threads: 1,
        ..BlobConfig::default()
    })
    .expect("anonymous blob");
    blob.as_mut_slice().copy_from_slice(bytes);
    blob
}

/// The session view of a writable blob (the fingerprint of `common::view`).
fn writable_view(blob: &Blob) -> BlobView<'_> {
    BlobView {
        writer: Some(blob.writer()),
        ..view(blob.as_slice())
    }
}

fn spec(pattern: Pattern, grams: u64) -> ScheduleSpec {
    ScheduleSpec {
        seed: 5,
        desc_per_gram: 16,
        max_len: 4096,
        align: 64,
        pattern,
        total: Total::Grams(grams),
        blob_len: BLOB_LEN as u64,
    }
}

fn sender_cfg(mode: Mode, grams: u64) -> GramSenderConfig {
    GramSenderConfig {
        mode,
        integrity: IntegrityAlg::Xxh3,
        spec: spec(
            if mode == Mode::Arith {
                Pattern::Sequential
            } else {
                Pattern::Random
            },
            grams,
        ),
        reply_timeout: Duration::from_secs(5),
        log_interval: None,
        session_nonce: 42,
        // One gram per schedule batch, so gram numbers are the schedule's.
        payload_budget: u64::MAX,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
    }
}

/// The descriptors of gram `seq` of `spec`.
fn gram_descs(spec: ScheduleSpec, seq: u64) -> Vec<Descriptor> {
    let mut s = Schedule::new(spec).unwrap();
    let mut g = Vec::new();
    for _ in 0..=seq {
        assert!(s.next_gram(&mut g), "the schedule has no gram #{seq}");
    }
    g
}

/// Flips a byte in the middle of the first non-empty descriptor of each of
/// `grams`; returns the offsets flipped.
fn damage(bytes: &mut [u8], spec: ScheduleSpec, grams: &[u64]) -> Vec<usize> {
    let mut at = Vec::new();
    for &seq in grams {
        let d = gram_descs(spec, seq)
            .into_iter()
            .find(|d| d.len > 0)
            .expect("a non-empty descriptor");
        let o = (d.offset + u64::from(d.len) / 2) as usize;
        bytes[o] ^= 0x5a;
        at.push(o);
    }
    at
}

/// How the sender takes the receiver's frames.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reading {
    /// After each frame it sends: REPAIRs go between grams.
    BetweenGrams,
    /// Only once it has sent COMPLETE: every REPAIR follows it.
    AfterComplete,
}

/// What crossed the wire from receiver to sender, by frame type.
#[derive(Debug, Default)]
struct Seen {
    naks: u64,
    repairs: u64,
    report_len: Option<u32>,
}

/// Feeds `pending` to the receiver until it takes nothing more.
fn drain_receiver(
    rx: &mut GramReceiver<'_>,
    now: Instant,
    pending: &mut Vec<u8>,
) -> Result<(), SessionError> {
    loop {
        let used = rx.handle_input(now, pending, &mut Discard)?;
        pending.drain(..used);
        while let Some(ev) = rx.poll_event() {
            if let GramReceiverEvent::Summary = ev {
                rx.finish(now, Usage::default(), 0);
            }
        }
        if used == 0 || pending.is_empty() || rx.is_done() {
            return Ok(());
        }
    }
}

/// Runs a session between the cores; bytes cross in `piece`-byte pieces.
fn run(
    sender_blob: &[u8],
    receiver: BlobView<'_>,
    scfg: &GramSenderConfig,
    rcfg: &GramReceiverConfig,
    reading: Reading,
    piece: usize,
) -> Result<(GramSenderOutcome, GramReceiverOutcome, Seen), SessionError> {
    let now = Instant::now();
    let mut tx = GramSender::new(view(sender_blob), scfg)?;
    let mut rx = GramReceiver::new(receiver, rcfg, now);
    let (mut rx_pending, mut tx_pending, mut r2s) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = Seen::default();
    let mut completed = false;
    for _ in 0..1_000_000 {
        let mut s2r = Vec::new();
        if let Some(t) = tx.poll_transmit(now)? {
            if t.what() == "REPAIR" {
                seen.repairs += 1;
            }
            if let Transmit::Parts { what: "COMPLETE", .. } = t {
                completed = true;
            }
            t.append_to(&mut s2r);
        }
        while tx.poll_event().is_some() {}
        for chunk in s2r.chunks(piece.max(1)) {
            rx_pending.extend_from_slice(chunk);
            drain_receiver(&mut rx, now, &mut rx_pending)?;
            if let Some(bytes) = rx.poll_transmit() {
                r2s.extend_from_slice(bytes);
                rx.transmitted();
            }
        }
        // HELLO_ACK is always read; NAKs at the time `reading` says.
        if reading == Reading::BetweenGrams || completed || tx.wants_input() {
            while !r2s.is_empty() {
                let k = piece.min(r2s.len());
                tx_pending.extend(r2s.drain(..k));
                loop {
                    if let Ok(h) = FrameHeader::parse(&tx_pending) {
                        let whole = FRAME_HEADER_LEN + h.length as usize;
                        if tx_pending.len() >= whole {
                            match h.frame_type {
                                FrameType::Nak => seen.naks += 1,
                                FrameType::Complete => seen.report_len = Some(h.length),
                                _ => {}
                            }
                        }
                    }
                    let used = tx.handle_input(now, &tx_pending)?;
                    if used == 0 {
                        break;
                    }
                    tx_pending.drain(..used);
                }
            }
        }
        if tx.is_done() {
            let sent = tx.outcome(Usage::default()).expect("outcome after the report");
            let received = rx.outcome().cloned().expect("receiver outcome");
            return Ok((sent, received, seen));
        }
    }
    panic!(
        "the session did not finish: receiver awaits {}, done {}, {} bytes pending; sender {} pending",
        rx.awaiting(),
        rx.is_done(),
        rx_pending.len(),
        tx_pending.len()
    );
}

#[test]
fn a_mismatching_gram_is_nakked_repaired_and_the_blob_fixed() {
    let truth = blob_bytes(1);
    for mode in [Mode::Offset, Mode::Arith] {
        for reading in [Reading::BetweenGrams, Reading::AfterComplete] {
            let cfg = sender_cfg(mode, 12);
            let mut bytes = truth.clone();
            let flipped = damage(&mut bytes, cfg.spec, &[3]);
            let blob = writable(&bytes);
            let (sent, received, seen) = run(
                &truth,
                writable_view(&blob),
                &cfg,
                &GramReceiverConfig::default(),
                reading,
                usize::MAX,
            )
            .unwrap();
            let what = format!("{mode:?} {reading:?}");
            let r = received.report;
            let c = received.corrections.expect("corrections block");
            assert_eq!((r.mismatched_grams, r.first_mismatch_seq), (1, 3), "{what}");
            assert_eq!((c.nak_grams, c.repaired_grams), (1, 1), "{what}");
            let gram3: u64 = gram_descs(cfg.spec, 3).iter().map(|d| u64::from(d.len)).sum();
            assert_eq!(c.repaired_bytes, gram3, "{what}");
            assert_eq!(r.integrity_ok, 1, "{what}: every mismatch repaired");
            assert_eq!(r.e2e_digest, sent.summary.e2e_digest, "{what}");
            assert_eq!(sent.report, r, "{what}: the sender prints the receiver's report");
            assert_eq!(sent.corrections, Some(c), "{what}");
            assert_eq!((seen.naks, seen.repairs, sent.repairs_sent), (1, 1, 1), "{what}");
            assert_eq!(sent.repair_bytes_sent, gram3, "{what}");
            assert_eq!(
                seen.report_len,
                Some(208),
                "{what}: report with its corrections block"
            );
            for &o in &flipped {
                assert_eq!(blob.as_slice()[o], truth[o], "{what}: byte {o} repaired");
            }
            assert!(
                blob.as_slice() == &truth[..],
                "{what}: the whole blob equals the sender's"
            );
            // The next session finds nothing to repair.
            let (_, again, seen) = run(
                &truth,
                writable_view(&blob),
                &cfg,
                &GramReceiverConfig::default(),
                reading,
                usize::MAX,
            )
            .unwrap();
            assert_eq!(again.report.mismatched_grams, 0, "{what}");
            assert_eq!(seen.naks, 0, "{what}");
        }
    }
}

#[test]
fn several_grams_repaired_with_any_delivery() {
    let truth = blob_bytes(2);
    for mode in [Mode::Offset, Mode::Arith] {
        for piece in [1, 7, 4096, usize::MAX] {
            let cfg = sender_cfg(mode, 10);
            let mut bytes = truth.clone();
            damage(&mut bytes, cfg.spec, &[0, 4, 5, 9]);
            let blob = writable(&bytes);
            let (sent, received, seen) = run(
                &truth,
                writable_view(&blob),
                &cfg,
                &GramReceiverConfig::default(),
                Reading::BetweenGrams,
                piece,
            )
            .unwrap();
            let what = format!("{mode:?} piece {piece}");
            let c = received.corrections.unwrap();
            assert_eq!(received.report.mismatched_grams, 4, "{what}");
            assert_eq!(c.repaired_grams, 4, "{what}");
            assert_eq!(seen.naks, 4, "{what}");
            assert_eq!(received.report.integrity_ok, 1, "{what}");
            assert_eq!(received.report.e2e_digest, sent.summary.e2e_digest, "{what}");
            assert!(blob.as_slice() == &truth[..], "{what}");
        }
    }
}

#[test]
fn payload_mode_repairs_from_the_slab_without_a_nak() {
    let truth = blob_bytes(3);
    let cfg = sender_cfg(Mode::Payload, 8);
    let mut bytes = truth.clone();
    damage(&mut bytes, cfg.spec, &[2, 6]);
    let blob = writable(&bytes);
    let (sent, received, seen) = run(
        &truth,
        writable_view(&blob),
        &cfg,
        &GramReceiverConfig::default(),
        Reading::BetweenGrams,
        1000,
    )
    .unwrap();
    let c = received.corrections.unwrap();
    assert_eq!(received.report.mismatched_grams, 2);
    assert_eq!((c.repaired_grams, c.nak_grams), (2, 0));
    assert_eq!((seen.naks, sent.repairs_sent), (0, 0));
    assert_eq!(received.report.integrity_ok, 1);
    assert!(blob.as_slice() == &truth[..]);
}

#[test]
fn no_repair_keeps_todays_behaviour() {
    let truth = blob_bytes(4);
    for mode in [Mode::Offset, Mode::Payload] {
        let cfg = sender_cfg(mode, 6);
        let mut bytes = truth.clone();
        damage(&mut bytes, cfg.spec, &[1]);
        let blob = writable(&bytes);
        let rcfg = GramReceiverConfig {
            repair: false,
            ..GramReceiverConfig::default()
        };
        let (sent, received, seen) = run(
            &truth,
            writable_view(&blob),
            &cfg,
            &rcfg,
            Reading::BetweenGrams,
            usize::MAX,
        )
        .unwrap();
        let c = received.corrections.unwrap();
        assert!(!c.repair());
        assert_eq!(received.report.mismatched_grams, 1);
        assert_eq!((c.repaired_grams, seen.naks, sent.repairs_sent), (0, 0, 0));
        assert_eq!(received.report.integrity_ok, 0);
        assert!(blob.as_slice() == &bytes[..], "the blob is left as it was");
    }
}

#[test]
fn a_sender_without_the_corrections_plane_gets_todays_session() {
    let truth = blob_bytes(5);
    let cfg = GramSenderConfig {
        corrections: false,
        ..sender_cfg(Mode::Offset, 6)
    };
    let mut bytes = truth.clone();
    damage(&mut bytes, cfg.spec, &[2]);
    let blob = writable(&bytes);
    let (sent, received, seen) = run(
        &truth,
        writable_view(&blob),
        &cfg,
        &GramReceiverConfig::default(),
        Reading::BetweenGrams,
        usize::MAX,
    )
    .unwrap();
    assert_eq!(received.corrections, None);
    assert_eq!(sent.corrections, None);
    assert_eq!(seen.report_len, Some(160), "the version-1 report");
    assert_eq!(
        (received.report.mismatched_grams, received.report.integrity_ok),
        (1, 0)
    );
    assert_eq!(seen.naks, 0);
    assert!(blob.as_slice() == &bytes[..]);
}

#[test]
fn a_receiver_without_a_writer_grants_no_repair() {
    let truth = blob_bytes(6);
    let cfg = sender_cfg(Mode::Offset, 4);
    let mut bytes = truth.clone();
    damage(&mut bytes, cfg.spec, &[0]);
    let (_, received, seen) = run(
        &truth,
        view(&bytes),
        &cfg,
        &GramReceiverConfig::default(),
        Reading::BetweenGrams,
        usize::MAX,
    )
    .unwrap();
    assert!(!received.corrections.unwrap().repair());
    assert_eq!((received.report.mismatched_grams, seen.naks), (1, 0));
}

#[test]
fn sampling_checks_one_gram_in_n_and_keeps_the_chain() {
    let truth = blob_bytes(7);
    for (ask, imposed, interval) in [(4, None, 4u16), (1, Some(3), 3), (16, Some(1), 1)] {
        let cfg = GramSenderConfig {
            integrity_sample: ask,
            ..sender_cfg(Mode::Offset, 10)
        };
        let rcfg = GramReceiverConfig {
            integrity_sample: imposed,
            ..GramReceiverConfig::default()
        };
        // Damage in gram 1 (checked only at interval 1) and gram 6
        // (checked at 1 and 3).
        let mut bytes = truth.clone();
        damage(&mut bytes, cfg.spec, &[1, 6]);
        let blob = writable(&bytes);
        let (sent, received, _) = run(
            &truth,
            writable_view(&blob),
            &cfg,
            &rcfg,
            Reading::BetweenGrams,
            usize::MAX,
        )
        .unwrap();
        let what = format!("ask {ask}, imposed {imposed:?}");
        let c = received.corrections.unwrap();
        let checked: Vec<u64> = (0..10).filter(|s| s % u64::from(interval) == 0).collect();
        assert_eq!(c.sample_interval, interval, "{what}");
        assert_eq!(c.checked_grams, checked.len() as u64, "{what}");
        let checked_bytes: u64 = checked
            .iter()
            .map(|&s| {
                gram_descs(cfg.spec, s)
                    .iter()
                    .map(|d| u64::from(d.len))
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(c.checked_bytes, checked_bytes, "{what}");
        let expect_mismatch = [1u64, 6].iter().filter(|s| checked.contains(s)).count() as u64;
        assert_eq!(received.report.mismatched_grams, expect_mismatch, "{what}");
        assert_eq!(c.repaired_grams, expect_mismatch, "{what}");
        // Both chains count the same grams and values: unchecked grams
        // carry 0 and are chained as such.
        assert_eq!(received.report.e2e_digest, sent.summary.e2e_digest, "{what}");
        assert_eq!(received.report.integrity_ok, 1, "{what}");
        assert_eq!(
            received.report.effective_bytes, sent.summary.effective_bytes,
            "{what}"
        );
    }
}

// ---------------------------------------------------------------------------
// Hostile frames

const NONCE: u64 = 9;

fn corrections_hello(mode: Mode) -> Vec<u8> {
    let mut body = Vec::new();
    Hello {
        mode,
        encoding: mode.encoding(),
        integrity: IntegrityAlg::Xxh3,
        auth_method: 0,
        flags: HELLO_CORRECTIONS,
        sample_interval: 0,
        max_desc_per_gram: 64,
        max_desc_len: 65536,
        blob_len: BLOB_LEN as u64,
        region_size: 1 << 20,
        fingerprint: [7; 32],
        session_nonce: NONCE,
        planned_bytes: 0,
        planned_grams: 0,
        auth: &[],
    }
    .emit(&mut body);
    let mut f = Vec::new();
    put_frame(&mut f, FrameType::Hello, 0, &body);
    f
}

/// A REPAIR frame: `head`, `ranges`, `payload` as given.
fn repair_frame(head: CorrectionHead, ranges: &[Descriptor], payload: &[u8], flags: u16) -> Vec<u8> {
    let mut body = head.emit().to_vec();
    ranges.iter().for_each(|&d| put_range(&mut body, d));
    body.extend_from_slice(payload);
    let mut f = Vec::new();
    put_frame(&mut f, FrameType::Repair, flags, &body);
    f
}

/// A receiver over a writable blob that got HELLO (with the corrections
/// plane) and gram 0 = `descs` with a wrong digest, so it NAKed gram 0.
/// Returns the receiver and the NAK it sent.
fn nakked<'b>(blob: &'b Blob, descs: &[Descriptor]) -> (GramReceiver<'b>, Vec<u8>) {
    let now = Instant::now();
    let mut rx = GramReceiver::new(writable_view(blob), &GramReceiverConfig::default(), now);
    let mut bytes = corrections_hello(Mode::Offset);
    bytes.extend(common::gram_frame(descs, &[], 0));
    let used = rx.handle_input(now, &bytes, &mut Discard).unwrap();
    let mut rest = bytes[used..].to_vec();
    drain_receiver(&mut rx, now, &mut rest).unwrap();
    assert!(rest.is_empty());
    let out = rx.poll_transmit().expect("HELLO_ACK and NAK").to_vec();
    rx.transmitted();
    let (ack, n) = pfs_wire::Frame::parse(&out).unwrap();
    let granted = HelloAck::parse(ack.body).unwrap();
    assert_eq!(granted.flags, ACK_CORRECTIONS | ACK_REPAIR);
    let (nak, _) = pfs_wire::Frame::parse(&out[n..]).unwrap();
    assert_eq!(nak.header.frame_type, FrameType::Nak);
    (rx, nak.body.to_vec())
}

fn feed(rx: &mut GramReceiver<'_>, bytes: &[u8]) -> Result<(), SessionError> {
    let mut pending = bytes.to_vec();
    drain_receiver(rx, Instant::now(), &mut pending)
}

#[test]
fn hostile_repairs_are_clean_protocol_errors() {
    let blob = writable(&blob_bytes(8));
    let descs = [
        Descriptor {
            offset: 4096,
            len: 100,
        },
        Descriptor { offset: 64, len: 28 },
    ];
    let (_, nak_body) = nakked(&blob, &descs);
    let nak = GramNak::parse(&nak_body).unwrap();
    assert_eq!(nak.head.seq, 0);
    assert_eq!(nak.head.bytes, 128);
    assert_eq!(nak.ranges.iter().collect::<Vec<_>>(), descs);
    let good_head = CorrectionHead {
        digest: 0,
        ..nak.head
    };
    let payload = [0u8; 128];

    let check = |frame: Vec<u8>, code: ErrorCode, what: &str| {
        let (mut rx, _) = nakked(&blob, &descs);
        let e = feed(&mut rx, &frame).expect_err(what);
        assert_eq!(e.code(), code, "{what}: {e}");
        e
    };
    // A REPAIR for a gram that was not NAKed.
    let e = check(
        repair_frame(CorrectionHead { seq: 5, ..good_head }, &descs, &payload, 0),
        ErrorCode::Protocol,
        "unasked seq",
    );
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::RepairUnasked {
                seq: 5,
                expected: Some(0)
            }))
        ),
        "{e}"
    );
    // Other ranges, same count and length.
    let other = [
        Descriptor {
            offset: 8192,
            len: 100,
        },
        Descriptor { offset: 64, len: 28 },
    ];
    let e = check(
        repair_frame(good_head, &other, &payload, 0),
        ErrorCode::Protocol,
        "other ranges",
    );
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::RepairRanges { seq: 0 }))
        ),
        "{e}"
    );
    // More bytes than the NAK named.
    let longer = [
        Descriptor {
            offset: 4096,
            len: 101,
        },
        Descriptor { offset: 64, len: 28 },
    ];
    check(
        repair_frame(
            CorrectionHead {
                bytes: 129,
                ..good_head
            },
            &longer,
            &[0u8; 129],
            0,
        ),
        ErrorCode::Protocol,
        "longer ranges",
    );
    // Trailing bytes after the payload its head declares.
    let e = check(
        repair_frame(good_head, &descs, &[0u8; 129], 0),
        ErrorCode::BadFrame,
        "too long",
    );
    assert!(
        matches!(
            e,
            SessionError::Malformed {
                context: "REPAIR",
                ..
            }
        ),
        "{e}"
    );
    // LAST belongs to files sessions.
    check(
        repair_frame(good_head, &descs, &payload, 1),
        ErrorCode::BadFrame,
        "flag LAST",
    );
    // A REPAIR before any NAK.
    let now = Instant::now();
    let mut rx = GramReceiver::new(writable_view(&blob), &GramReceiverConfig::default(), now);
    let mut bytes = corrections_hello(Mode::Offset);
    bytes.extend(repair_frame(good_head, &descs, &payload, 0));
    let e = feed(&mut rx, &bytes).unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::RepairUnasked {
                expected: None,
                ..
            }))
        ),
        "{e}"
    );
    // A gram after COMPLETE while a REPAIR is owed.
    let (mut rx, _) = nakked(&blob, &descs);
    let mut bytes = Vec::new();
    put_frame(
        &mut bytes,
        FrameType::Complete,
        0,
        &pfs_wire::SenderSummary::default().emit(),
    );
    bytes.extend(common::gram_frame(&descs, &[], 1));
    let e = feed(&mut rx, &bytes).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

#[test]
fn a_repair_with_another_digest_leaves_the_gram_unrepaired() {
    let truth = blob_bytes(9);
    let mut bytes = truth.clone();
    bytes[4100] ^= 1;
    let blob = writable(&bytes);
    let descs = [Descriptor {
        offset: 4096,
        len: 100,
    }];
    let (mut rx, nak_body) = nakked(&blob, &descs);
    let nak = GramNak::parse(&nak_body).unwrap();
    // The gram said digest 0 (common::gram_frame): the sender's bytes now
    // hash to something else, so nothing is written.
    let head = CorrectionHead {
        digest: 1,
        ..nak.head
    };
    let mut frames = repair_frame(head, &descs, &truth[4096..4196], 0);
    let summary = pfs_wire::SenderSummary {
        grams: 1,
        descriptors: 1,
        effective_bytes: 100,
        ..Default::default()
    };
    put_frame(&mut frames, FrameType::Complete, 0, &summary.emit());
    feed(&mut rx, &frames).unwrap();
    let out = rx.outcome().expect("report after the REPAIR");
    let c = out.corrections.unwrap();
    assert_eq!((c.nak_grams, c.repaired_grams), (1, 0));
    assert_eq!(out.report.integrity_ok, 0);
    assert_eq!(blob.as_slice()[4100], bytes[4100], "nothing written");
}

#[test]
fn the_report_waits_for_the_repairs_it_asked_for() {
    let truth = blob_bytes(10);
    let blob = writable(&truth);
    let descs = [Descriptor { offset: 0, len: 64 }];
    let (mut rx, nak_body) = nakked(&blob, &descs);
    let mut complete = Vec::new();
    put_frame(
        &mut complete,
        FrameType::Complete,
        0,
        &pfs_wire::SenderSummary::default().emit(),
    );
    feed(&mut rx, &complete).unwrap();
    assert!(!rx.is_done(), "no report while a NAK is unanswered");
    assert!(rx.poll_transmit().is_none());
    assert_eq!(rx.awaiting(), "REPAIR");
    // The sender answers: its digest (xxh3 of the range) differs from the
    // gram's 0, so the bytes are not written, but the NAK is answered.
    let nak = GramNak::parse(&nak_body).unwrap();
    let value = xxh3(&truth[..64]);
    feed(
        &mut rx,
        &repair_frame(
            CorrectionHead {
                digest: value,
                ..nak.head
            },
            &descs,
            &truth[..64],
            0,
        ),
    )
    .unwrap();
    assert!(rx.is_done());
    let report = rx.poll_transmit().expect("the report");
    let (f, _) = pfs_wire::Frame::parse(report).unwrap();
    assert_eq!(f.header.frame_type, FrameType::Complete);
    assert_eq!(f.body.len(), 208);
}

fn xxh3(bytes: &[u8]) -> u64 {
    let mut d = pfs_exec::Digest::new(IntegrityAlg::Xxh3);
    d.update(bytes);
    d.value()
}

#[test]
fn hostile_naks_are_refused_by_the_sender() {
    let truth = blob_bytes(11);
    let cfg = sender_cfg(Mode::Offset, 4);
    let now = Instant::now();
    let ack = |flags: u16| {
        let mut body = Vec::new();
        HelloAck {
            max_gram_body: 1 << 30,
            max_desc_count: 65536,
            max_table_len: 1 << 20,
            max_payload_len: 1 << 30,
            blob_len: BLOB_LEN as u64,
            page_size: 4096,
            backing: 2,
            auth_method: 0,
            flags,
            sample_interval: if flags == 0 { 0 } else { 1 },
            session_nonce: 42,
            auth: &[],
        }
        .emit(&mut body);
        let mut f = Vec::new();
        put_frame(&mut f, FrameType::HelloAck, 0, &body);
        f
    };
    let nak = |seq: u64, ranges: &[Descriptor]| {
        let head = CorrectionHead {
            seq,
            range_count: ranges.len() as u32,
            bytes: ranges.iter().map(|d| u64::from(d.len)).sum(),
            digest: 0,
        };
        let mut body = head.emit().to_vec();
        ranges.iter().for_each(|&d| put_range(&mut body, d));
        let mut f = Vec::new();
        put_frame(&mut f, FrameType::Nak, 0, &body);
        f
    };
    // A sender that sent two grams.
    let started = |flags: u16| {
        let mut tx = GramSender::new(view(&truth), &cfg).unwrap();
        tx.poll_transmit(now).unwrap().expect("HELLO");
        let a = ack(flags);
        assert_eq!(tx.handle_input(now, &a).unwrap(), a.len());
        for _ in 0..2 {
            tx.poll_transmit(now).unwrap().expect("a gram");
        }
        tx
    };
    let gram0 = gram_descs(cfg.spec, 0);
    let refused = |flags: u16, frame: Vec<u8>| -> SessionError {
        let mut tx = started(flags);
        tx.handle_input(now, &frame).expect_err("refused")
    };
    let granted = ACK_CORRECTIONS | ACK_REPAIR;
    // The sender's own gram 0, exactly: accepted, and answered first.
    let mut tx = started(granted);
    let f = nak(0, &gram0);
    assert_eq!(tx.handle_input(now, &f).unwrap(), f.len());
    let t = tx.poll_transmit(now).unwrap().expect("the REPAIR");
    assert_eq!(t.what(), "REPAIR");
    let mut bytes = Vec::new();
    t.append_to(&mut bytes);
    let (frame, _) = pfs_wire::Frame::parse(&bytes).unwrap();
    let repair = pfs_wire::corrections::GramRepair::parse(frame.body).unwrap();
    let mut expect = Vec::new();
    for d in &gram0 {
        expect.extend_from_slice(&truth[d.offset as usize..d.offset as usize + d.len as usize]);
    }
    assert_eq!(repair.payload, &expect[..]);
    assert_eq!(repair.head.digest, xxh3(&expect));
    // Twice: refused.
    let f = nak(0, &gram0);
    let e = tx.handle_input(now, &f).unwrap_err();
    assert!(e.to_string().contains("already NAKed"), "{e}");

    let cases: Vec<(Vec<u8>, &str)> = vec![
        (nak(7, &gram0), "no such gram"),
        (nak(0, &[Descriptor { offset: 0, len: 4096 }]), "not the gram's"),
        (nak(1, &gram0), "not the gram's"),
    ];
    for (frame, why) in cases {
        let e = refused(granted, frame);
        assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
        assert!(e.to_string().contains(why), "{e}");
    }
    // No REPAIR was granted: no NAK may come.
    let e = refused(ACK_CORRECTIONS, nak(0, &gram0));
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    // A HELLO_ACK with corrections flags to a sender that offered none.
    let mut tx = GramSender::new(
        view(&truth),
        &GramSenderConfig {
            corrections: false,
            ..cfg.clone()
        },
    )
    .unwrap();
    tx.poll_transmit(now).unwrap();
    let e = tx.handle_input(now, &ack(granted)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
}

#[test]
fn limits_leave_the_rest_counted_and_nothing_waits_forever() {
    let truth = blob_bytes(12);
    let cfg = sender_cfg(Mode::Offset, 12);
    let grams = [0, 2, 4, 6, 8, 10];
    for (reading, max_naks, budget, repaired) in [
        // Two NAKs unanswered at most, and the sender reads only after
        // COMPLETE: the first two are repaired, the others only counted.
        (Reading::AfterComplete, 2, 1 << 30, 2),
        // Answered between grams: the window never fills.
        (Reading::BetweenGrams, 2, 1 << 30, 6),
        // The byte budget runs out after the first gram's bytes.
        (Reading::BetweenGrams, 64, 1, 0),
    ] {
        let mut bytes = truth.clone();
        damage(&mut bytes, cfg.spec, &grams);
        let blob = writable(&bytes);
        let rcfg = GramReceiverConfig {
            max_nak_grams: max_naks,
            max_repair_bytes: budget,
            ..GramReceiverConfig::default()
        };
        let (sent, received, seen) =
            run(&truth, writable_view(&blob), &cfg, &rcfg, reading, usize::MAX).unwrap();
        let what = format!("{reading:?} naks {max_naks} budget {budget}");
        let c = received.corrections.unwrap();
        assert_eq!(received.report.mismatched_grams, 6, "{what}");
        assert_eq!(
            (c.repaired_grams, c.nak_grams, seen.naks),
            (repaired, repaired, repaired),
            "{what}"
        );
        let ok = repaired == 6;
        assert_eq!(received.report.integrity_ok, u8::from(ok), "{what}");
        // A gram counted but not NAKed chains this side's own digest.
        assert_eq!(
            received.report.e2e_digest == sent.summary.e2e_digest,
            ok,
            "{what}"
        );
    }
}

/// Connected transports of each kind, same process.
fn transport_pairs(
    dir: &std::path::Path,
) -> Vec<(
    Box<dyn pfs_transport::Transport>,
    Box<dyn pfs_transport::Transport>,
)> {
    use pfs_transport::{
        Listener, ShmConfig, ShmListener, ShmTransport, TcpConfig, TcpListener, TcpTransport, UdpConfig,
        UdpListener, UdpTransport, UnixTransport,
    };
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
        (Box::new(client), Box::new(server)),
        (Box::new(ua), Box::new(ub)),
        (Box::new(c), Box::new(s)),
        (Box::new(uc), Box::new(us)),
    ]
}

#[test]
fn repairs_work_over_every_transport() {
    let truth = blob_bytes(13);
    let dir = tempfile::tempdir().unwrap();
    // ~32 KiB per gram over a 1 MiB blob: a damaged byte is in a few
    // grams, so the mismatches stay under the 64 NAKs a receiver keeps
    // unanswered however late the sender looks (then all are repaired).
    let cfg = sender_cfg(Mode::Offset, 120);
    let grams: Vec<u64> = (0..120).step_by(15).collect();
    for (mut client, mut server) in transport_pairs(dir.path()) {
        let kind = client.kind();
        let mut bytes = truth.clone();
        damage(&mut bytes, cfg.spec, &grams);
        let blob = writable(&bytes);
        let (sent, received) = std::thread::scope(|s| {
            let view = writable_view(&blob);
            let rx = s.spawn(move || {
                pfs_session::receive_session(&mut server, &view, &GramReceiverConfig::default(), &mut |_| {})
            });
            let sent = pfs_session::send_session(&mut client, &common::view(&truth), &cfg, &mut |_| {});
            (sent, rx.join().unwrap())
        });
        let (sent, received) = (sent.unwrap(), received.unwrap());
        let c = received.corrections.unwrap();
        assert!(received.report.mismatched_grams >= grams.len() as u64, "{kind}");
        assert_eq!(c.repaired_grams, received.report.mismatched_grams, "{kind}");
        assert_eq!(sent.repairs_sent, c.nak_grams, "{kind}");
        assert_eq!(received.report.integrity_ok, 1, "{kind}");
        assert_eq!(sent.report, received.report, "{kind}");
        assert!(blob.as_slice() == &truth[..], "{kind}: the blob is the sender's");
    }
}
