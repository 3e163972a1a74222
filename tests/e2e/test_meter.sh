#!/usr/bin/env bash
# The traffic meter: per-LAN-host counts agree with what iperf3 moved and with the ports'
# own counters, on /hosts (JSON) and in Prometheus.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19107 >"$WORK/gateway.toml"
cat >>"$WORK/gateway.toml" <<'TOML'

[traffic_meter]
enabled = true
capacity = 1024
top_hosts = 5
named_hosts = ["192.168.10.2"]
TOML
METRICS=http://127.0.0.1:19107/metrics
start_gateway "$WORK/gateway.toml"

read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2) || fail "iperf3 upload"
sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_sent"]["bytes"])' "$WORK/client.json")
read -r _ gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -R) || fail "iperf3 download"
received=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bytes"])' "$WORK/client.json")

curl -sf http://127.0.0.1:19107/hosts >"$WORK/hosts.json" || fail "GET /hosts"
python3 - "$WORK/hosts.json" "$sent" "$received" <<'PY' || fail "the meter disagrees with iperf3"
import json, sys
hosts = {h["host"]: h for h in json.load(open(sys.argv[1]))["hosts"]}
sent, received = int(sys.argv[2]), int(sys.argv[3])
host = hosts.get("192.168.10.2")
assert host, f"192.168.10.2 missing from /hosts: {list(hosts)}"
# iperf3 counts TCP payload; the meter counts frames (headers add 3-6% at 1500 bytes).
for name, payload, metered in (("up", sent, host["up_bytes"]), ("down", received, host["down_bytes"])):
    ratio = metered / payload
    assert 1.0 <= ratio < 1.10, f"{name}: meter {metered} bytes vs iperf3 payload {payload} ({ratio:.3f})"
    print(f"ok: meter {name} {metered} bytes for {payload} iperf3 payload bytes ({ratio:.3f})")
PY

# Everything the LAN host sent entered the LAN port: the meter's up bytes match the port's
# receive counter, less the frames that are not forwarded (ARP, pings to the gateway).
port_rx=$(metric 'gateway_port_rx_bytes_total{port="lan"}')
up=$(metric 'gateway_meter_bytes_total{direction="up"}')
python3 -c 'import sys; up, rx = int(sys.argv[1]), int(sys.argv[2]); sys.exit(not (0.99 * rx <= up <= rx))' "$up" "$port_rx" \
    || fail "meter up bytes $up do not match the LAN port's rx bytes $port_rx"
pass "meter up bytes ($up) agree with the LAN port's rx bytes ($port_rx)"
named=$(metric 'gateway_meter_host_bytes_total{direction="up",host="192.168.10.2"}')
(( named == up )) || fail "Prometheus shows $named up bytes for 192.168.10.2, the totals $up"
pass "Prometheus has the named host's bytes"
stop_gateway
