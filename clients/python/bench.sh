#!/usr/bin/env bash
# Bench of the Python client: with SPILLWAY_SOCKET set to a running daemon's
# socket, prints one line per scenario (serial_sync, pipelined_sync_w64,
# batch256_buffered). Runs the package from this folder; nothing is installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${SPILLWAY_SOCKET:-}" ]]; then
    echo "SPILLWAY_SOCKET is not set: set it to a running daemon's socket path" >&2
    exit 1
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "missing toolchain: python3 (>= 3.9)"
    exit 2
fi
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" exec nice -n 10 python3 -m spillway.bench "$@"
