#!/usr/bin/env bash
# Three interfaces on two workers with two queue pairs each: a LAN, a routed DMZ (no NAT) and a
# masqueraded WAN, with port forwards from the WAN to a LAN and a DMZ host. TCP and UDP cross
# every pair in both directions. af_packet's fanout lands packets on either worker, so both
# directions of every flow must meet on its owner, whichever way it was translated, with no
# packet refused as conntrack_invalid.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
trap cleanup EXIT

"$ROOT/scripts/lab.sh" up dmz >/dev/null
cat >"$WORK/gateway.toml" <<TOML
[eal]
hugepages = "auto"
file_prefix = "gateway-e2e"
# This box may have two CPUs: the main lcore and one worker share CPU 0.
cpus = [0, 1, 0]
[workers]
lcores = [1, 2]
[[interfaces]]
name = "lan"
device = "net_af_packet0,iface=gwl-lan,framecnt=4096,qpairs=2"
address = "192.168.10.1/24"
[[interfaces]]
name = "dmz"
device = "net_af_packet1,iface=gwl-dmz,framecnt=4096,qpairs=2"
address = "172.16.20.1/24"
[[interfaces]]
name = "wan"
device = "net_af_packet2,iface=gwl-wan,framecnt=4096,qpairs=2"
address = "10.0.0.1/24"
[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"
[nat]
masquerade = ["wan"]
[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 5201
to = "192.168.10.2"
[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 5202
to = "172.16.20.2"
to_port = 5201
[[nat.port_forwards]]
interface = "wan"
protocol = "udp"
port = 7001
to = "192.168.10.2"
to_port = 7000
[[nat.port_forwards]]
interface = "wan"
protocol = "udp"
port = 7002
to = "172.16.20.2"
to_port = 7000
[firewall]
policy = [
    { from = "lan", to = "dmz", action = "accept" },
    { from = "dmz", to = "lan", action = "accept" },
    { from = "lan", to = "wan", action = "accept" },
    { from = "dmz", to = "wan", action = "accept" },
    { from = "wan", to = "lan", action = "drop" },
    { from = "wan", to = "dmz", action = "drop" },
]
[metrics]
listen = "127.0.0.1:19111"
TOML
METRICS=http://127.0.0.1:19111/metrics
start_gateway "$WORK/gateway.toml"
grep -q "rx_queues=2" "$WORK/gateway.log" || fail "ports did not start with two queues"
dmz() { ip netns exec gwlab-dmz "$@"; }

# name, server namespace, client namespace, address, the source the server must see, iperf3 args
tcp_paths=(
    "LAN -> DMZ, routed|gwlab-dmz|gwlab-lan|172.16.20.2|192.168.10.2|"
    "DMZ -> LAN, routed|gwlab-lan|gwlab-dmz|192.168.10.2|172.16.20.2|"
    "LAN -> WAN, masquerade|gwlab-wan|gwlab-lan|10.0.0.2|10.0.0.1|"
    "DMZ -> WAN, masquerade|gwlab-wan|gwlab-dmz|10.0.0.2|10.0.0.1|"
    "WAN -> LAN, port forward|gwlab-lan|gwlab-wan|10.0.0.1|10.0.0.2|"
    "WAN -> DMZ, port forward|gwlab-dmz|gwlab-wan|10.0.0.1|10.0.0.2|-p 5202"
)
for path in "${tcp_paths[@]}"; do
    IFS='|' read -r name server client address seen extra <<<"$path"
    # shellcheck disable=SC2086 # extra holds separate iperf3 arguments
    read -r peer gbps < <(iperf3_run "$server" "$client" "$address" -P 4 -t 2 $extra) \
        || fail "TCP $name: iperf3 failed"
    [[ $peer == "$seen" ]] || fail "TCP $name: the server saw $peer, not $seen"
    pass "TCP $name: 4 streams, $gbps Gbit/s, the server saw $seen"
done

servers=()
for ns in gwlab-lan gwlab-dmz gwlab-wan; do
    servers+=("$(udp_echo_server "$ns" 7000)")
done
sleep 0.5
# name, client namespace, address, port
udp_paths=(
    "LAN -> DMZ, routed|gwlab-lan|172.16.20.2|7000"
    "DMZ -> LAN, routed|gwlab-dmz|192.168.10.2|7000"
    "LAN -> WAN, masquerade|gwlab-lan|10.0.0.2|7000"
    "DMZ -> WAN, masquerade|gwlab-dmz|10.0.0.2|7000"
    "WAN -> LAN, port forward|gwlab-wan|10.0.0.1|7001"
    "WAN -> DMZ, port forward|gwlab-wan|10.0.0.1|7002"
)
for path in "${udp_paths[@]}"; do
    IFS='|' read -r name client address port <<<"$path"
    answered=$(udp_exchange "$client" "$address" "$port" 40)
    [[ $answered == 40 ]] || fail "UDP $name: $answered of 40 exchanges (new flows) answered"
    pass "UDP $name: 40 of 40 exchanges answered, each a new flow"
done
kill "${servers[@]}" 2>/dev/null || true

sent=$(metric gateway_worker_handoffs_sent_total)
(( sent > 0 )) || fail "no packet was handed off between workers: the test did not exercise ownership"
for worker in 0 1; do
    rx=$(metric "gateway_worker_rx_packets_total{worker=\"$worker\"}")
    (( rx > 0 )) || fail "worker $worker received nothing"
done
pass "both workers received traffic; $sent packets were handed to their flow's owner"
assert_no_conntrack_invalid
stop_gateway
