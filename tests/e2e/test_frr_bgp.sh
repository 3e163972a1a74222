#!/usr/bin/env bash
# BGP with FRR on the WAN twin (issue 16's stretch). The gateway's WAN interface has a kernel
# twin in the namespace gwlab-gw, where FRR's zebra and bgpd run with the shipped
# deploy/frr/frr.conf (moved to the lab's addresses); the WAN host runs FRR too and plays the
# ISP's router: eBGP, AS 64496, announcing a default route. The gateway's config has no
# default route, and 198.51.100.1 (on the WAN host) is reachable only through the one BGP
# brings. Real daemons:
# - before bgpd runs on the twin, 198.51.100.1 is unreachable (no_route);
# - without any rule the session comes up: bgpd's own connection to the ISP is the kernel's,
#   tracked by the gateway, so its replies pass; the ISP's connections to port 179 are
#   dropped by `wan -> local` (firewall_drop) until the rule of deploy/frr/gateway-bgp.toml
#   (a reload) lets in exactly the ISP's router;
# - zebra installs the default route in the kernel on the twin, the gateway mirrors it into
#   its FIB (netlink), and a LAN host reaches 198.51.100.1 through masquerade;
# - the ISP withdraws the route (no network 0.0.0.0/0): gone from the twin's kernel, and the
#   dataplane stops using it (no_route); announced again, used again; the ISP shuts the
#   session: gone again.
# Each FRR instance has its own directory (config, pid files, vty sockets, zserv socket);
# no systemd, nothing in /etc/frr or /var/run/frr is used.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwlab-gw
# FRR's daemons drop to the frr user: their directory must be reachable by it ($WORK is not).
FRR_DIR=$(mktemp -d /tmp/gateway-e2e-frr.XXXXXX)
chown frr:frr "$FRR_DIR"
cleanup_frr() {
    for ns in "$TWIN_NS" gwlab-wan; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
    rm -rf "$FRR_DIR"
}
trap cleanup_frr EXIT
gw() { ip netns exec "$TWIN_NS" "$@"; }

for tool in /usr/lib/frr/zebra /usr/lib/frr/bgpd vtysh; do
    command -v "$tool" >/dev/null || fail "$tool is missing: make deps installs frr"
done
# The shipped config parses (bgpd's dry run).
/usr/lib/frr/bgpd -C -f "$ROOT/deploy/frr/frr.conf" >"$WORK/dryrun.txt" 2>&1 ||
    fail "bgpd -C refuses deploy/frr/frr.conf: $(cat "$WORK/dryrun.txt")"
grep -q 'No such command\|Error' "$WORK/dryrun.txt" &&
    fail "bgpd -C complains about deploy/frr/frr.conf: $(cat "$WORK/dryrun.txt")"
bash -n "$ROOT/deploy/frr/daemons" || fail "deploy/frr/daemons is not a shell fragment"
pass "bgpd -C accepts deploy/frr/frr.conf"

lab_up_with_twin_netns "$TWIN_NS"
# Beyond the ISP: the WAN host answers for 198.51.100.1; the lab gives the gateway no route.
wan ip addr add 198.51.100.1/32 dev lo

cat >"$WORK/bgp.toml" <<TOML
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
kernel_twin = true
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
[metrics]
listen = "127.0.0.1:19134"
TOML
with_e2e_workers "$WORK/bgp.toml"
METRICS=http://127.0.0.1:19134/metrics
start_gateway "$WORK/bgp.toml"

# session_state: the gateway's bgpd's view of its session with the ISP.
session_state() {
    vty gateway -c 'show bgp ipv4 unicast summary json' 2>/dev/null | python3 -c '
import json, sys
try:
    print(json.load(sys.stdin)["peers"]["10.0.0.2"]["state"])
except (ValueError, KeyError):
    print("none")
'
}
# isp_config COMMAND...: on the ISP's bgpd, in its IPv4 unicast address family.
isp_config() {
    local args=(-c 'configure terminal' -c 'router bgp 64496' -c 'address-family ipv4 unicast')
    for command in "$@"; do
        args+=(-c "$command")
    done
    vty isp "${args[@]}" >/dev/null
}

# The ISP's router: announces a default route to the gateway as a network statement (no
# such route of its own: import-check off), withdrawn and announced again by removing and
# adding the statement. Passive: only the gateway's bgpd opens the session. (Announced by
# default-originate instead, its removal was sometimes never sent as a withdrawal when a
# route refresh crossed it: FRR 8.4, 3 of 8 runs.)
cat >"$WORK/isp-frr.conf" <<'CONF'
frr defaults traditional
hostname isp
!
route-map ALL permit 10
exit
!
router bgp 64496
 bgp router-id 10.0.0.2
 no bgp network import-check
 neighbor 10.0.0.1 remote-as 64512
 neighbor 10.0.0.1 passive
 address-family ipv4 unicast
  network 0.0.0.0/0
  neighbor 10.0.0.1 route-map ALL in
  neighbor 10.0.0.1 route-map ALL out
 exit-address-family
exit
!
CONF
# The shipped config on the gateway's side, on the lab's addresses; log to the file below.
sed -e 's/203\.0\.113\.2/10.0.0.1/g' -e 's/203\.0\.113\.1/10.0.0.2/g' -e '/^log syslog/d' \
    "$ROOT/deploy/frr/frr.conf" >"$WORK/gateway-frr.conf"
grep -q 'neighbor 10.0.0.2 remote-as 64496' "$WORK/gateway-frr.conf" ||
    fail "deploy/frr/frr.conf no longer peers with 203.0.113.1 in AS 64496"
frr_start isp gwlab-wan "$WORK/isp-frr.conf"

# The UDP "who am I" server beyond the ISP: replies with the address it sees.
wan python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.1", 7007))
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(peer[0].encode(), peer)
' >/dev/null 2>&1 &
# seen_as: the address the server beyond the ISP saw the LAN host as, or "none".
seen_as() {
    lan python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.5)
s.sendto(b"who", ("198.51.100.1", 7007))
try:
    print(s.recvfrom(64)[0].decode())
except (socket.timeout, OSError):
    print("none")
PY
}
# until_seen ADDRESS|none: seen_as gives it within about 2 s.
until_seen() {
    for _ in $(seq 1 8); do
        [[ $(seen_as) == "$1" ]] && return 0
        sleep 0.2
    done
    return 1
}
# until_route present|absent: the BGP default route on the twin, within 10 s.
until_route() {
    for _ in $(seq 1 100); do
        if gw ip route show default | grep -q 'via 10\.0\.0\.2 dev wan proto bgp'; then
            [[ $1 == present ]] && return 0
        else
            [[ $1 == absent ]] && return 0
        fi
        sleep 0.1
    done
    return 1
}
no_route() { metric 'gateway_dropped_packets_total{reason="no_route"'; }
# isp_connects: whether the ISP's router can open a TCP connection to the gateway's port 179.
isp_connects() {
    wan python3 -c '
import socket, sys
s = socket.socket()
s.settimeout(1.5)
s.bind(("10.0.0.2", 0))
sys.exit(s.connect_ex(("10.0.0.1", 179)) != 0)'
}

# Before bgpd runs on the twin nothing gives a route to 198.51.100.1.
no_route_before=$(no_route)
[[ $(seen_as) == none ]] || fail "198.51.100.1 was reachable before BGP gave a route to it"
(($(no_route) > no_route_before)) || fail "the LAN host's datagram was not counted as no_route"
pass "before BGP, 198.51.100.1 is unreachable (no_route)"

# (a) Without any rule: bgpd's own connection to the ISP is tracked, and the session comes up.
frr_start gateway "$TWIN_NS" "$WORK/gateway-frr.conf"
started_at=$(date +%s)
for _ in $(seq 1 200); do
    [[ $(session_state) == Established ]] && break
    sleep 0.1
done
[[ $(session_state) == Established ]] ||
    fail "the BGP session is not established 20 s after bgpd started, with no rule: $(session_state); $(tail -n 5 "$FRR_DIR/gateway/bgpd.log")"
pass "with no rule, the eBGP session bgpd opens is established ($(($(date +%s) - started_at)) s): the kernel's connection is tracked"
# The ISP's own connection to port 179 is not a reply to anything: wan -> local drops it.
dropped_before=$(metric 'gateway_dropped_packets_total{reason="firewall_drop"')
isp_connects && fail "the ISP's router opened a connection to port 179 with no rule letting it in"
dropped=$(($(metric 'gateway_dropped_packets_total{reason="firewall_drop"') - dropped_before))
((dropped > 0)) || fail "the ISP's SYNs to port 179 were not dropped by the local policy"
pass "the ISP's own connection to port 179 is refused by wan -> local ($dropped firewall drops)"

# (b) The shipped rule, by reload: the ISP's router may connect to port 179 too.
sed 's/203\.0\.113\.1/10.0.0.2/g' "$ROOT/deploy/frr/gateway-bgp.toml" >>"$WORK/bgp.toml"
grep -q 'source = "10.0.0.2/32"' "$WORK/bgp.toml" || fail "deploy/frr/gateway-bgp.toml has no rule for the ISP"
reloaded_before=$(metric 'gateway_config_reloads_total{result="success"}')
kill -HUP "$GATEWAY_PID"
for _ in $(seq 1 50); do
    (($(metric 'gateway_config_reloads_total{result="success"}') > reloaded_before)) && break
    sleep 0.1
done
(($(metric 'gateway_config_reloads_total{result="success"}') > reloaded_before)) ||
    fail "the reload adding deploy/frr/gateway-bgp.toml's rule was not applied"
isp_connects || fail "with deploy/frr/gateway-bgp.toml's rule the ISP's router still cannot connect to port 179"
pass "with deploy/frr/gateway-bgp.toml's rule the ISP's router connects to port 179"
[[ $(session_state) == Established ]] || fail "the session went down with the reload: $(session_state)"
until_route present ||
    fail "zebra did not install the BGP default route on the twin: $(gw ip route show)"
pass "zebra installed the learnt default route on the WAN twin: $(gw ip route show default)"
until_seen 10.0.0.1 ||
    fail "the LAN host did not reach 198.51.100.1 through the BGP default route: $(curl -sf "$METRICS" | grep -E '^gateway_dropped' | grep -v ' 0$')"
grep -q 'kernel addresses and routes applied.*kernel_routes=1' "$WORK/gateway.log" ||
    fail "the gateway did not log the kernel route it took"
expect_output "the LAN host pings 198.51.100.1 through the BGP route" \
    " 0% packet loss" lan ping -c 3 -i 0.2 -W 2 198.51.100.1
pass "a LAN host reaches 198.51.100.1 through the BGP route, masqueraded to 10.0.0.1"

# (c) The ISP withdraws the default route: gone from the kernel, then from the dataplane.
isp_config 'no network 0.0.0.0/0'
until_route absent || { vty isp -c 'show bgp neighbors 10.0.0.1' > /tmp/dbg_isp.txt; vty gateway -c 'show bgp neighbors 10.0.0.2' > /tmp/dbg_gw.txt; cp $FRR_DIR/gateway/bgpd.log /tmp/dbg_gw_bgpd.log; cp $FRR_DIR/isp/bgpd.log /tmp/dbg_isp_bgpd.log; gw ss -tn > /tmp/dbg_ss_gw.txt; wan ss -tn > /tmp/dbg_ss_wan.txt; fail "the withdrawn default route is still on the twin: $(gw ip route show default)"; }
no_route_before=$(no_route)
until_seen none || fail "198.51.100.1 was still reached after the ISP withdrew the route"
(($(no_route) > no_route_before)) || fail "after the withdrawal the LAN host's datagrams were not no_route"
[[ $(session_state) == Established ]] || fail "the session went down with the withdrawal"
pass "withdrawn by the ISP: the route left the twin and the FIB, 198.51.100.1 is unreachable (no_route)"

# (d) Announced again, used again; then the ISP shuts the session: gone again.
isp_config 'network 0.0.0.0/0'
until_route present || fail "the announced-again default route did not come back on the twin"
until_seen 10.0.0.1 || fail "the announced-again default route was not used"
pass "announced again: used again"
vty isp -c 'configure terminal' -c 'router bgp 64496' -c 'neighbor 10.0.0.1 shutdown' >/dev/null
until_route absent || fail "the default route stayed on the twin after the session was shut"
until_seen none || fail "198.51.100.1 was still reached after the session was shut"
[[ $(session_state) != Established ]] || fail "the session is still established after the ISP shut it"
pass "the ISP shut the session: the route is gone from the twin and the FIB"
assert_no_conntrack_invalid
stop_gateway
pass "the gateway stops cleanly"
