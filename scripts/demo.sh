#!/usr/bin/env bash
# make demo: the lab up, the gateway on it with configs/lab.toml, traffic through NAT and a
# port forward, a short report, the lab down.
#   scripts/demo.sh [--keep]   --keep leaves the lab and the gateway running
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/lablib.sh"
GATEWAY=$ROOT/target/release/gateway
CONFIG=${CONFIG:-$ROOT/configs/lab.toml}
METRICS=http://127.0.0.1:9469/metrics
KEEP=0
[[ ${1:-} == --keep ]] && KEEP=1
WORK=$(mktemp -d /tmp/gateway-demo.XXXXXX)
LOG=$WORK/gateway.log
PID=

teardown() {
    if ((KEEP)); then
        echo "lab kept: gateway pid $PID, log $LOG, metrics $METRICS"
        echo "stop with: kill $PID; scripts/lab.sh down"
        return
    fi
    if [[ -n $PID ]]; then
        kill -TERM "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    fi
    "$ROOT/scripts/lab.sh" down
    rm -rf "$WORK"
}
trap teardown EXIT

"$ROOT/scripts/lab.sh" up
"$GATEWAY" run --config "$CONFIG" >"$LOG" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
    grep -q "gateway running" "$LOG" && break
    kill -0 "$PID" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.2
done

echo "== ping LAN host -> WAN host through the gateway"
ip netns exec gwlab-lan ping -c 5 -i 0.2 10.0.0.2 | tail -n 2
rows=()
run() { # label server_ns client_ns address [args]
    local label=$1
    shift
    echo "== iperf3 10 s: $label"
    local peer gbps
    read -r peer gbps < <(iperf3_run "$@" -t 10)
    rows+=("$(printf '%-44s %8s   %s' "$label" "$gbps" "$peer")")
}
run "LAN -> WAN, NAT (upload)" gwlab-wan gwlab-lan 10.0.0.2
run "WAN -> LAN, NAT (download, -R)" gwlab-wan gwlab-lan 10.0.0.2 -R
run "WAN -> LAN, port forward :5201" gwlab-lan gwlab-wan 10.0.0.1
run "LAN -> WAN, port forward :5201 (-R)" gwlab-lan gwlab-wan 10.0.0.1 -R

echo
printf '%-44s %8s   %s\n' "path (TCP, iperf3 10 s)" "Gbit/s" "server saw client as"
printf '%s\n' "${rows[@]}"
echo
echo "from $METRICS:"
printf '  %-40s %s\n' \
    "conntrack flows set up" "$(metric gateway_conntrack_flow_setups_total)" \
    "conntrack flows now" "$(metric gateway_conntrack_entries)" \
    "NAT ports in use" "$(metric gateway_nat_ports_in_use)" \
    "packets received by the ports" "$(metric gateway_port_rx_packets_total)" \
    "packets dropped (all reasons)" "$(metric gateway_dropped_packets_total)" \
    "NIC missed (rx ring full)" "$(metric gateway_port_rx_missed_packets_total)"
