//! The sharded executor: the same answer for any pThread count and either
//! encoding, equal to the scalar reference; bad schedules rejected before
//! anything runs.

use pfs_exec::kernel::{reference, Kernel, KernelId};
use pfs_exec::shard::{run, run_mut, Prepared, ShardConfig, ShardError};
use pfs_wire::{Descriptor, Encoding};
use proptest::prelude::*;

fn blob(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn cfg(threads: usize) -> ShardConfig {
    ShardConfig {
        threads,
        cpus: Vec::new(),
    }
}

fn slices<'a>(blob: &'a [u8], descs: &[Descriptor]) -> Vec<&'a [u8]> {
    descs
        .iter()
        .map(|d| &blob[d.offset as usize..(d.offset + u64::from(d.len)) as usize])
        .collect()
}

fn arb_descs(blob_len: usize) -> impl Strategy<Value = Vec<Descriptor>> {
    prop::collection::vec(
        (0..blob_len, 0usize..4096).prop_map(move |(off, len)| {
            let len = len.min(blob_len - off);
            Descriptor {
                offset: off as u64,
                len: len as u32,
            }
        }),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn any_thread_count_and_encoding_matches_the_reference(descs in arb_descs(64 * 1024), seed: u64) {
        let data = blob(64 * 1024, seed);
        for id in KernelId::all_builtin().into_iter().filter(|k| !k.in_place()) {
            let want = reference(id, &slices(&data, &descs));
            for encoding in [Encoding::Absolute, Encoding::Arithmetic] {
                let prepared = Prepared::from_descriptors(&descs, encoding, data.len() as u64).unwrap();
                for threads in 1..=4 {
                    match run(&data, &prepared, Kernel::new(id), &cfg(threads)) {
                        Ok(report) => {
                            prop_assert_eq!(&report.output, &want, "{:?} {:?} {} threads", id, encoding, threads);
                            prop_assert_eq!(report.per_thread_bytes.iter().sum::<u64>(), prepared.effective_bytes());
                        }
                        Err(ShardError::NotShardable { .. }) => prop_assert!(!id.shardable() && threads > 1),
                        Err(e) => prop_assert!(false, "{:?}: {}", id, e),
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_kernels_match_the_reference(descs in arb_descs(16 * 1024), seed: u64) {
        for id in [KernelId::XorImm(0x5a), KernelId::AddImm(7)] {
            let mut data = blob(16 * 1024, seed);
            let mut expect = data.clone();
            let want = reference_in_place(id, &mut expect, &descs);
            let prepared = Prepared::from_descriptors(&descs, Encoding::Arithmetic, data.len() as u64).unwrap();
            let report = run_mut(&mut data, &prepared, Kernel::new(id), &cfg(1)).unwrap();
            prop_assert_eq!(report.output, want);
            prop_assert!(data == expect);
        }
    }
}

/// Applies an in-place kernel descriptor by descriptor, in order, through the
/// scalar reference (which works on copies), writing the results back.
fn reference_in_place(id: KernelId, data: &mut [u8], descs: &[Descriptor]) -> pfs_exec::kernel::Output {
    let mut modified: Vec<Vec<u8>> = Vec::new();
    for d in descs {
        let range = d.offset as usize..(d.offset + u64::from(d.len)) as usize;
        for b in &mut data[range.clone()] {
            *b = match id {
                KernelId::XorImm(k) => *b ^ k,
                KernelId::AddImm(k) => b.wrapping_add(k),
                _ => unreachable!("only in-place kernels here"),
            };
        }
        modified.push(data[range].to_vec());
    }
    // The output accounts for the modified bytes, in order: the same as
    // gathering them.
    let views: Vec<&[u8]> = modified.iter().map(Vec::as_slice).collect();
    match reference(KernelId::Gather, &views) {
        pfs_exec::kernel::Output::Bytes { bytes, xxh3 } => pfs_exec::kernel::Output::Bytes { bytes, xxh3 },
        other => other,
    }
}

#[test]
fn fnv1a_refuses_more_than_one_pthread() {
    let data = blob(4096, 1);
    let descs = [Descriptor { offset: 0, len: 100 }];
    let prepared = Prepared::from_descriptors(&descs, Encoding::Absolute, 4096).unwrap();
    let err = run(&data, &prepared, Kernel::new(KernelId::Fnv1a64), &cfg(2)).unwrap_err();
    assert!(
        matches!(err, ShardError::NotShardable { threads: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("fnv1a64"), "{err}");
    assert!(run(&data, &prepared, Kernel::new(KernelId::Fnv1a64), &cfg(1)).is_ok());
}

#[test]
fn out_of_range_schedules_are_rejected_before_execution() {
    let descs = [
        Descriptor { offset: 0, len: 10 },
        Descriptor {
            offset: 4090,
            len: 10,
        },
    ];
    for encoding in [Encoding::Absolute, Encoding::Arithmetic] {
        let err = Prepared::from_descriptors(&descs, encoding, 4096).unwrap_err();
        assert!(matches!(err, ShardError::Rejected(_)), "{err}");
        assert!(err.to_string().contains("outside"), "{err}");
    }
    let overflow = [Descriptor {
        offset: u64::MAX - 1,
        len: 5,
    }];
    assert!(Prepared::from_descriptors(&overflow, Encoding::Absolute, 4096).is_err());
}

#[test]
fn in_place_kernels_refuse_more_than_one_pthread_and_leave_the_blob_alone() {
    let mut data = blob(4096, 2);
    let before = data.clone();
    let descs = [Descriptor { offset: 0, len: 100 }];
    let prepared = Prepared::from_descriptors(&descs, Encoding::Absolute, 4096).unwrap();
    let err = run_mut(&mut data, &prepared, Kernel::new(KernelId::XorImm(1)), &cfg(2)).unwrap_err();
    assert!(matches!(err, ShardError::NotShardable { .. }));
    assert_eq!(data, before);
    let err = run(&data, &prepared, Kernel::new(KernelId::XorImm(1)), &cfg(1)).unwrap_err();
    assert!(matches!(err, ShardError::NotShardable { .. }));
}
