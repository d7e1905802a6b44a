//! The session's zstd decompression: one context for the session (a
//! context per chunk costs more than decompressing a small chunk), and the
//! buffers decompressed chunks and BATCH frames land in, reused frame
//! after frame.

use crate::error::LocalError;

/// A zstd decompression context (the context itself has no `Debug`).
pub(super) struct Zstd(zstd::bulk::Decompressor<'static>);

impl std::fmt::Debug for Zstd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Zstd")
    }
}

/// Decompression state of one session.
#[derive(Debug)]
pub(super) struct Inflate {
    dctx: Zstd,
    /// Decompressed zstd chunk.
    pub(super) zbuf: Vec<u8>,
    /// Decompressed BATCH frames.
    pub(super) batch_buf: Vec<u8>,
}

impl Inflate {
    /// A context and empty buffers.
    pub(super) fn new() -> Result<Self, LocalError> {
        let dctx = zstd::bulk::Decompressor::new().map_err(|source| LocalError::Zstd {
            what: "decompression context",
            source,
        })?;
        Ok(Self {
            dctx: Zstd(dctx),
            zbuf: Vec::new(),
            batch_buf: Vec::new(),
        })
    }

    /// Decompresses `z` into `buf`, which becomes `len` bytes long; false
    /// unless `z` is valid and holds exactly `len` bytes.
    pub(super) fn exact(&mut self, z: &[u8], buf: &mut Vec<u8>, len: usize) -> bool {
        buf.clear();
        buf.resize(len, 0);
        matches!(self.dctx.0.decompress_to_buffer(z, &mut buf[..]), Ok(n) if n == len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_lengths_only() {
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        let z = zstd::bulk::compress(&raw, 1).expect("compress");
        let mut inflate = Inflate::new().expect("context");
        let mut buf = Vec::new();
        assert!(inflate.exact(&z, &mut buf, raw.len()));
        assert_eq!(buf, raw);
        // Announced longer or shorter than it is: refused.
        assert!(!inflate.exact(&z, &mut buf, raw.len() + 1));
        assert!(!inflate.exact(&z, &mut buf, raw.len() - 1));
        assert!(!inflate.exact(b"not zstd", &mut buf, 8));
    }
}
