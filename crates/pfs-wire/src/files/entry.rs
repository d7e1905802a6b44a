//! FILE (`docs/wire.md` §10.6): one entry of the tree — a file, directory
//! or symlink — with its metadata; a file's chunks follow in CHUNKS frames.
//! What FILE carries beyond its fixed fields (flags `LISTED` and `LINKED`,
//! the attribute block) is [`FileExtra`], in `attrs` beside this file.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::attrs::parse_attrs;
use super::{valid_nsec, FileExtra, Hash};

/// Fixed part of FILE.
pub const FILE_FIXED_LEN: usize = 80;
/// Longest path or symlink target in a FILE frame.
pub const MAX_PATH_LEN: usize = 4095;
/// FILE `file_flags` bit: the receiver answered PROBE that it holds this
/// file's content; no CHUNKS follow (`chunk_count` = 0, `size` > 0).
pub const FILE_HELD: u8 = 0x01;
/// FILE `file_flags` bit: a hard link to a regular file of the session
/// whose path is in the target field; `chunk_count` = 0, no CHUNKS.
pub const FILE_LINKED: u8 = 0x02;
/// FILE `file_flags` bit: a dry run's listing for DELETE (§10.12): the
/// entry is named, nothing is written; `chunk_count` = 0, no CHUNKS.
pub const FILE_LISTED: u8 = 0x04;
/// FILE `file_flags` bit: a file sent while the sender still reads it
/// (§10.13): `chunk_count` = 0 and `file_hash` zero here, `size` > 0; its
/// CHUNKS follow until their lengths reach `size`, then FILE_DONE.
pub const FILE_STREAMED: u8 = 0x08;

/// Byte ranges of FILE's fixed part; `path` then the symlink target follow.
mod field {
    use super::{tiles, Field, FILE_FIXED_LEN};

    pub const KIND: Field = Field::new(0, 1);
    pub const FILE_FLAGS: Field = Field::new(1, 1);
    pub const PATH_LEN: Field = Field::new(2, 2);
    pub const MODE: Field = Field::new(4, 4);
    pub const MTIME_SEC: Field = Field::new(8, 8);
    pub const MTIME_NSEC: Field = Field::new(16, 4);
    pub const CHUNK_COUNT: Field = Field::new(20, 4);
    pub const SIZE: Field = Field::new(24, 8);
    pub const FILE_HASH: Field = Field::new(32, 32);
    pub const FILE_NO: Field = Field::new(64, 8);
    pub const LINK_LEN: Field = Field::new(72, 4);
    /// Length of the attribute block after the target (`attrs`).
    pub const ATTRS_LEN: Field = Field::new(76, 4);

    const _: () = assert!(tiles(
        &[
            KIND,
            FILE_FLAGS,
            PATH_LEN,
            MODE,
            MTIME_SEC,
            MTIME_NSEC,
            CHUNK_COUNT,
            SIZE,
            FILE_HASH,
            FILE_NO,
            LINK_LEN,
            ATTRS_LEN,
        ],
        FILE_FIXED_LEN
    ));
}

/// Kind of a FILE entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    /// A regular file; its chunks follow in CHUNKS frames.
    File = 0,
    /// A directory.
    Dir = 1,
    /// A symbolic link; the target is in the FILE frame.
    Symlink = 2,
}

impl EntryKind {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::File,
            1 => Self::Dir,
            2 => Self::Symlink,
            _ => return Err(WireError::BadFlags),
        })
    }
}

/// One entry of the tree: metadata, and for files the file hash and
/// how many chunks follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry<'a> {
    /// Sequence number of the entry in the session, from 0.
    pub file_no: u64,
    /// File, directory or symlink.
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds part of the modification time (< 10^9).
    pub mtime_nsec: u32,
    /// Size in bytes (0 for directories and symlinks).
    pub size: u64,
    /// Chunks that follow (0 unless a file).
    pub chunk_count: u32,
    /// The file hash, computed from the chunk list (docs/wire.md §10.6;
    /// zeros unless a file).
    pub file_hash: Hash,
    /// Relative path, `/`-separated bytes (the receiver validates it).
    pub path: &'a [u8],
    /// Symlink target bytes, or for a `LINKED` file the path of the file
    /// it is a hard link to (empty otherwise).
    pub link_target: &'a [u8],
    /// The receiver said (PROBE_REPLY) it holds this content: no CHUNKS follow.
    pub held: bool,
    /// Listing and hard-link flags, owner, group, extended attributes.
    pub extra: FileExtra<'a>,
}

impl<'a> FileEntry<'a> {
    /// Decodes a FILE body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = Reader::<FILE_FIXED_LEN>::new(body)?;
        let kind = EntryKind::from_u8(b.u8(field::KIND))?;
        let file_flags = b.u8(field::FILE_FLAGS);
        if file_flags & !(FILE_HELD | FILE_LINKED | FILE_LISTED | FILE_STREAMED) != 0 {
            return Err(WireError::BadFlags);
        }
        let held = file_flags & FILE_HELD != 0;
        let linked = file_flags & FILE_LINKED != 0;
        let listed = file_flags & FILE_LISTED != 0;
        let streamed = file_flags & FILE_STREAMED != 0;
        let path_len = usize::from(b.u16(field::PATH_LEN));
        let link_len = b.u32(field::LINK_LEN) as usize;
        let attrs_len = b.u32(field::ATTRS_LEN) as usize;
        if path_len > MAX_PATH_LEN || link_len > MAX_PATH_LEN {
            return Err(WireError::TooLarge);
        }
        if Some(body.len()) != (FILE_FIXED_LEN + path_len + link_len).checked_add(attrs_len) {
            return Err(WireError::LengthMismatch);
        }
        let mtime_nsec = b.u32(field::MTIME_NSEC);
        let size = b.u64(field::SIZE);
        let chunk_count = b.u32(field::CHUNK_COUNT);
        // At most one of HELD, LINKED, LISTED, STREAMED: each says why
        // `chunk_count` is zero.
        if u8::from(held) + u8::from(linked) + u8::from(listed) + u8::from(streamed) > 1 {
            return Err(WireError::BadFlags);
        }
        let file_hash: Hash = b.array(field::FILE_HASH);
        let consistent = valid_nsec(mtime_nsec)
            && match kind {
                EntryKind::File if held => link_len == 0 && size > 0 && chunk_count == 0,
                EntryKind::File if linked => link_len > 0 && chunk_count == 0,
                EntryKind::File if listed => link_len == 0 && chunk_count == 0,
                EntryKind::File if streamed => {
                    link_len == 0 && size > 0 && chunk_count == 0 && file_hash == [0; 32]
                }
                EntryKind::File => link_len == 0 && (chunk_count == 0) == (size == 0),
                EntryKind::Dir => {
                    !held && !linked && !streamed && link_len == 0 && size == 0 && chunk_count == 0
                }
                EntryKind::Symlink => {
                    !held && !linked && !streamed && link_len > 0 && size == 0 && chunk_count == 0
                }
            };
        if !consistent {
            return Err(WireError::LengthMismatch);
        }
        let (path, rest) = body
            .get(FILE_FIXED_LEN..)
            .and_then(|rest| rest.split_at_checked(path_len))
            .ok_or(WireError::LengthMismatch)?;
        let (link_target, attrs) = rest.split_at_checked(link_len).ok_or(WireError::LengthMismatch)?;
        let mut extra = FileExtra {
            listed,
            linked,
            streamed,
            ..FileExtra::default()
        };
        parse_attrs(attrs, &mut extra)?;
        Ok(Self {
            file_no: b.u64(field::FILE_NO),
            kind,
            mode: b.u32(field::MODE),
            mtime_sec: b.i64(field::MTIME_SEC),
            mtime_nsec,
            size,
            chunk_count,
            file_hash,
            path,
            link_target,
            held,
            extra,
        })
    }

    /// Appends the encoded body (path and target cut at [`MAX_PATH_LEN`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let path = &self.path[..self.path.len().min(MAX_PATH_LEN)];
        let link = &self.link_target[..self.link_target.len().min(MAX_PATH_LEN)];
        let x = &self.extra;
        let flags = if self.held { FILE_HELD } else { 0 }
            | if x.linked { FILE_LINKED } else { 0 }
            | if x.listed { FILE_LISTED } else { 0 }
            | if x.streamed { FILE_STREAMED } else { 0 };
        let mut w = Writer::<FILE_FIXED_LEN>::new();
        w.u8(field::KIND, self.kind as u8)
            .u8(field::FILE_FLAGS, flags)
            .u16(field::PATH_LEN, path.len() as u16)
            .u32(field::MODE, self.mode)
            .i64(field::MTIME_SEC, self.mtime_sec)
            .u32(field::MTIME_NSEC, self.mtime_nsec)
            .u32(field::CHUNK_COUNT, self.chunk_count)
            .u64(field::SIZE, self.size)
            .put(field::FILE_HASH, &self.file_hash)
            .u64(field::FILE_NO, self.file_no)
            .u32(field::LINK_LEN, link.len() as u32)
            .u32(field::ATTRS_LEN, x.attrs_len() as u32);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(path);
        out.extend_from_slice(link);
        x.emit_attrs(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn file_entry_roundtrip_and_consistency() {
        let f = FileEntry {
            file_no: 4,
            kind: EntryKind::File,
            mode: 0o644,
            mtime_sec: -5,
            mtime_nsec: 999_999_999,
            size: 10,
            chunk_count: 1,
            file_hash: [9; 32],
            path: "dir/ünï".as_bytes(),
            link_target: b"",
            held: false,
            extra: FileExtra::default(),
        };
        let mut out = Vec::new();
        f.emit(&mut out);
        assert_eq!(FileEntry::parse(&out), Ok(f));
        // A file with bytes but no chunks is inconsistent.
        let mut bad = out.clone();
        bad[20..24].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(FileEntry::parse(&bad), Err(WireError::LengthMismatch));
        let mut bad = out;
        bad[16..20].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        assert_eq!(FileEntry::parse(&bad), Err(WireError::LengthMismatch));
        let l = FileEntry {
            kind: EntryKind::Symlink,
            size: 0,
            chunk_count: 0,
            link_target: b"../x",
            ..f
        };
        let mut out = Vec::new();
        l.emit(&mut out);
        assert_eq!(FileEntry::parse(&out), Ok(l));
    }

    proptest! {
        /// Any FILE the parser accepts round-trips: `shape` picks a file, a
        /// held file, a directory, a symlink, a hard link or a listed file,
        /// which decides which of size, chunk count, flags and target may be
        /// set; any entry may carry an owner and a group.
        #[test]
        fn file_parse_emit(
            shape in 0u8..6,
            uid in proptest::option::of(any::<u32>()),
            gid in proptest::option::of(any::<u32>()),
            file_no: u64,
            mode: u32,
            mtime_sec: i64,
            mtime_nsec in 0u32..1_000_000_000,
            size in 1u64..,
            chunk_count in 1u32..,
            file_hash: [u8; 32],
            path in proptest::collection::vec(any::<u8>(), 0..64),
            target in proptest::collection::vec(any::<u8>(), 1..64),
        ) {
            let base = FileEntry {
                file_no,
                kind: EntryKind::File,
                mode,
                mtime_sec,
                mtime_nsec,
                size: 0,
                chunk_count: 0,
                file_hash,
                path: &path,
                link_target: b"",
                held: false,
                extra: FileExtra { uid, gid, ..FileExtra::default() },
            };
            let f = match shape {
                0 => FileEntry { size, chunk_count, ..base },
                1 => FileEntry { size, held: true, ..base },
                2 => FileEntry { kind: EntryKind::Dir, ..base },
                3 => FileEntry { kind: EntryKind::Symlink, link_target: &target, ..base },
                4 => FileEntry {
                    size,
                    link_target: &target,
                    extra: FileExtra { linked: true, ..base.extra },
                    ..base
                },
                _ => FileEntry { size, extra: FileExtra { listed: true, ..base.extra }, ..base },
            };
            let mut out = Vec::new();
            f.emit(&mut out);
            prop_assert_eq!(out.len(), FILE_FIXED_LEN + f.path.len() + f.link_target.len() + f.extra.attrs_len());
            prop_assert_eq!(FileEntry::parse(&out), Ok(f));
        }
    }
}

#[cfg(test)]
mod extra_tests {
    use super::*;
    use crate::files::Xattrs;

    fn file(no: u64) -> FileEntry<'static> {
        FileEntry {
            file_no: no,
            kind: EntryKind::File,
            mode: 0o644,
            mtime_sec: 1,
            mtime_nsec: 2,
            size: 5,
            chunk_count: 1,
            file_hash: [1; 32],
            path: b"a/b",
            link_target: b"",
            held: false,
            extra: FileExtra::default(),
        }
    }

    #[test]
    fn linked_listed_and_attributes_round_trip() {
        let mut raw = Vec::new();
        Xattrs::encode([(&b"user.x"[..], &b"1"[..])], 1024, &mut raw);
        let linked = FileEntry {
            chunk_count: 0,
            link_target: b"a/first",
            extra: FileExtra {
                linked: true,
                uid: Some(65534),
                gid: Some(65534),
                xattrs: Xattrs::parse(&raw).unwrap(),
                ..FileExtra::default()
            },
            ..file(7)
        };
        let mut out = Vec::new();
        linked.emit(&mut out);
        assert_eq!(out[1], FILE_LINKED);
        assert_eq!(FileEntry::parse(&out), Ok(linked));
        // LINKED without the path it links to, and a linked file with chunks.
        let mut bad = Vec::new();
        file(7).emit(&mut bad);
        bad[1] = FILE_LINKED;
        assert_eq!(FileEntry::parse(&bad), Err(WireError::LengthMismatch));
        let mut bad = out.clone();
        bad[20] = 1;
        assert_eq!(FileEntry::parse(&bad), Err(WireError::LengthMismatch));
        // A listed file has a size and no chunks; listed and held together are refused.
        let listed = FileEntry {
            chunk_count: 0,
            extra: FileExtra {
                listed: true,
                ..FileExtra::default()
            },
            ..file(1)
        };
        let mut out = Vec::new();
        listed.emit(&mut out);
        assert_eq!(FileEntry::parse(&out), Ok(listed));
        out[1] |= FILE_HELD;
        assert_eq!(FileEntry::parse(&out), Err(WireError::BadFlags));
        // attrs_len past the body.
        let mut out = Vec::new();
        file(1).emit(&mut out);
        out[76] = 1;
        assert_eq!(FileEntry::parse(&out), Err(WireError::LengthMismatch));
    }
}
