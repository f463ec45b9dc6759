#!/usr/bin/env bash
# Runs the Go client's whole test suite: go vet, then go test against a real
# spillway daemon ($SPILLWAY_BIN, required) that the tests start themselves.
# Installs nothing. Exit 0 only if everything passes; 2 if Go is missing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v go >/dev/null 2>&1; then
    echo "missing toolchain: go (Go >= 1.19; on Debian/Ubuntu: apt-get install -y golang-go)" >&2
    exit 2
fi
if [[ -z "${SPILLWAY_BIN:-}" ]]; then
    echo "SPILLWAY_BIN is not set: set it to the spillway daemon binary (e.g. target/release/spillway)" >&2
    exit 1
fi
if [[ ! -x "$SPILLWAY_BIN" ]]; then
    echo "SPILLWAY_BIN=$SPILLWAY_BIN is not an executable file" >&2
    exit 1
fi

tmp="${TMPDIR:-/tmp}"
export GOCACHE="${GOCACHE:-$tmp/spillway-go-cache/build}"
export GOPATH="${GOPATH:-$tmp/spillway-go-cache/gopath}"
export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
export SPILLWAY_BIN="$(cd "$(dirname "$SPILLWAY_BIN")" && pwd)/$(basename "$SPILLWAY_BIN")"

cd "$here"
go vet ./...
go test -count=1 -timeout 120s ./... "$@"
