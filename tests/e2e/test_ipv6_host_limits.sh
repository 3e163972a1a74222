#!/usr/bin/env bash
# One IPv6 host is its /64, whatever addresses it takes (conntrack.host_prefix6 = 64, the
# default). With conntrack.host_flows = 9, the LAN host, after SLAAC in 2001:db8:10::/64 and a
# ping to the WAN host (one flow), adds 20 more addresses of its /64 (as privacy addresses, or
# made-up ones, would be) and sends one UDP datagram from each to the WAN host: 8 open flows
# and arrive, the other 12 are dropped as host_flow_limit. Its IPv4 address is another host
# and still opens flows.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
LISTENER=
trap '[[ -n $LISTENER ]] && kill "$LISTENER" 2>/dev/null; cleanup' EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
# The lab with IPv6 on both interfaces and the IPv6 default route to the WAN host, with a
# low host_flows.
lab_config_ipv6 19163 | sed 's/^host_flows = .*/host_flows = 9/' >"$WORK/gateway.toml"
[[ $(grep -c '^\[interfaces.ipv6\]' "$WORK/gateway.toml") == 2 ]] || fail "no [interfaces.ipv6] for both interfaces in the config"
grep -q '^host_flows = 9$' "$WORK/gateway.toml" || fail "configs/lab.toml has no host_flows line to lower"
METRICS=http://127.0.0.1:19163/metrics
start_gateway "$WORK/gateway.toml"
lan_joins_ipv6 2001:db8:10:
wan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0
wan ip -6 addr add 2001:db8:ff::2/64 dev eth0 nodad
wan ip -6 route add 2001:db8:10::/64 via 2001:db8:ff::1
# One flow of the host's nine: a ping, which has the gateway resolve the WAN host (the
# datagrams below would otherwise wait on Neighbor Discovery, a few at most).
expect_output "the LAN host pings the WAN host over IPv6" " 0% packet loss" \
    lan ping -6 -c 2 -i 0.2 -W 2 2001:db8:ff::2

# The WAN host counts the datagrams it hears.
wan python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.bind(("2001:db8:ff::2", 9999))
heard = 0
while True:
    s.recv(64)
    heard += 1
    open(sys.argv[1], "w").write(str(heard))
' "$WORK/heard" &
LISTENER=$!
poll_until 10 listening gwlab-wan 9999 udp || fail "the WAN host's listener did not start"
heard() { cat "$WORK/heard" 2>/dev/null || echo 0; }

for i in $(seq 1 20); do
    lan ip -6 addr add "2001:db8:10::1:$(printf %x "$i")/64" dev eth0 nodad
done
limited_before=$(metric 'gateway_dropped_packets_total{reason="host_flow_limit"')
lan python3 -c '
import socket
for i in range(1, 21):
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind(("2001:db8:10::1:%x" % i, 0))
    s.sendto(b"x", ("2001:db8:ff::2", 9999))
'
limited() { echo $(($(metric 'gateway_dropped_packets_total{reason="host_flow_limit"') - limited_before)); }
all_decided() { (($(limited) + $(heard) >= 20)); }
poll_until 10 all_decided || fail "of 20 datagrams from 20 addresses, $(heard) arrived and $(limited) were dropped as host_flow_limit"
[[ $(limited) == 12 && $(heard) == 8 ]] ||
    fail "one host over 20 more addresses of its /64: $(heard) arrived (expected 8, host_flows less the ping's), $(limited) dropped as host_flow_limit (expected 12)"
pass "one IPv6 host over 21 addresses of its /64 opened 9 flows (host_flows) and no more: 12 dropped as host_flow_limit"
expect_output "its IPv4 address is another host, and opens flows" " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 10.0.0.2
stop_gateway
