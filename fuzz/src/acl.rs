//! The check behind the `acl` fuzz target: a POSIX ACL attribute from a
//! peer (`system.posix_acl_access` / `_default`, carried by `-A`) through
//! the receiver's parser and clipper in `crates/pfs-files`. Neither
//! panics; whatever parses re-emits to the bytes it came from; a clipped
//! ACL parses, grants no class more than the mode it was clipped to, names
//! nobody unless allowed, and clipping it again changes nothing.
//! Included by path by the target and by `crates/pfs-files/tests/corpus.rs`
//! (the seed corpus on stable).

use pfs_files::xattr::acl::{clip, emit, parse, Clip, Tag};

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// The ACL fuzz targets: name (also the corpus directory) and check.
pub const ACL_TARGETS: &[(&str, Check)] = &[("acl", acl)];

/// Input: the first two bytes are the mode (low 9 bits) and whether named
/// users (bit 14) and groups (bit 15) are kept; the rest is the attribute.
pub fn acl(data: &[u8]) {
    let Some((head, value)) = data.split_first_chunk::<2>() else {
        return;
    };
    let bits = u16::from_le_bytes(*head);
    let c = Clip {
        mode: u32::from(bits & 0o777),
        named_users: bits & 0x4000 != 0,
        named_groups: bits & 0x8000 != 0,
    };
    if let Ok(entries) = parse(value) {
        assert_eq!(emit(&entries), value, "re-emits to its bytes");
    }
    let Ok(out) = clip(value, c) else {
        assert!(parse(value).is_err(), "clip refuses only what parse refuses");
        return;
    };
    let entries = parse(&out).expect("a clipped ACL parses");
    let class = |shift: u32| ((c.mode >> shift) & 7) as u16;
    for e in &entries {
        let most = match e.tag {
            Tag::UserObj => class(6),
            Tag::Other => class(0),
            _ => class(3),
        };
        assert_eq!(e.perm & !most, 0, "{e:?} within mode {:o}", c.mode);
        assert!(e.tag != Tag::User || c.named_users, "{e:?}");
        assert!(e.tag != Tag::Group || c.named_groups, "{e:?}");
    }
    assert_eq!(clip(&out, c).expect("clips again"), out, "idempotent");
}
