#!/usr/bin/env bash
# Addresses and routes from the kernel (netlink). The WAN interface is `address = "dhcp"`
# with a kernel twin in the namespace gwlab-gw; dnsmasq in the WAN namespace plays the ISP's
# DHCP server, dhcpcd (with the shipped deploy/dhcpcd/gateway-wan.conf) runs on the WAN twin,
# or dhclient with DHCP_CLIENT=dhclient (run.sh's two-worker pass). Real daemons:
# - before the first lease the WAN has no address: nothing leaves by it;
# - the client gets a lease (10.0.0.50, no router) through the gateway (its DISCOVER goes out
#   from the twin, dnsmasq's unicast OFFER and ACK are punted back to it), the gateway
#   follows the twin's address, and LAN -> WAN traffic is masqueraded with it;
# - a route added in the kernel on the twin (198.51.100.0/24 via the ISP) is used by the
#   dataplane within a second, and no longer once it is removed;
# - the ISP changes the lease (dnsmasq restarted with another range and a router, the
#   client releases its lease and is started again): new flows use 10.0.0.77, the default
#   route from DHCP is followed, and the flow bound to the old address is ended
#   (nat_address_gone);
# - a route on the twin into half the LAN's subnet (TunnelVision) is refused, counted in
#   gateway_kernel_routes_refused, and the LAN host's TCP through NAT carries on.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwlab-gw
cleanup_netlink() {
    for ns in "$TWIN_NS" gwlab-wan; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_netlink EXIT
gw() { ip netns exec "$TWIN_NS" "$@"; }
PYTHON=/usr/bin/python3 # Debian's python with scapy (the python3 on PATH may be a shim)

DHCP_CLIENT=${DHCP_CLIENT:-dhcpcd}
[[ $DHCP_CLIENT == dhcpcd || $DHCP_CLIENT == dhclient ]] ||
    fail "DHCP_CLIENT=$DHCP_CLIENT: dhcpcd or dhclient"
for tool in dnsmasq "$DHCP_CLIENT"; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs it"
done
echo "DHCP client on the WAN twin: $DHCP_CLIENT"
# The shipped unit that runs dhcpcd on the twin, after the gateway.
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$WORK/systemd"
    cp "$ROOT/deploy/systemd/gateway.service" "$ROOT/deploy/systemd/gateway-dhcpcd.service" "$WORK/systemd/"
    systemd-analyze verify "$WORK/systemd/gateway-dhcpcd.service" >"$WORK/verify.txt" 2>&1 ||
        fail "systemd-analyze verify gateway-dhcpcd.service: $(cat "$WORK/verify.txt")"
    grep -q '^After=gateway.service' "$WORK/systemd/gateway-dhcpcd.service" ||
        fail "gateway-dhcpcd.service does not start after the gateway"
    pass "systemd-analyze verify accepts deploy/systemd/gateway-dhcpcd.service"
fi
lab_up_with_twin_netns "$TWIN_NS"
# A host beyond the ISP, for the routes: the WAN host answers for it.
wan ip addr add 198.51.100.1/32 dev lo

cat >"$WORK/netlink.toml" <<TOML
[eal]
hugepages = "auto"
file_prefix = "gateway-e2e"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_af_packet0,iface=gwl-lan"
address = "192.168.10.1/24"
kernel_twin = true
[[interfaces]]
name = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "dhcp"
kernel_twin = true
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
[metrics]
listen = "127.0.0.1:19133"
TOML
with_e2e_workers "$WORK/netlink.toml"
METRICS=http://127.0.0.1:19133/metrics

# check-config: "dhcp" only with a twin, and the error names the field.
sed '/^kernel_twin = true$/d' "$WORK/netlink.toml" >"$WORK/no-twin.toml"
if "$GATEWAY" check-config "$WORK/no-twin.toml" >"$WORK/check.txt" 2>&1; then
    fail "check-config accepted address = \"dhcp\" without a kernel twin"
fi
grep -q 'interfaces\[1\]\.address' "$WORK/check.txt" ||
    fail "check-config did not name interfaces[1].address: $(cat "$WORK/check.txt")"
pass "check-config refuses \"dhcp\" without a twin, naming interfaces[1].address"
"$GATEWAY" check-config "$WORK/netlink.toml" >"$WORK/check.txt" 2>&1 ||
    fail "check-config refused the dhcp config: $(cat "$WORK/check.txt")"
pass "check-config accepts \"dhcp\" with a twin"

start_gateway "$WORK/netlink.toml"
gw ip -4 addr show dev wan | grep -q inet && fail "the WAN twin has an address before DHCP"

# The ISP's answer to "who am I": a UDP server on the WAN host that replies with the address
# it sees the datagram come from; one per address, so that each answers from the address
# it was asked on (a wildcard socket would answer from 10.0.0.2 whatever the question).
for address in 10.0.0.2 198.51.100.1; do
    wan python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7007))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(peer[0].encode(), peer)
' "$address" >/dev/null 2>&1 &
done
# seen_as DESTINATION [SOURCE_PORT]: the address the WAN host saw, or "none".
seen_as() {
    lan python3 - "$@" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if len(sys.argv) > 2:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2])))
s.settimeout(0.5)
s.sendto(b"who", (sys.argv[1], 7007))
try:
    print(s.recvfrom(64)[0].decode())
except (socket.timeout, OSError):
    print("none")
PY
}
[[ $(seen_as 10.0.0.2) == none ]] || fail "traffic left by the WAN before it had an address"
pass "before the first lease nothing leaves by the WAN"

# The ISP's DHCP server, first lease: 10.0.0.50, no router.
isp_dhcp() { # RANGE_ADDRESS ROUTER_OPTION
    # Not through the `wan` function: $! must be dnsmasq itself, for the kill below.
    ip netns exec gwlab-wan dnsmasq --keep-in-foreground --port=0 --interface=eth0 --bind-interfaces \
        --dhcp-range="$1,$1,255.255.255.0,10m" "--dhcp-option=$2" \
        --dhcp-leasefile="$WORK/isp-$1.leases" --log-facility="$WORK/isp.log" --log-dhcp \
        --user=root --no-ping --no-resolv --no-hosts &
    ISP_PID=$!
}
isp_dhcp 10.0.0.50 "option:router"
cat >"$WORK/dhclient-script" <<'SH'
#!/bin/sh
# The twin's address and default route only: nothing on the host (resolv.conf) is touched.
case "$reason" in
    PREINIT) ip link set dev "$interface" up ;;
    BOUND|RENEW|REBIND|REBOOT)
        if [ -n "$old_ip_address" ] && [ "$old_ip_address" != "$new_ip_address" ]; then
            ip addr del "$old_ip_address/$old_subnet_mask" dev "$interface"
        fi
        ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface"
        if [ -n "$new_routers" ]; then
            ip route replace default via "${new_routers%% *}" dev "$interface"
        fi ;;
    RELEASE|EXPIRE|STOP|FAIL)
        # Only the address this client was given: a late STOP must not take a newer one.
        if [ -n "$old_ip_address" ]; then
            ip addr del "$old_ip_address/$old_subnet_mask" dev "$interface"
        fi ;;
esac
exit 0
SH
chmod +x "$WORK/dhclient-script"
dhclient_wan() { # LEASE_FILE
    gw timeout 30 dhclient -4 -1 -v -sf "$WORK/dhclient-script" -lf "$1" \
        -pf "$WORK/dhclient.pid" wan >>"$WORK/dhclient.log" 2>&1 ||
        fail "dhclient got no lease: $(tail -n 5 "$WORK/dhclient.log"); ISP: $(tail -n 5 "$WORK/isp.log" 2>/dev/null)"
}
# dhcpcd with the shipped config, and no ARP probe of the offered address (RFC 5227: some 5 s
# of waiting per lease, for a lab with no one to collide with). Its state (/run/dhcpcd: pid,
# control socket; /var/lib/dhcpcd: leases, DUID) goes to tmpfs in a mount namespace of its
# own, so that it neither reads a lease a previous run left nor writes to the host; the hook
# script only logs, so nothing on the host (resolv.conf) is touched whatever the config says.
{ cat "$ROOT/deploy/dhcpcd/gateway-wan.conf"; echo noarp; } >"$WORK/dhcpcd.conf"
printf '#!/bin/sh\necho "$reason $interface $new_ip_address $new_routers" >>"%s"\n' \
    "$WORK/dhcpcd-hook.log" >"$WORK/dhcpcd-hook"
chmod +x "$WORK/dhcpcd-hook"
mkdir -p /run/dhcpcd /var/lib/dhcpcd
DHCPCD_PID=
dhcpcd_wan() { # ADDRESS: runs dhcpcd until the twin holds ADDRESS
    # Not through the `gw` function: $! must be dhcpcd itself (each step execs the next).
    ip netns exec "$TWIN_NS" unshare --mount sh -c \
        'mount -t tmpfs tmpfs /run/dhcpcd && mount -t tmpfs tmpfs /var/lib/dhcpcd && exec "$@"' sh \
        dhcpcd -B -4 -f "$WORK/dhcpcd.conf" -c "$WORK/dhcpcd-hook" wan >>"$WORK/dhcpcd.log" 2>&1 &
    DHCPCD_PID=$!
    for _ in $(seq 1 150); do
        gw ip -4 addr show dev wan | grep -q "inet $1/" && return 0
        kill -0 "$DHCPCD_PID" 2>/dev/null || break
        sleep 0.2
    done
    fail "dhcpcd got no lease of $1: $(tail -n 8 "$WORK/dhcpcd.log"); ISP: $(tail -n 5 "$WORK/isp.log" 2>/dev/null)"
}
# dhcp_client_start N ADDRESS: the N-th client run, until the twin holds ADDRESS.
dhcp_client_start() {
    if [[ $DHCP_CLIENT == dhcpcd ]]; then
        dhcpcd_wan "$2"
    else
        dhclient_wan "$WORK/dhclient-$1.leases"
    fi
}
sleep 0.5
dhcp_client_start 1 10.0.0.50
expect_output "the WAN twin holds the lease 10.0.0.50" "inet 10\.0\.0\.50/24" gw ip -4 addr show dev wan
grep -q "DHCPACK(eth0) 10.0.0.50" "$WORK/isp.log" || fail "the ISP logged no DHCPACK for 10.0.0.50"
for _ in $(seq 1 20); do
    grep -q "address from the kernel twin (dhcp) applied.*10.0.0.50/24" "$WORK/gateway.log" && break
    sleep 0.1
done
grep -q "address from the kernel twin (dhcp) applied.*10.0.0.50/24" "$WORK/gateway.log" ||
    fail "the gateway did not follow the twin's address"
pass "the gateway follows the twin's address 10.0.0.50/24 (netlink)"
[[ $(seen_as 10.0.0.2 40500) == 10.0.0.50 ]] || fail "LAN -> WAN was not masqueraded to 10.0.0.50"
pass "LAN -> WAN is masqueraded with the leased address 10.0.0.50"

# A kernel route on the twin: used within a second, and not once removed.
[[ $(seen_as 198.51.100.1) == none ]] || fail "198.51.100.1 was reachable with no route to it"
gw ip route add 198.51.100.0/24 via 10.0.0.2 dev wan
added=$(date +%s%N)
reached=
for _ in $(seq 1 10); do
    if [[ $(seen_as 198.51.100.1) == 10.0.0.50 ]]; then
        reached=$(date +%s%N)
        break
    fi
done
[[ -n $reached ]] || fail "the kernel route 198.51.100.0/24 on the twin was not used: $(curl -sf "$METRICS" | grep -E "^gateway_(dropped|worker)" | grep -v " 0$")"
elapsed_ms=$(((reached - added) / 1000000))
((elapsed_ms <= 1000)) || fail "the kernel route took ${elapsed_ms} ms to be used"
pass "a route added in the kernel on the WAN twin is used by the dataplane (${elapsed_ms} ms)"
gw ip route del 198.51.100.0/24 via 10.0.0.2 dev wan
sleep 0.3
[[ $(seen_as 198.51.100.1) == none ]] || fail "198.51.100.1 was still reached after its kernel route went"
pass "removed in the kernel, removed from the dataplane"

# The ISP changes the lease: another address, and a default route now. The client releases
# its lease first (to the first server), then the ISP's server is restarted with the change.
gone_before=$(metric 'gateway_dropped_packets_total{reason="nat_address_gone"')
# The DHCPRELEASE is a unicast datagram to the server: the kernel needs the server's MAC, and
# the client removes the address right after sending it, which flushes a neighbour entry
# still being resolved (the ARP reply reaches the twin through the control thread, later
# than on a wire). So the twin learns it first, here by a ping (whose answer the default
# `wan -> local` drop refuses: only the ARP exchange matters); on a real WAN it has the ISP
# router's entry anyway. (Until now the client spoke through raw sockets only.)
gw ping -c 1 -W 1 10.0.0.2 >/dev/null 2>&1 || true
gw ip neigh show 10.0.0.2 dev wan | grep -q lladdr ||
    fail "the WAN twin did not learn the ISP server's MAC: $(gw ip neigh show dev wan)"
if [[ $DHCP_CLIENT == dhcpcd ]]; then
    # SIGALRM: dhcpcd releases its lease (DHCPRELEASE), removes the address and exits.
    old_client=$DHCPCD_PID
    kill -ALRM "$old_client"
else
    old_client=$(cat "$WORK/dhclient.pid")
    gw dhclient -r -sf "$WORK/dhclient-script" -lf "$WORK/dhclient-1.leases" \
        -pf "$WORK/dhclient.pid" wan >>"$WORK/dhclient.log" 2>&1 || true
fi
for _ in $(seq 1 50); do
    kill -0 "$old_client" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$old_client" 2>/dev/null && fail "the first $DHCP_CLIENT did not stop on release"
gw ip -4 addr show dev wan | grep -q "inet 10\.0\.0\.50/" && fail "the released address is still on the twin"
for _ in $(seq 1 20); do
    grep -q "DHCPRELEASE(eth0) 10.0.0.50" "$WORK/isp.log" && break
    sleep 0.1
done
grep -q "DHCPRELEASE(eth0) 10.0.0.50" "$WORK/isp.log" || fail "the ISP saw no DHCPRELEASE of 10.0.0.50: $(tail -n 5 "$WORK/isp.log"); $DHCP_CLIENT: $(tail -n 5 "$WORK/$DHCP_CLIENT.log")"
pass "$DHCP_CLIENT released 10.0.0.50 and the twin lost it"
kill "$ISP_PID"
wait "$ISP_PID" 2>/dev/null || true
kill -0 "$ISP_PID" 2>/dev/null && fail "the first DHCP server did not stop"
isp_dhcp 10.0.0.77 "option:router,10.0.0.2"
sleep 0.5
dhcp_client_start 2 10.0.0.77
gw ip -4 addr show dev wan | grep -q "inet 10\.0\.0\.77/24" ||
    fail "the WAN twin does not hold the new lease 10.0.0.77: $(gw ip -4 addr show dev wan); $DHCP_CLIENT: $(tail -n 12 "$WORK/$DHCP_CLIENT.log"); ISP: $(tail -n 6 "$WORK/isp.log")"
pass "the WAN twin holds the new lease 10.0.0.77"
for _ in $(seq 1 20); do
    grep -q "address from the kernel twin (dhcp) applied.*10.0.0.77/24" "$WORK/gateway.log" && break
    sleep 0.1
done
# The flow from port 40500 was bound to 10.0.0.50: its next packet ends it, the one after
# is a new flow on the new address.
seen_as 10.0.0.2 40500 >/dev/null
gone=$(($(metric 'gateway_dropped_packets_total{reason="nat_address_gone"') - gone_before))
((gone >= 1)) || fail "the flow bound to the old address was not ended (nat_address_gone $gone)"
pass "the flow bound to 10.0.0.50 was ended ($gone nat_address_gone)"
[[ $(seen_as 10.0.0.2 40500) == 10.0.0.77 ]] || fail "the host's next flow was not masqueraded to 10.0.0.77"
[[ $(seen_as 10.0.0.2) == 10.0.0.77 ]] || fail "new flows were not masqueraded to 10.0.0.77"
pass "after the ISP changed the lease, new flows use 10.0.0.77"
expect_output "the default route from the new lease is in the twin's kernel" \
    "default via 10\.0\.0\.2 dev wan" gw ip route show
[[ $(seen_as 198.51.100.1) == 10.0.0.77 ]] || fail "the DHCP default route was not followed"
pass "the default route from DHCP is followed: 198.51.100.1 reached through it"
# TunnelVision: a route on the WAN twin into half of the LAN's subnet (what a rogue DHCP
# server's option 121 has a client install) would beat the LAN's connected /24, send the
# replies to the LAN host 192.168.10.2 (in that half) out of the WAN, and have strict source
# validation drop the host's own packets. The gateway refuses it and counts it; the host's
# TCP exchanges through NAT carry on.
REFUSED='gateway_kernel_routes_refused{reason="overlaps_connected"}'
refused_before=$(metric "$REFUSED")
wan timeout 120 python3 -c '
import socket
s = socket.create_server(("10.0.0.2", 7008))
while True:
    c, peer = s.accept()
    with c:
        c.settimeout(3)
        try:
            if c.recv(64):
                c.sendall(peer[0].encode())
        except OSError:
            pass
' >/dev/null 2>&1 &
TCP_SERVER=$!
poll_until 10 listening gwlab-wan 7008 || fail "the WAN host's TCP server did not listen"
# tcp_exchanges: of five TCP connections from the LAN host to the WAN host, how many
# exchanged a request and its answer, seen from the leased address.
tcp_exchanges() {
    lan python3 -c '
import socket
done = 0
for _ in range(5):
    try:
        with socket.create_connection(("10.0.0.2", 7008), timeout=3) as c:
            c.settimeout(3)
            c.sendall(b"who")
            done += c.recv(64) == b"10.0.0.77"
    except OSError:
        pass
print(done)'
}
[[ $(tcp_exchanges) == 5 ]] || fail "LAN -> WAN TCP did not work before the rogue route"
gw ip route add 192.168.10.0/25 via 10.0.0.2 dev wan
refusal_counted() { (($(metric "$REFUSED") > refused_before)); }
poll_until 10 refusal_counted ||
    fail "the route into the LAN's subnet was not refused: $(curl -sf "$METRICS" | grep '^gateway_kernel_routes_refused')"
grep -q "own subnet was refused.*192\.168\.10\.0/25" "$WORK/gateway.log" ||
    fail "the refusal was not logged with the route"
pass "a kernel route into half the LAN's subnet (192.168.10.0/25 via the WAN) is refused and counted"
# The metric reads the router config in force: the workers have it (or take it before their
# next burst), so every exchange below runs under it.
exchanged=$(tcp_exchanges)
[[ $exchanged == 5 ]] ||
    fail "with the rogue route on the twin, $exchanged of 5 LAN -> WAN TCP exchanges completed: $(curl -sf "$METRICS" | grep -E '^gateway_dropped_packets_total' | grep -v ' 0$')"
[[ $(seen_as 10.0.0.2) == 10.0.0.77 ]] || fail "with the rogue route on the twin, LAN -> WAN UDP failed"
pass "the LAN host in the refused half keeps its TCP and UDP exchanges through NAT"
gw ip route del 192.168.10.0/25 via 10.0.0.2 dev wan
refusal_gone() { (($(metric "$REFUSED") == refused_before)); }
poll_until 10 refusal_gone || fail "the refusal was still counted after the route went"
pass "removed in the kernel, no longer counted"
kill "$TCP_SERVER" 2>/dev/null || true

# A "DHCP answer" a WAN host addresses to a LAN host, with the twins' namespace forwarding
# (as it does when it routes for FRR) and the LAN's twin in it: not punted to the WAN twin
# (it is for another interface's subnet), so the zone policy drops it; and were the kernel
# to forward anything, only its own traffic leaves by a twin. The LAN host hears none of it.
gw sysctl -qw net.ipv4.ip_forward=1
lan python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 68))
heard = 0
while True:
    s.recv(2048)
    heard += 1
    open(sys.argv[1], "w").write(str(heard))
' "$WORK/forged.count" &
LISTENER=$!
poll_until 10 listening gwlab-lan 68 udp || fail "the LAN host's listener on UDP 68 did not start"
wan_mac=$(gw cat /sys/class/net/wan/address)
dropped_before=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
wan "$PYTHON" -c '
import sys
from scapy.all import Ether, IP, UDP, sendp
sendp(Ether(dst=sys.argv[1]) / IP(src="10.0.0.2", dst="192.168.10.2") / UDP(sport=67, dport=68) / b"forged",
      iface="eth0", count=5, verbose=False)
' "$wan_mac"
forged_dropped() { (( $(metric 'gateway_dropped_packets_total{reason="firewall_drop"') - dropped_before >= 5 )); }
poll_until 10 forged_dropped ||
    fail "the forged DHCP answers were not dropped by the firewall ($(($(metric 'gateway_dropped_packets_total{reason="firewall_drop"') - dropped_before)) of 5)"
heard=$(cat "$WORK/forged.count" 2>/dev/null || echo 0)
((heard == 0)) || fail "the LAN host received $heard forged DHCP answers from the WAN"
pass "a WAN host's DHCP answers addressed to a LAN host: 5 of 5 dropped by the zone policy, none delivered"
kill "$LISTENER" 2>/dev/null || true
wait "$LISTENER" 2>/dev/null || true
assert_no_conntrack_invalid
stop_gateway
pass "the gateway stops cleanly"
