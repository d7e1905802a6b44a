//! Extended attributes: which names pfs carries, and reading them on the
//! sending side (setting them is [`crate::DestRoot::set_attrs`]).
//!
//! Two kinds travel, each when asked for, as with rsync: attributes in the
//! `user.` namespace (`-X`), and POSIX ACLs (`-A`), which Linux keeps as
//! the attributes [`ACL_ACCESS`] and [`ACL_DEFAULT`] and which pfs carries
//! as such (their binary form holds numeric user and group ids). Others
//! (`security.`, `trusted.`, `system.` but the ACLs) are never read nor
//! written: a `security.capability` from a peer would be as dangerous as
//! a setuid bit. An ACL from a peer is set only as [`acl::clip`] makes
//! it: it never widens the entry's mode, and names users and groups only
//! where the receiver applies the sender's owners.

pub mod acl;

use std::io;
use std::path::Path;

use rustix::fs as rfs;
use rustix::io::Errno;

/// The access ACL of a file or directory.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
/// The default ACL of a directory (inherited by what is created in it).
pub const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";
/// The namespace of user attributes.
pub const USER_PREFIX: &[u8] = b"user.";

/// Which extended attributes travel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XattrScope {
    /// `user.*` (rsync's `-X`).
    pub user: bool,
    /// The POSIX ACLs (rsync's `-A`).
    pub acls: bool,
}

impl XattrScope {
    /// Both kinds: what a receiver accepts from a sender that asked.
    pub const ALL: Self = Self {
        user: true,
        acls: true,
    };

    /// Whether any attribute travels.
    pub fn any(&self) -> bool {
        self.user || self.acls
    }

    /// Whether the attribute `name` travels.
    pub fn carries(&self, name: &[u8]) -> bool {
        (self.user && name.starts_with(USER_PREFIX) && name.len() > USER_PREFIX.len())
            || (self.acls && (name == ACL_ACCESS || name == ACL_DEFAULT))
    }
}

/// The attributes in `scope` of the file, directory or symlink at `path`
/// (a symlink's own, never its target's), sorted by name. A filesystem
/// without extended attributes has none.
pub fn read(path: &Path, scope: XattrScope) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    if !scope.any() {
        return Ok(Vec::new());
    }
    let list = match grow(|buf| rfs::llistxattr(path, buf)) {
        Ok(l) => l,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in list.split(|&b| b == 0).filter(|n| scope.carries(n)) {
        match grow(|buf| rfs::lgetxattr(path, name, buf)) {
            Ok(value) => out.push((name.to_vec(), value)),
            // Removed since it was listed.
            Err(Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}

/// Calls `f` with a buffer large enough for its answer (it fails `ERANGE`
/// while the buffer is too small); the answer's bytes.
fn grow(mut f: impl FnMut(&mut [u8]) -> Result<usize, Errno>) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 1024];
    loop {
        match f(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            // Values are at most 64 KiB and lists bounded by the filesystem.
            Err(Errno::RANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_decides_what_travels() {
        let x = XattrScope {
            user: true,
            acls: false,
        };
        assert!(x.carries(b"user.mime_type"));
        assert!(!x.carries(b"user."));
        assert!(!x.carries(ACL_ACCESS));
        assert!(!XattrScope::ALL.carries(b"security.capability"));
        assert!(!XattrScope::ALL.carries(b"trusted.overlay.opaque"));
        assert!(!XattrScope::ALL.carries(b"system.nfs4_acl"));
        assert!(XattrScope::ALL.carries(ACL_DEFAULT));
        assert!(!XattrScope::default().any());
    }

    #[test]
    #[ignore = "needs user xattrs on the temporary directory's filesystem"]
    fn reads_user_attributes_where_the_filesystem_has_them() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        if let Err(e) = rfs::setxattr(&f, "user.pfs.test", b"value", rfs::XattrFlags::empty()) {
            panic!(
                "needs user xattrs: {} does not take them ({e})",
                t.path().display()
            );
        }
        rfs::setxattr(&f, "user.a", b"", rfs::XattrFlags::empty()).unwrap();
        let got = read(&f, XattrScope::ALL).unwrap();
        assert_eq!(
            got,
            [
                (b"user.a".to_vec(), Vec::new()),
                (b"user.pfs.test".to_vec(), b"value".to_vec())
            ]
        );
        assert!(read(&f, XattrScope::default()).unwrap().is_empty());
    }
}
