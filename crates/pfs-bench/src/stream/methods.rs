//! The measurements of `pfs bench stream`: a PacketFS streaming session
//! carrying MESSAGE entries (many per gram), and the socket baselines over
//! TCP loopback — one `send()` per message, a batched `writev` loop, a
//! 64-byte ping-pong. Each side runs on its own thread and reads its own
//! CPU time (`getrusage(RUSAGE_THREAD)`).

use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use packetfs::blob::{study_blob, Blob, OpenedBlob};
use packetfs::endpoint::Endpoint;
use packetfs::stream::{
    Entry, GramEntries, Offer, Publication, PublicationConfig, SubscriberBlob, Subscription,
    SubscriptionConfig,
};
use packetfs::transport::Listener;
use pfs_sys::usage::thread_usage;

/// Largest gram body the PFS rows fill with messages: a gram carries
/// `GRAM_BYTES / size` messages (at least one).
pub const GRAM_BYTES: usize = 64 << 10;

/// Messages per `writev` call of the batched baseline (Linux's `IOV_MAX`).
const IOV_BATCH: usize = 1024;

/// How long a side waits for the other before the row fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// One throughput run: what moved, in how long, at what CPU on each side.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    /// Messages the receiver got.
    pub messages: u64,
    /// Message bytes the receiver got.
    pub bytes: u64,
    /// From the sender's first message to the receiver holding the last.
    pub secs: f64,
    /// CPU seconds (user + system) of the sending thread.
    pub sender_cpu_s: f64,
    /// CPU seconds of the receiving thread.
    pub receiver_cpu_s: f64,
}

/// The blob both sides of a PFS row need (the same length and bytes):
/// messages never touch it, so what its backing warns (a 1 MiB mapping
/// gets no huge pages) says nothing about this study and is not printed.
fn message_blob() -> anyhow::Result<OpenedBlob> {
    let (blob, setup) = Blob::open_or_create(&study_blob(1 << 20, 64, None))?;
    Ok(OpenedBlob { blob, setup })
}

/// What a receiving thread returns: messages, bytes, its CPU seconds.
type Received = (u64, u64, f64);

fn joined(h: std::thread::ScopedJoinHandle<'_, anyhow::Result<Received>>) -> anyhow::Result<Received> {
    h.join().map_err(|_| anyhow!("the receiving thread panicked"))?
}

/// `messages` messages of `size` bytes over a streaming session at
/// `endpoint` (`tcp:127.0.0.1:0`, `unix:PATH` …), `GRAM_BYTES / size` per
/// gram, the subscriber's handler counting them.
pub fn pfs(endpoint: &str, size: usize, messages: u64) -> anyhow::Result<Flow> {
    let (primary, mut replica) = (message_blob()?, message_blob()?);
    let listener = endpoint.parse::<Endpoint>()?.listen()?;
    let target = Endpoint::bound(&listener).target();
    let per_gram = (GRAM_BYTES / size).max(1) as u64;
    let message = vec![0x5au8; size];
    std::thread::scope(|s| {
        let sub = s.spawn(move || -> anyhow::Result<Received> {
            let before = thread_usage();
            let conn = listener.accept()?;
            let blob = SubscriberBlob::of(&mut replica.blob);
            let mut sub = Subscription::accept(conn, blob, SubscriptionConfig::default())?;
            let (mut count, mut bytes) = (0u64, 0u64);
            sub.run(&mut |g: &mut GramEntries<'_>| {
                while let Some(e) = g.next_entry() {
                    if let Entry::Message(m) = e {
                        count += 1;
                        bytes += m.len() as u64;
                    }
                }
            })?;
            Ok((count, bytes, thread_usage().since(&before).cpu_seconds()))
        });
        let before = thread_usage();
        let mut publication = Publication::connect(&target, &primary.view(), PublicationConfig::default())
            .context("connecting the publication")?;
        let start = Instant::now();
        let mut sent = 0;
        while sent < messages {
            let n = per_gram.min(messages - sent);
            let offer = publication.offer_blocking(PATIENCE, |g| {
                for _ in 0..n {
                    g.message(&message);
                }
            })?;
            if offer == Offer::BackPressure {
                bail!("the subscriber applied nothing for {} s", PATIENCE.as_secs());
            }
            sent += n;
        }
        // `close` returns once the subscriber executed every gram.
        publication.close()?;
        let secs = start.elapsed().as_secs_f64();
        let sender_cpu_s = thread_usage().since(&before).cpu_seconds();
        let (got, bytes, receiver_cpu_s) = joined(sub)?;
        Ok(Flow {
            messages: got,
            bytes,
            secs,
            sender_cpu_s,
            receiver_cpu_s,
        })
    })
}

/// How the socket baseline writes its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// One `send()` (`write`) per message.
    EachMessage,
    /// `writev` of up to [`IOV_BATCH`] messages per call.
    Batched,
}

/// A TCP_NODELAY connection pair on loopback: (client, server side).
fn tcp_pair() -> anyhow::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    for s in [&client, &server] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(PATIENCE))?;
        s.set_write_timeout(Some(PATIENCE))?;
    }
    Ok((client, server))
}

/// `messages` messages of `size` bytes over TCP loopback, written as
/// `writes` says; a reader thread reads exactly their bytes.
pub fn socket(writes: Writes, size: usize, messages: u64) -> anyhow::Result<Flow> {
    let (mut client, mut server) = tcp_pair()?;
    let total = size as u64 * messages;
    let message = vec![0x5au8; size];
    std::thread::scope(|s| {
        let reader = s.spawn(move || -> anyhow::Result<Received> {
            let before = thread_usage();
            let mut buf = vec![0u8; 256 << 10];
            let mut got = 0u64;
            while got < total {
                let want = buf.len().min((total - got) as usize);
                match server.read(&mut buf[..want])? {
                    0 => bail!("the writer closed after {got} of {total} bytes"),
                    n => got += n as u64,
                }
            }
            Ok((
                got / size as u64,
                got,
                thread_usage().since(&before).cpu_seconds(),
            ))
        });
        let before = thread_usage();
        let start = Instant::now();
        match writes {
            Writes::EachMessage => {
                for _ in 0..messages {
                    client.write_all(&message)?;
                }
            }
            Writes::Batched => {
                let mut left = messages;
                while left > 0 {
                    let n = (IOV_BATCH as u64).min(left) as usize;
                    let mut iov: Vec<IoSlice<'_>> = vec![IoSlice::new(&message); n];
                    write_all_vectored(&mut client, &mut iov)?;
                    left -= n as u64;
                }
            }
        }
        let sender_cpu_s = thread_usage().since(&before).cpu_seconds();
        let (got, bytes, receiver_cpu_s) = joined(reader)?;
        Ok(Flow {
            messages: got,
            bytes,
            secs: start.elapsed().as_secs_f64(),
            sender_cpu_s,
            receiver_cpu_s,
        })
    })
}

/// `writev` until every slice is written (a call may take part of them).
fn write_all_vectored(w: &mut TcpStream, mut iov: &mut [IoSlice<'_>]) -> anyhow::Result<()> {
    while !iov.is_empty() {
        let n = w.write_vectored(iov)?;
        if n == 0 {
            bail!("writev wrote nothing");
        }
        IoSlice::advance_slices(&mut iov, n);
    }
    Ok(())
}

/// Round trips not timed before the timed ones (connections and caches warm).
const WARMUP: u64 = 100;

/// 64-byte round trips over a streaming session: `offer` of one message
/// (one gram) → the subscriber's handler → its APPLIED back
/// (`wait_applied`); streams are one-way, so that is the round trip.
/// Returns the timed round trips, nanoseconds, sorted.
pub fn pfs_round_trips(endpoint: &str, size: usize, round_trips: u64) -> anyhow::Result<Vec<u64>> {
    let (primary, mut replica) = (message_blob()?, message_blob()?);
    let listener = endpoint.parse::<Endpoint>()?.listen()?;
    let target = Endpoint::bound(&listener).target();
    let message = vec![0x5au8; size];
    std::thread::scope(|s| {
        let sub = s.spawn(move || -> anyhow::Result<Received> {
            let conn = listener.accept()?;
            let blob = SubscriberBlob::of(&mut replica.blob);
            let mut sub = Subscription::accept(conn, blob, SubscriptionConfig::default())?;
            let mut count = 0u64;
            sub.run(&mut |g: &mut GramEntries<'_>| {
                while let Some(e) = g.next_entry() {
                    count += u64::from(matches!(e, Entry::Message(_)));
                }
            })?;
            Ok((count, 0, 0.0))
        });
        let mut publication = Publication::connect(&target, &primary.view(), PublicationConfig::default())
            .context("connecting the publication")?;
        let mut ns = Vec::with_capacity(round_trips as usize);
        for i in 0..WARMUP + round_trips {
            let start = Instant::now();
            let seq = match publication.offer(|g| {
                g.message(&message);
            })? {
                Offer::Sent { seq } => seq,
                Offer::BackPressure => bail!("back-pressure with no gram in flight"),
            };
            if !publication.wait_applied(seq, PATIENCE)? {
                bail!("gram {seq} not applied within {} s", PATIENCE.as_secs());
            }
            if i >= WARMUP {
                ns.push(start.elapsed().as_nanos() as u64);
            }
        }
        publication.close()?;
        let (got, ..) = joined(sub)?;
        if got != WARMUP + round_trips {
            bail!("the subscriber saw {got} of {} messages", WARMUP + round_trips);
        }
        ns.sort_unstable();
        Ok(ns)
    })
}

/// A plain socket ping-pong over TCP loopback (TCP_NODELAY): `size` bytes
/// there, the same bytes echoed back. Returns the timed round trips, sorted.
pub fn ping_pong(size: usize, round_trips: u64) -> anyhow::Result<Vec<u64>> {
    let (mut client, mut server) = tcp_pair()?;
    std::thread::scope(|s| {
        let echo = s.spawn(move || -> anyhow::Result<Received> {
            let mut buf = vec![0u8; size];
            let mut count = 0;
            loop {
                match server.read_exact(&mut buf) {
                    Ok(()) => server.write_all(&buf)?,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.into()),
                }
                count += 1;
            }
            Ok((count, 0, 0.0))
        });
        let message = vec![0x5au8; size];
        let mut back = vec![0u8; size];
        let mut ns = Vec::with_capacity(round_trips as usize);
        for i in 0..WARMUP + round_trips {
            let start = Instant::now();
            client.write_all(&message)?;
            client.read_exact(&mut back)?;
            if i >= WARMUP {
                ns.push(start.elapsed().as_nanos() as u64);
            }
        }
        client.shutdown(std::net::Shutdown::Write)?;
        joined(echo)?;
        ns.sort_unstable();
        Ok(ns)
    })
}
