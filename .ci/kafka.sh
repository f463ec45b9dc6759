#!/usr/bin/env bash
# Resolve Apache Kafka 4.4.0 (the broker, its storage tool, the tools) with
# Maven into a cache folder and print that folder's `libs` path on stdout;
# everything else goes to stderr. The Kafka sink's tests and bench start
# their own 3-node KRaft cluster from these jars (testing/test-kafka/,
# SPILLWAY_TEST_KAFKA_LIBS). Installs a Java runtime and Maven when they
# are missing, and the headers rdkafka builds librdkafka against (OpenSSL,
# zlib). Nothing is started here.
set -euo pipefail
cd "$(dirname "$0")/.."

home="${SPILLWAY_KAFKA_HOME:-$HOME/.cache/spillway/kafka-4.4.0}"
libs="$home/libs"
# Written after a complete copy: a copy cut short is done again.
marker="$home/.complete"

install() {
    echo "installing $* (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "$@" >&2
}

missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
for pkg in libssl-dev zlib1g-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    install "${missing[@]}"
fi

if [ ! -f "$marker" ]; then
    echo "resolving Apache Kafka 4.4.0 with Maven into $libs" >&2
    rm -rf "$libs"
    mkdir -p "$libs"
    mvn -B -q -f .ci/kafka/pom.xml dependency:copy-dependencies \
        -DoutputDirectory="$libs" >&2
    ls "$libs"/kafka_2.13-4.4.0.jar "$libs"/kafka-tools-4.4.0.jar >/dev/null
    touch "$marker"
fi
echo "$libs"
