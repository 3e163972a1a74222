#!/usr/bin/env bash
# Metrics as an operator gets them: a real Prometheus scrapes the running gateway, its query
# API returns the series with values that match the traffic, and promtool accepts the format.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PROM_PID=
stop_prometheus() {
    [[ -n $PROM_PID ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null || true
}
trap 'stop_prometheus; cleanup' EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
wan ip route replace 192.168.10.0/24 via 10.0.0.1
lab_config 19100 >"$WORK/gateway.toml"
start_gateway "$WORK/gateway.toml"

lan ping -c 20 -i 0.05 -W 1 10.0.0.2 >/dev/null || fail "ping through the gateway"

curl -sf http://127.0.0.1:19100/metrics >"$WORK/metrics.txt" || fail "GET /metrics"
promtool check metrics <"$WORK/metrics.txt" >"$WORK/promtool.txt" 2>&1 \
    || fail "promtool check metrics: $(cat "$WORK/promtool.txt")"
pass "promtool check metrics accepts the exposition"

cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: gateway
    static_configs:
      - targets: ["127.0.0.1:19100"]
YAML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address=127.0.0.1:19090 >"$WORK/prometheus.log" 2>&1 &
PROM_PID=$!

# query EXPR: prints the first sample's value, or nothing.
query() {
    curl -sf --get http://127.0.0.1:19090/api/v1/query --data-urlencode "query=$1" | python3 -c '
import json, sys
result = json.load(sys.stdin)["data"]["result"]
print(result[0]["value"][1] if result else "")'
}

value=
for _ in $(seq 1 60); do
    value=$(query 'gateway_port_rx_packets_total{port="lan"}' 2>/dev/null || true)
    [[ -n $value ]] && break
    sleep 0.5
done
[[ -n $value ]] || fail "Prometheus never scraped the gateway: $(tail -5 "$WORK/prometheus.log")"
(( value >= 20 )) || fail "lan rx packets $value < the 20 pings sent"
pass "Prometheus scrapes the gateway: lan rx packets = $value"

up=$(query 'up{job="gateway"}')
[[ $up == 1 ]] || fail "up{job=gateway} = $up"
forwarded=$(query 'sum(gateway_worker_tx_packets_total)')
(( forwarded >= 40 )) || fail "workers transmitted $forwarded < 40 (20 requests + 20 replies)"
pass "worker tx packets ($forwarded) cover both directions of the pings"
# Pings are ICMP, which the fast path leaves to the full path: exported, and zero here.
fast=$(query 'sum(gateway_worker_fast_path_packets_total)')
[[ $fast == 0 ]] || fail "gateway_worker_fast_path_packets_total = '$fast' after pings only"
pass "the fast-path counter is exported (0: pings take the full path)"
build=$(query 'gateway_build_info')
[[ $build == 1 ]] || fail "gateway_build_info missing"
reload=$(query 'gateway_config_last_reload_success')
[[ $reload == 1 ]] || fail "gateway_config_last_reload_success = $reload"
pass "build info and reload status are exported"

# Issue 22: the NIC's extended stats, the port's identity, the pool's use and the RX bursts,
# read by the control thread's port watch and exported.
good=$(query 'gateway_port_xstats_total{port="lan", stat="rx_good_packets"}')
[[ -n $good ]] && (( good >= 20 )) || fail "xstat rx_good_packets of lan = '$good', want >= 20 pings"
pass "the port's extended stats are exported: lan rx_good_packets = $good"
info=$(query 'gateway_port_info{port="lan", driver="net_af_packet"}')
[[ $info == 1 ]] || fail "gateway_port_info{port=lan, driver=net_af_packet} = '$info'"
# af_packet allocates at receive, so an idle lab may hold no buffer out of the pool.
in_use=$(query 'gateway_mempool_mbufs_in_use{pool="packets"}')
capacity=$(query 'gateway_mempool_mbufs{pool="packets"}')
configured=$(sed -n 's/^mbufs = \([0-9]*\).*/\1/p' "$WORK/gateway.toml")
[[ -n $in_use && $capacity == "$configured" ]] && (( in_use <= capacity )) \
    || fail "mempool in use '$in_use' of '$capacity' (mempool.mbufs = $configured)"
pass "port info and the pool's use ($in_use of $capacity buffers) are exported"
bursts=$(query 'sum(gateway_worker_rx_bursts_total)')
full=$(query 'sum(gateway_worker_rx_full_bursts_total)')
[[ -n $bursts && -n $full ]] && (( bursts >= 20 && full <= bursts )) \
    || fail "rx bursts '$bursts', full '$full': 40 packets came in bursts of at least one"
drops=$(query 'sum(gateway_port_rx_queue_drops_total)')
[[ $drops == 0 ]] || fail "queue drops = '$drops' after 20 pings"
pass "RX bursts ($bursts, $full full) and per-queue drops ($drops) are exported"

# The container's health check follows the config's metrics.listen.
"$GATEWAY" healthcheck --config "$WORK/gateway.toml" >"$WORK/health.txt" 2>&1 \
    || fail "gateway healthcheck on a running gateway: $(cat "$WORK/health.txt")"
lab_config 19199 >"$WORK/elsewhere.toml"
if "$GATEWAY" healthcheck --config "$WORK/elsewhere.toml" >"$WORK/health.txt" 2>&1; then
    fail "gateway healthcheck passed with nothing on 127.0.0.1:19199"
fi
grep -q "metrics.listen 127.0.0.1:19199" "$WORK/health.txt" \
    || fail "the failed health check does not name metrics.listen: $(cat "$WORK/health.txt")"
pass "gateway healthcheck: 0 for the running gateway, 1 naming metrics.listen where none listens"
