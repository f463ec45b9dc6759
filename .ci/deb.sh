#!/usr/bin/env bash
# The .deb as an operator meets it (issue "Install it like a real daemon"):
# build it, install it as root, check its files, its user and its unit,
# start the installed binary as the package's user on the installed config
# with the command the unit runs (no systemd here), push a record and see
# the installed config's sink receive it, upgrade to the next revision over
# an edited config keeping the data folder, purge, and check that only what
# docs/operations.md says purge keeps is left. Then the same package on a
# host without systemd-sysusers (a slim image, sysvinit): dpkg runs with a
# PATH that lacks it, the user is made by adduser, and install, start and
# purge still work. Run after the tests: the release binary and plugins are
# built.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
fail() { echo "deb: FAILED: $*" >&2; exit 1; }
say() { echo "deb: $*"; }

if ! command -v cargo-deb >/dev/null 2>&1; then
    cargo install cargo-deb --locked --version 3.8.0 --no-default-features
fi
# Two revisions of the same build: the first is installed, the second is
# the upgrade (each in a folder of its own: cargo-deb removes other
# versions from the folder it writes to).
rm -rf target/debian/first target/debian/next
deploy/debian/build-deb.sh --deb-revision 1 --output target/debian/first/ >/dev/null
deploy/debian/build-deb.sh --deb-revision 2 --output target/debian/next/ >/dev/null
deb="$(ls target/debian/first/spillway_*-1_*.deb)"
next_deb="$(ls target/debian/next/spillway_*-2_*.deb)"
say "built $deb ($(du -h "$deb" | cut -f1)) and $next_deb"

work="$(mktemp -d)"
daemon_pid=""
receiver_pid=""
cleanup() {
    [ -n "$daemon_pid" ] && $SUDO kill "$daemon_pid" 2>/dev/null || true
    [ -n "$receiver_pid" ] && kill "$receiver_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# This installs and purges the package and removes /var/lib/spillway: on a
# machine that runs spillway for real, it would take its data. It goes on
# there only when told it is a CI machine.
if dpkg-query -W spillway >/dev/null 2>&1 || [ -e /var/lib/spillway ]; then
    if [ -z "${CI:-}" ] || [ "${CI:-}" = "false" ] || [ "${CI:-}" = "0" ]; then
        fail "spillway is installed here, or /var/lib/spillway exists: this script installs and purges the package and removes that folder; run it on a throwaway machine (CI=true)"
    fi
fi
# A package or user from an earlier run on this machine goes first.
$SUDO dpkg --purge spillway >/dev/null 2>&1 || true
$SUDO rm -rf /var/lib/spillway
getent passwd spillway >/dev/null && $SUDO userdel spillway
getent group spillway >/dev/null && $SUDO groupdel spillway

if command -v systemd-sysusers >/dev/null 2>&1; then
    say "installing with systemd-sysusers at $(command -v systemd-sysusers)"
else
    say "installing on a host without systemd-sysusers"
fi
$SUDO dpkg -i "$deb"

# -- what it installed
files=(
    /usr/bin/spillway
    /usr/lib/spillway/plugins/libspillway_plugin_file.so
    /usr/lib/spillway/plugins/libspillway_plugin_postgres.so
    /usr/lib/spillway/plugins/libspillway_plugin_mariadb.so
    /etc/spillway/spillway.toml
    /usr/lib/systemd/system/spillway.service
    /usr/lib/sysusers.d/spillway.conf
    /usr/share/man/man1/spillway.1.gz
    /usr/share/man/man1/spillway-ctl.1.gz
    /usr/share/man/man1/spillway-ctl-health.1.gz
    /usr/share/man/man5/spillway.toml.5.gz
    /usr/share/bash-completion/completions/spillway
    /usr/share/zsh/vendor-completions/_spillway
    /usr/share/fish/vendor_completions.d/spillway.fish
    /usr/share/doc/spillway/operations.md
    /usr/share/doc/spillway/configuration.md
)
for f in "${files[@]}"; do
    [ -e "$f" ] || fail "$f is not installed"
done
dpkg-query -W -f='${Conffiles}\n' spillway | grep -q '^ /etc/spillway/spillway.toml ' \
    || fail "/etc/spillway/spillway.toml is not a conffile"
[ "$(stat -c '%U:%G %a' /etc/spillway/spillway.toml)" = "root:spillway 640" ] \
    || fail "config owner and mode: $(stat -c '%U:%G %a' /etc/spillway/spillway.toml), want root:spillway 640"
getent passwd spillway | grep -q ':/var/lib/spillway:/usr/sbin/nologin$' \
    || fail "the spillway user: $(getent passwd spillway || echo missing)"
getent group spillway >/dev/null || fail "no spillway group"
[ "$(stat -c '%U:%G %a' /var/lib/spillway)" = "spillway:spillway 700" ] \
    || fail "/var/lib/spillway: $(stat -c '%U:%G %a' /var/lib/spillway), want spillway:spillway 700"
[ -L /etc/systemd/system/multi-user.target.wants/spillway.service ] \
    || fail "the unit is not enabled"
# Read each page whole before grep: `zcat | grep -q` under pipefail fails at
# random, as grep -q leaves at the first match and zcat's next write dies of
# SIGPIPE (a CI run failed so on the configuration page).
ctl_page=$(zcat /usr/share/man/man1/spillway-ctl.1.gz)
grep -q '^\.SH "\{0,1\}EXIT STATUS' <<<"$ctl_page" \
    || fail "spillway-ctl(1) has no EXIT STATUS section"
config_page=$(zcat /usr/share/man/man5/spillway.toml.5.gz)
grep -q 'wab_bytes_max' <<<"$config_page" \
    || fail "spillway.toml(5) does not describe wab.wab_bytes_max"
bash -n /usr/share/bash-completion/completions/spillway || fail "the bash completion does not parse"
if command -v systemd-analyze >/dev/null 2>&1; then
    $SUDO systemd-analyze verify /usr/lib/systemd/system/spillway.service \
        || fail "systemd-analyze verify refused the installed unit"
    say "systemd-analyze verify: the unit is valid"
else
    say "systemd-analyze is not here; the unit was not verified"
fi
/usr/bin/spillway check /etc/spillway/spillway.toml >/dev/null 2>"$work/check.err" || true
say "files, conffile, user, data folder, unit: as documented"

# -- run it as the unit does: RuntimeDirectory made as systemd makes it
exec_start="$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/spillway.service)"
[ "$exec_start" = "/usr/bin/spillway run --config /etc/spillway/spillway.toml" ] \
    || fail "unexpected ExecStart: $exec_start"
$SUDO install -d -m 0710 -o spillway -g spillway /run/spillway
# The installed config's sink: one POST of NDJSON per batch to this address.
url="$(sed -n 's/^url = "\(.*\)"/\1/p' /etc/spillway/spillway.toml | head -1)"
[ "$url" = "http://127.0.0.1:8080/ingest" ] || fail "the installed config's sink url: $url"
cat >"$work/receiver.py" <<'PY'
import http.server, sys
class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open(sys.argv[1], "ab") as out:
            out.write(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", 8080), Receiver).serve_forever()
PY
# Runs the installed daemon as the unit does (setpriv execs the command as
# the user; runuser would sit between, as a session, and turn the SIGTERM
# below into a kill), and waits until `ctl health` answers.
start_daemon() {
    $SUDO setpriv --reuid spillway --regid spillway --init-groups -- $exec_start >"$work/daemon.log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 1 100); do
        if $SUDO /usr/bin/spillway ctl --config /etc/spillway/spillway.toml health >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    cat "$work/daemon.log"
    fail "the installed daemon did not become ready"
}
stop_daemon() {
    $SUDO kill -TERM "$daemon_pid"
    wait "$daemon_pid" || fail "the daemon did not stop cleanly on SIGTERM: $(tail -5 "$work/daemon.log")"
    daemon_pid=""
}
push_as_spillway() {
    $SUDO setpriv --reuid spillway --regid spillway --init-groups -- /usr/bin/spillway push --config /etc/spillway/spillway.toml "$@" >/dev/null
}
wait_received() {
    for _ in $(seq 1 150); do
        if grep -q "$1" "$work/received" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    cat "$work/daemon.log"
    fail "$1 never reached the sink"
}

python3 "$work/receiver.py" "$work/received" &
receiver_pid=$!
start_daemon
record="deb-check-$$-$(date +%s%N)"
push_as_spillway "$record"
wait_received "$record"
say "ran as spillway with the unit's command: pushed $record, the sink at $url received it"

# -- an upgrade keeps an edited config and the data, and the upgraded
# daemon delivers what the old one held. With the receiver down, three
# records stay pending; the data folder must be byte for byte the same
# after the upgrade, and the new binary must find them and deliver them.
kill "$receiver_pid"; wait "$receiver_pid" 2>/dev/null || true
held="deb-held-$$-$(date +%s%N)"
push_as_spillway "$held-1" "$held-2" "$held-3"
stop_daemon
data_sums() { $SUDO find /var/lib/spillway -type f -print0 | sort -z | $SUDO xargs -0 sha256sum; }
before="$(data_sums)"
echo "# edited by the operator" | $SUDO tee -a /etc/spillway/spillway.toml >/dev/null
$SUDO dpkg -i --force-confold "$next_deb" >/dev/null
[ "$(dpkg-query -W -f='${Version}' spillway)" = "$(dpkg-deb -f "$next_deb" Version)" ] \
    || fail "after the upgrade dpkg lists $(dpkg-query -W -f='${Version}' spillway)"
grep -q '^# edited by the operator$' /etc/spillway/spillway.toml || fail "the upgrade lost the edited config"
[ "$(data_sums)" = "$before" ] || fail "the upgrade changed /var/lib/spillway"
python3 "$work/receiver.py" "$work/received" &
receiver_pid=$!
start_daemon
grep -q '; 3 records pending delivery, 1 already delivered' "$work/daemon.log" \
    || fail "the upgraded daemon's start line does not count 3 pending and 1 delivered: $(grep 'listening on' "$work/daemon.log")"
for i in 1 2 3; do wait_received "$held-$i"; done
stop_daemon
say "upgrade to $(dpkg-deb -f "$next_deb" Version): the edited config kept, /var/lib/spillway unchanged, the 3 held records delivered by the new binary"

# -- purge: says what it keeps, keeps only that
purge_out="$($SUDO dpkg --purge spillway 2>&1)"
echo "$purge_out"
echo "$purge_out" | grep -q 'kept /var/lib/spillway' || fail "purge did not say it keeps /var/lib/spillway"
for f in "${files[@]}" /etc/systemd/system/multi-user.target.wants/spillway.service; do
    [ ! -e "$f" ] || fail "$f is left after purge"
done
[ ! -e /etc/spillway ] || fail "/etc/spillway is left after purge: $(ls -la /etc/spillway)"
[ ! -e /usr/lib/spillway ] || fail "/usr/lib/spillway is left after purge"
[ -d /var/lib/spillway/wab ] || fail "purge removed /var/lib/spillway (documented: kept unless SPILLWAY_PURGE_DATA=yes)"
getent passwd spillway >/dev/null || fail "purge removed the spillway user (documented: kept)"
dpkg-query -W spillway >/dev/null 2>&1 && fail "dpkg still lists spillway after purge"
say "purge: removed the package and its config, kept /var/lib/spillway and the user, as documented"

# Leave the machine as it was.
forget_install() {
    $SUDO rm -rf /var/lib/spillway /run/spillway
    $SUDO userdel spillway 2>/dev/null || true
    $SUDO groupdel spillway 2>/dev/null || true
}
forget_install

# -- a host without systemd-sysusers: dpkg and its maintainer scripts run
# with a PATH holding every command of this machine but that one.
if [ -n "$receiver_pid" ]; then
    kill "$receiver_pid"; wait "$receiver_pid" 2>/dev/null || true
    receiver_pid=""
fi
nosysusers="$work/path-without-systemd-sysusers"
mkdir -p "$nosysusers"
for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
    [ -d "$dir" ] || continue
    for cmd in "$dir"/*; do
        name="$(basename "$cmd")"
        [ "$name" = systemd-sysusers ] && continue
        [ -e "$nosysusers/$name" ] || ln -s "$cmd" "$nosysusers/$name"
    done
done
env PATH="$nosysusers" sh -c 'command -v systemd-sysusers' >/dev/null 2>&1 \
    && fail "systemd-sysusers is still on the PATH made without it"
install_out="$($SUDO env PATH="$nosysusers" dpkg -i "$next_deb" 2>&1)" \
    || fail "dpkg -i without systemd-sysusers failed: $install_out"
[ "$(dpkg-query -W -f='${Status}' spillway)" = "install ok installed" ] \
    || fail "without systemd-sysusers the package is $(dpkg-query -W -f='${Status}' spillway): $install_out"
getent passwd spillway | grep -q ':/var/lib/spillway:/usr/sbin/nologin$' \
    || fail "without systemd-sysusers, the spillway user: $(getent passwd spillway || echo missing)"
getent passwd spillway | grep -q ':spillway durable write buffer,,,:' \
    || fail "the user was not made by the postinst's adduser (its GECOS ends in ,,,): $(getent passwd spillway)"
[ "$(stat -c '%U:%G %a' /var/lib/spillway)" = "spillway:spillway 700" ] \
    || fail "/var/lib/spillway without systemd-sysusers: $(stat -c '%U:%G %a' /var/lib/spillway)"
[ "$(stat -c '%U:%G %a' /etc/spillway/spillway.toml)" = "root:spillway 640" ] \
    || fail "the config without systemd-sysusers: $(stat -c '%U:%G %a' /etc/spillway/spillway.toml)"
$SUDO install -d -m 0710 -o spillway -g spillway /run/spillway
python3 "$work/receiver.py" "$work/received" &
receiver_pid=$!
start_daemon
record="deb-nosysusers-$$-$(date +%s%N)"
push_as_spillway "$record"
wait_received "$record"
stop_daemon
kill "$receiver_pid"; wait "$receiver_pid" 2>/dev/null || true
receiver_pid=""
purge_out="$($SUDO env PATH="$nosysusers" dpkg --purge spillway 2>&1)" \
    || fail "dpkg --purge without systemd-sysusers failed: $purge_out"
dpkg-query -W spillway >/dev/null 2>&1 && fail "dpkg still lists spillway after the purge without systemd-sysusers"
forget_install
say "without systemd-sysusers: installed (the user made by adduser), ran as spillway and delivered $record, purged"
say "ok"
