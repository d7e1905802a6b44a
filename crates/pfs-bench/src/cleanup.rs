//! Ctrl-C / SIGTERM: undo what this process set up before exiting, as a
//! normal exit would — remove named blobs it created (and was not asked to
//! keep), kill the helper processes it started, unmount the filesystems it
//! mounted, delete the network namespaces and scratch directories it made.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Something to undo on interruption.
#[derive(Debug, Clone)]
pub enum Undo {
    /// A named blob: `pfs_blob::remove(name, huge_dir)`.
    Blob(String, Option<PathBuf>),
    /// A child process: SIGKILL.
    Process(u32),
    /// A network namespace (and the host end of its veth pair).
    Netns { ns: String, host_if: String },
    /// A filesystem this process mounted (a loop-mounted image): unmounted,
    /// lazily if it stays busy; its loop device goes with it.
    Mount(PathBuf),
    /// A scratch directory: removed recursively.
    Dir(PathBuf),
}

/// Pending undos, and whether the process is being interrupted. One lock for
/// both: an undo registered while the handler runs is executed at once instead
/// of being queued behind a list the handler has already taken.
static STATE: Mutex<State> = Mutex::new(State {
    pending: Vec::new(),
    next_id: 0,
    interrupted: false,
});
static HANDLER: Once = Once::new();

struct State {
    pending: Vec<(u64, Undo)>,
    next_id: u64,
    interrupted: bool,
}

/// Registers `undo` to run if the process is interrupted; returns a ticket
/// for [`done`] once the normal path has undone it.
pub fn on_interrupt(undo: Undo) -> u64 {
    install();
    let mut state = match STATE.lock() {
        Ok(s) => s,
        Err(poisoned) => poisoned.into_inner(),
    };
    if state.interrupted {
        // The handler is already tearing down: do not start anything new.
        drop(state);
        execute(undo);
        return 0;
    }
    state.next_id += 1;
    let id = state.next_id;
    state.pending.push((id, undo));
    id
}

/// The normal path has undone ticket `id`; forget it.
pub fn done(id: u64) {
    if let Ok(mut state) = STATE.lock() {
        state.pending.retain(|(i, _)| *i != id);
    }
}

/// Registers a named blob for removal if the process is interrupted.
pub fn remove_on_signal(name: &str, huge_dir: Option<&Path>) {
    on_interrupt(Undo::Blob(name.to_string(), huge_dir.map(Path::to_path_buf)));
}

/// Marks the process as interrupted and runs every pending undo, newest first.
pub fn run_all() {
    let pending = match STATE.lock() {
        Ok(mut s) => {
            s.interrupted = true;
            std::mem::take(&mut s.pending)
        }
        Err(poisoned) => {
            let mut s = poisoned.into_inner();
            s.interrupted = true;
            std::mem::take(&mut s.pending)
        }
    };
    for (_, undo) in pending.into_iter().rev() {
        execute(undo);
    }
}

fn execute(undo: Undo) {
    match undo {
        Undo::Blob(name, dir) => {
            let _ = pfs_blob::remove(&name, dir.as_deref());
        }
        Undo::Process(pid) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        Undo::Netns { ns, host_if } => {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &ns])
                .status();
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &host_if])
                .stderr(std::process::Stdio::null())
                .status();
        }
        Undo::Mount(path) => unmount(&path),
        Undo::Dir(path) => {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// Unmounts `path`: a few tries while processes that had files open there
/// exit, then a lazy unmount (detached now, released when the last file
/// closes). `umount(8)` also frees the loop device of a `mount -o loop`.
pub fn unmount(path: &Path) {
    let umount = |lazy: bool| {
        let mut cmd = std::process::Command::new("umount");
        if lazy {
            cmd.arg("-l");
        }
        cmd.arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    for _ in 0..20 {
        if !is_mount_point(path) || umount(false) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if is_mount_point(path) && !umount(true) {
        eprintln!(
            "pfs: warning: could not unmount {} (see `findmnt {}`)",
            path.display(),
            path.display()
        );
    }
}

/// Whether something is mounted on `path` (this process's mount table;
/// `path` as it was mounted, without `\040`-escaped blanks).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    // Field 5 of each line is the mount point.
    table.lines().any(|l| l.split(' ').nth(4) == Some(want.as_ref()))
}

fn install() {
    HANDLER.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            run_all();
            eprintln!("pfs: interrupted");
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!("pfs: warning: cannot install the Ctrl-C handler ({e}); an interrupted run may leave files behind");
        }
    });
}
