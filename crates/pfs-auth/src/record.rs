//! Protected records (docs/wire.md §11.4): after the handshake every byte a
//! peer sends travels inside a record sealed with an AEAD. Owns the record
//! header, the per-direction nonce counter, key rotation, and sealing and
//! opening in place. No I/O: callers hand in buffers.
//!
//! A record is `kind (1) | length (3, big-endian) | ciphertext | tag (16)`.
//! The header is the AEAD's associated data; the nonce is the record's
//! number in its direction (never sent), so a replayed, reordered, dropped
//! or altered record fails to open. Keys rotate after [`Sealer`] has sealed
//! the negotiated volume, at the same record on both sides.
//!
//! The AEADs are `ring`'s; nothing here implements a cipher.

use std::fmt;

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;

/// Bytes of a record header.
pub const RECORD_HEADER: usize = 4;
/// Bytes of an AEAD tag.
pub const TAG_LEN: usize = 16;
/// Most plaintext bytes in one record (256 KiB).
pub const MAX_RECORD_PLAINTEXT: usize = 256 << 10;
/// Most bytes of a record on the wire.
pub const MAX_RECORD: usize = RECORD_HEADER + MAX_RECORD_PLAINTEXT + TAG_LEN;
/// Key length of both ciphers.
pub const KEY_LEN: usize = 32;

/// The AEAD protecting records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-256 in Galois/Counter mode: fastest where the CPU has AES and
    /// carry-less multiply instructions.
    Aes256Gcm,
    /// ChaCha20-Poly1305: constant-time everywhere, fastest without AES-NI.
    ChaCha20Poly1305,
}

impl Cipher {
    /// Every cipher, in the order `--help` lists them.
    pub const ALL: [Cipher; 2] = [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305];

    /// The name used on the command line and in labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Aes256Gcm => "aes-256-gcm",
            Self::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }

    /// Parses a name as [`Cipher::name`] prints it.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Its number in the handshake (docs/wire.md §11.3).
    pub fn wire_id(self) -> u8 {
        match self {
            Self::Aes256Gcm => 1,
            Self::ChaCha20Poly1305 => 2,
        }
    }

    /// The cipher a wire number names.
    pub fn from_wire_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.wire_id() == id)
    }

    /// AES-256-GCM where this CPU has AES and carry-less multiply
    /// instructions, else ChaCha20-Poly1305 (AES without them is slow and
    /// not constant-time).
    pub fn preferred() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
            {
                return Self::Aes256Gcm;
            }
            Self::ChaCha20Poly1305
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("aes")
                && std::arch::is_aarch64_feature_detected!("pmull")
            {
                return Self::Aes256Gcm;
            }
            Self::ChaCha20Poly1305
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            Self::ChaCha20Poly1305
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Self::Aes256Gcm => &aead::AES_256_GCM,
            Self::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

impl fmt::Display for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// Stream bytes.
    Data = 1,
    /// The sender's last record: nothing follows. A stream that ends
    /// without one was cut short.
    Close = 2,
}

/// Why a record was refused. Every one ends the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The header's kind is not a record kind.
    #[error("record kind {0} is not defined")]
    BadKind(u8),
    /// The header declares more than [`MAX_RECORD`] bytes.
    #[error("record of {0} bytes exceeds the limit of {max}", max = MAX_RECORD_PLAINTEXT + TAG_LEN)]
    TooLarge(usize),
    /// Shorter than a tag.
    #[error("record of {0} bytes is shorter than its tag")]
    TooShort(usize),
    /// The AEAD refused it: tampered, replayed, reordered, or a record was
    /// dropped before it.
    #[error(
        "record {0} failed authentication (tampered, replayed, reordered, or one before it was dropped)"
    )]
    Forged(u64),
    /// The 64-bit record counter would wrap (never in practice: 2^64 records).
    #[error("record counter exhausted")]
    Exhausted,
    /// The receiver waited this long for the rest of a record after its
    /// first byte (a peer trickling a record holds nothing longer).
    #[error("record deadline: the rest of a record did not arrive within {0:?} of waiting for it")]
    Late(std::time::Duration),
    /// More empty DATA records in a row than a stream ever needs.
    #[error("{0} empty DATA records in a row")]
    EmptyRun(u32),
}

/// Keys for one direction: the raw key (for rotation) and the AEAD key.
struct DirectionKey {
    cipher: Cipher,
    raw: [u8; KEY_LEN],
    key: LessSafeKey,
}

impl DirectionKey {
    fn new(cipher: Cipher, raw: [u8; KEY_LEN]) -> Self {
        let key = LessSafeKey::new(
            UnboundKey::new(cipher.algorithm(), &raw).expect("both ciphers take 32-byte keys"),
        );
        Self { cipher, raw, key }
    }

    /// The next key: HKDF-SHA256 expand of the current one with the label
    /// `pfs v1 rekey` (docs/wire.md §11.5).
    fn rotate(&mut self) {
        let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, &self.raw);
        let next = expand(&prk, &[b"pfs v1 rekey"]);
        *self = Self::new(self.cipher, next);
    }
}

/// `HKDF-Expand(prk, info, 32)`.
pub(crate) fn expand(prk: &hkdf::Prk, info: &[&[u8]]) -> [u8; KEY_LEN] {
    struct Len;
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            KEY_LEN
        }
    }
    let mut out = [0u8; KEY_LEN];
    prk.expand(info, Len)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes is within HKDF-SHA256's output limit");
    out
}

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; aead::NONCE_LEN];
    n[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Counts records and bytes in one direction and rotates its key.
struct Direction {
    key: DirectionKey,
    counter: u64,
    since_rotation: u64,
    rotate_every: u64,
    rotations: u64,
}

impl Direction {
    fn new(cipher: Cipher, raw: [u8; KEY_LEN], rotate_every: u64) -> Self {
        Self {
            key: DirectionKey::new(cipher, raw),
            counter: 0,
            since_rotation: 0,
            rotate_every: rotate_every.max(1),
            rotations: 0,
        }
    }

    fn next_nonce(&mut self) -> Result<(u64, Nonce), RecordError> {
        let n = self.counter;
        self.counter = n.checked_add(1).ok_or(RecordError::Exhausted)?;
        Ok((n, nonce(n)))
    }

    /// Counts a record's wire bytes; rotates once the volume is reached.
    fn count(&mut self, wire_bytes: usize) {
        self.since_rotation += wire_bytes as u64;
        if self.since_rotation >= self.rotate_every {
            self.key.rotate();
            self.since_rotation = 0;
            self.rotations += 1;
        }
    }
}

/// Seals records in one direction.
pub struct Sealer(Direction);

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("cipher", &self.0.key.cipher)
            .field("records", &self.0.counter)
            .field("rotations", &self.0.rotations)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer starting at record 0 with `key`, rotating every
    /// `rotate_every` wire bytes.
    pub fn new(cipher: Cipher, key: [u8; KEY_LEN], rotate_every: u64) -> Self {
        Self(Direction::new(cipher, key, rotate_every))
    }

    /// Seals the record in `buf`: on entry `buf` holds [`RECORD_HEADER`]
    /// bytes of room followed by at most [`MAX_RECORD_PLAINTEXT`] bytes of
    /// plaintext; on return it is the whole record, header and tag included.
    pub fn seal(&mut self, kind: RecordKind, buf: &mut Vec<u8>) -> Result<(), RecordError> {
        self.seal_from(kind, buf, 0)
    }

    /// [`Sealer::seal`] of the record that starts at `start` of `buf` (the
    /// records before it stay as they are): several records can be sealed
    /// into one buffer and written with one call.
    pub fn seal_from(
        &mut self,
        kind: RecordKind,
        buf: &mut Vec<u8>,
        start: usize,
    ) -> Result<(), RecordError> {
        let plain = buf.len().saturating_sub(start + RECORD_HEADER);
        assert!(
            buf.len() >= start + RECORD_HEADER && plain <= MAX_RECORD_PLAINTEXT,
            "caller bounds records"
        );
        let sealed = plain + TAG_LEN;
        let header = header(kind, sealed);
        buf[start..start + RECORD_HEADER].copy_from_slice(&header);
        let (_, nonce) = self.0.next_nonce()?;
        let tag = self
            .0
            .key
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(header), &mut buf[start + RECORD_HEADER..])
            .map_err(|_| RecordError::TooLarge(plain))?;
        buf.extend_from_slice(tag.as_ref());
        self.0.count(RECORD_HEADER + sealed);
        Ok(())
    }

    /// Key rotations so far.
    pub fn rotations(&self) -> u64 {
        self.0.rotations
    }

    /// The current key: for the test vectors of docs/wire.md only.
    #[doc(hidden)]
    pub fn key_for_vectors(&self) -> [u8; KEY_LEN] {
        self.0.key.raw
    }
}

/// Opens records in one direction, in the order they were sealed.
pub struct Opener(Direction);

impl fmt::Debug for Opener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Opener")
            .field("cipher", &self.0.key.cipher)
            .field("records", &self.0.counter)
            .field("rotations", &self.0.rotations)
            .finish_non_exhaustive()
    }
}

/// A record header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// What the record carries.
    pub kind: RecordKind,
    /// Bytes after the header: ciphertext and tag.
    pub sealed_len: usize,
}

impl RecordHeader {
    /// Decodes and bounds-checks a header.
    pub fn parse(bytes: [u8; RECORD_HEADER]) -> Result<Self, RecordError> {
        let kind = match bytes[0] {
            1 => RecordKind::Data,
            2 => RecordKind::Close,
            k => return Err(RecordError::BadKind(k)),
        };
        let sealed_len = u32::from_be_bytes([0, bytes[1], bytes[2], bytes[3]]) as usize;
        if sealed_len > MAX_RECORD_PLAINTEXT + TAG_LEN {
            return Err(RecordError::TooLarge(sealed_len));
        }
        if sealed_len < TAG_LEN {
            return Err(RecordError::TooShort(sealed_len));
        }
        Ok(Self { kind, sealed_len })
    }

    /// Bytes of the whole record.
    pub fn record_len(&self) -> usize {
        RECORD_HEADER + self.sealed_len
    }
}

fn header(kind: RecordKind, sealed_len: usize) -> [u8; RECORD_HEADER] {
    let len = (sealed_len as u32).to_be_bytes();
    [kind as u8, len[1], len[2], len[3]]
}

impl Opener {
    /// An opener expecting record 0 under `key`.
    pub fn new(cipher: Cipher, key: [u8; KEY_LEN], rotate_every: u64) -> Self {
        Self(Direction::new(cipher, key, rotate_every))
    }

    /// Opens the whole record in `record` (header, ciphertext, tag) in
    /// place; returns its kind and plaintext. Fails, and must not be called
    /// again, on anything but the next record the peer sealed.
    pub fn open<'a>(&mut self, record: &'a mut [u8]) -> Result<(RecordKind, &'a mut [u8]), RecordError> {
        let head: [u8; RECORD_HEADER] = record
            .get(..RECORD_HEADER)
            .and_then(|h| h.try_into().ok())
            .ok_or(RecordError::TooShort(record.len()))?;
        let parsed = RecordHeader::parse(head)?;
        if record.len() != parsed.record_len() {
            return Err(RecordError::TooShort(record.len()));
        }
        let (n, nonce) = self.0.next_nonce()?;
        let plain = self
            .0
            .key
            .key
            .open_in_place(nonce, Aad::from(head), &mut record[RECORD_HEADER..])
            .map_err(|_| RecordError::Forged(n))?;
        self.0.count(RECORD_HEADER + parsed.sealed_len);
        Ok((parsed.kind, plain))
    }

    /// Key rotations so far.
    pub fn rotations(&self) -> u64 {
        self.0.rotations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(s: &mut Sealer, kind: RecordKind, plain: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; RECORD_HEADER];
        buf.extend_from_slice(plain);
        s.seal(kind, &mut buf).unwrap();
        buf
    }

    #[test]
    fn records_round_trip_and_keys_rotate_in_step() {
        for cipher in Cipher::ALL {
            let mut s = Sealer::new(cipher, [7; 32], 100);
            let mut o = Opener::new(cipher, [7; 32], 100);
            for i in 0..10u8 {
                let mut r = record(&mut s, RecordKind::Data, &[i; 40]);
                assert_eq!(r.len(), RECORD_HEADER + 40 + TAG_LEN);
                let (kind, plain) = o.open(&mut r).unwrap();
                assert_eq!((kind, &*plain), (RecordKind::Data, &[i; 40][..]));
            }
            assert_eq!(s.rotations(), 5);
            assert_eq!(o.rotations(), 5);
        }
    }

    #[test]
    fn altered_replayed_reordered_and_dropped_records_fail() {
        let c = Cipher::Aes256Gcm;
        let mut s = Sealer::new(c, [1; 32], u64::MAX);
        let r0 = record(&mut s, RecordKind::Data, b"zero");
        let r1 = record(&mut s, RecordKind::Data, b"one");
        let r2 = record(&mut s, RecordKind::Close, b"");

        // Every single-bit flip, header included, is caught.
        for bit in 0..r0.len() * 8 {
            let mut o = Opener::new(c, [1; 32], u64::MAX);
            let mut bad = r0.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(o.open(&mut bad).is_err(), "bit {bit}");
        }
        // Replay: record 0 again.
        let mut o = Opener::new(c, [1; 32], u64::MAX);
        o.open(&mut r0.clone()).unwrap();
        assert_eq!(o.open(&mut r0.clone()), Err(RecordError::Forged(1)));
        // Reorder / drop: record 1 first.
        let mut o = Opener::new(c, [1; 32], u64::MAX);
        assert_eq!(o.open(&mut r1.clone()), Err(RecordError::Forged(0)));
        // Wrong key.
        let mut o = Opener::new(c, [2; 32], u64::MAX);
        assert_eq!(o.open(&mut r0.clone()), Err(RecordError::Forged(0)));
        // In order: fine, and the close record says so.
        let mut o = Opener::new(c, [1; 32], u64::MAX);
        o.open(&mut r0.clone()).unwrap();
        o.open(&mut r1.clone()).unwrap();
        assert_eq!(o.open(&mut r2.clone()).unwrap().0, RecordKind::Close);
    }

    #[test]
    fn headers_are_bounds_checked() {
        assert_eq!(RecordHeader::parse([9, 0, 0, 16]), Err(RecordError::BadKind(9)));
        assert_eq!(RecordHeader::parse([1, 0, 0, 15]), Err(RecordError::TooShort(15)));
        assert!(matches!(
            RecordHeader::parse([1, 0xff, 0xff, 0xff]),
            Err(RecordError::TooLarge(_))
        ));
        let max = (MAX_RECORD_PLAINTEXT + TAG_LEN) as u32;
        let b = max.to_be_bytes();
        assert_eq!(
            RecordHeader::parse([1, b[1], b[2], b[3]]).unwrap().record_len(),
            MAX_RECORD
        );
    }

    #[test]
    fn cipher_names_and_wire_ids_round_trip() {
        for c in Cipher::ALL {
            assert_eq!(Cipher::from_name(c.name()), Some(c));
            assert_eq!(Cipher::from_wire_id(c.wire_id()), Some(c));
        }
        assert_eq!(Cipher::from_name("rot13"), None);
        assert_eq!(Cipher::from_wire_id(0), None);
    }
}
