#!/usr/bin/env bash
# fetch-version-pair.sh - fetch, verify, unpack and cache the version pair used
# by `pfs bench files`.
#
# Run with --help for usage. Progress goes to stderr; stdout carries only the
# two unpacked tree paths (line 1 = version A, line 2 = version B).

set -euo pipefail

PROG=${0##*/}

# --- the pair ---------------------------------------------------------------
# Two successive Debian security uploads of the Linux 6.1 LTS kernel source
# (binary package linux-source-6.1: one .deb holding
# /usr/src/linux-source-6.1.tar.xz, the full source tree with Debian's patches
# applied). Upstream stable 6.1.190 -> 6.1.192: ~1.30 GB / ~78.6k regular files
# per tree, ~93% of B's bytes in files identical to A's.
PKG=linux-source-6.1
INNER_TARBALL=./usr/src/linux-source-6.1.tar.xz
TREE_NAME=linux-source-6.1
DEFAULT_VERSION_A=6.1.190-1
DEFAULT_VERSION_B=6.1.192-1

# Pinned facts for the default pair: SHA256 of the .deb (as published in the
# signed apt index), and the number of regular files / bytes in the unpacked
# tree (a sanity check of the unpack).
pinned_sha256() {
    case $1 in
        6.1.190-1) echo cfbe4d7a7e4cb65190c96db90794b3a10eec608522339c2371103f844cc53536 ;;
        6.1.192-1) echo 7ae5d78895d88e4788c601b8322b07043965b0e37324c5bb26453e2ce049509d ;;
        *) echo "" ;;
    esac
}
pinned_tree_stats() { # prints "FILES BYTES"
    case $1 in
        6.1.190-1) echo "78622 1299226644" ;;
        6.1.192-1) echo "78579 1298682098" ;;
        *) echo "" ;;
    esac
}

usage() {
    cat <<EOF
Usage: $PROG [--refresh] [--versions A B] [--cache DIR]
       $PROG --help

Prepares the realistic version pair for 'pfs bench files' and prints the two
unpacked source trees, one per line on stdout: line 1 = version A (the old
release), line 2 = version B (the new release that is sent over A).

The pair is two successive releases of the Linux 6.1 kernel source as shipped
by Debian's package $PKG (default $DEFAULT_VERSION_A -> $DEFAULT_VERSION_B,
each about 139 MB to download and 1.3 GB / 78.6k files unpacked).

How it is fetched: with 'apt-get download $PKG=VERSION' from the machine's
configured Debian archive (bookworm-security), so apt checks the .deb against
the signed index; this script then checks its SHA256 again (against the pinned
value for the default pair, else against the index). A version that has
dropped out of the apt index is fetched from the same pool directory of the
same archive (URL derived from apt, or \$PFS_PAIR_POOL_URL) and accepted only if
its SHA256 matches the pinned value. The tree is the .deb's inner
linux-source-6.1.tar.xz, unpacked with the archive's file times.

Cache (idempotent; each step is done once and marked complete):
  \${PFS_PAIR_CACHE:-\$HOME/.cache/pfs/version-pair}/$PKG-VERSION/
      ${PKG}_VERSION_all.deb   downloaded package (kept)
      $TREE_NAME/              unpacked tree (the path printed)
      .complete                marker written after a verified unpack
Needs about 1.5 GB of free space per version.

Treat the printed trees as read-only: a benchmark should copy A to its own
destination before sending B over it (use --refresh to re-unpack a tree that
was modified).

Options:
  --versions A B  use these two $PKG versions instead of the default pair
                  (must be in the apt index: 'apt-cache madison $PKG')
  --cache DIR     cache directory (overrides \$PFS_PAIR_CACHE)
  --refresh       delete and re-unpack the two trees from the cached .debs
  -h, --help      show this help

Environment:
  PFS_PAIR_CACHE     cache directory (default \$HOME/.cache/pfs/version-pair)
  PFS_PAIR_POOL_URL  pool directory URL for versions no longer in the apt index

Missing tools (apt, dpkg-deb, tar, xz, sha256sum) are installed with apt-get
when running as root ('apt-get update' is run at most once).
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

# --- arguments ----------------------------------------------------------------
VERSION_A=$DEFAULT_VERSION_A
VERSION_B=$DEFAULT_VERSION_B
CACHE=${PFS_PAIR_CACHE:-${HOME:-/root}/.cache/pfs/version-pair}
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
        ''|*[!A-Za-z0-9.+~:-]*) die "invalid version '$v'" ;;
    esac
done
[ "$VERSION_A" != "$VERSION_B" ] || die "versions A and B are the same ($VERSION_A)"

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

# --- tools ----------------------------------------------------------------------
APT_UPDATED=0
apt_update_once() {
    [ "$APT_UPDATED" -eq 0 ] || return 0
    [ "$IS_ROOT" -eq 1 ] || return 1
    log "running apt-get update"
    if ! apt-get update -q >&2; then
        die "apt-get update failed (is the Debian archive reachable?)"
    fi
    APT_UPDATED=1
}

ensure_tools() {
    local missing=() cmd pkg pair
    for pair in apt-get:apt apt-cache:apt dpkg-deb:dpkg tar:tar xz:xz-utils \
                sha256sum:coreutils flock:util-linux; do
        cmd=${pair%%:*}; pkg=${pair#*:}
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 \
        || die "missing tools (${missing[*]}) and no apt-get: this script needs a Debian-based machine"
    [ "$IS_ROOT" -eq 1 ] \
        || die "missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})"
    apt_update_once
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 \
        || die "apt-get install ${missing[*]} failed"
}

# --- apt index helpers ------------------------------------------------------------
# SHA256 of PKG=VERSION in the apt index, empty if the index lacks it.
index_sha256() {
    apt-cache show "$PKG=$1" 2>/dev/null | awk '/^SHA256:/ { print $2; exit }'
}

# Make sure the index knows VERSION, updating the lists once if it does not.
index_has() {
    [ -n "$(index_sha256 "$1")" ] && return 0
    if [ "$IS_ROOT" -eq 1 ] && [ "$APT_UPDATED" -eq 0 ]; then
        apt_update_once
        [ -n "$(index_sha256 "$1")" ] && return 0
    fi
    return 1
}

# Pool directory URL of PKG, from apt's URI for any version it knows.
pool_url() {
    if [ -n "${PFS_PAIR_POOL_URL:-}" ]; then
        printf '%s\n' "${PFS_PAIR_POOL_URL%/}"
        return 0
    fi
    local tmp uri
    tmp=$(mktemp -d)
    uri=$(cd "$tmp" && apt-get --print-uris download "$PKG" 2>/dev/null \
          | awk 'NR == 1 { gsub(/\047/, "", $1); print $1 }') || true
    rmdir "$tmp"
    [ -n "$uri" ] || return 1
    printf '%s\n' "${uri%/*}"
}

fetch_url() { # URL DEST
    if command -v curl >/dev/null 2>&1; then
        curl -fL --retry 3 -sS -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$2" "$1"
    else
        die "neither curl nor wget is installed (needed to fetch $1)"
    fi
}

sha256_of() { sha256sum "$1" | awk '{ print $1 }'; }

# --- one version --------------------------------------------------------------------
# Ensures DIR/${PKG}_VER_all.deb exists with the right SHA256.
fetch_deb() { # VERSION DIR
    local ver=$1 dir=$2 deb pinned indexed expected got tmp base
    deb="$dir/${PKG}_${ver}_all.deb"
    pinned=$(pinned_sha256 "$ver")
    if [ -f "$deb" ]; then
        expected=$pinned
        [ -n "$expected" ] || expected=$(index_sha256 "$ver")
        if [ -n "$expected" ] && [ "$(sha256_of "$deb")" = "$expected" ]; then
            return 0
        fi
        log "cached $deb is incomplete or does not match; fetching it again"
        rm -f "$deb"
    fi

    tmp=$(mktemp -d "$dir/.download.XXXXXX")
    if index_has "$ver"; then
        indexed=$(index_sha256 "$ver")
        if [ -n "$pinned" ] && [ "$indexed" != "$pinned" ]; then
            rm -rf "$tmp"
            die "apt index SHA256 for $PKG=$ver ($indexed) differs from the pinned one ($pinned)"
        fi
        expected=$indexed
        log "downloading $PKG=$ver with apt-get download (~139 MB)"
        local aptopts=()
        [ "$IS_ROOT" -eq 1 ] && aptopts=(-o APT::Sandbox::User=root)
        if ! (cd "$tmp" && apt-get -q "${aptopts[@]}" download "$PKG=$ver" >&2); then
            rm -rf "$tmp"
            die "apt-get download $PKG=$ver failed"
        fi
    else
        [ -n "$pinned" ] || {
            rm -rf "$tmp"
            die "$PKG=$ver is not in the apt index (see 'apt-cache madison $PKG') and has no pinned SHA256"
        }
        expected=$pinned
        base=$(pool_url) || {
            rm -rf "$tmp"
            die "$PKG=$ver is not in the apt index and no pool URL could be derived from apt; set PFS_PAIR_POOL_URL"
        }
        log "$PKG=$ver is no longer in the apt index; fetching it from $base/"
        if ! fetch_url "$base/${PKG}_${ver}_all.deb" "$tmp/${PKG}_${ver}_all.deb"; then
            rm -rf "$tmp"
            die "download of $base/${PKG}_${ver}_all.deb failed (removed from the archive? try --versions with two versions from 'apt-cache madison $PKG')"
        fi
    fi
    # apt may store an epoch as %3a; take whatever single .deb it wrote.
    local got_files=("$tmp"/*.deb)
    [ -f "${got_files[0]}" ] || { rm -rf "$tmp"; die "no .deb was downloaded for $PKG=$ver"; }
    got=$(sha256_of "${got_files[0]}")
    if [ "$got" != "$expected" ]; then
        rm -rf "$tmp"
        die "SHA256 mismatch for $PKG=$ver: got $got, expected $expected"
    fi
    mv "${got_files[0]}" "$deb"
    rm -rf "$tmp"
    log "verified $deb (sha256 $got)"
}

tree_stats() { # DIR -> "FILES BYTES" (regular files only)
    find "$1" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { printf "%d %d\n", n, b }'
}

TREE_PATH=
NEW_DIR=
prepare_version() { # VERSION -> sets TREE_PATH
    local ver=$1 dir tree marker tmp stats pinned
    dir="$CACHE/$PKG-$ver"
    tree="$dir/$TREE_NAME"
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

    fetch_deb "$ver" "$dir"

    # Leftovers of an interrupted run.
    rm -rf "$tree" "$dir"/.unpack.*

    local avail
    avail=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
    if [ -n "$avail" ] && [ "$avail" -lt 1500000 ]; then
        die "not enough free space in $dir (need ~1.5 GB, have $((avail / 1024)) MB)"
    fi

    log "unpacking $PKG=$ver (~1.3 GB, takes ~20-40 s)"
    tmp=$(mktemp -d "$dir/.unpack.XXXXXX")
    if ! dpkg-deb --fsys-tarfile "$dir/${PKG}_${ver}_all.deb" \
            | tar -xOf - "$INNER_TARBALL" \
            | tar -xJf - -C "$tmp"; then
        rm -rf "$tmp"
        die "unpacking $dir/${PKG}_${ver}_all.deb failed"
    fi
    [ -d "$tmp/$TREE_NAME" ] || { rm -rf "$tmp"; die "unexpected archive layout: no $TREE_NAME/ in $INNER_TARBALL"; }

    stats=$(tree_stats "$tmp/$TREE_NAME")
    pinned=$(pinned_tree_stats "$ver")
    if [ -n "$pinned" ] && [ "$stats" != "$pinned" ]; then
        rm -rf "$tmp"
        die "unpacked tree of $PKG=$ver has '$stats' files/bytes, expected '$pinned'"
    fi
    mv "$tmp/$TREE_NAME" "$tree"
    rmdir "$tmp"
    {
        echo "package=$PKG"
        echo "version=$ver"
        echo "sha256=$(sha256_of "$dir/${PKG}_${ver}_all.deb")"
        echo "files=${stats% *}"
        echo "bytes=${stats#* }"
        echo "tree=$tree"
    } > "$marker.tmp"
    mv "$marker.tmp" "$marker"
    log "ready: $tree (${stats% *} files, ${stats#* } bytes)"
    TREE_PATH=$tree
}

# --- main -------------------------------------------------------------------------------
ensure_tools
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
