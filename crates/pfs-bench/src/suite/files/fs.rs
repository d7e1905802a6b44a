//! The filesystem a files study runs on (`--fs`): a private directory on
//! tmpfs, or an ext4 image the harness creates, loop-mounts and removes
//! itself. Owns what makes rows on it start equal — the page cache dropped
//! before each timed row on a disk filesystem, an image's memory touched once
//! before the first — and the one durability rule:
//! a `syncfs(2)` of the filesystem inside every row's timed part.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use super::tree::make_random_tree;
use crate::child::{have, run_client};
use crate::cleanup::{self, Undo};
use crate::scratch::{memory_dir, Scratch};

/// A filesystem kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum FsKind {
    /// A private directory in /dev/shm (memory; the disk out of the numbers).
    Tmpfs,
    /// An ext4 image made with mkfs.ext4 and loop-mounted by the harness (root).
    Ext4,
}

impl FsKind {
    /// Its name in labels and headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tmpfs => "tmpfs",
            Self::Ext4 => "ext4",
        }
    }

    /// Whether a page cache stands between it and its storage (so rows start
    /// with that cache dropped).
    pub fn has_page_cache(self) -> bool {
        matches!(self, Self::Ext4)
    }
}

impl std::fmt::Display for FsKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a filesystem for one study must hold at its fullest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Bytes, in blocks.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
}

impl Needs {
    /// The size of an ext4 image holding this: the data plus 10 %, the
    /// inode tables (256 B each), the journal and the reserved blocks
    /// (`mkfs.ext4 -m 0`), rounded to MiB.
    pub fn image_bytes(&self) -> u64 {
        let raw = self.bytes + self.bytes / 10 + self.inodes * 256 + (256 << 20);
        raw.div_ceil(1 << 20) << 20
    }

    /// Inodes to give `mkfs.ext4 -N`: the need plus 20 %, at least 64 Ki.
    pub fn image_inodes(&self) -> u64 {
        (self.inodes + self.inodes / 5).max(64 << 10)
    }
}

/// Programs the rows start, each with arguments that make it load and exit,
/// run once after the page cache is dropped so that loading their code is
/// not part of any row.
pub type Warm = Vec<Vec<OsString>>;

/// The filesystem every row of one pass runs on.
#[derive(Debug)]
pub struct BenchFs {
    kind: FsKind,
    root: PathBuf,
    about: String,
    warm: Warm,
    // Field order is drop order: unmount before the scratch dir goes.
    image: Option<Ext4Image>,
    _scratch: Scratch,
}

impl BenchFs {
    /// Checks, before anything is fetched or written, that `kind` can be set
    /// up here.
    pub fn preflight(kind: FsKind) -> anyhow::Result<()> {
        if kind == FsKind::Ext4 {
            if !rustix::process::geteuid().is_root() {
                bail!("--fs ext4 needs root: it loop-mounts an ext4 image and drops the page cache before each row (run as root, or use --fs tmpfs)");
            }
            for (tool, package) in [
                ("mkfs.ext4", "e2fsprogs"),
                ("mount", "mount"),
                ("umount", "mount"),
            ] {
                if !have(tool) {
                    bail!("--fs ext4 needs {tool}, which is not installed (apt-get install {package})");
                }
            }
            if !Path::new("/proc/sys/vm/drop_caches").exists() {
                bail!("--fs ext4 needs /proc/sys/vm/drop_caches to drop the page cache before each row");
            }
        }
        Ok(())
    }

    /// Sets up `kind` for data of `needs`. tmpfs: a scratch directory in
    /// /dev/shm, which must have room. ext4: an image in a scratch directory
    /// under `image_dir` (default /dev/shm when it has room for the whole
    /// image, else /var/tmp), formatted and mounted.
    pub fn new(kind: FsKind, needs: Needs, image_dir: Option<&Path>, warm: Warm) -> anyhow::Result<Self> {
        Self::preflight(kind)?;
        match kind {
            FsKind::Tmpfs => {
                let Some(base) = memory_dir(needs.bytes) else {
                    bail!(
                        "--fs tmpfs: /dev/shm has less than the {:.1} GB this study needs",
                        needs.bytes as f64 / 1e9
                    );
                };
                let scratch = Scratch::new(base, "pfs-bench-files-tmpfs")?;
                let about = format!("tmpfs: a private directory in {} (memory)", base.display());
                Ok(Self {
                    kind,
                    root: scratch.path().to_path_buf(),
                    about,
                    warm,
                    image: None,
                    _scratch: scratch,
                })
            }
            FsKind::Ext4 => {
                let size = needs.image_bytes();
                let base = match image_dir {
                    Some(d) => d,
                    None => memory_dir(size).unwrap_or(Path::new("/var/tmp")),
                };
                let free = rustix::fs::statvfs(base)
                    .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
                    .with_context(|| format!("statvfs {}", base.display()))?;
                if free < size {
                    bail!(
                        "--fs ext4: {} has {:.1} GB free, the image needs {:.1} GB (choose another place with --image-dir)",
                        base.display(),
                        free as f64 / 1e9,
                        size as f64 / 1e9
                    );
                }
                let scratch = Scratch::new(base, "pfs-bench-files-ext4")?;
                let image = Ext4Image::create(scratch.path(), size, needs.image_inodes())?;
                let backing = pfs_sys::statfs(base)
                    .map(|i| i.fs_type.to_string())
                    .unwrap_or_else(|_| "unknown".into());
                let about = format!(
                    "ext4: a {:.1} GB image ({} inodes; mkfs.ext4 -F -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0) loop-mounted with default options (data=ordered, relatime); the image file on {backing} ({}){}",
                    size as f64 / 1e9,
                    needs.image_inodes(),
                    base.display(),
                    if backing == "tmpfs" {
                        ": the block device is memory, so the rows see ext4 and the block layer, not a disk's speed"
                    } else {
                        ""
                    }
                );
                Ok(Self {
                    kind,
                    root: image.mount().to_path_buf(),
                    about,
                    warm,
                    image: Some(image),
                    _scratch: scratch,
                })
            }
        }
    }

    /// The kind.
    pub fn kind(&self) -> FsKind {
        self.kind
    }

    /// The directory every row's files go under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// One line for the report header.
    pub fn about(&self) -> &str {
        &self.about
    }

    /// Untimed, right before a timed row: on a filesystem with a page cache,
    /// `sync; echo 3 > /proc/sys/vm/drop_caches`, then every program of the
    /// study run once (`--version`) so its code is cached again — every row
    /// then starts with its data cold and its tools warm.
    pub fn before_row(&self) -> anyhow::Result<()> {
        if !self.kind.has_page_cache() {
            return Ok(());
        }
        rustix::fs::sync();
        std::fs::write("/proc/sys/vm/drop_caches", "3")
            .context("dropping the page cache (/proc/sys/vm/drop_caches)")?;
        for argv in &self.warm {
            let Some((program, args)) = argv.split_first() else {
                continue;
            };
            let mut cmd = Command::new(program);
            cmd.args(args);
            // Its exit status says nothing here: the program was loaded.
            let _ = run_client(cmd, Duration::from_secs(30));
        }
        Ok(())
    }

    /// `syncfs(2)` of this filesystem: inside every row's timed part, so each
    /// row's elapsed time includes getting its data to the device.
    pub fn sync(&self) -> anyhow::Result<()> {
        let dir =
            std::fs::File::open(&self.root).with_context(|| format!("opening {}", self.root.display()))?;
        rustix::fs::syncfs(&dir).with_context(|| format!("syncfs {}", self.root.display()))?;
        Ok(())
    }

    /// Untimed, once before the first timed row on an image: writes `bytes`
    /// of random data into it, syncs, deletes them and syncs again (no trim).
    /// In a VM, memory never written before costs far more the first time
    /// (the host faults it in); without this, whichever row came first paid
    /// for the image's memory. The next large file goes into the blocks
    /// freed here. tmpfs: nothing to do (no image).
    pub fn pre_touch(&self, bytes: u64) -> anyhow::Result<()> {
        if self.image.is_none() || bytes == 0 {
            return Ok(());
        }
        eprintln!(
            "pfs bench files [{}]: pre-touching the image ({:.1} MB, not timed)…",
            self.kind,
            bytes as f64 / 1e6
        );
        let dir = self.root.join("pre-touch");
        let r = make_random_tree(&dir, bytes, u64::MAX).and_then(|_| self.sync());
        let _ = std::fs::remove_dir_all(&dir);
        r.and_then(|()| self.sync())
    }

    /// Untimed, after a group of rows removed its files: gives the image's
    /// freed blocks back to the file holding it (`fstrim`), so an image in
    /// memory does not keep the memory of deleted files.
    pub fn trim(&self) {
        if self.image.is_some() && have("fstrim") {
            let mut cmd = Command::new("fstrim");
            cmd.arg(&self.root);
            let _ = run_client(cmd, Duration::from_secs(120));
        }
    }
}

/// An ext4 image file, formatted and loop-mounted by this process; unmounted
/// (which frees its loop device) and deleted on drop and on Ctrl-C.
#[derive(Debug)]
pub struct Ext4Image {
    image: PathBuf,
    mount: PathBuf,
    ticket: u64,
}

impl Ext4Image {
    /// `dir/ext4.img` of `bytes` (sparse), `mkfs.ext4` with `inodes` inodes,
    /// mounted on `dir/mnt`.
    pub fn create(dir: &Path, bytes: u64, inodes: u64) -> anyhow::Result<Self> {
        let image = dir.join("ext4.img");
        let mount = dir.join("mnt");
        std::fs::create_dir_all(&mount)?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(bytes))
            .with_context(|| format!("creating {}", image.display()))?;
        // Inode tables and journal written now: the kernel's lazy init would
        // otherwise write them in the background during the timed rows.
        let mut mkfs = Command::new("mkfs.ext4");
        mkfs.args(["-F", "-q", "-m", "0", "-N"])
            .arg(inodes.to_string())
            .args(["-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&image);
        run_ok(mkfs, "mkfs.ext4", Duration::from_secs(300))?;
        // Registered before mounting: Ctrl-C between the two must not leak it.
        let ticket = cleanup::on_interrupt(Undo::Mount(mount.clone()));
        let this = Self { image, mount, ticket };
        let mut m = Command::new("mount");
        m.args(["-t", "ext4", "-o", "loop"])
            .arg(&this.image)
            .arg(&this.mount);
        run_ok(m, "mount -o loop", Duration::from_secs(60))?;
        let kind = pfs_sys::statfs(&this.mount).map(|i| i.fs_type);
        if !matches!(kind, Ok(pfs_sys::FsType::Ext4)) {
            bail!("{} is not ext4 after mounting ({kind:?})", this.mount.display());
        }
        Ok(this)
    }

    /// The mount point.
    pub fn mount(&self) -> &Path {
        &self.mount
    }
}

impl Drop for Ext4Image {
    fn drop(&mut self) {
        cleanup::unmount(&self.mount);
        cleanup::done(self.ticket);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Runs `cmd` within `timeout`; an error names `what` and its stderr.
fn run_ok(cmd: Command, what: &str, timeout: Duration) -> anyhow::Result<()> {
    let out = run_client(cmd, timeout)?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The programs to warm: `pfs` and the baselines' tools.
pub fn warm_list(pfs: &Path, rsync: &str) -> Warm {
    let mut w: Warm = vec![vec![pfs.as_os_str().to_owned(), "--version".into()]];
    for p in [rsync, "cp", "tar"] {
        w.push(vec![p.into(), "--version".into()]);
    }
    w.push(vec!["sh".into(), "-c".into(), "true".into()]);
    if have("ssh") {
        w.push(vec!["ssh".into(), "-V".into()]);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_is_sized_from_its_data_with_margin() {
        let n = Needs {
            bytes: 10 << 30,
            inodes: 400_000,
        };
        let img = n.image_bytes();
        assert!(img > (11 << 30) && img < (12 << 30), "{img}");
        assert_eq!(img % (1 << 20), 0);
        assert_eq!(n.image_inodes(), 480_000);
        let tiny = Needs { bytes: 1, inodes: 1 };
        assert_eq!(tiny.image_inodes(), 64 << 10);
        assert!(tiny.image_bytes() >= 256 << 20);
    }

    #[test]
    fn names() {
        assert_eq!(FsKind::Ext4.to_string(), "ext4");
        assert_eq!(FsKind::Tmpfs.name(), "tmpfs");
        assert!(FsKind::Ext4.has_page_cache() && !FsKind::Tmpfs.has_page_cache());
    }

    #[test]
    fn ext4_image_mounts_holds_files_and_is_gone_after_drop() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: loop-mounting an ext4 image needs root");
            return;
        }
        if let Err(e) = BenchFs::preflight(FsKind::Ext4) {
            eprintln!("skipped: {e}");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let needs = Needs {
            bytes: 16 << 20,
            inodes: 1000,
        };
        let fs = BenchFs::new(FsKind::Ext4, needs, Some(base.path()), Vec::new()).unwrap();
        let root = fs.root().to_path_buf();
        assert!(cleanup::is_mount_point(&root), "{}", root.display());
        assert_eq!(pfs_sys::statfs(&root).unwrap().fs_type, pfs_sys::FsType::Ext4);
        std::fs::write(root.join("f"), vec![5u8; 1 << 20]).unwrap();
        fs.sync().unwrap();
        fs.before_row().unwrap();
        assert_eq!(std::fs::read(root.join("f")).unwrap(), vec![5u8; 1 << 20]);
        fs.trim();
        assert!(fs.about().starts_with("ext4: a "), "{}", fs.about());
        drop(fs);
        assert!(!cleanup::is_mount_point(&root));
        // The scratch directory (image, mount point) is gone with it.
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    #[test]
    fn tmpfs_is_a_private_directory_in_dev_shm() {
        let needs = Needs {
            bytes: 1 << 20,
            inodes: 10,
        };
        let fs = match BenchFs::new(FsKind::Tmpfs, needs, None, Vec::new()) {
            Ok(fs) => fs,
            Err(e) => {
                eprintln!("skipped: {e}");
                return;
            }
        };
        let root = fs.root().to_path_buf();
        assert_eq!(pfs_sys::statfs(&root).unwrap().fs_type, pfs_sys::FsType::Tmpfs);
        fs.before_row().unwrap();
        fs.sync().unwrap();
        drop(fs);
        assert!(!root.exists());
    }
}
