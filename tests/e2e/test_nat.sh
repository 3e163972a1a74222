#!/usr/bin/env bash
# The gateway as a home router with configs/lab.toml: masquerade, a port forward, the
# stateful firewall, measured with iperf3 and checked in the metrics.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
lab_config 19101 >"$WORK/gateway.toml"
start_gateway "$WORK/gateway.toml"
METRICS=http://127.0.0.1:19101/metrics

read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2) || fail "iperf3 through masquerade"
[[ $peer == 10.0.0.1 ]] || fail "the WAN host saw $peer, not the masquerade address 10.0.0.1"
pass "LAN -> WAN through masquerade: the WAN host sees 10.0.0.1, $gbps Gbit/s"
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -R)
pass "WAN -> LAN (iperf3 -R) through masquerade: $gbps Gbit/s"

read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1)
[[ $peer == 10.0.0.2 ]] || fail "the LAN host saw $peer, not the WAN host 10.0.0.2"
pass "WAN -> LAN through the port forward 10.0.0.1:5201 -> 192.168.10.2:5201: $gbps Gbit/s"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -R)
pass "LAN -> WAN through the port forward (iperf3 -R): $gbps Gbit/s"

expect_output "ping through masquerade" " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 10.0.0.2

# Unsolicited: the WAN host routes to the LAN subnet through the gateway, which must refuse.
before=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
wan ip route replace 192.168.10.0/24 via 10.0.0.1
if wan timeout 5 bash -c 'exec 3<>/dev/tcp/192.168.10.2/22' 2>/dev/null; then
    fail "an unsolicited WAN connection to a LAN host got through"
fi
if wan timeout 5 bash -c 'exec 3<>/dev/tcp/10.0.0.1/2222' 2>/dev/null; then
    fail "an unsolicited WAN connection to the gateway got through"
fi
after=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
(( after > before )) || fail "firewall_drop did not count the unsolicited SYNs ($before -> $after)"
pass "unsolicited WAN traffic is dropped and counted as firewall_drop ($before -> $after)"

setups=$(metric 'gateway_conntrack_flow_setups_total')
(( setups >= 5 )) || fail "conntrack counted $setups flow setups for 4 iperf3 runs and a ping"
entries=$(metric 'gateway_conntrack_entries')
(( entries >= 1 )) || fail "no conntrack entries after the runs"
in_use=$(metric 'gateway_nat_ports_in_use')
(( in_use >= 1 )) || fail "no NAT ports in use after masqueraded runs"
pass "metrics agree: $setups flows set up, $entries tracked, $in_use NAT ports bound"
# The port forward decided the WAN host's connections (no rule matches them): each iperf3
# run through it opened two at least (control and data), counted by what it forwards.
forward='forward="tcp 5201 -> 192.168.10.2:5201"'
forwarded=$(metric "gateway_port_forward_hits_total{$forward")
((forwarded >= 4)) || fail "gateway_port_forward_hits_total{$forward} is $forwarded after two iperf3 runs through it"
last=$(metric "gateway_port_forward_last_match_timestamp_seconds{$forward")
now=$(date +%s)
((last > now - 600 && last <= now)) || fail "the forward's last match is $last, not within the last 10 minutes of $now"
pass "the port forward counts the connections it let in ($forwarded) and when it last did"
assert_no_conntrack_invalid

stop_gateway
pass "gateway stops cleanly"
if ls /dev/hugepages 2>/dev/null | grep -q "gateway-e2e"; then
    fail "hugepage files left behind: $(ls /dev/hugepages | grep gateway-e2e | head -3)"
fi
"$ROOT/scripts/lab.sh" down
if ip netns list | grep -q "^gwlab-" || ip -br link | grep -q "^gwl-"; then
    fail "namespaces or veths left behind after lab down"
fi
pass "nothing left behind: no hugepage file, namespace or veth"
