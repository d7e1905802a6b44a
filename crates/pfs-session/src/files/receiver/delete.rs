//! The receiver's side of DELETE (`docs/wire.md` §10.12, rsync's
//! `--delete`): while files stream, remember every path the session names
//! and its directories; when every file has landed and none failed, remove
//! from those directories (and from the remote directory itself when the
//! sender sent a directory's contents) what the session did not name and
//! no protect rule matches; name what went in DELETED frames. The removal
//! itself is the host's ([`super::FilesHost::delete_extraneous`]).

use std::collections::HashSet;

use pfs_files::{Excludes, RelPath, Removed};
use pfs_wire::files::{
    DeleteRequest, DeleteStatus, DeletedEntry, DeletedHead, DeletedKind, DELETED_ENTRY_FIXED_LEN,
    DELETED_HEAD_LEN, FLAG_LAST,
};
use pfs_wire::frame::MAX_CONTROL_BODY;
use pfs_wire::{put_frame, FrameType};

use super::core::{malformed, FilesReceiver};
use super::host::FilesHost;
use crate::files::FilesViolation;
use crate::SessionError;

/// Bookkeeping counted per named path, besides its bytes.
const NAMED_COST: u64 = 48;
/// Most entries DELETED names (the report counts them all): what a sender
/// prints stays readable, and the frames stay few.
pub const MAX_DELETED_NAMED: usize = 100_000;

/// What a session with `DELETE` in its FILES_HELLO keeps for it.
#[derive(Debug, Default)]
pub(super) struct Deletion {
    /// Every path the session named, beneath the destination root.
    named: HashSet<Box<[u8]>>,
    /// The session's directories, in the order they came.
    dirs: Vec<RelPath>,
    /// Bytes kept for `named` and `dirs`.
    memory: u64,
    /// More was named than the receiver keeps: nothing will be removed.
    overflow: bool,
    /// The DELETE frame, once it came.
    request: Option<Request>,
}

/// A DELETE: whether the remote directory is in scope, and what it protects.
#[derive(Debug)]
struct Request {
    root: bool,
    protect: Excludes,
}

impl FilesReceiver {
    /// The session names `rel` (a directory if `is_dir`): it stays, and a
    /// directory is one where extraneous entries go.
    pub(super) fn note_named(&mut self, rel: &RelPath, is_dir: bool) {
        let limit = self.budget.max_memory;
        let Some(d) = self.deletion.as_mut().filter(|d| !d.overflow) else {
            return;
        };
        d.memory += NAMED_COST + rel.as_bytes().len() as u64 * if is_dir { 2 } else { 1 };
        if d.memory > limit {
            // Past the budget: give the memory back; the sender is told why
            // nothing was removed.
            *d = Deletion {
                overflow: true,
                request: d.request.take(),
                ..Deletion::default()
            };
            return;
        }
        d.named.insert(rel.as_bytes().into());
        if is_dir {
            d.dirs.push(rel.clone());
        }
    }

    /// A DELETE frame: at most one, in a session that announced it.
    pub(super) fn delete_frame(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let req = DeleteRequest::parse(body).map_err(malformed("DELETE"))?;
        let place = match &self.deletion {
            None => "without DELETE in FILES_HELLO",
            Some(d) if d.request.is_some() => "twice",
            Some(_) => "",
        };
        if !place.is_empty() {
            return Err(FilesViolation::NotAllowed {
                frame: FrameType::Delete,
                place,
            }
            .into());
        }
        let rules: Vec<String> = req.rules().map(str::to_string).collect();
        let protect = Excludes::new(&rules).map_err(|_| FilesViolation::DeleteRule {
            rule: rules.join(" "),
        })?;
        if let Some(d) = self.deletion.as_mut() {
            d.request = Some(Request {
                root: req.root,
                protect,
            });
        }
        Ok(())
    }

    /// Every file has landed: remove what the session did not name (or,
    /// in a dry run, list it) and queue DELETED. Nothing is removed if an
    /// entry failed, or if no DELETE came (the sender could not read all of
    /// its tree).
    pub(super) fn delete_extraneous<'s, H: FilesHost<'s>>(&mut self, host: &mut H) {
        let Some(d) = self.deletion.take() else {
            return;
        };
        let Some(req) = d.request else {
            return;
        };
        let status = if d.overflow {
            DeleteStatus::SkippedLimit
        } else if self.stats.report.files_failed > 0 {
            DeleteStatus::SkippedFailures
        } else {
            DeleteStatus::Done
        };
        let mut gone: Vec<(DeletedKind, Vec<u8>)> = Vec::new();
        if status == DeleteStatus::Done {
            let base = self.scope.base.clone();
            let strip = base.as_ref().map_or(0, |b| b.as_bytes().len() + 1);
            let root_scope = req.root.then(|| base.clone());
            let scope = root_scope.into_iter().chain(d.dirs.iter().cloned().map(Some));
            let mut failed: Vec<(Vec<u8>, pfs_files::FilesError)> = Vec::new();
            for dir in scope {
                let mut keep = |p: &RelPath, is_dir: bool| {
                    d.named.contains(p.as_bytes())
                        || RelPath::parse(&p.as_bytes()[strip.min(p.as_bytes().len())..])
                            .is_ok_and(|rel| req.protect.is_excluded(&rel, is_dir))
                };
                let mut removed = |p: &RelPath, kind: Removed| {
                    self.stats.report.files_deleted += 1;
                    if gone.len() < MAX_DELETED_NAMED {
                        gone.push((
                            kind_of(kind),
                            p.as_bytes()[strip.min(p.as_bytes().len())..].to_vec(),
                        ));
                    }
                };
                if let Err(e) =
                    host.delete_extraneous(dir.as_ref(), &mut keep, self.scope.dry_run, &mut removed)
                {
                    let at = dir.map(|r| r.as_bytes().to_vec()).unwrap_or_default();
                    failed.push((at, e));
                }
            }
            for (at, e) in failed {
                self.stats.fail(&at, format_args!("cannot delete: {e}"));
            }
        }
        self.queue_deleted(status, &gone);
    }

    /// DELETED frames naming `gone`, the last flagged LAST.
    fn queue_deleted(&mut self, status: DeleteStatus, gone: &[(DeletedKind, Vec<u8>)]) {
        let max = MAX_CONTROL_BODY as usize;
        let mut body = Vec::with_capacity(max);
        let mut rest = gone;
        loop {
            body.clear();
            body.extend_from_slice(&[0; DELETED_HEAD_LEN]);
            let mut n = 0u32;
            while let Some(((kind, path), after)) = rest.split_first() {
                if body.len() + DELETED_ENTRY_FIXED_LEN + path.len() > max {
                    break;
                }
                DeletedEntry { kind: *kind, path }.emit(&mut body);
                n += 1;
                rest = after;
            }
            body[..DELETED_HEAD_LEN].copy_from_slice(&DeletedHead { status, count: n }.emit());
            let last = rest.is_empty();
            put_frame(
                &mut self.out,
                FrameType::Deleted,
                if last { FLAG_LAST } else { 0 },
                &body,
            );
            if last {
                return;
            }
        }
    }
}

fn kind_of(r: Removed) -> DeletedKind {
    match r {
        Removed::File => DeletedKind::File,
        Removed::Dir => DeletedKind::Dir,
        Removed::Symlink => DeletedKind::Symlink,
        Removed::Other => DeletedKind::Other,
    }
}
