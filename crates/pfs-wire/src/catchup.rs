//! Blob catch-up (`docs/wire.md` §16): the frames that bring a receiver's
//! blob to the sender's bytes before grams flow, moving only the blocks
//! that differ.
//!
//! - CATCHUP_BEGIN (type 36, replica → source, 32 bytes): the replica's
//!   nonce, block size and the largest BLOCKS body it accepts.
//! - CATCHUP_REGIONS (37, source → replica): a run of the source's
//!   fingerprint region hashes (32 bytes each), flag `LAST` on the last run.
//! - CATCHUP_HASHES (38, replica → source): a run of the replica's keyed
//!   block hashes (16 bytes each) inside a region that differs; an empty
//!   run with `LAST` ends the replica's asking.
//! - CATCHUP_BLOCKS (39, source → replica, bulk): a run of blocks whose
//!   hashes differed, their bytes; `LAST` ends the answer to one HASHES run.
//! - CATCHUP_END (40, both, 64 bytes): counts and the fingerprint root.
//!
//! Decoding is zero-copy and total; the fixed layouts live once in the
//! private `field` tables. What the codec cannot know — the block size, the
//! blob's length, the order of runs — the session checks (§16.6).

use crate::layout::{tiles, Field, Reader, Writer};
use crate::WireError;

/// Size of a CATCHUP_BEGIN body.
pub const BEGIN_LEN: usize = 32;
/// Size of the head of REGIONS, HASHES and BLOCKS bodies.
pub const RUN_HEAD_LEN: usize = 16;
/// Size of a CATCHUP_END body.
pub const END_LEN: usize = 64;
/// Size of one region hash (the fingerprint's BLAKE3).
pub const REGION_HASH_LEN: usize = 32;
/// Size of one block hash (keyed XXH3-128).
pub const BLOCK_HASH_LEN: usize = 16;
/// Most region hashes in one CATCHUP_REGIONS: the body stays within the
/// 64 KiB control-frame cap.
pub const MAX_REGION_HASHES: u32 = 2047;
/// Most block hashes in one CATCHUP_HASHES (a 32 KiB run of hashes).
pub const MAX_BLOCK_HASHES: u32 = 2048;
/// Frame flag of REGIONS, HASHES and BLOCKS: the last of its series.
pub const FLAG_LAST: u16 = 0x0001;

/// Byte ranges of the fixed layouts (`docs/wire.md` §16.2–§16.5).
mod field {
    use super::{tiles, Field};

    /// CATCHUP_BEGIN.
    pub mod begin {
        use super::{tiles, Field};
        use crate::catchup::BEGIN_LEN as LEN;

        pub const REPLICA_NONCE: Field = Field::new(0, 8);
        pub const BLOCK_SIZE: Field = Field::new(8, 4);
        pub const MAX_BLOCKS_BODY: Field = Field::new(12, 4);
        pub const REGIONS: Field = Field::new(16, 8);
        pub const RESERVED: Field = Field::new(24, 8);

        const _: () = assert!(tiles(
            &[REPLICA_NONCE, BLOCK_SIZE, MAX_BLOCKS_BODY, REGIONS, RESERVED],
            LEN
        ));
    }

    /// The head of REGIONS, HASHES and BLOCKS.
    pub mod run {
        use super::{tiles, Field};
        use crate::catchup::RUN_HEAD_LEN as LEN;

        pub const FIRST: Field = Field::new(0, 8);
        pub const COUNT: Field = Field::new(8, 4);
        pub const RESERVED: Field = Field::new(12, 4);

        const _: () = assert!(tiles(&[FIRST, COUNT, RESERVED], LEN));
    }

    /// CATCHUP_END.
    pub mod end {
        use super::{tiles, Field};
        use crate::catchup::END_LEN as LEN;

        pub const BLOCKS_COMPARED: Field = Field::new(0, 8);
        pub const BLOCKS_MOVED: Field = Field::new(8, 8);
        pub const BYTES_MOVED: Field = Field::new(16, 8);
        pub const RESERVED: Field = Field::new(24, 8);
        pub const ROOT: Field = Field::new(32, 32);

        const _: () = assert!(tiles(
            &[BLOCKS_COMPARED, BLOCKS_MOVED, BYTES_MOVED, RESERVED, ROOT],
            LEN
        ));
    }
}

/// CATCHUP_BEGIN: how the replica wants the catch-up run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchupBegin {
    /// The replica's random nonce; with HELLO's `session_nonce` it keys
    /// the block hashes.
    pub replica_nonce: u64,
    /// Bytes per block (a power of two dividing the region size, ≥ 4096:
    /// the session checks it).
    pub block_size: u32,
    /// Largest CATCHUP_BLOCKS body the replica accepts.
    pub max_blocks_body: u32,
    /// Regions of the replica's blob.
    pub regions: u64,
}

impl CatchupBegin {
    /// Checks and decodes a CATCHUP_BEGIN body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::begin as f;
        let b = Reader::<BEGIN_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            replica_nonce: b.u64(f::REPLICA_NONCE),
            block_size: b.u32(f::BLOCK_SIZE),
            max_blocks_body: b.u32(f::MAX_BLOCKS_BODY),
            regions: b.u64(f::REGIONS),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; BEGIN_LEN] {
        use field::begin as f;
        let mut w = Writer::<BEGIN_LEN>::new();
        w.u64(f::REPLICA_NONCE, self.replica_nonce)
            .u32(f::BLOCK_SIZE, self.block_size)
            .u32(f::MAX_BLOCKS_BODY, self.max_blocks_body)
            .u64(f::REGIONS, self.regions);
        w.finish()
    }
}

/// The head of a REGIONS, HASHES or BLOCKS body: a run of `count` regions
/// or blocks from index `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHead {
    /// Index of the first region (REGIONS) or block (HASHES, BLOCKS).
    pub first: u64,
    /// Regions or blocks in the run.
    pub count: u32,
}

impl RunHead {
    /// Checks and decodes the first 16 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        use field::run as f;
        let b = Reader::<RUN_HEAD_LEN>::new(buf)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            first: b.u64(f::FIRST),
            count: b.u32(f::COUNT),
        })
    }

    /// Encodes the head.
    pub fn emit(&self) -> [u8; RUN_HEAD_LEN] {
        use field::run as f;
        let mut w = Writer::<RUN_HEAD_LEN>::new();
        w.u64(f::FIRST, self.first).u32(f::COUNT, self.count);
        w.finish()
    }

    /// Index one past the run; `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.first.checked_add(u64::from(self.count))
    }
}

/// A run of hashes (REGIONS: 32 bytes each; HASHES: 16 bytes each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRun<'a, const N: usize> {
    /// The run.
    pub head: RunHead,
    /// `head.count` hashes of `N` bytes.
    hashes: &'a [u8],
}

/// CATCHUP_REGIONS: a run of the source's region hashes.
pub type RegionHashes<'a> = HashRun<'a, REGION_HASH_LEN>;
/// CATCHUP_HASHES: a run of the replica's block hashes.
pub type BlockHashes<'a> = HashRun<'a, BLOCK_HASH_LEN>;

impl<'a, const N: usize> HashRun<'a, N> {
    /// Most hashes of this kind in one frame.
    const MAX: u32 = if N == REGION_HASH_LEN {
        MAX_REGION_HASHES
    } else {
        MAX_BLOCK_HASHES
    };

    /// Checks and decodes a body: head, then exactly `count` hashes.
    /// REGIONS needs at least one hash; HASHES may be empty (the replica's
    /// last, `LAST`, frame).
    pub fn parse(body: &'a [u8]) -> Result<Self, WireError> {
        let head = RunHead::parse(body)?;
        if N == REGION_HASH_LEN && head.count == 0 {
            return Err(WireError::LengthMismatch);
        }
        if head.count > Self::MAX {
            return Err(WireError::TooLarge);
        }
        if head.end().is_none() {
            return Err(WireError::DescriptorOverflow);
        }
        let hashes = &body[RUN_HEAD_LEN..];
        if hashes.len() != head.count as usize * N {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self { head, hashes })
    }

    /// The hashes, in run order.
    pub fn hashes(&self) -> impl ExactSizeIterator<Item = &'a [u8; N]> + 'a {
        self.hashes
            .chunks_exact(N)
            .map(|c| c.first_chunk::<N>().unwrap_or(&[0; N]))
    }

    /// Appends a body: the head, then `hashes` (at most the frame's cap;
    /// the caller keeps within it).
    pub fn emit<'h>(first: u64, hashes: impl ExactSizeIterator<Item = &'h [u8; N]>, out: &mut Vec<u8>) {
        let count = u32::try_from(hashes.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&RunHead { first, count }.emit());
        for h in hashes {
            out.extend_from_slice(h);
        }
    }
}

/// CATCHUP_BLOCKS: a run of blocks and their bytes. The codec checks the
/// head; that the bytes are exactly the run's blocks (given the block size
/// and the blob's length) is checked with [`CatchupBlocks::parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchupBlocks<'a> {
    /// The run of blocks.
    pub head: RunHead,
    /// Their bytes, concatenated.
    pub bytes: &'a [u8],
}

impl<'a> CatchupBlocks<'a> {
    /// Checks and decodes a body, given the `block_size` of the session and
    /// the `blob_len` of the receiving side's blob: the head (§16.5), then
    /// exactly the bytes of blocks `first .. first + count` (the blob's
    /// last block may be short). A block outside the blob →
    /// `DescriptorOverflow`; other lengths → `LengthMismatch`.
    pub fn parse(body: &'a [u8], block_size: u32, blob_len: u64) -> Result<Self, WireError> {
        let head = RunHead::parse(body)?;
        let want = blocks_len(head, block_size, blob_len)?;
        let bytes = &body[RUN_HEAD_LEN..];
        if bytes.len() as u64 != want {
            return Err(WireError::LengthMismatch);
        }
        Ok(Self { head, bytes })
    }
}

/// Bytes of the blocks of `head` in a blob of `blob_len` bytes cut in
/// blocks of `block_size`; `DescriptorOverflow` when a block lies outside
/// the blob.
pub fn blocks_len(head: RunHead, block_size: u32, blob_len: u64) -> Result<u64, WireError> {
    let bs = u64::from(block_size.max(1));
    let blocks = blob_len.div_ceil(bs);
    let end = head.end().ok_or(WireError::DescriptorOverflow)?;
    if end > blocks || (head.count > 0 && head.first >= blocks) {
        return Err(WireError::DescriptorOverflow);
    }
    let start = head.first.saturating_mul(bs).min(blob_len);
    let stop = end.saturating_mul(bs).min(blob_len);
    Ok(stop - start)
}

/// CATCHUP_END: what one side did, and its fingerprint root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CatchupEnd {
    /// Blocks whose hashes were compared (source) or sent (replica).
    pub blocks_compared: u64,
    /// Blocks sent (source) or written (replica).
    pub blocks_moved: u64,
    /// Their bytes.
    pub bytes_moved: u64,
    /// The fingerprint root of this side's blob: the source's; the
    /// replica's after the catch-up.
    pub root: [u8; 32],
}

impl CatchupEnd {
    /// Checks and decodes a CATCHUP_END body.
    pub fn parse(body: &[u8]) -> Result<Self, WireError> {
        use field::end as f;
        let b = Reader::<END_LEN>::exact(body)?;
        if !b.is_zero(f::RESERVED) {
            return Err(WireError::ReservedNonZero);
        }
        Ok(Self {
            blocks_compared: b.u64(f::BLOCKS_COMPARED),
            blocks_moved: b.u64(f::BLOCKS_MOVED),
            bytes_moved: b.u64(f::BYTES_MOVED),
            root: b.array(f::ROOT),
        })
    }

    /// Encodes the body.
    pub fn emit(&self) -> [u8; END_LEN] {
        use field::end as f;
        let mut w = Writer::<END_LEN>::new();
        w.u64(f::BLOCKS_COMPARED, self.blocks_compared)
            .u64(f::BLOCKS_MOVED, self.blocks_moved)
            .u64(f::BYTES_MOVED, self.bytes_moved)
            .put(f::ROOT, &self.root);
        w.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn begin_roundtrip_and_checks() {
        let b = CatchupBegin {
            replica_nonce: 7,
            block_size: 16384,
            max_blocks_body: 4 << 20,
            regions: 1024,
        };
        let body = b.emit();
        assert_eq!(CatchupBegin::parse(&body), Ok(b));
        assert_eq!(CatchupBegin::parse(&body[..31]), Err(WireError::Truncated));
        let mut long = body.to_vec();
        long.push(0);
        assert_eq!(CatchupBegin::parse(&long), Err(WireError::LengthMismatch));
        let mut bad = body;
        bad[31] = 1;
        assert_eq!(CatchupBegin::parse(&bad), Err(WireError::ReservedNonZero));
    }

    #[test]
    fn runs_check_counts() {
        let hashes = [[1u8; 32], [2u8; 32]];
        let mut body = Vec::new();
        RegionHashes::emit(5, hashes.iter(), &mut body);
        let r = RegionHashes::parse(&body).unwrap();
        assert_eq!(r.head, RunHead { first: 5, count: 2 });
        assert_eq!(r.hashes().collect::<Vec<_>>(), vec![&[1u8; 32], &[2u8; 32]]);
        assert_eq!(RegionHashes::parse(&body[..47]), Err(WireError::LengthMismatch));
        let mut empty = Vec::new();
        RegionHashes::emit(0, std::iter::empty::<&[u8; 32]>(), &mut empty);
        assert_eq!(RegionHashes::parse(&empty), Err(WireError::LengthMismatch));
        let mut last = Vec::new();
        BlockHashes::emit(0, std::iter::empty::<&[u8; 16]>(), &mut last);
        assert!(
            BlockHashes::parse(&last).is_ok(),
            "an empty HASHES run ends the asking"
        );
        let mut big = RunHead {
            first: 0,
            count: MAX_BLOCK_HASHES + 1,
        }
        .emit()
        .to_vec();
        big.resize(RUN_HEAD_LEN + 16 * (MAX_BLOCK_HASHES as usize + 1), 0);
        assert_eq!(BlockHashes::parse(&big), Err(WireError::TooLarge));
        let wrap = RunHead {
            first: u64::MAX,
            count: 1,
        }
        .emit();
        let mut wrap = wrap.to_vec();
        wrap.extend_from_slice(&[0; 16]);
        assert_eq!(BlockHashes::parse(&wrap), Err(WireError::DescriptorOverflow));
    }

    #[test]
    fn blocks_are_the_runs_bytes() {
        let mut body = RunHead { first: 2, count: 1 }.emit().to_vec();
        body.extend_from_slice(&[9; 1808]);
        // A 10000-byte blob in 4096-byte blocks: block 2 is 1808 bytes.
        let b = CatchupBlocks::parse(&body, 4096, 10_000).unwrap();
        assert_eq!(b.bytes.len(), 1808);
        assert_eq!(
            CatchupBlocks::parse(&body[..100], 4096, 10_000),
            Err(WireError::LengthMismatch)
        );
        let out = RunHead { first: 3, count: 1 }.emit();
        assert_eq!(
            CatchupBlocks::parse(&out, 4096, 10_000),
            Err(WireError::DescriptorOverflow)
        );
    }

    #[test]
    fn end_roundtrip() {
        let e = CatchupEnd {
            blocks_compared: 1,
            blocks_moved: 2,
            bytes_moved: 3,
            root: [4; 32],
        };
        assert_eq!(CatchupEnd::parse(&e.emit()), Ok(e));
        let mut bad = e.emit();
        bad[24] = 1;
        assert_eq!(CatchupEnd::parse(&bad), Err(WireError::ReservedNonZero));
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), bs in 0u32..70_000, len: u64) {
            let _ = CatchupBegin::parse(&bytes);
            let _ = RegionHashes::parse(&bytes).map(|r| r.hashes().count());
            let _ = BlockHashes::parse(&bytes).map(|r| r.hashes().count());
            let _ = CatchupBlocks::parse(&bytes, bs, len);
            let _ = CatchupEnd::parse(&bytes);
        }
    }
}
