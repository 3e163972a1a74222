#!/usr/bin/env bash
# 802.1Q subinterfaces on one trunk port. This kernel has no 802.1Q module, so the switch is
# Open vSwitch in userspace (no kernel module): its trunk port faces the gateway's LAN port,
# and access ports tag the hosts' frames as a real switch would: the lab's LAN host untagged,
# a guest host on VLAN 20, an IoT host on VLAN 30, and a host on VLAN 40, which the gateway
# has no subinterface for. Each VLAN is its own interface and zone: the checks ping every
# gateway address over its VLAN, cross NAT from each VLAN to the WAN host with TCP and UDP,
# follow the firewall between the VLANs both ways, and count VLAN 40's frames as dropped. The
# guest VLAN has a kernel twin: its host, address removed, leases one from dnsmasq on it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

VLAN_HOSTS=(20 30 40)
TWIN_NS=gwvlan-twins
teardown() {
    if ip netns pids "$TWIN_NS" >/dev/null 2>&1; then
        ip netns pids "$TWIN_NS" | xargs -r kill 2>/dev/null || true
    fi
    ip netns del "$TWIN_NS" 2>/dev/null || true
    stop_ovs
    for id in "${VLAN_HOSTS[@]}"; do
        # The VLAN 20 host's dhclient stays in the background once it holds its lease: it
        # would outlive its namespace.
        ip netns pids "gwvlan$id" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "gwvlan$id" 2>/dev/null || true
        ip link del "gwv-$id" 2>/dev/null || true
    done
    ip link del gwv-gw 2>/dev/null || true
    cleanup
}
trap teardown EXIT

quiet_offloads() { ethtool -K "$1" tso off gso off gro off tx off rx off rxvlan off txvlan off >/dev/null 2>&1 || true; }

"$ROOT/scripts/lab.sh" up >/dev/null
# The trunk: the gateway's end, and OVS's.
ip link del gwv-gw 2>/dev/null || true
ip link add gwv-gw type veth peer name gwv-trunk
for end in gwv-gw gwv-trunk; do
    sysctl -qw "net.ipv6.conf.$end.disable_ipv6=1"
    quiet_offloads "$end"
    ip link set "$end" up
done
# A host per VLAN, 192.168.<id>.2 behind the gateway's 192.168.<id>.1.
for id in "${VLAN_HOSTS[@]}"; do
    ns=gwvlan$id
    ip netns del "$ns" 2>/dev/null || true
    ip netns add "$ns"
    ip link add "gwv-$id" type veth peer name eth0 netns "$ns"
    sysctl -qw "net.ipv6.conf.gwv-$id.disable_ipv6=1"
    quiet_offloads "gwv-$id"
    ip link set "gwv-$id" up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "192.168.$id.2/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip netns exec "$ns" ethtool -K eth0 tso off gso off gro off tx off rx off >/dev/null 2>&1 || true
    ip -n "$ns" route add default via "192.168.$id.1"
done
vlan_host() { local id=$1; shift; ip netns exec "gwvlan$id" "$@"; }
ip netns del "$TWIN_NS" 2>/dev/null || true
ip netns add "$TWIN_NS"
ip -n "$TWIN_NS" link set lo up

start_ovs
vsctl add-br gwvbr -- set bridge gwvbr datapath_type=netdev
# The trunk carries the untagged LAN and every VLAN; the lab's LAN host is untagged.
vsctl add-port gwvbr gwv-trunk -- set port gwv-trunk vlan_mode=native-untagged tag=1 trunks=1,20,30,40
vsctl add-port gwvbr gwl-lan -- set port gwl-lan tag=1
for id in "${VLAN_HOSTS[@]}"; do
    vsctl add-port gwvbr "gwv-$id" -- set port "gwv-$id" tag="$id"
done
ip link set gwvbr up

python3 - "$ROOT/configs/lab.toml" "$WORK/gateway.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = text.replace('device = "net_af_packet0,iface=gwl-lan,', 'device = "net_af_packet0,iface=gwv-gw,')
text = text.replace('listen = "127.0.0.1:9469"', 'listen = "127.0.0.1:19131"')
text = text.replace('file_prefix = "gateway-lab"', 'file_prefix = "gateway-e2e"')
vlans = """
[[interfaces]]
name = "guest"
parent = "lan"
vlan = 20
address = "192.168.20.1/24"
kernel_twin = true

[[interfaces]]
name = "iot"
parent = "lan"
vlan = 30
address = "192.168.30.1/24"
mtu = 1400
"""
# After the two ports, before the routes.
text = text.replace("\n[[routes]]", vlans + "\n[[routes]]", 1)
policy = """policy = [
    { from = "lan", to = "wan", action = "accept" },
    { from = "lan", to = "local", action = "accept" },
    { from = "lan", to = "guest", action = "accept" },
    { from = "lan", to = "iot", action = "accept" },
    { from = "guest", to = "wan", action = "accept" },
    { from = "guest", to = "local", action = "accept" },
    { from = "guest", to = "lan", action = "drop" },
    { from = "guest", to = "iot", action = "drop" },
    { from = "iot", to = "wan", action = "accept" },
    { from = "iot", to = "local", action = "accept" },
    { from = "iot", to = "lan", action = "drop" },
    { from = "wan", to = "lan", action = "drop" },
    { from = "wan", to = "local", action = "drop" },
]"""
text, n = re.subn(r"policy = \[.*?\n\]", policy, text, count=1, flags=re.S)
assert n == 1 and "gwv-gw" in text
text = text.replace('# netns = "gateway"', 'netns = "gwvlan-twins"', 1)
assert 'netns = "gwvlan-twins"' in text
open(sys.argv[2], "w").write(text)
PY
with_e2e_workers "$WORK/gateway.toml"
# One pass with the PMD's VLAN offloads (af_packet strips by the kernel's tag metadata and
# inserts on transmit), the two-worker pass with the workers' software tagging.
if [[ ${E2E_WORKERS:-1} == 2 ]]; then
    sed -i 's|^\(device = "net_af_packet0,iface=gwv-gw.*\)$|\1\nvlan_offload = false|' "$WORK/gateway.toml"
    grep -q '^vlan_offload = false' "$WORK/gateway.toml" || fail "could not turn the VLAN offloads off"
    tagging="in software"
else
    tagging="by the port's offloads"
fi
METRICS=http://127.0.0.1:19131/metrics
start_gateway "$WORK/gateway.toml"
if [[ $tagging == "in software" ]]; then
    grep -q 'port started.*port="lan".*vlan_strip=false vlan_insert=false' "$WORK/gateway.log" \
        || fail "the LAN port started with VLAN offloads: $(grep 'port started' "$WORK/gateway.log")"
else
    grep -q 'port started.*port="lan".*vlan_strip=true vlan_insert=true' "$WORK/gateway.log" \
        || fail "the LAN port started without VLAN offloads: $(grep 'port started' "$WORK/gateway.log")"
fi

# Every gateway address answers over its own VLAN (ARP and echo both tagged both ways).
lan ping -c 2 -W 2 192.168.10.1 >/dev/null || fail "the untagged LAN host cannot ping 192.168.10.1"
for id in 20 30; do
    ok=
    for _ in 1 2 3; do
        vlan_host "$id" ping -c 2 -W 2 "192.168.$id.1" >/dev/null && { ok=1; break; }
    done
    [[ -n $ok ]] || fail "the host on VLAN $id cannot ping the gateway's 192.168.$id.1"
done
pass "the untagged LAN and VLANs 20 and 30 each reach their gateway address over one trunk, tagged $tagging"

# NAT from each VLAN to the WAN host: ping, UDP and TCP.
server=$(udp_echo_server gwlab-wan 7000)
trap 'kill $server 2>/dev/null; teardown' EXIT
for id in 20 30; do
    vlan_host "$id" ping -c 2 -W 2 10.0.0.2 >/dev/null || fail "VLAN $id cannot ping the WAN host"
    answered=$(udp_exchange "gwvlan$id" 10.0.0.2 7000 10)
    [[ $answered == 10 ]] || fail "VLAN $id: $answered of 10 UDP exchanges with the WAN host"
    read -r peer gbps < <(iperf3_run gwlab-wan "gwvlan$id" 10.0.0.2 -t 2) || fail "iperf3 from VLAN $id"
    [[ $peer == 10.0.0.1 ]] || fail "the WAN host saw VLAN $id's TCP from $peer, not the masquerade 10.0.0.1"
    pass "VLAN $id reaches the WAN host through NAT: ping, 10/10 UDP exchanges, TCP at $gbps Gbit/s"
done

# Each VLAN counts its own traffic; the trunk port counts all of it.
for name in guest iot; do
    for direction in rx tx; do
        packets=$(metric "gateway_interface_packets_total{direction=\"$direction\",interface=\"$name\"}")
        ((packets > 1000)) || fail "$name counted $packets $direction packets after its iperf3 run"
    done
done
guest_rx=$(metric 'gateway_interface_packets_total{direction="rx",interface="guest"}')
trunk_rx=$(metric 'gateway_port_rx_packets_total{port="lan"}')
((trunk_rx >= guest_rx)) || fail "the trunk received $trunk_rx packets, fewer than its VLAN 20 alone ($guest_rx)"
pass "each VLAN counts its own packets (guest received $guest_rx, the trunk $trunk_rx in all)"

# The firewall between VLANs: lan may open flows to guest, not guest to lan (a drop policy);
# iot not to guest either, for want of a policy (closed between zones by default).
dropped_before=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
lan ping -c 2 -W 2 192.168.20.2 >/dev/null || fail "lan -> guest (accepted) did not get through"
vlan_host 20 ping -c 2 -W 1 192.168.10.2 >/dev/null && fail "guest -> lan got through a drop policy"
vlan_host 30 ping -c 2 -W 1 192.168.20.2 >/dev/null && fail "iot -> guest (no policy) got through the closed default"
dropped=$(( $(metric 'gateway_dropped_packets_total{reason="firewall_drop"') - dropped_before ))
((dropped >= 4)) || fail "guest -> lan and iot -> guest: $dropped firewall drops counted, expected 4"
pass "between VLANs the firewall decides: lan -> guest accepted, guest -> lan dropped by its policy, iot -> guest by the closed default ($dropped counted)"

# VLAN 40 has no subinterface: its frames are dropped and counted, not taken for the LAN's.
tagged_before=$(metric 'gateway_dropped_packets_total{reason="vlan_tagged"')
vlan_host 40 ping -c 3 -W 1 192.168.40.1 >/dev/null && fail "VLAN 40 got an answer"
vlan_host 40 ping -c 1 -W 1 192.168.10.1 >/dev/null && fail "VLAN 40 reached the LAN address"
tagged=$(( $(metric 'gateway_dropped_packets_total{reason="vlan_tagged"') - tagged_before ))
((tagged >= 2)) || fail "VLAN 40's ARP requests: $tagged dropped as vlan_tagged"
pass "frames on VLAN 40, which has no subinterface, are dropped and counted as vlan_tagged ($tagged)"

# VLAN hopping: double-tagged frames from the trunk to the gateway's MAC, outer tag 20
# (guest) and inner 30 (iot) or 0 (the native LAN), must not reach the inner network, whether
# the port stripped the outer tag (this pass's offloads) or the workers read it.
udp_listen() { # NS ADDRESS: counts the datagrams to ADDRESS:9999 until killed, into $WORK/NS.count
    ip netns exec "$1" timeout 60 python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
count = 0
while True:
    s.recv(2048)
    count += 1
    open(sys.argv[2], "w").write("%d\n" % count)
' "$2" "$WORK/$1.count" &
}
udp_listen gwvlan30 192.168.30.2
IOT_LISTENER=$!
udp_listen gwlab-lan 192.168.10.2
LAN_LISTENER=$!
poll_until 10 listening gwvlan30 9999 udp && poll_until 10 listening gwlab-lan 9999 udp ||
    fail "the UDP listeners on the iot and LAN hosts did not start"
received() { cat "$WORK/$1.count" 2>/dev/null || echo 0; }
# The listeners hear what arrives: the iot host's a datagram the gateway routes from the LAN
# (lan -> iot accepted), the LAN host's one of its own.
send_udp() { ip netns exec "$1" python3 -c 'import socket, sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", (sys.argv[1], 9999))' "$2"; }
send_udp gwlab-lan 192.168.30.2
send_udp gwlab-lan 192.168.10.2
both_heard() { [[ $(received gwvlan30) -ge 1 && $(received gwlab-lan) -ge 1 ]]; }
poll_until 10 both_heard ||
    fail "the listeners heard $(received gwvlan30) (iot host, from the LAN through the gateway) and $(received gwlab-lan) (LAN host)"
iot_before=$(received gwvlan30)
lan_before=$(received gwlab-lan)
double_before=$(metric 'gateway_dropped_packets_total{reason="vlan_double_tagged"')
gateway_mac=$(cat /sys/class/net/gwv-gw/address)
/usr/bin/python3 - "$gateway_mac" <<'PY'
import sys
from scapy.all import Dot1Q, Ether, IP, UDP, conf, sendp
conf.verb = 0
mac = sys.argv[1]
hop_to_iot = Ether(src="02:00:00:00:20:66", dst=mac) / Dot1Q(vlan=20) / Dot1Q(vlan=30) / IP(src="192.168.20.66", dst="192.168.30.2") / UDP(sport=9999, dport=9999) / b"hop"
hop_to_lan = Ether(src="02:00:00:00:20:66", dst=mac) / Dot1Q(vlan=20) / Dot1Q(vlan=0) / IP(src="192.168.20.66", dst="192.168.10.2") / UDP(sport=9999, dport=9999) / b"hop"
sendp([hop_to_iot, hop_to_lan] * 5, iface="gwv-trunk")
PY
double_dropped() { (( $(metric 'gateway_dropped_packets_total{reason="vlan_double_tagged"') - double_before >= 10 )); }
poll_until 10 double_dropped ||
    fail "10 double-tagged frames: $(( $(metric 'gateway_dropped_packets_total{reason="vlan_double_tagged"') - double_before )) counted as vlan_double_tagged"
sleep 0.5  # what would have been delivered has arrived by now (the drops are counted)
kill "$IOT_LISTENER" "$LAN_LISTENER" 2>/dev/null || true
[[ $(received gwvlan30) == "$iot_before" && $(received gwlab-lan) == "$lan_before" ]] ||
    fail "double-tagged frames were delivered: the iot host heard $(( $(received gwvlan30) - iot_before )), the LAN host $(( $(received gwlab-lan) - lan_before ))"
pass "double-tagged frames (outer VLAN 20, inner 30 or 0) are dropped as vlan_double_tagged, tagged $tagging, never delivered into the inner network"

# The guest VLAN's twin: dnsmasq leases the VLAN 20 host an address, tagged both ways.
cat >"$WORK/dnsmasq.conf" <<CONF
interface=guest
bind-dynamic
except-interface=lo
dhcp-range=192.168.20.100,192.168.20.199,255.255.255.0,12h
dhcp-option=option:router,192.168.20.1
dhcp-authoritative
user=root
no-resolv
no-hosts
port=0
dhcp-leasefile=$WORK/dnsmasq.leases
pid-file=$WORK/dnsmasq.pid
log-facility=$WORK/dnsmasq.log
log-dhcp
no-ping
CONF
ip netns exec "$TWIN_NS" ip -4 addr show dev guest | grep -q "inet 192.168.20.1/24" \
    || fail "the guest VLAN's twin has no 192.168.20.1/24: $(ip -n "$TWIN_NS" addr show 2>&1)"
ip netns exec "$TWIN_NS" dnsmasq --keep-in-foreground --conf-file="$WORK/dnsmasq.conf" &
dhclient_script "$WORK/dhclient-script"
vlan_host 20 ip addr flush dev eth0
vlan_host 20 timeout 30 dhclient -4 -1 -v -sf "$WORK/dhclient-script" -lf "$WORK/dhclient.leases" \
    -pf "$WORK/dhclient.pid" eth0 >"$WORK/dhclient.log" 2>&1 ||
    fail "the VLAN 20 host got no lease: $(tail -n 5 "$WORK/dhclient.log"); dnsmasq: $(tail -n 5 "$WORK/dnsmasq.log" 2>/dev/null)"
read -r leased _ <"$WORK/lease"
[[ $leased == 192.168.20.1[0-9][0-9] ]] || fail "the lease $leased is not from the guest range"
grep -q "DHCPACK(guest) $leased" "$WORK/dnsmasq.log" || fail "dnsmasq logged no DHCPACK on guest for $leased"
vlan_host 20 ping -c 2 -W 2 10.0.0.2 >/dev/null || fail "the leased VLAN 20 host cannot reach the WAN host"
pass "dnsmasq on the guest VLAN's kernel twin leased $leased to the VLAN 20 host, which then reaches the WAN"

[[ ${E2E_WORKERS:-1} == 2 ]] && assert_no_conntrack_invalid
stop_gateway
