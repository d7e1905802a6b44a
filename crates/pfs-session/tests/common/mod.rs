//! Helpers shared by the session tests: a seeded blob, its view, and
//! hand-built HELLO and GRAM frames for hostile peers.
#![allow(dead_code)]

use pfs_session::BlobView;
use pfs_wire::desc::encode_table;
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
