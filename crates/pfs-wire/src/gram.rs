//! The GRAM frame body: a fixed 32-byte gram header, the descriptor table,
//! then the optional payload slab.
//!
//! ```text
//! 0     8          12          16            20      21        22      24               32
//! | seq | desc_count | table_len | payload_len | enc | integrity | gflags | integrity_value |
//! ```
//! The header's byte ranges live once, in the private `field` table.

use crate::desc::{DescIter, Encoding};
use crate::layout::{tiles, Field, Reader, Writer};
use crate::{IntegrityAlg, WireError};

/// Size of the gram header.
pub const GRAM_HEADER_LEN: usize = 32;
/// Gram flag: a payload slab follows the table.
pub const GRAM_FLAG_PAYLOAD: u16 = 0x0001;

/// Byte ranges of the gram header (`docs/wire.md` §3.1).
mod field {
    use super::{tiles, Field, GRAM_HEADER_LEN};

    pub const SEQ: Field = Field::new(0, 8);
    pub const DESC_COUNT: Field = Field::new(8, 4);
    pub const TABLE_LEN: Field = Field::new(12, 4);
    pub const PAYLOAD_LEN: Field = Field::new(16, 4);
    pub const ENCODING: Field = Field::new(20, 1);
    pub const INTEGRITY: Field = Field::new(21, 1);
    pub const FLAGS: Field = Field::new(22, 2);
    pub const INTEGRITY_VALUE: Field = Field::new(24, 8);

    const _: () = assert!(tiles(
        &[
            SEQ,
            DESC_COUNT,
            TABLE_LEN,
            PAYLOAD_LEN,
            ENCODING,
            INTEGRITY,
            FLAGS,
            INTEGRITY_VALUE
        ],
        GRAM_HEADER_LEN
    ));
}

/// A decoded gram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GramHeader {
    /// Sequence number, from 0, one per gram in a session.
    pub seq: u64,
    /// Number of descriptors in the table.
    pub desc_count: u32,
    /// Bytes of the descriptor table.
    pub table_len: u32,
    /// Bytes of the payload slab (0 without payload).
    pub payload_len: u32,
    /// Table encoding.
    pub encoding: Encoding,
    /// Integrity algorithm of `integrity_value`.
    pub integrity: IntegrityAlg,
    /// Gram flags (`GRAM_FLAG_PAYLOAD`).
    pub flags: u16,
    /// Digest of the gram's effective bytes: the referenced ranges, concatenated in table order.
    pub integrity_value: u64,
}

impl GramHeader {
    /// Checks and decodes the first 32 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let b = Reader::<GRAM_HEADER_LEN>::new(buf)?;
        let flags = b.u16(field::FLAGS);
        let payload_len = b.u32(field::PAYLOAD_LEN);
        if flags & !GRAM_FLAG_PAYLOAD != 0 {
            return Err(WireError::BadFlags);
        }
        if (flags & GRAM_FLAG_PAYLOAD != 0) != (payload_len != 0) {
            return Err(WireError::BadFlags);
        }
        Ok(Self {
            seq: b.u64(field::SEQ),
            desc_count: b.u32(field::DESC_COUNT),
            table_len: b.u32(field::TABLE_LEN),
            payload_len,
            encoding: Encoding::from_u8(b.u8(field::ENCODING))?,
            integrity: IntegrityAlg::from_u8(b.u8(field::INTEGRITY))?,
            flags,
            integrity_value: b.u64(field::INTEGRITY_VALUE),
        })
    }

    /// Encodes the header.
    pub fn emit(&self) -> [u8; GRAM_HEADER_LEN] {
        let mut w = Writer::<GRAM_HEADER_LEN>::new();
        w.u64(field::SEQ, self.seq)
            .u32(field::DESC_COUNT, self.desc_count)
            .u32(field::TABLE_LEN, self.table_len)
            .u32(field::PAYLOAD_LEN, self.payload_len)
            .u8(field::ENCODING, self.encoding as u8)
            .u8(field::INTEGRITY, self.integrity as u8)
            .u16(field::FLAGS, self.flags)
            .u64(field::INTEGRITY_VALUE, self.integrity_value);
        w.finish()
    }

    /// Frame body length this header implies: header + table + payload.
    pub fn body_len(&self) -> u64 {
        GRAM_HEADER_LEN as u64 + u64::from(self.table_len) + u64::from(self.payload_len)
    }

    /// Checks the header against the enclosing frame's body length.
    pub fn check_body_len(&self, frame_length: u32) -> Result<(), WireError> {
        if self.body_len() != u64::from(frame_length) {
            return Err(WireError::LengthMismatch);
        }
        Ok(())
    }
}

/// A whole gram body held in one buffer: zero-copy view of header, table, payload.
#[derive(Debug, Clone, Copy)]
pub struct Gram<'a> {
    /// The header.
    pub header: GramHeader,
    /// The encoded descriptor table.
    pub table: &'a [u8],
    /// The payload slab (empty without payload).
    pub payload: &'a [u8],
}

impl<'a> Gram<'a> {
    /// Parses a complete GRAM frame body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let header = GramHeader::parse(body)?;
        let len = u32::try_from(body.len()).map_err(|_| WireError::TooLarge)?;
        header.check_body_len(len)?;
        // The lengths agree, so neither split fails; `get` keeps it panic-free anyway.
        let (table, payload) = body
            .get(GRAM_HEADER_LEN..)
            .and_then(|rest| rest.split_at_checked(header.table_len as usize))
            .ok_or(WireError::LengthMismatch)?;
        Ok(Self {
            header,
            table,
            payload,
        })
    }

    /// Lazy descriptor decoder over the table.
    pub fn descriptors(&self) -> DescIter<'a> {
        DescIter::new(self.table, self.header.encoding, self.header.desc_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::{encode_table, Descriptor};
    use proptest::prelude::*;

    #[test]
    fn header_roundtrip_and_flag_checks() {
        let h = GramHeader {
            seq: 7,
            desc_count: 2,
            table_len: 24,
            payload_len: 0,
            encoding: Encoding::Absolute,
            integrity: IntegrityAlg::Xxh3,
            flags: 0,
            integrity_value: 0xdead_beef,
        };
        let b = h.emit();
        assert_eq!(GramHeader::parse(&b), Ok(h));
        let mut bad = b;
        bad[22] = GRAM_FLAG_PAYLOAD as u8; // payload flag without payload bytes
        assert_eq!(GramHeader::parse(&bad), Err(WireError::BadFlags));
        let mut bad = b;
        bad[20] = 7;
        assert_eq!(GramHeader::parse(&bad), Err(WireError::UnknownEncoding(7)));
        let mut bad = b;
        bad[21] = 9;
        assert_eq!(GramHeader::parse(&bad), Err(WireError::UnknownIntegrity(9)));
        assert_eq!(GramHeader::parse(&b[..31]), Err(WireError::Truncated));
    }

    #[test]
    fn gram_view_splits_body() {
        let descs = [
            Descriptor { offset: 0, len: 3 },
            Descriptor { offset: 10, len: 2 },
        ];
        let table = encode_table(Encoding::Absolute, &descs).unwrap();
        let h = GramHeader {
            seq: 1,
            desc_count: 2,
            table_len: table.len() as u32,
            payload_len: 5,
            encoding: Encoding::Absolute,
            integrity: IntegrityAlg::None,
            flags: GRAM_FLAG_PAYLOAD,
            integrity_value: 0,
        };
        let mut body = h.emit().to_vec();
        body.extend_from_slice(&table);
        body.extend_from_slice(b"abcde");
        let g = Gram::parse(&body).unwrap();
        assert_eq!(g.payload, b"abcde");
        assert_eq!(g.descriptors().collect::<Result<Vec<_>, _>>().unwrap(), descs);
        assert_eq!(
            Gram::parse(&body[..body.len() - 1]).map(|_| ()),
            Err(WireError::LengthMismatch)
        );
    }

    proptest! {
        #[test]
        fn header_parse_emit(
            seq: u64,
            desc_count: u32,
            table_len: u32,
            payload_len: u32,
            arithmetic: bool,
            integrity in 0u8..3,
            integrity_value: u64,
        ) {
            let h = GramHeader {
                seq,
                desc_count,
                table_len,
                payload_len,
                encoding: if arithmetic { Encoding::Arithmetic } else { Encoding::Absolute },
                integrity: IntegrityAlg::from_u8(integrity).unwrap(),
                flags: if payload_len == 0 { 0 } else { GRAM_FLAG_PAYLOAD },
                integrity_value,
            };
            prop_assert_eq!(GramHeader::parse(&h.emit()), Ok(h));
        }
    }
}
