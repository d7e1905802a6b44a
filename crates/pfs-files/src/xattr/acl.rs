//! POSIX ACLs as Linux keeps them in the attributes
//! [`ACL_ACCESS`](super::ACL_ACCESS) and [`ACL_DEFAULT`](super::ACL_DEFAULT),
//! read from a peer and made safe before they are set ([`clip`]).
//!
//! The binary form (`posix_acl_xattr`): a 4-byte header, version 2 (u32,
//! little-endian), then 8-byte entries `tag` u16, `perm` u16, `id` u32. Tags
//! are `USER_OBJ`, `USER`, `GROUP_OBJ`, `GROUP`, `MASK`, `OTHER`; `perm` is
//! read 4, write 2, execute 1; `id` names the user or group of a `USER` or
//! `GROUP` entry and is `u32::MAX` for the others. [`parse`] accepts what
//! the kernel's `posix_acl_valid` accepts: the entries in that tag order,
//! one `USER_OBJ`, `GROUP_OBJ` and `OTHER`, a `MASK` exactly when named
//! entries need one (it may also stand alone) — or no entry at all.
//!
//! Setting an access ACL sets the entry's mode (owner from `USER_OBJ`,
//! group from `MASK` or else `GROUP_OBJ`, other from `OTHER`), and named
//! entries grant access to users and groups the mode does not name. A peer
//! gets neither: [`clip`] applies the rule modes follow (an entry never
//! gains a bit), and keeps named entries only where the receiver applies
//! the sender's owner and group (it runs as root and the sender asked).

use thiserror::Error;

/// `ACL_EA_VERSION`: the only version Linux reads.
pub const VERSION: u32 = 2;
/// Bytes of the header.
const HEADER_LEN: usize = 4;
/// Bytes of one entry.
const ENTRY_LEN: usize = 8;
/// The id of entries that name nobody (`ACL_UNDEFINED_ID`).
const NO_ID: u32 = u32::MAX;

/// An entry's tag (`ACL_USER_OBJ` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tag {
    /// The owner.
    UserObj,
    /// A named user (`id`).
    User,
    /// The owning group.
    GroupObj,
    /// A named group (`id`).
    Group,
    /// The most any named entry or the owning group gets.
    Mask,
    /// Everyone else.
    Other,
}

impl Tag {
    fn from_raw(raw: u16) -> Option<Self> {
        Some(match raw {
            0x01 => Self::UserObj,
            0x02 => Self::User,
            0x04 => Self::GroupObj,
            0x08 => Self::Group,
            0x10 => Self::Mask,
            0x20 => Self::Other,
            _ => return None,
        })
    }

    fn raw(self) -> u16 {
        match self {
            Self::UserObj => 0x01,
            Self::User => 0x02,
            Self::GroupObj => 0x04,
            Self::Group => 0x08,
            Self::Mask => 0x10,
            Self::Other => 0x20,
        }
    }

    fn named(self) -> bool {
        matches!(self, Self::User | Self::Group)
    }
}

/// One entry: who, and what they may do (`rwx` as 4, 2, 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Whom it is about.
    pub tag: Tag,
    /// Read 4, write 2, execute 1.
    pub perm: u16,
    /// The user or group of a named entry; `u32::MAX` otherwise.
    pub id: u32,
}

/// Why an ACL attribute from a peer cannot be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AclError {
    /// Shorter than the header, or not a whole number of entries after it.
    #[error("ACL attribute of {0} bytes: not a header and whole 8-byte entries")]
    Length(usize),
    /// A header other than version 2.
    #[error("ACL attribute version {0} (Linux reads 2)")]
    Version(u32),
    /// An unknown tag.
    #[error("ACL entry with unknown tag {0:#x}")]
    Tag(u16),
    /// Permission bits beyond `rwx`.
    #[error("ACL entry with permission bits {0:#o} beyond rwx")]
    Perm(u16),
    /// Entries out of order, repeated, missing, or named entries without a mask.
    #[error("ACL entries out of order, repeated or missing (owner, users, group, groups, mask, other)")]
    Structure,
}

/// The entries of the ACL attribute `value`, checked as described in the
/// module docs. Never panics, whatever the bytes.
pub fn parse(value: &[u8]) -> Result<Vec<Entry>, AclError> {
    let (header, body) = value
        .split_first_chunk::<HEADER_LEN>()
        .ok_or(AclError::Length(value.len()))?;
    if body.len() % ENTRY_LEN != 0 {
        return Err(AclError::Length(value.len()));
    }
    let version = u32::from_le_bytes(*header);
    if version != VERSION {
        return Err(AclError::Version(version));
    }
    let mut entries = Vec::with_capacity(body.len() / ENTRY_LEN);
    for e in body.chunks_exact(ENTRY_LEN) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let tag = Tag::from_raw(tag).ok_or(AclError::Tag(tag))?;
        if perm & !7 != 0 {
            return Err(AclError::Perm(perm));
        }
        entries.push(Entry { tag, perm, id });
    }
    check(&entries)?;
    Ok(entries)
}

/// The kernel's order: `USER_OBJ`, `USER`*, `GROUP_OBJ`, `GROUP`*,
/// [`MASK`], `OTHER`, with the mask required when named entries exist.
fn check(entries: &[Entry]) -> Result<(), AclError> {
    if entries.is_empty() {
        return Ok(());
    }
    let tags: Vec<Tag> = entries.iter().map(|e| e.tag).collect();
    let ordered = tags
        .windows(2)
        .all(|w| w[0] < w[1] || (w[0] == w[1] && w[0].named()));
    let count = |t: Tag| tags.iter().filter(|&&x| x == t).count();
    let named = tags.iter().any(|t| t.named());
    let ok = ordered
        && count(Tag::UserObj) == 1
        && count(Tag::GroupObj) == 1
        && count(Tag::Other) == 1
        && (count(Tag::Mask) == 1 || !named);
    if ok {
        Ok(())
    } else {
        Err(AclError::Structure)
    }
}

/// The attribute form of `entries` (version 2).
pub fn emit(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN);
    out.extend_from_slice(&VERSION.to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.tag.raw().to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        out.extend_from_slice(&e.id.to_le_bytes());
    }
    out
}

/// What a peer's ACL may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clip {
    /// The entry's permission bits as the receiver set them (for a
    /// directory at most `mode & 0o755`, for an existing one what it had):
    /// no ACL entry gets more than its class has here.
    pub mode: u32,
    /// Keep named users (`USER`): the receiver applies the sender's owners.
    pub named_users: bool,
    /// Keep named groups (`GROUP`): the receiver applies the sender's groups.
    pub named_groups: bool,
}

/// `value` (an ACL attribute from a peer) made safe to set, in attribute
/// form: `USER_OBJ` clipped to the owner bits of `clip.mode`, `GROUP_OBJ`,
/// `MASK` and named entries to its group bits, `OTHER` to its other bits;
/// named entries dropped unless `clip` keeps them; a mask that then guards
/// no named entry folded into `GROUP_OBJ` (its effective permissions, the
/// minimal ACL the kernel would store as a mode). Ids of entries that name
/// nobody become `u32::MAX`, as the kernel writes them back, so a value
/// read back compares equal. An attribute that [`parse`] refuses is an
/// error: it is not set.
pub fn clip(value: &[u8], clip: Clip) -> Result<Vec<u8>, AclError> {
    let entries = parse(value)?;
    let class = |shift: u32| ((clip.mode >> shift) & 7) as u16;
    let (owner, group, other) = (class(6), class(3), class(0));
    let kept: Vec<Entry> = entries
        .into_iter()
        .filter(|e| match e.tag {
            Tag::User => clip.named_users,
            Tag::Group => clip.named_groups,
            _ => true,
        })
        .map(|e| {
            let (perm, id) = match e.tag {
                Tag::UserObj => (e.perm & owner, NO_ID),
                Tag::GroupObj | Tag::Mask => (e.perm & group, NO_ID),
                Tag::User | Tag::Group => (e.perm & group, e.id),
                Tag::Other => (e.perm & other, NO_ID),
            };
            Entry { perm, id, ..e }
        })
        .collect();
    let named = kept.iter().any(|e| e.tag.named());
    let mask = kept.iter().find(|e| e.tag == Tag::Mask).map(|e| e.perm);
    let out: Vec<Entry> = match mask {
        Some(m) if !named => kept
            .into_iter()
            .filter(|e| e.tag != Tag::Mask)
            .map(|e| match e.tag {
                Tag::GroupObj => Entry {
                    perm: e.perm & m,
                    ..e
                },
                _ => e,
            })
            .collect(),
        _ => kept,
    };
    Ok(emit(&out))
}

/// The mode bits a minimal ACL (owner, group and other entries only)
/// stands for; `None` for an empty or extended one. The kernel keeps no
/// attribute for a minimal access ACL: setting one sets the mode.
pub fn minimal_mode(value: &[u8]) -> Option<u32> {
    let entries = parse(value).ok()?;
    if entries.len() != 3 {
        return None;
    }
    let perm = |t: Tag| entries.iter().find(|e| e.tag == t).map(|e| u32::from(e.perm));
    Some(perm(Tag::UserObj)? << 6 | perm(Tag::GroupObj)? << 3 | perm(Tag::Other)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(Tag, u16, u32)]) -> Vec<u8> {
        emit(
            &entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect::<Vec<_>>(),
        )
    }

    const ROOT_ONLY: Clip = Clip {
        mode: 0o700,
        named_users: false,
        named_groups: false,
    };

    #[test]
    fn parses_the_kernels_form_and_refuses_anything_else() {
        let minimal = acl(&[
            (Tag::UserObj, 7, NO_ID),
            (Tag::GroupObj, 5, NO_ID),
            (Tag::Other, 5, NO_ID),
        ]);
        assert_eq!(parse(&minimal).unwrap().len(), 3);
        assert_eq!(minimal_mode(&minimal), Some(0o755));
        // Header only: no ACL (removes it).
        assert_eq!(parse(&VERSION.to_le_bytes()).unwrap(), []);
        assert_eq!(parse(b""), Err(AclError::Length(0)));
        assert_eq!(parse(&[2, 0, 0]), Err(AclError::Length(3)));
        assert_eq!(parse(&minimal[..minimal.len() - 1]), Err(AclError::Length(27)));
        let mut v1 = minimal.clone();
        v1[0] = 1;
        assert_eq!(parse(&v1), Err(AclError::Version(1)));
        let mut tag = minimal.clone();
        tag[4] = 0x40;
        assert_eq!(parse(&tag), Err(AclError::Tag(0x40)));
        let mut perm = minimal.clone();
        perm[6] = 8;
        assert_eq!(parse(&perm), Err(AclError::Perm(8)));
        // Out of order, repeated, missing, or a named entry without a mask.
        for bad in [
            acl(&[
                (Tag::GroupObj, 5, NO_ID),
                (Tag::UserObj, 7, NO_ID),
                (Tag::Other, 5, NO_ID),
            ]),
            acl(&[
                (Tag::UserObj, 7, NO_ID),
                (Tag::UserObj, 7, NO_ID),
                (Tag::GroupObj, 5, NO_ID),
                (Tag::Other, 0, NO_ID),
            ]),
            acl(&[(Tag::UserObj, 7, NO_ID), (Tag::Other, 5, NO_ID)]),
            acl(&[
                (Tag::UserObj, 7, NO_ID),
                (Tag::User, 7, 0),
                (Tag::GroupObj, 5, NO_ID),
                (Tag::Other, 5, NO_ID),
            ]),
        ] {
            assert_eq!(parse(&bad), Err(AclError::Structure), "{bad:?}");
            assert_eq!(clip(&bad, ROOT_ONLY), Err(AclError::Structure));
        }
    }

    #[test]
    fn never_panics_on_any_short_input() {
        let full = acl(&[
            (Tag::UserObj, 7, NO_ID),
            (Tag::User, 7, 1000),
            (Tag::GroupObj, 5, NO_ID),
            (Tag::Mask, 7, NO_ID),
            (Tag::Other, 5, NO_ID),
        ]);
        for n in 0..=full.len() {
            let _ = parse(&full[..n]);
            let _ = clip(&full[..n], ROOT_ONLY);
        }
        for b in 0..=255u8 {
            let mut x = full.clone();
            x[b as usize % full.len()] = b;
            let _ = clip(&x, ROOT_ONLY);
        }
    }

    #[test]
    fn other_rwx_on_a_private_directory_gains_nothing() {
        // The attack of issue 26: `other::rwx` (and a mask to match) sent
        // for an admin's 0700 directory, with a user entry to re-own it.
        let sent = acl(&[
            (Tag::UserObj, 7, 0),
            (Tag::User, 7, 1000),
            (Tag::GroupObj, 7, 0),
            (Tag::Mask, 7, 0),
            (Tag::Other, 7, 0),
        ]);
        let got = parse(&clip(&sent, ROOT_ONLY).unwrap()).unwrap();
        assert_eq!(
            got,
            [
                Entry {
                    tag: Tag::UserObj,
                    perm: 7,
                    id: NO_ID
                },
                Entry {
                    tag: Tag::GroupObj,
                    perm: 0,
                    id: NO_ID
                },
                Entry {
                    tag: Tag::Other,
                    perm: 0,
                    id: NO_ID
                },
            ]
        );
        // A new directory (0755 at most): group and other lose write.
        let new = Clip {
            mode: 0o755,
            ..ROOT_ONLY
        };
        assert_eq!(minimal_mode(&clip(&sent, new).unwrap()), Some(0o755));
    }

    #[test]
    fn named_entries_stay_only_when_owners_are_applied_and_never_exceed_the_group_class() {
        let sent = acl(&[
            (Tag::UserObj, 6, NO_ID),
            (Tag::User, 7, 1000),
            (Tag::GroupObj, 4, NO_ID),
            (Tag::Group, 6, 50),
            (Tag::Mask, 7, NO_ID),
            (Tag::Other, 4, NO_ID),
        ]);
        let both = Clip {
            mode: 0o664,
            named_users: true,
            named_groups: true,
        };
        assert_eq!(
            parse(&clip(&sent, both).unwrap()).unwrap(),
            [
                Entry {
                    tag: Tag::UserObj,
                    perm: 6,
                    id: NO_ID
                },
                Entry {
                    tag: Tag::User,
                    perm: 6,
                    id: 1000
                },
                Entry {
                    tag: Tag::GroupObj,
                    perm: 4,
                    id: NO_ID
                },
                Entry {
                    tag: Tag::Group,
                    perm: 6,
                    id: 50
                },
                Entry {
                    tag: Tag::Mask,
                    perm: 6,
                    id: NO_ID
                },
                Entry {
                    tag: Tag::Other,
                    perm: 4,
                    id: NO_ID
                },
            ]
        );
        // Only groups: the user entry goes, the mask stays for the group entry.
        let groups = Clip {
            named_users: false,
            ..both
        };
        let got = parse(&clip(&sent, groups).unwrap()).unwrap();
        assert!(!got.iter().any(|e| e.tag == Tag::User));
        assert!(got.iter().any(|e| e.tag == Tag::Mask));
        // Neither: the mask folds into the owning group's entry.
        let none = Clip {
            mode: 0o664,
            ..ROOT_ONLY
        };
        let got = clip(&sent, none).unwrap();
        assert_eq!(minimal_mode(&got), Some(0o644));
        // Clipping is idempotent: a value read back compares equal.
        assert_eq!(clip(&got, none).unwrap(), got);
    }
}
