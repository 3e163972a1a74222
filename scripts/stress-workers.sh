#!/usr/bin/env bash
# The multi-worker stress run (make stress-workers; not part of make test, it takes minutes):
#   1. conformance-style TCP exchanges (scripts/stress/tcp_exchanges.py: short connections,
#      either end closing first, resets from either end, simultaneous close, half close,
#      zero windows and their probes), with 1% of TCP dropped at each host's input so that
#      retransmissions, SACK and duplicate ACKs happen, through the lab gateway on
#      STRESS_WORKERS (default "2 4") workers, each port on af_packet with as many queue pairs
#      as workers: half from the LAN through NAT to the WAN host, half from the WAN host to
#      the LAN host through the port forward. STRESS_CONNECTIONS (default 10000) per count.
#      Every packet the flow tracker refuses is counted, by reason and worker;
#   2. the two-worker pass of the e2e tests STRESS_E2E_ROUNDS times in a row (default 5;
#      0 skips it).
# Fails when any conntrack_invalid was counted, an exchange failed, or an e2e round failed.
set -euo pipefail
source "$(dirname "$0")/../tests/e2e/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap 'cleanup_stress' EXIT
cleanup_stress() {
    for ns in gwlab-lan gwlab-wan; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    done
    cleanup
}

STRESS_WORKERS=${STRESS_WORKERS:-2 4}
STRESS_CONNECTIONS=${STRESS_CONNECTIONS:-10000}
STRESS_CONCURRENCY=${STRESS_CONCURRENCY:-24}
STRESS_E2E_ROUNDS=${STRESS_E2E_ROUNDS:-5}
EXCHANGES=$ROOT/scripts/stress/tcp_exchanges.py
METRICS=http://127.0.0.1:19150/metrics
verdict=0

# stress_config WORKERS: configs/lab.toml on WORKERS workers, with per-host limits wide
# enough for one host's thousands of connections in TIME_WAIT.
stress_config() {
    local workers=$1 lcores cpus i
    lcores=$(seq -s ', ' 1 "$workers")
    cpus=0
    for ((i = 0; i < workers; i++)); do cpus+=", $(((i + 1) % 2))"; done
    sed -e "s/^listen = .*/listen = \"127.0.0.1:19150\"/" -e 's/^file_prefix = .*/file_prefix = "gateway-stress"/' \
        -e "s/^lcores = \[1\]/lcores = [$lcores]/" \
        -e "s/^\(device = \"net_af_packet[^\"]*\)\"/\1,qpairs=$workers\"/" \
        -e 's/^host_flows = .*/host_flows = 65536/' -e 's/^host_half_open = .*/host_half_open = 8192/' \
        -e 's/^host_ports = .*/host_ports = 60000/' \
        -e "s/^\[eal\]$/[eal]\ncpus = [$cpus]/" "$ROOT/configs/lab.toml"
}

# lossy NS: 1% of the TCP segments arriving at host NS dropped, so that peers retransmit.
# Never a reset: nothing retransmits one, so a lost reset leaves its peer open until it times
# out, and the segment it then sends meets a flow the gateway has (rightly) ended.
lossy() {
    ip netns exec "$1" nft -f - <<'NFT'
table inet stress_loss {
    chain input {
        type filter hook input priority 0;
        meta l4proto tcp tcp flags & rst == 0 numgen random mod 100 < 1 counter drop
    }
}
NFT
}

# lost NS: how many TCP segments the loss rule dropped at host NS.
lost() {
    ip netns exec "$1" nft list table inet stress_loss | awk '/counter packets/ { for (i = 1; i < NF; i++) if ($i == "packets") print $(i + 1) }'
}

# invalid_report: the conntrack_invalid drops by reason and worker, the stale segments, and
# every other drop reason that counted anything.
invalid_report() {
    curl -sf "$METRICS" | awk '
        /^gateway_conntrack_invalid_packets_total/ && $NF != 0 { print "  invalid: " $0; invalid += $NF }
        /^gateway_dropped_packets_total/ && $NF != 0 { print "  dropped: " $0 }
        index($0, "gateway_conntrack_stale_segments_total{") == 1 { stale += $NF }
        index($0, "gateway_worker_handoffs_sent_total{") == 1 { handoffs += $NF }
        END { printf "  total invalid %d, stale segments passed %d, packets handed between workers %d\n", invalid, stale, handoffs }'
}

for workers in $STRESS_WORKERS; do
    echo "== TCP exchanges on $workers workers ($STRESS_CONNECTIONS connections)"
    "$ROOT/scripts/lab.sh" up >/dev/null
    stress_config "$workers" >"$WORK/stress.toml"
    grep -q "qpairs=$workers" "$WORK/stress.toml" || fail "stress_config: no af_packet device to widen"
    lossy gwlab-lan
    lossy gwlab-wan
    start_gateway "$WORK/stress.toml"
    wan python3 "$EXCHANGES" serve 7000 >"$WORK/wan-server.log" 2>&1 &
    lan python3 "$EXCHANGES" serve 5201 >"$WORK/lan-server.log" 2>&1 &
    poll_until 20 listening gwlab-wan 7000 || fail "the WAN host's server did not listen: $(cat "$WORK/wan-server.log")"
    poll_until 20 listening gwlab-lan 5201 || fail "the LAN host's server did not listen: $(cat "$WORK/lan-server.log")"
    half=$((STRESS_CONNECTIONS / 2))
    lan python3 "$EXCHANGES" run 10.0.0.2 7000 "$half" "$STRESS_CONCURRENCY" >"$WORK/outbound.json" &
    outbound=$!
    wan python3 "$EXCHANGES" run 10.0.0.1 5201 "$((STRESS_CONNECTIONS - half))" "$STRESS_CONCURRENCY" >"$WORK/inbound.json"
    wait "$outbound" || true
    echo "  LAN -> WAN through NAT: $(cat "$WORK/outbound.json")"
    echo "  WAN -> LAN by the forward: $(cat "$WORK/inbound.json")"
    echo "  segments the hosts' loss rule dropped: LAN host $(lost gwlab-lan), WAN host $(lost gwlab-wan)"
    report=$(invalid_report)
    echo "$report"
    failures=$(cat "$WORK/outbound.json" "$WORK/inbound.json" | python3 -c 'import json, sys; print(sum(json.loads(line)["failures"] for line in sys.stdin))')
    grep -q "total invalid 0," <<<"$report" || verdict=1
    ((failures == 0)) || verdict=1
    stop_gateway
    for ns in gwlab-lan gwlab-wan; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    done
    "$ROOT/scripts/lab.sh" down >/dev/null
done

if ((STRESS_E2E_ROUNDS > 0)); then
    echo "== the two-worker e2e pass, $STRESS_E2E_ROUNDS rounds"
    E2E_PASS=two E2E_REPEAT=$STRESS_E2E_ROUNDS "$ROOT/tests/e2e/run.sh" || verdict=1
fi
((verdict == 0)) && echo "stress-workers: no conntrack_invalid, no failed exchange" || echo "stress-workers: FAILED" >&2
exit "$verdict"
