#!/usr/bin/env bash
# Builds bench/bench_spillway.c with -O2 and runs it against the daemon at
# $SPILLWAY_SOCKET. Prints three lines:
#   client=c scenario=<name> records=<N> seconds=<S> records_per_s=<R>
set -euo pipefail

self="${BASH_SOURCE[0]}"
[[ "$self" == */* ]] || self="./$self"
here="$(cd "${self%/*}" && pwd)"

if ! command -v cc >/dev/null 2>&1; then
    echo "missing toolchain: a C99 compiler as cc (e.g. apt-get install gcc)"
    exit 2
fi
if [[ -z "${SPILLWAY_SOCKET:-}" ]]; then
    echo "SPILLWAY_SOCKET is not set: set it to a running daemon's socket" >&2
    exit 1
fi

build="$(mktemp -d /tmp/spillway-c-bench-XXXXXX)"
trap 'rm -rf "$build"' EXIT

cc -std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -pedantic -O2 \
    -I"$here" -o "$build/bench_spillway" \
    "$here/spillway.c" "$here/bench/bench_spillway.c"
"$build/bench_spillway"
