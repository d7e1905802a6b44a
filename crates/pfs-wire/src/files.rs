//! Bodies of the files frames: a sender moves files and trees into a
//! receiver's destination, sending descriptors `(offset, len)` into the
//! receiver's store blob for chunks it holds and literal bytes for the rest.
//!
//! Session (sender S, receiver R; every frame in the usual envelope):
//! ```text
//! S: FILES_HELLO                 R: FILES_ACCEPT (store id, generation)
//! S: (PROBE* with LAST          R: PROBE_REPLY* with LAST)?   optional
//! S: INDEX_REQUEST (from gen)   R: INDEX* (entries since gen; last has LAST)
//! S: PLAN (totals)              R: ACK (space reserved) | ERROR
//! S: (FILE CHUNKS*)* FILES_END
//!                               R: (NAK* with LAST, S: REPAIR* with LAST)?
//!                               R: FILES_END with REPORT
//! ```
//! Every decoder here is zero-copy (views into the body), bounds-checked and
//! panic-free; the receiver applies its own limits on top.

use crate::{rd_u16, rd_u32, rd_u64, WireError};

/// Version of the files exchange carried in FILES_HELLO.
pub const FILES_VERSION: u16 = 1;
/// Flag on INDEX, NAK and REPAIR: the last frame of its series.
pub const FLAG_LAST: u16 = 0x0001;
/// Flag on FILES_END: the body is the receiver's report (else empty).
pub const FLAG_FILES_REPORT: u16 = 0x0001;

/// FILES_HELLO flag: plan only; nothing will be written.
pub const HELLO_DRY_RUN: u8 = 0x01;
/// FILES_HELLO flag: literal chunks may arrive zstd-compressed.
pub const HELLO_COMPRESS: u8 = 0x02;

/// BLAKE3 digest of a chunk or file.
pub type Hash = [u8; 32];

/// Fixed part of FILES_HELLO.
pub const FILES_HELLO_FIXED_LEN: usize = 32;
/// Body of FILES_ACCEPT.
pub const FILES_ACCEPT_LEN: usize = 64;
/// Body of INDEX_REQUEST.
pub const INDEX_REQUEST_LEN: usize = 8;
/// One INDEX entry: hash prefix, offset, length.
pub const INDEX_ENTRY_LEN: usize = 20;
/// Bytes of a chunk hash an INDEX entry carries.
pub const INDEX_KEY_LEN: usize = 8;
/// Body of PLAN.
pub const PLAN_LEN: usize = 48;
/// Body of the ACK that accepts a PLAN.
pub const PLAN_ACK_LEN: usize = 16;
/// Fixed part of FILE.
pub const FILE_FIXED_LEN: usize = 80;
/// Fixed part of CHUNKS and REPAIR.
pub const CHUNKS_FIXED_LEN: usize = 16;
/// Fixed part of the FILES_END report.
pub const FILES_REPORT_FIXED_LEN: usize = 160;
/// Longest path or symlink target in a FILE frame.
pub const MAX_PATH_LEN: usize = 4095;
/// Longest remote directory in FILES_HELLO.
pub const MAX_REMOTE_DIR_LEN: usize = 4095;
/// Longest message list in a report.
pub const MAX_REPORT_TEXT: usize = 32 * 1024;
/// FILE `file_flags` bit: the receiver answered PROBE that it holds this
/// file's content; no CHUNKS follow (`chunk_count` = 0, `size` > 0).
pub const FILE_HELD: u8 = 0x01;
/// PROBE and PROBE_REPLY head: `first_no` u64, `count` u32, reserved u32.
pub const PROBE_HEAD_LEN: usize = 16;
/// Fixed part of one PROBE entry (the path follows).
pub const PROBE_ENTRY_FIXED_LEN: usize = 32;

/// The sender's opening frame of a files session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesHello<'a> {
    /// [`HELLO_DRY_RUN`], [`HELLO_COMPRESS`].
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
        let b = body.get(..FILES_HELLO_FIXED_LEN).ok_or(WireError::Truncated)?;
        if rd_u16(b, 0) != FILES_VERSION {
            return Err(WireError::UnsupportedVersion(b[0]));
        }
        let flags = b[2];
        if flags & !(HELLO_DRY_RUN | HELLO_COMPRESS) != 0 {
            return Err(WireError::BadFlags);
        }
        if rd_u32(b, 12) != 0 || rd_u64(b, 24) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let dir_len = rd_u16(b, 4) as usize;
        let auth_len = rd_u16(b, 6) as usize;
        if dir_len > MAX_REMOTE_DIR_LEN || auth_len > crate::hello::MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILES_HELLO_FIXED_LEN + dir_len + auth_len {
            return Err(WireError::LengthMismatch);
        }
        let rest = &body[FILES_HELLO_FIXED_LEN..];
        Ok(Self {
            flags,
            auth_method: b[3],
            chunk_avg: rd_u32(b, 8),
            session_nonce: rd_u64(b, 16),
            remote_dir: &rest[..dir_len],
            auth: &rest[dir_len..],
        })
    }

    /// Appends the encoded body (remote dir and auth cut at their limits).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let dir = &self.remote_dir[..self.remote_dir.len().min(MAX_REMOTE_DIR_LEN)];
        let auth = &self.auth[..self.auth.len().min(crate::hello::MAX_AUTH_LEN)];
        let mut b = [0u8; FILES_HELLO_FIXED_LEN];
        b[0..2].copy_from_slice(&FILES_VERSION.to_le_bytes());
        b[2] = self.flags;
        b[3] = self.auth_method;
        b[4..6].copy_from_slice(&(dir.len() as u16).to_le_bytes());
        b[6..8].copy_from_slice(&(auth.len() as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.chunk_avg.to_le_bytes());
        b[16..24].copy_from_slice(&self.session_nonce.to_le_bytes());
        out.extend_from_slice(&b);
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
}

impl FilesAccept {
    /// Decodes a FILES_ACCEPT body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != FILES_ACCEPT_LEN {
            return Err(WireError::LengthMismatch);
        }
        if body[45..48] != [0; 3] || rd_u64(body, 48) != 0 || rd_u64(body, 56) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let mut store_id = [0u8; 16];
        store_id.copy_from_slice(&body[..16]);
        Ok(Self {
            store_id,
            generation: rd_u64(body, 16),
            capacity: rd_u64(body, 24),
            free: rd_u64(body, 32),
            max_chunks_body: rd_u32(body, 40),
            auth_method: body[44],
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; FILES_ACCEPT_LEN] {
        let mut b = [0u8; FILES_ACCEPT_LEN];
        b[..16].copy_from_slice(&self.store_id);
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        b[32..40].copy_from_slice(&self.free.to_le_bytes());
        b[40..44].copy_from_slice(&self.max_chunks_body.to_le_bytes());
        b[44] = self.auth_method;
        b
    }
}

/// Decodes an INDEX_REQUEST body: the generation the sender's cached copy
/// of the index has reached (0 = send everything).
pub fn parse_index_request(body: &[u8]) -> Result<u64, WireError> {
    if body.len() != INDEX_REQUEST_LEN {
        return Err(WireError::LengthMismatch);
    }
    Ok(rd_u64(body, 0))
}

/// One chunk the receiver's store holds, named by the first
/// [`INDEX_KEY_LEN`] bytes of its hash (REF entries carry the whole hash,
/// which the receiver checks: a prefix shared by two chunks costs a NAK and
/// a REPAIR, never a wrong file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The first bytes of the chunk's BLAKE3.
    pub key: [u8; INDEX_KEY_LEN],
    /// Offset in the receiver's store blob.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl IndexEntry {
    /// Appends the 20-byte encoding.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.key);
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }
}

/// Decodes an INDEX body: a whole number of entries.
pub fn parse_index(body: &[u8]) -> Result<impl Iterator<Item = IndexEntry> + '_, WireError> {
    if !body.len().is_multiple_of(INDEX_ENTRY_LEN) {
        return Err(WireError::LengthMismatch);
    }
    Ok(body.chunks_exact(INDEX_ENTRY_LEN).map(|e| {
        let mut key = [0u8; INDEX_KEY_LEN];
        key.copy_from_slice(&e[..INDEX_KEY_LEN]);
        IndexEntry {
            key,
            offset: rd_u64(e, 8),
            len: rd_u32(e, 16),
        }
    }))
}

/// What the sender is about to send, so the receiver can reserve store
/// space (and refuse) before it touches any destination file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    /// Entries (files, directories, symlinks).
    pub entries: u64,
    /// Regular files among them.
    pub files: u64,
    /// Sum of the files' sizes.
    pub total_bytes: u64,
    /// Bytes of chunks the sender believes the receiver lacks (an upper bound of new store bytes).
    pub literal_bytes: u64,
    /// Chunks over all files.
    pub chunks: u64,
}

impl Plan {
    /// Decodes a PLAN body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != PLAN_LEN {
            return Err(WireError::LengthMismatch);
        }
        if rd_u64(body, 40) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            entries: rd_u64(body, 0),
            files: rd_u64(body, 8),
            total_bytes: rd_u64(body, 16),
            literal_bytes: rd_u64(body, 24),
            chunks: rd_u64(body, 32),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; PLAN_LEN] {
        let mut b = [0u8; PLAN_LEN];
        for (i, v) in [
            self.entries,
            self.files,
            self.total_bytes,
            self.literal_bytes,
            self.chunks,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// The ACK accepting a PLAN: bytes reserved in the store, and what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanAck {
    /// Store bytes reserved for this session.
    pub reserved: u64,
    /// Store bytes free after the reservation.
    pub free: u64,
}

impl PlanAck {
    /// Decodes the ACK body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != PLAN_ACK_LEN {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            reserved: rd_u64(body, 0),
            free: rd_u64(body, 8),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; PLAN_ACK_LEN] {
        let mut b = [0u8; PLAN_ACK_LEN];
        b[..8].copy_from_slice(&self.reserved.to_le_bytes());
        b[8..].copy_from_slice(&self.free.to_le_bytes());
        b
    }
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

/// One entry of the tree: metadata, and for files the whole-file hash and
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
    /// BLAKE3 of the whole file (zeros unless a file).
    pub file_hash: Hash,
    /// Relative path, `/`-separated bytes (the receiver validates it).
    pub path: &'a [u8],
    /// Symlink target bytes (empty unless a symlink).
    pub link_target: &'a [u8],
    /// The receiver said (PROBE_REPLY) it holds this content: no CHUNKS follow.
    pub held: bool,
}

impl<'a> FileEntry<'a> {
    /// Decodes a FILE body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = body.get(..FILE_FIXED_LEN).ok_or(WireError::Truncated)?;
        let kind = EntryKind::from_u8(b[0])?;
        if b[1] & !FILE_HELD != 0 {
            return Err(WireError::BadFlags);
        }
        if rd_u32(b, 76) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let held = b[1] & FILE_HELD != 0;
        let path_len = rd_u16(b, 2) as usize;
        let link_len = rd_u32(b, 72) as usize;
        if path_len > MAX_PATH_LEN || link_len > MAX_PATH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILE_FIXED_LEN + path_len + link_len {
            return Err(WireError::LengthMismatch);
        }
        let mtime_nsec = rd_u32(b, 16);
        let size = rd_u64(b, 24);
        let chunk_count = rd_u32(b, 20);
        let consistent = mtime_nsec < 1_000_000_000
            && match kind {
                EntryKind::File if held => link_len == 0 && size > 0 && chunk_count == 0,
                EntryKind::File => link_len == 0 && (chunk_count == 0) == (size == 0),
                EntryKind::Dir => !held && link_len == 0 && size == 0 && chunk_count == 0,
                EntryKind::Symlink => !held && link_len > 0 && size == 0 && chunk_count == 0,
            };
        if !consistent {
            return Err(WireError::LengthMismatch);
        }
        let mut file_hash = [0u8; 32];
        file_hash.copy_from_slice(&b[32..64]);
        let rest = &body[FILE_FIXED_LEN..];
        Ok(Self {
            file_no: rd_u64(b, 64),
            kind,
            mode: rd_u32(b, 4),
            mtime_sec: rd_u64(b, 8) as i64,
            mtime_nsec,
            size,
            chunk_count,
            file_hash,
            path: &rest[..path_len],
            link_target: &rest[path_len..],
            held,
        })
    }

    /// Appends the encoded body (path and target cut at [`MAX_PATH_LEN`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let path = &self.path[..self.path.len().min(MAX_PATH_LEN)];
        let link = &self.link_target[..self.link_target.len().min(MAX_PATH_LEN)];
        let mut b = [0u8; FILE_FIXED_LEN];
        b[0] = self.kind as u8;
        b[1] = if self.held { FILE_HELD } else { 0 };
        b[2..4].copy_from_slice(&(path.len() as u16).to_le_bytes());
        b[4..8].copy_from_slice(&self.mode.to_le_bytes());
        b[8..16].copy_from_slice(&self.mtime_sec.to_le_bytes());
        b[16..20].copy_from_slice(&self.mtime_nsec.to_le_bytes());
        b[20..24].copy_from_slice(&self.chunk_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b[32..64].copy_from_slice(&self.file_hash);
        b[64..72].copy_from_slice(&self.file_no.to_le_bytes());
        b[72..76].copy_from_slice(&(link.len() as u32).to_le_bytes());
        out.extend_from_slice(&b);
        out.extend_from_slice(path);
        out.extend_from_slice(link);
    }
}

/// Chunk entry tags in CHUNKS and REPAIR bodies.
pub mod tag {
    /// A descriptor into the receiver's store blob: hash, offset, len.
    pub const REF: u8 = 1;
    /// Literal bytes: hash, len, then `len` bytes.
    pub const LITERAL: u8 = 2;
    /// zstd-compressed literal: hash, raw len, compressed len, compressed bytes.
    pub const ZSTD: u8 = 3;
    /// A chunk the receiver holds under this hash but the sender has no
    /// offset for (sent earlier in this session): hash, len.
    pub const KNOWN: u8 = 4;
}

/// Bytes of an entry before its data: tag, hash, len.
const ENTRY_HEAD: usize = 1 + 32 + 4;

/// The data of one chunk entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkData<'a> {
    /// At this offset of the receiver's store blob (`len` bytes).
    Ref {
        /// Offset in the store blob.
        offset: u64,
    },
    /// These bytes (`len` of them).
    Literal(&'a [u8]),
    /// zstd frame that decompresses to `len` bytes.
    Zstd(&'a [u8]),
    /// Look the hash up in the store.
    Known,
}

/// One chunk of a file (or of a REPAIR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry<'a> {
    /// BLAKE3 of the chunk's bytes.
    pub hash: &'a Hash,
    /// Length of the chunk (uncompressed).
    pub len: u32,
    /// Where its bytes are.
    pub data: ChunkData<'a>,
}

/// Header of a CHUNKS or REPAIR body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunksHeader {
    /// The FILE these chunks continue (`u64::MAX` in REPAIR).
    pub file_no: u64,
    /// Entries in the body.
    pub count: u32,
}

impl ChunksHeader {
    /// File number used by REPAIR bodies.
    pub const REPAIR: u64 = u64::MAX;

    /// Encodes the 16-byte header.
    pub fn emit(&self) -> [u8; CHUNKS_FIXED_LEN] {
        let mut b = [0u8; CHUNKS_FIXED_LEN];
        b[..8].copy_from_slice(&self.file_no.to_le_bytes());
        b[8..12].copy_from_slice(&self.count.to_le_bytes());
        b
    }
}

/// Decodes a CHUNKS/REPAIR body header and returns an iterator over its
/// entries; the iterator yields an error (once) if the body is malformed,
/// and checks that exactly `count` entries fill the body.
pub fn parse_chunks(body: &[u8]) -> Result<(ChunksHeader, ChunkIter<'_>), WireError> {
    let b = body.get(..CHUNKS_FIXED_LEN).ok_or(WireError::Truncated)?;
    if rd_u32(b, 12) != 0 {
        return Err(WireError::ReservedNonZero);
    }
    let header = ChunksHeader {
        file_no: rd_u64(b, 0),
        count: rd_u32(b, 8),
    };
    Ok((
        header,
        ChunkIter {
            rest: &body[CHUNKS_FIXED_LEN..],
            left: header.count,
            failed: false,
        },
    ))
}

/// Iterator over chunk entries; see [`parse_chunks`].
#[derive(Debug, Clone)]
pub struct ChunkIter<'a> {
    rest: &'a [u8],
    left: u32,
    failed: bool,
}

impl<'a> ChunkIter<'a> {
    fn entry(&mut self) -> Result<ChunkEntry<'a>, WireError> {
        let r = self.rest;
        let head = r.get(..ENTRY_HEAD).ok_or(WireError::TableTruncated)?;
        let hash: &Hash = head[1..33].try_into().map_err(|_| WireError::Truncated)?;
        let len = rd_u32(head, 33);
        let (data, used) = match head[0] {
            tag::REF => {
                let off = r
                    .get(ENTRY_HEAD..ENTRY_HEAD + 8)
                    .ok_or(WireError::TableTruncated)?;
                let offset = rd_u64(off, 0);
                offset
                    .checked_add(u64::from(len))
                    .ok_or(WireError::DescriptorOverflow)?;
                (ChunkData::Ref { offset }, ENTRY_HEAD + 8)
            }
            tag::LITERAL => {
                let end = ENTRY_HEAD + len as usize;
                let bytes = r.get(ENTRY_HEAD..end).ok_or(WireError::TableTruncated)?;
                (ChunkData::Literal(bytes), end)
            }
            tag::ZSTD => {
                let clen = r
                    .get(ENTRY_HEAD..ENTRY_HEAD + 4)
                    .ok_or(WireError::TableTruncated)?;
                let start = ENTRY_HEAD + 4;
                let end = start + rd_u32(clen, 0) as usize;
                let bytes = r.get(start..end).ok_or(WireError::TableTruncated)?;
                (ChunkData::Zstd(bytes), end)
            }
            tag::KNOWN => (ChunkData::Known, ENTRY_HEAD),
            _ => return Err(WireError::BadFlags),
        };
        self.rest = &r[used..];
        Ok(ChunkEntry { hash, len, data })
    }
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = Result<ChunkEntry<'a>, WireError>;

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
        self.left -= 1;
        let e = self.entry();
        self.failed = e.is_err();
        Some(e)
    }
}

/// Appends one entry's head (tag, hash, len) to `out`; the caller appends
/// the data the tag implies (offset, literal bytes, or compressed length and
/// bytes), usually as a separate slice of a vectored write.
pub fn emit_entry_head(out: &mut Vec<u8>, tag: u8, hash: &Hash, len: u32) {
    out.push(tag);
    out.extend_from_slice(hash);
    out.extend_from_slice(&len.to_le_bytes());
}

/// Fixed part of a BATCH body: raw length, reserved.
pub const BATCH_FIXED_LEN: usize = 8;

/// Decodes a BATCH body: the length the zstd frame decompresses to, and the
/// frame. The decompressed bytes are whole FILE and CHUNKS frames, each with
/// its own header, decoded as if they had arrived one by one.
pub fn parse_batch(body: &[u8]) -> Result<(u32, &[u8]), WireError> {
    let b = body.get(..BATCH_FIXED_LEN).ok_or(WireError::Truncated)?;
    if rd_u32(b, 4) != 0 {
        return Err(WireError::ReservedNonZero);
    }
    Ok((rd_u32(b, 0), &body[BATCH_FIXED_LEN..]))
}

/// Encodes the fixed part of a BATCH body (the zstd frame follows).
pub fn batch_head(raw_len: u32) -> [u8; BATCH_FIXED_LEN] {
    let mut b = [0u8; BATCH_FIXED_LEN];
    b[..4].copy_from_slice(&raw_len.to_le_bytes());
    b
}

/// One file the sender asks about before chunking it (PROBE): does the
/// receiver already hold this content at this path?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeEntry<'a> {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds part of the modification time (< 10^9).
    pub mtime_nsec: u32,
    /// First 8 bytes of the file's BLAKE3.
    pub key: [u8; INDEX_KEY_LEN],
    /// Relative path, as in FILE.
    pub path: &'a [u8],
}

impl ProbeEntry<'_> {
    /// Appends the encoded entry (path cut at [`MAX_PATH_LEN`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        let path = &self.path[..self.path.len().min(MAX_PATH_LEN)];
        let mut b = [0u8; PROBE_ENTRY_FIXED_LEN];
        b[0..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..16].copy_from_slice(&self.mtime_sec.to_le_bytes());
        b[16..20].copy_from_slice(&self.mtime_nsec.to_le_bytes());
        b[20..22].copy_from_slice(&(path.len() as u16).to_le_bytes());
        b[24..32].copy_from_slice(&self.key);
        out.extend_from_slice(&b);
        out.extend_from_slice(path);
    }
}

/// Head of PROBE and PROBE_REPLY: the number of the first entry (entries
/// are numbered 0, 1, 2, … across the session's PROBE frames) and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeHead {
    /// Number of the first entry in this frame.
    pub first_no: u64,
    /// Entries in this frame.
    pub count: u32,
}

impl ProbeHead {
    /// Encodes the head.
    pub fn emit(&self) -> [u8; PROBE_HEAD_LEN] {
        let mut b = [0u8; PROBE_HEAD_LEN];
        b[..8].copy_from_slice(&self.first_no.to_le_bytes());
        b[8..12].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    fn parse(body: &[u8]) -> Result<Self, WireError> {
        let b = body.get(..PROBE_HEAD_LEN).ok_or(WireError::Truncated)?;
        if rd_u32(b, 12) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            first_no: rd_u64(b, 0),
            count: rd_u32(b, 8),
        })
    }
}

/// Decodes a PROBE body: its head and an iterator over its entries (each
/// bounds-checked as it is read; bytes left after `count` entries are
/// `TrailingBytes`).
pub fn parse_probe(body: &[u8]) -> Result<(ProbeHead, ProbeIter<'_>), WireError> {
    let head = ProbeHead::parse(body)?;
    Ok((
        head,
        ProbeIter {
            rest: &body[PROBE_HEAD_LEN..],
            left: head.count,
        },
    ))
}

/// Entries of a PROBE body.
#[derive(Debug, Clone)]
pub struct ProbeIter<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> ProbeIter<'a> {
    fn entry(&mut self) -> Result<ProbeEntry<'a>, WireError> {
        let b = self
            .rest
            .get(..PROBE_ENTRY_FIXED_LEN)
            .ok_or(WireError::TableTruncated)?;
        if rd_u16(b, 22) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let mtime_nsec = rd_u32(b, 16);
        if mtime_nsec >= 1_000_000_000 {
            return Err(WireError::LengthMismatch);
        }
        let path_len = rd_u16(b, 20) as usize;
        if path_len > MAX_PATH_LEN {
            return Err(WireError::TooLarge);
        }
        let end = PROBE_ENTRY_FIXED_LEN + path_len;
        let path = self
            .rest
            .get(PROBE_ENTRY_FIXED_LEN..end)
            .ok_or(WireError::TableTruncated)?;
        let mut key = [0u8; INDEX_KEY_LEN];
        key.copy_from_slice(&b[24..32]);
        let e = ProbeEntry {
            size: rd_u64(b, 0),
            mtime_sec: rd_u64(b, 8) as i64,
            mtime_nsec,
            key,
            path,
        };
        self.rest = &self.rest[end..];
        Ok(e)
    }
}

impl<'a> Iterator for ProbeIter<'a> {
    type Item = Result<ProbeEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.rest = &[];
            return Some(Err(WireError::TrailingBytes));
        }
        self.left -= 1;
        let r = self.entry();
        if r.is_err() {
            // One error ends the iteration.
            self.left = 0;
            self.rest = &[];
        }
        Some(r)
    }
}

/// Decodes a PROBE_REPLY body: its head and the bitmap (bit `i % 8` of byte
/// `i / 8` set = the receiver holds entry `first_no + i`). The bitmap is
/// exactly `ceil(count / 8)` bytes and its unused high bits are zero.
pub fn parse_probe_reply(body: &[u8]) -> Result<(ProbeHead, &[u8]), WireError> {
    let head = ProbeHead::parse(body)?;
    let bits = &body[PROBE_HEAD_LEN..];
    if bits.len() != (head.count as usize).div_ceil(8) {
        return Err(WireError::LengthMismatch);
    }
    let spare = head.count % 8;
    if spare != 0 && bits.last().is_some_and(|&b| b >> spare != 0) {
        return Err(WireError::ReservedNonZero);
    }
    Ok((head, bits))
}

/// Decodes a NAK body: the hashes of chunks the receiver found damaged.
pub fn parse_nak(body: &[u8]) -> Result<impl Iterator<Item = &Hash> + '_, WireError> {
    if !body.len().is_multiple_of(32) {
        return Err(WireError::LengthMismatch);
    }
    Ok(body.chunks_exact(32).filter_map(|h| h.try_into().ok()))
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
    /// Symlinks created.
    pub symlinks: u64,
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
    fn fields(&self) -> [u64; 18] {
        [
            self.files_written,
            self.files_unchanged,
            self.files_failed,
            self.dirs,
            self.symlinks,
            self.effective_bytes,
            self.matched_bytes,
            self.literal_bytes,
            self.literal_wire_bytes,
            self.wire_bytes,
            self.nak_chunks,
            self.repaired_bytes,
            self.store_appended,
            self.store_generation,
            self.elapsed_ns,
            self.user_us,
            self.sys_us,
            self.files_metadata_only,
        ]
    }

    /// Decodes a report body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = body.get(..FILES_REPORT_FIXED_LEN).ok_or(WireError::Truncated)?;
        let text_len = rd_u32(b, 152) as usize;
        if rd_u32(b, 156) != 0 || b[144..152] != [0; 8] {
            return Err(WireError::ReservedNonZero);
        }
        if text_len > MAX_REPORT_TEXT {
            return Err(WireError::TooLarge);
        }
        if body.len() != FILES_REPORT_FIXED_LEN + text_len {
            return Err(WireError::LengthMismatch);
        }
        let messages =
            core::str::from_utf8(&body[FILES_REPORT_FIXED_LEN..]).map_err(|_| WireError::BadUtf8)?;
        let f = |i: usize| rd_u64(b, i * 8);
        Ok(Self {
            files_written: f(0),
            files_unchanged: f(1),
            files_failed: f(2),
            dirs: f(3),
            symlinks: f(4),
            effective_bytes: f(5),
            matched_bytes: f(6),
            literal_bytes: f(7),
            literal_wire_bytes: f(8),
            wire_bytes: f(9),
            nak_chunks: f(10),
            repaired_bytes: f(11),
            store_appended: f(12),
            store_generation: f(13),
            elapsed_ns: f(14),
            user_us: f(15),
            sys_us: f(16),
            files_metadata_only: f(17),
            messages,
        })
    }

    /// Appends the encoded body; messages are cut at [`MAX_REPORT_TEXT`]
    /// bytes on a character boundary.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut end = self.messages.len().min(MAX_REPORT_TEXT);
        while !self.messages.is_char_boundary(end) {
            end -= 1;
        }
        let mut b = [0u8; FILES_REPORT_FIXED_LEN];
        for (i, v) in self.fields().into_iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[152..156].copy_from_slice(&(end as u32).to_le_bytes());
        out.extend_from_slice(&b);
        out.extend_from_slice(&self.messages.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut bad = out;
        bad[0] = 9;
        assert!(matches!(
            FilesHello::parse(&bad),
            Err(WireError::UnsupportedVersion(_))
        ));
    }

    #[test]
    fn accept_plan_ack_roundtrip() {
        let a = FilesAccept {
            store_id: [3; 16],
            generation: 12,
            capacity: 1 << 40,
            free: 1 << 39,
            max_chunks_body: 4 << 20,
            auth_method: 0,
        };
        assert_eq!(FilesAccept::parse(&a.emit()), Ok(a));
        let p = Plan {
            entries: 5,
            files: 3,
            total_bytes: 100,
            literal_bytes: 50,
            chunks: 9,
        };
        assert_eq!(Plan::parse(&p.emit()), Ok(p));
        let k = PlanAck { reserved: 5, free: 6 };
        assert_eq!(PlanAck::parse(&k.emit()), Ok(k));
        assert_eq!(parse_index_request(&9u64.to_le_bytes()), Ok(9));
    }

    #[test]
    fn index_entries() {
        let mut body = Vec::new();
        for i in 0..3u8 {
            IndexEntry {
                key: [i; 8],
                offset: u64::from(i) * 100,
                len: 10,
            }
            .emit(&mut body);
        }
        let got: Vec<_> = parse_index(&body).unwrap().collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].offset, 200);
        assert_eq!(got[2].key, [2; 8]);
        assert!(parse_index(&body[..19]).is_err());
    }

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

    #[test]
    fn chunk_entries_all_tags() {
        let mut body = ChunksHeader { file_no: 2, count: 4 }.emit().to_vec();
        emit_entry_head(&mut body, tag::REF, &[1; 32], 100);
        body.extend_from_slice(&4096u64.to_le_bytes());
        emit_entry_head(&mut body, tag::LITERAL, &[2; 32], 3);
        body.extend_from_slice(b"abc");
        emit_entry_head(&mut body, tag::ZSTD, &[3; 32], 1000);
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(b"zz");
        emit_entry_head(&mut body, tag::KNOWN, &[4; 32], 7);
        let (h, it) = parse_chunks(&body).unwrap();
        assert_eq!(h.file_no, 2);
        let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
        assert_eq!(got[0].data, ChunkData::Ref { offset: 4096 });
        assert_eq!(got[1].data, ChunkData::Literal(b"abc"));
        assert_eq!(got[2].data, ChunkData::Zstd(b"zz"));
        assert_eq!(got[3].data, ChunkData::Known);
        assert_eq!(got[3].len, 7);
        // Truncation anywhere is an error, never a panic.
        for cut in 0..body.len() {
            if let Ok((_, it)) = parse_chunks(&body[..cut]) {
                assert!(it.clone().any(|e| e.is_err()), "cut at {cut}");
            }
        }
        // Trailing bytes after `count` entries.
        let mut extra = body.clone();
        extra.push(0);
        let (_, it) = parse_chunks(&extra).unwrap();
        assert_eq!(it.last(), Some(Err(WireError::TrailingBytes)));
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
        let nak: Vec<u8> = [[5u8; 32], [6u8; 32]].concat();
        assert_eq!(parse_nak(&nak).unwrap().count(), 2);
        assert!(parse_nak(&nak[..33]).is_err());
    }
}
