//! Ctrl-C / SIGTERM: undo what this process set up before exiting, as a
//! normal exit would — remove named blobs it created (and was not asked to
//! keep), kill the helper processes it started, delete the network
//! namespaces and scratch directories it made.

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
    /// A scratch directory: removed recursively.
    Dir(PathBuf),
}

static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static NEXT_ID: Mutex<u64> = Mutex::new(0);
static HANDLER: Once = Once::new();

/// Registers `undo` to run if the process is interrupted; returns a ticket
/// for [`done`] once the normal path has undone it.
pub fn on_interrupt(undo: Undo) -> u64 {
    install();
    let id = NEXT_ID.lock().map(|mut n| {
        *n += 1;
        *n
    });
    let id = id.unwrap_or(0);
    if let Ok(mut list) = PENDING.lock() {
        list.push((id, undo));
    }
    id
}

/// The normal path has undone ticket `id`; forget it.
pub fn done(id: u64) {
    if let Ok(mut list) = PENDING.lock() {
        list.retain(|(i, _)| *i != id);
    }
}

/// Registers a named blob for removal if the process is interrupted.
pub fn remove_on_signal(name: &str, huge_dir: Option<&Path>) {
    on_interrupt(Undo::Blob(name.to_string(), huge_dir.map(Path::to_path_buf)));
}

/// Runs every pending undo, newest first.
pub fn run_all() {
    let pending: Vec<(u64, Undo)> = PENDING
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default();
    for (_, undo) in pending.into_iter().rev() {
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
            Undo::Dir(path) => {
                let _ = std::fs::remove_dir_all(path);
            }
        }
    }
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
