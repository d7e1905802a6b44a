//! The C streaming functions called from Rust as a C program would: bad
//! arguments are refused with a status and a message, a full window is
//! `PFS_STATUS_BACK_PRESSURE` with nothing lost, and the callback sees
//! every gram in order.

#![allow(unsafe_code)] // calling the C interface is unsafe by nature

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::mpsc;

use pfs_ffi::*;

fn last_error() -> String {
    // SAFETY: pfs_last_error returns a NUL-terminated string valid until the next failing call.
    unsafe { CStr::from_ptr(pfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn blob() -> *mut PfsBlob {
    let mut o = pfs_blob_options_default();
    o.size = 1 << 20;
    o.seed = 9;
    let mut b = ptr::null_mut();
    // SAFETY: valid options and out pointer.
    let st = unsafe { pfs_blob_open(&o, &mut b) };
    assert_eq!(st, PfsStatus::Ok, "{}", last_error());
    b
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    let mut l = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let st = unsafe { pfs_listener_bind(c"127.0.0.1:0".as_ptr(), &mut l) };
    assert_eq!(st, PfsStatus::InvalidArgument);
    assert!(last_error().contains("must start with tcp:"), "{}", last_error());
    let b = blob();
    let mut p = ptr::null_mut();
    // SAFETY: NULL target is what is being refused; the rest is valid.
    let st = unsafe { pfs_publication_connect(ptr::null(), b, ptr::null(), &mut p) };
    assert_eq!(st, PfsStatus::InvalidArgument);
    assert!(last_error().contains("address is NULL"));
    // SAFETY: NULL handles are refused, not dereferenced.
    let st = unsafe { pfs_publication_offer(ptr::null_mut(), ptr::null(), 0, ptr::null_mut()) };
    assert_eq!(st, PfsStatus::InvalidArgument);
    // SAFETY: a live blob, closed once.
    unsafe { pfs_blob_close(b) };
}

struct Seen {
    seqs: Vec<u64>,
    bytes: u64,
}

unsafe extern "C" fn on_gram(user: *mut c_void, seq: u64, entries: *const PfsEntry, n: usize) {
    // SAFETY: `user` is the `Seen` the poll was given; `entries` has `n` entries.
    let (seen, entries) = unsafe { (&mut *user.cast::<Seen>(), std::slice::from_raw_parts(entries, n)) };
    seen.seqs.push(seq);
    seen.bytes += entries.iter().map(|e| u64::from(e.len)).sum::<u64>();
}

#[test]
fn a_full_window_is_back_pressure_and_nothing_is_lost() {
    let (pub_blob, sub_blob) = (blob(), blob());
    let mut l = ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable out pointer.
    let st = unsafe { pfs_listener_bind(c"tcp:127.0.0.1:0".as_ptr(), &mut l) };
    assert_eq!(st, PfsStatus::Ok);
    let (go, wait) = mpsc::channel::<()>();
    let (l_addr, b_addr) = (l as usize, sub_blob as usize);
    let subscriber = std::thread::spawn(move || {
        let mut o = pfs_subscription_options_default();
        o.window_grams = 2;
        let mut s = ptr::null_mut();
        // SAFETY: live listener and blob handles, valid options, writable out.
        let st = unsafe {
            pfs_subscription_accept(l_addr as *const PfsListener, b_addr as *mut PfsBlob, &o, &mut s)
        };
        assert_eq!(st, PfsStatus::Ok, "{}", last_error());
        wait.recv().unwrap(); // the publisher has met a full window
        let mut seen = Seen {
            seqs: Vec::new(),
            bytes: 0,
        };
        let user = (&mut seen as *mut Seen).cast::<c_void>();
        loop {
            // SAFETY: a live subscription; `on_gram` keeps no pointer.
            match unsafe { pfs_subscription_poll(s, Some(on_gram), user, 1000, ptr::null_mut()) } {
                PfsStatus::Ok => {}
                PfsStatus::Ended => break,
                other => panic!("poll: {other:?}: {}", last_error()),
            }
        }
        let mut report = PfsSubscriptionReport::default();
        // SAFETY: a live subscription, closed once; a writable report.
        unsafe { pfs_subscription_close(s, &mut report) };
        (seen.seqs, seen.bytes, report.grams)
    });
    let mut p = ptr::null_mut();
    // SAFETY: the listener's endpoint string, a live blob, writable out.
    let st = unsafe { pfs_publication_connect(pfs_listener_endpoint(l), pub_blob, ptr::null(), &mut p) };
    assert_eq!(st, PfsStatus::Ok, "{}", last_error());
    let entry = PfsEntry {
        kind: PFS_ENTRY_REFERENCE,
        len: 100,
        offset: 4096,
        data: ptr::null(),
    };
    let bad = PfsEntry { kind: 9, ..entry };
    // SAFETY: a live publication and one entry.
    let st = unsafe { pfs_publication_offer(p, &bad, 1, ptr::null_mut()) };
    assert_eq!(st, PfsStatus::InvalidArgument);
    assert!(last_error().contains("kind 9"), "{}", last_error());
    let mut sent = 0u64;
    loop {
        let mut seq = u64::MAX;
        // SAFETY: a live publication, one entry, a writable seq.
        match unsafe { pfs_publication_offer(p, &entry, 1, &mut seq) } {
            PfsStatus::Ok => {
                assert_eq!(seq, sent);
                sent += 1;
            }
            PfsStatus::BackPressure => break,
            other => panic!("offer: {other:?}: {}", last_error()),
        }
        assert!(sent <= 2, "a window of 2 grams took {sent}");
    }
    go.send(()).unwrap();
    for _ in 0..5 {
        // SAFETY: a live publication and one entry.
        let st = unsafe { pfs_publication_offer_blocking(p, &entry, 1, 10_000, ptr::null_mut()) };
        assert_eq!(st, PfsStatus::Ok, "{}", last_error());
        sent += 1;
    }
    // SAFETY: a live publication.
    let st = unsafe { pfs_publication_wait_applied(p, sent - 1, 10_000) };
    assert_eq!(st, PfsStatus::Ok);
    let mut report = PfsPublicationReport::default();
    // SAFETY: a live publication, closed once; a writable report.
    let st = unsafe { pfs_publication_close(p, &mut report) };
    assert_eq!(st, PfsStatus::Ok, "{}", last_error());
    let (seqs, bytes, grams) = subscriber.join().unwrap();
    assert_eq!(seqs, (0..sent).collect::<Vec<_>>());
    assert_eq!(bytes, 100 * sent);
    assert_eq!((report.grams, report.applied, grams), (sent, sent, sent));
    assert!(report.back_pressure >= 1);
    assert_eq!(report.digests_matched, 1);
    // SAFETY: live handles, each closed once, after the streams that used them.
    unsafe {
        pfs_listener_close(l);
        pfs_blob_close(pub_blob);
        pfs_blob_close(sub_blob);
    }
}
