//! Ctrl-C / SIGTERM: remove the named blobs this process created (and was
//! not asked to keep) before exiting, as a normal exit would.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

static CREATED: Mutex<Vec<(String, Option<PathBuf>)>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// Registers a named blob for removal if the process is interrupted.
pub fn remove_on_signal(name: &str, huge_dir: Option<&Path>) {
    if let Ok(mut list) = CREATED.lock() {
        list.push((name.to_string(), huge_dir.map(Path::to_path_buf)));
    }
    HANDLER.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if let Ok(list) = CREATED.lock() {
                for (name, dir) in list.iter() {
                    let _ = pfs_blob::remove(name, dir.as_deref());
                }
            }
            eprintln!("pfs: interrupted");
            std::process::exit(130);
        });
        if let Err(e) = installed {
            eprintln!("pfs: warning: cannot install the Ctrl-C handler ({e}); an interrupted run may leave blob files behind");
        }
    });
}
