//! Streaming from C (`packetfs::stream`): a publication sends grams built
//! from arrays of [`PfsEntry`]; a subscription is polled with a callback
//! that receives each gram's entries pointing into the subscriber's blob
//! (references, writes) or the received frame (messages) — no copy.
//!
//! Both hold their blob by pointer: the blob handle must outlive them. A
//! listener ([`pfs_listener_bind`]) lets a program learn the port the
//! system chose before a publisher connects.

// Raw pointers from C are dereferenced here; each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::time::Duration;

use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    Entry, GramEntries, IntegrityAlg, Offer, Polled, Publication, PublicationConfig, PublisherReport,
    StreamError, SubscriberBlob, SubscriberReport, Subscription, SubscriptionConfig,
};
use packetfs::transport::{AnyListener, Listener};

use crate::blob::PfsBlob;
use crate::error::{fail, guard, PfsStatus};

/// [`PfsEntry::kind`]: `len` bytes at `offset` that both blobs hold.
pub const PFS_ENTRY_REFERENCE: u32 = 0;
/// [`PfsEntry::kind`]: `len` bytes at `data`, written into the
/// subscriber's blob at `offset`.
pub const PFS_ENTRY_WRITE: u32 = 1;
/// [`PfsEntry::kind`]: `len` bytes at `data` for the subscriber's code
/// (`offset` is 0).
pub const PFS_ENTRY_MESSAGE: u32 = 2;

/// One entry of a gram: what a publisher offers, and what a subscriber's
/// callback receives. For a subscriber `data` always points at the bytes:
/// into its blob for references and writes (as the blob now holds them),
/// into the received frame for messages; valid only during the callback.
/// For a publisher `data` is read for writes and messages and ignored for
/// references.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PfsEntry {
    /// `PFS_ENTRY_REFERENCE`, `PFS_ENTRY_WRITE` or `PFS_ENTRY_MESSAGE`.
    pub kind: u32,
    /// Length in bytes.
    pub len: u32,
    /// Offset in the blob (references and writes).
    pub offset: u64,
    /// The bytes (see above).
    pub data: *const u8,
}

/// How a publication runs. Start from [`pfs_publication_options_default`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PfsPublicationOptions {
    /// Non-zero: a per-gram XXH3 digest the subscriber checks; 0: none.
    pub integrity: u8,
    /// A frame at least this often when idle; the subscriber gives up
    /// after 3 × this of silence.
    pub keepalive_ms: u32,
    /// How long to wait for the subscriber's accept, and at close for its
    /// last applied position.
    pub reply_timeout_ms: u32,
}

/// Defaults: integrity on, 1 s keepalive, 30 s reply timeout.
#[no_mangle]
pub extern "C" fn pfs_publication_options_default() -> PfsPublicationOptions {
    let d = PublicationConfig::default();
    PfsPublicationOptions {
        integrity: u8::from(d.integrity != IntegrityAlg::None),
        keepalive_ms: millis(d.keepalive),
        reply_timeout_ms: millis(d.reply_timeout),
    }
}

/// How a subscription runs. Start from [`pfs_subscription_options_default`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PfsSubscriptionOptions {
    /// Largest gram body taken, bytes.
    pub max_gram_body: u32,
    /// Most entries per gram.
    pub max_entries: u32,
    /// Most grams the publisher may have sent and not yet seen applied.
    pub window_grams: u32,
    /// Most gram bytes in flight.
    pub window_bytes: u64,
    /// Non-zero: the publisher may write into the blob.
    pub allow_write: u8,
    /// Non-zero: the publisher may send messages.
    pub allow_message: u8,
    /// Keepalive interval; the publisher gives up after 3 × this of silence.
    pub keepalive_ms: u32,
    /// How long the publisher's hello may take.
    pub handshake_timeout_ms: u32,
}

/// Defaults: 4 MiB grams, 64 grams / 16 MiB in flight, writes and
/// messages allowed, 1 s keepalive, 10 s handshake.
#[no_mangle]
pub extern "C" fn pfs_subscription_options_default() -> PfsSubscriptionOptions {
    let d = SubscriptionConfig::default();
    PfsSubscriptionOptions {
        max_gram_body: d.max_gram_body,
        max_entries: d.max_entries,
        window_grams: d.window_grams,
        window_bytes: d.window_bytes,
        allow_write: u8::from(d.rights & packetfs::stream::RIGHT_WRITE != 0),
        allow_message: u8::from(d.rights & packetfs::stream::RIGHT_MESSAGE != 0),
        keepalive_ms: millis(d.keepalive),
        handshake_timeout_ms: millis(d.handshake_timeout),
    }
}

/// What a publication sent, filled in by [`pfs_publication_close`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PfsPublicationReport {
    /// Grams sent.
    pub grams: u64,
    /// Entries sent.
    pub entries: u64,
    /// Referenced, written and message bytes.
    pub effective_bytes: u64,
    /// Write and message bytes carried.
    pub payload_bytes: u64,
    /// Bytes written to the transport.
    pub wire_bytes_sent: u64,
    /// Grams the subscriber applied.
    pub applied: u64,
    /// Times an offer met a full window.
    pub back_pressure: u64,
    /// 1 if every digest matched.
    pub digests_matched: u8,
}

impl From<PublisherReport> for PfsPublicationReport {
    fn from(r: PublisherReport) -> Self {
        Self {
            grams: r.grams,
            entries: r.entries,
            effective_bytes: r.effective_bytes,
            payload_bytes: r.payload_bytes,
            wire_bytes_sent: r.wire_bytes_sent,
            applied: r.applied,
            back_pressure: r.back_pressure,
            digests_matched: u8::from(r.digests_matched),
        }
    }
}

/// What a subscription executed, filled in by [`pfs_subscription_close`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PfsSubscriptionReport {
    /// Grams executed.
    pub grams: u64,
    /// Entries executed.
    pub entries: u64,
    /// Referenced, written and message bytes.
    pub effective_bytes: u64,
    /// Bytes written into the blob.
    pub written_bytes: u64,
    /// Message bytes handed to the callback.
    pub message_bytes: u64,
    /// Bytes read from the transport.
    pub wire_bytes: u64,
    /// 1 if every digest matched.
    pub digests_matched: u8,
}

impl From<SubscriberReport> for PfsSubscriptionReport {
    fn from(r: SubscriberReport) -> Self {
        Self {
            grams: r.grams,
            entries: r.entries,
            effective_bytes: r.effective_bytes,
            written_bytes: r.written_bytes,
            message_bytes: r.message_bytes,
            wire_bytes: r.wire_bytes,
            digests_matched: u8::from(r.digests_matched),
        }
    }
}

/// A publication. Opaque: made by [`pfs_publication_connect`], freed by
/// [`pfs_publication_close`].
#[derive(Debug)]
pub struct PfsPublication {
    publication: Publication<'static>,
}

/// A bound listener. Opaque: made by [`pfs_listener_bind`], freed by
/// [`pfs_listener_close`].
#[derive(Debug)]
pub struct PfsListener {
    listener: AnyListener,
    endpoint: CString,
}

/// A subscription. Opaque: made by [`pfs_subscription_accept`] or
/// [`pfs_subscription_listen_accept`], freed by [`pfs_subscription_close`].
#[derive(Debug)]
pub struct PfsSubscription {
    subscription: Subscription<'static>,
    /// The entries handed to the callback, reused gram after gram.
    entries: Vec<PfsEntry>,
}

/// Called once per gram, in order, with its entries (`n` of them): `data`
/// of each is valid only until the callback returns.
pub type PfsGramCallback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, seq: u64, entries: *const PfsEntry, n: usize)>;

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

fn ms(v: u32) -> Duration {
    Duration::from_millis(u64::from(v))
}

fn stream_failed(what: &str, e: &StreamError) -> PfsStatus {
    let status = match e {
        StreamError::Publish(_) => PfsStatus::InvalidArgument,
        _ => PfsStatus::Stream,
    };
    fail(status, format!("{what}: {}", packetfs::report::error_line(e)))
}

fn open_failed(what: &str, e: &packetfs::Error) -> PfsStatus {
    let status = match e {
        packetfs::Error::Blob(_) => PfsStatus::Blob,
        packetfs::Error::Transport(_) | packetfs::Error::Secure(_) => PfsStatus::Io,
        packetfs::Error::Session(_) | packetfs::Error::Stream(_) => PfsStatus::Stream,
    };
    fail(status, format!("{what}: {}", packetfs::report::error_line(e)))
}

/// Reads a C string argument as an endpoint (`tcp:host:port`, `unix:/path`,
/// `shm:/path`, `udp:host:port`).
///
/// # Safety
/// `text` is NULL or a NUL-terminated string.
unsafe fn endpoint(what: &str, text: *const c_char) -> Result<Endpoint, PfsStatus> {
    if text.is_null() {
        return Err(fail(
            PfsStatus::InvalidArgument,
            format!("{what}: address is NULL"),
        ));
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(text) }.to_str().map_err(|_| {
        fail(
            PfsStatus::InvalidArgument,
            format!("{what}: address is not UTF-8"),
        )
    })?;
    s.parse().map_err(|e: packetfs::endpoint::EndpointError| {
        fail(PfsStatus::InvalidArgument, format!("{what}: {e}"))
    })
}

/// Connects to the subscriber at `target` (`"tcp:127.0.0.1:7878"`,
/// `"unix:/path"`, `"shm:/path"`, `"udp:host:port"`) and opens a stream
/// over `blob` (its length and fingerprint must equal the subscriber's);
/// stores the handle in `*out`. `options` may be NULL (defaults).
///
/// # Safety
/// `target` is a NUL-terminated string; `blob` a live handle from
/// `pfs_blob_open` that stays open until the publication is closed;
/// `options` NULL or a valid struct; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_connect(
    target: *const c_char,
    blob: *const PfsBlob,
    options: *const PfsPublicationOptions,
    out: *mut *mut PfsPublication,
) -> PfsStatus {
    const WHAT: &str = "pfs_publication_connect";
    if blob.is_null() || out.is_null() {
        return fail(
            PfsStatus::InvalidArgument,
            format!("{WHAT}: blob and out must not be NULL"),
        );
    }
    // SAFETY: the caller promises NULL or a NUL-terminated string.
    let endpoint = match unsafe { endpoint(WHAT, target) } {
        Ok(e) => e,
        Err(status) => return status,
    };
    // SAFETY: NULL (defaults) or a valid struct, the caller's promise.
    let o = unsafe { options.as_ref() }
        .copied()
        .unwrap_or_else(|| pfs_publication_options_default());
    // SAFETY: non-null and live; the blob handle (a box that never moves,
    // over a mapping that never moves) stays open until the publication is
    // closed (the caller's promise), so the view may live that long.
    let b: &'static PfsBlob = unsafe { &*blob };
    let view = b.opened().view();
    let cfg = PublicationConfig {
        integrity: if o.integrity != 0 {
            IntegrityAlg::Xxh3
        } else {
            IntegrityAlg::None
        },
        keepalive: ms(o.keepalive_ms),
        reply_timeout: ms(o.reply_timeout_ms),
        // Catch-up (wire §15.10) is not in the C options yet.
        ..PublicationConfig::default()
    };
    guard(
        move || match Publication::connect(&endpoint.target(), &view, cfg) {
            Ok(publication) => {
                let handle = Box::into_raw(Box::new(PfsPublication { publication }));
                // SAFETY: `out` is non-null and writable (the caller's promise).
                unsafe { out.write(handle) };
                PfsStatus::Ok
            }
            Err(e) => open_failed(WHAT, &e),
        },
    )
}

/// The entries of `entries[..n]` as a slice; kinds checked.
///
/// # Safety
/// `entries` points to `n` readable entries (or `n` is 0).
unsafe fn entry_slice<'a>(
    what: &str,
    entries: *const PfsEntry,
    n: usize,
) -> Result<&'a [PfsEntry], PfsStatus> {
    if n == 0 {
        return Ok(&[]);
    }
    if entries.is_null() {
        return Err(fail(
            PfsStatus::InvalidArgument,
            format!("{what}: entries is NULL"),
        ));
    }
    // SAFETY: non-null and `n` readable entries (the caller's promise).
    let s = unsafe { std::slice::from_raw_parts(entries, n) };
    for (i, e) in s.iter().enumerate() {
        if e.kind > PFS_ENTRY_MESSAGE {
            return Err(fail(
                PfsStatus::InvalidArgument,
                format!("{what}: entry {i} has kind {}, not a PFS_ENTRY_* value", e.kind),
            ));
        }
        if e.kind != PFS_ENTRY_REFERENCE && e.len > 0 && e.data.is_null() {
            return Err(fail(
                PfsStatus::InvalidArgument,
                format!("{what}: entry {i} has {} bytes at NULL", e.len),
            ));
        }
    }
    Ok(s)
}

/// Adds `entries` to the gram being built.
fn build(g: &mut packetfs::stream::GramWriter<'_>, entries: &[PfsEntry]) {
    for e in entries {
        let bytes = if e.kind == PFS_ENTRY_REFERENCE || e.len == 0 {
            &[][..]
        } else {
            // SAFETY: `entry_slice` checked `data` is non-null; the caller
            // promises `len` readable bytes there for the call.
            unsafe { std::slice::from_raw_parts(e.data, e.len as usize) }
        };
        match e.kind {
            PFS_ENTRY_REFERENCE => g.reference(e.offset, e.len),
            PFS_ENTRY_WRITE => g.write(e.offset, bytes),
            _ => g.message(bytes),
        };
    }
}

fn offered(what: &str, r: Result<Offer, StreamError>, seq: *mut u64) -> PfsStatus {
    match r {
        Ok(Offer::Sent { seq: s }) => {
            if !seq.is_null() {
                // SAFETY: non-null and writable (the caller's promise).
                unsafe { seq.write(s) };
            }
            PfsStatus::Ok
        }
        Ok(Offer::BackPressure) => fail(
            PfsStatus::BackPressure,
            format!("{what}: the subscriber's window is full; nothing was sent"),
        ),
        Err(e) => stream_failed(what, &e),
    }
}

/// Sends one gram of `entries[..n]`, in order, and stores its sequence
/// number in `*seq` (if not NULL). Never waits for the subscriber:
/// `PFS_STATUS_BACK_PRESSURE` when its window is full (nothing sent; wait
/// with [`pfs_publication_wait_applied`] and offer again).
/// `PFS_STATUS_INVALID_ARGUMENT` for a gram that cannot be sent (outside
/// the blob, a right not granted, too large): nothing sent, the stream goes on.
///
/// # Safety
/// `publication` is a live handle; `entries` points to `n` entries whose
/// `data` points to `len` readable bytes (writes, messages); `seq` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_offer(
    publication: *mut PfsPublication,
    entries: *const PfsEntry,
    n: usize,
    seq: *mut u64,
) -> PfsStatus {
    const WHAT: &str = "pfs_publication_offer";
    // SAFETY: NULL or a live handle used by one thread (the caller's promise).
    let Some(p) = (unsafe { publication.as_mut() }) else {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: publication is NULL"));
    };
    // SAFETY: `n` readable entries (the caller's promise).
    let entries = match unsafe { entry_slice(WHAT, entries, n) } {
        Ok(s) => s,
        Err(status) => return status,
    };
    guard(|| offered(WHAT, p.publication.offer(|g| build(g, entries)), seq))
}

/// [`pfs_publication_offer`], waiting up to `timeout_ms` for room in the
/// subscriber's window; `PFS_STATUS_BACK_PRESSURE` if none came.
///
/// # Safety
/// As [`pfs_publication_offer`].
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_offer_blocking(
    publication: *mut PfsPublication,
    entries: *const PfsEntry,
    n: usize,
    timeout_ms: u32,
    seq: *mut u64,
) -> PfsStatus {
    const WHAT: &str = "pfs_publication_offer_blocking";
    // SAFETY: NULL or a live handle used by one thread (the caller's promise).
    let Some(p) = (unsafe { publication.as_mut() }) else {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: publication is NULL"));
    };
    // SAFETY: `n` readable entries (the caller's promise).
    let entries = match unsafe { entry_slice(WHAT, entries, n) } {
        Ok(s) => s,
        Err(status) => return status,
    };
    guard(|| {
        let r = p
            .publication
            .offer_blocking(ms(timeout_ms), |g| build(g, entries));
        offered(WHAT, r, seq)
    })
}

/// The applied position as last heard: the subscriber executed every gram
/// whose `seq` is below it. 0 for NULL.
///
/// # Safety
/// `publication` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_applied(publication: *const PfsPublication) -> u64 {
    // SAFETY: NULL or a live handle (the caller's promise).
    unsafe { publication.as_ref() }.map_or(0, |p| p.publication.applied())
}

/// Waits up to `timeout_ms` for the subscriber to have executed gram
/// `seq`: `PFS_STATUS_OK`, or `PFS_STATUS_TIMED_OUT` if it has not yet.
///
/// # Safety
/// `publication` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_wait_applied(
    publication: *mut PfsPublication,
    seq: u64,
    timeout_ms: u32,
) -> PfsStatus {
    const WHAT: &str = "pfs_publication_wait_applied";
    // SAFETY: NULL or a live handle used by one thread (the caller's promise).
    let Some(p) = (unsafe { publication.as_mut() }) else {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: publication is NULL"));
    };
    guard(|| match p.publication.wait_applied(seq, ms(timeout_ms)) {
        Ok(true) => PfsStatus::Ok,
        Ok(false) => fail(
            PfsStatus::TimedOut,
            format!("{WHAT}: gram {seq} not applied within {timeout_ms} ms"),
        ),
        Err(e) => stream_failed(WHAT, &e),
    })
}

/// Ends the stream, waits for the subscriber to have executed every gram,
/// fills `*report` (if not NULL) and frees the handle — also on failure.
///
/// # Safety
/// `publication` is NULL or a live handle, not used again; `report` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_publication_close(
    publication: *mut PfsPublication,
    report: *mut PfsPublicationReport,
) -> PfsStatus {
    const WHAT: &str = "pfs_publication_close";
    if publication.is_null() {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: publication is NULL"));
    }
    // SAFETY: a live handle made by `Box::into_raw`, closed once (the caller's promise).
    let p = unsafe { Box::from_raw(publication) };
    guard(move || match p.publication.close() {
        Ok(r) => {
            if !report.is_null() {
                // SAFETY: non-null and writable (the caller's promise).
                unsafe { report.write(r.into()) };
            }
            PfsStatus::Ok
        }
        Err(e) => stream_failed(WHAT, &e),
    })
}

/// Binds a listener at `addr` (`"tcp:127.0.0.1:0"` lets the system pick a
/// port; [`pfs_listener_endpoint`] says which) and stores it in `*out`.
///
/// # Safety
/// `addr` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_listener_bind(addr: *const c_char, out: *mut *mut PfsListener) -> PfsStatus {
    const WHAT: &str = "pfs_listener_bind";
    if out.is_null() {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: out is NULL"));
    }
    // SAFETY: the caller promises NULL or a NUL-terminated string.
    let endpoint = match unsafe { endpoint(WHAT, addr) } {
        Ok(e) => e,
        Err(status) => return status,
    };
    guard(move || match endpoint.listen() {
        Ok(listener) => {
            let text = Endpoint::bound(&listener).to_string();
            let handle = Box::into_raw(Box::new(PfsListener {
                listener,
                endpoint: CString::new(text).unwrap_or_default(),
            }));
            // SAFETY: `out` is non-null and writable (the caller's promise).
            unsafe { out.write(handle) };
            PfsStatus::Ok
        }
        Err(e) => fail(
            PfsStatus::Io,
            format!("{WHAT}: {}", packetfs::report::error_line(&e)),
        ),
    })
}

/// The endpoint the listener is bound to (`"tcp:127.0.0.1:40123"`), to give
/// to a publisher; valid until the listener is closed. "" for NULL.
///
/// # Safety
/// `listener` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn pfs_listener_endpoint(listener: *const PfsListener) -> *const c_char {
    // SAFETY: NULL or a live handle (the caller's promise).
    match unsafe { listener.as_ref() } {
        Some(l) => l.endpoint.as_ptr(),
        None => c"".as_ptr(),
    }
}

/// Closes the listener (subscriptions it accepted go on). NULL is ignored.
///
/// # Safety
/// `listener` is NULL or a live handle, not used again.
#[no_mangle]
pub unsafe extern "C" fn pfs_listener_close(listener: *mut PfsListener) {
    if !listener.is_null() {
        // SAFETY: a live handle made by `Box::into_raw`, closed once (the caller's promise).
        drop(unsafe { Box::from_raw(listener) });
    }
}

fn subscription_config(o: &PfsSubscriptionOptions) -> SubscriptionConfig {
    let mut rights = 0;
    if o.allow_write != 0 {
        rights |= packetfs::stream::RIGHT_WRITE;
    }
    if o.allow_message != 0 {
        rights |= packetfs::stream::RIGHT_MESSAGE;
    }
    SubscriptionConfig {
        max_gram_body: o.max_gram_body,
        max_entries: o.max_entries,
        window_grams: o.window_grams,
        window_bytes: o.window_bytes,
        rights,
        keepalive: ms(o.keepalive_ms),
        handshake_timeout: ms(o.handshake_timeout_ms),
        // Catch-up (wire §15.10) is not in the C options yet.
        ..SubscriptionConfig::default()
    }
}

/// Accepts the next publisher on `listener`, checks its hello against
/// `blob` and stores the subscription in `*out`. Blocks until a publisher
/// connects. `options` may be NULL (defaults).
///
/// # Safety
/// `listener` a live handle; `blob` a live handle that stays open until
/// the subscription is closed and is not written by anyone else meanwhile;
/// `options` NULL or valid; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_subscription_accept(
    listener: *const PfsListener,
    blob: *mut PfsBlob,
    options: *const PfsSubscriptionOptions,
    out: *mut *mut PfsSubscription,
) -> PfsStatus {
    const WHAT: &str = "pfs_subscription_accept";
    // SAFETY: NULL or a live handle (the caller's promise).
    let Some(l) = (unsafe { listener.as_ref() }) else {
        return fail(PfsStatus::InvalidArgument, format!("{WHAT}: listener is NULL"));
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { accept_on(WHAT, &l.listener, blob, options, out) }
}

/// Binds `addr`, accepts one publisher there and closes the listener: the
/// one-call form of [`pfs_listener_bind`] + [`pfs_subscription_accept`]
/// for a fixed address.
///
/// # Safety
/// As [`pfs_subscription_accept`]; `addr` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pfs_subscription_listen_accept(
    addr: *const c_char,
    blob: *mut PfsBlob,
    options: *const PfsSubscriptionOptions,
    out: *mut *mut PfsSubscription,
) -> PfsStatus {
    const WHAT: &str = "pfs_subscription_listen_accept";
    // SAFETY: the caller promises NULL or a NUL-terminated string.
    let endpoint = match unsafe { endpoint(WHAT, addr) } {
        Ok(e) => e,
        Err(status) => return status,
    };
    let listener = match endpoint.listen() {
        Ok(l) => l,
        Err(e) => {
            return fail(
                PfsStatus::Io,
                format!("{WHAT}: {}", packetfs::report::error_line(&e)),
            )
        }
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { accept_on(WHAT, &listener, blob, options, out) }
}

/// # Safety
/// As [`pfs_subscription_accept`].
unsafe fn accept_on(
    what: &str,
    listener: &AnyListener,
    blob: *mut PfsBlob,
    options: *const PfsSubscriptionOptions,
    out: *mut *mut PfsSubscription,
) -> PfsStatus {
    if out.is_null() {
        return fail(PfsStatus::InvalidArgument, format!("{what}: out is NULL"));
    }
    if blob.is_null() {
        return fail(PfsStatus::InvalidArgument, format!("{what}: blob is NULL"));
    }
    // SAFETY: NULL (defaults) or a valid struct, the caller's promise.
    let o = unsafe { options.as_ref() }
        .copied()
        .unwrap_or_else(|| pfs_subscription_options_default());
    // SAFETY: non-null and live; the handle (a box over a mapping, neither
    // of which moves) stays open until the subscription is closed and
    // nobody else writes the blob meanwhile (the caller's promise), so the
    // subscription may hold it that long.
    let b: &'static mut PfsBlob = unsafe { &mut *blob };
    let blob = SubscriberBlob::of(&mut b.opened_mut().blob);
    guard(move || {
        let conn = match listener.accept() {
            Ok(c) => c,
            Err(e) => return fail(PfsStatus::Io, format!("{what}: accept: {e}")),
        };
        match Subscription::accept(conn, blob, subscription_config(&o)) {
            Ok(subscription) => {
                let handle = Box::into_raw(Box::new(PfsSubscription {
                    subscription,
                    entries: Vec::new(),
                }));
                // SAFETY: `out` is non-null and writable (the caller's promise).
                unsafe { out.write(handle) };
                PfsStatus::Ok
            }
            Err(e) => open_failed(what, &e),
        }
    })
}

/// Waits up to `timeout_ms` for grams and executes each that arrived, in
/// order, calling `callback(user_data, seq, entries, n)` once per gram
/// (NULL: execute without a callback); stores the number executed in
/// `*grams` (if not NULL). `PFS_STATUS_OK` (perhaps 0 grams, on timeout),
/// `PFS_STATUS_ENDED` once the publisher closed the stream, or
/// `PFS_STATUS_STREAM` when it failed (refused, silent, disconnected).
///
/// # Safety
/// `subscription` a live handle; `callback` NULL or a function that does
/// not unwind and does not keep `entries` or their `data` past its return.
#[no_mangle]
pub unsafe extern "C" fn pfs_subscription_poll(
    subscription: *mut PfsSubscription,
    callback: PfsGramCallback,
    user_data: *mut c_void,
    timeout_ms: u32,
    grams: *mut u64,
) -> PfsStatus {
    const WHAT: &str = "pfs_subscription_poll";
    // SAFETY: NULL or a live handle used by one thread (the caller's promise).
    let Some(s) = (unsafe { subscription.as_mut() }) else {
        return fail(
            PfsStatus::InvalidArgument,
            format!("{WHAT}: subscription is NULL"),
        );
    };
    guard(|| {
        let entries = &mut s.entries;
        let mut host = |g: &mut GramEntries<'_>| {
            entries.clear();
            while let Some(e) = g.next_entry() {
                entries.push(match e {
                    Entry::Reference { offset, bytes } => c_entry(PFS_ENTRY_REFERENCE, offset, bytes),
                    Entry::Write { offset, bytes } => c_entry(PFS_ENTRY_WRITE, offset, bytes),
                    Entry::Message(bytes) => c_entry(PFS_ENTRY_MESSAGE, 0, bytes),
                });
            }
            if let Some(cb) = callback {
                // SAFETY: every `data` points into the blob or the frame
                // being executed, both unchanged until this gram returns;
                // the callback keeps none of them (the caller's promise).
                unsafe { cb(user_data, g.seq(), entries.as_ptr(), entries.len()) };
            }
        };
        let polled = s.subscription.poll(&mut host, ms(timeout_ms));
        let (status, n) = match polled {
            Ok(Polled::Grams(n)) => (PfsStatus::Ok, n),
            Ok(Polled::Ended) => (PfsStatus::Ended, 0),
            Err(e) => (stream_failed(WHAT, &e), 0),
        };
        if !grams.is_null() {
            // SAFETY: non-null and writable (the caller's promise).
            unsafe { grams.write(n) };
        }
        if status == PfsStatus::Ended {
            return fail(
                PfsStatus::Ended,
                format!("{WHAT}: the publisher ended the stream"),
            );
        }
        status
    })
}

fn c_entry(kind: u32, offset: u64, bytes: &[u8]) -> PfsEntry {
    PfsEntry {
        kind,
        // Entry lengths are u32 on the wire.
        len: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        offset,
        data: bytes.as_ptr(),
    }
}

/// Fills `*report` (if not NULL) with what the subscription executed and
/// frees the handle. NULL is ignored.
///
/// # Safety
/// `subscription` is NULL or a live handle, not used again; `report` NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn pfs_subscription_close(
    subscription: *mut PfsSubscription,
    report: *mut PfsSubscriptionReport,
) {
    if subscription.is_null() {
        return;
    }
    // SAFETY: a live handle made by `Box::into_raw`, closed once (the caller's promise).
    let s = unsafe { Box::from_raw(subscription) };
    if !report.is_null() {
        // SAFETY: non-null and writable (the caller's promise).
        unsafe { report.write(s.subscription.report().into()) };
    }
}
