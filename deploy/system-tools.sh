#!/bin/sh
# What `make test` drives besides Python, from Debian, installing only what is missing:
# Chromium (the inspection page's browser test), tmux (a terminal for `membus tail`),
# Node.js with npm (the TypeScript SDK and the AsyncAPI check), jemalloc (the embedded
# Redis's allocator, preloaded where present), and iproute2 and iptables (the partition
# tests put each server in a network namespace and cut them apart with iptables).
#
# MEMBUS_APT replaces `apt-get` (tests/unit/test_system_tools.py runs "apt-get -s", apt's
# simulation, with the tools hidden); MEMBUS_LIB_DIRS is where jemalloc is looked for, and
# MEMBUS_SBIN_DIRS where ip and iptables are looked for besides PATH (a user's PATH often
# lacks /usr/sbin).
set -eu

apt=${MEMBUS_APT:-apt-get}
lib_dirs=${MEMBUS_LIB_DIRS:-/usr/lib /usr/lib64}
sbin_dirs=${MEMBUS_SBIN_DIRS:-/usr/sbin /sbin}
if [ "$(id -u)" != 0 ] && [ -z "${MEMBUS_APT:-}" ]; then
    apt="sudo apt-get"
fi

has() { command -v "$1" >/dev/null 2>&1; }
has_sbin() {
    has "$1" && return 0
    for dir in $sbin_dirs; do
        [ -x "$dir/$1" ] && return 0
    done
    return 1
}
has_jemalloc() {
    for dir in $lib_dirs; do
        for lib in "$dir"/*/libjemalloc.so.2 "$dir"/libjemalloc.so.2; do
            [ -e "$lib" ] && return 0
        done
    done
    return 1
}

if has chromium && has tmux && has node && has npm && has_jemalloc && has_sbin ip \
    && has_sbin iptables; then
    exit 0
fi

# Before any look-up: on a fresh machine apt's lists are empty or old.
[ "${MEMBUS_APT_UPDATE:-1}" = 0 ] || $apt update -q

want=""
has chromium || want="$want chromium"
has tmux || want="$want tmux"
has_jemalloc || want="$want libjemalloc2"
has_sbin ip || want="$want iproute2"
has_sbin iptables || want="$want iptables"
has node || want="$want nodejs"
if ! has npm; then
    # NodeSource's nodejs carries npm and conflicts with Debian's npm package: asking for
    # both makes apt refuse the whole set. Ask for npm only where the nodejs that is (or
    # will be) installed does not provide it.
    if ! apt-cache show --no-all-versions nodejs 2>/dev/null | grep -Eq '^Provides:.*\bnpm\b'; then
        want="$want npm"
    fi
fi

echo "system-tools: installing from Debian:$want"
# Recommends would add about 100 desktop packages (printing, power, terminals) that headless
# Chromium does not use.
# shellcheck disable=SC2086
$apt install -y -q --no-install-recommends $want
