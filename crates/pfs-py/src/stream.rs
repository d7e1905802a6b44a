//! Streaming from Python (`packetfs::stream`): `Publication`, `Listener`,
//! `Subscription`, the `Gram` a subscription's callback receives, and the
//! `BackPressure` and `StreamError` exceptions.
//!
//! A callback's entries are memoryviews, not copies. Views of references
//! and writes are slices of `memoryview(blob)`: they keep the blob alive
//! and stay readable after the callback, showing the blob as later grams
//! change it. Views of messages point into the received frame, which the
//! next gram reuses: each is released when the callback returns, and
//! reading it afterwards raises `ValueError`. A message view that cannot
//! be released (a slice of it, or an export such as `numpy.frombuffer`,
//! kept past the callback) ends the subscription with `BufferError`, and
//! its receive buffer is then never freed nor read into again, so the
//! kept view cannot dangle. Copy what you keep: `bytes(view)`.
//!
//! Every call that waits (connect, accept, offer, wait, poll, close)
//! releases the GIL; a subscription's callback runs with the GIL held.

// The subscription and publication hold their blob's mapping by raw
// lifetime-extended references; message views are buffers over the frame.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyMemoryView, PySlice, PyTuple};
use pyo3::{create_exception, ffi, intern};

use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    Entry, GramEntries, GramWriter, IntegrityAlg, Offer, Polled, PublicationConfig,
    StreamError as RustStreamError, SubscriberBlob, SubscriptionConfig, RIGHT_MESSAGE, RIGHT_WRITE,
};
use packetfs::transport::{AnyListener, Listener as _};

use crate::blob::Blob;

create_exception!(
    packetfs,
    BackPressure,
    PyException,
    "The subscriber's window is full: nothing was sent; wait_applied() and offer again."
);
create_exception!(
    packetfs,
    StreamError,
    PyException,
    "A streaming session failed (refused, silent, disconnected) or has ended."
);

fn secs(v: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| PyValueError::new_err(format!("{v} is not a duration in seconds")))
}

fn stream_err(e: &RustStreamError) -> PyErr {
    match e {
        RustStreamError::Publish(_) => PyValueError::new_err(packetfs::report::error_line(e)),
        _ => StreamError::new_err(packetfs::report::error_line(e)),
    }
}

fn open_err(e: &packetfs::Error) -> PyErr {
    StreamError::new_err(packetfs::report::error_line(e))
}

fn ended() -> PyErr {
    StreamError::new_err("the stream has ended")
}

fn endpoint(text: &str) -> PyResult<Endpoint> {
    text.parse()
        .map_err(|e: packetfs::endpoint::EndpointError| PyValueError::new_err(e.to_string()))
}

/// One entry to publish; writes and messages hold their bytes' buffer.
enum Pending {
    Reference(u64, u32),
    Write(u64, PyBuffer<u8>),
    Message(PyBuffer<u8>),
}

fn bytes_of(obj: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let buf = PyBuffer::<u8>::get(obj)?;
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("entry bytes must be a contiguous buffer"));
    }
    if u32::try_from(buf.len_bytes()).is_err() {
        return Err(PyValueError::new_err("an entry holds at most 4 GiB - 1 bytes"));
    }
    Ok(buf)
}

/// One entry, ready to build, borrowing its bytes from a [`Pending`].
#[derive(Clone, Copy)]
enum Part<'b> {
    Reference(u64, u32),
    Write(u64, &'b [u8]),
    Message(&'b [u8]),
}

fn parts(pending: &[Pending]) -> Vec<Part<'_>> {
    let view = |b: &PyBuffer<u8>| -> &[u8] {
        // SAFETY: the buffer is held (exported) until `pending` is dropped,
        // which outlives the returned slice; it is C-contiguous, of
        // `len_bytes` bytes (checked in `bytes_of`). Python code must not
        // change it while the offer runs (documented on `offer`).
        unsafe { std::slice::from_raw_parts(b.buf_ptr().cast::<u8>().cast_const(), b.len_bytes()) }
    };
    pending
        .iter()
        .map(|p| match p {
            Pending::Reference(o, l) => Part::Reference(*o, *l),
            Pending::Write(o, b) => Part::Write(*o, view(b)),
            Pending::Message(b) => Part::Message(view(b)),
        })
        .collect()
}

fn build(g: &mut GramWriter<'_>, parts: &[Part<'_>]) {
    for p in parts {
        match *p {
            Part::Reference(o, l) => g.reference(o, l),
            Part::Write(o, b) => g.write(o, b),
            Part::Message(b) => g.message(b),
        };
    }
}

/// Parses `("reference", offset, len)`, `("write", offset, data)` or
/// `("message", data)`.
fn pending(entry: &Bound<'_, PyAny>) -> PyResult<Pending> {
    let t = entry
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("an entry is a tuple: (\"reference\", offset, len), (\"write\", offset, data) or (\"message\", data)"))?;
    let kind: String = t.get_item(0)?.extract()?;
    match (kind.as_str(), t.len()) {
        ("reference", 3) => Ok(Pending::Reference(t.get_item(1)?.extract()?, t.get_item(2)?.extract()?)),
        ("write", 3) => Ok(Pending::Write(t.get_item(1)?.extract()?, bytes_of(&t.get_item(2)?)?)),
        ("message", 2) => Ok(Pending::Message(bytes_of(&t.get_item(1)?)?)),
        _ => Err(PyValueError::new_err(format!(
            "entry {kind:?} with {} fields: expected (\"reference\", offset, len), (\"write\", offset, data) or (\"message\", data)",
            t.len()
        ))),
    }
}

/// A publisher: sends grams of references, writes and messages to one
/// subscriber. `Publication(target, blob, keepalive=1.0, timeout=30.0,
/// integrity=True)` connects to `target` (`"tcp:127.0.0.1:7878"`,
/// `"unix:/path"`, `"shm:/path"`, `"udp:host:port"`); the blob's length
/// and fingerprint must equal the subscriber's.
///
/// Build a gram with `reference(offset, len)`, `write(offset, data)`,
/// `message(data)` and send it with `send()`, or give the entries at once
/// to `offer([...])`. Both return the gram's seq or raise `BackPressure`
/// when the subscriber's window is full (nothing sent; a gram built with
/// the methods stays pending for the next `send()`). Buffers given as
/// data must not change while the call runs.
#[pyclass(module = "packetfs")]
pub struct Publication {
    inner: Mutex<Option<packetfs::stream::Publication<'static>>>,
    pending: Mutex<Vec<Pending>>,
    /// Keeps the blob (and so the mapping `inner` reads) alive.
    _blob: Py<Blob>,
}

impl std::fmt::Debug for Publication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publication")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Publication {
    fn offer_parts(&self, py: Python<'_>, pending: &[Pending], timeout: Option<f64>) -> PyResult<u64> {
        let timeout = timeout.map(secs).transpose()?;
        let parts = parts(pending);
        let r = py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let Some(p) = guard.as_mut() else {
                return Err(None);
            };
            match timeout {
                None => p.offer(|g| build(g, &parts)),
                Some(t) => p.offer_blocking(t, |g| build(g, &parts)),
            }
            .map_err(Some)
        });
        match r {
            Ok(Offer::Sent { seq }) => Ok(seq),
            Ok(Offer::BackPressure) => Err(BackPressure::new_err(
                "the subscriber's window is full; nothing was sent",
            )),
            Err(None) => Err(ended()),
            Err(Some(e)) => Err(stream_err(&e)),
        }
    }
}

#[pymethods]
impl Publication {
    #[new]
    #[pyo3(signature = (target, blob, keepalive = 1.0, timeout = 30.0, integrity = true))]
    fn new(
        py: Python<'_>,
        target: &str,
        blob: Bound<'_, Blob>,
        keepalive: f64,
        timeout: f64,
        integrity: bool,
    ) -> PyResult<Self> {
        let target = endpoint(target)?.target();
        let cfg = PublicationConfig {
            integrity: if integrity {
                IntegrityAlg::Xxh3
            } else {
                IntegrityAlg::None
            },
            keepalive: secs(keepalive)?,
            reply_timeout: secs(timeout)?,
            // Catch-up (wire §15.10) is not in the Python options yet.
            ..PublicationConfig::default()
        };
        let opened: *const packetfs::blob::OpenedBlob = blob.borrow().opened();
        // SAFETY: the Blob object lives on Python's heap and does not move;
        // the publication holds a reference to it (`_blob`) for its whole
        // life, and the mapping inside never moves nor shrinks.
        let opened: &'static packetfs::blob::OpenedBlob = unsafe { &*opened };
        let view = opened.view();
        let publication = py
            .detach(|| packetfs::stream::Publication::connect(&target, &view, cfg))
            .map_err(|e| open_err(&e))?;
        Ok(Self {
            inner: Mutex::new(Some(publication)),
            pending: Mutex::new(Vec::new()),
            _blob: blob.unbind(),
        })
    }

    /// Adds a reference to `len` bytes at `offset` to the pending gram.
    fn reference(slf: PyRef<'_, Self>, offset: u64, len: u32) -> PyRef<'_, Self> {
        slf.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Pending::Reference(offset, len));
        slf
    }

    /// Adds a write of `data` (any bytes-like object) at `offset` to the pending gram.
    fn write<'py>(
        slf: PyRef<'py, Self>,
        offset: u64,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<PyRef<'py, Self>> {
        let b = bytes_of(data)?;
        slf.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Pending::Write(offset, b));
        Ok(slf)
    }

    /// Adds a message of `data` to the pending gram.
    fn message<'py>(slf: PyRef<'py, Self>, data: &Bound<'py, PyAny>) -> PyResult<PyRef<'py, Self>> {
        let b = bytes_of(data)?;
        slf.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Pending::Message(b));
        Ok(slf)
    }

    /// Sends the pending gram; returns its seq. `BackPressure`: nothing
    /// sent, the gram stays pending. `timeout` (seconds): wait that long
    /// for room first.
    #[pyo3(signature = (timeout = None))]
    fn send(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<u64> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let r = self.offer_parts(py, &pending, timeout);
        if r.as_ref().is_err_and(|e| e.is_instance_of::<BackPressure>(py)) {
            *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = pending;
        }
        r
    }

    /// Sends one gram of `entries`: tuples `("reference", offset, len)`,
    /// `("write", offset, data)`, `("message", data)`; returns its seq.
    /// `BackPressure` when the window is full (nothing sent); `timeout`
    /// (seconds): wait that long for room first.
    #[pyo3(signature = (entries, timeout = None))]
    fn offer(&self, py: Python<'_>, entries: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<u64> {
        let pending = entries
            .try_iter()?
            .map(|e| pending(&e?))
            .collect::<PyResult<Vec<_>>>()?;
        self.offer_parts(py, &pending, timeout)
    }

    /// Waits up to `timeout` seconds for the subscriber to have executed
    /// gram `seq`; returns whether it has.
    #[pyo3(signature = (seq, timeout = 30.0))]
    fn wait_applied(&self, py: Python<'_>, seq: u64, timeout: f64) -> PyResult<bool> {
        let t = secs(timeout)?;
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            guard.as_mut().map(|p| p.wait_applied(seq, t))
        })
        .ok_or_else(ended)?
        .map_err(|e| stream_err(&e))
    }

    /// The applied position as last heard: every gram with a lower seq
    /// was executed by the subscriber.
    #[getter]
    fn applied(&self) -> PyResult<u64> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map(|p| p.applied()).ok_or_else(ended)
    }

    /// Ends the stream, waits for the subscriber to have executed every
    /// gram and returns the figures as a dict.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let p = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(ended)?;
        let r = py.detach(|| p.close()).map_err(|e| stream_err(&e))?;
        let d = PyDict::new(py);
        d.set_item("grams", r.grams)?;
        d.set_item("entries", r.entries)?;
        d.set_item("effective_bytes", r.effective_bytes)?;
        d.set_item("payload_bytes", r.payload_bytes)?;
        d.set_item("wire_bytes_sent", r.wire_bytes_sent)?;
        d.set_item("wire_bytes_received", r.wire_bytes_received)?;
        d.set_item("applied", r.applied)?;
        d.set_item("back_pressure", r.back_pressure)?;
        d.set_item("digests_matched", r.digests_matched)?;
        Ok(d)
    }
}

/// A bound listener: `Listener("tcp:127.0.0.1:0")`; `.endpoint` is the
/// address to give a publisher (the port the system chose), `.accept(blob)`
/// waits for one and returns its `Subscription`.
#[pyclass(module = "packetfs")]
#[derive(Debug)]
pub struct Listener {
    listener: AnyListener,
    endpoint: String,
}

#[pymethods]
impl Listener {
    #[new]
    fn new(addr: &str) -> PyResult<Self> {
        let listener = endpoint(addr)?
            .listen()
            .map_err(|e| StreamError::new_err(packetfs::report::error_line(&e)))?;
        let endpoint = Endpoint::bound(&listener).to_string();
        Ok(Self { listener, endpoint })
    }

    /// Where publishers connect, e.g. `"tcp:127.0.0.1:40123"`.
    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Waits for the next publisher and subscribes to it over `blob`
    /// (options as `Subscription.accept`).
    #[pyo3(signature = (blob, window_grams = None, max_gram_body = None, allow_write = true, allow_message = true, keepalive = 1.0, handshake_timeout = 10.0))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn accept(
        &self,
        py: Python<'_>,
        blob: Bound<'_, Blob>,
        window_grams: Option<u32>,
        max_gram_body: Option<u32>,
        allow_write: bool,
        allow_message: bool,
        keepalive: f64,
        handshake_timeout: f64,
    ) -> PyResult<Subscription> {
        let cfg = subscription_config(
            window_grams,
            max_gram_body,
            allow_write,
            allow_message,
            keepalive,
            handshake_timeout,
        )?;
        Subscription::on(py, &self.listener, blob, cfg)
    }
}

fn subscription_config(
    window_grams: Option<u32>,
    max_gram_body: Option<u32>,
    allow_write: bool,
    allow_message: bool,
    keepalive: f64,
    handshake_timeout: f64,
) -> PyResult<SubscriptionConfig> {
    let d = SubscriptionConfig::default();
    let mut rights = 0;
    if allow_write {
        rights |= RIGHT_WRITE;
    }
    if allow_message {
        rights |= RIGHT_MESSAGE;
    }
    Ok(SubscriptionConfig {
        window_grams: window_grams.unwrap_or(d.window_grams),
        max_gram_body: max_gram_body.unwrap_or(d.max_gram_body),
        rights,
        keepalive: secs(keepalive)?,
        handshake_timeout: secs(handshake_timeout)?,
        ..d
    })
}

/// The bytes of one message, in the received frame, exported as a
/// read-only buffer while `live`; see the module docs.
#[pyclass(module = "packetfs", frozen)]
#[derive(Debug)]
struct FrameBytes {
    /// Address and length of the bytes (an address: a raw pointer is not `Send`).
    addr: usize,
    len: usize,
    /// Cleared when the callback returns: no new view may be taken.
    live: AtomicBool,
    /// Views exported and not yet released (paired with `__releasebuffer__`).
    exports: AtomicUsize,
}

#[pymethods]
impl FrameBytes {
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        if !this.live.load(Ordering::Acquire) {
            return Err(PyBufferError::new_err(
                "a message's bytes are readable only during the callback; copy them with bytes(view)",
            ));
        }
        let Ok(len) = isize::try_from(this.len) else {
            return Err(PyBufferError::new_err("message larger than isize::MAX bytes"));
        };
        // SAFETY: `view` is the Py_buffer CPython passes to an exporter;
        // `addr..addr+len` is a message in the frame being executed, which
        // stays allocated and unchanged while `live` (the callback runs),
        // and is never freed while an export remains (see `Subscription::poll`).
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.addr as *mut _, len, 1, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One gram, as a subscription's callback receives it: `seq`, and
/// `entries`, a list of `(kind, offset, view)` tuples — kind `"reference"`,
/// `"write"` or `"message"`, offset `None` for messages, view a
/// memoryview. Iterating a gram iterates its entries.
#[pyclass(module = "packetfs", frozen)]
#[derive(Debug)]
pub struct Gram {
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    entries: Py<PyList>,
}

#[pymethods]
impl Gram {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.entries.bind(py).len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.entries.bind(py).try_iter()?.into_any())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "packetfs.Gram(seq={}, entries={})",
            self.seq,
            self.entries.bind(py).len()
        )
    }
}

/// A subscriber: executes one publisher's grams over its blob.
/// `Subscription.accept(listen_addr, blob, …)` binds, waits for one
/// publisher and returns; `Listener(addr).accept(blob, …)` when the
/// address must be known first (port 0). `poll(callback, timeout=1.0)`
/// executes the grams that arrive, calling `callback(gram)` for each in
/// order, and returns how many (None once the publisher ended the
/// stream); `run(callback)` polls to the end and returns the figures.
/// Entries' views: see the module docs (references and writes are views
/// of the blob; messages are valid only during the callback). An
/// exception raised by the callback ends the subscription and is raised
/// by `poll`.
#[pyclass(module = "packetfs")]
#[derive(Debug)]
pub struct Subscription {
    inner: Mutex<Option<packetfs::stream::Subscription<'static>>>,
    /// `memoryview(blob)`: references and writes are its slices. It also
    /// keeps the blob (and so the mapping `inner` writes) alive.
    view: Py<PyMemoryView>,
}

/// One executed entry, between the core and the Python callback.
#[derive(Clone, Copy)]
enum Seen {
    Reference(u64, usize),
    Write(u64, usize),
    Message(usize, usize),
}

impl Subscription {
    fn on(
        py: Python<'_>,
        listener: &AnyListener,
        blob: Bound<'_, Blob>,
        cfg: SubscriptionConfig,
    ) -> PyResult<Self> {
        let view = PyMemoryView::from(blob.as_any())?.unbind();
        let target: *mut packetfs::blob::Blob = &mut blob.borrow_mut().opened_mut().blob;
        // SAFETY: the Blob object lives on Python's heap and does not move;
        // the subscription holds `memoryview(blob)`, which holds the blob,
        // for its whole life, and the mapping never moves nor shrinks.
        // Python code may read (or write) the same bytes through
        // memoryviews while a poll runs, as with any shared mapping: the
        // subscription's writes are plain byte copies.
        let target: &'static mut packetfs::blob::Blob = unsafe { &mut *target };
        let sub_blob = SubscriberBlob::of(target);
        let sub = py.detach(|| -> PyResult<_> {
            let conn = listener
                .accept()
                .map_err(|e| StreamError::new_err(format!("accepting a publisher: {e}")))?;
            packetfs::stream::Subscription::accept(conn, sub_blob, cfg).map_err(|e| open_err(&e))
        })?;
        Ok(Self {
            inner: Mutex::new(Some(sub)),
            view,
        })
    }
}

fn busy_text() -> &'static str {
    "the subscription is being polled (by another thread, or this is its own callback)"
}

/// Calls `callback` with one gram; returns whether a message view
/// outlived the callback.
fn call_back(
    py: Python<'_>,
    callback: &Py<PyAny>,
    blob: &Py<PyMemoryView>,
    seq: u64,
    seen: &[Seen],
) -> PyResult<bool> {
    let blob = blob.bind(py);
    let list = PyList::empty(py);
    let mut frames = Vec::new();
    for e in seen {
        let entry = match *e {
            Seen::Reference(offset, len) | Seen::Write(offset, len) => {
                let kind = if matches!(e, Seen::Reference(..)) {
                    intern!(py, "reference")
                } else {
                    intern!(py, "write")
                };
                // In bounds: the core checked every entry against the blob.
                let slice = PySlice::new(py, offset as isize, (offset as usize + len) as isize, 1);
                (kind.clone(), Some(offset), blob.get_item(slice)?).into_pyobject(py)?
            }
            Seen::Message(addr, len) => {
                let frame = Bound::new(
                    py,
                    FrameBytes {
                        addr,
                        len,
                        live: AtomicBool::new(true),
                        exports: AtomicUsize::new(0),
                    },
                )?;
                let mv = PyMemoryView::from(frame.as_any())?;
                frames.push((frame, mv.clone()));
                (intern!(py, "message").clone(), None::<u64>, mv.into_any()).into_pyobject(py)?
            }
        };
        list.append(entry)?;
    }
    let gram = Bound::new(
        py,
        Gram {
            seq,
            entries: list.unbind(),
        },
    )?;
    let called = callback.call1(py, (gram,));
    let mut kept = false;
    for (frame, mv) in frames {
        frame.get().live.store(false, Ordering::Release);
        // Fails only if the view itself was exported; counted below.
        let _ = mv.call_method0(intern!(py, "release"));
        kept |= frame.get().exports.load(Ordering::Acquire) > 0;
    }
    called?;
    Ok(kept)
}

#[pymethods]
impl Subscription {
    /// Binds `listen_addr` (`"tcp:127.0.0.1:7878"`, `"unix:/path"` …),
    /// waits for one publisher and subscribes to it over `blob`.
    /// `window_grams`, `max_gram_body`: limits (defaults 64 grams, 4 MiB);
    /// `allow_write`, `allow_message`: the publisher's rights.
    #[staticmethod]
    #[pyo3(signature = (listen_addr, blob, window_grams = None, max_gram_body = None, allow_write = true, allow_message = true, keepalive = 1.0, handshake_timeout = 10.0))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn accept(
        py: Python<'_>,
        listen_addr: &str,
        blob: Bound<'_, Blob>,
        window_grams: Option<u32>,
        max_gram_body: Option<u32>,
        allow_write: bool,
        allow_message: bool,
        keepalive: f64,
        handshake_timeout: f64,
    ) -> PyResult<Self> {
        let listener = Listener::new(listen_addr)?;
        listener.accept(
            py,
            blob,
            window_grams,
            max_gram_body,
            allow_write,
            allow_message,
            keepalive,
            handshake_timeout,
        )
    }

    /// Waits up to `timeout` seconds for grams and executes each that
    /// arrived, calling `callback(gram)` (or nothing, if None); returns
    /// how many, or None once the publisher ended the stream.
    #[pyo3(signature = (callback, timeout = 1.0))]
    fn poll(&self, py: Python<'_>, callback: Option<Py<PyAny>>, timeout: f64) -> PyResult<Option<u64>> {
        let timeout = secs(timeout)?;
        let view = &self.view;
        let mut failed: Option<PyErr> = None;
        let mut kept = false;
        let polled = py.detach(|| {
            // Not `lock`: a callback that polls or reports on its own
            // subscription would wait for itself.
            let mut guard = match self.inner.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Err(busy_text()),
            };
            let Some(sub) = guard.as_mut() else {
                return Ok(None);
            };
            let mut seen = Vec::new();
            let mut host = |g: &mut GramEntries<'_>| {
                if failed.is_some() || kept {
                    return;
                }
                seen.clear();
                while let Some(e) = g.next_entry() {
                    seen.push(match e {
                        Entry::Reference { offset, bytes } => Seen::Reference(offset, bytes.len()),
                        Entry::Write { offset, bytes } => Seen::Write(offset, bytes.len()),
                        Entry::Message(bytes) => Seen::Message(bytes.as_ptr() as usize, bytes.len()),
                    });
                }
                let Some(cb) = &callback else { return };
                let seq = g.seq();
                // The frame holding the messages is unchanged until this returns.
                match Python::attach(|py| call_back(py, cb, view, seq, &seen)) {
                    Ok(k) => kept = k,
                    Err(e) => failed = Some(e),
                }
            };
            let r = sub.poll(&mut host, timeout);
            if kept {
                // A message view outlived its callback: the receive buffer
                // it points into must stay allocated and unwritten, so the
                // subscription is never dropped (nor polled) again.
                std::mem::forget(guard.take());
            } else if failed.is_some() {
                guard.take();
            }
            Ok(Some(r))
        });
        if kept {
            return Err(PyBufferError::new_err(
                "a message view (or a slice or export of it) was kept past the callback; the subscription \
                 ended. Copy message bytes you keep: bytes(view)",
            ));
        }
        if let Some(e) = failed {
            return Err(e);
        }
        match polled.map_err(StreamError::new_err)?.ok_or_else(ended)? {
            Ok(Polled::Grams(n)) => Ok(Some(n)),
            Ok(Polled::Ended) => Ok(None),
            Err(e) => Err(stream_err(&e)),
        }
    }

    /// Polls until the publisher ends the stream; returns the figures as
    /// a dict.
    #[pyo3(signature = (callback))]
    fn run<'py>(&self, py: Python<'py>, callback: Option<Py<PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        while self
            .poll(py, callback.as_ref().map(|c| c.clone_ref(py)), 1.0)?
            .is_some()
        {}
        self.report(py)
    }

    /// What the subscription executed so far, as a dict.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(StreamError::new_err(busy_text())),
        };
        let r = guard.as_ref().ok_or_else(ended)?.report();
        let d = PyDict::new(py);
        d.set_item("grams", r.grams)?;
        d.set_item("entries", r.entries)?;
        d.set_item("effective_bytes", r.effective_bytes)?;
        d.set_item("written_bytes", r.written_bytes)?;
        d.set_item("message_bytes", r.message_bytes)?;
        d.set_item("wire_bytes", r.wire_bytes)?;
        d.set_item("digests_matched", r.digests_matched)?;
        Ok(d)
    }
}
