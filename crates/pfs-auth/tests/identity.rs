//! Identity files as `pfs keygen` writes them: modes, no silent overwrite,
//! loading back, and clear refusals of files that are unsafe or not keys.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use pfs_auth::{public_path, AuthError, Identity, KeyProblem, PublicKey};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn saved_keys_load_back_with_owner_only_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conf/pfs/identity");
    let id = Identity::generate().unwrap();
    let public = id.save(&path, "test@host", false).unwrap();
    assert_eq!(public, public_path(&path));
    assert_eq!(mode(&path), 0o600);
    assert_eq!(
        mode(path.parent().unwrap()),
        0o700,
        "a created key directory is private too"
    );
    let line = fs::read_to_string(&public).unwrap();
    let (key, comment) = PublicKey::parse_line(&line).unwrap();
    assert_eq!((key, comment), (id.public(), "test@host"));
    let loaded = Identity::load(&path).unwrap();
    assert_eq!(loaded.public(), id.public());
    assert_eq!(loaded.private_bytes(), id.private_bytes());
    // No temporary file is left beside the key.
    let names: Vec<_> = fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn an_existing_key_is_replaced_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("identity");
    let first = Identity::generate().unwrap();
    first.save(&path, "", false).unwrap();
    let second = Identity::generate().unwrap();
    match second.save(&path, "", false) {
        Err(AuthError::Exists { path: p }) => assert_eq!(p, path),
        other => panic!("expected Exists, got {other:?}"),
    }
    assert_eq!(
        Identity::load(&path).unwrap().public(),
        first.public(),
        "the first key is untouched"
    );
    second.save(&path, "", true).unwrap();
    assert_eq!(Identity::load(&path).unwrap().public(), second.public());
}

#[test]
fn unsafe_or_foreign_files_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("identity");
    Identity::generate().unwrap().save(&path, "", false).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    match Identity::load(&path) {
        Err(e @ AuthError::TooOpen { mode: 0o644, .. }) => {
            assert!(e.to_string().contains("chmod 600"), "{e}")
        }
        other => panic!("expected TooOpen, got {other:?}"),
    }

    let other = dir.path().join("not-a-key");
    for (text, problem) in [
        ("", KeyProblem::Empty),
        (
            "ssh-ed25519 AAAA\n",
            KeyProblem::Label {
                expected: pfs_auth::PRIVATE_LABEL,
            },
        ),
        ("pfs-x25519-private %%%\n", KeyProblem::Base64),
        ("pfs-x25519-private AAAA\n", KeyProblem::Length(3)),
    ] {
        fs::write(&other, text).unwrap();
        fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
        match Identity::load(&other) {
            Err(AuthError::BadKey { problem: p, .. }) => assert_eq!(p, problem, "{text:?}"),
            res => panic!("{text:?}: expected BadKey, got {res:?}"),
        }
    }
    match Identity::load(&dir.path().join("missing")) {
        Err(AuthError::Io { what: "reading", .. }) => {}
        other => panic!("expected an I/O error, got {other:?}"),
    }
}
