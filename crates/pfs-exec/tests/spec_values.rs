//! The integrity and end-to-end values printed in docs/wire.md §6 and §9,
//! recomputed with this crate's kernels over the spec's example blob
//! (1 MiB, byte i = i mod 251).

use pfs_exec::execute::digest_descriptors;
use pfs_exec::{e2e_chain, Digest};
use pfs_wire::{Descriptor, IntegrityAlg};

fn example_blob() -> Vec<u8> {
    (0..1usize << 20).map(|i| (i % 251) as u8).collect()
}

fn d(offset: u64, len: u32) -> Descriptor {
    Descriptor { offset, len }
}

fn digest(blob: &[u8], descs: &[Descriptor], alg: IntegrityAlg) -> u64 {
    digest_descriptors(blob, descs, &mut Digest::new(alg)).unwrap()
}

#[test]
fn reference_values() {
    let mut x = Digest::new(IntegrityAlg::Xxh3);
    assert_eq!(x.value(), 0x2d06800538d394c2);
    x.update(b"a");
    assert_eq!(x.value(), 0xe6c632b61e964e1f);
    let mut f = Digest::new(IntegrityAlg::Fnv1a);
    f.update(b"a");
    assert_eq!(f.value(), 0xaf63dc4c8601ec8c);
    assert_eq!(Digest::new(IntegrityAlg::None).value(), 0);
}

#[test]
fn gram_vector_digests_and_chain() {
    let blob = example_blob();
    let three = [d(4096, 512), d(4608, 256), d(1024, 100)];
    assert_eq!(digest(&blob, &three, IntegrityAlg::Fnv1a), 0x656db2358f745339);
    let g0 = digest(&blob, &three, IntegrityAlg::Xxh3);
    assert_eq!(g0, 0x1f570b5e9e7dbc8e);
    let seq: Vec<_> = (0..8).map(|i| d(i * 4096, 4096)).collect();
    let g1 = digest(&blob, &seq, IntegrityAlg::Xxh3);
    assert_eq!(g1, 0xe39cdfc79c863d7c);
    assert_eq!(
        digest(&blob, &[d(16, 5), d(32, 3)], IntegrityAlg::Fnv1a),
        0x6b755cbbe28bb832
    );

    let e0 = e2e_chain(0, 0, g0);
    assert_eq!(e0, 0xa4ed6984e8390ddf);
    assert_eq!(e2e_chain(e0, 1, g1), 0x1e72ba1bdb3fadad);
}
