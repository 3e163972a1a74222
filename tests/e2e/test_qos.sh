#!/usr/bin/env bash
# QoS's policer on the WAN links (test_shaper.sh has the shaper, the default): a UDP flood at twice the configured rate is held to the rate (±3%,
# measured on what the gateway passed), TCP still flows, and a priority class keeps its share
# while bulk traffic floods the link.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19109 >"$WORK/gateway.toml"
cat >>"$WORK/gateway.toml" <<'TOML'

[qos]
enabled = true
mode = "policer"
uplink_mbps = 200
downlink_mbps = 200
burst_ms = 20
[[qos.priority]]
protocol = "udp"
ports = "5202"
TOML
METRICS=http://127.0.0.1:19109/metrics
start_gateway "$WORK/gateway.toml"

passed() { metric "gateway_qos_bytes_total{class=\"$1\",link=\"uplink\",result=\"passed\"}"; }

# 1. A UDP flood at 400 Mbit/s for 5 s: what passes holds the 200 Mbit/s rate.
ip netns exec gwlab-wan iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
sleep 0.5
before=$(passed bulk)
start=$(date +%s.%N)
lan iperf3 -c 10.0.0.2 -p 5201 -u -b 400M -l 1400 -t 5 >/dev/null || fail "UDP flood"
end=$(date +%s.%N)
after=$(passed bulk)
python3 - "$before" "$after" "$start" "$end" <<'PY' || fail "the uplink rate was not held"
import sys
before, after, start, end = map(float, sys.argv[1:])
# The flood ran for 5 s of the measured interval; iperf3's start-up adds a little idle time.
rate = (after - before) * 8 / 5.0 / 1e6
print(f"ok: UDP flood at 400 Mbit/s held to {rate:.1f} Mbit/s of frames (configured 200)")
assert 194 <= rate <= 206, f"{rate:.1f} Mbit/s is not within 3% of 200"
PY
dropped=$(metric 'gateway_qos_bytes_total{class="bulk",link="uplink",result="dropped"}')
(( dropped > 0 )) || fail "the flood dropped nothing"

# 2. TCP through the policer still completes and stays under the rate. How much of the rate
# it gets depends on how bursty the hosts' TCP is (a policer keeps no queue; issue 20's
# shaper is the cure): 0.16-0.18 Gbit/s on this VM before, 0.04-0.05 on 2026-12-01 with the
# code of the day before as well, so only "moves data, under the rate" is asserted.
read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -P 4 -t 5) || fail "TCP through QoS"
python3 -c 'import sys; sys.exit(not (0.01 <= float(sys.argv[1]) <= 0.206))' "$gbps" \
    || fail "TCP through a 200 Mbit/s uplink measured $gbps Gbit/s"
echo "info: TCP through the 200 Mbit/s policer: $gbps Gbit/s"
pass "4 TCP streams through the 200 Mbit/s uplink: $gbps Gbit/s of goodput"

# 3. A priority stream (UDP to port 5202, 50 Mbit/s) keeps its rate under a bulk flood.
ip netns exec gwlab-wan iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
ip netns exec gwlab-wan iperf3 -s -1 -p 5202 -J >"$WORK/priority-server.json" 2>&1 &
sleep 0.5
lan iperf3 -c 10.0.0.2 -p 5201 -u -b 400M -l 1400 -t 6 >/dev/null &
FLOOD=$!
sleep 0.5
lan iperf3 -c 10.0.0.2 -p 5202 -u -b 50M -l 1200 -t 4 -J >"$WORK/priority.json" || fail "priority stream"
wait "$FLOOD" || true
sleep 0.5
python3 - "$WORK/priority.json" <<'PY' || fail "the priority stream lost its share"
import json, sys
summary = json.load(open(sys.argv[1]))["end"]["sum"]
lost = summary["lost_percent"]
print(f"ok: priority UDP stream at 50 Mbit/s under a 400 Mbit/s bulk flood lost {lost:.2f}%")
assert lost < 2.0, f"priority traffic lost {lost:.2f}%"
PY
bulk_dropped=$(metric 'gateway_qos_packets_total{class="bulk",link="uplink",result="dropped"}')
(( bulk_dropped > 0 )) || fail "bulk was not policed during the priority test"
pass "bulk took the drops ($bulk_dropped packets), priority kept its share"
stop_gateway
