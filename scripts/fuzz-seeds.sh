#!/usr/bin/env bash
# Seeds the fuzz corpus from the end-to-end lab: runs e2e tests (default: test_router.sh, for
# ICMP errors, echo, fragments and ARP, test_content.sh, for DNS, TLS and HTTP, and
# test_nat.sh, for TCP through masquerade and a port forward) with a capture in the lab
# hosts (both directions of the gateway's veths), and converts the frames into seed files
# under fuzz/seeds/<target>/ (scripts/fuzz-seeds.py), a few dozen per target at most. The config target's seeds are configs/*.toml
# without their comments; the pppoe_client target's are written by scripts/fuzz-seeds.py pppoe
# (scripted access concentrator sessions, no capture). Run as root; each test holds the e2e
# lock (/tmp/e2e.lock) while it runs, as every e2e test must.
#
#   GATEWAY=path/to/gateway scripts/fuzz-seeds.sh [tests/e2e/test_x.sh ...]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GATEWAY=${GATEWAY:-${CARGO_TARGET_DIR:-$ROOT/target}/release/gateway}
[[ -x $GATEWAY ]] || { echo "fuzz-seeds: no gateway at $GATEWAY (build it, or set GATEWAY)" >&2; exit 1; }
tests=("$@")
((${#tests[@]})) || tests=("$ROOT/tests/e2e/test_router.sh" "$ROOT/tests/e2e/test_content.sh" "$ROOT/tests/e2e/test_nat.sh")
SEEDS=$ROOT/fuzz/seeds
WORK=$(mktemp -d /tmp/fuzz-seeds.XXXXXX)
# FUZZ_SEEDS_KEEP=1 keeps the captures and test logs.
[[ ${FUZZ_SEEDS_KEEP:-} == 1 ]] && echo "fuzz-seeds: captures in $WORK" || trap 'rm -rf "$WORK"' EXIT

for test in "${tests[@]}"; do
    name=$(basename "$test" .sh)
    echo "fuzz-seeds: capturing $name"
    # shellcheck disable=SC2016 # expanded by the inner shell
    flock /tmp/e2e.lock env GATEWAY="$GATEWAY" ROOT="$ROOT" TEST="$test" OUT="$WORK/$name.pcap" bash -c '
        # No veths left over from an earlier run: the capture must bind to the test'"'"'s own.
        "$ROOT/scripts/lab.sh" down >/dev/null 2>&1 || true
        bash "$TEST" >"$OUT.log" 2>&1 &
        test_pid=$!
        # The test brings the lab up itself: capture in its hosts as soon as they exist.
        for _ in $(seq 1 100); do
            ip -n gwlab-lan link show eth0 >/dev/null 2>&1 && ip -n gwlab-wan link show eth0 >/dev/null 2>&1 && break
            sleep 0.1
        done
        ip netns exec gwlab-lan python3 "$ROOT/scripts/fuzz-seeds.py" capture "$OUT.lan" eth0 &
        lan_pid=$!
        ip netns exec gwlab-wan python3 "$ROOT/scripts/fuzz-seeds.py" capture "$OUT.wan" eth0 &
        wan_pid=$!
        status=0
        wait "$test_pid" || status=$?
        kill -TERM "$lan_pid" "$wan_pid" 2>/dev/null || true
        wait "$lan_pid" "$wan_pid" || true
        exit "$status"
    ' || { tail -n 20 "$WORK/$name.pcap.log" >&2; echo "fuzz-seeds: $name failed (frames kept)" >&2; }
done
python3 "$ROOT/scripts/fuzz-seeds.py" convert "$SEEDS" "$WORK"/*.pcap.*.eth0
python3 "$ROOT/scripts/fuzz-seeds.py" pppoe "$SEEDS"

mkdir -p "$SEEDS/config"
for config in "$ROOT"/configs/*.toml; do
    grep -v '^\s*#' "$config" | sed 's/\s\+#.*$//' | grep -v '^\s*$' >"$SEEDS/config/$(basename "$config")"
done
for target in "$SEEDS"/*/; do
    echo "fuzz-seeds: $(basename "$target"): $(find "$target" -type f | wc -l) seeds, $(du -sh "$target" | cut -f1)"
done
