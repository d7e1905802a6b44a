//! The metrics endpoint: `GET /metrics` over HTTP/1.x on its own TCP
//! listener, answered with [`Metrics::render`], one request per
//! connection.
//!
//! It is a listener any peer can reach, and unauthenticated: bind it to
//! loopback or a private address. Whatever peers do, its cost is bounded
//! and serving sessions never waits on it: one thread accepts, a fixed
//! number answer ([`EndpointConfig::workers`]); connections wait in a
//! bounded queue and past it are closed unanswered; a request must arrive
//! whole, at most [`EndpointConfig::max_request`] bytes, within
//! [`EndpointConfig::timeout`] of its acceptance (trickled bytes do not
//! move the deadline), and its answer must be taken within the same time.
//! The server's sessions meet the endpoint only in the lock a scrape holds
//! while it reads the counters.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Metrics;

/// How the endpoint bounds what peers cost it.
#[derive(Debug, Clone, Copy)]
pub struct EndpointConfig {
    /// Threads answering requests.
    pub workers: usize,
    /// Accepted connections waiting for a worker; more are closed.
    pub queue: usize,
    /// Largest request (request line and headers); a larger one is
    /// answered 431 and closed.
    pub max_request: usize,
    /// Longest a request may take to arrive, counted from its acceptance,
    /// and its answer to be taken.
    pub timeout: Duration,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            queue: 16,
            max_request: 4096,
            timeout: Duration::from_secs(5),
        }
    }
}

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Binding the address failed.
    #[error("metrics endpoint: cannot listen on {addr}: {source}")]
    Bind {
        /// The address as given.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Starting a thread failed.
    #[error("metrics endpoint: cannot start a thread: {0}")]
    Thread(#[source] io::Error),
}

/// A running metrics endpoint; dropping it stops it (within
/// [`EndpointConfig::timeout`] of a request in progress).
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Endpoint {
    /// Listens on `addr` (`host:port`; port 0 picks one) and answers
    /// scrapes of `metrics`.
    pub fn bind(addr: &str, metrics: Arc<Metrics>, cfg: EndpointConfig) -> Result<Self, EndpointError> {
        let listener = TcpListener::bind(addr).map_err(|source| EndpointError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let local = listener.local_addr().map_err(|source| EndpointError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel::<TcpStream>(cfg.queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let mut threads = Vec::new();
        for i in 0..cfg.workers.max(1) {
            let (rx, metrics) = (rx.clone(), metrics.clone());
            let worker = std::thread::Builder::new()
                .name(format!("pfs-metrics-{i}"))
                .spawn(move || work(&rx, &metrics, &cfg));
            match worker {
                Ok(t) => threads.push(t),
                // The threads started end once `tx` is dropped.
                Err(e) => return Err(EndpointError::Thread(e)),
            }
        }
        let flag = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("pfs-metrics-accept".into())
            .spawn(move || accept(&listener, &tx, &flag))
            .map_err(EndpointError::Thread)?;
        threads.insert(0, acceptor);
        Ok(Self {
            addr: local,
            stop,
            threads,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Paired with the Acquire load in `accept`.
        self.stop.store(true, Ordering::Release);
        // Wake the blocked accept: connect to ourselves (an unspecified
        // address is reached on loopback).
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_err() {
            // Cannot wake it: leave the threads; they end with the process.
            return;
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Accepts connections and queues them for the workers until stopped;
/// a connection finding the queue full is closed at once.
fn accept(listener: &TcpListener, tx: &std::sync::mpsc::SyncSender<TcpStream>, stop: &AtomicBool) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Acquire) {
            return;
        }
        match accepted {
            Ok((conn, _)) => match tx.try_send(conn) {
                Ok(()) => {}
                Err(TrySendError::Full(conn)) => drop(conn),
                Err(TrySendError::Disconnected(_)) => return,
            },
            // Out of descriptors or memory: give the system a moment.
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A worker: answers queued connections until the acceptor ends.
fn work(rx: &Mutex<Receiver<TcpStream>>, metrics: &Metrics, cfg: &EndpointConfig) {
    let mut buf = vec![0u8; cfg.max_request.max(64)];
    loop {
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(conn) = next else { return };
        answer(conn, &mut buf, metrics, cfg);
    }
}

/// Why a request got no regular answer.
#[derive(Debug, PartialEq, Eq)]
enum Unread {
    /// Larger than the cap.
    TooLarge,
    /// Closed, failed or too slow: nothing is answered.
    Gone,
}

/// Reads one request's head into `buf` by `deadline`: its length.
fn read_head(conn: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, Unread> {
    let mut len = 0;
    loop {
        if let Some(end) = head_end(&buf[..len]) {
            return Ok(end);
        }
        if len == buf.len() {
            return Err(Unread::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            return Err(Unread::Gone);
        }
        match conn.read(&mut buf[len..]) {
            Ok(0) => return Err(Unread::Gone),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Unread::Gone),
        }
    }
}

/// Where a request's head ends (after its blank line), if it has.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads and answers one connection, then closes it.
fn answer(mut conn: TcpStream, buf: &mut [u8], metrics: &Metrics, cfg: &EndpointConfig) {
    let deadline = Instant::now() + cfg.timeout;
    if conn.set_write_timeout(Some(cfg.timeout)).is_err() {
        return;
    }
    let (status, body, head_only) = match read_head(&mut conn, buf, deadline) {
        Ok(n) => route(&buf[..n], metrics),
        Err(Unread::TooLarge) => (
            "431 Request Header Fields Too Large",
            "request too large\n".into(),
            false,
        ),
        Err(Unread::Gone) => return,
    };
    let kind = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&body);
    }
    let _ = conn.write_all(out.as_bytes());
    let _ = conn.shutdown(Shutdown::Write);
    // Closing with unread bytes would reset the connection, and the peer
    // could lose the answer: after a refusal (a 431 above all, whose
    // request was not read whole) take what it still sends, a bounded
    // amount by the same deadline. A scrape's peer reads its answer and
    // closes; the worker does not wait for it.
    let mut left = if status.starts_with("200") {
        0
    } else {
        LINGER_BYTES
    };
    while left > 0 {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() || conn.set_read_timeout(Some(wait)).is_err() {
            break;
        }
        match conn.read(&mut buf[..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

/// Most bytes read and dropped after an answer, before closing.
const LINGER_BYTES: usize = 64 << 10;

/// The status, body and whether only the head is sent, for a request head.
fn route(head: &[u8], metrics: &Metrics) -> (&'static str, String, bool) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line)
        .unwrap_or_default()
        .trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return ("400 Bad Request", "bad request line\n".into(), false);
    };
    if !version.starts_with("HTTP/1.") {
        return ("400 Bad Request", "HTTP/1.x only\n".into(), false);
    }
    let path = target.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return (
            "404 Not Found",
            "not found: the metrics are at /metrics\n".into(),
            false,
        );
    }
    match method {
        "GET" => ("200 OK", metrics.render(), false),
        "HEAD" => ("200 OK", metrics.render(), true),
        _ => ("405 Method Not Allowed", "GET or HEAD only\n".into(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"), Some(27));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn requests_are_routed() {
        let m = Metrics::new("test");
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n", &m).0, "200 OK");
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n", &m).0, "200 OK");
        assert!(route(b"HEAD /metrics HTTP/1.1\r\n\r\n", &m).2);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n", &m).0, "404 Not Found");
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n", &m).0,
            "405 Method Not Allowed"
        );
        assert_eq!(route(b"GET /metrics\r\n\r\n", &m).0, "400 Bad Request");
        assert_eq!(route(b"GET /metrics SPDY/3\r\n\r\n", &m).0, "400 Bad Request");
        assert_eq!(route(b"\xff\xfe\r\n\r\n", &m).0, "400 Bad Request");
    }
}
