#!/usr/bin/env bash
# Start a private, throw-away PostgreSQL server for the postgres plugin's
# tests, installing Debian's `postgresql` package if it is missing. Prints
# the connection string; the caller exports it as SPILLWAY_TEST_PG.
# The server listens only on a Unix socket in a temp folder, trust auth.
# `.ci/postgres.sh stop` stops that server and removes its folder (the test
# helpers that start it run this when their test binary exits).
# `kill` SIGKILLs the server's processes (a crash, for the tests that kill
# the database mid-batch) and `start-again` starts it on the same data.
# PG_ROOT (folder) and PG_PORT pick the server, so a test can run its own.
set -euo pipefail

PG_PORT="${PG_PORT:-54329}"
PG_ROOT="${PG_ROOT:-/tmp/spillway-ci-pg}"

find_bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1
}

BIN="$(find_bin || true)"

as_pg() {
    if [ "$(id -u)" = "0" ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

if [ "${1:-}" = "stop" ]; then
    if [ -n "$BIN" ] && [ -f "$PG_ROOT/data/postmaster.pid" ]; then
        as_pg "$BIN/pg_ctl" -D "$PG_ROOT/data" -m fast stop >/dev/null 2>&1 || true
    fi
    rm -rf "$PG_ROOT"
    exit 0
fi

serve() {
    as_pg "$BIN/pg_ctl" -D "$PG_ROOT/data" -l "$PG_ROOT/server.log" -w \
        -o "-k $PG_ROOT/sock -p $PG_PORT -c listen_addresses='' -c fsync=off" start >&2
}

if [ "${1:-}" = "kill" ]; then
    postmaster="$(head -n1 "$PG_ROOT/data/postmaster.pid")"
    kill -KILL "$postmaster"
    pkill -KILL -P "$postmaster" || true
    # Started again only once no process of it holds the data folder.
    for _ in $(seq 1 100); do
        pgrep -P "$postmaster" >/dev/null || kill -0 "$postmaster" 2>/dev/null || exit 0
        sleep 0.1
    done
    echo "the server (pid $postmaster) was still running 10 s after SIGKILL" >&2
    exit 1
fi

if [ "${1:-}" = "start-again" ]; then
    serve
    exit 0
fi

if [ -z "$BIN" ] || [ ! -x "$BIN/postgres" ]; then
    echo "installing postgresql (Debian package)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
    BIN="$(find_bin)"
fi

if [ -f "$PG_ROOT/data/postmaster.pid" ]; then
    as_pg "$BIN/pg_ctl" -D "$PG_ROOT/data" -m immediate stop >&2 || true
fi
rm -rf "$PG_ROOT"
mkdir -p "$PG_ROOT/sock"
if [ "$(id -u)" = "0" ]; then
    chown -R postgres:postgres "$PG_ROOT"
fi
as_pg "$BIN/initdb" -D "$PG_ROOT/data" -A trust -U postgres --no-sync >&2
serve
echo "host=$PG_ROOT/sock port=$PG_PORT user=postgres dbname=postgres"
