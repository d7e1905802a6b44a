//! The seeded generator and the fingerprint: determinism and diffs.

use pfs_blob::{fill_seeded, fill_seeded_word, Fingerprint, FingerprintMismatch};

/// Reference fill, word by word from the formula.
fn reference(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut i = 0;
    while v.len() < len {
        v.extend_from_slice(&fill_seeded_word(seed, i).to_le_bytes());
        i += 1;
    }
    v.truncate(len);
    v
}

#[test]
fn fill_is_deterministic_and_thread_independent() {
    // Sizes straddle the parallel threshold (4 MiB) and word boundaries.
    let sizes = [0, 1, 7, 8, 9, 4093, (4 << 20) + 13, (9 << 20) + 5, 16 << 20];
    for &len in &sizes {
        let want = reference(len, 0x5EED);
        for threads in [1, 2, 3, 7, 0] {
            let mut buf = vec![0xAAu8; len];
            fill_seeded(&mut buf, 0x5EED, threads);
            assert!(buf == want, "len {len} threads {threads}");
        }
    }
}

#[test]
fn different_seeds_differ() {
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 4096];
    fill_seeded(&mut a, 1, 1);
    fill_seeded(&mut b, 2, 1);
    assert_ne!(a, b);
}

fn data(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_seeded(&mut v, 42, 1);
    v
}

#[test]
fn fingerprint_equal_for_equal_data_any_threads() {
    let d = data(10 * 4096 + 100);
    let a = Fingerprint::compute(&d, 4096, 1);
    for t in [2, 3, 7, 0] {
        assert_eq!(Fingerprint::compute(&d, 4096, t), a);
    }
    assert_eq!(a.regions.len(), 11);
    assert_eq!(a.blob_len, d.len() as u64);
    assert_eq!(a.diff(&a).unwrap(), vec![]);
    assert_eq!(Fingerprint::from_regions(4096, a.blob_len, a.regions.clone()), a);
}

#[test]
fn diff_finds_flipped_regions_and_merges_adjacent() {
    let rs = 4096u64;
    let d = data(10 * 4096 + 100);
    let a = Fingerprint::compute(&d, rs as u32, 2);
    let mut e = d.clone();
    for at in [2 * 4096 + 5, 3 * 4096, 7 * 4096 + 4095, 10 * 4096 + 99] {
        e[at] ^= 1;
    }
    let b = Fingerprint::compute(&e, rs as u32, 3);
    assert_ne!(a.root, b.root);
    assert_ne!(a.root_hex(), b.root_hex());
    let got = a.diff(&b).unwrap();
    // Regions 2 and 3 merge; the last (short) region ends at the blob end.
    assert_eq!(got, vec![2 * rs..4 * rs, 7 * rs..8 * rs, 10 * rs..10 * rs + 100]);
    assert_eq!(b.diff(&a).unwrap(), got);
}

#[test]
fn diff_rejects_different_shapes() {
    let d = data(8192);
    let a = Fingerprint::compute(&d, 4096, 1);
    let b = Fingerprint::compute(&d[..4096], 4096, 1);
    assert_eq!(
        a.diff(&b),
        Err(FingerprintMismatch::Len {
            ours: 8192,
            theirs: 4096
        })
    );
    let c = Fingerprint::compute(&d, 2048, 1);
    assert_eq!(
        a.diff(&c),
        Err(FingerprintMismatch::RegionSize {
            ours: 4096,
            theirs: 2048
        })
    );
}

#[test]
fn root_hex_and_short() {
    let a = Fingerprint::compute(&data(1000), 256, 1);
    let hex = a.root_hex();
    assert_eq!(hex.len(), 64);
    assert!(hex
        .bytes()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    assert_eq!(a.short(), &hex[..16]);
    // Serde round trip (metadata and HELLO use it).
    let json = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::from_str::<Fingerprint>(&json).unwrap(), a);
}
