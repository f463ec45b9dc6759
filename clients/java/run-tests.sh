#!/usr/bin/env bash
# Runs the whole test suite of the Java client against a real daemon.
# Needs SPILLWAY_BIN (the spillway daemon binary) and a JDK 17+ (javac, java).
# Exit 0 only if every test passes; 2 if the toolchain is missing.
set -euo pipefail

src="${BASH_SOURCE[0]}"
case "$src" in */*) here="${src%/*}" ;; *) here="." ;; esac
here="$(cd "$here" && pwd)"

if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "missing toolchain: a JDK 17 or newer (javac and java), e.g. apt-get install openjdk-17-jdk-headless"
    exit 2
fi
version="$(javac -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p')"
if [ -z "$version" ] || [ "$version" -lt 17 ]; then
    echo "missing toolchain: a JDK 17 or newer (found: $(javac -version 2>&1)), e.g. apt-get install openjdk-17-jdk-headless"
    exit 2
fi

if [ -z "${SPILLWAY_BIN:-}" ]; then
    echo "SPILLWAY_BIN is not set: set it to the spillway daemon binary, e.g. SPILLWAY_BIN=/path/to/target/release/spillway" >&2
    exit 1
fi
if [ ! -x "$SPILLWAY_BIN" ] || [ -d "$SPILLWAY_BIN" ]; then
    echo "SPILLWAY_BIN=$SPILLWAY_BIN is not an executable file" >&2
    exit 1
fi

build="$(mktemp -d "${TMPDIR:-/tmp}/spillway-java-build.XXXXXX")"
trap 'rm -rf "$build"' EXIT

mapfile -t sources < <(find "$here/src/main/java" "$here/src/test/java" -name '*.java' | sort)
nice -n 10 javac -Xlint:all -Werror -d "$build/classes" "${sources[@]}"

nice -n 10 java -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$build/classes" \
    -Dspillway.testDir="$here/src/test/java/dev/spillway/client" \
    dev.spillway.client.TestRunner
