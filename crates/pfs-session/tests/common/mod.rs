//! Helpers shared by the session tests: a seeded blob, its view,
//! hand-built HELLO, GRAM, CHUNKS and BATCH frames for hostile peers, and an
//! in-memory files source.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use pfs_files::{chunk_bytes, quick_digest, ChunkParams, ChunkRef, IndexCache, Recipe};
use pfs_session::files::{FilesItem, FilesSource, Streamed, Unreadable, Unsendable};
use pfs_session::{BlobView, LocalError};
use pfs_wire::desc::encode_table;
use pfs_wire::files::{batch_head, emit_entry_head, tag, ChunksHeader};
use pfs_wire::{
    put_frame, Descriptor, Encoding, FrameType, GramHeader, Hello, IntegrityAlg, Mode, GRAM_FLAG_PAYLOAD,
};

/// `len` bytes from a seeded LCG: both peers of a test build the same blob.
pub fn blob_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

/// The session view of a test blob (fingerprint `[7; 32]`, 1 MiB regions).
pub fn view(data: &[u8]) -> BlobView<'_> {
    BlobView {
        data,
        fingerprint: [7; 32],
        region_size: 1 << 20,
        backing: pfs_blob::BackingKind::SmallPages,
        page_size: 4096,
        setup: Default::default(),
        writer: None,
        live: None,
    }
}

/// A HELLO frame (xxh3, 64 descriptors of at most 64 KiB per gram).
pub fn hello_frame(mode: Mode, blob_len: u64, fingerprint: [u8; 32]) -> Vec<u8> {
    let mut body = Vec::new();
    Hello {
        mode,
        encoding: mode.encoding(),
        integrity: IntegrityAlg::Xxh3,
        auth_method: 0,
        flags: 0,
        sample_interval: 0,
        max_desc_per_gram: 64,
        max_desc_len: 65536,
        blob_len,
        region_size: 1 << 20,
        fingerprint,
        session_nonce: 9,
        planned_bytes: 0,
        planned_grams: 0,
        auth: &[],
    }
    .emit(&mut body);
    let mut f = Vec::new();
    put_frame(&mut f, FrameType::Hello, 0, &body);
    f
}

/// A GRAM frame with an absolute table and digest 0.
pub fn gram_frame(descs: &[Descriptor], payload: &[u8], seq: u64) -> Vec<u8> {
    gram_frame_raw(
        &encode_table(Encoding::Absolute, descs).unwrap(),
        descs.len() as u32,
        payload,
        seq,
    )
}

/// A GRAM frame over a raw table.
pub fn gram_frame_raw(table: &[u8], count: u32, payload: &[u8], seq: u64) -> Vec<u8> {
    let gh = GramHeader {
        seq,
        desc_count: count,
        table_len: table.len() as u32,
        payload_len: payload.len() as u32,
        encoding: Encoding::Absolute,
        integrity: IntegrityAlg::Xxh3,
        flags: if payload.is_empty() { 0 } else { GRAM_FLAG_PAYLOAD },
        integrity_value: 0,
    };
    let mut body = gh.emit().to_vec();
    body.extend_from_slice(table);
    body.extend_from_slice(payload);
    let mut f = Vec::new();
    put_frame(&mut f, FrameType::Gram, 0, &body);
    f
}

/// Files held in memory: a files sender's host without a filesystem.
/// Chunks of about 1 KiB; counts the reads of file bytes.
pub struct MemSource {
    /// File bytes by the entry's absolute path.
    pub data: HashMap<PathBuf, Vec<u8>>,
    /// Where the index cache lives.
    pub index_dir: tempfile::TempDir,
    /// Reads of file bytes so far.
    pub reads: u64,
    /// Stream files (`stream_start`) handing out this many chunks at a
    /// time; `None`: this source cannot stream.
    pub stream_runs: Option<usize>,
    /// The file being streamed: its recipe and the chunks handed out.
    streaming: Option<(Recipe, usize)>,
    /// Say yes to `chunk_ahead` (files are then chunked one by one as the
    /// core collects them).
    pub ahead: bool,
    /// Files that cannot be read when chunked.
    pub unreadable: Vec<PathBuf>,
}

impl MemSource {
    /// A source over `data`.
    pub fn new(data: HashMap<PathBuf, Vec<u8>>) -> Self {
        Self {
            data,
            index_dir: tempfile::tempdir().expect("tmp"),
            reads: 0,
            stream_runs: None,
            streaming: None,
            ahead: false,
            unreadable: Vec::new(),
        }
    }
}

impl FilesSource for MemSource {
    fn digest(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        for &i in which {
            let d = &self.data[&items[i].entry.abs];
            items[i].digest = Some((d.len() as u64, quick_digest(d)));
        }
        Vec::new()
    }

    fn chunk(&mut self, items: &mut [FilesItem], which: &[usize]) -> Unreadable {
        let params = ChunkParams::new(1024).expect("params");
        let mut failed = Vec::new();
        for &i in which {
            let abs = &items[i].entry.abs;
            if self.unreadable.contains(abs) {
                let source = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
                let e = pfs_files::FilesError::Io {
                    op: "open",
                    path: abs.clone(),
                    source,
                };
                failed.push((i, std::sync::Arc::new(e)));
                continue;
            }
            items[i].recipe = Some(chunk_bytes(&self.data[abs], &params));
        }
        failed
    }

    fn chunk_ahead(&mut self, _items: &[FilesItem], _which: &[usize]) -> bool {
        self.ahead
    }

    fn open_index(&mut self, store_id: [u8; 16]) -> (IndexCache, Option<String>) {
        let (mut cache, _) = IndexCache::open(self.index_dir.path(), store_id);
        cache.reset();
        (cache, None)
    }

    fn save_index(&mut self, _: &IndexCache) -> Option<String> {
        None
    }

    fn stream_start(&mut self, item: &FilesItem) -> bool {
        if self.stream_runs.is_none() {
            return false;
        }
        let params = ChunkParams::new(1024).expect("params");
        self.streaming = Some((chunk_bytes(&self.data[&item.entry.abs], &params), 0));
        true
    }

    fn stream_next(&mut self, out: &mut Vec<ChunkRef>) -> Streamed {
        let (Some((recipe, at)), Some(run)) = (self.streaming.as_mut(), self.stream_runs) else {
            return Streamed::Failed(Unsendable::Host("not streaming"));
        };
        if *at == recipe.chunks.len() {
            let (r, _) = self.streaming.take().expect("streaming");
            return Streamed::Done(r);
        }
        let end = (*at + run.max(1)).min(recipe.chunks.len());
        out.extend_from_slice(&recipe.chunks[*at..end]);
        *at = end;
        Streamed::More
    }

    fn read(&mut self, item: &FilesItem, offset: u64, buf: &mut [u8]) -> Result<Option<String>, LocalError> {
        let d = &self.data[&item.entry.abs];
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        self.reads += 1;
        Ok(None)
    }
}

/// A CHUNKS body for file `no`: one LITERAL entry per (bytes hashed, bytes sent).
pub fn literals_body(no: u64, pieces: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut body = ChunksHeader {
        file_no: no,
        count: pieces.len() as u32,
    }
    .emit()
    .to_vec();
    for (hash_of, bytes) in pieces {
        emit_entry_head(
            &mut body,
            tag::LITERAL,
            blake3::hash(hash_of).as_bytes(),
            bytes.len() as u32,
        );
        body.extend_from_slice(bytes);
    }
    body
}

/// A BATCH body: `raw_len`, then the zstd frame `z`.
pub fn batch_body(raw_len: u32, z: &[u8]) -> Vec<u8> {
    let mut b = batch_head(raw_len).to_vec();
    b.extend_from_slice(z);
    b
}

/// A well-formed BATCH body carrying `frames`.
pub fn batch_of(frames: &[u8]) -> Vec<u8> {
    batch_body(
        frames.len() as u32,
        &zstd::bulk::compress(frames, 3).expect("zstd"),
    )
}
