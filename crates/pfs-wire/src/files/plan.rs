//! PLAN and the ACK that accepts it (`docs/wire.md` §10.5): what the sender
//! is about to send, and the store space the receiver reserved for it.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Body of PLAN.
pub const PLAN_LEN: usize = 48;
/// Body of the ACK that accepts a PLAN.
pub const PLAN_ACK_LEN: usize = 16;

/// Byte ranges of PLAN and its ACK.
mod field {
    use super::{tiles, Field};

    /// PLAN: six u64, the last reserved.
    pub mod plan {
        use super::{tiles, Field};
        use crate::files::plan::PLAN_LEN as LEN;

        pub const ENTRIES: Field = Field::new(0, 8);
        pub const FILES: Field = Field::new(8, 8);
        pub const TOTAL_BYTES: Field = Field::new(16, 8);
        pub const LITERAL_BYTES: Field = Field::new(24, 8);
        pub const CHUNKS: Field = Field::new(32, 8);
        pub const PENDING_BYTES: Field = Field::new(40, 8);

        const _: () = assert!(tiles(
            &[ENTRIES, FILES, TOTAL_BYTES, LITERAL_BYTES, CHUNKS, PENDING_BYTES],
            LEN
        ));
    }

    /// The ACK accepting a PLAN.
    pub mod ack {
        use super::{tiles, Field};
        use crate::files::plan::PLAN_ACK_LEN as LEN;

        pub const RESERVED_BYTES: Field = Field::new(0, 8);
        pub const FREE: Field = Field::new(8, 8);

        const _: () = assert!(tiles(&[RESERVED_BYTES, FREE], LEN));
    }
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
    /// Chunks over the files chunked so far.
    pub chunks: u64,
    /// Bytes of the files not chunked yet (streamed or chunked while the
    /// stream goes out, §10.13), not in `literal_bytes`: how many of them
    /// the receiver lacks is not known yet.
    pub pending_bytes: u64,
}

impl Plan {
    /// Decodes a PLAN body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::plan as f;
        if body.len() != PLAN_LEN {
            return Err(WireError::LengthMismatch);
        }
        let b = Reader::<PLAN_LEN>::new(body)?;
        Ok(Self {
            entries: b.u64(f::ENTRIES),
            files: b.u64(f::FILES),
            total_bytes: b.u64(f::TOTAL_BYTES),
            literal_bytes: b.u64(f::LITERAL_BYTES),
            chunks: b.u64(f::CHUNKS),
            pending_bytes: b.u64(f::PENDING_BYTES),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; PLAN_LEN] {
        use field::plan as f;
        let mut w = Writer::<PLAN_LEN>::new();
        w.u64(f::ENTRIES, self.entries)
            .u64(f::FILES, self.files)
            .u64(f::TOTAL_BYTES, self.total_bytes)
            .u64(f::LITERAL_BYTES, self.literal_bytes)
            .u64(f::CHUNKS, self.chunks)
            .u64(f::PENDING_BYTES, self.pending_bytes);
        w.finish()
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
        use field::ack as f;
        if body.len() != PLAN_ACK_LEN {
            return Err(WireError::LengthMismatch);
        }
        let b = Reader::<PLAN_ACK_LEN>::new(body)?;
        Ok(Self {
            reserved: b.u64(f::RESERVED_BYTES),
            free: b.u64(f::FREE),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; PLAN_ACK_LEN] {
        use field::ack as f;
        let mut w = Writer::<PLAN_ACK_LEN>::new();
        w.u64(f::RESERVED_BYTES, self.reserved).u64(f::FREE, self.free);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plan_ack_roundtrip() {
        let p = Plan {
            entries: 5,
            files: 3,
            total_bytes: 100,
            literal_bytes: 50,
            chunks: 9,
            pending_bytes: 0,
        };
        assert_eq!(Plan::parse(&p.emit()), Ok(p));
        let k = PlanAck { reserved: 5, free: 6 };
        assert_eq!(PlanAck::parse(&k.emit()), Ok(k));
    }

    proptest! {
        #[test]
        fn plan_parse_emit(v: [u64; 6]) {
            let p = Plan { entries: v[0], files: v[1], total_bytes: v[2], literal_bytes: v[3], chunks: v[4], pending_bytes: v[5] };
            prop_assert_eq!(Plan::parse(&p.emit()), Ok(p));
        }

        #[test]
        fn plan_ack_parse_emit(reserved: u64, free: u64) {
            let k = PlanAck { reserved, free };
            prop_assert_eq!(PlanAck::parse(&k.emit()), Ok(k));
        }
    }
}
