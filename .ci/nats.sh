#!/usr/bin/env bash
# Install Debian's `nats-server` package when it is missing: the NATS
# JetStream sink's tests and the e2e_jetstream bench start their own
# 3-node cluster on loopback from it (testing/test-nats/); the TLS test makes its
# certificates with `openssl`, installed here too when missing. Nothing is
# started here.
set -euo pipefail

if ! command -v openssl >/dev/null 2>&1; then
    echo "installing openssl (Debian package)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq openssl >&2
fi

if command -v nats-server >/dev/null 2>&1; then
    nats-server --version
    exit 0
fi
echo "installing nats-server (Debian package)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq nats-server >&2
nats-server --version
