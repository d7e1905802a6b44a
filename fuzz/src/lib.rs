//! The decoder checks behind the fuzz targets, one function per target.
//!
//! Each takes untrusted bytes, runs them through a `pfs-wire` decoder and
//! asserts the codec's invariants: decoding never panics, and whatever
//! decodes re-encodes to exactly the bytes it came from. The same functions
//! run over the seed corpus in `crates/pfs-wire/tests/corpus.rs` (which
//! includes this file by path), so `cargo test` on stable exercises every
//! corpus file without nightly or libFuzzer.

use pfs_wire::control::{ErrorCode, ErrorFrame, Report, SenderSummary};
use pfs_wire::desc::{encode_table, DescIter, Encoding};
use pfs_wire::files::{
    emit_entry_head, parse_chunks, parse_index, parse_index_request, parse_nak, tag, ChunkData, ChunksHeader,
    FileDone, FileDrop, FileEntry, FilesAccept, FilesHello, FilesReport, IndexEntry, Plan, PlanAck, TopMtime,
    FLAG_FILES_REPORT,
};
use pfs_wire::frame::{Frame, FrameHeader, FrameType, FLAG_COMPLETE_REPORT, FRAME_HEADER_LEN};
use pfs_wire::gram::{Gram, GRAM_HEADER_LEN};
use pfs_wire::hello::{Hello, HelloAck};
use pfs_wire::varint::{get_varint, put_varint, varint_len, zigzag_decode, zigzag_encode, MAX_VARINT_LEN};
use pfs_wire::WireError;

/// A decoder check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// Every fuzz target: its name (also its corpus directory) and its check.
pub const TARGETS: &[(&str, Check)] = &[
    ("frame_header", frame_header),
    ("gram", gram),
    ("desc_absolute", desc_absolute),
    ("desc_arithmetic", desc_arithmetic),
    ("hello", hello),
    ("hello_ack", hello_ack),
    ("control", control),
    ("varint", varint),
    ("files", files),
    ("mount", mount),
    ("datagram", datagram),
    ("corrections", corrections),
    ("stream", stream),
    ("catchup", catchup),
];

/// Bytes at the start of a stream: the frame header alone, then the whole
/// frame, whose body goes to the check for its type.
pub fn frame_header(data: &[u8]) {
    if let Ok(h) = FrameHeader::parse(data) {
        assert_eq!(h.emit()[..], data[..FRAME_HEADER_LEN], "header re-encode");
    }
    let Ok((frame, used)) = Frame::parse(data) else {
        return;
    };
    assert_eq!(frame.body.len(), frame.header.length as usize);
    assert_eq!(used, FRAME_HEADER_LEN + frame.body.len());
    assert_eq!(frame.body, &data[FRAME_HEADER_LEN..used]);
    match frame.header.frame_type {
        FrameType::Hello => hello(frame.body),
        FrameType::HelloAck => hello_ack(frame.body),
        FrameType::Gram => gram(frame.body),
        FrameType::Complete if frame.header.flags & FLAG_COMPLETE_REPORT != 0 => {
            if let Ok(r) = Report::parse(frame.body) {
                assert_eq!(r.emit()[..], *frame.body, "report re-encode");
            }
            corrections_body(2, frame.body);
        }
        FrameType::Complete => {
            if let Ok(s) = SenderSummary::parse(frame.body) {
                assert_eq!(s.emit()[..], *frame.body, "summary re-encode");
            }
        }
        FrameType::Error => control(frame.body),
        FrameType::Ack => files_body(0, frame.body),
        FrameType::FilesHello => files_body(1, frame.body),
        FrameType::FilesAccept => files_body(2, frame.body),
        FrameType::IndexRequest => files_body(3, frame.body),
        FrameType::Index => files_body(4, frame.body),
        FrameType::Plan => files_body(5, frame.body),
        FrameType::File => files_body(6, frame.body),
        // NAK and REPAIR have a body per protocol (files §10.8, blob §13.3).
        FrameType::Chunks => files_body(7, frame.body),
        FrameType::Repair => {
            files_body(7, frame.body);
            corrections_body(1, frame.body);
        }
        FrameType::Nak => {
            files_body(8, frame.body);
            corrections_body(0, frame.body);
        }
        FrameType::FilesEnd if frame.header.flags & FLAG_FILES_REPORT != 0 => files_body(9, frame.body),
        FrameType::Probe => files_body(10, frame.body),
        FrameType::ProbeReply => files_body(11, frame.body),
        FrameType::FileDrop => files_body(12, frame.body),
        FrameType::Delete => files_body(13, frame.body),
        FrameType::Deleted => files_body(14, frame.body),
        FrameType::FileDone => files_body(15, frame.body),
        FrameType::FilesEnd => files_body(16, frame.body),
        FrameType::MountHello => mount_body(0, frame.body),
        FrameType::MountAccept => mount_body(1, frame.body),
        FrameType::List => mount_body(2, frame.body),
        FrameType::RecipeAsk => mount_body(3, frame.body),
        FrameType::Recipe => mount_body(4, frame.body),
        FrameType::Fetch => mount_body(5, frame.body),
        FrameType::Data => mount_body(6, frame.body),
        FrameType::StreamHello => stream_body(0, frame.body),
        FrameType::StreamAccept => stream_body(1, frame.body),
        FrameType::Applied => stream_body(2, frame.body),
        FrameType::Sgram => stream_body(3, frame.body),
        FrameType::StreamEnd => {
            if let Ok(s) = SenderSummary::parse(frame.body) {
                assert_eq!(s.emit()[..], *frame.body, "STREAM_END re-encode");
            }
        }
        FrameType::CatchupBegin => catchup_body(0, frame.body),
        FrameType::CatchupRegions => catchup_body(1, frame.body),
        FrameType::CatchupHashes => catchup_body(2, frame.body),
        FrameType::CatchupBlocks => catchup_body(3, frame.body),
        FrameType::CatchupEnd => catchup_body(4, frame.body),
        FrameType::Batch => {
            if let Ok((raw, z)) = pfs_wire::files::parse_batch(frame.body) {
                let mut out = pfs_wire::files::batch_head(raw).to_vec();
                out.extend_from_slice(z);
                assert_eq!(out, frame.body, "BATCH re-encode");
            }
        }
    }
}

/// A GRAM frame body: header, then every descriptor of the table.
pub fn gram(data: &[u8]) {
    let Ok(g) = Gram::parse(data) else { return };
    assert_eq!(
        g.header.emit()[..],
        data[..GRAM_HEADER_LEN],
        "gram header re-encode"
    );
    assert_eq!(g.table.len(), g.header.table_len as usize);
    assert_eq!(g.payload.len(), g.header.payload_len as usize);
    assert_eq!(GRAM_HEADER_LEN + g.table.len() + g.payload.len(), data.len());
    table(g.table, g.header.encoding, g.header.desc_count);
}

/// First byte: descriptor count; the rest: an absolute table.
pub fn desc_absolute(data: &[u8]) {
    if let Some((&count, rest)) = data.split_first() {
        table(rest, Encoding::Absolute, u32::from(count));
    }
}

/// First byte: descriptor count; the rest: an arithmetic table.
pub fn desc_arithmetic(data: &[u8]) {
    if let Some((&count, rest)) = data.split_first() {
        table(rest, Encoding::Arithmetic, u32::from(count));
    }
}

/// Decodes a whole table; one that decodes completely must re-encode to the
/// same bytes (absolute: fixed width; arithmetic: shortest-form varints make
/// the encoding unique).
fn table(bytes: &[u8], encoding: Encoding, count: u32) {
    let mut descs = Vec::new();
    let mut iter = DescIter::new(bytes, encoding, count);
    while let Some(item) = iter.next() {
        match item {
            Ok(d) => {
                assert!(d.end().is_some(), "decoder yielded an overflowing descriptor");
                descs.push(d);
            }
            Err(_) => {
                assert!(iter.next().is_none(), "iterator continued after an error");
                return;
            }
        }
    }
    assert_eq!(descs.len(), count as usize, "table ended early without an error");
    let again = encode_table(encoding, &descs).expect("decoded descriptors must encode");
    assert_eq!(again, bytes, "{} table re-encode", encoding.name());
}

/// A HELLO body.
pub fn hello(data: &[u8]) {
    if let Ok(h) = Hello::parse(data) {
        let mut out = Vec::new();
        h.emit(&mut out);
        assert_eq!(out, data, "HELLO re-encode");
    }
}

/// A HELLO_ACK body.
pub fn hello_ack(data: &[u8]) {
    if let Ok(a) = HelloAck::parse(data) {
        let mut out = Vec::new();
        a.emit(&mut out);
        assert_eq!(out, data, "HELLO_ACK re-encode");
    }
}

/// A COMPLETE or ERROR body, tried as each of the three.
pub fn control(data: &[u8]) {
    if let Ok(s) = SenderSummary::parse(data) {
        assert_eq!(s.emit()[..], *data, "summary re-encode");
    }
    if let Ok(r) = Report::parse(data) {
        assert_eq!(r.emit()[..], *data, "report re-encode");
    }
    if let Ok(e) = ErrorFrame::parse(data) {
        if let Some(code) = ErrorCode::from_u16(e.code) {
            assert_eq!(code as u16, e.code);
        }
        let mut out = Vec::new();
        e.emit(&mut out);
        assert_eq!(out, data, "ERROR re-encode");
    }
}

/// Bytes starting with a varint.
pub fn varint(data: &[u8]) {
    match get_varint(data) {
        Ok((v, used)) => {
            assert!((1..=MAX_VARINT_LEN).contains(&used) && used <= data.len());
            assert_eq!(varint_len(v), used, "accepted a non-shortest varint");
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, data[..used], "varint re-encode");
            assert_eq!(zigzag_encode(zigzag_decode(v)), v, "zigzag round trip");
        }
        Err(e) => assert!(
            matches!(
                e,
                WireError::Truncated | WireError::VarintOverflow | WireError::VarintNonCanonical
            ),
            "unexpected varint error {e:?}"
        ),
    }
}

/// First byte: which files body (mod 16); the rest: that body.
pub fn files(data: &[u8]) {
    if let Some((&which, body)) = data.split_first() {
        files_body(which % 16, body);
    }
}

/// One files frame body: decodes without panicking and re-encodes to the
/// same bytes.
fn files_body(which: u8, body: &[u8]) {
    match which {
        0 => {
            if let Ok(a) = PlanAck::parse(body) {
                assert_eq!(a.emit()[..], *body, "PLAN ACK re-encode");
            }
        }
        1 => {
            if let Ok(h) = FilesHello::parse(body) {
                let mut out = Vec::new();
                h.emit(&mut out);
                assert_eq!(out, body, "FILES_HELLO re-encode");
            }
        }
        2 => {
            if let Ok(a) = FilesAccept::parse(body) {
                assert_eq!(a.emit()[..], *body, "FILES_ACCEPT re-encode");
            }
        }
        3 => {
            if let Ok(g) = parse_index_request(body) {
                assert_eq!(g.to_le_bytes()[..], *body, "INDEX_REQUEST re-encode");
            }
        }
        4 => {
            if let Ok(entries) = parse_index(body) {
                let mut out = Vec::new();
                entries.for_each(|e: IndexEntry| e.emit(&mut out));
                assert_eq!(out, body, "INDEX re-encode");
            }
        }
        5 => {
            if let Ok(p) = Plan::parse(body) {
                assert_eq!(p.emit()[..], *body, "PLAN re-encode");
            }
        }
        6 => {
            if let Ok(f) = FileEntry::parse(body) {
                let mut out = Vec::new();
                f.emit(&mut out);
                assert_eq!(out, body, "FILE re-encode");
                let x = f.extra.xattrs;
                let mut again = Vec::new();
                pfs_wire::files::Xattrs::encode(x.iter(), usize::MAX, &mut again);
                assert!(x.is_empty() || again == x.as_bytes(), "xattrs re-encode");
            }
        }
        7 => chunks(body),
        8 => {
            if let Ok(hashes) = parse_nak(body) {
                let out: Vec<u8> = hashes.flatten().copied().collect();
                assert_eq!(out, body, "NAK re-encode");
            }
        }
        10 => {
            if let Ok((head, entries)) = pfs_wire::files::parse_probe(body) {
                let mut out = head.emit().to_vec();
                let mut n = 0u32;
                for e in entries {
                    let Ok(e) = e else { return };
                    e.emit(&mut out);
                    n += 1;
                }
                assert_eq!(n, head.count, "PROBE entry count");
                assert_eq!(out, body, "PROBE re-encode");
            }
        }
        11 => {
            if let Ok((head, bits)) = pfs_wire::files::parse_probe_reply(body) {
                let mut out = head.emit().to_vec();
                out.extend_from_slice(bits);
                assert_eq!(out, body, "PROBE_REPLY re-encode");
            }
        }
        12 => {
            if let Ok(d) = FileDrop::parse(body) {
                let mut out = Vec::new();
                d.emit(&mut out);
                assert_eq!(out, body, "FILE_DROP re-encode");
            }
        }
        13 => {
            if let Ok(d) = pfs_wire::files::DeleteRequest::parse(body) {
                let rules: Vec<&str> = d.rules().collect();
                assert_eq!(rules.len(), usize::from(d.rule_count()), "DELETE rule count");
                let mut out = Vec::new();
                pfs_wire::files::DeleteRequest::emit(d.root, rules.into_iter(), &mut out)
                    .expect("decoded rules must encode");
                assert_eq!(out, body, "DELETE re-encode");
            }
        }
        14 => {
            if let Ok((head, entries)) = pfs_wire::files::parse_deleted(body) {
                let mut out = head.emit().to_vec();
                let mut n = 0u32;
                for e in entries {
                    let Ok(e) = e else { return };
                    e.emit(&mut out);
                    n += 1;
                }
                assert_eq!(n, head.count, "DELETED entry count");
                assert_eq!(out, body, "DELETED re-encode");
            }
        }
        15 => {
            if let Ok(d) = FileDone::parse(body) {
                assert_eq!(d.emit()[..], *body, "FILE_DONE re-encode");
            }
        }
        16 => {
            if let Ok(Some(t)) = TopMtime::parse_end(body) {
                assert_eq!(t.emit()[..], *body, "FILES_END top mtime re-encode");
            }
        }
        _ => {
            if let Ok(r) = FilesReport::parse(body) {
                let mut out = Vec::new();
                r.emit(&mut out);
                assert_eq!(out, body, "FILES_END report re-encode");
            }
        }
    }
}

/// A CHUNKS/REPAIR body: every entry decodes or the iterator stops at its
/// first error; a body that decodes completely re-encodes to itself.
fn chunks(body: &[u8]) {
    let Ok((header, mut iter)) = parse_chunks(body) else {
        return;
    };
    let mut out = ChunksHeader {
        file_no: header.file_no,
        count: header.count,
    }
    .emit()
    .to_vec();
    let mut n = 0u32;
    while let Some(item) = iter.next() {
        let Ok(e) = item else {
            assert!(iter.next().is_none(), "iterator continued after an error");
            return;
        };
        n += 1;
        match e.data {
            ChunkData::Ref { offset } => {
                assert!(offset.checked_add(u64::from(e.len)).is_some(), "overflowing REF");
                emit_entry_head(&mut out, tag::REF, e.hash, e.len);
                out.extend_from_slice(&offset.to_le_bytes());
            }
            ChunkData::Literal(bytes) => {
                assert_eq!(bytes.len(), e.len as usize, "literal length");
                emit_entry_head(&mut out, tag::LITERAL, e.hash, e.len);
                out.extend_from_slice(bytes);
            }
            ChunkData::Zstd(bytes) => {
                emit_entry_head(&mut out, tag::ZSTD, e.hash, e.len);
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            ChunkData::Known => emit_entry_head(&mut out, tag::KNOWN, e.hash, e.len),
        }
    }
    assert_eq!(n, header.count, "entry count");
    assert_eq!(out, body, "CHUNKS re-encode");
}

/// Input: first byte selects a mount frame body (MOUNT_HELLO, MOUNT_ACCEPT,
/// LIST, RECIPE_ASK, RECIPE, FETCH, DATA); the rest is that body.
pub fn mount(data: &[u8]) {
    if let Some((&which, body)) = data.split_first() {
        mount_body(which % 7, body);
    }
}

/// One mount frame body: decodes without panicking, and whatever decodes
/// re-encodes to the same bytes.
fn mount_body(which: u8, body: &[u8]) {
    use pfs_wire::mount::{
        emit_recipe_entry, parse_data, parse_fetch, parse_list, parse_recipe, DataEntry, MountAccept,
        MountHello, RecipeAsk, ReqHead,
    };
    match which {
        0 => {
            if let Ok(h) = MountHello::parse(body) {
                assert_eq!(h.emit(), body, "MOUNT_HELLO re-encode");
            }
        }
        1 => {
            if let Ok(a) = MountAccept::parse(body) {
                assert_eq!(a.emit()[..], *body, "MOUNT_ACCEPT re-encode");
            }
        }
        2 => {
            let mut out = Vec::new();
            for e in parse_list(body) {
                match e {
                    Ok(e) => e.emit_into(&mut out),
                    Err(_) => return,
                }
            }
            assert_eq!(out, body, "LIST re-encode");
        }
        3 => {
            if let Ok(a) = RecipeAsk::parse(body) {
                assert_eq!(a.emit()[..], *body, "RECIPE_ASK re-encode");
            }
        }
        4 => {
            if let Ok((head, entries)) = parse_recipe(body) {
                let mut out = head.emit().to_vec();
                for (len, hash) in entries {
                    assert!(len > 0, "RECIPE entry of length 0");
                    emit_recipe_entry(&mut out, len, hash);
                }
                assert_eq!(out, body, "RECIPE re-encode");
            }
        }
        5 => {
            if let Ok((head, runs)) = parse_fetch(body) {
                let mut out = head.emit().to_vec();
                for r in &runs {
                    assert!(r.count > 0);
                    r.emit_into(&mut out);
                }
                assert_eq!(out, body, "FETCH re-encode");
            }
        }
        _ => {
            let Ok((head, entries)) = parse_data(body) else {
                return;
            };
            let mut out = ReqHead {
                req: head.req,
                count: head.count,
            }
            .emit()
            .to_vec();
            for e in entries {
                match e {
                    Ok(DataEntry::Bytes(b)) => {
                        DataEntry::emit_bytes_head(&mut out, b.len() as u32);
                        out.extend_from_slice(b);
                    }
                    Ok(DataEntry::Gone) => DataEntry::emit_gone(&mut out),
                    Err(_) => return,
                }
            }
            assert_eq!(out, body, "DATA re-encode");
        }
    }
}

/// Input: one UDP datagram (docs/wire.md §14). Whatever decodes
/// re-encodes to the same bytes; ACK ranges walk down without wrapping.
pub fn datagram(data: &[u8]) {
    use pfs_wire::datagram::{
        emit_ack_range, AckHead, Close, DataHead, Open, OpenRequest, Packet, PacketType, Retry,
    };
    // Either version: a tagged packet (version 2) is the same packet with
    // 16 bytes of tag after it, which this decoder finds but never checks.
    let Ok(Packet { header: h, body, tag }) = Packet::parse(data) else {
        return;
    };
    let mut out = match tag {
        Some(_) => h.emit_tagged().to_vec(),
        None => h.emit().to_vec(),
    };
    match h.kind {
        PacketType::Open => match OpenRequest::parse(body) {
            Ok(o) => out.extend_from_slice(&o.emit()),
            Err(_) => return,
        },
        PacketType::OpenAck => match Open::parse(body) {
            Ok(o) => out.extend_from_slice(&o.emit()),
            Err(_) => return,
        },
        PacketType::Retry => match Retry::parse(body) {
            Ok(r) => out.extend_from_slice(&r.emit()),
            Err(_) => return,
        },
        PacketType::Data => match DataHead::parse(body) {
            Ok((d, bytes)) => {
                assert_eq!(bytes.len(), usize::from(d.len));
                out.extend_from_slice(&d.emit());
                out.extend_from_slice(bytes);
            }
            Err(_) => return,
        },
        PacketType::Ack => match AckHead::parse(body) {
            Ok((a, ranges)) => {
                out.extend_from_slice(&a.emit());
                let mut prev: Option<u64> = None;
                let mut n = 0;
                for r in ranges {
                    assert!(r.smallest <= r.largest, "range upside down");
                    if let Some(p) = prev {
                        assert!(r.largest + 1 < p, "ranges touch or overlap");
                        out.extend_from_slice(&emit_ack_range(
                            (p - r.largest - 1) as u32,
                            (r.largest - r.smallest) as u32,
                        ));
                    }
                    prev = Some(r.smallest);
                    n += 1;
                }
                assert_eq!(n, usize::from(a.count) + 1, "every range walked");
            }
            Err(_) => return,
        },
        PacketType::Close => match Close::parse(body) {
            Ok(c) => out.extend_from_slice(&c.emit()),
            Err(_) => return,
        },
    }
    if let Some((covered, tag)) = tag {
        assert_eq!(covered, &out[..], "the tag covers header and body");
        out.extend_from_slice(tag);
    }
    assert_eq!(out, data, "datagram re-encode");
}

/// Input: first byte selects a blob session's corrections-plane body (gram
/// NAK, REPAIR, COMPLETE report with or without the corrections block);
/// the rest is that body.
pub fn corrections(data: &[u8]) {
    if let Some((&which, body)) = data.split_first() {
        corrections_body(which % 3, body);
    }
}

/// One corrections-plane body (docs/wire.md §13): decodes without
/// panicking, its ranges are whole and sum to `bytes`, and whatever
/// decodes re-encodes to the same bytes.
fn corrections_body(which: u8, body: &[u8]) {
    use pfs_wire::corrections::{parse_report, GramNak, GramRepair};
    match which {
        0 => {
            if let Ok(n) = GramNak::parse(body) {
                let sum: u64 = n.ranges.iter().map(|d| u64::from(d.len)).sum();
                assert_eq!(sum, n.head.bytes, "NAK bytes");
                assert!(n.ranges.iter().all(|d| d.end().is_some()), "NAK range overflows");
                assert_eq!(n.ranges.len(), n.head.range_count as usize);
                let mut out = Vec::new();
                n.emit(&mut out);
                assert_eq!(out, body, "gram NAK re-encode");
            }
        }
        1 => {
            if let Ok(r) = GramRepair::parse(body) {
                assert_eq!(r.payload.len() as u64, r.head.bytes, "REPAIR payload length");
                let mut out = Vec::new();
                r.emit(&mut out);
                assert_eq!(out, body, "gram REPAIR re-encode");
            }
        }
        _ => {
            if let Ok((r, c)) = parse_report(body) {
                let mut out = r.emit().to_vec();
                if let Some(c) = c {
                    out.extend_from_slice(&c.emit());
                }
                assert_eq!(out, body, "report re-encode");
            }
        }
    }
}

/// A streaming-session body (docs/wire.md §15), the first byte choosing
/// which: decodes without panicking, and whatever decodes re-encodes to
/// the same bytes (an SGRAM: its header, every entry, its slab).
pub fn stream(data: &[u8]) {
    if let Some((&which, body)) = data.split_first() {
        stream_body(which % 4, body);
    }
}

/// One streaming-session body: 0 STREAM_HELLO, 1 STREAM_ACCEPT, 2 APPLIED,
/// 3 SGRAM.
fn stream_body(which: u8, body: &[u8]) {
    use pfs_wire::stream::{emit_entry, Applied, StreamAccept, StreamGram, StreamHello};
    match which {
        0 => {
            if let Ok(h) = StreamHello::parse(body) {
                assert_eq!(h.emit()[..], *body, "STREAM_HELLO re-encode");
            }
        }
        1 => {
            if let Ok(a) = StreamAccept::parse(body) {
                assert_eq!(a.emit()[..], *body, "STREAM_ACCEPT re-encode");
            }
        }
        2 => {
            if let Ok(a) = Applied::parse(body) {
                assert_eq!(a.emit()[..], *body, "APPLIED re-encode");
            }
        }
        _ => {
            let Ok(g) = StreamGram::parse(body) else {
                return;
            };
            let mut out = g.header.emit().to_vec();
            let mut slab = Vec::new();
            let mut cursor = 0;
            for e in g.entries() {
                let Ok(e) = e else { return };
                assert_eq!(e.slab.len(), if e.kind.has_slab() { e.len as usize } else { 0 });
                emit_entry(&mut out, g.header.encoding, &mut cursor, &e);
                slab.extend_from_slice(e.slab);
            }
            out.extend_from_slice(&slab);
            assert_eq!(out, body, "SGRAM re-encode");
        }
    }
}

/// Input: first byte selects a blob catch-up body (docs/wire.md §16):
/// CATCHUP_BEGIN, REGIONS, HASHES, BLOCKS (of a 1 MiB blob in 4 KiB
/// blocks) or END; the rest is that body. Decoding never panics, counts
/// agree with lengths, and whatever decodes re-encodes to the same bytes.
pub fn catchup(data: &[u8]) {
    if let Some((&which, body)) = data.split_first() {
        catchup_body(which % 5, body);
    }
}

/// One catch-up body (docs/wire.md §16) of kind `which` (0 BEGIN, 1
/// REGIONS, 2 HASHES, 3 BLOCKS, 4 END).
fn catchup_body(which: u8, body: &[u8]) {
    use pfs_wire::catchup::{blocks_len, BlockHashes, CatchupBegin, CatchupBlocks, CatchupEnd, RegionHashes};
    match which {
        0 => {
            if let Ok(b) = CatchupBegin::parse(body) {
                assert_eq!(&b.emit()[..], body, "CATCHUP_BEGIN re-encode");
            }
        }
        1 => {
            if let Ok(r) = RegionHashes::parse(body) {
                assert_eq!(r.hashes().len(), r.head.count as usize);
                let mut out = Vec::new();
                RegionHashes::emit(r.head.first, r.hashes(), &mut out);
                assert_eq!(out, body, "CATCHUP_REGIONS re-encode");
            }
        }
        2 => {
            if let Ok(r) = BlockHashes::parse(body) {
                assert_eq!(r.hashes().len(), r.head.count as usize);
                let mut out = Vec::new();
                BlockHashes::emit(r.head.first, r.hashes(), &mut out);
                assert_eq!(out, body, "CATCHUP_HASHES re-encode");
            }
        }
        3 => {
            let (bs, len) = (4096, 1 << 20);
            if let Ok(b) = CatchupBlocks::parse(body, bs, len) {
                assert_eq!(
                    Ok(b.bytes.len() as u64),
                    blocks_len(b.head, bs, len),
                    "BLOCKS length"
                );
                let mut out = b.head.emit().to_vec();
                out.extend_from_slice(b.bytes);
                assert_eq!(out, body, "CATCHUP_BLOCKS re-encode");
            }
        }
        _ => {
            if let Ok(e) = CatchupEnd::parse(body) {
                assert_eq!(&e.emit()[..], body, "CATCHUP_END re-encode");
            }
        }
    }
}
