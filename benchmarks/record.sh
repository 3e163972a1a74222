#!/usr/bin/env bash
# `make bench-record`: runs `gateway bench --json` (with any arguments given here) and appends
# one line to benchmarks/history.jsonl: the bench's JSON object with, in front of its own
# fields, when (UTC), on which commit (and whether the tree had uncommitted changes), the TSC
# in GHz, the host (its name, and its CPU model and caches from benchmarks/host.py), and the
# arguments; then regenerates the performance tables of docs/performance.md and README.md from
# the file (benchmarks/table.py).
# A failed bench appends nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
GATEWAY=${GATEWAY:-target/release/gateway}
DEFAULT_HISTORY=benchmarks/history.jsonl
HISTORY=${HISTORY:-$DEFAULT_HISTORY}

output=$("$GATEWAY" bench --json "$@")
# The bench prints one JSON object on one line; anything else on stdout is not it.
json=$(printf '%s\n' "$output" | grep '^{' | tail -n 1)
if [[ -z $json ]]; then
    echo "bench-record: gateway bench printed no JSON" >&2
    exit 1
fi
tsc_hz=$(printf '%s' "$json" | grep -o '"tsc_hz":[0-9]*' | cut -d: -f2)
tsc_ghz=$(awk -v hz="$tsc_hz" 'BEGIN { printf "%.3f", hz / 1e9 }')
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=false
git diff --quiet HEAD 2>/dev/null || dirty=true
host=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)
cpu=$(python3 benchmarks/host.py)
escape() { local s=${1//\\/\\\\}; printf '%s' "${s//\"/\\\"}"; }
printf '{"date":"%s","commit":"%s","dirty":%s,"tsc_ghz":%s,"hostname":"%s","host":%s,"args":"%s",%s\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$commit" "$dirty" "$tsc_ghz" "$(escape "$host")" "$cpu" \
    "$(escape "$*")" "${json#\{}" >> "$HISTORY"
echo "bench-record: appended to $HISTORY" >&2
# The published tables come from the project's own history only.
if [[ $(realpath -m "$HISTORY") == $(realpath -m "$DEFAULT_HISTORY") ]]; then
    python3 benchmarks/table.py --write
fi
