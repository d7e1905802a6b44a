use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, FileExt, MetadataExt};

use super::*;

fn rp(s: &str) -> RelPath {
    RelPath::parse(s.as_bytes()).unwrap()
}

/// A destination, an outside directory, and the destination opened both
/// with openat2 (where the kernel has it) and with the fallback.
struct Fixture {
    _t: tempfile::TempDir,
    dest: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("dest");
        let outside = t.path().join("outside");
        fs::create_dir(&dest).unwrap();
        fs::create_dir(&outside).unwrap();
        Self { _t: t, dest, outside }
    }

    fn roots(&self) -> Vec<DestRoot> {
        let a = DestRoot::open(&self.dest).unwrap();
        eprintln!("openat2 available: {}", a.uses_openat2());
        let mut b = DestRoot::open(&self.dest).unwrap();
        b.force_fallback();
        vec![a, b]
    }

    fn outside_is_empty(&self) -> bool {
        fs::read_dir(&self.outside).unwrap().next().is_none()
    }
}

fn is_not_a_dir(r: Result<impl std::fmt::Debug, FilesError>) -> bool {
    matches!(
        r,
        Err(FilesError::Path {
            source: PathError::NotADirectory,
            ..
        })
    )
}

#[test]
fn temp_persist_mode_and_mtime() {
    let fx = Fixture::new();
    for (i, root) in fx.roots().into_iter().enumerate() {
        let dir = rp(&format!("d{i}/sub"));
        root.create_dir_all(&dir, 0o750).unwrap();
        let rel = dir.join(b"file.bin").unwrap();
        let mut tmp = root.create_temp(&rel).unwrap();
        let tmp_meta = tmp.file().metadata().unwrap();
        assert_eq!(tmp_meta.mode() & 0o777, 0o600);
        tmp.file_mut().write_all(b"hello").unwrap();
        let mtime = 1_600_000_000_123_456_789i128;
        tmp.set_times_and_mode(mtime, 0o4755).unwrap();
        // Not visible under its final name before persist.
        assert!(!fx.dest.join(rel.as_path()).exists());
        tmp.persist(i == 0).unwrap();
        let path = fx.dest.join(rel.as_path());
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "setuid bit cleared");
        assert_eq!(m.mtime(), 1_600_000_000);
        assert_eq!(m.mtime_nsec(), 123_456_789);
        // Replace an existing file.
        let tmp = root.create_temp(&rel).unwrap();
        tmp.file().write_all(b"second").unwrap();
        tmp.persist(false).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        // Only the final file is left in the directory.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        // Quick check sees it.
        let (_, meta) = root.open_existing(&rel).unwrap().unwrap();
        assert_eq!(meta.len(), 6);
        assert!(root.open_existing(&dir).unwrap().is_none(), "a directory");
        assert!(root.open_existing(&rp("nope")).unwrap().is_none());
        assert!(root.open_existing(&rp("nope/deeper")).unwrap().is_none());
        // Directory mode/mtime.
        root.set_dir_times_and_mode(&dir, mtime, 0o700).unwrap();
        let m = fs::metadata(fx.dest.join(dir.as_path())).unwrap();
        assert_eq!((m.mode() & 0o777, m.mtime()), (0o700, 1_600_000_000));
    }
}

/// Every temporary file is 0600 until its final mode, even a world-readable
/// file's (security.md): a partial one may stay in `.pfs/tmp` for days.
#[test]
fn temp_files_are_owner_only_until_their_final_mode() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let mut cache = StatCache::default();
    let tmp = root.create_temp_cached(&mut cache, &rp("public.txt")).unwrap();
    assert_eq!(tmp.file().metadata().unwrap().mode() & 0o7777, TEMP_MODE);
    tmp.set_times_and_mode(0, 0o644).unwrap();
    tmp.persist(false).unwrap();
    let m = fs::metadata(fx.dest.join("public.txt")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o644);
}

#[test]
fn dropped_temp_is_removed() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let tmp = root.create_temp(&rp("f")).unwrap();
    tmp.file().write_all(b"partial").unwrap();
    drop(tmp);
    assert!(fs::read_dir(fx.dest.join(TEMP_DIR)).unwrap().next().is_none());
    assert!(!fx.dest.join("f").exists());
}

#[test]
fn planted_symlink_is_never_followed() {
    let fx = Fixture::new();
    symlink(&fx.outside, fx.dest.join("evil")).unwrap();
    fs::create_dir(fx.dest.join("real")).unwrap();
    symlink(&fx.outside, fx.dest.join("real/evil2")).unwrap();
    for root in fx.roots() {
        assert!(is_not_a_dir(root.create_temp(&rp("evil/x"))));
        assert!(is_not_a_dir(root.create_temp(&rp("real/evil2/x"))));
        assert!(is_not_a_dir(root.create_dir_all(&rp("evil/sub"), 0o755)));
        assert!(is_not_a_dir(root.create_dir_all(&rp("real/evil2"), 0o755)));
        assert!(is_not_a_dir(root.create_symlink(&rp("evil/l"), b"x", 0)));
        assert!(is_not_a_dir(root.set_dir_times_and_mode(&rp("evil"), 0, 0o777)));
        assert!(root.open_existing(&rp("evil")).unwrap().is_none());
        assert!(root.open_existing(&rp("evil/x")).unwrap().is_none());
        assert!(fx.outside_is_empty());
    }
    // A file written at the link's own path replaces the link, not its target.
    let root = DestRoot::open(&fx.dest).unwrap();
    let tmp = root.create_temp(&rp("evil")).unwrap();
    tmp.file().write_all(b"mine").unwrap();
    tmp.persist(false).unwrap();
    assert!(fs::symlink_metadata(fx.dest.join("evil")).unwrap().is_file());
    assert!(fx.outside_is_empty());
    // Paths with `..` cannot even be expressed.
    assert!(RelPath::parse(b"../outside/x").is_err());
    assert!(RelPath::parse(b"real/../../outside/x").is_err());
}

#[test]
fn root_itself_may_be_a_symlink() {
    let fx = Fixture::new();
    let link = fx.outside.parent().unwrap().join("dest-link");
    symlink(&fx.dest, &link).unwrap();
    let root = DestRoot::open(&link).unwrap();
    root.create_dir_all(&rp("a"), 0o755).unwrap();
    assert!(fx.dest.join("a").is_dir());
}

#[test]
fn symlinks_are_stored_verbatim_and_never_written_through() {
    let fx = Fixture::new();
    let long = vec![b'n'; 300];
    let outside = fx.outside.as_os_str().as_encoded_bytes().to_vec();
    for (i, root) in fx.roots().into_iter().enumerate() {
        let d = format!("d{i}");
        root.create_dir_all(&rp(&format!("{d}/a/b")), 0o755).unwrap();
        let targets: [(&str, &[u8]); 6] = [
            ("a/b/rel", b"../x"),
            ("a/abs", b"/etc/passwd"),
            ("a/up", b"../../../../x"),
            ("a/mixed", b"sub/../../x"),
            ("long", &long),
            ("a/b/out", &outside),
        ];
        for (j, (link, target)) in targets.into_iter().enumerate() {
            let link = rp(&format!("{d}/{link}"));
            let mtime = 1_600_000_000_000_000_000 + j as i128 * 1_000_000_007;
            assert_eq!(
                root.create_symlink(&link, target, mtime).unwrap(),
                Symlinked::Made
            );
            let at = fx.dest.join(link.as_path());
            assert_eq!(fs::read_link(&at).unwrap().as_os_str().as_encoded_bytes(), target);
            let m = fs::symlink_metadata(&at).unwrap();
            assert_eq!(
                i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                mtime
            );
            // The same link again is kept: same inode; a new mtime is set on it.
            assert_eq!(
                root.create_symlink(&link, target, mtime + 1).unwrap(),
                Symlinked::Kept
            );
            let again = fs::symlink_metadata(&at).unwrap();
            assert_eq!((again.ino(), again.mtime_nsec()), (m.ino(), m.mtime_nsec() + 1));
        }
        // Another target replaces the link.
        let l = rp(&format!("{d}/a/b/rel"));
        assert_eq!(root.create_symlink(&l, b"other", 0).unwrap(), Symlinked::Made);
        assert_eq!(
            fs::read_link(fx.dest.join(l.as_path())).unwrap(),
            Path::new("other")
        );
        // A link to a directory outside is never written through.
        let out = rp(&format!("{d}/a/b/out"));
        assert!(is_not_a_dir(root.create_temp(&out.join(b"x").unwrap())));
        assert!(is_not_a_dir(
            root.create_dir_all(&out.join(b"sub").unwrap(), 0o755)
        ));
        assert!(is_not_a_dir(root.create_symlink(
            &out.join(b"l").unwrap(),
            b"x",
            0
        )));
        assert!(fx.outside_is_empty());
        // What symlinkat itself refuses.
        for (target, want) in [(&b""[..], PathError::Empty), (b"x\0", PathError::Nul)] {
            let e = root
                .create_symlink(&rp(&format!("{d}/bad")), target, 0)
                .unwrap_err();
            assert!(
                matches!(e, FilesError::Path { source, .. } if source == want),
                "{e}"
            );
        }
        let e = root
            .create_symlink(&rp(&format!("{d}/bad")), &[b'a'; 4096], 0)
            .unwrap_err();
        assert!(
            matches!(
                e,
                FilesError::Path {
                    source: PathError::TooLong,
                    ..
                }
            ),
            "{e}"
        );
        assert!(fs::symlink_metadata(fx.dest.join(format!("{d}/bad"))).is_err());
    }
}

#[test]
fn top_mtime_is_set_on_the_root_or_a_directory() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    root.create_dir_all(&rp("sub"), 0o755).unwrap();
    let t = 1_500_000_000_123_456_789;
    root.set_top_mtime(None, t).unwrap();
    root.set_top_mtime(Some(&rp("sub")), t + 1).unwrap();
    let ns = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
    };
    assert_eq!(ns(&fx.dest), t);
    assert_eq!(ns(&fx.dest.join("sub")), t + 1);
    // Through a symlink: refused, nothing outside touched.
    symlink(&fx.outside, fx.dest.join("via")).unwrap();
    let before = ns(&fx.outside);
    assert!(root.set_top_mtime(Some(&rp("via")), t).is_err());
    assert_eq!(ns(&fx.outside), before);
}

#[test]
fn stale_temps_are_removed_and_user_files_never() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    root.create_dir_all(&rp("a/b"), 0o755).unwrap();
    // Files of the user's named like the temporaries of older versions stay.
    for f in [".pfs-tmp.x.1", "a/.pfs-tmp.y.2"] {
        fs::write(fx.dest.join(f), b"mine").unwrap();
    }
    // Temps created through the API and leaked (as by a killed process).
    std::mem::forget(root.create_temp(&rp("a/b/file")).unwrap());
    std::mem::forget(root.create_temp(&rp("top")).unwrap());
    assert_eq!(fs::read_dir(fx.dest.join(TEMP_DIR)).unwrap().count(), 2);
    assert_eq!(
        fs::read_dir(fx.dest.join("a/b")).unwrap().count(),
        0,
        "nothing beside the target"
    );
    assert_eq!(root.remove_stale_temps().unwrap(), 2);
    assert!(fx.dest.join(".pfs-tmp.x.1").exists());
    assert!(fx.dest.join("a/.pfs-tmp.y.2").exists());
    assert_eq!(root.remove_stale_temps().unwrap(), 0);
    let mode = fs::metadata(fx.dest.join(STATE_DIR)).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn reserved_paths() {
    assert!(rp(".pfs").is_reserved());
    assert!(rp(".pfs/tmp/x").is_reserved());
    // Anywhere: another key's `dir=` destination may be beneath this one.
    assert!(rp("a/.pfs").is_reserved());
    assert!(rp("tenants/a/.pfs/tmp").is_reserved());
    assert!(!rp(".pfsx").is_reserved());
    assert!(!rp("a/x.pfs/b").is_reserved());
}

#[test]
fn long_names_get_short_temps() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let name = "n".repeat(255);
    let tmp = root.create_temp(&rp(&name)).unwrap();
    assert_eq!(tmp.tmp_name.len(), 16);
    tmp.persist(false).unwrap();
    assert!(fx.dest.join(&name).is_file());
}

#[test]
fn missing_destination() {
    let e = DestRoot::open("/nonexistent/pfs-dest").unwrap_err();
    assert!(matches!(e, FilesError::Io { .. }), "{e}");
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let e = root.create_temp(&rp("no/such/dir/f")).unwrap_err();
    assert!(matches!(e, FilesError::Io { .. }), "{e}");
}

#[test]
fn open_existing_ignores_special_files() {
    let fx = Fixture::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fx.dest.join("fifo"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    symlink(fx.outside.join("f"), fx.dest.join("link")).unwrap();
    fs::write(fx.outside.join("f"), b"outside").unwrap();
    for root in fx.roots() {
        assert!(root.open_existing(&rp("fifo")).unwrap().is_none());
        assert!(root.open_existing(&rp("link")).unwrap().is_none());
    }
}

#[test]
fn stat_and_set_by_name_stay_beneath_and_refuse_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    fs::create_dir_all(fx.dest.join("d")).unwrap();
    fs::write(fx.dest.join("d/a"), b"aaaa").unwrap();
    fs::write(fx.dest.join("d/b"), b"bb").unwrap();
    fs::write(fx.outside.join("secret"), b"s").unwrap();
    symlink(fx.outside.join("secret"), fx.dest.join("d/link")).unwrap();
    symlink(&fx.outside, fx.dest.join("via")).unwrap();
    for root in fx.roots() {
        let mut cache = StatCache::default();
        let a = root.stat_existing(&mut cache, &rp("d/a")).unwrap().expect("d/a");
        assert_eq!(a, FileStat::of(&fs::metadata(fx.dest.join("d/a")).unwrap()));
        // Same directory: the cached parent serves the next name.
        assert_eq!(
            root.stat_existing(&mut cache, &rp("d/b")).unwrap().unwrap().size,
            2
        );
        // Symlinks, as the file or on the way, and missing names are not found.
        for p in ["d/link", "via/secret", "d/missing", "nodir/x"] {
            assert_eq!(root.stat_existing(&mut cache, &rp(p)).unwrap(), None, "{p}");
        }
        // mtime only (mode unchanged), then a mode change too.
        let t = 1_600_000_000_123_456_789i128;
        let now = root
            .set_existing_times_and_mode(&mut cache, &rp("d/a"), &a, t, a.mode)
            .unwrap()
            .expect("still there");
        assert_eq!((now.mtime_ns, now.mode), (t, a.mode));
        let now = root
            .set_existing_times_and_mode(&mut cache, &rp("d/a"), &now, t + 1, 0o600)
            .unwrap()
            .expect("still there");
        assert_eq!((now.mtime_ns, now.mode), (t + 1, 0o600));
        fs::set_permissions(fx.dest.join("d/a"), fs::Permissions::from_mode(0o644)).unwrap();
        // A symlink swapped in after the stat: nothing outside changes.
        let before = fs::metadata(fx.outside.join("secret")).unwrap();
        let swapped = root.stat_existing(&mut cache, &rp("d/b")).unwrap().unwrap();
        fs::remove_file(fx.dest.join("d/b")).unwrap();
        symlink(fx.outside.join("secret"), fx.dest.join("d/b")).unwrap();
        let r = root.set_existing_times_and_mode(&mut cache, &rp("d/b"), &swapped, t, 0o777);
        assert!(matches!(r, Ok(None) | Err(_)), "{r:?}");
        let after = fs::metadata(fx.outside.join("secret")).unwrap();
        assert_eq!((after.mode(), after.mtime()), (before.mode(), before.mtime()));
        fs::remove_file(fx.dest.join("d/b")).unwrap();
        fs::write(fx.dest.join("d/b"), b"bb").unwrap();
    }
    assert_eq!(fs::read_dir(&fx.outside).unwrap().count(), 1);
}

#[test]
fn directory_modes_only_narrow() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    for (i, root) in fx.roots().into_iter().enumerate() {
        // An existing directory of the receiver's, 0700: a peer asking
        // for 0777 does not widen it; asking for less narrows it.
        let mine = rp(&format!("mine{i}"));
        let path = fx.dest.join(mine.as_path());
        fs::create_dir(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        root.create_dir_all(&mine, 0o777).unwrap();
        root.set_dir_times_and_mode(&mine, 0, 0o777).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o700, "not widened");
        root.set_dir_times_and_mode(&mine, 0, 0o500).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().mode() & 0o7777,
            0o500,
            "narrowed as asked"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        // A new directory gets the peer's mode without group/other write.
        let new = rp(&format!("new{i}/sub"));
        root.create_dir_all(&new, 0o777).unwrap();
        let m = fs::metadata(fx.dest.join(new.as_path())).unwrap().mode() & 0o022;
        assert_eq!(m, 0, "created without group/other write");
        root.set_dir_times_and_mode(&new, 0, 0o777).unwrap();
        let m = fs::metadata(fx.dest.join(new.as_path())).unwrap().mode() & 0o7777;
        assert_eq!(m & 0o022, 0, "never wider than 0755");
        assert_eq!(m & 0o700, 0o700);
    }
}

#[test]
fn parked_temps_hold_no_descriptor_and_reopen() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let rel = rp("p");
    let tmp = root.create_temp(&rel).unwrap();
    tmp.file().write_all(b"first ").unwrap();
    let parked = tmp.park().unwrap();
    let tmp = root.reopen_temp(parked).unwrap();
    tmp.file().write_all_at(b"second", 6).unwrap();
    tmp.persist(false).unwrap();
    assert_eq!(fs::read(fx.dest.join("p")).unwrap(), b"first second");
    // A parked file replaced meanwhile is not the parked one: refused.
    let tmp = root.create_temp(&rel).unwrap();
    let parked = tmp.park().unwrap();
    let names: Vec<_> = fs::read_dir(fx.dest.join(TEMP_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(names.len(), 1);
    // Written beside it and renamed over it: another inode for sure.
    let other = fx.dest.join("other");
    fs::write(&other, b"someone else's").unwrap();
    fs::rename(&other, &names[0]).unwrap();
    assert!(root.reopen_temp(parked).is_err());
    // remove_parked leaves a file that is not the parked one.
    let tmp = root.create_temp(&rp("q")).unwrap();
    let parked = tmp.park().unwrap();
    root.remove_parked(&parked);
    fs::remove_file(&names[0]).unwrap();
    assert_eq!(fs::read_dir(fx.dest.join(TEMP_DIR)).unwrap().count(), 0);
    let left: Vec<_> = fs::read_dir(&fx.dest)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "only p and .pfs are left: {left:?}");
}

/// Writes go out in pieces of at most 512 KiB and at most `IOV_MAX`
/// slices, whatever the slices: one larger than a piece, many tiny ones.
#[test]
fn vectored_writes_land_every_byte_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let f = fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("w"))
        .unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let tiny: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| vec![(i % 7) as u8; 1 + (i % 3) as usize])
        .collect();
    let mut want = vec![0u8; 5];
    want.extend_from_slice(&big);
    for t in &tiny {
        want.extend_from_slice(t);
    }
    want.extend_from_slice(&big[..700_000]);
    let mut slices = vec![std::io::IoSlice::new(&big)];
    slices.extend(tiny.iter().map(|t| std::io::IoSlice::new(t)));
    slices.push(std::io::IoSlice::new(&big[..700_000]));
    super::landing::write_all_vectored_at(&f, &mut slices, 5).unwrap();
    assert_eq!(fs::read(dir.path().join("w")).unwrap(), want);
}

/// `make_dir_all` says whether it created the directory itself: a landing
/// skips the existence check of files in directories it made.
#[test]
fn make_dir_all_says_when_it_made_the_directory() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    assert!(
        root.make_dir_all(&rp("n"), 0o755).unwrap(),
        "parent exists, last made"
    );
    assert!(!root.make_dir_all(&rp("n"), 0o755).unwrap(), "already there");
    assert!(
        root.make_dir_all(&rp("x/y/z"), 0o755).unwrap(),
        "made with its parents"
    );
    assert!(!root.make_dir_all(&rp("x/y"), 0o755).unwrap());
    fs::create_dir(fx.dest.join("x/y/old")).unwrap();
    assert!(
        !root.make_dir_all(&rp("x/y/old"), 0o755).unwrap(),
        "made by someone else"
    );
}

/// A tree landed into a new directory: subdirectories made in the
/// directory held open (one `mkdirat` each), one made by someone else
/// meanwhile taken as it is; each file gets exactly its mode, whether the
/// umask let it through at creation or not; each directory its mtime, and
/// its mode narrowed where it asks for less than it was made with.
#[test]
fn a_landed_tree_gets_exact_file_modes_and_narrowed_directories() {
    let fx = Fixture::new();
    let root = DestRoot::open(&fx.dest).unwrap();
    let mut landing = Landing::new(&root, None, false);
    let dirs = [
        ("t", 0o775),
        ("t/a", 0o755),
        ("t/a/b", 0o700),
        ("t/a/ro", 0o555),
        ("t/a/x", 0o750),
    ];
    for (d, mode) in dirs {
        if d == "t/a/x" {
            fs::create_dir(fx.dest.join(d)).unwrap();
        }
        landing.make_dir(&rp(d), mode).unwrap();
    }
    let files = [
        ("t/f644", 0o644),
        ("t/a/f664", 0o664),
        ("t/a/b/f600", 0o600),
        ("t/a/ro/f444", 0o444),
        ("t/a/x/f755", 0o755),
        ("t/a/f4755", 0o4755),
    ];
    let mtime = 1_600_000_000_123_456_789i128;
    for (no, (f, mode)) in files.iter().enumerate() {
        let rel = rp(f);
        let content = f.as_bytes();
        let spec = FileSpec {
            rel: &rel,
            size: content.len() as u64,
            mtime_ns: mtime,
            mode: *mode,
            file_hash: *blake3::hash(content).as_bytes(),
            held: false,
        };
        let no = no as u64;
        assert_eq!(landing.open_file(no, &spec).unwrap(), Placement::Rebuild);
        landing
            .write_at(no, 0, &mut [std::io::IoSlice::new(content)])
            .unwrap();
        landing.finish_file(no, &spec, spec.file_hash, None).unwrap();
    }
    for (d, mode) in dirs.iter().rev() {
        landing.set_dir_meta(&rp(d), mtime, *mode).unwrap();
    }
    for (f, mode) in files {
        let m = fs::metadata(fx.dest.join(f)).unwrap();
        assert_eq!(m.mode() & 0o7777, mode & 0o777, "{f}");
        assert_eq!(fs::read(fx.dest.join(f)).unwrap(), f.as_bytes());
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 123_456_789), "{f}");
    }
    // Made here: the peer's mode without group/other write; narrowed to
    // what the peer asks where that is less. Made by someone else: kept.
    let want = [("t", 0o755), ("t/a", 0o755), ("t/a/b", 0o700), ("t/a/ro", 0o555)];
    for (d, mode) in want {
        let m = fs::metadata(fx.dest.join(d)).unwrap();
        assert_eq!(m.mode() & 0o7777, mode, "{d}");
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 123_456_789), "{d}");
    }
    assert_eq!(fs::read_dir(fx.dest.join(TEMP_DIR)).unwrap().count(), 0);
}
