//! PacketFS sessions: the two protocols' state machines and the drivers
//! that run them over a transport.
//!
//! - [`gram`]: the gram protocol (HELLO negotiation, grams executed over
//!   the receiver's own blob, summary and the receiver's authoritative
//!   [`pfs_wire::Report`]); sans-I/O cores plus blocking drivers.
//! - [`files`]: the files protocol (trees deduplicated against the
//!   receiver's store).
//! - [`mount`]: the server side of mount (read) sessions: a tree's
//!   listing, recipes and chunks, to `pfs mount`.
//! - [`catchup`]: blob catch-up (docs/wire.md §16): a replica brought to
//!   the source's bytes before grams flow; [`catchup::catch_up_source`] and
//!   [`catchup::catch_up_replica`] also serve other sessions' handshakes.
//! - [`framing`]: what both share: whole frames from bytes, ERROR frames,
//!   the drivers' receive buffer.
//! - [`server`]: the accept loop, one thread per session.
//! - [`metrics`]: what a server did, as Prometheus text, and the endpoint
//!   that serves it.
//! - [`stream`]: streaming sessions: an application's own grams,
//!   published and subscribed (sans-I/O cores plus blocking drivers).
//!
//! The blob is passed in as bytes plus its identity ([`BlobView`]), so
//! tests run sessions over plain `Vec`s, and the cores run with no socket.

mod admitting;
pub mod catchup;
mod error;
pub mod files;
pub mod framing;
pub mod gram;
pub mod metrics;
pub mod mount;
pub mod peer_text;
pub mod places;
pub mod server;
mod slots;
pub mod stats;
pub mod stream;

pub use error::{code_name, LimitExceeded, LocalError, SessionError, Timeout, Violation};
pub use gram::{
    receive_session, send_session, GramReceiverConfig, GramReceiverOutcome, GramSenderConfig,
    GramSenderOutcome, GramViolation, HelloRejection, DEFAULT_PAYLOAD_BUDGET,
};
pub use mount::{serve_mount, MountRecipes, MountServerConfig, MountServerOutcome};
pub use places::{clean_temps, FilesPlaces, Keeping, PlaceError};
pub use server::{
    admit_one, serve, serve_files, Admission, Client, Denied, FilesPlace, FilesSessionOutcome, KeyRing,
    ServerConfig, ServerEvent,
};
pub use stats::SessionStats;

use pfs_blob::BackingKind;

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
    /// What backs the mapping.
    pub backing: BackingKind,
    /// Page size obtained.
    pub page_size: u64,
    /// Setup times of this blob.
    pub setup: SetupTimes,
    /// Writes into this same mapping, for a receiver's repairs (wire §13);
    /// `None`: the receiver only counts mismatches. A writer onto other
    /// bytes than `data` would make every repair fail its check, never
    /// succeed wrongly.
    pub writer: Option<pfs_blob::BlobWriter<'a>>,
    /// The mapped blob itself, for catch-up (wire §16): its current region
    /// hashes (a sender's source, a receiver's comparison) and, on a
    /// receiver, the fingerprint a catch-up updates. `None`: no catch-up,
    /// and `fingerprint` is the identity.
    pub live: Option<&'a pfs_blob::Blob>,
}

impl BlobView<'_> {
    /// The current fingerprint root: the live blob's (a catch-up may have
    /// changed it since the view was made), else `fingerprint`.
    pub fn root(&self) -> [u8; 32] {
        self.live.map_or(self.fingerprint, |b| b.fingerprint().root)
    }
}

/// Short hex of a fingerprint root, for messages.
pub fn short_hex(root: &[u8; 32]) -> String {
    root[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Name of a backing code as carried in HELLO_ACK and REPORT.
pub fn backing_name(code: u8) -> &'static str {
    BackingKind::from_code(code).map_or("unknown", |b| b.as_str())
}
