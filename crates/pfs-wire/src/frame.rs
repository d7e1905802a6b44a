//! The outer frame envelope: a fixed 16-byte header with its own CRC32C,
//! followed by `length` body bytes whose meaning depends on the frame type.
//!
//! ```text
//! 0      4       5      6       8        12       16
//! | magic | version | type | flags | length | hdr_crc |
//! ```
//! `hdr_crc` is CRC32C over bytes 0..12. All integers little-endian. The
//! byte ranges live once, in the private `field` table, which both
//! [`FrameHeader::parse`] and [`FrameHeader::emit`] use.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// `PFSG`.
pub const MAGIC: [u8; 4] = *b"PFSG";
/// The protocol version this build speaks.
pub const VERSION: u8 = 1;
/// Size of the frame header in bytes.
pub const FRAME_HEADER_LEN: usize = 16;
/// Upper bound on the body of any non-GRAM frame; receivers reject larger.
pub const MAX_CONTROL_BODY: u32 = 64 * 1024;

/// Byte ranges of the frame header (`docs/wire.md` §2.1).
mod field {
    use super::{tiles, Field, FRAME_HEADER_LEN};

    pub const MAGIC: Field = Field::new(0, 4);
    pub const VERSION: Field = Field::new(4, 1);
    pub const TYPE: Field = Field::new(5, 1);
    pub const FLAGS: Field = Field::new(6, 2);
    pub const LENGTH: Field = Field::new(8, 4);
    /// CRC32C of every byte before it.
    pub const HDR_CRC: Field = Field::new(12, 4);

    const _: () = assert!(tiles(
        &[MAGIC, VERSION, TYPE, FLAGS, LENGTH, HDR_CRC],
        FRAME_HEADER_LEN
    ));
}

/// Frame type numbers. ACK, NAK and REPAIR are reserved for the reliable
/// transports and the corrections plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Sender → receiver: version, mode, encoding, integrity, blob fingerprint, auth room.
    Hello = 1,
    /// Receiver → sender: accepted; the receiver's limits.
    HelloAck = 2,
    /// A gram: header, descriptor table, optional payload slab.
    Gram = 3,
    /// End of a session: sender summary, or (flag `REPORT`) the receiver's stats.
    Complete = 4,
    /// A refusal or failure with a code and a message; the connection closes after it.
    Error = 5,
    /// Receiver status: in a files session, the PLAN is accepted and store space reserved.
    Ack = 6,
    /// Negative acknowledgement (corrections plane): hashes of chunks whose bytes did not match.
    Nak = 7,
    /// Repair gram answering a NAK: the chunks' bytes.
    Repair = 8,
    /// Files: sender opens a file-transfer session.
    FilesHello = 9,
    /// Files: receiver accepts, naming its store and generation.
    FilesAccept = 10,
    /// Files: sender asks for the store index from a generation on.
    IndexRequest = 11,
    /// Files: a batch of store index entries.
    Index = 12,
    /// Files: totals of what the sender will send.
    Plan = 13,
    /// Files: one file, directory or symlink.
    File = 14,
    /// Files: chunk entries of the current file (descriptors and literals).
    Chunks = 15,
    /// Files: sender finished (empty), or (flag REPORT) the receiver's report.
    FilesEnd = 16,
    /// Files: a zstd-compressed run of FILE and CHUNKS frames (many small files per write).
    Batch = 17,
    /// Files: files the sender asks about before chunking them (optional).
    Probe = 18,
    /// Files: which probed files the receiver already holds (a bitmap).
    ProbeReply = 19,
    /// Files: the sender gives up on the file streaming (it changed or could not be read).
    FileDrop = 20,
    /// Files: the sender asks the receiver to remove what its tree lacks (rsync's --delete).
    Delete = 21,
    /// Files: what the receiver removed (or would remove), or why it did not.
    Deleted = 22,
    /// Files: a streamed file's chunk count and file hash, after its CHUNKS.
    FileDone = 23,
    /// Mount: the client opens a read session over a tree the server holds.
    MountHello = 24,
    /// Mount: the server takes it; the listing follows.
    MountAccept = 25,
    /// Mount: entries of the tree's listing.
    List = 26,
    /// Mount: the client asks for a file's recipe.
    RecipeAsk = 27,
    /// Mount: part of a file's recipe (chunk lengths and hashes).
    Recipe = 28,
    /// Mount: the client asks for runs of chunks.
    Fetch = 29,
    /// Mount: the chunks a FETCH asked for, in order.
    Data = 30,
    /// Stream: the publisher opens a streaming session (docs/wire.md §15).
    StreamHello = 31,
    /// Stream: the subscriber takes it, with its limits, window and rights.
    StreamAccept = 32,
    /// Stream: an application's gram of references, writes and messages.
    Sgram = 33,
    /// Stream: how far the subscriber has executed, and its window; its keepalive.
    Applied = 34,
    /// Stream: the publisher's summary at the end, or (flag KEEPALIVE) so far.
    StreamEnd = 35,
    /// Catch-up: the replica's nonce, block size and limits (§16).
    CatchupBegin = 36,
    /// Catch-up: a run of the source's region hashes.
    CatchupRegions = 37,
    /// Catch-up: a run of the replica's block hashes in a differing region.
    CatchupHashes = 38,
    /// Catch-up: a run of blocks whose hashes differed, with their bytes.
    CatchupBlocks = 39,
    /// Catch-up: one side's counts and fingerprint root; grams follow.
    CatchupEnd = 40,
}

impl FrameType {
    /// Parses a frame type number.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Hello,
            2 => Self::HelloAck,
            3 => Self::Gram,
            4 => Self::Complete,
            5 => Self::Error,
            6 => Self::Ack,
            7 => Self::Nak,
            8 => Self::Repair,
            9 => Self::FilesHello,
            10 => Self::FilesAccept,
            11 => Self::IndexRequest,
            12 => Self::Index,
            13 => Self::Plan,
            14 => Self::File,
            15 => Self::Chunks,
            16 => Self::FilesEnd,
            17 => Self::Batch,
            18 => Self::Probe,
            19 => Self::ProbeReply,
            20 => Self::FileDrop,
            21 => Self::Delete,
            22 => Self::Deleted,
            23 => Self::FileDone,
            24 => Self::MountHello,
            25 => Self::MountAccept,
            26 => Self::List,
            27 => Self::RecipeAsk,
            28 => Self::Recipe,
            29 => Self::Fetch,
            30 => Self::Data,
            31 => Self::StreamHello,
            32 => Self::StreamAccept,
            33 => Self::Sgram,
            34 => Self::Applied,
            35 => Self::StreamEnd,
            36 => Self::CatchupBegin,
            37 => Self::CatchupRegions,
            38 => Self::CatchupHashes,
            39 => Self::CatchupBlocks,
            40 => Self::CatchupEnd,
            other => return Err(WireError::UnknownFrameType(other)),
        })
    }

    /// Types whose body may exceed [`MAX_CONTROL_BODY`] (bounded by the
    /// receiver's negotiated limits instead).
    pub fn is_bulk(self) -> bool {
        matches!(
            self,
            Self::Gram
                | Self::Chunks
                | Self::Repair
                | Self::Batch
                | Self::Data
                | Self::Sgram
                | Self::CatchupBlocks
        )
    }

    /// Upper-case name as used in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hello => "HELLO",
            Self::HelloAck => "HELLO_ACK",
            Self::Gram => "GRAM",
            Self::Complete => "COMPLETE",
            Self::Error => "ERROR",
            Self::Ack => "ACK",
            Self::Nak => "NAK",
            Self::Repair => "REPAIR",
            Self::FilesHello => "FILES_HELLO",
            Self::FilesAccept => "FILES_ACCEPT",
            Self::IndexRequest => "INDEX_REQUEST",
            Self::Index => "INDEX",
            Self::Plan => "PLAN",
            Self::File => "FILE",
            Self::Chunks => "CHUNKS",
            Self::FilesEnd => "FILES_END",
            Self::Batch => "BATCH",
            Self::Probe => "PROBE",
            Self::ProbeReply => "PROBE_REPLY",
            Self::FileDrop => "FILE_DROP",
            Self::Delete => "DELETE",
            Self::Deleted => "DELETED",
            Self::FileDone => "FILE_DONE",
            Self::MountHello => "MOUNT_HELLO",
            Self::MountAccept => "MOUNT_ACCEPT",
            Self::List => "LIST",
            Self::RecipeAsk => "RECIPE_ASK",
            Self::Recipe => "RECIPE",
            Self::Fetch => "FETCH",
            Self::Data => "DATA",
            Self::StreamHello => "STREAM_HELLO",
            Self::StreamAccept => "STREAM_ACCEPT",
            Self::Sgram => "SGRAM",
            Self::Applied => "APPLIED",
            Self::StreamEnd => "STREAM_END",
            Self::CatchupBegin => "CATCHUP_BEGIN",
            Self::CatchupRegions => "CATCHUP_REGIONS",
            Self::CatchupHashes => "CATCHUP_HASHES",
            Self::CatchupBlocks => "CATCHUP_BLOCKS",
            Self::CatchupEnd => "CATCHUP_END",
        }
    }
}

/// Flag bit on COMPLETE: the body is the receiver's report, not the sender's summary.
pub const FLAG_COMPLETE_REPORT: u16 = 0x0001;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Frame type.
    pub frame_type: FrameType,
    /// Type-specific flags.
    pub flags: u16,
    /// Body length in bytes (not counting this header).
    pub length: u32,
}

impl FrameHeader {
    /// Checks and decodes the first 16 bytes of `buf`. This is the only door
    /// for untrusted frame bytes: magic, version, CRC and type are checked;
    /// the body length is checked against the control-frame cap for every
    /// type but the bulk ones (GRAM, CHUNKS, REPAIR), whose limits the
    /// receiver applies.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let hdr = Reader::<FRAME_HEADER_LEN>::new(buf)?;
        if hdr.bytes(field::MAGIC) != MAGIC {
            return Err(WireError::BadMagic);
        }
        if crc32c::crc32c(hdr.before(field::HDR_CRC)) != hdr.u32(field::HDR_CRC) {
            return Err(WireError::BadHeaderCrc);
        }
        let version = hdr.u8(field::VERSION);
        if version != VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        let frame_type = FrameType::from_u8(hdr.u8(field::TYPE))?;
        let flags = hdr.u16(field::FLAGS);
        let length = hdr.u32(field::LENGTH);
        if !frame_type.is_bulk() && length > MAX_CONTROL_BODY {
            return Err(WireError::TooLarge);
        }
        let allowed_flags = match frame_type {
            FrameType::Complete => FLAG_COMPLETE_REPORT,
            FrameType::Index
            | FrameType::Nak
            | FrameType::Repair
            | FrameType::Probe
            | FrameType::ProbeReply
            | FrameType::Deleted => crate::files::FLAG_LAST,
            FrameType::FilesEnd => crate::files::FLAG_FILES_REPORT,
            FrameType::List | FrameType::Recipe | FrameType::Data => crate::mount::FLAG_LAST,
            FrameType::StreamEnd => crate::stream::FLAG_KEEPALIVE,
            FrameType::Applied => crate::stream::FLAG_FINAL,
            FrameType::CatchupRegions | FrameType::CatchupHashes | FrameType::CatchupBlocks => {
                crate::catchup::FLAG_LAST
            }
            _ => 0,
        };
        if flags & !allowed_flags != 0 {
            return Err(WireError::BadFlags);
        }
        Ok(Self {
            frame_type,
            flags,
            length,
        })
    }

    /// Encodes into a 16-byte array (CRC included).
    pub fn emit(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut w = Writer::<FRAME_HEADER_LEN>::new();
        w.put(field::MAGIC, &MAGIC)
            .u8(field::VERSION, VERSION)
            .u8(field::TYPE, self.frame_type as u8)
            .u16(field::FLAGS, self.flags)
            .u32(field::LENGTH, self.length);
        let crc = crc32c::crc32c(w.before(field::HDR_CRC));
        w.u32(field::HDR_CRC, crc);
        w.finish()
    }
}

/// A whole frame held in one buffer: the checked header and its body.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The header.
    pub header: FrameHeader,
    /// Exactly `header.length` bytes.
    pub body: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Parses one frame from the front of `buf`; returns it and the bytes consumed.
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), WireError> {
        let header = FrameHeader::parse(buf)?;
        let end = FRAME_HEADER_LEN
            .checked_add(header.length as usize)
            .ok_or(WireError::TooLarge)?;
        let body = buf.get(FRAME_HEADER_LEN..end).ok_or(WireError::Truncated)?;
        Ok((Self { header, body }, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hdr(t: FrameType, flags: u16, length: u32) -> [u8; 16] {
        FrameHeader {
            frame_type: t,
            flags,
            length,
        }
        .emit()
    }

    #[test]
    fn roundtrip_all_types() {
        for t in 1..=20u8 {
            let ft = FrameType::from_u8(t).unwrap();
            let flags = if ft == FrameType::Complete {
                FLAG_COMPLETE_REPORT
            } else {
                0
            };
            let bytes = hdr(ft, flags, 40);
            let parsed = FrameHeader::parse(&bytes).unwrap();
            assert_eq!(
                parsed,
                FrameHeader {
                    frame_type: ft,
                    flags,
                    length: 40
                }
            );
            assert_eq!(parsed.emit(), bytes);
        }
    }

    #[test]
    fn rejects_wrong_magic_crc_version_type() {
        let good = hdr(FrameType::Gram, 0, 100);
        assert_eq!(FrameHeader::parse(&good[..15]), Err(WireError::Truncated));

        let mut bad = good;
        bad[0] = b'X';
        assert_eq!(FrameHeader::parse(&bad), Err(WireError::BadMagic));

        let mut bad = good;
        bad[9] ^= 1;
        assert_eq!(FrameHeader::parse(&bad), Err(WireError::BadHeaderCrc));

        let mut bad = good;
        bad[4] = 9;
        let crc = crc32c::crc32c(&bad[0..12]);
        bad[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(FrameHeader::parse(&bad), Err(WireError::UnsupportedVersion(9)));

        let mut bad = good;
        bad[5] = 0;
        let crc = crc32c::crc32c(&bad[0..12]);
        bad[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(FrameHeader::parse(&bad), Err(WireError::UnknownFrameType(0)));
    }

    #[test]
    fn rejects_oversized_control_and_bad_flags() {
        let big = hdr(FrameType::Hello, 0, MAX_CONTROL_BODY + 1);
        assert_eq!(FrameHeader::parse(&big), Err(WireError::TooLarge));
        let big_gram = hdr(FrameType::Gram, 0, u32::MAX);
        assert!(FrameHeader::parse(&big_gram).is_ok());
        let flags = hdr(FrameType::Gram, 1, 10);
        assert_eq!(FrameHeader::parse(&flags), Err(WireError::BadFlags));
    }

    #[test]
    fn frame_needs_whole_body() {
        let mut buf = hdr(FrameType::Error, 0, 4).to_vec();
        buf.extend_from_slice(&[1, 2, 3]);
        assert_eq!(Frame::parse(&buf).map(|_| ()), Err(WireError::Truncated));
        buf.push(4);
        let (f, used) = Frame::parse(&buf).unwrap();
        assert_eq!(used, 20);
        assert_eq!(f.body, &[1, 2, 3, 4]);
    }

    proptest! {
        /// Every header the parser accepts comes back from `emit` unchanged:
        /// any type, any length a non-bulk type may carry, the flags it allows.
        #[test]
        fn header_parse_emit(t in 1u8..=19, length: u32, flag: bool) {
            let frame_type = FrameType::from_u8(t).unwrap();
            let length = if frame_type.is_bulk() { length } else { length % (MAX_CONTROL_BODY + 1) };
            let bytes = hdr(frame_type, 0, length);
            let h = FrameHeader::parse(&bytes).unwrap();
            prop_assert_eq!(h, FrameHeader { frame_type, flags: 0, length });
            prop_assert_eq!(h.emit(), bytes);
            // A header with its only defined flag set, where the type has one.
            let with_flag = hdr(frame_type, u16::from(flag), length);
            if let Ok(h) = FrameHeader::parse(&with_flag) {
                prop_assert_eq!(h.emit(), with_flag);
            }
        }
    }
}
