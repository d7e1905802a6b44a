//! `pfs blob create|info|verify|rm|list`.

use anyhow::Context;

use crate::args::BlobCommand;
use crate::exit;

use super::open_blob;

pub fn run(cmd: BlobCommand) -> anyhow::Result<i32> {
    match cmd {
        BlobCommand::Create { mut blob, json } => {
            if blob.blob_name.is_none() {
                anyhow::bail!(
                    "`pfs blob create` needs --blob-name (anonymous blobs live only as long as a process)"
                );
            }
            // A blob created on purpose is kept unless the user asked otherwise.
            blob.blob_keep = true;
            let opened = open_blob(&blob, json)?;
            let b = &opened.blob;
            if json {
                let v = serde_json::json!({
                    "name": b.name(),
                    "path": b.path(),
                    "size": b.len(),
                    "seed": b.seed(),
                    "fingerprint": b.fingerprint().root_hex(),
                    "region_size": b.fingerprint().region_size,
                    "backing": b.backing(),
                    "setup": opened.setup,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{}", opened.describe());
                if let Some(p) = b.path() {
                    println!("path {}", p.display());
                }
            }
            Ok(exit::OK)
        }
        BlobCommand::Info { name, huge_dir, json } => {
            let meta =
                pfs_blob::info(&name, huge_dir.as_deref()).with_context(|| format!("blob {name:?}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&meta)?);
            } else {
                println!("name         {}", meta.name);
                println!("path         {}", meta.path.display());
                println!("size         {} bytes", meta.size);
                println!("fill         {}", meta.fill);
                println!("fingerprint  {} (region {} B)", meta.root_hex, meta.region_size);
                println!("backing      {} (page {} B)", meta.backing, meta.page_size);
                println!("created      {} (unix)", meta.created_unix);
            }
            Ok(exit::OK)
        }
        BlobCommand::Verify {
            name,
            huge_dir,
            threads,
            json,
        } => {
            let r = pfs_blob::verify(&name, huge_dir.as_deref(), threads)
                .with_context(|| format!("blob {name:?}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else if r.ok {
                println!(
                    "{name}: OK (fingerprint {}, {:.3} s)",
                    r.actual_root_hex, r.elapsed_s
                );
            } else {
                println!(
                    "{name}: DIFFERS from its record (recorded {}, actual {})",
                    r.stored_root_hex, r.actual_root_hex
                );
                for range in &r.differing {
                    println!("  bytes {}..{} differ", range.start, range.end);
                }
            }
            Ok(if r.ok { exit::OK } else { exit::INTEGRITY })
        }
        BlobCommand::Rm { name, huge_dir } => {
            pfs_blob::remove(&name, huge_dir.as_deref()).with_context(|| format!("blob {name:?}"))?;
            println!("removed {name} (processes that still map it keep their view until they exit)");
            Ok(exit::OK)
        }
        BlobCommand::List { huge_dir, json } => {
            let list = pfs_blob::list(huge_dir.as_deref())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no named blobs");
            } else {
                println!(
                    "{:<24} {:>14} {:<14} {:<10} {:<16}",
                    "NAME", "SIZE", "FILL", "BACKING", "FINGERPRINT"
                );
                for m in list {
                    println!(
                        "{:<24} {:>14} {:<14} {:<10} {:<16}",
                        m.name,
                        m.size,
                        m.fill,
                        m.backing,
                        &m.root_hex[..16.min(m.root_hex.len())]
                    );
                }
            }
            Ok(exit::OK)
        }
    }
}
