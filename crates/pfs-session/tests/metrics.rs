//! The metrics endpoint: scraped during a real transfer it shows the
//! session and its bytes; its text is Prometheus exposition (the line
//! grammar, checked here); hostile peers (huge, trickled, flooding) cost
//! it a bounded amount and never stop the server from serving.

use std::collections::HashMap;
use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pfs_exec::{Pattern, ScheduleSpec, Total};
use pfs_session::metrics::{Endpoint, EndpointConfig, Metrics};
use pfs_session::{send_session, serve, GramSenderConfig, ServerConfig};
use pfs_transport::{TcpConfig, TcpListener, TcpTransport, Transport};
use pfs_wire::{IntegrityAlg, Mode};

mod common;
use common::view;

const BLOB_LEN: usize = 4 << 20;

/// Longest any wait in these tests may take before it fails the test.
const GUARD: Duration = Duration::from_secs(60);

/// `GET path` on `addr`: (status line, body); `None` if the endpoint
/// closed the connection without an answer.
fn get(addr: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(GUARD)).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: test\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

fn scrape(addr: SocketAddr) -> String {
    let (status, body) = get(addr, "/metrics").expect("an answer");
    assert_eq!(status, "HTTP/1.1 200 OK");
    check_exposition(&body);
    body
}

/// The value of the sample `series`.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A label's name and value.
type Label = (String, String);

/// A sample: its name, labels and value.
type Sample = (String, Vec<Label>, f64);

/// Parses `{k="v",…}` at the start of `s`: the labels and the rest.
fn labels(s: &str) -> (Vec<Label>, &str) {
    let Some(mut rest) = s.strip_prefix('{') else {
        return (Vec::new(), s);
    };
    let mut out = Vec::new();
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return (out, r);
        }
        let eq = rest.find('=').expect("label name then =");
        let name = &rest[..eq];
        assert!(is_name(name) && !name.starts_with("__"), "label name {name:?}");
        rest = rest[eq + 1..].strip_prefix('"').expect("a quoted label value");
        let mut v = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next().expect("an unterminated label value") {
                (i, '"') => break i,
                (_, '\\') => match chars.next().expect("an escape").1 {
                    'n' => v.push('\n'),
                    c @ ('\\' | '"') => v.push(c),
                    c => panic!("bad escape \\{c}"),
                },
                (_, '\n') => panic!("raw newline in a label value"),
                (_, c) => v.push(c),
            }
        };
        out.push((name.to_string(), v));
        rest = &rest[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// Checks the text format 0.0.4 line by line: HELP and TYPE lines, one
/// TYPE per family before its samples, sample names of that family,
/// label syntax, float values; a histogram's buckets cumulative, ending
/// at `+Inf` equal to its `_count`. Returns the samples.
fn check_exposition(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "the text ends with a newline");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut current: Option<(String, String)> = None;
    let mut samples = Vec::new();
    for line in text.lines() {
        assert!(!line.is_empty(), "no empty lines");
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name) = (parts.next().unwrap(), parts.next().expect("a metric name"));
            assert!(is_name(name), "{line}");
            if kw == "TYPE" {
                let kind = parts.next().expect("a type");
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                    "{line}"
                );
                assert!(
                    types.insert(name.into(), kind.into()).is_none(),
                    "TYPE twice: {line}"
                );
                current = Some((name.into(), kind.into()));
            } else {
                assert_eq!(kw, "HELP", "{line}");
            }
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let end = line.find(['{', ' ']).expect("a name then labels or a value");
        let name = &line[..end];
        assert!(is_name(name), "{line}");
        let (labels, rest) = labels(&line[end..]);
        let value = rest.strip_prefix(' ').expect("one space before the value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (family, kind) = current.as_ref().expect("a TYPE before the samples");
        let ok = match kind.as_str() {
            "histogram" => [
                format!("{family}_bucket"),
                format!("{family}_sum"),
                format!("{family}_count"),
            ]
            .contains(&name.to_string()),
            _ => name == family,
        };
        assert!(ok, "{name} is not of the family {family} ({kind})");
        if name.ends_with("_bucket") {
            assert!(labels.iter().any(|(k, _)| k == "le"), "{line}");
        }
        samples.push((name.to_string(), labels, value));
    }
    // Histograms: cumulative buckets per label set, +Inf last, = _count.
    let mut last: HashMap<Vec<Label>, f64> = HashMap::new();
    for (name, labels, v) in &samples {
        if let Some(base) = name.strip_suffix("_bucket") {
            let key: Vec<_> = labels.iter().filter(|(k, _)| k != "le").cloned().collect();
            let prev = last.insert(key.clone(), *v).unwrap_or(0.0);
            assert!(*v >= prev, "{base} buckets are cumulative");
        } else if name.ends_with("_count") {
            assert_eq!(last.get(labels), Some(v), "{name}: +Inf bucket = count");
        }
    }
    samples
}

/// A client transport that stops writing after `after` writes until told
/// to go on: the session is running, mid-transfer, while the test scrapes.
struct Gate {
    inner: TcpTransport,
    writes: usize,
    after: usize,
    paused: Sender<u64>,
    resume: Receiver<()>,
    written: u64,
}

impl Transport for Gate {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn peer(&self) -> String {
        self.inner.peer()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        self.writes += 1;
        if self.writes == self.after {
            self.paused.send(self.written).unwrap();
            self.resume.recv_timeout(GUARD).unwrap();
        }
        let n = self.inner.write_vectored(bufs)?;
        self.written += n as u64;
        Ok(n)
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
    fn read_ready(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        self.inner.read_ready(buf)
    }
    fn set_read_timeout(&mut self, t: Option<Duration>) -> std::io::Result<()> {
        self.inner.set_read_timeout(t)
    }
    fn set_write_timeout(&mut self, t: Option<Duration>) -> std::io::Result<()> {
        self.inner.set_write_timeout(t)
    }
    fn shutdown_write(&mut self) -> std::io::Result<()> {
        self.inner.shutdown_write()
    }
}

fn sender_cfg() -> GramSenderConfig {
    GramSenderConfig {
        mode: Mode::Payload,
        integrity: IntegrityAlg::Xxh3,
        spec: ScheduleSpec {
            seed: 5,
            desc_per_gram: 16,
            max_len: 4096,
            align: 64,
            pattern: Pattern::Random,
            total: Total::Grams(64),
            blob_len: BLOB_LEN as u64,
        },
        reply_timeout: GUARD,
        log_interval: None,
        session_nonce: 3,
        payload_budget: pfs_session::DEFAULT_PAYLOAD_BUDGET,
        corrections: true,
        integrity_sample: 1,
        catch_up: false,
    }
}

/// Waits until `cond` holds of a scrape; returns that scrape.
fn scrape_until(addr: SocketAddr, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + GUARD;
    loop {
        let text = scrape(addr);
        if cond(&text) {
            return text;
        }
        assert!(Instant::now() < until, "never saw {what}:\n{text}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_scrape_during_a_transfer_shows_the_session_and_its_bytes() {
    let blob = common::blob_bytes(9, BLOB_LEN);
    let metrics = Arc::new(Metrics::new("9.9.9-test"));
    let endpoint = Endpoint::bind("127.0.0.1:0", metrics.clone(), EndpointConfig::default()).unwrap();
    let at = endpoint.local_addr();
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let cfg = ServerConfig {
        max_sessions: Some(1),
        metrics: Some(metrics.clone()),
        ..ServerConfig::default()
    };
    let before = scrape(at);
    assert_eq!(value(&before, "pfs_sessions_active{service=\"blob\"}"), 0.0);
    assert_eq!(value(&before, "pfs_build_info{version=\"9.9.9-test\"}"), 1.0);
    std::thread::scope(|s| {
        let server = s.spawn(|| serve(&listener, &view(&blob), &cfg, &Default::default(), &|_| {}));
        let (paused, on_pause) = channel();
        let (go_on, resume) = channel();
        let sender = s.spawn(|| {
            let inner = TcpTransport::connect(&addr, &TcpConfig::default()).unwrap();
            let mut t = Gate {
                inner,
                writes: 0,
                after: 3,
                paused,
                resume,
                written: 0,
            };
            send_session(&mut t, &view(&blob), &sender_cfg(), &mut |_| {})
        });
        let written = on_pause
            .recv_timeout(GUARD)
            .expect("the sender pauses mid-transfer");
        assert!(written > 0);
        // Mid-transfer: the session is active and its bytes so far show.
        let during = scrape_until(at, "the bytes written so far", |t| {
            value(t, "pfs_wire_bytes_total{service=\"blob\",direction=\"in\"}") >= written as f64
        });
        assert_eq!(value(&during, "pfs_sessions_active{service=\"blob\"}"), 1.0);
        assert_eq!(
            value(&during, "pfs_sessions_total{service=\"blob\",outcome=\"ok\"}"),
            0.0
        );
        assert_eq!(value(&during, "pfs_connections_accepted_total"), 1.0);
        go_on.send(()).unwrap();
        let outcome = sender.join().unwrap().expect("the session completes");
        assert_eq!(server.join().unwrap(), (1, 0));
        let after = scrape(at);
        assert_eq!(value(&after, "pfs_sessions_active{service=\"blob\"}"), 0.0);
        assert_eq!(
            value(&after, "pfs_sessions_total{service=\"blob\",outcome=\"ok\"}"),
            1.0
        );
        assert_eq!(
            value(&after, "pfs_effective_bytes_total{service=\"blob\"}"),
            outcome.report.effective_bytes as f64
        );
        assert!(outcome.report.effective_bytes > 0);
        // A plain connection carries just the frames both ways: what the
        // report counts as its wire bytes.
        let wire_in = value(&after, "pfs_wire_bytes_total{service=\"blob\",direction=\"in\"}");
        let wire_out = value(&after, "pfs_wire_bytes_total{service=\"blob\",direction=\"out\"}");
        assert!(wire_out > 0.0);
        assert_eq!(wire_in + wire_out, outcome.report.wire_bytes as f64);
        assert_eq!(
            value(&after, "pfs_session_duration_seconds_count{service=\"blob\"}"),
            1.0
        );
    });
}

#[test]
fn other_paths_and_methods_are_refused() {
    let m = Arc::new(Metrics::new("t"));
    let ep = Endpoint::bind("127.0.0.1:0", m, EndpointConfig::default()).unwrap();
    let (status, body) = get(ep.local_addr(), "/").unwrap();
    assert!(status.contains("404"), "{status}");
    assert!(body.contains("/metrics"));
    let mut c = TcpStream::connect(ep.local_addr()).unwrap();
    c.set_read_timeout(Some(GUARD)).unwrap();
    c.write_all(b"DELETE /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 405") && text.contains("Allow: GET, HEAD"),
        "{text}"
    );
}

/// What a hostile peer gets: a request over the cap is answered 431 and
/// closed; a trickled one is closed at its deadline unanswered; a flood
/// of silent connections is closed (past the queue at once, the queued
/// ones at their deadline) while the server it reports on keeps serving;
/// afterwards the endpoint answers again.
#[test]
fn hostile_peers_cost_a_bounded_amount() {
    let cfg = EndpointConfig {
        workers: 2,
        queue: 4,
        max_request: 1024,
        timeout: Duration::from_millis(300),
    };
    let m = Arc::new(Metrics::new("t"));
    let ep = Endpoint::bind("127.0.0.1:0", m.clone(), cfg).unwrap();
    let at = ep.local_addr();

    // Huge: twice the cap of header without its end: 431, then closed.
    let mut c = TcpStream::connect(at).unwrap();
    c.set_read_timeout(Some(GUARD)).unwrap();
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.resize(2048, b'a');
    c.write_all(&huge).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    // Half a request line, then silence: closed, unanswered.
    let mut c = TcpStream::connect(at).unwrap();
    c.set_read_timeout(Some(GUARD)).unwrap();
    c.write_all(b"GET /met").unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "a trickled request got {rest:?}");

    // Trickled: a byte every 50 ms, so the request would take 1.2 s; the
    // deadline counts from the accept, so each byte does not move it.
    let mut c = TcpStream::connect(at).unwrap();
    c.set_read_timeout(Some(GUARD)).unwrap();
    for b in b"GET /metrics HTTP/1.1\r\n\r\n" {
        if c.write_all(&[*b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "a trickled request was answered: {rest:?}");

    // A flood of silent connections, and a session served meanwhile.
    let flood: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(at).unwrap()).collect();
    let blob = common::blob_bytes(2, BLOB_LEN);
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let server_cfg = ServerConfig {
        max_sessions: Some(1),
        metrics: Some(m.clone()),
        ..ServerConfig::default()
    };
    std::thread::scope(|s| {
        let server = s.spawn(|| serve(&listener, &view(&blob), &server_cfg, &Default::default(), &|_| {}));
        let mut t = TcpTransport::connect(&addr, &TcpConfig::default()).unwrap();
        send_session(&mut t, &view(&blob), &sender_cfg(), &mut |_| {}).expect("served during the flood");
        assert_eq!(server.join().unwrap(), (1, 0));
    });
    // Every flood connection is closed by the endpoint, none answered.
    for mut c in flood {
        c.set_read_timeout(Some(GUARD)).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert!(got.is_empty());
    }
    let text = scrape(at);
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"blob\",outcome=\"ok\"}"),
        1.0
    );
    drop(ep);
}

/// The exposition checker itself refuses what is not the format.
#[test]
fn the_grammar_check_refuses_bad_lines() {
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\\\"\"} 1\n";
    assert_eq!(check_exposition(good).len(), 1);
    for bad in [
        "a_total 1\n",                              // no TYPE
        "# TYPE a_total counter\na_total{k=v} 1\n", // unquoted
        "# TYPE a_total counter\nb_total 1\n",      // another family
        "# TYPE a_total counter\na_total  1\n",     // two spaces
        "# TYPE a_total counter\na_total one\n",    // not a number
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
    ] {
        let r = std::panic::catch_unwind(|| check_exposition(bad));
        assert!(r.is_err(), "accepted {bad:?}");
    }
}

/// Refusals and failures through a real server: a second client while
/// the one slot is held is refused BUSY (and `max_clients` counted as
/// hit), a client sending garbage fails as a protocol error.
#[test]
fn refusals_and_failures_are_counted_by_kind() {
    let blob = common::blob_bytes(4, BLOB_LEN);
    let metrics = Arc::new(Metrics::new("t"));
    let ep = Endpoint::bind("127.0.0.1:0", metrics.clone(), EndpointConfig::default()).unwrap();
    let at = ep.local_addr();
    let listener = TcpListener::bind("127.0.0.1:0", TcpConfig::default()).unwrap();
    let addr = listener.socket_addr().unwrap().to_string();
    let cfg = ServerConfig {
        max_clients: 1,
        max_sessions: Some(2),
        metrics: Some(metrics.clone()),
        ..ServerConfig::default()
    };
    std::thread::scope(|s| {
        let server = s.spawn(|| serve(&listener, &view(&blob), &cfg, &Default::default(), &|_| {}));
        let (paused, on_pause) = channel();
        let (go_on, resume) = channel();
        let sender = s.spawn(|| {
            let inner = TcpTransport::connect(&addr, &TcpConfig::default()).unwrap();
            let mut t = Gate {
                inner,
                writes: 0,
                after: 3,
                paused,
                resume,
                written: 0,
            };
            send_session(&mut t, &view(&blob), &sender_cfg(), &mut |_| {})
        });
        on_pause
            .recv_timeout(GUARD)
            .expect("the sender pauses mid-transfer");
        // The one slot is held: a second client is told BUSY.
        let mut second = TcpStream::connect(&addr).unwrap();
        second.set_read_timeout(Some(GUARD)).unwrap();
        second
            .write_all(&common::hello_frame(Mode::Offset, BLOB_LEN as u64, [7; 32]))
            .unwrap();
        let mut answer = Vec::new();
        let _ = second.read_to_end(&mut answer);
        assert!(!answer.is_empty(), "the busy client is told why");
        let busy = scrape(at);
        assert_eq!(value(&busy, "pfs_refusals_total{kind=\"busy\"}"), 1.0);
        assert_eq!(value(&busy, "pfs_limits_hit_total{limit=\"max_clients\"}"), 1.0);
        assert_eq!(value(&busy, "pfs_sessions_active{service=\"blob\"}"), 1.0);
        go_on.send(()).unwrap();
        sender.join().unwrap().expect("the first session completes");
        // Garbage where a HELLO belongs.
        let mut bad = TcpStream::connect(&addr).unwrap();
        bad.set_read_timeout(Some(GUARD)).unwrap();
        bad.write_all(&[0xff; 64]).unwrap();
        let _ = bad.shutdown(std::net::Shutdown::Write);
        let _ = bad.read_to_end(&mut Vec::new());
        assert_eq!(server.join().unwrap(), (1, 1));
    });
    let text = scrape(at);
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"blob\",outcome=\"ok\"}"),
        1.0
    );
    assert_eq!(
        value(&text, "pfs_sessions_total{service=\"blob\",outcome=\"failed\"}"),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "pfs_session_errors_total{service=\"blob\",kind=\"protocol\"}"
        ),
        1.0
    );
    assert_eq!(value(&text, "pfs_connections_accepted_total"), 3.0);
}
