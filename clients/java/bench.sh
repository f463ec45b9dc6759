#!/usr/bin/env bash
# Throughput of the Java client against a running daemon: SPILLWAY_SOCKET=<socket> ./bench.sh
# Prints three lines: client=java scenario=<name> records=<N> seconds=<S> records_per_s=<R>
set -euo pipefail

src="${BASH_SOURCE[0]}"
case "$src" in */*) here="${src%/*}" ;; *) here="." ;; esac
here="$(cd "$here" && pwd)"

if ! command -v javac >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "missing toolchain: a JDK 17 or newer (javac and java), e.g. apt-get install openjdk-17-jdk-headless"
    exit 2
fi
if [ -z "${SPILLWAY_SOCKET:-}" ]; then
    echo "SPILLWAY_SOCKET is not set: point it at a running daemon's socket" >&2
    exit 1
fi

classes="$here/build/bench-classes"
stamp="$classes/.stamp"
if [ ! -f "$stamp" ] || [ -n "$(find "$here/src/main/java" "$here/src/bench/java" -name '*.java' -newer "$stamp" | head -1)" ]; then
    rm -rf "$classes"
    mkdir -p "$classes"
    mapfile -t sources < <(find "$here/src/main/java" "$here/src/bench/java" -name '*.java' | sort)
    nice -n 10 javac -d "$classes" "${sources[@]}"
    touch "$stamp"
fi

exec nice -n 10 java -cp "$classes" dev.spillway.client.bench.Bench
