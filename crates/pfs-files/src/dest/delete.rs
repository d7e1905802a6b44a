//! Removing from a destination what a sender's tree lacks (rsync's
//! `--delete`): [`DestRoot::delete_extraneous`] lists one directory and
//! removes the entries its caller does not keep — files, symlinks and
//! other non-directories with `unlinkat` (a symlink itself, never its
//! target), directories with everything beneath them. Every directory is
//! opened beneath the root without following a symlink, one descriptor at a
//! time, so a tree of any depth costs two descriptors and a link planted
//! anywhere (even during the removal) is removed as a link, never entered.
//!
//! Whatever the caller keeps, a receiver's state is never removed: no
//! entry named `.pfs` ([`super::STATE_DIR`], where a sender may not write
//! either: [`RelPath::is_reserved`]) at any depth — the root's, which holds
//! the temporary files of transfers in flight, or that of another key's
//! `dir=` destination beneath this one. A directory left holding one stays.

use std::os::fd::OwnedFd;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{dest_err, DestRoot, STATE_DIR};
use crate::error::FilesError;
use crate::path::RelPath;

/// What a removed entry was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// A regular file.
    File,
    /// A directory (reported after its contents).
    Dir,
    /// A symbolic link (the link; its target is untouched).
    Symlink,
    /// A FIFO, socket or device node.
    Other,
}

impl Removed {
    fn of(ft: FileType) -> Self {
        match ft {
            FileType::RegularFile => Self::File,
            FileType::Directory => Self::Dir,
            FileType::Symlink => Self::Symlink,
            _ => Self::Other,
        }
    }
}

impl DestRoot {
    /// Lists the directory `dir` (the root when `None`) and removes each
    /// entry that `keep(path, is_dir)` does not keep, with everything
    /// beneath it; `removed` sees each entry removed, a directory after its
    /// contents. With `dry_run` nothing is removed and `removed` sees what
    /// would be. A directory that is missing, or is no longer a directory,
    /// has nothing to remove. Stops at the first entry that cannot be
    /// removed; what was removed until then has been reported.
    pub fn delete_extraneous(
        &self,
        dir: Option<&RelPath>,
        keep: &mut dyn FnMut(&RelPath, bool) -> bool,
        dry_run: bool,
        removed: &mut dyn FnMut(&RelPath, Removed),
    ) -> Result<(), FilesError> {
        if dir.is_some_and(RelPath::is_reserved) {
            // The receiver's own state: nothing in it is a sender's to remove.
            return Ok(());
        }
        let at = dir.map_or(&b"."[..], RelPath::as_bytes);
        let failed = |op: &'static str, e: Errno| match dir {
            Some(d) => dest_err(op, d, e),
            None => FilesError::io(op, self.path.clone(), e.into()),
        };
        let fd = match self.open_beneath(at, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
            Err(e) => return Err(failed("open directory", e)),
        };
        let names = read_names(&fd).map_err(|e| failed("read directory", e))?;
        for (name, ft) in names {
            let child = match dir {
                Some(d) => d.join(&name),
                None => RelPath::parse(&name),
            };
            // A name that cannot be a path here was never sent: it stays.
            let Ok(child) = child else { continue };
            if keep(&child, ft == FileType::Directory) {
                continue;
            }
            if ft == FileType::Directory {
                self.remove_tree(&child, dry_run, removed)?;
            } else {
                if !dry_run {
                    unlink(&fd, &name, AtFlags::empty()).map_err(|e| dest_err("remove", &child, e))?;
                }
                removed(&child, Removed::of(ft));
            }
        }
        Ok(())
    }

    /// Removes the directory `rel` and everything beneath it (or, with
    /// `dry_run`, only reports them), deepest entries first.
    fn remove_tree(
        &self,
        rel: &RelPath,
        dry_run: bool,
        removed: &mut dyn FnMut(&RelPath, Removed),
    ) -> Result<(), FilesError> {
        // (directory, emptied): a directory is listed once, then removed
        // when it comes back off the stack with its contents gone.
        let mut stack = vec![(rel.clone(), false)];
        while let Some((d, emptied)) = stack.pop() {
            if emptied {
                if !dry_run {
                    let parent = self.parent_dir(&d)?;
                    match unlink(&parent, d.file_name(), AtFlags::REMOVEDIR) {
                        Ok(()) => {}
                        // It holds a state directory (or gained an entry
                        // since it was listed): it stays.
                        Err(Errno::NOTEMPTY | Errno::EXIST) => continue,
                        Err(e) => return Err(dest_err("remove directory", &d, e)),
                    }
                }
                removed(&d, Removed::Dir);
                continue;
            }
            let fd = match self.open_beneath(d.as_bytes(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            {
                Ok(fd) => fd,
                Err(Errno::NOENT) => continue,
                // Replaced by a link or a file since it was listed: that goes instead.
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    if !dry_run {
                        let parent = self.parent_dir(&d)?;
                        unlink(&parent, d.file_name(), AtFlags::empty())
                            .map_err(|e| dest_err("remove", &d, e))?;
                    }
                    removed(&d, Removed::Other);
                    continue;
                }
                Err(e) => return Err(dest_err("open directory", &d, e)),
            };
            stack.push((d.clone(), true));
            for (name, ft) in read_names(&fd).map_err(|e| dest_err("read directory", &d, e))? {
                let child = d.join(&name).map_err(|source| FilesError::Path {
                    path: d.to_string(),
                    source,
                })?;
                if ft == FileType::Directory {
                    stack.push((child, false));
                } else {
                    if !dry_run {
                        unlink(&fd, &name, AtFlags::empty()).map_err(|e| dest_err("remove", &child, e))?;
                    }
                    removed(&child, Removed::of(ft));
                }
            }
        }
        Ok(())
    }
}

/// `unlinkat`, where an entry already gone is not an error.
fn unlink(dir: &OwnedFd, name: &[u8], flags: AtFlags) -> Result<(), Errno> {
    match rfs::unlinkat(dir, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The entries of the open directory `dir` (not `.`, `..` or a state
/// directory, which holds the temporary files of transfers in flight) with their types, symlinks not followed,
/// sorted by name (what is removed is reported in a stable order).
fn read_names(dir: &OwnedFd) -> Result<Vec<(Vec<u8>, FileType)>, Errno> {
    let readable = rfs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut entries = rfs::Dir::new(readable)?;
    let mut out = Vec::new();
    while let Some(ent) = entries.read() {
        let ent = ent?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || name == STATE_DIR.as_bytes() {
            continue;
        }
        let ft = match ent.file_type() {
            FileType::Unknown => match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            },
            ft => ft,
        };
        out.push((name.to_vec(), ft));
    }
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;

    fn rel(s: &str) -> RelPath {
        RelPath::parse(s.as_bytes()).unwrap()
    }

    /// Runs `delete_extraneous` over `dir`, keeping the paths in `keep`;
    /// returns what it reported, as `path kind`.
    fn delete(root: &DestRoot, dir: Option<&str>, keep: &[&str], dry_run: bool) -> Vec<String> {
        let mut out = Vec::new();
        let dir = dir.map(rel);
        root.delete_extraneous(
            dir.as_ref(),
            &mut |p, _| keep.contains(&p.to_string().as_str()),
            dry_run,
            &mut |p, k| out.push(format!("{p} {k:?}")),
        )
        .unwrap();
        out
    }

    #[test]
    fn removes_what_is_not_kept_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::create_dir_all(d.join("a/old/deeper")).unwrap();
        fs::write(d.join("a/keep.txt"), b"k").unwrap();
        fs::write(d.join("a/old/deeper/f"), b"f").unwrap();
        fs::write(d.join("a/stale.txt"), b"s").unwrap();
        fs::write(d.join("outside.txt"), b"o").unwrap();
        // A link to something outside the destination goes as a link.
        symlink(d.join("outside.txt"), d.join("a/link")).unwrap();
        let root = DestRoot::open(d).unwrap();
        let would = delete(&root, Some("a"), &["a/keep.txt"], true);
        assert_eq!(
            would,
            [
                "a/link Symlink",
                "a/old/deeper/f File",
                "a/old/deeper Dir",
                "a/old Dir",
                "a/stale.txt File"
            ]
        );
        assert!(d.join("a/old/deeper/f").exists(), "a dry run removed something");
        let did = delete(&root, Some("a"), &["a/keep.txt"], false);
        assert_eq!(did, would);
        let mut left: Vec<_> = fs::read_dir(d.join("a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        left.sort();
        assert_eq!(left, ["keep.txt"]);
        assert_eq!(fs::read(d.join("outside.txt")).unwrap(), b"o");
    }

    #[test]
    fn state_directories_stay_at_any_depth() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::create_dir_all(d.join(".pfs/state")).unwrap();
        // Another key's `dir=` destination beneath this one (issue 26).
        fs::create_dir_all(d.join("x/a/.pfs/tmp")).unwrap();
        fs::write(d.join("x/a/file"), b"f").unwrap();
        fs::create_dir_all(d.join("z/sub")).unwrap();
        fs::write(d.join("y"), b"y").unwrap();
        let root = DestRoot::open(d).unwrap();
        let did = delete(&root, None, &[], false);
        // x/a and x keep the state directory, so they stay, unreported.
        assert_eq!(did, ["x/a/file File", "y File", "z/sub Dir", "z Dir"]);
        assert!(d.join(".pfs/state").is_dir());
        assert!(d.join("x/a/.pfs/tmp").is_dir());
        assert!(delete(&root, Some("x/a"), &[], false).is_empty());
        assert!(d.join("x/a/.pfs/tmp").is_dir());
        // Nor is anything inside it, whatever directory is named.
        assert!(delete(&root, Some(".pfs"), &[], false).is_empty());
        assert!(delete(&root, Some(".pfs/state"), &[], false).is_empty());
        assert!(d.join(".pfs/state").is_dir());
        assert!(rel(".pfs").is_reserved() && rel(".pfs/x").is_reserved());
        assert!(rel("x/.pfs").is_reserved() && !rel(".pfsx").is_reserved());
    }

    #[test]
    fn a_directory_that_is_a_link_is_not_entered() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("precious"), b"p").unwrap();
        let d = t.path();
        fs::create_dir(d.join("a")).unwrap();
        symlink(outside.path(), d.join("a/dirlink")).unwrap();
        let mut root = DestRoot::open(d).unwrap();
        // Whatever the resolution, the link is removed as a link.
        for fallback in [false, true] {
            if fallback {
                root.force_fallback();
                symlink(outside.path(), d.join("a/dirlink")).unwrap();
            }
            assert_eq!(delete(&root, Some("a"), &[], false), ["a/dirlink Symlink"]);
            assert_eq!(fs::read(outside.path().join("precious")).unwrap(), b"p");
        }
        // A directory given through a link has nothing to remove.
        symlink(outside.path(), d.join("via")).unwrap();
        assert!(delete(&root, Some("via"), &[], false).is_empty());
        assert!(outside.path().join("precious").exists());
    }
}
