//! Deletion (docs/wire.md §10.12, rsync's `--delete`): after the stream
//! the sender asks the receiver to remove what the sender's tree lacks
//! (DELETE, with the exclude patterns that protect entries) and collects
//! what the receiver reports removed (DELETED frames, then the count in
//! the report). A dry run lists the tree (FILE frames flagged LISTED) so
//! the receiver can say what it would remove.

use pfs_wire::files::{parse_deleted, DeleteRequest};
use pfs_wire::FrameType;

use super::batch::Outbox;
use super::core::malformed;
use super::{DeleteConfig, DeletionOutcome};
use crate::SessionError;

/// The deletion side of a send: see the module doc.
#[derive(Debug, Default)]
pub(super) struct Deletion {
    /// A dry run of DELETE: the stream is FILE entries flagged LISTED.
    pub(super) listing: bool,
    /// DELETE went out: DELETED frames come before the report.
    sent: bool,
    /// What DELETED said so far.
    outcome: Option<DeletionOutcome>,
}

impl Deletion {
    /// Whether DELETE went out (DELETED frames may come).
    pub(super) fn is_sent(&self) -> bool {
        self.sent
    }

    /// DELETE into `out`, if the session asked for it (`cfg`) and every
    /// entry could be read (an entry left out would look extraneous: rsync
    /// skips deletion after I/O errors too); else a warning says why not.
    pub(super) fn request(
        &mut self,
        cfg: Option<&DeleteConfig>,
        unreadable: u64,
        out: &mut Outbox,
    ) -> Option<String> {
        let d = cfg?;
        if unreadable > 0 {
            return Some(format!(
                "not deleting anything at the receiver: {unreadable} entries could not be read"
            ));
        }
        let mut body = Vec::new();
        match DeleteRequest::emit(d.root, d.protect.iter().map(String::as_str), &mut body) {
            Ok(()) => {
                out.control(FrameType::Delete, 0, &body);
                self.sent = true;
                None
            }
            Err(_) => Some(format!(
                "not deleting anything at the receiver: more than {} exclude patterns, or one longer than {} bytes",
                pfs_wire::files::MAX_DELETE_RULES,
                pfs_wire::files::MAX_PATH_LEN
            )),
        }
    }

    /// One DELETED body: its status, and the entries it names (at most
    /// [`crate::files::MAX_DELETED_NAMED`] are kept).
    pub(super) fn deleted(&mut self, body: &[u8]) -> Result<(), SessionError> {
        let (head, entries) = parse_deleted(body).map_err(malformed("DELETED"))?;
        let d = self.outcome.get_or_insert(DeletionOutcome {
            status: head.status,
            count: 0,
            entries: Vec::new(),
        });
        d.status = head.status;
        for e in entries {
            let e = e.map_err(malformed("DELETED entry"))?;
            if d.entries.len() < crate::files::MAX_DELETED_NAMED {
                d.entries
                    .push((e.kind, String::from_utf8_lossy(e.path).into_owned()));
            }
        }
        Ok(())
    }

    /// The report counted `files_deleted` removed entries.
    pub(super) fn ended(&mut self, files_deleted: u64) {
        if let Some(d) = self.outcome.as_mut() {
            d.count = files_deleted;
        }
    }

    /// What the receiver removed (or in a dry run would remove).
    pub(super) fn take(&mut self) -> Option<DeletionOutcome> {
        self.outcome.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::MAX_DELETED_NAMED;
    use pfs_wire::files::{DeleteStatus, DeletedEntry, DeletedHead, DeletedKind};

    fn config() -> DeleteConfig {
        DeleteConfig {
            root: true,
            protect: vec!["*.keep".into()],
        }
    }

    fn deleted_body(status: DeleteStatus, names: &[&str]) -> Vec<u8> {
        let mut body = DeletedHead {
            status,
            count: names.len() as u32,
        }
        .emit()
        .to_vec();
        for n in names {
            DeletedEntry {
                kind: DeletedKind::File,
                path: n.as_bytes(),
            }
            .emit(&mut body);
        }
        body
    }

    #[test]
    fn delete_goes_out_only_when_asked_and_every_entry_was_read() {
        let mut out = Outbox::new(None, None).expect("outbox");
        let mut d = Deletion::default();
        assert_eq!(d.request(None, 0, &mut out), None);
        assert!(out.is_empty() && !d.is_sent());
        let why = d.request(Some(&config()), 2, &mut out).expect("a warning");
        assert!(why.contains("2 entries could not be read"), "{why}");
        assert!(out.is_empty() && !d.is_sent());
        assert_eq!(d.request(Some(&config()), 0, &mut out), None);
        assert!(!out.is_empty() && d.is_sent());
    }

    #[test]
    fn too_many_exclude_patterns_mean_no_deletion() {
        let mut out = Outbox::new(None, None).expect("outbox");
        let cfg = DeleteConfig {
            root: false,
            protect: vec!["x".into(); pfs_wire::files::MAX_DELETE_RULES + 1],
        };
        let mut d = Deletion::default();
        let why = d.request(Some(&cfg), 0, &mut out).expect("a warning");
        assert!(why.contains("exclude patterns"), "{why}");
        assert!(!d.is_sent());
    }

    #[test]
    fn deleted_frames_add_up_to_a_bounded_list_and_the_report_counts() {
        let mut d = Deletion::default();
        let names: Vec<String> = (0..MAX_DELETED_NAMED + 5).map(|i| format!("old{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        d.deleted(&deleted_body(DeleteStatus::Done, &names[..3]))
            .expect("DELETED");
        d.deleted(&deleted_body(DeleteStatus::Done, &names[3..]))
            .expect("DELETED");
        d.ended(1234);
        let got = d.take().expect("an outcome");
        assert_eq!(got.status, DeleteStatus::Done);
        assert_eq!(got.count, 1234);
        assert_eq!(got.entries.len(), MAX_DELETED_NAMED);
        assert_eq!(got.entries[0], (DeletedKind::File, "old0".to_string()));
        assert!(d.take().is_none());
    }
}
