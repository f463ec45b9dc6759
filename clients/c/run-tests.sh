#!/usr/bin/env bash
# Runs the C client's whole test suite: builds test/test_spillway.c with the
# system compiler (plain -O2, then with -fsanitize=address,undefined when the
# compiler supports it) and runs each build against the daemon binary in
# $SPILLWAY_BIN. Exit 0 only if every test passes.
set -euo pipefail

self="${BASH_SOURCE[0]}"
[[ "$self" == */* ]] || self="./$self"
here="$(cd "${self%/*}" && pwd)"

if ! command -v cc >/dev/null 2>&1; then
    echo "missing toolchain: a C99 compiler as cc (e.g. apt-get install gcc)"
    exit 2
fi
if [[ -z "${SPILLWAY_BIN:-}" ]]; then
    echo "SPILLWAY_BIN is not set: set it to the spillway daemon binary" >&2
    exit 1
fi
if [[ ! -x "$SPILLWAY_BIN" ]]; then
    echo "SPILLWAY_BIN=$SPILLWAY_BIN is not an executable file" >&2
    exit 1
fi

build="$(mktemp -d /tmp/spillway-c-build-XXXXXX)"
trap 'rm -rf "$build"' EXIT

flags=(-std=c99 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -pedantic)
src=("$here/spillway.c" "$here/test/test_spillway.c")

echo "== build: cc -O2"
nice -n 10 cc "${flags[@]}" -O2 -I"$here" -o "$build/test_spillway" "${src[@]}"

sanitize=0
if echo 'int main(void){return 0;}' |
    cc -fsanitize=address,undefined -x c -o "$build/probe" - >/dev/null 2>&1 &&
    "$build/probe" >/dev/null 2>&1; then
    sanitize=1
    echo "== build: cc -O1 -g -fsanitize=address,undefined"
    nice -n 10 cc "${flags[@]}" -O1 -g -fno-omit-frame-pointer \
        -fsanitize=address,undefined -fno-sanitize-recover=undefined \
        -I"$here" -o "$build/test_spillway_asan" "${src[@]}"
else
    echo "== the compiler cannot build with -fsanitize=address,undefined: skipping that build"
fi

echo "== run: test_spillway (-O2)"
nice -n 10 "$build/test_spillway"

if [[ $sanitize == 1 ]]; then
    echo "== run: test_spillway (address + undefined behaviour sanitizers)"
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        nice -n 10 "$build/test_spillway_asan"
fi
echo "== all C client tests passed"
