//! Blob catch-up (docs/wire.md §16): a replica brought to the source's
//! bytes from an empty, an older and a differently seeded blob, byte-exact;
//! a catch-up cut midway and run again moves only what still differs; a
//! named blob keeps its caught-up fingerprint; hostile frames end the
//! catch-up with the exact error and leave the blob as it was; a gram
//! session with catch-up negotiates it in HELLO and goes on with grams.

use std::io::IoSlice;
use std::time::{Duration, Instant};

use pfs_blob::{Blob, BlobConfig, Fill};
use pfs_exec::{Pattern, ScheduleSpec, Total};
use pfs_session::catchup::{
    catch_up_replica, catch_up_source, BlobReplica, CatchUpConfig, CatchUpReplica, CatchUpSource,
    CatchUpStats, ReplicaHost,
};
use pfs_session::framing::RecvBuf;
use pfs_session::gram::{GramReceiverConfig, GramSenderConfig};
use pfs_session::{receive_session, send_session, BlobView, LocalError, SessionError, SetupTimes};
use pfs_transport::{Transport, UnixTransport};
use pfs_wire::catchup::{BlockHashes, CatchupBegin, CatchupEnd, RegionHashes, RunHead, FLAG_LAST};
use pfs_wire::{put_frame, ErrorCode, FrameType, IntegrityAlg, Mode};

/// 4 MiB in 64 KiB regions (64 of them) and 4 KiB blocks (16 per region).
const LEN: u64 = 4 << 20;
const REGION: u32 = 64 << 10;
const BLOCK: u32 = 4096;

fn blob(fill: Fill) -> Blob {
    Blob::open_or_create(&BlobConfig {
        size: LEN,
        fill,
        prefault: false,
        threads: 1,
        region_size: REGION,
        ..BlobConfig::default()
    })
    .expect("anonymous blob")
    .0
}

/// A blob of `seed` with `blocks` rewritten (their fingerprint regions
/// hashed again): an older or newer copy of the seed's.
fn changed(seed: u64, blocks: &[u64]) -> Blob {
    let mut b = blob(Fill::Seed(seed));
    for &k in blocks {
        let at = (k * u64::from(BLOCK)) as usize;
        b.as_mut_slice()[at..at + 100].fill(k as u8 ^ 0xa5);
    }
    let regions: Vec<usize> = (0..(LEN / u64::from(REGION)) as usize).collect();
    b.rehash_regions(&regions).expect("rehash");
    b
}

fn cfg() -> CatchUpConfig {
    CatchUpConfig {
        block_size: BLOCK,
        idle_timeout: Duration::from_secs(10),
        ..CatchUpConfig::default()
    }
}

/// A transport that fails every write once `left` bytes were written: a
/// source killed midway.
struct Cut {
    inner: UnixTransport,
    left: u64,
}

impl Transport for Cut {
    fn kind(&self) -> &'static str {
        "UNIX"
    }
    fn peer(&self) -> String {
        "cut".into()
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if self.left == 0 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        let n = want.min(self.left as usize);
        let mut flat = Vec::with_capacity(n);
        for b in bufs {
            flat.extend_from_slice(&b[..b.len().min(n - flat.len())]);
        }
        let wrote = self.inner.write_vectored(&[IoSlice::new(&flat)])?;
        self.left -= wrote as u64;
        Ok(wrote)
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
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

/// Runs both drivers over a socket pair; the source's writes stop after
/// `cut` bytes when given.
fn run(
    source: &Blob,
    replica: &Blob,
    cut: Option<u64>,
) -> (
    Result<CatchUpStats, SessionError>,
    Result<CatchUpStats, SessionError>,
) {
    let (a, b) = UnixTransport::pair().expect("socket pair");
    let fp = source.fingerprint();
    std::thread::scope(|s| {
        let src = s.spawn(|| {
            let mut t = Cut {
                inner: a,
                left: cut.unwrap_or(u64::MAX),
            };
            let mut buf = RecvBuf::new(64 << 10);
            let r = catch_up_source(&mut t, &mut buf, source.as_slice(), &fp, 7, &cfg(), &mut |_| {});
            drop(t);
            r
        });
        let mut t = b;
        let mut buf = RecvBuf::new((1 << 20) + (64 << 10));
        let mut host = BlobReplica::new(replica);
        let rep = catch_up_replica(&mut t, &mut buf, &mut host, 7, fp.root, &cfg(), &mut |_| {});
        drop(t);
        (src.join().expect("source thread"), rep)
    })
}

fn assert_same(source: &Blob, replica: &Blob) {
    assert!(
        source.as_slice() == replica.as_slice(),
        "the replica's bytes are the source's"
    );
    assert_eq!(replica.fingerprint().root, source.fingerprint().root);
    assert_eq!(
        replica.recompute_fingerprint(1).root,
        replica.fingerprint().root,
        "the recorded fingerprint is the content's"
    );
}

#[test]
fn from_an_empty_blob() {
    let source = blob(Fill::Seed(1));
    let replica = blob(Fill::None);
    let (s, r) = run(&source, &replica, None);
    let (s, r) = (s.expect("source"), r.expect("replica"));
    assert_same(&source, &replica);
    assert_eq!(r.regions_differing, 64);
    assert_eq!(s.bytes_moved, LEN, "every block differs from zeros");
    assert_eq!(r.bytes_moved, LEN);
    assert_eq!(s.blocks_compared, LEN / u64::from(BLOCK));
}

#[test]
fn from_an_older_copy_only_the_changed_blocks_move() {
    let changed_blocks = [3, 200, 201, 777, 1023];
    let source = changed(9, &changed_blocks);
    let replica = blob(Fill::Seed(9));
    let (s, r) = run(&source, &replica, None);
    let (s, r) = (s.expect("source"), r.expect("replica"));
    assert_same(&source, &replica);
    assert_eq!(s.blocks_moved, changed_blocks.len() as u64);
    assert_eq!(r.blocks_moved, changed_blocks.len() as u64);
    assert_eq!(r.regions_differing, 4, "blocks 200 and 201 share a region");
    assert_eq!(
        r.blocks_compared,
        4 * 16,
        "block hashes only in differing regions"
    );
    // Region hashes (64 × 32 B), 64 block hashes, 5 blocks and a few heads.
    assert!(
        r.wire_bytes < 5 * u64::from(BLOCK) + 64 * 32 + 64 * 16 + 2048,
        "{r:?}"
    );
}

#[test]
fn from_another_seed_and_again_moves_nothing() {
    let source = blob(Fill::Seed(1));
    let replica = blob(Fill::Seed(2));
    let (s, r) = run(&source, &replica, None);
    s.expect("source");
    r.expect("replica");
    assert_same(&source, &replica);
    // The same roots now: a second run compares region hashes only.
    let (s, r) = run(&source, &replica, None);
    let (s, r) = (s.expect("source"), r.expect("replica"));
    assert_eq!(
        (s.blocks_moved, r.blocks_compared, r.regions_differing),
        (0, 0, 0)
    );
    assert_same(&source, &replica);
}

#[test]
fn cut_midway_then_resumed_moves_only_what_still_differs() {
    let source = blob(Fill::Seed(3));
    let replica = blob(Fill::Seed(4));
    let (s, r) = run(&source, &replica, Some(LEN / 2));
    assert!(s.is_err(), "the source's transport was cut");
    let err = r.expect_err("the replica saw the source go");
    assert!(matches!(err, SessionError::PeerClosed { .. }), "{err}");
    // The regions the cut attempt rewrote were hashed again from content.
    assert_eq!(replica.recompute_fingerprint(1).root, replica.fingerprint().root);
    let first = replica
        .as_slice()
        .iter()
        .zip(source.as_slice())
        .filter(|(a, b)| a == b)
        .count();
    assert!(first as u64 > LEN / 4, "the first attempt moved part of the blob");
    let (s, r) = run(&source, &replica, None);
    let (s, r) = (s.expect("source"), r.expect("replica"));
    assert_same(&source, &replica);
    assert!(
        s.bytes_moved < LEN * 3 / 4,
        "only what still differed moved: {s:?}"
    );
    assert!(r.regions_differing < 64, "{r:?}");
}

#[test]
fn a_named_blob_keeps_its_caught_up_fingerprint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let named = |fill| BlobConfig {
        name: Some("replica".into()),
        size: LEN,
        fill,
        prefault: false,
        keep: true,
        threads: 1,
        region_size: REGION,
        dir: Some(dir.path().to_path_buf()),
        ..BlobConfig::default()
    };
    let source = blob(Fill::Seed(5));
    {
        let (replica, _) = Blob::open_or_create(&named(Fill::Seed(6))).expect("named blob");
        let (s, r) = run(&source, &replica, None);
        s.expect("source");
        r.expect("replica");
    }
    // Reopened: the stored fingerprint is the caught-up one, and the blob
    // no longer claims the seed it was filled from.
    assert!(
        Blob::open_or_create(&named(Fill::Seed(6))).is_err(),
        "not seed 6's bytes any more"
    );
    let (again, setup) = Blob::open_or_create(&named(Fill::None)).expect("reopen");
    assert!(setup.reused_existing);
    assert_eq!(again.fingerprint().root, source.fingerprint().root);
    assert!(again.as_slice() == source.as_slice());
}

// ---------------------------------------------------------------------------
// Hostile frames, against the cores

/// A replica host over a plain buffer, its region hashes computed once.
struct Mem {
    data: Vec<u8>,
    regions: Vec<[u8; 32]>,
    invalidated: usize,
}

impl Mem {
    fn new(data: Vec<u8>) -> Self {
        let fp = pfs_blob::Fingerprint::compute(&data, REGION, 1);
        Self {
            data,
            regions: fp.regions,
            invalidated: 0,
        }
    }
}

impl ReplicaHost for Mem {
    fn data(&self) -> &[u8] {
        &self.data
    }
    fn region_size(&self) -> u32 {
        REGION
    }
    fn region_hash(&self, i: usize) -> [u8; 32] {
        self.regions[i]
    }
    fn invalidate(&mut self, regions: &[usize]) -> Result<(), LocalError> {
        self.invalidated += regions.len();
        Ok(())
    }
    fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<(), LocalError> {
        self.data[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
    fn rehash(&mut self, _: &[usize]) -> Result<[u8; 32], LocalError> {
        Ok(pfs_blob::Fingerprint::compute(&self.data, REGION, 1).root)
    }
}

fn frame(t: FrameType, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_frame(&mut out, t, flags, body);
    out
}

/// REGIONS for `hashes` from region `first`.
fn regions_frame(first: u64, hashes: &[[u8; 32]], last: bool) -> Vec<u8> {
    let mut body = Vec::new();
    RegionHashes::emit(first, hashes.iter(), &mut body);
    frame(FrameType::CatchupRegions, if last { FLAG_LAST } else { 0 }, &body)
}

fn blocks_frame(first: u64, count: u32, bytes: &[u8], last: bool) -> Vec<u8> {
    let mut body = RunHead { first, count }.emit().to_vec();
    body.extend_from_slice(bytes);
    frame(FrameType::CatchupBlocks, if last { FLAG_LAST } else { 0 }, &body)
}

/// A replica core past BEGIN, its host holding zeros, and the source's
/// region hashes (of seed 1's bytes): region 0 differs once they arrive.
fn replica_at_regions() -> (CatchUpReplica, Mem, Vec<[u8; 32]>) {
    let source = common_bytes(1);
    let fp = pfs_blob::Fingerprint::compute(&source, REGION, 1);
    let host = Mem::new(vec![0; LEN as usize]);
    let mut core = CatchUpReplica::new(1, 2, fp.root, &cfg(), Instant::now());
    let begin = core.poll_transmit(&host).expect("BEGIN").to_vec();
    assert_eq!(begin[5], FrameType::CatchupBegin as u8);
    assert!(
        core.poll_transmit(&host).is_none(),
        "nothing is asked before region hashes"
    );
    (core, host, fp.regions)
}

fn common_bytes(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; LEN as usize];
    pfs_blob::fill_seeded(&mut v, seed, 1);
    v
}

fn code(e: &SessionError) -> ErrorCode {
    e.code()
}

#[test]
fn replica_refuses_region_hashes_out_of_order_or_past_the_end() {
    let (mut core, mut host, regions) = replica_at_regions();
    let f = regions_frame(1, &regions[1..3], false);
    let e = core
        .handle_input(Instant::now(), &f, &mut host)
        .expect_err("starts at 1");
    assert_eq!(code(&e), ErrorCode::Protocol, "{e}");

    let (mut core, mut host, regions) = replica_at_regions();
    let mut past = regions.clone();
    past.push([0; 32]);
    let f = regions_frame(0, &past, true);
    let e = core
        .handle_input(Instant::now(), &f, &mut host)
        .expect_err("65 regions");
    assert_eq!(code(&e), ErrorCode::OutOfBounds, "{e}");

    let (mut core, mut host, regions) = replica_at_regions();
    let f = regions_frame(0, &regions[..10], true);
    let e = core
        .handle_input(Instant::now(), &f, &mut host)
        .expect_err("LAST at 10 of 64");
    assert_eq!(code(&e), ErrorCode::Protocol, "{e}");
}

/// The replica after all region hashes (every region differs from zeros)
/// and its first run of block hashes (blocks 0..16).
fn replica_asking() -> (CatchUpReplica, Mem) {
    let (mut core, mut host, regions) = replica_at_regions();
    let f = regions_frame(0, &regions, true);
    assert_eq!(core.handle_input(Instant::now(), &f, &mut host).unwrap(), f.len());
    assert_eq!(
        host.invalidated, 64,
        "every region marked before a block can arrive"
    );
    let asked = core.poll_transmit(&host).expect("a HASHES run").to_vec();
    let run = BlockHashes::parse(&asked[16..]).expect("HASHES");
    assert_eq!((run.head.first, run.head.count), (0, 16));
    (core, host)
}

#[test]
fn replica_refuses_hostile_blocks_and_leaves_its_blob() {
    let block = vec![7u8; BLOCK as usize];
    let cases: Vec<(&str, Vec<u8>, ErrorCode)> = vec![
        (
            "outside the blob",
            blocks_frame(1024, 1, &block, true),
            ErrorCode::OutOfBounds,
        ),
        (
            "outside the run asked",
            blocks_frame(16, 1, &block, true),
            ErrorCode::Protocol,
        ),
        (
            "wrong byte count",
            blocks_frame(0, 2, &block, true),
            ErrorCode::BadFrame,
        ),
        (
            "empty without LAST",
            blocks_frame(3, 0, &[], false),
            ErrorCode::Protocol,
        ),
        (
            "over max_blocks_body",
            blocks_frame(0, 16, &vec![1; 16 * BLOCK as usize], false),
            ErrorCode::Limit,
        ),
        (
            "END before the runs are answered",
            frame(FrameType::CatchupEnd, 0, &CatchupEnd::default().emit()),
            ErrorCode::Protocol,
        ),
        ("a gram", frame(FrameType::Gram, 0, &[0; 32]), ErrorCode::Protocol),
    ];
    for (what, f, want) in cases {
        let (mut core, mut host) = replica_asking();
        let small = CatchUpConfig {
            max_blocks_body: 8 * BLOCK + 16,
            ..cfg()
        };
        if want == ErrorCode::Limit {
            core = CatchUpReplica::new(1, 2, [0; 32], &small, Instant::now());
            let _ = core.poll_transmit(&host);
        }
        let e = core.handle_input(Instant::now(), &f, &mut host).expect_err(what);
        assert_eq!(code(&e), want, "{what}: {e}");
        assert!(host.data.iter().all(|&b| b == 0), "{what}: the blob is unchanged");
    }
}

#[test]
fn a_source_that_trickles_a_frame_loses_the_catch_up_at_its_deadline() {
    let (mut core, mut host) = replica_asking();
    let t0 = Instant::now();
    let f = blocks_frame(4, 1, &[7u8; BLOCK as usize], false);
    // Half a frame, a byte at a time: nothing is taken, the deadline stays.
    for n in 1..f.len() / 2 {
        assert_eq!(
            core.handle_input(t0 + Duration::from_secs(n as u64), &f[..n], &mut host)
                .unwrap(),
            0
        );
    }
    let deadline = core.poll_timeout().expect("a deadline while running");
    assert!(deadline <= t0 + cfg().idle_timeout, "partial frames earn no time");
    let e = core.handle_timeout(deadline).expect_err("past the deadline");
    assert!(matches!(e, SessionError::TimedOut { .. }), "{e}");
    assert!(host.data.iter().all(|&b| b == 0), "nothing written");
}

#[test]
fn replica_takes_blocks_in_order_then_refuses_going_back() {
    let (mut core, mut host) = replica_asking();
    let block = vec![7u8; BLOCK as usize];
    let f = blocks_frame(4, 1, &block, false);
    assert_eq!(core.handle_input(Instant::now(), &f, &mut host).unwrap(), f.len());
    assert_eq!(&host.data[4 * BLOCK as usize..5 * BLOCK as usize], &block[..]);
    let back = blocks_frame(2, 1, &block, false);
    let e = core
        .handle_input(Instant::now(), &back, &mut host)
        .expect_err("before the cursor");
    assert_eq!(code(&e), ErrorCode::Protocol, "{e}");
}

#[test]
fn source_refuses_bad_begin_and_hashes_outside() {
    let data = common_bytes(1);
    let fp = pfs_blob::Fingerprint::compute(&data, REGION, 1);
    let begin = |block_size, regions| {
        frame(
            FrameType::CatchupBegin,
            0,
            &CatchupBegin {
                replica_nonce: 2,
                block_size,
                max_blocks_body: 1 << 20,
                regions,
            }
            .emit(),
        )
    };
    for (bs, regions, want) in [
        (3000, 64, ErrorCode::Unsupported),
        (2048, 64, ErrorCode::Unsupported),
        (BLOCK, 63, ErrorCode::BlobMismatch),
    ] {
        let mut src = CatchUpSource::new(&data, &fp, 1, &cfg(), Instant::now());
        let e = src
            .handle_input(Instant::now(), &begin(bs, regions))
            .expect_err("bad BEGIN");
        assert_eq!(code(&e), want, "{e}");
    }
    let mut src = CatchUpSource::new(&data, &fp, 1, &cfg(), Instant::now());
    src.handle_input(Instant::now(), &begin(BLOCK, 64)).unwrap();
    while src.poll_transmit(Instant::now()).is_some() {}
    for (first, count, want) in [
        (1020u64, 8u32, ErrorCode::OutOfBounds),
        (14, 4, ErrorCode::OutOfBounds),
    ] {
        let mut body = Vec::new();
        let hashes = vec![[0u8; 16]; count as usize];
        BlockHashes::emit(first, hashes.iter(), &mut body);
        let f = frame(FrameType::CatchupHashes, 0, &body);
        let mut s = CatchUpSource::new(&data, &fp, 1, &cfg(), Instant::now());
        s.handle_input(Instant::now(), &begin(BLOCK, 64)).unwrap();
        while s.poll_transmit(Instant::now()).is_some() {}
        let e = s.handle_input(Instant::now(), &f).expect_err("outside");
        assert_eq!(code(&e), want, "{first}+{count}: {e}");
    }
    let mut body = Vec::new();
    BlockHashes::emit(0, std::iter::empty(), &mut body);
    let f = frame(FrameType::CatchupHashes, 0, &body);
    let e = src
        .handle_input(Instant::now(), &f)
        .expect_err("empty without LAST");
    assert_eq!(code(&e), ErrorCode::Protocol, "{e}");
}

// ---------------------------------------------------------------------------
// In a gram session

fn view(b: &Blob) -> BlobView<'_> {
    let fp = b.fingerprint();
    BlobView {
        data: b.as_slice(),
        fingerprint: fp.root,
        region_size: fp.region_size,
        backing: b.backing().kind,
        page_size: b.backing().page_size,
        setup: SetupTimes::default(),
        writer: Some(b.writer()),
        live: Some(b),
    }
}

fn sender_cfg(catch_up: bool) -> GramSenderConfig {
    GramSenderConfig {
        mode: Mode::Offset,
        integrity: IntegrityAlg::Xxh3,
        spec: ScheduleSpec {
            seed: 3,
            desc_per_gram: 64,
            max_len: 4096,
            align: 64,
            pattern: Pattern::Random,
            total: Total::Grams(20),
            blob_len: LEN,
        },
        reply_timeout: Duration::from_secs(10),
        log_interval: None,
        session_nonce: 11,
        payload_budget: u64::MAX,
        corrections: true,
        integrity_sample: 1,
        catch_up,
    }
}

fn session(
    sender: &Blob,
    receiver: &Blob,
    catch_up: bool,
    allow: bool,
) -> (
    Result<pfs_session::GramSenderOutcome, SessionError>,
    Result<pfs_session::GramReceiverOutcome, SessionError>,
) {
    let (mut a, mut b) = UnixTransport::pair().expect("socket pair");
    let rcfg = GramReceiverConfig {
        catch_up: allow,
        catch_up_cfg: cfg(),
        ..GramReceiverConfig::default()
    };
    std::thread::scope(|s| {
        let send = s.spawn(|| send_session(&mut a, &view(sender), &sender_cfg(catch_up), &mut |_| {}));
        let recv = receive_session(&mut b, &view(receiver), &rcfg, &mut |_| {});
        drop(b);
        (send.join().expect("sender thread"), recv)
    })
}

#[test]
fn gram_session_catches_up_then_every_gram_matches() {
    let sender = blob(Fill::Seed(1));
    let receiver = blob(Fill::Seed(2));
    let (s, r) = session(&sender, &receiver, true, true);
    let (s, r) = (s.expect("sender"), r.expect("receiver"));
    assert_same(&sender, &receiver);
    assert_eq!(s.report.integrity_ok, 1);
    assert_eq!(s.report.mismatched_grams, 0);
    assert_eq!(s.report.grams, 20);
    let (sc, rc) = (
        s.catch_up.expect("sender catch-up"),
        r.catch_up.expect("receiver catch-up"),
    );
    assert_eq!(sc.bytes_moved, rc.bytes_moved);
    assert!(sc.bytes_moved > 0);
    // Equal blobs now: the next session needs no catch-up.
    let (s, _) = session(&sender, &receiver, true, true);
    assert!(s.expect("sender").catch_up.is_none());
}

#[test]
fn a_receiver_that_does_not_allow_catch_up_refuses_and_keeps_its_blob() {
    let sender = blob(Fill::Seed(1));
    let receiver = blob(Fill::Seed(2));
    let before = receiver.fingerprint().root;
    let (s, r) = session(&sender, &receiver, true, false);
    match s.expect_err("refused") {
        SessionError::Refused { code, message } => {
            assert_eq!(code, ErrorCode::BlobMismatch as u16);
            assert!(message.contains("--allow-catch-up"), "{message}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(r.expect_err("refused").code(), ErrorCode::BlobMismatch);
    assert_eq!(receiver.fingerprint().root, before);
    // And a sender that does not offer it gets the old refusal.
    let (s, _) = session(&sender, &receiver, false, true);
    assert!(matches!(s, Err(SessionError::Refused { code, .. }) if code == ErrorCode::BlobMismatch as u16));
}

#[test]
fn a_hostile_source_ends_its_session_and_the_receiver_serves_the_next() {
    let good = blob(Fill::Seed(1));
    let receiver = blob(Fill::Seed(2));
    let rcfg = GramReceiverConfig {
        catch_up: true,
        catch_up_cfg: cfg(),
        ..GramReceiverConfig::default()
    };
    // A HELLO offering catch-up, then blocks nobody asked for.
    let (mut a, mut b) = UnixTransport::pair().expect("socket pair");
    let mut hello = Vec::new();
    pfs_wire::Hello {
        mode: Mode::Offset,
        encoding: Mode::Offset.encoding(),
        integrity: IntegrityAlg::Xxh3,
        auth_method: 0,
        flags: pfs_wire::hello::HELLO_CATCH_UP,
        sample_interval: 0,
        max_desc_per_gram: 64,
        max_desc_len: 4096,
        blob_len: LEN,
        region_size: REGION,
        fingerprint: good.fingerprint().root,
        session_nonce: 5,
        planned_bytes: 0,
        planned_grams: 0,
        auth: &[],
    }
    .emit(&mut hello);
    a.write_all(&frame(FrameType::Hello, 0, &hello)).unwrap();
    a.write_all(&blocks_frame(0, 1, &[9; BLOCK as usize], true))
        .unwrap();
    let e = receive_session(&mut b, &view(&receiver), &rcfg, &mut |_| {}).expect_err("hostile");
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert_eq!(
        receiver.recompute_fingerprint(1).root,
        receiver.fingerprint().root
    );
    drop((a, b));
    let (s, r) = session(&good, &receiver, true, true);
    s.expect("sender");
    r.expect("receiver");
    assert_same(&good, &receiver);
}
