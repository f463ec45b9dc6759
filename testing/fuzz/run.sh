#!/usr/bin/env bash
# Runs every cargo-fuzz target for a while: `testing/fuzz/run.sh [seconds] [target...]`
# (default 60 s each, every target). Installs cargo-fuzz if it is missing;
# needs a nightly toolchain (`rustup toolchain install nightly`).
#
# Each target starts from its seed corpus (testing/fuzz/corpus/<target>/, read
# only) and grows its inputs in testing/fuzz/work/<target>/ (not in git). A crash
# lands in testing/fuzz/artifacts/<target>/; reproduce it with
# `cargo +nightly fuzz run <target> <file>`, then follow README.md
# ("When a target fails"). The last lines of each run, with libFuzzer's
# final stats (executions), are kept in testing/fuzz/work/<target>.log.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ "${#targets[@]}" = 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

if ! cargo fuzz --help >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# Debug assertions and overflow checks on (-a): an overflow is a finding.
echo "== building the targets"
cargo +nightly fuzz build -a

status=0
for target in "${targets[@]}"; do
    echo "== $target (${seconds} s)"
    mkdir -p "work/$target" "artifacts/$target"
    # Dictionaries help the text formats reach their keys.
    dict=()
    if [ -f "dicts/$target.dict" ]; then
        dict=("-dict=dicts/$target.dict")
    fi
    if cargo +nightly fuzz run -a "$target" "work/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
        -timeout=10 "${dict[@]}" >"work/$target.log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done ' "work/$target.log" || true
    else
        status=1
        echo "!! $target failed; see testing/fuzz/work/$target.log and testing/fuzz/artifacts/$target/"
        tail -n 40 "work/$target.log"
    fi
done
exit "$status"
