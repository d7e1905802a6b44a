//! What a FILE entry carries beyond its fixed fields (`docs/wire.md`
//! §10.6): the `LISTED` and `LINKED` flags (a `LINKED` file's target field
//! holds the path of the file it is a hard link to) and the attribute
//! block — numeric owner and group, extended attributes.
//!
//! The block follows the path and the target; its length is the FILE
//! field `attrs_len`. It is a run of items, each `tag` u8, `len` u16, then
//! `len` bytes, in strictly ascending tag order, each tag at most once:
//!
//! | tag | item | payload |
//! |---:|---|---|
//! | 1 | UID | u32 |
//! | 2 | GID | u32 |
//! | 3 | XATTRS | `count` u16 ≥ 1, then `count` × (`name_len` u8 ≥ 1, `value_len` u16, name, value) |
//!
//! [`parse_attrs`] checks the whole block, so reading a parsed
//! [`FileExtra`] (its [`Xattrs`] included) cannot fail.

use crate::WireError;

/// Item tags of the attribute block.
mod tag {
    pub const UID: u8 = 1;
    pub const GID: u8 = 2;
    pub const XATTRS: u8 = 3;
}

/// Item head: `tag` u8, `len` u16.
const ITEM_HEAD_LEN: usize = 3;
/// Longest extended-attribute name (Linux `XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;

/// The parts of a FILE entry beyond its fixed fields; all absent by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileExtra<'a> {
    /// `LISTED`: a dry run's listing for DELETE; nothing is written.
    pub listed: bool,
    /// `LINKED`: a hard link to the regular file at the path in the
    /// entry's target field.
    pub linked: bool,
    /// `STREAMED`: chunk count and file hash come in FILE_DONE,
    /// after the CHUNKS (§10.13).
    pub streamed: bool,
    /// Numeric owner.
    pub uid: Option<u32>,
    /// Numeric group.
    pub gid: Option<u32>,
    /// Extended attributes (empty: none sent).
    pub xattrs: Xattrs<'a>,
}

impl FileExtra<'_> {
    /// Whether the attribute block has any item.
    pub fn has_attrs(&self) -> bool {
        self.uid.is_some() || self.gid.is_some() || !self.xattrs.is_empty()
    }

    /// Bytes of the encoded attribute block.
    pub fn attrs_len(&self) -> usize {
        let fixed = |present: bool, len: usize| if present { ITEM_HEAD_LEN + len } else { 0 };
        fixed(self.uid.is_some(), 4)
            + fixed(self.gid.is_some(), 4)
            + fixed(!self.xattrs.is_empty(), self.xattrs.raw.len())
    }

    /// Appends the encoded attribute block (nothing when it has no item).
    pub fn emit_attrs(&self, out: &mut Vec<u8>) {
        let mut item = |t: u8, payload: &[u8]| {
            out.push(t);
            out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            out.extend_from_slice(payload);
        };
        if let Some(uid) = self.uid {
            item(tag::UID, &uid.to_le_bytes());
        }
        if let Some(gid) = self.gid {
            item(tag::GID, &gid.to_le_bytes());
        }
        if !self.xattrs.is_empty() {
            item(tag::XATTRS, self.xattrs.raw);
        }
    }
}

/// Decodes an attribute block into `extra` (whose flags the caller set).
pub(super) fn parse_attrs<'a>(mut block: &'a [u8], extra: &mut FileExtra<'a>) -> Result<(), WireError> {
    let mut last = 0u8;
    while !block.is_empty() {
        let (head, rest) = block
            .split_first_chunk::<ITEM_HEAD_LEN>()
            .ok_or(WireError::LengthMismatch)?;
        let t = head[0];
        let len = usize::from(u16::from_le_bytes([head[1], head[2]]));
        let (payload, rest) = rest.split_at_checked(len).ok_or(WireError::LengthMismatch)?;
        if t <= last {
            // Out of order or repeated: one encoding per content.
            return Err(WireError::BadFlags);
        }
        last = t;
        match t {
            tag::UID => extra.uid = Some(u32::from_le_bytes(fixed(payload)?)),
            tag::GID => extra.gid = Some(u32::from_le_bytes(fixed(payload)?)),
            tag::XATTRS => {
                let x = Xattrs::parse(payload)?;
                if x.is_empty() {
                    // An empty list is sent as no item.
                    return Err(WireError::LengthMismatch);
                }
                extra.xattrs = x;
            }
            _ => return Err(WireError::BadFlags),
        }
        block = rest;
    }
    Ok(())
}

fn fixed<const N: usize>(payload: &[u8]) -> Result<[u8; N], WireError> {
    payload.try_into().map_err(|_| WireError::LengthMismatch)
}

/// A checked list of extended attributes: `count` u16, then per attribute
/// `name_len` u8 (≥ 1), `value_len` u16, the name, the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Xattrs<'a> {
    raw: &'a [u8],
}

impl<'a> Xattrs<'a> {
    /// Checks an encoded list.
    pub fn parse(raw: &'a [u8]) -> Result<Self, WireError> {
        let (count, mut rest) = raw.split_first_chunk::<2>().ok_or(WireError::LengthMismatch)?;
        for _ in 0..u16::from_le_bytes(*count) {
            let (_, _, after) = split_xattr(rest)?;
            rest = after;
        }
        if !rest.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        Ok(Self { raw })
    }

    /// Encodes `attrs` (name, value) into `out` as a list, leaving out
    /// those that cannot be sent (an empty or longer than
    /// [`MAX_XATTR_NAME`] name, a value of 64 KiB or more) and stopping
    /// before the list would pass `budget` bytes; returns how many were
    /// left out.
    pub fn encode<'n>(
        attrs: impl IntoIterator<Item = (&'n [u8], &'n [u8])>,
        budget: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let start = out.len();
        out.extend_from_slice(&[0, 0]);
        let (mut count, mut left_out) = (0u16, 0usize);
        for (name, value) in attrs {
            let fits = out.len() - start + 3 + name.len() + value.len() <= budget;
            if name.is_empty()
                || name.len() > MAX_XATTR_NAME
                || value.len() > usize::from(u16::MAX)
                || !fits
                || count == u16::MAX
            {
                left_out += 1;
                continue;
            }
            out.push(name.len() as u8);
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(name);
            out.extend_from_slice(value);
            count += 1;
        }
        out[start..start + 2].copy_from_slice(&count.to_le_bytes());
        left_out
    }

    /// Whether the list holds no attribute.
    pub fn is_empty(&self) -> bool {
        self.raw.len() <= 2
    }

    /// The encoded list.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The attributes, (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut rest = self.raw.get(2..).unwrap_or_default();
        std::iter::from_fn(move || {
            let (name, value, after) = split_xattr(rest).ok()?;
            rest = after;
            Some((name, value))
        })
    }
}

/// An attribute's name and value, and the bytes after it.
type Split<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// One attribute at the front of `rest`: name, value, what follows.
fn split_xattr(rest: &[u8]) -> Result<Split<'_>, WireError> {
    let (head, rest) = rest.split_first_chunk::<3>().ok_or(WireError::TableTruncated)?;
    let name_len = usize::from(head[0]);
    let value_len = usize::from(u16::from_le_bytes([head[1], head[2]]));
    if name_len == 0 {
        return Err(WireError::LengthMismatch);
    }
    let (name, rest) = rest.split_at_checked(name_len).ok_or(WireError::TableTruncated)?;
    let (value, rest) = rest
        .split_at_checked(value_len)
        .ok_or(WireError::TableTruncated)?;
    Ok((name, value, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattrs_encode_parse_and_limits() {
        let long = vec![b'n'; MAX_XATTR_NAME + 1];
        let mut out = Vec::new();
        let left = Xattrs::encode(
            [
                (&b"user.a"[..], &b"1"[..]),
                (&b""[..], &b"empty name"[..]),
                (&long[..], &b"v"[..]),
                (&b"user.b"[..], &b""[..]),
            ],
            1024,
            &mut out,
        );
        assert_eq!(left, 2);
        let x = Xattrs::parse(&out).unwrap();
        assert_eq!(
            x.iter().collect::<Vec<_>>(),
            [(&b"user.a"[..], &b"1"[..]), (&b"user.b"[..], &b""[..])]
        );
        assert_eq!(
            Xattrs::parse(&out[..out.len() - 1]),
            Err(WireError::TableTruncated)
        );
        let mut more = out.clone();
        more.push(0);
        assert_eq!(Xattrs::parse(&more), Err(WireError::TrailingBytes));
        // The budget holds: what does not fit is left out.
        let mut small = Vec::new();
        assert_eq!(
            Xattrs::encode([(&b"user.a"[..], &[0u8; 100][..])], 50, &mut small),
            1
        );
        assert!(Xattrs::parse(&small).unwrap().is_empty());
    }

    #[test]
    fn attrs_are_canonical() {
        let mut raw = Vec::new();
        Xattrs::encode([(&b"user.k"[..], &b"v"[..])], 1024, &mut raw);
        let e = FileExtra {
            uid: Some(1000),
            gid: Some(100),
            xattrs: Xattrs::parse(&raw).unwrap(),
            ..FileExtra::default()
        };
        let mut out = Vec::new();
        e.emit_attrs(&mut out);
        assert_eq!(out.len(), e.attrs_len());
        let mut back = FileExtra::default();
        parse_attrs(&out, &mut back).unwrap();
        assert_eq!(back, e);
        // GID before UID: not canonical.
        let mut swapped = Vec::new();
        FileExtra {
            gid: Some(1),
            ..FileExtra::default()
        }
        .emit_attrs(&mut swapped);
        FileExtra {
            uid: Some(1),
            ..FileExtra::default()
        }
        .emit_attrs(&mut swapped);
        assert_eq!(
            parse_attrs(&swapped, &mut FileExtra::default()),
            Err(WireError::BadFlags)
        );
        // A UID of three bytes, an unknown tag, an empty list.
        assert_eq!(
            parse_attrs(&[1, 3, 0, 1, 2, 3], &mut FileExtra::default()),
            Err(WireError::LengthMismatch)
        );
        assert_eq!(
            parse_attrs(&[9, 0, 0], &mut FileExtra::default()),
            Err(WireError::BadFlags)
        );
        assert_eq!(
            parse_attrs(&[3, 2, 0, 0, 0], &mut FileExtra::default()),
            Err(WireError::LengthMismatch)
        );
    }
}
