#!/usr/bin/env bash
# The gateway as a plain IPv4 router between two namespaces: forwarding, ICMP errors, echo,
# fragmentation needed, and fragmentation.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up >/dev/null
# No default route, so 198.51.100.0/24 is unrouted; a WAN MTU of 1400 exercises DF handling;
# the WAN's tcp_mss (below the MTU's 1360, so that it shows) clamps SYNs both ways.
cat >"$WORK/router.toml" <<TOML
[eal]
hugepages = "auto"
file_prefix = "gateway-e2e"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_af_packet0,iface=gwl-lan"
address = "192.168.10.1/24"
[[interfaces]]
name = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "10.0.0.1/24"
mtu = 1400
tcp_mss = 1200
# A plain router: both ways open (between zones the default is closed).
[firewall]
policy = [
    { from = "lan", to = "wan", action = "accept" },
    { from = "wan", to = "lan", action = "accept" },
]
[icmp]
echo_per_sec = 50
echo_burst = 10
[metrics]
listen = "127.0.0.1:19112"
TOML
with_e2e_workers "$WORK/router.toml"
METRICS=http://127.0.0.1:19112/metrics
wan ip route replace 192.168.10.0/24 via 10.0.0.1
# The WAN link's MTU is 1400 at both ends, as on a real link; the gateway sets its own side.
wan ip link set eth0 mtu 1400
start_gateway "$WORK/router.toml"

expect_output "LAN host pings the WAN host through the gateway" \
    " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 10.0.0.2
expect_output "WAN host pings the LAN host through the gateway" \
    " 0% packet loss" wan ping -c 3 -i 0.2 -W 2 192.168.10.2
expect_output "the gateway answers ping on its own address" \
    " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 192.168.10.1
expect_output "a TTL=1 probe gets time exceeded from the gateway" \
    "From 192.168.10.1 .*Time to live exceeded" lan ping -c 1 -t 1 -W 2 10.0.0.2
expect_output "an unrouted destination gets net unreachable from the gateway" \
    "From 192.168.10.1 .*Destination Net Unreachable" lan ping -c 1 -W 2 198.51.100.1
expect_output "DF over the WAN MTU gets fragmentation needed with the MTU" \
    "From 192.168.10.1 .*(Frag needed and DF set \(mtu = 1400\)|mtu = 1400)" \
    lan ping -c 1 -W 2 -M do -s 1450 10.0.0.2
expect_output "without DF the gateway fragments and the WAN host answers" \
    " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 -M dont -s 1450 10.0.0.2
read -r peer gbps < <(iperf3_run gwlab-wan gwlab-lan 10.0.0.2 -P 4 -t 2) || fail "iperf3 through the router"
[[ $peer == 192.168.10.2 ]] || fail "the WAN host saw $peer: a plain router must not translate"
pass "TCP LAN -> WAN routed untranslated: 4 streams, $gbps Gbit/s"
read -r peer gbps < <(iperf3_run gwlab-lan gwlab-wan 192.168.10.2 -P 4 -t 2) || fail "iperf3 WAN -> LAN"
pass "TCP WAN -> LAN routed: 4 streams, $gbps Gbit/s"
assert_no_conntrack_invalid

# MSS clamping: a connection through the WAN's tcp_mss = 1200 gets segments of at most 1200
# bytes at both ends (each side's TCP_MAXSEG is the MSS the other announced, less the
# timestamp option), where the MTUs alone would give the WAN host 1348 and the LAN host 1348.
clamped_before=$(metric gateway_worker_tcp_mss_clamped_total)
wan python3 -c '
import socket
server = socket.create_server(("10.0.0.2", 7777))
server.settimeout(10)
peer, _ = server.accept()
print(peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), flush=True)
peer.recv(1)
' >"$WORK/mss_server" 2>&1 &
SERVER=$!
read -r lan_mss syns < <(lan python3 -c '
import socket, time
# Until the server listens.
for attempt in range(50):
    try:
        client = socket.create_connection(("10.0.0.2", 7777), timeout=5)
        break
    except ConnectionRefusedError:
        time.sleep(0.1)
# The MSS seen, and how many SYNs that took (the SYN of a refused attempt is clamped too).
print(client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), attempt + 1)
time.sleep(0.3)
client.close()
') || fail "TCP LAN -> WAN host for the MSS check"
wait "$SERVER" || fail "the MSS check's server: $(cat "$WORK/mss_server")"
wan_mss=$(cat "$WORK/mss_server")
(( wan_mss <= 1200 && lan_mss <= 1200 )) \
    || fail "MSS not clamped to the WAN's tcp_mss 1200: the WAN host sends $wan_mss, the LAN host $lan_mss"
clamped=$(( $(metric gateway_worker_tcp_mss_clamped_total) - clamped_before ))
(( clamped == syns + 1 )) || fail "the $syns SYNs and the SYN-ACK not counted as clamped once each ($clamped)"
pass "tcp_mss clamps both ends: the WAN host sends segments of $wan_mss, the LAN host $lan_mss; the SYN and SYN-ACK counted"

# A ping flood at the gateway is policed per worker, and ARP still gets through: the LAN host
# forgets the gateway's MAC mid-flood and must resolve it again to reach the WAN host.
lan ping -f -q -w 4 192.168.10.1 >/dev/null 2>&1 &
FLOOD=$!
sleep 1
lan ip neigh flush all
expect_output "ARP and forwarding carry on under a ping flood at the gateway" \
    " 0% packet loss" lan ping -c 5 -i 0.2 -W 2 10.0.0.2
wait "$FLOOD" || true
policed=$(metric 'gateway_dropped_packets_total{reason="slow_path_policed"')
(( policed > 0 )) || fail "the ping flood was not policed (slow_path_policed = $policed)"
pass "the ping flood was policed: $policed echo requests dropped as slow_path_policed"

stop_gateway
grep -q "worker totals" "$WORK/gateway.log" || fail "no worker totals in the log after SIGTERM"
pass "gateway stops cleanly on SIGTERM"
