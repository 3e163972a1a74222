#!/usr/bin/env bash
# An 802.3ad bond against an independent LACP partner: Open vSwitch in userspace (no kernel
# module), bonding the kernel side of two net_tap members with lacp=active, balance-tcp. The
# WAN host sits behind the OVS bridge, and a second uplink host on VLAN 30 behind an access
# port (the gateway's VLAN subinterface on the bond). Checks negotiation on both sides, NAT
# traffic over the bond, untagged and on the VLAN, an idle bond staying negotiated, and
# failover and rejoin of a member under iperf3.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

VLAN_NS=gwlab-wan30
trap 'stop_ovs; ip netns del $VLAN_NS 2>/dev/null || true; ip link del gwl-wan30 2>/dev/null || true; cleanup' EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
start_ovs

python3 - "$ROOT/configs/lab.toml" "$WORK/gateway.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'device = "net_af_packet1,iface=gwl-wan[^"]*"',
    'device = "net_bonding0"\n'
    'bond = { members = ["net_tap0,iface=gwb0", "net_tap1,iface=gwb1"], '
    'xmit_policy = "l34", lacp_rate = "fast" }', text)
text = text.replace('listen = "127.0.0.1:9469"', 'listen = "127.0.0.1:19106"')
text = text.replace('file_prefix = "gateway-lab"', 'file_prefix = "gateway-e2e"')
# A VLAN subinterface on the bond: a routed uplink in the WAN zone (not masqueraded).
text = text.replace("\n[[routes]]", '''
[[interfaces]]
name = "wan30"
parent = "wan"
vlan = 30
address = "172.30.0.1/24"
zone = "wan"

[[routes]]''', 1)
assert "net_bonding0" in text and "wan30" in text
open(sys.argv[2], "w").write(text)
PY
METRICS=http://127.0.0.1:19106/metrics
start_gateway "$WORK/gateway.toml"

# The taps exist once the gateway runs; OVS bonds their kernel side toward the WAN host.
for tap in gwb0 gwb1; do
    ethtool -K "$tap" tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
done
vsctl add-br gwbr -- set bridge gwbr datapath_type=netdev
vsctl add-bond gwbr gwbond gwb0 gwb1 lacp=active bond_mode=balance-tcp other_config:lacp-time=fast
vsctl add-port gwbr gwl-wan -- set port gwl-wan tag=1
# The bond trunks the untagged WAN (native VLAN 1) and VLAN 30.
vsctl set port gwbond vlan_mode=native-untagged tag=1 trunks=1,30
ip netns del "$VLAN_NS" 2>/dev/null || true
ip netns add "$VLAN_NS"
ip link add gwl-wan30 type veth peer name eth0 netns "$VLAN_NS"
ethtool -K gwl-wan30 tso off gso off gro off tx off rx off rxvlan off txvlan off >/dev/null 2>&1 || true
ip link set gwl-wan30 up
ip -n "$VLAN_NS" link set lo up
ip -n "$VLAN_NS" addr add 172.30.0.2/24 dev eth0
ip -n "$VLAN_NS" link set eth0 up
ip netns exec "$VLAN_NS" ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
ip -n "$VLAN_NS" route add 192.168.10.0/24 via 172.30.0.1
vsctl add-port gwbr gwl-wan30 -- set port gwl-wan30 tag=30
ip link set gwbr up

negotiated() {
    local partners
    partners=$(ovs-appctl lacp/show gwbond | grep -c "current attached" || true)
    [[ $partners == 2 ]] || return 1
    for member in net_tap0 net_tap1; do
        for flag in collecting distributing; do
            [[ $(metric "gateway_bond_member_lacp_${flag}{bond=\"wan\",member=\"$member\",side=\"actor\"}") == 1 ]] \
                || return 1
        done
    done
}
for _ in $(seq 1 60); do
    negotiated && break
    sleep 0.5
done
negotiated || fail "LACP did not negotiate: $(ovs-appctl lacp/show gwbond | head -30)"
# OVS's view of the gateway lags the gateway's own by up to an LACPDU or two.
partner_distributing() {
    ovs-appctl lacp/show gwbond | grep -q "partner state: activity aggregation synchronized collecting distributing"
}
for _ in $(seq 1 20); do
    partner_distributing && break
    sleep 0.5
done
partner_distributing || fail "OVS does not see the gateway collecting and distributing: $(ovs-appctl lacp/show gwbond | head -30)"
pass "LACP negotiated: OVS has both members current, the gateway collects and distributes on both"
[[ $(metric 'gateway_bond_active_members{bond="wan"}') == 2 ]] || fail "metrics do not show 2 active members"

read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -P 4) || fail "iperf3 across the bond"
[[ $peer == 10.0.0.1 ]] || fail "the WAN host saw $peer through the bond, not 10.0.0.1"
pass "iperf3 crosses the bond through NAT: $gbps Gbit/s"

# Hosts behind the partner find the gateway by themselves: their broadcast ARP crosses the
# bond (the bonding PMD drops multicast unless the bond is all-multicast).
wan ip neigh flush all
wan ping -c 2 -W 2 10.0.0.1 >/dev/null || fail "the WAN host, its ARP cache flushed, cannot reach the gateway over the bond"
ip netns exec "$VLAN_NS" ping -c 2 -W 2 172.30.0.1 >/dev/null \
    || fail "the VLAN 30 host cannot resolve and ping the gateway over the bond"
pass "hosts behind OVS resolve the gateway over the bond themselves, untagged and on VLAN 30"

read -r peer gbps < <(iperf3_run "$VLAN_NS" gwlab-lan 172.30.0.2 -P 2) || fail "iperf3 across the bond's VLAN 30"
[[ $peer == 192.168.10.2 ]] || fail "the VLAN 30 host saw $peer, not the LAN host (routed, no NAT)"
pass "VLAN 30 on the bond carries routed TCP from the LAN: $gbps Gbit/s"

changes=$(metric gateway_bond_member_state_changes_total)
sleep 10
negotiated || fail "the bond lost LACP after 10 s idle"
[[ $(metric gateway_bond_member_state_changes_total) == "$changes" ]] || fail "members changed state while idle"
pass "an idle bond stays negotiated for 10 s with no member change"

# Failover: one member goes down in the middle of a run.
ip netns exec gwlab-wan iperf3 -s -1 -J >"$WORK/server.json" 2>&1 &
SERVER=$!
sleep 0.5
lan timeout 40 iperf3 -c 10.0.0.2 -t 12 -P 4 -J >"$WORK/client.json" &
CLIENT=$!
sleep 3
ip link set gwb1 down
active=
for _ in $(seq 1 40); do
    active=$(metric 'gateway_bond_active_members{bond="wan"}')
    [[ $active == 1 ]] && break
    sleep 0.25
done
[[ $active == 1 ]] || fail "metrics still show $active active members with gwb1 down"
wait "$CLIENT" || fail "iperf3 failed across the failover: $(tail -c 400 "$WORK/client.json")"
wait "$SERVER" || true
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit("error" in r)' "$WORK/client.json" \
    || fail "iperf3 reported an error across the failover"
pass "a member went down during iperf3: the run completed, metrics show 1 active member"

ip link set gwb1 up
for _ in $(seq 1 60); do
    negotiated && [[ $(metric 'gateway_bond_active_members{bond="wan"}') == 2 ]] && break
    sleep 0.5
done
negotiated || fail "the member did not rejoin"
pass "the member rejoined: 2 active members, LACP collecting and distributing again"
stop_gateway
