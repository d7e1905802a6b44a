//! The kernel's view: a read-only `fuser` file system over [`Shared`].
//!
//! The content is a snapshot taken when the mount started and never
//! changes, so entries and attributes are cached by the kernel for a day
//! and file pages are kept across opens (`FOPEN_KEEP_CACHE`): once read, a
//! file is served from the page cache without reaching this process.
//! Anything that would write is refused with `EROFS`. The root carries the
//! mount's counters as the extended attribute `user.pfs.stats` (JSON), so
//! tools can see what was fetched without a file in the tree.
//!
//! With passthrough (`--passthrough`, and a kernel that offers it) a file
//! whose chunks are all local is opened on a checked backing file
//! ([`crate::backing`]) and the kernel reads it directly. The kernel takes
//! one backing file per inode and refuses passthrough while the inode is
//! open the other way, so each inode keeps one `BackingId` once it has
//! one, and is not switched while daemon-served opens of it are live.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};

use crate::backing::{backing_file, NotBacked};

use crate::state::{ReadError, Shared};
use crate::tree::{Kind, Node, ROOT};

/// How long the kernel may keep entries and attributes: the tree never
/// changes while mounted.
const TTL: Duration = Duration::from_secs(24 * 3600);
/// The root's extended attribute with the counters.
pub const STATS_XATTR: &str = "user.pfs.stats";

thread_local! {
    /// One read buffer per FUSE worker thread.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// File handle of opens the daemon serves.
const FH_DAEMON: u64 = 0;
/// File handle of passthrough opens.
const FH_BACKED: u64 = 1;

/// How an inode is open.
#[derive(Debug)]
enum Opened {
    /// Daemon-served opens not yet released.
    Daemon(u32),
    /// On its backing file, for good.
    Backed(BackingId),
}

/// Passthrough state.
#[derive(Debug)]
struct Passthrough {
    /// Where backing files go.
    dir: PathBuf,
    /// The kernel agreed at init (and has not refused a backing file).
    on: AtomicBool,
    inodes: Mutex<HashMap<u64, Opened>>,
}

/// The file system (module docs).
#[derive(Debug)]
pub struct MountFs {
    shared: Arc<Shared>,
    uid: u32,
    gid: u32,
    passthrough: Option<Passthrough>,
}

impl MountFs {
    /// Serves `shared`; files appear owned by `uid`:`gid`. With
    /// `passthrough`, backing files are kept in that directory.
    pub fn new(shared: Arc<Shared>, uid: u32, gid: u32, passthrough: Option<PathBuf>) -> Self {
        Self {
            shared,
            uid,
            gid,
            passthrough: passthrough.map(|dir| Passthrough {
                dir,
                on: AtomicBool::new(false),
                inodes: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Opens `ino` on its backing file if passthrough is on and the file
    /// is all local; otherwise gives `reply` back for a daemon-served open,
    /// already counted (the decision and the count are made under one lock,
    /// so no passthrough can be set up between them).
    fn open_backed(&self, ino: u64, size: u64, reply: ReplyOpen) -> Option<ReplyOpen> {
        let Some(pt) = self.passthrough.as_ref().filter(|p| p.on.load(Ordering::Relaxed)) else {
            return Some(reply);
        };
        let lock = || pt.inodes.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut map = lock();
            match map.get_mut(&ino) {
                Some(Opened::Backed(id)) => {
                    reply.opened_passthrough(FileHandle(FH_BACKED), FopenFlags::empty(), id);
                    self.shared
                        .stats
                        .passthrough_opens
                        .fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                Some(Opened::Daemon(n)) if *n > 0 => {
                    *n += 1;
                    return Some(reply);
                }
                _ => {}
            }
        }
        // Outside the lock: this may write the backing file.
        let file = backing_file(&self.shared, &pt.dir, ino - 2, size);
        let mut map = lock();
        let daemon = |map: &mut HashMap<u64, Opened>, reply: ReplyOpen| {
            if let Opened::Daemon(n) = map.entry(ino).or_insert(Opened::Daemon(0)) {
                *n += 1;
            }
            Some(reply)
        };
        match map.get(&ino) {
            Some(Opened::Daemon(n)) if *n > 0 => return daemon(&mut map, reply),
            Some(Opened::Backed(_)) => {}
            _ => {
                let file = match file {
                    Ok(f) => f,
                    Err(NotBacked::NotLocal) => return daemon(&mut map, reply),
                    Err(e) => {
                        tracing::debug!("no backing file for {}: {e:?}", self.shared.tree.path_of(ino));
                        return daemon(&mut map, reply);
                    }
                };
                match reply.open_backing(&file) {
                    Ok(id) => {
                        map.insert(ino, Opened::Backed(id));
                    }
                    Err(e) => {
                        // EPERM (no CAP_SYS_ADMIN) and the like hold for
                        // every file: stop paying for backing files.
                        tracing::warn!(
                            "passthrough refused by the kernel ({e}): every read goes through the daemon"
                        );
                        pt.on.store(false, Ordering::Relaxed);
                        return daemon(&mut map, reply);
                    }
                }
            }
        }
        if let Some(Opened::Backed(id)) = map.get(&ino) {
            reply.opened_passthrough(FileHandle(FH_BACKED), FopenFlags::empty(), id);
            self.shared
                .stats
                .passthrough_opens
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        daemon(&mut map, reply)
    }

    /// A daemon-served open of `ino` was released.
    fn release_daemon_open(&self, ino: u64) {
        let Some(pt) = self.passthrough.as_ref() else {
            return;
        };
        let mut map = pt.inodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Opened::Daemon(n)) = map.get_mut(&ino) {
            *n = n.saturating_sub(1);
        }
    }

    fn attr(&self, ino: u64, n: &Node) -> FileAttr {
        let (kind, nlink) = match n.kind {
            Kind::File => (FileType::RegularFile, 1),
            Kind::Dir => (FileType::Directory, 2),
            Kind::Symlink => (FileType::Symlink, 1),
        };
        let size = match n.kind {
            Kind::File => n.size,
            Kind::Symlink => n.link.len() as u64,
            Kind::Dir => 0,
        };
        let t = if n.mtime_sec >= 0 {
            UNIX_EPOCH + Duration::new(n.mtime_sec as u64, n.mtime_nsec)
        } else {
            UNIX_EPOCH
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm: (n.mode & 0o7777) as u16,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        }
    }

    fn node(&self, ino: INodeNo) -> Option<&Node> {
        self.shared.tree.node(ino.0)
    }
}

impl Filesystem for MountFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(1 << 20);
        // Entries come with their attributes: a walk that stats every entry
        // costs one READDIRPLUS per directory, not one LOOKUP per entry.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if let Some(pt) = self.passthrough.as_mut() {
            let offered = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok();
            // A backing file must not itself be on a stacked file system.
            let on = offered && config.set_max_stack_depth(1).is_ok();
            pt.on.store(on, Ordering::Relaxed);
            if !on {
                tracing::warn!(
                    "this kernel does not offer FUSE passthrough: every read goes through the daemon"
                );
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.tree.lookup(parent.0, name.as_bytes()) {
            Some(ino) => match self.shared.tree.node(ino) {
                Some(n) => reply.entry(&TTL, &self.attr(ino, n), Generation(0)),
                None => reply.error(Errno::ENOENT),
            },
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.node(ino) {
            Some(n) => reply.attr(&TTL, &self.attr(ino.0, n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.node(ino) {
            Some(n) if n.kind == Kind::Symlink => reply.data(&n.link),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.node(ino) {
            None => reply.error(Errno::ENOENT),
            Some(n) if n.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Some(_) if flags.acc_mode() != OpenAccMode::O_RDONLY => reply.error(Errno::EROFS),
            Some(n) => {
                let Some(reply) = self.open_backed(ino.0, n.size, reply) else {
                    return;
                };
                reply.opened(FileHandle(FH_DAEMON), FopenFlags::FOPEN_KEEP_CACHE)
            }
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if fh.0 == FH_DAEMON {
            self.release_daemon_open(ino.0);
        }
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let stats = &self.shared.stats;
        stats.reads.fetch_add(1, Ordering::Relaxed);
        READ_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            match self.shared.read(ino.0, offset, &mut buf, size as usize) {
                Ok(()) => {
                    stats.bytes_read.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    reply.data(&buf);
                }
                Err(ReadError::NotAFile) => reply.error(Errno::EISDIR),
                Err(ReadError::Io(why)) => {
                    stats.read_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("read of {}: {why}", self.shared.tree.path_of(ino.0));
                    reply.error(Errno::EIO);
                }
            }
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.node(ino) {
            // The listing never changes: the kernel may keep it.
            Some(n) if n.kind == Kind::Dir => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            ),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(dir) = self.node(ino).filter(|n| n.kind == Kind::Dir) else {
            reply.error(Errno::ENOTDIR);
            return;
        };
        // Offsets: 1 after ".", 2 after "..", 3 + i after child i.
        let mut at = offset;
        if at == 0 {
            if reply.add(ino, 1, FileType::Directory, ".") {
                return reply.ok();
            }
            at = 1;
        }
        if at == 1 {
            if reply.add(INodeNo(dir.parent), 2, FileType::Directory, "..") {
                return reply.ok();
            }
            at = 2;
        }
        for (i, &child) in dir.children.iter().enumerate().skip((at - 2) as usize) {
            let Some(n) = self.shared.tree.node(child) else {
                continue;
            };
            let kind = match n.kind {
                Kind::File => FileType::RegularFile,
                Kind::Dir => FileType::Directory,
                Kind::Symlink => FileType::Symlink,
            };
            if reply.add(INodeNo(child), 3 + i as u64, kind, OsStr::from_bytes(&n.name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(dir) = self.node(ino).filter(|n| n.kind == Kind::Dir) else {
            reply.error(Errno::ENOTDIR);
            return;
        };
        // Offsets as in readdir.
        let mut at = offset;
        if at == 0 {
            if reply.add(ino, 1, ".", &TTL, &self.attr(ino.0, dir), Generation(0)) {
                return reply.ok();
            }
            at = 1;
        }
        if at == 1 {
            let parent = self.shared.tree.node(dir.parent).unwrap_or(dir);
            if reply.add(
                INodeNo(dir.parent),
                2,
                "..",
                &TTL,
                &self.attr(dir.parent, parent),
                Generation(0),
            ) {
                return reply.ok();
            }
            at = 2;
        }
        for (i, &child) in dir.children.iter().enumerate().skip((at - 2) as usize) {
            let Some(n) = self.shared.tree.node(child) else {
                continue;
            };
            let name = OsStr::from_bytes(&n.name);
            if reply.add(
                INodeNo(child),
                3 + i as u64,
                name,
                &TTL,
                &self.attr(child, n),
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t = &self.shared.tree;
        reply.statfs(
            t.bytes().div_ceil(4096),
            0,
            0,
            t.entries() + 1,
            0,
            4096,
            255,
            4096,
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if ino.0 != ROOT || name.as_bytes() != STATS_XATTR.as_bytes() {
            return reply.error(Errno::ENODATA);
        }
        let value = self.shared.stats.to_json().to_string();
        if size == 0 {
            reply.size(value.len() as u32);
        } else if (size as usize) < value.len() {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(value.as_bytes());
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let list: &[u8] = if ino.0 == ROOT { b"user.pfs.stats\0" } else { b"" };
        if size == 0 {
            reply.size(list.len() as u32);
        } else if (size as usize) < list.len() {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(list);
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Permission bits are checked by the kernel (default_permissions);
        // what is left is the read-only rule.
        match self.node(ino) {
            None => reply.error(Errno::ENOENT),
            Some(_) if mask.contains(AccessFlags::W_OK) => reply.error(Errno::EROFS),
            Some(_) => reply.ok(),
        }
    }
}
