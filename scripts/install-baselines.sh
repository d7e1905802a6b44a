#!/usr/bin/env bash
# Installs what the baseline rows of `pfs bench` need (Debian/Ubuntu):
# iperf3, rsync, an sshd and scp; fio and fuse3 for `pfs bench mount`; nftables
# (and iproute2 for ip/tc/ss) for `pfs bench --link`. Uses sudo when not run as root. Installs
# packages only: no service is started or enabled (the benchmarks start
# their own private daemons and stop them). The QUIC row needs nothing from
# here: its peers are built into `pfs` (quinn, pure Rust).
set -euo pipefail
packages=(iperf3 rsync openssh-server openssh-client fio fuse3 nftables iproute2)
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-baselines: no apt-get here; install these with your package manager: ${packages[*]}" >&2
    exit 1
fi
as_root=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install-baselines: run as root or install sudo" >&2; exit 1; }
    as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# A policy that forbids starting services while the packages install.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod +x "$policy"
    made_policy=1
fi
trap '[ "$made_policy" = 1 ] && "${as_root[@]}" rm -f "$policy"' EXIT
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null
echo "install-baselines: installed ${packages[*]}"
