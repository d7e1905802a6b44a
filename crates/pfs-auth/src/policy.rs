//! Who may do what: the server's `authorized_keys` (each client key and
//! its rights) and the client's `known_hosts` (which key each server must
//! present). Parsing is strict: a line that does not parse stops the
//! program with its line number, never silently grants or pins nothing.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::{decode_key, AuthError, KeyProblem, PublicKey, PUBLIC_LABEL};

/// What one client key may do on a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rights {
    /// The directory under `--dest` the key writes into (relative, never
    /// leaving it; empty = all of `--dest`).
    pub dir: PathBuf,
    /// May run blob (gram) sessions.
    pub blob: bool,
    /// May send files.
    pub files: bool,
    /// May mount (read) the tree beneath its `dir` (`pfs mount`, docs/wire.md §12).
    pub read: bool,
    /// May have the server run its `--exec` kernel over its grams.
    pub exec: bool,
    /// May bring the server's blob to its own bytes by catch-up (docs/wire.md
    /// §16), on a server started with `--allow-catch-up`.
    pub catch_up: bool,
    /// What it may send in a streaming session (docs/wire.md §15): the
    /// rights a subscriber grants it in STREAM_ACCEPT.
    pub stream: StreamRights,
    /// The chunk-sharing group: a key references and sees only chunks
    /// stored by keys of its group. Defaults to one group per key.
    pub group: String,
}

impl Rights {
    /// Everything, in a group of its own: what a line holding only a key
    /// grants, and what an open (no `authorized_keys`) server grants.
    pub fn all(key: &PublicKey) -> Self {
        Self {
            dir: PathBuf::new(),
            blob: true,
            files: true,
            read: true,
            exec: true,
            catch_up: true,
            stream: StreamRights::Write,
            group: default_group(key),
        }
    }

    /// `dir=… no-exec …` as an `authorized_keys` line would say it.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.dir.as_os_str().is_empty() {
            parts.push(format!("dir={}", self.dir.display()));
        }
        for (allowed, name) in [
            (self.blob, "no-blob"),
            (self.files, "no-files"),
            (self.read, "no-read"),
            (self.exec, "no-exec"),
            (self.catch_up, "no-catch-up"),
        ] {
            if !allowed {
                parts.push(name.to_string());
            }
        }
        if self.stream != StreamRights::Write {
            parts.push(format!("stream={}", self.stream.name()));
        }
        parts.push(format!("group={}", self.group));
        parts.join(" ")
    }
}

/// What a key may send a subscriber in a streaming session, each level
/// including the ones before it: `stream=ref`, `stream=message`,
/// `stream=write` (the default) in `authorized_keys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StreamRights {
    /// REFERENCE entries only: offsets into the blob both sides hold.
    Reference,
    /// References and MESSAGE entries (bytes for the subscriber's code).
    Message,
    /// Also WRITE entries: bytes written into the subscriber's blob.
    Write,
}

impl StreamRights {
    /// Its name in `authorized_keys` (`ref`, `message`, `write`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Reference => "ref",
            Self::Message => "message",
            Self::Write => "write",
        }
    }

    /// Whether it allows MESSAGE entries.
    pub fn messages(self) -> bool {
        self >= Self::Message
    }

    /// Whether it allows WRITE entries.
    pub fn writes(self) -> bool {
        self >= Self::Write
    }

    fn parse(word: &str) -> Option<Self> {
        match word {
            "ref" | "reference" => Some(Self::Reference),
            "message" => Some(Self::Message),
            "write" => Some(Self::Write),
            _ => None,
        }
    }
}

/// The group a key is in when its line names none: `key-` and its
/// fingerprint's hex.
pub fn default_group(key: &PublicKey) -> String {
    let fp = key.fingerprint();
    format!("key-{}", fp.trim_start_matches("blake3:"))
}

/// A parsed `authorized_keys` file.
#[derive(Debug, Clone, Default)]
pub struct AuthorizedKeys {
    keys: HashMap<PublicKey, Rights>,
}

impl AuthorizedKeys {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let text = fs::read_to_string(path).map_err(|source| AuthError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, problem)| AuthError::Policy {
            path: path.to_path_buf(),
            line,
            problem,
        })
    }

    /// Parses the text of an `authorized_keys` file: one key a line,
    /// `[OPTIONS] pfs-x25519 BASE64 [OPTIONS] [comment] [# comment]`, the
    /// options `dir=PATH`, `no-blob`, `no-files`, `no-read`, `no-exec`,
    /// `no-catch-up`, `stream=ref|message|write`, `group=NAME` (a `.pub`
    /// line as `pfs keygen` writes it, `pfs-x25519 BASE64 # NAME`, is a
    /// valid line; options go in front of it, as in ssh's file); `#` starts
    /// a comment anywhere, blank lines are skipped. Errors carry the 1-based
    /// line number.
    pub fn parse(text: &str) -> Result<Self, (usize, LineProblem)> {
        let mut keys = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let (body, note) = match raw.split_once('#') {
                Some((body, note)) => (body.trim(), note),
                None => (raw.trim(), ""),
            };
            if body.is_empty() {
                continue;
            }
            let mut words = body.split_whitespace().peekable();
            // ssh's form: options in front of the key.
            let mut front = Vec::new();
            while let Some(word) = words.next_if(|w| *w != PUBLIC_LABEL) {
                front.push(word);
            }
            if words.peek().is_none() {
                // No key label on the line: name what the first word is not.
                let mut all = body.split_whitespace();
                return Err((
                    line_no,
                    parse_key_words(&mut all)
                        .err()
                        .unwrap_or(KeyProblem::Empty)
                        .into(),
                ));
            }
            let key = parse_key_words(&mut words).map_err(|p| (line_no, p.into()))?;
            let mut rights = Rights::all(&key);
            let mut has_options = !front.is_empty();
            for word in front {
                apply_option(&mut rights, word).map_err(|p| (line_no, p))?;
            }
            // Options next; the first word that does not look like one
            // starts a comment (an old `.pub` line's bare `user@host`). An
            // option after the comment began would be silently lost: refused.
            let mut comment: Option<&str> = None;
            for word in words {
                let option_like = word.contains('=') || word.starts_with("no-");
                match (option_like, comment) {
                    (true, None) => {
                        has_options = true;
                        apply_option(&mut rights, word).map_err(|p| (line_no, p))?
                    }
                    (true, Some(c)) => {
                        return Err((
                            line_no,
                            LineProblem::AfterComment {
                                word: word.to_string(),
                                comment: c.to_string(),
                            },
                        ))
                    }
                    (false, None) => comment = Some(word),
                    (false, Some(_)) => {}
                }
            }
            // `$(cat id.pub) no-exec` puts the option after the `#`, where
            // it would be ignored: a right silently kept. A line with no
            // option outside its comment and one inside is refused (a line
            // with options elsewhere was written knowing where they go).
            let misplaced = note
                .split_whitespace()
                .find(|w| apply_option(&mut Rights::all(&key), w).is_ok());
            if let (false, Some(word)) = (has_options, misplaced) {
                return Err((
                    line_no,
                    LineProblem::InComment {
                        word: word.to_string(),
                    },
                ));
            }
            if keys.insert(key, rights).is_some() {
                return Err((
                    line_no,
                    LineProblem::Twice {
                        fingerprint: key.fingerprint(),
                    },
                ));
            }
        }
        Ok(Self { keys })
    }

    /// The rights of `key`, if it is listed.
    pub fn rights(&self, key: &PublicKey) -> Option<&Rights> {
        self.keys.get(key)
    }

    /// Number of keys listed.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No key is listed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn parse_key_words<'a>(words: &mut impl Iterator<Item = &'a str>) -> Result<PublicKey, KeyProblem> {
    let label = words.next().ok_or(KeyProblem::Empty)?;
    if label != PUBLIC_LABEL {
        return Err(KeyProblem::Label {
            expected: PUBLIC_LABEL,
        });
    }
    Ok(PublicKey(decode_key(words.next().unwrap_or(""))?))
}

/// What is wrong with a line of an `authorized_keys` or `known_hosts` file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// The key does not parse.
    #[error(transparent)]
    Key(#[from] KeyProblem),
    /// A `known_hosts` line without a key after its address.
    #[error("expected `ADDRESS pfs-x25519 KEY`")]
    NoKey,
    /// A `group=` name that is not allowed.
    #[error("group {name:?}: use 1-64 letters, digits, '.', '_' or '-', not starting with '.'")]
    Group {
        /// The name given.
        name: String,
    },
    /// An option this file does not know.
    #[error("unknown option {word:?} (known: dir=PATH, group=NAME, stream=ref|message|write, no-blob, no-files, no-read, no-exec, no-catch-up)")]
    UnknownOption {
        /// The word given.
        word: String,
    },
    /// An option after the comment began.
    #[error("option {word:?} after the comment {comment:?}: put options before the comment")]
    AfterComment {
        /// The option.
        word: String,
        /// The comment's first word.
        comment: String,
    },
    /// An option inside the `#` comment, where it would be ignored.
    #[error(
        "option {word:?} is inside the `#` comment and would be ignored: put options in front of the key"
    )]
    InComment {
        /// The option.
        word: String,
    },
    /// A key on two lines.
    #[error("key {fingerprint} is listed twice")]
    Twice {
        /// The key's fingerprint.
        fingerprint: String,
    },
    /// A `stream=` level that is not one of the three.
    #[error("stream={level}: give ref, message or write")]
    Stream {
        /// The level given.
        level: String,
    },
    /// A `dir=` that is absolute.
    #[error("dir={dir}: must be relative to --dest")]
    DirAbsolute {
        /// The `dir=` given.
        dir: String,
    },
    /// A `dir=` with `..`.
    #[error("dir={dir}: must not contain '..'")]
    DirParent {
        /// The `dir=` given.
        dir: String,
    },
    /// A `dir=` naming no directory (empty, `.`).
    #[error("dir={dir}: names no directory")]
    DirEmpty {
        /// The `dir=` given.
        dir: String,
    },
}

fn apply_option(rights: &mut Rights, word: &str) -> Result<(), LineProblem> {
    match word.split_once('=') {
        Some(("dir", path)) => rights.dir = confined_dir(path)?,
        Some(("stream", level)) => {
            rights.stream = StreamRights::parse(level).ok_or_else(|| LineProblem::Stream {
                level: level.to_string(),
            })?
        }
        Some(("group", name)) => {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !name.starts_with('.');
            if !ok {
                return Err(LineProblem::Group {
                    name: name.to_string(),
                });
            }
            rights.group = format!("group-{name}");
        }
        None if word == "no-blob" || word == "no-gram" => rights.blob = false,
        None if word == "no-files" => rights.files = false,
        None if word == "no-read" => rights.read = false,
        None if word == "no-exec" => rights.exec = false,
        None if word == "no-catch-up" => rights.catch_up = false,
        _ => {
            return Err(LineProblem::UnknownOption {
                word: word.to_string(),
            })
        }
    }
    Ok(())
}

/// A `dir=` value made safe: relative, no `..`, no empty or `.` parts.
fn confined_dir(path: &str) -> Result<PathBuf, LineProblem> {
    let p = Path::new(path);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(LineProblem::DirAbsolute {
                    dir: path.to_string(),
                })
            }
            Component::ParentDir => {
                return Err(LineProblem::DirParent {
                    dir: path.to_string(),
                })
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(LineProblem::DirEmpty {
            dir: path.to_string(),
        });
    }
    Ok(out)
}

/// What a `known_hosts` file says about a server's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCheck {
    /// The key is pinned for this address.
    Known,
    /// The address has no line.
    Unknown,
    /// The address is pinned to other keys: the server's key changed, or
    /// someone is in the middle.
    Changed {
        /// The keys pinned for the address.
        pinned: Vec<PublicKey>,
    },
}

/// A parsed `known_hosts` file: `ADDRESS pfs-x25519 BASE64 [comment]` a
/// line, ADDRESS as given to `--to` (e.g. `backup.example:7878`). An
/// address may have several lines (during a key rotation).
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    hosts: HashMap<String, Vec<PublicKey>>,
}

impl KnownHosts {
    /// Reads `path`; a missing file is an empty list.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        match fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|(line, problem)| AuthError::Policy {
                path: path.to_path_buf(),
                line,
                problem,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(AuthError::Io {
                what: "reading",
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parses a `known_hosts` text; errors carry the 1-based line number.
    pub fn parse(text: &str) -> Result<Self, (usize, LineProblem)> {
        let mut hosts: HashMap<String, Vec<PublicKey>> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (addr, rest) = line
                .split_once(char::is_whitespace)
                .ok_or((i + 1, LineProblem::NoKey))?;
            let mut words = rest.split_whitespace();
            let key = parse_key_words(&mut words).map_err(|p| (i + 1, p.into()))?;
            hosts.entry(addr.to_string()).or_default().push(key);
        }
        Ok(Self { hosts })
    }

    /// Whether `key` is the one pinned for `addr`.
    pub fn check(&self, addr: &str, key: &PublicKey) -> HostCheck {
        match self.hosts.get(addr) {
            None => HostCheck::Unknown,
            Some(keys) if keys.contains(key) => HostCheck::Known,
            Some(keys) => HostCheck::Changed { pinned: keys.clone() },
        }
    }

    /// Whether `addr` has any line.
    pub fn knows(&self, addr: &str) -> bool {
        self.hosts.contains_key(addr)
    }
}

/// The line to add to `known_hosts` to pin `key` for `addr`.
pub fn known_hosts_line(addr: &str, key: &PublicKey) -> String {
    format!("{addr} {}", key.line(""))
}

/// The default `known_hosts`: beside the default identity.
pub fn default_known_hosts_path() -> Option<PathBuf> {
    crate::default_identity_path().map(|p| p.with_file_name("known_hosts"))
}

/// Parses `--server-key`: a public key line, its bare base64, or the path
/// of a file holding the line (e.g. the server's `identity.pub`).
pub fn parse_server_key(text: &str) -> Result<PublicKey, AuthError> {
    let bad = |problem| AuthError::BadKey {
        what: format!("--server-key {text:?}"),
        problem,
    };
    let t = text.trim();
    if t.starts_with(PUBLIC_LABEL) {
        return PublicKey::parse_line(t).map(|(k, _)| k).map_err(bad);
    }
    if let Ok(k) = decode_key(t) {
        return Ok(PublicKey(k));
    }
    let path = Path::new(t);
    if path.is_file() {
        let line = fs::read_to_string(path).map_err(|source| AuthError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        })?;
        return PublicKey::parse_line(line.lines().next().unwrap_or(""))
            .map(|(k, _)| k)
            .map_err(|problem| AuthError::BadKey {
                what: path.display().to_string(),
                problem,
            });
    }
    Err(bad(KeyProblem::Label {
        expected: PUBLIC_LABEL,
    }))
}

impl fmt::Display for HostCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known => f.write_str("known"),
            Self::Unknown => f.write_str("unknown"),
            Self::Changed { pinned } => {
                let fps: Vec<String> = pinned.iter().map(|k| k.fingerprint()).collect();
                write!(f, "changed (pinned: {})", fps.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;

    #[test]
    fn authorized_keys_lines_grant_and_restrict() {
        let (a, b, c) = (
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
        );
        let text = format!(
            "# backups\n\n{}\n{} dir=backups/./a no-exec # alice\n{} no-blob no-files group=team\n",
            a.line("everything"),
            a.line("").replace(&a.to_base64(), &b.to_base64()),
            c
        );
        // Comments after a key without options are not options.
        let text = text.replace("everything", "# everything");
        let keys = AuthorizedKeys::parse(&text).unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.rights(&a), Some(&Rights::all(&a)));
        let rb = keys.rights(&b).unwrap();
        assert_eq!(rb.dir, PathBuf::from("backups/a"));
        assert!(!rb.exec && rb.blob && rb.files && rb.read);
        let rc = keys.rights(&c).unwrap();
        assert!(!rc.blob && !rc.files && rc.exec && rc.read);
        assert_eq!(rc.group, "group-team");
        assert_eq!(rc.describe(), "no-blob no-files group=group-team");
    }

    #[test]
    fn no_read_takes_only_the_right_to_mount() {
        let (k, r) = (
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
        );
        let text = format!("{k} dir=pub no-read # writer\n{r} no-files no-blob group=readers\n");
        let keys = AuthorizedKeys::parse(&text).unwrap();
        let w = keys.rights(&k).unwrap();
        assert!(!w.read && w.files && w.blob && w.exec && w.catch_up);
        let nc = AuthorizedKeys::parse(&format!("{k} no-catch-up\n")).unwrap();
        assert!(!nc.rights(&k).unwrap().catch_up);
        assert_eq!(
            nc.rights(&k).unwrap().describe().split(' ').next(),
            Some("no-catch-up")
        );
        assert_eq!(
            w.describe(),
            format!("dir=pub no-read group={}", default_group(&k))
        );
        // A read-only key: mounts, sends nothing.
        let ro = keys.rights(&r).unwrap();
        assert!(ro.read && !ro.files && !ro.blob);
        assert_eq!(ro.describe(), "no-blob no-files group=group-readers");
        assert!(Rights::all(&k).read);
        let typo = AuthorizedKeys::parse(&format!("{k} no-reads\n")).unwrap_err();
        assert!(typo.1.to_string().contains("no-read,"), "{}", typo.1);
    }

    #[test]
    fn authorized_keys_refuse_what_could_escape_or_surprise() {
        let k = Identity::generate().unwrap().public();
        for (opts, why) in [
            ("dir=../x", "'..'"),
            ("dir=/etc", "relative"),
            ("dir=a/../../b", "'..'"),
            ("dir=.", "names no directory"),
            ("no-writes", "unknown option"),
            ("group=../x", "group"),
        ] {
            let err = AuthorizedKeys::parse(&format!("\n{k} {opts}\n")).unwrap_err();
            assert_eq!(err.0, 2, "{opts}");
            assert!(err.1.to_string().contains(why), "{opts}: {}", err.1);
        }
        let late = AuthorizedKeys::parse(&format!("{k} alice@host no-exec\n")).unwrap_err();
        assert!(late.1.to_string().contains("before the comment"), "{}", late.1);
        let typo = AuthorizedKeys::parse(&format!("{k} no-exce\n")).unwrap_err();
        assert!(typo.1.to_string().contains("unknown option"), "{}", typo.1);
        let pub_line = AuthorizedKeys::parse(&format!("{}\n", k.line("alice@host"))).unwrap();
        assert_eq!(pub_line.rights(&k), Some(&Rights::all(&k)));
        let twice = format!("{k}\n{k} no-exec\n");
        assert!(AuthorizedKeys::parse(&twice)
            .unwrap_err()
            .1
            .to_string()
            .contains("twice"));
        assert!(AuthorizedKeys::parse("ssh-ed25519 AAAA\n").is_err());
    }

    #[test]
    fn a_keygen_line_takes_options_in_front_and_refuses_them_after_its_comment() {
        let k = Identity::generate().unwrap().public();
        // What `pfs keygen -C` writes: any comment, even one that looks
        // like options, is a comment.
        let pub_line = k.line("ops team, dir=x no-exec");
        assert!(pub_line.contains(" # ops team"), "{pub_line}");
        let plain = AuthorizedKeys::parse(&format!("{pub_line}\n"));
        assert!(plain.is_err(), "an option-shaped word after `#` is refused");
        let pub_line = k.line("alice@laptop");
        let keys = AuthorizedKeys::parse(&format!("{pub_line}\n")).unwrap();
        assert_eq!(keys.rights(&k), Some(&Rights::all(&k)));
        // The README's recipe: options in front of the `.pub` line.
        let keys = AuthorizedKeys::parse(&format!("dir=backups/laptop no-exec {pub_line}\n")).unwrap();
        let r = keys.rights(&k).unwrap();
        assert_eq!(r.dir, PathBuf::from("backups/laptop"));
        assert!(!r.exec && r.files && r.read && r.blob);
        // Options in front, the comment may hold anything.
        let odd = k.line("no-exec laptop");
        let keys = AuthorizedKeys::parse(&format!("no-blob {odd}\n")).unwrap();
        assert!(keys.rights(&k).unwrap().exec);
        // Options both sides of the key add up.
        let keys = AuthorizedKeys::parse(&format!("no-blob {k} no-exec # x\n")).unwrap();
        let r = keys.rights(&k).unwrap();
        assert!(!r.blob && !r.exec && r.files);
        // Appended after the `#`, an option would be ignored: refused.
        let late = AuthorizedKeys::parse(&format!("{pub_line} no-exec\n")).unwrap_err();
        assert_eq!(late.0, 1);
        assert!(late.1.to_string().contains("in front of the key"), "{}", late.1);
        // A mistyped front option and a missing key are named.
        let typo = AuthorizedKeys::parse(&format!("no-exce {k}\n")).unwrap_err();
        assert!(typo.1.to_string().contains("unknown option"), "{}", typo.1);
        let nokey = AuthorizedKeys::parse("no-exec\n").unwrap_err();
        assert!(nokey.1.to_string().contains("pfs-x25519"), "{}", nokey.1);
    }

    #[test]
    fn stream_levels_grant_references_messages_or_writes() {
        let (r, m, w) = (
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
        );
        let text = format!("{r} stream=ref\n{m} stream=message no-exec\n{w} # all\n");
        let keys = AuthorizedKeys::parse(&text).unwrap();
        let (rr, rm, rw) = (
            keys.rights(&r).unwrap(),
            keys.rights(&m).unwrap(),
            keys.rights(&w).unwrap(),
        );
        assert_eq!(rr.stream, StreamRights::Reference);
        assert!(!rr.stream.messages() && !rr.stream.writes());
        assert!(rm.stream.messages() && !rm.stream.writes());
        assert!(rw.stream.messages() && rw.stream.writes());
        assert_eq!(rr.describe().split(' ').next(), Some("stream=ref"));
        assert_eq!(
            rm.describe().split(' ').take(2).collect::<Vec<_>>(),
            ["no-exec", "stream=message"]
        );
        assert!(!rw.describe().contains("stream="));
        let bad = AuthorizedKeys::parse(&format!("{r} stream=all\n")).unwrap_err();
        assert_eq!(bad.1, LineProblem::Stream { level: "all".into() });
        assert!(bad.1.to_string().contains("ref, message or write"), "{}", bad.1);
    }

    #[test]
    fn known_hosts_tell_known_unknown_and_changed() {
        let (a, b) = (
            Identity::generate().unwrap().public(),
            Identity::generate().unwrap().public(),
        );
        let text = format!("# pins\n{}\n", known_hosts_line("h:7878", &a));
        let hosts = KnownHosts::parse(&text).unwrap();
        assert_eq!(hosts.check("h:7878", &a), HostCheck::Known);
        assert_eq!(hosts.check("other:7878", &a), HostCheck::Unknown);
        assert_eq!(hosts.check("h:7878", &b), HostCheck::Changed { pinned: vec![a] });
        assert!(KnownHosts::parse("h:1\n").is_err());
    }

    #[test]
    fn server_keys_parse_from_line_base64_or_file() {
        let k = Identity::generate().unwrap().public();
        assert_eq!(parse_server_key(&k.line("c")).unwrap(), k);
        assert_eq!(parse_server_key(&k.to_base64()).unwrap(), k);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("server.pub");
        fs::write(&f, format!("{}\n", k.line("srv"))).unwrap();
        assert_eq!(parse_server_key(f.to_str().unwrap()).unwrap(), k);
        assert!(parse_server_key("nonsense").is_err());
    }
}
