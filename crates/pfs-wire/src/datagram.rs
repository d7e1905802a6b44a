//! The datagram format of the UDP transport (`docs/wire.md` §14): every UDP
//! datagram is one packet — a 16-byte header, then one body. Packets carry
//! a reliable, ordered byte stream (DATA), selective acknowledgements whose
//! gaps are the negative acknowledgements (ACK), the opening exchange
//! (OPEN, RETRY, OPEN_ACK) and an abortive CLOSE.
//!
//! ```text
//! client                         server
//! OPEN (conn 0, client id)  ──▶  listener: no state kept
//!                           ◀──  RETRY (a token for this address and id)
//! OPEN (… with the token)   ──▶  listener: new socket on a new port
//!                           ◀──  OPEN_ACK (from the new port: server id)
//! DATA / ACK …              ◀─▶  DATA / ACK …   (each side a stream)
//! DATA with FIN             ◀─▶  DATA with FIN  (each side's end)
//! CLOSE (abort only)        ◀─▶
//! ```
//!
//! Once a protected session has keys, packets are **tagged** (version 2):
//! the same header and body, then a 16-byte tag over both ([`Packet`]
//! finds it; checking it needs the keys, so it is the connection's job).
//!
//! Decoding is zero-copy, bounds-checked and panic-free; meaning (which
//! packet numbers were sent, which offsets fit the window) is the
//! connection core's business, not this module's.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// First two bytes of every packet: `PU`.
pub const DATAGRAM_MAGIC: [u8; 2] = *b"PU";
/// Version of the datagram format: a packet without a tag.
pub const DATAGRAM_VERSION: u8 = 1;
/// The version byte of a tagged packet: the same header and body, then a
/// [`TAG_LEN`]-byte tag over everything before it (`docs/wire.md` §14.7).
pub const DATAGRAM_VERSION_TAGGED: u8 = 2;
/// Length of the tag at the end of a tagged packet.
pub const TAG_LEN: usize = 16;
/// Length of the packet header.
pub const PACKET_HEADER_LEN: usize = 16;
/// Length of the OPEN_ACK body, and of the part of the OPEN body before its token.
pub const OPEN_LEN: usize = 16;
/// Length of an address token (RETRY's body; the end of OPEN's).
pub const TOKEN_LEN: usize = 40;
/// Length of the OPEN body: the opening fields, then a token (zeros for none).
/// Larger than RETRY's body, so the answer to an OPEN is never larger than
/// the OPEN (no amplification towards a spoofed source).
pub const OPEN_REQUEST_LEN: usize = OPEN_LEN + TOKEN_LEN;
// No answer to an OPEN (RETRY, OPEN_ACK, CLOSE BUSY) is larger than the OPEN.
const _: () =
    assert!(TOKEN_LEN < OPEN_REQUEST_LEN && OPEN_LEN < OPEN_REQUEST_LEN && CLOSE_LEN < OPEN_REQUEST_LEN);
/// Length of a DATA body before its bytes.
pub const DATA_HEAD_LEN: usize = 12;
/// Length of an ACK body before its ranges.
pub const ACK_HEAD_LEN: usize = 32;
/// Length of one further ACK range.
pub const ACK_RANGE_LEN: usize = 8;
/// Length of a CLOSE body.
pub const CLOSE_LEN: usize = 8;
/// FIN flag of DATA: the stream ends after this packet's bytes.
pub const DATA_FLAG_FIN: u8 = 0x01;
/// Smallest datagram a peer may announce (IPv6's minimum MTU less headers, rounded down).
pub const MIN_DATAGRAM: u16 = 1200;
/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: u16 = 65507;

mod field {
    use super::{tiles, Field};
    use super::{ACK_HEAD_LEN, CLOSE_LEN, DATA_HEAD_LEN, OPEN_LEN, PACKET_HEADER_LEN};

    pub mod header {
        use super::*;
        pub const MAGIC: Field = Field::new(0, 2);
        pub const VERSION: Field = Field::new(2, 1);
        pub const TYPE: Field = Field::new(3, 1);
        pub const CONN: Field = Field::new(4, 4);
        pub const NUMBER: Field = Field::new(8, 8);
        const _: () = assert!(tiles(&[MAGIC, VERSION, TYPE, CONN, NUMBER], PACKET_HEADER_LEN));
    }

    pub mod open {
        use super::*;
        pub const CONN: Field = Field::new(0, 4);
        pub const MAX_DATAGRAM: Field = Field::new(4, 2);
        pub const RESERVED: Field = Field::new(6, 2);
        pub const WINDOW: Field = Field::new(8, 8);
        const _: () = assert!(tiles(&[CONN, MAX_DATAGRAM, RESERVED, WINDOW], OPEN_LEN));
    }

    pub mod data {
        use super::*;
        pub const OFFSET: Field = Field::new(0, 8);
        pub const LEN: Field = Field::new(8, 2);
        pub const FLAGS: Field = Field::new(10, 1);
        pub const RESERVED: Field = Field::new(11, 1);
        const _: () = assert!(tiles(&[OFFSET, LEN, FLAGS, RESERVED], DATA_HEAD_LEN));
    }

    pub mod ack {
        use super::*;
        pub const LARGEST: Field = Field::new(0, 8);
        pub const WINDOW: Field = Field::new(8, 8);
        pub const DELAY_US: Field = Field::new(16, 4);
        pub const FIRST: Field = Field::new(20, 4);
        pub const COUNT: Field = Field::new(24, 2);
        pub const RESERVED: Field = Field::new(26, 6);
        const _: () = assert!(tiles(
            &[LARGEST, WINDOW, DELAY_US, FIRST, COUNT, RESERVED],
            ACK_HEAD_LEN
        ));
        pub const GAP: Field = Field::new(0, 4);
        pub const LEN: Field = Field::new(4, 4);
        const _: () = assert!(tiles(&[GAP, LEN], super::super::ACK_RANGE_LEN));
    }

    pub mod close {
        use super::*;
        pub const CODE: Field = Field::new(0, 4);
        pub const RESERVED: Field = Field::new(4, 4);
        const _: () = assert!(tiles(&[CODE, RESERVED], CLOSE_LEN));
    }
}

/// Packet types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Client → listener: open a connection.
    Open = 1,
    /// Server → client, from the connection's own port: accepted.
    OpenAck = 2,
    /// Stream bytes at an offset.
    Data = 3,
    /// Selective acknowledgement of packet numbers; its gaps are NAKs.
    Ack = 4,
    /// The sender abandons the connection.
    Close = 5,
    /// Listener → client: prove your address by sending OPEN again with this token.
    Retry = 6,
}

impl PacketType {
    /// Parses a packet type number.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Open,
            2 => Self::OpenAck,
            3 => Self::Data,
            4 => Self::Ack,
            5 => Self::Close,
            6 => Self::Retry,
            other => return Err(WireError::UnknownFrameType(other)),
        })
    }
}

/// The header every packet starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketHeader {
    /// What the body is.
    pub kind: PacketType,
    /// The receiving side's connection id (0 in OPEN: the server has none yet).
    pub conn: u32,
    /// The sender's packet number: 0, 1, 2 … per direction, never reused (a
    /// retransmission gets a new number).
    pub number: u64,
}

impl PacketHeader {
    /// Parses the header at the start of an untagged `packet`; returns it
    /// and the body. A tagged packet is refused here (`UnsupportedVersion`):
    /// only [`Packet::parse`] takes those.
    pub fn parse(packet: &[u8]) -> Result<(Self, &[u8]), WireError> {
        let (header, version) = Self::parse_any(packet)?;
        if version != DATAGRAM_VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        let body = packet.get(PACKET_HEADER_LEN..).unwrap_or(&[]);
        Ok((header, body))
    }

    /// The header of either version, and the version byte.
    fn parse_any(packet: &[u8]) -> Result<(Self, u8), WireError> {
        use field::header as f;
        let r = Reader::<PACKET_HEADER_LEN>::new(packet)?;
        if r.array::<2>(f::MAGIC) != DATAGRAM_MAGIC {
            return Err(WireError::BadMagic);
        }
        let version = r.u8(f::VERSION);
        if version != DATAGRAM_VERSION && version != DATAGRAM_VERSION_TAGGED {
            return Err(WireError::UnsupportedVersion(version));
        }
        let header = Self {
            kind: PacketType::from_u8(r.u8(f::TYPE))?,
            conn: r.u32(f::CONN),
            number: r.u64(f::NUMBER),
        };
        Ok((header, version))
    }

    /// The header's 16 bytes (untagged).
    pub fn emit(&self) -> [u8; PACKET_HEADER_LEN] {
        self.emit_version(DATAGRAM_VERSION)
    }

    /// The header's 16 bytes with the version byte of a tagged packet.
    pub fn emit_tagged(&self) -> [u8; PACKET_HEADER_LEN] {
        self.emit_version(DATAGRAM_VERSION_TAGGED)
    }

    fn emit_version(&self, version: u8) -> [u8; PACKET_HEADER_LEN] {
        use field::header as f;
        let mut w = Writer::<PACKET_HEADER_LEN>::new();
        w.put(f::MAGIC, &DATAGRAM_MAGIC)
            .u8(f::VERSION, version)
            .u8(f::TYPE, self.kind as u8)
            .u32(f::CONN, self.conn)
            .u64(f::NUMBER, self.number);
        w.finish()
    }
}

/// One packet of either version, split: header, body, and for a tagged
/// packet the bytes the tag covers and the tag. Checking the tag is the
/// connection's business (it holds the keys); this view only finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The header.
    pub header: PacketHeader,
    /// The body (the tag excluded).
    pub body: &'a [u8],
    /// For a tagged packet: the bytes the tag covers (header and body) and the tag.
    pub tag: Option<(&'a [u8], &'a [u8; TAG_LEN])>,
}

impl<'a> Packet<'a> {
    /// Parses a whole datagram. A tagged one must hold a header and a tag.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, WireError> {
        let (header, version) = PacketHeader::parse_any(datagram)?;
        if version == DATAGRAM_VERSION {
            let body = datagram.get(PACKET_HEADER_LEN..).unwrap_or(&[]);
            return Ok(Self {
                header,
                body,
                tag: None,
            });
        }
        let covered_len = datagram
            .len()
            .checked_sub(TAG_LEN)
            .filter(|&n| n >= PACKET_HEADER_LEN)
            .ok_or(WireError::Truncated)?;
        let (covered, tag) = datagram.split_at(covered_len);
        let tag: &[u8; TAG_LEN] = tag.try_into().map_err(|_| WireError::Truncated)?;
        Ok(Self {
            header,
            body: covered.get(PACKET_HEADER_LEN..).unwrap_or(&[]),
            tag: Some((covered, tag)),
        })
    }
}

/// OPEN and OPEN_ACK body: who the sender is and what it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// The sender's connection id: the peer puts it in every packet's `conn`.
    pub conn: u32,
    /// The largest UDP payload the sender accepts (`MIN_DATAGRAM..=MAX_DATAGRAM`).
    pub max_datagram: u16,
    /// The sender's initial receive window: stream bytes it accepts before its first ACK.
    pub window: u64,
}

impl Open {
    /// Parses an OPEN or OPEN_ACK body (exactly 16 bytes).
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::open as f;
        let r = Reader::<OPEN_LEN>::exact(body)?;
        if !r.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let max_datagram = r.u16(f::MAX_DATAGRAM);
        if !(MIN_DATAGRAM..=MAX_DATAGRAM).contains(&max_datagram) {
            return Err(WireError::TooLarge);
        }
        Ok(Self {
            conn: r.u32(f::CONN),
            max_datagram,
            window: r.u64(f::WINDOW),
        })
    }

    /// The body's 16 bytes.
    pub fn emit(&self) -> [u8; OPEN_LEN] {
        use field::open as f;
        let mut w = Writer::<OPEN_LEN>::new();
        w.u32(f::CONN, self.conn)
            .u16(f::MAX_DATAGRAM, self.max_datagram)
            .u64(f::WINDOW, self.window);
        w.finish()
    }
}

/// An address token: opaque to the client, which only echoes it. What is
/// inside (an issue time and a MAC over the client's address, port and
/// id) is the listener's business (`docs/wire.md` §14.3).
pub type Token = [u8; TOKEN_LEN];

/// OPEN body: the client's opening fields and the token a RETRY gave it, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRequest {
    /// Who the client is and what it accepts.
    pub open: Open,
    /// The token from the listener's RETRY; `None` (all zeros on the wire) on a first OPEN.
    pub token: Option<Token>,
}

impl OpenRequest {
    /// Parses an OPEN body: exactly 56 bytes (else `Truncated` or
    /// `LengthMismatch`), the opening fields checked as [`Open::parse`] does.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        if body.len() != OPEN_REQUEST_LEN {
            return Err(if body.len() < OPEN_REQUEST_LEN {
                WireError::Truncated
            } else {
                WireError::LengthMismatch
            });
        }
        let (head, token) = body.split_at(OPEN_LEN);
        let open = Open::parse(head)?;
        let token: Token = token.try_into().map_err(|_| WireError::Truncated)?;
        Ok(Self {
            open,
            token: token.iter().any(|&b| b != 0).then_some(token),
        })
    }

    /// The body's 56 bytes.
    pub fn emit(&self) -> [u8; OPEN_REQUEST_LEN] {
        let mut out = [0u8; OPEN_REQUEST_LEN];
        out[..OPEN_LEN].copy_from_slice(&self.open.emit());
        if let Some(token) = &self.token {
            out[OPEN_LEN..].copy_from_slice(token);
        }
        out
    }
}

/// RETRY body: the token the client must send back in its next OPEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// The token; never all zeros (that means "no token" in OPEN).
    pub token: Token,
}

impl Retry {
    /// Parses a RETRY body: exactly 40 bytes (else `Truncated` or
    /// `LengthMismatch`), not all zeros (`LengthMismatch`).
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        let token: Token = match body.len() {
            n if n < TOKEN_LEN => return Err(WireError::Truncated),
            TOKEN_LEN => body.try_into().map_err(|_| WireError::Truncated)?,
            _ => return Err(WireError::LengthMismatch),
        };
        if token.iter().all(|&b| b == 0) {
            // Zeros are OPEN's "no token": a token of none.
            return Err(WireError::LengthMismatch);
        }
        Ok(Self { token })
    }

    /// The body's 40 bytes.
    pub fn emit(&self) -> [u8; TOKEN_LEN] {
        self.token
    }
}

/// A DATA body's head; the stream bytes follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHead {
    /// Stream offset of the first byte.
    pub offset: u64,
    /// Number of bytes that follow (the rest of the datagram, exactly).
    pub len: u16,
    /// The stream ends at `offset + len`.
    pub fin: bool,
}

impl DataHead {
    /// Parses a DATA body; returns the head and its bytes. The bytes must
    /// be the rest of the body exactly (none only with FIN), and the end
    /// must fit in 64 bits.
    pub fn parse(body: &[u8]) -> Result<(Self, &[u8]), WireError> {
        use field::data as f;
        let r = Reader::<DATA_HEAD_LEN>::new(body)?;
        if !r.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let flags = r.u8(f::FLAGS);
        if flags & !DATA_FLAG_FIN != 0 {
            return Err(WireError::BadFlags);
        }
        let head = Self {
            offset: r.u64(f::OFFSET),
            len: r.u16(f::LEN),
            fin: flags & DATA_FLAG_FIN != 0,
        };
        let bytes = body.get(DATA_HEAD_LEN..).unwrap_or(&[]);
        if bytes.len() != usize::from(head.len) || (head.len == 0 && !head.fin) {
            return Err(WireError::LengthMismatch);
        }
        if head.offset.checked_add(u64::from(head.len)).is_none() {
            return Err(WireError::DescriptorOverflow);
        }
        Ok((head, bytes))
    }

    /// The head's 12 bytes.
    pub fn emit(&self) -> [u8; DATA_HEAD_LEN] {
        use field::data as f;
        let mut w = Writer::<DATA_HEAD_LEN>::new();
        w.u64(f::OFFSET, self.offset)
            .u16(f::LEN, self.len)
            .u8(f::FLAGS, if self.fin { DATA_FLAG_FIN } else { 0 });
        w.finish()
    }
}

/// An ACK body's head; `count` further ranges follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckHead {
    /// Largest packet number received.
    pub largest: u64,
    /// The stream offset up to which the sender of the ACK accepts bytes (flow control).
    pub window: u64,
    /// Microseconds between receiving `largest` and sending this ACK.
    pub delay_us: u32,
    /// Packets below `largest` also received: the first range is `largest - first ..= largest`.
    pub first: u32,
    /// Number of further ranges.
    pub count: u16,
}

/// One range of received packet numbers, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRange {
    /// Smallest packet number of the range.
    pub smallest: u64,
    /// Largest packet number of the range.
    pub largest: u64,
}

impl AckHead {
    /// Parses an ACK body: the head, and an iterator over every range
    /// (the first included) from the largest down. The ranges' length must
    /// match `count` exactly; ranges that would go below packet 0 are
    /// refused here, while iterating is then infallible.
    pub fn parse(body: &[u8]) -> Result<(Self, AckRanges<'_>), WireError> {
        use field::ack as f;
        let r = Reader::<ACK_HEAD_LEN>::new(body)?;
        if !r.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let head = Self {
            largest: r.u64(f::LARGEST),
            window: r.u64(f::WINDOW),
            delay_us: r.u32(f::DELAY_US),
            first: r.u32(f::FIRST),
            count: r.u16(f::COUNT),
        };
        let rest = body.get(ACK_HEAD_LEN..).unwrap_or(&[]);
        if rest.len() != usize::from(head.count) * ACK_RANGE_LEN {
            return Err(WireError::LengthMismatch);
        }
        let Some(mut smallest) = head.largest.checked_sub(u64::from(head.first)) else {
            return Err(WireError::DescriptorOverflow);
        };
        for raw in rest.chunks_exact(ACK_RANGE_LEN) {
            let (gap, len) = range_fields(raw)?;
            if gap == 0 {
                return Err(WireError::LengthMismatch);
            }
            smallest = smallest
                .checked_sub(u64::from(gap) + 1)
                .and_then(|top| top.checked_sub(u64::from(len)))
                .ok_or(WireError::DescriptorOverflow)?;
        }
        let ranges = AckRanges {
            next: Some(AckRange {
                smallest: head.largest - u64::from(head.first),
                largest: head.largest,
            }),
            rest,
        };
        Ok((head, ranges))
    }

    /// The head's 32 bytes.
    pub fn emit(&self) -> [u8; ACK_HEAD_LEN] {
        use field::ack as f;
        let mut w = Writer::<ACK_HEAD_LEN>::new();
        w.u64(f::LARGEST, self.largest)
            .u64(f::WINDOW, self.window)
            .u32(f::DELAY_US, self.delay_us)
            .u32(f::FIRST, self.first)
            .u16(f::COUNT, self.count);
        w.finish()
    }
}

fn range_fields(raw: &[u8]) -> Result<(u32, u32), WireError> {
    use field::ack as f;
    let r = Reader::<ACK_RANGE_LEN>::exact(raw)?;
    Ok((r.u32(f::GAP), r.u32(f::LEN)))
}

/// Emits one further ACK range: `gap` missing packets (≥ 1) below the
/// previous range's smallest, then a range of `len + 1` packets.
pub fn emit_ack_range(gap: u32, len: u32) -> [u8; ACK_RANGE_LEN] {
    use field::ack as f;
    let mut w = Writer::<ACK_RANGE_LEN>::new();
    w.u32(f::GAP, gap).u32(f::LEN, len);
    w.finish()
}

/// The ranges of a parsed ACK, largest first.
#[derive(Debug, Clone)]
pub struct AckRanges<'a> {
    next: Option<AckRange>,
    rest: &'a [u8],
}

impl Iterator for AckRanges<'_> {
    type Item = AckRange;

    fn next(&mut self) -> Option<AckRange> {
        let current = self.next.take()?;
        if let Some((raw, rest)) = self.rest.split_first_chunk::<ACK_RANGE_LEN>() {
            self.rest = rest;
            // Checked once in `parse`; a failure here cannot happen and ends the iteration.
            if let Ok((gap, len)) = range_fields(raw) {
                let largest = current.smallest.checked_sub(u64::from(gap) + 1);
                if let Some(largest) = largest {
                    if let Some(smallest) = largest.checked_sub(u64::from(len)) {
                        self.next = Some(AckRange { smallest, largest });
                    }
                }
            }
        }
        Some(current)
    }
}

/// CLOSE codes.
pub mod close_code {
    /// The application closed the connection before its streams ended.
    pub const ABORT: u32 = 0;
    /// The peer broke the datagram protocol.
    pub const PROTOCOL: u32 = 1;
    /// The sender gave up waiting for the peer.
    pub const TIMEOUT: u32 = 2;
    /// The listener refuses a client that proved its address: it holds too
    /// many connections (from that address, or in all). Sent from the
    /// listening port in answer to an OPEN, to the client's id.
    pub const BUSY: u32 = 3;
}

/// CLOSE body: why the sender abandons the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// One of [`close_code`]; unknown codes are kept as they are.
    pub code: u32,
}

impl Close {
    /// Parses a CLOSE body (exactly 8 bytes).
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::close as f;
        let r = Reader::<CLOSE_LEN>::exact(body)?;
        if !r.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self { code: r.u32(f::CODE) })
    }

    /// The body's 8 bytes.
    pub fn emit(&self) -> [u8; CLOSE_LEN] {
        use field::close as f;
        let mut w = Writer::<CLOSE_LEN>::new();
        w.u32(f::CODE, self.code);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_refusals() {
        let h = PacketHeader {
            kind: PacketType::Data,
            conn: 7,
            number: 1 << 40,
        };
        let mut pkt = h.emit().to_vec();
        pkt.extend_from_slice(b"body");
        let (back, body) = PacketHeader::parse(&pkt).unwrap();
        assert_eq!(back, h);
        assert_eq!(body, b"body");
        assert_eq!(PacketHeader::parse(&pkt[..15]), Err(WireError::Truncated));
        let mut bad = pkt.clone();
        bad[0] = b'X';
        assert_eq!(PacketHeader::parse(&bad), Err(WireError::BadMagic));
        let mut bad = pkt.clone();
        bad[2] = 9;
        assert_eq!(PacketHeader::parse(&bad), Err(WireError::UnsupportedVersion(9)));
        let mut bad = pkt;
        bad[3] = 0;
        assert_eq!(PacketHeader::parse(&bad), Err(WireError::UnknownFrameType(0)));
    }

    #[test]
    fn open_and_close() {
        let o = Open {
            conn: 0xdead_beef,
            max_datagram: 1472,
            window: 32 << 20,
        };
        assert_eq!(Open::parse(&o.emit()), Ok(o));
        let mut small = o;
        small.max_datagram = 100;
        assert_eq!(Open::parse(&small.emit()), Err(WireError::TooLarge));
        assert_eq!(Open::parse(&o.emit()[..15]), Err(WireError::Truncated));
        let c = Close { code: 2 };
        assert_eq!(Close::parse(&c.emit()), Ok(c));
    }

    #[test]
    fn open_request_and_retry() {
        let open = Open {
            conn: 9,
            max_datagram: 1472,
            window: 1 << 18,
        };
        let bare = OpenRequest { open, token: None };
        let body = bare.emit();
        assert_eq!(body.len(), OPEN_REQUEST_LEN);
        assert_eq!(OpenRequest::parse(&body), Ok(bare));
        let with = OpenRequest {
            open,
            token: Some([3; TOKEN_LEN]),
        };
        assert_eq!(OpenRequest::parse(&with.emit()), Ok(with));
        assert_eq!(OpenRequest::parse(&body[..OPEN_LEN]), Err(WireError::Truncated));
        let mut long = body.to_vec();
        long.push(0);
        assert_eq!(OpenRequest::parse(&long), Err(WireError::LengthMismatch));
        let r = Retry {
            token: [5; TOKEN_LEN],
        };
        assert_eq!(Retry::parse(&r.emit()), Ok(r));
        assert_eq!(Retry::parse(&[0; TOKEN_LEN]), Err(WireError::LengthMismatch));
        assert_eq!(Retry::parse(&[5; TOKEN_LEN - 1]), Err(WireError::Truncated));
        assert_eq!(Retry::parse(&[5; TOKEN_LEN + 1]), Err(WireError::LengthMismatch));
    }

    #[test]
    fn data_checks_length_and_flags() {
        let h = DataHead {
            offset: 100,
            len: 3,
            fin: true,
        };
        let mut body = h.emit().to_vec();
        body.extend_from_slice(b"abc");
        assert_eq!(DataHead::parse(&body), Ok((h, &b"abc"[..])));
        assert_eq!(DataHead::parse(&body[..14]), Err(WireError::LengthMismatch));
        body[10] = 2;
        assert_eq!(DataHead::parse(&body), Err(WireError::BadFlags));
        let over = DataHead {
            offset: u64::MAX - 1,
            len: 3,
            fin: false,
        };
        let mut body = over.emit().to_vec();
        body.extend_from_slice(b"abc");
        assert_eq!(DataHead::parse(&body), Err(WireError::DescriptorOverflow));
    }

    #[test]
    fn ack_ranges_walk_down() {
        // Received 95..=100, 90..=92, 50..=50.
        let head = AckHead {
            largest: 100,
            window: 1 << 20,
            delay_us: 250,
            first: 5,
            count: 2,
        };
        let mut body = head.emit().to_vec();
        body.extend_from_slice(&emit_ack_range(2, 2)); // 93, 94 missing → 90..=92
        body.extend_from_slice(&emit_ack_range(39, 0)); // 51..=89 missing → 50
        let (back, ranges) = AckHead::parse(&body).unwrap();
        assert_eq!(back, head);
        let got: Vec<(u64, u64)> = ranges.map(|r| (r.smallest, r.largest)).collect();
        assert_eq!(got, vec![(95, 100), (90, 92), (50, 50)]);
    }

    #[test]
    fn ack_refuses_underflow_zero_gap_and_bad_length() {
        let head = AckHead {
            largest: 10,
            window: 0,
            delay_us: 0,
            first: 11,
            count: 0,
        };
        assert_eq!(
            AckHead::parse(&head.emit()).unwrap_err(),
            WireError::DescriptorOverflow
        );
        let head = AckHead {
            first: 2,
            count: 1,
            ..head
        };
        let mut body = head.emit().to_vec();
        body.extend_from_slice(&emit_ack_range(0, 1));
        assert_eq!(AckHead::parse(&body).unwrap_err(), WireError::LengthMismatch);
        let mut body = head.emit().to_vec();
        body.extend_from_slice(&emit_ack_range(7, 1)); // 8 - 8 = 0 → top 0, len 1 → below 0
        assert_eq!(AckHead::parse(&body).unwrap_err(), WireError::DescriptorOverflow);
        let mut body = head.emit().to_vec();
        body.extend_from_slice(&emit_ack_range(7, 0)); // exactly packet 0
        let (_, ranges) = AckHead::parse(&body).unwrap();
        assert_eq!(ranges.count(), 2);
        assert_eq!(
            AckHead::parse(&head.emit()).unwrap_err(),
            WireError::LengthMismatch
        );
    }
}
