//! Loom model of the ring protocol (`RUSTFLAGS="--cfg loom" cargo test -p
//! pfs-ipc --lib --release model`): every interleaving and every value a
//! relaxed load may return, for small rings. Checks that a published
//! record's payload is visible to the consumer (Release/Acquire on the
//! tag), that records arrive in order across wrap-around and PAD, that the
//! producer never overwrites an unreleased record, and that the futex
//! handshake cannot lose a wake-up (both sides' SeqCst fences).

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;

use crate::ring::{Consumer, Producer, KIND_DATA};
use crate::test_ring::WordRing as ModelRing;

#[test]
fn messages_arrive_in_order_with_their_payload() {
    loom::model(|| {
        // Two 64-byte slots: the third message needs the first released,
        // the 2-slot record forces a PAD at the end of the second lap.
        let ring = Arc::new(ModelRing::new(128));
        let lens = [8usize, 40, 8];
        let producer = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                let mut p = Producer::new(128, 0xabc);
                for (i, &len) in lens.iter().enumerate() {
                    let slot = loop {
                        match p.reserve(&*ring, len).unwrap() {
                            Some(s) => break s,
                            None => thread::yield_now(),
                        }
                    };
                    ring.words[slot.payload_off / 8].store(100 + i as u64, Ordering::Relaxed);
                    p.publish(&*ring, slot, KIND_DATA);
                }
            })
        };
        let mut c = Consumer::new(128, 0xabc);
        for (i, &len) in lens.iter().enumerate() {
            let rec = loop {
                match c.peek(&*ring).unwrap() {
                    Some(r) => break r,
                    None => thread::yield_now(),
                }
            };
            assert_eq!(rec.len, len);
            assert_eq!(
                ring.words[rec.payload_off / 8].load(Ordering::Relaxed),
                100 + i as u64
            );
            c.release(&*ring, rec);
        }
        producer.join().unwrap();
    });
}

#[test]
fn futex_handshake_never_loses_a_wakeup() {
    loom::model(|| {
        let ring = Arc::new(ModelRing::new(128));
        let producer = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                let mut p = Producer::new(128, 5);
                let slot = p.reserve(&*ring, 8).unwrap().unwrap();
                p.publish(&*ring, slot, KIND_DATA);
                p.consumer_needs_wake(&*ring)
            })
        };
        let c = Consumer::new(128, 5);
        // The consumer found nothing and decides whether to sleep.
        let sleeps = !c.announce_sleep(&*ring);
        let producer_wakes = producer.join().unwrap();
        // Sleeping with nobody to wake it would hang: must not happen.
        assert!(!sleeps || producer_wakes, "lost wake-up");
    });
}
