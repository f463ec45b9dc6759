#!/usr/bin/env bash
# Start a private, throw-away MariaDB server for the SQL sinks' tests,
# installing Debian's `mariadb-server` package if it is missing. Prints a
# connection URL (user `spillway`, database `spillway`, over the Unix
# socket); the caller exports it as SPILLWAY_TEST_MARIADB. The server
# listens only on a Unix socket in a temp folder (no TCP port).
# `.ci/mariadb.sh stop` stops that server and removes its folder (the test
# helpers that start it run this when their test binary exits).
# `kill` SIGKILLs the server (a crash, for the tests that kill the
# database mid-batch) and `start-again` starts it on the same data.
# DB_ROOT (folder) picks the server, so a test can run its own.
set -euo pipefail

DB_ROOT="${DB_ROOT:-/tmp/spillway-ci-mariadb}"
SOCK="$DB_ROOT/sock/mysqld.sock"
PID="$DB_ROOT/mariadbd.pid"

stop() {
    if [ -f "$PID" ]; then
        kill "$(cat "$PID")" 2>/dev/null || true
        for _ in $(seq 1 100); do
            [ -f "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -rf "$DB_ROOT"
}

if [ "${1:-}" = "stop" ]; then
    stop
    exit 0
fi

run_as() {
    # mariadbd will not run as root: it runs as `mysql` (made by the
    # package), or as the calling user when that is not root.
    if [ "$(id -u)" = "0" ]; then echo mysql; else id -un; fi
}

serve() {
    rm -f "$SOCK"
    mariadbd --no-defaults --user="$(run_as)" --datadir="$DB_ROOT/data" --socket="$SOCK" \
        --pid-file="$PID" --skip-networking --log-error="$DB_ROOT/server.log" \
        --innodb-flush-log-at-trx-commit=2 --skip-log-bin >/dev/null 2>&1 &
    for _ in $(seq 1 300); do
        [ -S "$SOCK" ] && return 0
        sleep 0.1
    done
    echo "mariadbd did not start; its log:" >&2
    cat "$DB_ROOT/server.log" >&2 || true
    exit 1
}

if [ "${1:-}" = "kill" ]; then
    server="$(cat "$PID")"
    kill -KILL "$server"
    for _ in $(seq 1 100); do
        kill -0 "$server" 2>/dev/null || exit 0
        sleep 0.1
    done
    echo "mariadbd (pid $server) was still running 10 s after SIGKILL" >&2
    exit 1
fi

if [ "${1:-}" = "start-again" ]; then
    serve
    exit 0
fi

if ! command -v mariadbd >/dev/null || ! command -v mariadb-install-db >/dev/null; then
    echo "installing mariadb-server (Debian package)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq mariadb-server >&2
fi

stop
mkdir -p "$DB_ROOT/data" "$DB_ROOT/sock"
RUN_AS="$(run_as)"
if [ "$RUN_AS" = mysql ]; then
    chown -R mysql:mysql "$DB_ROOT"
fi
mariadb-install-db --no-defaults --user="$RUN_AS" --datadir="$DB_ROOT/data" \
    --auth-root-authentication-method=socket --skip-test-db >"$DB_ROOT/install.log" 2>&1 || {
    cat "$DB_ROOT/install.log" >&2
    exit 1
}
serve
ROOT_CLIENT=(mariadb --no-defaults --socket="$SOCK" -u root)
if [ "$(id -u)" != "0" ]; then
    ROOT_CLIENT=(mariadb --no-defaults --socket="$SOCK" -u "$RUN_AS")
fi
"${ROOT_CLIENT[@]}" -e "CREATE DATABASE IF NOT EXISTS spillway;
    CREATE USER IF NOT EXISTS 'spillway'@'localhost' IDENTIFIED BY 'spillway';
    GRANT ALL ON spillway.* TO 'spillway'@'localhost';
    GRANT PROCESS, CONNECTION ADMIN ON *.* TO 'spillway'@'localhost';" >&2
echo "mysql://spillway:spillway@localhost/spillway?socket=$SOCK"
