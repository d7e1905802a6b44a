//! Datagram authentication (`docs/wire.md` §14.7): once a protected
//! session's handshake is over, each side tags every datagram it sends
//! with a GMAC-style tag (an AEAD with empty plaintext, the whole packet
//! as associated data) under its direction's key, and checks the peer's.
//! The nonce is the packet number, which a sender never reuses; the tag
//! covers header and body, so neither can be swapped.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305, NONCE_LEN};

pub use pfs_wire::datagram::TAG_LEN;

/// The AEAD that makes the tags (the protected session's record cipher).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramCipher {
    /// AES-256-GCM (GMAC over the packet).
    Aes256Gcm,
    /// ChaCha20-Poly1305 (Poly1305 over the packet).
    ChaCha20Poly1305,
}

/// The two directions' datagram keys, derived from a protected session's
/// handshake (`docs/wire.md` §11.4).
#[derive(Clone, PartialEq, Eq)]
pub struct DatagramKeys {
    /// The AEAD.
    pub cipher: DatagramCipher,
    /// Tags what this side sends.
    pub send: [u8; 32],
    /// Checks what the peer sends.
    pub recv: [u8; 32],
}

impl std::fmt::Debug for DatagramKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys never reach a log.
        f.debug_struct("DatagramKeys")
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

/// One connection's tagging and checking keys.
pub(crate) struct Protector {
    send: LessSafeKey,
    recv: LessSafeKey,
}

impl std::fmt::Debug for Protector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Protector")
    }
}

fn algorithm(cipher: DatagramCipher) -> &'static ring::aead::Algorithm {
    match cipher {
        DatagramCipher::Aes256Gcm => &AES_256_GCM,
        DatagramCipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
    }
}

fn less_safe_key(cipher: DatagramCipher, raw: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(algorithm(cipher), raw).expect("32-byte keys fit both AEADs"))
}

/// The tag of packet `number` whose header and body are `covered`, under
/// `key` (for test vectors and independent implementations; a connection
/// keeps its keys bound).
pub fn tag(cipher: DatagramCipher, key: &[u8; 32], number: u64, covered: &[u8]) -> [u8; TAG_LEN] {
    seal(&less_safe_key(cipher, key), number, covered)
}

/// Whether `tag` is packet `number`'s tag over `covered` under `key`.
pub fn check_tag(
    cipher: DatagramCipher,
    key: &[u8; 32],
    number: u64,
    covered: &[u8],
    tag: &[u8; TAG_LEN],
) -> bool {
    open(&less_safe_key(cipher, key), number, covered, tag)
}

fn seal(key: &LessSafeKey, number: u64, covered: &[u8]) -> [u8; TAG_LEN] {
    let tag = key
        .seal_in_place_separate_tag(nonce(number), Aad::from(covered), &mut [])
        .expect("an empty plaintext always seals");
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(tag.as_ref());
    out
}

fn open(key: &LessSafeKey, number: u64, covered: &[u8], tag: &[u8; TAG_LEN]) -> bool {
    let mut t = *tag;
    key.open_in_place(nonce(number), Aad::from(covered), &mut t)
        .is_ok()
}

/// 4 zero bytes, then the packet number big-endian (as records' nonces, §11.4).
fn nonce(number: u64) -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    n[NONCE_LEN - 8..].copy_from_slice(&number.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

impl Protector {
    pub(crate) fn new(keys: &DatagramKeys) -> Self {
        Self {
            send: less_safe_key(keys.cipher, &keys.send),
            recv: less_safe_key(keys.cipher, &keys.recv),
        }
    }

    /// The tag of the packet `covered` (header and body) numbered `number`.
    pub(crate) fn tag(&self, number: u64, covered: &[u8]) -> [u8; TAG_LEN] {
        seal(&self.send, number, covered)
    }

    /// Whether `tag` is the peer's tag of `covered` numbered `number`.
    pub(crate) fn check(&self, number: u64, covered: &[u8], tag: &[u8; TAG_LEN]) -> bool {
        open(&self.recv, number, covered, tag)
    }
}

/// A connection's datagram authentication: no keys until a protected
/// session installs them, then every datagram sent is tagged and every one
/// received checked.
#[derive(Debug, Default)]
pub(crate) struct DatagramAuth {
    /// Datagram keys, once a protected session installed them.
    protector: Option<Protector>,
    /// A datagram with a valid tag arrived: untagged ones are refused from now on.
    peer_tagged: bool,
}

impl DatagramAuth {
    /// Installs `keys`: tags from the next datagram on.
    pub(crate) fn install(&mut self, keys: &DatagramKeys) {
        self.protector = Some(Protector::new(keys));
    }

    /// Whether keys are installed.
    pub(crate) fn is_on(&self) -> bool {
        self.protector.is_some()
    }

    /// Bytes a tag adds to each datagram sent.
    pub(crate) fn tag_len(&self) -> usize {
        if self.protector.is_some() {
            TAG_LEN
        } else {
            0
        }
    }

    /// Whether a datagram numbered `number` with `tag` (covered bytes and
    /// tag, if it has one) is accepted. Before the peer's first tagged
    /// datagram, untagged ones are still its own (it installs its keys
    /// after us, or its older packets arrive late); from then on only
    /// forgeries or stragglers, whose bytes the peer resends tagged.
    /// Without keys a tag is not checked: the packet is worth what an
    /// untagged one is (the peer installed its keys first).
    pub(crate) fn accepts(&mut self, number: u64, tag: Option<(&[u8], &[u8; TAG_LEN])>) -> bool {
        let Some(p) = &self.protector else {
            return true;
        };
        match tag {
            Some((covered, tag)) if p.check(number, covered, tag) => {
                self.peer_tagged = true;
                true
            }
            None => !self.peer_tagged,
            _ => false,
        }
    }

    /// Appends the tag of the datagram `buf[..len]` numbered `number`
    /// (its header says "tagged" already and room for the tag was kept);
    /// returns the new length.
    pub(crate) fn seal(&self, number: u64, buf: &mut [u8], len: usize) -> usize {
        let Some(p) = &self.protector else {
            return len;
        };
        let tag = p.tag(number, &buf[..len]);
        buf[len..len + TAG_LEN].copy_from_slice(&tag);
        len + TAG_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_check_only_under_the_right_key_number_and_bytes() {
        for cipher in [DatagramCipher::Aes256Gcm, DatagramCipher::ChaCha20Poly1305] {
            let a = Protector::new(&DatagramKeys {
                cipher,
                send: [1; 32],
                recv: [2; 32],
            });
            let b = Protector::new(&DatagramKeys {
                cipher,
                send: [2; 32],
                recv: [1; 32],
            });
            let t = a.tag(7, b"packet");
            assert!(b.check(7, b"packet", &t));
            assert!(!b.check(8, b"packet", &t));
            assert!(!b.check(7, b"packeT", &t));
            assert!(!a.check(7, b"packet", &t));
        }
    }
}
