#!/usr/bin/env bash
# Build spillway's .deb into target/debian/: the release binary and the
# plugins (built as the tests build them, one package at a time, so after
# `cargo test --release --workspace` these are no-ops), the man pages and
# shell completions the binary writes, then cargo-deb with the metadata in
# runtime/Cargo.toml (stripped: the release profile keeps line tables).
# Needs cargo-deb (`cargo install cargo-deb --locked`); extra arguments go
# to `cargo deb`.
set -euo pipefail
cd "$(dirname "$0")/../.."

target="${CARGO_TARGET_DIR:-target}"
for package in spillway spillway-plugin-file spillway-plugin-postgres spillway-plugin-mariadb; do
    cargo build --release --quiet -p "$package"
done
bin="$target/release/spillway"
assets="$target/release/deb-assets"
rm -rf "$assets"
mkdir -p "$assets/man" "$assets/completions"
"$bin" man --out "$assets/man" >/dev/null
gzip -9n "$assets"/man/*.1 "$assets"/man/*.5
"$bin" completions bash >"$assets/completions/spillway"
"$bin" completions zsh >"$assets/completions/_spillway"
"$bin" completions fish >"$assets/completions/spillway.fish"
cargo deb -p spillway --no-build --strip "$@"
