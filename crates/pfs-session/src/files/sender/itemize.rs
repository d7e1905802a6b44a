//! What a send moved, or in a dry run would move: one item per entry, in
//! rsync's `--itemize-changes` form `YXcstpoguax NAME`, built after the
//! session from the items as it left them and the receiver's DELETED list.
//!
//! The receiver reports counts, not what it changed per entry, so an item
//! is the sender's knowledge, and a letter pfs cannot know is `?`:
//! - `Y`: `>` a file whose content travels (the receiver does not hold it:
//!   with [`FilesSenderConfig::probe_all`] every file is asked about,
//!   empty ones too, so a file it holds as it is is no item); `h` a hard link (`-H`,
//!   `=> TARGET`); `c` a symlink (the receiver sets every link again);
//!   for a directory `c` when it is new, `.` when it is known to exist
//!   there (the receiver holds a file beneath it), else `?` (created, or
//!   only its mode and mtime set: the receiver does not say); `*deleting`
//!   an entry `--delete` removed (or would).
//! - `X`: `f` file, `d` directory, `L` symlink (pfs sends nothing else).
//! - `cstpoguax`: all `+` when the receiver said it holds nothing (a first
//!   send: every entry is new, [`FilesSenderOutcome::receiver_empty`]);
//!   otherwise `?` where the entry may differ there — content and size of
//!   a file, mtime, permissions of a file or directory, a symlink's target
//!   and mtime, owner and group with `-o`/`-g`, ACLs with `-A`, extended
//!   attributes with `-X` — and `.` where this send cannot change it: what
//!   is not carried, a directory's checksum and size, `u` (pfs sets no
//!   access or creation time).
//!
//! After a real send, the receiver's counts settle one case: when it wrote
//! no file, no file travelled (see `settle`).
//!
//! Names are printed escaped ([`pfs_files::escape()`]); [`Itemized`] keeps
//! the real bytes for JSON.

use std::collections::HashSet;
use std::fmt;

use pfs_files::{escape, WalkKind, XattrScope};

#[cfg(doc)]
use super::FilesSenderConfig;
use super::{DeletedKind, FilesItem, FilesSenderOutcome, PreserveConfig};

/// What a send carries besides content, mode and mtime: decides which
/// letters can change (`?`) and which cannot (`.`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemizeConfig {
    /// Owner, group, hard links (`-o -g -H`).
    pub preserve: PreserveConfig,
    /// Extended attributes and ACLs the scan read (`-X -A`).
    pub xattrs: XattrScope,
}

/// The kind of entry an [`Itemized`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A regular file whose content travels.
    File,
    /// A regular file sent as a hard link of another (`target`).
    HardLink,
    /// A directory.
    Dir,
    /// A symlink (`target`).
    Symlink,
    /// Removed by `--delete` (or, in a dry run, would be).
    Deleted(DeletedKind),
}

/// One entry that travelled or changed (or would, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Itemized {
    /// rsync's 11 letters `YXcstpoguax`, or `*deleting`.
    pub change: String,
    /// What it is.
    pub kind: ItemKind,
    /// Its path relative to the remote directory, as the bytes are.
    pub path: Vec<u8>,
    /// A symlink's target, or the path a hard link is a link to.
    pub target: Option<Vec<u8>>,
}

impl Itemized {
    /// The entry is a directory (its name is shown with a trailing `/`).
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, ItemKind::Dir | ItemKind::Deleted(DeletedKind::Dir))
    }

    /// Its line in human output: with `itemize` the change then the name
    /// (`>f????..... a.txt`, `*deleting   old/`), else the name alone as
    /// rsync's `-v` lists it (`deleting old/` for a deletion). The name is
    /// escaped; a symlink is followed by ` -> TARGET`, a hard link by
    /// ` => TARGET`.
    pub fn text(&self, itemize: bool) -> ItemText<'_> {
        ItemText { item: self, itemize }
    }
}

/// An [`Itemized`] as a line of human output: see [`Itemized::text`].
#[derive(Debug, Clone, Copy)]
pub struct ItemText<'a> {
    item: &'a Itemized,
    itemize: bool,
}

impl fmt::Display for ItemText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let it = self.item;
        match (self.itemize, it.kind) {
            (true, _) => write!(f, "{:<11} ", it.change)?,
            (false, ItemKind::Deleted(_)) => f.write_str("deleting ")?,
            (false, _) => {}
        }
        write!(f, "{}", escape(&it.path))?;
        if it.is_dir() {
            f.write_str("/")?;
        }
        match (&it.target, it.kind) {
            (Some(t), ItemKind::HardLink) => write!(f, " => {}", escape(t)),
            (Some(t), _) => write!(f, " -> {}", escape(t)),
            (None, _) => Ok(()),
        }
    }
}

/// The items of a finished (or dry) send: every entry of `items` (the
/// session's, as it left them) that travels, in stream order — not the
/// files the receiver holds — then what `--delete` removed. See the
/// module doc for what each letter says.
pub fn itemize(items: &[FilesItem], out: &FilesSenderOutcome, cfg: &ItemizeConfig) -> Vec<Itemized> {
    // A file the receiver holds is there, so are the directories above it.
    let mut there: HashSet<&[u8]> = HashSet::new();
    for item in items.iter().filter(|i| i.there) {
        let rel = item.entry.rel.as_bytes();
        let slashes = rel.iter().enumerate().filter(|(_, &b)| b == b'/');
        there.extend(slashes.map(|(i, _)| &rel[..i]));
    }
    let mut list: Vec<Itemized> = items
        .iter()
        .filter_map(|item| {
            let known = there.contains(item.entry.rel.as_bytes());
            entry_item(item, out.receiver_empty, known, cfg)
        })
        .collect();
    if let Some(r) = &out.report {
        settle(&mut list, r.files_written, r.files_metadata_only);
    }
    let deleted = out.deletion.iter().flat_map(|d| &d.entries);
    list.extend(deleted.map(|(kind, path)| Itemized {
        change: "*deleting".into(),
        kind: ItemKind::Deleted(*kind),
        path: path.as_bytes().to_vec(),
        target: None,
    }));
    list
}

/// After a real send, what the receiver's counts settle: when it wrote no
/// file (`written` 0: no content, no hard link), the files listed as
/// travelling were unchanged there (or failed, and are named in the
/// report's messages): no item, or with `metadata_only` files, content
/// and size the same (`.f..??`).
fn settle(list: &mut Vec<Itemized>, written: u64, metadata_only: u64) {
    if written > 0 {
        return;
    }
    let is_file = |i: &Itemized| matches!(i.kind, ItemKind::File | ItemKind::HardLink);
    if metadata_only == 0 {
        list.retain(|i| !is_file(i));
        return;
    }
    for item in list.iter_mut().filter(|i| is_file(i)) {
        let mut c: Vec<char> = item.change.chars().collect();
        c[0] = '.';
        c[2] = '.';
        c[3] = '.';
        item.change = c.into_iter().collect();
    }
}

/// `?` when the attribute may change at the receiver, else `.`.
fn may(carried: bool) -> char {
    if carried {
        '?'
    } else {
        '.'
    }
}

/// The item of one entry: `new` when the receiver holds nothing, `there`
/// when it is a directory known to exist at the receiver.
fn entry_item(item: &FilesItem, new: bool, there: bool, cfg: &ItemizeConfig) -> Option<Itemized> {
    let e = &item.entry;
    let (kind, target) = match (&e.kind, &item.hard_link) {
        (WalkKind::File { .. }, Some(t)) => (ItemKind::HardLink, Some(t.as_bytes().to_vec())),
        (WalkKind::File { .. }, None) if item.there => return None,
        (WalkKind::File { .. }, None) => (ItemKind::File, None),
        (WalkKind::Dir, _) => (ItemKind::Dir, None),
        (WalkKind::Symlink { target }, _) => (ItemKind::Symlink, Some(target.clone())),
    };
    let (o, g) = (may(cfg.preserve.owner), may(cfg.preserve.group));
    let (a, x) = (may(cfg.xattrs.acls), may(cfg.xattrs.user));
    let change: String = match kind {
        _ if new => {
            let yx = match kind {
                ItemKind::File => ">f",
                ItemKind::HardLink => "hf",
                ItemKind::Dir => "cd",
                _ => "cL",
            };
            format!("{yx}+++++++++")
        }
        ItemKind::File => format!(">f????{o}{g}.{a}{x}"),
        ItemKind::HardLink => format!("hf????{o}{g}.{a}{x}"),
        ItemKind::Dir => format!("{}d..??{o}{g}.{a}{x}", if there { '.' } else { '?' }),
        _ => format!("cL?.?.{o}{g}..."),
    };
    Some(Itemized {
        change,
        kind,
        path: e.rel.as_bytes().to_vec(),
        target,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pfs_files::{Entry, EntryMeta, RelPath};

    use super::super::tests::{dir_item, file_item};
    use super::super::{DeleteStatus, DeletionOutcome, FilesPlanSummary};
    use super::*;

    fn outcome(receiver_empty: bool, deleted: &[(DeletedKind, &str)]) -> FilesSenderOutcome {
        FilesSenderOutcome {
            plan: FilesPlanSummary::default(),
            store_id: String::new(),
            store_generation: 0,
            index_entries_fetched: 0,
            index_entries_cached: 0,
            probed: 0,
            report: None,
            messages: String::new(),
            wire_bytes_sent: 0,
            wire_bytes_received: 0,
            repaired_chunks: 0,
            repaired_bytes: 0,
            elapsed: Duration::ZERO,
            usage: pfs_sys::Usage::default(),
            warnings: Vec::new(),
            unreadable: 0,
            dropped: 0,
            deletion: (!deleted.is_empty()).then(|| DeletionOutcome {
                status: DeleteStatus::Done,
                count: deleted.len() as u64,
                entries: deleted.iter().map(|(k, p)| (*k, p.to_string())).collect(),
            }),
            receiver_empty,
        }
    }

    fn link_item(rel: &str, target: &[u8]) -> FilesItem {
        FilesItem::new(
            Entry {
                rel: RelPath::parse(rel.as_bytes()).expect("a relative path"),
                kind: WalkKind::Symlink {
                    target: target.to_vec(),
                },
                mode: 0o777,
                mtime_ns: 0,
                dev: 1,
                ino: 9,
                abs: std::path::PathBuf::from("/src").join(rel),
                meta: EntryMeta::default(),
            },
            None,
        )
    }

    fn lines(list: &[Itemized], itemize: bool) -> Vec<String> {
        list.iter().map(|i| i.text(itemize).to_string()).collect()
    }

    fn tree() -> Vec<FilesItem> {
        let mut held = file_item("t/same.txt", 3);
        (held.held, held.there) = (true, true);
        let mut linked = file_item("t/b", 3);
        linked.hard_link = Some(RelPath::parse(b"t/a").expect("path"));
        vec![
            dir_item("t"),
            file_item("t/a", 3),
            linked,
            held,
            link_item("t/ln", b"../elsewhere"),
        ]
    }

    #[test]
    fn a_first_send_itemizes_every_entry_as_new() {
        let list = itemize(&tree(), &outcome(true, &[]), &ItemizeConfig::default());
        assert_eq!(
            lines(&list, true),
            [
                "cd+++++++++ t/",
                ">f+++++++++ t/a",
                "hf+++++++++ t/b => t/a",
                "cL+++++++++ t/ln -> ../elsewhere",
            ]
        );
    }

    #[test]
    fn an_update_says_what_it_knows_and_asks_the_rest() {
        let deleted = [(DeletedKind::File, "t/old.txt"), (DeletedKind::Dir, "t/gone")];
        let list = itemize(&tree(), &outcome(false, &deleted), &ItemizeConfig::default());
        assert_eq!(
            lines(&list, true),
            [
                ".d..??..... t/",
                ">f????..... t/a",
                "hf????..... t/b => t/a",
                "cL?.?...... t/ln -> ../elsewhere",
                "*deleting   t/old.txt",
                "*deleting   t/gone/",
            ]
        );
        assert_eq!(
            lines(&list, false),
            [
                "t/",
                "t/a",
                "t/b => t/a",
                "t/ln -> ../elsewhere",
                "deleting t/old.txt",
                "deleting t/gone/",
            ]
        );
    }

    #[test]
    fn a_send_that_wrote_no_file_lists_none_as_travelling() {
        let report = |written, metadata_only| pfs_wire::files::FilesReport {
            files_written: written,
            files_metadata_only: metadata_only,
            ..Default::default()
        };
        let mut out = outcome(false, &[]);
        out.report = Some(report(0, 0));
        let list = itemize(&tree(), &out, &ItemizeConfig::default());
        assert_eq!(
            lines(&list, true),
            [".d..??..... t/", "cL?.?...... t/ln -> ../elsewhere"]
        );
        out.report = Some(report(0, 2));
        let list = itemize(&tree(), &out, &ItemizeConfig::default());
        assert_eq!(
            lines(&list, true)[1..3],
            [".f..??..... t/a", ".f..??..... t/b => t/a"]
        );
        // Something was written: which, the receiver does not say.
        out.report = Some(report(1, 0));
        let list = itemize(&tree(), &out, &ItemizeConfig::default());
        assert_eq!(lines(&list, true)[1], ">f????..... t/a");
    }

    #[test]
    fn what_a_send_carries_may_change_the_rest_cannot() {
        let cfg = ItemizeConfig {
            preserve: PreserveConfig {
                owner: true,
                group: true,
                hard_links: true,
            },
            xattrs: XattrScope::ALL,
        };
        let list = itemize(&tree()[..2], &outcome(false, &[]), &cfg);
        assert_eq!(lines(&list, true), ["?d..????.?? t/", ">f??????.?? t/a"]);
        // Known to be there: a file beneath it is held.
        let list = itemize(&tree()[..4], &outcome(false, &[]), &cfg);
        assert_eq!(lines(&list, true)[0], ".d..????.?? t/");
    }

    #[test]
    fn names_are_escaped_in_lines_and_kept_in_items() {
        let items = vec![
            file_item("evil\ndeleting important.txt", 1),
            link_item("l", b"x\x1b[2J"),
        ];
        let deleted = [(DeletedKind::File, "gone\ttab")];
        let list = itemize(&items, &outcome(true, &deleted), &ItemizeConfig::default());
        assert_eq!(
            lines(&list, true),
            [
                r">f+++++++++ evil\#012deleting important.txt",
                r"cL+++++++++ l -> x\#033[2J",
                r"*deleting   gone\#011tab",
            ]
        );
        assert_eq!(list[0].path, b"evil\ndeleting important.txt");
        assert!(lines(&list, false).iter().all(|l| !l.contains('\n')));
    }
}
