#!/usr/bin/env bash
# promtool, which testing/tests/tests/deploy_rules.rs runs on deploy/prometheus/
# (`promtool check rules`, `promtool test rules`), from Debian's prometheus
# package. Only the package's /usr/bin/promtool is taken, into
# /usr/local/bin: `apt-get install prometheus` would add eleven JavaScript
# packages for the web UI (96 MB installed) and, where systemd runs, enable
# and start a Prometheus server on :9090. promtool links only libc.
set -euo pipefail

if command -v promtool >/dev/null 2>&1; then
    promtool --version 2>&1 | head -n1
    exit 0
fi

echo "installing promtool (from Debian's prometheus package)" >&2
SUDO=""
[ "$(id -u)" = "0" ] || SUDO="sudo"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# apt downloads as its _apt user when that user can write the folder.
[ "$(id -u)" = "0" ] && id _apt >/dev/null 2>&1 && chown _apt "$tmp"
if ! (cd "$tmp" && apt-get download -qq prometheus >&2); then
    $SUDO apt-get update -qq >&2
    (cd "$tmp" && apt-get download -qq prometheus >&2)
fi
dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
$SUDO install -m 0755 "$tmp/usr/bin/promtool" /usr/local/bin/promtool
promtool --version 2>&1 | head -n1
