#!/usr/bin/env bash
# make demo: the lab up, the gateway on it, traffic through it, a short report, the lab down.
#   scripts/demo.sh [--keep]   --keep leaves the lab and the gateway running
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GATEWAY=$ROOT/target/release/gateway
CONFIG=${CONFIG:-$ROOT/configs/lab.toml}
KEEP=0
[[ ${1:-} == --keep ]] && KEEP=1
LOG=$(mktemp /tmp/gateway-demo.XXXXXX.log)
PID=

teardown() {
    if ((KEEP)); then
        echo "lab kept: gateway pid $PID, log $LOG; stop with: kill $PID; scripts/lab.sh down"
        return
    fi
    [[ -n $PID ]] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    "$ROOT/scripts/lab.sh" down
}
trap teardown EXIT

"$ROOT/scripts/lab.sh" up
# Until NAT lands, the WAN host routes back to the LAN subnet through the gateway.
ip netns exec gwlab-wan ip route replace 192.168.10.0/24 via 10.0.0.1
"$GATEWAY" run --config "$CONFIG" >"$LOG" 2>&1 &
PID=$!
for _ in $(seq 1 100); do
    grep -q "gateway running" "$LOG" && break
    kill -0 "$PID" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.2
done

echo "== ping LAN host -> WAN host through the gateway"
ip netns exec gwlab-lan ping -c 5 -i 0.2 10.0.0.2 | tail -n 2

ip netns exec gwlab-wan iperf3 -s -D -1 -p 5201 >/dev/null
sleep 0.5
echo "== iperf3 TCP 10 s, LAN host -> WAN host"
up=$(ip netns exec gwlab-lan iperf3 -c 10.0.0.2 -p 5201 -t 10 -J | python3 -c \
    'import json,sys; r=json.load(sys.stdin)["end"]; print("%.2f" % (r["sum_received"]["bits_per_second"]/1e9))')
ip netns exec gwlab-wan iperf3 -s -D -1 -p 5201 >/dev/null
sleep 0.5
echo "== iperf3 TCP 10 s, WAN host -> LAN host (-R)"
down=$(ip netns exec gwlab-lan iperf3 -c 10.0.0.2 -p 5201 -t 10 -R -J | python3 -c \
    'import json,sys; r=json.load(sys.stdin)["end"]; print("%.2f" % (r["sum_received"]["bits_per_second"]/1e9))')

kill -TERM "$PID"; wait "$PID" || true
PID=
echo
printf '%-32s %10s\n' "path" "Gbit/s"
printf '%-32s %10s\n' "LAN -> WAN (routed, TCP)" "$up"
printf '%-32s %10s\n' "WAN -> LAN (routed, TCP, -R)" "$down"
echo
echo "gateway totals:"
grep -E "port totals|worker totals|control totals" "$LOG" | sed -E 's/^.*INFO [a-z_:]+: //'
rm -f "$LOG"
