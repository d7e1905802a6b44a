//! Checks the protected-session test vectors of docs/wire.md §11.7 against
//! the code: fixed static and ephemeral keys make every handshake message,
//! derived key and record deterministic. The values are read from the
//! document itself, so the spec and the code cannot drift apart.
//!
//! `PFS_PRINT_VECTORS=1 cargo test -p pfs-auth --test vectors -- --nocapture`
//! prints the block to paste into the document after a deliberate change.

use pfs_auth::handshake::{ClientHandshake, Proposal, Psk, ServerHandshake, Service};
use pfs_auth::record::{RecordKind, Sealer, RECORD_HEADER};
use pfs_auth::Cipher;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn key(first: u8) -> [u8; 32] {
    std::array::from_fn(|i| first.wrapping_add(i as u8))
}

fn seal(s: &mut Sealer, kind: RecordKind, plain: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; RECORD_HEADER];
    buf.extend_from_slice(plain);
    s.seal(kind, &mut buf).unwrap();
    buf
}

/// Every value of one vector, in document order.
fn compute(psk: Option<&Psk>, cipher: Cipher) -> Vec<(&'static str, String)> {
    let (cs, ce, ss, se) = (key(0x00), key(0x20), key(0x40), key(0x60));
    let proposal = Proposal {
        cipher,
        rotate_log2: 16,
        service: Service::Files,
    };
    let (mut c, hs1) = ClientHandshake::start_for_vectors(&cs, &ce, psk, proposal).unwrap();
    let (s, _, hs2) = ServerHandshake::accept_for_vectors(&ss, &se, psk, &hs1).unwrap();
    let server_public = c.read_answer(&hs2).unwrap();
    let (hs3, mut client) = c.finish().unwrap();
    let mut server = s.finish(&hs3).unwrap();
    assert_eq!(client.handshake_hash, server.handshake_hash);
    assert_eq!(client.datagram_keys.send, server.datagram_keys.recv);
    assert_eq!(client.datagram_keys.recv, server.datagram_keys.send);
    let c2s = client.sealer.key_for_vectors();
    let s2c = server.sealer.key_for_vectors();
    let verdict = seal(&mut server.sealer, RecordKind::Data, &[0, 0, 0]);
    let data = seal(&mut client.sealer, RecordKind::Data, b"PFSG");
    // Fill the rest of the 2^16-byte volume: the next record is under the
    // rotated key.
    let filler = vec![0u8; (1 << 16) - data.len() - 4 - 16];
    seal(&mut client.sealer, RecordKind::Data, &filler);
    assert_eq!(client.sealer.rotations(), 1);
    let rotated = client.sealer.key_for_vectors();
    let close = seal(&mut client.sealer, RecordKind::Close, b"");
    let mut out = vec![
        ("client static private", hex(&cs)),
        ("client ephemeral private", hex(&ce)),
        ("server static private", hex(&ss)),
        ("server ephemeral private", hex(&se)),
        ("server static public", hex(&server_public.0)),
        ("client static public", hex(&server.peer.0)),
    ];
    if let Some(p) = psk {
        out.push(("psk", hex(&p.0)));
    }
    out.extend([
        ("HS1", hex(&hs1)),
        ("HS2", hex(&hs2)),
        ("HS3", hex(&hs3)),
        ("handshake hash", hex(&client.handshake_hash)),
        ("c2s key", hex(&c2s)),
        ("s2c key", hex(&s2c)),
        ("udp c2s key", hex(&client.datagram_keys.send)),
        ("udp s2c key", hex(&server.datagram_keys.send)),
        ("verdict record", hex(&verdict)),
        ("first client record", hex(&data)),
        ("c2s key after one rotation", hex(&rotated)),
        ("close record after rotation", hex(&close)),
    ]);
    out
}

fn cases() -> Vec<(&'static str, Vec<(&'static str, String)>)> {
    let psk = Psk(key(0x80));
    vec![
        ("xx-aes-256-gcm", compute(None, Cipher::Aes256Gcm)),
        ("xx-chacha20-poly1305", compute(None, Cipher::ChaCha20Poly1305)),
        ("xxpsk3-aes-256-gcm", compute(Some(&psk), Cipher::Aes256Gcm)),
    ]
}

/// The `name: hex` lines of each `#### secure-vector: NAME` block.
fn from_doc() -> Vec<(String, Vec<(String, String)>)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/wire.md")).unwrap();
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in doc.lines() {
        if let Some(name) = line.strip_prefix("#### secure-vector: ") {
            out.push((name.trim().to_string(), Vec::new()));
        } else if line.starts_with('#') {
            continue;
        } else if let (Some(cur), Some((k, v))) = (out.last_mut(), line.split_once(": ")) {
            if v.bytes().all(|b| b.is_ascii_hexdigit()) && !v.is_empty() {
                cur.1.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
    }
    out
}

#[test]
fn the_documented_vectors_match_the_code() {
    let cases = cases();
    if std::env::var_os("PFS_PRINT_VECTORS").is_some() {
        for (name, values) in &cases {
            println!("#### secure-vector: {name}\n\n```text");
            for (k, v) in values {
                println!("{k}: {v}");
            }
            println!("```\n");
        }
    }
    let doc = from_doc();
    let names: Vec<&str> = doc.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, expected, "the set of vectors in docs/wire.md §11.7");
    for ((name, values), (_, documented)) in cases.iter().zip(&doc) {
        let documented: Vec<(&str, &str)> =
            documented.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let computed: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(documented, computed, "vector {name}");
    }
}
