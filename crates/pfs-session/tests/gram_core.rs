//! The gram protocol's sans-I/O cores without sockets: sender and receiver
//! wired to each other in one thread, every byte delivered in pieces down to
//! one byte, and hostile input fed straight to the receiver. Time is a
//! value the test moves, so deadlines are tested without waiting.

use std::time::{Duration, Instant};

use pfs_exec::{Pattern, ScheduleSpec, Total};
use pfs_session::framing::Transmit;
use pfs_session::gram::receiver::Discard;
use pfs_session::gram::{
    GramReceiver, GramReceiverConfig, GramReceiverEvent, GramSender, GramSenderConfig, GramSenderEvent,
    GramViolation,
};
use pfs_session::{HelloRejection, SessionError, Timeout, Violation};
use pfs_sys::Usage;
use pfs_wire::{put_frame, Descriptor, ErrorCode, FrameType, IntegrityAlg, Mode};

const BLOB_LEN: usize = 1 << 20;

mod common;
use common::{gram_frame as gram, hello_frame as hello, view};

fn blob_bytes(seed: u64) -> Vec<u8> {
    common::blob_bytes(seed, BLOB_LEN)
}

fn sender_cfg(mode: Mode, integrity: IntegrityAlg, grams: u64) -> GramSenderConfig {
    GramSenderConfig {
        mode,
        integrity,
        spec: ScheduleSpec {
            seed: 3,
            desc_per_gram: 16,
            max_len: 4096,
            align: 64,
            pattern: if mode == Mode::Arith {
                Pattern::Sequential
            } else {
                Pattern::Random
            },
            total: Total::Grams(grams),
            blob_len: BLOB_LEN as u64,
        },
        reply_timeout: Duration::from_secs(5),
        log_interval: None,
        session_nonce: 42,
        // Small, so payload-mode batches are cut into several grams.
        payload_budget: 8192,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
    }
}

/// Bytes of a transmit, as a socket would carry them.
fn flatten(tx: Transmit<'_>, out: &mut Vec<u8>) {
    tx.append_to(out);
}

/// Delivers `wire` to the receiver `piece` bytes at a time, keeping what it
/// did not consume (as a receive buffer would).
fn feed_receiver(
    rx: &mut GramReceiver<'_>,
    now: Instant,
    pending: &mut Vec<u8>,
    wire: &mut Vec<u8>,
    piece: usize,
) -> Result<(), SessionError> {
    while !wire.is_empty() {
        let k = piece.min(wire.len());
        pending.extend(wire.drain(..k));
        let used = rx.handle_input(now, pending, &mut Discard)?;
        pending.drain(..used);
        while let Some(ev) = rx.poll_event() {
            if let GramReceiverEvent::Summary = ev {
                rx.finish(now, Usage::default(), 0);
            }
        }
        // A unit may complete with bytes to spare: keep consuming them.
        loop {
            if pending.is_empty() || rx.is_done() {
                break;
            }
            let used = rx.handle_input(now, pending, &mut Discard)?;
            if used == 0 {
                break;
            }
            pending.drain(..used);
            while let Some(ev) = rx.poll_event() {
                if let GramReceiverEvent::Summary = ev {
                    rx.finish(now, Usage::default(), 0);
                }
            }
        }
    }
    Ok(())
}

/// Runs a whole session between the two cores with `piece`-byte delivery.
fn run_pair(
    sender_blob: &[u8],
    receiver_blob: &[u8],
    cfg: &GramSenderConfig,
    piece: usize,
) -> Result<(pfs_session::GramSenderOutcome, pfs_session::GramReceiverOutcome), SessionError> {
    let now = Instant::now();
    let mut tx = GramSender::new(view(sender_blob), cfg)?;
    let mut rx = GramReceiver::new(view(receiver_blob), &GramReceiverConfig::default(), now);
    let (mut s2r, mut r2s) = (Vec::new(), Vec::new());
    let (mut rx_pending, mut tx_pending) = (Vec::new(), Vec::new());
    for _ in 0..100_000 {
        while let Some(t) = tx.poll_transmit(now)? {
            flatten(t, &mut s2r);
        }
        while tx.poll_event().is_some() {}
        feed_receiver(&mut rx, now, &mut rx_pending, &mut s2r, piece)?;
        if let Some(bytes) = rx.poll_transmit() {
            r2s.extend_from_slice(bytes);
            rx.transmitted();
        }
        while !r2s.is_empty() {
            let k = piece.min(r2s.len());
            tx_pending.extend(r2s.drain(..k));
            let used = tx.handle_input(now, &tx_pending)?;
            tx_pending.drain(..used);
        }
        if tx.is_done() {
            let sent = tx.outcome(Usage::default()).expect("outcome after the report");
            let received = rx.outcome().cloned().expect("receiver outcome");
            return Ok((sent, received));
        }
    }
    panic!("the session did not finish");
}

#[test]
fn cores_complete_every_mode_with_any_delivery() {
    let blob = blob_bytes(1);
    for mode in [Mode::Payload, Mode::Offset, Mode::Arith] {
        for alg in [IntegrityAlg::Xxh3, IntegrityAlg::Fnv1a] {
            let cfg = sender_cfg(mode, alg, 6);
            let mut reports = Vec::new();
            for piece in [1, 7, 4096, usize::MAX] {
                let (sent, received) = run_pair(&blob, &blob, &cfg, piece).unwrap();
                let r = sent.report;
                assert_eq!(r, received.report, "{mode:?} {alg:?} piece {piece}");
                assert_eq!(r.integrity_ok, 1, "{mode:?} {alg:?} piece {piece}");
                assert_eq!(r.grams, sent.summary.grams);
                assert_eq!(r.descriptors, sent.summary.descriptors);
                assert_eq!(r.effective_bytes, sent.summary.effective_bytes);
                assert_eq!(r.e2e_digest, sent.summary.e2e_digest);
                assert_eq!(r.mismatched_grams, 0);
                if mode == Mode::Payload {
                    assert_eq!(r.payload_bytes, r.effective_bytes);
                    // The 8 KiB budget cuts each 16-descriptor batch into several grams.
                    assert!(r.grams > 6, "{} grams", r.grams);
                } else {
                    assert_eq!(r.payload_bytes, 0);
                    assert_eq!(r.grams, 6);
                }
                // Wire bytes: both directions, the same however they were cut.
                reports.push((r.wire_bytes, r.e2e_digest));
            }
            assert!(reports.windows(2).all(|w| w[0] == w[1]), "{reports:?}");
        }
    }
}

#[test]
fn a_flipped_receiver_byte_is_a_mismatch_in_every_mode() {
    let blob = blob_bytes(2);
    for mode in [Mode::Payload, Mode::Offset, Mode::Arith] {
        let cfg = sender_cfg(mode, IntegrityAlg::Xxh3, 8);
        // Every descriptor of a sequential schedule starts at or after 0:
        // flip a byte each gram will have touched somewhere in the blob.
        let (clean, _) = run_pair(&blob, &blob, &cfg, 1 << 16).unwrap();
        assert_eq!(clean.report.mismatched_grams, 0);
        let mut damaged = blob.clone();
        for b in damaged.iter_mut() {
            *b ^= 0x5a;
        }
        let (sent, received) = run_pair(&blob, &damaged, &cfg, 1 << 16).unwrap();
        assert_eq!(sent.report.integrity_ok, 0, "{mode:?}");
        assert_eq!(
            received.report.mismatched_grams, received.report.grams,
            "{mode:?}"
        );
        assert_eq!(received.report.first_mismatch_seq, 0);
    }
}

/// Feeds `bytes` one at a time to a fresh receiver; returns the error it ends with.
fn hostile(blob: &[u8], bytes: &[u8]) -> SessionError {
    let now = Instant::now();
    let mut rx = GramReceiver::new(view(blob), &GramReceiverConfig::default(), now);
    let mut pending = Vec::new();
    for &b in bytes {
        pending.push(b);
        match rx.handle_input(now, &pending, &mut Discard) {
            Ok(used) => {
                pending.drain(..used);
            }
            Err(e) => return e,
        }
        while rx.poll_event().is_some() {}
    }
    panic!("the receiver accepted every byte");
}

fn code(e: &SessionError) -> ErrorCode {
    e.code()
}

#[test]
fn hostile_input_ends_the_session_with_the_right_error() {
    let blob = blob_bytes(3);
    let ok_hello = hello(Mode::Offset, BLOB_LEN as u64, [7; 32]);

    // Garbage instead of a frame header.
    let e = hostile(&blob, &[0xAB; 64]);
    assert!(
        matches!(
            e,
            SessionError::Malformed {
                context: "frame header",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(code(&e), ErrorCode::BadFrame);

    // A gram before HELLO.
    let e = hostile(&blob, &gram(&[Descriptor { offset: 0, len: 8 }], &[], 0));
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::UnexpectedFrame {
                expected: "HELLO",
                got: FrameType::Gram
            })
        ),
        "{e}"
    );
    assert_eq!(code(&e), ErrorCode::Protocol);

    // Another blob.
    let e = hostile(&blob, &hello(Mode::Offset, BLOB_LEN as u64, [8; 32]));
    assert!(
        matches!(e, SessionError::Rejected(HelloRejection::Fingerprint { .. })),
        "{e}"
    );
    assert_eq!(code(&e), ErrorCode::BlobMismatch);
    let e = hostile(&blob, &hello(Mode::Offset, 4096, [7; 32]));
    assert!(
        matches!(
            e,
            SessionError::Rejected(HelloRejection::BlobSize { sender: 4096, .. })
        ),
        "{e}"
    );

    // A descriptor past the end of the blob.
    let mut bytes = ok_hello.clone();
    bytes.extend(gram(
        &[Descriptor {
            offset: BLOB_LEN as u64 - 4,
            len: 8,
        }],
        &[],
        0,
    ));
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::Descriptor { seq: 0, .. }))
        ),
        "{e}"
    );
    assert_eq!(code(&e), ErrorCode::OutOfBounds);

    // Out of sequence.
    let mut bytes = ok_hello.clone();
    bytes.extend(gram(&[Descriptor { offset: 0, len: 8 }], &[], 0));
    bytes.extend(gram(&[Descriptor { offset: 0, len: 8 }], &[], 5));
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::Sequence { got: 5, expected: 1 }))
        ),
        "{e}"
    );

    // Payload in offset-only mode.
    let mut bytes = ok_hello.clone();
    bytes.extend(gram(&[Descriptor { offset: 0, len: 8 }], &[1; 8], 0));
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::PayloadInMode { .. }))
        ),
        "{e}"
    );

    // Payload mode: descriptors naming more bytes than the slab, and fewer.
    let payload_hello = hello(Mode::Payload, BLOB_LEN as u64, [7; 32]);
    let mut bytes = payload_hello.clone();
    bytes.extend(gram(&[Descriptor { offset: 0, len: 16 }], &[0; 8], 0));
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::PayloadShort { seq: 0, len: 8 }))
        ),
        "{e}"
    );
    let mut bytes = payload_hello;
    bytes.extend(gram(&[Descriptor { offset: 0, len: 8 }], &[0; 16], 0));
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(
            e,
            SessionError::Violation(Violation::Gram(GramViolation::PayloadLeftOver {
                seq: 0,
                left: 8
            }))
        ),
        "{e}"
    );

    // A frame type that has no place in a gram session.
    let mut bytes = ok_hello;
    put_frame(&mut bytes, FrameType::Nak, 0, &[]);
    let e = hostile(&blob, &bytes);
    assert!(
        matches!(e, SessionError::Violation(Violation::UnexpectedFrame { .. })),
        "{e}"
    );
}

#[test]
fn deadlines_are_the_cores_and_need_no_clock() {
    let blob = blob_bytes(4);
    let t0 = Instant::now();
    let cfg = GramReceiverConfig {
        handshake_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        ..GramReceiverConfig::default()
    };
    let mut rx = GramReceiver::new(view(&blob), &cfg, t0);
    // The first byte may take the idle timeout (the sender sets up its blob
    // after connecting) ...
    assert_eq!(rx.poll_timeout(), Some(t0 + Duration::from_secs(60)));
    // ... and from it, the whole HELLO has the handshake timeout: half a
    // HELLO at t0 + 1 s must be whole by t0 + 11 s.
    let h = hello(Mode::Offset, BLOB_LEN as u64, [7; 32]);
    let used = rx
        .handle_input(t0 + Duration::from_secs(1), &h[..20], &mut Discard)
        .unwrap();
    assert_eq!(used, 16, "the frame header is consumed, the body waits");
    assert_eq!(rx.poll_timeout(), Some(t0 + Duration::from_secs(11)));
    assert!(rx.handle_timeout(t0 + Duration::from_secs(10)).is_ok());
    let e = rx.handle_timeout(t0 + Duration::from_secs(11)).unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::TimedOut {
                what: Timeout::Idle { during: "HELLO", .. }
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("deadline"), "{e}");

    // After HELLO the idle timeout runs from the end of each frame; a gram
    // gets one more second per MB of frame.
    let mut rx = GramReceiver::new(view(&blob), &cfg, t0);
    let t1 = t0 + Duration::from_secs(2);
    assert_eq!(rx.handle_input(t1, &h, &mut Discard).unwrap(), h.len());
    assert!(matches!(
        rx.poll_event(),
        Some(GramReceiverEvent::Accepted { nonce: 9 })
    ));
    assert!(rx.poll_transmit().is_some(), "HELLO_ACK queued");
    assert_eq!(rx.poll_timeout(), Some(t1 + Duration::from_secs(60)));

    // The sender's reply deadline.
    let scfg = sender_cfg(Mode::Offset, IntegrityAlg::Xxh3, 1);
    let mut tx = GramSender::new(view(&blob), &scfg).unwrap();
    assert!(tx.poll_transmit(t0).unwrap().is_some());
    assert!(
        tx.poll_transmit(t0).unwrap().is_none(),
        "nothing more before HELLO_ACK"
    );
    assert!(tx.handle_timeout(t0 + Duration::from_secs(4)).is_ok());
    let e = tx.handle_timeout(t0 + Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::TimedOut {
                what: Timeout::Reply {
                    during: "HELLO_ACK",
                    ..
                }
            }
        ),
        "{e}"
    );
    assert!(matches!(
        tx.poll_event(),
        None | Some(GramSenderEvent::Progress(_))
    ));
}

#[test]
fn the_receivers_error_frame_reaches_the_sender_as_a_refusal() {
    let blob = blob_bytes(5);
    let other = {
        let mut b = blob.clone();
        b[0] ^= 1;
        b
    };
    let now = Instant::now();
    let cfg = sender_cfg(Mode::Offset, IntegrityAlg::Xxh3, 2);
    let mut tx = GramSender::new(view(&blob), &cfg).unwrap();
    let mut rv = view(&other);
    rv.fingerprint = [9; 32];
    let mut rx = GramReceiver::new(rv, &GramReceiverConfig::default(), now);
    let mut wire = Vec::new();
    flatten(tx.poll_transmit(now).unwrap().unwrap(), &mut wire);
    let err = rx.handle_input(now, &wire, &mut Discard).unwrap_err();
    assert!(err.tell_peer());
    let mut frame = Vec::new();
    pfs_session::framing::put_error(&mut frame, &err);
    let refused = tx.handle_input(now, &frame).unwrap_err();
    match refused {
        SessionError::Refused { code, message } => {
            assert_eq!(code, ErrorCode::BlobMismatch as u16);
            assert!(message.contains("fingerprint differs"), "{message}");
        }
        other => panic!("expected a refusal, got {other}"),
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Whatever follows a valid HELLO, in whatever pieces, the receiver core
    /// returns an error or waits for more: it never panics, and it never
    /// consumes more than it was given.
    #[test]
    fn arbitrary_bytes_after_hello_never_panic(
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        piece in 1usize..64,
        payload_mode in proptest::prelude::any::<bool>(),
    ) {
        let blob = vec![0u8; BLOB_LEN];
        let now = Instant::now();
        let mode = if payload_mode { Mode::Payload } else { Mode::Offset };
        let mut bytes = hello(mode, BLOB_LEN as u64, [7; 32]);
        bytes.extend_from_slice(&tail);
        let mut rx = GramReceiver::new(view(&blob), &GramReceiverConfig::default(), now);
        let mut pending = Vec::new();
        for chunk in bytes.chunks(piece) {
            pending.extend_from_slice(chunk);
            match rx.handle_input(now, &pending, &mut Discard) {
                Ok(used) => {
                    proptest::prop_assert!(used <= pending.len());
                    pending.drain(..used);
                }
                Err(_) => break,
            }
            while rx.poll_event().is_some() {}
        }
    }
}

#[test]
fn bytes_of_a_hello_header_trickling_in_do_not_move_its_deadline() {
    let blob = blob_bytes(6);
    let t0 = Instant::now();
    let cfg = GramReceiverConfig::default();
    let mut rx = GramReceiver::new(view(&blob), &cfg, t0);
    let h = hello(Mode::Offset, BLOB_LEN as u64, [7; 32]);
    // Three bytes of the 16-byte frame header, seconds apart: the header is
    // never whole, and the deadline stays the one the first byte set.
    let first = t0 + Duration::from_secs(1);
    for (i, at) in [1u64, 4, 8].into_iter().enumerate() {
        let used = rx
            .handle_input(t0 + Duration::from_secs(at), &h[..=i], &mut Discard)
            .unwrap();
        assert_eq!(used, 0);
        assert_eq!(rx.poll_timeout(), Some(first + cfg.handshake_timeout));
    }
}

/// A GRAM's declared length buys no time (it did: 1 s per MB of a frame
/// up to 1 GiB let a trickling client hold a slot for 18 minutes); the
/// bytes that arrive earn it, 1 s per MB.
#[test]
fn a_declared_large_gram_earns_no_time_only_its_bytes_do() {
    let blob = blob_bytes(6);
    let t0 = Instant::now();
    let cfg = GramReceiverConfig {
        idle_timeout: Duration::from_secs(60),
        ..GramReceiverConfig::default()
    };
    let mut rx = GramReceiver::new(view(&blob), &cfg, t0);
    let h = hello(Mode::Payload, BLOB_LEN as u64, [7; 32]);
    assert_eq!(rx.handle_input(t0, &h, &mut Discard).unwrap(), h.len());
    let t1 = t0 + Duration::from_secs(1);
    // The frame header of a 1 GiB GRAM arrives, then nothing more.
    let g = pfs_wire::FrameHeader {
        frame_type: FrameType::Gram,
        flags: 0,
        length: 1 << 30,
    }
    .emit();
    let used = rx.handle_input(t1, &g[..16], &mut Discard).unwrap();
    assert_eq!(used, 16);
    assert_eq!(
        rx.poll_timeout(),
        Some(t0 + Duration::from_secs(60)),
        "no allowance"
    );
    assert!(rx.handle_timeout(t0 + Duration::from_secs(60)).is_err());
}
