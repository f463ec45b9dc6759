#!/usr/bin/env bash
# Pushes 5-byte records to the daemon at $SPILLWAY_SOCKET and prints one line
# per scenario: client=go scenario=<name> records=<N> seconds=<S> records_per_s=<R>
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v go >/dev/null 2>&1; then
    echo "missing toolchain: go (Go >= 1.19; on Debian/Ubuntu: apt-get install -y golang-go)" >&2
    exit 2
fi
if [[ -z "${SPILLWAY_SOCKET:-}" ]]; then
    echo "SPILLWAY_SOCKET is not set: set it to a running daemon's socket" >&2
    exit 1
fi

tmp="${TMPDIR:-/tmp}"
export GOCACHE="${GOCACHE:-$tmp/spillway-go-cache/build}"
export GOPATH="${GOPATH:-$tmp/spillway-go-cache/gopath}"
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local

cd "$here"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/spillway-bench" ./cmd/spillway-bench
"$bin/spillway-bench" "$@"
