//! The receiver's side of a FILE's attribute block and of `LINKED` files
//! (docs/wire.md §10.6; rsync's `-o -g -X -A -H`): owner, group and
//! extended attributes are applied once the entry is in place — at once
//! for a directory, a symlink or a file left as it was, after the rename
//! for a file that is rebuilt — and hard links are made once every file of
//! the session has landed. The filesystem work is the host's
//! ([`super::FilesHost::set_attrs`], [`super::FilesHost::hard_link`]).

use std::collections::HashMap;

use pfs_files::{Linked, RelPath};
use pfs_wire::files::{EntryKind, FileEntry, Xattrs};

use super::core::FilesReceiver;
use super::host::FilesHost;
use crate::SessionError;

/// Bookkeeping charged per file waiting for its attributes, besides them.
const STASH_COST: u64 = 64;
/// Bookkeeping charged per hard link waiting for the end, besides its paths.
const LINK_COST: u64 = 64;

/// An entry's attributes, kept until the entry is in place.
#[derive(Debug, Clone, Default)]
pub(super) struct Attrs {
    uid: Option<u32>,
    gid: Option<u32>,
    /// The XATTRS item as it came (checked by the wire crate).
    xattrs: Vec<u8>,
}

impl Attrs {
    /// The attributes of `f`, if it has any.
    fn of(f: &FileEntry<'_>) -> Option<Self> {
        let x = &f.extra;
        (x.uid.is_some() || x.gid.is_some() || !x.xattrs.is_empty()).then(|| Self {
            uid: x.uid,
            gid: x.gid,
            xattrs: x.xattrs.as_bytes().to_vec(),
        })
    }

    fn cost(&self) -> u64 {
        STASH_COST + self.xattrs.len() as u64
    }
}

/// What attributes and links wait for.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Attributes of files being rebuilt, by file number.
    stash: HashMap<u64, Attrs>,
    /// Hard links to make at the end: (link, target).
    links: Vec<(RelPath, RelPath)>,
}

impl FilesReceiver {
    /// The entry `f` is in place at `rel`: its attributes, if any, now.
    pub(super) fn apply_attrs<'s, H: FilesHost<'s>>(
        &mut self,
        f: &FileEntry<'_>,
        rel: &RelPath,
        host: &mut H,
    ) {
        if let Some(a) = Attrs::of(f) {
            self.set_attrs(rel, f.kind == EntryKind::Symlink, &a, host);
        }
    }

    /// The file `f` is being rebuilt: its attributes wait for its rename.
    pub(super) fn stash_attrs(&mut self, f: &FileEntry<'_>) -> Result<(), SessionError> {
        if let Some(a) = Attrs::of(f) {
            self.budget.charge(a.cost())?;
            self.attrs.stash.insert(f.file_no, a);
        }
        Ok(())
    }

    /// The file `no` landed at `rel` (`true`) or failed: its attributes now,
    /// or never.
    pub(super) fn landed_attrs<'s, H: FilesHost<'s>>(
        &mut self,
        no: u64,
        rel: &RelPath,
        ok: bool,
        host: &mut H,
    ) {
        if let Some(a) = self.attrs.stash.remove(&no) {
            if ok {
                self.set_attrs(rel, false, &a, host);
            }
        }
    }

    /// A `LINKED` file: `rel` becomes a hard link to `target` once every
    /// file of the session has landed.
    pub(super) fn link_later(&mut self, f: &FileEntry<'_>, rel: RelPath) -> Result<(), SessionError> {
        let target = match self.scope.full_path(f.link_target) {
            Ok(t) => t,
            Err(e) => {
                self.stats.fail(f.path, format_args!("hard link refused: {e}"));
                return Ok(());
            }
        };
        self.budget
            .charge(LINK_COST + (rel.as_bytes().len() + target.as_bytes().len()) as u64)?;
        self.attrs.links.push((rel, target));
        Ok(())
    }

    /// Makes the session's hard links (every file has landed).
    pub(super) fn make_links<'s, H: FilesHost<'s>>(&mut self, host: &mut H) {
        for (rel, target) in std::mem::take(&mut self.attrs.links) {
            match host.hard_link(&rel, &target) {
                Ok(Linked::Made) => self.stats.report.files_written += 1,
                Ok(Linked::Already) => self.stats.report.files_unchanged += 1,
                Err(e) => self
                    .stats
                    .fail(rel.as_bytes(), format_args!("hard link to {target}: {e}")),
            }
        }
    }

    fn set_attrs<'s, H: FilesHost<'s>>(&mut self, rel: &RelPath, symlink: bool, a: &Attrs, host: &mut H) {
        // A symlink takes owner and group only; the wire crate checked the list.
        let xattrs = if symlink { &[][..] } else { &a.xattrs[..] };
        let list = Xattrs::parse(xattrs).unwrap_or_default();
        if let Err(e) = host.set_attrs(rel, a.uid, a.gid, &list) {
            self.stats.fail(
                rel.as_bytes(),
                format_args!("owner, group or extended attributes: {e}"),
            );
        }
    }
}
