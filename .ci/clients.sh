#!/usr/bin/env bash
# Toolchains the producer clients' tests need (clients/*/run-tests.sh, run
# by `cargo test` through testing/tests/tests/clients.rs): Go from Debian's
# golang-go, pytest from PyPI. Node, Java 17 and a C compiler are on the
# machine already; each is checked so a missing one fails here, loudly.
set -euo pipefail

need_apt=()
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v javac >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "installing ${need_apt[*]}" >&2
    SUDO=""
    [ "$(id -u)" = "0" ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >&2
fi
if ! python3 -m pytest --version >/dev/null 2>&1; then
    echo "installing pytest" >&2
    python3 -m pip install --quiet pytest >&2
fi
go version
node --version
javac -version 2>&1
cc --version | head -n1
python3 -m pytest --version
