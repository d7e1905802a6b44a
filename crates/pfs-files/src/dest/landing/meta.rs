//! Owner, group and extended attributes of an entry a session placed,
//! without losing what the manifest knows of it: they change the entry's
//! ctime, which the manifest's record keys on, so the record of a file
//! whose content did not change is carried over to its new ctime.

use super::Landing;
use crate::error::FilesError;
use crate::manifest::Written;
use crate::path::RelPath;

impl Landing<'_> {
    /// Sets owner, group and extended attributes of the entry `rel` (see
    /// [`crate::DestRoot::set_attrs`]); a regular file the manifest
    /// describes stays described.
    pub fn set_attrs<'x>(
        &mut self,
        rel: &RelPath,
        uid: Option<u32>,
        gid: Option<u32>,
        xattrs: impl IntoIterator<Item = (&'x [u8], &'x [u8])>,
    ) -> Result<(), FilesError> {
        let before = self.root.stat_existing(&mut self.stat_cache, rel)?;
        self.root.set_attrs(rel, uid, gid, xattrs)?;
        let (Some(m), Some(before)) = (&self.manifest, before) else {
            return Ok(());
        };
        let Some(w) = m.get(rel.as_bytes()).filter(|w| w.still_stat(&before)) else {
            return Ok(());
        };
        if let Some(after) = self.root.stat_existing(&mut self.stat_cache, rel)? {
            let same = (after.ino, after.size, after.mtime_ns) == (before.ino, before.size, before.mtime_ns);
            if same && after.ctime_ns != before.ctime_ns {
                m.insert(
                    rel.as_bytes(),
                    Written {
                        ctime_ns: after.ctime_ns,
                        ..w
                    },
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use super::*;
    use crate::dest::{DestRoot, FileStat};
    use crate::manifest::Manifest;

    #[test]
    #[ignore = "needs user xattrs on the temporary directory's filesystem"]
    fn the_manifest_keeps_describing_a_file_whose_attributes_change() {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("dest");
        fs::create_dir(&dest).unwrap();
        fs::write(dest.join("f"), b"content").unwrap();
        let root = DestRoot::open(&dest).unwrap();
        let (manifest, _) = Manifest::open(t.path().join("manifest"));
        let manifest = Arc::new(manifest);
        let meta = fs::metadata(dest.join("f")).unwrap();
        manifest.insert(b"f", Written::of(&meta, [7; 32], 32 << 10, [7; 16]));
        let mut landing = Landing::new(&root, Some(Arc::clone(&manifest)), false);
        let rel = RelPath::parse(b"f").unwrap();
        let attrs: [(&[u8], &[u8]); 1] = [(b"user.k", b"v")];
        if let Err(e) = landing.set_attrs(&rel, None, None, attrs) {
            panic!("needs user xattrs: the destination refuses them ({e})");
        }
        let now = FileStat::of(&fs::metadata(dest.join("f")).unwrap());
        let w = manifest.get(b"f").unwrap();
        assert!(w.still_stat(&now), "the record follows the new ctime");
        assert_eq!((w.hash, w.digest), ([7; 32], [7; 16]));
        // The same value again writes nothing: the ctime stays.
        landing.set_attrs(&rel, None, None, attrs).unwrap();
        assert_eq!(FileStat::of(&fs::metadata(dest.join("f")).unwrap()), now);
    }
}
