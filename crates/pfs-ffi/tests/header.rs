//! The committed C header is cbindgen's output for this crate, byte for
//! byte: a change to the C interface that forgets the header fails here.
//! `PFS_BLESS=1 cargo test -p pfs-ffi --test header` rewrites it.

use std::path::Path;

#[test]
fn the_committed_header_is_what_cbindgen_generates() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = crate_dir.join("include/packetfs.h");
    if std::env::var_os("PFS_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/packetfs.h differs from cbindgen's output; run PFS_BLESS=1 cargo test -p pfs-ffi --test header \
         and commit the header"
    );
}
