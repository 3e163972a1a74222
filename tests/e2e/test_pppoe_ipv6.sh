#!/usr/bin/env bash
# IPv6 over PPPoE (issue 50): the WAN port runs a PPPoE session to tests/e2e/pppoe_isp.py
# (scapy) in the WAN namespace, which negotiates IPv6CP beside IPCP, advertises 2001:db8:a::/64
# over the session (Managed flag) and delegates 2001:db8:ff00::/56 by DHCPv6. The
# gateway's WAN twin exists for that IPv6 alone: dhcpcd on it (the shipped
# deploy/dhcpcd/gateway-wan6.conf) sends its Router Solicitation and DHCPv6 Solicit into the
# session through the dataplane, and takes a SLAAC address, the default route via the ISP's
# link-local address (fe80::1, its IPv6CP identifier) and the delegated prefix, whose first
# /64 goes to the LAN twin; the gateway follows, advertises it on the LAN, and routes a LAN
# host's IPv6 into the session, unmasqueraded. The ISP's own host is 2001:db8:1::10 on its
# loopback, reached through its TUN device (the session's far end).
#
#   gwlab-lan: eth0 (SLAAC in the delegated /64) --veth-- gwl-lan [gateway, twin lan]
#   gwlab-wan: eth0 [pppoe_isp.py; TUN ppp-isp: 100.64.0.1, 2001:db8:1::10 on lo]
#       --veth-- gwl-wan [gateway: address = "pppoe", twin wan for IPv6]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$ROOT/scripts/lablib.sh"

TWIN_NS=gwppp6-gw
ISP_PY=/usr/bin/python3 # Debian's python with scapy 2.5 (the python3 on PATH may be a shim)
ISP_LOG=$WORK/isp.log
METRICS=http://127.0.0.1:19171/metrics
IF='interface="wan"'
cleanup_pppoe6() {
    for ns in "$TWIN_NS" gwlab-wan; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            ip netns pids "$ns" | xargs -r kill 2>/dev/null || true
        fi
    done
    cleanup
    ip netns del "$TWIN_NS" 2>/dev/null || true
}
trap cleanup_pppoe6 EXIT
gw() { ip netns exec "$TWIN_NS" "$@"; }
m() { metric "$1" || true; }
ctl() { "$GATEWAY" ctl --socket "$WORK/run/ctl.sock" "$@"; }

# pfail WHAT: fail, with the ISP's log, dhcpcd's and the PPPoE metrics beside the gateway's.
pfail() {
    {
        echo "--- ISP log (last 25 lines) ---"
        tail -n 25 "$ISP_LOG" 2>/dev/null || true
        echo "--- dhcpcd (last 10 lines) ---"
        tail -n 10 "$WORK/dhcpcd.log" 2>/dev/null || true
        echo "--- pppoe metrics ---"
        curl -sf "$METRICS" | grep -E '^gateway_pppoe|reason="pppoe' || true
    } >&2
    fail "$@"
}

command -v dhcpcd >/dev/null || fail "dhcpcd is missing: make deps installs it"
lab_up_with_twin_netns "$TWIN_NS"
# The ISP's side: IPv6 on, its host address on the loopback, the session's far end a TUN
# device (created here so that its routes can be set before the ISP starts).
wan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
    net.ipv6.conf.lo.disable_ipv6=0
wan ip -6 addr add 2001:db8:1::10/128 dev lo
ip -n gwlab-wan tuntap add dev ppp-isp mode tun
wan sysctl -qw net.ipv6.conf.ppp-isp.disable_ipv6=0
ip -n gwlab-wan link set ppp-isp mtu 1492 up
ip -n gwlab-wan addr add 100.64.0.1 peer 100.64.0.2/32 dev ppp-isp
wan ip -6 route add 2001:db8:a::/64 dev ppp-isp
wan ip -6 route add 2001:db8:ff00::/40 dev ppp-isp

cat >"$WORK/pppoe6.toml" <<TOML
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
[interfaces.ipv6]
delegated_prefix = true
router_advertisements = true
ra_interval_secs = 30
[[interfaces]]
name = "wan"
device = "net_af_packet1,iface=gwl-wan"
address = "pppoe"
kernel_twin = true
[interfaces.pppoe]
username = "gateway"
password = "s3cret"
lcp_echo_interval_secs = 2
lcp_echo_failures = 3
[interfaces.ipv6]
autoconfigure = true
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
[kernel_twins]
netns = "$TWIN_NS"
[metrics]
listen = "127.0.0.1:19171"
[ctl]
socket = "$WORK/run/ctl.sock"
TOML
with_e2e_workers "$WORK/pppoe6.toml"

# check-config: a PPPoE interface's twin is for the IPv6 the ISP configures, nothing else.
sed '/^autoconfigure = true$/d' "$WORK/pppoe6.toml" >"$WORK/twin-only.toml"
if "$GATEWAY" check-config "$WORK/twin-only.toml" >"$WORK/check.txt" 2>&1; then
    fail "check-config accepted a PPPoE interface's twin without IPv6 autoconfiguration"
fi
grep -q 'interfaces\[1\]\.kernel_twin' "$WORK/check.txt" ||
    fail "check-config did not name interfaces[1].kernel_twin: $(cat "$WORK/check.txt")"
pass "check-config refuses a PPPoE twin without ipv6.autoconfigure, naming the field"

: >"$ISP_LOG"
ip netns exec gwlab-wan "$ISP_PY" "$ROOT/tests/e2e/pppoe_isp.py" --iface eth0 --user gateway --password s3cret \
    --auth chap --local 100.64.0.1 --client 100.64.0.2 --mru 1492 --tun ppp-isp \
    --ipv6-prefix 2001:db8:a::/64 --ipv6-delegate 2001:db8:ff00::/56 --log "$ISP_LOG" \
    --session-id 4664 >>"$WORK/isp.out" 2>&1 &
ISP_PID=$! # ip netns exec runs the ISP in its own process
for _ in $(seq 1 50); do
    grep -q "isp listening" "$ISP_LOG" 2>/dev/null && break
    sleep 0.2
done
grep -q "isp listening" "$ISP_LOG" || pfail "the ISP did not start: $(tail -n 5 "$WORK/isp.out")"
start_gateway "$WORK/pppoe6.toml"

# 1. The session comes up with IPCP and IPv6CP: the identifiers are the MAC's EUI-64 and the
# ISP's ::1.
for _ in $(seq 1 100); do
    [[ $(m "gateway_pppoe_ipv6_up{$IF}") == 1 ]] && break
    sleep 0.2
done
[[ $(m "gateway_pppoe_session_up{$IF}") == 1 ]] || pfail "no PPPoE session within 20 s"
[[ $(m "gateway_pppoe_ipv6_up{$IF}") == 1 ]] || pfail "the session does not carry IPv6 (IPv6CP not open) within 20 s"
gw_link_local=$(/usr/bin/python3 -c '
import ipaddress, sys
mac = bytes.fromhex(sys.argv[1].replace(":", ""))
iid = bytes([mac[0] ^ 2]) + mac[1:3] + b"\xff\xfe" + mac[3:]
print(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + iid))' "$(cat /sys/class/net/gwl-wan/address)")
grep -q "ipv6cp up: local fe80::1 client $gw_link_local" "$ISP_LOG" ||
    pfail "the ISP logged no IPv6CP up with the client's $gw_link_local: $(grep ipv6cp "$ISP_LOG" | tail -n 3)"
grep -q "PPPoE session carries IPv6" "$WORK/gateway.log" || pfail "the gateway logged no IPv6 on the session"
pass "the session carries IPv4 and IPv6: IPv6CP gave the gateway $gw_link_local, the ISP fe80::1"

# 2. dhcpcd on the WAN twin, through the session: the RA's address and default route, and the
# delegated prefix's first /64 on the LAN twin (see test_ipv6_pd.sh for the mount namespace).
{
    echo nodelay
    echo "option rapid_commit"
    cat "$ROOT/deploy/dhcpcd/gateway-wan6.conf"
} >"$WORK/dhcpcd6.conf"
mkdir -p /run/dhcpcd /var/lib/dhcpcd
# dhcpcd runs its stock hooks here, as deployed (the shipped config skips resolv.conf's): a
# resolv.conf of the test's own stands over the host's, so that whatever a hook does, the
# machine's resolver stays as it was.
cp /etc/resolv.conf "$WORK/resolv.conf"
ip netns exec "$TWIN_NS" unshare --mount sh -c \
    'mount -t tmpfs tmpfs /run/dhcpcd && mount -t tmpfs tmpfs /var/lib/dhcpcd &&
     mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh "$WORK/resolv.conf" \
    dhcpcd -B -6 -f "$WORK/dhcpcd6.conf" wan >>"$WORK/dhcpcd.log" 2>&1 &
DHCPCD_PID=$!
global_address() {
    "$1" ip -6 -o addr show dev "$2" scope global | grep -v tentative |
        awk '{print $4}' | grep "^$3" | head -n 1 || true
}
wan_address= lan_address=
for _ in $(seq 1 75); do
    wan_address=$(global_address gw wan 2001:db8:a:)
    lan_address=$(global_address gw lan 2001:db8:ff)
    [[ -n $wan_address && -n $lan_address ]] && break
    kill -0 "$DHCPCD_PID" 2>/dev/null || break
    sleep 0.2
done
[[ -n $wan_address ]] || pfail "the WAN twin got no SLAAC address from the RA over the session"
[[ -n $lan_address ]] || pfail "the LAN twin got no address from the prefix delegated over the session"
grep -q "dhcpv6 .* -> reply prefix 2001:db8:ff" "$ISP_LOG" ||
    pfail "the ISP logged no DHCPv6 reply delegating a prefix"
gw ip -6 route show default | grep -q "via fe80::1 dev wan" ||
    pfail "no default route via the ISP's fe80::1 on the WAN twin: $(gw ip -6 route)"
pass "dhcpcd over the session: WAN $wan_address (SLAAC), LAN $lan_address (delegated), default via fe80::1"
wan_address=${wan_address%/*}
lan_address=${lan_address%/*}
delegated=${lan_address%::1}::
for _ in $(seq 1 20); do
    [[ $(ctl show routes 2>/dev/null) =~ ::/0\ +wan\ +fe80::1 ]] && break
    sleep 0.1
done
expect_output "gateway ctl show routes lists the default route through the session" \
    "^::/0 +wan +fe80::1" ctl show routes

# 3. The ISP reaches the gateway at its SLAAC address: into the session, answered by the
# dataplane, and back.
expect_output "the ISP's host pings the gateway's WAN address $wan_address through the session" \
    " 0% packet loss" wan ping -6 -c 3 -i 0.2 -W 2 -I 2001:db8:1::10 "$wan_address"

# 4. A LAN host forms an address in the delegated /64 from the gateway's advertisement and
# pings the ISP's host; the ISP sees its own address (no NAT for IPv6).
lan sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.eth0.disable_ipv6=0 \
    net.ipv6.conf.eth0.accept_ra=1 net.ipv6.conf.eth0.autoconf=1 net.ipv6.conf.eth0.accept_dad=1
host_address=
for _ in $(seq 1 50); do
    host_address=$(global_address lan eth0 "${delegated%::}")
    [[ -n $host_address ]] && break
    sleep 0.2
done
[[ -n $host_address ]] ||
    pfail "the LAN host formed no address in the delegated ${delegated}/64: $(lan ip -6 addr show dev eth0)"
host_address=${host_address%/*}
for _ in $(seq 1 20); do
    [[ -n $(lan ip -6 route show default) ]] && break
    sleep 0.2
done
expect_output "the LAN host ($host_address) pings the ISP's host 2001:db8:1::10 through the session" \
    " 0% packet loss" lan ping -6 -c 3 -i 0.2 -W 2 2001:db8:1::10
grep -q "relay icmp6 client->net $host_address > 2001:db8:1::10 echo-request" "$ISP_LOG" ||
    pfail "the ISP relayed no echo request from $host_address: $(grep 'relay icmp6' "$ISP_LOG" | tail -n 3)"
pass "the ISP received the LAN host's echo requests from $host_address, in the session"
invalid=$(m 'gateway_dropped_packets_total{reason="conntrack_invalid"')
[[ ${invalid:-0} -eq 0 ]] || pfail "$invalid packets dropped as conntrack_invalid"

# 5. IPv4 is still the session's too: the LAN host pings the ISP's end, masqueraded.
expect_output "IPv4 crosses the same session (the LAN host pings 100.64.0.1)" \
    " 0% packet loss" lan ping -c 2 -i 0.2 -W 2 100.64.0.1

# 6. The twin's own unicast leaves by the session: its kernel needs no Neighbor Discovery
# for fe80::1 (the link has none; the framing addresses the access concentrator). (The
# replies to the kernel's own IPv6 are not tracked back to a twin, on any uplink: only the
# requests are checked here.)
gw ping -6 -c 2 -i 0.2 -W 1 2001:db8:1::10 >/dev/null 2>&1 || true
grep -q "relay icmp6 client->net $wan_address > 2001:db8:1::10 echo-request" "$ISP_LOG" ||
    pfail "the WAN twin's echo requests to 2001:db8:1::10 never reached the ISP: $(gw ip -6 neigh)"
pass "the WAN twin's kernel sends unicast into the session without Neighbor Discovery"

# 7. The ISP ends the session (PADT): the twin goes down, so its addresses and the
# delegated prefix go; the new session brings it up and dhcpcd solicits on it at once.
kill -USR1 "$ISP_PID"
for _ in $(seq 1 50); do
    [[ -z $(global_address gw wan 2001:db8:a:) ]] && break
    sleep 0.1
done
[[ -z $(global_address gw wan 2001:db8:a:) ]] || pfail "the WAN twin kept its address after the session ended"
for _ in $(seq 1 100); do
    [[ $(m "gateway_pppoe_ipv6_up{$IF}") == 1 && -n $(global_address gw lan 2001:db8:ff) ]] && break
    sleep 0.2
done
[[ $(m "gateway_pppoe_ipv6_up{$IF}") == 1 ]] || pfail "no IPv6 on a new session within 20 s of the PADT"
[[ $(m "gateway_pppoe_sessions_total{$IF}") -ge 2 ]] || pfail "no second session counted"
[[ -n $(global_address gw lan 2001:db8:ff) ]] ||
    pfail "the LAN twin got no delegated address again on the new session"
for _ in $(seq 1 30); do
    lan ping -6 -c 1 -W 1 2001:db8:1::10 >/dev/null 2>&1 && break
    sleep 0.2
done
expect_output "after a PADT, the new session's IPv6 carries the LAN host to the ISP's host again" \
    " 0% packet loss" lan ping -6 -c 2 -i 0.2 -W 2 2001:db8:1::10
kill -TERM "$DHCPCD_PID" 2>/dev/null || true
