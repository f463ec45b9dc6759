#!/usr/bin/env bash
# Bench of the Node.js client against a running daemon: SPILLWAY_SOCKET must
# name its socket. Prints three lines, client=node scenario=... (see bench.js).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "missing toolchain: Node.js 20 or later (node)" >&2
  exit 2
fi
if [ -z "${SPILLWAY_SOCKET:-}" ]; then
  echo "SPILLWAY_SOCKET is not set: point it at a running daemon's socket" >&2
  exit 2
fi
exec node "$here/bench.js"
