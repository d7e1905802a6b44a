//! The checks behind the protected-session fuzz targets (`handshake`,
//! `record`): untrusted bytes into the handshake and record decoders of
//! `crates/pfs-auth`. Decoding never panics; a record stream that opens
//! holds exactly what was sealed. Included by path by the targets and by
//! `crates/pfs-auth/tests/corpus.rs` (which runs the seed corpus on stable);
//! kept out of `lib.rs` so that `pfs-wire`'s corpus test needs no pfs-auth.

use pfs_auth::handshake::{
    ClientHandshake, MessageHeader, Proposal, ServerHandshake, Service, HANDSHAKE_HEADER,
};
use pfs_auth::record::{Opener, RecordHeader, RecordKind, Sealer, RECORD_HEADER};
use pfs_auth::Cipher;

/// A check: panics if an invariant does not hold for the input.
pub type Check = fn(&[u8]);

/// Every auth fuzz target: its name (also its corpus directory) and check.
pub const AUTH_TARGETS: &[(&str, Check)] = &[("handshake", handshake), ("record", record)];

const SERVER: [u8; 32] = [0x40; 32];
const CLIENT: [u8; 32] = [0x11; 32];

/// Input: what a server reads as HS1, and a client as HS2, HS3 too.
pub fn handshake(data: &[u8]) {
    if let Some(head) = data.get(..HANDSHAKE_HEADER) {
        let head: &[u8; HANDSHAKE_HEADER] = head.try_into().expect("8 bytes");
        let _ = MessageHeader::parse(head);
    }
    // As HS1 at a server; if it is accepted, the same bytes as HS3.
    if let Ok((s, _, _)) = ServerHandshake::accept(&SERVER, None, data) {
        let _ = s.finish(data);
    }
    // As HS2 at a client.
    let proposal = Proposal {
        cipher: Cipher::Aes256Gcm,
        rotate_log2: 16,
        service: Service::Blob,
    };
    if let Ok((mut c, _)) = ClientHandshake::start(&CLIENT, None, proposal) {
        if c.read_answer(data).is_ok() {
            let _ = c.finish();
        }
    }
}

/// Input: a byte stream read as records; then the same bytes sealed as
/// records (in pieces the first bytes choose) must open to themselves.
pub fn record(data: &[u8]) {
    for cipher in Cipher::ALL {
        let mut opener = Opener::new(cipher, [7; 32], 1 << 16);
        let mut at = 0;
        while let Some(head) = data.get(at..at + RECORD_HEADER) {
            let head: [u8; RECORD_HEADER] = head.try_into().expect("4 bytes");
            let Ok(h) = RecordHeader::parse(head) else { break };
            let Some(rec) = data.get(at..at + h.record_len()) else {
                break;
            };
            let mut rec = rec.to_vec();
            if opener.open(&mut rec).is_err() {
                break;
            }
            at += h.record_len();
        }
        let mut sealer = Sealer::new(cipher, [9; 32], 1 << 16);
        let mut opener = Opener::new(cipher, [9; 32], 1 << 16);
        let step = usize::from(data.first().copied().unwrap_or(1)).max(1) * 97;
        for piece in data.chunks(step) {
            let mut buf = vec![0u8; RECORD_HEADER];
            buf.extend_from_slice(piece);
            sealer.seal(RecordKind::Data, &mut buf).expect("seal");
            let (kind, plain) = opener.open(&mut buf).expect("a sealed record opens");
            assert_eq!(kind, RecordKind::Data);
            assert_eq!(plain, piece, "record round trip");
        }
    }
}
