//! The frames that open and close a files session: FILES_HELLO,
//! FILES_ACCEPT, the sender's FILES_END ([`TopMtime`]) and the receiver's
//! FILES_END report (`docs/wire.md` §10.2, §10.3, §10.9).

use crate::hello::MAX_AUTH_LEN;
use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::FILES_VERSION;

/// Flag on FILES_END: the body is the receiver's report (else empty).
pub const FLAG_FILES_REPORT: u16 = 0x0001;

/// FILES_HELLO flag: plan only; nothing will be written.
pub const HELLO_DRY_RUN: u8 = 0x01;
/// FILES_HELLO flag: literal chunks may arrive zstd-compressed.
pub const HELLO_COMPRESS: u8 = 0x02;
/// FILES_HELLO flag: a DELETE may come before FILES_END (in a dry run, after
/// the index, with the tree's FILE entries marked `LISTED`).
pub const HELLO_DELETE: u8 = 0x04;
/// FILES_HELLO flag: decide "unchanged" by content, not by size and mtime
/// (rsync's `--checksum`).
pub const HELLO_CHECKSUM: u8 = 0x08;
/// FILES_HELLO flag: write every byte, zeros included (`--no-sparse`);
/// without it the receiver leaves runs of zeros as holes (§10.8).
pub const HELLO_NO_SPARSE: u8 = 0x10;

/// FILES_ACCEPT flag: the session's destination directory already has
/// entries the receiver's chunk index may not describe (files put there by
/// other means): worth a PROBE even when `generation` is 0 (§10.10).
pub const ACCEPT_OCCUPIED: u8 = 0x01;

/// Fixed part of FILES_HELLO.
pub const FILES_HELLO_FIXED_LEN: usize = 32;
/// Body of FILES_ACCEPT.
pub const FILES_ACCEPT_LEN: usize = 64;
/// Fixed part of the FILES_END report.
pub const FILES_REPORT_FIXED_LEN: usize = 160;
/// Body of the sender's FILES_END when it carries [`TopMtime`].
pub const TOP_MTIME_LEN: usize = 16;
/// Longest remote directory in FILES_HELLO.
pub const MAX_REMOTE_DIR_LEN: usize = 4095;
/// Longest message list in a report.
pub const MAX_REPORT_TEXT: usize = 32 * 1024;

/// Byte ranges of the fixed parts.
mod field {
    use super::{tiles, Field};

    /// FILES_HELLO; `remote_dir` then `auth` follow.
    pub mod hello {
        use super::{tiles, Field};
        use crate::files::session::FILES_HELLO_FIXED_LEN as LEN;

        pub const VERSION: Field = Field::new(0, 2);
        pub const FLAGS: Field = Field::new(2, 1);
        pub const AUTH_METHOD: Field = Field::new(3, 1);
        pub const REMOTE_DIR_LEN: Field = Field::new(4, 2);
        pub const AUTH_LEN: Field = Field::new(6, 2);
        pub const CHUNK_AVG: Field = Field::new(8, 4);
        pub const RESERVED_12: Field = Field::new(12, 4);
        pub const SESSION_NONCE: Field = Field::new(16, 8);
        pub const RESERVED_24: Field = Field::new(24, 8);

        const _: () = assert!(tiles(
            &[
                VERSION,
                FLAGS,
                AUTH_METHOD,
                REMOTE_DIR_LEN,
                AUTH_LEN,
                CHUNK_AVG,
                RESERVED_12,
                SESSION_NONCE,
                RESERVED_24,
            ],
            LEN
        ));
    }

    /// The sender's FILES_END with the top directory's mtime.
    pub mod top {
        use super::{tiles, Field};
        use crate::files::session::TOP_MTIME_LEN as LEN;

        pub const MTIME_SEC: Field = Field::new(0, 8);
        pub const MTIME_NSEC: Field = Field::new(8, 4);
        pub const RESERVED: Field = Field::new(12, 4);

        const _: () = assert!(tiles(&[MTIME_SEC, MTIME_NSEC, RESERVED], LEN));
    }

    /// FILES_ACCEPT.
    pub mod accept {
        use super::{tiles, Field};
        use crate::files::session::FILES_ACCEPT_LEN as LEN;

        pub const STORE_ID: Field = Field::new(0, 16);
        pub const GENERATION: Field = Field::new(16, 8);
        pub const CAPACITY: Field = Field::new(24, 8);
        pub const FREE: Field = Field::new(32, 8);
        pub const MAX_CHUNKS_BODY: Field = Field::new(40, 4);
        pub const AUTH_METHOD: Field = Field::new(44, 1);
        pub const FLAGS: Field = Field::new(45, 1);
        pub const RESERVED: Field = Field::new(46, 18);

        const _: () = assert!(tiles(
            &[
                STORE_ID,
                GENERATION,
                CAPACITY,
                FREE,
                MAX_CHUNKS_BODY,
                AUTH_METHOD,
                FLAGS,
                RESERVED
            ],
            LEN
        ));
    }

    /// FILES_END report: nineteen u64 (in wire order, which is not the
    /// struct's: `files_metadata_only` and `files_deleted` came last), then
    /// lengths; the text follows.
    pub mod report {
        use super::{tiles, Field};
        use crate::files::session::FILES_REPORT_FIXED_LEN as LEN;

        pub const FILES_WRITTEN: Field = Field::new(0, 8);
        pub const FILES_UNCHANGED: Field = Field::new(8, 8);
        pub const FILES_FAILED: Field = Field::new(16, 8);
        pub const DIRS: Field = Field::new(24, 8);
        pub const SYMLINKS: Field = Field::new(32, 8);
        pub const EFFECTIVE_BYTES: Field = Field::new(40, 8);
        pub const MATCHED_BYTES: Field = Field::new(48, 8);
        pub const LITERAL_BYTES: Field = Field::new(56, 8);
        pub const LITERAL_WIRE_BYTES: Field = Field::new(64, 8);
        pub const WIRE_BYTES: Field = Field::new(72, 8);
        pub const NAK_CHUNKS: Field = Field::new(80, 8);
        pub const REPAIRED_BYTES: Field = Field::new(88, 8);
        pub const STORE_APPENDED: Field = Field::new(96, 8);
        pub const STORE_GENERATION: Field = Field::new(104, 8);
        pub const ELAPSED_NS: Field = Field::new(112, 8);
        pub const USER_US: Field = Field::new(120, 8);
        pub const SYS_US: Field = Field::new(128, 8);
        pub const FILES_METADATA_ONLY: Field = Field::new(136, 8);
        pub const FILES_DELETED: Field = Field::new(144, 8);
        pub const TEXT_LEN: Field = Field::new(152, 4);
        pub const RESERVED_156: Field = Field::new(156, 4);

        const _: () = assert!(tiles(
            &[
                FILES_WRITTEN,
                FILES_UNCHANGED,
                FILES_FAILED,
                DIRS,
                SYMLINKS,
                EFFECTIVE_BYTES,
                MATCHED_BYTES,
                LITERAL_BYTES,
                LITERAL_WIRE_BYTES,
                WIRE_BYTES,
                NAK_CHUNKS,
                REPAIRED_BYTES,
                STORE_APPENDED,
                STORE_GENERATION,
                ELAPSED_NS,
                USER_US,
                SYS_US,
                FILES_METADATA_ONLY,
                FILES_DELETED,
                TEXT_LEN,
                RESERVED_156,
            ],
            LEN
        ));
    }
}

/// The sender's opening frame of a files session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesHello<'a> {
    /// [`HELLO_DRY_RUN`], [`HELLO_COMPRESS`], [`HELLO_DELETE`], [`HELLO_CHECKSUM`].
    pub flags: u8,
    /// Authentication method (0 = none).
    pub auth_method: u8,
    /// Average chunk size the sender cuts at (informational).
    pub chunk_avg: u32,
    /// Random session identifier.
    pub session_nonce: u64,
    /// Sub-directory of the receiver's destination root to write into
    /// (relative, `/`-separated; empty = the root itself).
    pub remote_dir: &'a [u8],
    /// Authentication data (empty for method 0).
    pub auth: &'a [u8],
}

impl<'a> FilesHello<'a> {
    /// Decodes a FILES_HELLO body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::hello as f;
        let b = Reader::<FILES_HELLO_FIXED_LEN>::new(body)?;
        let version = b.u16(f::VERSION);
        if version != FILES_VERSION {
            // The error carries one byte: the low one, as the spec's vectors expect.
            return Err(WireError::UnsupportedVersion(version.to_le_bytes()[0]));
        }
        let flags = b.u8(f::FLAGS);
        if flags & !(HELLO_DRY_RUN | HELLO_COMPRESS | HELLO_DELETE | HELLO_CHECKSUM | HELLO_NO_SPARSE) != 0 {
            return Err(WireError::BadFlags);
        }
        if !b.is_zero(f::RESERVED_12) || !b.is_zero(f::RESERVED_24) {
            return Err(WireError::ReservedNonZero);
        }
        let dir_len = usize::from(b.u16(f::REMOTE_DIR_LEN));
        let auth_len = usize::from(b.u16(f::AUTH_LEN));
        if dir_len > MAX_REMOTE_DIR_LEN || auth_len > MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILES_HELLO_FIXED_LEN + dir_len + auth_len {
            return Err(WireError::LengthMismatch);
        }
        let (remote_dir, auth) = body
            .get(FILES_HELLO_FIXED_LEN..)
            .and_then(|rest| rest.split_at_checked(dir_len))
            .ok_or(WireError::LengthMismatch)?;
        Ok(Self {
            flags,
            auth_method: b.u8(f::AUTH_METHOD),
            chunk_avg: b.u32(f::CHUNK_AVG),
            session_nonce: b.u64(f::SESSION_NONCE),
            remote_dir,
            auth,
        })
    }

    /// Appends the encoded body (remote dir and auth cut at their limits).
    pub fn emit(&self, out: &mut Vec<u8>) {
        use field::hello as f;
        let dir = &self.remote_dir[..self.remote_dir.len().min(MAX_REMOTE_DIR_LEN)];
        let auth = &self.auth[..self.auth.len().min(MAX_AUTH_LEN)];
        let mut w = Writer::<FILES_HELLO_FIXED_LEN>::new();
        w.u16(f::VERSION, FILES_VERSION)
            .u8(f::FLAGS, self.flags)
            .u8(f::AUTH_METHOD, self.auth_method)
            .u16(f::REMOTE_DIR_LEN, dir.len() as u16)
            .u16(f::AUTH_LEN, auth.len() as u16)
            .u32(f::CHUNK_AVG, self.chunk_avg)
            .u64(f::SESSION_NONCE, self.session_nonce);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(dir);
        out.extend_from_slice(auth);
    }
}

/// The receiver's answer to FILES_HELLO: which store it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesAccept {
    /// Random identity of the receiver's store (a new store, a new id).
    pub store_id: [u8; 16],
    /// Index entries committed so far.
    pub generation: u64,
    /// Store capacity in bytes.
    pub capacity: u64,
    /// Bytes still free in the store.
    pub free: u64,
    /// Largest CHUNKS / REPAIR body accepted.
    pub max_chunks_body: u32,
    /// Authentication method (0 = none).
    pub auth_method: u8,
    /// [`ACCEPT_OCCUPIED`] or 0.
    pub flags: u8,
}

impl FilesAccept {
    /// Decodes a FILES_ACCEPT body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::accept as f;
        if body.len() != FILES_ACCEPT_LEN {
            return Err(WireError::LengthMismatch);
        }
        let b = Reader::<FILES_ACCEPT_LEN>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let flags = b.u8(f::FLAGS);
        if flags & !ACCEPT_OCCUPIED != 0 {
            return Err(WireError::BadFlags);
        }
        Ok(Self {
            flags,
            store_id: b.array(f::STORE_ID),
            generation: b.u64(f::GENERATION),
            capacity: b.u64(f::CAPACITY),
            free: b.u64(f::FREE),
            max_chunks_body: b.u32(f::MAX_CHUNKS_BODY),
            auth_method: b.u8(f::AUTH_METHOD),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; FILES_ACCEPT_LEN] {
        use field::accept as f;
        let mut w = Writer::<FILES_ACCEPT_LEN>::new();
        w.put(f::STORE_ID, &self.store_id)
            .u64(f::GENERATION, self.generation)
            .u64(f::CAPACITY, self.capacity)
            .u64(f::FREE, self.free)
            .u32(f::MAX_CHUNKS_BODY, self.max_chunks_body)
            .u8(f::AUTH_METHOD, self.auth_method)
            .u8(f::FLAGS, self.flags);
        w.finish()
    }
}

/// The sender's FILES_END body (§10.9): the mtime of the directory whose
/// contents were sent (`DIR/`), for the remote directory itself — rsync
/// sets it on the destination directory. An empty body carries none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopMtime {
    /// Seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds part (< 10^9).
    pub mtime_nsec: u32,
}

impl TopMtime {
    /// Decodes the sender's FILES_END body: `None` if empty.
    pub fn parse_end(body: &[u8]) -> Result<Option<Self>, WireError> {
        use field::top as f;
        if body.is_empty() {
            return Ok(None);
        }
        if body.len() != TOP_MTIME_LEN {
            return Err(WireError::LengthMismatch);
        }
        let b = Reader::<TOP_MTIME_LEN>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let mtime_nsec = b.u32(f::MTIME_NSEC);
        if !super::valid_nsec(mtime_nsec) {
            return Err(WireError::LengthMismatch);
        }
        Ok(Some(Self {
            mtime_sec: b.i64(f::MTIME_SEC),
            mtime_nsec,
        }))
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; TOP_MTIME_LEN] {
        use field::top as f;
        let mut w = Writer::<TOP_MTIME_LEN>::new();
        w.i64(f::MTIME_SEC, self.mtime_sec)
            .u32(f::MTIME_NSEC, self.mtime_nsec);
        w.finish()
    }

    /// The mtime in nanoseconds since the epoch.
    pub fn ns(&self) -> i128 {
        i128::from(self.mtime_sec) * 1_000_000_000 + i128::from(self.mtime_nsec)
    }

    /// From nanoseconds since the epoch (`None` beyond an i64 of seconds).
    pub fn from_ns(ns: i128) -> Option<Self> {
        Some(Self {
            mtime_sec: i64::try_from(ns.div_euclid(1_000_000_000)).ok()?,
            mtime_nsec: ns.rem_euclid(1_000_000_000) as u32,
        })
    }
}

/// The receiver's account of a files session (FILES_END with REPORT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilesReport<'a> {
    /// Files written (new or changed), verified and renamed into place.
    pub files_written: u64,
    /// Files left as they were: same size and mtime at the destination.
    pub files_unchanged: u64,
    /// Files whose content the destination already held (the receiver's
    /// manifest): only mode and mtime were set.
    pub files_metadata_only: u64,
    /// Entries refused or failed (see `messages`).
    pub files_failed: u64,
    /// Directories created or present.
    pub dirs: u64,
    /// Symlinks in place: made, or kept (the same link was there).
    pub symlinks: u64,
    /// Entries removed because the sender's tree lacks them (DELETE; in a
    /// dry run, that would be removed).
    pub files_deleted: u64,
    /// Bytes of files the destination now holds as sent (written + unchanged).
    pub effective_bytes: u64,
    /// Bytes rebuilt from chunks the store already held.
    pub matched_bytes: u64,
    /// Literal chunk bytes received (uncompressed size).
    pub literal_bytes: u64,
    /// Literal bytes as they crossed the wire (compressed size when compressed).
    pub literal_wire_bytes: u64,
    /// All bytes the receiver read from the transport.
    pub wire_bytes: u64,
    /// Chunks that failed their hash check and were NAKed.
    pub nak_chunks: u64,
    /// Bytes repaired through REPAIR.
    pub repaired_bytes: u64,
    /// New bytes appended to the store.
    pub store_appended: u64,
    /// Store generation after the session.
    pub store_generation: u64,
    /// Receiver elapsed nanoseconds, from FILES_HELLO to the report.
    pub elapsed_ns: u64,
    /// Receiver user CPU, microseconds.
    pub user_us: u64,
    /// Receiver system CPU, microseconds.
    pub sys_us: u64,
    /// Why entries failed, one `path: reason` per line (UTF-8, lossy).
    pub messages: &'a str,
}

impl<'a> FilesReport<'a> {
    /// Decodes a report body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::report as f;
        let b = Reader::<FILES_REPORT_FIXED_LEN>::new(body)?;
        let text_len = b.u32(f::TEXT_LEN) as usize;
        if !b.is_zero(f::RESERVED_156) {
            return Err(WireError::ReservedNonZero);
        }
        if text_len > MAX_REPORT_TEXT {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILES_REPORT_FIXED_LEN + text_len {
            return Err(WireError::LengthMismatch);
        }
        let text = body.get(FILES_REPORT_FIXED_LEN..).ok_or(WireError::Truncated)?;
        let messages = core::str::from_utf8(text).map_err(|_| WireError::BadUtf8)?;
        Ok(Self {
            files_written: b.u64(f::FILES_WRITTEN),
            files_unchanged: b.u64(f::FILES_UNCHANGED),
            files_failed: b.u64(f::FILES_FAILED),
            dirs: b.u64(f::DIRS),
            symlinks: b.u64(f::SYMLINKS),
            effective_bytes: b.u64(f::EFFECTIVE_BYTES),
            matched_bytes: b.u64(f::MATCHED_BYTES),
            literal_bytes: b.u64(f::LITERAL_BYTES),
            literal_wire_bytes: b.u64(f::LITERAL_WIRE_BYTES),
            wire_bytes: b.u64(f::WIRE_BYTES),
            nak_chunks: b.u64(f::NAK_CHUNKS),
            repaired_bytes: b.u64(f::REPAIRED_BYTES),
            store_appended: b.u64(f::STORE_APPENDED),
            store_generation: b.u64(f::STORE_GENERATION),
            elapsed_ns: b.u64(f::ELAPSED_NS),
            user_us: b.u64(f::USER_US),
            sys_us: b.u64(f::SYS_US),
            files_metadata_only: b.u64(f::FILES_METADATA_ONLY),
            files_deleted: b.u64(f::FILES_DELETED),
            messages,
        })
    }

    /// Appends the encoded body; messages are cut at [`MAX_REPORT_TEXT`]
    /// bytes on a character boundary.
    pub fn emit(&self, out: &mut Vec<u8>) {
        use field::report as f;
        let mut end = self.messages.len().min(MAX_REPORT_TEXT);
        while !self.messages.is_char_boundary(end) {
            end -= 1;
        }
        let mut w = Writer::<FILES_REPORT_FIXED_LEN>::new();
        w.u64(f::FILES_WRITTEN, self.files_written)
            .u64(f::FILES_UNCHANGED, self.files_unchanged)
            .u64(f::FILES_FAILED, self.files_failed)
            .u64(f::DIRS, self.dirs)
            .u64(f::SYMLINKS, self.symlinks)
            .u64(f::EFFECTIVE_BYTES, self.effective_bytes)
            .u64(f::MATCHED_BYTES, self.matched_bytes)
            .u64(f::LITERAL_BYTES, self.literal_bytes)
            .u64(f::LITERAL_WIRE_BYTES, self.literal_wire_bytes)
            .u64(f::WIRE_BYTES, self.wire_bytes)
            .u64(f::NAK_CHUNKS, self.nak_chunks)
            .u64(f::REPAIRED_BYTES, self.repaired_bytes)
            .u64(f::STORE_APPENDED, self.store_appended)
            .u64(f::STORE_GENERATION, self.store_generation)
            .u64(f::ELAPSED_NS, self.elapsed_ns)
            .u64(f::USER_US, self.user_us)
            .u64(f::SYS_US, self.sys_us)
            .u64(f::FILES_METADATA_ONLY, self.files_metadata_only)
            .u64(f::FILES_DELETED, self.files_deleted)
            .u32(f::TEXT_LEN, end as u32);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(&self.messages.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_roundtrip_and_limits() {
        let h = FilesHello {
            flags: HELLO_COMPRESS,
            auth_method: 0,
            chunk_avg: 32 << 10,
            session_nonce: 7,
            remote_dir: b"sub/dir",
            auth: b"",
        };
        let mut out = Vec::new();
        h.emit(&mut out);
        assert_eq!(FilesHello::parse(&out), Ok(h));
        assert_eq!(
            FilesHello::parse(&out[..out.len() - 1]),
            Err(WireError::LengthMismatch)
        );
        let mut bad = out.clone();
        bad[2] = 0x80;
        assert_eq!(FilesHello::parse(&bad), Err(WireError::BadFlags));
        // NO_SPARSE (0x10) is the highest flag; the next bit is refused.
        let mut dense = out.clone();
        dense[2] |= HELLO_NO_SPARSE;
        assert_eq!(
            FilesHello::parse(&dense).map(|h| h.flags),
            Ok(HELLO_COMPRESS | HELLO_NO_SPARSE)
        );
        dense[2] |= 0x20;
        assert_eq!(FilesHello::parse(&dense), Err(WireError::BadFlags));
        let mut bad = out;
        bad[0] = 9;
        assert!(matches!(
            FilesHello::parse(&bad),
            Err(WireError::UnsupportedVersion(_))
        ));
    }

    #[test]
    fn top_mtime_roundtrip_and_limits() {
        assert_eq!(TopMtime::parse_end(&[]), Ok(None));
        let t = TopMtime::from_ns(-1).expect("in range");
        assert_eq!((t.mtime_sec, t.mtime_nsec), (-1, 999_999_999));
        assert_eq!(t.ns(), -1);
        let body = t.emit();
        assert_eq!(TopMtime::parse_end(&body), Ok(Some(t)));
        assert_eq!(TopMtime::parse_end(&body[..15]), Err(WireError::LengthMismatch));
        let mut bad = body;
        bad[15] = 1;
        assert_eq!(TopMtime::parse_end(&bad), Err(WireError::ReservedNonZero));
        let mut bad = body;
        bad[8..12].copy_from_slice(&1_000_000_000u32.to_le_bytes());
        assert_eq!(TopMtime::parse_end(&bad), Err(WireError::LengthMismatch));
        assert_eq!(TopMtime::from_ns(i128::MAX), None);
    }

    #[test]
    fn accept_roundtrip() {
        let a = FilesAccept {
            store_id: [3; 16],
            generation: 12,
            capacity: 1 << 40,
            free: 1 << 39,
            max_chunks_body: 4 << 20,
            auth_method: 0,
            flags: ACCEPT_OCCUPIED,
        };
        assert_eq!(FilesAccept::parse(&a.emit()), Ok(a));
        let mut bad = a.emit();
        bad[45] = 0x02;
        assert_eq!(FilesAccept::parse(&bad), Err(WireError::BadFlags));
    }

    #[test]
    fn report_roundtrip() {
        let r = FilesReport {
            files_written: 1,
            files_unchanged: 2,
            effective_bytes: 3,
            sys_us: 17,
            messages: "a/b: refused\n",
            ..FilesReport::default()
        };
        let mut out = Vec::new();
        r.emit(&mut out);
        assert_eq!(FilesReport::parse(&out), Ok(r));
    }

    proptest! {
        #[test]
        fn hello_parse_emit(
            flags in 0u8..16,
            auth_method: u8,
            chunk_avg: u32,
            session_nonce: u64,
            remote_dir in proptest::collection::vec(any::<u8>(), 0..64),
            auth in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let h = FilesHello { flags, auth_method, chunk_avg, session_nonce, remote_dir: &remote_dir, auth: &auth };
            let mut out = Vec::new();
            h.emit(&mut out);
            prop_assert_eq!(FilesHello::parse(&out), Ok(h));
        }

        #[test]
        fn accept_parse_emit(
            store_id: [u8; 16],
            generation: u64,
            capacity: u64,
            free: u64,
            max_chunks_body: u32,
            auth_method: u8,
            occupied: bool,
        ) {
            let flags = if occupied { ACCEPT_OCCUPIED } else { 0 };
            let a = FilesAccept { store_id, generation, capacity, free, max_chunks_body, auth_method, flags };
            prop_assert_eq!(FilesAccept::parse(&a.emit()), Ok(a));
        }

        #[test]
        fn report_parse_emit(v: [u64; 19], messages in "\\PC{0,40}") {
            let r = FilesReport {
                files_written: v[0],
                files_unchanged: v[1],
                files_metadata_only: v[2],
                files_failed: v[3],
                dirs: v[4],
                symlinks: v[5],
                effective_bytes: v[6],
                matched_bytes: v[7],
                literal_bytes: v[8],
                literal_wire_bytes: v[9],
                wire_bytes: v[10],
                nak_chunks: v[11],
                repaired_bytes: v[12],
                store_appended: v[13],
                store_generation: v[14],
                elapsed_ns: v[15],
                user_us: v[16],
                sys_us: v[17],
                files_deleted: v[18],
                messages: &messages,
            };
            let mut out = Vec::new();
            r.emit(&mut out);
            prop_assert_eq!(FilesReport::parse(&out), Ok(r));
        }
    }
}
