#!/usr/bin/env bash
# Instructions per packet through the pipeline, counted by valgrind's callgrind: the same on
# every run, so a regression shows on a machine too noisy for cycles. For each kind of packet,
# pipeline/examples/packet_cost runs PACKETS and 2 x PACKETS of it (after the same set-up);
# the difference in instructions of its measured loop, over PACKETS, is the cost per packet.
# With CACHE_SIM=1, also the simulated L1 and last-level data misses per packet.
#
#   scripts/instructions.sh            # FLOWS=10000 PACKETS=20000
set -euo pipefail
cd "$(dirname "$0")/.."

FLOWS=${FLOWS:-10000}
PACKETS=${PACKETS:-20000}
CACHE_SIM=${CACHE_SIM:-0}
TARGET_DIR=${CARGO_TARGET_DIR:-target}

command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
cargo build --release -q -p pipeline --example packet_cost --example shaper_cost
example="$TARGET_DIR/release/examples/packet_cost"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Totals of the measured loop: "Ir D1mr D1mw DLmr DLmw" (the misses only with the cache sim).
count() {
    local out="$work/cg.$1.$2.$3.$4"
    local sim=()
    [[ $CACHE_SIM == 1 ]] && sim=(--cache-sim=yes)
    valgrind --tool=callgrind "${sim[@]}" --toggle-collect='*packet_cost::measure*' \
        --callgrind-out-file="$out" "$example" "$@" >/dev/null 2>&1
    # The "totals:" line holds the events in the order the "events:" line names them.
    awk '/^events:/ { for (i = 2; i <= NF; i++) name[i - 1] = $i }
         /^totals:/ { for (i = 2; i <= NF; i++) v[name[i - 1]] = $i }
         END { printf "%d %d %d %d %d\n", v["Ir"], v["D1mr"], v["D1mw"], v["DLmr"], v["DLmw"] }' "$out"
}

# Per packet of one kind: (count at 2N - count at N) / (packets of that kind between them).
per_packet() {
    local kind=$1 every=$2 extra=$3
    read -r -a one <<<"$(count "$FLOWS" "$PACKETS" "$kind" "$every")"
    read -r -a two <<<"$(count "$FLOWS" $((2 * PACKETS)) "$kind" "$every")"
    awk -v n="$extra" -v a="${one[*]}" -v b="${two[*]}" 'BEGIN {
        split(a, x, " "); split(b, y, " ");
        printf "%10.0f", (y[1] - x[1]) / n;
        for (i = 2; i <= 5; i++) printf " %8.2f", (y[i] - x[i]) / n;
        printf "\n" }'
}

echo "pipeline instructions per packet (callgrind), $FLOWS established flows, $PACKETS vs $((2 * PACKETS)) packets"
printf '%-46s %10s %8s %8s %8s %8s\n' "packet" "instr" "D1 rd" "D1 wr" "LL rd" "LL wr"
printf '%-46s %s\n' "established NAT44+SPI (UDP, out and reply)" "$(per_packet syn 0 "$PACKETS")"
printf '%-46s %s\n' "established, QoS and traffic meter on" "$(per_packet features 0 "$PACKETS")"
printf '%-46s %s\n' "established IPv6 through the firewall (UDP)" "$(per_packet ipv6 0 "$PACKETS")"
printf '%-46s %s\n' "new UDP flow through masquerade" "$(per_packet new 1 "$PACKETS")"
printf "%-46s %s\n" "spoofed SYN at a forward, answered by cookie" "$(per_packet syn 1 "$PACKETS")"
printf '%-46s %s\n' "another worker's packet, handed off (decision)" "$(per_packet handoff 1 "$PACKETS")"
printf '%-46s %s\n' "established, two uplinks (weights 2:1)" "$(per_packet uplinks 0 "$PACKETS")"
printf '%-46s %s\n' "new UDP flow, two uplinks (the choice)" "$(per_packet uplinks-new 1 "$PACKETS")"
# The shaper's queueing alone (pipeline::features::shaper, as the worker holds it per WAN link): a
# saturated link, 1,000 hosts with a flow each, 64-byte packets in and out in bursts of 32;
# then the same offered to a link ten times faster, where each leaves at once.
shaper_count() {
    local out="$work/cg.shaper.$1.${2:-}"
    local sim=()
    [[ $CACHE_SIM == 1 ]] && sim=(--cache-sim=yes)
    valgrind --tool=callgrind "${sim[@]}" --toggle-collect='*shaper_cost::measure*' \
        --callgrind-out-file="$out" "$TARGET_DIR/release/examples/shaper_cost" 1000 "$@" >/dev/null 2>&1
    awk '/^totals:/ { print $2 }' "$out"
}
shaper_one=$(shaper_count "$((10 * PACKETS))")
shaper_two=$(shaper_count "$((20 * PACKETS))")
printf '%-46s %10.0f\n' "shaper enqueue + dequeue (1,000 hosts)" "$(((shaper_two - shaper_one) / (10 * PACKETS)))"
shaper_one=$(shaper_count "$((10 * PACKETS))" idle)
shaper_two=$(shaper_count "$((20 * PACKETS))" idle)
printf '%-46s %10.0f\n' "shaper, link below its rate (sent at once)" "$(((shaper_two - shaper_one) / (10 * PACKETS)))"
[[ $CACHE_SIM == 1 ]] || echo "(misses: run with CACHE_SIM=1)"
