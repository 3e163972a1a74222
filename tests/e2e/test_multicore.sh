#!/usr/bin/env bash
# Two workers on net_af_packet with two queue pairs per port. The kernel's fanout spreads
# flows over the queues at random, so replies to masqueraded flows often land on the worker
# that does not own them: they must be handed over, and every flow must still be translated.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
# This box may have two CPUs: the main lcore and one worker share CPU 0.
sed -e 's/^listen = .*/listen = "127.0.0.1:19104"/' \
    -e 's/^file_prefix = .*/file_prefix = "gateway-e2e"/' \
    -e 's/^lcores = \[1\]/lcores = [1, 2]/' \
    -e 's/^extra_args = \[\]/extra_args = []\ncpus = [0, 1, 0]/' \
    -e 's/iface=gwl-lan\([,"]\)/iface=gwl-lan,qpairs=2\1/' \
    -e 's/iface=gwl-wan\([,"]\)/iface=gwl-wan,qpairs=2\1/' \
    "$ROOT/configs/lab.toml" >"$WORK/gateway.toml"
grep -q 'lcores = \[1, 2\]' "$WORK/gateway.toml" || fail "test config lacks two workers"
METRICS=http://127.0.0.1:19104/metrics
start_gateway "$WORK/gateway.toml"
grep -q "rx_queues=2" "$WORK/gateway.log" || fail "ports did not start with two queues"
# af_packet has no rte_flow: the gateway must try, say so, and fall back to the handoff rings.
grep -q "rte_flow steering refused" "$WORK/gateway.log" \
    || fail "no rte_flow steering attempt was logged for the masqueraded port"
pass "rte_flow steering of NAT replies was tried and refused by af_packet; handoff takes over"

read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -P 8) || fail "8 streams through masquerade"
[[ $peer == 10.0.0.1 ]] || fail "the WAN host saw $peer, not 10.0.0.1"
pass "8 parallel streams LAN -> WAN through masquerade on 2 workers: $gbps Gbit/s"
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -P 8 -R) || fail "8 streams -R"
pass "8 parallel streams WAN -> LAN (-R) through masquerade: $gbps Gbit/s"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -P 8) || fail "8 streams via the forward"
[[ $peer == 10.0.0.2 ]] || fail "the LAN host saw $peer through the forward"
pass "8 parallel streams through the port forward: $gbps Gbit/s"

sent=$(metric gateway_worker_handoffs_sent_total)
received=$(metric gateway_worker_handoffs_received_total)
(( sent > 0 )) || fail "no packet was handed off between workers"
(( received > 0 )) || fail "handoffs were sent but none received"
pass "handoffs counted: $sent sent, $received received"
for worker in 0 1; do
    rx=$(metric "gateway_worker_rx_packets_total{worker=\"$worker\"}")
    (( rx > 0 )) || fail "worker $worker received nothing"
done
pass "both workers received traffic from their queues"
fast=$(metric gateway_worker_fast_path_packets_total)
tx=$(metric gateway_worker_tx_packets_total)
# TCP streams are established flows: nearly all of their packets take the fast path.
(( fast * 2 > tx )) || fail "only $fast of $tx transmitted packets took the fast path"
pass "the fast path carried $fast of the $tx packets transmitted"
ring_full=$(metric 'gateway_dropped_packets_total{reason="handoff_ring_full"')
echo "info: handoff_ring_full drops $ring_full"
assert_no_conntrack_invalid
stop_gateway
