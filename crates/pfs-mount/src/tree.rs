//! The mounted tree as the listing described it (docs/wire.md §12.4):
//! inode numbers, names, attributes and directory contents, built once
//! when the mount starts and never changed after (the content is a
//! snapshot, so the kernel may cache it for as long as it likes).
//!
//! Inode 1 is the mounted directory; listing entry `n` is inode `n + 2`.
//! Every check the codec cannot make is made here: paths are valid
//! relative paths, a parent is listed before its entries, no path twice.

use std::collections::HashMap;

use pfs_files::RelPath;
use pfs_wire::mount::{ListEntry, ListKind};

/// Inode number of the mounted directory.
pub const ROOT: u64 = 1;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
}

/// One node of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// Parent directory's inode ([`ROOT`] for the root itself).
    pub parent: u64,
    /// Last path component (empty for the root).
    pub name: Box<[u8]>,
    /// What it is.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Bytes (files only).
    pub size: u64,
    /// A symlink's target.
    pub link: Box<[u8]>,
    /// A directory's entries, in listing order.
    pub children: Vec<u64>,
    /// A file's place among the tree's files, in listing order.
    pub file_no: u32,
    /// A file's place among its directory's files.
    pub sibling_no: u32,
    /// A directory's files (not subdirectories), in listing order.
    pub files: Vec<u64>,
}

/// The whole listing.
#[derive(Debug, Default)]
pub struct Tree {
    nodes: Vec<Node>,
    /// Per directory: name → inode (looked up by `&[u8]`, no allocation).
    by_name: HashMap<u64, HashMap<Box<[u8]>, u64>>,
    files: u64,
    bytes: u64,
    /// Inodes of the files, in listing order.
    file_order: Vec<u64>,
}

/// Why a listing was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// A path that is not a clean relative path.
    #[error("listing entry {entry}: path {path:?} is not a valid relative path")]
    BadPath {
        /// Entry number.
        entry: u64,
        /// The path, lossily.
        path: String,
    },
    /// An entry whose parent directory was not listed before it.
    #[error("listing entry {entry}: {path:?} comes before its directory")]
    Orphan {
        /// Entry number.
        entry: u64,
        /// The path, lossily.
        path: String,
    },
    /// The same path twice.
    #[error("listing entry {entry}: {path:?} is listed twice")]
    Duplicate {
        /// Entry number.
        entry: u64,
        /// The path, lossily.
        path: String,
    },
}

impl Tree {
    /// A tree holding only the root, with the root's attributes.
    pub fn new(root_mode: u32, mtime_sec: i64, mtime_nsec: u32) -> Self {
        Self {
            nodes: vec![Node {
                parent: ROOT,
                name: Box::default(),
                kind: Kind::Dir,
                mode: root_mode & 0o7777,
                mtime_sec,
                mtime_nsec,
                size: 0,
                link: Box::default(),
                children: Vec::new(),
                file_no: 0,
                sibling_no: 0,
                files: Vec::new(),
            }],
            ..Self::default()
        }
    }

    /// Adds the next listing entry (entry numbers count from 0 in order).
    pub fn push(&mut self, e: &ListEntry<'_>) -> Result<(), TreeError> {
        let entry = (self.nodes.len() - 1) as u64;
        let lossy = || String::from_utf8_lossy(e.path).into_owned();
        let rel = RelPath::parse(e.path).map_err(|_| TreeError::BadPath { entry, path: lossy() })?;
        let parent = match rel.parent() {
            None => ROOT,
            Some(p) => self
                .resolve(p.as_bytes())
                .filter(|&i| self.node(i).is_some_and(|n| n.kind == Kind::Dir))
                .ok_or_else(|| TreeError::Orphan { entry, path: lossy() })?,
        };
        let name: Box<[u8]> = rel.file_name().into();
        let ino = entry + 2;
        let names = self.by_name.entry(parent).or_default();
        if names.contains_key(&name) {
            return Err(TreeError::Duplicate { entry, path: lossy() });
        }
        names.insert(name.clone(), ino);
        let kind = match e.kind {
            ListKind::File => Kind::File,
            ListKind::Dir => Kind::Dir,
            ListKind::Symlink => Kind::Symlink,
        };
        let file_no = self.file_order.len() as u32;
        if kind == Kind::File {
            self.files += 1;
            self.bytes = self.bytes.saturating_add(e.size);
            self.file_order.push(ino);
        }
        self.nodes.push(Node {
            parent,
            name,
            kind,
            mode: e.mode & 0o7777,
            mtime_sec: e.mtime_sec,
            mtime_nsec: e.mtime_nsec,
            size: e.size,
            link: e.link.into(),
            children: Vec::new(),
            file_no,
            sibling_no: 0,
            files: Vec::new(),
        });
        let dir = &mut self.nodes[(parent - 1) as usize];
        dir.children.push(ino);
        if kind == Kind::File {
            let sibling_no = dir.files.len() as u32;
            dir.files.push(ino);
            if let Some(n) = self.nodes.last_mut() {
                n.sibling_no = sibling_no;
            }
        }
        Ok(())
    }

    /// The node of inode `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(usize::try_from(ino.checked_sub(1)?).ok()?)
    }

    /// The entry of `name` in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.by_name.get(&parent)?.get(name).copied()
    }

    /// The inode of a `/`-separated path below the root (empty: the root).
    pub fn resolve(&self, path: &[u8]) -> Option<u64> {
        let mut at = ROOT;
        for part in path.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
            at = self.lookup(at, part)?;
        }
        Some(at)
    }

    /// Listing entry number of a node (inverse of inode = entry + 2).
    pub fn entry_of(ino: u64) -> Option<u64> {
        ino.checked_sub(2)
    }

    /// Entries listed (the root not counted).
    pub fn entries(&self) -> u64 {
        (self.nodes.len() - 1) as u64
    }

    /// Regular files listed.
    pub fn files(&self) -> u64 {
        self.files
    }

    /// Bytes of all regular files.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Inodes of every regular file, in listing order.
    pub fn file_inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.file_order.iter().copied()
    }

    /// The inode of the `no`-th file in listing order.
    pub fn file(&self, no: u32) -> Option<u64> {
        self.file_order.get(no as usize).copied()
    }

    /// The path of `ino` below the root, for messages.
    pub fn path_of(&self, ino: u64) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let Some(n) = self.node(at) else { break };
            parts.push(String::from_utf8_lossy(&n.name).into_owned());
            at = n.parent;
        }
        parts.reverse();
        parts.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(kind: ListKind, path: &'a [u8], link: &'a [u8]) -> ListEntry<'a> {
        ListEntry {
            kind,
            mode: 0o644,
            mtime_sec: 1,
            mtime_nsec: 0,
            size: if kind == ListKind::File { 10 } else { 0 },
            path,
            link,
        }
    }

    #[test]
    fn builds_and_resolves() {
        let mut t = Tree::new(0o755, 0, 0);
        t.push(&entry(ListKind::Dir, b"a", b"")).unwrap();
        t.push(&entry(ListKind::File, b"a/f", b"")).unwrap();
        t.push(&entry(ListKind::Symlink, b"l", b"a/f")).unwrap();
        assert_eq!(t.resolve(b"a/f"), Some(3));
        assert_eq!(t.lookup(ROOT, b"l"), Some(4));
        assert_eq!(t.node(ROOT).unwrap().children, vec![2, 4]);
        assert_eq!((t.entries(), t.files(), t.bytes()), (3, 1, 10));
        assert_eq!(t.path_of(3), "a/f");
        assert_eq!(t.file_inodes().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn refuses_what_the_codec_cannot_see() {
        let mut t = Tree::new(0o755, 0, 0);
        assert!(matches!(
            t.push(&entry(ListKind::File, b"../x", b"")),
            Err(TreeError::BadPath { .. })
        ));
        assert!(matches!(
            t.push(&entry(ListKind::File, b"d/x", b"")),
            Err(TreeError::Orphan { .. })
        ));
        t.push(&entry(ListKind::File, b"f", b"")).unwrap();
        assert!(matches!(
            t.push(&entry(ListKind::File, b"f", b"")),
            Err(TreeError::Duplicate { .. })
        ));
        // A file is no directory.
        assert!(matches!(
            t.push(&entry(ListKind::File, b"f/y", b"")),
            Err(TreeError::Orphan { .. })
        ));
    }
}
