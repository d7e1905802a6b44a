//! HELLO (sender → receiver) and HELLO_ACK (receiver → sender).
//!
//! Both carry a trailing authentication field (`auth_method`, `auth_len`,
//! then `auth_len` bytes) so that an authentication exchange can be added
//! without a version bump; method 0 ("none") with length 0 is all this
//! version sends.

use crate::desc::Encoding;
use crate::{rd_u16, rd_u32, rd_u64, IntegrityAlg, Mode, WireError};

/// Fixed part of a HELLO body.
pub const HELLO_FIXED_LEN: usize = 96;
/// Fixed part of a HELLO_ACK body.
pub const HELLO_ACK_FIXED_LEN: usize = 48;
/// Largest authentication field either side accepts.
pub const MAX_AUTH_LEN: usize = 1024;

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
        let b = body.get(..HELLO_FIXED_LEN).ok_or(WireError::Truncated)?;
        let flags = rd_u16(b, 4);
        if flags != 0 || rd_u32(b, 28) != 0 || rd_u64(b, 88) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let auth_len = rd_u16(b, 6) as usize;
        if auth_len > MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != HELLO_FIXED_LEN + auth_len {
            return Err(WireError::LengthMismatch);
        }
        let mut fingerprint = [0u8; 32];
        fingerprint.copy_from_slice(&b[32..64]);
        Ok(Self {
            mode: Mode::from_u8(b[0])?,
            encoding: Encoding::from_u8(b[1])?,
            integrity: IntegrityAlg::from_u8(b[2])?,
            auth_method: b[3],
            max_desc_per_gram: rd_u32(b, 8),
            max_desc_len: rd_u32(b, 12),
            blob_len: rd_u64(b, 16),
            region_size: rd_u32(b, 24),
            fingerprint,
            session_nonce: rd_u64(b, 64),
            planned_bytes: rd_u64(b, 72),
            planned_grams: rd_u64(b, 80),
            auth: &body[HELLO_FIXED_LEN..],
        })
    }

    /// Appends the encoded body to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let auth_len = self.auth.len().min(MAX_AUTH_LEN);
        let mut b = [0u8; HELLO_FIXED_LEN];
        b[0] = self.mode as u8;
        b[1] = self.encoding as u8;
        b[2] = self.integrity as u8;
        b[3] = self.auth_method;
        b[6..8].copy_from_slice(&(auth_len as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.max_desc_per_gram.to_le_bytes());
        b[12..16].copy_from_slice(&self.max_desc_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.blob_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.region_size.to_le_bytes());
        b[32..64].copy_from_slice(&self.fingerprint);
        b[64..72].copy_from_slice(&self.session_nonce.to_le_bytes());
        b[72..80].copy_from_slice(&self.planned_bytes.to_le_bytes());
        b[80..88].copy_from_slice(&self.planned_grams.to_le_bytes());
        out.extend_from_slice(&b);
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
    /// Echo of the sender's session nonce.
    pub session_nonce: u64,
    /// Authentication data (empty for method 0).
    pub auth: &'a [u8],
}

impl<'a> HelloAck<'a> {
    /// Checks and decodes a HELLO_ACK body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = body.get(..HELLO_ACK_FIXED_LEN).ok_or(WireError::Truncated)?;
        if rd_u32(b, 36) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let auth_len = rd_u16(b, 34) as usize;
        if auth_len > MAX_AUTH_LEN {
            return Err(WireError::TooLarge);
        }
        if body.len() != HELLO_ACK_FIXED_LEN + auth_len {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self {
            max_gram_body: rd_u32(b, 0),
            max_desc_count: rd_u32(b, 4),
            max_table_len: rd_u32(b, 8),
            max_payload_len: rd_u32(b, 12),
            blob_len: rd_u64(b, 16),
            page_size: rd_u64(b, 24),
            backing: b[32],
            auth_method: b[33],
            session_nonce: rd_u64(b, 40),
            auth: &body[HELLO_ACK_FIXED_LEN..],
        })
    }

    /// Appends the encoded body to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let auth_len = self.auth.len().min(MAX_AUTH_LEN);
        let mut b = [0u8; HELLO_ACK_FIXED_LEN];
        b[0..4].copy_from_slice(&self.max_gram_body.to_le_bytes());
        b[4..8].copy_from_slice(&self.max_desc_count.to_le_bytes());
        b[8..12].copy_from_slice(&self.max_table_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.max_payload_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.blob_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.page_size.to_le_bytes());
        b[32] = self.backing;
        b[33] = self.auth_method;
        b[34..36].copy_from_slice(&(auth_len as u16).to_le_bytes());
        b[40..48].copy_from_slice(&self.session_nonce.to_le_bytes());
        out.extend_from_slice(&b);
        out.extend_from_slice(&self.auth[..auth_len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Hello<'static> {
        Hello {
            mode: Mode::Arith,
            encoding: Encoding::Arithmetic,
            integrity: IntegrityAlg::Fnv1a,
            auth_method: 0,
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
        let mut bad = body;
        bad[90] = 1;
        assert_eq!(Hello::parse(&bad), Err(WireError::ReservedNonZero));
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
            session_nonce: 42,
            auth: &[],
        };
        let mut body = Vec::new();
        a.emit(&mut body);
        assert_eq!(HelloAck::parse(&body), Ok(a));
        let mut bad = body;
        bad[37] = 1;
        assert_eq!(HelloAck::parse(&bad), Err(WireError::ReservedNonZero));
    }
}
