#!/usr/bin/env bash
# tmux, for the test that runs `spillway ctl top` in a real 80-column
# terminal and reads the screen back (testing/tests/tests/ctl_top.rs).
set -euo pipefail
if ! command -v tmux >/dev/null 2>&1; then
    echo "installing tmux" >&2
    SUDO=""
    [ "$(id -u)" = "0" ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq tmux >&2
fi
tmux -V
