//! Bodies of the streaming-session frames (`docs/wire.md` §15): a
//! publisher sends its application's own grams — references into the blob
//! both sides hold, writes into the subscriber's blob, messages for the
//! subscriber's code — and the subscriber executes them in order and says
//! how far it got.
//!
//! ```text
//! P: STREAM_HELLO (blob, nonce, integrity, keepalive)
//!                               S: STREAM_ACCEPT (limits, window, rights) | ERROR
//! P: SGRAM seq 0, 1, …          S: APPLIED (next seq, window)   any time
//! P: STREAM_END KEEPALIVE       S: APPLIED                      when idle
//! P: STREAM_END (summary)       S: APPLIED FINAL, closes
//! ```
//!
//! An SGRAM body is the 32-byte gram header of §3.1, an **entry table** and
//! a slab. Each entry has a kind ([`EntryKind`]) and is encoded absolute
//! (12 bytes) or arithmetic (varints); the slab holds the WRITE and MESSAGE
//! bytes in table order. [`StreamGram::entries`] decodes the table lazily,
//! zero-copy, handing each entry its slab bytes. Every decoder is
//! bounds-checked and panic-free; the bounds and rights against a blob are
//! the subscriber's (it checks a whole gram before it applies any entry).

use crate::control::{SenderSummary, SENDER_SUMMARY_LEN};
use crate::desc::Encoding;
use crate::gram::{GramHeader, GRAM_FLAG_PAYLOAD, GRAM_HEADER_LEN};
use crate::layout::{tiles, Field, Reader, Writer};
use crate::varint::{get_varint, put_varint, zigzag_decode, zigzag_encode};
use crate::{IntegrityAlg, WireError};

/// Length of STREAM_HELLO.
pub const STREAM_HELLO_LEN: usize = 80;
/// Length of STREAM_ACCEPT.
pub const STREAM_ACCEPT_LEN: usize = 48;
/// Length of APPLIED.
pub const APPLIED_LEN: usize = 40;
/// Length of STREAM_END: the sender summary of §4.3.
pub const STREAM_END_LEN: usize = SENDER_SUMMARY_LEN;
/// Length of one absolute entry.
pub const ABSOLUTE_ENTRY_LEN: usize = 12;
/// Longest entry: its length shares a `u32` with its two kind bits.
pub const MAX_ENTRY_LEN: u32 = (1 << 30) - 1;

/// Flag on STREAM_END: not the end, the publisher is alive (the body is
/// its summary so far).
pub const FLAG_KEEPALIVE: u16 = 0x0001;
/// Flag on APPLIED: the subscriber's answer to STREAM_END, its last frame.
pub const FLAG_FINAL: u16 = 0x0001;

/// STREAM_HELLO flag: the publisher can act as catch-up source (§16) when
/// the fingerprints differ.
pub const HELLO_CATCH_UP: u8 = 0x01;
/// STREAM_ACCEPT flag, only in answer to [`HELLO_CATCH_UP`]: the roots
/// differ and the subscriber takes the catch-up; CATCHUP_BEGIN follows.
pub const ACCEPT_CATCH_UP: u8 = 0x01;

/// STREAM_ACCEPT right: the publisher may send WRITE entries.
pub const RIGHT_WRITE: u8 = 0x01;
/// STREAM_ACCEPT right: the publisher may send MESSAGE entries.
pub const RIGHT_MESSAGE: u8 = 0x02;
const RIGHTS_DEFINED: u8 = RIGHT_WRITE | RIGHT_MESSAGE;

mod field {
    use super::{tiles, Field};
    use super::{ABSOLUTE_ENTRY_LEN, APPLIED_LEN, STREAM_ACCEPT_LEN, STREAM_HELLO_LEN};

    pub mod hello {
        use super::*;
        pub const BLOB_LEN: Field = Field::new(0, 8);
        pub const REGION_SIZE: Field = Field::new(8, 4);
        pub const INTEGRITY: Field = Field::new(12, 1);
        pub const FLAGS: Field = Field::new(13, 1);
        pub const STREAM_INDEX: Field = Field::new(14, 2);
        pub const STREAM_COUNT: Field = Field::new(16, 2);
        pub const RESERVED_A: Field = Field::new(18, 2);
        pub const KEEPALIVE_MS: Field = Field::new(20, 4);
        pub const NONCE: Field = Field::new(24, 8);
        pub const FINGERPRINT: Field = Field::new(32, 32);
        pub const RESERVED_B: Field = Field::new(64, 16);
        const _: () = assert!(tiles(
            &[
                BLOB_LEN,
                REGION_SIZE,
                INTEGRITY,
                FLAGS,
                STREAM_INDEX,
                STREAM_COUNT,
                RESERVED_A,
                KEEPALIVE_MS,
                NONCE,
                FINGERPRINT,
                RESERVED_B
            ],
            STREAM_HELLO_LEN
        ));
    }

    pub mod accept {
        use super::*;
        pub const MAX_GRAM_BODY: Field = Field::new(0, 4);
        pub const MAX_ENTRIES: Field = Field::new(4, 4);
        pub const WINDOW_GRAMS: Field = Field::new(8, 4);
        pub const RIGHTS: Field = Field::new(12, 1);
        pub const FLAGS: Field = Field::new(13, 1);
        pub const RESERVED_A: Field = Field::new(14, 2);
        pub const WINDOW_BYTES: Field = Field::new(16, 8);
        pub const BLOB_LEN: Field = Field::new(24, 8);
        pub const NONCE: Field = Field::new(32, 8);
        pub const KEEPALIVE_MS: Field = Field::new(40, 4);
        pub const RESERVED_B: Field = Field::new(44, 4);
        const _: () = assert!(tiles(
            &[
                MAX_GRAM_BODY,
                MAX_ENTRIES,
                WINDOW_GRAMS,
                RIGHTS,
                FLAGS,
                RESERVED_A,
                WINDOW_BYTES,
                BLOB_LEN,
                NONCE,
                KEEPALIVE_MS,
                RESERVED_B
            ],
            STREAM_ACCEPT_LEN
        ));
    }

    pub mod applied {
        use super::*;
        pub const APPLIED: Field = Field::new(0, 8);
        pub const E2E: Field = Field::new(8, 8);
        pub const MISMATCHED: Field = Field::new(16, 8);
        pub const WINDOW_BYTES: Field = Field::new(24, 8);
        pub const WINDOW_GRAMS: Field = Field::new(32, 4);
        pub const RESERVED: Field = Field::new(36, 4);
        const _: () = assert!(tiles(
            &[APPLIED, E2E, MISMATCHED, WINDOW_BYTES, WINDOW_GRAMS, RESERVED],
            APPLIED_LEN
        ));
    }

    pub mod entry {
        use super::*;
        pub const OFFSET: Field = Field::new(0, 8);
        /// `kind << 30 | len`.
        pub const WORD: Field = Field::new(8, 4);
        const _: () = assert!(tiles(&[OFFSET, WORD], ABSOLUTE_ENTRY_LEN));
    }
}

/// STREAM_HELLO (type 31): the publisher opens a streaming session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamHello {
    /// Length of the publisher's blob.
    pub blob_len: u64,
    /// Fingerprint region size.
    pub region_size: u32,
    /// Integrity algorithm of every SGRAM's `integrity_value` (§6.1).
    pub integrity: IntegrityAlg,
    /// This stream's index in its publication (0 for an unsharded one).
    pub stream_index: u16,
    /// Streams in the publication (≥ 1, > `stream_index`).
    pub stream_count: u16,
    /// The publisher sends a frame at least this often (ms, > 0).
    pub keepalive_ms: u32,
    /// Random per session; echoed in STREAM_ACCEPT.
    pub session_nonce: u64,
    /// Fingerprint root of the publisher's blob.
    pub fingerprint: [u8; 32],
    /// The publisher offers catch-up ([`HELLO_CATCH_UP`], §16).
    pub catch_up: bool,
}

impl StreamHello {
    /// Decodes a STREAM_HELLO body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::hello as f;
        let b = Reader::<STREAM_HELLO_LEN>::exact(body)?;
        let flags = b.u8(f::FLAGS);
        if flags & !HELLO_CATCH_UP != 0 {
            return Err(WireError::BadFlags);
        }
        if !b.is_zero(f::RESERVED_A) || !b.is_zero(f::RESERVED_B) {
            return Err(WireError::ReservedNonZero);
        }
        let integrity = IntegrityAlg::from_u8(b.u8(f::INTEGRITY))?;
        let (stream_index, stream_count) = (b.u16(f::STREAM_INDEX), b.u16(f::STREAM_COUNT));
        if stream_count == 0 || stream_index >= stream_count || b.u32(f::KEEPALIVE_MS) == 0 {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            blob_len: b.u64(f::BLOB_LEN),
            region_size: b.u32(f::REGION_SIZE),
            integrity,
            stream_index,
            stream_count,
            keepalive_ms: b.u32(f::KEEPALIVE_MS),
            session_nonce: b.u64(f::NONCE),
            fingerprint: b.array(f::FINGERPRINT),
            catch_up: flags & HELLO_CATCH_UP != 0,
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; STREAM_HELLO_LEN] {
        use field::hello as f;
        let mut w = Writer::<STREAM_HELLO_LEN>::new();
        w.u64(f::BLOB_LEN, self.blob_len)
            .u32(f::REGION_SIZE, self.region_size)
            .u8(f::INTEGRITY, self.integrity as u8)
            .u8(f::FLAGS, if self.catch_up { HELLO_CATCH_UP } else { 0 })
            .u16(f::STREAM_INDEX, self.stream_index)
            .u16(f::STREAM_COUNT, self.stream_count)
            .u32(f::KEEPALIVE_MS, self.keepalive_ms)
            .u64(f::NONCE, self.session_nonce)
            .put(f::FINGERPRINT, &self.fingerprint);
        w.finish()
    }
}

/// STREAM_ACCEPT (type 32): the subscriber takes the stream, with its
/// limits, its window and the rights it gives this publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAccept {
    /// Largest SGRAM body the subscriber takes (≥ 32).
    pub max_gram_body: u32,
    /// Most entries in one SGRAM.
    pub max_entries: u32,
    /// Most grams sent and not yet applied (> 0).
    pub window_grams: u32,
    /// `RIGHT_WRITE`, `RIGHT_MESSAGE`; REFERENCE is always allowed.
    pub rights: u8,
    /// Most SGRAM frame bytes (headers included) sent and not yet applied;
    /// at least one largest frame (16 + `max_gram_body`).
    pub window_bytes: u64,
    /// Length of the subscriber's blob.
    pub blob_len: u64,
    /// Echo of STREAM_HELLO's nonce.
    pub session_nonce: u64,
    /// The subscriber sends a frame at least this often (ms, > 0).
    pub keepalive_ms: u32,
    /// The subscriber takes the catch-up offered ([`ACCEPT_CATCH_UP`], §16).
    pub catch_up: bool,
}

impl StreamAccept {
    /// Decodes a STREAM_ACCEPT body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::accept as f;
        let b = Reader::<STREAM_ACCEPT_LEN>::exact(body)?;
        let rights = b.u8(f::RIGHTS);
        let flags = b.u8(f::FLAGS);
        if rights & !RIGHTS_DEFINED != 0 || flags & !ACCEPT_CATCH_UP != 0 {
            return Err(WireError::BadFlags);
        }
        if !b.is_zero(f::RESERVED_A) || !b.is_zero(f::RESERVED_B) {
            return Err(WireError::ReservedNonZero);
        }
        let a = Self {
            max_gram_body: b.u32(f::MAX_GRAM_BODY),
            max_entries: b.u32(f::MAX_ENTRIES),
            window_grams: b.u32(f::WINDOW_GRAMS),
            rights,
            window_bytes: b.u64(f::WINDOW_BYTES),
            blob_len: b.u64(f::BLOB_LEN),
            session_nonce: b.u64(f::NONCE),
            keepalive_ms: b.u32(f::KEEPALIVE_MS),
            catch_up: flags & ACCEPT_CATCH_UP != 0,
        };
        let largest_frame = crate::FRAME_HEADER_LEN as u64 + u64::from(a.max_gram_body);
        if (a.max_gram_body as usize) < GRAM_HEADER_LEN
            || a.window_grams == 0
            || a.window_bytes < largest_frame
            || a.keepalive_ms == 0
        {
            return Err(WireError::LengthMismatch);
        }
        Ok(a)
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; STREAM_ACCEPT_LEN] {
        use field::accept as f;
        let mut w = Writer::<STREAM_ACCEPT_LEN>::new();
        w.u32(f::MAX_GRAM_BODY, self.max_gram_body)
            .u32(f::MAX_ENTRIES, self.max_entries)
            .u32(f::WINDOW_GRAMS, self.window_grams)
            .u8(f::RIGHTS, self.rights)
            .u8(f::FLAGS, if self.catch_up { ACCEPT_CATCH_UP } else { 0 })
            .u64(f::WINDOW_BYTES, self.window_bytes)
            .u64(f::BLOB_LEN, self.blob_len)
            .u64(f::NONCE, self.session_nonce)
            .u32(f::KEEPALIVE_MS, self.keepalive_ms);
        w.finish()
    }
}

/// APPLIED (type 34): how far the subscriber has executed, and its window
/// from there; also its keepalive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// Grams executed so far: the `seq` the subscriber expects next.
    pub applied: u64,
    /// The subscriber's end-to-end digest (§6.2) over those grams.
    pub e2e_digest: u64,
    /// Grams among them whose digest did not match.
    pub mismatched: u64,
    /// Window in SGRAM frame bytes from `applied` on (as in STREAM_ACCEPT).
    pub window_bytes: u64,
    /// Window in grams from `applied` on (> 0).
    pub window_grams: u32,
}

impl Applied {
    /// Decodes an APPLIED body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::applied as f;
        let b = Reader::<APPLIED_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        if b.u32(f::WINDOW_GRAMS) == 0 {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            applied: b.u64(f::APPLIED),
            e2e_digest: b.u64(f::E2E),
            mismatched: b.u64(f::MISMATCHED),
            window_bytes: b.u64(f::WINDOW_BYTES),
            window_grams: b.u32(f::WINDOW_GRAMS),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; APPLIED_LEN] {
        use field::applied as f;
        let mut w = Writer::<APPLIED_LEN>::new();
        w.u64(f::APPLIED, self.applied)
            .u64(f::E2E, self.e2e_digest)
            .u64(f::MISMATCHED, self.mismatched)
            .u64(f::WINDOW_BYTES, self.window_bytes)
            .u32(f::WINDOW_GRAMS, self.window_grams);
        w.finish()
    }
}

/// STREAM_END (type 35): the publisher's summary (§4.3's 48 bytes: grams,
/// entries, effective bytes, e2e digest, wire bytes, slab bytes); with
/// [`FLAG_KEEPALIVE`] its summary so far, and not the end.
pub type StreamEnd = SenderSummary;

/// What an entry asks of the subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EntryKind {
    /// `(offset, len)`: bytes the subscriber holds.
    Reference = 0,
    /// `(offset, len)` + `len` slab bytes: written into the subscriber's blob.
    Write = 1,
    /// `len` slab bytes handed to the subscriber's code; no offset.
    Message = 2,
}

impl EntryKind {
    /// Parses the two kind bits; 3 is not assigned (`BadFlags`).
    pub fn from_bits(v: u32) -> Result<Self, WireError> {
        match v {
            0 => Ok(Self::Reference),
            1 => Ok(Self::Write),
            2 => Ok(Self::Message),
            _ => Err(WireError::BadFlags),
        }
    }

    /// Whether the entry names blob bytes (REFERENCE, WRITE).
    pub fn has_offset(self) -> bool {
        self != Self::Message
    }

    /// Whether the entry carries slab bytes (WRITE, MESSAGE).
    pub fn has_slab(self) -> bool {
        self != Self::Reference
    }

    /// Lower-case name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Reference => "reference",
            Self::Write => "write",
            Self::Message => "message",
        }
    }
}

/// One decoded entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// What it asks.
    pub kind: EntryKind,
    /// Blob offset (0 for MESSAGE).
    pub offset: u64,
    /// Length in bytes (< 2^30).
    pub len: u32,
    /// Its slab bytes (`len` of them for WRITE and MESSAGE, empty for REFERENCE).
    pub slab: &'a [u8],
}

/// An SGRAM body (type 33), zero-copy: header, entry table, slab.
#[derive(Debug, Clone, Copy)]
pub struct StreamGram<'a> {
    /// The gram header of §3.1 (`desc_count` counts entries).
    pub header: GramHeader,
    /// The encoded entry table.
    pub table: &'a [u8],
    /// The slab: WRITE and MESSAGE bytes in table order.
    pub slab: &'a [u8],
}

impl<'a> StreamGram<'a> {
    /// Checks the header (§3.1's checks, in order) and splits the body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let g = crate::gram::Gram::parse(body)?;
        Ok(Self {
            header: g.header,
            table: g.table,
            slab: g.payload,
        })
    }

    /// Lazy entry decoder; its last item checks that the table and the
    /// slab were used exactly.
    pub fn entries(&self) -> EntryIter<'a> {
        EntryIter {
            table: self.table,
            slab: self.slab,
            pos: 0,
            slab_pos: 0,
            remaining: self.header.desc_count,
            encoding: self.header.encoding,
            cursor: 0,
            failed: false,
        }
    }
}

/// Decodes an entry table one entry at a time (see [`StreamGram::entries`]).
#[derive(Debug, Clone)]
pub struct EntryIter<'a> {
    table: &'a [u8],
    slab: &'a [u8],
    pos: usize,
    slab_pos: usize,
    remaining: u32,
    encoding: Encoding,
    /// Arithmetic: the end of the previous REFERENCE or WRITE.
    cursor: u64,
    failed: bool,
}

fn table_truncated(e: WireError) -> WireError {
    if e == WireError::Truncated {
        WireError::TableTruncated
    } else {
        e
    }
}

impl<'a> EntryIter<'a> {
    fn next_absolute(&mut self) -> Result<(EntryKind, u64, u32), WireError> {
        let rest = self.table.get(self.pos..).unwrap_or_default();
        let b = Reader::<ABSOLUTE_ENTRY_LEN>::new(rest).map_err(|_| WireError::TableTruncated)?;
        let word = b.u32(field::entry::WORD);
        let kind = EntryKind::from_bits(word >> 30)?;
        let offset = b.u64(field::entry::OFFSET);
        if kind == EntryKind::Message && offset != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let len = word & MAX_ENTRY_LEN;
        offset
            .checked_add(u64::from(len))
            .ok_or(WireError::DescriptorOverflow)?;
        self.pos += ABSOLUTE_ENTRY_LEN;
        Ok((kind, offset, len))
    }

    fn next_arithmetic(&mut self) -> Result<(EntryKind, u64, u32), WireError> {
        let rest = self.table.get(self.pos..).unwrap_or_default();
        let (v, used) = get_varint(rest).map_err(table_truncated)?;
        let v = u32::try_from(v).map_err(|_| WireError::DescriptorOverflow)?;
        let kind = EntryKind::from_bits(v & 3)?;
        let len = v >> 2;
        let mut offset = 0;
        let mut used_all = used;
        if kind.has_offset() {
            let after = rest.get(used..).unwrap_or_default();
            let (zz, used_off) = get_varint(after).map_err(table_truncated)?;
            let o = i128::from(self.cursor) + i128::from(zigzag_decode(zz));
            offset = u64::try_from(o).map_err(|_| WireError::DescriptorOverflow)?;
            self.cursor = offset
                .checked_add(u64::from(len))
                .ok_or(WireError::DescriptorOverflow)?;
            used_all += used_off;
        }
        self.pos += used_all;
        Ok((kind, offset, len))
    }

    fn fail(&mut self, e: WireError) -> Option<Result<Entry<'a>, WireError>> {
        self.failed = true;
        Some(Err(e))
    }
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = Result<Entry<'a>, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining == 0 {
            if self.pos != self.table.len() {
                return self.fail(WireError::TrailingBytes);
            }
            if self.slab_pos != self.slab.len() {
                return self.fail(WireError::LengthMismatch);
            }
            return None;
        }
        let r = match self.encoding {
            Encoding::Absolute => self.next_absolute(),
            Encoding::Arithmetic => self.next_arithmetic(),
        };
        let (kind, offset, len) = match r {
            Ok(e) => e,
            Err(e) => return self.fail(e),
        };
        let slab = if kind.has_slab() {
            let end = self.slab_pos.checked_add(len as usize);
            match end.and_then(|end| self.slab.get(self.slab_pos..end)) {
                Some(s) => {
                    self.slab_pos += s.len();
                    s
                }
                None => return self.fail(WireError::LengthMismatch),
            }
        } else {
            &[]
        };
        self.remaining -= 1;
        Some(Ok(Entry {
            kind,
            offset,
            len,
            slab,
        }))
    }
}

/// Why an entry cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryEncodeError {
    /// `len` ≥ 2^30.
    TooLong,
    /// `offset + len` overflows `u64`.
    Overflow,
    /// More than `u32::MAX` entries, or a slab past `u32::MAX` bytes.
    TooMany,
}

impl core::fmt::Display for EntryEncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::TooLong => "entry longer than 2^30 - 1 bytes",
            Self::Overflow => "entry end overflows u64",
            Self::TooMany => "more than u32::MAX entries or slab bytes in one gram",
        })
    }
}

impl std::error::Error for EntryEncodeError {}

/// Builds a gram's entry table in **both** encodings at once, into
/// reusable buffers, so the publisher can send the smaller
/// ([`EntryTables::smaller`]); `clear` keeps the capacity.
#[derive(Debug, Clone, Default)]
pub struct EntryTables {
    absolute: Vec<u8>,
    arithmetic: Vec<u8>,
    cursor: u64,
    count: u32,
    slab_len: u32,
    /// False once a delta did not fit an `i64` (a jump of more than
    /// 8 EiB): this gram then goes absolute.
    arithmetic_broken: bool,
}

impl EntryTables {
    /// Empty tables with room for `entries` entries.
    pub fn with_capacity(entries: usize) -> Self {
        Self {
            absolute: Vec::with_capacity(entries * ABSOLUTE_ENTRY_LEN),
            arithmetic: Vec::with_capacity(entries * 4),
            ..Self::default()
        }
    }

    /// Empties both tables, keeping the allocations.
    pub fn clear(&mut self) {
        self.absolute.clear();
        self.arithmetic.clear();
        self.cursor = 0;
        self.count = 0;
        self.slab_len = 0;
        self.arithmetic_broken = false;
    }

    /// Appends one entry (MESSAGE ignores `offset`).
    pub fn push(&mut self, kind: EntryKind, offset: u64, len: u32) -> Result<(), EntryEncodeError> {
        if len > MAX_ENTRY_LEN {
            return Err(EntryEncodeError::TooLong);
        }
        let offset = if kind.has_offset() { offset } else { 0 };
        let end = offset
            .checked_add(u64::from(len))
            .ok_or(EntryEncodeError::Overflow)?;
        let count = self.count.checked_add(1).ok_or(EntryEncodeError::TooMany)?;
        let slab_len = if kind.has_slab() {
            self.slab_len.checked_add(len).ok_or(EntryEncodeError::TooMany)?
        } else {
            self.slab_len
        };
        let word = (kind as u32) << 30 | len;
        let mut w = Writer::<ABSOLUTE_ENTRY_LEN>::new();
        w.u64(field::entry::OFFSET, offset).u32(field::entry::WORD, word);
        self.absolute.extend_from_slice(&w.finish());
        put_varint(&mut self.arithmetic, u64::from(len) << 2 | kind as u64);
        if kind.has_offset() {
            match i64::try_from(i128::from(offset) - i128::from(self.cursor)) {
                Ok(delta) => put_varint(&mut self.arithmetic, zigzag_encode(delta)),
                Err(_) => self.arithmetic_broken = true,
            }
            self.cursor = end;
        }
        self.count = count;
        self.slab_len = slab_len;
        Ok(())
    }

    /// Entries pushed since the last `clear`.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Slab bytes the entries pushed need (WRITE and MESSAGE lengths).
    pub fn slab_len(&self) -> u32 {
        self.slab_len
    }

    /// Whether the arithmetic table is usable (every delta fit an `i64`).
    pub fn arithmetic_ok(&self) -> bool {
        !self.arithmetic_broken
    }

    /// The table in `encoding`.
    pub fn table(&self, encoding: Encoding) -> &[u8] {
        match encoding {
            Encoding::Absolute => &self.absolute,
            Encoding::Arithmetic => &self.arithmetic,
        }
    }

    /// The smaller encoding (absolute on a tie) and its table.
    pub fn smaller(&self) -> (Encoding, &[u8]) {
        if !self.arithmetic_broken && self.arithmetic.len() < self.absolute.len() {
            (Encoding::Arithmetic, &self.arithmetic)
        } else {
            (Encoding::Absolute, &self.absolute)
        }
    }

    /// The gram header for these entries in `encoding`.
    pub fn header(&self, seq: u64, encoding: Encoding, integrity: IntegrityAlg, value: u64) -> GramHeader {
        GramHeader {
            seq,
            desc_count: self.count,
            table_len: u32::try_from(self.table(encoding).len()).unwrap_or(u32::MAX),
            payload_len: self.slab_len,
            encoding,
            integrity,
            flags: if self.slab_len == 0 { 0 } else { GRAM_FLAG_PAYLOAD },
            integrity_value: value,
        }
    }
}

/// Re-encodes one decoded entry into `out` (fuzzing and tests): the
/// absolute form, or the arithmetic form from `cursor`, which it advances.
pub fn emit_entry(out: &mut Vec<u8>, encoding: Encoding, cursor: &mut u64, e: &Entry<'_>) {
    match encoding {
        Encoding::Absolute => {
            let mut w = Writer::<ABSOLUTE_ENTRY_LEN>::new();
            w.u64(field::entry::OFFSET, e.offset)
                .u32(field::entry::WORD, (e.kind as u32) << 30 | e.len);
            out.extend_from_slice(&w.finish());
        }
        Encoding::Arithmetic => {
            put_varint(out, u64::from(e.len) << 2 | e.kind as u64);
            if e.kind.has_offset() {
                let delta = (i128::from(e.offset) - i128::from(*cursor)) as i64;
                put_varint(out, zigzag_encode(delta));
                *cursor = e.offset.saturating_add(u64::from(e.len));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(tables: &EntryTables, enc: Encoding, slab: &[u8]) -> Vec<u8> {
        let h = tables.header(0, enc, IntegrityAlg::None, 0);
        let mut b = h.emit().to_vec();
        b.extend_from_slice(tables.table(enc));
        b.extend_from_slice(slab);
        b
    }

    #[test]
    fn every_kind_round_trips_in_both_encodings() {
        let mut t = EntryTables::with_capacity(4);
        t.push(EntryKind::Reference, 4096, 100).unwrap();
        t.push(EntryKind::Write, 10, 3).unwrap();
        t.push(EntryKind::Message, 0, 2).unwrap();
        t.push(EntryKind::Reference, 13, 0).unwrap();
        for enc in [Encoding::Absolute, Encoding::Arithmetic] {
            let b = body(&t, enc, b"abcxy");
            let g = StreamGram::parse(&b).unwrap();
            let es: Vec<_> = g.entries().collect::<Result<_, _>>().unwrap();
            assert_eq!(es.len(), 4);
            assert_eq!(
                (es[0].kind, es[0].offset, es[0].len, es[0].slab),
                (EntryKind::Reference, 4096, 100, &b""[..])
            );
            assert_eq!(
                (es[1].kind, es[1].offset, es[1].slab),
                (EntryKind::Write, 10, &b"abc"[..])
            );
            assert_eq!(
                (es[2].kind, es[2].offset, es[2].slab),
                (EntryKind::Message, 0, &b"xy"[..])
            );
            assert_eq!((es[3].kind, es[3].offset), (EntryKind::Reference, 13));
            let mut out = Vec::new();
            let mut cursor = 0;
            es.iter().for_each(|e| emit_entry(&mut out, enc, &mut cursor, e));
            assert_eq!(out, t.table(enc));
        }
        assert_eq!(t.smaller().0, Encoding::Arithmetic);
    }

    #[test]
    fn slab_must_match_the_entries() {
        let mut t = EntryTables::default();
        t.push(EntryKind::Write, 0, 4).unwrap();
        let mut short = body(&t, Encoding::Absolute, b"abcd");
        // Slab one byte longer than the entries use: header says 5.
        short[16] = 5;
        short.push(b'e');
        let g = StreamGram::parse(&short).unwrap();
        assert_eq!(g.entries().last(), Some(Err(WireError::LengthMismatch)));
        let mut long = body(&t, Encoding::Absolute, b"abcd");
        long[16] = 3;
        long.pop();
        let g = StreamGram::parse(&long).unwrap();
        assert_eq!(g.entries().next(), Some(Err(WireError::LengthMismatch)));
    }

    #[test]
    fn hostile_tables_are_refused() {
        fn one(e: &[u8]) -> Option<Result<Entry<'_>, WireError>> {
            let mut it = EntryIter {
                table: e,
                slab: &[],
                pos: 0,
                slab_pos: 0,
                remaining: 1,
                encoding: Encoding::Absolute,
                cursor: 0,
                failed: false,
            };
            let first = it.next();
            assert_eq!(it.next(), None, "nothing after an error");
            first
        }
        // Kind 3.
        let mut e = [0u8; 12];
        e[8..].copy_from_slice(&(3u32 << 30 | 1).to_le_bytes());
        assert_eq!(one(&e), Some(Err(WireError::BadFlags)));
        // MESSAGE with an offset.
        e[0] = 1;
        e[8..].copy_from_slice(&(2u32 << 30).to_le_bytes());
        assert_eq!(one(&e), Some(Err(WireError::ReservedNonZero)));
        // Overflowing end.
        e[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        e[8..].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(one(&e), Some(Err(WireError::DescriptorOverflow)));
        assert_eq!(
            EntryTables::default().push(EntryKind::Write, 0, 1 << 30),
            Err(EntryEncodeError::TooLong)
        );
    }

    #[test]
    fn control_bodies_round_trip_and_check_ranges() {
        let h = StreamHello {
            blob_len: 1 << 20,
            region_size: 65536,
            integrity: IntegrityAlg::Xxh3,
            stream_index: 0,
            stream_count: 1,
            keepalive_ms: 1000,
            session_nonce: 7,
            fingerprint: [9; 32],
            catch_up: false,
        };
        assert_eq!(StreamHello::parse(&h.emit()), Ok(h));
        let offer = StreamHello { catch_up: true, ..h };
        assert_eq!(offer.emit()[13], HELLO_CATCH_UP);
        assert_eq!(StreamHello::parse(&offer.emit()), Ok(offer));
        let mut flags = h.emit();
        flags[13] = 2;
        assert_eq!(StreamHello::parse(&flags), Err(WireError::BadFlags));
        let bad = StreamHello { stream_index: 1, ..h }.emit();
        assert_eq!(StreamHello::parse(&bad), Err(WireError::LengthMismatch));
        let a = StreamAccept {
            max_gram_body: 1 << 20,
            max_entries: 4096,
            window_grams: 8,
            rights: RIGHT_WRITE | RIGHT_MESSAGE,
            window_bytes: 8 << 20,
            blob_len: 1 << 20,
            session_nonce: 7,
            keepalive_ms: 1000,
            catch_up: false,
        };
        assert_eq!(StreamAccept::parse(&a.emit()), Ok(a));
        let taken = StreamAccept { catch_up: true, ..a };
        assert_eq!(taken.emit()[13], ACCEPT_CATCH_UP);
        assert_eq!(StreamAccept::parse(&taken.emit()), Ok(taken));
        let mut flags = a.emit();
        flags[13] = 2;
        assert_eq!(StreamAccept::parse(&flags), Err(WireError::BadFlags));
        let small = StreamAccept {
            window_bytes: 1 << 20,
            ..a
        }
        .emit();
        assert_eq!(StreamAccept::parse(&small), Err(WireError::LengthMismatch));
        let mut rights = a.emit();
        rights[12] = 4;
        assert_eq!(StreamAccept::parse(&rights), Err(WireError::BadFlags));
        let p = Applied {
            applied: 3,
            e2e_digest: 4,
            mismatched: 0,
            window_bytes: 5,
            window_grams: 6,
        };
        assert_eq!(Applied::parse(&p.emit()), Ok(p));
        assert_eq!(Applied::parse(&p.emit()[..39]), Err(WireError::Truncated));
    }

    proptest! {
        /// Any pushed entries decode back to themselves in both encodings.
        #[test]
        fn tables_round_trip(entries in proptest::collection::vec((0u8..3, any::<u64>(), 0u32..64), 0..40)) {
            let mut t = EntryTables::default();
            let mut want = Vec::new();
            for (k, off, len) in entries {
                let kind = EntryKind::from_bits(u32::from(k)).unwrap();
                let off = if kind.has_offset() { off >> 1 } else { 0 };
                t.push(kind, off, len).unwrap();
                want.push((kind, off, len));
            }
            let slab = vec![0xab; t.slab_len() as usize];
            for enc in [Encoding::Absolute, Encoding::Arithmetic] {
                if enc == Encoding::Arithmetic && !t.arithmetic_ok() {
                    continue;
                }
                let b = body(&t, enc, &slab);
                let g = StreamGram::parse(&b).unwrap();
                let got: Vec<_> = g.entries().map(|e| e.map(|e| (e.kind, e.offset, e.len))).collect::<Result<_, _>>().unwrap();
                prop_assert_eq!(&got, &want);
            }
        }

        /// Arbitrary tables never panic the decoder.
        #[test]
        fn entries_never_panic(table in proptest::collection::vec(any::<u8>(), 0..96), slab in proptest::collection::vec(any::<u8>(), 0..32), count in 0u32..12, arith: bool) {
            let it = EntryIter {
                table: &table, slab: &slab, pos: 0, slab_pos: 0, remaining: count,
                encoding: if arith { Encoding::Arithmetic } else { Encoding::Absolute },
                cursor: 0, failed: false,
            };
            let _ = it.count();
        }
    }
}
