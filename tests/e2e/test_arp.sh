#!/usr/bin/env bash
# ARP a guest cannot abuse (issue 14). A LAN guest, behind the same bridge as the LAN host,
# claims with its own MAC, in every ARP form, a WAN host's address, the upstream next hop's
# and the LAN host's. The LAN host's traffic to both WAN destinations (one on the WAN subnet,
# one behind the upstream router) must not lose a packet during or after the attack, TCP
# must carry data, and every refused claim must show in /metrics.
#
#   gwlab-lan: br0 192.168.10.2 --+-- eth0 --veth-- gwl-lan [gateway] gwl-wan --veth-- gwlab-wan
#                                 +-- gst0 --veth-- gwlab-guest 192.168.10.66      10.0.0.2 (upstream)
#                                                                                   10.0.0.3 (host)
#                                                                     198.51.100.1 (behind upstream)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"
GUEST_NS=gwlab-guest
ATTACK_PID=
arp_cleanup() {
    [[ -n $ATTACK_PID ]] && kill "$ATTACK_PID" 2>/dev/null || true
    remove_netns "$GUEST_NS"
    cleanup
}
trap arp_cleanup EXIT
guest() { ip netns exec "$GUEST_NS" "$@"; }

"$ROOT/scripts/lab.sh" up >/dev/null
# A second LAN host, the guest, behind the same bridge as the LAN host.
second_lan_host "$GUEST_NS" 192.168.10.66
# A second WAN host on the WAN subnet, and a destination behind the upstream router.
wan ip addr add 10.0.0.3/24 dev eth0
wan ip addr add 198.51.100.1/32 dev lo

lab_config 19120 >"$WORK/gateway.toml"
METRICS=http://127.0.0.1:19120/metrics
start_gateway "$WORK/gateway.toml"

# The gateway learns all three neighbours the ordinary way (request, then answer).
for target in 10.0.0.3 198.51.100.1; do
    expect_output "LAN host reaches $target before the attack" \
        " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 "$target"
done
expect_output "the guest is a working LAN host too" \
    " 0% packet loss" guest ping -c 2 -i 0.2 -W 2 10.0.0.3
# Past the lock time (1 s): the claims on the LAN host then also exercise our probe.
sleep 1.5

GATEWAY_MAC=$(cat /sys/class/net/gwl-lan/address)
cat >"$WORK/attack.py" <<'PY'
# Claims each address with the guest's own MAC in every ARP form, every 50 ms, for a while.
# Prints how many frames it sent per claimed address.
import socket, struct, sys, time
gateway_mac = bytes.fromhex(sys.argv[1].replace(":", ""))
gateway_ip = socket.inet_aton("192.168.10.1")
seconds = float(sys.argv[2])
claimed = [socket.inet_aton(a) for a in sys.argv[3:]]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
own = s.getsockname()[4]
bcast = b"\xff" * 6
def arp(eth_dst, op, spa, tha, tpa):
    frame = eth_dst + own + b"\x08\x06" + struct.pack("!HHBBH", 1, 0x0800, 6, 4, op)
    frame += own + spa + tha + tpa
    return frame.ljust(60, b"\0")
sent = 0
end = time.time() + seconds
while time.time() < end:
    for spa in claimed:
        for frame in (
            arp(bcast, 1, spa, b"\0" * 6, gateway_ip),         # who-has gateway tell <claimed>
            arp(bcast, 1, spa, b"\0" * 6, spa),                # gratuitous request
            arp(bcast, 2, spa, bcast, spa),                    # gratuitous reply
            arp(gateway_mac, 2, spa, gateway_mac, gateway_ip), # unsolicited reply to the gateway
        ):
            s.send(frame)
    sent += 4
    time.sleep(0.05)
print(sent)
PY

count() { metric "gateway_dropped_packets_total{reason=\"$1\""; }
[[ $(count arp_wrong_interface) -eq 0 ]] || fail "arp_wrong_interface counted before the attack"

guest python3 "$WORK/attack.py" "$GATEWAY_MAC" 7 10.0.0.3 10.0.0.2 192.168.10.2 >"$WORK/sent.txt" &
ATTACK_PID=$!
sleep 0.3
lan ping -c 100 -i 0.06 -W 1 10.0.0.3 >"$WORK/ping-host.txt" 2>&1 &
ping_host=$!
lan ping -c 100 -i 0.06 -W 1 198.51.100.1 >"$WORK/ping-upstream.txt" 2>&1 &
ping_upstream=$!
tcp=$(iperf3_run gwlab-wan gwlab-lan 10.0.0.3 -t 2) || fail "TCP to the WAN host during the attack"
# Through the port forward to the LAN host: the gateway sends to the LAN host's MAC.
forwarded=$(iperf3_run gwlab-lan gwlab-wan 10.0.0.1 -t 2) || fail "TCP from WAN through the forward during the attack"
wait "$ping_host" || true
wait "$ping_upstream" || true
wait "$ATTACK_PID" || fail "the attacker failed"
ATTACK_PID=
sent=$(cat "$WORK/sent.txt")
((sent > 100)) || fail "the attacker sent only $sent frames per address"

grep -q " 0% packet loss" "$WORK/ping-host.txt" || fail "LAN host -> WAN host during the attack: $(tail -2 "$WORK/ping-host.txt")"
pass "LAN host -> WAN host 10.0.0.3: 100 pings, 0% loss while the guest claimed it, the upstream and the LAN host"
grep -q " 0% packet loss" "$WORK/ping-upstream.txt" || fail "LAN host -> behind upstream during the attack: $(tail -2 "$WORK/ping-upstream.txt")"
pass "LAN host -> 198.51.100.1 via the upstream 10.0.0.2: 100 pings, 0% loss"
gbps=${tcp#* }
[[ $gbps != 0.00 ]] || fail "TCP moved nothing during the attack: $tcp"
pass "TCP LAN host -> WAN host during the attack: $gbps Gbit/s"
gbps=${forwarded#* }
[[ $gbps != 0.00 ]] || fail "TCP through the forward moved nothing during the attack: $forwarded"
pass "TCP WAN host -> port forward -> LAN host during the attack: $gbps Gbit/s"

for target in 10.0.0.3 198.51.100.1; do
    expect_output "LAN host reaches $target after the attack" \
        " 0% packet loss" lan ping -c 10 -i 0.1 -W 1 "$target"
done

# Every claim was refused and counted: 4 forms x 2 WAN addresses per round as
# arp_wrong_interface, the LAN host's 4 per round as locked or unconfirmed.
wrong=$(count arp_wrong_interface)
locked=$(count arp_locked)
unconfirmed=$(count arp_mac_change_unconfirmed)
echo "sent $sent frames per address; arp_wrong_interface=$wrong arp_locked=$locked arp_mac_change_unconfirmed=$unconfirmed"
((wrong == 2 * sent)) || fail "arp_wrong_interface $wrong != the $((2 * sent)) claims on WAN addresses"
pass "every claim on a WAN address from the LAN port counted as arp_wrong_interface ($wrong)"
((locked + unconfirmed == sent)) || fail "arp_locked $locked + arp_mac_change_unconfirmed $unconfirmed != the $sent claims on the LAN host"
((locked > 0 && unconfirmed > 0)) || fail "expected both locked ($locked) and probed ($unconfirmed) refusals"
pass "every claim on the LAN host refused: $locked within the lock time, $unconfirmed while our probe to its MAC was answered by it"
