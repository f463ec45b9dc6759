#!/usr/bin/env bash
# Runs the whole test suite of the Node.js client: conformance vectors,
# the real daemon ($SPILLWAY_BIN) and fake hostile daemons. Exit 0 only if
# every test passes. Installs nothing.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v node >/dev/null 2>&1; then
  echo "missing toolchain: Node.js 20 or later (node)" >&2
  exit 2
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "missing toolchain: Node.js 20 or later (found node $(node --version))" >&2
  exit 2
fi

if [ -z "${SPILLWAY_BIN:-}" ]; then
  echo "SPILLWAY_BIN is not set: point it at the spillway daemon binary, e.g. SPILLWAY_BIN=/path/to/spillway $0" >&2
  exit 1
fi
if [ ! -f "$SPILLWAY_BIN" ] || [ ! -x "$SPILLWAY_BIN" ]; then
  echo "SPILLWAY_BIN=$SPILLWAY_BIN is not an executable file" >&2
  exit 1
fi

cd "$here"
# --test-timeout: no single test may hang the suite (each is meant to take
# well under a second or two).
exec node --test --test-timeout=20000 test/
