//! Repairing a destination's state directory at start
//! ([`DestRoot::repair_state_dir`]): `.pfs` and `.pfs/tmp` must be
//! directories of this process's user, mode 0700, and `.pfs/manifest` a
//! regular file. Before issue 26 a key whose `dir=` held another key's
//! destination could plant a symlink at `.pfs/tmp` (or a file at `.pfs`),
//! and every later session of that key failed ("a symlink is in the way"),
//! across restarts. What stands in the way is moved aside (renamed to
//! `NAME.damaged-<random>` beside it, never followed, never deleted: it
//! may be evidence) and the directory made afresh; the caller logs what
//! was done.

use std::fmt;
use std::os::fd::OwnedFd;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::{temp_name, DestRoot, STATE_DIR, TEMP_DIR};
use crate::error::FilesError;

/// The manifest a destination without a store keeps in its state directory.
pub const MANIFEST: &str = ".pfs/manifest";

/// One thing [`DestRoot::repair_state_dir`] found wrong and repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRepair {
    /// The entry, relative to the destination (`.pfs`, `.pfs/tmp`, …).
    pub path: &'static str,
    /// What was there instead.
    pub found: Found,
    /// Where it was moved (beside it), if it was moved.
    pub moved_to: Option<String>,
}

/// What stood where the receiver's state belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A symbolic link.
    Symlink,
    /// Some other kind of entry than the one expected.
    WrongKind,
    /// A directory owned by another user.
    ForeignOwner,
    /// A directory others may enter (its mode was set to 0700).
    OpenMode(u32),
}

impl fmt::Display for StateRepair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.found {
            Found::Symlink => "was a symlink".to_string(),
            Found::WrongKind => "was not the kind of entry pfs keeps there".to_string(),
            Found::ForeignOwner => "was owned by another user".to_string(),
            Found::OpenMode(m) => format!("had mode {m:04o}; set to 0700"),
        };
        write!(f, "state directory: {} {what}", self.path)?;
        if let Some(to) = &self.moved_to {
            write!(f, "; moved aside to {to} and made afresh")?;
        }
        Ok(())
    }
}

impl DestRoot {
    /// Checks the receiver's state directory and repairs what is wrong
    /// (module docs); returns what it repaired, for the log. Call at start,
    /// before any session uses this root. An error means the directory
    /// could not be read or repaired (permissions, I/O), not that it was
    /// damaged.
    pub fn repair_state_dir(&self) -> Result<Vec<StateRepair>, FilesError> {
        let mut done = Vec::new();
        let me = rustix::process::geteuid().as_raw();
        for (rel, dir) in [(STATE_DIR, true), (TEMP_DIR, true), (MANIFEST, false)] {
            let (parent, name) = match rel.rsplit_once('/') {
                // Nothing created here: a destination that has no state yet
                // (or a read-only one) needs none to be checked.
                Some((p, n)) => {
                    match self.open_beneath(p.as_bytes(), OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
                        Ok(fd) => (fd, n),
                        Err(Errno::NOENT) => continue,
                        Err(e) => return Err(FilesError::io("open", self.path.join(p), e.into())),
                    }
                }
                None => (
                    self.root_dup()
                        .map_err(|e| FilesError::io("open", self.path.clone(), e.into()))?,
                    rel,
                ),
            };
            let st = match rfs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(FilesError::io("stat", self.path.join(rel), e.into())),
            };
            let ft = FileType::from_raw_mode(st.st_mode);
            let found = match ft {
                FileType::Symlink => Some(Found::Symlink),
                FileType::Directory if dir && st.st_uid != me => Some(Found::ForeignOwner),
                FileType::Directory if dir => None,
                FileType::RegularFile if !dir => None,
                _ => Some(Found::WrongKind),
            };
            match found {
                Some(found) => {
                    let moved_to = Some(self.move_aside(&parent, rel, name)?);
                    done.push(StateRepair {
                        path: rel,
                        found,
                        moved_to,
                    });
                }
                None if dir && st.st_mode & 0o077 != 0 => {
                    // Through a descriptor: a name swapped for a link meanwhile is not followed.
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    rfs::openat(&parent, name, flags, Mode::empty())
                        .and_then(|fd| rfs::fchmod(&fd, Mode::from_raw_mode(0o700)))
                        .map_err(|e| FilesError::io("set mode of", self.path.join(rel), e.into()))?;
                    done.push(StateRepair {
                        path: rel,
                        found: Found::OpenMode(st.st_mode & 0o7777),
                        moved_to: None,
                    });
                }
                None => {}
            }
        }
        // What was moved aside is made afresh (0700) on first use.
        Ok(done)
    }

    /// Renames `name` in `parent` to `NAME.damaged-<random>` beside it
    /// (never replacing anything); the new name, relative to the root.
    fn move_aside(&self, parent: &OwnedFd, rel: &str, name: &str) -> Result<String, FilesError> {
        for _ in 0..16 {
            let aside = format!("{name}.damaged-{}", String::from_utf8_lossy(&temp_name()));
            match rfs::renameat_with(parent, name, parent, aside.as_str(), RenameFlags::NOREPLACE) {
                Ok(()) => {
                    return Ok(match rel.rsplit_once('/') {
                        Some((p, _)) => format!("{p}/{aside}"),
                        None => aside,
                    })
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(FilesError::io("move aside", self.path.join(rel), e.into())),
            }
        }
        Err(FilesError::io(
            "move aside",
            self.path.join(rel),
            Errno::EXIST.into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn a_planted_link_or_file_is_moved_aside_and_the_directory_made_afresh() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let victim = tempfile::tempdir().unwrap();
        // The attack of issue 26: `.pfs/tmp -> ../../b`, and a manifest
        // that is a directory.
        fs::create_dir(d.join(".pfs")).unwrap();
        symlink(victim.path(), d.join(".pfs/tmp")).unwrap();
        fs::create_dir(d.join(".pfs/manifest")).unwrap();
        let root = DestRoot::open(d).unwrap();
        assert!(
            root.remove_stale_temps().is_err(),
            "damaged: refused, never followed"
        );
        let done = root.repair_state_dir().unwrap();
        assert_eq!(root.remove_stale_temps().unwrap(), 0);
        assert_eq!(
            done.iter().map(|r| (r.path, r.found)).collect::<Vec<_>>(),
            [
                (STATE_DIR, Found::OpenMode(0o755)),
                (TEMP_DIR, Found::Symlink),
                (MANIFEST, Found::WrongKind)
            ],
            "{done:?}"
        );
        assert!(
            done[1].to_string().contains("moved aside to .pfs/tmp.damaged-"),
            "{}",
            done[1]
        );
        let tmp = fs::symlink_metadata(d.join(".pfs/tmp")).unwrap();
        assert!(tmp.is_dir() && tmp.mode() & 0o777 == 0o700);
        assert!(!d.join(".pfs/manifest").exists());
        // The link itself is kept aside, its target untouched.
        let aside = done[1].moved_to.as_ref().unwrap();
        assert_eq!(fs::read_link(d.join(aside)).unwrap(), victim.path());
        // A fresh root works, and a second repair finds nothing.
        let root = DestRoot::open(d).unwrap();
        assert_eq!(root.remove_stale_temps().unwrap(), 0);
        assert!(root.repair_state_dir().unwrap().is_empty());
    }

    #[test]
    fn a_file_at_the_state_directory_and_an_open_mode_are_repaired() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join(".pfs"), b"not a directory").unwrap();
        let root = DestRoot::open(d).unwrap();
        let done = root.repair_state_dir().unwrap();
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!((done[0].path, done[0].found), (STATE_DIR, Found::WrongKind));
        assert_eq!(root.remove_stale_temps().unwrap(), 0);
        assert!(d.join(".pfs/tmp").is_dir());
        let aside = done[0].moved_to.as_ref().unwrap();
        assert_eq!(fs::read(d.join(aside)).unwrap(), b"not a directory");
        fs::set_permissions(d.join(".pfs/tmp"), fs::Permissions::from_mode(0o777)).unwrap();
        let done = root.repair_state_dir().unwrap();
        assert_eq!((done[0].path, done[0].found), (TEMP_DIR, Found::OpenMode(0o777)));
        assert_eq!(fs::metadata(d.join(".pfs/tmp")).unwrap().mode() & 0o777, 0o700);
    }
}
