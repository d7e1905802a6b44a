//! `pfs keygen`: the key pair lands where asked with owner-only access, the
//! printed line is the public file's, and an existing key is never replaced
//! silently.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

mod common;
use common::run;

fn pfs(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfs"));
    cmd.args(args);
    cmd
}

#[test]
fn keygen_writes_a_private_and_a_public_file_and_prints_the_public_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("keys/id");
    let key_s = key.to_str().unwrap();
    let out = run(pfs(&["keygen", "-f", key_s, "-C", "a@b"]));
    out.expect_code(0, "pfs keygen");
    let public = std::fs::read_to_string(dir.path().join("keys/id.pub")).unwrap();
    assert_eq!(out.stdout, public, "stdout is the public line");
    assert!(
        public.starts_with("pfs-x25519 ") && public.trim_end().ends_with(" a@b"),
        "{public}"
    );
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(out.stderr.contains("fingerprint: blake3:"), "{}", out.stderr);

    // A second run does not replace it …
    let again = run(pfs(&["keygen", "-f", key_s]));
    again.expect_code(1, "pfs keygen over an existing key");
    assert!(
        again.stderr.contains("already exists (use --force"),
        "{}",
        again.stderr
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keys/id.pub")).unwrap(),
        public
    );

    // … unless asked; --json names the files and the new key.
    let forced = run(pfs(&["keygen", "-f", key_s, "--force", "--json"]));
    forced.expect_code(0, "pfs keygen --force");
    let v: serde_json::Value = serde_json::from_str(&forced.stdout).unwrap();
    let new_public = std::fs::read_to_string(dir.path().join("keys/id.pub")).unwrap();
    assert_eq!(v["public_key"].as_str().unwrap(), new_public.trim_end());
    assert_ne!(new_public, public);
    assert!(v["fingerprint"].as_str().unwrap().starts_with("blake3:"));
}

/// The README's recipe, `echo "dir=backups/laptop no-exec $(cat
/// client.pub)" >> authorized_keys`: the comment `-C` wrote is after a
/// `#`, so the line parses with the options in front and keeps them.
#[test]
fn keygen_comment_lets_the_readme_recipe_put_options_in_front() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("client");
    run(pfs(&[
        "keygen",
        "-f",
        key.to_str().unwrap(),
        "-C",
        "laptop no-exec",
    ]))
    .expect_code(0, "pfs keygen -C");
    let public = std::fs::read_to_string(dir.path().join("client.pub")).unwrap();
    assert!(public.trim_end().ends_with(" # laptop no-exec"), "{public}");
    let (key_of_pub, comment) = pfs_auth::PublicKey::parse_line(&public).unwrap();
    assert_eq!(comment, "laptop no-exec");

    let line = format!("dir=backups/laptop no-exec {}", public.trim_end());
    let keys =
        pfs_auth::AuthorizedKeys::parse(&line).unwrap_or_else(|(n, p)| panic!("line {n}: {p}: {line}"));
    let rights = keys.rights(&key_of_pub).expect("the key is listed");
    assert_eq!(rights.dir, std::path::PathBuf::from("backups/laptop"));
    assert!(!rights.exec && rights.files);
    // Alone, the line's comment holds an option-shaped word ("no-exec"):
    // nothing after `#` is read as an option, and rather than let the
    // reader believe it applies, the parser refuses the line.
    let bare = pfs_auth::AuthorizedKeys::parse(public.trim_end());
    assert!(
        bare.is_err(),
        "an option-shaped word in the comment is refused, not silently dropped"
    );
}
