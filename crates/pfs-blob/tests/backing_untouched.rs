//! An untouched anonymous blob reports base pages and says why. Alone in its
//! test binary: smaps counts per VMA, and the kernel merges adjacent
//! THP-advised anonymous mappings, so a concurrently created blob in the same
//! process could lend this one its huge-page counters.

use pfs_blob::{BackingKind, Blob, BlobConfig, Fill};

const MIB: u64 = 1 << 20;

#[test]
fn untouched_blob_says_why_it_is_small() {
    let opts = BlobConfig {
        size: 8 * MIB,
        prefault: false,
        fill: Fill::None,
        ..BlobConfig::default()
    };
    let (blob, setup) = Blob::open_or_create(&opts).unwrap();
    assert_eq!(setup.prefault_s, 0.0);
    assert_eq!(setup.fill_s, 0.0);
    assert_eq!(blob.seed(), None);
    let b = blob.backing();
    assert_eq!(b.kind, BackingKind::SmallPages);
    assert!(b.warnings.iter().any(|w| w.contains("no page touched")), "{b:?}");
    assert!(blob.as_slice().iter().all(|&x| x == 0));
}
