//! `pfs keygen`: a static key pair for authenticated sessions.

use anyhow::Context;
use pfs_auth::Identity;

use crate::args::KeygenArgs;
use crate::exit;

pub fn run(args: &KeygenArgs) -> anyhow::Result<i32> {
    let path = match &args.file {
        Some(p) => p.clone(),
        None => pfs_auth::default_identity_path()
            .context("no -f FILE given and neither XDG_CONFIG_HOME nor HOME is set")?,
    };
    let id = Identity::generate()?;
    let public_path = id.save(&path, &args.comment, args.force)?;
    let key = id.public();
    let line = key.line(&args.comment);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "private_key_file": path,
                "public_key_file": public_path,
                "public_key": line,
                "fingerprint": key.fingerprint(),
            })
        );
    } else {
        eprintln!("private key: {} (mode 0600)", path.display());
        eprintln!("public key:  {}", public_path.display());
        eprintln!("fingerprint: {}", key.fingerprint());
        println!("{line}");
    }
    Ok(exit::OK)
}
