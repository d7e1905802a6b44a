//! Names as people read them: [`escape`] shows a file name (or any bytes a
//! peer sent) in human output so that it can never forge a line or drive a
//! terminal, the way rsync does (`\#ooo`, three octal digits of the byte).
//!
//! Escaped, each byte on its own:
//! - control characters: every byte below 0x20 (tab and newline included;
//!   rsync leaves tabs as they are) and DEL (0x7f);
//! - the C1 controls U+0080–U+009F (a terminal may take U+009B as CSI): both
//!   bytes of their UTF-8 form;
//! - every byte of a sequence that is not valid UTF-8;
//! - a backslash followed by `#`, so that every `\#` in the output starts an
//!   escape (rsync escapes it only when `#` and three digits follow).
//!
//! Everything else, printable non-ASCII UTF-8 included, is shown as it is:
//! a name that needs no escape prints unchanged. JSON output keeps the real
//! name (JSON escapes it itself); only human output goes through here.

use std::fmt::{self, Write as _};
use std::path::Path;

/// `bytes` shown as [`escape`] describes: a [`fmt::Display`] that writes
/// straight into the formatter, no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Escaped<'a>(&'a [u8]);

/// A name (path, symlink target, any bytes from a peer) for human output:
/// see the module doc.
///
/// ```
/// use pfs_files::escape;
/// assert_eq!(escape(b"evil\ndeleting important.txt").to_string(), r"evil\#012deleting important.txt");
/// assert_eq!(escape("café\\n.txt".as_bytes()).to_string(), r"café\n.txt");
/// ```
pub fn escape(bytes: &[u8]) -> Escaped<'_> {
    Escaped(bytes)
}

/// A local path for human output, escaped as [`escape`] does (its bytes as
/// the OS holds them, not a lossy UTF-8 form).
pub fn escape_path(path: &Path) -> Escaped<'_> {
    use std::os::unix::ffi::OsStrExt;
    Escaped(path.as_os_str().as_bytes())
}

/// Writes `\#ooo` for byte `b`.
fn octal(f: &mut fmt::Formatter<'_>, b: u8) -> fmt::Result {
    write!(f, "\\#{b:03o}")
}

/// A character shown as it is: not a C0 or C1 control, nor DEL.
fn plain(c: char) -> bool {
    !c.is_control()
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            let valid = chunk.valid();
            let mut rest = valid;
            while let Some(i) = rest.find(|c: char| !plain(c) || c == '\\') {
                f.write_str(&rest[..i])?;
                let c = rest[i..].chars().next().unwrap_or('\\');
                let after = &rest[i + c.len_utf8()..];
                if c == '\\' {
                    // `\#` only ever starts an escape.
                    match after.starts_with('#') {
                        true => octal(f, b'\\')?,
                        false => f.write_char('\\')?,
                    }
                } else {
                    let mut buf = [0u8; 4];
                    for &b in c.encode_utf8(&mut buf).as_bytes() {
                        octal(f, b)?;
                    }
                }
                rest = after;
            }
            f.write_str(rest)?;
            for &b in chunk.invalid() {
                octal(f, b)?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(b: &[u8]) -> String {
        escape(b).to_string()
    }

    #[test]
    fn a_plain_name_prints_unchanged() {
        assert_eq!(esc(b"dir/a file.txt"), "dir/a file.txt");
        assert_eq!(esc("naïve/日本語 😀".as_bytes()), "naïve/日本語 😀");
        assert_eq!(esc(b""), "");
    }

    #[test]
    fn control_characters_are_octal_escapes() {
        assert_eq!(
            esc(b"evil\ndeleting important.txt"),
            r"evil\#012deleting important.txt"
        );
        assert_eq!(esc(b"a\tb"), r"a\#011b");
        assert_eq!(esc(b"\x1b[31mred"), r"\#033[31mred");
        assert_eq!(esc(b"del\x7f"), r"del\#177");
        assert_eq!(esc(b"\x00\x01\x1f"), r"\#000\#001\#037");
        assert_eq!(esc(b"cr\r"), r"cr\#015");
    }

    #[test]
    fn c1_controls_are_escaped_byte_by_byte() {
        // U+009B (CSI) is C2 9B in UTF-8.
        assert_eq!(esc("a\u{9b}b".as_bytes()), r"a\#302\#233b");
        assert_eq!(esc("\u{85}".as_bytes()), r"\#302\#205");
    }

    #[test]
    fn invalid_utf8_bytes_are_escaped_and_valid_text_around_them_kept() {
        assert_eq!(esc(b"caf\xe9.txt"), r"caf\#351.txt");
        assert_eq!(esc(b"\xff\xfe"), r"\#377\#376");
        // A truncated sequence, then valid text.
        assert_eq!(esc(b"x\xe6\x97y"), r"x\#346\#227y");
        assert_eq!(esc("é".as_bytes()), "é");
    }

    #[test]
    fn a_backslash_is_escaped_only_before_a_hash() {
        assert_eq!(esc(br"a\b"), r"a\b");
        assert_eq!(esc(br"a\#012"), r"a\#134#012");
        assert_eq!(esc(br"end\"), r"end\");
        assert_eq!(esc(br"\\#"), r"\\#134#");
    }

    #[test]
    fn an_escape_never_leaves_a_control_byte_or_a_newline() {
        let all: Vec<u8> = (0..=255u8).collect();
        let s = esc(&all);
        assert!(s.bytes().all(|b| b >= 0x20 && b != 0x7f), "{s}");
        assert!(!s.chars().any(char::is_control), "{s}");
    }

    #[test]
    fn a_path_escapes_its_os_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/x\n\xff"));
        assert_eq!(escape_path(p).to_string(), r"/tmp/x\#012\#377");
        assert_eq!(format!("{:?}", escape(b"a\n")), r#""a\#012""#);
    }
}
