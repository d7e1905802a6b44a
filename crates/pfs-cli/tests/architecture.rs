//! `docs/architecture.md` kept true: what it states about the code is
//! checked against the code. The unsafe table lists exactly the files that
//! allow unsafe code, and every unsafe block there says why it is sound;
//! the CLI stays within its line budget; no protocol core holds more than
//! 20 fields of its own; library crates have typed errors; the glossary
//! names the three protocols; and no test passes silently when this
//! machine cannot run it (such tests are `#[ignore = "needs …"]`).
//!
//! Everything is read from the source tree (`CARGO_MANIFEST_DIR/../..`);
//! nothing is built or run.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every `.rs` file beneath `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// The workspace's crates: (directory name, path).
fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    out.sort();
    out
}

/// `path` relative to `crates/`, with `/` separators (`pfs-sys/src/udp.rs`).
fn under_crates(path: &Path) -> String {
    let base = root().join("crates");
    let base = base.canonicalize().unwrap_or(base);
    let p = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    p.strip_prefix(&base)
        .unwrap_or(&p)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The lines of the section that starts with heading `title` (to the next
/// heading of the same or a higher level).
fn section<'a>(doc: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = doc.lines();
    let level = lines
        .by_ref()
        .find_map(|l| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            (hashes > 0 && l[hashes..].trim() == title).then_some(hashes)
        })
        .unwrap_or_else(|| panic!("docs/architecture.md has no section {title:?}"));
    lines
        .take_while(|l| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            hashes == 0 || hashes > level
        })
        .collect()
}

fn architecture() -> String {
    read(&root().join("docs/architecture.md"))
}

/// Backticked `crate/src/….rs` paths in a line.
fn paths_in(line: &str) -> Vec<String> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("pfs") && s.contains("/src/") && s.ends_with(".rs"))
        .map(str::to_string)
        .collect()
}

/// The files of `crates/*/src` that contain `allow(unsafe_code)`.
fn unsafe_sites() -> BTreeSet<String> {
    crates()
        .iter()
        .flat_map(|(_, dir)| rust_files(&dir.join("src")))
        .filter(|p| read(p).contains("allow(unsafe_code)"))
        .map(|p| under_crates(&p))
        .collect()
}

#[test]
fn the_unsafe_table_lists_exactly_the_files_that_allow_unsafe_code() {
    let doc = architecture();
    let table: BTreeSet<String> = section(&doc, "Where unsafe lives")
        .into_iter()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(paths_in)
        .collect();
    let sites = unsafe_sites();
    let missing: Vec<_> = sites.difference(&table).collect();
    let stale: Vec<_> = table.difference(&sites).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md \"Where unsafe lives\" must list exactly the files with \
         allow(unsafe_code): missing from the table {missing:?}; listed but without unsafe {stale:?}"
    );
}

/// Whether the `unsafe {` on line `i` of `lines` has a `// SAFETY:` comment
/// above it: in the comments (and attributes) right above its line, or, for
/// a block inside a statement spanning lines, above the statement's first
/// line (the nearest line above ending a statement or block bounds it).
fn has_safety_comment(lines: &[&str], i: usize) -> bool {
    let comment_above = |at: usize| {
        lines[..at]
            .iter()
            .rev()
            .map(|l| l.trim())
            .take_while(|l| l.starts_with("//") || l.starts_with("#["))
            .any(|l| l.contains("SAFETY:"))
    };
    if lines[i].contains("SAFETY:") || comment_above(i) {
        return true;
    }
    // Walk up to the statement's first line.
    let mut at = i;
    while at > 0 {
        let prev = lines[at - 1].trim();
        if prev.is_empty() || prev.ends_with(';') || prev.ends_with('{') || prev.ends_with('}') {
            break;
        }
        if prev.starts_with("//") {
            return prev.contains("SAFETY:") || comment_above(at);
        }
        at -= 1;
    }
    comment_above(at)
}

#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    let mut bare = Vec::new();
    for site in unsafe_sites() {
        let text = read(&root().join("crates").join(&site));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("unsafe {") && !has_safety_comment(&lines, i) {
                bare.push(format!("{site}:{}", i + 1));
            }
        }
    }
    assert!(
        bare.is_empty(),
        "unsafe blocks without a `// SAFETY:` comment above: {bare:?}"
    );
}

#[test]
fn the_cli_stays_within_its_line_budget() {
    let budget = 3_000;
    let files = rust_files(&root().join("crates/pfs-cli/src"));
    let lines: usize = files.iter().map(|p| read(p).lines().count()).sum();
    assert!(
        lines <= budget,
        "crates/pfs-cli/src holds {lines} lines of Rust, over the {budget} docs/architecture.md \
         allows: argument parsing and dispatch belong there, logic in the library crates"
    );
}

/// The protocol cores (sans-I/O state machines): (crate, struct name).
/// Each is looked for by name anywhere under its crate's `src`.
const CORES: &[(&str, &str)] = &[
    ("pfs-session", "FilesSender"),
    ("pfs-session", "FilesReceiver"),
    ("pfs-session", "GramSender"),
    ("pfs-session", "GramReceiver"),
    ("pfs-session", "MountServer"),
    ("pfs-session", "Publisher"),
    ("pfs-session", "Subscriber"),
    ("pfs-transport", "Connection"),
    ("pfs-mount", "Requests"),
    ("pfs-mount", "Opening"),
    ("pfs-auth", "ClientHandshake"),
    ("pfs-auth", "ServerHandshake"),
];

/// Most fields a core holds of its own: more is a set of named parts
/// waiting to be split out (docs/architecture.md, "The sans-I/O cores").
const MAX_CORE_FIELDS: usize = 20;

/// Fields of the named struct `name` in any file under `src`, with where
/// it was found.
fn struct_fields(src: &Path, name: &str) -> Option<(String, usize)> {
    for path in rust_files(src) {
        let text = read(&path);
        if !text.contains(name) {
            continue;
        }
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut found = None;
        find_struct(&file.items, name, &mut found);
        if let Some(n) = found {
            return Some((under_crates(&path), n));
        }
    }
    None
}

fn find_struct(items: &[syn::Item], name: &str, found: &mut Option<usize>) {
    for item in items {
        match item {
            syn::Item::Struct(s) if s.ident == name => {
                *found = Some(s.fields.len());
                return;
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    find_struct(inner, name, found);
                }
            }
            _ => {}
        }
    }
}

#[test]
fn no_protocol_core_holds_more_than_20_fields_of_its_own() {
    let mut over = Vec::new();
    for &(krate, name) in CORES {
        let src = root().join("crates").join(krate).join("src");
        let (at, fields) =
            struct_fields(&src, name).unwrap_or_else(|| panic!("no struct {name} under crates/{krate}/src"));
        if fields > MAX_CORE_FIELDS {
            over.push(format!("{name} ({at}): {fields} fields"));
        }
    }
    assert!(
        over.is_empty(),
        "protocol cores over {MAX_CORE_FIELDS} fields (group state into named parts): {over:?}"
    );
}

/// Crates whose `src` is a library's (not the `pfs` binary's, not the
/// harness's, which report to a person and may say so in text).
fn library_crates() -> Vec<(String, PathBuf)> {
    crates()
        .into_iter()
        .filter(|(name, _)| name != "pfs-cli" && name != "pfs-bench")
        .collect()
}

/// Whether a type is `String` (or `std::string::String`).
fn is_string(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_empty()))
}

/// Whether an enum is an error type: it derives `thiserror::Error` or its
/// name ends in `Error`.
fn is_error_enum(e: &syn::ItemEnum) -> bool {
    e.ident.to_string().ends_with("Error")
        || e.attrs.iter().any(|a| {
            a.path().is_ident("derive")
                && a.parse_args_with(
                    syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
                )
                .is_ok_and(|paths| {
                    paths
                        .iter()
                        .any(|p| p.segments.last().is_some_and(|s| s.ident == "Error"))
                })
        })
}

fn string_variants(items: &[syn::Item], at: &str, out: &mut Vec<String>) {
    for item in items {
        match item {
            syn::Item::Enum(e) if is_error_enum(e) => {
                for v in &e.variants {
                    // A bare `String` (a message with no type): one unnamed
                    // field. Named fields say what the text is (a path, the
                    // peer's own message) and are data.
                    if let syn::Fields::Unnamed(f) = &v.fields {
                        if f.unnamed.len() == 1 && is_string(&f.unnamed[0].ty) {
                            out.push(format!("{at}: {}::{}(String)", e.ident, v.ident));
                        }
                    }
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    string_variants(inner, at, out);
                }
            }
            _ => {}
        }
    }
}

/// Whether `text` spells a `Result<…, String>` (the error type `String`).
fn string_results(text: &str) -> usize {
    let mut n = 0;
    let mut rest = text;
    while let Some(i) = rest.find("Result<") {
        rest = &rest[i + "Result<".len()..];
        // The generic arguments, to the matching `>`.
        let mut depth = 1;
        let mut end = rest.len();
        for (j, c) in rest.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = j;
                        break;
                    }
                }
                _ => {}
            }
        }
        let args = &rest[..end];
        // The last top-level argument.
        let mut depth = 0;
        let mut last = 0;
        for (j, c) in args.char_indices() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => last = j + 1,
                _ => {}
            }
        }
        if last > 0 && matches!(args[last..].trim(), "String" | "std::string::String") {
            n += 1;
        }
    }
    n
}

#[test]
fn library_crates_have_no_string_errors() {
    let mut found = Vec::new();
    for (_, dir) in library_crates() {
        for path in rust_files(&dir.join("src")) {
            let text = read(&path);
            let at = under_crates(&path);
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{at}: {e}"));
            string_variants(&file.items, &at, &mut found);
            let code: String = text
                .lines()
                .map(|l| l.split("//").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            for _ in 0..string_results(&code) {
                found.push(format!("{at}: Result<_, String>"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "library crates must use typed errors (thiserror enums), not strings: {found:#?}"
    );
}

#[test]
fn string_results_are_found_whatever_their_arguments() {
    assert_eq!(string_results("fn f() -> Result<(), String> {"), 1);
    assert_eq!(string_results("Result<Vec<(u8, String)>, String>"), 1);
    assert_eq!(string_results("Result<String, io::Error>"), 0);
    assert_eq!(string_results("Result<(Self, usize), (usize, String)>"), 0);
    assert_eq!(string_results("io::Result<String>"), 0);
}

#[test]
fn the_glossary_names_the_three_protocols() {
    let doc = architecture();
    let glossary = section(&doc, "Glossary").join("\n");
    for protocol in ["gram protocol", "files protocol", "mount protocol"] {
        assert!(
            glossary.contains(&format!("**{protocol}**")),
            "the glossary of docs/architecture.md must name the {protocol} in bold"
        );
    }
    let paths = section(&doc, "Data paths").join("\n");
    assert!(
        paths.contains("### Mount"),
        "docs/architecture.md must draw the mount's data path beside the others"
    );
}

#[test]
fn no_test_passes_silently_when_it_cannot_run() {
    // A test this machine cannot run is `#[ignore = "needs …"]` (counted as
    // ignored, with its reason) and run where it can (.ci/run runs
    // `--ignored` as root); it never prints SKIP and passes.
    let mut dirs: Vec<PathBuf> = crates()
        .into_iter()
        .flat_map(|(_, d)| {
            [
                d.join("src"),
                d.join("tests"),
                d.join("benches"),
                d.join("examples"),
            ]
        })
        .collect();
    dirs.push(root().join("fuzz"));
    let this = Path::new(file!()).file_name().expect("file name").to_owned();
    let mut found = Vec::new();
    for dir in dirs {
        for path in rust_files(&dir) {
            if path.file_name() == Some(this.as_os_str()) {
                continue;
            }
            for (i, line) in read(&path).lines().enumerate() {
                if line.contains("\"SKIP") {
                    found.push(format!("{}:{}", under_crates(&path), i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "tests that print SKIP and pass (use #[ignore = \"needs …\"]): {found:?}"
    );
}
