//! COMPLETE and ERROR bodies.
//!
//! COMPLETE travels twice at the end of a session: the sender's summary
//! (what it sent, its end-to-end digest), then the receiver's report (flag
//! `REPORT`): the receiver-side, authoritative statistics that the sender
//! prints.

use crate::{rd_u16, rd_u32, rd_u64, WireError};

/// Size of a sender summary body.
pub const SENDER_SUMMARY_LEN: usize = 48;
/// Size of a receiver report body.
pub const REPORT_LEN: usize = 160;
/// Longest ERROR message accepted.
pub const MAX_ERROR_MSG: usize = 4096;
/// `first_mismatch_seq` when no gram mismatched.
pub const NO_MISMATCH: u64 = u64::MAX;

/// The sender's end-of-session summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderSummary {
    /// Grams sent.
    pub grams: u64,
    /// Descriptors sent.
    pub descriptors: u64,
    /// Sum of descriptor lengths sent.
    pub effective_bytes: u64,
    /// Chain of the per-gram digests (see `docs/wire.md`).
    pub e2e_digest: u64,
    /// Bytes the sender wrote to the transport before this frame.
    pub wire_bytes_sent: u64,
    /// Payload slab bytes sent.
    pub payload_bytes: u64,
}

impl SenderSummary {
    /// Decodes a sender summary body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != SENDER_SUMMARY_LEN {
            return Err(if body.len() < SENDER_SUMMARY_LEN {
                WireError::Truncated
            } else {
                WireError::LengthMismatch
            });
        }
        Ok(Self {
            grams: rd_u64(body, 0),
            descriptors: rd_u64(body, 8),
            effective_bytes: rd_u64(body, 16),
            e2e_digest: rd_u64(body, 24),
            wire_bytes_sent: rd_u64(body, 32),
            payload_bytes: rd_u64(body, 40),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; SENDER_SUMMARY_LEN] {
        let mut b = [0u8; SENDER_SUMMARY_LEN];
        let fields = [
            self.grams,
            self.descriptors,
            self.effective_bytes,
            self.e2e_digest,
            self.wire_bytes_sent,
            self.payload_bytes,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// The receiver's authoritative statistics for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// Bytes the receiver executed over (sum of descriptor lengths).
    pub effective_bytes: u64,
    /// Bytes that crossed the transport in this session, both directions, all frames included.
    pub wire_bytes: u64,
    /// Grams executed.
    pub grams: u64,
    /// Descriptors executed.
    pub descriptors: u64,
    /// Payload slab bytes received.
    pub payload_bytes: u64,
    /// Steady-state time: first frame after the handshake → sender COMPLETE processed.
    pub elapsed_ns: u64,
    /// Receiver thread user CPU time in that window.
    pub user_us: u64,
    /// Receiver thread system CPU time in that window.
    pub sys_us: u64,
    /// Receiver process peak RSS.
    pub max_rss_bytes: u64,
    /// Receiver thread voluntary context switches in that window.
    pub nvcsw: u64,
    /// Receiver thread involuntary context switches in that window.
    pub nivcsw: u64,
    /// Grams whose digest did not match.
    pub mismatched_grams: u64,
    /// Sequence number of the first mismatching gram, or [`NO_MISMATCH`].
    pub first_mismatch_seq: u64,
    /// The receiver's chain of per-gram digests.
    pub e2e_digest: u64,
    /// Page size backing the receiver's blob.
    pub page_size: u64,
    /// Receiver blob setup: mapping.
    pub setup_map_ns: u64,
    /// Receiver blob setup: prefault.
    pub setup_prefault_ns: u64,
    /// Receiver blob setup: fill.
    pub setup_fill_ns: u64,
    /// Receiver blob setup: fingerprint.
    pub setup_fingerprint_ns: u64,
    /// Mode number.
    pub mode: u8,
    /// Encoding number.
    pub encoding: u8,
    /// Integrity algorithm number.
    pub integrity: u8,
    /// 1 when every gram and the end-to-end check matched, else 0.
    pub integrity_ok: u8,
    /// Receiver blob backing code.
    pub backing: u8,
}

impl Report {
    /// Decodes a report body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != REPORT_LEN {
            return Err(if body.len() < REPORT_LEN {
                WireError::Truncated
            } else {
                WireError::LengthMismatch
            });
        }
        if body[157..160] != [0, 0, 0] {
            return Err(WireError::ReservedNonZero);
        }
        let u = |i: usize| rd_u64(body, i * 8);
        Ok(Self {
            effective_bytes: u(0),
            wire_bytes: u(1),
            grams: u(2),
            descriptors: u(3),
            payload_bytes: u(4),
            elapsed_ns: u(5),
            user_us: u(6),
            sys_us: u(7),
            max_rss_bytes: u(8),
            nvcsw: u(9),
            nivcsw: u(10),
            mismatched_grams: u(11),
            first_mismatch_seq: u(12),
            e2e_digest: u(13),
            page_size: u(14),
            setup_map_ns: u(15),
            setup_prefault_ns: u(16),
            setup_fill_ns: u(17),
            setup_fingerprint_ns: u(18),
            mode: body[152],
            encoding: body[153],
            integrity: body[154],
            integrity_ok: body[155],
            backing: body[156],
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        let fields = [
            self.effective_bytes,
            self.wire_bytes,
            self.grams,
            self.descriptors,
            self.payload_bytes,
            self.elapsed_ns,
            self.user_us,
            self.sys_us,
            self.max_rss_bytes,
            self.nvcsw,
            self.nivcsw,
            self.mismatched_grams,
            self.first_mismatch_seq,
            self.e2e_digest,
            self.page_size,
            self.setup_map_ns,
            self.setup_prefault_ns,
            self.setup_fill_ns,
            self.setup_fingerprint_ns,
        ];
        for (i, v) in fields.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[152] = self.mode;
        b[153] = self.encoding;
        b[154] = self.integrity;
        b[155] = self.integrity_ok;
        b[156] = self.backing;
        b
    }
}

/// ERROR codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// Protocol version not spoken.
    Version = 1,
    /// The peers' blobs differ (size or fingerprint).
    BlobMismatch = 2,
    /// A frame failed to decode.
    BadFrame = 3,
    /// A descriptor points outside the receiver's blob.
    OutOfBounds = 4,
    /// A count or size exceeds the receiver's limits.
    Limit = 5,
    /// Mode, encoding or integrity algorithm not supported or not as negotiated.
    Unsupported = 6,
    /// A frame arrived that the session state does not allow.
    Protocol = 7,
    /// Authentication required or failed.
    Auth = 8,
    /// The receiver failed internally.
    Internal = 9,
    /// The receiver is at its connection limit.
    Busy = 10,
}

impl ErrorCode {
    /// Parses a code; unknown codes are kept as `None` by the caller's choice.
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Version,
            2 => Self::BlobMismatch,
            3 => Self::BadFrame,
            4 => Self::OutOfBounds,
            5 => Self::Limit,
            6 => Self::Unsupported,
            7 => Self::Protocol,
            8 => Self::Auth,
            9 => Self::Internal,
            10 => Self::Busy,
            _ => return None,
        })
    }

    /// Upper-case name for logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Version => "VERSION",
            Self::BlobMismatch => "BLOB_MISMATCH",
            Self::BadFrame => "BAD_FRAME",
            Self::OutOfBounds => "OUT_OF_BOUNDS",
            Self::Limit => "LIMIT",
            Self::Unsupported => "UNSUPPORTED",
            Self::Protocol => "PROTOCOL",
            Self::Auth => "AUTH",
            Self::Internal => "INTERNAL",
            Self::Busy => "BUSY",
        }
    }
}

/// An ERROR body: code and a human-readable UTF-8 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorFrame<'a> {
    /// Raw code (see [`ErrorCode`]).
    pub code: u16,
    /// Message.
    pub message: &'a str,
}

impl<'a> ErrorFrame<'a> {
    /// Decodes an ERROR body.
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let b = body.get(..8).ok_or(WireError::Truncated)?;
        if rd_u16(b, 2) != 0 {
            return Err(WireError::ReservedNonZero);
        }
        let len = rd_u32(b, 4) as usize;
        if len > MAX_ERROR_MSG {
            return Err(WireError::TooLarge);
        }
        if body.len() != 8 + len {
            return Err(WireError::LengthMismatch);
        }
        let message = core::str::from_utf8(&body[8..]).map_err(|_| WireError::BadUtf8)?;
        Ok(Self {
            code: rd_u16(b, 0),
            message,
        })
    }

    /// Appends the encoded body to `out`; the message is cut at
    /// [`MAX_ERROR_MSG`] bytes on a character boundary.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut end = self.message.len().min(MAX_ERROR_MSG);
        while !self.message.is_char_boundary(end) {
            end -= 1;
        }
        out.extend_from_slice(&self.code.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(end as u32).to_le_bytes());
        out.extend_from_slice(&self.message.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_report_roundtrip() {
        let s = SenderSummary {
            grams: 1,
            descriptors: 2,
            effective_bytes: 3,
            e2e_digest: 4,
            wire_bytes_sent: 5,
            payload_bytes: 6,
        };
        assert_eq!(SenderSummary::parse(&s.emit()), Ok(s));
        assert_eq!(SenderSummary::parse(&[0; 47]), Err(WireError::Truncated));

        let r = Report {
            effective_bytes: 10,
            first_mismatch_seq: NO_MISMATCH,
            setup_fingerprint_ns: 99,
            integrity_ok: 1,
            backing: 2,
            ..Report::default()
        };
        let b = r.emit();
        assert_eq!(Report::parse(&b), Ok(r));
        let mut bad = b;
        bad[159] = 1;
        assert_eq!(Report::parse(&bad), Err(WireError::ReservedNonZero));
    }

    #[test]
    fn error_frame_roundtrip_and_limits() {
        let e = ErrorFrame {
            code: ErrorCode::OutOfBounds as u16,
            message: "descriptor 3 of gram 9",
        };
        let mut b = Vec::new();
        e.emit(&mut b);
        assert_eq!(ErrorFrame::parse(&b), Ok(e));
        let mut bad = b.clone();
        bad.push(b'x');
        assert_eq!(ErrorFrame::parse(&bad), Err(WireError::LengthMismatch));
        let mut bad = b;
        let n = bad.len();
        bad[n - 1] = 0xff;
        assert_eq!(ErrorFrame::parse(&bad), Err(WireError::BadUtf8));
        let long = "é".repeat(3000);
        let mut b = Vec::new();
        ErrorFrame {
            code: 1,
            message: &long,
        }
        .emit(&mut b);
        assert!(ErrorFrame::parse(&b).unwrap().message.len() <= MAX_ERROR_MSG);
    }
}
