//! Checks the blob catch-up test vectors of `docs/wire.md` §16.8 against
//! the codec, read from the document itself: each valid vector decodes to
//! the fields written below and re-encodes to its bytes; each invalid one
//! fails with exactly the error its description names; the block hashes of
//! `catchup-hashes` are those `pfs-blob` computes with the session's key.
//! The set of `catchup-` vectors in the document equals the set checked
//! here (`tests/vectors.rs` checks all the others).

use std::collections::BTreeMap;
use std::path::Path;

use pfs_wire::catchup::{
    BlockHashes, CatchupBegin, CatchupBlocks, CatchupEnd, RegionHashes, RunHead, FLAG_LAST,
};
use pfs_wire::hello::{Hello, HelloAck, ACK_CATCH_UP, HELLO_CATCH_UP};
use pfs_wire::{put_frame, Frame, FrameType, WireError};

/// name → (description, bytes) of every `catchup-` vector.
fn vectors() -> BTreeMap<String, (String, Vec<u8>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire.md");
    let doc = std::fs::read_to_string(&path).expect("docs/wire.md");
    let mut out = BTreeMap::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("#### vector: ") else {
            continue;
        };
        if !(name.starts_with("catchup-") || name.starts_with("invalid-catchup-")) {
            continue;
        }
        let desc = lines
            .by_ref()
            .find(|l| !l.trim().is_empty())
            .expect("description")
            .to_string();
        assert_eq!(lines.next().map(str::trim), Some("```hex"), "vector {name}");
        let mut hex = String::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            hex.extend(l.chars().filter(|c| !c.is_whitespace()));
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        assert!(
            out.insert(name.to_string(), (desc, bytes)).is_none(),
            "{name} twice"
        );
    }
    out
}

fn frame(name: &str) -> (Frame<'static>, &'static [u8]) {
    let v: &'static BTreeMap<_, _> = Box::leak(Box::new(vectors()));
    let (_, bytes) = v
        .get(name)
        .unwrap_or_else(|| panic!("docs/wire.md has no vector {name}"));
    let (f, used) = Frame::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(used, bytes.len(), "{name}: bytes after the frame");
    (f, bytes)
}

fn reframe(t: FrameType, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_frame(&mut out, t, flags, body);
    out
}

/// The example blob of §9: byte i = i mod 251.
fn example(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

const NONCE: u64 = 0x0123_4567_89ab_cdef;
const REPLICA_NONCE: u64 = 0x1122_3344_5566_7788;

#[test]
fn hello_and_ack_with_catch_up() {
    let (f, b) = frame("catchup-hello");
    let h = Hello::parse(f.body).unwrap();
    assert_eq!(h.flags, HELLO_CATCH_UP);
    assert_eq!(
        (h.session_nonce, h.region_size, h.blob_len),
        (NONCE, 65536, 1 << 20)
    );
    let mut body = Vec::new();
    h.emit(&mut body);
    assert_eq!(reframe(FrameType::Hello, 0, &body), b);

    let (f, b) = frame("catchup-hello-ack");
    let a = HelloAck::parse(f.body).unwrap();
    assert_eq!(
        (a.flags, a.sample_interval, a.session_nonce),
        (ACK_CATCH_UP, 0, NONCE)
    );
    let mut body = Vec::new();
    a.emit(&mut body);
    assert_eq!(reframe(FrameType::HelloAck, 0, &body), b);
}

#[test]
fn begin_regions_end() {
    let (f, b) = frame("catchup-begin");
    assert_eq!(f.header.frame_type, FrameType::CatchupBegin);
    let begin = CatchupBegin::parse(f.body).unwrap();
    assert_eq!(
        begin,
        CatchupBegin {
            replica_nonce: REPLICA_NONCE,
            block_size: 4096,
            max_blocks_body: 1 << 20,
            regions: 16,
        }
    );
    assert_eq!(reframe(FrameType::CatchupBegin, 0, &begin.emit()), b);

    let (f, b) = frame("catchup-regions");
    assert_eq!(f.header.flags, FLAG_LAST);
    let r = RegionHashes::parse(f.body).unwrap();
    assert_eq!(r.head, RunHead { first: 14, count: 2 });
    let want: Vec<[u8; 32]> = vec![
        std::array::from_fn(|i| i as u8),
        std::array::from_fn(|i| 32 + i as u8),
    ];
    assert_eq!(r.hashes().copied().collect::<Vec<_>>(), want);
    let mut body = Vec::new();
    RegionHashes::emit(14, want.iter(), &mut body);
    assert_eq!(reframe(FrameType::CatchupRegions, FLAG_LAST, &body), b);

    let (f, b) = frame("catchup-end");
    let e = CatchupEnd::parse(f.body).unwrap();
    assert_eq!(
        e,
        CatchupEnd {
            blocks_compared: 32,
            blocks_moved: 3,
            bytes_moved: 12288,
            root: std::array::from_fn(|i| i as u8),
        }
    );
    assert_eq!(reframe(FrameType::CatchupEnd, 0, &e.emit()), b);
}

#[test]
fn hashes_are_the_keyed_block_hashes() {
    let blob = example(1 << 20);
    let key = pfs_blob::BlockKey::derive(NONCE, REPLICA_NONCE);
    let want = [key.hash(&blob[..4096]), key.hash(&blob[4096..8192])];
    let (f, b) = frame("catchup-hashes");
    assert_eq!(f.header.flags, 0);
    let h = BlockHashes::parse(f.body).unwrap();
    assert_eq!(h.head, RunHead { first: 0, count: 2 });
    assert_eq!(h.hashes().copied().collect::<Vec<_>>(), want);
    let mut body = Vec::new();
    BlockHashes::emit(0, want.iter(), &mut body);
    assert_eq!(reframe(FrameType::CatchupHashes, 0, &body), b);

    let (f, b) = frame("catchup-hashes-last");
    assert_eq!(f.header.flags, FLAG_LAST);
    let h = BlockHashes::parse(f.body).unwrap();
    assert_eq!(h.head, RunHead { first: 0, count: 0 });
    let mut body = Vec::new();
    BlockHashes::emit(0, std::iter::empty(), &mut body);
    assert_eq!(reframe(FrameType::CatchupHashes, FLAG_LAST, &body), b);
}

#[test]
fn blocks_of_a_short_last_block() {
    let blob = example(8200);
    let (f, b) = frame("catchup-blocks");
    assert_eq!(f.header.flags, FLAG_LAST);
    let blocks = CatchupBlocks::parse(f.body, 4096, 8200).unwrap();
    assert_eq!(blocks.head, RunHead { first: 2, count: 1 });
    assert_eq!(blocks.bytes, &blob[8192..]);
    let mut body = blocks.head.emit().to_vec();
    body.extend_from_slice(&blob[8192..]);
    assert_eq!(reframe(FrameType::CatchupBlocks, FLAG_LAST, &body), b);
}

#[test]
fn invalid_vectors_fail_with_their_error() {
    let cases: [(&str, WireError); 5] = [
        ("invalid-catchup-begin-reserved", WireError::ReservedNonZero),
        ("invalid-catchup-regions-empty", WireError::LengthMismatch),
        ("invalid-catchup-hashes-too-many", WireError::TooLarge),
        ("invalid-catchup-blocks-outside", WireError::DescriptorOverflow),
        ("invalid-catchup-end-short", WireError::Truncated),
    ];
    let all = vectors();
    for (name, want) in cases {
        let (desc, _) = &all[name];
        assert!(
            desc.contains(&format!("`{want:?}`")),
            "{name}: the description names {want:?}"
        );
        let (f, _) = frame(name);
        let got = match f.header.frame_type {
            FrameType::CatchupBegin => CatchupBegin::parse(f.body).map(drop),
            FrameType::CatchupRegions => RegionHashes::parse(f.body).map(drop),
            FrameType::CatchupHashes => BlockHashes::parse(f.body).map(drop),
            FrameType::CatchupBlocks => CatchupBlocks::parse(f.body, 4096, 8200).map(drop),
            FrameType::CatchupEnd => CatchupEnd::parse(f.body).map(drop),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(got, Err(want), "{name}");
    }
}

#[test]
fn every_catchup_vector_is_checked() {
    let names: Vec<String> = vectors().into_keys().collect();
    let mut want = vec![
        "catchup-begin",
        "catchup-blocks",
        "catchup-end",
        "catchup-hashes",
        "catchup-hashes-last",
        "catchup-hello",
        "catchup-hello-ack",
        "catchup-regions",
        "invalid-catchup-begin-reserved",
        "invalid-catchup-blocks-outside",
        "invalid-catchup-end-short",
        "invalid-catchup-hashes-too-many",
        "invalid-catchup-regions-empty",
    ];
    want.sort_unstable();
    assert_eq!(names, want);
}
