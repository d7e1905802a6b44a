//! The handshake that opens a protected session (docs/wire.md §11.2–11.3):
//! Noise XX over x25519 (`snow`), optionally with a pre-shared key
//! (`XXpsk3`), mutual authentication, and the session's parameters bound
//! into the handshake hash. Sans-I/O: each side takes the peer's message
//! bytes and returns its own.
//!
//! ```text
//! client                                server
//!   HS1  -> e               [proposal]
//!                     <- e, ee, s, es   [answer]     HS2
//!   (client checks the server's key against its pin)
//!   HS3  -> s, se
//!                     <- first record: verdict (accepted / refused)
//! ```
//!
//! The client's proposal (cipher, key-rotation volume, service) travels in
//! HS1's payload: unencrypted, but hashed into every later key, so a
//! tampered proposal makes the handshake fail.

use std::fmt;

use pfs_transport::udp::{DatagramCipher, DatagramKeys};
use ring::hkdf;

use crate::record::{expand, Cipher, Opener, Sealer, KEY_LEN};
use crate::PublicKey;

/// First bytes of every handshake message (plain frames start `PFSG`).
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"PFSN";
/// Handshake version.
pub const HANDSHAKE_VERSION: u8 = 1;
/// Bytes of a handshake message header: magic, version, step, length.
pub const HANDSHAKE_HEADER: usize = 8;
/// Largest handshake message body accepted (the real ones are < 200 bytes).
pub const MAX_HANDSHAKE_BODY: usize = 1024;
/// Key-rotation volumes a proposal may ask for: 2^16 … 2^40 bytes.
pub const ROTATE_LOG2: std::ops::RangeInclusive<u8> = 16..=40;
/// The default rotation volume: every 2^32 bytes (4 GiB) in each direction.
pub const DEFAULT_ROTATE_LOG2: u8 = 32;

const PROLOGUE: &[u8] = b"PacketFS v1 handshake";
const XX: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
const XX_PSK: &str = "Noise_XXpsk3_25519_ChaChaPoly_BLAKE2s";

/// What a client asks to do; the server authorizes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Blob sessions: HELLO, GRAM… (docs/wire.md §7).
    Blob,
    /// File transfer: FILES_HELLO… (docs/wire.md §10).
    Files,
    /// Reading a served tree: MOUNT_HELLO… (docs/wire.md §12), offered by
    /// a files server.
    Mount,
}

impl Service {
    fn wire_id(self) -> u8 {
        match self {
            Self::Blob => 1,
            Self::Files => 2,
            Self::Mount => 3,
        }
    }

    fn from_wire_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(Self::Blob),
            2 => Some(Self::Files),
            3 => Some(Self::Mount),
            _ => None,
        }
    }

    /// How `--help` and errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Blob => "blob sessions",
            Self::Files => "file transfer",
            Self::Mount => "mounting",
        }
    }
}

/// The client's parameters, carried by HS1 and bound into the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    /// The AEAD for records.
    pub cipher: Cipher,
    /// Keys rotate after 2^`rotate_log2` bytes in each direction.
    pub rotate_log2: u8,
    /// What the client will do.
    pub service: Service,
}

impl Proposal {
    const LEN: usize = 4;

    fn encode(&self) -> [u8; Self::LEN] {
        [
            HANDSHAKE_VERSION,
            self.cipher.wire_id(),
            self.rotate_log2,
            self.service.wire_id(),
        ]
    }

    fn decode(b: &[u8]) -> Result<Self, HandshakeError> {
        let bad = HandshakeError::BadProposal;
        let b: [u8; Self::LEN] = b.try_into().map_err(|_| bad("length"))?;
        if b[0] != HANDSHAKE_VERSION {
            return Err(bad("version"));
        }
        let cipher = Cipher::from_wire_id(b[1]).ok_or(bad("cipher"))?;
        if !ROTATE_LOG2.contains(&b[2]) {
            return Err(bad("key-rotation volume"));
        }
        let service = Service::from_wire_id(b[3]).ok_or(bad("service"))?;
        Ok(Self {
            cipher,
            rotate_log2: b[2],
            service,
        })
    }

    /// Rotation volume in bytes.
    pub fn rotate_every(&self) -> u64 {
        1u64 << self.rotate_log2
    }
}

/// A 32-byte pre-shared key both sides hold (`XXpsk3`).
#[derive(Clone, PartialEq, Eq)]
pub struct Psk(pub [u8; 32]);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(..)")
    }
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// Bytes that are not a handshake message of this version.
    #[error("not a PacketFS handshake message ({0})")]
    NotHandshake(&'static str),
    /// A message arrived out of step.
    #[error("handshake message {got} where {want} was expected")]
    OutOfStep {
        /// Step received.
        got: u8,
        /// Step expected.
        want: u8,
    },
    /// A message body above [`MAX_HANDSHAKE_BODY`].
    #[error("handshake message of {0} bytes is too large")]
    TooLarge(usize),
    /// An unknown Noise pattern number.
    #[error("unknown handshake pattern {0}")]
    BadPattern(u8),
    /// The client's proposal does not parse.
    #[error("bad proposal: {0}")]
    BadProposal(&'static str),
    /// Noise refused a message: wrong key, wrong pre-shared key, tampered
    /// bytes, or a pattern mismatch.
    #[error("handshake failed: {0}")]
    Noise(NoiseFailure),
    /// The server requires a pre-shared key the client did not use, or
    /// the other way round.
    #[error("pre-shared key mismatch: one side uses one and the other does not")]
    PskMismatch,
}

/// Why Noise refused a handshake message ([`HandshakeError::Noise`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoiseFailure {
    /// `snow` refused it (its error; shared so the handshake error stays `Clone`).
    #[error("{0}")]
    Snow(std::sync::Arc<snow::Error>),
    /// The handshake ended without the peer's static key.
    #[error("no remote static key")]
    NoRemoteStatic,
    /// The handshake hash is not 32 bytes.
    #[error("handshake hash length")]
    HashLength,
    /// The client's state has no server key to check.
    #[error("no server key")]
    NoServerKey,
}

// snow's errors are plain enums whose `PartialEq` is an equivalence.
impl Eq for NoiseFailure {}

fn noise(e: snow::Error) -> HandshakeError {
    HandshakeError::Noise(NoiseFailure::Snow(std::sync::Arc::new(e)))
}

/// A handshake message's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// 1, 2 or 3.
    pub step: u8,
    /// Body bytes that follow.
    pub len: usize,
}

impl MessageHeader {
    /// Decodes and checks a handshake header.
    pub fn parse(b: &[u8; HANDSHAKE_HEADER]) -> Result<Self, HandshakeError> {
        if b[..4] != HANDSHAKE_MAGIC {
            return Err(HandshakeError::NotHandshake("magic"));
        }
        if b[4] != HANDSHAKE_VERSION {
            return Err(HandshakeError::NotHandshake("version"));
        }
        let len = u16::from_be_bytes([b[6], b[7]]) as usize;
        if len > MAX_HANDSHAKE_BODY {
            return Err(HandshakeError::TooLarge(len));
        }
        Ok(Self { step: b[5], len })
    }
}

fn message(step: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HANDSHAKE_HEADER + body.len());
    out.extend_from_slice(&HANDSHAKE_MAGIC);
    out.push(HANDSHAKE_VERSION);
    out.push(step);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Splits a whole message (header and body) into its step and body.
fn split(msg: &[u8], want: u8) -> Result<&[u8], HandshakeError> {
    let head: &[u8; HANDSHAKE_HEADER] = msg
        .get(..HANDSHAKE_HEADER)
        .and_then(|h| h.try_into().ok())
        .ok_or(HandshakeError::NotHandshake("short"))?;
    let h = MessageHeader::parse(head)?;
    if h.step != want {
        return Err(HandshakeError::OutOfStep { got: h.step, want });
    }
    msg.get(HANDSHAKE_HEADER..)
        .filter(|b| b.len() == h.len)
        .ok_or(HandshakeError::NotHandshake("length"))
}

/// A finished handshake: the peer's key and the record keys.
#[derive(Debug)]
pub struct Established {
    /// The peer's static key, proven by the handshake.
    pub peer: PublicKey,
    /// The parameters both sides agreed to.
    pub proposal: Proposal,
    /// Seals what this side sends.
    pub sealer: Sealer,
    /// Opens what the peer sends.
    pub opener: Opener,
    /// The Noise handshake hash: names this session uniquely.
    pub handshake_hash: [u8; 32],
    /// Keys for the datagrams' tags when the session runs over UDP
    /// (docs/wire.md §11.4, §14.7).
    pub datagram_keys: DatagramKeys,
}

/// Derives the two directions' record keys from Noise's split and the
/// handshake hash (docs/wire.md §11.4): binds them to the cipher too.
fn establish(
    mut state: snow::HandshakeState,
    proposal: Proposal,
    initiator: bool,
) -> Result<Established, HandshakeError> {
    let peer = state
        .get_remote_static()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .map(PublicKey)
        .ok_or(HandshakeError::Noise(NoiseFailure::NoRemoteStatic))?;
    let hash: [u8; 32] = state
        .get_handshake_hash()
        .try_into()
        .map_err(|_| HandshakeError::Noise(NoiseFailure::HashLength))?;
    let (k1, k2) = state.dangerously_get_raw_split();
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, &hash);
    let cipher = proposal.cipher.name().as_bytes();
    let c2s = expand(&salt.extract(&k1), &[b"pfs v1 c2s ", cipher]);
    let s2c = expand(&salt.extract(&k2), &[b"pfs v1 s2c ", cipher]);
    let (send, recv) = if initiator { (c2s, s2c) } else { (s2c, c2s) };
    // The datagram keys: same secrets, own labels, so a tag key never
    // equals a record key.
    let udp_c2s = expand(&salt.extract(&k1), &[b"pfs v1 udp c2s ", cipher]);
    let udp_s2c = expand(&salt.extract(&k2), &[b"pfs v1 udp s2c ", cipher]);
    let datagram_keys = DatagramKeys {
        cipher: match proposal.cipher {
            Cipher::Aes256Gcm => DatagramCipher::Aes256Gcm,
            Cipher::ChaCha20Poly1305 => DatagramCipher::ChaCha20Poly1305,
        },
        send: if initiator { udp_c2s } else { udp_s2c },
        recv: if initiator { udp_s2c } else { udp_c2s },
    };
    let every = proposal.rotate_every();
    Ok(Established {
        peer,
        proposal,
        sealer: Sealer::new(proposal.cipher, send, every),
        opener: Opener::new(proposal.cipher, recv, every),
        handshake_hash: hash,
        datagram_keys,
    })
}

fn builder<'a>(
    psk: Option<&'a Psk>,
    private: &'a [u8; KEY_LEN],
) -> Result<snow::Builder<'a>, HandshakeError> {
    let params = if psk.is_some() { XX_PSK } else { XX };
    let mut b = snow::Builder::new(params.parse().map_err(noise)?)
        .local_private_key(private)
        .prologue(PROLOGUE);
    if let Some(p) = psk {
        b = b.psk(3, &p.0);
    }
    Ok(b)
}

fn pattern_id(psk: bool) -> u8 {
    if psk {
        2
    } else {
        1
    }
}

/// The client's side of the handshake.
pub struct ClientHandshake {
    state: snow::HandshakeState,
    proposal: Proposal,
    server: Option<PublicKey>,
}

impl fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientHandshake")
            .field("proposal", &self.proposal)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ClientHandshake {
    /// Starts a handshake; returns the state and HS1 to send.
    pub fn start(
        private: &[u8; KEY_LEN],
        psk: Option<&Psk>,
        proposal: Proposal,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        Self::start_with(builder(psk, private)?, psk.is_some(), proposal)
    }

    /// [`ClientHandshake::start`] with a fixed ephemeral key: for the test
    /// vectors of docs/wire.md only.
    pub fn start_for_vectors(
        private: &[u8; KEY_LEN],
        ephemeral: &[u8; KEY_LEN],
        psk: Option<&Psk>,
        proposal: Proposal,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        let b = builder(psk, private)?.fixed_ephemeral_key_for_testing_only(ephemeral);
        Self::start_with(b, psk.is_some(), proposal)
    }

    fn start_with(
        b: snow::Builder<'_>,
        psk: bool,
        proposal: Proposal,
    ) -> Result<(Self, Vec<u8>), HandshakeError> {
        let mut state = b.build_initiator().map_err(noise)?;
        let mut body = vec![pattern_id(psk)];
        let mut buf = [0u8; MAX_HANDSHAKE_BODY];
        let n = state.write_message(&proposal.encode(), &mut buf).map_err(noise)?;
        body.extend_from_slice(&buf[..n]);
        Ok((
            Self {
                state,
                proposal,
                server: None,
            },
            message(1, &body),
        ))
    }

    /// Reads HS2 (a whole message); returns the server's static key, which
    /// the caller must check against its pin before [`ClientHandshake::finish`].
    pub fn read_answer(&mut self, msg: &[u8]) -> Result<PublicKey, HandshakeError> {
        let body = split(msg, 2)?;
        let mut payload = [0u8; MAX_HANDSHAKE_BODY];
        let n = self.state.read_message(body, &mut payload).map_err(noise)?;
        if payload[..n] != [HANDSHAKE_VERSION] {
            return Err(HandshakeError::BadProposal("server answer"));
        }
        let key = self
            .state
            .get_remote_static()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .map(PublicKey)
            .ok_or(HandshakeError::Noise(NoiseFailure::NoServerKey))?;
        self.server = Some(key);
        Ok(key)
    }

    /// Writes HS3 and derives the record keys.
    pub fn finish(mut self) -> Result<(Vec<u8>, Established), HandshakeError> {
        if self.server.is_none() {
            return Err(HandshakeError::OutOfStep { got: 3, want: 2 });
        }
        let mut buf = [0u8; MAX_HANDSHAKE_BODY];
        let n = self.state.write_message(&[], &mut buf).map_err(noise)?;
        let msg = message(3, &buf[..n]);
        Ok((msg, establish(self.state, self.proposal, true)?))
    }
}

/// The server's side of the handshake.
pub struct ServerHandshake {
    state: snow::HandshakeState,
    proposal: Option<Proposal>,
}

impl fmt::Debug for ServerHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandshake")
            .field("proposal", &self.proposal)
            .finish_non_exhaustive()
    }
}

impl ServerHandshake {
    /// Reads HS1 (a whole message); returns the state, the client's
    /// proposal (for the caller to authorize later) and HS2 to send.
    pub fn accept(
        private: &[u8; KEY_LEN],
        psk: Option<&Psk>,
        msg: &[u8],
    ) -> Result<(Self, Proposal, Vec<u8>), HandshakeError> {
        Self::accept_with(builder(psk, private)?, psk.is_some(), msg)
    }

    /// [`ServerHandshake::accept`] with a fixed ephemeral key: for the test
    /// vectors of docs/wire.md only.
    pub fn accept_for_vectors(
        private: &[u8; KEY_LEN],
        ephemeral: &[u8; KEY_LEN],
        psk: Option<&Psk>,
        msg: &[u8],
    ) -> Result<(Self, Proposal, Vec<u8>), HandshakeError> {
        let b = builder(psk, private)?.fixed_ephemeral_key_for_testing_only(ephemeral);
        Self::accept_with(b, psk.is_some(), msg)
    }

    fn accept_with(
        b: snow::Builder<'_>,
        psk: bool,
        msg: &[u8],
    ) -> Result<(Self, Proposal, Vec<u8>), HandshakeError> {
        let body = split(msg, 1)?;
        let (&pattern, noise_msg) = body.split_first().ok_or(HandshakeError::NotHandshake("empty"))?;
        match pattern {
            1 | 2 if pattern == pattern_id(psk) => {}
            1 | 2 => return Err(HandshakeError::PskMismatch),
            p => return Err(HandshakeError::BadPattern(p)),
        }
        let mut state = b.build_responder().map_err(noise)?;
        let mut payload = [0u8; MAX_HANDSHAKE_BODY];
        let n = state.read_message(noise_msg, &mut payload).map_err(noise)?;
        let proposal = Proposal::decode(&payload[..n])?;
        let mut buf = [0u8; MAX_HANDSHAKE_BODY];
        let n = state
            .write_message(&[HANDSHAKE_VERSION], &mut buf)
            .map_err(noise)?;
        Ok((
            Self {
                state,
                proposal: Some(proposal),
            },
            proposal,
            message(2, &buf[..n]),
        ))
    }

    /// Reads HS3 (a whole message): the client's key is now proven.
    pub fn finish(mut self, msg: &[u8]) -> Result<Established, HandshakeError> {
        let body = split(msg, 3)?;
        let mut payload = [0u8; MAX_HANDSHAKE_BODY];
        let n = self.state.read_message(body, &mut payload).map_err(noise)?;
        if n != 0 {
            return Err(HandshakeError::NotHandshake("HS3 payload"));
        }
        let proposal = self
            .proposal
            .ok_or(HandshakeError::OutOfStep { got: 3, want: 1 })?;
        establish(self.state, proposal, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RecordKind, RECORD_HEADER};
    use crate::Identity;

    fn proposal() -> Proposal {
        Proposal {
            cipher: Cipher::ChaCha20Poly1305,
            rotate_log2: DEFAULT_ROTATE_LOG2,
            service: Service::Files,
        }
    }

    fn run(
        client: &Identity,
        server: &Identity,
        cpsk: Option<&Psk>,
        spsk: Option<&Psk>,
    ) -> Result<(Established, Established), HandshakeError> {
        let (mut c, hs1) = ClientHandshake::start(client.private_bytes(), cpsk, proposal())?;
        let (s, p, hs2) = ServerHandshake::accept(server.private_bytes(), spsk, &hs1)?;
        assert_eq!(p, proposal());
        assert_eq!(c.read_answer(&hs2)?, server.public());
        let (hs3, ce) = c.finish()?;
        let se = s.finish(&hs3)?;
        Ok((ce, se))
    }

    #[test]
    fn both_sides_learn_each_other_and_agree_on_keys() {
        let (a, b) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        for psk in [None, Some(Psk([9; 32]))] {
            let (mut c, mut s) = run(&a, &b, psk.as_ref(), psk.as_ref()).unwrap();
            assert_eq!(c.peer, b.public());
            assert_eq!(s.peer, a.public());
            assert_eq!(c.handshake_hash, s.handshake_hash);
            let send = |from: &mut Established, to: &mut Established| {
                let mut rec = vec![0u8; RECORD_HEADER];
                rec.extend_from_slice(b"frame bytes");
                from.sealer.seal(RecordKind::Data, &mut rec).unwrap();
                assert_eq!(to.opener.open(&mut rec).unwrap().1, b"frame bytes");
            };
            send(&mut c, &mut s);
            send(&mut s, &mut c);
        }
    }

    #[test]
    fn a_wrong_or_missing_psk_fails_the_handshake() {
        let (a, b) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (p1, p2) = (Psk([1; 32]), Psk([2; 32]));
        assert!(matches!(
            run(&a, &b, Some(&p1), Some(&p2)),
            Err(HandshakeError::Noise(_))
        ));
        assert_eq!(
            run(&a, &b, None, Some(&p1)).unwrap_err(),
            HandshakeError::PskMismatch
        );
        assert_eq!(
            run(&a, &b, Some(&p1), None).unwrap_err(),
            HandshakeError::PskMismatch
        );
    }

    #[test]
    fn a_tampered_proposal_breaks_the_handshake() {
        let (a, b) = (Identity::generate().unwrap(), Identity::generate().unwrap());
        let (mut c, mut hs1) = ClientHandshake::start(a.private_bytes(), None, proposal()).unwrap();
        // The proposal sits in clear at the end of HS1: flip its cipher.
        let at = hs1.len() - 3;
        hs1[at] = Cipher::Aes256Gcm.wire_id();
        let (_s, p, hs2) = ServerHandshake::accept(b.private_bytes(), None, &hs1).unwrap();
        assert_eq!(p.cipher, Cipher::Aes256Gcm);
        // The server's answer is keyed to what it saw: the client refuses it.
        assert!(matches!(c.read_answer(&hs2), Err(HandshakeError::Noise(_))));
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        let b = Identity::generate().unwrap();
        for msg in [
            &b""[..],
            b"PFSG\x01\x01\x00\x00",
            b"PFSN\x01\x02\x00\x00",
            b"PFSN\x01\x01\x00\x01\x07",
            b"PFSN\x01\x01\x00\x02\x01\x00",
            b"PFSN\x01\x01\xff\xff",
        ] {
            assert!(ServerHandshake::accept(b.private_bytes(), None, msg).is_err());
        }
    }
}
