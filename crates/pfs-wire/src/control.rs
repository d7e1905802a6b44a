//! COMPLETE and ERROR bodies.
//!
//! COMPLETE travels twice at the end of a session: the sender's summary
//! (what it sent, its end-to-end digest), then the receiver's report (flag
//! `REPORT`): the receiver-side, authoritative statistics that the sender
//! prints.
//!
//! Each fixed layout (summary, report, ERROR head) has its byte ranges once,
//! in the private `field` tables.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Size of a sender summary body.
pub const SENDER_SUMMARY_LEN: usize = 48;
/// Size of a receiver report body.
pub const REPORT_LEN: usize = 160;
/// Longest ERROR message accepted.
pub const MAX_ERROR_MSG: usize = 4096;
/// `first_mismatch_seq` when no gram mismatched.
pub const NO_MISMATCH: u64 = u64::MAX;

/// Byte ranges of the COMPLETE and ERROR bodies (`docs/wire.md` §4.3–§4.5).
mod field {
    use super::{tiles, Field};

    /// COMPLETE, sender summary: six u64.
    pub mod summary {
        use super::{tiles, Field};
        use crate::control::SENDER_SUMMARY_LEN as LEN;

        pub const GRAMS: Field = Field::new(0, 8);
        pub const DESCRIPTORS: Field = Field::new(8, 8);
        pub const EFFECTIVE_BYTES: Field = Field::new(16, 8);
        pub const E2E_DIGEST: Field = Field::new(24, 8);
        pub const WIRE_BYTES_SENT: Field = Field::new(32, 8);
        pub const PAYLOAD_BYTES: Field = Field::new(40, 8);

        const _: () = assert!(tiles(
            &[
                GRAMS,
                DESCRIPTORS,
                EFFECTIVE_BYTES,
                E2E_DIGEST,
                WIRE_BYTES_SENT,
                PAYLOAD_BYTES
            ],
            LEN
        ));
    }

    /// COMPLETE with REPORT: nineteen u64, five u8, three reserved bytes.
    pub mod report {
        use super::{tiles, Field};
        use crate::control::REPORT_LEN as LEN;

        pub const EFFECTIVE_BYTES: Field = Field::new(0, 8);
        pub const WIRE_BYTES: Field = Field::new(8, 8);
        pub const GRAMS: Field = Field::new(16, 8);
        pub const DESCRIPTORS: Field = Field::new(24, 8);
        pub const PAYLOAD_BYTES: Field = Field::new(32, 8);
        pub const ELAPSED_NS: Field = Field::new(40, 8);
        pub const USER_US: Field = Field::new(48, 8);
        pub const SYS_US: Field = Field::new(56, 8);
        pub const MAX_RSS_BYTES: Field = Field::new(64, 8);
        pub const NVCSW: Field = Field::new(72, 8);
        pub const NIVCSW: Field = Field::new(80, 8);
        pub const MISMATCHED_GRAMS: Field = Field::new(88, 8);
        pub const FIRST_MISMATCH_SEQ: Field = Field::new(96, 8);
        pub const E2E_DIGEST: Field = Field::new(104, 8);
        pub const PAGE_SIZE: Field = Field::new(112, 8);
        pub const SETUP_MAP_NS: Field = Field::new(120, 8);
        pub const SETUP_PREFAULT_NS: Field = Field::new(128, 8);
        pub const SETUP_FILL_NS: Field = Field::new(136, 8);
        pub const SETUP_FINGERPRINT_NS: Field = Field::new(144, 8);
        pub const MODE: Field = Field::new(152, 1);
        pub const ENCODING: Field = Field::new(153, 1);
        pub const INTEGRITY: Field = Field::new(154, 1);
        pub const INTEGRITY_OK: Field = Field::new(155, 1);
        pub const BACKING: Field = Field::new(156, 1);
        pub const RESERVED: Field = Field::new(157, 3);

        const _: () = assert!(tiles(
            &[
                EFFECTIVE_BYTES,
                WIRE_BYTES,
                GRAMS,
                DESCRIPTORS,
                PAYLOAD_BYTES,
                ELAPSED_NS,
                USER_US,
                SYS_US,
                MAX_RSS_BYTES,
                NVCSW,
                NIVCSW,
                MISMATCHED_GRAMS,
                FIRST_MISMATCH_SEQ,
                E2E_DIGEST,
                PAGE_SIZE,
                SETUP_MAP_NS,
                SETUP_PREFAULT_NS,
                SETUP_FILL_NS,
                SETUP_FINGERPRINT_NS,
                MODE,
                ENCODING,
                INTEGRITY,
                INTEGRITY_OK,
                BACKING,
                RESERVED,
            ],
            LEN
        ));
    }

    /// ERROR head; the message follows.
    pub mod error {
        use super::{tiles, Field};

        pub const CODE: Field = Field::new(0, 2);
        pub const RESERVED: Field = Field::new(2, 2);
        pub const MSG_LEN: Field = Field::new(4, 4);
        pub const LEN: usize = 8;

        const _: () = assert!(tiles(&[CODE, RESERVED, MSG_LEN], LEN));
    }
}

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
        use field::summary as f;
        let b = Reader::<SENDER_SUMMARY_LEN>::exact(body)?;
        Ok(Self {
            grams: b.u64(f::GRAMS),
            descriptors: b.u64(f::DESCRIPTORS),
            effective_bytes: b.u64(f::EFFECTIVE_BYTES),
            e2e_digest: b.u64(f::E2E_DIGEST),
            wire_bytes_sent: b.u64(f::WIRE_BYTES_SENT),
            payload_bytes: b.u64(f::PAYLOAD_BYTES),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; SENDER_SUMMARY_LEN] {
        use field::summary as f;
        let mut w = Writer::<SENDER_SUMMARY_LEN>::new();
        w.u64(f::GRAMS, self.grams)
            .u64(f::DESCRIPTORS, self.descriptors)
            .u64(f::EFFECTIVE_BYTES, self.effective_bytes)
            .u64(f::E2E_DIGEST, self.e2e_digest)
            .u64(f::WIRE_BYTES_SENT, self.wire_bytes_sent)
            .u64(f::PAYLOAD_BYTES, self.payload_bytes);
        w.finish()
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
        use field::report as f;
        let b = Reader::<REPORT_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            effective_bytes: b.u64(f::EFFECTIVE_BYTES),
            wire_bytes: b.u64(f::WIRE_BYTES),
            grams: b.u64(f::GRAMS),
            descriptors: b.u64(f::DESCRIPTORS),
            payload_bytes: b.u64(f::PAYLOAD_BYTES),
            elapsed_ns: b.u64(f::ELAPSED_NS),
            user_us: b.u64(f::USER_US),
            sys_us: b.u64(f::SYS_US),
            max_rss_bytes: b.u64(f::MAX_RSS_BYTES),
            nvcsw: b.u64(f::NVCSW),
            nivcsw: b.u64(f::NIVCSW),
            mismatched_grams: b.u64(f::MISMATCHED_GRAMS),
            first_mismatch_seq: b.u64(f::FIRST_MISMATCH_SEQ),
            e2e_digest: b.u64(f::E2E_DIGEST),
            page_size: b.u64(f::PAGE_SIZE),
            setup_map_ns: b.u64(f::SETUP_MAP_NS),
            setup_prefault_ns: b.u64(f::SETUP_PREFAULT_NS),
            setup_fill_ns: b.u64(f::SETUP_FILL_NS),
            setup_fingerprint_ns: b.u64(f::SETUP_FINGERPRINT_NS),
            mode: b.u8(f::MODE),
            encoding: b.u8(f::ENCODING),
            integrity: b.u8(f::INTEGRITY),
            integrity_ok: b.u8(f::INTEGRITY_OK),
            backing: b.u8(f::BACKING),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; REPORT_LEN] {
        use field::report as f;
        let mut w = Writer::<REPORT_LEN>::new();
        w.u64(f::EFFECTIVE_BYTES, self.effective_bytes)
            .u64(f::WIRE_BYTES, self.wire_bytes)
            .u64(f::GRAMS, self.grams)
            .u64(f::DESCRIPTORS, self.descriptors)
            .u64(f::PAYLOAD_BYTES, self.payload_bytes)
            .u64(f::ELAPSED_NS, self.elapsed_ns)
            .u64(f::USER_US, self.user_us)
            .u64(f::SYS_US, self.sys_us)
            .u64(f::MAX_RSS_BYTES, self.max_rss_bytes)
            .u64(f::NVCSW, self.nvcsw)
            .u64(f::NIVCSW, self.nivcsw)
            .u64(f::MISMATCHED_GRAMS, self.mismatched_grams)
            .u64(f::FIRST_MISMATCH_SEQ, self.first_mismatch_seq)
            .u64(f::E2E_DIGEST, self.e2e_digest)
            .u64(f::PAGE_SIZE, self.page_size)
            .u64(f::SETUP_MAP_NS, self.setup_map_ns)
            .u64(f::SETUP_PREFAULT_NS, self.setup_prefault_ns)
            .u64(f::SETUP_FILL_NS, self.setup_fill_ns)
            .u64(f::SETUP_FINGERPRINT_NS, self.setup_fingerprint_ns)
            .u8(f::MODE, self.mode)
            .u8(f::ENCODING, self.encoding)
            .u8(f::INTEGRITY, self.integrity)
            .u8(f::INTEGRITY_OK, self.integrity_ok)
            .u8(f::BACKING, self.backing);
        w.finish()
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
    /// The receiver is shutting down and cut the session; running it
    /// again (once a receiver is back) resumes it.
    ShuttingDown = 11,
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
            11 => Self::ShuttingDown,
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
            Self::ShuttingDown => "SHUTTING_DOWN",
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
        use field::error as f;
        let b = Reader::<{ f::LEN }>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let len = b.u32(f::MSG_LEN) as usize;
        if len > MAX_ERROR_MSG {
            return Err(WireError::TooLarge);
        }
        if body.len() != f::LEN + len {
            return Err(WireError::LengthMismatch);
        }
        let text = body.get(f::LEN..).ok_or(WireError::Truncated)?;
        let message = core::str::from_utf8(text).map_err(|_| WireError::BadUtf8)?;
        Ok(Self {
            code: b.u16(f::CODE),
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
        use field::error as f;
        let mut w = Writer::<{ f::LEN }>::new();
        w.u16(f::CODE, self.code).u32(f::MSG_LEN, end as u32);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(&self.message.as_bytes()[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    proptest! {
        #[test]
        fn summary_parse_emit(v: [u64; 6]) {
            let s = SenderSummary {
                grams: v[0],
                descriptors: v[1],
                effective_bytes: v[2],
                e2e_digest: v[3],
                wire_bytes_sent: v[4],
                payload_bytes: v[5],
            };
            prop_assert_eq!(SenderSummary::parse(&s.emit()), Ok(s));
        }

        #[test]
        fn report_parse_emit(v: [u64; 19], b: [u8; 5]) {
            let r = Report {
                effective_bytes: v[0],
                wire_bytes: v[1],
                grams: v[2],
                descriptors: v[3],
                payload_bytes: v[4],
                elapsed_ns: v[5],
                user_us: v[6],
                sys_us: v[7],
                max_rss_bytes: v[8],
                nvcsw: v[9],
                nivcsw: v[10],
                mismatched_grams: v[11],
                first_mismatch_seq: v[12],
                e2e_digest: v[13],
                page_size: v[14],
                setup_map_ns: v[15],
                setup_prefault_ns: v[16],
                setup_fill_ns: v[17],
                setup_fingerprint_ns: v[18],
                mode: b[0],
                encoding: b[1],
                integrity: b[2],
                integrity_ok: b[3],
                backing: b[4],
            };
            prop_assert_eq!(Report::parse(&r.emit()), Ok(r));
        }

        #[test]
        fn error_parse_emit(code: u16, message in "\\PC{0,64}") {
            let e = ErrorFrame { code, message: &message };
            let mut body = Vec::new();
            e.emit(&mut body);
            prop_assert_eq!(ErrorFrame::parse(&body), Ok(e));
        }
    }
}
