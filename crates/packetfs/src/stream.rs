//! Streaming mode: publish your application's own grams, subscribe and
//! execute them (`docs/wire.md` §15).
//!
//! A [`Publication`] connects to a subscriber and sends grams it builds
//! with a [`GramWriter`]: **references** `(offset, len)` to bytes both
//! blobs hold, **writes** the subscriber copies into its blob
//! (replication), **messages** for the subscriber's code. The table
//! encoding (absolute or arithmetic) is chosen per gram, the smaller.
//! [`Publication::offer`] never blocks: when the subscriber's window is
//! full it returns [`Offer::BackPressure`] and keeps nothing; wait with
//! [`Publication::wait_applied`] and offer again (or use
//! [`Publication::offer_blocking`]). [`GramWriter::claim`] hands out
//! payload room in the outgoing buffer, to fill in place.
//!
//! A [`Subscription`] takes one publisher's connection and is polled with
//! a handler that receives each gram in order, its entries resolved to
//! slices of the subscriber's own blob and of the received frame — no
//! copy. Every gram is checked whole (bounds against the subscriber's own
//! blob, the rights it granted, its limits) before any entry executes: a
//! refused gram leaves the blob as it was and ends the session with a
//! clear error on both sides. Either side that hears nothing from the
//! other for 3 × the other's keepalive interval ends the session
//! ([`StreamError::Silent`]); a closed connection ends it at once.
//!
//! Over TCP, Unix sockets, shared memory and UDP ([`Target`]), plain or
//! protected ([`Publication::connect_as`]; the subscriber's side runs
//! `keys::accept` first, as gram servers do).
//!
//! ```
//! use packetfs::blob::{open_blob, study_blob};
//! use packetfs::stream::{Entry, Offer, Publication, PublicationConfig, SubscriberBlob, Subscription, SubscriptionConfig};
//! use packetfs::gram::Target;
//! use packetfs::transport::{Listener, TcpConfig, TcpListener};
//!
//! let primary = open_blob(&study_blob(1 << 20, 7, None), true)?;
//! let mut replica = open_blob(&study_blob(1 << 20, 7, None), true)?;
//! let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default())?;
//! let target = Target::Tcp { addr: listener.socket_addr()?.to_string(), sock_buf: 0 };
//! std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//!     let sub = s.spawn(move || -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
//!         let conn = Box::new(listener.accept()?);
//!         let blob = SubscriberBlob::of(&mut replica.blob);
//!         let mut sub = Subscription::accept(conn, blob, SubscriptionConfig::default())?;
//!         let mut got = Vec::new();
//!         sub.run(&mut |g: &mut packetfs::stream::GramEntries<'_>| {
//!             while let Some(e) = g.next_entry() {
//!                 if let Entry::Message(m) = e { got.extend_from_slice(m) }
//!             }
//!         })?;
//!         Ok(got)
//!     });
//!     let mut publication = Publication::connect(&target, &primary.view(), PublicationConfig::default())?;
//!     let sent = publication.offer(|g| {
//!         g.message(b"hello").reference(4096, 64);
//!     })?;
//!     assert_eq!(sent, Offer::Sent { seq: 0 });
//!     let report = publication.close()?;
//!     assert!(report.digests_matched);
//!     assert_eq!(sub.join().unwrap()?, b"hello");
//!     Ok(())
//! }).map_err(|e| e.to_string())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use pfs_session::stream::{
    Claim, GramEntries, GramWriter, Offer, Polled, PublishError, PublisherReport, ResolvedEntry as Entry,
    StreamError, StreamHost, StreamViolation, SubscriberReport,
};
pub use pfs_wire::stream::{RIGHT_MESSAGE, RIGHT_WRITE};
pub use pfs_wire::IntegrityAlg;

use pfs_session::stream::{PublisherConfig, PublisherLink, StreamBlob, SubscriberConfig, SubscriberLink};
use pfs_session::BlobView;
use pfs_transport::Transport;

use crate::gram::Target;
use crate::Error;

/// How a publication runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationConfig {
    /// Per-gram digest algorithm (`Xxh3` by default; `None` skips it).
    pub integrity: IntegrityAlg,
    /// Keepalive interval: a frame at least this often when idle; the
    /// subscriber gives up after 3 × this of silence.
    pub keepalive: Duration,
    /// How long to wait for the subscriber's STREAM_ACCEPT, and for its
    /// final APPLIED at `close`.
    pub reply_timeout: Duration,
}

impl Default for PublicationConfig {
    fn default() -> Self {
        Self {
            integrity: IntegrityAlg::Xxh3,
            keepalive: Duration::from_secs(1),
            reply_timeout: Duration::from_secs(30),
        }
    }
}

/// A publisher: sends grams to one subscriber. See the module docs.
pub struct Publication<'a> {
    link: PublisherLink,
    blob: &'a [u8],
    reply_timeout: Duration,
}

fn nonce() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

impl std::fmt::Debug for Publication<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publication")
            .field("link", &self.link)
            .field("blob_len", &self.blob.len())
            .finish()
    }
}

impl<'a> Publication<'a> {
    /// Connects to `target` and opens a stream for `view` (its length and
    /// fingerprint must equal the subscriber's).
    pub fn connect(target: &Target, view: &BlobView<'a>, cfg: PublicationConfig) -> Result<Self, Error> {
        Self::connect_as(target, view, cfg, None)
    }

    /// [`Publication::connect`], protected when `security` is given
    /// (`docs/wire.md` §11; the `blob` service).
    pub fn connect_as(
        target: &Target,
        view: &BlobView<'a>,
        cfg: PublicationConfig,
        security: Option<&pfs_auth::ClientSecurity>,
    ) -> Result<Self, Error> {
        let conn = target.connect_as(security, pfs_auth::Service::Blob)?;
        Self::on(conn, view, cfg)
    }

    /// Opens a stream on an open connection.
    pub fn on(conn: Box<dyn Transport>, view: &BlobView<'a>, cfg: PublicationConfig) -> Result<Self, Error> {
        let core = PublisherConfig {
            integrity: cfg.integrity,
            keepalive: cfg.keepalive,
            session_nonce: nonce(),
            ..PublisherConfig::default()
        };
        let link = PublisherLink::open(conn, &core, StreamBlob::of(view), cfg.reply_timeout)?;
        Ok(Self {
            link,
            blob: view.data,
            reply_timeout: cfg.reply_timeout,
        })
    }

    /// Builds a gram with `build` and sends it; `Offer::BackPressure` when
    /// the subscriber's window is full (nothing kept, `build` not called).
    /// Never waits for the subscriber.
    pub fn offer(&mut self, build: impl FnOnce(&mut GramWriter<'_>)) -> Result<Offer, StreamError> {
        self.link.offer(self.blob, build)
    }

    /// [`Publication::offer`], waiting up to `timeout` for room.
    pub fn offer_blocking(
        &mut self,
        timeout: Duration,
        build: impl Fn(&mut GramWriter<'_>),
    ) -> Result<Offer, StreamError> {
        self.link.offer_blocking(self.blob, timeout, build)
    }

    /// Takes the subscriber's news without waiting (keepalives too);
    /// returns the applied position: grams executed by the subscriber.
    pub fn poll(&mut self) -> Result<u64, StreamError> {
        self.link.poll()
    }

    /// The applied position as last heard: the subscriber executed every
    /// gram with `seq` below it.
    pub fn applied(&self) -> u64 {
        self.link.core().applied()
    }

    /// Waits up to `timeout` for the subscriber to execute gram `seq`.
    pub fn wait_applied(&mut self, seq: u64, timeout: Duration) -> Result<bool, StreamError> {
        self.link.wait_applied(seq, timeout)
    }

    /// The subscriber's limits, window and the rights it granted.
    pub fn accepted(&self) -> Option<pfs_wire::stream::StreamAccept> {
        self.link.core().accepted().copied()
    }

    /// The transport's label (`TCP`, `UNIX`, `SHM`, `UDP`).
    pub fn transport(&self) -> &'static str {
        self.link.transport_kind()
    }

    /// Figures so far.
    pub fn report(&self) -> PublisherReport {
        self.link.report()
    }

    /// Ends the stream and waits for the subscriber to have executed every
    /// gram; returns the figures (grams, entries, effective and wire
    /// bytes, whether every digest matched).
    pub fn close(self) -> Result<PublisherReport, StreamError> {
        self.link.close(self.reply_timeout)
    }
}

/// A subscriber's blob: the bytes grams execute over (writes land there)
/// and the identity STREAM_HELLO is checked against.
#[derive(Debug)]
pub struct SubscriberBlob<'a> {
    /// The bytes.
    pub data: &'a mut [u8],
    /// Its fingerprint root.
    pub fingerprint: [u8; 32],
    /// Its fingerprint region size.
    pub region_size: u32,
}

impl<'a> SubscriberBlob<'a> {
    /// A mapped blob (its fingerprint as computed when it was opened).
    pub fn of(blob: &'a mut crate::blob::Blob) -> Self {
        let (fingerprint, region_size) = {
            let f = blob.fingerprint();
            (f.root, f.region_size)
        };
        Self {
            data: blob.as_mut_slice(),
            fingerprint,
            region_size,
        }
    }
}

/// How a subscription runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriptionConfig {
    /// Largest gram body taken, bytes (the receive buffer's size).
    pub max_gram_body: u32,
    /// Most entries per gram.
    pub max_entries: u32,
    /// Most grams the publisher may have sent and not yet seen applied.
    pub window_grams: u32,
    /// Most gram bytes in flight (raised to one largest gram at least).
    pub window_bytes: u64,
    /// Rights granted: [`RIGHT_WRITE`] | [`RIGHT_MESSAGE`]; references are
    /// always allowed.
    pub rights: u8,
    /// Keepalive interval; the publisher gives up after 3 × this of silence.
    pub keepalive: Duration,
    /// How long the publisher's STREAM_HELLO may take.
    pub handshake_timeout: Duration,
}

impl Default for SubscriptionConfig {
    fn default() -> Self {
        let core = SubscriberConfig::default();
        Self {
            max_gram_body: core.max_gram_body,
            max_entries: core.max_entries,
            window_grams: core.window_grams,
            window_bytes: core.window_bytes,
            rights: core.rights,
            keepalive: core.keepalive,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// A subscriber: executes one publisher's grams over its own blob. See
/// the module docs.
pub struct Subscription<'a> {
    link: SubscriberLink<'a>,
    blob: &'a mut [u8],
}

impl std::fmt::Debug for Subscription<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("link", &self.link)
            .field("blob_len", &self.blob.len())
            .finish()
    }
}

impl<'a> Subscription<'a> {
    /// Takes the publisher on `conn` (already protected, if it is): reads
    /// its STREAM_HELLO, checks it against `blob` and accepts it, or
    /// refuses it (ERROR `BLOB_MISMATCH` …) and fails. `conn` may borrow
    /// a connection held elsewhere (a server's admitted one) for `'a`.
    pub fn accept(
        conn: Box<dyn Transport + 'a>,
        blob: SubscriberBlob<'a>,
        cfg: SubscriptionConfig,
    ) -> Result<Self, Error> {
        Ok(Self::open(conn, blob, cfg)?)
    }

    fn open(
        conn: Box<dyn Transport + 'a>,
        blob: SubscriberBlob<'a>,
        cfg: SubscriptionConfig,
    ) -> Result<Self, StreamError> {
        let core = SubscriberConfig {
            max_gram_body: cfg.max_gram_body,
            max_entries: cfg.max_entries,
            window_grams: cfg.window_grams,
            window_bytes: cfg.window_bytes,
            rights: cfg.rights,
            keepalive: cfg.keepalive,
        };
        let id = StreamBlob {
            len: blob.data.len() as u64,
            region_size: blob.region_size,
            fingerprint: blob.fingerprint,
        };
        let link = SubscriberLink::accept(conn, core, id, cfg.handshake_timeout)?;
        Ok(Self {
            link,
            blob: blob.data,
        })
    }

    /// Waits up to `timeout` for grams and executes each that arrived, in
    /// order, through `handler`; `Polled::Ended` once the publisher closed
    /// the stream.
    pub fn poll(&mut self, handler: &mut dyn StreamHost, timeout: Duration) -> Result<Polled, StreamError> {
        self.link.poll(self.blob, handler, timeout)
    }

    /// Polls until the publisher ends the stream; returns the figures.
    pub fn run(&mut self, handler: &mut dyn StreamHost) -> Result<SubscriberReport, StreamError> {
        while self.poll(handler, Duration::from_secs(1))? != Polled::Ended {}
        Ok(self.link.report())
    }

    /// The blob, as the grams so far left it.
    pub fn blob(&self) -> &[u8] {
        self.blob
    }

    /// The transport's label.
    pub fn transport(&self) -> &'static str {
        self.link.transport_kind()
    }

    /// Figures so far.
    pub fn report(&self) -> SubscriberReport {
        self.link.report()
    }
}

/// How one publisher's session at a [`serve`] loop ended.
#[derive(Debug)]
pub struct Served {
    /// The publisher's address, as the transport prints it.
    pub peer: String,
    /// Its figures, or why it ended (refused, silent, closed …).
    pub outcome: Result<SubscriberReport, StreamError>,
}

/// Subscribes to the publishers that connect to `listener`, one at a
/// time, over the same blob, until `max_sessions` have ended (`None`:
/// forever). A publisher that is refused (a hostile gram, another blob)
/// or goes silent ends only its own session, the blob as its last good
/// gram left it; `on_end` hears how each one ended. One at a time keeps
/// the blob's writers in order; a publisher holds the loop no longer than
/// the handshake timeout plus its silence bound when it stops sending.
pub fn serve<L: pfs_transport::Listener>(
    listener: &L,
    blob: SubscriberBlob<'_>,
    cfg: SubscriptionConfig,
    max_sessions: Option<u64>,
    handler: &mut dyn StreamHost,
    on_end: &mut dyn FnMut(Served),
) -> std::io::Result<()> {
    let mut ended = 0;
    while max_sessions.is_none_or(|m| ended < m) {
        let conn = listener.accept()?;
        let peer = conn.peer();
        let again = SubscriberBlob {
            data: &mut *blob.data,
            ..blob
        };
        let outcome = Subscription::open(Box::new(conn), again, cfg).and_then(|mut sub| sub.run(handler));
        on_end(Served { peer, outcome });
        ended += 1;
    }
    Ok(())
}
