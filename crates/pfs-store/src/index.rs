//! The on-disk chunk index `DIR/index`: header, records, replay, append.
//!
//! Layout (all integers little-endian; the crate docs carry the same table):
//!
//! ```text
//! header, 512 bytes
//!   0    8  magic "PFSINDEX"
//!   8    4  format version (1)
//!  12    4  header length (512)
//!  16   16  store id (random at creation; replaced when recovery drops records)
//!  32    1  blob location: 0 = DIR/blob, 1 = hugetlbfs file at the path below
//!  33    1  reserved, 0
//!  34    2  blob path length (0 for DIR/blob, at most 440)
//!  36    4  record length (48)
//!  40    8  page size of the blob when the store was created
//!  48    8  creation time, seconds since the Unix epoch
//!  56  440  blob path bytes, zero padded
//! 496   12  reserved, 0
//! 508    4  CRC-32C of bytes 0..508
//! record i at 512 + 48 * i, i = sequence number
//!   0   32  BLAKE3 of the chunk
//!  32    8  blob offset
//!  40    4  chunk length
//!  44    4  CRC-32C of bytes 0..44
//! ```

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{FormatProblem, InputProblem, StoreError};
use crate::{ChunkLoc, IndexRecord};

/// First bytes of every index file.
pub(crate) const MAGIC: [u8; 8] = *b"PFSINDEX";
/// The index format this code reads and writes.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Bytes before the first record.
pub(crate) const HEADER_LEN: u64 = 512;
/// Bytes per record.
pub(crate) const RECORD_LEN: u64 = 48;
/// Longest blob path the header holds.
pub(crate) const MAX_PATH_BYTES: usize = 440;

/// Byte ranges of the header and record fields.
mod field {
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const VERSION: Range<usize> = 8..12;
    pub const HEADER_LEN: Range<usize> = 12..16;
    pub const ID: Range<usize> = 16..32;
    pub const LOCATION: usize = 32;
    pub const PATH_LEN: Range<usize> = 34..36;
    pub const RECORD_LEN: Range<usize> = 36..40;
    pub const PAGE_SIZE: Range<usize> = 40..48;
    pub const CREATED: Range<usize> = 48..56;
    pub const PATH: Range<usize> = 56..496;
    pub const HEADER_CRC: Range<usize> = 508..512;

    pub const REC_HASH: Range<usize> = 0..32;
    pub const REC_OFFSET: Range<usize> = 32..40;
    pub const REC_LEN: Range<usize> = 40..44;
    pub const REC_CRC: Range<usize> = 44..48;
}

/// Where the blob file lives, as recorded in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlobLocation {
    /// `DIR/blob`, next to the index.
    InDir,
    /// A file on a hugetlbfs mount, by absolute path.
    HugeTlbFs(PathBuf),
}

/// The decoded index header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub id: [u8; 16],
    pub location: BlobLocation,
    pub page_size: u64,
    pub created_unix: u64,
}

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl Header {
    /// The 512 header bytes. Fails only for a path longer than
    /// [`MAX_PATH_BYTES`].
    pub(crate) fn encode(&self) -> Result<[u8; HEADER_LEN as usize], StoreError> {
        let mut b = [0u8; HEADER_LEN as usize];
        b[field::MAGIC].copy_from_slice(&MAGIC);
        b[field::VERSION].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[field::HEADER_LEN].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[field::ID].copy_from_slice(&self.id);
        b[field::RECORD_LEN].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
        b[field::PAGE_SIZE].copy_from_slice(&self.page_size.to_le_bytes());
        b[field::CREATED].copy_from_slice(&self.created_unix.to_le_bytes());
        if let BlobLocation::HugeTlbFs(p) = &self.location {
            let bytes = p.as_os_str().as_bytes();
            if bytes.len() > MAX_PATH_BYTES || bytes.is_empty() {
                return Err(StoreError::InvalidInput {
                    reason: InputProblem::HugeTlbFsPathTooLong {
                        path: p.clone(),
                        max: MAX_PATH_BYTES,
                    },
                });
            }
            b[field::LOCATION] = 1;
            b[field::PATH_LEN].copy_from_slice(&(bytes.len() as u16).to_le_bytes());
            b[field::PATH][..bytes.len()].copy_from_slice(bytes);
        }
        let crc = crc32c::crc32c(&b[..field::HEADER_CRC.start]);
        b[field::HEADER_CRC].copy_from_slice(&crc.to_le_bytes());
        Ok(b)
    }

    /// Check and decode header bytes read from `path`.
    pub(crate) fn decode(b: &[u8; HEADER_LEN as usize], path: &Path) -> Result<Header, StoreError> {
        let bad = |reason: FormatProblem| StoreError::BadFormat {
            path: path.to_path_buf(),
            reason,
        };
        if b[field::MAGIC] != MAGIC {
            return Err(bad(FormatProblem::NotAnIndex));
        }
        let version = le_u32(&b[field::VERSION]);
        if version != FORMAT_VERSION {
            return Err(bad(FormatProblem::Version {
                found: version,
                supported: FORMAT_VERSION,
            }));
        }
        let damaged = |what: &'static str| bad(FormatProblem::DamagedHeader { what });
        if crc32c::crc32c(&b[..field::HEADER_CRC.start]) != le_u32(&b[field::HEADER_CRC]) {
            return Err(damaged("header checksum mismatch"));
        }
        if u64::from(le_u32(&b[field::HEADER_LEN])) != HEADER_LEN
            || u64::from(le_u32(&b[field::RECORD_LEN])) != RECORD_LEN
        {
            return Err(damaged("unexpected header or record length"));
        }
        let path_len = usize::from(le_u16(&b[field::PATH_LEN]));
        let location = match b[field::LOCATION] {
            0 => BlobLocation::InDir,
            1 if (1..=MAX_PATH_BYTES).contains(&path_len) => {
                BlobLocation::HugeTlbFs(PathBuf::from(OsStr::from_bytes(&b[field::PATH][..path_len])))
            }
            _ => return Err(damaged("unknown blob location")),
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[field::ID]);
        Ok(Header {
            id,
            location,
            page_size: le_u64(&b[field::PAGE_SIZE]),
            created_unix: le_u64(&b[field::CREATED]),
        })
    }
}

/// Encode one record.
pub(crate) fn encode_record(e: &IndexRecord) -> [u8; RECORD_LEN as usize] {
    let mut r = [0u8; RECORD_LEN as usize];
    r[field::REC_HASH].copy_from_slice(&e.hash);
    r[field::REC_OFFSET].copy_from_slice(&e.loc.offset.to_le_bytes());
    r[field::REC_LEN].copy_from_slice(&e.loc.len.to_le_bytes());
    let crc = crc32c::crc32c(&r[..field::REC_CRC.start]);
    r[field::REC_CRC].copy_from_slice(&crc.to_le_bytes());
    r
}

/// Decode one record; `None` if its checksum does not match.
pub(crate) fn decode_record(r: &[u8; RECORD_LEN as usize]) -> Option<IndexRecord> {
    if crc32c::crc32c(&r[..field::REC_CRC.start]) != le_u32(&r[field::REC_CRC]) {
        return None;
    }
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&r[field::REC_HASH]);
    Some(IndexRecord {
        hash,
        loc: ChunkLoc {
            offset: le_u64(&r[field::REC_OFFSET]),
            len: le_u32(&r[field::REC_LEN]),
        },
    })
}

/// Read and check the header of the index file `file` at `path`.
pub(crate) fn read_header(file: &File, path: &Path) -> Result<Header, StoreError> {
    let len = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .len();
    if len < HEADER_LEN {
        return Err(StoreError::BadFormat {
            path: path.to_path_buf(),
            reason: FormatProblem::Short {
                len,
                header_len: HEADER_LEN,
            },
        });
    }
    let mut b = [0u8; HEADER_LEN as usize];
    file.read_exact_at(&mut b, 0)
        .map_err(|e| StoreError::io("read", path, e))?;
    Header::decode(&b, path)
}

/// What replaying the records found.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// Records kept, in sequence order.
    pub entries: Vec<IndexRecord>,
    /// Sequence number of the first record that failed its checksum.
    pub first_corrupt: Option<u64>,
    /// Whole records dropped from `first_corrupt` on.
    pub dropped_corrupt: u64,
    /// Records dropped because their range lies beyond the blob file.
    pub dropped_beyond_blob: u64,
    /// Trailing bytes that do not form a whole record.
    pub torn_bytes: u64,
}

impl Replay {
    /// True iff anything was dropped.
    pub(crate) fn dropped_anything(&self) -> bool {
        self.dropped_corrupt > 0 || self.dropped_beyond_blob > 0 || self.torn_bytes > 0
    }
}

/// Replay the records of `file`: stop at the first record that fails its
/// checksum, drop records whose range ends beyond `blob_len`.
pub(crate) fn replay(file: &File, path: &Path, blob_len: u64) -> Result<Replay, StoreError> {
    let err = |e| StoreError::io("read", path, e);
    let len = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?
        .len();
    let body = len.saturating_sub(HEADER_LEN);
    let whole = body / RECORD_LEN;
    let mut out = Replay {
        torn_bytes: body % RECORD_LEN,
        ..Replay::default()
    };
    let mut reader = BufReader::with_capacity(1 << 20, file);
    reader.seek(SeekFrom::Start(HEADER_LEN)).map_err(err)?;
    let mut r = [0u8; RECORD_LEN as usize];
    for seq in 0..whole {
        reader.read_exact(&mut r).map_err(err)?;
        let Some(e) = decode_record(&r) else {
            out.first_corrupt = Some(seq);
            out.dropped_corrupt = whole - seq;
            break;
        };
        match e.loc.offset.checked_add(u64::from(e.loc.len)) {
            Some(end) if end <= blob_len => out.entries.push(e),
            _ => out.dropped_beyond_blob += 1,
        }
    }
    Ok(out)
}

/// Write a complete index (header and `entries`) as `dir/index`, atomically:
/// a temp file, fsync, rename, fsync of the directory. Returns the writer.
pub(crate) fn create(
    dir: &Path,
    header: &Header,
    entries: &[IndexRecord],
) -> Result<IndexWriter, StoreError> {
    let path = dir.join("index");
    let tmp = dir.join("index.tmp");
    let head = header.encode()?;
    let write = || -> io::Result<()> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let f = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(crate::store::FILE_MODE)
            .open(&tmp)?;
        // A temp file left by a crash keeps its old mode: set it.
        f.set_permissions(fs::Permissions::from_mode(crate::store::FILE_MODE))?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        w.write_all(&head)?;
        for e in entries {
            w.write_all(&encode_record(e))?;
        }
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        StoreError::io("write", &path, e)
    })?;
    let file = File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| StoreError::io("open", &path, e))?;
    Ok(IndexWriter {
        file,
        path,
        len: HEADER_LEN + entries.len() as u64 * RECORD_LEN,
    })
}

/// Appends records to an index file. Every successful append ends at a
/// whole record; a failed one is cut back off.
#[derive(Debug)]
pub(crate) struct IndexWriter {
    file: File,
    path: PathBuf,
    /// Length of the file: header plus whole records.
    len: u64,
}

impl IndexWriter {
    /// Continue an index file of `records` whole records.
    pub(crate) fn resume(file: File, path: PathBuf, records: u64) -> IndexWriter {
        IndexWriter {
            file,
            path,
            len: HEADER_LEN + records * RECORD_LEN,
        }
    }

    /// Append `entries` at the end of the last whole record; with `sync`,
    /// `fdatasync` before returning.
    pub(crate) fn append(&mut self, entries: &[IndexRecord], sync: bool) -> Result<(), StoreError> {
        let mut buf = Vec::with_capacity(entries.len() * RECORD_LEN as usize);
        for e in entries {
            buf.extend_from_slice(&encode_record(e));
        }
        let res = self
            .file
            .write_all_at(&buf, self.len)
            .map_err(|e| StoreError::io("append to", &self.path, e))
            .and_then(|()| {
                if sync {
                    self.file
                        .sync_data()
                        .map_err(|e| StoreError::io("fdatasync", &self.path, e))
                } else {
                    Ok(())
                }
            });
        match res {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // The records are not published; cut them off so the next
                // append takes their place. If this fails too, they stay
                // behind as valid records of chunks whose bytes were flushed
                // first, which a reopen may replay: still never an index
                // entry without its bytes.
                let _ = self.file.set_len(self.len);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(location: BlobLocation) -> Header {
        Header {
            id: [7; 16],
            location,
            page_size: 4096,
            created_unix: 1_700_000_000,
        }
    }

    #[test]
    fn header_round_trip() {
        for loc in [
            BlobLocation::InDir,
            BlobLocation::HugeTlbFs("/dev/hugepages/pfs-store-x.blob".into()),
        ] {
            let h = header(loc);
            let b = h.encode().unwrap();
            assert_eq!(Header::decode(&b, Path::new("x")).unwrap(), h);
        }
    }

    #[test]
    fn header_rejections() {
        let good = header(BlobLocation::InDir).encode().unwrap();
        let reason = |b: &[u8; 512]| match Header::decode(b, Path::new("x")) {
            Err(StoreError::BadFormat { reason, .. }) => reason.to_string(),
            other => panic!("{other:?}"),
        };
        let mut b = good;
        b[0] = b'X';
        assert!(reason(&b).contains("magic"));
        let mut b = good;
        b[8] = 2;
        assert!(reason(&b).contains("version 2"));
        let mut b = good;
        b[20] ^= 1;
        assert!(reason(&b).contains("checksum"));
        let long = header(BlobLocation::HugeTlbFs(PathBuf::from("/".repeat(441))));
        assert!(matches!(long.encode(), Err(StoreError::InvalidInput { .. })));
    }

    /// Test vector: one record, bytes fixed by the format.
    #[test]
    fn record_vector() {
        let e = IndexRecord {
            hash: [0xab; 32],
            loc: ChunkLoc {
                offset: 0x0102_0304_0506_0708,
                len: 0x1122_3344,
            },
        };
        let r = encode_record(&e);
        assert_eq!(&r[32..44], &[8, 7, 6, 5, 4, 3, 2, 1, 0x44, 0x33, 0x22, 0x11]);
        let crc = crc32c::crc32c(&r[..44]);
        assert_eq!(&r[44..], &crc.to_le_bytes());
        assert_eq!(decode_record(&r), Some(e));
        let mut bad = r;
        bad[40] ^= 1;
        assert_eq!(decode_record(&bad), None);
        assert_eq!(decode_record(&[0; 48]), None, "an all-zero slot is not a record");
    }
}
