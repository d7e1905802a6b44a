//! HELLO (sender → receiver) and HELLO_ACK (receiver → sender).
//!
//! Both carry a trailing authentication field (`auth_method`, `auth_len`,
//! then `auth_len` bytes) so that an authentication exchange can be added
//! without a version bump; method 0 ("none") with length 0 is all this
//! version sends. HELLO's flag [`HELLO_CORRECTIONS`] and the flags and
//! sampling interval of HELLO_ACK negotiate the corrections plane
//! (`docs/wire.md` §13). The fixed parts' byte ranges live once, in the
//! private `field` tables.

use crate::desc::Encoding;
use crate::layout::{tiles, Field, Reader, Writer};
use crate::{IntegrityAlg, Mode, WireError};

/// Fixed part of a HELLO body.
pub const HELLO_FIXED_LEN: usize = 96;
/// Fixed part of a HELLO_ACK body.
pub const HELLO_ACK_FIXED_LEN: usize = 48;
/// Largest authentication field either side accepts.
pub const MAX_AUTH_LEN: usize = 1024;
/// HELLO flag: the sender speaks the corrections plane (§13): it answers
/// gram NAKs, reads the report's corrections block, and `sample_interval`
/// is its ask.
pub const HELLO_CORRECTIONS: u16 = 0x0001;
/// HELLO flag: the sender can bring the receiver's blob to its bytes
/// (catch-up, `docs/wire.md` §16) when their fingerprints differ.
pub const HELLO_CATCH_UP: u16 = 0x0002;
/// HELLO_ACK flag: the fingerprints differ and the receiver takes the
/// catch-up (only in answer to [`HELLO_CATCH_UP`]); CATCHUP_BEGIN follows.
pub const ACK_CATCH_UP: u16 = 0x0004;
/// HELLO_ACK flag: the receiver speaks the corrections plane (only in
/// answer to [`HELLO_CORRECTIONS`]); `sample_interval` is the session's.
pub const ACK_CORRECTIONS: u16 = 0x0001;
/// HELLO_ACK flag: the receiver NAKs the grams that do not match (needs
/// [`ACK_CORRECTIONS`]).
pub const ACK_REPAIR: u16 = 0x0002;

/// Byte ranges of the fixed parts (`docs/wire.md` §4.1, §4.2).
mod field {
    use super::{tiles, Field};

    /// HELLO; the `auth` bytes follow.
    pub mod hello {
        use super::{tiles, Field};
        use crate::hello::HELLO_FIXED_LEN as LEN;

        pub const MODE: Field = Field::new(0, 1);
        pub const ENCODING: Field = Field::new(1, 1);
        pub const INTEGRITY: Field = Field::new(2, 1);
        pub const AUTH_METHOD: Field = Field::new(3, 1);
        /// `hello_flags`: [`crate::hello::HELLO_CORRECTIONS`],
        /// [`crate::hello::HELLO_CATCH_UP`].
        pub const FLAGS: Field = Field::new(4, 2);
        pub const AUTH_LEN: Field = Field::new(6, 2);
        pub const MAX_DESC_PER_GRAM: Field = Field::new(8, 4);
        pub const MAX_DESC_LEN: Field = Field::new(12, 4);
        pub const BLOB_LEN: Field = Field::new(16, 8);
        pub const REGION_SIZE: Field = Field::new(24, 4);
        pub const SAMPLE_INTERVAL: Field = Field::new(28, 2);
        pub const RESERVED_30: Field = Field::new(30, 2);
        pub const FINGERPRINT: Field = Field::new(32, 32);
        pub const SESSION_NONCE: Field = Field::new(64, 8);
        pub const PLANNED_BYTES: Field = Field::new(72, 8);
        pub const PLANNED_GRAMS: Field = Field::new(80, 8);
        pub const RESERVED_88: Field = Field::new(88, 8);

        const _: () = assert!(tiles(
            &[
                MODE,
                ENCODING,
                INTEGRITY,
                AUTH_METHOD,
                FLAGS,
                AUTH_LEN,
                MAX_DESC_PER_GRAM,
                MAX_DESC_LEN,
                BLOB_LEN,
                REGION_SIZE,
                SAMPLE_INTERVAL,
                RESERVED_30,
                FINGERPRINT,
                SESSION_NONCE,
                PLANNED_BYTES,
                PLANNED_GRAMS,
                RESERVED_88,
            ],
            LEN
        ));
    }

    /// HELLO_ACK; the `auth` bytes follow.
    pub mod ack {
        use super::{tiles, Field};
        use crate::hello::HELLO_ACK_FIXED_LEN as LEN;

        pub const MAX_GRAM_BODY: Field = Field::new(0, 4);
        pub const MAX_DESC_COUNT: Field = Field::new(4, 4);
        pub const MAX_TABLE_LEN: Field = Field::new(8, 4);
        pub const MAX_PAYLOAD_LEN: Field = Field::new(12, 4);
        pub const BLOB_LEN: Field = Field::new(16, 8);
        pub const PAGE_SIZE: Field = Field::new(24, 8);
        pub const BACKING: Field = Field::new(32, 1);
        pub const AUTH_METHOD: Field = Field::new(33, 1);
        pub const AUTH_LEN: Field = Field::new(34, 2);
        pub const FLAGS: Field = Field::new(36, 2);
        pub const SAMPLE_INTERVAL: Field = Field::new(38, 2);
        pub const SESSION_NONCE: Field = Field::new(40, 8);

        const _: () = assert!(tiles(
            &[
                MAX_GRAM_BODY,
                MAX_DESC_COUNT,
                MAX_TABLE_LEN,
                MAX_PAYLOAD_LEN,
                BLOB_LEN,
                PAGE_SIZE,
                BACKING,
                AUTH_METHOD,
                AUTH_LEN,
                FLAGS,
                SAMPLE_INTERVAL,
                SESSION_NONCE,
            ],
            LEN
        ));
    }
}

/// The sender's opening frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<'a> {
    /// Transfer mode.
    pub mode: Mode,
    /// Descriptor encoding the grams will use.
    pub encoding: Encoding,
    /// Integrity algorithm of the gram digests.
    pub integrity: IntegrityAlg,
    /// Authentication method (0 = none).
    pub auth_method: u8,
    /// `hello_flags`: [`HELLO_CORRECTIONS`], [`HELLO_CATCH_UP`].
    pub flags: u16,
    /// With [`HELLO_CORRECTIONS`]: check one gram in this many, as the
    /// sender asks (0 or 1: every gram). 0 without the flag.
    pub sample_interval: u16,
    /// Most descriptors the sender puts in one gram.
    pub max_desc_per_gram: u32,
    /// Longest descriptor the sender emits.
    pub max_desc_len: u32,
    /// Length of the sender's blob.
    pub blob_len: u64,
    /// Fingerprint region size.
    pub region_size: u32,
    /// Fingerprint root of the sender's blob.
    pub fingerprint: [u8; 32],
    /// Random session identifier chosen by the sender.
    pub session_nonce: u64,
    /// Effective bytes the sender plans to send (0 = unknown), for receiver progress.
    pub planned_bytes: u64,
    /// Grams the sender plans to send (0 = unknown).
    pub planned_grams: u64,
    /// Authentication data (empty for method 0).
    pub auth: &'a [u8],
}

impl<'a> Hello<'a> {
    /// Checks and decodes a HELLO body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::hello as f;
        let b = Reader::<HELLO_FIXED_LEN>::new(body)?;
        let flags = b.u16(f::FLAGS);
        let sample_interval = b.u16(f::SAMPLE_INTERVAL);
        // Undefined flag bits, and a sampling interval without the flag
        // that gives it meaning, were reserved before §13 and still are.
        if flags & !(HELLO_CORRECTIONS | HELLO_CATCH_UP) != 0
            || (flags & HELLO_CORRECTIONS == 0 && sample_interval != 0)
            || !b.is_zero(f::RESERVED_30)
            || !b.is_zero(f::RESERVED_88)
        {
            return Err(WireError::ReservedNonZero);
        }
        let auth_len = usize::from(b.u16(f::AUTH_LEN));
        if auth_len > MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != HELLO_FIXED_LEN + auth_len {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            mode: Mode::from_u8(b.u8(f::MODE))?,
            encoding: Encoding::from_u8(b.u8(f::ENCODING))?,
            integrity: IntegrityAlg::from_u8(b.u8(f::INTEGRITY))?,
            auth_method: b.u8(f::AUTH_METHOD),
            flags,
            sample_interval,
            max_desc_per_gram: b.u32(f::MAX_DESC_PER_GRAM),
            max_desc_len: b.u32(f::MAX_DESC_LEN),
            blob_len: b.u64(f::BLOB_LEN),
            region_size: b.u32(f::REGION_SIZE),
            fingerprint: b.array(f::FINGERPRINT),
            session_nonce: b.u64(f::SESSION_NONCE),
            planned_bytes: b.u64(f::PLANNED_BYTES),
            planned_grams: b.u64(f::PLANNED_GRAMS),
            auth: body.get(HELLO_FIXED_LEN..).ok_or(WireError::Truncated)?,
        })
    }

    /// Appends the encoded body to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let auth_len = self.auth.len().min(MAX_AUTH_LEN);
        use field::hello as f;
        let mut w = Writer::<HELLO_FIXED_LEN>::new();
        w.u8(f::MODE, self.mode as u8)
            .u8(f::ENCODING, self.encoding as u8)
            .u8(f::INTEGRITY, self.integrity as u8)
            .u8(f::AUTH_METHOD, self.auth_method)
            .u16(f::FLAGS, self.flags)
            .u16(f::AUTH_LEN, auth_len as u16)
            .u32(f::MAX_DESC_PER_GRAM, self.max_desc_per_gram)
            .u32(f::MAX_DESC_LEN, self.max_desc_len)
            .u64(f::BLOB_LEN, self.blob_len)
            .u32(f::REGION_SIZE, self.region_size)
            .u16(f::SAMPLE_INTERVAL, self.sample_interval)
            .put(f::FINGERPRINT, &self.fingerprint)
            .u64(f::SESSION_NONCE, self.session_nonce)
            .u64(f::PLANNED_BYTES, self.planned_bytes)
            .u64(f::PLANNED_GRAMS, self.planned_grams);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(&self.auth[..auth_len]);
    }
}

/// The receiver's acceptance, with the limits it will enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloAck<'a> {
    /// Largest GRAM body accepted.
    pub max_gram_body: u32,
    /// Most descriptors per gram accepted.
    pub max_desc_count: u32,
    /// Largest descriptor table accepted.
    pub max_table_len: u32,
    /// Largest payload slab accepted.
    pub max_payload_len: u32,
    /// Length of the receiver's blob.
    pub blob_len: u64,
    /// Page size backing the receiver's blob.
    pub page_size: u64,
    /// Receiver blob backing code (0 hugetlbfs, 1 THP, 2 4 KiB pages).
    pub backing: u8,
    /// Authentication method (0 = none).
    pub auth_method: u8,
    /// [`ACK_CORRECTIONS`], [`ACK_REPAIR`] (only in answer to
    /// [`HELLO_CORRECTIONS`]), [`ACK_CATCH_UP`] (to [`HELLO_CATCH_UP`]).
    pub flags: u16,
    /// With [`ACK_CORRECTIONS`]: the session checks grams whose `seq` is a
    /// multiple of this (0 or 1: every gram). 0 without the flag.
    pub sample_interval: u16,
    /// Echo of the sender's session nonce.
    pub session_nonce: u64,
    /// Authentication data (empty for method 0).
    pub auth: &'a [u8],
}

impl<'a> HelloAck<'a> {
    /// Checks and decodes a HELLO_ACK body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        use field::ack as f;
        let b = Reader::<HELLO_ACK_FIXED_LEN>::new(body)?;
        let flags = b.u16(f::FLAGS);
        let sample_interval = b.u16(f::SAMPLE_INTERVAL);
        if flags & !(ACK_CORRECTIONS | ACK_REPAIR | ACK_CATCH_UP) != 0
            || (flags & ACK_CORRECTIONS == 0 && sample_interval != 0)
        {
            return Err(WireError::ReservedNonZero);
        }
        if flags & ACK_REPAIR != 0 && flags & ACK_CORRECTIONS == 0 {
            return Err(WireError::BadFlags);
        }
        let auth_len = usize::from(b.u16(f::AUTH_LEN));
        if auth_len > MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != HELLO_ACK_FIXED_LEN + auth_len {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            max_gram_body: b.u32(f::MAX_GRAM_BODY),
            max_desc_count: b.u32(f::MAX_DESC_COUNT),
            max_table_len: b.u32(f::MAX_TABLE_LEN),
            max_payload_len: b.u32(f::MAX_PAYLOAD_LEN),
            blob_len: b.u64(f::BLOB_LEN),
            page_size: b.u64(f::PAGE_SIZE),
            backing: b.u8(f::BACKING),
            auth_method: b.u8(f::AUTH_METHOD),
            flags,
            sample_interval,
            session_nonce: b.u64(f::SESSION_NONCE),
            auth: body.get(HELLO_ACK_FIXED_LEN..).ok_or(WireError::Truncated)?,
        })
    }

    /// Appends the encoded body to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let auth_len = self.auth.len().min(MAX_AUTH_LEN);
        use field::ack as f;
        let mut w = Writer::<HELLO_ACK_FIXED_LEN>::new();
        w.u32(f::MAX_GRAM_BODY, self.max_gram_body)
            .u32(f::MAX_DESC_COUNT, self.max_desc_count)
            .u32(f::MAX_TABLE_LEN, self.max_table_len)
            .u32(f::MAX_PAYLOAD_LEN, self.max_payload_len)
            .u64(f::BLOB_LEN, self.blob_len)
            .u64(f::PAGE_SIZE, self.page_size)
            .u8(f::BACKING, self.backing)
            .u8(f::AUTH_METHOD, self.auth_method)
            .u16(f::AUTH_LEN, auth_len as u16)
            .u16(f::FLAGS, self.flags)
            .u16(f::SAMPLE_INTERVAL, self.sample_interval)
            .u64(f::SESSION_NONCE, self.session_nonce);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(&self.auth[..auth_len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Hello<'static> {
        Hello {
            mode: Mode::Arith,
            encoding: Encoding::Arithmetic,
            integrity: IntegrityAlg::Fnv1a,
            auth_method: 0,
            flags: 0,
            sample_interval: 0,
            max_desc_per_gram: 1024,
            max_desc_len: 262_144,
            blob_len: 1 << 30,
            region_size: 1 << 20,
            fingerprint: [0xab; 32],
            session_nonce: 42,
            planned_bytes: 1 << 33,
            planned_grams: 100,
            auth: &[],
        }
    }

    #[test]
    fn hello_roundtrip_and_checks() {
        let h = sample();
        let mut body = Vec::new();
        h.emit(&mut body);
        assert_eq!(body.len(), HELLO_FIXED_LEN);
        assert_eq!(Hello::parse(&body), Ok(h));
        assert_eq!(Hello::parse(&body[..95]), Err(WireError::Truncated));
        let mut extra = body.clone();
        extra.push(0);
        assert_eq!(Hello::parse(&extra), Err(WireError::LengthMismatch));
        let mut bad = body.clone();
        bad[0] = 3;
        assert_eq!(Hello::parse(&bad), Err(WireError::UnknownMode(3)));
        let mut bad = body.clone();
        bad[90] = 1;
        assert_eq!(Hello::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = body.clone();
        bad[4] = 4;
        assert_eq!(
            Hello::parse(&bad),
            Err(WireError::ReservedNonZero),
            "undefined flag"
        );
        let mut bad = body;
        bad[28] = 16;
        assert_eq!(
            Hello::parse(&bad),
            Err(WireError::ReservedNonZero),
            "an interval without CORRECTIONS"
        );
    }

    #[test]
    fn hello_with_corrections() {
        let h = Hello {
            flags: HELLO_CORRECTIONS,
            sample_interval: 16,
            ..sample()
        };
        let mut body = Vec::new();
        h.emit(&mut body);
        assert_eq!(&body[4..6], &[1, 0]);
        assert_eq!(&body[28..30], &[16, 0]);
        assert_eq!(Hello::parse(&body), Ok(h));
    }

    #[test]
    fn hello_with_auth() {
        let auth = [1u8, 2, 3];
        let h = Hello {
            auth_method: 7,
            auth: &auth,
            ..sample()
        };
        let mut body = Vec::new();
        h.emit(&mut body);
        assert_eq!(Hello::parse(&body), Ok(h));
    }

    #[test]
    fn ack_roundtrip() {
        let a = HelloAck {
            max_gram_body: 1 << 30,
            max_desc_count: 65_536,
            max_table_len: 1 << 20,
            max_payload_len: 1 << 30,
            blob_len: 1 << 30,
            page_size: 2 << 20,
            backing: 1,
            auth_method: 0,
            flags: 0,
            sample_interval: 0,
            session_nonce: 42,
            auth: &[],
        };
        let mut body = Vec::new();
        a.emit(&mut body);
        assert_eq!(HelloAck::parse(&body), Ok(a));
        let mut bad = body.clone();
        bad[38] = 1;
        assert_eq!(HelloAck::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = body.clone();
        bad[36] = 8;
        assert_eq!(HelloAck::parse(&bad), Err(WireError::ReservedNonZero));
        let mut bad = body;
        bad[36] = ACK_REPAIR as u8;
        assert_eq!(HelloAck::parse(&bad), Err(WireError::BadFlags), "REPAIR alone");
        let granted = HelloAck {
            flags: ACK_CORRECTIONS | ACK_REPAIR,
            sample_interval: 16,
            ..a
        };
        let mut body = Vec::new();
        granted.emit(&mut body);
        assert_eq!(HelloAck::parse(&body), Ok(granted));
    }

    proptest! {
        #[test]
        fn hello_parse_emit(
            mode in 0u8..3,
            arithmetic: bool,
            integrity in 0u8..3,
            auth_method: u8,
            corrections: bool,
            sample_interval: u16,
            limits: (u32, u32, u64, u32),
            fingerprint: [u8; 32],
            plan: (u64, u64, u64),
            auth in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            let h = Hello {
                mode: Mode::from_u8(mode).unwrap(),
                encoding: if arithmetic { Encoding::Arithmetic } else { Encoding::Absolute },
                integrity: IntegrityAlg::from_u8(integrity).unwrap(),
                auth_method,
                flags: if corrections { HELLO_CORRECTIONS } else { 0 },
                sample_interval: if corrections { sample_interval } else { 0 },
                max_desc_per_gram: limits.0,
                max_desc_len: limits.1,
                blob_len: limits.2,
                region_size: limits.3,
                fingerprint,
                session_nonce: plan.0,
                planned_bytes: plan.1,
                planned_grams: plan.2,
                auth: &auth,
            };
            let mut body = Vec::new();
            h.emit(&mut body);
            prop_assert_eq!(body.len(), HELLO_FIXED_LEN + auth.len());
            prop_assert_eq!(Hello::parse(&body), Ok(h));
        }

        #[test]
        fn ack_parse_emit(
            limits: (u32, u32, u32, u32),
            blob_len: u64,
            page_size: u64,
            backing: u8,
            auth_method: u8,
            flags in 0u16..4,
            sample_interval: u16,
            session_nonce: u64,
            auth in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            let a = HelloAck {
                max_gram_body: limits.0,
                max_desc_count: limits.1,
                max_table_len: limits.2,
                max_payload_len: limits.3,
                blob_len,
                page_size,
                backing,
                auth_method,
                // REPAIR needs CORRECTIONS; the interval needs CORRECTIONS.
                flags: if flags & ACK_REPAIR != 0 { flags | ACK_CORRECTIONS } else { flags },
                sample_interval: if flags != 0 { sample_interval } else { 0 },
                session_nonce,
                auth: &auth,
            };
            let mut body = Vec::new();
            a.emit(&mut body);
            prop_assert_eq!(body.len(), HELLO_ACK_FIXED_LEN + auth.len());
            prop_assert_eq!(HelloAck::parse(&body), Ok(a));
        }
    }
}
