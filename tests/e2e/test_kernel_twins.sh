#!/usr/bin/env bash
# Kernel twins: the LAN's and the WAN's twins (net_tap devices with their interface's MAC and
# address) live in the namespace gwlab-gw, never in the root namespace the gateway runs in,
# so the test host's routes are untouched. Real daemons on them:
# - a TCP service on the twins is reachable from the LAN host and refused from the WAN by
#   the default local policy (wan -> local: drop), until a local rule (applied by a reload)
#   opens its port to the WAN;
# - the LAN host, its address removed, gets a lease from dnsmasq on the twin (with the shipped
#   deploy/dnsmasq/gateway-lan.conf) with dhclient
#   (broadcast DHCP punted, the kernel's unicast answers transmitted by worker 0), resolves
#   a name with that dnsmasq and one it forwards to a resolver on the WAN host (the kernel's
#   own connections are tracked: no rule lets the replies in), and reaches the WAN host
#   through masquerade; the WAN twin's kernel downloads a page from the WAN host;
# - a UDP flood at 192.168.10.1 is held to the punt budget and counted, while forwarding
#   goes on.
# Then a gateway run inside gwlab-gw without kernel_twins.netns: its twin appears in that,
# its own, namespace, under kernel_twin_name, with the port's MAC and IPv6 off.
# (The HTTP servers bind 0.0.0.0: http.server looks up the name of a specific address first,
# and the lab namespaces have no DNS to answer it.)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwlab-gw
cleanup_twins() {
    if ip netns pids "$TWIN_NS" >/dev/null 2>&1; then
        ip netns pids "$TWIN_NS" | xargs -r kill 2>/dev/null || true
    fi
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_twins EXIT
gw() { ip netns exec "$TWIN_NS" "$@"; }

for tool in dnsmasq dhclient; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs it"
done
# The shipped unit that runs dnsmasq on the twin, after the gateway.
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$WORK/systemd"
    cp "$ROOT/deploy/systemd/gateway.service" "$ROOT/deploy/systemd/gateway-dnsmasq.service" "$WORK/systemd/"
    systemd-analyze verify "$WORK/systemd/gateway-dnsmasq.service" >"$WORK/verify.txt" 2>&1 ||
        fail "systemd-analyze verify gateway-dnsmasq.service: $(cat "$WORK/verify.txt")"
    grep -q '^After=gateway.service' "$WORK/systemd/gateway-dnsmasq.service" ||
        fail "gateway-dnsmasq.service does not start after the gateway"
    pass "systemd-analyze verify accepts deploy/systemd/gateway-dnsmasq.service"
fi
lab_up_with_twin_netns "$TWIN_NS"

cat >"$WORK/twins.toml" <<TOML
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
address = "10.0.0.1/24"
kernel_twin = true
[[routes]]
destination = "0.0.0.0/0"
via = "10.0.0.2"
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
punt_per_sec = 2000
punt_burst = 200
[metrics]
listen = "127.0.0.1:19131"
TOML
with_e2e_workers "$WORK/twins.toml"
METRICS=http://127.0.0.1:19131/metrics
start_gateway "$WORK/twins.toml"

# The twin: in its namespace, with the LAN's address and MAC; none in the root namespace.
ip link show lan >/dev/null 2>&1 && fail "a twin named lan appeared in the root namespace"
expect_output "the LAN twin carries 192.168.10.1/24 in $TWIN_NS" \
    "inet 192\.168\.10\.1/24" gw ip -4 addr show dev lan
expect_output "the LAN host reaches the gateway's address" \
    " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 192.168.10.1
twin_mac=$(gw cat /sys/class/net/lan/address)
host_sees=$(lan ip neigh show 192.168.10.1 | awk '{ print $5 }')
[[ $twin_mac == "$host_sees" ]] ||
    fail "the twin's MAC $twin_mac is not the one the LAN host has for the gateway ($host_sees)"
pass "the twin has the LAN port's MAC ($twin_mac)"

# (a) A TCP service on the twin.
mkdir -p "$WORK/www"
echo "served by the LAN twin" >"$WORK/www/twin.txt"
gw python3 -m http.server 8080 --bind 0.0.0.0 --directory "$WORK/www" >"$WORK/twin-http.log" 2>&1 &
for _ in $(seq 1 50); do
    gw ss -ltn | grep -q ':8080 ' && break
    sleep 0.1
done
expect_output "the LAN host fetches a page from a TCP service on the LAN twin" \
    "served by the LAN twin" lan curl -sf --max-time 5 http://192.168.10.1:8080/twin.txt
dropped_before=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
for address in 10.0.0.1 192.168.10.1; do
    if wan curl -sf --max-time 2 "http://$address:8080/twin.txt" >/dev/null 2>&1; then
        fail "the WAN host reached the twin's service at $address"
    fi
done
dropped_after=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
((dropped_after > dropped_before)) ||
    fail "the WAN's attempts were not counted as firewall_drop ($dropped_before -> $dropped_after)"
pass "the WAN host is refused by the default local policy ($((dropped_after - dropped_before)) firewall drops)"
cat >>"$WORK/twins.toml" <<'TOML'
[[firewall.rules]]
name = "web-on-the-gateway-from-wan"
from = "wan"
to = "local"
protocol = "tcp"
destination_ports = "8080"
action = "accept"
TOML
reloaded_before=$(metric 'gateway_config_reloads_total{result="success"}')
kill -HUP "$GATEWAY_PID"
for _ in $(seq 1 50); do
    (($(metric 'gateway_config_reloads_total{result="success"}') > reloaded_before)) && break
    sleep 0.1
done
(($(metric 'gateway_config_reloads_total{result="success"}') > reloaded_before)) ||
    fail "the reload adding the local rule was not applied"
expect_output "a local rule opens the service to the WAN host, on the WAN twin" \
    "served by the LAN twin" wan curl -sf --max-time 5 http://10.0.0.1:8080/twin.txt

# (b) DHCP from dnsmasq on the twin, DNS from it (its own name, and one it forwards to a
# resolver on the WAN host with no rule for the replies: the kernel's connections are
# tracked), then masquerade.
# The shipped config (deploy/dnsmasq/gateway-lan.conf), moved to the lab's subnet, with the
# test's files, a name to resolve and the WAN host as its upstream.
wan dnsmasq --keep-in-foreground --conf-file=/dev/null --user=root --no-resolv --no-hosts \
    --listen-address=10.0.0.2 --bind-interfaces --address=/example.test/198.51.100.7 \
    --pid-file="$WORK/wan-dnsmasq.pid" --log-facility="$WORK/wan-dnsmasq.log" --log-queries &
sed 's/192\.168\.1\./192.168.10./g' "$ROOT/deploy/dnsmasq/gateway-lan.conf" >"$WORK/dnsmasq.conf"
cat >>"$WORK/dnsmasq.conf" <<CONF
user=root
no-resolv
no-hosts
server=10.0.0.2
address=/gateway.lan/192.168.10.1
dhcp-leasefile=$WORK/dnsmasq.leases
pid-file=$WORK/dnsmasq.pid
log-facility=$WORK/dnsmasq.log
log-dhcp
no-ping
CONF
gw dnsmasq --test --conf-file="$WORK/dnsmasq.conf" >/dev/null 2>&1 ||
    fail "dnsmasq refuses deploy/dnsmasq/gateway-lan.conf: $(gw dnsmasq --test --conf-file="$WORK/dnsmasq.conf" 2>&1)"
gw dnsmasq --keep-in-foreground --conf-file="$WORK/dnsmasq.conf" &
dhclient_script "$WORK/dhclient-script"
lan ip addr flush dev eth0
lan ip -4 addr show dev eth0 | grep -q inet && fail "the LAN host still has an address"
punted_before=$(metric gateway_worker_punted_total)
lan timeout 30 dhclient -4 -1 -v -sf "$WORK/dhclient-script" -lf "$WORK/dhclient.leases" \
    -pf "$WORK/dhclient.pid" eth0 >"$WORK/dhclient.log" 2>&1 ||
    fail "dhclient got no lease: $(tail -n 5 "$WORK/dhclient.log"); dnsmasq: $(tail -n 5 "$WORK/dnsmasq.log" 2>/dev/null)"
read -r leased dns_server <"$WORK/lease"
[[ $leased == 192.168.10.1[0-9][0-9] ]] ||
    fail "the lease $leased is not from dnsmasq's range"
expect_output "the LAN host holds its lease $leased" "inet $leased/24" lan ip -4 addr show dev eth0
[[ $dns_server == 192.168.10.1 ]] || fail "the lease names DNS server $dns_server"
grep -q "DHCPACK(lan) $leased" "$WORK/dnsmasq.log" || fail "dnsmasq logged no DHCPACK for $leased"
punted=$(($(metric gateway_worker_punted_total) - punted_before))
((punted >= 2)) || fail "DISCOVER and REQUEST were not punted ($punted)"
pass "dnsmasq on the LAN twin leased $leased to the LAN host ($punted packets punted)"
# resolve NAME: the A record the LAN host gets for NAME from the twin's dnsmasq.
resolve() {
    lan python3 - "$1" <<'PY'
import socket, struct, sys
query = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
query += b"".join(bytes([len(p)]) + p.encode() for p in sys.argv[1].split(".")) + b"\0"
query += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(query, ("192.168.10.1", 53))
reply, _ = s.recvfrom(512)
print(socket.inet_ntoa(reply[-4:]) if struct.unpack(">H", reply[6:8])[0] else "no answer")
PY
}
answer=$(resolve gateway.lan) || fail "no DNS answer from dnsmasq on the twin"
[[ $answer == 192.168.10.1 ]] || fail "gateway.lan resolved to $answer"
pass "the LAN host resolves gateway.lan with the twin's dnsmasq"
answer=$(resolve example.test) ||
    fail "no answer for example.test: the twin's dnsmasq got nothing back from 10.0.0.2 ($(tail -n 3 "$WORK/dnsmasq.log"))"
[[ $answer == 198.51.100.7 ]] || fail "example.test resolved to $answer"
grep -q 'query\[A\] example.test from 10.0.0.1' "$WORK/wan-dnsmasq.log" ||
    fail "the WAN resolver did not log the gateway's query: $(tail -n 3 "$WORK/wan-dnsmasq.log")"
pass "the twin's dnsmasq forwards example.test to the WAN host's resolver and answers the LAN host (no rule for the replies)"

mkdir -p "$WORK/wan-www"
echo "served by the WAN host" >"$WORK/wan-www/wan.txt"
wan python3 -m http.server 8081 --bind 0.0.0.0 --directory "$WORK/wan-www" >"$WORK/wan-http.log" 2>&1 &
for _ in $(seq 1 50); do
    wan ss -ltn | grep -q ':8081 ' && break
    sleep 0.1
done
expect_output "the leased LAN host reaches the WAN host" \
    "served by the WAN host" lan curl -sf --max-time 5 http://10.0.0.2:8081/wan.txt
grep -q '^10\.0\.0\.1 ' "$WORK/wan-http.log" ||
    fail "the WAN host did not see the gateway's address: $(cat "$WORK/wan-http.log")"
pass "through masquerade: the WAN host saw 10.0.0.1"
expect_output "the WAN twin's kernel downloads a page from the WAN host (TCP it opened, tracked)" \
    "served by the WAN host" gw curl -sf --max-time 5 http://10.0.0.2:8081/wan.txt

# A flood at the gateway's LAN address: held to the punt budget, forwarding unharmed.
policed_before=$(metric 'gateway_dropped_packets_total{reason="punt_policed"')
lan python3 - <<'PY'
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.time() + 1.0
while time.time() < end:
    for _ in range(100):
        s.sendto(b"x" * 64, ("192.168.10.1", 9999))
PY
policed=$(($(metric 'gateway_dropped_packets_total{reason="punt_policed"') - policed_before))
((policed > 0)) || fail "a one-second UDP flood at 192.168.10.1 was not held to the punt budget"
pass "a UDP flood at the gateway's address: $policed packets over the budget dropped as punt_policed"
expect_output "forwarding still works after the flood" \
    "served by the WAN host" lan curl -sf --max-time 5 http://10.0.0.2:8081/wan.txt
from_twins=$(metric gateway_worker_from_twins_total)
((from_twins > 0)) || fail "nothing the kernel sent was counted"
pass "the kernel sent $from_twins frames through the gateway"
stop_gateway
pass "the gateway stops cleanly with its twins"
ip -n "$TWIN_NS" link show lan >/dev/null 2>&1 && fail "the LAN twin outlived the gateway"
pass "the twins are gone with the gateway"

# Without kernel_twins.netns the twin lives in the gateway's own namespace. Run a gateway
# inside $TWIN_NS (on a null device, so nothing of the lab is involved) and find its twin
# there, under its configured name, with the port's MAC and address.
cat >"$WORK/own-ns.toml" <<'TOML'
[eal]
hugepages = "off"
file_prefix = "gateway-e2e-twin"
[workers]
lcores = [1]
[[interfaces]]
name = "null"
device = "net_null0,no-rx=1"
address = "192.168.50.1/24"
kernel_twin = true
kernel_twin_name = "twin-null"
[metrics]
listen = "127.0.0.1:19132"
TOML
cat >"$WORK/gateway-in-ns" <<SH
#!/bin/sh
exec ip netns exec $TWIN_NS "$GATEWAY" "\$@"
SH
chmod +x "$WORK/gateway-in-ns"
GATEWAY="$WORK/gateway-in-ns" start_gateway "$WORK/own-ns.toml"
expect_output "without a netns the twin is in the gateway's own namespace, named as configured" \
    "inet 192\.168\.50\.1/24" gw ip -4 addr show dev twin-null
port_mac=$(grep -o 'interface=null address=192.168.50.1/24 mac=[0-9a-f:]*' "$WORK/gateway.log" | sed 's/.*mac=//')
[[ -n $port_mac && $(gw cat /sys/class/net/twin-null/address) == "$port_mac" ]] ||
    fail "the twin's MAC is not the port's ($port_mac)"
[[ $(gw cat /proc/sys/net/ipv6/conf/twin-null/disable_ipv6) == 1 ]] || fail "IPv6 is on on the twin"
pass "the twin has the port's MAC ($port_mac) and IPv6 off"
stop_gateway
pass "that gateway stops cleanly too"
