use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::*;

fn rels(scan: &Scan) -> Vec<String> {
    scan.entries.iter().map(|e| e.rel.to_string()).collect()
}

fn ex(patterns: &[&str]) -> Excludes {
    Excludes::new(&patterns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

fn touch(p: &Path, content: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

#[test]
fn order_names_and_kinds() {
    let t = tempfile::tempdir().unwrap();
    let top = t.path().join("top");
    touch(&top.join("b.txt"), b"bb");
    touch(&top.join("a/x"), b"x");
    touch(&top.join("a.b"), b"");
    touch(&top.join("a/y/z"), b"zzz");
    fs::create_dir(top.join("empty")).unwrap();
    let s = scan(std::slice::from_ref(&top), &Excludes::none()).unwrap();
    assert_eq!(
        rels(&s),
        [
            "top",
            "top/a",
            "top/a/x",
            "top/a/y",
            "top/a/y/z",
            "top/a.b",
            "top/b.txt",
            "top/empty"
        ]
    );
    assert!(s.entries.windows(2).all(|w| w[0].rel < w[1].rel));
    assert!(s.skipped.is_empty());
    let z = &s.entries[4];
    assert_eq!(z.kind, WalkKind::File { size: 3 });
    assert_eq!(z.abs, top.join("a/y/z"));
    assert!(z.abs.is_absolute());
    let meta = fs::metadata(&z.abs).unwrap();
    assert_eq!(z.ino, std::os::unix::fs::MetadataExt::ino(&meta));
    assert_eq!(z.mode, std::os::unix::fs::MetadataExt::mode(&meta) & 0o7777);
    assert_eq!(s.entries[0].kind, WalkKind::Dir);
}

#[test]
fn deep_tree() {
    let t = tempfile::tempdir().unwrap();
    let mut p = t.path().join("deep");
    for i in 0..60 {
        p = p.join(format!("d{i}"));
    }
    touch(&p.join("leaf"), b"leaf");
    let s = scan(&[t.path().join("deep")], &Excludes::none()).unwrap();
    assert_eq!(s.entries.len(), 62);
    assert_eq!(s.entries.last().unwrap().rel.depth(), 62);
    assert!(s.entries.windows(2).all(|w| w[0].rel < w[1].rel));
}

#[test]
fn unicode_and_non_utf8_names_round_trip() {
    let t = tempfile::tempdir().unwrap();
    let top = t.path().join("top");
    let names: [&[u8]; 4] = [
        "café".as_bytes(),
        "日本語.txt".as_bytes(),
        b"bad\xff\xfename",
        "e\u{301}".as_bytes(),
    ];
    for n in names {
        touch(&top.join(OsStr::from_bytes(n)), n);
    }
    let s = scan(&[top], &Excludes::none()).unwrap();
    for n in names {
        let mut want = b"top/".to_vec();
        want.extend_from_slice(n);
        let e = s
            .entries
            .iter()
            .find(|e| e.rel.as_bytes() == want)
            .unwrap_or_else(|| panic!("missing {:?}", String::from_utf8_lossy(n)));
        assert_eq!(fs::read(&e.abs).unwrap(), n);
    }
}

#[test]
fn excludes() {
    let t = tempfile::tempdir().unwrap();
    let top = t.path().join("top");
    for f in [
        "keep.txt",
        "x.log",
        "sub/y.log",
        "sub/keep",
        "build/out",
        "sub/build/kept-not-anchored",
        "cache/in-dir",
        "sub/cache",
        "a/b/c/secret",
        "c/secret",
    ] {
        touch(&top.join(f), b"");
    }
    let s = scan(&[top], &ex(&["*.log", "/top/build", "cache/", "b/c/secret"])).unwrap();
    assert_eq!(
        rels(&s),
        [
            "top",
            "top/a",
            "top/a/b",
            "top/a/b/c",
            "top/c",
            "top/c/secret",
            "top/keep.txt",
            "top/sub",
            "top/sub/build",
            "top/sub/build/kept-not-anchored",
            "top/sub/cache",
            "top/sub/keep",
        ]
    );
    // `*` does not cross `/`; `**` does.
    let e = ex(&["top/*.txt"]);
    let rp = |s: &str| RelPath::parse(s.as_bytes()).unwrap();
    assert!(e.is_excluded(&rp("top/a.txt"), false));
    assert!(e.is_excluded(&rp("x/top/a.txt"), false), "unanchored");
    assert!(!e.is_excluded(&rp("top/d/a.txt"), false));
    assert!(ex(&["/top/**/*.o"]).is_excluded(&rp("top/d/e/f.o"), false));
    assert!(!ex(&["/top/**/*.o"]).is_excluded(&rp("x/top/f.o"), false));
    assert!(Excludes::new(&["a[".to_string()]).is_err());
    assert!(Excludes::new(&["/".to_string()]).is_err());
}

#[test]
fn symlinks_are_reported_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("outside");
    touch(&outside.join("secret"), b"s");
    let top = t.path().join("top");
    fs::create_dir(&top).unwrap();
    symlink(&outside, top.join("to-dir")).unwrap();
    symlink("nowhere", top.join("dangling")).unwrap();
    let s = scan(&[top], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["top", "top/dangling", "top/to-dir"]);
    assert_eq!(
        s.entries[1].kind,
        WalkKind::Symlink {
            target: b"nowhere".to_vec()
        }
    );
    assert_eq!(
        s.entries[2].kind,
        WalkKind::Symlink {
            target: outside.as_os_str().as_bytes().to_vec()
        }
    );
}

#[test]
fn root_symlink_is_followed() {
    let t = tempfile::tempdir().unwrap();
    touch(&t.path().join("real/f"), b"f");
    symlink(t.path().join("real"), t.path().join("link")).unwrap();
    let s = scan(&[t.path().join("link")], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["link", "link/f"]);
}

#[test]
fn special_files_are_skipped() {
    let t = tempfile::tempdir().unwrap();
    let top = t.path().join("top");
    fs::create_dir(&top).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        top.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(top.join("sock")).unwrap();
    touch(&top.join("file"), b"");
    let s = scan(std::slice::from_ref(&top), &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["top", "top/file"]);
    let mut skipped: Vec<_> = s
        .skipped
        .iter()
        .map(|k| (k.path.clone(), k.reason.to_string()))
        .collect();
    skipped.sort();
    assert_eq!(skipped.len(), 2);
    assert_eq!(skipped[0].0, top.join("fifo"));
    assert!(matches!(
        s.skipped
            .iter()
            .find(|k| k.path.ends_with("sock"))
            .unwrap()
            .reason,
        SkipReason::Socket
    ));
    assert!(matches!(
        s.skipped
            .iter()
            .find(|k| k.path.ends_with("fifo"))
            .unwrap()
            .reason,
        SkipReason::Fifo
    ));
}

#[test]
fn roots() {
    let t = tempfile::tempdir().unwrap();
    touch(&t.path().join("one/f"), b"1");
    touch(&t.path().join("two/f"), b"2");
    touch(&t.path().join("x/f"), b"3");
    touch(&t.path().join("file.bin"), b"4");
    // A file root gives one entry; roots come out sorted by name.
    let s = scan(
        &[
            t.path().join("two"),
            t.path().join("file.bin"),
            t.path().join("one"),
        ],
        &Excludes::none(),
    )
    .unwrap();
    assert_eq!(rels(&s), ["file.bin", "one", "one/f", "two", "two/f"]);
    // Two roots with one basename.
    let e = scan(
        &[t.path().join("one/f"), t.path().join("two/f")],
        &Excludes::none(),
    );
    assert!(matches!(e, Err(FilesError::DuplicateRoot { .. })));
    // `dir/.` is the contents of `dir`, like `dir/`; `dir/sub/..` is named
    // like `dir`; `/..` has no name.
    let s = scan(&[t.path().join("x/.")], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["f"]);
    assert!(s.contents);
    fs::create_dir(t.path().join("x/sub")).unwrap();
    let s = scan(&[t.path().join("x/sub/..")], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["x", "x/f", "x/sub"]);
    assert!(!s.contents);
    assert!(matches!(
        scan(&["/..".into()], &Excludes::none()),
        Err(FilesError::UnnamedRoot { .. })
    ));
    assert!(matches!(
        scan(&[t.path().join("missing")], &Excludes::none()),
        Err(FilesError::Io { op: "stat", .. })
    ));
}

#[test]
fn trailing_slash_means_contents() {
    let t = tempfile::tempdir().unwrap();
    touch(&t.path().join("a/one"), b"1");
    touch(&t.path().join("a/sub/deep"), b"2");
    touch(&t.path().join("b/two"), b"3");
    touch(&t.path().join("b/one"), b"4");
    touch(&t.path().join("lone"), b"5");
    let slash = |p: &str| {
        let mut s = t.path().join(p).into_os_string();
        s.push("/");
        std::path::PathBuf::from(s)
    };
    // `a/` puts a's entries at the top; `a` keeps its name.
    let s = scan(&[slash("a")], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["one", "sub", "sub/deep"]);
    assert!(s.contents);
    assert_eq!(s.entries[0].abs, t.path().join("a/one"));
    let s = scan(&[t.path().join("a")], &Excludes::none()).unwrap();
    assert_eq!(rels(&s), ["a", "a/one", "a/sub", "a/sub/deep"]);
    assert!(!s.contents);
    // Several sources mix, sorted as one tree; a file root with its own name.
    let s = scan(
        &[slash("a"), t.path().join("lone"), t.path().join("b")],
        &Excludes::none(),
    )
    .unwrap();
    assert_eq!(
        rels(&s),
        ["b", "b/one", "b/two", "lone", "one", "sub", "sub/deep"]
    );
    assert!(s.entries.windows(2).all(|w| w[0].rel < w[1].rel));
    // Excludes match the names inside, anchored at the contents.
    let s = scan(&[slash("a")], &ex(&["/sub"])).unwrap();
    assert_eq!(rels(&s), ["one"]);
    // Two contents with one name would overwrite each other.
    assert!(matches!(
        scan(&[slash("a"), slash("b")], &Excludes::none()),
        Err(FilesError::DuplicateRoot { ref name }) if name == "one"
    ));
    // A file with a trailing slash is not a directory.
    assert!(matches!(
        scan(&[slash("lone")], &Excludes::none()),
        Err(FilesError::Io { op: "stat", .. })
    ));
    // An empty directory's contents are nothing, and say so.
    fs::create_dir(t.path().join("empty")).unwrap();
    let s = scan(&[slash("empty")], &Excludes::none()).unwrap();
    assert!(s.entries.is_empty() && s.contents);
}

/// A root inside another root: its directories are listed ahead under two
/// names, and each name gets its own entries (the parallel listing must
/// not hand one name's listing to the other).
#[test]
fn nested_roots_keep_their_own_names() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a");
    fs::create_dir_all(a.join("b/c")).unwrap();
    touch(&a.join("b/c/f"), b"x");
    touch(&a.join("top"), b"y");
    let s = scan(&[a.clone(), a.join("b")], &Excludes::none()).unwrap();
    assert_eq!(
        rels(&s),
        ["a", "a/b", "a/b/c", "a/b/c/f", "a/top", "b", "b/c", "b/c/f"]
    );
    assert!(s.skipped.is_empty());
}
