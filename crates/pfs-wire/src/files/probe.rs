//! PROBE and PROBE_REPLY (`docs/wire.md` §10.10): before chunking, the
//! sender asks which whole files the receiver already holds; the receiver
//! answers with a bitmap.

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

use super::{valid_nsec, INDEX_KEY_LEN, MAX_PATH_LEN};

/// PROBE and PROBE_REPLY head: `first_no` u64, `count` u32, reserved u32.
pub const PROBE_HEAD_LEN: usize = 16;
/// Fixed part of one PROBE entry (the path follows).
pub const PROBE_ENTRY_FIXED_LEN: usize = 32;

/// Byte ranges of the shared head and of a PROBE entry's fixed part.
mod field {
    use super::{tiles, Field};

    /// PROBE and PROBE_REPLY head.
    pub mod head {
        use super::{tiles, Field};
        use crate::files::probe::PROBE_HEAD_LEN as LEN;

        pub const FIRST_NO: Field = Field::new(0, 8);
        pub const COUNT: Field = Field::new(8, 4);
        pub const RESERVED: Field = Field::new(12, 4);

        const _: () = assert!(tiles(&[FIRST_NO, COUNT, RESERVED], LEN));
    }

    /// One PROBE entry; the path follows.
    pub mod entry {
        use super::{tiles, Field};
        use crate::files::probe::PROBE_ENTRY_FIXED_LEN as LEN;
        use crate::files::INDEX_KEY_LEN;

        pub const SIZE: Field = Field::new(0, 8);
        pub const MTIME_SEC: Field = Field::new(8, 8);
        pub const MTIME_NSEC: Field = Field::new(16, 4);
        pub const PATH_LEN: Field = Field::new(20, 2);
        pub const RESERVED: Field = Field::new(22, 2);
        pub const KEY: Field = Field::new(24, INDEX_KEY_LEN);

        const _: () = assert!(tiles(
            &[SIZE, MTIME_SEC, MTIME_NSEC, PATH_LEN, RESERVED, KEY],
            LEN
        ));
    }
}

/// One file the sender asks about before chunking it (PROBE): does the
/// receiver already hold this content at this path?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeEntry<'a> {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds part of the modification time (< 10^9).
    pub mtime_nsec: u32,
    /// First 8 bytes of the file's BLAKE3.
    pub key: [u8; INDEX_KEY_LEN],
    /// Relative path, as in FILE.
    pub path: &'a [u8],
}

impl ProbeEntry<'_> {
    /// Appends the encoded entry (path cut at [`MAX_PATH_LEN`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        use field::entry as f;
        let path = &self.path[..self.path.len().min(MAX_PATH_LEN)];
        let mut w = Writer::<PROBE_ENTRY_FIXED_LEN>::new();
        w.u64(f::SIZE, self.size)
            .i64(f::MTIME_SEC, self.mtime_sec)
            .u32(f::MTIME_NSEC, self.mtime_nsec)
            .u16(f::PATH_LEN, path.len() as u16)
            .put(f::KEY, &self.key);
        out.extend_from_slice(&w.finish());
        out.extend_from_slice(path);
    }
}

/// Head of PROBE and PROBE_REPLY: the number of the first entry (entries
/// are numbered 0, 1, 2, … across the session's PROBE frames) and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeHead {
    /// Number of the first entry in this frame.
    pub first_no: u64,
    /// Entries in this frame.
    pub count: u32,
}

impl ProbeHead {
    /// Encodes the head.
    pub fn emit(&self) -> [u8; PROBE_HEAD_LEN] {
        use field::head as f;
        let mut w = Writer::<PROBE_HEAD_LEN>::new();
        w.u64(f::FIRST_NO, self.first_no).u32(f::COUNT, self.count);
        w.finish()
    }

    fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::head as f;
        let b = Reader::<PROBE_HEAD_LEN>::new(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            first_no: b.u64(f::FIRST_NO),
            count: b.u32(f::COUNT),
        })
    }
}

/// Decodes a PROBE body: its head and an iterator over its entries (each
/// bounds-checked as it is read; bytes left after `count` entries are
/// `TrailingBytes`).
pub fn parse_probe(body: &[u8]) -> Result<(ProbeHead, ProbeIter<'_>), WireError> {
    let head = ProbeHead::parse(body)?;
    Ok((
        head,
        ProbeIter {
            rest: body.get(PROBE_HEAD_LEN..).unwrap_or_default(),
            left: head.count,
        },
    ))
}

/// Entries of a PROBE body.
#[derive(Debug, Clone)]
pub struct ProbeIter<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> ProbeIter<'a> {
    fn entry(&mut self) -> Result<ProbeEntry<'a>, WireError> {
        use field::entry as f;
        let b = Reader::<PROBE_ENTRY_FIXED_LEN>::new(self.rest).map_err(|_| WireError::TableTruncated)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        let mtime_nsec = b.u32(f::MTIME_NSEC);
        if !valid_nsec(mtime_nsec) {
            return Err(WireError::LengthMismatch);
        }
        let path_len = usize::from(b.u16(f::PATH_LEN));
        if path_len > MAX_PATH_LEN {
            return Err(WireError::TooLarge);
        }
        let (path, rest) = self
            .rest
            .get(PROBE_ENTRY_FIXED_LEN..)
            .and_then(|after| after.split_at_checked(path_len))
            .ok_or(WireError::TableTruncated)?;
        self.rest = rest;
        Ok(ProbeEntry {
            size: b.u64(f::SIZE),
            mtime_sec: b.i64(f::MTIME_SEC),
            mtime_nsec,
            key: b.array(f::KEY),
            path,
        })
    }
}

impl<'a> Iterator for ProbeIter<'a> {
    type Item = Result<ProbeEntry<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            if self.rest.is_empty() {
                return None;
            }
            self.rest = &[];
            return Some(Err(WireError::TrailingBytes));
        }
        self.left -= 1;
        let r = self.entry();
        if r.is_err() {
            // One error ends the iteration.
            self.left = 0;
            self.rest = &[];
        }
        Some(r)
    }
}

/// Decodes a PROBE_REPLY body: its head and the bitmap (bit `i % 8` of byte
/// `i / 8` set = the receiver holds entry `first_no + i`). The bitmap is
/// exactly `ceil(count / 8)` bytes and its unused high bits are zero.
pub fn parse_probe_reply(body: &[u8]) -> Result<(ProbeHead, &[u8]), WireError> {
    let head = ProbeHead::parse(body)?;
    let bits = body.get(PROBE_HEAD_LEN..).unwrap_or_default();
    if bits.len() != (head.count as usize).div_ceil(8) {
        return Err(WireError::LengthMismatch);
    }
    let spare = head.count % 8;
    if spare != 0 && bits.last().is_some_and(|&b| b >> spare != 0) {
        return Err(WireError::ReservedNonZero);
    }
    Ok((head, bits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn probe_parse_emit(
            first_no: u64,
            entries in proptest::collection::vec(
                (any::<u64>(), any::<i64>(), 0u32..1_000_000_000, any::<[u8; 8]>(),
                 proptest::collection::vec(any::<u8>(), 0..32)),
                0..6,
            ),
        ) {
            let entries: Vec<ProbeEntry<'_>> = entries
                .iter()
                .map(|(size, mtime_sec, mtime_nsec, key, path)| ProbeEntry {
                    size: *size,
                    mtime_sec: *mtime_sec,
                    mtime_nsec: *mtime_nsec,
                    key: *key,
                    path,
                })
                .collect();
            let head = ProbeHead { first_no, count: entries.len() as u32 };
            let mut body = head.emit().to_vec();
            for e in &entries {
                e.emit(&mut body);
            }
            let (got_head, it) = parse_probe(&body).unwrap();
            prop_assert_eq!(got_head, head);
            prop_assert_eq!(it.collect::<Result<Vec<_>, _>>(), Ok(entries));
        }

        #[test]
        fn probe_reply_parse_emit(first_no: u64, held in proptest::collection::vec(any::<bool>(), 0..40)) {
            let head = ProbeHead { first_no, count: held.len() as u32 };
            let mut bits = vec![0u8; held.len().div_ceil(8)];
            for (i, _) in held.iter().enumerate().filter(|(_, h)| **h) {
                bits[i / 8] |= 1 << (i % 8);
            }
            let mut body = head.emit().to_vec();
            body.extend_from_slice(&bits);
            prop_assert_eq!(parse_probe_reply(&body), Ok((head, &bits[..])));
        }
    }
}
