//! Checks the test vectors of `docs/wire.md` against the codec.
//!
//! Every vector is read from the document itself, so the spec and the code
//! cannot drift apart: each valid vector is decoded, its fields compared with
//! the values written below, and re-encoded to the same bytes; each invalid
//! vector must fail with exactly the `WireError` its description names. The
//! set of vector names in the document must equal the set checked here.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use pfs_wire::control::{ErrorCode, ErrorFrame, Report, SenderSummary, NO_MISMATCH};
use pfs_wire::corrections::{
    parse_report, put_range, CorrectionHead, CorrectionsReport, GramNak, GramRepair, CORRECTIONS_FLAG_REPAIR,
};
use pfs_wire::desc::{encode_table, Descriptor, Encoding};
use pfs_wire::files::{
    parse_chunks, parse_index, parse_index_request, parse_nak, parse_probe, parse_probe_reply, ChunkData,
    EntryKind, FileDone, FileDrop, FileEntry, FilesAccept, FilesHello, FilesReport, Plan, PlanAck,
    ProbeEntry, ProbeHead, FLAG_FILES_REPORT, FLAG_LAST,
};
use pfs_wire::frame::{Frame, FrameHeader, FrameType, FLAG_COMPLETE_REPORT, FRAME_HEADER_LEN};
use pfs_wire::gram::{Gram, GramHeader, GRAM_FLAG_PAYLOAD};
use pfs_wire::hello::{Hello, HelloAck};
use pfs_wire::hello::{ACK_CORRECTIONS, ACK_REPAIR, HELLO_CORRECTIONS};
use pfs_wire::mount;
use pfs_wire::stream;
use pfs_wire::varint::{get_varint, put_varint, zigzag_decode, zigzag_encode};
use pfs_wire::{put_frame, IntegrityAlg, Mode, WireError};

// ---------------------------------------------------------------------------
// Reading the document

#[derive(Debug)]
struct Vector {
    description: String,
    bytes: Vec<u8>,
}

fn parse_hex(name: &str, text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(
        digits.chunks_exact(2).remainder().is_empty(),
        "vector {name}: odd number of hex digits"
    );
    digits
        .chunks(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).expect("ASCII");
            u8::from_str_radix(s, 16).unwrap_or_else(|_| panic!("vector {name}: bad hex digits {s:?}"))
        })
        .collect()
}

/// Extracts every `#### vector: NAME` / description / ```hex block.
fn parse_vectors(doc: &str) -> BTreeMap<String, Vector> {
    let mut out = BTreeMap::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("#### vector: ") else {
            continue;
        };
        let name = name.trim().to_string();
        let description = lines
            .by_ref()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_else(|| panic!("vector {name}: no description"))
            .to_string();
        assert!(
            !description.starts_with("```"),
            "vector {name}: description missing"
        );
        let fence = lines.by_ref().map(str::trim).find(|l| !l.is_empty());
        assert_eq!(fence, Some("```hex"), "vector {name}: expected a ```hex block");
        let mut hex = String::new();
        loop {
            let l = lines
                .next()
                .unwrap_or_else(|| panic!("vector {name}: unclosed block"));
            if l.trim() == "```" {
                break;
            }
            hex.push_str(l);
            hex.push('\n');
        }
        let bytes = parse_hex(&name, &hex);
        let v = Vector { description, bytes };
        assert!(
            out.insert(name.clone(), v).is_none(),
            "vector {name} appears twice"
        );
    }
    out
}

fn vectors() -> &'static BTreeMap<String, Vector> {
    static VECTORS: OnceLock<BTreeMap<String, Vector>> = OnceLock::new();
    VECTORS.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire.md");
        let doc =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        parse_vectors(&doc)
    })
}

fn vector(name: &str) -> &'static Vector {
    vectors()
        .get(name)
        .unwrap_or_else(|| panic!("docs/wire.md has no vector {name}"))
}

fn bytes(name: &str) -> &'static [u8] {
    &vector(name).bytes
}

/// Parses one whole frame that must use every byte of `b`.
fn whole_frame(name: &str, b: &'static [u8]) -> Frame<'static> {
    let (frame, used) = Frame::parse(b).unwrap_or_else(|e| panic!("vector {name}: {e:?}"));
    assert_eq!(used, b.len(), "vector {name}: bytes after the frame");
    frame
}

fn frame_bytes(t: FrameType, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    put_frame(&mut out, t, flags, body);
    out
}

// ---------------------------------------------------------------------------
// The example blob and digests that the test vectors use (docs/wire.md §9)

const EXAMPLE_BLOB_LEN: u64 = 1 << 20;

fn example_blob() -> Vec<u8> {
    (0..EXAMPLE_BLOB_LEN).map(|i| (i % 251) as u8).collect()
}

fn effective_bytes(blob: &[u8], descs: &[Descriptor]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in descs {
        let start = usize::try_from(d.offset).unwrap();
        out.extend_from_slice(&blob[start..start + d.len as usize]);
    }
    out
}

fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[test]
fn fnv1a_reference_values() {
    // docs/wire.md §6.1
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
}

fn d(offset: u64, len: u32) -> Descriptor {
    Descriptor { offset, len }
}

// ---------------------------------------------------------------------------
// Valid vectors

const FRAME_HEADERS: &[(&str, FrameType, u16, u32)] = &[
    ("frame-header-hello", FrameType::Hello, 0, 96),
    ("frame-header-hello-ack", FrameType::HelloAck, 0, 48),
    ("frame-header-gram", FrameType::Gram, 0, 68),
    ("frame-header-complete", FrameType::Complete, 0, 48),
    (
        "frame-header-complete-report",
        FrameType::Complete,
        FLAG_COMPLETE_REPORT,
        160,
    ),
    ("frame-header-error", FrameType::Error, 0, 35),
    ("frame-header-ack", FrameType::Ack, 0, 0),
    ("frame-header-nak", FrameType::Nak, 0, 0),
    ("frame-header-repair", FrameType::Repair, 0, 0),
];

#[test]
fn frame_header_vectors() {
    for &(name, frame_type, flags, length) in FRAME_HEADERS {
        let b = bytes(name);
        assert_eq!(b.len(), FRAME_HEADER_LEN, "vector {name}");
        let expected = FrameHeader {
            frame_type,
            flags,
            length,
        };
        assert_eq!(FrameHeader::parse(b), Ok(expected), "vector {name}");
        assert_eq!(expected.emit()[..], *b, "vector {name}: re-encode");
    }
}

struct GramCase {
    name: &'static str,
    header: GramHeader,
    descs: Vec<Descriptor>,
    payload: bool,
}

fn gram_cases() -> Vec<GramCase> {
    let d3 = vec![d(4096, 512), d(4608, 256), d(1024, 100)];
    let seq8: Vec<Descriptor> = (0..8u64).map(|i| d(i * 4096, 4096)).collect();
    vec![
        GramCase {
            name: "gram-absolute-3",
            header: GramHeader {
                seq: 0,
                desc_count: 3,
                table_len: 36,
                payload_len: 0,
                encoding: Encoding::Absolute,
                integrity: IntegrityAlg::Fnv1a,
                flags: 0,
                integrity_value: 0x656d_b235_8f74_5339,
            },
            descs: d3.clone(),
            payload: false,
        },
        GramCase {
            name: "gram-arithmetic-3",
            header: GramHeader {
                seq: 0,
                desc_count: 3,
                table_len: 16,
                payload_len: 0,
                encoding: Encoding::Arithmetic,
                integrity: IntegrityAlg::Xxh3,
                flags: 0,
                integrity_value: 0x1f57_0b5e_9e7d_bc8e,
            },
            descs: d3,
            payload: false,
        },
        GramCase {
            name: "gram-arithmetic-sequential",
            header: GramHeader {
                seq: 1,
                desc_count: 8,
                table_len: 31,
                payload_len: 0,
                encoding: Encoding::Arithmetic,
                integrity: IntegrityAlg::Xxh3,
                flags: 0,
                integrity_value: 0xe39c_dfc7_9c86_3d7c,
            },
            descs: seq8,
            payload: false,
        },
        GramCase {
            name: "gram-payload",
            header: GramHeader {
                seq: 5,
                desc_count: 2,
                table_len: 24,
                payload_len: 8,
                encoding: Encoding::Absolute,
                integrity: IntegrityAlg::Fnv1a,
                flags: GRAM_FLAG_PAYLOAD,
                integrity_value: 0x6b75_5cbb_e28b_b832,
            },
            descs: vec![d(16, 5), d(32, 3)],
            payload: true,
        },
    ]
}

#[test]
fn gram_vectors() {
    let blob = example_blob();
    for case in gram_cases() {
        let name = case.name;
        let b = bytes(name);
        let frame = whole_frame(name, b);
        assert_eq!(frame.header.frame_type, FrameType::Gram, "vector {name}");
        assert_eq!(frame.header.flags, 0, "vector {name}");
        let gram = Gram::parse(frame.body).unwrap_or_else(|e| panic!("vector {name}: {e:?}"));
        assert_eq!(gram.header, case.header, "vector {name}: gram header");
        let descs: Vec<Descriptor> = gram
            .descriptors()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("vector {name}: {e:?}"));
        assert_eq!(descs, case.descs, "vector {name}: descriptors");

        // Every descriptor is inside the example blob, and the digest is of
        // the referenced bytes (fnv1a is recomputed here; xxh3 is compared
        // with the literal value above, since this crate has no xxh3).
        for desc in &descs {
            assert!(
                desc.end().unwrap() <= EXAMPLE_BLOB_LEN,
                "vector {name}: out of bounds"
            );
        }
        let effective = effective_bytes(&blob, &descs);
        if case.header.integrity == IntegrityAlg::Fnv1a {
            assert_eq!(
                fnv1a(&effective),
                case.header.integrity_value,
                "vector {name}: digest"
            );
        }
        if case.payload {
            assert_eq!(gram.payload, &effective[..], "vector {name}: payload slab");
        } else {
            assert!(gram.payload.is_empty(), "vector {name}: unexpected slab");
        }

        // Re-encode from the decoded values.
        let table = encode_table(case.header.encoding, &descs).unwrap();
        assert_eq!(table, gram.table, "vector {name}: table re-encode");
        let mut body = case.header.emit().to_vec();
        body.extend_from_slice(&table);
        body.extend_from_slice(gram.payload);
        assert_eq!(
            frame_bytes(FrameType::Gram, 0, &body),
            b,
            "vector {name}: re-encode"
        );
    }
}

#[test]
fn sequential_arithmetic_table_is_compact() {
    let frame = whole_frame("gram-arithmetic-sequential", bytes("gram-arithmetic-sequential"));
    let gram = Gram::parse(frame.body).unwrap();
    assert!(gram.table.len() <= 4 * gram.header.desc_count as usize);
    // The same descriptors in absolute encoding cost 12 bytes each.
    let descs: Vec<Descriptor> = gram.descriptors().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        encode_table(Encoding::Absolute, &descs).unwrap().len(),
        12 * descs.len()
    );
}

#[test]
fn frame_header_gram_matches_gram_absolute_3() {
    assert_eq!(
        bytes("frame-header-gram"),
        &bytes("gram-absolute-3")[..FRAME_HEADER_LEN]
    );
    assert_eq!(
        bytes("frame-header-error"),
        &bytes("error-out-of-bounds")[..FRAME_HEADER_LEN]
    );
}

const NONCE: u64 = 0x0123_4567_89ab_cdef;

#[test]
fn hello_vector() {
    let name = "hello";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    assert_eq!(
        frame.header,
        FrameHeader {
            frame_type: FrameType::Hello,
            flags: 0,
            length: 96
        }
    );
    assert_eq!(&b[..FRAME_HEADER_LEN], bytes("frame-header-hello"));
    let hello = Hello::parse(frame.body).unwrap();
    let fingerprint: [u8; 32] = core::array::from_fn(|i| i as u8);
    let expected = Hello {
        mode: Mode::Arith,
        encoding: Encoding::Arithmetic,
        integrity: IntegrityAlg::Xxh3,
        auth_method: 0,
        flags: 0,
        sample_interval: 0,
        max_desc_per_gram: 1024,
        max_desc_len: 4096,
        blob_len: EXAMPLE_BLOB_LEN,
        region_size: 65536,
        fingerprint,
        session_nonce: NONCE,
        planned_bytes: 33636,
        planned_grams: 2,
        auth: &[],
    };
    assert_eq!(hello, expected);
    assert_eq!(hello.mode.encoding(), hello.encoding);
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(frame_bytes(FrameType::Hello, 0, &body), b, "re-encode");
}

#[test]
fn hello_ack_vector() {
    let name = "hello-ack";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    assert_eq!(
        frame.header,
        FrameHeader {
            frame_type: FrameType::HelloAck,
            flags: 0,
            length: 48
        }
    );
    assert_eq!(&b[..FRAME_HEADER_LEN], bytes("frame-header-hello-ack"));
    let ack = HelloAck::parse(frame.body).unwrap();
    let expected = HelloAck {
        max_gram_body: 1 << 20,
        max_desc_count: 65536,
        max_table_len: 786_432,
        max_payload_len: 1 << 20,
        blob_len: EXAMPLE_BLOB_LEN,
        page_size: 4096,
        backing: 2,
        auth_method: 0,
        flags: 0,
        sample_interval: 0,
        session_nonce: NONCE,
        auth: &[],
    };
    assert_eq!(ack, expected);
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(frame_bytes(FrameType::HelloAck, 0, &body), b, "re-encode");
}

const E2E: u64 = 0x1e72_ba1b_db3f_adad;

#[test]
fn complete_summary_vector() {
    let name = "complete-summary";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    assert_eq!(
        frame.header,
        FrameHeader {
            frame_type: FrameType::Complete,
            flags: 0,
            length: 48
        }
    );
    assert_eq!(&b[..FRAME_HEADER_LEN], bytes("frame-header-complete"));
    let summary = SenderSummary::parse(frame.body).unwrap();
    // The example session: HELLO and the two arithmetic grams were written
    // before this frame.
    let sent = ["hello", "gram-arithmetic-3", "gram-arithmetic-sequential"]
        .iter()
        .map(|n| bytes(n).len() as u64)
        .sum::<u64>();
    let expected = SenderSummary {
        grams: 2,
        descriptors: 11,
        effective_bytes: (512 + 256 + 100) + 8 * 4096,
        e2e_digest: E2E,
        wire_bytes_sent: sent,
        payload_bytes: 0,
    };
    assert_eq!(sent, 255);
    assert_eq!(summary, expected);
    assert_eq!(
        frame_bytes(FrameType::Complete, 0, &expected.emit()),
        b,
        "re-encode"
    );
}

#[test]
fn complete_report_vector() {
    let name = "complete-report";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    let header = FrameHeader {
        frame_type: FrameType::Complete,
        flags: FLAG_COMPLETE_REPORT,
        length: 160,
    };
    assert_eq!(frame.header, header);
    assert_eq!(&b[..FRAME_HEADER_LEN], bytes("frame-header-complete-report"));
    let report = Report::parse(frame.body).unwrap();
    // Every frame of the example session, both directions: what the receiver
    // read (HELLO, two grams, the sender's COMPLETE) and wrote (HELLO_ACK,
    // this report).
    let frames = [
        "hello",
        "hello-ack",
        "gram-arithmetic-3",
        "gram-arithmetic-sequential",
        "complete-summary",
        "complete-report",
    ];
    let session = frames.iter().map(|n| bytes(n).len() as u64).sum::<u64>();
    let expected = Report {
        effective_bytes: 33636,
        wire_bytes: session,
        grams: 2,
        descriptors: 11,
        payload_bytes: 0,
        elapsed_ns: 1_250_000,
        user_us: 800,
        sys_us: 300,
        max_rss_bytes: 8 << 20,
        nvcsw: 3,
        nivcsw: 1,
        mismatched_grams: 0,
        first_mismatch_seq: NO_MISMATCH,
        e2e_digest: E2E,
        page_size: 4096,
        setup_map_ns: 20_000,
        setup_prefault_ns: 150_000,
        setup_fill_ns: 400_000,
        setup_fingerprint_ns: 300_000,
        mode: Mode::Arith as u8,
        encoding: Encoding::Arithmetic as u8,
        integrity: IntegrityAlg::Xxh3 as u8,
        integrity_ok: 1,
        backing: 2,
    };
    assert_eq!(session, 559);
    assert_eq!(report, expected);
    assert_eq!(
        frame_bytes(FrameType::Complete, FLAG_COMPLETE_REPORT, &expected.emit()),
        b
    );
}

#[test]
fn error_vector() {
    let name = "error-out-of-bounds";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    assert_eq!(frame.header.frame_type, FrameType::Error);
    let e = ErrorFrame::parse(frame.body).unwrap();
    let expected = ErrorFrame {
        code: 4,
        message: "gram 7 desc 2 out of bounds",
    };
    assert_eq!(e, expected);
    assert_eq!(ErrorCode::from_u16(e.code), Some(ErrorCode::OutOfBounds));
    assert_eq!(ErrorCode::OutOfBounds.name(), "OUT_OF_BOUNDS");
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(frame_bytes(FrameType::Error, 0, &body), b, "re-encode");
}

#[test]
fn error_shutting_down_vector() {
    let name = "error-shutting-down";
    let b = bytes(name);
    let frame = whole_frame(name, b);
    assert_eq!(frame.header.frame_type, FrameType::Error);
    let e = ErrorFrame::parse(frame.body).unwrap();
    let expected = ErrorFrame {
        code: 11,
        message: "the server is shutting down; run again to resume",
    };
    assert_eq!(e, expected);
    assert_eq!(ErrorCode::from_u16(e.code), Some(ErrorCode::ShuttingDown));
    assert_eq!(ErrorCode::ShuttingDown.name(), "SHUTTING_DOWN");
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(frame_bytes(FrameType::Error, 0, &body), b, "re-encode");
}

const VARINTS: &[(&str, u64)] = &[
    ("varint-0", 0),
    ("varint-127", 127),
    ("varint-128", 128),
    ("varint-300", 300),
    ("varint-u64-max", u64::MAX),
];

const ZIGZAGS: &[(&str, i64)] = &[
    ("zigzag-0", 0),
    ("zigzag-minus-1", -1),
    ("zigzag-1", 1),
    ("zigzag-minus-64", -64),
    ("zigzag-64", 64),
    ("zigzag-minus-3840", -3840),
    ("zigzag-i64-min", i64::MIN),
];

#[test]
fn varint_vectors() {
    for &(name, value) in VARINTS {
        let b = bytes(name);
        assert_eq!(get_varint(b), Ok((value, b.len())), "vector {name}");
        let mut out = Vec::new();
        put_varint(&mut out, value);
        assert_eq!(out, b, "vector {name}: re-encode");
    }
}

#[test]
fn zigzag_vectors() {
    for &(name, delta) in ZIGZAGS {
        let b = bytes(name);
        let (z, used) = get_varint(b).unwrap_or_else(|e| panic!("vector {name}: {e:?}"));
        assert_eq!(used, b.len(), "vector {name}");
        assert_eq!(zigzag_decode(z), delta, "vector {name}");
        let mut out = Vec::new();
        put_varint(&mut out, zigzag_encode(delta));
        assert_eq!(out, b, "vector {name}: re-encode");
    }
}

// ---------------------------------------------------------------------------
// Invalid vectors

#[derive(Clone, Copy)]
enum As {
    /// One whole frame, then its body by type (docs/wire.md §9).
    Frame,
    /// One varint using all the bytes.
    Varint,
    /// One whole frame of a blob session with the corrections plane
    /// (docs/wire.md §13.9): NAK, REPAIR and the report by §13.
    BlobFrame,
}

const INVALID: &[(&str, As, WireError)] = &[
    ("invalid-bad-magic", As::Frame, WireError::BadMagic),
    ("invalid-bad-crc", As::Frame, WireError::BadHeaderCrc),
    ("invalid-truncated-header", As::Frame, WireError::Truncated),
    (
        "invalid-unsupported-version",
        As::Frame,
        WireError::UnsupportedVersion(2),
    ),
    (
        "invalid-unknown-frame-type",
        As::Frame,
        WireError::UnknownFrameType(255),
    ),
    ("invalid-oversized-control", As::Frame, WireError::TooLarge),
    ("invalid-frame-flags", As::Frame, WireError::BadFlags),
    (
        "invalid-trailing-table-bytes",
        As::Frame,
        WireError::TrailingBytes,
    ),
    ("invalid-table-truncated", As::Frame, WireError::TableTruncated),
    (
        "invalid-noncanonical-varint-in-table",
        As::Frame,
        WireError::VarintNonCanonical,
    ),
    (
        "invalid-arith-negative-offset",
        As::Frame,
        WireError::DescriptorOverflow,
    ),
    (
        "invalid-payload-flag-without-slab",
        As::Frame,
        WireError::BadFlags,
    ),
    (
        "invalid-gram-length-mismatch",
        As::Frame,
        WireError::LengthMismatch,
    ),
    ("invalid-hello-reserved", As::Frame, WireError::ReservedNonZero),
    ("invalid-hello-auth-too-large", As::Frame, WireError::TooLarge),
    ("invalid-error-bad-utf8", As::Frame, WireError::BadUtf8),
    ("invalid-summary-short", As::Frame, WireError::Truncated),
    (
        "invalid-varint-noncanonical",
        As::Varint,
        WireError::VarintNonCanonical,
    ),
    ("invalid-varint-overflow", As::Varint, WireError::VarintOverflow),
    ("invalid-varint-truncated", As::Varint, WireError::Truncated),
    (
        "invalid-files-chunks-truncated",
        As::Frame,
        WireError::TableTruncated,
    ),
    ("invalid-files-file-nsec", As::Frame, WireError::LengthMismatch),
    (
        "invalid-files-probe-trailing",
        As::Frame,
        WireError::TrailingBytes,
    ),
    (
        "invalid-files-probe-reply-bits",
        As::Frame,
        WireError::ReservedNonZero,
    ),
    (
        "invalid-files-file-held-chunks",
        As::Frame,
        WireError::LengthMismatch,
    ),
    ("invalid-files-file-flags", As::Frame, WireError::BadFlags),
    ("invalid-files-accept-flags", As::Frame, WireError::BadFlags),
    (
        "invalid-files-file-drop-length",
        As::Frame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-files-deleted-skipped-names",
        As::Frame,
        WireError::LengthMismatch,
    ),
    ("invalid-files-file-attrs-order", As::Frame, WireError::BadFlags),
    (
        "invalid-files-end-top-short",
        As::Frame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-files-file-streamed-hash",
        As::Frame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-files-file-done-no-chunks",
        As::Frame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-mount-list-dir-size",
        As::Frame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-mount-fetch-empty-run",
        As::Frame,
        WireError::LengthMismatch,
    ),
    ("invalid-mount-data-trailing", As::Frame, WireError::TrailingBytes),
    ("invalid-gram-nak-bytes", As::BlobFrame, WireError::LengthMismatch),
    (
        "invalid-gram-repair-trailing",
        As::BlobFrame,
        WireError::LengthMismatch,
    ),
    (
        "invalid-hello-ack-repair-alone",
        As::BlobFrame,
        WireError::BadFlags,
    ),
    (
        "invalid-mount-recipe-zero-length",
        As::Frame,
        WireError::LengthMismatch,
    ),
    ("invalid-sgram-kind", As::Frame, WireError::BadFlags),
    (
        "invalid-sgram-message-offset",
        As::Frame,
        WireError::ReservedNonZero,
    ),
    ("invalid-sgram-slab-left", As::Frame, WireError::LengthMismatch),
    ("invalid-stream-hello-index", As::Frame, WireError::LengthMismatch),
    (
        "invalid-stream-accept-window",
        As::Frame,
        WireError::LengthMismatch,
    ),
];

/// The full decode path of docs/wire.md §9 for one frame.
fn decode_frame(b: &[u8]) -> Result<(), WireError> {
    let (frame, used) = Frame::parse(b)?;
    assert_eq!(used, b.len(), "bytes after the frame");
    match frame.header.frame_type {
        FrameType::Hello => Hello::parse(frame.body).map(drop),
        FrameType::HelloAck => HelloAck::parse(frame.body).map(drop),
        FrameType::Gram => {
            let gram = Gram::parse(frame.body)?;
            gram.descriptors().try_for_each(|d| d.map(drop))
        }
        FrameType::Complete if frame.header.flags & FLAG_COMPLETE_REPORT != 0 => {
            Report::parse(frame.body).map(drop)
        }
        FrameType::Complete => SenderSummary::parse(frame.body).map(drop),
        FrameType::Error => ErrorFrame::parse(frame.body).map(drop),
        FrameType::Ack => PlanAck::parse(frame.body).map(drop),
        FrameType::Nak => parse_nak(frame.body).map(drop),
        FrameType::Chunks | FrameType::Repair => {
            let (_, mut entries) = parse_chunks(frame.body)?;
            entries.try_for_each(|e| e.map(drop))
        }
        FrameType::FilesHello => FilesHello::parse(frame.body).map(drop),
        FrameType::FilesAccept => FilesAccept::parse(frame.body).map(drop),
        FrameType::IndexRequest => parse_index_request(frame.body).map(drop),
        FrameType::Index => parse_index(frame.body).map(drop),
        FrameType::Plan => Plan::parse(frame.body).map(drop),
        FrameType::File => FileEntry::parse(frame.body).map(drop),
        FrameType::FilesEnd if frame.header.flags & FLAG_FILES_REPORT != 0 => {
            FilesReport::parse(frame.body).map(drop)
        }
        FrameType::FilesEnd => pfs_wire::files::TopMtime::parse_end(frame.body).map(drop),
        FrameType::Batch => pfs_wire::files::parse_batch(frame.body).map(drop),
        FrameType::Probe => {
            let (_, mut entries) = pfs_wire::files::parse_probe(frame.body)?;
            entries.try_for_each(|e| e.map(drop))
        }
        FrameType::ProbeReply => pfs_wire::files::parse_probe_reply(frame.body).map(drop),
        FrameType::FileDrop => FileDrop::parse(frame.body).map(drop),
        FrameType::FileDone => FileDone::parse(frame.body).map(drop),
        FrameType::Delete => pfs_wire::files::DeleteRequest::parse(frame.body).map(drop),
        FrameType::Deleted => {
            let (_, mut entries) = pfs_wire::files::parse_deleted(frame.body)?;
            entries.try_for_each(|e| e.map(drop))
        }
        FrameType::MountHello => mount::MountHello::parse(frame.body).map(drop),
        FrameType::MountAccept => mount::MountAccept::parse(frame.body).map(drop),
        FrameType::List => mount::parse_list(frame.body).try_for_each(|e| e.map(drop)),
        FrameType::RecipeAsk => mount::RecipeAsk::parse(frame.body).map(drop),
        FrameType::Recipe => mount::parse_recipe(frame.body).map(drop),
        FrameType::Fetch => mount::parse_fetch(frame.body).map(drop),
        FrameType::Data => {
            let (_, mut entries) = mount::parse_data(frame.body)?;
            entries.try_for_each(|e| e.map(drop))
        }
        FrameType::StreamHello => stream::StreamHello::parse(frame.body).map(drop),
        FrameType::StreamAccept => stream::StreamAccept::parse(frame.body).map(drop),
        FrameType::Sgram => stream::StreamGram::parse(frame.body)?
            .entries()
            .try_for_each(|e| e.map(drop)),
        FrameType::Applied => stream::Applied::parse(frame.body).map(drop),
        FrameType::StreamEnd => stream::StreamEnd::parse(frame.body).map(drop),
        // §16's vectors are checked in tests/catchup_vectors.rs.
        FrameType::CatchupBegin
        | FrameType::CatchupRegions
        | FrameType::CatchupHashes
        | FrameType::CatchupBlocks
        | FrameType::CatchupEnd => Ok(()),
    }
}

/// The decode path of docs/wire.md §13.9: a frame of a blob session.
fn decode_blob_frame(b: &[u8]) -> Result<(), WireError> {
    let (frame, used) = Frame::parse(b)?;
    assert_eq!(used, b.len(), "bytes after the frame");
    match frame.header.frame_type {
        FrameType::Nak => GramNak::parse(frame.body).map(drop),
        FrameType::Repair => GramRepair::parse(frame.body).map(drop),
        FrameType::Complete if frame.header.flags & FLAG_COMPLETE_REPORT != 0 => {
            parse_report(frame.body).map(drop)
        }
        _ => decode_frame(b),
    }
}

fn decode_varint(b: &[u8]) -> Result<(), WireError> {
    let (_, used) = get_varint(b)?;
    assert_eq!(used, b.len(), "bytes after the varint");
    Ok(())
}

/// One whole frame of a valid files vector: header, body, nothing after.
fn files_frame(name: &str, t: FrameType, flags: u16) -> Vec<u8> {
    let b = bytes(name).to_vec();
    let (frame, used) = Frame::parse(&b).unwrap_or_else(|e| panic!("vector {name}: {e}"));
    assert_eq!(used, b.len(), "vector {name}: bytes after the frame");
    assert_eq!(frame.header.frame_type, t, "vector {name}");
    assert_eq!(frame.header.flags, flags, "vector {name}");
    frame.body.to_vec()
}

#[test]
fn files_vectors() {
    let body = files_frame("files-file", FrameType::File, 0);
    let f = FileEntry::parse(&body).unwrap();
    let hash: [u8; 32] = std::array::from_fn(|i| i as u8);
    let expected = FileEntry {
        file_no: 3,
        kind: EntryKind::File,
        mode: 0o644,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 500,
        size: 70_000,
        chunk_count: 2,
        file_hash: hash,
        path: b"docs/read me.txt",
        link_target: b"",
        held: false,
        extra: pfs_wire::files::FileExtra::default(),
    };
    assert_eq!(f, expected);
    let mut out = Vec::new();
    put_frame(&mut out, FrameType::File, 0, &{
        let mut b = Vec::new();
        expected.emit(&mut b);
        b
    });
    assert_eq!(out, bytes("files-file"), "files-file re-encode");

    let body = files_frame("files-chunks", FrameType::Chunks, 0);
    let (head, entries) = parse_chunks(&body).unwrap();
    assert_eq!((head.file_no, head.count), (3, 2));
    let entries: Vec<_> = entries.collect::<Result<_, _>>().unwrap();
    assert_eq!(entries[0].hash, &[0xaa; 32]);
    assert_eq!(entries[0].len, 65_536);
    assert_eq!(entries[0].data, ChunkData::Ref { offset: 1 << 20 });
    assert_eq!(entries[1].hash, &[0xbb; 32]);
    assert_eq!(entries[1].data, ChunkData::Literal(b"PFS!"));

    let body = files_frame("files-nak", FrameType::Nak, FLAG_LAST);
    let hashes: Vec<_> = parse_nak(&body).unwrap().collect();
    assert_eq!(hashes, [&[0xaa; 32]]);

    let body = files_frame("files-file-drop", FrameType::FileDrop, 0);
    let expected = FileDrop {
        file_no: 3,
        reason: "changed while being read",
    };
    assert_eq!(FileDrop::parse(&body), Ok(expected));
    let mut out = Vec::new();
    expected.emit(&mut out);
    assert_eq!(
        frame_bytes(FrameType::FileDrop, 0, &out),
        bytes("files-file-drop"),
        "files-file-drop re-encode"
    );

    let body = files_frame("files-file-streamed", FrameType::File, 0);
    let f = FileEntry::parse(&body).unwrap();
    assert!(f.extra.streamed && !f.held && !f.extra.linked && !f.extra.listed);
    assert_eq!(
        (f.file_no, f.size, f.chunk_count, f.file_hash),
        (3, 70_000, 0, [0; 32])
    );
    assert_eq!(f.path, b"docs/read me.txt");
    let mut out = Vec::new();
    f.emit(&mut out);
    assert_eq!(
        frame_bytes(FrameType::File, 0, &out),
        bytes("files-file-streamed"),
        "files-file-streamed re-encode"
    );

    let body = files_frame("files-file-done", FrameType::FileDone, 0);
    let expected = FileDone {
        file_no: 3,
        chunk_count: 2,
        file_hash: std::array::from_fn(|i| i as u8),
    };
    assert_eq!(FileDone::parse(&body), Ok(expected));
    assert_eq!(
        frame_bytes(FrameType::FileDone, 0, &expected.emit()),
        bytes("files-file-done"),
        "files-file-done re-encode"
    );
}

#[test]
fn files_probe_vectors() {
    let body = files_frame("files-probe", FrameType::Probe, FLAG_LAST);
    let (head, entries) = parse_probe(&body).unwrap();
    assert_eq!(
        head,
        ProbeHead {
            first_no: 0,
            count: 2
        }
    );
    let entries: Vec<_> = entries.collect::<Result<_, _>>().unwrap();
    let expected = [
        ProbeEntry {
            size: 70_000,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 500,
            key: [0, 1, 2, 3, 4, 5, 6, 7],
            path: b"docs/read me.txt",
        },
        ProbeEntry {
            size: 5,
            mtime_sec: 1_600_000_000,
            mtime_nsec: 999_999_999,
            key: [0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7],
            path: b"bin/x",
        },
    ];
    assert_eq!(entries, expected);
    let mut out = head.emit().to_vec();
    expected.iter().for_each(|e| e.emit(&mut out));
    assert_eq!(out, body, "files-probe body re-encode");
    assert_eq!(
        frame_bytes(FrameType::Probe, FLAG_LAST, &out),
        bytes("files-probe"),
        "files-probe re-encode"
    );

    let body = files_frame("files-probe-reply", FrameType::ProbeReply, FLAG_LAST);
    let (head, bits) = parse_probe_reply(&body).unwrap();
    assert_eq!(
        head,
        ProbeHead {
            first_no: 0,
            count: 10
        }
    );
    assert_eq!(bits, [0x09, 0x02]);
    let held: Vec<u32> = (0..head.count)
        .filter(|&i| bits[i as usize / 8] >> (i % 8) & 1 != 0)
        .collect();
    assert_eq!(held, [0, 3, 9]);
    let mut out = head.emit().to_vec();
    out.extend_from_slice(bits);
    assert_eq!(
        frame_bytes(FrameType::ProbeReply, FLAG_LAST, &out),
        bytes("files-probe-reply"),
        "files-probe-reply re-encode"
    );

    let body = files_frame("files-file-held", FrameType::File, 0);
    let f = FileEntry::parse(&body).unwrap();
    let expected = FileEntry {
        file_no: 3,
        kind: EntryKind::File,
        mode: 0o644,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 500,
        size: 70_000,
        chunk_count: 0,
        file_hash: std::array::from_fn(|i| if i < 16 { i as u8 } else { 0 }),
        path: b"docs/read me.txt",
        link_target: b"",
        held: true,
        extra: pfs_wire::files::FileExtra::default(),
    };
    assert_eq!(f, expected);
    assert!(f.held);
    let mut out = Vec::new();
    expected.emit(&mut out);
    assert_eq!(
        frame_bytes(FrameType::File, 0, &out),
        bytes("files-file-held"),
        "files-file-held re-encode"
    );
}

#[test]
fn conventions_vectors() {
    use pfs_wire::files::{
        parse_deleted, DeleteRequest, DeleteStatus, DeletedKind, FileExtra, HELLO_CHECKSUM, HELLO_DELETE,
    };
    let body = files_frame("files-hello-delete-checksum", FrameType::FilesHello, 0);
    let h = FilesHello::parse(&body).unwrap();
    assert_eq!(h.flags, HELLO_DELETE | HELLO_CHECKSUM);
    assert_eq!(
        (h.chunk_avg, h.session_nonce, h.remote_dir),
        (32768, 7, &b"www"[..])
    );
    let mut out = Vec::new();
    h.emit(&mut out);
    assert_eq!(out, body, "files-hello-delete-checksum re-encode");

    let body = files_frame("files-hello-no-sparse", FrameType::FilesHello, 0);
    let h = FilesHello::parse(&body).unwrap();
    assert_eq!(h.flags, pfs_wire::files::HELLO_NO_SPARSE);
    let mut out = Vec::new();
    h.emit(&mut out);
    assert_eq!(out, body, "files-hello-no-sparse re-encode");

    let body = files_frame("files-accept-occupied", FrameType::FilesAccept, 0);
    let a = FilesAccept::parse(&body).unwrap();
    assert_eq!(
        (
            a.store_id,
            a.generation,
            a.capacity,
            a.free,
            a.max_chunks_body,
            a.auth_method,
            a.flags
        ),
        (
            std::array::from_fn(|i| i as u8),
            0,
            1 << 30,
            1 << 29,
            4 << 20,
            0,
            pfs_wire::files::ACCEPT_OCCUPIED
        )
    );
    assert_eq!(a.emit().to_vec(), body, "files-accept-occupied re-encode");

    let body = files_frame("files-file-linked", FrameType::File, 0);
    let f = FileEntry::parse(&body).unwrap();
    assert_eq!((f.file_no, f.size, f.chunk_count), (4, 70_000, 0));
    assert_eq!(f.path, b"docs/read me too.txt");
    assert_eq!(f.link_target, b"docs/read me.txt");
    let x: FileExtra<'_> = f.extra;
    assert_eq!(
        (x.linked, x.uid, x.gid, x.listed),
        (true, Some(1000), Some(100), false)
    );
    assert_eq!(
        x.xattrs.iter().collect::<Vec<_>>(),
        [(&b"user.mime_type"[..], &b"text/plain"[..])]
    );
    let mut out = Vec::new();
    f.emit(&mut out);
    assert_eq!(out, body, "files-file-linked re-encode");

    let body = files_frame("files-end-top", FrameType::FilesEnd, 0);
    let t = pfs_wire::files::TopMtime::parse_end(&body)
        .unwrap()
        .expect("a top mtime");
    assert_eq!((t.mtime_sec, t.mtime_nsec), (1_700_000_000, 500));
    assert_eq!(t.emit(), &body[..], "files-end-top re-encode");

    let body = files_frame("files-delete", FrameType::Delete, 0);
    let d = DeleteRequest::parse(&body).unwrap();
    assert!(d.root);
    assert_eq!(d.rules().collect::<Vec<_>>(), ["*.o", "/build/"]);
    let mut out = Vec::new();
    DeleteRequest::emit(true, ["*.o", "/build/"].into_iter(), &mut out).unwrap();
    assert_eq!(out, body, "files-delete re-encode");

    let body = files_frame("files-deleted", FrameType::Deleted, FLAG_LAST);
    let (head, entries) = parse_deleted(&body).unwrap();
    assert_eq!((head.status, head.count), (DeleteStatus::Done, 3));
    let entries: Vec<_> = entries.collect::<Result<_, _>>().unwrap();
    let named: Vec<_> = entries.iter().map(|e| (e.kind, e.path)).collect();
    assert_eq!(
        named,
        [
            (DeletedKind::File, &b"old.txt"[..]),
            (DeletedKind::Symlink, &b"gone/link"[..]),
            (DeletedKind::Dir, &b"gone"[..])
        ]
    );
    let mut out = head.emit().to_vec();
    entries.iter().for_each(|e| e.emit(&mut out));
    assert_eq!(out, body, "files-deleted re-encode");

    let body = files_frame("files-deleted-skipped", FrameType::Deleted, FLAG_LAST);
    let (head, mut entries) = parse_deleted(&body).unwrap();
    assert_eq!((head.status, head.count), (DeleteStatus::SkippedFailures, 0));
    assert!(entries.next().is_none());
}

#[test]
fn invalid_vectors() {
    for &(name, how, expected) in INVALID {
        let v = vector(name);
        let got = match how {
            As::Frame => decode_frame(&v.bytes),
            As::Varint => decode_varint(&v.bytes),
            As::BlobFrame => decode_blob_frame(&v.bytes),
        };
        assert_eq!(got, Err(expected), "vector {name}");
        let named = format!("Expected error: `{expected:?}`.");
        assert!(
            v.description.contains(&named),
            "vector {name}: description should say {named:?}, says {:?}",
            v.description
        );
    }
}

#[test]
fn valid_vectors_do_not_claim_an_error() {
    let invalid: Vec<&str> = INVALID.iter().map(|(n, _, _)| *n).collect();
    for (name, v) in vectors() {
        // §16's are checked in tests/catchup_vectors.rs.
        if !invalid.contains(&name.as_str()) && !name.starts_with("invalid-catchup-") {
            assert!(!v.description.contains("Expected error"), "vector {name}");
        }
    }
}

// ---------------------------------------------------------------------------
// Completeness

#[test]
fn vector_names_match_the_document() {
    let mut expected: Vec<&str> = Vec::new();
    expected.extend(FRAME_HEADERS.iter().map(|c| c.0));
    expected.extend(gram_cases().iter().map(|c| c.name));
    expected.extend(["hello", "hello-ack", "complete-summary", "complete-report"]);
    expected.extend(["error-out-of-bounds", "error-shutting-down"]);
    expected.extend(["files-file", "files-chunks", "files-nak"]);
    expected.extend(["files-probe", "files-probe-reply", "files-file-held"]);
    expected.extend(["files-file-drop", "files-file-streamed", "files-file-done"]);
    expected.extend([
        "files-hello-delete-checksum",
        "files-hello-no-sparse",
        "files-file-linked",
        "files-accept-occupied",
    ]);
    expected.extend([
        "files-delete",
        "files-deleted",
        "files-deleted-skipped",
        "files-end-top",
    ]);
    expected.extend(["mount-hello", "mount-accept", "mount-list", "mount-recipe-ask"]);
    expected.extend(["mount-recipe", "mount-recipe-gone", "mount-fetch", "mount-data"]);
    expected.extend(UDP_VECTORS);
    expected.extend(STREAM_VECTORS);
    expected.extend([
        "hello-corrections",
        "hello-ack-corrections",
        "gram-nak",
        "gram-repair",
    ]);
    expected.push("complete-report-corrections");
    expected.extend(VARINTS.iter().map(|c| c.0));
    expected.extend(ZIGZAGS.iter().map(|c| c.0));
    expected.extend(INVALID.iter().map(|c| c.0));
    let mut sorted = expected.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), expected.len(), "a vector is checked twice");
    // §16's vectors are checked in tests/catchup_vectors.rs.
    let found: Vec<&str> = vectors()
        .keys()
        .map(String::as_str)
        .filter(|n| !n.starts_with("catchup-") && !n.starts_with("invalid-catchup-"))
        .collect();
    assert_eq!(
        found, sorted,
        "vectors in docs/wire.md differ from the ones checked"
    );
}

#[test]
fn parser_rejects_malformed_entries() {
    let doc = "#### vector: a\nDesc.\n```hex\n00 01\nff\n```\n";
    let v = parse_vectors(doc);
    assert_eq!(v["a"].bytes, [0x00, 0x01, 0xff]);
    assert_eq!(v["a"].description, "Desc.");
    let dup = "#### vector: a\nD.\n```hex\n00\n```\n#### vector: a\nD.\n```hex\n00\n```\n";
    assert!(std::panic::catch_unwind(|| parse_vectors(dup)).is_err());
    let odd = "#### vector: a\nD.\n```hex\n000\n```\n";
    assert!(std::panic::catch_unwind(|| parse_vectors(odd)).is_err());
}

#[test]
fn mount_vectors() {
    use mount::*;
    let body = files_frame("mount-hello", FrameType::MountHello, 0);
    let h = MountHello {
        max_entries: 1_000_000,
        max_data_body: 1 << 20,
        session_nonce: 0x0102_0304_0506_0708,
        dir: b"src",
    };
    assert_eq!(MountHello::parse(&body), Ok(h));
    assert_eq!(h.emit(), body, "mount-hello re-encode");

    let body = files_frame("mount-accept", FrameType::MountAccept, 0);
    let a = MountAccept {
        entries: 3,
        chunk_avg: 32768,
        max_fetch_chunks: 256,
        max_data_body: 1 << 20,
        root_mode: 0o755,
        root_mtime_sec: 1_700_000_000,
        root_mtime_nsec: 500,
    };
    assert_eq!(MountAccept::parse(&body), Ok(a));
    assert_eq!(a.emit()[..], body[..], "mount-accept re-encode");

    let body = files_frame("mount-list", FrameType::List, FLAG_LAST);
    let expected = [
        ListEntry {
            kind: ListKind::Dir,
            mode: 0o755,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            size: 0,
            path: b"docs",
            link: b"",
        },
        ListEntry {
            kind: ListKind::File,
            mode: 0o644,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 500,
            size: 70_000,
            path: b"docs/a.txt",
            link: b"",
        },
        ListEntry {
            kind: ListKind::Symlink,
            mode: 0o777,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 0,
            size: 0,
            path: b"docs/b",
            link: b"a.txt",
        },
    ];
    let got: Vec<_> = parse_list(&body).map(|e| e.expect("entry")).collect();
    assert_eq!(got, expected);
    let mut out = Vec::new();
    expected.iter().for_each(|e| e.emit_into(&mut out));
    assert_eq!(out, body, "mount-list re-encode");

    let body = files_frame("mount-recipe-ask", FrameType::RecipeAsk, 0);
    let ask = RecipeAsk { req: 7, entry: 1 };
    assert_eq!(RecipeAsk::parse(&body), Ok(ask));
    assert_eq!(ask.emit()[..], body[..]);

    let body = files_frame("mount-recipe", FrameType::Recipe, FLAG_LAST);
    let (head, entries) = parse_recipe(&body).expect("recipe");
    let head_expected = RecipeHead {
        req: 7,
        status: ServeStatus::Ok,
        first: 0,
        count: 2,
    };
    assert_eq!(head, head_expected);
    let entries: Vec<_> = entries.collect();
    assert_eq!(entries, vec![(65536, &[0xaa; 32]), (4464, &[0xbb; 32])]);
    let mut out = head_expected.emit().to_vec();
    emit_recipe_entry(&mut out, 65536, &[0xaa; 32]);
    emit_recipe_entry(&mut out, 4464, &[0xbb; 32]);
    assert_eq!(out, body, "mount-recipe re-encode");

    let body = files_frame("mount-recipe-gone", FrameType::Recipe, FLAG_LAST);
    let (head, entries) = parse_recipe(&body).expect("recipe");
    let gone = RecipeHead {
        req: 8,
        status: ServeStatus::Gone,
        first: 0,
        count: 0,
    };
    assert_eq!((head, entries.len()), (gone, 0));
    assert_eq!(gone.emit()[..], body[..]);

    let body = files_frame("mount-fetch", FrameType::Fetch, 0);
    let run = FetchRun {
        entry: 1,
        first: 1,
        count: 1,
    };
    assert_eq!(parse_fetch(&body), Ok((ReqHead { req: 9, count: 1 }, vec![run])));
    let mut out = ReqHead { req: 9, count: 1 }.emit().to_vec();
    run.emit_into(&mut out);
    assert_eq!(out, body, "mount-fetch re-encode");

    let body = files_frame("mount-data", FrameType::Data, FLAG_LAST);
    let (head, entries) = parse_data(&body).expect("data");
    assert_eq!(head, ReqHead { req: 9, count: 2 });
    let entries: Vec<_> = entries.map(|e| e.expect("entry")).collect();
    assert_eq!(entries, vec![DataEntry::Bytes(b"PFS!"), DataEntry::Gone]);
    let mut out = head.emit().to_vec();
    DataEntry::emit_bytes_head(&mut out, 4);
    out.extend_from_slice(b"PFS!");
    DataEntry::emit_gone(&mut out);
    assert_eq!(out, body, "mount-data re-encode");
}

/// The datagram vectors of §14, checked by `datagram_vectors`.
const UDP_VECTORS: [&str; 19] = [
    "udp-data-tagged",
    "udp-ack-tagged-chacha",
    "invalid-udp-tagged-short",
    "udp-open",
    "udp-retry",
    "udp-open-token",
    "udp-close-busy",
    "invalid-udp-open-no-token-field",
    "invalid-udp-retry-zero",
    "udp-open-ack",
    "udp-data",
    "udp-data-fin",
    "udp-ack",
    "udp-close",
    "invalid-udp-magic",
    "invalid-udp-data-length",
    "invalid-udp-ack-underflow",
    "invalid-udp-ack-zero-gap",
    "invalid-udp-open-small",
];

#[test]
fn datagram_vectors() {
    use pfs_wire::datagram::*;

    let parse = |name: &str| -> (PacketHeader, &'static [u8]) {
        PacketHeader::parse(bytes(name)).unwrap_or_else(|e| panic!("vector {name}: {e:?}"))
    };
    let reencode = |name: &str, h: &PacketHeader, body: &[u8]| {
        let mut out = h.emit().to_vec();
        out.extend_from_slice(body);
        assert_eq!(out, bytes(name), "vector {name} re-encode");
    };

    let (h, body) = parse("udp-open");
    assert_eq!((h.kind, h.conn, h.number), (PacketType::Open, 0, 0));
    let o = OpenRequest::parse(body).unwrap();
    assert_eq!(
        o,
        OpenRequest {
            open: Open {
                conn: 0x1122_3344,
                max_datagram: 1472,
                window: 32 << 20
            },
            token: None,
        }
    );
    reencode("udp-open", &h, &o.emit());

    // The token's MAC is checked against its key in pfs-transport's
    // `udp::admit` tests; here its bytes and framing.
    let (h, body) = parse("udp-retry");
    assert_eq!((h.kind, h.conn, h.number), (PacketType::Retry, 0x1122_3344, 0));
    let r = Retry::parse(body).unwrap();
    assert_eq!(r.token[..8], 5u64.to_le_bytes());
    reencode("udp-retry", &h, &r.emit());

    let (h, body) = parse("udp-open-token");
    assert_eq!((h.kind, h.conn, h.number), (PacketType::Open, 0, 1));
    let o = OpenRequest::parse(body).unwrap();
    assert_eq!(o.token, Some(r.token));
    assert_eq!(o.open.window, 256 << 10);
    reencode("udp-open-token", &h, &o.emit());

    let (h, body) = parse("udp-close-busy");
    assert_eq!((h.kind, h.conn), (PacketType::Close, 0x1122_3344));
    let c = Close::parse(body).unwrap();
    assert_eq!(c.code, close_code::BUSY);
    reencode("udp-close-busy", &h, &c.emit());
    // No answer to an OPEN is larger than the OPEN.
    for answer in ["udp-retry", "udp-close-busy", "udp-open-ack"] {
        assert!(bytes(answer).len() <= bytes("udp-open").len(), "{answer}");
    }

    let (h, body) = parse("udp-open-ack");
    assert_eq!((h.kind, h.conn), (PacketType::OpenAck, 0x1122_3344));
    let o = Open::parse(body).unwrap();
    assert_eq!(o.conn, 0x5566_7788);
    reencode("udp-open-ack", &h, &o.emit());

    let (h, body) = parse("udp-data");
    assert_eq!((h.kind, h.conn, h.number), (PacketType::Data, 0x5566_7788, 5));
    let (d, data) = DataHead::parse(body).unwrap();
    assert_eq!((d.offset, d.len, d.fin, data), (4096, 5, false, &b"hello"[..]));
    let mut b = d.emit().to_vec();
    b.extend_from_slice(data);
    reencode("udp-data", &h, &b);

    let (h, body) = parse("udp-data-fin");
    let (d, data) = DataHead::parse(body).unwrap();
    assert_eq!((d.offset, d.len, d.fin, data.len()), (4101, 0, true, 0));
    reencode("udp-data-fin", &h, &d.emit());

    let (h, body) = parse("udp-ack");
    assert_eq!((h.kind, h.number), (PacketType::Ack, 9));
    let (a, ranges) = AckHead::parse(body).unwrap();
    assert_eq!(
        (a.largest, a.window, a.delay_us, a.first, a.count),
        (100, (32 << 20) + 4096, 250, 5, 2)
    );
    let got: Vec<(u64, u64)> = ranges.map(|r| (r.smallest, r.largest)).collect();
    assert_eq!(got, vec![(95, 100), (90, 92), (50, 50)]);
    let mut b = a.emit().to_vec();
    b.extend_from_slice(&emit_ack_range(2, 2));
    b.extend_from_slice(&emit_ack_range(39, 0));
    reencode("udp-ack", &h, &b);

    let (h, body) = parse("udp-close");
    let c = Close::parse(body).unwrap();
    assert_eq!(c.code, close_code::PROTOCOL);
    reencode("udp-close", &h, &c.emit());

    // Tagged packets: version 2, the untagged packet's header and body,
    // then 16 bytes of tag (checked under the key by pfs-transport's
    // `tag_vectors`); only `Packet::parse` takes them.
    for (name, plain) in [
        ("udp-data-tagged", "udp-data"),
        ("udp-ack-tagged-chacha", "udp-ack"),
    ] {
        let b = bytes(name);
        let p = Packet::parse(b).unwrap_or_else(|e| panic!("vector {name}: {e:?}"));
        let (h, body) = parse(plain);
        assert_eq!((p.header, p.body), (h, body), "vector {name}");
        let (covered, tag) = p.tag.expect("tagged");
        assert_eq!(covered.len() + TAG_LEN, b.len());
        let mut out = h.emit_tagged().to_vec();
        out.extend_from_slice(body);
        out.extend_from_slice(tag);
        assert_eq!(out, b, "vector {name} re-encode");
        assert_eq!(
            PacketHeader::parse(b).unwrap_err(),
            WireError::UnsupportedVersion(DATAGRAM_VERSION_TAGGED)
        );
        let untagged = Packet::parse(bytes(plain)).unwrap();
        assert_eq!((untagged.header, untagged.body, untagged.tag), (h, body, None));
    }
    assert_eq!(
        Packet::parse(bytes("invalid-udp-tagged-short")).unwrap_err(),
        WireError::Truncated
    );

    assert_eq!(
        PacketHeader::parse(bytes("invalid-udp-magic")).unwrap_err(),
        WireError::BadMagic
    );
    let body = |name: &str| PacketHeader::parse(bytes(name)).unwrap().1;
    assert_eq!(
        DataHead::parse(body("invalid-udp-data-length")).unwrap_err(),
        WireError::LengthMismatch
    );
    assert_eq!(
        AckHead::parse(body("invalid-udp-ack-underflow")).unwrap_err(),
        WireError::DescriptorOverflow
    );
    assert_eq!(
        AckHead::parse(body("invalid-udp-ack-zero-gap")).unwrap_err(),
        WireError::LengthMismatch
    );
    assert_eq!(
        OpenRequest::parse(body("invalid-udp-open-small")).unwrap_err(),
        WireError::TooLarge
    );
    assert_eq!(
        OpenRequest::parse(body("invalid-udp-open-no-token-field")).unwrap_err(),
        WireError::Truncated
    );
    assert_eq!(
        Retry::parse(body("invalid-udp-retry-zero")).unwrap_err(),
        WireError::LengthMismatch
    );
}

// ---------------------------------------------------------------------------
// The corrections plane (docs/wire.md §13.9)

#[test]
fn corrections_vectors() {
    // HELLO and HELLO_ACK with the §13.1 fields: the base vectors otherwise.
    let b = bytes("hello-corrections");
    let frame = whole_frame("hello-corrections", b);
    let h = Hello::parse(frame.body).unwrap();
    let base = Hello::parse(whole_frame("hello", bytes("hello")).body).unwrap();
    let expected = Hello {
        flags: HELLO_CORRECTIONS,
        sample_interval: 16,
        ..base
    };
    assert_eq!(h, expected);
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(
        frame_bytes(FrameType::Hello, 0, &body),
        b,
        "hello-corrections re-encode"
    );

    let b = bytes("hello-ack-corrections");
    let a = HelloAck::parse(whole_frame("hello-ack-corrections", b).body).unwrap();
    let base = HelloAck::parse(whole_frame("hello-ack", bytes("hello-ack")).body).unwrap();
    let expected = HelloAck {
        flags: ACK_CORRECTIONS | ACK_REPAIR,
        sample_interval: 16,
        ..base
    };
    assert_eq!(a, expected);
    let mut body = Vec::new();
    expected.emit(&mut body);
    assert_eq!(
        frame_bytes(FrameType::HelloAck, 0, &body),
        b,
        "hello-ack-corrections re-encode"
    );

    // The NAK names gram-arithmetic-3's descriptors, absolute.
    let b = bytes("gram-nak");
    let frame = whole_frame("gram-nak", b);
    assert_eq!((frame.header.frame_type, frame.header.flags), (FrameType::Nak, 0));
    let nak = GramNak::parse(frame.body).unwrap();
    let gram = Gram::parse(whole_frame("gram-arithmetic-3", bytes("gram-arithmetic-3")).body).unwrap();
    let descs: Vec<Descriptor> = gram.descriptors().collect::<Result<_, _>>().unwrap();
    assert_eq!(nak.ranges.iter().collect::<Vec<_>>(), descs);
    let head = CorrectionHead {
        seq: gram.header.seq,
        range_count: 3,
        bytes: 868,
        digest: gram.header.integrity_value,
    };
    assert_eq!(nak.head, head);
    let mut body = head.emit().to_vec();
    descs.iter().for_each(|&d| put_range(&mut body, d));
    assert_eq!(frame_bytes(FrameType::Nak, 0, &body), b, "gram-nak re-encode");

    // The REPAIR carries the example blob's bytes of its ranges.
    let b = bytes("gram-repair");
    let frame = whole_frame("gram-repair", b);
    assert_eq!(
        (frame.header.frame_type, frame.header.flags),
        (FrameType::Repair, 0)
    );
    let repair = GramRepair::parse(frame.body).unwrap();
    let ranges = [d(16, 5), d(32, 3)];
    assert_eq!(repair.ranges.iter().collect::<Vec<_>>(), ranges);
    let blob = example_blob();
    let effective = effective_bytes(&blob, &ranges);
    assert_eq!(repair.payload, &effective[..]);
    assert_eq!(repair.head.digest, fnv1a(&effective));
    assert_eq!(
        (repair.head.seq, repair.head.range_count, repair.head.bytes),
        (9, 2, 8)
    );
    let mut body = Vec::new();
    repair.emit(&mut body);
    assert_eq!(
        frame_bytes(FrameType::Repair, 0, &body),
        b,
        "gram-repair re-encode"
    );

    // The report: complete-report's fields but for the repair, then the block.
    let b = bytes("complete-report-corrections");
    let frame = whole_frame("complete-report-corrections", b);
    assert_eq!(frame.header.flags, FLAG_COMPLETE_REPORT);
    let (report, block) = parse_report(frame.body).unwrap();
    let (base, none) = parse_report(whole_frame("complete-report", bytes("complete-report")).body).unwrap();
    assert_eq!(none, None);
    // The session of complete-report, plus the block (48), the NAK and its
    // REPAIR (16 + 32 + 36 + 868).
    let nak_frame = bytes("gram-nak").len() as u64;
    let wire = base.wire_bytes + 48 + nak_frame + (16 + 32 + 36 + 868);
    assert_eq!(wire, 1643);
    let expected = Report {
        wire_bytes: wire,
        mismatched_grams: 1,
        first_mismatch_seq: 0,
        ..base
    };
    assert_eq!(report, expected);
    let c = CorrectionsReport {
        repaired_grams: 1,
        repaired_bytes: 868,
        nak_grams: 1,
        checked_grams: 2,
        checked_bytes: 33636,
        sample_interval: 1,
        flags: CORRECTIONS_FLAG_REPAIR,
    };
    assert_eq!(block, Some(c));
    let mut body = expected.emit().to_vec();
    body.extend_from_slice(&c.emit());
    assert_eq!(
        frame_bytes(FrameType::Complete, FLAG_COMPLETE_REPORT, &body),
        b,
        "complete-report-corrections re-encode"
    );
    // As a files-session frame the same NAK bytes are not a whole number
    // of hashes: a body is read by its session's protocol.
    assert!(parse_nak(bytes("gram-nak").get(FRAME_HEADER_LEN..).unwrap()).is_err());
}

// ---------------------------------------------------------------------------
// Streaming sessions (docs/wire.md §15.9)

const STREAM_VECTORS: [&str; 10] = [
    "stream-hello",
    "stream-accept",
    "stream-hello-catch-up",
    "stream-accept-catch-up",
    "sgram-absolute",
    "sgram-arithmetic",
    "applied",
    "applied-final",
    "stream-end",
    "stream-end-keepalive",
];

const STREAM_NONCE: u64 = 0x0102_0304_0506_0708;
/// The chain (§6.2, XXH3) of the two SGRAMs' digests, as
/// `pfs_exec::integrity::e2e_chain` computes it (checked by pfs-session's
/// stream tests, since this crate has no XXH3).
const STREAM_E2E: u64 = 0xc4ec_4d94_3dd0_4ed8;
/// The chain after the first SGRAM only.
const STREAM_E2E_FIRST: u64 = 0x41aa_c0a8_5e4e_cf8c;

fn stream_hello() -> stream::StreamHello {
    stream::StreamHello {
        blob_len: EXAMPLE_BLOB_LEN,
        region_size: 65536,
        integrity: IntegrityAlg::Fnv1a,
        stream_index: 0,
        stream_count: 1,
        keepalive_ms: 1000,
        session_nonce: STREAM_NONCE,
        catch_up: false,
        fingerprint: [0x11; 32],
    }
}

fn stream_accept() -> stream::StreamAccept {
    stream::StreamAccept {
        max_gram_body: 1 << 20,
        max_entries: 65536,
        window_grams: 64,
        rights: stream::RIGHT_WRITE | stream::RIGHT_MESSAGE,
        window_bytes: 64 << 20,
        blob_len: EXAMPLE_BLOB_LEN,
        session_nonce: STREAM_NONCE,
        catch_up: false,
        keepalive_ms: 1000,
    }
}

/// STREAM_HELLO of the vectors, offering catch-up (§16) or not.
fn stream_hello_catch_up(catch_up: bool) -> stream::StreamHello {
    stream::StreamHello {
        catch_up,
        ..stream_hello()
    }
}

/// STREAM_ACCEPT of the vectors, taking the catch-up or not.
fn stream_accept_catch_up(catch_up: bool) -> stream::StreamAccept {
    stream::StreamAccept {
        catch_up,
        ..stream_accept()
    }
}

/// The entries of both SGRAM vectors: a reference, a write, a message, and
/// a reference that sees the write: (kind, offset, len, slab bytes).
const SGRAM_ENTRIES: [(stream::EntryKind, u64, u32, &[u8]); 4] = [
    (stream::EntryKind::Reference, 0, 16, &[]),
    (stream::EntryKind::Write, 100, 4, b"PFS!"),
    (stream::EntryKind::Message, 0, 2, b"hi"),
    (stream::EntryKind::Reference, 100, 4, &[]),
];

/// The effective bytes of the SGRAM vectors over the example blob.
fn sgram_effective() -> Vec<u8> {
    let blob = example_blob();
    let mut out = blob[..16].to_vec();
    out.extend_from_slice(b"PFS!hiPFS!");
    out
}

fn sgram_body(seq: u64, encoding: Encoding) -> Vec<u8> {
    let mut t = stream::EntryTables::default();
    let mut slab = Vec::new();
    for (kind, offset, len, bytes) in SGRAM_ENTRIES {
        t.push(kind, offset, len).unwrap();
        slab.extend_from_slice(bytes);
    }
    let value = fnv1a(&sgram_effective());
    let mut body = t
        .header(seq, encoding, IntegrityAlg::Fnv1a, value)
        .emit()
        .to_vec();
    body.extend_from_slice(t.table(encoding));
    body.extend_from_slice(&slab);
    body
}

fn stream_applied() -> stream::Applied {
    stream::Applied {
        applied: 2,
        e2e_digest: STREAM_E2E,
        mismatched: 0,
        window_bytes: 64 << 20,
        window_grams: 64,
    }
}

fn stream_end(grams: u64) -> SenderSummary {
    let sgram_frames: u64 = [
        sgram_body(0, Encoding::Absolute),
        sgram_body(1, Encoding::Arithmetic),
    ]
    .iter()
    .take(grams as usize)
    .map(|b| 16 + b.len() as u64)
    .sum();
    SenderSummary {
        grams,
        descriptors: 4 * grams,
        effective_bytes: 26 * grams,
        e2e_digest: if grams == 2 { STREAM_E2E } else { STREAM_E2E_FIRST },
        wire_bytes_sent: 16 + 80 + sgram_frames,
        payload_bytes: 6 * grams,
    }
}

/// The frames the §15.9 vectors hold, built by the codec.
fn stream_frames() -> Vec<(&'static str, Vec<u8>)> {
    let f = |t, flags, body: &[u8]| frame_bytes(t, flags, body);
    vec![
        (
            "stream-hello",
            f(FrameType::StreamHello, 0, &stream_hello().emit()),
        ),
        (
            "stream-accept",
            f(FrameType::StreamAccept, 0, &stream_accept().emit()),
        ),
        (
            "stream-hello-catch-up",
            f(FrameType::StreamHello, 0, &stream_hello_catch_up(true).emit()),
        ),
        (
            "stream-accept-catch-up",
            f(FrameType::StreamAccept, 0, &stream_accept_catch_up(true).emit()),
        ),
        (
            "sgram-absolute",
            f(FrameType::Sgram, 0, &sgram_body(0, Encoding::Absolute)),
        ),
        (
            "sgram-arithmetic",
            f(FrameType::Sgram, 0, &sgram_body(1, Encoding::Arithmetic)),
        ),
        ("applied", f(FrameType::Applied, 0, &stream_applied().emit())),
        (
            "applied-final",
            f(FrameType::Applied, stream::FLAG_FINAL, &stream_applied().emit()),
        ),
        ("stream-end", f(FrameType::StreamEnd, 0, &stream_end(2).emit())),
        (
            "stream-end-keepalive",
            f(
                FrameType::StreamEnd,
                stream::FLAG_KEEPALIVE,
                &stream_end(1).emit(),
            ),
        ),
    ]
}

fn hex_lines(b: &[u8]) -> String {
    let hex = |s: &[u8]| s.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let h = &b[..16];
    let mut out = format!(
        "{} {} {} {} {} {}\n",
        hex(&h[..4]),
        hex(&h[4..5]),
        hex(&h[5..6]),
        hex(&h[6..8]),
        hex(&h[8..12]),
        hex(&h[12..16])
    );
    for line in b[16..].chunks(24) {
        out.push_str(&hex(line));
        out.push('\n');
    }
    out
}

#[test]
fn stream_vectors() {
    for (name, built) in stream_frames() {
        if std::env::var_os("PFS_PRINT_VECTORS").is_some() {
            println!("#### vector: {name}\n```hex\n{}```\n", hex_lines(&built));
            continue;
        }
        assert_eq!(bytes(name), &built[..], "vector {name}: the codec's bytes");
        let frame = whole_frame(name, bytes(name));
        match frame.header.frame_type {
            FrameType::StreamHello => assert_eq!(
                stream::StreamHello::parse(frame.body),
                Ok(stream_hello_catch_up(name.ends_with("catch-up")))
            ),
            FrameType::StreamAccept => assert_eq!(
                stream::StreamAccept::parse(frame.body),
                Ok(stream_accept_catch_up(name.ends_with("catch-up")))
            ),
            FrameType::Applied => assert_eq!(stream::Applied::parse(frame.body), Ok(stream_applied())),
            FrameType::StreamEnd => {
                let grams = if frame.header.flags & stream::FLAG_KEEPALIVE != 0 {
                    1
                } else {
                    2
                };
                assert_eq!(stream::StreamEnd::parse(frame.body), Ok(stream_end(grams)));
            }
            FrameType::Sgram => {
                let g = stream::StreamGram::parse(frame.body).unwrap();
                let mut blob = example_blob();
                let mut effective = Vec::new();
                let mut cursor = 0;
                let mut table = Vec::new();
                for (e, (kind, offset, len, _)) in g.entries().zip(SGRAM_ENTRIES) {
                    let e = e.unwrap();
                    assert_eq!((e.kind, e.offset, e.len), (kind, offset, len), "vector {name}");
                    stream::emit_entry(&mut table, g.header.encoding, &mut cursor, &e);
                    let range = e.offset as usize..e.offset as usize + e.len as usize;
                    match e.kind {
                        stream::EntryKind::Reference => effective.extend_from_slice(&blob[range]),
                        stream::EntryKind::Write => {
                            blob[range].copy_from_slice(e.slab);
                            effective.extend_from_slice(e.slab);
                        }
                        stream::EntryKind::Message => effective.extend_from_slice(e.slab),
                    }
                }
                assert_eq!(table, g.table, "vector {name}: table re-encode");
                assert_eq!(
                    fnv1a(&effective),
                    g.header.integrity_value,
                    "vector {name}: digest"
                );
            }
            other => panic!("vector {name}: {other:?}"),
        }
    }
}
