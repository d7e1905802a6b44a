//! What rsync's `-o -g -X -A -H` ask of a destination: an entry's numeric
//! owner and group and its extended attributes ([`DestRoot::set_attrs`]),
//! and hard links ([`DestRoot::hard_link`]). Like every other write, each
//! resolves its path beneath the root without following a symlink: owner
//! and group are set on a symlink itself, attributes through a descriptor
//! opened with `O_NOFOLLOW`, a link is made to the file itself and renamed
//! into place.

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, Uid, XattrFlags};
use rustix::io::Errno;

use super::{dest_err, file_id, path_err, temp_name, DestRoot};
use crate::error::{FilesError, PathError};
use crate::path::RelPath;
use crate::xattr::{acl, XattrScope, ACL_ACCESS, ACL_DEFAULT};

/// Whether this process may give entries another owner (it runs as root):
/// owner and group from a sender are applied only then, as rsync does.
pub fn may_chown() -> bool {
    rustix::process::geteuid().is_root()
}

/// What [`DestRoot::hard_link`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linked {
    /// The path was already a link to the target.
    Already,
    /// The link was made (replacing what was at its path).
    Made,
}

impl DestRoot {
    /// Sets the numeric owner and group (`None`: unchanged) and the extended
    /// attributes of the entry at `rel` (a file, directory or symlink; a
    /// symlink takes no attributes). Only attributes in [`XattrScope::ALL`]
    /// are written, the rest ignored; attributes the entry has and `xattrs`
    /// does not name are left as they are. What already has its value is
    /// not written again (each write changes the entry's ctime, which the
    /// receiver's manifest keys on). Changing the owner needs root
    /// (`CAP_CHOWN`); the caller decides whether to ask.
    ///
    /// A POSIX ACL is set as [`acl::clip`] makes it: no entry gets a bit
    /// the entry's mode (as set before this call) does not have, so the
    /// mode never widens; named users are kept only when this process runs
    /// as root and `uid` is given (the sender's owners are applied), named
    /// groups likewise with `gid`. An ACL Linux would not read is
    /// [`FilesError::Acl`] and not set.
    pub fn set_attrs<'x>(
        &self,
        rel: &RelPath,
        uid: Option<u32>,
        gid: Option<u32>,
        xattrs: impl IntoIterator<Item = (&'x [u8], &'x [u8])>,
    ) -> Result<(), FilesError> {
        let dir = self.parent_dir(rel)?;
        let name = rel.file_name();
        // -1 is chown's "unchanged", never an id.
        let (uid, gid) = (uid.filter(|&u| u != u32::MAX), gid.filter(|&g| g != u32::MAX));
        let owned = (uid.is_some() || gid.is_some())
            && rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| uid.is_none_or(|u| u == st.st_uid) && gid.is_none_or(|g| g == st.st_gid));
        if (uid.is_some() || gid.is_some()) && !owned {
            let (u, g) = (uid.map(Uid::from_raw), gid.map(Gid::from_raw));
            rfs::chownat(&dir, name, u, g, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| dest_err("set owner of", rel, e))?;
        }
        let mut xattrs = xattrs
            .into_iter()
            .filter(|(n, _)| XattrScope::ALL.carries(n))
            .peekable();
        if xattrs.peek().is_none() {
            return Ok(());
        }
        let fd = match rfs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            // A symlink: Linux keeps no user attributes or ACLs on one.
            Err(Errno::LOOP) => return Ok(()),
            Err(e) => return Err(dest_err("open", rel, e)),
        };
        // ACLs are clipped to the mode the receiver gave the entry (module docs).
        let mode = rfs::fstat(&fd).map_err(|e| dest_err("stat", rel, e))?.st_mode & 0o777;
        let root = may_chown();
        let clip = acl::Clip {
            mode,
            named_users: root && uid.is_some(),
            named_groups: root && gid.is_some(),
        };
        let mut current = Vec::new();
        for (n, v) in xattrs {
            let clipped;
            let v = if n == ACL_ACCESS || n == ACL_DEFAULT {
                clipped = acl::clip(v, clip).map_err(|source| FilesError::Acl {
                    path: rel.to_string(),
                    source,
                })?;
                // A minimal access ACL is a mode: the kernel keeps no
                // attribute for it, so one equal to the mode is no change.
                if n == ACL_ACCESS
                    && acl::minimal_mode(&clipped) == Some(mode)
                    && rfs::fgetxattr(&fd, n, &mut [0u8; 0][..]) == Err(Errno::NODATA)
                {
                    continue;
                }
                &clipped[..]
            } else {
                v
            };
            // One byte more than the value: a longer one cannot look equal.
            current.resize(v.len() + 1, 0);
            if rfs::fgetxattr(&fd, n, &mut current[..]).is_ok_and(|len| current[..len] == *v) {
                continue;
            }
            rfs::fsetxattr(&fd, n, v, XattrFlags::empty())
                .map_err(|e| dest_err("set extended attributes of", rel, e))?;
        }
        Ok(())
    }

    /// Makes `rel` a hard link to the regular file `target` (both beneath
    /// the root, neither resolved through a symlink): a link made under a
    /// temporary name and renamed over whatever is at `rel` (not a
    /// directory), so `rel` is never missing. A target that is not a
    /// regular file is [`PathError::NotRegularFile`].
    pub fn hard_link(&self, rel: &RelPath, target: &RelPath) -> Result<Linked, FilesError> {
        if rel == target {
            return Err(path_err(rel, PathError::NotRegularFile));
        }
        let tdir = self.parent_dir(target)?;
        let tname = target.file_name();
        let st =
            rfs::statat(&tdir, tname, AtFlags::SYMLINK_NOFOLLOW).map_err(|e| dest_err("stat", target, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(path_err(target, PathError::NotRegularFile));
        }
        let ldir = self.parent_dir(rel)?;
        let lname = rel.file_name();
        if rfs::statat(&ldir, lname, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|l| file_id(&l) == file_id(&st)) {
            return Ok(Linked::Already);
        }
        // Made in .pfs/tmp and renamed into place, like every entry.
        let tmp_dir = self.tmp_dir()?;
        for _ in 0..16 {
            let tmp = temp_name();
            match rfs::linkat(&tdir, tname, tmp_dir, tmp.as_slice(), AtFlags::empty()) {
                Ok(()) => {
                    return rfs::renameat(tmp_dir, tmp.as_slice(), &ldir, lname)
                        .map(|()| Linked::Made)
                        .map_err(|e| {
                            let _ = rfs::unlinkat(tmp_dir, tmp.as_slice(), AtFlags::empty());
                            dest_err("rename hard link into place at", rel, e)
                        });
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(dest_err("create hard link", rel, e)),
            }
        }
        Err(dest_err("create hard link", rel, Errno::EXIST))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt};

    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn hard_links_replace_atomically_and_refuse_non_files() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::create_dir(d.join("a")).unwrap();
        fs::write(d.join("a/first"), b"content").unwrap();
        fs::write(d.join("a/second"), b"old").unwrap();
        symlink("first", d.join("a/sym")).unwrap();
        let root = DestRoot::open(d).unwrap();
        assert_eq!(
            root.hard_link(&rel("a/second"), &rel("a/first")).unwrap(),
            Linked::Made
        );
        let (one, two) = (
            fs::metadata(d.join("a/first")).unwrap(),
            fs::metadata(d.join("a/second")).unwrap(),
        );
        assert_eq!((one.ino(), one.nlink()), (two.ino(), 2));
        assert_eq!(
            root.hard_link(&rel("a/second"), &rel("a/first")).unwrap(),
            Linked::Already
        );
        // A symlink is not a file to link to, and is never followed.
        assert!(matches!(
            root.hard_link(&rel("a/third"), &rel("a/sym")),
            Err(FilesError::Path {
                source: PathError::NotRegularFile,
                ..
            })
        ));
        assert!(root.hard_link(&rel("a/first"), &rel("a/first")).is_err());
        assert!(root.hard_link(&rel("a/x"), &rel("a/missing")).is_err());
        assert_eq!(fs::read_dir(d.join("a")).unwrap().count(), 3, "no temporary left");
    }

    #[test]
    #[ignore = "needs root and user xattrs on the temporary directory's filesystem"]
    fn attributes_go_on_the_entry_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("f"), b"x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("target"), b"t").unwrap();
        symlink(outside.path().join("target"), d.join("link")).unwrap();
        let root = DestRoot::open(d).unwrap();
        let attrs: [(&[u8], &[u8]); 2] = [(b"user.k", b"v"), (b"security.capability", b"\x01")];
        if let Err(e) = root.set_attrs(&rel("f"), None, None, attrs) {
            panic!("needs user xattrs: {} does not take them ({e})", d.display());
        }
        let mut buf = [0u8; 16];
        let n = rfs::getxattr(d.join("f"), "user.k", &mut buf[..]).unwrap();
        assert_eq!(&buf[..n], b"v");
        assert_eq!(
            rfs::getxattr(d.join("f"), "security.capability", &mut buf[..]),
            Err(Errno::NODATA)
        );
        // Through a symlink: nothing is set on its target.
        root.set_attrs(&rel("link"), None, None, attrs).unwrap();
        assert_eq!(
            rfs::getxattr(outside.path().join("target"), "user.k", &mut buf[..]),
            Err(Errno::NODATA)
        );
        // As root, owner and group of the entry itself (the link, not its target).
        assert!(may_chown(), "needs root: owner and group are set only by root");
        root.set_attrs(&rel("link"), Some(65534), Some(65534), [])
            .unwrap();
        let l = fs::symlink_metadata(d.join("link")).unwrap();
        assert_eq!((l.uid(), l.gid()), (65534, 65534));
        assert_eq!(fs::metadata(outside.path().join("target")).unwrap().uid(), 0);
    }
}
