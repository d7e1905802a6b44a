//! Text a server sends its peer in an ERROR names the problem, never the
//! server's file system: a path beneath the peer's destination is shown
//! relative to it (`.` for the destination itself), any other absolute
//! path as [`HIDDEN`]. The server's own log keeps the full text. (A files
//! report's per-entry lines already name entries relative to the
//! destination, and echo the sender's own words: they are left as they are.)

use std::path::Path;

/// What an absolute path outside the peer's destination becomes.
pub const HIDDEN: &str = "<server path>";

/// `text` with its absolute paths made relative to `root` (the peer's
/// destination) or hidden.
///
/// An absolute path is a `/` that starts a word (at the start, or after
/// whitespace, `(`, `[`, `=`, a quote or a backquote), up to whitespace, a
/// quote, a backquote, `)`, `]`, `,`, or a `:` that ends the word (`PATH:
/// why`). A `/` alone is not a path.
pub fn for_peer(text: &str, root: Option<&Path>) -> String {
    let root = root
        .and_then(Path::to_str)
        .map(|r| r.trim_end_matches('/'))
        .filter(|r| !r.is_empty());
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0
            || matches!(
                bytes[i - 1],
                b' ' | b'\t' | b'\n' | b'(' | b'[' | b'=' | b'"' | b'\'' | b'`'
            );
        if bytes[i] != b'/' || !starts_word {
            // Copy up to the next '/' ('/' is ASCII: `i` and `from` stay
            // on char boundaries).
            let from = if bytes[i] == b'/' { i + 1 } else { i };
            let next = text[from..].find('/').map_or(bytes.len(), |n| from + n);
            out.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let mut end = i + 1;
        while end < bytes.len() {
            match bytes[end] {
                b' ' | b'\t' | b'\n' | b'"' | b'\'' | b'`' | b')' | b']' | b',' => break,
                b':' if end + 1 == bytes.len() || bytes[end + 1].is_ascii_whitespace() => break,
                _ => end += 1,
            }
        }
        let path = &text[i..end];
        if path == "/" {
            out.push('/');
        } else {
            out.push_str(&relative(path, root));
        }
        i = end;
    }
    out
}

/// `path` relative to `root`, or [`HIDDEN`].
fn relative(path: &str, root: Option<&str>) -> String {
    let Some(root) = root else {
        return HIDDEN.to_string();
    };
    let path = path.trim_end_matches('/');
    if path == root {
        return ".".to_string();
    }
    match path.strip_prefix(root).and_then(|rest| rest.strip_prefix('/')) {
        Some(rest) => rest.to_string(),
        None => HIDDEN.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_beneath_the_destination_become_relative_and_others_hidden() {
        let root = Some(Path::new("/srv/pfs/files/"));
        assert_eq!(
            for_peer(
                "create directory /srv/pfs/files/ro/sub: Permission denied (os error 13)",
                root
            ),
            "create directory ro/sub: Permission denied (os error 13)"
        );
        assert_eq!(
            for_peer("read directory /srv/pfs/files/.pfs/tmp: gone", root),
            "read directory .pfs/tmp: gone"
        );
        assert_eq!(for_peer("open /srv/pfs/files: busy", root), "open .: busy");
        assert_eq!(
            for_peer("--store /srv/pfs/store: no space; \"/etc/x\" (at `/var/y`)", root),
            format!("--store {HIDDEN}: no space; \"{HIDDEN}\" (at `{HIDDEN}`)")
        );
        // A sibling that shares the prefix is not beneath it.
        assert_eq!(for_peer("at /srv/pfs/files2/x", root), format!("at {HIDDEN}"));
        // Relative paths, ratios and a lone slash stay.
        let kept = "a/b: refused; 1/2 done; x / y; dir=backups/a";
        assert_eq!(for_peer(kept, root), kept);
        assert_eq!(for_peer("dir=/abs", None), format!("dir={HIDDEN}"));
        assert_eq!(for_peer("é /srv/pfs/files/ü: ok", root), "é ü: ok");
    }
}
