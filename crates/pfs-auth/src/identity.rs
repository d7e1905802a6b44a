//! Identities: static key pairs, their files and their text form.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

/// The Noise pattern identities are generated for (x25519 keys serve every
/// `_25519_` pattern).
pub const NOISE_PARAMS: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
/// Label of a public key line.
pub const PUBLIC_LABEL: &str = "pfs-x25519";
/// Label of a private key file's line.
pub const PRIVATE_LABEL: &str = "pfs-x25519-private";
/// Bytes of an x25519 key.
pub const KEY_LEN: usize = 32;

/// Why an identity could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The Noise library refused to generate a key.
    #[error("generating a key pair: {0}")]
    Generate(#[source] snow::Error),
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The key file exists and overwriting was not asked for.
    #[error("{} already exists (use --force to replace it)", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A private key file others may read or write.
    #[error("{} is mode {mode:04o}: a private key must be readable by its owner only (chmod 600)", path.display())]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A line of an `authorized_keys` or `known_hosts` file that does not parse.
    #[error("{}:{line}: {problem}", path.display())]
    Policy {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: crate::policy::LineProblem,
    },
    /// A key line that does not parse.
    #[error("{what}: {problem}")]
    BadKey {
        /// Which key or file.
        what: String,
        /// What is wrong with it.
        problem: KeyProblem,
    },
}

/// What is wrong with a key's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    /// The line is empty.
    #[error("empty")]
    Empty,
    /// The first word is not the expected label.
    #[error("does not start with `{expected}`")]
    Label {
        /// The label expected.
        expected: &'static str,
    },
    /// The key is not base64.
    #[error("the key is not base64")]
    Base64,
    /// The key has another length.
    #[error("the key has {0} bytes, not 32")]
    Length(usize),
}

/// A public key: who a peer is.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    /// Parses `pfs-x25519 BASE64 [# comment]`; returns the key and the
    /// comment (without its `#`; a bare comment, as older `pfs keygen`
    /// wrote it, is read too).
    pub fn parse_line(line: &str) -> Result<(Self, &str), KeyProblem> {
        let line = line.trim();
        let mut words = line.splitn(3, char::is_whitespace);
        let label = words.next().filter(|w| !w.is_empty()).ok_or(KeyProblem::Empty)?;
        if label != PUBLIC_LABEL {
            return Err(KeyProblem::Label {
                expected: PUBLIC_LABEL,
            });
        }
        let key = decode_key(words.next().unwrap_or(""))?;
        let comment = words.next().unwrap_or("").trim();
        Ok((
            Self(key),
            comment.strip_prefix('#').unwrap_or(comment).trim_start(),
        ))
    }

    /// The key as base64 (44 characters).
    pub fn to_base64(&self) -> String {
        B64.encode(self.0)
    }

    /// A short, stable name for the key: `blake3:` and the first 16 bytes
    /// of its BLAKE3, in hex. What a refusal prints, like ssh's SHA256
    /// fingerprint.
    pub fn fingerprint(&self) -> String {
        let h = blake3::hash(&self.0);
        let hex: String = h.as_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!("blake3:{hex}")
    }

    /// The one-line text form, with an optional comment after a `#`: an
    /// `authorized_keys` parser reads nothing after `#` as an option, so
    /// any comment is safe there (options go in front of the key).
    /// Line breaks in the comment become spaces: the line stays one line.
    pub fn line(&self, comment: &str) -> String {
        let comment: String = comment
            .trim()
            .trim_start_matches('#')
            .trim_start()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if comment.is_empty() {
            format!("{PUBLIC_LABEL} {}", self.to_base64())
        } else {
            format!("{PUBLIC_LABEL} {} # {comment}", self.to_base64())
        }
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line(""))
    }
}

/// A static key pair. The private half is never printed.
#[derive(Clone)]
pub struct Identity {
    private: [u8; KEY_LEN],
    public: PublicKey,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A new key pair from the system's random source (through `snow`).
    pub fn generate() -> Result<Self, AuthError> {
        let params = NOISE_PARAMS.parse().map_err(AuthError::Generate)?;
        let pair = snow::Builder::new(params)
            .generate_keypair()
            .map_err(AuthError::Generate)?;
        let length_problem = |len| AuthError::BadKey {
            what: "generated key".into(),
            problem: KeyProblem::Length(len),
        };
        let private: [u8; KEY_LEN] = pair
            .private
            .as_slice()
            .try_into()
            .map_err(|_| length_problem(pair.private.len()))?;
        let public: [u8; KEY_LEN] = pair
            .public
            .as_slice()
            .try_into()
            .map_err(|_| length_problem(pair.public.len()))?;
        Ok(Self {
            private,
            public: PublicKey(public),
        })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// The private half, for the handshake.
    pub fn private_bytes(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    /// Writes the private key to `path` (mode 0600, created new unless
    /// `force`) and the public line to `path.pub`. The parent directory is
    /// created (mode 0700) when missing. Returns the path of the public file.
    pub fn save(&self, path: &Path, comment: &str, force: bool) -> Result<PathBuf, AuthError> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| AuthError::Io { what, path, source }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io("creating", dir))?;
            }
        }
        let public_path = public_path(path);
        if !force {
            for p in [path, public_path.as_path()] {
                if p.exists() {
                    return Err(AuthError::Exists {
                        path: p.to_path_buf(),
                    });
                }
            }
        }
        // Written beside the final name and renamed, so a failure never
        // leaves a truncated key behind; created 0600 so no other user
        // can ever read the private half.
        let tmp = path.with_extension("pfs-keygen-tmp");
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("creating", &tmp))?;
        let text = format!("{PRIVATE_LABEL} {}\n", B64.encode(self.private));
        let written = f.write_all(text.as_bytes()).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io("writing", &tmp)(e));
        }
        fs::rename(&tmp, path).map_err(io("renaming into", path))?;
        fs::write(&public_path, format!("{}\n", self.public.line(comment)))
            .map_err(io("writing", &public_path))?;
        Ok(public_path)
    }

    /// Reads a private key file written by [`Identity::save`]; the public
    /// half is derived from it. Refuses a file group or others may access.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        let meta = fs::metadata(path).map_err(|source| AuthError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AuthError::TooOpen {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = fs::read_to_string(path).map_err(|source| AuthError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |problem| AuthError::BadKey {
            what: path.display().to_string(),
            problem,
        };
        let line = text.trim();
        let rest = line
            .strip_prefix(PRIVATE_LABEL)
            .filter(|r| r.starts_with(char::is_whitespace))
            .ok_or(if line.is_empty() {
                KeyProblem::Empty
            } else {
                KeyProblem::Label {
                    expected: PRIVATE_LABEL,
                }
            })
            .map_err(bad)?;
        let private = decode_key(rest.trim()).map_err(bad)?;
        let public = public_of(&private).map_err(AuthError::Generate)?;
        Ok(Self {
            private,
            public: PublicKey(public),
        })
    }
}

/// `FILE.pub` beside a private key file.
pub fn public_path(private: &Path) -> PathBuf {
    let mut name = private.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// The default identity file: `$XDG_CONFIG_HOME/pfs/identity`, else
/// `~/.config/pfs/identity`.
pub fn default_identity_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("pfs").join("identity"))
}

pub(crate) fn decode_key(text: &str) -> Result<[u8; KEY_LEN], KeyProblem> {
    let bytes = B64.decode(text.trim()).map_err(|_| KeyProblem::Base64)?;
    bytes
        .as_slice()
        .try_into()
        .map_err(|_| KeyProblem::Length(bytes.len()))
}

/// The x25519 public key of `private`, found by running an XX handshake in
/// memory with a throwaway responder and asking the responder whose static
/// key it saw: the DH stays `snow`'s, none is written here.
fn public_of(private: &[u8; KEY_LEN]) -> Result<[u8; KEY_LEN], snow::Error> {
    const XX: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
    let mut initiator = snow::Builder::new(XX.parse()?)
        .local_private_key(private)
        .build_initiator()?;
    let other = snow::Builder::new(XX.parse()?).generate_keypair()?;
    let mut responder = snow::Builder::new(XX.parse()?)
        .local_private_key(&other.private)
        .build_responder()?;
    let (mut msg, mut payload) = ([0u8; 256], [0u8; 256]);
    // -> e;  <- e, ee, s, es;  -> s, se
    let n = initiator.write_message(&[], &mut msg)?;
    responder.read_message(&msg[..n], &mut payload)?;
    let n = responder.write_message(&[], &mut msg)?;
    initiator.read_message(&msg[..n], &mut payload)?;
    let n = initiator.write_message(&[], &mut msg)?;
    responder.read_message(&msg[..n], &mut payload)?;
    let mut out = [0u8; KEY_LEN];
    match responder.get_remote_static() {
        Some(key) if key.len() == KEY_LEN => out.copy_from_slice(key),
        _ => return Err(snow::Error::Input),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_half_is_derived_back_from_the_private_half() {
        let id = Identity::generate().unwrap();
        assert_eq!(public_of(id.private_bytes()).unwrap(), id.public().0);
    }

    #[test]
    fn public_lines_round_trip_and_bad_ones_say_why() {
        let id = Identity::generate().unwrap();
        let line = id.public().line("alice@host");
        let (key, comment) = PublicKey::parse_line(&line).unwrap();
        assert_eq!((key, comment), (id.public(), "alice@host"));
        assert_eq!(PublicKey::parse_line(&id.public().to_string()).unwrap().1, "");
        assert_eq!(PublicKey::parse_line("  ").unwrap_err(), KeyProblem::Empty);
        assert_eq!(
            PublicKey::parse_line("ssh-ed25519 AAAA").unwrap_err(),
            KeyProblem::Label {
                expected: PUBLIC_LABEL
            }
        );
        assert_eq!(
            PublicKey::parse_line("pfs-x25519 !!!").unwrap_err(),
            KeyProblem::Base64
        );
        assert_eq!(
            PublicKey::parse_line("pfs-x25519 AAAA").unwrap_err(),
            KeyProblem::Length(3)
        );
        assert!(id.public().fingerprint().starts_with("blake3:"));
        assert_eq!(id.public().fingerprint().len(), "blake3:".len() + 32);
    }
}
