//! Built-in kernels against their scalar references (property tests over
//! random blobs and schedules) and against published / hand-computed values.

use core::ops::Range;

use pfs_exec::kernel::{
    reference, reference_in_place, Acc, Kernel, KernelError, KernelId, Output, CHUNK_DESCS,
};
use proptest::prelude::*;

/// Runs `id` over `ranges` of `blob` the way the executor does: chunks of
/// `CHUNK_DESCS` descriptors, a fresh `Acc` per chunk, combined in chunk
/// order (one `Acc` for the whole stream for fnv1a64). `first_as_total`
/// starts the running result from the first chunk instead of a fresh
/// `acc()`. Returns the result and the gathered bytes.
fn drive(id: KernelId, blob: &mut [u8], ranges: &[Range<usize>], first_as_total: bool) -> (Output, Vec<u8>) {
    let k = Kernel::new(id);
    let mut out = Vec::new();
    let mut feed = |acc: &mut Acc, r: &Range<usize>| {
        if id.in_place() {
            k.update_mut(acc, &mut blob[r.clone()]);
        } else if id == KernelId::Gather {
            k.gather_into(acc, &blob[r.clone()], &mut out);
        } else {
            k.update(acc, &blob[r.clone()]);
        }
    };
    let total = if id.shardable() {
        let mut total: Option<Acc> = if first_as_total { None } else { Some(k.acc()) };
        for chunk in ranges.chunks(CHUNK_DESCS) {
            let mut acc = k.acc();
            for r in chunk {
                feed(&mut acc, r);
            }
            match total.as_mut() {
                Some(t) => k.combine(t, acc),
                None => total = Some(acc),
            }
        }
        total.unwrap_or_else(|| k.acc())
    } else {
        let mut acc = k.acc();
        for r in ranges {
            feed(&mut acc, r);
        }
        acc
    };
    (k.finish(total), out)
}

/// A blob of up to 64 KiB and up to 300 descriptors inside it: zero-length,
/// unaligned and overlapping ones included.
fn blob_and_ranges() -> impl Strategy<Value = (Vec<u8>, Vec<Range<usize>>)> {
    (1usize..65_536, any::<u64>()).prop_flat_map(|(len, seed)| {
        let blob: Vec<u8> = {
            let mut x = seed | 1;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skew towards a few values so count/histogram see repeats.
                    let b = (x >> 56) as u8;
                    if x & 3 == 0 {
                        b & 3
                    } else {
                        b
                    }
                })
                .collect()
        };
        let range = (0..=len, 0usize..=4096, 0u8..8).prop_map(move |(start, want, kind)| {
            let room = len - start;
            let n = match kind {
                0 => 0,
                1 => want.min(room) % 9,
                _ => want.min(room),
            };
            start..start + n
        });
        (Just(blob), prop::collection::vec(range, 0..300))
    })
}

fn check(id: KernelId, blob: &[u8], ranges: &[Range<usize>]) -> Result<(), TestCaseError> {
    let mut want_blob = blob.to_vec();
    let want = reference_in_place(id, &mut want_blob, ranges);
    for first_as_total in [false, true] {
        let mut got_blob = blob.to_vec();
        let (got, gathered) = drive(id, &mut got_blob, ranges, first_as_total);
        prop_assert_eq!(&got, &want, "{} first_as_total={}", id, first_as_total);
        prop_assert!(got_blob == want_blob, "{}: blob differs after execution", id);
        if id == KernelId::Gather {
            let concat: Vec<u8> = ranges
                .iter()
                .flat_map(|r| blob[r.clone()].iter().copied())
                .collect();
            prop_assert!(gathered == concat, "gather: output differs");
        } else {
            prop_assert!(gathered.is_empty());
        }
    }
    // Without overlaps, the in-place reference over the original slices agrees.
    if id.in_place() && !overlapping(ranges) {
        let descs: Vec<&[u8]> = ranges.iter().map(|r| &blob[r.clone()]).collect();
        prop_assert_eq!(reference(id, &descs), want);
    }
    Ok(())
}

fn overlapping(ranges: &[Range<usize>]) -> bool {
    let mut rs: Vec<&Range<usize>> = ranges.iter().filter(|r| !r.is_empty()).collect();
    rs.sort_by_key(|r| r.start);
    rs.windows(2).any(|w| w[1].start < w[0].end)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fnv1a64_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::Fnv1a64, &blob, &ranges)?;
    }

    #[test]
    fn xxh3_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::Xxh3, &blob, &ranges)?;
    }

    #[test]
    fn crc32c_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::Crc32c, &blob, &ranges)?;
    }

    #[test]
    fn sum_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::SumU64, &blob, &ranges)?;
    }

    #[test]
    fn count_matches_reference((blob, ranges) in blob_and_ranges(), needle in prop_oneof![Just(0u8), Just(1), any::<u8>()]) {
        check(KernelId::CountByte(needle), &blob, &ranges)?;
    }

    #[test]
    fn histogram_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::Histogram, &blob, &ranges)?;
    }

    #[test]
    fn xor_matches_reference((blob, ranges) in blob_and_ranges(), k: u8) {
        check(KernelId::XorImm(k), &blob, &ranges)?;
    }

    #[test]
    fn add_matches_reference((blob, ranges) in blob_and_ranges(), k: u8) {
        check(KernelId::AddImm(k), &blob, &ranges)?;
    }

    #[test]
    fn gather_matches_reference((blob, ranges) in blob_and_ranges()) {
        check(KernelId::Gather, &blob, &ranges)?;
    }

    /// `update` on an in-place kernel is a dry run over the original bytes
    /// (the blob is only borrowed), overlapping descriptors included.
    #[test]
    fn in_place_update_is_a_dry_run((blob, ranges) in blob_and_ranges(), k: u8, add: bool) {
        let id = if add { KernelId::AddImm(k) } else { KernelId::XorImm(k) };
        let kernel = Kernel::new(id);
        let mut total = kernel.acc();
        for chunk in ranges.chunks(CHUNK_DESCS) {
            let mut acc = kernel.acc();
            for r in chunk {
                kernel.update(&mut acc, &blob[r.clone()]);
            }
            kernel.combine(&mut total, acc);
        }
        let descs: Vec<&[u8]> = ranges.iter().map(|r| &blob[r.clone()]).collect();
        prop_assert_eq!(kernel.finish(total), reference(id, &descs));
    }

    #[test]
    fn names_round_trip(k: u8, b: u8) {
        for id in [KernelId::CountByte(b), KernelId::XorImm(k), KernelId::AddImm(k)] {
            prop_assert_eq!(KernelId::parse(&id.name()).unwrap(), id);
        }
    }
}

fn one(id: KernelId, descs: &[&[u8]]) -> Output {
    let blob: Vec<u8> = descs.concat();
    let mut ranges = Vec::new();
    let mut at = 0;
    for d in descs {
        ranges.push(at..at + d.len());
        at += d.len();
    }
    let mut b = blob.clone();
    let (got, _) = drive(id, &mut b, &ranges, false);
    assert_eq!(got, reference(id, descs), "{id}");
    got
}

#[test]
fn known_values() {
    assert_eq!(one(KernelId::Fnv1a64, &[b"a"]), Output::U64(0xaf63dc4c8601ec8c));
    assert_eq!(
        one(KernelId::Fnv1a64, &[b"foo", b"", b"bar"]),
        Output::U64(0x85944171f73967e8)
    );
    assert_eq!(one(KernelId::Fnv1a64, &[]), Output::U64(0xcbf29ce484222325));
    assert_eq!(one(KernelId::Crc32c, &[b"123456789"]), Output::U64(0xe3069283));
    assert_eq!(
        one(KernelId::Crc32c, &[b"1234", b"", b"56789"]),
        Output::U64(0xe3069283)
    );
    assert_eq!(one(KernelId::Crc32c, &[]), Output::U64(0));
    let words: Vec<u8> = [1u64, 2, 3].iter().flat_map(|w| w.to_le_bytes()).collect();
    assert_eq!(one(KernelId::SumU64, &[&words]), Output::U64(6));
    // Tails are zero-padded per descriptor: [1] + [2, 0, 0, 0, 0, 0, 0, 0, 3]
    // = 1 + 2 + 3 (the 9-byte descriptor's tail byte 3 is its second word).
    assert_eq!(
        one(KernelId::SumU64, &[&[1], &[2, 0, 0, 0, 0, 0, 0, 0, 3]]),
        Output::U64(6)
    );
    assert_eq!(one(KernelId::SumU64, &[&[0, 1]]), Output::U64(256));
    assert_eq!(
        one(KernelId::SumU64, &[&[0xff; 16]]),
        Output::U64(u64::MAX.wrapping_mul(2))
    );
    assert_eq!(
        one(KernelId::CountByte(b'a'), &[b"banana", b"", b"aa"]),
        Output::U64(5)
    );
    assert_eq!(one(KernelId::CountByte(0), &[b"banana"]), Output::U64(0));
    let mut h = vec![0u64; 256];
    h[usize::from(b'a')] = 3;
    h[usize::from(b'b')] = 1;
    h[usize::from(b'n')] = 2;
    assert_eq!(one(KernelId::Histogram, &[b"ban", b"ana"]), Output::Histogram(h));
    assert_eq!(one(KernelId::Histogram, &[]), Output::Histogram(vec![0; 256]));
    // One chunk: the chained value is one fold step over XXH3 of the bytes.
    let h = twox_hash::XxHash3_64::oneshot(b"abcdef");
    let chained = twox_hash::XxHash3_64::oneshot_with_seed(0, &h.to_le_bytes());
    assert_eq!(one(KernelId::Xxh3, &[b"abc", b"def"]), Output::U64(chained));
    assert_eq!(one(KernelId::Xxh3, &[]), Output::U64(0));
    assert_eq!(one(KernelId::Xxh3, &[b"", b""]), Output::U64(0));
    assert_eq!(
        one(KernelId::Gather, &[b"abc", b"def"]),
        Output::Bytes {
            bytes: 6,
            xxh3: chained
        }
    );
    let hx = twox_hash::XxHash3_64::oneshot(&[b'a' ^ 0x20, b'b' ^ 0x20]);
    assert_eq!(
        one(KernelId::XorImm(0x20), &[b"ab"]),
        Output::Bytes {
            bytes: 2,
            xxh3: twox_hash::XxHash3_64::oneshot_with_seed(0, &hx.to_le_bytes())
        }
    );
}

#[test]
fn chunks_fold_in_order() {
    // 65 one-byte descriptors: two chunks, [0..64) and [64].
    let blob: Vec<u8> = (0..65u8).collect();
    let h0 = twox_hash::XxHash3_64::oneshot(&blob[..64]);
    let h1 = twox_hash::XxHash3_64::oneshot(&blob[64..]);
    let r = twox_hash::XxHash3_64::oneshot_with_seed(0, &h0.to_le_bytes());
    let r = twox_hash::XxHash3_64::oneshot_with_seed(r, &h1.to_le_bytes());
    let descs: Vec<&[u8]> = blob.chunks(1).collect();
    assert_eq!(one(KernelId::Xxh3, &descs), Output::U64(r));
    // A chunk with no bytes is skipped by the fold.
    let mut descs2: Vec<&[u8]> = blob[..64].chunks(1).collect();
    descs2.extend([&[][..]; 64]);
    descs2.push(&blob[64..]);
    assert_eq!(one(KernelId::Xxh3, &descs2), Output::U64(r));
}

#[test]
fn in_place_overlaps_apply_once_each() {
    let mut blob = vec![1u8, 2, 3, 4];
    let (got, _) = drive(KernelId::AddImm(10), &mut blob, &[0..3, 1..4, 2..2], false);
    assert_eq!(blob, [11, 22, 23, 14]);
    let mut b2 = vec![1u8, 2, 3, 4];
    assert_eq!(
        got,
        reference_in_place(KernelId::AddImm(10), &mut b2, &[0..3, 1..4, 2..2])
    );
    let mut blob = vec![1u8, 2, 3, 4];
    drive(KernelId::XorImm(0xff), &mut blob, &[0..4, 0..4], false);
    assert_eq!(blob, [1, 2, 3, 4]);
}

#[test]
fn fnv1a64_refuses_to_combine_two_streams() {
    let k = Kernel::new(KernelId::Fnv1a64);
    let mut a = k.acc();
    k.update(&mut a, b"a");
    // A fresh state is the identity on either side.
    k.combine(&mut a, k.acc());
    let mut fresh = k.acc();
    k.combine(&mut fresh, a.clone());
    assert_eq!(k.finish(fresh), Output::U64(0xaf63dc4c8601ec8c));
    let mut b = k.acc();
    k.update(&mut b, b"b");
    let r = std::panic::catch_unwind(move || k.combine(&mut a, b));
    assert!(r.is_err());
    assert!(!KernelId::Fnv1a64.shardable());
    assert!(KernelId::Fnv1a64
        .not_shardable_reason()
        .unwrap()
        .contains("--pthreads 1"));
    for id in KernelId::all_builtin()
        .into_iter()
        .filter(|&id| id != KernelId::Fnv1a64)
    {
        assert!(id.shardable() && id.not_shardable_reason().is_none(), "{id}");
    }
}

#[test]
#[should_panic(expected = "made by another kernel")]
fn foreign_acc_is_a_logic_error() {
    let acc = Kernel::new(KernelId::SumU64).acc();
    Kernel::new(KernelId::Histogram).finish(acc);
}

#[test]
fn acc_is_send() {
    fn send<T: Send + 'static>() {}
    send::<Acc>();
    send::<Output>();
}

#[test]
fn parse_and_name() {
    let cases = [
        ("fnv1a64", KernelId::Fnv1a64, "fnv1a64"),
        ("fnv1a", KernelId::Fnv1a64, "fnv1a64"),
        ("xxh3", KernelId::Xxh3, "xxh3"),
        ("crc32c", KernelId::Crc32c, "crc32c"),
        ("sum", KernelId::SumU64, "sum"),
        ("count:0x41", KernelId::CountByte(0x41), "count:0x41"),
        ("count:65", KernelId::CountByte(65), "count:0x41"),
        ("COUNT:0X41", KernelId::CountByte(65), "count:0x41"),
        ("histogram", KernelId::Histogram, "histogram"),
        ("xor:0x5a", KernelId::XorImm(0x5a), "xor:0x5a"),
        ("add:1", KernelId::AddImm(1), "add:0x01"),
        (" gather ", KernelId::Gather, "gather"),
    ];
    for (s, id, name) in cases {
        assert_eq!(KernelId::parse(s).unwrap(), id, "{s}");
        assert_eq!(id.name(), name);
        assert_eq!(id.to_string(), name);
        assert_eq!(name.parse::<KernelId>().unwrap(), id);
    }
    for id in KernelId::all_builtin() {
        assert_eq!(KernelId::parse(&id.name()).unwrap(), id);
    }
    assert_eq!(KernelId::all_builtin().len(), 9);
    assert!(KernelId::XorImm(1).in_place() && KernelId::AddImm(1).in_place());
    assert!(!KernelId::Gather.in_place() && !KernelId::Xxh3.in_place());
}

#[test]
fn parse_errors() {
    let err = KernelId::parse("md5").unwrap_err();
    assert_eq!(err, KernelError::UnknownKernel { spec: "md5".into() });
    let msg = err.to_string();
    for name in [
        "fnv1a64",
        "xxh3",
        "crc32c",
        "sum",
        "count:",
        "histogram",
        "xor:",
        "add:",
        "gather",
    ] {
        assert!(msg.contains(name), "{msg} lacks {name}");
    }
    assert_eq!(
        KernelId::parse("count:256"),
        Err(KernelError::BadImmediate {
            spec: "count:256".into()
        })
    );
    assert_eq!(
        KernelId::parse("xor:0xzz"),
        Err(KernelError::BadImmediate {
            spec: "xor:0xzz".into()
        })
    );
    assert_eq!(
        KernelId::parse("add:"),
        Err(KernelError::BadImmediate { spec: "add:".into() })
    );
    assert_eq!(
        KernelId::parse("add:-1"),
        Err(KernelError::BadImmediate {
            spec: "add:-1".into()
        })
    );
    assert_eq!(
        KernelId::parse("count"),
        Err(KernelError::MissingImmediate { name: "count".into() })
    );
    assert_eq!(
        KernelId::parse("sum:1"),
        Err(KernelError::UnexpectedImmediate { name: "sum".into() })
    );
    assert!(KernelId::parse("").is_err());
    assert!(KernelError::BadImmediate {
        spec: "count:256".into()
    }
    .to_string()
    .contains("0..=255"));
}
