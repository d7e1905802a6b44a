//! What the sender's FILES_HELLO asked for: the remote directory every
//! path is beneath, a dry run or not, the chunk parameters, whether zeros
//! stay holes; and the rule that turns a path from the sender into one
//! beneath the destination.

use pfs_files::{ChunkParams, PathError, RelPath};

use crate::files::FilesViolation;

/// The session's scope, from FILES_HELLO.
#[derive(Debug, Default)]
pub(super) struct Scope {
    /// Sub-directory the sender asked for.
    pub(super) base: Option<RelPath>,
    /// The same as the sender wrote it (lossy UTF-8), for the outcome.
    pub(super) remote_dir: String,
    /// The sender only plans (`--dry-run`): nothing is written.
    pub(super) dry_run: bool,
    /// The session's chunk parameters (from FILES_HELLO's `chunk_avg`).
    pub(super) params: ChunkParams,
    /// Runs of zeros are left as holes (no `NO_SPARSE` in FILES_HELLO).
    pub(super) sparse: bool,
    /// BLAKE3 of a run of zeros, by length, for the chunks of a sparse
    /// file (see `stream`).
    pub(super) zeros: ZeroHashes,
}

/// BLAKE3 of `len` zero bytes for a few lengths: a chunk with that hash
/// is a run of zeros, left as a hole without reading or writing it. A
/// run of zeros is cut into chunks of one length (`cdc.rs`), so a file
/// needs one or two; at most [`ZeroHashes::MAX`] lengths are kept, so a
/// sender naming many lengths costs at most that many hashes of zeros.
#[derive(Debug, Default)]
pub(super) struct ZeroHashes {
    known: Vec<(u32, [u8; 32])>,
}

impl ZeroHashes {
    /// Lengths kept.
    const MAX: usize = 16;

    /// Whether `hash` is the BLAKE3 of `len` zero bytes (false for a
    /// length not kept when no room is left).
    pub(super) fn is_zero(&mut self, hash: &[u8; 32], len: u32) -> bool {
        if let Some((_, h)) = self.known.iter().find(|(l, _)| *l == len) {
            return h == hash;
        }
        if self.known.len() >= Self::MAX {
            return false;
        }
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let mut h = blake3::Hasher::new();
        let mut left = len as usize;
        while left > 0 {
            let n = left.min(ZEROS.len());
            h.update(&ZEROS[..n]);
            left -= n;
        }
        let h = *h.finalize().as_bytes();
        self.known.push((len, h));
        h == *hash
    }
}

impl Scope {
    /// Takes the remote directory the sender asked for: a path beneath the
    /// destination, outside the receiver's state directory.
    pub(super) fn set_remote_dir(&mut self, dir: &[u8]) -> Result<(), FilesViolation> {
        self.remote_dir = String::from_utf8_lossy(dir).into_owned();
        if dir.is_empty() {
            return Ok(());
        }
        let dir = RelPath::parse(dir)
            .and_then(|d| {
                if d.is_reserved() {
                    return Err(PathError::Reserved);
                }
                Ok(d)
            })
            .map_err(|error| FilesViolation::RemoteDir {
                dir: self.remote_dir.clone(),
                error,
            })?;
        self.base = Some(dir);
        Ok(())
    }

    /// `path` from the sender, beneath the remote directory it asked for
    /// and outside the receiver's state directory.
    pub(super) fn full_path(&self, path: &[u8]) -> Result<RelPath, PathError> {
        let rel = RelPath::parse(path)?;
        let rel = match &self.base {
            None => rel,
            Some(b) => b.join(rel.as_bytes())?,
        };
        if rel.is_reserved() {
            return Err(PathError::Reserved);
        }
        Ok(rel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_go_beneath_the_remote_dir() {
        let mut s = Scope::default();
        assert_eq!(s.full_path(b"a/b").expect("path").as_bytes(), b"a/b");
        s.set_remote_dir(b"sub/dir").expect("dir");
        assert_eq!(s.remote_dir, "sub/dir");
        assert_eq!(s.full_path(b"a/b").expect("path").as_bytes(), b"sub/dir/a/b");
        assert!(s.full_path(b"../x").is_err());
        assert!(s.full_path(b"/etc/passwd").is_err());
    }

    #[test]
    fn an_empty_remote_dir_is_the_destination() {
        let mut s = Scope::default();
        s.set_remote_dir(b"").expect("empty");
        assert!(s.base.is_none());
    }

    #[test]
    fn a_remote_dir_outside_is_refused() {
        let mut s = Scope::default();
        assert!(matches!(
            s.set_remote_dir(b"../up"),
            Err(FilesViolation::RemoteDir { .. })
        ));
        assert!(s.base.is_none());
    }
}
