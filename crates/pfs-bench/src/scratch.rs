//! Scratch directories of a study: private (mode 0700), named after the
//! study and this process, removed on drop and on Ctrl-C. Memory-backed
//! (`/dev/shm`) where the study wants the disk out of its numbers.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::cleanup::{self, Undo};

/// `/dev/shm` when it exists and has at least `need` bytes free (tmpfs is
/// memory: a study that fills it must not push the host into swap).
pub fn memory_dir(need: u64) -> Option<&'static Path> {
    let shm = Path::new("/dev/shm");
    let free = rustix::fs::statvfs(shm)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .unwrap_or(0);
    (shm.is_dir() && free >= need).then_some(shm)
}

/// A private directory `base/<name>-<pid>`, removed on drop and on Ctrl-C.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
    ticket: u64,
}

impl Scratch {
    /// Creates `base/<name>-<pid>`. A directory of that name is stale (left
    /// by an earlier process with this pid) and is removed first.
    pub fn new(base: &Path, name: &str) -> anyhow::Result<Self> {
        let path = base.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        // Registered before it exists: Ctrl-C between the two must not leak it.
        let ticket = cleanup::on_interrupt(Undo::Dir(path.clone()));
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&path) {
            cleanup::done(ticket);
            return Err(e).with_context(|| format!("creating {}", path.display()));
        }
        Ok(Self { path, ticket })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        cleanup::done(self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_removed_on_drop() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let s = Scratch::new(base.path(), "t").unwrap();
        let p = s.path().to_path_buf();
        assert!(p.ends_with(format!("t-{}", std::process::id())));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o700);
        drop(s);
        assert!(!p.exists());
    }
}
