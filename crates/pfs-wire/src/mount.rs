//! Bodies of the mount frames (`docs/wire.md` §12): a client reads a tree
//! that a `pfs serve --dest` holds, lazily: the listing first, then a file's
//! recipe (its chunks' lengths and hashes) when it is opened, then only the
//! chunks it reads and does not hold already.
//!
//! ```text
//! C: MOUNT_HELLO                S: MOUNT_ACCEPT (entries, chunk size, limits) | ERROR
//!                               S: LIST* (the last has LAST)
//! C: RECIPE_ASK (req, entry)    S: RECIPE* (req; the last has LAST)
//! C: FETCH (req, runs)          S: DATA* (req; the last has LAST)
//!    ... any number, in any order; replies to one request never interleave
//!    with replies to another ...
//! C: closes
//! ```
//!
//! Every decoder is zero-copy, bounds-checked and panic-free; the client
//! checks what a reply means (entry numbers, recipe lengths, chunk hashes)
//! against what it asked.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Version of the mount protocol carried in MOUNT_HELLO.
pub const MOUNT_VERSION: u16 = 1;
/// Flag on LIST, RECIPE and DATA: the last frame of its series.
pub const FLAG_LAST: u16 = 0x0001;
/// Longest `dir` in MOUNT_HELLO and longest path or symlink target in LIST.
pub const MAX_PATH_LEN: usize = 4095;
/// Length of a BLAKE3 hash.
pub const HASH_LEN: usize = 32;

/// A chunk hash.
pub type Hash = [u8; HASH_LEN];

/// Length of MOUNT_HELLO before `dir`.
pub const MOUNT_HELLO_FIXED_LEN: usize = 32;
/// Length of MOUNT_ACCEPT.
pub const MOUNT_ACCEPT_LEN: usize = 48;
/// Length of a LIST entry before its path and target.
pub const LIST_ENTRY_FIXED_LEN: usize = 32;
/// Length of RECIPE_ASK.
pub const RECIPE_ASK_LEN: usize = 16;
/// Length of RECIPE's head.
pub const RECIPE_HEAD_LEN: usize = 24;
/// Length of one RECIPE entry: `len` u32, hash.
pub const RECIPE_ENTRY_LEN: usize = 4 + HASH_LEN;
/// Length of FETCH's head.
pub const FETCH_HEAD_LEN: usize = 16;
/// Length of one FETCH run.
pub const FETCH_RUN_LEN: usize = 16;
/// Length of DATA's head.
pub const DATA_HEAD_LEN: usize = 16;
/// Length of a DATA entry before its bytes.
pub const DATA_ENTRY_FIXED_LEN: usize = 5;

mod field {
    use super::{tiles, Field};
    use super::{
        DATA_HEAD_LEN, FETCH_HEAD_LEN, FETCH_RUN_LEN, LIST_ENTRY_FIXED_LEN, MOUNT_ACCEPT_LEN,
        MOUNT_HELLO_FIXED_LEN, RECIPE_ASK_LEN, RECIPE_HEAD_LEN,
    };

    pub mod hello {
        use super::*;
        pub const VERSION: Field = Field::new(0, 2);
        pub const FLAGS: Field = Field::new(2, 1);
        pub const RESERVED_A: Field = Field::new(3, 1);
        pub const DIR_LEN: Field = Field::new(4, 2);
        pub const RESERVED_B: Field = Field::new(6, 2);
        pub const MAX_ENTRIES: Field = Field::new(8, 4);
        pub const MAX_DATA_BODY: Field = Field::new(12, 4);
        pub const NONCE: Field = Field::new(16, 8);
        pub const RESERVED_C: Field = Field::new(24, 8);
        const _: () = assert!(tiles(
            &[
                VERSION,
                FLAGS,
                RESERVED_A,
                DIR_LEN,
                RESERVED_B,
                MAX_ENTRIES,
                MAX_DATA_BODY,
                NONCE,
                RESERVED_C
            ],
            MOUNT_HELLO_FIXED_LEN
        ));
    }

    pub mod accept {
        use super::*;
        pub const ENTRIES: Field = Field::new(0, 8);
        pub const CHUNK_AVG: Field = Field::new(8, 4);
        pub const MAX_FETCH_CHUNKS: Field = Field::new(12, 4);
        pub const MAX_DATA_BODY: Field = Field::new(16, 4);
        pub const ROOT_MODE: Field = Field::new(20, 4);
        pub const ROOT_MTIME_SEC: Field = Field::new(24, 8);
        pub const ROOT_MTIME_NSEC: Field = Field::new(32, 4);
        pub const RESERVED: Field = Field::new(36, 12);
        const _: () = assert!(tiles(
            &[
                ENTRIES,
                CHUNK_AVG,
                MAX_FETCH_CHUNKS,
                MAX_DATA_BODY,
                ROOT_MODE,
                ROOT_MTIME_SEC,
                ROOT_MTIME_NSEC,
                RESERVED
            ],
            MOUNT_ACCEPT_LEN
        ));
    }

    pub mod entry {
        use super::*;
        pub const KIND: Field = Field::new(0, 1);
        pub const RESERVED_A: Field = Field::new(1, 1);
        pub const PATH_LEN: Field = Field::new(2, 2);
        pub const MODE: Field = Field::new(4, 4);
        pub const MTIME_SEC: Field = Field::new(8, 8);
        pub const MTIME_NSEC: Field = Field::new(16, 4);
        pub const LINK_LEN: Field = Field::new(20, 2);
        pub const RESERVED_B: Field = Field::new(22, 2);
        pub const SIZE: Field = Field::new(24, 8);
        const _: () = assert!(tiles(
            &[KIND, RESERVED_A, PATH_LEN, MODE, MTIME_SEC, MTIME_NSEC, LINK_LEN, RESERVED_B, SIZE],
            LIST_ENTRY_FIXED_LEN
        ));
    }

    pub mod ask {
        use super::*;
        pub const REQ: Field = Field::new(0, 4);
        pub const RESERVED: Field = Field::new(4, 4);
        pub const ENTRY: Field = Field::new(8, 8);
        const _: () = assert!(tiles(&[REQ, RESERVED, ENTRY], RECIPE_ASK_LEN));
    }

    pub mod recipe {
        use super::*;
        pub const REQ: Field = Field::new(0, 4);
        pub const STATUS: Field = Field::new(4, 1);
        pub const RESERVED_A: Field = Field::new(5, 3);
        pub const FIRST: Field = Field::new(8, 8);
        pub const COUNT: Field = Field::new(16, 4);
        pub const RESERVED_B: Field = Field::new(20, 4);
        const _: () = assert!(tiles(
            &[REQ, STATUS, RESERVED_A, FIRST, COUNT, RESERVED_B],
            RECIPE_HEAD_LEN
        ));
    }

    pub mod fetch {
        use super::*;
        pub const REQ: Field = Field::new(0, 4);
        pub const COUNT: Field = Field::new(4, 4);
        pub const RESERVED: Field = Field::new(8, 8);
        const _: () = assert!(tiles(&[REQ, COUNT, RESERVED], FETCH_HEAD_LEN));
        // A DATA head has the same three fields.
        const _: () = assert!(FETCH_HEAD_LEN == DATA_HEAD_LEN);
    }

    pub mod run {
        use super::*;
        pub const ENTRY: Field = Field::new(0, 8);
        pub const FIRST: Field = Field::new(8, 4);
        pub const COUNT: Field = Field::new(12, 4);
        const _: () = assert!(tiles(&[ENTRY, FIRST, COUNT], FETCH_RUN_LEN));
    }
}

/// MOUNT_HELLO (type 24): the client opens a mount session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountHello<'a> {
    /// Most LIST entries the client takes; a longer listing is refused by
    /// the server (ERROR `LIMIT`) before it is sent.
    pub max_entries: u32,
    /// Largest DATA body the client takes (≥ 64 KiB).
    pub max_data_body: u32,
    /// Random per session (logs).
    pub session_nonce: u64,
    /// The directory to mount, relative to what the client may read
    /// (`/`-separated; empty = all of it).
    pub dir: &'a [u8],
}

/// Smallest `max_data_body` a client may announce: a DATA frame must hold
/// at least one chunk of the largest size the server cuts (4 × 4 MiB would
/// be larger; servers cap their chunk size to what the client announced).
pub const MIN_DATA_BODY: u32 = 64 * 1024;

impl<'a> MountHello<'a> {
    /// Decodes a MOUNT_HELLO body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::hello as f;
        let b = Reader::<MOUNT_HELLO_FIXED_LEN>::new(body)?;
        if b.u16(f::VERSION) != MOUNT_VERSION {
            return Err(WireError::UnsupportedVersion(b.u16(f::VERSION).min(255) as u8));
        }
        if b.u8(f::FLAGS) != 0 {
            return Err(WireError::BadFlags);
        }
        if !b.is_zero(f::RESERVED_A) || !b.is_zero(f::RESERVED_B) || !b.is_zero(f::RESERVED_C) {
            return Err(WireError::ReservedNonZero);
        }
        let dir_len = usize::from(b.u16(f::DIR_LEN));
        if dir_len > MAX_PATH_LEN {
            return Err(WireError::TooLarge);
        }
        let max_data_body = b.u32(f::MAX_DATA_BODY);
        if max_data_body < MIN_DATA_BODY {
            return Err(WireError::LengthMismatch);
        }
        let dir = &body[MOUNT_HELLO_FIXED_LEN..];
        if dir.len() != dir_len {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            max_entries: b.u32(f::MAX_ENTRIES),
            max_data_body,
            session_nonce: b.u64(f::NONCE),
            dir,
        })
    }

    /// The encoded body.
    pub fn emit(&self) -> Vec<u8> {
        use field::hello as f;
        let mut w = Writer::<MOUNT_HELLO_FIXED_LEN>::new();
        w.u16(f::VERSION, MOUNT_VERSION)
            .u16(f::DIR_LEN, self.dir.len() as u16)
            .u32(f::MAX_ENTRIES, self.max_entries)
            .u32(f::MAX_DATA_BODY, self.max_data_body)
            .u64(f::NONCE, self.session_nonce);
        let mut out = w.finish().to_vec();
        out.extend_from_slice(self.dir);
        out
    }
}

/// MOUNT_ACCEPT (type 25): the server takes the session; LIST follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountAccept {
    /// LIST entries that follow (≤ the client's `max_entries`).
    pub entries: u64,
    /// Average chunk size the server cuts files with (min avg/4, max 4·avg).
    pub chunk_avg: u32,
    /// Most chunks one FETCH may ask for.
    pub max_fetch_chunks: u32,
    /// Largest DATA body the server sends (≤ the client's).
    pub max_data_body: u32,
    /// Permission bits of the mounted directory itself.
    pub root_mode: u32,
    /// Its modification time, seconds.
    pub root_mtime_sec: i64,
    /// Its modification time, nanoseconds (< 10^9).
    pub root_mtime_nsec: u32,
}

impl MountAccept {
    /// Decodes a MOUNT_ACCEPT body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::accept as f;
        let b = Reader::<MOUNT_ACCEPT_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let chunk_avg = b.u32(f::CHUNK_AVG);
        let root_mtime_nsec = b.u32(f::ROOT_MTIME_NSEC);
        let sane = chunk_avg.is_power_of_two()
            && (256..=4 << 20).contains(&chunk_avg)
            && b.u32(f::MAX_FETCH_CHUNKS) > 0
            && b.u32(f::MAX_DATA_BODY) >= MIN_DATA_BODY
            && root_mtime_nsec < 1_000_000_000;
        if !sane {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            entries: b.u64(f::ENTRIES),
            chunk_avg,
            max_fetch_chunks: b.u32(f::MAX_FETCH_CHUNKS),
            max_data_body: b.u32(f::MAX_DATA_BODY),
            root_mode: b.u32(f::ROOT_MODE),
            root_mtime_sec: b.i64(f::ROOT_MTIME_SEC),
            root_mtime_nsec,
        })
    }

    /// The encoded body.
    pub fn emit(&self) -> [u8; MOUNT_ACCEPT_LEN] {
        use field::accept as f;
        let mut w = Writer::<MOUNT_ACCEPT_LEN>::new();
        w.u64(f::ENTRIES, self.entries)
            .u32(f::CHUNK_AVG, self.chunk_avg)
            .u32(f::MAX_FETCH_CHUNKS, self.max_fetch_chunks)
            .u32(f::MAX_DATA_BODY, self.max_data_body)
            .u32(f::ROOT_MODE, self.root_mode)
            .i64(f::ROOT_MTIME_SEC, self.root_mtime_sec)
            .u32(f::ROOT_MTIME_NSEC, self.root_mtime_nsec);
        w.finish()
    }
}

/// What a LIST entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ListKind {
    /// A regular file.
    File = 0,
    /// A directory.
    Dir = 1,
    /// A symbolic link.
    Symlink = 2,
}

/// One entry of the listing. Entries are numbered 0, 1, 2, … across all
/// LIST frames of the session; RECIPE_ASK and FETCH name files by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListEntry<'a> {
    /// What it is.
    pub kind: ListKind,
    /// Permission bits (and set-id/sticky bits), no file type.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds (< 10^9).
    pub mtime_nsec: u32,
    /// Bytes (0 for directories and symlinks).
    pub size: u64,
    /// Path below the mounted directory, `/`-separated, 1..=4095 bytes.
    pub path: &'a [u8],
    /// A symlink's target (non-empty); empty for the others.
    pub link: &'a [u8],
}

impl<'a> ListEntry<'a> {
    /// Bytes the entry takes in a LIST body.
    pub fn encoded_len(&self) -> usize {
        LIST_ENTRY_FIXED_LEN + self.path.len() + self.link.len()
    }

    /// Appends the entry to a LIST body.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        use field::entry as f;
        let mut w = Writer::<LIST_ENTRY_FIXED_LEN>::new();
        w.u8(f::KIND, self.kind as u8)
            .u16(f::PATH_LEN, self.path.len() as u16)
            .u32(f::MODE, self.mode)
            .i64(f::MTIME_SEC, self.mtime_sec)
            .u32(f::MTIME_NSEC, self.mtime_nsec)
            .u16(f::LINK_LEN, self.link.len() as u16)
            .u64(f::SIZE, self.size);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(self.path);
        out.extend_from_slice(self.link);
    }

    /// Decodes the entry at the front of `buf`; returns it and its length.
    fn parse(buf: &'a [u8]) -> Result<(Self, usize), WireError> {
        use field::entry as f;
        let b = Reader::<LIST_ENTRY_FIXED_LEN>::new(buf).map_err(|_| WireError::TableTruncated)?;
        let kind = match b.u8(f::KIND) {
            0 => ListKind::File,
            1 => ListKind::Dir,
            2 => ListKind::Symlink,
            _ => return Err(WireError::BadFlags),
        };
        if !b.is_zero(f::RESERVED_A) || !b.is_zero(f::RESERVED_B) {
            return Err(WireError::ReservedNonZero);
        }
        let path_len = usize::from(b.u16(f::PATH_LEN));
        let link_len = usize::from(b.u16(f::LINK_LEN));
        let size = b.u64(f::SIZE);
        let mtime_nsec = b.u32(f::MTIME_NSEC);
        let shape_ok = (1..=MAX_PATH_LEN).contains(&path_len)
            && link_len <= MAX_PATH_LEN
            && (link_len > 0) == (kind == ListKind::Symlink)
            && (kind == ListKind::File || size == 0)
            && mtime_nsec < 1_000_000_000;
        if !shape_ok {
            return Err(WireError::LengthMismatch);
        }
        let end = LIST_ENTRY_FIXED_LEN + path_len + link_len;
        let rest = buf
            .get(LIST_ENTRY_FIXED_LEN..end)
            .ok_or(WireError::TableTruncated)?;
        let (path, link) = rest.split_at(path_len);
        Ok((
            Self {
                kind,
                mode: b.u32(f::MODE),
                mtime_sec: b.i64(f::MTIME_SEC),
                mtime_nsec,
                size,
                path,
                link,
            },
            end,
        ))
    }
}

/// The entries of a LIST body, in order; an entry that does not decode
/// ends the iteration with its error (and nothing after it).
#[derive(Debug, Clone)]
pub struct ListIter<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// Iterates a LIST body (a whole number of entries).
pub fn parse_list(body: &[u8]) -> ListIter<'_> {
    ListIter {
        rest: body,
        failed: false,
    }
}

impl<'a> Iterator for ListIter<'a> {
    type Item = Result<ListEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        match ListEntry::parse(self.rest) {
            Ok((e, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(e))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// RECIPE_ASK (type 27): the client asks for the recipe of file `entry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipeAsk {
    /// Request number, chosen by the client; the RECIPE frames carry it.
    pub req: u32,
    /// The file's entry number in the listing.
    pub entry: u64,
}

impl RecipeAsk {
    /// Decodes a RECIPE_ASK body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::ask as f;
        let b = Reader::<RECIPE_ASK_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            req: b.u32(f::REQ),
            entry: b.u64(f::ENTRY),
        })
    }

    /// The encoded body.
    pub fn emit(&self) -> [u8; RECIPE_ASK_LEN] {
        use field::ask as f;
        let mut w = Writer::<RECIPE_ASK_LEN>::new();
        w.u32(f::REQ, self.req).u64(f::ENTRY, self.entry);
        w.finish()
    }
}

/// Whether a RECIPE (or a DATA entry) could be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ServeStatus {
    /// Served.
    Ok = 0,
    /// The file changed, vanished or could not be read since it was
    /// listed: nothing of this version can be served (the client answers
    /// reads of it with an I/O error).
    Gone = 1,
}

/// The head of a RECIPE (type 28) body: `count` entries of the file's
/// recipe starting at chunk `first`, each `len` u32 then the chunk's hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipeHead {
    /// The RECIPE_ASK this answers.
    pub req: u32,
    /// `Gone`: no entries, and this is the last frame.
    pub status: ServeStatus,
    /// Index of this frame's first chunk in the file (the chunks the
    /// earlier frames of this request gave).
    pub first: u64,
    /// Entries in this frame.
    pub count: u32,
}

impl RecipeHead {
    /// The encoded head; `count` entries must follow.
    pub fn emit(&self) -> [u8; RECIPE_HEAD_LEN] {
        use field::recipe as f;
        let mut w = Writer::<RECIPE_HEAD_LEN>::new();
        w.u32(f::REQ, self.req)
            .u8(f::STATUS, self.status as u8)
            .u64(f::FIRST, self.first)
            .u32(f::COUNT, self.count);
        w.finish()
    }
}

/// Appends one RECIPE entry.
pub fn emit_recipe_entry(out: &mut Vec<u8>, len: u32, hash: &Hash) {
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(hash);
}

/// Decodes a RECIPE body: its head and its entries `(len, hash)` (every
/// `len` > 0; a `Gone` head has none).
pub fn parse_recipe(body: &[u8]) -> Result<(RecipeHead, RecipeEntries<'_>), WireError> {
    use field::recipe as f;
    let b = Reader::<RECIPE_HEAD_LEN>::new(body)?;
    if !b.is_zero(f::RESERVED_A) || !b.is_zero(f::RESERVED_B) {
        return Err(WireError::ReservedNonZero);
    }
    let status = match b.u8(f::STATUS) {
        0 => ServeStatus::Ok,
        1 => ServeStatus::Gone,
        _ => return Err(WireError::BadFlags),
    };
    let count = b.u32(f::COUNT);
    let table = &body[RECIPE_HEAD_LEN..];
    let want = (count as usize)
        .checked_mul(RECIPE_ENTRY_LEN)
        .ok_or(WireError::LengthMismatch)?;
    if table.len() < want {
        return Err(WireError::TableTruncated);
    }
    if table.len() > want {
        return Err(WireError::TrailingBytes);
    }
    if status == ServeStatus::Gone && count != 0 {
        return Err(WireError::LengthMismatch);
    }
    if table.chunks_exact(RECIPE_ENTRY_LEN).any(|e| e[..4] == [0; 4]) {
        return Err(WireError::LengthMismatch);
    }
    let head = RecipeHead {
        req: b.u32(f::REQ),
        status,
        first: b.u64(f::FIRST),
        count,
    };
    Ok((head, RecipeEntries(table.chunks_exact(RECIPE_ENTRY_LEN))))
}

/// The `(len, hash)` entries of a checked RECIPE body.
#[derive(Debug, Clone)]
pub struct RecipeEntries<'a>(core::slice::ChunksExact<'a, u8>);

impl<'a> Iterator for RecipeEntries<'a> {
    type Item = (u32, &'a Hash);

    fn next(&mut self) -> Option<Self::Item> {
        let e = self.0.next()?;
        let (len, hash) = e.split_first_chunk::<4>()?;
        Some((u32::from_le_bytes(*len), hash.first_chunk::<HASH_LEN>()?))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for RecipeEntries<'_> {}

/// One run of a FETCH: `count` consecutive chunks of file `entry` from
/// chunk `first` (indices into the file's recipe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRun {
    /// The file's entry number.
    pub entry: u64,
    /// Its first chunk asked.
    pub first: u32,
    /// Chunks asked (≥ 1).
    pub count: u32,
}

/// The head of a FETCH (type 29) or DATA (type 30) body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqHead {
    /// Request number, chosen by the client.
    pub req: u32,
    /// FETCH: runs that follow. DATA: entries that follow.
    pub count: u32,
}

impl ReqHead {
    fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::fetch as f;
        let b = Reader::<FETCH_HEAD_LEN>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            req: b.u32(f::REQ),
            count: b.u32(f::COUNT),
        })
    }

    /// The encoded head.
    pub fn emit(&self) -> [u8; FETCH_HEAD_LEN] {
        use field::fetch as f;
        let mut w = Writer::<FETCH_HEAD_LEN>::new();
        w.u32(f::REQ, self.req).u32(f::COUNT, self.count);
        w.finish()
    }
}

impl FetchRun {
    /// Appends the run to a FETCH body.
    pub fn emit_into(&self, out: &mut Vec<u8>) {
        use field::run as f;
        let mut w = Writer::<FETCH_RUN_LEN>::new();
        w.u64(f::ENTRY, self.entry)
            .u32(f::FIRST, self.first)
            .u32(f::COUNT, self.count);
        out.extend_from_slice(&w.finish());
    }
}

/// Decodes a FETCH body: its head and runs (every `count` ≥ 1,
/// `first + count` within u32).
pub fn parse_fetch(body: &[u8]) -> Result<(ReqHead, Vec<FetchRun>), WireError> {
    use field::run as f;
    let head = ReqHead::parse(body)?;
    let table = &body[FETCH_HEAD_LEN..];
    let want = (head.count as usize)
        .checked_mul(FETCH_RUN_LEN)
        .ok_or(WireError::LengthMismatch)?;
    if table.len() < want {
        return Err(WireError::TableTruncated);
    }
    if table.len() > want {
        return Err(WireError::TrailingBytes);
    }
    let mut runs = Vec::with_capacity(head.count as usize);
    for raw in table.chunks_exact(FETCH_RUN_LEN) {
        let r = Reader::<FETCH_RUN_LEN>::new(raw)?;
        let run = FetchRun {
            entry: r.u64(f::ENTRY),
            first: r.u32(f::FIRST),
            count: r.u32(f::COUNT),
        };
        if run.count == 0 || run.first.checked_add(run.count).is_none() {
            return Err(WireError::LengthMismatch);
        }
        runs.push(run);
    }
    Ok((head, runs))
}

/// Tag of a DATA entry with the chunk's bytes.
pub const DATA_BYTES: u8 = 1;
/// Tag of a DATA entry for a chunk the server could not serve (its file
/// changed or vanished); no bytes follow.
pub const DATA_GONE: u8 = 2;

/// One DATA entry: the next chunk asked, in the order of the FETCH runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataEntry<'a> {
    /// The chunk's bytes (to be checked against its hash by the client).
    Bytes(&'a [u8]),
    /// Not served.
    Gone,
}

impl DataEntry<'_> {
    /// Appends the head of a DATA entry for `len` bytes of a chunk (the
    /// bytes follow, from the caller).
    pub fn emit_bytes_head(out: &mut Vec<u8>, len: u32) {
        out.push(DATA_BYTES);
        out.extend_from_slice(&len.to_le_bytes());
    }

    /// Appends a `Gone` entry.
    pub fn emit_gone(out: &mut Vec<u8>) {
        out.push(DATA_GONE);
        out.extend_from_slice(&0u32.to_le_bytes());
    }
}

/// Decodes a DATA body: its head and an iterator over its entries; an
/// entry that does not decode ends the iteration with its error.
pub fn parse_data(body: &[u8]) -> Result<(ReqHead, DataIter<'_>), WireError> {
    let head = ReqHead::parse(body)?;
    Ok((
        head,
        DataIter {
            rest: &body[DATA_HEAD_LEN..],
            left: head.count,
            failed: false,
        },
    ))
}

/// The entries of a DATA body.
#[derive(Debug, Clone)]
pub struct DataIter<'a> {
    rest: &'a [u8],
    left: u32,
    failed: bool,
}

impl<'a> Iterator for DataIter<'a> {
    type Item = Result<DataEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.failed = true;
            return Some(Err(WireError::TrailingBytes));
        }
        let step = (|| {
            let (&tag, rest) = self.rest.split_first().ok_or(WireError::TableTruncated)?;
            let (len, rest) = rest.split_first_chunk::<4>().ok_or(WireError::TableTruncated)?;
            let len = u32::from_le_bytes(*len) as usize;
            match tag {
                DATA_BYTES if len > 0 => {
                    let bytes = rest.get(..len).ok_or(WireError::TableTruncated)?;
                    Ok((DataEntry::Bytes(bytes), &rest[len..]))
                }
                DATA_GONE if len == 0 => Ok((DataEntry::Gone, rest)),
                DATA_BYTES | DATA_GONE => Err(WireError::LengthMismatch),
                _ => Err(WireError::BadFlags),
            }
        })();
        match step {
            Ok((e, rest)) => {
                self.rest = rest;
                self.left -= 1;
                Some(Ok(e))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_roundtrip_and_refusals() {
        let h = MountHello {
            max_entries: 1_000_000,
            max_data_body: 1 << 20,
            session_nonce: 7,
            dir: b"src/lib",
        };
        let b = h.emit();
        assert_eq!(MountHello::parse(&b), Ok(h));
        assert_eq!(MountHello::parse(&b[..31]), Err(WireError::Truncated));
        assert_eq!(MountHello::parse(&b[..35]), Err(WireError::LengthMismatch));
        let mut bad = b.clone();
        bad[2] = 1;
        assert_eq!(MountHello::parse(&bad), Err(WireError::BadFlags));
        let mut bad = b.clone();
        bad[12..16].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(MountHello::parse(&bad), Err(WireError::LengthMismatch));
        let mut bad = b;
        bad[0] = 2;
        assert_eq!(MountHello::parse(&bad), Err(WireError::UnsupportedVersion(2)));
    }

    #[test]
    fn accept_roundtrip_and_refusals() {
        let a = MountAccept {
            entries: 78_000,
            chunk_avg: 32 << 10,
            max_fetch_chunks: 256,
            max_data_body: 1 << 20,
            root_mode: 0o755,
            root_mtime_sec: 1_700_000_000,
            root_mtime_nsec: 5,
        };
        let b = a.emit();
        assert_eq!(MountAccept::parse(&b), Ok(a));
        let mut bad = b;
        bad[8..12].copy_from_slice(&3000u32.to_le_bytes());
        assert_eq!(MountAccept::parse(&bad), Err(WireError::LengthMismatch));
        let mut bad = b;
        bad[40] = 1;
        assert_eq!(MountAccept::parse(&bad), Err(WireError::ReservedNonZero));
    }

    #[test]
    fn list_roundtrip_and_refusals() {
        let a = ListEntry {
            kind: ListKind::File,
            mode: 0o644,
            mtime_sec: -1,
            mtime_nsec: 999_999_999,
            size: 70_000,
            path: b"docs/a",
            link: b"",
        };
        let l = ListEntry {
            kind: ListKind::Symlink,
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
            size: 0,
            path: b"docs/l",
            link: b"a",
        };
        let mut body = Vec::new();
        a.emit_into(&mut body);
        l.emit_into(&mut body);
        assert_eq!(body.len(), a.encoded_len() + l.encoded_len());
        let got: Vec<_> = parse_list(&body).collect();
        assert_eq!(got, vec![Ok(a), Ok(l)]);
        let cut: Vec<_> = parse_list(&body[..body.len() - 1]).collect();
        assert_eq!(cut.last(), Some(&Err(WireError::TableTruncated)));
        let mut bad = body.clone();
        bad[24] = 1; // a directory with a size
        bad[0] = 1;
        assert_eq!(parse_list(&bad).next(), Some(Err(WireError::LengthMismatch)));
        let mut bad = body;
        bad[0] = 9;
        assert_eq!(parse_list(&bad).next(), Some(Err(WireError::BadFlags)));
    }

    #[test]
    fn recipe_fetch_data_roundtrip() {
        let mut body = RecipeHead {
            req: 5,
            status: ServeStatus::Ok,
            first: 2,
            count: 2,
        }
        .emit()
        .to_vec();
        emit_recipe_entry(&mut body, 10, &[1; 32]);
        emit_recipe_entry(&mut body, 20, &[2; 32]);
        let (h, e) = parse_recipe(&body).expect("recipe");
        assert_eq!((h.req, h.first, h.count), (5, 2, 2));
        assert_eq!(e.collect::<Vec<_>>(), vec![(10, &[1; 32]), (20, &[2; 32])]);
        assert_eq!(
            parse_recipe(&body[..body.len() - 1]).err(),
            Some(WireError::TableTruncated)
        );
        let mut zero = body.clone();
        zero[24..28].copy_from_slice(&[0; 4]);
        assert_eq!(parse_recipe(&zero).err(), Some(WireError::LengthMismatch));

        let mut f = ReqHead { req: 9, count: 1 }.emit().to_vec();
        let run = FetchRun {
            entry: 3,
            first: 0,
            count: 4,
        };
        run.emit_into(&mut f);
        assert_eq!(parse_fetch(&f), Ok((ReqHead { req: 9, count: 1 }, vec![run])));
        let mut bad = f.clone();
        bad[28..32].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(parse_fetch(&bad), Err(WireError::LengthMismatch));

        let mut d = ReqHead { req: 9, count: 2 }.emit().to_vec();
        DataEntry::emit_bytes_head(&mut d, 3);
        d.extend_from_slice(b"abc");
        DataEntry::emit_gone(&mut d);
        let (h, it) = parse_data(&d).expect("data");
        assert_eq!(h, ReqHead { req: 9, count: 2 });
        assert_eq!(
            it.collect::<Vec<_>>(),
            vec![Ok(DataEntry::Bytes(b"abc")), Ok(DataEntry::Gone)]
        );
        let mut more = d.clone();
        more.push(0);
        let (_, it) = parse_data(&more).expect("data");
        assert_eq!(it.last(), Some(Err(WireError::TrailingBytes)));
        let (_, it) = parse_data(&d[..d.len() - 6]).expect("data");
        assert_eq!(it.last(), Some(Err(WireError::TableTruncated)));
    }
}
