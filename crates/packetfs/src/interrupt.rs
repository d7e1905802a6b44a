//! Ctrl-C / SIGTERM: named blobs this process created (and was not asked to
//! keep) are removed before it exits, as a normal exit would remove them.
//! The handler is installed on the first registration only, so a process
//! that never creates a named blob keeps its signals to itself.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// Blobs to remove on interruption: `(name, huge_dir)`.
static PENDING: Mutex<Vec<(String, Option<PathBuf>)>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Registers the named blob `name` for removal if the process is interrupted.
pub fn remove_on_signal(name: &str, huge_dir: Option<&Path>) {
    install();
    let mut pending = match PENDING.lock() {
        Ok(p) => p,
        Err(poisoned) => poisoned.into_inner(),
    };
    pending.push((name.to_string(), huge_dir.map(Path::to_path_buf)));
}

/// Removes every registered blob, newest first.
fn run_all() {
    let pending = match PENDING.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
    };
    for (name, dir) in pending.into_iter().rev() {
        let _ = pfs_blob::remove(&name, dir.as_deref());
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
