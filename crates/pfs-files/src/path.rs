//! [`RelPath`]: a validated relative path, the only form in which a path
//! crosses between sender and receiver.
//!
//! Paths are raw bytes with `/` separators (Linux names need not be UTF-8).
//! [`RelPath::parse`] is the only door for untrusted bytes; once parsed, a
//! path has at least one component, none of which is empty, `.` or `..`, none
//! contains NUL, and lengths fit the kernel's limits. Joining a `RelPath` to
//! a directory therefore names something lexically beneath that directory;
//! what stops *symlinks* in the destination from redirecting it is
//! [`crate::dest::DestRoot`].

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::PathError;

/// Longest component the kernel accepts (NAME_MAX).
pub const MAX_COMPONENT: usize = 255;
/// Longest relative path accepted (PATH_MAX minus the terminating NUL).
pub const MAX_PATH: usize = 4095;

/// A validated relative path (see the module docs for the guarantees).
///
/// Ordering is component by component, comparing bytes, so a directory sorts
/// before everything inside it and `a/x` sorts before `a.b` — the order
/// [`crate::walk::scan`] produces.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RelPath(Box<[u8]>);

impl RelPath {
    /// Validate `bytes` as a relative path.
    pub fn parse(bytes: &[u8]) -> Result<Self, PathError> {
        check(bytes)?;
        Ok(Self(bytes.into()))
    }

    /// The path as bytes, components separated by `/`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path as a [`Path`] (relative), for joining onto a local directory.
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// The components, first to last; each is non-empty, not `.`/`..`, without `/` or NUL.
    pub fn components(&self) -> impl DoubleEndedIterator<Item = &[u8]> + '_ {
        self.0.split(|&b| b == b'/')
    }

    /// Number of components.
    pub fn depth(&self) -> usize {
        self.components().count()
    }

    /// The last component.
    pub fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// Everything before the last component, or `None` for a one-component path.
    pub fn parent(&self) -> Option<RelPath> {
        let i = self.0.iter().rposition(|&b| b == b'/')?;
        Some(Self(self.0[..i].into()))
    }

    /// Whether the path is or passes through a receiver's state directory
    /// ([`crate::dest::STATE_DIR`]): any of its components is `.pfs`. Not
    /// only the root's: a key whose `dir=` holds another key's destination
    /// would otherwise reach that key's `.pfs`.
    pub fn is_reserved(&self) -> bool {
        self.components().any(|c| c == crate::dest::STATE_DIR.as_bytes())
    }

    /// This path with one more component (or several, if `name` contains `/`).
    pub fn join(&self, name: &[u8]) -> Result<RelPath, PathError> {
        let mut v = Vec::with_capacity(self.0.len() + 1 + name.len());
        v.extend_from_slice(&self.0);
        v.push(b'/');
        v.extend_from_slice(name);
        Self::parse(&v)
    }
}

/// Checks a symlink's target as the receiver stores it: verbatim, so only
/// what `symlinkat` itself refuses is refused — empty, a NUL byte, longer
/// than [`MAX_PATH`]. Absolute and `..` targets, long components and
/// dangling targets pass: a link is stored, never followed (the receiver
/// resolves every path it writes without crossing a symlink,
/// [`crate::dest::DestRoot`]), and [`MAX_COMPONENT`] limits names, not the
/// text of a target.
pub fn check_symlink_target(target: &[u8]) -> Result<(), PathError> {
    if target.is_empty() {
        return Err(PathError::Empty);
    }
    if target.contains(&0) {
        return Err(PathError::Nul);
    }
    if target.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    Ok(())
}

/// rsync's `--safe-links` rule: whether the symlink `link` (its path at the
/// destination, as sent) pointing to `target` stays inside the destination
/// directory when read from the link's own directory. An
/// absolute target is unsafe; otherwise the components are walked from the
/// link's depth, `..` going up and names going down (`.` and empty ones
/// ignored), and the link is unsafe as soon as the walk climbs above the
/// top. Like rsync's, the rule is lexical: a component that is itself a
/// link is not resolved.
pub fn symlink_is_safe(link: &RelPath, target: &[u8]) -> bool {
    if target.first() == Some(&b'/') {
        return false;
    }
    // Directories between the link's own directory and the top.
    let mut depth = link.depth() - 1;
    for c in target.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => depth += 1,
        }
    }
    true
}

/// All the checks of [`RelPath::parse`].
fn check(bytes: &[u8]) -> Result<(), PathError> {
    if bytes.is_empty() {
        return Err(PathError::Empty);
    }
    if bytes[0] == b'/' {
        return Err(PathError::Absolute);
    }
    if bytes.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    if bytes.contains(&0) {
        return Err(PathError::Nul);
    }
    for c in bytes.split(|&b| b == b'/') {
        check_component(c)?;
    }
    Ok(())
}

/// Checks for one path component (a single name).
pub(crate) fn check_component(c: &[u8]) -> Result<(), PathError> {
    match c {
        b"" => Err(PathError::EmptyComponent),
        b"." | b".." => Err(PathError::DotComponent),
        _ if c.len() > MAX_COMPONENT => Err(PathError::ComponentTooLong),
        _ if c.contains(&0) => Err(PathError::Nul),
        _ if c.contains(&b'/') => Err(PathError::EmptyComponent),
        _ => Ok(()),
    }
}

impl Ord for RelPath {
    fn cmp(&self, other: &Self) -> Ordering {
        self.components().cmp(other.components())
    }
}

impl PartialOrd for RelPath {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for RelPath {
    /// For messages: control characters and invalid UTF-8 escaped
    /// ([`crate::escape()`]), so a name never forges a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&crate::escape(&self.0), f)
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelPath({:?})", String::from_utf8_lossy(&self.0))
    }
}

impl TryFrom<&str> for RelPath {
    type Error = PathError;
    fn try_from(s: &str) -> Result<Self, PathError> {
        Self::parse(s.as_bytes())
    }
}

impl AsRef<Path> for RelPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::path::Component;

    #[test]
    fn refuses_bad_paths() {
        let long_name = vec![b'a'; 256];
        let mut long_path = b"abcdefg/".repeat(512);
        long_path.push(b'x');
        let cases: &[(&[u8], PathError)] = &[
            (b"", PathError::Empty),
            (b"/etc/passwd", PathError::Absolute),
            (b"/", PathError::Absolute),
            (b".", PathError::DotComponent),
            (b"..", PathError::DotComponent),
            (b"a/../b", PathError::DotComponent),
            (b"a/./b", PathError::DotComponent),
            (b"../x", PathError::DotComponent),
            (b"a/..", PathError::DotComponent),
            (b"a//b", PathError::EmptyComponent),
            (b"a/", PathError::EmptyComponent),
            (b"a\0b", PathError::Nul),
            (&long_name, PathError::ComponentTooLong),
            (&long_path, PathError::TooLong),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                RelPath::parse(bytes),
                Err(*want),
                "{:?}",
                bytes.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn accepts_good_paths() {
        for p in [
            &b"a"[..],
            b"a/b/c",
            b"...",
            b"..a",
            b".hidden/x",
            b"caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac",
            b"bad\xff\xfeutf8",
            &[b'n'; 255],
        ] {
            let r = RelPath::parse(p).unwrap();
            assert_eq!(r.as_bytes(), p);
        }
    }

    #[test]
    fn parts() {
        let p = RelPath::try_from("a/b/c.txt").unwrap();
        assert_eq!(p.file_name(), b"c.txt");
        assert_eq!(p.parent().unwrap().as_bytes(), b"a/b");
        assert_eq!(p.depth(), 3);
        assert!(RelPath::try_from("a").unwrap().parent().is_none());
        assert_eq!(p.join(b"d").unwrap().as_bytes(), b"a/b/c.txt/d");
        assert!(p.join(b"..").is_err());
    }

    #[test]
    fn order_is_by_component() {
        let mut v: Vec<RelPath> = ["a.b", "a/x", "a", "b", "a/x/y", "A"]
            .into_iter()
            .map(|s| RelPath::try_from(s).unwrap())
            .collect();
        v.sort();
        let got: Vec<String> = v.iter().map(|p| p.to_string()).collect();
        assert_eq!(got, ["A", "a", "a/x", "a/x/y", "a.b", "b"]);
    }

    #[test]
    fn symlink_targets_are_stored_verbatim() {
        let long_component = vec![b'x'; 300];
        for t in [
            &b"/etc/passwd"[..],
            b"../../../x",
            b"nowhere",
            &long_component,
            &[b'a'; MAX_PATH],
        ] {
            assert_eq!(check_symlink_target(t), Ok(()), "{}", t.escape_ascii());
        }
        assert_eq!(check_symlink_target(b""), Err(PathError::Empty));
        assert_eq!(check_symlink_target(b"a\0b"), Err(PathError::Nul));
        assert_eq!(
            check_symlink_target(&[b'a'; MAX_PATH + 1]),
            Err(PathError::TooLong)
        );
    }

    #[test]
    fn safe_links_follow_rsyncs_rule() {
        let rp = |s: &str| RelPath::try_from(s).unwrap();
        let cases: [(&str, &[u8], bool); 13] = [
            ("top/a/l", b"../x", true),
            // Up to the destination the top lands in, as with rsync.
            ("top/a/l", b"../../x", true),
            ("top/a/l", b"../../../x", false),
            ("top/l", b"x/y", true),
            ("top/l", b"..", true),
            ("l", b"..", false),
            ("l", b"x", true),
            ("l", b"../x", false),
            ("top/l", b"/etc/passwd", false),
            ("top/a/l", b"./.././x", true),
            // Down, then up: lexically inside (rsync counts the same way).
            ("top/l", b"sub/../x", true),
            ("top/l", b"sub/../../../x", false),
            ("top/l", b"sub//.///x", true),
        ];
        for (link, target, safe) in cases {
            assert_eq!(
                symlink_is_safe(&rp(link), target),
                safe,
                "{link} -> {}",
                target.escape_ascii()
            );
        }
    }

    proptest! {
        #[test]
        fn accepted_paths_stay_beneath(bytes in proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'.'), Just(b'/'), Just(0u8), Just(0xffu8), any::<u8>()],
            0..40,
        )) {
            if let Ok(p) = RelPath::parse(&bytes) {
                prop_assert!(!bytes.starts_with(b"/"));
                prop_assert!(p.components().all(|c| c != b".." && c != b"." && !c.is_empty()));
                let root = Path::new("/srv/dest");
                let joined = root.join(p.as_path());
                prop_assert!(joined.starts_with(root));
                prop_assert!(p.as_path().components().all(|c| matches!(c, Component::Normal(_))));
                prop_assert_eq!(p.as_path().components().count(), p.depth());
            }
        }
    }
}
