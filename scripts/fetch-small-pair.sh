#!/usr/bin/env bash
# fetch-small-pair.sh - fetch, verify, unpack and cache the small-file version
# pair used by `pfs bench files` (thousands of small files, beside the Linux
# pair of fetch-version-pair.sh).
#
# Run with --help for usage. Progress goes to stderr; stdout carries only the
# two unpacked tree paths (line 1 = version A, line 2 = version B).

set -euo pipefail

PROG=${0##*/}

# --- the pair ---------------------------------------------------------------
# Two successive patch releases of Django, as source distributions (sdists)
# from the Python package index: ~6,870 regular files and ~45 MB per tree
# (code, tests, docs), 48 files differ between the two, and about 4,800 files
# keep their size and mtime (the rest carry a new mtime over the same bytes).
PKG=Django
DEFAULT_VERSION_A=5.2.1
DEFAULT_VERSION_B=5.2.2

# Pinned facts for the default pair: SHA256 of the sdist, and the number of
# regular files / bytes of the unpacked tree (a sanity check of the unpack).
pinned_sha256() {
    case $1 in
        5.2.1) echo 57fe1f1b59462caed092c80b3dd324fd92161b620d59a9ba9181c34746c97284 ;;
        5.2.2) echo 85852e517f84435e9b13421379cd6c43ef5b48a9c8b391d29a26f7900967e952 ;;
        *) echo "" ;;
    esac
}
pinned_tree_stats() { # prints "FILES BYTES"
    case $1 in
        5.2.1) echo "6872 45057761" ;;
        5.2.2) echo "6875 45087885" ;;
        *) echo "" ;;
    esac
}

usage() {
    cat <<EOF
Usage: $PROG [--refresh] [--versions A B] [--cache DIR]
       $PROG --help

Prepares the small-file version pair for 'pfs bench files' and prints the two
unpacked source trees, one per line on stdout: line 1 = version A (the old
release), line 2 = version B (the new release that is sent over A).

The pair is two successive releases of $PKG's source distribution (default
$DEFAULT_VERSION_A -> $DEFAULT_VERSION_B: each about 11 MB to download,
~6,870 files and ~45 MB unpacked).

How it is fetched: with 'pip download --no-deps --no-binary :all:' from the
Python package index pip is set up for. For the default pair pip runs in
hash-checking mode against the SHA256 pinned here; for other versions pip
checks the hash the index publishes, and this script prints the SHA256 it got.
pip builds the sdist's metadata on the way (it fetches the package's build
backend into a temporary environment). The tree is the sdist unpacked with
the archive's file times.

Cache (idempotent; each step is done once and marked complete):
  \${PFS_SMALL_PAIR_CACHE:-\$HOME/.cache/pfs/small-pair}/$PKG-VERSION/
      django-VERSION.tar.gz    downloaded sdist (kept)
      django-VERSION/          unpacked tree (the path printed)
      .complete                marker written after a verified unpack
Needs about 60 MB of free space per version.

Treat the printed trees as read-only: a benchmark copies A to its own
destination before sending B over it (use --refresh to re-unpack a tree that
was modified).

Options:
  --versions A B  use these two $PKG versions instead of the default pair
                  (see 'pip index versions $PKG')
  --cache DIR     cache directory (overrides \$PFS_SMALL_PAIR_CACHE)
  --refresh       delete and re-unpack the two trees from the cached sdists
  -h, --help      show this help

Environment:
  PFS_SMALL_PAIR_CACHE  cache directory (default \$HOME/.cache/pfs/small-pair)
  PYTHON                the Python whose pip is used (default python3)

Needs python3 with pip, tar, gzip, sha256sum and flock.
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

# --- arguments ----------------------------------------------------------------
VERSION_A=$DEFAULT_VERSION_A
VERSION_B=$DEFAULT_VERSION_B
CACHE=${PFS_SMALL_PAIR_CACHE:-${HOME:-/root}/.cache/pfs/small-pair}
PYTHON=${PYTHON:-python3}
REFRESH=0
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --versions)
            [ $# -ge 3 ] || die "--versions needs two arguments (A B)"
            VERSION_A=$2; VERSION_B=$3; shift 3 ;;
        --cache)
            [ $# -ge 2 ] || die "--cache needs a directory"
            CACHE=$2; shift 2 ;;
        --refresh) REFRESH=1; shift ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
for v in "$VERSION_A" "$VERSION_B"; do
    case $v in
        ''|*[!A-Za-z0-9.+-]*) die "invalid version '$v'" ;;
    esac
done
[ "$VERSION_A" != "$VERSION_B" ] || die "versions A and B are the same ($VERSION_A)"

# --- tools ----------------------------------------------------------------------
for cmd in "$PYTHON" tar gzip sha256sum flock find awk; do
    command -v "$cmd" >/dev/null 2>&1 || die "missing tool: $cmd"
done
"$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "$PYTHON has no pip (install python3-pip, or set PYTHON to a Python with pip)"

sha256_of() { sha256sum "$1" | awk '{ print $1 }'; }

tree_stats() { # DIR -> "FILES BYTES" (regular files only)
    find "$1" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { printf "%d %d\n", n, b }'
}

# --- one version --------------------------------------------------------------------
# Ensures DIR/django-VER.tar.gz exists (and matches its pinned SHA256, if any).
fetch_sdist() { # VERSION DIR
    local ver=$1 dir=$2 sdist pinned tmp got
    sdist="$dir/django-$ver.tar.gz"
    pinned=$(pinned_sha256 "$ver")
    if [ -f "$sdist" ]; then
        if [ -z "$pinned" ] || [ "$(sha256_of "$sdist")" = "$pinned" ]; then
            return 0
        fi
        log "cached $sdist does not match its pinned SHA256; fetching it again"
        rm -f "$sdist"
    fi

    tmp=$(mktemp -d "$dir/.download.XXXXXX")
    local req=("$PKG==$ver")
    if [ -n "$pinned" ]; then
        # Hash-checking mode: pip refuses a file whose SHA256 differs.
        printf '%s==%s --hash=sha256:%s\n' "$PKG" "$ver" "$pinned" > "$tmp/requirements.txt"
        req=(--require-hashes -r "$tmp/requirements.txt")
    fi
    log "downloading $PKG==$ver (sdist, ~11 MB) with pip"
    if ! "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
            --dest "$tmp" "${req[@]}" >&2; then
        rm -rf "$tmp"
        die "pip download $PKG==$ver failed (is the package index reachable? is $ver a release: 'pip index versions $PKG')"
    fi
    local got_files=("$tmp"/*.tar.gz)
    [ -f "${got_files[0]}" ] || { rm -rf "$tmp"; die "pip saved no .tar.gz sdist for $PKG==$ver"; }
    got=$(sha256_of "${got_files[0]}")
    if [ -n "$pinned" ] && [ "$got" != "$pinned" ]; then
        rm -rf "$tmp"
        die "SHA256 mismatch for $PKG==$ver: got $got, expected $pinned"
    fi
    mv "${got_files[0]}" "$sdist"
    rm -rf "$tmp"
    log "verified $sdist (sha256 $got${pinned:+, pinned})"
}

TREE_PATH=
NEW_DIR=
prepare_version() { # VERSION -> sets TREE_PATH
    local ver=$1 dir tree marker tmp stats pinned
    dir="$CACHE/$PKG-$ver"
    tree="$dir/django-$ver"
    marker="$dir/.complete"
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir" || die "cannot create $dir"
        NEW_DIR=$dir # removed on exit if still empty (failed fetch)
    fi

    if [ "$REFRESH" -eq 1 ] && [ -e "$tree" ]; then
        log "--refresh: removing $tree"
        rm -f "$marker"
        rm -rf "$tree"
    fi
    if [ -f "$marker" ] && [ -d "$tree" ]; then
        log "cached: $tree"
        TREE_PATH=$tree
        return 0
    fi
    rm -f "$marker"

    fetch_sdist "$ver" "$dir"

    # Leftovers of an interrupted run.
    rm -rf "$tree" "$dir"/.unpack.*

    log "unpacking $PKG==$ver"
    tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
    # --no-same-owner: the archive's owner names mean nothing on this host.
    if ! tar -xzf "$dir/django-$ver.tar.gz" --no-same-owner -C "$tmp"; then
        rm -rf "$tmp"
        die "unpacking $dir/django-$ver.tar.gz failed"
    fi
    # sdists name their top directory in lower or mixed case.
    local top
    top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)
    [ -n "$top" ] && [ "$(find "$tmp" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1 ] \
        || { rm -rf "$tmp"; die "unexpected sdist layout: not one top directory"; }

    stats=$(tree_stats "$top")
    pinned=$(pinned_tree_stats "$ver")
    if [ -n "$pinned" ] && [ "$stats" != "$pinned" ]; then
        rm -rf "$tmp"
        die "unpacked tree of $PKG==$ver has '$stats' files/bytes, expected '$pinned'"
    fi
    mv "$top" "$tree"
    rmdir "$tmp"
    {
        echo "package=$PKG"
        echo "version=$ver"
        echo "sha256=$(sha256_of "$dir/django-$ver.tar.gz")"
        echo "files=${stats% *}"
        echo "bytes=${stats#* }"
        echo "tree=$tree"
    } > "$marker.tmp"
    mv "$marker.tmp" "$marker"
    log "ready: $tree (${stats% *} files, ${stats#* } bytes)"
    TREE_PATH=$tree
}

# --- main -------------------------------------------------------------------------------
mkdir -p "$CACHE" || die "cannot create cache directory $CACHE"
CACHE=$(cd "$CACHE" && pwd -P)

trap 'if [ -n "$NEW_DIR" ]; then rmdir "$NEW_DIR" 2>/dev/null || true; fi' EXIT

# One run at a time per cache directory.
exec 9> "$CACHE/.lock"
flock 9 || die "cannot lock $CACHE/.lock"

prepare_version "$VERSION_A"
PATH_A=$TREE_PATH
prepare_version "$VERSION_B"
PATH_B=$TREE_PATH
printf '%s\n%s\n' "$PATH_A" "$PATH_B"
