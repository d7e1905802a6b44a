//! Whether a destination file already has the content a sender offers,
//! when size and mtime say it does (rsync's quick check) and when they do
//! not.
//!
//! The receiver's manifest knows the content of the files it wrote (BLAKE3
//! and XXH3-128) for as long as nothing changed them (same inode, size and
//! ctime). Where it knows, content decides: a file whose size and mtime
//! match but whose recorded digest is not the sender's is rebuilt — the
//! case rsync's quick check misses (unpacked archives, `touch -r`). Where
//! it does not know, size and mtime decide, as in rsync, unless the session
//! asked for `--checksum`: then a file of the right size is read, chunked
//! and hashed once (the file hash comes from its chunks, so it needs the
//! session's chunk parameters), and the record kept in the manifest for the
//! next session.

use std::io;
use std::os::unix::fs::MetadataExt;

use super::Landing;
use crate::chunk::{chunk_and_digest_open_file, ChunkParams};
use crate::dest::FileStat;
use crate::manifest::Written;
use crate::path::RelPath;

/// Which of a record's digests a comparison uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum By {
    /// The file hash: a record made with other chunk parameters cannot
    /// tell (its hash describes other cut points).
    FileHash,
    /// The XXH3-128, whatever the chunk parameters.
    Digest,
}

/// What is known of a destination file's content against the sender's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Its content is the sender's.
    Same(Written),
    /// Its content is not the sender's.
    Differs,
    /// Not known; size and mtime decide.
    Unknown,
}

impl Landing<'_> {
    /// The session's chunk parameters (file hashes depend on them), and
    /// whether content alone decides "unchanged" (rsync's `--checksum`):
    /// then files the manifest does not describe are read, chunked with
    /// `params` and hashed. Otherwise size and mtime decide where the
    /// manifest does not know.
    pub fn set_session(&mut self, params: ChunkParams, checksum: bool) {
        self.params = params;
        self.checksum = checksum;
    }

    /// Whether sessions decide by content (see [`Self::set_session`]).
    pub fn checksum(&self) -> bool {
        self.checksum
    }

    /// The manifest's record of the regular file `rel`, found as `st`, if
    /// it still describes it. Compared `by` file hash, a record made with
    /// other chunk parameters (or before records said which) cannot answer:
    /// a file of the sender's `size` is then read and hashed again with
    /// this session's, and the record replaced, since the content it
    /// describes is known to be there and may differ from the sender's
    /// under the same size and mtime. With `--checksum`, a file of `size`
    /// bytes the manifest does not describe is hashed and recorded too.
    pub(super) fn known(&mut self, rel: &RelPath, st: &FileStat, size: u64, by: By) -> Option<Written> {
        let avg = self.params.avg();
        let recorded = self
            .manifest
            .as_ref()
            .and_then(|m| m.get(rel.as_bytes()))
            .filter(|w| w.still_stat(st));
        let stale = recorded.is_some_and(|w| by == By::FileHash && w.chunk_avg != avg);
        if !stale && (recorded.is_some() || !self.checksum) || st.size != size {
            return recorded.filter(|_| !stale);
        }
        let params = self.params;
        self.learn(rel, st, &params).ok().flatten()
    }

    /// Reads and hashes the regular file `rel`, found as `st`, and records
    /// it in the manifest; `None` if it is no longer that file, or changed
    /// while it was read.
    fn learn(&mut self, rel: &RelPath, st: &FileStat, params: &ChunkParams) -> io::Result<Option<Written>> {
        let Ok(Some((file, before))) = self.root.open_existing(rel) else {
            return Ok(None);
        };
        if FileStat::of(&before) != *st {
            return Ok(None);
        }
        // A file that changed while read is simply not known.
        let Ok((recipe, digest)) = chunk_and_digest_open_file(&file, rel.as_ref(), params) else {
            return Ok(None);
        };
        let after = file.metadata()?;
        if FileStat::of(&after) != *st || after.size() != st.size {
            return Ok(None);
        }
        let w = Written::of(&after, recipe.file_hash, params.avg(), digest);
        if let Some(m) = &self.manifest {
            m.insert(rel.as_bytes(), w);
        }
        Ok(Some(w))
    }

    /// What is known of the content of `rel` (found as `st`) against a
    /// sender's file of `size` bytes whose digest `matches` a record. With
    /// `--checksum` nothing is unknown: a file not hashed is not the same.
    pub(super) fn verdict(
        &mut self,
        rel: &RelPath,
        st: &FileStat,
        size: u64,
        by: By,
        matches: impl FnOnce(&Written) -> bool,
    ) -> Verdict {
        match self.known(rel, st, size, by) {
            Some(w) if matches(&w) => Verdict::Same(w),
            Some(_) => Verdict::Differs,
            None if self.checksum() => Verdict::Differs,
            None => Verdict::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use super::*;
    use crate::dest::DestRoot;
    use crate::manifest::Manifest;

    #[test]
    fn content_decides_where_it_is_known() {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("dest");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("f"), b"release 42").unwrap();
        let meta = fs::metadata(dest.join("f")).unwrap();
        let st = FileStat::of(&meta);
        let rel = RelPath::parse(b"f").unwrap();
        let root = DestRoot::open(&dest).unwrap();
        let (manifest, _) = Manifest::open(t.path().join("manifest"));
        let manifest = Arc::new(manifest);
        let mut landing = Landing::new(&root, Some(Arc::clone(&manifest)), false);
        let (size, mtime) = (st.size, st.mtime_ns);
        let digest = crate::quick_digest(b"release 42");
        let hash = crate::chunk_bytes(b"release 42", &ChunkParams::default()).file_hash;

        // Nothing known: size and mtime decide, whatever the digest.
        assert!(landing.holds(&rel, size, mtime, &[9; 8]));
        assert!(!landing.holds(&rel, size, mtime + 1, &digest[..8]));
        // Known (release 41 was written here): content decides.
        manifest.insert(
            b"f",
            Written::of(&meta, [1; 32], ChunkParams::default().avg(), [1; 16]),
        );
        assert!(
            !landing.holds(&rel, size, mtime, &digest[..8]),
            "same size and mtime, other content"
        );
        assert!(
            landing.holds(&rel, size, mtime + 1, &[1; 8]),
            "same content, other mtime"
        );
        assert_eq!(
            landing.verdict(&rel, &st, size, By::FileHash, |w| w.hash == hash),
            Verdict::Differs
        );
        // A file hash made with other chunk parameters cannot answer: the
        // file is hashed again with this session's (its XXH3-128 still
        // answers a probe as it is).
        manifest.insert(b"f", Written::of(&meta, [1; 32], 64 << 10, [1; 16]));
        assert!(landing.holds(&rel, size, mtime + 1, &[1; 8]));
        assert!(matches!(
            landing.verdict(&rel, &st, size, By::FileHash, |w| w.hash == hash),
            Verdict::Same(_)
        ));
        let w = manifest.get(b"f").unwrap();
        assert_eq!(
            (w.hash, w.chunk_avg, w.digest),
            (hash, ChunkParams::default().avg(), digest)
        );
        // Re-hashed, it catches new bytes under the same size and mtime.
        manifest.insert(b"f", Written::of(&meta, hash, 64 << 10, digest));
        assert_eq!(
            landing.verdict(&rel, &st, size, By::FileHash, |w| w.hash == [2; 32]),
            Verdict::Differs
        );

        // --checksum: a file the manifest does not describe is hashed once
        // and recorded; then content decides.
        let (fresh, _) = Manifest::open(t.path().join("other"));
        let fresh = Arc::new(fresh);
        let mut landing = Landing::new(&root, Some(Arc::clone(&fresh)), false);
        landing.set_session(ChunkParams::default(), true);
        assert!(!landing.holds(&rel, size, mtime, &[9; 8]));
        assert_eq!(fresh.get(b"f").map(|w| (w.hash, w.digest)), Some((hash, digest)));
        assert!(landing.holds(&rel, size, mtime + 1, &digest[..8]));
        // Another size is never the same content, and is not read.
        let (empty, _) = Manifest::open(t.path().join("third"));
        let empty = Arc::new(empty);
        let mut landing = Landing::new(&root, Some(Arc::clone(&empty)), false);
        landing.set_session(ChunkParams::default(), true);
        assert_eq!(
            landing.verdict(&rel, &st, size + 1, By::FileHash, |_| true),
            Verdict::Differs
        );
        assert!(empty.get(b"f").is_none());
    }
}
