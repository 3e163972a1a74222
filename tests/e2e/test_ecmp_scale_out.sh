#!/usr/bin/env bash
# Active/active scale-out behind ECMP (issue 49): two gateways, A and B, each masquerading to
# a NAT address of its own (`nat_address`: A 100.64.0.3, B 100.64.0.4, on no link), both
# forwarding at once. FRR's bgpd on each one's WAN twin announces its NAT address (its pool,
# a /32) and the LAN prefix to the upstream router (FRR on the WAN host, AS 64496, ECMP over
# two paths), which routes each pool to its box; the LAN host spreads its flows over both
# boxes by a multipath default route hashing on ports (Linux's fib_multipath_hash_policy 1).
#
# Asserted: both sessions come up and the router holds each pool by its own box and the LAN
# prefix by both (two next hops); 100 UDP flows from the LAN host each get their answer from
# the server beyond the router, which saw each from A's or B's pool, both in use; and
# each flow is in the table of the box whose address it was translated to, answered there
# (its reply seen), and in no other: the replies came back to the box that translated them.
#
#   gwlab-lan 192.168.10.2 --+-- br-lan --+-- A 192.168.10.3 | 10.0.0.3 --+-- br-wan -- gwlab-wan
#   (default: both boxes)    |            +-- B 192.168.10.4 | 10.0.0.4 --+   10.0.0.2, FRR
#                                           pools: A 100.64.0.3, B 100.64.0.4 (BGP)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
A_PID=
B_PID=
FRR_DIR=$(mktemp -d /tmp/gateway-e2e-frr.XXXXXX)
finish() {
    for pid in $A_PID $B_PID; do
        kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    two_box_lab_down
    cleanup
    rm -rf "$FRR_DIR"
}
trap finish EXIT
for tool in /usr/lib/frr/zebra /usr/lib/frr/bgpd vtysh; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs frr"
done
# FRR's daemons drop to the frr user: their directory must be reachable by it.
chown frr:frr "$FRR_DIR"

two_box_lab_up 192.168.10.3 10.0.0.3
# The LAN host's default route over both boxes, hashed by addresses and ports.
lan sysctl -qw net.ipv4.fib_multipath_hash_policy=1
lan ip route replace default nexthop via 192.168.10.3 nexthop via 192.168.10.4
# Beyond the router: the server that tells each client the address it came from.
wan ip addr add 198.51.100.1/32 dev lo
wan python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.1", 7007))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(f"{peer[0]}".encode(), peer)
' >/dev/null 2>&1 &

# box_config BOX OCTET METRICS_PORT: a box masquerading to its own NAT address, its WAN
# twin in gwha-BOX for bgpd. No huge pages: two gateways side by side.
box_config() {
    cat <<TOML
[eal]
hugepages = "off"
memory_mb = 256
file_prefix = "gateway-e2e-ecmp-$1"
[mempool]
mbufs = 8191
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_af_packet$(($2 * 2)),iface=gwha-$1-lan,framecnt=2048"
address = "192.168.10.$2/24"
[[interfaces]]
name = "wan"
device = "net_af_packet$(($2 * 2 + 1)),iface=gwha-$1-wan,framecnt=2048"
address = "10.0.0.$2/24"
nat_address = "100.64.0.$2"
kernel_twin = true
[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }, { from = "lan", to = "local", action = "accept" }]
[kernel_twins]
netns = "gwha-$1"
[metrics]
listen = "127.0.0.1:$3"
[ctl]
socket = "$WORK/run/$1.sock"
TOML
}
box_config a 3 19152 >"$WORK/a.toml"
box_config b 4 19153 >"$WORK/b.toml"
with_e2e_workers "$WORK/a.toml"
with_e2e_workers "$WORK/b.toml"
for box in a b; do
    : >"$WORK/$box.log"
    GATEWAY__STATE__DIRECTORY=$WORK/state-$box "$GATEWAY" run --config "$WORK/$box.toml" >"$WORK/$box.log" 2>&1 &
    eval "${box^^}_PID=$!"
    poll_until 20 grep -q "gateway running" "$WORK/$box.log" || {
        tail -n 20 "$WORK/$box.log" >&2
        fail "gateway $box did not start"
    }
done

# bgpd on each box's WAN twin: its NAT address as its pool, and the LAN prefix; the router
# passive (the boxes' bgpd connect out, tracked as the kernel's own connections).
box_frr() {
    cat <<CONF
frr defaults traditional
hostname gw-$1
router bgp $2
 bgp router-id 10.0.0.$3
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor 10.0.0.2 remote-as 64496
 neighbor 10.0.0.2 timers connect 2
 address-family ipv4 unicast
  network 100.64.0.$3/32
  network 192.168.10.0/24
 exit-address-family
exit
CONF
}
box_frr a 64512 3 >"$WORK/a-frr.conf"
box_frr b 64513 4 >"$WORK/b-frr.conf"
cat >"$WORK/router-frr.conf" <<'CONF'
frr defaults traditional
hostname router
router bgp 64496
 bgp router-id 10.0.0.2
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor 10.0.0.3 remote-as 64512
 neighbor 10.0.0.3 passive
 neighbor 10.0.0.4 remote-as 64513
 neighbor 10.0.0.4 passive
 address-family ipv4 unicast
  maximum-paths 2
 exit-address-family
exit
CONF
frr_start router gwlab-wan "$WORK/router-frr.conf"
frr_start a gwha-a "$WORK/a-frr.conf"
frr_start b gwha-b "$WORK/b-frr.conf"
# routed: the router's kernel has each pool by its own box and the LAN by both.
routed() {
    wan ip route show 100.64.0.3/32 | grep -q 'via 10.0.0.3 .*proto bgp' &&
        wan ip route show 100.64.0.4/32 | grep -q 'via 10.0.0.4 .*proto bgp' &&
        [[ $(wan ip route show 192.168.10.0/24 | grep -c 'nexthop via 10.0.0.[34]') == 2 ]]
}
poll_until 30 routed || fail "the router's routes: $(wan ip route; vty router -c 'show bgp ipv4 unicast summary')"
pass "both boxes announce their pools (100.64.0.3/32 by A, 100.64.0.4/32 by B) and the LAN (by two next hops) to the router"

# 100 UDP flows from the LAN host, each from a port of its own; each answer names the
# address the server saw it from.
lan python3 - >"$WORK/flows.txt" <<'PY'
import socket
for port in range(41000, 41100):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("192.168.10.2", port))
    s.settimeout(1.0)
    seen = "none"
    for _ in range(3):
        s.sendto(b"who", ("198.51.100.1", 7007))
        try:
            seen = s.recvfrom(64)[0].decode()
            break
        except socket.timeout:
            pass
    print(port, seen)
PY
unanswered=$(awk '$2 == "none"' "$WORK/flows.txt" | wc -l)
((unanswered == 0)) || fail "$unanswered of 100 flows got no answer: $(awk '$2 == "none"' "$WORK/flows.txt" | head -5 | tr '\n' ' ')"
by_a=$(awk '$2 == "100.64.0.3"' "$WORK/flows.txt" | wc -l)
by_b=$(awk '$2 == "100.64.0.4"' "$WORK/flows.txt" | wc -l)
((by_a + by_b == 100)) || fail "some flows were seen from neither pool: $(awk '$2 != "100.64.0.3" && $2 != "100.64.0.4"' "$WORK/flows.txt" | head -3)"
# A fair hash puts fewer than 20 of 100 on one side about once in 10^9 runs.
((by_a >= 20 && by_b >= 20)) || fail "the flows did not spread: $by_a by A, $by_b by B"
pass "100 flows answered, $by_a through A and $by_b through B, each translated to its box's pool"

# Each flow is on the box whose pool it took, answered there, and on no other.
for box in a b; do
    "$GATEWAY" ctl --socket "$WORK/run/$box.sock" show flows --protocol udp --json >"$WORK/$box-flows.json" ||
        fail "ctl show flows on $box"
done
python3 - "$WORK/flows.txt" "$WORK/a-flows.json" "$WORK/b-flows.json" <<'PY' || fail "a flow's replies did not reach the box that translated it"
import json, sys
seen = {int(port): address for port, address in (line.split() for line in open(sys.argv[1]))}
boxes = {"100.64.0.3": sys.argv[2], "100.64.0.4": sys.argv[3]}
held = {}
for address, path in boxes.items():
    for flow in json.load(open(path))["flows"]:
        o, r = flow["original"], flow["reply"]
        if o["src"] == "192.168.10.2" and o["dst_port"] == 7007 and o["src_port"] in seen:
            held.setdefault(o["src_port"], []).append((address, r["dst"], flow["replied"]))
wrong = [(port, seen[port], held.get(port)) for port in seen
         if held.get(port) != [(seen[port], seen[port], True)]]
if wrong:
    print("flows not held, answered, by the box that translated them alone:", wrong[:5], file=sys.stderr)
    sys.exit(1)
PY
pass "every flow is held by the box that translated it alone, its reply seen there"
