//! DELETE and DELETED (`docs/wire.md` §10.12): the sender asks the
//! receiver to remove, from the directories the session sent, the entries
//! the sender's tree does not have (rsync's `--delete`); the receiver names
//! what it removed (or, in a dry run, would remove).

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::MAX_PATH_LEN;

/// Fixed part of DELETE (the rules follow).
pub const DELETE_HEAD_LEN: usize = 8;
/// DELETED head (the entries follow).
pub const DELETED_HEAD_LEN: usize = 8;
/// Fixed part of one DELETED entry (the path follows).
pub const DELETED_ENTRY_FIXED_LEN: usize = 4;
/// Most protect rules in one DELETE.
pub const MAX_DELETE_RULES: usize = 1024;
/// DELETE flag: the remote directory itself is one of the session's
/// directories (the sender sent a directory's contents, `DIR/`).
pub const DELETE_ROOT: u8 = 0x01;

/// Byte ranges of the heads.
mod field {
    use super::{tiles, Field};

    /// DELETE; the rules follow, each a u16 length and its bytes.
    pub mod delete {
        use super::{tiles, Field};
        use crate::files::delete::DELETE_HEAD_LEN as LEN;

        pub const FLAGS: Field = Field::new(0, 1);
        pub const RESERVED_1: Field = Field::new(1, 1);
        pub const RULE_COUNT: Field = Field::new(2, 2);
        pub const RESERVED_4: Field = Field::new(4, 4);

        const _: () = assert!(tiles(&[FLAGS, RESERVED_1, RULE_COUNT, RESERVED_4], LEN));
    }

    /// DELETED head.
    pub mod deleted {
        use super::{tiles, Field};
        use crate::files::delete::DELETED_HEAD_LEN as LEN;

        pub const STATUS: Field = Field::new(0, 1);
        pub const RESERVED: Field = Field::new(1, 3);
        pub const COUNT: Field = Field::new(4, 4);

        const _: () = assert!(tiles(&[STATUS, RESERVED, COUNT], LEN));
    }

    /// One DELETED entry; the path follows.
    pub mod entry {
        use super::{tiles, Field};
        use crate::files::delete::DELETED_ENTRY_FIXED_LEN as LEN;

        pub const KIND: Field = Field::new(0, 1);
        pub const RESERVED: Field = Field::new(1, 1);
        pub const PATH_LEN: Field = Field::new(2, 2);

        const _: () = assert!(tiles(&[KIND, RESERVED, PATH_LEN], LEN));
    }
}

/// A DELETE body: whether the remote directory itself is in scope, and the
/// protect rules (exclude patterns: matching destination entries are kept).
/// [`Self::parse`] checks every rule, so iterating them cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeleteRequest<'a> {
    /// [`DELETE_ROOT`] was set.
    pub root: bool,
    count: u16,
    /// The encoded rules, already checked.
    rules: &'a [u8],
}

impl<'a> DeleteRequest<'a> {
    /// Decodes a DELETE body: at most [`MAX_DELETE_RULES`] rules, each 1 to
    /// [`MAX_PATH_LEN`] bytes of UTF-8.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::delete as f;
        let b = Reader::<DELETE_HEAD_LEN>::new(body)?;
        let flags = b.u8(f::FLAGS);
        if flags & !DELETE_ROOT != 0 {
            return Err(WireError::BadFlags);
        }
        if !b.is_zero(f::RESERVED_1) || !b.is_zero(f::RESERVED_4) {
            return Err(WireError::ReservedNonZero);
        }
        let count = b.u16(f::RULE_COUNT);
        if usize::from(count) > MAX_DELETE_RULES {
            return Err(WireError::TooLarge);
        }
        let rules = body.get(DELETE_HEAD_LEN..).unwrap_or_default();
        let mut rest = rules;
        for _ in 0..count {
            let (rule, after) = split_rule(rest)?;
            core::str::from_utf8(rule).map_err(|_| WireError::BadUtf8)?;
            rest = after;
        }
        if !rest.is_empty() {
            return Err(WireError::TrailingBytes);
        }
        Ok(Self {
            root: flags & DELETE_ROOT != 0,
            count,
            rules,
        })
    }

    /// Number of rules.
    pub fn rule_count(&self) -> u16 {
        self.count
    }

    /// The rules, in order.
    pub fn rules(&self) -> impl Iterator<Item = &'a str> + 'a {
        let mut rest = self.rules;
        (0..self.count).map_while(move |_| {
            let (rule, after) = split_rule(rest).ok()?;
            rest = after;
            core::str::from_utf8(rule).ok()
        })
    }

    /// Appends a DELETE body; `TooLarge` for more than [`MAX_DELETE_RULES`]
    /// rules or a rule that is empty or longer than [`MAX_PATH_LEN`] (a
    /// pattern is never cut: that would change what it protects).
    pub fn emit<'r>(
        root: bool,
        rules: impl ExactSizeIterator<Item = &'r str>,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        use field::delete as f;
        if rules.len() > MAX_DELETE_RULES {
            return Err(WireError::TooLarge);
        }
        let mut w = Writer::<DELETE_HEAD_LEN>::new();
        w.u8(f::FLAGS, if root { DELETE_ROOT } else { 0 })
            .u16(f::RULE_COUNT, rules.len() as u16);
        let start = out.len();
        out.extend_from_slice(&w.finish());
        for r in rules {
            if r.is_empty() || r.len() > MAX_PATH_LEN {
                out.truncate(start);
                return Err(WireError::TooLarge);
            }
            out.extend_from_slice(&(r.len() as u16).to_le_bytes());
            out.extend_from_slice(r.as_bytes());
        }
        Ok(())
    }
}

/// One rule at the front of `rest`: its bytes and what follows.
fn split_rule(rest: &[u8]) -> Result<(&[u8], &[u8]), WireError> {
    let (len, after) = rest.split_first_chunk::<2>().ok_or(WireError::TableTruncated)?;
    let len = usize::from(u16::from_le_bytes(*len));
    if len == 0 || len > MAX_PATH_LEN {
        return Err(WireError::LengthMismatch);
    }
    after.split_at_checked(len).ok_or(WireError::TableTruncated)
}

/// What the receiver did about a DELETE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DeleteStatus {
    /// The entries listed were removed (in a dry run: would be).
    Done = 0,
    /// Nothing was removed: entries of the session failed (rsync skips
    /// deletion after I/O errors too).
    SkippedFailures = 1,
    /// Nothing was removed: the session sent more entries than the
    /// receiver keeps track of for deletion.
    SkippedLimit = 2,
}

impl DeleteStatus {
    /// What it means, in a few words.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::SkippedFailures => "entries of the session failed",
            Self::SkippedLimit => {
                "the session named more entries than the receiver keeps track of for deletion"
            }
        }
    }

    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::Done,
            1 => Self::SkippedFailures,
            2 => Self::SkippedLimit,
            _ => return Err(WireError::BadFlags),
        })
    }
}

/// What a removed entry was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DeletedKind {
    /// A regular file.
    File = 0,
    /// A directory (its contents are listed before it).
    Dir = 1,
    /// A symbolic link (the link itself; its target is never touched).
    Symlink = 2,
    /// Anything else (FIFO, socket, device node).
    Other = 3,
}

impl DeletedKind {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::File,
            1 => Self::Dir,
            2 => Self::Symlink,
            3 => Self::Other,
            _ => return Err(WireError::BadFlags),
        })
    }
}

/// DELETED head: the receiver's status and how many entries follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedHead {
    /// What the receiver did.
    pub status: DeleteStatus,
    /// Entries in this frame.
    pub count: u32,
}

impl DeletedHead {
    /// Encodes the head.
    pub fn emit(&self) -> [u8; DELETED_HEAD_LEN] {
        use field::deleted as f;
        let mut w = Writer::<DELETED_HEAD_LEN>::new();
        w.u8(f::STATUS, self.status as u8).u32(f::COUNT, self.count);
        w.finish()
    }
}

/// One entry of DELETED: its kind and its path (relative to the remote
/// directory, as in FILE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedEntry<'a> {
    /// What it was.
    pub kind: DeletedKind,
    /// Where it was.
    pub path: &'a [u8],
}

impl DeletedEntry<'_> {
    /// Appends the encoded entry (path cut at [`MAX_PATH_LEN`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        use field::entry as f;
        let path = &self.path[..self.path.len().min(MAX_PATH_LEN)];
        let mut w = Writer::<DELETED_ENTRY_FIXED_LEN>::new();
        w.u8(f::KIND, self.kind as u8).u16(f::PATH_LEN, path.len() as u16);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(path);
    }
}

/// Decodes a DELETED body: its head and an iterator over its entries (each
/// bounds-checked as it is read; bytes left after `count` entries are
/// `TrailingBytes`).
pub fn parse_deleted(body: &[u8]) -> Result<(DeletedHead, DeletedIter<'_>), WireError> {
    use field::deleted as f;
    let b = Reader::<DELETED_HEAD_LEN>::new(body)?;
    if !b.is_zero(f::RESERVED) {
        return Err(WireError::ReservedNonZero);
    }
    let head = DeletedHead {
        status: DeleteStatus::from_u8(b.u8(f::STATUS))?,
        count: b.u32(f::COUNT),
    };
    if head.status != DeleteStatus::Done && head.count != 0 {
        return Err(WireError::LengthMismatch);
    }
    Ok((
        head,
        DeletedIter {
            rest: body.get(DELETED_HEAD_LEN..).unwrap_or_default(),
            left: head.count,
        },
    ))
}

/// Entries of a DELETED body.
#[derive(Debug, Clone)]
pub struct DeletedIter<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> DeletedIter<'a> {
    fn entry(&mut self) -> Result<DeletedEntry<'a>, WireError> {
        use field::entry as f;
        let b = Reader::<DELETED_ENTRY_FIXED_LEN>::new(self.rest).map_err(|_| WireError::TableTruncated)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let kind = DeletedKind::from_u8(b.u8(f::KIND))?;
        let len = usize::from(b.u16(f::PATH_LEN));
        if len == 0 || len > MAX_PATH_LEN {
            return Err(WireError::LengthMismatch);
        }
        let (path, rest) = self.rest[DELETED_ENTRY_FIXED_LEN..]
            .split_at_checked(len)
            .ok_or(WireError::TableTruncated)?;
        self.rest = rest;
        Ok(DeletedEntry { kind, path })
    }
}

impl<'a> Iterator for DeletedIter<'a> {
    type Item = Result<DeletedEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.rest = &[];
            return Some(Err(WireError::TrailingBytes));
        }
        match self.entry() {
            Ok(e) => {
                self.left -= 1;
                Some(Ok(e))
            }
            Err(e) => {
                self.left = 0;
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn delete_roundtrip_and_limits() {
        let mut out = Vec::new();
        DeleteRequest::emit(true, ["*.o", "/target/"].into_iter(), &mut out).unwrap();
        let d = DeleteRequest::parse(&out).unwrap();
        assert!(d.root);
        assert_eq!(d.rules().collect::<Vec<_>>(), ["*.o", "/target/"]);
        assert_eq!(
            DeleteRequest::parse(&out[..out.len() - 1]),
            Err(WireError::TableTruncated)
        );
        let mut trailing = out.clone();
        trailing.push(0);
        assert_eq!(DeleteRequest::parse(&trailing), Err(WireError::TrailingBytes));
        let mut bad = out.clone();
        bad[0] = 0x02;
        assert_eq!(DeleteRequest::parse(&bad), Err(WireError::BadFlags));
        let mut bad = out.clone();
        bad[2..4].copy_from_slice(&(MAX_DELETE_RULES as u16 + 1).to_le_bytes());
        assert_eq!(DeleteRequest::parse(&bad), Err(WireError::TooLarge));
        let mut bad = out.clone();
        *bad.last_mut().unwrap() = 0xff;
        assert_eq!(DeleteRequest::parse(&bad), Err(WireError::BadUtf8));
        // A rule is never cut: too long is an error, and nothing is left behind.
        let long = "x".repeat(MAX_PATH_LEN + 1);
        let mut out = vec![7];
        assert_eq!(
            DeleteRequest::emit(false, [long.as_str()].into_iter(), &mut out),
            Err(WireError::TooLarge)
        );
        assert_eq!(out, [7]);
        let mut out = Vec::new();
        DeleteRequest::emit(false, [].into_iter(), &mut out).unwrap();
        assert_eq!(out, [0; DELETE_HEAD_LEN]);
    }

    #[test]
    fn deleted_roundtrip_and_limits() {
        let mut out = DeletedHead {
            status: DeleteStatus::Done,
            count: 2,
        }
        .emit()
        .to_vec();
        DeletedEntry {
            kind: DeletedKind::File,
            path: b"old/a",
        }
        .emit(&mut out);
        DeletedEntry {
            kind: DeletedKind::Dir,
            path: b"old",
        }
        .emit(&mut out);
        let (head, it) = parse_deleted(&out).unwrap();
        assert_eq!(head.count, 2);
        let all: Vec<_> = it.collect::<Result<_, _>>().unwrap();
        assert_eq!(all[1].kind, DeletedKind::Dir);
        assert_eq!(all[0].path, b"old/a");
        let (_, it) = parse_deleted(&out[..out.len() - 1]).unwrap();
        assert_eq!(it.last(), Some(Err(WireError::TableTruncated)));
        // A skipped deletion names nothing.
        let skipped = DeletedHead {
            status: DeleteStatus::SkippedFailures,
            count: 1,
        }
        .emit();
        assert_eq!(parse_deleted(&skipped).err(), Some(WireError::LengthMismatch));
        let mut bad = out.clone();
        bad[0] = 3;
        assert_eq!(parse_deleted(&bad).err(), Some(WireError::BadFlags));
    }

    proptest! {
        #[test]
        fn delete_parse_emit(
            root: bool,
            rules in proptest::collection::vec("[^\\x00]{1,20}", 0..8),
        ) {
            let mut out = Vec::new();
            DeleteRequest::emit(root, rules.iter().map(String::as_str), &mut out).unwrap();
            let d = DeleteRequest::parse(&out).unwrap();
            prop_assert_eq!(d.root, root);
            prop_assert_eq!(d.rules().collect::<Vec<_>>(), rules.iter().map(String::as_str).collect::<Vec<_>>());
            let mut again = Vec::new();
            DeleteRequest::emit(d.root, d.rules().collect::<Vec<_>>().into_iter(), &mut again).unwrap();
            prop_assert_eq!(again, out);
        }

        #[test]
        fn deleted_parse_emit(
            entries in proptest::collection::vec((0u8..4, proptest::collection::vec(any::<u8>(), 1..40)), 0..8),
        ) {
            let mut out = DeletedHead { status: DeleteStatus::Done, count: entries.len() as u32 }.emit().to_vec();
            for (k, p) in &entries {
                DeletedEntry { kind: DeletedKind::from_u8(*k).unwrap(), path: p }.emit(&mut out);
            }
            let (head, it) = parse_deleted(&out).unwrap();
            let mut again = head.emit().to_vec();
            for e in it {
                e.unwrap().emit(&mut again);
            }
            prop_assert_eq!(again, out);
        }
    }
}
