//! The tagged-datagram vectors of docs/wire.md §14.8: the tag at the end
//! of each is the one this implementation computes under the vector's key,
//! and any changed byte fails the check.

use pfs_transport::udp::auth::{check_tag, tag};
use pfs_transport::udp::DatagramCipher;
use pfs_wire::datagram::{Packet, TAG_LEN};

/// The bytes of the `#### vector: NAME` block in docs/wire.md.
fn vector(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/wire.md");
    let doc = std::fs::read_to_string(&path).expect("docs/wire.md");
    let head = format!("#### vector: {name}\n");
    let at = doc
        .find(&head)
        .unwrap_or_else(|| panic!("docs/wire.md has no vector {name}"));
    let rest = &doc[at + head.len()..];
    let start = rest.find("```hex\n").expect("a hex block") + "```hex\n".len();
    let end = start + rest[start..].find("```").expect("a closed block");
    let digits: Vec<u8> = rest[start..end]
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The vectors' key: bytes 0, 1, … 31.
fn key() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

#[test]
fn tagged_vectors_check_under_their_key() {
    for (name, cipher) in [
        ("udp-data-tagged", DatagramCipher::Aes256Gcm),
        ("udp-ack-tagged-chacha", DatagramCipher::ChaCha20Poly1305),
    ] {
        let bytes = vector(name);
        let p = Packet::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let (covered, got) = p.tag.unwrap_or_else(|| panic!("{name} is not tagged"));
        let want = tag(cipher, &key(), p.header.number, covered);
        assert_eq!(
            got,
            &want,
            "{name}: the tag should be {}",
            want.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        assert!(check_tag(cipher, &key(), p.header.number, covered, got));
        for i in 0..bytes.len() - TAG_LEN {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            if let Ok(Packet {
                header,
                tag: Some((covered, t)),
                ..
            }) = Packet::parse(&bad)
            {
                assert!(
                    !check_tag(cipher, &key(), header.number, covered, t),
                    "{name}: byte {i} flipped"
                );
            }
        }
    }
}
