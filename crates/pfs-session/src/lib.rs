//! PacketFS sessions over a byte-stream transport.
//!
//! Owns the protocol logic of one transfer: the HELLO negotiation (version,
//! mode, encoding, integrity, blob identity, limits), the sender loop (build
//! a gram from a schedule, digest it, emit it with one vectored write), the
//! receiver loop (decode, bounds-check, execute over its own blob, compare
//! digests), the end-of-session exchange of a summary and the receiver's
//! authoritative [`pfs_wire::Report`], and a small multi-client server. The
//! blob itself is passed in as bytes plus its identity ([`BlobView`]), so
//! tests run sessions over plain `Vec`s.

mod error;
pub mod files;
pub mod reader;
pub mod receiver;
pub mod sender;
pub mod server;
pub mod stats;
pub mod sys;

pub use error::SessionError;
pub use receiver::{receive_session, ReceiverConfig, ReceiverOutcome};
pub use sender::{send_session, SendOutcome, SenderConfig, DEFAULT_PAYLOAD_BUDGET};
pub use server::{serve, serve_files, ServerConfig, ServerEvent};
pub use stats::SessionStats;

/// Receiver limits, advertised in HELLO_ACK and enforced on every gram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most descriptors per gram.
    pub max_desc_count: u32,
    /// Largest descriptor table, bytes.
    pub max_table_len: u32,
    /// Largest payload slab, bytes.
    pub max_payload_len: u32,
    /// Longest single descriptor, bytes.
    pub max_desc_len: u32,
    /// Most effective bytes one gram may make the receiver execute: a gram
    /// of a few hundred KiB can name terabytes, so this caps the work a peer
    /// can ask for per frame.
    pub max_gram_effective: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_desc_count: 65_536,
            max_table_len: 1 << 20,
            max_payload_len: 1 << 30,
            max_desc_len: 64 << 20,
            max_gram_effective: 4 << 30,
        }
    }
}

impl Limits {
    /// Largest GRAM body these limits allow.
    pub fn max_gram_body(&self) -> u32 {
        (pfs_wire::GRAM_HEADER_LEN as u64 + u64::from(self.max_table_len) + u64::from(self.max_payload_len))
            .min(u64::from(u32::MAX)) as u32
    }
}

/// Setup phases of a blob, reported apart from steady state.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SetupTimes {
    /// Mapping, seconds.
    pub map_s: f64,
    /// Prefault, seconds.
    pub prefault_s: f64,
    /// Fill, seconds.
    pub fill_s: f64,
    /// Fingerprint, seconds.
    pub fingerprint_s: f64,
}

/// A blob as the session layer sees it: its bytes and its identity.
#[derive(Debug, Clone, Copy)]
pub struct BlobView<'a> {
    /// The mapping.
    pub data: &'a [u8],
    /// Fingerprint root.
    pub fingerprint: [u8; 32],
    /// Fingerprint region size.
    pub region_size: u32,
    /// Backing code (0 hugetlbfs, 1 THP, 2 4 KiB).
    pub backing: u8,
    /// Page size obtained.
    pub page_size: u64,
    /// Setup times of this blob.
    pub setup: SetupTimes,
}

/// Short hex of a fingerprint root, for messages.
pub fn short_hex(root: &[u8; 32]) -> String {
    root[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Name of a backing code.
pub fn backing_name(code: u8) -> &'static str {
    match code {
        0 => "hugetlbfs",
        1 => "thp",
        2 => "4k",
        _ => "unknown",
    }
}
