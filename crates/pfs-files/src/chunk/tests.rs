use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};

use super::file::chunk_file_windowed;
use super::*;
use crate::walk::Entry;
use crate::RelPath;

/// Deterministic pseudo-random bytes (xorshift64).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn small_params() -> ChunkParams {
    ChunkParams::with_bounds(64, 256, 1024).unwrap()
}

/// The file hash as docs/wire.md §10.6 defines it, computed from the bytes
/// (not with [`FileHasher`]).
fn spec_file_hash(data: &[u8], r: &Recipe) -> [u8; 32] {
    if r.chunks.len() <= 1 {
        return *blake3::hash(data).as_bytes();
    }
    let mut list = Vec::new();
    for c in &r.chunks {
        list.extend_from_slice(&c.len.to_le_bytes());
        list.extend_from_slice(
            blake3::hash(&data[c.offset as usize..(c.offset + u64::from(c.len)) as usize]).as_bytes(),
        );
    }
    blake3::derive_key("PacketFS 2026-11-24 file hash from chunk list", &list)
}

fn check_recipe(data: &[u8], r: &Recipe, p: &ChunkParams) {
    assert_eq!(r.size, data.len() as u64);
    assert!(r.is_consistent());
    assert_eq!(r.file_hash, spec_file_hash(data, r));
    for (i, c) in r.chunks.iter().enumerate() {
        let bytes = &data[c.offset as usize..(c.offset + u64::from(c.len)) as usize];
        assert_eq!(c.hash, *blake3::hash(bytes).as_bytes());
        assert!(c.len <= p.max());
        if i + 1 < r.chunks.len() {
            assert!(c.len >= p.min(), "only the last chunk may be short");
        }
    }
}

fn fastcdc_lens(data: &[u8], p: &ChunkParams) -> Vec<u32> {
    fastcdc::v2020::FastCDC::new(data, p.min(), p.avg(), p.max())
        .map(|c| c.length as u32)
        .collect()
}

#[test]
fn params_are_validated() {
    let d = ChunkParams::default();
    assert_eq!((d.min(), d.avg(), d.max()), (8192, 32768, 131072));
    assert_eq!(ChunkParams::new(DEFAULT_AVG).unwrap(), d);
    assert!(ChunkParams::new(1000).is_err(), "not a power of two");
    assert!(ChunkParams::new(128).is_err(), "avg below 256");
    assert!(ChunkParams::new(8 << 20).is_err(), "avg above 4 MiB");
    assert!(ChunkParams::with_bounds(32, 256, 1024).is_err(), "min below 64");
    assert!(ChunkParams::with_bounds(512, 256, 1024).is_err(), "min above avg");
    assert!(
        ChunkParams::with_bounds(64, 256, 32 << 20).is_err(),
        "max above 16 MiB"
    );
    assert!(ChunkParams::with_bounds(64, 256, 1024).is_ok());
    assert!(ChunkParams::new(4 << 20).is_ok());
}

#[test]
fn cut_points_match_fastcdc() {
    let data = random_bytes(3 << 20, 1);
    let zeros = vec![0u8; 1 << 20];
    let mut ramp: Vec<u8> = (0..700_000u32).map(|i| (i / 1000) as u8).collect();
    ramp.extend_from_slice(&data[..100_000]);
    // Zero runs of every length around `max` between random stretches.
    let mut mixed = data[..100_000].to_vec();
    for (i, zlen) in [
        1usize << 20,
        5000,
        131_071,
        131_072,
        131_073,
        1023,
        1024,
        1025,
        300_000,
    ]
    .into_iter()
    .enumerate()
    {
        mixed.resize(mixed.len() + zlen, 0);
        mixed.extend_from_slice(&data[i * 1000..i * 1000 + 777 * i]);
    }
    for p in [
        ChunkParams::default(),
        small_params(),
        ChunkParams::new(4096).unwrap(),
        ChunkParams::with_bounds(1000, 2048, 5000).unwrap(),
        ChunkParams::new(1 << 20).unwrap(),
    ] {
        for input in [
            &data[..],
            &zeros[..],
            &ramp[..],
            &mixed[..],
            &data[..12_345],
            &data[..7],
        ] {
            let want = fastcdc_lens(input, &p);
            let r = chunk_bytes(input, &p);
            let ours: Vec<u32> = r.chunks.iter().map(|c| c.len).collect();
            assert_eq!(ours, want, "{p:?} len {}", input.len());
            assert_eq!(chunk_lengths(input, &p), want);
            check_recipe(input, &r, &p);
        }
    }
}

#[test]
fn deterministic_and_complete() {
    let p = ChunkParams::default();
    let data = random_bytes(5 << 20, 2);
    let a = chunk_bytes(&data, &p);
    let b = chunk_bytes(&data, &p);
    assert_eq!(a, b);
    check_recipe(&data, &a, &p);
    // The chunks concatenate back to the input.
    let mut back = Vec::with_capacity(data.len());
    for c in &a.chunks {
        back.extend_from_slice(&data[c.offset as usize..][..c.len as usize]);
    }
    assert_eq!(back, data);
}

#[test]
fn parallel_windows_equal_sequential() {
    let p = small_params();
    let data = random_bytes(300_000, 3);
    let whole = chunk_bytes_windowed(&data, &p, 1 << 20);
    for window in [2048, 4096, 65_536] {
        assert_eq!(chunk_bytes_windowed(&data, &p, window), whole, "window {window}");
    }
    check_recipe(&data, &whole, &p);
}

#[test]
fn edge_sizes() {
    for p in [ChunkParams::default(), small_params()] {
        let (min, avg, max) = (p.min() as usize, p.avg() as usize, p.max() as usize);
        let data = random_bytes(max + 1, 4);
        for len in [0, 1, min - 1, min, min + 1, avg, max - 1, max, max + 1] {
            let r = chunk_bytes(&data[..len], &p);
            check_recipe(&data[..len], &r, &p);
            match len {
                0 => assert!(r.chunks.is_empty()),
                l if l <= min => assert_eq!(r.chunks.len(), 1),
                l if l > max => assert!(r.chunks.len() >= 2),
                _ => {}
            }
        }
    }
    let empty = chunk_bytes(&[], &ChunkParams::default());
    assert_eq!(empty, Recipe::empty());
    assert_eq!(empty.file_hash, *blake3::hash(b"").as_bytes());
}

fn hashes(r: &Recipe) -> HashSet<[u8; 32]> {
    r.chunks.iter().map(|c| c.hash).collect()
}

#[test]
fn one_changed_byte_changes_one_or_two_chunks() {
    let p = ChunkParams::default();
    let mut data = random_bytes(16 << 20, 5);
    let before = chunk_bytes(&data, &p);
    data[8 << 20] ^= 0x5a;
    let after = chunk_bytes(&data, &p);
    let new = hashes(&after).difference(&hashes(&before)).count();
    assert!((1..=2).contains(&new), "{new} chunks changed");
    assert!(after.chunks.len().abs_diff(before.chunks.len()) <= 1);
}

#[test]
fn insertion_keeps_most_chunks() {
    let p = ChunkParams::default();
    let data = random_bytes(16 << 20, 6);
    let before = chunk_bytes(&data, &p);
    let mut edited = data[..5 << 20].to_vec();
    edited.extend_from_slice(&random_bytes(1000, 7));
    edited.extend_from_slice(&data[5 << 20..]);
    let after = chunk_bytes(&edited, &p);
    let old = hashes(&before);
    let shared = after.chunks.iter().filter(|c| old.contains(&c.hash)).count();
    assert!(
        shared + 3 >= after.chunks.len(),
        "{shared} of {} shared",
        after.chunks.len()
    );
    check_recipe(&edited, &after, &p);
}

fn write_temp(data: &[u8]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().write_all(data).unwrap();
    f
}

#[test]
fn file_equals_bytes() {
    let p = small_params();
    let data = random_bytes(200_000, 8);
    for len in [0, 1, 63, 64, 1024, 1025, 4096, 4097, 50_000, 200_000] {
        let f = write_temp(&data[..len]);
        let want = chunk_bytes(&data[..len], &p);
        check_recipe(&data[..len], &want, &p);
        // Small windows exercise the multi-window pipeline and its carries.
        for window in [4096, 16_384, 1 << 20] {
            let got = chunk_file_windowed(f.path(), &p, window, &Default::default()).unwrap();
            assert_eq!(got, want, "len {len} window {window}");
        }
    }
}

#[test]
fn file_larger_than_a_window() {
    let p = ChunkParams::default();
    let data = random_bytes(20 << 20, 9);
    let f = write_temp(&data);
    let got = chunk_file(f.path(), &p).unwrap();
    assert_eq!(got, chunk_bytes(&data, &p));
    assert_eq!(got.file_hash, spec_file_hash(&data, &got));
}

#[test]
fn file_hash_is_the_chunk_list_hash() {
    // One chunk: its hash is the file's, the plain BLAKE3 of the content.
    let one = chunk_bytes(b"a small file", &ChunkParams::default());
    assert_eq!(one.file_hash, *blake3::hash(b"a small file").as_bytes());
    // Two chunks: BLAKE3 key derivation over (len, hash) of each.
    let mut h = FileHasher::new();
    h.add(3, &[1; 32]);
    h.add(5, &[2; 32]);
    let mut list = Vec::new();
    list.extend_from_slice(&3u32.to_le_bytes());
    list.extend_from_slice(&[1; 32]);
    list.extend_from_slice(&5u32.to_le_bytes());
    list.extend_from_slice(&[2; 32]);
    assert_eq!(h.finish(), blake3::derive_key(FILE_HASH_CONTEXT, &list));
    // Pinned, as docs/wire.md §10.6 gives it.
    assert_eq!(
        blake3::Hash::from(h.finish()).to_hex().as_str(),
        "4bbe7ec7794172f751b8f442713bdfb02fc076d938222428a951789d52a3b6cf"
    );
    // Never the plain hash of a content: the domains differ.
    assert_ne!(h.finish(), *blake3::hash(&list).as_bytes());
}

/// Streaming hands out exactly the recipe's chunks, in file order, for a
/// file of one window and for one of several (whose windows are hashed in
/// any order).
#[test]
fn streaming_hands_out_the_recipe_in_order() {
    let p = ChunkParams::default();
    for (len, seed) in [(100_000, 10), (20 << 20, 11)] {
        let data = random_bytes(len, seed);
        let f = write_temp(&data);
        let mut seen: Vec<ChunkRef> = Vec::new();
        let mut calls = 0;
        let read = std::sync::atomic::AtomicU64::new(0);
        let got = chunk_file_streaming(f.path(), &p, 2, &read, &mut |c: &[ChunkRef]| {
            seen.extend_from_slice(c);
            calls += 1;
            true
        })
        .unwrap();
        assert_eq!(got, chunk_bytes(&data, &p), "len {len}");
        assert_eq!(seen, got.chunks, "len {len}: streamed chunks");
        assert_eq!(read.into_inner(), len as u64);
        let windows = len.div_ceil(p.window());
        assert_eq!(calls, windows, "len {len}: one hand-out per window");
    }
}

/// A sink that says no stops the chunking at the next window.
#[test]
fn streaming_stops_when_the_sink_says_so() {
    let p = ChunkParams::default();
    let data = random_bytes(40 << 20, 12);
    let f = write_temp(&data);
    let mut calls = 0;
    let read = std::sync::atomic::AtomicU64::new(0);
    let got = chunk_file_streaming(f.path(), &p, 2, &read, &mut |_: &[ChunkRef]| {
        calls += 1;
        false
    });
    assert!(matches!(got, Err(FilesError::Stopped { .. })), "{got:?}");
    assert_eq!(calls, 1, "nothing handed out after the no");
    assert!(read.into_inner() < data.len() as u64, "the rest was not read");
}

/// Sparse file of `len` bytes with a few written ranges; returns the file
/// and the ranges.
fn sparse_file(len: u64) -> (tempfile::NamedTempFile, Vec<(u64, Vec<u8>)>) {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(len).unwrap();
    let writes = vec![
        (0, b"head".to_vec()),
        (len / 3, random_bytes(100_000, 10)),
        (len / 2 + 12_345, b"middle".to_vec()),
        (len - 5, b"tail!".to_vec()),
    ];
    let mut file = f.as_file();
    for (off, bytes) in &writes {
        file.seek(SeekFrom::Start(*off)).unwrap();
        file.write_all(bytes).unwrap();
    }
    (f, writes)
}

/// Every chunk of `r` hashes to its bytes as read back from `f`, and the
/// file hash is the list's (docs/wire.md §10.6).
fn check_chunks_against_file(f: &std::fs::File, r: &Recipe) {
    use std::os::unix::fs::FileExt;
    let mut buf = Vec::new();
    let mut list = Vec::new();
    for c in &r.chunks {
        buf.resize(c.len as usize, 0);
        f.read_exact_at(&mut buf, c.offset).unwrap();
        assert_eq!(c.hash, *blake3::hash(&buf).as_bytes(), "chunk at {}", c.offset);
        list.extend_from_slice(&c.len.to_le_bytes());
        list.extend_from_slice(&c.hash);
    }
    assert_eq!(r.file_hash, blake3::derive_key(FILE_HASH_CONTEXT, &list));
}

fn check_sparse(len: u64) {
    let p = ChunkParams::default();
    let (f, _) = sparse_file(len);
    let r = chunk_file(f.path(), &p).unwrap();
    assert_eq!(r.size, len);
    assert!(r.is_consistent());
    check_chunks_against_file(f.as_file(), &r);
    // Chunks away from the written ranges are all-zero chunks.
    let zero_max = *blake3::hash(&vec![0u8; p.max() as usize]).as_bytes();
    let zero_chunks = r.chunks.iter().filter(|c| c.hash == zero_max).count();
    assert!(zero_chunks as u64 * u64::from(p.max()) > len / 2);
}

#[test]
fn sparse_file_256_mib() {
    check_sparse(256 << 20);
}

#[test]
#[ignore = "reads 3 GiB of holes; run with --ignored --release"]
fn sparse_file_3_gib() {
    check_sparse(3 << 30);
}

#[test]
fn chunk_files_in_order_with_errors() {
    let p = small_params();
    let dir = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    let mut datas = Vec::new();
    for (i, len) in [0usize, 10, 5000, 300_000, 9 << 20].into_iter().enumerate() {
        let data = random_bytes(len, 20 + i as u64);
        let path = dir.path().join(format!("f{i}"));
        std::fs::write(&path, &data).unwrap();
        entries.push(Entry {
            rel: RelPath::parse(format!("f{i}").as_bytes()).unwrap(),
            kind: WalkKind::File { size: len as u64 },
            mode: 0o644,
            mtime_ns: 0,
            dev: 0,
            ino: 0,
            abs: path,
            meta: Default::default(),
        });
        datas.push(data);
    }
    entries.push(Entry {
        rel: RelPath::parse(b"d").unwrap(),
        kind: WalkKind::Dir,
        mode: 0o755,
        mtime_ns: 0,
        dev: 0,
        ino: 0,
        abs: dir.path().to_path_buf(),
        meta: Default::default(),
    });
    let refs: Vec<&Entry> = entries.iter().collect();
    for threads in [1, 2, 0] {
        let out = chunk_files(&refs, &p, threads).unwrap();
        assert_eq!(out.len(), entries.len());
        for (data, r) in datas.iter().zip(&out) {
            assert_eq!(r.as_ref().unwrap(), &chunk_bytes(data, &p));
        }
        assert!(matches!(out.last(), Some(Err(FilesError::NotAFile { .. }))));
        // The meters count every byte read, once (small files whole, large
        // ones window by window).
        let total: u64 = datas.iter().map(|d| d.len() as u64).sum();
        let read = AtomicU64::new(0);
        let metered = chunk_files_metered(&refs, &p, threads, &read).unwrap();
        assert_eq!(metered.len(), out.len());
        assert_eq!(read.into_inner(), total);
        let read = AtomicU64::new(0);
        digest_files_metered(&refs, &p, threads, &read).unwrap();
        assert_eq!(read.into_inner(), total);
    }
}

#[test]
fn missing_file_is_an_io_error() {
    let e = chunk_file("/nonexistent/pfs-files-test", &ChunkParams::default()).unwrap_err();
    assert!(matches!(e, FilesError::Io { op: "open", .. }), "{e}");
}

#[test]
fn sparse_file_equals_dense_bytes() {
    let p = ChunkParams::default();
    let len = 40u64 << 20;
    let (f, writes) = sparse_file(len);
    let mut dense = vec![0u8; len as usize];
    for (off, bytes) in &writes {
        dense[*off as usize..][..bytes.len()].copy_from_slice(bytes);
    }
    let want = chunk_bytes(&dense, &p);
    check_recipe(&dense, &want, &p);
    assert_eq!(chunk_file(f.path(), &p).unwrap(), want);
    // Small windows: holes and data start and end inside windows.
    assert_eq!(
        chunk_file_windowed(f.path(), &p, 1 << 18, &Default::default()).unwrap(),
        want
    );
}

#[test]
fn digest_file_equals_xxh3_of_the_content() {
    let p = small_params();
    let w = p.window();
    assert!(w >= 2 * p.max() as usize);
    let data = random_bytes(3 * w + 17, 30);
    for len in [0, 1, w - 1, w, w + 1, 3 * w + 17] {
        let f = write_temp(&data[..len]);
        let (size, digest) = digest_file(f.path(), &p).unwrap();
        assert_eq!(size, len as u64, "len {len}");
        assert_eq!(digest, quick_digest(&data[..len]), "len {len}");
        assert_eq!(
            chunk_file(f.path(), &p).unwrap().size,
            size,
            "len {len}: chunk_file"
        );
    }
}

#[test]
fn digest_file_of_a_sparse_file() {
    let p = ChunkParams::default();
    // Holes span whole windows and start and end inside them.
    let len = 5 * p.window() as u64 + 4321;
    let (f, writes) = sparse_file(len);
    let mut dense = vec![0u8; len as usize];
    for (off, bytes) in &writes {
        dense[*off as usize..][..bytes.len()].copy_from_slice(bytes);
    }
    let (size, digest) = digest_file(f.path(), &p).unwrap();
    assert_eq!(size, len);
    assert_eq!(digest, quick_digest(&dense));
}

#[test]
fn digest_file_errors() {
    let p = ChunkParams::default();
    let e = digest_file("/nonexistent/pfs-files-test", &p).unwrap_err();
    assert!(matches!(e, FilesError::Io { op: "open", .. }), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let e = digest_file(dir.path(), &p).unwrap_err();
    assert!(matches!(e, FilesError::NotAFile { .. }), "{e}");
}

#[test]
fn digest_files_in_order_with_errors() {
    let p = small_params();
    let dir = tempfile::tempdir().unwrap();
    let entry = |name: &str, kind: WalkKind, abs: std::path::PathBuf| Entry {
        rel: RelPath::parse(name.as_bytes()).unwrap(),
        kind,
        mode: 0o644,
        mtime_ns: 0,
        dev: 0,
        ino: 0,
        abs,
        meta: Default::default(),
    };
    let mut entries = Vec::new();
    let mut datas = Vec::new();
    for (i, len) in [0usize, 5000, p.window() + 3].into_iter().enumerate() {
        let data = random_bytes(len, 40 + i as u64);
        let path = dir.path().join(format!("f{i}"));
        std::fs::write(&path, &data).unwrap();
        entries.push(entry(&format!("f{i}"), WalkKind::File { size: len as u64 }, path));
        datas.push(data);
    }
    entries.insert(1, entry("d", WalkKind::Dir, dir.path().to_path_buf()));
    datas.insert(1, Vec::new());
    let refs: Vec<&Entry> = entries.iter().collect();
    for threads in [1, 2, 0] {
        let out = digest_files(&refs, &p, threads).unwrap();
        assert_eq!(out.len(), entries.len());
        for (i, (data, r)) in datas.iter().zip(&out).enumerate() {
            if i == 1 {
                assert!(matches!(r, Err(FilesError::NotAFile { .. })), "{r:?}");
            } else {
                let want = (data.len() as u64, quick_digest(data));
                assert_eq!(r.as_ref().unwrap(), &want, "entry {i}");
            }
        }
    }
}
