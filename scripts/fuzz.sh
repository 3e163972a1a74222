#!/usr/bin/env bash
# The coverage-guided fuzz targets in fuzz/ (cargo-fuzz, libFuzzer, no sanitizer: runs on the
# stable toolchain).
#
#   scripts/fuzz.sh smoke [TARGET...]   each target for FUZZ_SMOKE_SECONDS (default 3) from its
#                                       committed seeds, after replaying fuzz/regressions/
#   scripts/fuzz.sh run [TARGET...]     each target for FUZZ_SECONDS (default 300), growing
#                                       fuzz/corpus/TARGET (not committed)
#   scripts/fuzz.sh list                the targets
#
# FUZZ_ARGS adds libFuzzer flags (e.g. FUZZ_ARGS=-runs=10000000), FUZZ_BUILD_ARGS cargo-fuzz
# build flags (cargo-fuzz builds optimised with debug assertions and overflow checks; -O drops
# them, as the gateway's release build does). A crash stops the run, leaves its input in
# fuzz/artifacts/TARGET/ and makes this script fail. Fuzzing runs at nice 19.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FUZZ=$ROOT/fuzz
mode=${1:-}
shift || true

targets=(pipeline_flows icmp_error content control_builders config pppoe_client ipv6_local session_sync port_mapping)
if (($#)); then targets=("$@"); fi

# cargo-fuzz builds into fuzz/target, its own workspace's target dir.
unset CARGO_TARGET_DIR
toolchain=()
if command -v rustup >/dev/null; then toolchain=(+stable); fi
fuzz() { (cd "$FUZZ" && cargo "${toolchain[@]}" fuzz "$@"); }
binary() { echo "$FUZZ/target/x86_64-unknown-linux-gnu/release/$1"; }
# Inputs longer than this only slow a target down: its harness stops reading before.
max_len() {
    case $1 in
    pipeline_flows) echo 1024 ;;
    config) echo 2048 ;;
    *) echo 4096 ;;
    esac
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; run make deps (cargo install --locked cargo-fuzz)" >&2
    exit 1
fi

case $mode in
list)
    printf '%s\n' "${targets[@]}"
    ;;
smoke)
    seconds=${FUZZ_SMOKE_SECONDS:-3}
    fuzz build -s none ${FUZZ_BUILD_ARGS:-}
    for target in "${targets[@]}"; do
        # Crashes found earlier, fixed since: each must still pass.
        regressions=("$FUZZ/regressions/$target"/*)
        if [[ -e ${regressions[0]} ]]; then
            "$(binary "$target")" "${regressions[@]}" >/dev/null 2>"$FUZZ/target/smoke-$target.log" || {
                tail -n 30 "$FUZZ/target/smoke-$target.log" >&2
                echo "fuzz-smoke: $target: a regression input fails again" >&2
                exit 1
            }
        fi
        corpus=$(mktemp -d)
        trap 'rm -rf "$corpus"' EXIT
        mkdir -p "$FUZZ/artifacts/$target"
        if ! nice -n 19 "$(binary "$target")" -max_total_time="$seconds" -print_final_stats=1 \
            -max_len="$(max_len "$target")" -artifact_prefix="$FUZZ/artifacts/$target/" ${FUZZ_ARGS:-} \
            "$corpus" "$FUZZ/seeds/$target" >"$FUZZ/target/smoke-$target.log" 2>&1; then
            tail -n 40 "$FUZZ/target/smoke-$target.log" >&2
            echo "fuzz-smoke: $target crashed; input in fuzz/artifacts/$target/" >&2
            exit 1
        fi
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$FUZZ/target/smoke-$target.log")
        echo "fuzz-smoke: $target: ${runs:-?} runs in ${seconds} s, no crash"
        rm -rf "$corpus"
        trap - EXIT
    done
    ;;
run)
    seconds=${FUZZ_SECONDS:-300}
    fuzz build -s none ${FUZZ_BUILD_ARGS:-}
    for target in "${targets[@]}"; do
        mkdir -p "$FUZZ/corpus/$target" "$FUZZ/artifacts/$target"
        log=$FUZZ/target/fuzz-$target.log
        echo "fuzz: $target for ${seconds} s (log: $log)"
        if ! nice -n 19 "$(binary "$target")" -max_total_time="$seconds" -print_final_stats=1 \
            -max_len="$(max_len "$target")" -artifact_prefix="$FUZZ/artifacts/$target/" ${FUZZ_ARGS:-} \
            "$FUZZ/corpus/$target" "$FUZZ/seeds/$target" >"$log" 2>&1; then
            tail -n 40 "$log" >&2
            echo "fuzz: $target crashed; input in fuzz/artifacts/$target/" >&2
            exit 1
        fi
        grep -E '^#[0-9]+' "$log" | tail -n 1
        grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
    done
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
